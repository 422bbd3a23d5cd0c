/*
 * rl_changes.c - which rows of a table changed after a commit, read from
 * its journal, and their records read straight from the log
 * (rowlog_changes and rowlog_changes_read in rowlog.h).
 *
 * Each journal batch is one commit's changes to the index: an entry per
 * row whose newest record moved (its recno and the generation of the
 * record's segment), or a tombstone per erased row. So the rows changed
 * after commit N are those named by the committed batches of a commit
 * above N, and the last entry of a row among them is where its newest
 * record is as of the last commit: no index is needed to read them. The
 * journal can say so only if it still holds all of them: a snapshot batch
 * (the whole index, which forgets every batch before it) of a commit above
 * N cannot tell a row changed after N from one that did not, and the
 * caller must then take the table whole.
 *
 * The chain checksum at N (what the commit record named for the table at
 * N) is the `prev` of the first batch above N, or, if none is, the tail's:
 * a copy of the table as of N names it too, which is how a delta proves
 * it continues the copy's history.
 *
 * Records changed after N were appended after N, mostly at the end of the
 * log, so reading them in log order reads a few long runs: spans of up to
 * RC_SPAN, records closer than RC_GAP sharing one, O_DIRECT.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "embtier.h"
#include "error.h"
#include "le.h"
#include "rl_layout.h"

#define RC_SPAN	 (1u << 20)
#define RC_GAP	 (64u << 10)
#define RC_ALIGN 4096u

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
	k->c->ver = b->ver;
	k->c->rec_bytes = b->rec_bytes;
	k->c->seg_bytes = b->seg_bytes;
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
	void *p;

	if (need <= k->cap)
		return 0;
	while (cap < need)
		cap *= 2;
	if (!(p = realloc(c->rows, cap * sizeof(*c->rows))))
		return -ENOMEM;
	c->rows = p;
	if (!(p = realloc(c->recno, cap * sizeof(*c->recno))))
		return -ENOMEM;
	c->recno = p;
	if (!(p = realloc(c->gen, cap * sizeof(*c->gen))))
		return -ENOMEM;
	c->gen = p;
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
		c->recno[c->n] = get32(e + 8);
		c->gen[c->n++] = get32(e + 12);
	}
	return 0;
}

static int ch_end(void *arg, const struct jr_batch *b)
{
	(void)arg;
	(void)b;
	return 0;
}

static int pair_cmp(const void *a, const void *b)
{
	const uint64_t *x = a, *y = b;

	if (x[0] != y[0])
		return x[0] < y[0] ? -1 : 1;
	return x[1] < y[1] ? -1 : x[1] > y[1];
}

/* Keeps each row's last entry, rows ascending. */
static int ch_unique(struct rl_changes *c)
{
	uint64_t *p;
	uint32_t *rn, *gn;
	size_t m = 0;

	if (!c->n)
		return 0;
	/* pairs (row, order): sorted, the last of a row wins */
	p = malloc(c->n * 2 * sizeof(*p));
	rn = malloc(c->n * sizeof(*rn));
	gn = malloc(c->n * sizeof(*gn));
	if (!p || !rn || !gn) {
		free(p);
		free(rn);
		free(gn);
		return -ENOMEM;
	}
	for (size_t i = 0; i < c->n; i++) {
		p[2 * i] = c->rows[i];
		p[2 * i + 1] = i;
	}
	qsort(p, c->n, 2 * sizeof(*p), pair_cmp);
	for (size_t i = 0; i < c->n; i++) {
		size_t o = (size_t)p[2 * i + 1];

		if (i + 1 < c->n && p[2 * i + 2] == p[2 * i])
			continue;
		c->rows[m] = p[2 * i];
		rn[m] = c->recno[o];
		gn[m++] = c->gen[o];
	}
	free(p);
	free(c->recno);
	free(c->gen);
	c->recno = rn;
	c->gen = gn;
	c->n = m;
	return 0;
}

int rowlog_changes(const char *tf_path, const struct jr_expect *x,
		   uint64_t since, struct rl_changes *c)
{
	char p[4096], q[4096];
	struct chg_sink k = {.c = c, .since = since, .first = true};
	struct jr_sink sink = {.begin = ch_begin,
			       .entries = ch_entries,
			       .end = ch_end,
			       .arg = &k,
			       .skip = true,
			       .skip_upto = since};
	struct jr_tail t;
	int fd = -1, ret;

	*c = (struct rl_changes){.complete = true};
	if ((size_t)snprintf(p, sizeof(p), "%s.idx", tf_path) >= sizeof(p) ||
	    (size_t)snprintf(q, sizeof(q), "%s.idx.new", tf_path) >= sizeof(q))
		return -ENAMETOOLONG;
	ret = jr_open(p, q, 0, x, true, &sink, &fd, &t);
	if (!ret && !k.after)
		c->from_sum = t.sum;
	if (!ret && c->complete)
		ret = ch_unique(c);
	if (ret || !c->complete)
		rowlog_changes_free(c);
	c->to_sum = t.sum;
	return ret;
}

void rowlog_changes_free(struct rl_changes *c)
{
	free(c->rows);
	free(c->recno);
	free(c->gen);
	c->rows = NULL;
	c->recno = c->gen = NULL;
	c->n = 0;
}

/* ------------------------------------------------------------- reading */

static uint64_t ch_off(const struct rl_changes *c, uint32_t recno)
{
	uint32_t rps = c->seg_bytes / c->rec_bytes;

	return (uint64_t)(recno / rps) * c->seg_bytes +
	       (uint64_t)(recno % rps) * c->rec_bytes;
}

static int rec_bad(const char *log, uint64_t row, uint32_t recno,
		   const char *why)
{
	return err_set(ET_EBLOCKSUM, "%s: record %u of row %llu: %s", log,
		       recno, (unsigned long long)row, why);
}

/* Copies and checks the records of sel[a, b) (log order) out of the span
 * at off in buf. */
static int take(const struct rl_changes *c, const char *log, uint32_t row_bytes,
		const uint32_t *sel, size_t a, size_t b,
		const unsigned char *buf, uint64_t off, uint64_t *ids,
		unsigned char *dst, const size_t *slot)
{
	for (size_t i = a; i < b; i++) {
		size_t e = sel[i];
		const unsigned char *r = buf + (ch_off(c, c->recno[e]) - off);
		uint64_t row = c->rows[e], key = row;

		if (c->ver >= 2)
			key ^=
			    hash_mix((uint64_t)c->gen[e] << 32 | c->recno[e]);
		if (get64(r) != row)
			return rec_bad(log, row, c->recno[e],
				       "holds another row");
		if (get64(r + 8) !=
		    hash_bytes_key(r + RL_REC_HDR, row_bytes, key))
			return rec_bad(log, row, c->recno[e],
				       "fails its checksum");
		ids[slot[i]] = row;
		memcpy(dst + slot[i] * (size_t)row_bytes, r + RL_REC_HDR,
		       row_bytes);
	}
	return 0;
}

/* Reads [lo, hi) into buf in aligned pieces: the last may run into the
 * file's end, as long as hi is within it. */
static int read_span(int fd, unsigned char *buf, uint64_t lo, uint64_t hi)
{
	uint64_t end = (hi + RC_ALIGN - 1) / RC_ALIGN * RC_ALIGN, got = 0;

	while (lo + got < hi) {
		ssize_t r = pread(fd, buf + got, (size_t)(end - lo - got),
				  (off_t)(lo + got));

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -errno;
		if (r == 0)
			return ET_ETRUNC;
		got += (uint64_t)r;
	}
	return 0;
}

int rowlog_changes_read(const char *tf_path, const struct rl_changes *c,
			uint32_t row_bytes, const uint32_t *sel, size_t n,
			uint64_t *ids, void *dst)
{
	char log[4096];
	unsigned char *buf = NULL;
	size_t *slot = NULL, a = 0;
	int fd, ret = 0;

	if (!n)
		return 0;
	if (!c->rec_bytes || c->seg_bytes < c->rec_bytes ||
	    c->rec_bytes < RL_REC_HDR + row_bytes)
		return err_set(ET_EJOURNAL, "%s.idx: record geometry", tf_path);
	if ((size_t)snprintf(log, sizeof(log), "%s.log", tf_path) >=
	    sizeof(log))
		return -ENAMETOOLONG;
	fd = open(log, O_RDONLY | O_DIRECT | O_CLOEXEC);
	if (fd < 0 && errno == EINVAL) /* no O_DIRECT here */
		fd = open(log, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return err_set(-errno, "%s: %s", log, strerror(errno));
	slot = malloc(n * sizeof(*slot));
	if (!slot || posix_memalign((void **)&buf, RC_ALIGN,
				    RC_SPAN + 2 * RC_ALIGN + c->rec_bytes)) {
		ret = -ENOMEM;
		goto out;
	}
	/* sel comes in log order; slot keeps where each goes in dst */
	for (size_t i = 0; i < n; i++)
		slot[i] = i;
	while (!ret && a < n) {
		uint64_t lo = ch_off(c, c->recno[sel[a]]) / RC_ALIGN * RC_ALIGN;
		uint64_t hi = ch_off(c, c->recno[sel[a]]) + c->rec_bytes;
		size_t b = a + 1;

		while (b < n) {
			uint64_t o = ch_off(c, c->recno[sel[b]]);

			if (o < hi || o > hi + RC_GAP ||
			    o + c->rec_bytes - lo > RC_SPAN)
				break;
			hi = o + c->rec_bytes;
			b++;
		}
		ret = read_span(fd, buf, lo, hi);
		if (ret == ET_ETRUNC)
			ret = rec_bad(log, c->rows[sel[a]], c->recno[sel[a]],
				      "past the end of the log");
		if (!ret)
			ret = take(c, log, row_bytes, sel, a, b, buf, lo, ids,
				   dst, slot);
		a = b;
	}
out:
	free(slot);
	free(buf);
	close(fd);
	return ret;
}
