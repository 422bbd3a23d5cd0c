/*
 * rl_changes.c - which rows of a table changed after a commit, read from
 * its journal (rowlog_changes in rowlog.h).
 *
 * Each journal batch is one commit's changes to the index: an entry per
 * row whose newest record moved, or a tombstone per erased row. So the
 * rows changed after commit N are those named by the committed batches of
 * a commit above N. The journal can say so only if it still holds all of
 * them: a snapshot batch (the whole index, which forgets every batch
 * before it) of a commit above N cannot tell a row changed after N from
 * one that did not, and the caller must then take the table whole.
 *
 * The chain checksum at N (what the commit record named for the table at
 * N) is the `prev` of the first batch above N, or, if none is, the tail's:
 * a copy of the table as of N names it too, which is how a delta proves
 * it continues the copy's history.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "le.h"
#include "rl_layout.h"

struct chg_sink {
	struct rl_changes *c;
	uint64_t since;
	bool first, after; /* the first batch; a batch above since seen */
	size_t cap;
};

static int ch_begin(void *arg, const struct jr_batch *b)
{
	struct chg_sink *k = arg;

	if (k->first && (b->flags & JR_SNAPSHOT) && b->commit > k->since)
		k->c->complete = false;
	k->first = false;
	if (b->commit > k->since && !k->after) {
		k->after = true;
		k->c->from_sum = b->prev;
	}
	return 0;
}

static int ch_grow(struct chg_sink *k, size_t more)
{
	struct rl_changes *c = k->c;
	size_t need = c->n + more, cap = k->cap ? k->cap : 4096;
	uint64_t *r;
	uint8_t *t;

	if (need <= k->cap)
		return 0;
	while (cap < need)
		cap *= 2;
	r = realloc(c->rows, cap * sizeof(*r));
	if (!r)
		return -ENOMEM;
	c->rows = r;
	t = realloc(c->tomb, cap);
	if (!t)
		return -ENOMEM;
	c->tomb = t;
	k->cap = cap;
	return 0;
}

static int ch_entries(void *arg, const struct jr_batch *b,
		      const unsigned char *e, size_t n)
{
	struct chg_sink *k = arg;
	struct rl_changes *c = k->c;
	int ret;

	if (b->commit <= k->since || !c->complete)
		return 0;
	ret = ch_grow(k, n);
	if (ret)
		return ret;
	for (size_t i = 0; i < n; i++, e += JR_ENT) {
		c->rows[c->n] = get64(e);
		c->tomb[c->n++] = get32(e + 8) == RL_TOMB;
	}
	return 0;
}

static int ch_end(void *arg, const struct jr_batch *b)
{
	(void)arg;
	(void)b;
	return 0;
}

/* Sorts rows (and their tombstone marks) by row, keeping for a row named
 * more than once its last mark: whether its last change was an erase. */
static int ch_sort_cmp(const void *a, const void *b)
{
	const uint64_t *x = a, *y = b;

	if (x[0] != y[0])
		return x[0] < y[0] ? -1 : 1;
	return x[1] < y[1] ? -1 : x[1] > y[1];
}

static int ch_unique(struct rl_changes *c)
{
	uint64_t *p;
	size_t m = 0;

	if (!c->n)
		return 0;
	/* pairs (row, order << 1 | tomb): sorted, the last of a row wins */
	p = malloc(c->n * 2 * sizeof(*p));
	if (!p)
		return -ENOMEM;
	for (size_t i = 0; i < c->n; i++) {
		p[2 * i] = c->rows[i];
		p[2 * i + 1] = (uint64_t)i << 1 | c->tomb[i];
	}
	qsort(p, c->n, 2 * sizeof(*p), ch_sort_cmp);
	for (size_t i = 0; i < c->n; i++) {
		if (i + 1 < c->n && p[2 * i + 2] == p[2 * i])
			continue;
		c->rows[m] = p[2 * i];
		c->tomb[m++] = (uint8_t)(p[2 * i + 1] & 1);
	}
	free(p);
	c->n = m;
	return 0;
}

int rowlog_changes(const char *tf_path, const struct jr_expect *x,
		   uint64_t since, struct rl_changes *c)
{
	char p[4096], q[4096];
	struct chg_sink k = {.c = c, .since = since, .first = true};
	struct jr_sink sink = {
	    .begin = ch_begin, .entries = ch_entries, .end = ch_end, .arg = &k};
	struct jr_tail t;
	int fd = -1, ret;

	*c = (struct rl_changes){.complete = true};
	if ((size_t)snprintf(p, sizeof(p), "%s.idx", tf_path) >= sizeof(p) ||
	    (size_t)snprintf(q, sizeof(q), "%s.idx.new", tf_path) >= sizeof(q))
		return -ENAMETOOLONG;
	ret = jr_open(p, q, 0, x, true, &sink, &fd, &t);
	if (!ret && !k.after)
		c->from_sum = t.sum;
	c->to_sum = t.sum;
	if (!ret && c->complete)
		ret = ch_unique(c);
	if (ret || !c->complete)
		rowlog_changes_free(c);
	if (!ret)
		c->to_sum = t.sum;
	return ret;
}

void rowlog_changes_free(struct rl_changes *c)
{
	free(c->rows);
	free(c->tomb);
	c->rows = NULL;
	c->tomb = NULL;
	c->n = 0;
}
