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
 * Rows written back go to each table's row log (src/disk/rowlog.h): appends
 * fill an append buffer whose full windows are written as they fill (on
 * the log's own ring, while the next window fills), the rest at the next
 * flush or commit; a commit (et_checkpoint, or
 * a clean close that wrote anything) syncs every log and writes and syncs
 * a journal batch of index changes per table, then the record. Where the
 * files are compared, it is after a successful commit (an offline reader
 * sees the last commit); otherwise rows are compared through the store.
 *
 * Sites: a read of logged rows by a gather or an update (-EIO, not
 * sticky), and by a large update on two threads, whose rows already
 * cached stay as they were (test_read_error_large_update); a short read (ET_ESHORTIO); the cleaner's read of a segment
 * during a flush's append (-EIO, short: the flush fails, the retry cleans);
 * the write of buffered write-backs at the next flush (-EIO, -ENOSPC,
 * short: ET_EFAILED from then on until et_flush succeeds); a full window
 * of the append buffer written during write-back (test_window_fault);
 * every write and fsync of et_flush (log
 * appends, log and block file syncs); every write and fsync inside
 * et_checkpoint (its flush, then each table's log sync, journal batch
 * write and journal fsync: all before the record, so nothing is
 * committed, and the retry succeeds), the journal batch writes alone with
 * the rows flushed before (the failed table's journal has not grown); the
 * same faults followed by a crash, at once, after more flushed writes, or
 * after a retry that commits; every write and fsync inside et_store_close
 * (it returns the error and commits nothing: reopened at the checkpoint);
 * a read and a write of a prefetch's job on the I/O thread. A crash is
 * simulated by opening the store directory again without closing the
 * failed store (test_crash.c kills real processes): recovery must give
 * exactly the last commit.
 *
 * Allocations too (mem_host.h: mem_fault_set): a failed allocation at a
 * random point of growing multi-table calls and prefetches on tiny tiers
 * under TinyLFU fails the call cleanly or, if rows could not be kept,
 * stops the store before it commits (test_alloc_failure).
 *
 * Not reachable through the seam, so not tested here: the checkpoint
 * record's own write and rename (plain write(2), fsync(2)), the snapshot
 * rename of a journal, fallocate of a new segment, and the journal cut at
 * open.
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
#include "commit.h"
#include "io.h"
#include "mem_host.h"
#include "resolve.h"
#include "rowlog.h"
#include "state.h"
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

#define MAXPAIRS 32

struct fx {
	struct pair p[MAXPAIRS];
	int n;
};

static int setup(void **state)
{
	*state = tu_calloc(1, sizeof(struct fx));
	io_fault_clear();
	/* one read a record, so that "the third read" is one (the test of
	 * merged reads turns merging on) */
	rowlog_set_read_merge(false);
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	io_fault_clear();
	rowlog_set_tuning(0, 0); /* the defaults */
	rowlog_set_window(0);
	rowlog_set_read_merge(false);
	for (int i = 0; i < f->n; i++) {
		struct pair *p = &f->p[i];

		for (int w = 0; w < 2; w++) {
			et_store_close(p->s[w]);
			if (w == TS)
				et_store_close(p->crashed);
			tu_rmtree(p->dir[w]);
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

/* The reference's rows now, as its files give them after a commit (a
 * flush commits nothing: an offline reader sees the last commit). */
static struct image *ref_image(struct pair *p)
{
	assert_int_equal(et_checkpoint(p->s[RF], NULL, 0), 0);
	return image_read(p->dir[RF]);
}

/* After a successful commit of the tested store: its files give exactly
 * the reference's rows. */
static void files_check(struct pair *p, const char *what)
{
	struct image *a = image_read(p->dir[TS]), *b = ref_image(p);

	image_check(a, b, what);
	free(a);
	free(b);
}

/* Bytes of the index journal of table t of the tested store. */
static long long journal_bytes(struct pair *p, int t)
{
	char path[PATH_MAX];
	struct stat st;

	snprintf(path, sizeof(path), "%s/%s.et.idx", p->dir[TS], tnames[t]);
	if (stat(path, &st))
		return -1;
	return (long long)st.st_size;
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
 * the kernel stays). Recovery (journals cut back to the last commit) must
 * leave the tables exactly as want and the checkpoint record at want_id.
 * The failed store is not used again (the teardown frees it).
 */
static void crash_check(struct pair *p, const struct image *want,
			uint64_t want_id)
{
	struct et_stats st;
	struct image *got;
	uint64_t id;

	io_fault_clear();
	assert_int_equal(et_get_stats(p->s[TS], -1, &st), 0); /* idle */
	p->crashed = p->s[TS];
	commit_drop_lock(p->crashed); /* as the crash would */
	open_store(p, TS);	      /* recovery */
	assert_int_equal(et_checkpoint_read(p->s[TS], &id, NULL, NULL), 0);
	assert_int_equal(id, want_id);
	assert_int_equal(et_store_close(p->s[TS]), 0);
	p->s[TS] = NULL;
	got = image_read(p->dir[TS]);
	image_check(got, want, "tables recovered after the crash");
	free(got);
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
 * (in the tested store) written back, then flushed: 32 rows of each table
 * in its row log, nothing committed.
 */
static void history(struct pair *p)
{
	struct et_stats st;
	uint64_t ids[32];

	for (int t = 0; t < NT; t++) {
		spread(ids, 32, 5 + (uint64_t)t);
		both_write(p, t, ids, 32, 1);
		both_update(p, t, ids, 16, 2);
		both_update(p, t, ids + 8, 24, 3);
	}
	assert_int_equal(et_flush(p->s[TS]), 0);
	assert_int_equal(et_flush(p->s[RF]), 0);
	assert_int_equal(et_get_stats(p->s[TS], -1, &st), 0);
	assert_int_equal(st.log_index_rows, 32 * NT);
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

/*
 * A large update on two threads, whose misses are placed in set order
 * while its hits may be updated beside the placement (ops.c): with some
 * misses in the row log, a failed read must leave every row as it was,
 * hits included (the hits are updated beside the placement only when no
 * read is in flight). Table 0, 16 ways, room for 2048 rows; 7000 ids of
 * one call: 1000 just written (hits), 5000 written long before (in the
 * log), 1000 never written. The read fails at the first and the third
 * read; then the call succeeds on both stores. Last, a call of hits and
 * never-written rows alone must run the side work (and agree).
 */
#define LARGE 7000

static int large_update(struct pair *p, int w, const uint64_t *ids,
			uint32_t salt)
{
	float *g = malloc((size_t)LARGE * DIM * sizeof(float));
	int ret;

	assert_non_null(g);
	for (size_t j = 0; j < (size_t)LARGE * DIM; j++)
		g[j] = (float)((int)((j * 7 + salt * 13) % 17) - 8) / 64.0f;
	ret = et_update(p->s[w], p->t[w][0], ids, LARGE, g, &uparams[0]);
	free(g);
	return ret;
}

static void large_same(struct pair *p, const uint64_t *ids)
{
	float *a = malloc((size_t)LARGE * DIM * sizeof(float));
	float *b = malloc((size_t)LARGE * DIM * sizeof(float));

	assert_non_null(a);
	assert_non_null(b);
	assert_int_equal(et_gather(p->s[TS], p->t[TS][0], ids, LARGE, a), 0);
	assert_int_equal(et_gather(p->s[RF], p->t[RF][0], ids, LARGE, b), 0);
	assert_memory_equal(a, b, (size_t)LARGE * DIM * sizeof(float));
	free(a);
	free(b);
}

static void test_read_error_large_update(void **state)
{
	struct et_store_config c = {.ways = 16,
				    .slot_bytes = SLOT,
				    .ddr_bytes =
					2048 * (SLOT + ET_SLOT_META_BYTES),
				    .threads = 2};
	struct pair *p = pair_new(*state, c);
	uint64_t *ids = malloc(LARGE * sizeof(*ids)), w[64];
	size_t side0;

	assert_non_null(ids);
	/* rows 0 .. 11999 written (the older ones pushed to the log),
	 * the last written are 11000 .. 11999 */
	for (uint64_t r0 = 0; r0 < 12000; r0 += 64) {
		size_t n = 12000 - r0 < 64 ? 12000 - r0 : 64;

		for (size_t j = 0; j < n; j++)
			w[j] = r0 + j;
		both_write(p, 0, w, n, (uint32_t)r0);
	}
	for (size_t j = 0; j < LARGE; j++)
		ids[j] = j < 1000   ? 11000 + j
			 : j < 6000 ? (j - 1000) * 2
				    : 12000 + (j - 6000) * 3;
	/* all in the log's file, then the first 1000 back in DDR */
	assert_int_equal(et_flush(p->s[TS]), 0);
	for (int k = 0; k < 2; k++) {
		float out[64 * DIM];

		reopen(p, TS);
		for (size_t j = 0; j < 1000; j += 50)
			assert_int_equal(gather(p, TS, 0, ids + j, 50, out), 0);
		side0 = place_side_runs;
		io_fault_set(IO_READ, k ? 3 : 1, EIO, 0);
		assert_int_equal(large_update(p, TS, ids, 60 + (uint32_t)k),
				 -EIO);
		assert_true(io_fault_fired());
		io_fault_clear();
		assert_int_equal(place_side_runs, side0);
		large_same(p, ids);
	}
	assert_int_equal(large_update(p, TS, ids, 70), 0);
	assert_int_equal(large_update(p, RF, ids, 70), 0);
	large_same(p, ids);
	/* hits and never-written rows: no read, the side work runs */
	for (size_t j = 0; j < LARGE; j++)
		ids[j] = j < 1000   ? 11000 + j
			 : j < 6000 ? 15000 + (j - 1000)
				    : 12001 + (j - 6000) * 3;
	for (size_t j = 0; j < 1000; j += 50) {
		float out[64 * DIM];

		assert_int_equal(gather(p, TS, 0, ids + j, 50, out), 0);
	}
	side0 = place_side_runs;
	assert_int_equal(large_update(p, TS, ids, 80), 0);
	assert_int_equal(large_update(p, RF, ids, 80), 0);
	assert_true(place_side_runs > side0);
	large_same(p, ids);
	free(ids);
	pair_finish(p);
}

/* One pooled multi-table call over both tables of store w: 4 bags of 4
 * of ids[t] each; a gather into out, or an update with gradients of salt. */
static int multi(struct pair *p, int w, uint64_t ids[NT][16], bool upd,
		 uint32_t salt, float out[NT][4 * DIM])
{
	static const uint64_t off[5] = {0, 4, 8, 12, 16};
	struct et_table_batch b[NT];
	float g[NT][4 * DIM];

	for (int t = 0; t < NT; t++) {
		values(g[t], 4, salt + (uint32_t)t);
		b[t] = (struct et_table_batch){.table = p->t[w][t],
					       .ids = ids[t],
					       .offsets = off,
					       .nbags = 4,
					       .out = out[t],
					       .grads = g[t]};
	}
	return upd ? et_update_pooled_multi(p->s[w], b, NT, ET_POOL_SUM,
					    uparams)
		   : et_gather_pooled_multi(p->s[w], b, NT, ET_POOL_SUM);
}

/*
 * The misses of both tables of a multi-table call are read together (rows
 * in the row logs, and rows never written, which need no read). Whichever
 * of its reads fails, from the first to the last, the call returns -EIO
 * and installs nothing of either table (no row resident afterwards), and
 * an update applies no gradient; the next calls are right. The same with
 * a short read: ET_ESHORTIO; and when the ring's wait or submit itself
 * fails, its error, with no read left in flight. With the rows cold in a store whose uparams
 * differ per table, the reference's updates match only if each table got
 * its own.
 */
static void test_read_error_multi(void **state)
{
	struct pair *p = pair_new(*state, big());
	uint64_t ids[NT][16];
	float a[NT][4 * DIM], b[NT][4 * DIM];
	struct et_stats st;
	int last = 0;

	history(p);
	for (int t = 0; t < NT; t++) {
		spread(ids[t], 12, 5 + (uint64_t)t); /* in the log */
		lazy_rows(p, t, ids[t] + 12, 4, 1);  /* never written */
	}
	for (int k = 0; k < 5; k++) {
		bool upd = k == 1;
		static const int want[5] = {-EIO, -EIO, ET_ESHORTIO, -EBADR,
					    -EBADR};

		for (int n = 1;; n++) {
			int ret;

			reopen(p, TS); /* cold: every row a miss */
			if (k == 3)    /* the ring's wait itself fails */
				io_fault_set(IO_WAIT, (uint64_t)n, EBADR, 0);
			else if (k == 4) /* its submit, while the rows are
					  * placed or waited for */
				io_fault_set(IO_SUBMIT, (uint64_t)n, EBADR, 0);
			else
				io_fault_set(IO_READ, (uint64_t)n,
					     k == 2 ? 0 : EIO,
					     k == 2 ? 512 : 0);
			ret = multi(p, TS, ids, upd, 70 + (uint32_t)n, a);
			if (!io_fault_fired()) {
				io_fault_clear();
				assert_int_equal(ret, 0);
				assert_int_equal(
				    multi(p, RF, ids, upd, 70 + (uint32_t)n, b),
				    0);
				if (!upd)
					assert_memory_equal(a, b, sizeof(a));
				last = n - 1;
				break;
			}
			io_fault_clear();
			assert_int_equal(ret, want[k]);
			assert_int_equal(et_get_stats(p->s[TS], -1, &st), 0);
			assert_int_equal(st.ddr.resident_rows, 0);
			assert_int_equal(multi(p, TS, ids, false, 0, a), 0);
			assert_int_equal(multi(p, RF, ids, false, 0, b), 0);
			assert_memory_equal(a, b, sizeof(a));
		}
		/* every record of the logs read alone (12 a table), and
		 * the logs' own reads at their first use; waits: fewer */
		assert_true(k >= 3 ? last >= 1 : last >= 12 * NT);
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
 * Reads of records near each other in the log are merged: the eight rows
 * of a gather, written together, come back in one read. That read cut
 * short, or failing, fails the gather (ET_ESHORTIO, -EIO) and nothing
 * stale is used; a fault on a second read never fires.
 */
static void test_merged_read_faults(void **state)
{
	struct pair *p = pair_new(*state, one_set());
	uint64_t ids[8];
	float out[8 * DIM];

	rowlog_set_read_merge(true);
	history(p);
	for (int k = 0; k < 4; k++) {
		for (int t = 0; t < NT; t++) {
			int want = k == 0 ? 0 : k == 3 ? -EIO : ET_ESHORTIO;

			reopen(p, TS);
			spread(ids, 8, 5 + (uint64_t)t);
			if (k == 0)
				io_fault_set(IO_READ, 2, EIO, 0);
			else if (k == 3)
				io_fault_set(IO_READ, 1, EIO, 0);
			else
				io_fault_set(IO_READ, 1, 0,
					     k == 1 ? 512 : 1u << 30);
			assert_int_equal(gather(p, TS, t, ids, 8, out), want);
			assert_int_equal(io_fault_fired(), k != 0);
			io_fault_clear();
			both_gather(p, t, ids, 8);
		}
	}
	pair_finish(p);
}

/*
 * The cleaner (small segments, so that it runs): every flush appends 40
 * rows written once and rewrites 40 hot ones, leaving segments part dead;
 * when the cleaner moves the live records of one, it reads it back. That
 * read fails (-EIO, or short: ET_ESHORTIO) at the flush that first
 * cleans, and again later: the flush returns the error, writes are
 * refused, and the retry succeeds and cleans; no row is lost, through the
 * store and through the files after a commit. With a big DDR and rows
 * already cached, the cleaner's reads are the flush's only ones.
 */
static void cleaner_fault(struct fx *f, int err, uint32_t short_by, int want)
{
	struct pair *p;
	uint64_t hot[40], cold[40];
	unsigned fired = 0;
	struct et_stats s0, s1;

	rowlog_set_tuning(1.1, 4096);
	p = pair_new(f, big());
	spread(hot, 40, 3);
	for (uint32_t round = 0; round < 60 && fired < 3; round++) {
		int ret;

		spread(cold, 40, 11 + (uint64_t)round * 41);
		both_write(p, 0, cold, 40, 300 + round);
		both_write(p, 0, hot, 40, 400 + round);
		assert_int_equal(et_get_stats(p->s[TS], -1, &s0), 0);
		io_fault_set(IO_READ, 1, err, short_by);
		ret = et_flush(p->s[TS]);
		if (!io_fault_fired()) {
			io_fault_clear();
			assert_int_equal(ret, 0);
			continue;
		}
		io_fault_clear();
		fired++;
		assert_int_equal(ret, want);
		assert_refused(p);
		assert_int_equal(et_flush(p->s[TS]), 0);
		assert_int_equal(et_get_stats(p->s[TS], -1, &s1), 0);
		assert_true(s1.log_segments_cleaned > s0.log_segments_cleaned);
		both_gather(p, 0, cold, 40);
		both_gather(p, 0, hot, 40);
		if (fired == 2) {
			checkpoint(p, 1);
			files_check(p, "files after a failed cleaner read");
		}
	}
	assert_int_equal(fired, 3);
	pair_finish(p);
}

static void test_cleaner_read_error(void **state)
{
	cleaner_fault(*state, EIO, 0, -EIO);
}

static void test_cleaner_short_read(void **state)
{
	cleaner_fault(*state, 0, 512, ET_ESHORTIO);
}

/* ---------------------------------------------------- 2. write-back */

/*
 * 8 dirty rows fill the one-set DDR; a gather of 8 rows never written
 * evicts them all and writes them back at its end: one append to the row
 * log of table a, held in its append buffer (a write-back writes only full
 * windows). The next et_flush writes it, and that write fails with err:
 * the flush returns err, then every operation is refused with ET_EFAILED;
 * with the fault cleared, et_flush succeeds and the store works again;
 * nothing is lost. With ckpt, each round ends with a checkpoint, after
 * which the files must give the reference's rows.
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
		struct et_stats s0, s1;

		spread(d, 8, 7 + (uint64_t)round * 3);
		lazy_rows(p, 1, lz, 8, 68 + (uint64_t)round * 10);
		both_update(p, 0, d, 8, 80 + round);
		assert_int_equal(et_get_stats(p->s[TS], -1, &s0), 0);
		assert_int_equal(gather(p, TS, 1, lz, 8, out), 0);
		assert_int_equal(et_get_stats(p->s[TS], -1, &s1), 0);
		assert_int_equal(s1.writebacks, s0.writebacks + 8);
		io_fault_set(IO_WRITE, 1, err, 0);
		assert_int_equal(et_flush(p->s[TS]), -err);
		assert_true(io_fault_fired());
		assert_refused(p);
		io_fault_clear();
		assert_refused(p); /* until a flush succeeds */
		assert_int_equal(et_flush(p->s[TS]), 0);
		both_gather(p, 0, d, 8);
		both_gather(p, 1, lz, 8);
		both_update(p, 1, lz, 8, 90 + round);
		if (ckpt) {
			checkpoint(p, 2 + (uint64_t)round);
			files_check(p, "files after a failed write-back");
		}
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
 * The same fault, but the write-back is of an update of the rows that
 * evict the dirty ones, and the write that fails is the flush's. If the
 * update returns an error, the API says nothing visible changed: the
 * reference skips it, and the final tables must agree. (If it returns 0,
 * its update counts, and the failure must show at the flush.)
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
	if (ret == 0) {
		assert_int_equal(update(p, RF, 1, lz, 8, 101), 0);
		assert_int_equal(et_flush(p->s[TS]), -EIO);
	} else {
		assert_int_equal(ret, -EIO);
	}
	assert_true(io_fault_fired());
	io_fault_clear();
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
 * A log write that transfers less than asked (torn on the device): the
 * flush that writes the buffered write-back fails with ET_ESHORTIO, the
 * store refuses writes, and after io_fault_clear et_flush must write the
 * rows again and lose nothing, also across a commit (the torn records must
 * not shadow good ones).
 */
static void test_short_write_writeback(void **state)
{
	struct pair *p = pair_new(*state, one_set());
	uint64_t d[8], lz[8];
	float out[8 * DIM];
	int ret;

	history(p);
	spread(d, 8, 5); /* rows history() logged, and others */
	for (size_t j = 0; j < 4; j++)
		d[j] += 2;
	spread(lz, 8, 14200);
	both_update(p, 0, d, 8, 110);
	assert_int_equal(gather(p, TS, 1, lz, 8, out), 0);
	io_fault_set(IO_WRITE, 1, 0, 512);
	assert_int_equal(et_flush(p->s[TS]), ET_ESHORTIO);
	assert_true(io_fault_fired());
	io_fault_clear();
	assert_refused(p);
	ret = et_flush(p->s[TS]);
	if (ret)
		fail_msg("et_flush after a torn log write: %s (%d)",
			 et_strerror(ret), ret);
	both_gather(p, 0, d, 8);
	checkpoint(p, 1);
	files_check(p, "files after a torn log write");
	reopen(p, TS);
	both_gather(p, 0, d, 8);
	pair_finish(p);
}

/*
 * Full windows of the append buffer written by write-backs: with 16 KiB
 * windows, 160 updates of 8 rows each, every one evicting the 8 before,
 * fill several windows, each sent on the log's own ring while the next
 * fills. The nth log write fails, for n = 1..4. The error surfaces once:
 * -EIO at a read that had to wait for that window (not sticky, like a
 * read error: nothing applied), or at the write-back that met it, whose
 * operation had done its work and returned 0, so the next one gets
 * ET_EFAILED and writes stay refused until et_flush succeeds. Either way
 * the window is written again (by the next write or the flush), nothing
 * is lost, and after a commit the files agree. The reference skips every
 * operation that failed.
 */
static void test_window_fault(void **state)
{
	struct fx *f = *state;
	uint64_t ids[8];

	rowlog_set_window(16384);
	for (uint32_t n = 1; n <= 4; n++) {
		struct pair *p = pair_new(f, one_set());
		uint32_t b, nb = 160;
		int ret = 0;

		history(p);
		io_fault_set(IO_WRITE, n, EIO, 0);
		for (b = 0; b < nb && !ret; b++) {
			spread(ids, 8, 3000 + b);
			ret = update(p, TS, 0, ids, 8, 500 + b);
			if (!ret)
				assert_int_equal(
				    update(p, RF, 0, ids, 8, 500 + b), 0);
		}
		if (!ret)
			ret = et_flush(p->s[TS]);
		assert_true(io_fault_fired());
		/* -EIO from the operation that met it, or ET_EFAILED from the
		 * one after a write-back that met it (that one did its work
		 * and returned 0), which keeps writes refused until a flush */
		if (ret == ET_EFAILED) {
			io_fault_clear();
			assert_refused(p);
		} else {
			assert_int_equal(ret, -EIO);
			io_fault_clear();
		}
		assert_int_equal(et_flush(p->s[TS]), 0);
		for (uint32_t k = 0; k < b; k++) {
			spread(ids, 8, 3000 + k);
			both_gather(p, 0, ids, 8);
		}
		assert_int_equal(et_checkpoint(p->s[TS], NULL, 0), 0);
		files_check(p, "files after a failed window write");
		pair_finish(p);
	}
	rowlog_set_window(0);
}

/* ------------------------------------------------------------- 3. flush */

/*
 * et_flush with 4 dirty rows of each table: one log append each (its
 * write), then each table synced (the log's fsync, the block file's). The
 * nth write (flush_op IO_WRITE) or fsync (IO_FSYNC) fails, for every n
 * until the fault no longer fires: the flush returns the error; writes are
 * refused; the retry succeeds; nothing is lost; and after a commit the
 * files agree with the reference.
 */
static void flush_fault(struct fx *f, int op, unsigned want_min)
{
	struct pair *p = pair_new(f, one_set());
	uint64_t a[4], b[4];
	unsigned covered = 0;

	history(p);
	for (uint32_t n = 1; n < 16; n++) {
		int ret;

		spread(a, 4, 20 + n);
		spread(b, 4, 40 + n);
		both_update(p, 0, a, 4, 120 + n);
		both_update(p, 1, b, 4, 130 + n);
		io_fault_set(op, n, EIO, 0);
		ret = et_flush(p->s[TS]);
		if (!io_fault_fired()) {
			io_fault_clear();
			assert_int_equal(ret, 0);
			break;
		}
		io_fault_clear();
		covered++;
		assert_int_equal(ret, -EIO);
		assert_refused(p);
		assert_int_equal(et_flush(p->s[TS]), 0);
		both_gather(p, 0, a, 4);
		both_gather(p, 1, b, 4);
	}
	assert_true(covered >= want_min);
	checkpoint(p, 1);
	files_check(p, "files after failed flushes");
	pair_finish(p);
}

static void test_write_error_flush(void **state)
{
	flush_fault(*state, IO_WRITE, NT); /* a log append a table */
}

static void test_fsync_error_flush(void **state)
{
	flush_fault(*state, IO_FSYNC, NT); /* a log fsync a table at least */
}

/* ------------------------------------------------------ 4. checkpoint */

/*
 * The nth write or fsync inside et_checkpoint fails, for every n until it
 * no longer fires: the log appends and syncs of its flush, then each
 * table's commit_prepare (log synced, journal batch written and synced),
 * all before the commit record. With pre, the rows were flushed before:
 * the checkpoint's only writes are then the journal batches, one a table,
 * and the journal of the table whose write failed has not grown. Every
 * time: the error is returned, nothing is committed (et_checkpoint_read
 * gives the previous id and dense state), the retry succeeds, the rows
 * agree with the reference through the store and through the files.
 */
static void checkpoint_fault(struct fx *f, int op, bool pre)
{
	struct pair *p = pair_new(f, one_set());
	uint64_t a[4], b[4], id = 1;
	unsigned covered = 0;
	char want[32], dense[64], prev[64];

	history(p);
	checkpoint(p, 1);
	for (uint32_t n = 1; n < 32; n++) {
		long long j0[NT];
		int ret;

		spread(a, 4, 2000 + n * 10);
		spread(b, 4, 4000 + n * 10);
		both_update(p, 0, a, 4, 160 + n);
		both_update(p, 1, b, 4, 170 + n);
		if (pre)
			assert_int_equal(et_flush(p->s[TS]), 0);
		for (int t = 0; t < NT; t++)
			j0[t] = journal_bytes(p, t);
		ckpt_id(p, prev, sizeof(prev));
		snprintf(want, sizeof(want), "attempt %u", n);
		io_fault_set(op, n, EIO, 0);
		ret = et_checkpoint(p->s[TS], want, strlen(want));
		if (!io_fault_fired()) {
			io_fault_clear();
			assert_int_equal(ret, 0);
			assert_int_equal(ckpt_id(p, NULL, 0), ++id);
			break;
		}
		io_fault_clear();
		covered++;
		assert_int_equal(ret, -EIO);
		assert_int_equal(ckpt_id(p, dense, sizeof(dense)), id);
		assert_string_equal(dense, prev);
		if (pre && op == IO_WRITE) {
			/* the journal batch of table n - 1 failed */
			assert_true(n <= NT);
			for (int t = 0; t < (int)n - 1; t++)
				assert_true(journal_bytes(p, t) > j0[t]);
			assert_int_equal(journal_bytes(p, (int)n - 1),
					 j0[n - 1]);
		}
		checkpoint(p, ++id);
		both_gather(p, 0, a, 4);
		both_gather(p, 1, b, 4);
		files_check(p, "files after a retried checkpoint");
	}
	if (pre && op == IO_WRITE)
		assert_int_equal(covered, NT);
	else if (op == IO_FSYNC)
		assert_true(covered >= 2 * NT); /* log and journal */
	else
		assert_true(covered >= 2 * NT); /* log append and journal */
	pair_finish(p);
}

static void test_write_error_checkpoint(void **state)
{
	checkpoint_fault(*state, IO_WRITE, false);
}

static void test_fsync_error_checkpoint(void **state)
{
	checkpoint_fault(*state, IO_FSYNC, false);
}

static void test_journal_write_error_checkpoint(void **state)
{
	checkpoint_fault(*state, IO_WRITE, true);
}

static void test_journal_fsync_error_checkpoint(void **state)
{
	checkpoint_fault(*state, IO_FSYNC, true);
}

/*
 * The same faults, each followed by a crash, in one of three ways (by n):
 * at once; after et_flush and more writes flushed (the journal batch the
 * failed commit left must not count); after a retry that commits. The
 * tables must come back exactly at the previous checkpoint in the first
 * two, at the retried one in the third.
 */
static void test_checkpoint_fault_then_crash(void **state)
{
	struct fx *f = *state;
	const int ops[2] = {IO_WRITE, IO_FSYNC};
	unsigned covered = 0;

	for (int o = 0; o < 2; o++) {
		for (uint32_t n = 1; n < 16; n++) {
			struct pair *p;
			struct image *at1, *at2;
			uint64_t a[4], b[4], c[4];
			int ret, how = (int)(n + (uint32_t)o) % 3;

			p = pair_new(f, one_set());
			history(p);
			checkpoint(p, 1);
			at1 = ref_image(p);
			spread(a, 4, 2000 + n * 10);
			spread(b, 4, 4000 + n * 10);
			both_update(p, 0, a, 4, 180 + n);
			both_update(p, 1, b, 4, 190 + n);
			io_fault_set(ops[o], n, EIO, 0);
			ret = et_checkpoint(p->s[TS], "x", 1);
			if (!io_fault_fired()) {
				io_fault_clear();
				assert_int_equal(ret, 0);
				assert_int_equal(ckpt_id(p, NULL, 0), 2);
				at2 = ref_image(p);
				crash_check(p, at2, 2);
				free(at1);
				free(at2);
				break;
			}
			io_fault_clear();
			covered++;
			assert_int_equal(ret, -EIO);
			assert_int_equal(ckpt_id(p, NULL, 0), 1);
			if (how == 1) {
				assert_int_equal(et_flush(p->s[TS]), 0);
				spread(c, 4, 6000 + n * 10);
				both_update(p, 0, c, 4, 195 + n);
				both_update(p, 1, a, 4, 196 + n);
				assert_int_equal(et_flush(p->s[TS]), 0);
			}
			if (how == 2) {
				checkpoint(p, 2);
				at2 = ref_image(p);
				crash_check(p, at2, 2);
				free(at2);
			} else {
				crash_check(p, at1, 1);
			}
			free(at1);
		}
	}
	assert_true(covered >= 4 * NT);
}

/* ------------------------------------------------------------ 5. close */

/*
 * et_store_close flushes and commits; the nth write (the log appends of
 * its flush, then the journal batches) or fsync (the logs' and block
 * files', then in the commit the logs' and journals') fails, for every n
 * until it no longer fires. Close returns the error and frees the store all
 * the same; a close that failed commits nothing: opened again, the store
 * is at the checkpoint (its id, its commit number, its rows).
 */
static void test_close_fault(void **state)
{
	struct fx *f = *state;
	const int ops[2] = {IO_WRITE, IO_FSYNC};
	unsigned covered[2] = {0, 0};

	for (int o = 0; o < 2; o++) {
		for (uint32_t n = 1; n < 16; n++) {
			struct pair *p = pair_new(f, one_set());
			struct et_checkpoint_info c0, c1;
			struct image *at1, *got;
			uint64_t d[8];
			int ret;

			history(p);
			checkpoint(p, 1);
			at1 = ref_image(p);
			assert_int_equal(et_checkpoint_info(p->s[TS], &c0), 0);
			spread(d, 8, 5);
			both_update(p, 0, d, 4, 200 + n);
			assert_int_equal(et_flush(p->s[TS]), 0); /* logged */
			both_update(p, 1, d + 4, 4, 210 + n);	 /* dirty */
			io_fault_set(ops[o], n, EIO, 0);
			ret = et_store_close(p->s[TS]);
			p->s[TS] = NULL;
			if (!io_fault_fired()) {
				io_fault_clear();
				assert_int_equal(ret, 0);
				free(at1);
				pair_finish(p); /* the store closed: 0 */
				break;
			}
			io_fault_clear();
			covered[o]++;
			assert_int_equal(ret, -EIO);
			open_store(p, TS);
			assert_int_equal(et_checkpoint_info(p->s[TS], &c1), 0);
			assert_int_equal(c1.id, 1);
			assert_int_equal(c1.commit, c0.commit);
			assert_false(c1.tables_moved);
			assert_int_equal(et_store_close(p->s[TS]), 0);
			p->s[TS] = NULL;
			got = image_read(p->dir[TS]);
			image_check(got, at1, "tables after a failed close");
			free(got);
			free(at1);
		}
	}
	assert_true(covered[0] >= 1 + NT); /* a log append, journals */
	assert_true(covered[1] >= 2 * NT); /* log and journal fsyncs */
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
				/* first appends since the open: each log's
				 * head block reloaded (a read) now */
				both_write(p, 0, ids, 1, 219);
				both_write(p, 1, ids, 1, 219);
				assert_int_equal(et_flush(p->s[TS]), 0);
				/* more dirty rows than the DDR holds:
				 * victims appended to the logs, no read */
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
 * A prefetch evicts 8 dirty rows; their write-back runs on the I/O thread
 * (an append to the row log of table a, buffered). The flush that writes
 * it fails with -EIO (variant 0), short (1) or -ENOSPC (2); every
 * operation is then refused with ET_EFAILED until et_flush succeeds;
 * nothing is lost; a later checkpoint succeeds and the files agree. Then
 * the same with a crash instead of the second flush: back to the
 * checkpoint.
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
			assert_int_equal(prefetch(p, TS, 1, lz, 8), 0);
			assert_int_equal(gather(p, TS, 1, lz, 8, out), 0);
			assert_int_equal(et_get_stats(p->s[TS], -1, &st), 0);
			assert_true(st.writebacks >= 8);
			if (v == 1)
				io_fault_set(IO_WRITE, 1, 0, 512);
			else
				io_fault_set(IO_WRITE, 1, v ? ENOSPC : EIO, 0);
			assert_int_equal(et_flush(p->s[TS]),
					 v == 1 ? ET_ESHORTIO
						: (v ? -ENOSPC : -EIO));
			assert_true(io_fault_fired());
			io_fault_clear();
			assert_refused(p);
			if (crash) {
				crash_check(p, at, 1);
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
			files_check(p, "files after failed prefetch writes");
			pair_finish(p);
		}
	}
}

/* ------------------------------------------------------ 5. allocations */

#define AMAX 512 /* ids per table of the largest call */

/* Call kind of a sequence on store w, with n ids a table (bags of one id):
 * a multi-table update, a multi-table gather, or a prefetch. */
static int alloc_step(struct pair *p, int w, int kind, uint64_t (*ids)[AMAX],
		      size_t n, uint32_t salt, float (*out)[AMAX * DIM])
{
	static uint64_t off[AMAX + 1];
	static float g[NT][AMAX * DIM];
	struct et_table_batch tb[NT];
	struct et_batch_ids b[NT];

	for (size_t i = 0; i <= AMAX; i++)
		off[i] = i;
	for (int t = 0; t < NT; t++) {
		values(g[t], n, salt + (uint32_t)t);
		tb[t] = (struct et_table_batch){.table = p->t[w][t],
						.ids = ids[t],
						.offsets = off,
						.nbags = n,
						.out = out[t],
						.grads = g[t]};
		b[t] = (struct et_batch_ids){
		    .table = p->t[w][t], .ids = ids[t], .n = n};
	}
	if (kind == 0)
		return et_update_pooled_multi(p->s[w], tb, NT, ET_POOL_SUM,
					      uparams);
	if (kind == 1)
		return et_gather_pooled_multi(p->s[w], tb, NT, ET_POOL_SUM);
	return et_prefetch(p->s[w], b, NT);
}

/*
 * An allocation fails (the mem_alloc seam) inside one call after another
 * of a training sequence on a store with tiny HBM and DDR tiers under
 * TinyLFU, where rows are refused, bypass the caches and queue their
 * write-backs; calls grow (8 to 512 ids a table) so that the write-back
 * queue grows in the middle of moving rows. Every call either succeeds,
 * or fails having changed no row (the reference skips it; et_flush, with
 * no fault, then succeeds), or the store says rows were lost to it:
 * et_flush returns ET_EFAILED, so does close, which commits nothing, and
 * a reopen gives the last commit. Never a row silently wrong: at the end
 * every row of both stores is the same. Each call gets one fault, at a
 * random allocation among its first 12.
 */
static void test_alloc_failure(void **state)
{
	static uint64_t ids[NT][AMAX];
	static float a[NT][AMAX * DIM], b[NT][AMAX * DIM];
	struct et_store_config c = small();
	unsigned fired = 0, failed = 0, lost = 0;

	c.hbm_bytes = 16 * (SLOT + ET_SLOT_META_BYTES);
	c.hbm_policy = ET_POLICY_TINYLFU;
	c.ddr_policy = ET_POLICY_TINYLFU;
	for (uint64_t seed = 1; seed <= 16; seed++) {
		struct pair *p = pair_new(*state, c);
		struct tu_rng rng;
		struct image *base;
		bool gone = false;

		tu_rng_seed(&rng, seed);
		history(p);
		assert_int_equal(et_checkpoint(p->s[TS], NULL, 0), 0);
		base = ref_image(p);
		for (int i = 0; i < 28 && !gone; i++) {
			size_t n = (size_t)8 << (i / 4 % 7); /* 8..512 */
			int kind = (int)tu_rng_below(&rng, 3), ret;

			for (int t = 0; t < NT; t++)
				for (size_t j = 0; j < n; j++)
					ids[t][j] = tu_rng_below(&rng, 2048) *
						    SPREAD % ROWS;
			mem_fault_set(1 + tu_rng_below(&rng, 12));
			ret = alloc_step(p, TS, kind, ids, n, 90 + (uint32_t)i,
					 a);
			fired += mem_fault_fired();
			mem_fault_clear();
			if (ret == 0) {
				assert_int_equal(alloc_step(p, RF, kind, ids, n,
							    90 + (uint32_t)i,
							    b),
						 0);
				if (kind == 1)
					for (int t = 0; t < NT; t++)
						assert_memory_equal(
						    a[t], b[t],
						    n * DIM * sizeof(float));
				continue;
			}
			assert_true(ret == -ENOMEM || ret == ET_EFAILED);
			/* no read of the failed call left in flight (its
			 * stage is the next call's) */
			assert_int_equal(io_pending(p->s[TS]->io), 0);
			failed++;
			ret = et_flush(p->s[TS]);
			if (ret == 0)
				continue; /* nothing changed: the ref skips */
			/* rows lost: refused from now on, nothing
			 * committed, the last commit at reopen */
			assert_int_equal(ret, ET_EFAILED);
			assert_int_equal(alloc_step(p, TS, 1, ids, 8, 0, a),
					 ET_EFAILED);
			assert_int_equal(et_store_close(p->s[TS]), ET_EFAILED);
			open_store(p, TS);
			assert_int_equal(et_store_close(p->s[TS]), 0);
			p->s[TS] = NULL;
			{
				struct image *im = image_read(p->dir[TS]);

				image_check(im, base, "lost: the last commit");
				free(im);
			}
			lost++;
			gone = true;
		}
		free(base);
		if (!gone) {
			pair_finish(p);
		} else {
			assert_int_equal(et_store_close(p->s[RF]), 0);
			p->s[RF] = NULL;
		}
	}
	printf("alloc faults: %u fired, %u calls failed, %u stores lost "
	       "rows\n",
	       fired, failed, lost);
	/* the faults reached calls, and some failed */
	assert_true(fired > 100);
	assert_true(failed > 10);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
	    T(test_read_error_gather),
	    T(test_short_read),
	    T(test_read_error_multi),
	    T(test_read_error_large_update),
	    T(test_merged_read_faults),
	    T(test_cleaner_read_error),
	    T(test_cleaner_short_read),
	    T(test_write_error_writeback),
	    T(test_enospc_writeback),
	    T(test_write_error_update_contract),
	    T(test_short_write_writeback),
	    T(test_window_fault),
	    T(test_write_error_flush),
	    T(test_fsync_error_flush),
	    T(test_write_error_checkpoint),
	    T(test_fsync_error_checkpoint),
	    T(test_journal_write_error_checkpoint),
	    T(test_journal_fsync_error_checkpoint),
	    T(test_checkpoint_fault_then_crash),
	    T(test_close_fault),
	    T(test_prefetch_read_error),
	    T(test_prefetch_write_error),
	    T(test_alloc_failure),
#undef T
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
