/*
 * tf_block.c - block I/O of a table file: reading and writing batches of
 * rows, through the blocks or the row log.
 *
 * Every block read is checked against its trailer: the XXH3 of everything
 * before the checksum, which covers the block number too, so a block written
 * to the wrong place fails as surely as a flipped bit. A block that reads as
 * all zeros is a hole as far as data is concerned (a filesystem may report
 * an allocated but never-written range as data); any other mismatch is
 * ET_EBLOCKSUM and the data is never used.
 *
 * A batch is sorted by block and goes through the stage, a few MiB of
 * aligned blocks, a chunk at a time: a chunk's blocks are read together,
 * checked, and copied out (or, for a write, changed, sealed and written
 * back). Writes are read-modify-write of whole blocks: all rows of a batch
 * that fall in one block are applied to one copy of it and written once. A
 * block whose write failed is kept as it was before (struct torn) until a
 * write of it succeeds. The rest of the store sees rows only as records of
 * row_bytes; nothing outside this module knows blocks, slots or offsets.
 *
 * Rows a store wrote are in the row log (rowlog.h): a read takes them from
 * there, the others from the blocks or, for blocks never written, from the
 * initializer; a store's writes are appended to the log.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "dtype.h"
#include "le.h"
#include "error.h"
#include "hash.h"
#include "io.h"
#include "mem_host.h"
#include "rowinit.h"
#include "rowlog.h"
#include "table_file_impl.h"

#define TF_STAGE_BYTES (4u << 20) /* batch staging per file, at most */

/* The staging area for batch I/O: as many blocks as the ring is deep. */
int tf_stage(et_tfile *tf)
{
	io_ctx *io;
	int ret;

	if (tf->stage)
		return 0;
	ret = tf_io(tf, &io);
	if (ret)
		return ret;
	/* Four times as many blocks as the ring is deep, within
	 * TF_STAGE_BYTES: the ring stays full while a chunk is read, and
	 * drains only at the chunk's end. */
	tf->stage_blocks = TF_STAGE_BYTES / tf->g.block_size;
	if (tf->stage_blocks > 4 * io_depth(io))
		tf->stage_blocks = 4 * io_depth(io);
	/* no chunk holds more distinct blocks than the file has */
	if (tf->g.blocks && tf->stage_blocks > tf->g.blocks)
		tf->stage_blocks = (uint32_t)tf->g.blocks;
	if (tf->stage_blocks == 0)
		tf->stage_blocks = 1;
	tf->stage = mem_alloc_io((size_t)tf->stage_blocks * tf->g.block_size,
				 tf->mem_align);
	tf->reqs = mem_alloc(tf->stage_blocks * sizeof(*tf->reqs), 0);
	tf->stage_hole = mem_alloc(tf->stage_blocks, 0);
	tf->stage_blk = mem_alloc(tf->stage_blocks * sizeof(uint64_t), 0);
	if (!tf->stage || !tf->reqs || !tf->stage_hole || !tf->stage_blk) {
		mem_free(tf->stage_hole, tf->stage_blocks, 0);
		mem_free(tf->stage_blk, tf->stage_blocks * sizeof(uint64_t), 0);
		tf->stage_hole = NULL;
		tf->stage_blk = NULL;
		mem_free_io(tf->stage,
			    (size_t)tf->stage_blocks * tf->g.block_size,
			    tf->mem_align);
		mem_free(tf->reqs, tf->stage_blocks * sizeof(*tf->reqs), 0);
		tf->stage = NULL;
		tf->reqs = NULL;
		return -ENOMEM;
	}
	return 0;
}

/* ---------------------------------------------------------------- blocks */

uint64_t tf_block_off(const et_tfile *tf, uint64_t b)
{
	return tf->g.data_off + b * tf->g.block_size;
}

/* Rows actually present in block b (the last block may be partial). */
uint32_t tf_block_rows(const et_tfile *tf, uint64_t b)
{
	uint64_t first = b * tf->g.rows_per_block;
	uint64_t left = tf->g.rows - first;

	return left < tf->g.rows_per_block ? (uint32_t)left
					   : tf->g.rows_per_block;
}

static bool all_zero(const unsigned char *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i])
			return false;
	return true;
}

/* Checks block b as read into buf: 0, 1 if it is an unwritten (all-zero)
 * block, or ET_EBLOCKSUM. */
int tf_block_check(const et_tfile *tf, uint64_t b, const unsigned char *buf)
{
	uint32_t bs = tf->g.block_size;

	if (get64(buf + bs - 16) == b &&
	    get64(buf + bs - 8) == hash_bytes(buf, bs - 8))
		return 0;
	return all_zero(buf, bs) ? 1 : ET_EBLOCKSUM;
}

void tf_block_seal(const et_tfile *tf, uint64_t b, unsigned char *buf)
{
	uint32_t bs = tf->g.block_size;

	put64(buf + bs - 16, b);
	put64(buf + bs - 8, hash_bytes(buf, bs - 8));
}

/* Fills buf with block b as it is before its first write: every present row
 * at its initial value, zero padding. */
static void block_fill_init(et_tfile *tf, uint64_t b, unsigned char *buf)
{
	uint32_t n = tf_block_rows(tf, b);

	memset(buf, 0, tf->g.block_size);
	for (uint32_t s = 0; s < n; s++)
		tf_init_row_raw(tf, b * tf->g.rows_per_block + s,
				buf + (size_t)s * tf->g.row_bytes);
}

void tf_init_row_raw(const et_tfile *tf, uint64_t row, void *dst)
{
	const struct tf_geom *g = &tf->g;
	size_t es = dtype_size(g->dtype);
	float v[256];

	/* In pieces of 256 columns: no allocation, any dim. */
	for (uint32_t c = 0; c < g->dim; c += 256) {
		uint32_t k = g->dim - c < 256 ? g->dim - c : 256;

		rowinit_fill_cols(g->init, g->init_scale, g->seed, row, c, k,
				  v);
		dtype_encode(g->dtype, v, (char *)dst + c * es, k);
	}
	memset((char *)dst + g->value_bytes, 0, g->state_floats * 4);
}

bool tf_row_materialized(const et_tfile *tf, uint64_t row)
{
	return tf_map_test(&tf->map, row / tf->g.rows_per_block) ||
	       rowlog_has(tf->log, row);
}

static struct torn *torn_find(const et_tfile *tf, uint64_t b)
{
	for (size_t i = 0; i < tf->ntorn; i++)
		if (tf->torn[i].block == b)
			return &tf->torn[i];
	return NULL;
}

static int torn_keep(et_tfile *tf, uint64_t b, const void *img)
{
	struct torn *t = torn_find(tf, b);

	if (!t) {
		if (tf->ntorn == tf->torn_cap) {
			size_t cap = tf->torn_cap ? 2 * tf->torn_cap : 4;
			struct torn *nt = mem_alloc(cap * sizeof(*nt), 0);

			if (!nt)
				return -ENOMEM;
			if (tf->ntorn)
				memcpy(nt, tf->torn, tf->ntorn * sizeof(*nt));
			mem_free(tf->torn, tf->torn_cap * sizeof(*nt), 0);
			tf->torn = nt;
			tf->torn_cap = cap;
		}
		t = &tf->torn[tf->ntorn];
		t->block = b;
		t->img = mem_alloc(tf->g.block_size, 0);
		if (!t->img)
			return -ENOMEM;
		tf->ntorn++;
	}
	memcpy(t->img, img, tf->g.block_size);
	return 0;
}

static void torn_drop(et_tfile *tf, uint64_t b)
{
	struct torn *t = torn_find(tf, b);

	if (!t)
		return;
	mem_free(t->img, tf->g.block_size, 0);
	*t = tf->torn[--tf->ntorn];
}

/* One row of a batch, tagged with where it came from. */
struct ent {
	uint64_t block;
	uint32_t slot;
	uint32_t idx; /* position in the caller's arrays */
};

static int ent_cmp(const void *a, const void *b)
{
	const struct ent *x = a, *y = b;

	if (x->block != y->block)
		return x->block < y->block ? -1 : 1;
	return x->idx < y->idx ? -1 : x->idx > y->idx;
}

int tf_check_rows(const et_tfile *tf, const uint64_t *rows, size_t n)
{
	for (size_t i = 0; i < n && !tf->g.keyed; i++)
		if (rows[i] >= tf->g.rows)
			return err_set(
			    ET_EROWRANGE,
			    "rows[%zu] %llu >= the table's %llu rows", i,
			    (unsigned long long)rows[i],
			    (unsigned long long)tf->g.rows);
	if (n > UINT32_MAX)
		return err_set(-E2BIG, "%zu rows: at most %u a call", n,
			       UINT32_MAX);
	return 0;
}

/*
 * One chunk of a batch of ents (sorted by block): from e[i], up to cap
 * distinct blocks are put in the stage's slots from base, the reads of
 * those that need one queued on io (consecutive blocks as one larger
 * read). A block not needing a read is filled with its initial contents; a
 * torn block with its kept image. Sets *j to the end of the chunk, *nb to
 * its blocks (tf->stage_blk + base), *nr to the reads queued (tf->reqs +
 * base).
 */
typedef bool (*need_fn)(et_tfile *, const struct ent *, size_t, uint64_t);

static void chunk_queue(et_tfile *tf, io_ctx *io, const struct ent *e, size_t i,
			size_t n, need_fn need_read, uint32_t base,
			uint32_t cap, size_t *jp, uint32_t *nbp, uint32_t *nrp)
{
	uint64_t *blocks = tf->stage_blk + base;
	uint8_t *hole = tf->stage_hole + base;
	struct io_req *reqs = tf->reqs + base;
	char *stage = tf->stage + (size_t)base * tf->g.block_size;
	uint32_t nb = 0, nr = 0;
	size_t j = i;

	while (j < n && nb < cap) {
		uint64_t b = e[j].block;
		size_t k = j;

		while (k < n && e[k].block == b)
			k++;
		unsigned char *buf =
		    (unsigned char *)stage + (size_t)nb * tf->g.block_size;
		struct torn *tn = tf->ntorn ? torn_find(tf, b) : NULL;

		if (tn) { /* the disk may hold half of it */
			memcpy(buf, tn->img, tf->g.block_size);
			hole[nb] = 0;
			blocks[nb++] = b;
			j = k;
			continue;
		}
		if (need_read(tf, e + j, k - j, b)) {
			struct io_req *r = nr ? &reqs[nr - 1] : NULL;

			/* Consecutive blocks: one larger read. */
			if (r && (char *)r->buf + r->len == (char *)buf &&
			    r->off + r->len == tf_block_off(tf, b)) {
				r->len += tf->g.block_size;
				hole[nb] = 0;
				blocks[nb++] = b;
				j = k;
				continue;
			}
			r = &reqs[nr++];
			memset(r, 0, sizeof(*r));
			r->op = IO_READ;
			r->fd = tf->fd;
			r->buf = buf;
			r->len = tf->g.block_size;
			r->off = tf_block_off(tf, b);
			r->arg = (void *)(uintptr_t)(base + nb);
		} else {
			block_fill_init(tf, b, buf);
		}
		hole[nb] = !tf_map_test(&tf->map, b);
		blocks[nb++] = b;
		j = k;
	}
	for (uint32_t q = 0; q < nr; q++)
		io_queue(io, &reqs[q]);
	*jp = j;
	*nbp = nb;
	*nrp = nr;
}

/* Read r of the stage (its blocks from the slot in r->arg) has completed
 * whole: each of its blocks is checked (an all-zero block reads as
 * unwritten). Returns 0 or the first block's error. */
static int req_check(et_tfile *tf, const struct io_req *r)
{
	uint32_t s0 = (uint32_t)(uintptr_t)r->arg;
	uint32_t cnt = r->len / tf->g.block_size;
	int ret;

	for (uint32_t s = s0; s < s0 + cnt; s++) {
		unsigned char *buf =
		    (unsigned char *)tf->stage + (size_t)s * tf->g.block_size;

		ret = tf_block_check(tf, tf->stage_blk[s], buf);
		if (ret < 0)
			return err_set(ret,
				       "%s: block %llu (byte %llu) fails "
				       "its checksum",
				       tf->path,
				       (unsigned long long)tf->stage_blk[s],
				       (unsigned long long)tf_block_off(
					   tf, tf->stage_blk[s]));
		if (ret == 1) {
			block_fill_init(tf, tf->stage_blk[s], buf);
			tf->stage_hole[s] = 1;
		}
	}
	tf->st.blocks_read += cnt;
	tf->st.bytes_read += (uint64_t)cnt * tf->g.block_size;
	return 0;
}

/* The nr reads of a chunk (tf->reqs + base) have completed: the first
 * failed one's error, else every block read is checked. Returns 0 or the
 * first error. */
static int chunk_check(et_tfile *tf, uint32_t base, uint32_t nr)
{
	const struct io_req *reqs = tf->reqs + base;
	int ret;

	for (uint32_t q = 0; q < nr; q++) {
		ret = io_req_result(&reqs[q]);
		if (ret)
			return ret;
	}
	for (uint32_t q = 0; q < nr; q++) {
		ret = req_check(tf, &reqs[q]);
		if (ret)
			return ret;
	}
	return 0;
}

/*
 * Reads the distinct blocks of ents[0..n) (sorted by block) chunk by chunk
 * into the stage and calls fn for each chunk with the stage filled. If
 * need_read says a block needs no read, fn finds it filled with its
 * initial contents. Returns the first error.
 */
typedef int (*chunk_fn)(et_tfile *tf, const struct ent *e, size_t n,
			const uint64_t *blocks, uint32_t nblocks, void *arg);

static int for_each_chunk(et_tfile *tf, const struct ent *e, size_t n,
			  need_fn need_read, chunk_fn fn, void *arg)
{
	size_t i = 0, j;
	io_ctx *io;
	int ret;

	ret = tf_stage(tf);
	if (!ret)
		ret = tf_io(tf, &io);
	if (ret)
		return ret;
	while (i < n) {
		uint32_t nb, nr;

		chunk_queue(tf, io, e, i, n, need_read, 0, tf->stage_blocks, &j,
			    &nb, &nr);
		if (nr) {
			ret = io_wait(io, nr);
			if (ret < 0)
				return ret;
			ret = chunk_check(tf, 0, nr);
			if (ret)
				return ret;
		}
		ret = fn(tf, e + i, j - i, tf->stage_blk, nb, arg);
		if (ret)
			return ret;
		i = j;
	}
	return 0;
}

/* Below this many ents a comparison sort is as quick as the radix one. */
#define ENTS_RADIX_MIN 64

/*
 * Sorts e[0..n), made in idx order, by block and then idx: a stable LSD
 * radix sort on the block, a byte a pass over the bytes in which the
 * blocks differ (three passes for a table of up to 16 M blocks), through
 * tmp (n ents). A batch of a few hundred misses took about a tenth of a
 * call's time in qsort's comparisons, all of it before the first read.
 */
static void ents_sort(struct ent *e, struct ent *tmp, size_t n)
{
	struct ent *a = e, *b = tmp;
	uint64_t lo = UINT64_MAX, hi = 0;
	size_t cnt[256];

	if (n < ENTS_RADIX_MIN) {
		qsort(e, n, sizeof(*e), ent_cmp);
		return;
	}
	for (size_t i = 0; i < n; i++) {
		lo = e[i].block < lo ? e[i].block : lo;
		hi = e[i].block > hi ? e[i].block : hi;
	}
	for (unsigned sh = 0; sh < 64 && ((hi - lo) >> sh); sh += 8) {
		size_t sum = 0;
		struct ent *t;

		memset(cnt, 0, sizeof(cnt));
		for (size_t i = 0; i < n; i++)
			cnt[((a[i].block - lo) >> sh) & 255]++;
		for (int d = 0; d < 256; d++) {
			size_t k = cnt[d];

			cnt[d] = sum;
			sum += k;
		}
		for (size_t i = 0; i < n; i++)
			b[cnt[((a[i].block - lo) >> sh) & 255]++] = a[i];
		t = a;
		a = b;
		b = t;
	}
	if (a != e)
		memcpy(e, a, n * sizeof(*e));
}

/* The ents of rows[0..n) sorted, in one allocation with the sort's
 * room after them (ents_free). */
static int make_ents(const et_tfile *tf, const uint64_t *rows, size_t n,
		     struct ent **out)
{
	struct ent *e = mem_alloc(2 * n * sizeof(*e), 0);

	if (!e)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		e[i].block = rows[i] / tf->g.rows_per_block;
		e[i].slot = (uint32_t)(rows[i] % tf->g.rows_per_block);
		e[i].idx = (uint32_t)i;
	}
	ents_sort(e, e + n, n);
	*out = e;
	return 0;
}

static void ents_free(struct ent *e, size_t n)
{
	mem_free(e, 2 * n * sizeof(*e), 0);
}

/* ------------------------------------------------------------ read rows */

static bool read_needed(et_tfile *tf, const struct ent *e, size_t n, uint64_t b)
{
	return tf_map_test(&tf->map, b);
}

/* Copies the rows of e[0..n) out of the nb blocks staged from slot base
 * (the chunk of e that was read there) to their places: to[idx] where
 * the caller gave one (taken), else in dst. */
static void read_copy(et_tfile *tf, const struct ent *e, size_t n,
		      uint32_t base, void *dst, void **to)
{
	const uint64_t *blocks = tf->stage_blk + base;
	const char *stage = tf->stage + (size_t)base * tf->g.block_size;
	uint32_t s = 0;

	for (size_t i = 0; i < n; i++) {
		const char *src;
		char *d;

		while (blocks[s] != e[i].block)
			s++;
		src = stage + (size_t)s * tf->g.block_size +
		      (size_t)e[i].slot * tf->g.row_bytes;
		d = (char *)dst + (size_t)e[i].idx * tf->g.row_bytes;
		if (to && to[e[i].idx]) {
			d = to[e[i].idx];
			to[e[i].idx] = NULL;
		}
		memcpy(d, src, tf->g.row_bytes);
	}
}

/* Index lookups asked for this many rows ahead. */
#define RD_AHEAD 16

/* rd_start for a keyed table: each row is in its log or is initial. */
static int rd_start_keyed(struct tf_read *rd)
{
	et_tfile *tf = rd->tf;
	uint32_t rb = tf->g.row_bytes;
	int ret;

	for (size_t i = 0; rd->lidx && i < rd->n && i < RD_AHEAD; i++) {
		rowlog_prefetch(tf->log, rd->rows[i]);
		if (i >= RD_AHEAD / 2)
			rowlog_prefetch_probe(tf->log,
					      rd->rows[i - RD_AHEAD / 2]);
	}
	for (size_t i = 0; i < rd->n; i++) {
		if (rd->lidx && i + RD_AHEAD < rd->n)
			rowlog_prefetch(tf->log, rd->rows[i + RD_AHEAD]);
		if (rd->lidx && i + RD_AHEAD / 2 < rd->n)
			rowlog_prefetch_probe(tf->log,
					      rd->rows[i + RD_AHEAD / 2]);
		if (rd->lidx && rowlog_has(tf->log, rd->rows[i])) {
			rd->lidx[rd->nl++] = (uint32_t)i;
			if (rd->init)
				rd->init[i] = 0;
			continue;
		}
		if (rd->init)
			rd->init[i] = 1;
		else
			tf_init_row_raw(tf, rd->rows[i],
					(char *)rd->dst + i * rb);
		tf->st.rows_lazy++;
	}
	ret = tf_io(tf, &rd->io);
	if (!ret && rd->nl)
		ret = rowlog_read_start(tf->log, rd->io, &rd->lr, rd->rows,
					rd->lidx, rd->nl, rd->dst);
	return ret;
}

/* The first step of a read: rows of unwritten blocks are filled from the
 * initializer, the others split between the blocks (rd->e[0..m)) and the
 * row log (rd->lidx[0..nl)), and the staging of both made ready. */
static int rd_start(struct tf_read *rd)
{
	et_tfile *tf = rd->tf;
	const uint64_t *rows = rd->rows;
	size_t n = rd->n;
	int ret;

	ret = tf_check_rows(tf, rows, n);
	if (ret || n == 0)
		return ret;
	if (rowlog_count(tf->log)) {
		rd->lidx = mem_alloc(n * sizeof(*rd->lidx), 0);
		if (!rd->lidx)
			return -ENOMEM;
	}
	if (tf->g.keyed) /* no blocks: the log, or the initializer */
		return rd_start_keyed(rd);
	ret = make_ents(tf, rows, n, &rd->e);
	if (ret)
		return ret;
	if (rd->init)
		memset(rd->init, 0, n);
	/* Rows in the log are read from it; rows of unwritten blocks need no
	 * stage at all. */
	for (size_t i = 0; i < n; i++) {
		const struct ent *e = &rd->e[i];

		if (rd->lidx && rowlog_has(tf->log, rows[e->idx])) {
			rd->lidx[rd->nl++] = e->idx;
			continue;
		}
		if (tf_map_test(&tf->map, e->block) ||
		    (tf->ntorn && torn_find(tf, e->block))) {
			rd->e[rd->m++] = *e;
			continue;
		}
		if (rd->init)
			rd->init[e->idx] = 1;
		else
			tf_init_row_raw(tf, rows[e->idx],
					(char *)rd->dst +
					    (size_t)e->idx * tf->g.row_bytes);
		tf->st.rows_lazy++;
	}
	ret = tf_io(tf, &rd->io);
	if (!ret && rd->m)
		ret = tf_stage(tf);
	if (!ret && rd->nl)
		ret = rowlog_read_start(tf->log, rd->io, &rd->lr, rows,
					rd->lidx, rd->nl, rd->dst);
	return ret;
}

/*
 * A read streams its blocks through the segments of the stage, in turn:
 * while the reads of the later ones are in flight, the oldest is checked
 * and copied out, and the next chunk queued into it at once, so that the
 * ring stays full to the end of the call instead of draining at every
 * chunk, and the last blocks of a call wait only for the oldest segment,
 * not half the stage. Its records in the row log go a batch at a time
 * through the log's own staging, beside the blocks.
 */

/* How many segments the stage has, and the slots of each. */
static unsigned rd_segs(const et_tfile *tf)
{
	return tf->stage_blocks < TF_READ_SEGS ? tf->stage_blocks
					       : TF_READ_SEGS;
}

static uint32_t rd_seg_cap(const et_tfile *tf)
{
	return tf->stage_blocks / rd_segs(tf);
}

/* Queues the next chunk of blocks into segment k, which is free. */
static void rd_queue_seg(struct tf_read *rd, unsigned k)
{
	struct tf_seg *h = &rd->h[k];
	uint32_t cap = rd_seg_cap(rd->tf);

	h->i = rd->next;
	chunk_queue(rd->tf, rd->io, rd->e, rd->next, rd->m, read_needed,
		    k * cap, cap, &h->j, &h->nb, &h->nr);
	h->busy = true;
	rd->next = h->j;
}

/* Queues what fits of what is left: blocks into the free segments (in
 * turn, so that they are freed in the order they were queued), and the
 * next batch of log records if none is in flight. */
static void rd_queue(struct tf_read *rd)
{
	unsigned segs = rd_segs(rd->tf);

	while (!rd->result && rd->next < rd->m && !rd->h[rd->qn].busy) {
		rd_queue_seg(rd, rd->qn);
		rd->qn = (rd->qn + 1) % segs;
	}
	if (!rd->result && !rd->lq && rd->nl && rd->lr.b < rd->lr.n) {
		int r = rowlog_read_queue(rd->tf->log, rd->io, &rd->lr);

		if (r < 0)
			rd->result = r;
		else
			rd->lq = true;
	}
}

/* Segments are queued and waited for in turn: if the oldest is not
 * busy, none is. */
static bool rd_busy(const struct tf_read *rd)
{
	return rd->h[rd->old].busy || rd->lq;
}

/*
 * Waits for the nr reads of a segment (tf->reqs + base) in the order they
 * were queued, checking each one's blocks as soon as it has completed,
 * while the later ones are still in flight: only the last read's blocks
 * are left to check when the last completes. Every read is waited for
 * whatever fails; the error is the first failed read's (or the ring's),
 * else the first bad block's, as chunk_check gives them.
 */
static int seg_wait_check(struct tf_read *rd, uint32_t base, uint32_t nr)
{
	const struct io_req *reqs = rd->tf->reqs + base;
	int ioerr = 0, sumerr = 0;

	for (uint32_t q = 0; q < nr; q++) {
		int ret = io_wait_reqs(rd->io, &reqs[q], 1);

		if (!ret)
			ret = io_req_result(&reqs[q]);
		if (ret) {
			if (!ioerr)
				ioerr = ret;
			continue;
		}
		if (!ioerr && !sumerr && !rd->result)
			sumerr = req_check(rd->tf, &reqs[q]);
	}
	return ioerr ? ioerr : sumerr;
}

/* Waits for the segment queued first (or the log's batch, when no
 * segment is busy), checks it and copies its rows out, then queues what
 * fits. A failed read is waited for like any other (the kernel may still
 * be writing into the stage), and fails the read. */
static void rd_step(struct tf_read *rd)
{
	et_tfile *tf = rd->tf;
	unsigned k = rd->old;
	int ret;

	if (rd->h[k].busy) {
		struct tf_seg *h = &rd->h[k];
		uint32_t base = k * rd_seg_cap(tf);

		ret = seg_wait_check(rd, base, h->nr);
		if (!ret && !rd->result)
			read_copy(tf, rd->e + h->i, h->j - h->i, base, rd->dst,
				  rd->to);
		if (ret && !rd->result)
			rd->result = ret;
		h->busy = false;
		rd->old = (k + 1) % rd_segs(tf);
	} else if (rd->lq) {
		ret = rowlog_read_wait(tf->log, rd->io, &rd->lr);
		if (!ret && !rd->result)
			ret = rowlog_read_check(tf->log, &rd->lr);
		if (ret && !rd->result)
			rd->result = ret;
		rd->lq = false;
	}
	rd_queue(rd);
}

static void rd_end(struct tf_read *rd)
{
	mem_free(rd->lidx, rd->n * sizeof(*rd->lidx), 0);
	ents_free(rd->e, rd->n);
	rd->lidx = NULL;
	rd->e = NULL;
}

void tf_read_begin(struct tf_read *rd, size_t nrd)
{
	for (size_t k = 0; k < nrd; k++) {
		struct tf_read *r = &rd[k];

		r->e = NULL;
		r->lidx = NULL;
		r->m = r->next = r->nl = 0;
		memset(r->h, 0, sizeof(r->h));
		r->old = r->qn = 0;
		r->lq = false;
		r->io = NULL;
		r->result = rd_start(r);
	}
	/* every read's first chunks queued, and sent: the ring holds the
	 * others' reads while one is checked */
	for (size_t k = 0; k < nrd; k++)
		if (!rd[k].result)
			rd_queue(&rd[k]);
	tf_read_poll(rd, nrd);
}

void tf_read_poll(struct tf_read *rd, size_t nrd)
{
	io_ctx *last = NULL;

	for (size_t k = 0; k < nrd; k++)
		if (rd[k].io && rd[k].io != last && rd_busy(&rd[k])) {
			last = rd[k].io;
			io_poll(last);
		}
}

int tf_read_end(struct tf_read *rd, size_t nrd)
{
	bool busy = true;
	int ret = 0;

	while (busy) {
		busy = false;
		for (size_t k = 0; k < nrd; k++)
			if (rd_busy(&rd[k])) {
				rd_step(&rd[k]);
				busy = true;
			}
	}
	for (size_t k = 0; k < nrd; k++) {
		rd_end(&rd[k]);
		if (rd[k].result && !ret)
			ret = rd[k].result;
	}
	return ret;
}

bool tf_read_settled(const struct tf_read *rd, size_t nrd)
{
	for (size_t k = 0; k < nrd; k++)
		if (rd[k].result || rd[k].m || rd[k].nl)
			return false;
	return true;
}

int tf_read_multi(struct tf_read *rd, size_t nrd)
{
	tf_read_begin(rd, nrd);
	return tf_read_end(rd, nrd);
}

int tf_read_rows_raw(et_tfile *tf, const uint64_t *rows, size_t n, void *dst)
{
	struct tf_read rd = {.tf = tf, .rows = rows, .n = n, .dst = dst};

	return tf_read_multi(&rd, 1);
}

/* ----------------------------------------------------------- write rows */

/* A block needs reading before its write unless it is unwritten or every
 * row in it is being replaced. */
static bool write_needs_read(et_tfile *tf, const struct ent *e, size_t n,
			     uint64_t b)
{
	uint32_t present = tf_block_rows(tf, b), distinct = 0;
	uint64_t seen[8] = {0};

	if (!tf_map_test(&tf->map, b))
		return false;
	if (n < present)
		return true;
	if (present > 512)
		return true; /* not worth counting */
	for (size_t i = 0; i < n; i++) {
		uint32_t s = e[i].slot;

		if (!(seen[s / 64] >> (s % 64) & 1)) {
			seen[s / 64] |= 1ULL << (s % 64);
			distinct++;
		}
	}
	return distinct < present;
}

static int write_apply(et_tfile *tf, const struct ent *e, size_t n,
		       const uint64_t *blocks, uint32_t nb, void *arg)
{
	const unsigned char *src = arg;
	uint32_t s = 0;
	int ret;

	if (!tf->pre) {
		tf->pre =
		    mem_alloc((size_t)tf->stage_blocks * tf->g.block_size, 0);
		if (!tf->pre)
			return -ENOMEM;
	}
	memcpy(tf->pre, tf->stage, (size_t)nb * tf->g.block_size);
	for (size_t i = 0; i < n; i++) {
		while (blocks[s] != e[i].block)
			s++;
		memcpy(tf->stage + (size_t)s * tf->g.block_size +
			   (size_t)e[i].slot * tf->g.row_bytes,
		       src + (size_t)e[i].idx * tf->g.row_bytes,
		       tf->g.row_bytes);
	}
	for (s = 0; s < nb; s++) {
		struct io_req *r = &tf->reqs[s];
		unsigned char *buf =
		    (unsigned char *)tf->stage + (size_t)s * tf->g.block_size;

		tf_block_seal(tf, blocks[s], buf);
		memset(r, 0, sizeof(*r));
		r->op = IO_WRITE;
		r->fd = tf->fd;
		r->buf = buf;
		r->len = tf->g.block_size;
		r->off = tf_block_off(tf, blocks[s]);
	}
	ret = io_run(tf->io, tf->reqs, nb); /* set by for_each_chunk */
	/* Blocks that made it to disk are written whatever else failed;
	 * the others keep their image for the retry. */
	for (s = 0; s < nb; s++) {
		int r2;

		if (io_req_result(&tf->reqs[s]) == 0) {
			r2 = tf_map_set(&tf->map, blocks[s]);
			if (tf->ntorn)
				torn_drop(tf, blocks[s]);
			tf->st.blocks_written++;
			tf->st.bytes_written += tf->g.block_size;
		} else {
			r2 = torn_keep(tf, blocks[s],
				       tf->pre + (size_t)s * tf->g.block_size);
		}
		if (r2 && !ret)
			ret = r2;
	}
	return ret;
}

static void count_rmw(et_tfile *tf, const struct ent *e, size_t n)
{
	for (size_t i = 0; i < n;) {
		size_t k = i;

		while (k < n && e[k].block == e[i].block)
			k++;
		if (write_needs_read(tf, e + i, k - i, e[i].block))
			tf->st.rmw_reads++;
		i = k;
	}
}

int tf_write_rows_ptrs(et_tfile *tf, const uint64_t *rows,
		       const void *const *ptrs, size_t n)
{
	io_ctx *io;
	int ret;

	if (tf->rdonly)
		return -EBADF;
	if (!tf->log_writes)
		return -EINVAL;
	ret = tf_check_rows(tf, rows, n);
	if (!ret && n)
		ret = tf_io(tf, &io);
	if (!ret && n)
		ret = rowlog_append_ptrs(tf->log, io, rows, ptrs, n);
	return ret;
}

int tf_write_rows_raw(et_tfile *tf, const uint64_t *rows, size_t n,
		      const void *src)
{
	struct ent *e;
	int ret;

	if (tf->rdonly)
		return -EBADF;
	ret = tf_check_rows(tf, rows, n);
	if (ret || n == 0)
		return ret;
	if (tf->log_writes) {
		io_ctx *io;

		ret = tf_io(tf, &io);
		if (!ret)
			ret = rowlog_append(tf->log, io, rows, n, src);
		return ret;
	}
	if (rowlog_count(tf->log) || tf->g.keyed)
		return -EBUSY; /* the log would shadow the write */
	ret = make_ents(tf, rows, n, &e);
	if (ret)
		return ret;
	count_rmw(tf, e, n);
	ret = for_each_chunk(tf, e, n, write_needs_read, write_apply,
			     (void *)src);
	ents_free(e, n);
	return ret;
}
