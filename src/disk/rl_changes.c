/*
 * rl_changes.c - which rows of a table changed after a commit, read from
 * its journal, and their records read straight from the log
 * (rowlog_changes, rowlog_entries, rowlog_creader_* in rowlog.h).
 *
 * Each journal batch is one commit's changes to the index: an entry per
 * row whose newest record moved (its recno and the generation of the
 * record's segment), or a tombstone per erased row. So the rows changed
 * after commit N are those named by the committed batches of a commit
 * above N, and the last entry of a row among them is where its newest
 * record is at the last commit: no index is needed to read them. The
 * journal can say so only if it still holds all of them: a snapshot batch
 * (the whole index, which forgets every batch before it) of a commit above
 * N cannot tell a row changed after N from one that did not, and the
 * caller must then take the table whole (rowlog_entries: every entry of an
 * open log's index).
 *
 * The chain checksum at N (what the commit record named for the table at
 * N) is the `prev` of the first batch above N, or, if none is, the tail's:
 * a copy of the table as of N names it too, which is how a delta proves
 * it continues the copy's history.
 *
 * When more than one batch is taken, a row's last entry is kept by a hash
 * of rows (the index's own, rl_index) to its entry, overwritten in place
 * (one batch names a row once); then the entries go in log order by a
 * radix sort of their recnos. Records changed after N were appended
 * after N, mostly at the end of the log, so reading them in log order
 * reads a few long runs: spans of up to RC_SPAN, records closer than
 * RC_GAP sharing one, O_DIRECT, RC_DEPTH of them in flight while the
 * ones in hand are checked and copied.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "embtier.h"
#include "error.h"
#include "io.h"
#include "le.h"
#include "rl_layout.h"

#define RC_SPAN	 (1u << 20)
#define RC_GAP	 (64u << 10)
#define RC_ALIGN 4096u
#define RC_DEPTH 4 /* span reads in flight */

struct chg_sink {
	struct rl_changes *c;
	uint64_t since;
	uint64_t nafter;   /* batches above since */
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
	k->nafter += b->commit > k->since;
	return 0;
}

static int ch_grow(struct chg_sink *k, size_t more)
{
	struct rl_changes *c = k->c;
	size_t need = c->n + more, cap = k->cap ? k->cap : 4096;
	struct rl_chg *e;

	if (need <= k->cap)
		return 0;
	while (cap < need)
		cap *= 2;
	e = realloc(c->e, cap * sizeof(*e));
	if (!e)
		return -ENOMEM;
	c->e = e;
	k->cap = cap;
	return 0;
}

static int ch_entries(void *arg, const struct jr_batch *b,
		      const unsigned char *p, size_t n)
{
	struct chg_sink *k = arg;
	struct rl_changes *c = k->c;
	int ret;

	if (b->commit <= k->since || !c->complete)
		return 0;
	ret = ch_grow(k, n);
	for (size_t i = 0; !ret && i < n; i++, p += jr_ent_bytes(b))
		c->e[c->n++] =
		    (struct rl_chg){get64(p), get32(p + 8), get32(p + 12)};
	return ret;
}

/* Keeps each row's last entry (a later commit's change of a row wins),
 * in place: a hash of rows to their entry. Only needed when more than one
 * batch was taken: a batch names each row once. */
static int ch_unique(struct rl_changes *c)
{
	struct rl_index seen = {0};
	size_t m = 0;
	int ret = rli_reserve(&seen, c->n);

	for (size_t i = 0; !ret && i < c->n; i++) {
		uint64_t slot;
		bool isnew;

		ret = rli_slot(&seen, c->e[i].row, &slot, &isnew);
		if (ret)
			break;
		if (isnew) {
			seen.vals[slot] = (uint32_t)m;
			c->e[m++] = c->e[i];
		} else {
			c->e[seen.vals[slot]] = c->e[i];
		}
	}
	rli_free(&seen);
	if (!ret)
		c->n = m;
	return ret;
}

static int ch_end(void *arg, const struct jr_batch *b)
{
	(void)arg;
	(void)b;
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
	if (!ret && c->complete && k.nafter > 1)
		ret = ch_unique(c);
	if (!ret && !k.after)
		c->from_sum = t.sum;
	if (ret || !c->complete)
		rowlog_changes_free(c);
	c->to_sum = t.sum;
	return ret;
}

int rowlog_entries(const struct rowlog *l, struct rl_changes *c)
{
	size_t n = 0;

	*c = (struct rl_changes){.complete = true,
				 .ver = l->ver,
				 .rec_bytes = l->rec_bytes,
				 .seg_bytes = l->seg_bytes};
	c->e = malloc((l->ix.count + 1) * sizeof(*c->e));
	if (!c->e)
		return -ENOMEM;
	for (uint64_t i = 0; i < rli_end(&l->ix); i++) {
		uint32_t recno;

		if (!rli_used(&l->ix, i))
			continue;
		recno = l->ix.vals[i] & ~RL_DIRTY;
		c->e[n++] =
		    (struct rl_chg){rli_row(&l->ix, i), recno,
				    l->ver >= 2 ? l->gen[recno / l->rps] : 0};
	}
	c->n = n;
	return 0;
}

void rowlog_changes_free(struct rl_changes *c)
{
	free(c->e);
	c->e = NULL;
	c->n = 0;
}

int rowlog_changes_order(struct rl_chg *e, size_t n, size_t *live)
{
	struct rl_chg *tmp = malloc((n + 1) * sizeof(*tmp)), *a = e, *b = tmp;
	size_t cnt[256];

	if (!tmp)
		return -ENOMEM;
	for (unsigned sh = 0; sh < 32; sh += 8) { /* LSD radix on recno */
		size_t sum = 0;

		memset(cnt, 0, sizeof(cnt));
		for (size_t i = 0; i < n; i++)
			cnt[(a[i].recno >> sh) & 255]++;
		for (int d = 0; d < 256; d++) {
			size_t k = cnt[d];

			cnt[d] = sum;
			sum += k;
		}
		for (size_t i = 0; i < n; i++)
			b[cnt[(a[i].recno >> sh) & 255]++] = a[i];
		a = b;
		b = a == tmp ? e : tmp;
	}
	free(tmp); /* an even number of passes: the result is in e */
	/* the erased last: their recno is the largest */
	while (n && e[n - 1].recno == RL_CHG_ERASED)
		n--;
	*live = n;
	return 0;
}

/* ------------------------------------------------------------- reading */

static uint64_t ch_off(const struct rl_changes *c, uint32_t rps, uint32_t recno)
{
	return (uint64_t)(recno / rps) * c->seg_bytes +
	       (uint64_t)(recno % rps) * c->rec_bytes;
}

static int rec_bad(const char *log, uint64_t row, uint32_t recno,
		   const char *why)
{
	return err_set(ET_EBLOCKSUM, "%s: record %u of row %llu: %s", log,
		       recno, (unsigned long long)row, why);
}

/* A reader of a log's records in log order (rowlog_creader_*). */
struct rl_creader {
	const struct rl_changes *c;
	char log[4096];
	int fd;
	io_ctx *io;
	uint32_t row_bytes, rps, align;
	unsigned char *buf[RC_DEPTH];
	struct io_req req[RC_DEPTH];
	uint64_t lo[RC_DEPTH], hi[RC_DEPTH];
	size_t a[RC_DEPTH], b[RC_DEPTH];
	bool done[RC_DEPTH];
};

static void span_done(struct io_req *q)
{
	*(bool *)q->arg = true;
}

int rowlog_creader_open(const char *tf_path, const struct rl_changes *c,
			uint32_t row_bytes, struct rl_creader **out)
{
	struct rl_creader *r = calloc(1, sizeof(*r));
	uint32_t ma = 0, oa = 0;
	int ret;

	*out = NULL;
	if (!r)
		return -ENOMEM;
	r->fd = -1;
	r->c = c;
	r->row_bytes = row_bytes;
	if (!c->rec_bytes || c->seg_bytes < c->rec_bytes ||
	    c->rec_bytes < RL_REC_HDR + row_bytes) {
		free(r);
		return err_set(ET_EJOURNAL, "%s.idx: record geometry", tf_path);
	}
	r->rps = c->seg_bytes / c->rec_bytes;
	if ((size_t)snprintf(r->log, sizeof(r->log), "%s.log", tf_path) >=
	    sizeof(r->log)) {
		free(r);
		return -ENAMETOOLONG;
	}
	ret = io_open_file(r->log, O_RDONLY, 0, &r->fd);
	if (!ret)
		ret = io_file_align(r->fd, &ma, &oa);
	if (!ret)
		ret = io_open(2 * RC_DEPTH, &r->io, NULL);
	r->align = oa > ma ? oa : ma;
	if (!ret && r->align < RC_ALIGN)
		r->align = RC_ALIGN;
	for (int i = 0; !ret && i < RC_DEPTH; i++)
		if (posix_memalign((void **)&r->buf[i], r->align,
				   RC_SPAN + 2 * (size_t)r->align +
				       c->rec_bytes))
			ret = -ENOMEM;
	if (ret) {
		if (ret != -ENOMEM && ret != ET_EURING)
			err_set(ret, "%s: %s", r->log, et_strerror(ret));
		rowlog_creader_close(r);
		return ret;
	}
	*out = r;
	return 0;
}

void rowlog_creader_close(struct rl_creader *r)
{
	if (!r)
		return;
	if (r->io) {
		while (io_pending(r->io) &&
		       io_wait(r->io, io_pending(r->io)) >= 0)
			;
		io_close(r->io);
	}
	if (r->fd >= 0)
		close(r->fd);
	for (int i = 0; i < RC_DEPTH; i++)
		free(r->buf[i]);
	free(r);
}

/* Copies and checks the records of e[a, b) out of the span at off in buf:
 * each id at dst + i x stride, and the first copy bytes of its row after
 * it. */
static int take(const struct rl_creader *r, const struct rl_chg *e, size_t a,
		size_t b, const unsigned char *buf, uint64_t off,
		unsigned char *dst, size_t stride, uint32_t copy)
{
	const struct rl_changes *c = r->c;

	for (size_t i = a; i < b; i++) {
		const unsigned char *p =
		    buf + (ch_off(c, r->rps, e[i].recno) - off);
		uint64_t row = e[i].row, key = row;

		if (c->ver >= 2)
			key ^= hash_mix((uint64_t)e[i].gen << 32 | e[i].recno);
		if (get64(p) != row)
			return rec_bad(r->log, row, e[i].recno,
				       "holds another row");
		if (get64(p + 8) !=
		    hash_bytes_key(p + RL_REC_HDR, r->row_bytes, key))
			return rec_bad(r->log, row, e[i].recno,
				       "fails its checksum");
		put64(dst + i * stride, row);
		memcpy(dst + i * stride + 8, p + RL_REC_HDR, copy);
	}
	return 0;
}

/* Plans the span from entry a on into slot k and queues its read: records
 * in log order closer than RC_GAP share it, up to RC_SPAN. */
static void span_queue(struct rl_creader *r, const struct rl_chg *e, size_t a,
		       size_t n, int k)
{
	const struct rl_changes *c = r->c;
	uint64_t lo = ch_off(c, r->rps, e[a].recno) / r->align * r->align;
	uint64_t hi = ch_off(c, r->rps, e[a].recno) + c->rec_bytes;
	size_t b = a + 1;

	while (b < n) {
		uint64_t o = ch_off(c, r->rps, e[b].recno);

		if (o < hi || o > hi + RC_GAP ||
		    o + c->rec_bytes - lo > RC_SPAN)
			break;
		hi = o + c->rec_bytes;
		b++;
	}
	r->lo[k] = lo;
	r->hi[k] = hi;
	r->a[k] = a;
	r->b[k] = b;
	r->done[k] = false;
	r->req[k] = (struct io_req){
	    .op = IO_READ,
	    .fd = r->fd,
	    .buf = r->buf[k],
	    .len = (uint32_t)((hi - lo + r->align - 1) / r->align * r->align),
	    .off = lo,
	    .done = span_done,
	    .arg = &r->done[k]};
	io_queue(r->io, &r->req[k]);
}

int rowlog_creader_read(struct rl_creader *r, const struct rl_chg *e, size_t n,
			void *dst, size_t stride, uint32_t copy)
{
	size_t next = 0;
	int head = 0, tail = 0, inflight = 0, ret = 0;

	while (!ret && (next < n || inflight)) {
		while (next < n && inflight < RC_DEPTH) {
			span_queue(r, e, next, n, tail);
			next = r->b[tail];
			tail = (tail + 1) % RC_DEPTH;
			inflight++;
		}
		while (!r->done[head] && (ret = io_wait(r->io, 1)) >= 0)
			;
		if (ret < 0)
			break;
		ret = r->req[head].res < 0 ? r->req[head].res : 0;
		if (!ret &&
		    (uint64_t)r->req[head].res < r->hi[head] - r->lo[head])
			ret = rec_bad(r->log, e[r->a[head]].row,
				      e[r->a[head]].recno,
				      "past the end of the log");
		if (!ret)
			ret = take(r, e, r->a[head], r->b[head], r->buf[head],
				   r->lo[head], dst, stride, copy);
		head = (head + 1) % RC_DEPTH;
		inflight--;
	}
	while (io_pending(r->io) && io_wait(r->io, io_pending(r->io)) >= 0)
		;
	if (ret < 0 && ret != ET_EBLOCKSUM)
		err_set(ret, "%s: %s", r->log, et_strerror(ret));
	return ret;
}
