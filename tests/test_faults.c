/*
 * test_faults.c - I/O faults at every site the store reaches through the
 * fault seam (io.h: io_fault_set), issue #7 item 3.
 *
 * Each test runs one sequence of operations on two stores side by side:
 * the tested store, with a one-set, 8-way DDR (any 8 distinct rows fill it,
 * so which operation writes back what is known exactly) or a small
 * prefetching one, and a reference store whose DDR holds everything and
 * never sees a fault. One fault is armed just before one operation of the
 * tested store (the reference does no I/O while it is armed). An operation
 * that returns an error is skipped by the reference: the API promises that
 * on error nothing visible has changed. The sequences are built so that
 * this is well defined (the failing operation is a gather whose victims'
 * write-back fails, or an operation refused before it did anything), except
 * in one test that checks exactly that promise for an update. At the end
 * both stores are closed and every row of both tables (values and
 * optimizer state) must be the same, bit for bit.
 *
 * Sites: a read of a gather's or an update's misses (-EIO, not sticky); a
 * short read (ET_ESHORTIO); the read of a read-modify-write in write-back;
 * a block write of the write-back that ends an operation (-EIO, -ENOSPC:
 * ET_EFAILED from then on until et_flush succeeds); a short block write; a
 * write and an fsync of et_flush (the retry succeeds); every fsync inside
 * et_checkpoint (before the commit: not committed, et_checkpoint_read keeps
 * the previous id; after it, while the undo logs restart: committed, but
 * writes are refused until a later et_flush or et_checkpoint succeeds); the
 * undo log's append and its fsync at the first write-back of a checkpoint
 * interval (nothing reaches the table file unlogged); the undo log's
 * restart inside et_checkpoint, and inside et_table_open after a rollback;
 * a write of the flush inside et_store_close; a read and a write of a
 * prefetch's job on the I/O thread. Where a crash matters, it is simulated
 * by opening the store directory again without closing the failed store
 * (test_crash.c kills real processes): recovery must give exactly the last
 * committed checkpoint.
 *
 * Not reachable through the seam, so not tested here: the checkpoint
 * record's own write and rename (plain write(2), fsync(2)), and recovery's
 * pwrite, fallocate and fdatasync of restored blocks.
 */
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "embtier.h"
#include "io.h"
#include "util.h"

#define NT     2
#define ROWS   20000
#define DIM    8
#define SLOT   32  /* the f32 table's row; the f16 + Adagrad one is 20 */
#define SPREAD 443 /* rows apart: no two in one block or in adjacent ones */

static const struct et_table_params tparams[NT] = {
    {
	.rows = ROWS,
	.dim = DIM,
	.dtype = ET_F32,
	.optim = ET_OPT_SGD,
	.init = ET_INIT_UNIFORM,
	.init_scale = 0.5f,
	.seed = 21,
    },
    {
	.rows = ROWS,
	.dim = DIM,
	.dtype = ET_F16,
	.optim = ET_OPT_ROWWISE_ADAGRAD,
	.init = ET_INIT_NORMAL,
	.init_scale = 0.25f,
	.seed = 22,
    },
};

static const char *const tnames[NT] = {"a", "b"};

static const struct et_update_params uparams[NT] = {
    {.lr = 0.125f},
    {.lr = 0.25f},
};

enum { TS = 0, RF = 1 }; /* the tested store, the reference */

/* One-set, 8-way DDR: any 8 distinct rows fill it. */
static struct et_store_config one_set(void)
{
	struct et_store_config c = {
	    .ways = 8,
	    .slot_bytes = SLOT,
	    .ddr_bytes = 8 * (SLOT + ET_SLOT_META_BYTES),
	};

	return c;
}

/* Eight sets of 8 ways: room for a prefetched batch and an operation. */
static struct et_store_config small(void)
{
	struct et_store_config c = {
	    .ways = 8,
	    .slot_bytes = SLOT,
	    .ddr_bytes = 64 * (SLOT + ET_SLOT_META_BYTES),
	};

	return c;
}

static struct et_store_config big(void)
{
	struct et_store_config c = {
	    .slot_bytes = SLOT,
	    .ddr_bytes = 16ULL << 20,
	};

	return c;
}

/* ------------------------------------------------------------- fixture */

struct pair {
	char *dir[2];
	et_store *s[2];
	int t[2][NT];
	struct et_store_config cfg[2];
	et_store *crashed; /* left open by crash_check, closed at teardown */
};

#define MAXPAIRS 8

struct fx {
	struct pair p[MAXPAIRS];
	int n;
};

static int rm_entry(const char *path, const struct stat *sb, int flag,
		    struct FTW *ftw)
{
	return remove(path);
}

static int setup(void **state)
{
	*state = tu_calloc(1, sizeof(struct fx));
	io_fault_clear();
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	io_fault_clear();
	for (int i = 0; i < f->n; i++) {
		struct pair *p = &f->p[i];

		for (int w = 0; w < 2; w++) {
			et_store_close(p->s[w]);
			if (w == TS)
				et_store_close(p->crashed);
			nftw(p->dir[w], rm_entry, 16, FTW_DEPTH | FTW_PHYS);
			free(p->dir[w]);
		}
	}
	free(f);
	return 0;
}

static void open_store(struct pair *p, int w)
{
	p->s[w] = NULL;
	assert_int_equal(et_store_open(p->dir[w], &p->cfg[w], &p->s[w]), 0);
	for (int t = 0; t < NT; t++)
		assert_int_equal(
		    et_table_open(p->s[w], tnames[t], &tparams[t], &p->t[w][t]),
		    0);
}

/* A tested store with configuration c and a reference, two empty tables
 * each. */
static struct pair *pair_new(struct fx *f, struct et_store_config c)
{
	struct pair *p;

	tu_require_uring();
	tu_require_direct();
	assert_true(f->n < MAXPAIRS);
	p = &f->p[f->n++];
	p->cfg[TS] = c;
	p->cfg[RF] = big();
	for (int w = 0; w < 2; w++) {
		p->dir[w] = strdup(tu_path(w == TS ? "faulty" : "ref"));
		assert_non_null(p->dir[w]);
		assert_int_equal(et_store_open(p->dir[w], &p->cfg[w], &p->s[w]),
				 0);
		for (int t = 0; t < NT; t++)
			assert_int_equal(et_table_create(p->s[w], tnames[t],
							 &tparams[t],
							 &p->t[w][t]),
					 0);
	}
	return p;
}

static void reopen(struct pair *p, int w)
{
	assert_int_equal(et_store_close(p->s[w]), 0);
	open_store(p, w);
}

/* ------------------------------------------------------------ contents */

/* Every row of both tables of a directory, values and state, as f32. */
struct image {
	float v[NT][(size_t)ROWS * DIM];
	float st[NT][ROWS];
};

static struct image *image_read(const char *dir)
{
	struct image *im = tu_calloc(1, sizeof(*im));
	uint64_t *ids = tu_calloc(ROWS, sizeof(*ids));
	char path[PATH_MAX];

	for (uint64_t r = 0; r < ROWS; r++)
		ids[r] = r;
	for (int t = 0; t < NT; t++) {
		et_tfile *tf = NULL;
		bool sf = tparams[t].optim == ET_OPT_ROWWISE_ADAGRAD;

		snprintf(path, sizeof(path), "%s/%s.et", dir, tnames[t]);
		assert_int_equal(et_tfile_open(path, ET_TFILE_RDONLY, &tf), 0);
		assert_int_equal(et_tfile_read_rows(tf, ids, ROWS, im->v[t],
						    sf ? im->st[t] : NULL),
				 0);
		et_tfile_close(tf);
	}
	free(ids);
	return im;
}

static void image_check(const struct image *a, const struct image *b,
			const char *what)
{
	for (int t = 0; t < NT; t++)
		for (uint64_t r = 0; r < ROWS; r++)
			if (memcmp(&a->v[t][r * DIM], &b->v[t][r * DIM],
				   DIM * sizeof(float)) ||
			    memcmp(&a->st[t][r], &b->st[t][r], sizeof(float)))
				fail_msg("%s: table %s row %llu: %a vs %a "
					 "(state %a vs %a)",
					 what, tnames[t], (unsigned long long)r,
					 (double)a->v[t][r * DIM],
					 (double)b->v[t][r * DIM],
					 (double)a->st[t][r],
					 (double)b->st[t][r]);
}

/* The reference's rows now (it is flushed first). */
static struct image *ref_image(struct pair *p)
{
	assert_int_equal(et_flush(p->s[RF]), 0);
	return image_read(p->dir[RF]);
}

/* Closes both stores (cleanly: any fault is over) and compares every
 * row. */
static void pair_finish(struct pair *p)
{
	struct image *a, *b;

	for (int w = 0; w < 2; w++) {
		assert_int_equal(et_store_close(p->s[w]), 0);
		p->s[w] = NULL;
	}
	a = image_read(p->dir[TS]);
	b = image_read(p->dir[RF]);
	image_check(a, b, "final tables against the reference");
	free(a);
	free(b);
}

/*
 * A crash of the tested store now: its directory is opened again while the
 * failed store is left as it is, never closed, so nothing more of it
 * reaches the files (they are as a kill -9 would leave them: what reached
 * the kernel stays). Recovery must leave the tables exactly as want and
 * the checkpoint record at want_id. Returns the blocks it restored. The
 * failed store is not used again (the teardown frees it).
 */
static uint64_t crash_check(struct pair *p, const struct image *want,
			    uint64_t want_id)
{
	struct et_stats st;
	struct image *got;
	uint64_t id;

	io_fault_clear();
	assert_int_equal(et_get_stats(p->s[TS], -1, &st), 0); /* idle */
	p->crashed = p->s[TS];
	open_store(p, TS); /* recovery */
	assert_int_equal(et_get_stats(p->s[TS], -1, &st), 0);
	assert_int_equal(et_checkpoint_read(p->s[TS], &id, NULL, NULL), 0);
	assert_int_equal(id, want_id);
	assert_int_equal(et_store_close(p->s[TS]), 0);
	p->s[TS] = NULL;
	got = image_read(p->dir[TS]);
	image_check(got, want, "tables recovered after the crash");
	free(got);
	return st.blocks_restored;
}

/* ---------------------------------------------------------- operations */

/* n rows of table t, one per block, from base on. */
static void spread(uint64_t *ids, size_t n, uint64_t base)
{
	for (size_t j = 0; j < n; j++)
		ids[j] = (base + j * SPREAD) % ROWS;
}

/*
 * n rows of table t, one a block, in blocks from b0 on that hold no row
 * history() wrote: rows no operation has to read.
 */
static void lazy_rows(struct pair *p, int t, uint64_t *ids, size_t n,
		      uint64_t b0)
{
	struct et_table_info in;
	size_t j = 0;

	assert_int_equal(et_table_info(p->s[TS], p->t[TS][t], &in), 0);
	for (uint64_t b = b0; j < n; b++) {
		bool used = false;

		assert_true(b < in.blocks);
		for (uint64_t k = 0; k < 32; k++)
			used |= (5 + (uint64_t)t + k * SPREAD) /
				    in.rows_per_block ==
				b;
		if (!used)
			ids[j++] = b * in.rows_per_block + 1;
	}
}

/* Exact small values, different for each salt. */
static void values(float *v, size_t n, uint32_t salt)
{
	for (size_t j = 0; j < n * DIM; j++)
		v[j] = (float)((int)((j * 7 + salt * 13) % 17) - 8) / 16.0f;
}

static int update(struct pair *p, int w, int t, const uint64_t *ids, size_t n,
		  uint32_t salt)
{
	float g[64 * DIM];

	assert_true(n <= 64);
	values(g, n, salt);
	return et_update(p->s[w], p->t[w][t], ids, n, g, &uparams[t]);
}

static int write_rows(struct pair *p, int w, int t, const uint64_t *ids,
		      size_t n, uint32_t salt)
{
	float v[64 * DIM];

	assert_true(n <= 64);
	values(v, n, salt + 1000);
	return et_write_rows(p->s[w], p->t[w][t], ids, n, v);
}

static int gather(struct pair *p, int w, int t, const uint64_t *ids, size_t n,
		  float *out)
{
	return et_gather(p->s[w], p->t[w][t], ids, n, out);
}

static int prefetch(struct pair *p, int w, int t, const uint64_t *ids, size_t n)
{
	struct et_batch_ids b = {.table = p->t[w][t], .ids = ids, .n = n};

	return et_prefetch(p->s[w], &b, 1);
}

/* The same operation on both stores, both succeeding. */
static void both_update(struct pair *p, int t, const uint64_t *ids, size_t n,
			uint32_t salt)
{
	assert_int_equal(update(p, TS, t, ids, n, salt), 0);
	assert_int_equal(update(p, RF, t, ids, n, salt), 0);
}

static void both_write(struct pair *p, int t, const uint64_t *ids, size_t n,
		       uint32_t salt)
{
	assert_int_equal(write_rows(p, TS, t, ids, n, salt), 0);
	assert_int_equal(write_rows(p, RF, t, ids, n, salt), 0);
}

/* Gathers on both stores succeed and agree. */
static void both_gather(struct pair *p, int t, const uint64_t *ids, size_t n)
{
	float a[64 * DIM], b[64 * DIM];

	assert_true(n <= 64);
	assert_int_equal(gather(p, TS, t, ids, n, a), 0);
	assert_int_equal(gather(p, RF, t, ids, n, b), 0);
	assert_memory_equal(a, b, n * DIM * sizeof(float));
}

/* Every operation that may write is refused with ET_EFAILED, and changes
 * nothing (the reference skips them all). */
static void assert_refused(struct pair *p)
{
	const uint64_t ids[4] = {1, 2, 3, 4};
	const uint64_t off[3] = {0, 2, 4};
	float out[4 * DIM], g[4 * DIM];

	values(g, 4, 99);
	assert_int_equal(gather(p, TS, 0, ids, 4, out), ET_EFAILED);
	assert_int_equal(update(p, TS, 1, ids, 4, 99), ET_EFAILED);
	assert_int_equal(write_rows(p, TS, 0, ids, 4, 99), ET_EFAILED);
	assert_int_equal(prefetch(p, TS, 1, ids, 4), ET_EFAILED);
	assert_int_equal(et_gather_pooled(p->s[TS], p->t[TS][0], ids, off, 2,
					  ET_POOL_SUM, out),
			 ET_EFAILED);
	assert_int_equal(et_update_pooled(p->s[TS], p->t[TS][1], ids, off, 2,
					  ET_POOL_MEAN, g, &uparams[1]),
			 ET_EFAILED);
}

/*
 * An operation that did its own work but whose write-back at the end
 * failed with err either returns err, or returns 0 and leaves the failure
 * to every later call (assert_refused checks those): both keep the
 * promise, for a gather (which changes nothing the reference could skip).
 */
static void assert_wb_failed(int ret, int err)
{
	if (ret != 0)
		assert_int_equal(ret, err);
}

static void checkpoint(struct pair *p, uint64_t want_id)
{
	uint64_t id;
	char d[32];

	snprintf(d, sizeof(d), "dense %llu", (unsigned long long)want_id);
	assert_int_equal(et_checkpoint(p->s[TS], d, strlen(d)), 0);
	assert_int_equal(et_checkpoint_read(p->s[TS], &id, NULL, NULL), 0);
	assert_int_equal(id, want_id);
}

/* The checkpoint id and dense state of the tested store. */
static uint64_t ckpt_id(struct pair *p, char *dense, size_t cap)
{
	uint64_t id;
	void *d = NULL;
	size_t len = 0;

	assert_int_equal(et_checkpoint_read(p->s[TS], &id, &d, &len), 0);
	if (dense) {
		assert_true(len < cap);
		memcpy(dense, d ? d : "", len);
		dense[len] = 0;
	}
	free(d);
	return id;
}

/*
 * Some history on both stores: rows of both tables written, updated, and
 * (in the tested store) written back, then flushed.
 */
static void history(struct pair *p)
{
	uint64_t ids[32];

	for (int t = 0; t < NT; t++) {
		spread(ids, 32, 5 + (uint64_t)t);
		both_write(p, t, ids, 32, 1);
		both_update(p, t, ids, 16, 2);
		both_update(p, t, ids + 8, 24, 3);
	}
	assert_int_equal(et_flush(p->s[TS]), 0);
	assert_int_equal(et_flush(p->s[RF]), 0);
}

/* ------------------------------------------------------------ 1. reads */

/*
 * A read error of a gather's misses returns -EIO; the error is not sticky
 * (the next operations succeed) and the values are right. The same for an
 * update whose misses cannot be read: -EIO, and the gradient is not applied
 * (the reference skips it). The failing read is the first and then the
 * third of the operation's reads (one a block).
 */
static void test_read_error_gather(void **state)
{
	struct pair *p = pair_new(*state, one_set());
	uint64_t ids[8];
	float out[8 * DIM];

	history(p);
	for (int k = 0; k < 2; k++) {
		for (int t = 0; t < NT; t++) {
			reopen(p, TS); /* cold: every row a miss */
			spread(ids, 8, 5 + (uint64_t)t);
			io_fault_set(IO_READ, k ? 3 : 1, EIO, 0);
			assert_int_equal(gather(p, TS, t, ids, 8, out), -EIO);
			assert_true(io_fault_fired());
			io_fault_clear();
			both_gather(p, t, ids, 8);
			both_gather(p, t, ids, 8);

			reopen(p, TS);
			io_fault_set(IO_READ, k ? 3 : 1, EIO, 0);
			assert_int_equal(update(p, TS, t, ids, 8, 40 + k),
					 -EIO);
			assert_true(io_fault_fired());
			io_fault_clear();
			both_gather(p, t, ids, 8);
			both_update(p, t, ids, 8, 50 + k);
			both_gather(p, t, ids, 8);
		}
	}
	pair_finish(p);
}

/* A read that transfers less than asked is ET_ESHORTIO, never used: cut
 * by one sector, and cut to nothing. */
static void test_short_read(void **state)
{
	struct pair *p = pair_new(*state, one_set());
	const uint32_t cuts[] = {512, 1u << 30};
	uint64_t ids[8];
	float out[8 * DIM];

	history(p);
	for (int k = 0; k < 2; k++) {
		for (int t = 0; t < NT; t++) {
			reopen(p, TS);
			spread(ids, 8, 5 + (uint64_t)t);
			io_fault_set(IO_READ, 2, 0, cuts[k]);
			assert_int_equal(gather(p, TS, t, ids, 8, out),
					 ET_ESHORTIO);
			assert_true(io_fault_fired());
			io_fault_clear();
			both_gather(p, t, ids, 8);
			both_update(p, t, ids, 8, 60 + k);
		}
	}
	pair_finish(p);
}

/*
 * Write-back is read-modify-write of blocks holding other rows: a read
 * error there fails the write-back at the end of the gather that evicted
 * the dirty rows. Nothing is written; the store refuses writes until
 * et_flush succeeds; nothing is lost.
 */
static void test_read_error_in_writeback(void **state)
{
	struct pair *p = pair_new(*state, one_set());
	uint64_t d[8], lz[8];
	float out[8 * DIM];

	history(p);
	spread(d, 8, 5 + 1); /* rows of written blocks (others there too) */
	for (size_t j = 0; j < 8; j++)
		d[j] += 1;
	spread(lz, 8, 14300);	     /* never written: no read */
	both_update(p, 0, d, 8, 70); /* the DDR: these 8, dirty */
	io_fault_set(IO_READ, 1, EIO, 0);
	assert_wb_failed(gather(p, TS, 1, lz, 8, out), -EIO);
	assert_true(io_fault_fired());
	io_fault_clear();
	assert_refused(p);
	assert_int_equal(et_flush(p->s[TS]), 0);
	both_gather(p, 0, d, 8);
	both_gather(p, 1, lz, 8);
	both_update(p, 0, d, 8, 71);
	pair_finish(p);
}

/* ---------------------------------------------------- 2. write-back */

/*
 * 8 dirty rows fill the one-set DDR; a gather of 8 rows never written
 * evicts them all and writes them back at its end, where the nth block
 * write fails with err. The gather returns err (see assert_wb_failed; the
 * reference skips it), then every writing operation is refused with
 * ET_EFAILED; with the fault cleared, et_flush succeeds and the store works
 * again; nothing is lost. With ckpt, a checkpoint was taken before, so the
 * write-back first appends to the undo log: the nth write is then a block
 * write all the same.
 */
static void writeback_fault(struct fx *f, int err, bool ckpt)
{
	struct pair *p = pair_new(f, one_set());
	uint64_t d[8], lz[8];
	float out[8 * DIM];

	history(p);
	if (ckpt)
		checkpoint(p, 1);
	for (int round = 0; round < 3; round++) {
		spread(d, 8, 7 + (uint64_t)round * 3);
		lazy_rows(p, 1, lz, 8, 68 + (uint64_t)round * 10);
		both_update(p, 0, d, 8, 80 + round);
		io_fault_set(IO_WRITE, (ckpt ? 1 : 0) + 1 + (uint64_t)round * 3,
			     err, 0);
		assert_wb_failed(gather(p, TS, 1, lz, 8, out), -err);
		assert_true(io_fault_fired());
		assert_refused(p);
		io_fault_clear();
		assert_refused(p); /* until a flush succeeds */
		assert_int_equal(et_flush(p->s[TS]), 0);
		both_gather(p, 0, d, 8);
		both_gather(p, 1, lz, 8);
		both_update(p, 1, lz, 8, 90 + round);
		if (ckpt)
			checkpoint(p, 2 + (uint64_t)round);
	}
	pair_finish(p);
}

static void test_write_error_writeback(void **state)
{
	writeback_fault(*state, EIO, false);
}

static void test_enospc_writeback(void **state)
{
	writeback_fault(*state, ENOSPC, true);
}

/*
 * The same fault, but the operation whose write-back fails is an update of
 * the rows that evict the dirty ones. If it returns an error, the API says
 * nothing visible changed: the reference skips it, and the final tables
 * must agree. (If it returns 0, its update counts and the failure must
 * show at the next operation.)
 */
static void test_write_error_update_contract(void **state)
{
	struct pair *p = pair_new(*state, one_set());
	uint64_t d[8], lz[8];
	float a[8 * DIM], b[8 * DIM];
	int ret;

	history(p);
	spread(d, 8, 9);
	spread(lz, 8, 14100);
	both_update(p, 0, d, 8, 100);
	io_fault_set(IO_WRITE, 1, EIO, 0);
	ret = update(p, TS, 1, lz, 8, 101);
	assert_true(io_fault_fired());
	io_fault_clear();
	if (ret == 0)
		assert_int_equal(update(p, RF, 1, lz, 8, 101), 0);
	else
		assert_int_equal(ret, -EIO);
	assert_refused(p);
	assert_int_equal(et_flush(p->s[TS]), 0);
	assert_int_equal(gather(p, TS, 1, lz, 8, a), 0);
	assert_int_equal(gather(p, RF, 1, lz, 8, b), 0);
	if (memcmp(a, b, sizeof(a)))
		fail_msg("et_update returned %d (%s), yet its gradient was "
			 "applied: a caller that retries applies it twice",
			 ret, et_strerror(ret));
	both_gather(p, 0, d, 8);
	pair_finish(p);
}

/*
 * A block write that transfers less than asked (a torn block on the
 * device): the write-back fails with ET_ESHORTIO, the store refuses writes,
 * and after io_fault_clear et_flush must write the rows and lose nothing,
 * including the rows of the torn block that were not being written.
 */
static void test_short_write_writeback(void **state)
{
	struct pair *p = pair_new(*state, one_set());
	uint64_t d[8], lz[8];
	float out[8 * DIM];
	int ret;

	history(p);
	spread(d, 8, 5); /* rows of the blocks written by history() */
	for (size_t j = 0; j < 8; j++)
		d[j] += 2;
	spread(lz, 8, 14200);
	both_update(p, 0, d, 8, 110);
	io_fault_set(IO_WRITE, 1, 0, 512);
	assert_wb_failed(gather(p, TS, 1, lz, 8, out), ET_ESHORTIO);
	assert_true(io_fault_fired());
	io_fault_clear();
	assert_refused(p);
	ret = et_flush(p->s[TS]);
	if (ret)
		fail_msg("et_flush after a torn block write: %s (%d); the "
			 "block's other rows are unreadable and writes stay "
			 "refused",
			 et_strerror(ret), ret);
	both_gather(p, 0, d, 8);
	pair_finish(p);
}

/* ------------------------------------------------------------- 3. flush */

/*
 * et_flush with 4 dirty rows of each table: the nth of its 8 block writes
 * fails, for every n. The flush returns the error; writes are refused;
 * the retry succeeds; nothing is lost.
 */
static void test_write_error_flush(void **state)
{
	struct pair *p = pair_new(*state, one_set());
	uint64_t a[4], b[4];

	history(p);
	for (uint32_t n = 1; n <= 8; n++) {
		spread(a, 4, 20 + n);
		spread(b, 4, 40 + n);
		both_update(p, 0, a, 4, 120 + n);
		both_update(p, 1, b, 4, 130 + n);
		io_fault_set(IO_WRITE, n, EIO, 0);
		assert_int_equal(et_flush(p->s[TS]), -EIO);
		assert_true(io_fault_fired());
		io_fault_clear();
		assert_refused(p);
		assert_int_equal(et_flush(p->s[TS]), 0);
		both_gather(p, 0, a, 4);
		both_gather(p, 1, b, 4);
	}
	pair_finish(p);
}

/*
 * An fsync of et_flush fails: without undo logs, the table syncs (n = 1,
 * 2); with them (after a checkpoint), also the undo log appends before the
 * first writes of blocks. Every n until the fault no longer fires: error
 * returned, writes refused, the retry succeeds, nothing lost.
 */
static void test_fsync_error_flush(void **state)
{
	struct pair *p = pair_new(*state, one_set());
	uint64_t a[4], b[4];
	unsigned covered[2] = {0, 0};

	history(p);
	for (int undo = 0; undo < 2; undo++) {
		if (undo)
			checkpoint(p, 1);
		for (uint32_t n = 1; n < 16; n++) {
			int ret;

			/* new rows; with undo logs, a new checkpoint
			 * interval each time: their blocks logged anew */
			spread(a, 4, 1000 + n * 10 + (uint64_t)undo * 200);
			spread(b, 4, 3000 + n * 10 + (uint64_t)undo * 200);
			both_update(p, 0, a, 4, 140 + n);
			both_update(p, 1, b, 4, 150 + n);
			io_fault_set(IO_FSYNC, n, EIO, 0);
			ret = et_flush(p->s[TS]);
			if (!io_fault_fired()) {
				io_fault_clear();
				assert_int_equal(ret, 0);
				break;
			}
			io_fault_clear();
			assert_int_equal(ret, -EIO);
			covered[undo]++;
			assert_refused(p);
			assert_int_equal(et_flush(p->s[TS]), 0);
			both_gather(p, 0, a, 4);
			both_gather(p, 1, b, 4);
			if (undo)
				checkpoint(p, 1 + n);
		}
	}
	assert_int_equal(covered[0], NT);  /* one sync a table */
	assert_true(covered[1] >= 2 * NT); /* and a log append each */
	pair_finish(p);
}

/* ------------------------------------------------------ 4. checkpoint */

/*
 * Every fsync inside et_checkpoint fails in turn (dirty rows in both
 * tables, undo logs on): the undo log appends of its write-back and the
 * table syncs come before the commit, the undo logs' restart after it.
 * Before: the checkpoint is not committed (et_checkpoint_read gives the
 * previous id and dense state). After: it is committed (the new ones),
 * yet an error is returned and writes are refused until a later
 * checkpoint succeeds, which it does. Both kinds must occur.
 */
static void test_fsync_error_checkpoint(void **state)
{
	struct pair *p = pair_new(*state, one_set());
	uint64_t a[4], b[4], id = 1, got;
	unsigned before = 0, after = 0;
	char want[32], dense[64], prev[64];

	history(p);
	checkpoint(p, 1);
	for (uint32_t n = 1; n < 32; n++) {
		int ret;

		spread(a, 4, 2000 + n * 10);
		spread(b, 4, 4000 + n * 10);
		both_update(p, 0, a, 4, 160 + n);
		both_update(p, 1, b, 4, 170 + n);
		ckpt_id(p, prev, sizeof(prev));
		snprintf(want, sizeof(want), "attempt %u", n);
		io_fault_set(IO_FSYNC, n, EIO, 0);
		ret = et_checkpoint(p->s[TS], want, strlen(want));
		if (!io_fault_fired()) {
			io_fault_clear();
			assert_int_equal(ret, 0);
			break;
		}
		io_fault_clear();
		assert_int_equal(ret, -EIO);
		got = ckpt_id(p, dense, sizeof(dense));
		if (got == id) {
			before++;
			assert_string_equal(dense, prev);
		} else {
			after++;
			assert_int_equal(got, id + 1);
			assert_string_equal(dense, want);
			id = got;
		}
		assert_refused(p);
		checkpoint(p, ++id);
		both_gather(p, 0, a, 4);
		both_gather(p, 1, b, 4);
	}
	assert_true(before >= 2 * NT); /* log appends and table syncs */
	assert_int_equal(after, NT);   /* one log restart a table */
	pair_finish(p);
}

/*
 * The same faults, each followed by a crash: the tables must come back as
 * the checkpoint record says, the previous checkpoint when the failure came
 * before the commit (blocks already written are rolled back), the new one
 * when it came after.
 */
static void test_checkpoint_fault_then_crash(void **state)
{
	struct fx *f = *state;
	unsigned kinds[2] = {0, 0};

	for (uint32_t n = 1; n <= 2 * NT + NT; n++) {
		struct pair *p;
		struct image *at1, *at2;
		uint64_t a[4], b[4], got, restored;
		int ret;

		p = pair_new(f, one_set());
		history(p);
		checkpoint(p, 1);
		at1 = ref_image(p);
		spread(a, 4, 2000 + n * 10);
		spread(b, 4, 4000 + n * 10);
		both_update(p, 0, a, 4, 180 + n);
		both_update(p, 1, b, 4, 190 + n);
		at2 = ref_image(p);
		io_fault_set(IO_FSYNC, n, EIO, 0);
		ret = et_checkpoint(p->s[TS], "x", 1);
		assert_true(io_fault_fired());
		io_fault_clear();
		assert_int_equal(ret, -EIO);
		got = ckpt_id(p, NULL, 0);
		assert_true(got == 1 || got == 2);
		kinds[got - 1]++;
		restored = crash_check(p, got == 1 ? at1 : at2, got);
		if (got == 1 && n > NT) /* after the appends: blocks written */
			assert_true(restored > 0);
		if (got == 2)
			assert_int_equal(restored, 0);
		free(at1);
		free(at2);
	}
	assert_true(kinds[0] >= 2 * NT);
	assert_int_equal(kinds[1], NT);
}

/* ------------------------------------------------------- 5. undo log */

/*
 * The first write of a checkpoint interval is the undo log's append of the
 * pre-images of the blocks about to be written. If that append (variant
 * 0), its fsync (1) or a short append (2) fails, the write-back is refused
 * before any block is written: the table files are still exactly the
 * checkpoint, even without recovery; writes are refused; a crash now
 * recovers the checkpoint (with nothing to restore after a failed append;
 * an append whose fsync failed, or that was cut short, leaves whole
 * records, which put back what the blocks hold anyway).
 */
static void undo_fault_setup(struct pair *p, uint64_t *d, uint64_t *lz,
			     struct image **at1)
{
	history(p);
	checkpoint(p, 1);
	*at1 = ref_image(p);
	/* rows sharing blocks with written rows: pre-images are bytes */
	spread(d, 8, 5);
	for (size_t j = 0; j < 8; j++)
		d[j] += 3;
	spread(lz, 8, 14400);
	both_update(p, 0, d, 8, 200); /* fills the DDR, no write-back */
}

static void undo_arm(int variant)
{
	switch (variant) {
	case 0:
		io_fault_set(IO_WRITE, 1, EIO, 0);
		break;
	case 1:
		io_fault_set(IO_FSYNC, 1, EIO, 0);
		break;
	default:
		io_fault_set(IO_WRITE, 1, 0, 100);
		break;
	}
}

static void test_undo_append_fails(void **state)
{
	struct fx *f = *state;
	const int errs[3] = {-EIO, -EIO, ET_ESHORTIO};

	for (int v = 0; v < 3; v++) {
		struct pair *p = pair_new(f, one_set());
		struct image *at1, *now;
		struct et_stats s0, s1;
		uint64_t d[8], lz[8];
		float out[8 * DIM];

		undo_fault_setup(p, d, lz, &at1);
		assert_int_equal(et_get_stats(p->s[TS], -1, &s0), 0);
		undo_arm(v);
		assert_wb_failed(gather(p, TS, 1, lz, 8, out), errs[v]);
		assert_true(io_fault_fired());
		io_fault_clear();
		assert_int_equal(et_get_stats(p->s[TS], -1, &s1), 0);
		assert_int_equal(s1.blocks_written, s0.blocks_written);
		assert_int_equal(s1.undo_records, s0.undo_records);
		assert_int_equal(s1.writebacks, s0.writebacks);
		now = image_read(p->dir[TS]); /* no recovery: as it is */
		image_check(now, at1, "table files after the refused append");
		free(now);
		assert_refused(p);
		if (v == 0)
			assert_int_equal(crash_check(p, at1, 1), 0);
		else
			assert_true(crash_check(p, at1, 1) <= 8);
		free(at1);
	}
}

/*
 * After a failed append, et_flush (fault cleared) logs and writes the rows:
 * a crash then rolls them back to the checkpoint (blocks restored); and
 * without a crash, the store goes on, checkpoints, and loses nothing.
 */
static void test_undo_append_fails_then_recovers(void **state)
{
	struct fx *f = *state;

	for (int crash = 0; crash < 2; crash++) {
		struct pair *p = pair_new(f, one_set());
		struct image *at1;
		uint64_t d[8], lz[8];
		float out[8 * DIM];

		undo_fault_setup(p, d, lz, &at1);
		undo_arm(crash ? 0 : 1);
		assert_wb_failed(gather(p, TS, 1, lz, 8, out), -EIO);
		assert_true(io_fault_fired());
		io_fault_clear();
		assert_int_equal(et_flush(p->s[TS]), 0);
		both_gather(p, 0, d, 8);
		both_update(p, 1, lz, 8, 201);
		both_update(p, 0, d, 8, 202);
		if (crash) {
			assert_int_equal(et_flush(p->s[TS]), 0);
			assert_true(crash_check(p, at1, 1) >= 8);
		} else {
			checkpoint(p, 2);
			both_gather(p, 0, d, 8);
			pair_finish(p);
		}
		free(at1);
	}
}

/*
 * The undo logs restart after the checkpoint record is committed; the
 * restart write of the first table (variants 1 and 3) or of the second (2)
 * fails (nothing dirty, so the restarts are the checkpoint's only writes
 * through the seam). The checkpoint is committed (the new id and dense
 * state), an error is returned, and every write is refused until a later
 * et_flush (1) or et_checkpoint (2) succeeds and restarts the logs. The
 * write-backs after that are logged for the right checkpoint: a crash
 * later recovers exactly the last committed one. A crash straight after
 * the failed restart (3) recovers the new checkpoint too.
 */
static void test_undo_restart_fails(void **state)
{
	struct fx *f = *state;

	for (int v = 1; v <= 3; v++) {
		struct pair *p = pair_new(f, one_set());
		uint64_t a[8], b[8], last;
		struct image *want;
		char dense[64];
		float out[8 * DIM];

		history(p);
		checkpoint(p, 1);
		spread(a, 8, 300);
		both_update(p, 0, a, 8, 210);
		assert_int_equal(et_flush(p->s[TS]), 0);
		want = ref_image(p);
		io_fault_set(IO_WRITE, v == 2 ? 2 : 1, EIO, 0);
		assert_int_equal(et_checkpoint(p->s[TS], "two", 3), -EIO);
		assert_true(io_fault_fired());
		io_fault_clear();
		assert_int_equal(ckpt_id(p, dense, sizeof(dense)), 2);
		assert_string_equal(dense, "two");
		assert_refused(p);
		if (v == 3) {
			assert_int_equal(crash_check(p, want, 2), 0);
			free(want);
			continue;
		}
		last = 2;
		if (v == 1) {
			assert_int_equal(et_flush(p->s[TS]), 0);
		} else {
			checkpoint(p, 3);
			last = 3;
		}
		/* the next interval: write-backs, logged */
		spread(b, 8, 500);
		both_update(p, 1, b, 8, 211);
		assert_int_equal(gather(p, TS, 0, a, 8, out), 0); /* evicts */
		both_update(p, 0, a, 8, 212);
		assert_int_equal(et_flush(p->s[TS]), 0);
		assert_true(crash_check(p, want, last) >= 8);
		free(want);
	}
}

/*
 * Opening a table after a crash rolls its file back, then restarts its undo
 * log; if that restart's write (variant 0) or fsync (1) fails,
 * et_table_open returns the error and the table is not opened. Opening it
 * again succeeds, and the tables are exactly the checkpoint.
 */
static void test_undo_restart_fails_at_open(void **state)
{
	struct fx *f = *state;

	for (int v = 0; v < 2; v++) {
		struct pair *p = pair_new(f, one_set());
		struct et_store_config c = p->cfg[TS];
		struct image *at1, *got;
		struct et_stats st;
		uint64_t d[8], lz[8], id;
		et_store *s = NULL;
		int t[NT];

		undo_fault_setup(p, d, lz, &at1);
		both_update(p, 1, lz, 8, 203); /* d written back, logged */
		assert_int_equal(et_flush(p->s[TS]), 0); /* and lz */
		assert_int_equal(et_get_stats(p->s[TS], -1, &st), 0);
		assert_true(st.undo_records >= 16);
		p->crashed = p->s[TS]; /* the crash */
		p->s[TS] = NULL;
		assert_int_equal(et_store_open(p->dir[TS], &c, &s), 0);
		p->s[TS] = s;
		if (v)
			io_fault_set(IO_FSYNC, 1, EIO, 0);
		else
			io_fault_set(IO_WRITE, 1, EIO, 0);
		assert_int_equal(et_table_open(s, tnames[0], NULL, &t[0]),
				 -EIO);
		assert_true(io_fault_fired());
		io_fault_clear();
		for (int k = 0; k < NT; k++)
			assert_int_equal(
			    et_table_open(s, tnames[k], &tparams[k], &t[k]), 0);
		assert_int_equal(et_checkpoint_read(s, &id, NULL, NULL), 0);
		assert_int_equal(id, 1);
		assert_int_equal(et_store_close(s), 0);
		p->s[TS] = NULL;
		got = image_read(p->dir[TS]);
		image_check(got, at1, "tables opened after a failed restart");
		free(got);
		free(at1);
	}
}

/*
 * et_store_close flushes; if a write of that flush fails (the undo log's
 * append, variant 0, or a block, 1), close returns the error and frees the
 * store all the same. What reached the files past the checkpoint is rolled
 * back when the store is opened again: the tables are the checkpoint.
 */
static void test_close_write_error(void **state)
{
	struct fx *f = *state;

	for (int v = 0; v < 2; v++) {
		struct pair *p = pair_new(f, one_set());
		struct image *at1, *got;
		uint64_t d[8], lz[8];

		undo_fault_setup(p, d, lz, &at1);
		io_fault_set(IO_WRITE, 1 + (uint64_t)v, EIO, 0);
		assert_int_equal(et_store_close(p->s[TS]), -EIO);
		p->s[TS] = NULL;
		assert_true(io_fault_fired());
		io_fault_clear();
		open_store(p, TS);
		assert_int_equal(ckpt_id(p, NULL, 0), 1);
		assert_int_equal(et_store_close(p->s[TS]), 0);
		p->s[TS] = NULL;
		got = image_read(p->dir[TS]);
		image_check(got, at1, "tables after a failed close");
		free(got);
		free(at1);
	}
}

/* ---------------------------------------------------------- 6. prefetch */

/*
 * A read of a prefetch's job fails on the I/O thread: the prefetch has
 * returned 0, the failed job installs nothing, and the next operation on
 * those rows reads them on demand: the right values, no error. Also when
 * the same prefetch's write-back job (dirty victims) goes first and
 * succeeds.
 */
static void test_prefetch_read_error(void **state)
{
	struct pair *p = pair_new(*state, small());
	uint64_t ids[32], d[40];
	struct et_stats s0, s1;

	history(p);
	for (int k = 0; k < 3; k++) {
		for (int t = 0; t < NT; t++) {
			size_t n = 16;

			if (k == 2 && t == 1)
				break;
			reopen(p, TS);			  /* cold */
			spread(ids, 16, 5 + (uint64_t)t); /* all on disk */
			if (k == 2) {
				/* more dirty rows than the DDR holds, each
				 * alone in a block never written: victims
				 * with no read-modify-write read */
				for (size_t j = 0; j < 40; j++)
					d[j] = 14001 + j * 127;
				both_update(p, 0, d, 40, 220);
				for (size_t j = 0; j < 30; j++)
					d[j] = 14002 + j * 204;
				both_update(p, 1, d, 30, 230);
				/* and rows never written in the batch:
				 * placed at once, evicting victims that go
				 * to the I/O thread before the read */
				lazy_rows(p, t, ids + 16, 16, 1);
				n = 32;
			}
			assert_int_equal(et_get_stats(p->s[TS], -1, &s0), 0);
			io_fault_set(IO_READ, k == 1 ? 5 : 1, EIO, 0);
			assert_int_equal(prefetch(p, TS, t, ids, n), 0);
			assert_int_equal(et_get_stats(p->s[TS], -1, &s1), 0);
			assert_true(io_fault_fired());
			io_fault_clear();
			assert_int_equal(s1.prefetch_reads - s0.prefetch_reads,
					 16);
			assert_int_equal(s1.nvme_rows_read, s0.nvme_rows_read);
			if (k == 2)
				assert_true(s1.writebacks > s0.writebacks);
			both_gather(p, t, ids, n);
			assert_int_equal(et_get_stats(p->s[TS], -1, &s0), 0);
			assert_int_equal(s0.prefetch_hits - s1.prefetch_hits,
					 n - 16);
			both_update(p, t, ids, n, 240 + k);
			both_gather(p, t, ids, n);
		}
	}
	pair_finish(p);
}

/*
 * A prefetch evicts 8 dirty rows; their write-back runs on the I/O thread,
 * after a checkpoint, so it appends to the undo log first. The failure
 * hits the append (variant 0), the log's fsync (1), or a block write (2).
 * The prefetch has returned 0; the next operation is refused with
 * ET_EFAILED, and so is every write until et_flush succeeds; nothing is
 * lost; a later checkpoint succeeds. Then the same with a crash instead of
 * the flush: back to the checkpoint.
 */
static void test_prefetch_write_error(void **state)
{
	struct fx *f = *state;
	struct pair *p = pair_new(f, one_set());

	history(p);
	for (int crash = 0; crash < 2; crash++) {
		for (int v = 0; v < 3; v++) {
			uint64_t d[8], lz[8];
			struct image *at = NULL;
			struct et_stats st;
			float out[8 * DIM];

			if (crash) {
				p = pair_new(f, one_set());
				history(p);
			}
			checkpoint(p, crash ? 1 : 1 + (uint64_t)v);
			if (crash)
				at = ref_image(p);
			spread(d, 8, 700 + (uint64_t)v * 3);
			lazy_rows(p, 1, lz, 8, (uint64_t)v * 20);
			/* the last round's batch pins released: d fills the
			 * DDR, dirty */
			assert_int_equal(prefetch(p, TS, 1, NULL, 0), 0);
			assert_int_equal(prefetch(p, TS, 1, NULL, 0), 0);
			both_update(p, 0, d, 8, 250 + v);
			assert_int_equal(et_get_stats(p->s[TS], -1, &st), 0);
			assert_int_equal(st.ddr.dirty_rows, 8);
			if (v == 1)
				io_fault_set(IO_FSYNC, 1, EIO, 0);
			else
				io_fault_set(IO_WRITE, v ? 2 : 1, EIO, 0);
			assert_int_equal(prefetch(p, TS, 1, lz, 8), 0);
			assert_int_equal(gather(p, TS, 1, lz, 8, out),
					 ET_EFAILED);
			assert_true(io_fault_fired());
			io_fault_clear();
			assert_refused(p);
			if (crash) {
				uint64_t r = crash_check(p, at, 1);

				if (v == 2)
					assert_true(r > 0);
				free(at);
				continue;
			}
			assert_int_equal(et_flush(p->s[TS]), 0);
			both_gather(p, 0, d, 8);
			both_gather(p, 1, lz, 8);
			both_update(p, 1, lz, 8, 260 + v);
		}
		if (!crash) {
			checkpoint(p, 4);
			pair_finish(p);
		}
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_read_error_gather, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_short_read, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_read_error_in_writeback, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_write_error_writeback, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_enospc_writeback, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_write_error_update_contract,
					    setup, teardown),
	    cmocka_unit_test_setup_teardown(test_short_write_writeback, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_write_error_flush, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_fsync_error_flush, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_fsync_error_checkpoint, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_checkpoint_fault_then_crash,
					    setup, teardown),
	    cmocka_unit_test_setup_teardown(test_undo_append_fails, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(
		test_undo_append_fails_then_recovers, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_undo_restart_fails, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_undo_restart_fails_at_open,
					    setup, teardown),
	    cmocka_unit_test_setup_teardown(test_close_write_error, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_prefetch_read_error, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_prefetch_write_error, setup,
					    teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
