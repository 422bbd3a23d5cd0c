/*
 * test_prefetch.c - et_prefetch and the I/O thread behind it (GitHub issue
 * #4).
 *
 * Transparency first: a randomized, training-shaped sequence (per step i:
 * gather or pooled gather of batch i; prefetch of batch i+1, for one table,
 * for both at once through the et_batch_ids array, or for a table listed
 * twice; update or pooled update of batch i; now and then et_write_rows and
 * et_flush) runs on a store with every row in DDR and no prefetch, and side
 * by side on a prefetching store with tiny caches (HBM of a few dozen slots
 * or none, DDR of a few hundred, 2 to 8 ways) for LRU, LFU and mixed
 * policies, f32, f16 and bf16, SGD and row-wise Adagrad, and for tables
 * of very different dims (4 and 128, 64 and 16) whose row sizes are size
 * classes of their own in the small store. Tables have 10^5
 * rows and ids mix a hot set with a uniform tail, so rows go home to the
 * table files and the prefetches really read blocks through the I/O thread.
 * Every gather must be bit-identical, and so must every touched row (values
 * and optimizer state) read from the closed table files.
 *
 * Then one test per hazard of the pipeline, each on values worked out by
 * hand (tables start at zero or at a written pattern; SGD with lr 1 and
 * gradients that keep every value exact):
 *  (a) a row in batch i (updated) and in batch i+1 (prefetched);
 *  (b) a write-back of a block while a prefetch reads a row of the same
 *      block (rows r and r+1 of one block, tiny one-set DDR);
 *  (c) a gather of rows whose reads are still in flight (prefetch_late);
 *  (d) eviction pressure between a prefetch and the gather of its batch,
 *      and the pins of a batch surviving the use of its rows;
 *  (e) et_flush and et_store_close with reads and write-backs in flight,
 *      with the library's memory counter back at its baseline after close;
 *      and the other calls (table info, create, open, stats, a second
 *      prefetch) with jobs in flight.
 *
 * Fault injection through the process-wide seam in src/io/io.h: a read fault
 * under a prefetch installs nothing and the following gather still returns
 * the right values (the fault is one-shot and has fired in the I/O thread
 * before the gather's own read, which therefore succeeds); a write fault
 * under a prefetch whose victims are dirty makes the store refuse with
 * ET_EFAILED until et_flush, and loses nothing (compared with a reference
 * run), also when a read of the same prefetch reads the block whose write
 * failed. The prefetch counters are checked where a sequence fixes them.
 *
 * Last, three checks for sanitizer builds: rows narrower than the cache
 * slots (odd dims of f16/bf16, or a second table of smaller rows) moved
 * out of the I/O thread's job buffers must not be read past their end, and
 * two stores used by two threads at once must share no state.
 *
 * ET_PREFETCH_FILTER=<glob> runs only the matching tests (handy when a
 * sanitizer stops the program at the first report).
 */
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
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
#include "mem_host.h"
#include "util.h"

#define META	   ET_SLOT_META_BYTES
#define MAX_STORES 8
#define TROWS	   100000ULL

/* ---------------------------------------------------------------- fixture */

/* Store directories of a test, closed and removed by the teardown. */
struct fx {
	char *dirs[MAX_STORES];
	et_store *s[MAX_STORES];
	int n;
};

/* Buffers of the test in progress, freed by the teardown: a test that
 * fails half-way (cmocka jumps out of it) leaks nothing. */
static void **scratch_list;
static size_t scratch_n, scratch_cap;

static void *scratch(size_t n, size_t size)
{
	void *p = tu_calloc(n ? n : 1, size);

	if (scratch_n == scratch_cap) {
		size_t cap = scratch_cap ? 2 * scratch_cap : 64;
		void **l = realloc(scratch_list, cap * sizeof(*l));

		assert_non_null(l);
		scratch_list = l;
		scratch_cap = cap;
	}
	scratch_list[scratch_n++] = p;
	return p;
}

static void scratch_free_all(void)
{
	while (scratch_n)
		free(scratch_list[--scratch_n]);
	free(scratch_list);
	scratch_list = NULL;
	scratch_cap = 0;
}

static int setup(void **state)
{
	*state = tu_calloc(1, sizeof(struct fx));
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	io_fault_clear();
	for (int i = 0; i < f->n; i++) {
		et_store_close(f->s[i]);
		tu_rmtree(f->dirs[i]);
		free(f->dirs[i]);
	}
	free(f);
	scratch_free_all();
	return 0;
}

/* A fresh store directory (not created); returns its index. */
static int fx_new(struct fx *f)
{
	tu_require_uring();
	tu_require_direct();
	assert_true(f->n < MAX_STORES);
	f->dirs[f->n] = strdup(tu_path("pfstore"));
	assert_non_null(f->dirs[f->n]);
	return f->n++;
}

static et_store *fx_open(struct fx *f, int i, const struct et_store_config *c)
{
	assert_null(f->s[i]);
	assert_int_equal(et_store_open(f->dirs[i], c, &f->s[i]), 0);
	return f->s[i];
}

static void fx_close(struct fx *f, int i)
{
	et_store *s = f->s[i];

	f->s[i] = NULL;
	assert_int_equal(et_store_close(s), 0);
}

static struct et_stats stats_of(et_store *s, int table)
{
	struct et_stats st;

	assert_int_equal(et_get_stats(s, table, &st), 0);
	return st;
}

static uint32_t row_bytes_of(et_dtype dt, uint32_t dim, et_optim o)
{
	return dim * (dt == ET_F32 ? 4 : 2) +
	       (o == ET_OPT_ROWWISE_ADAGRAD ? 4 : 0);
}

/* Bytes of a cache tier of n slots of rows of rb bytes. */
static uint64_t tier_bytes(uint32_t rb, uint64_t n)
{
	return n * (((rb + 3) & ~3u) + META);
}

static void tfile_path(const char *dir, const char *name, char *out)
{
	snprintf(out, PATH_MAX, "%s/%s.et", dir, name);
}

/* ------------------------------------------------- hand-checked tables */

/*
 * One table "t" of 10^5 rows of 4 f32, SGD, zeros initializer, with what
 * every row must read in exp. Updates use lr 1 and gradients of halves, and
 * written values are multiples of 1/8 below 2^13: every result is exact.
 */
#define HDIM 4

struct ht {
	struct fx *f;
	int si;
	struct et_store_config cfg;
	et_store *s;
	int t;
	uint32_t rpb;
	float *exp;
};

static float pattern(uint64_t row, uint32_t c, float base)
{
	return (float)(row % 4096) * 0.5f + (float)c * 0.125f + base;
}

static void ht_reopen(struct ht *h)
{
	fx_close(h->f, h->si);
	h->s = fx_open(h->f, h->si, &h->cfg);
	assert_int_equal(et_table_open(h->s, "t", NULL, &h->t), 0);
}

/*
 * Opens a store with cfg and creates the table. If filled, rows [0, filled)
 * are written straight into the table file (every block of them then on
 * disk, none cached) with pattern(row, c, 1).
 */
static void ht_init(struct ht *h, struct fx *f,
		    const struct et_store_config *cfg, uint64_t filled)
{
	const struct et_table_params p = {
	    .rows = TROWS,
	    .dim = HDIM,
	    .dtype = ET_F32,
	    .optim = ET_OPT_SGD,
	    .init = ET_INIT_ZEROS,
	    .seed = 1,
	};
	struct et_table_info info;

	memset(h, 0, sizeof(*h));
	h->f = f;
	h->cfg = *cfg;
	h->si = fx_new(f);
	h->s = fx_open(f, h->si, cfg);
	assert_int_equal(et_table_create(h->s, "t", &p, &h->t), 0);
	assert_int_equal(et_table_info(h->s, h->t, &info), 0);
	h->rpb = info.rows_per_block;
	assert_true(h->rpb >= 2);
	h->exp = scratch(TROWS * HDIM, sizeof(float));
	if (filled) {
		char path[PATH_MAX];
		float *v = scratch(filled * HDIM, sizeof(float));
		et_tfile *tf;

		for (uint64_t r = 0; r < filled; r++)
			for (uint32_t c = 0; c < HDIM; c++)
				v[r * HDIM + c] = pattern(r, c, 1.0f);
		memcpy(h->exp, v, filled * HDIM * sizeof(float));
		fx_close(f, h->si);
		tfile_path(f->dirs[h->si], "t", path);
		assert_int_equal(et_tfile_open(path, 0, &tf), 0);
		assert_int_equal(et_tfile_write_range(tf, 0, filled, v), 0);
		assert_int_equal(et_tfile_sync(tf), 0);
		et_tfile_close(tf);
		h->s = fx_open(f, h->si, cfg);
		assert_int_equal(et_table_open(h->s, "t", NULL, &h->t), 0);
	}
}

/* Gathers ids and compares every value with exp, bit for bit. */
static void ht_check(struct ht *h, const uint64_t *ids, size_t n)
{
	float *out = scratch(n * HDIM, sizeof(float));

	assert_int_equal(et_gather(h->s, h->t, ids, n, out), 0);
	for (size_t i = 0; i < n; i++) {
		const float *e = h->exp + ids[i] * HDIM;

		if (memcmp(out + i * HDIM, e, HDIM * sizeof(float))) {
			print_error("row %llu: got %g %g %g %g, want %g %g "
				    "%g %g\n",
				    (unsigned long long)ids[i], out[i * HDIM],
				    out[i * HDIM + 1], out[i * HDIM + 2],
				    out[i * HDIM + 3], e[0], e[1], e[2], e[3]);
			fail();
		}
	}
}

/* et_update of distinct ids, every gradient g, lr 1; exp follows on 0. */
static int ht_update(struct ht *h, const uint64_t *ids, size_t n, float g)
{
	const struct et_update_params up = {.lr = 1.0f};
	float *gr = scratch(n * HDIM, sizeof(float));
	int ret;

	for (size_t i = 0; i < n * HDIM; i++)
		gr[i] = g;
	ret = et_update(h->s, h->t, ids, n, gr, &up);
	if (!ret)
		for (size_t i = 0; i < n; i++)
			for (uint32_t c = 0; c < HDIM; c++)
				h->exp[ids[i] * HDIM + c] -= g;
	return ret;
}

/* et_write_rows of pattern(row, c, base); exp follows on 0. */
static int ht_write(struct ht *h, const uint64_t *ids, size_t n, float base)
{
	float *v = scratch(n * HDIM, sizeof(float));
	int ret;

	for (size_t i = 0; i < n; i++)
		for (uint32_t c = 0; c < HDIM; c++)
			v[i * HDIM + c] = pattern(ids[i], c, base);
	ret = et_write_rows(h->s, h->t, ids, n, v);
	if (!ret)
		for (size_t i = 0; i < n; i++)
			memcpy(h->exp + ids[i] * HDIM, v + i * HDIM,
			       HDIM * sizeof(float));
	return ret;
}

static int ht_prefetch(struct ht *h, const uint64_t *ids, size_t n)
{
	const struct et_batch_ids b = {.table = h->t, .ids = ids, .n = n};

	return et_prefetch(h->s, &b, 1);
}

/* Reads ids from the closed table file and compares them with exp. */
static void ht_check_file(struct ht *h, const uint64_t *ids, size_t n)
{
	char path[PATH_MAX];
	float *out = scratch(n * HDIM, sizeof(float));
	et_tfile *tf;

	tfile_path(h->f->dirs[h->si], "t", path);
	assert_int_equal(et_tfile_open(path, ET_TFILE_RDONLY, &tf), 0);
	assert_int_equal(et_tfile_read_rows(tf, ids, n, out, NULL), 0);
	et_tfile_close(tf);
	for (size_t i = 0; i < n; i++)
		if (memcmp(out + i * HDIM, h->exp + ids[i] * HDIM,
			   HDIM * sizeof(float))) {
			print_error("file row %llu: got %g, want %g\n",
				    (unsigned long long)ids[i], out[i * HDIM],
				    h->exp[ids[i] * HDIM]);
			fail();
		}
}

/* A one-table store config with no HBM and a DDR of n slots, ways ways. */
static struct et_store_config ddr_only(uint64_t n, uint32_t ways, et_policy pol)
{
	struct et_store_config c = {
	    .ddr_bytes = tier_bytes(HDIM * 4, n),
	    .ways = ways,
	    .ddr_policy = pol,
	};

	return c;
}

/* ------------------------------------------- 1. transparency, randomized */

struct eq_case {
	const char *name;
	et_dtype dtype;
	et_optim optim;
	uint32_t dim[2];    /* of the two tables */
	uint32_t hbm_slots; /* 0: no HBM tier */
	uint32_t ddr_slots;
	uint32_t ways;
	et_policy hbm_policy, ddr_policy;
	uint32_t max_bags, max_len; /* batch shape */
	uint64_t seed;
	bool classes; /* the small store's slots sized per row (slot_bytes
		       * 0): its tiers divided between two size classes */
};

struct batch {
	uint64_t *ids;
	uint64_t *offs; /* nbags + 1 */
	size_t n, nbags;
};

#define EQ_STEPS 32
#define EQ_HOT	 160

static uint64_t draw_id(struct tu_rng *r, const uint64_t *hot)
{
	uint64_t k = tu_rng_below(r, 100);

	if (k < 55)
		return hot[tu_rng_below(r, EQ_HOT)];
	if (k < 62) /* a row next to a hot one: same block, other row */
		return (hot[tu_rng_below(r, EQ_HOT)] + 1) % TROWS;
	return tu_rng_below(r, TROWS);
}

static void batch_make(struct batch *b, struct tu_rng *r, const uint64_t *hot,
		       const struct eq_case *c)
{
	size_t cap = (size_t)c->max_bags * c->max_len;

	b->nbags = 1 + tu_rng_below(r, c->max_bags);
	b->ids = scratch(cap ? cap : 1, sizeof(uint64_t));
	b->offs = scratch(b->nbags + 1, sizeof(uint64_t));
	b->n = 0;
	for (size_t g = 0; g < b->nbags; g++) {
		/* an empty bag now and then */
		uint64_t len =
		    tu_rng_below(r, 9) ? 1 + tu_rng_below(r, c->max_len) : 0;

		for (uint64_t k = 0; k < len; k++)
			b->ids[b->n++] = draw_id(r, hot);
		b->offs[g + 1] = b->n;
	}
}

/* Rows touched, per table, for the final comparison of the files. */
struct touched {
	uint64_t *ids;
	size_t n, cap;
};

static void touch(struct touched *t, const uint64_t *ids, size_t n)
{
	assert_true(t->n + n <= t->cap);
	memcpy(t->ids + t->n, ids, n * sizeof(uint64_t));
	t->n += n;
}

static void eq_compare(const char *what, int step, int table, const float *a,
		       const float *b, size_t n)
{
	if (memcmp(a, b, n * sizeof(float)) == 0)
		return;
	for (size_t i = 0; i < n; i++)
		if (memcmp(a + i, b + i, sizeof(float))) {
			print_error("%s step %d table %d: value %zu: "
				    "reference %.9g, pipelined %.9g\n",
				    what, step, table, i, a[i], b[i]);
			break;
		}
	fail();
}

/* The two closed stores' files agree, values and state, on every row. */
static void compare_files(const char *da, const char *db, const char *name,
			  const uint64_t *ids, size_t n)
{
	char pa[PATH_MAX], pb[PATH_MAX];
	struct et_table_info ia;
	et_tfile *ta, *tb;
	float *va, *vb, *sa, *sb;

	tfile_path(da, name, pa);
	tfile_path(db, name, pb);
	assert_int_equal(et_tfile_open(pa, ET_TFILE_RDONLY, &ta), 0);
	assert_int_equal(et_tfile_open(pb, ET_TFILE_RDONLY, &tb), 0);
	assert_int_equal(et_tfile_info(ta, &ia), 0);
	va = scratch(n * ia.dim + 1, sizeof(float));
	vb = scratch(n * ia.dim + 1, sizeof(float));
	sa = scratch(n * ia.state_floats + 1, sizeof(float));
	sb = scratch(n * ia.state_floats + 1, sizeof(float));
	assert_int_equal(et_tfile_read_rows(ta, ids, n, va, sa), 0);
	assert_int_equal(et_tfile_read_rows(tb, ids, n, vb, sb), 0);
	et_tfile_close(ta);
	et_tfile_close(tb);
	for (size_t i = 0; i < n; i++) {
		if (memcmp(va + i * ia.dim, vb + i * ia.dim,
			   ia.dim * sizeof(float)) ||
		    memcmp(sa + i * ia.state_floats, sb + i * ia.state_floats,
			   ia.state_floats * sizeof(float))) {
			print_error("%s row %llu differs in the files: "
				    "%.9g vs %.9g\n",
				    name, (unsigned long long)ids[i],
				    va[i * ia.dim], vb[i * ia.dim]);
			fail();
		}
	}
}

static const char *const eq_names[2] = {"emb0", "emb1"};

/* The prefetch of step i+1's batches, in one of several shapes. */
static int eq_prefetch(et_store *s, const int *tid, struct batch *nb,
		       struct tu_rng *r, uint64_t *calls)
{
	struct et_batch_ids b[3];
	uint64_t k = tu_rng_below(r, 100);
	int ret = 0;

	for (int t = 0; t < 2; t++) {
		b[t].table = tid[t];
		b[t].ids = nb[t].ids;
		b[t].n = nb[t].n;
	}
	if (k < 35) { /* both tables, one call */
		ret = et_prefetch(s, b, 2);
		++*calls;
	} else if (k < 50) { /* both, the other order */
		struct et_batch_ids rb[2] = {b[1], b[0]};

		ret = et_prefetch(s, rb, 2);
		++*calls;
	} else if (k < 70) { /* a call per table */
		ret = et_prefetch(s, &b[0], 1);
		if (!ret)
			ret = et_prefetch(s, &b[1], 1);
		*calls += 2;
	} else if (k < 80) { /* table 0 twice in one call */
		b[2] = b[0];
		b[2].n = nb[0].n / 2;
		ret = et_prefetch(s, b, 3);
		++*calls;
	}
	/* else: no prefetch this step, the gathers miss */
	return ret;
}

static void run_eq_case(struct fx *f, const struct eq_case *c)
{
	const struct et_update_params up = {
	    .lr = c->optim == ET_OPT_ROWWISE_ADAGRAD ? 0.1f : 0.05f,
	};
	uint32_t rb0 = row_bytes_of(c->dtype, c->dim[0], c->optim);
	uint32_t rb1 = row_bytes_of(c->dtype, c->dim[1], c->optim);
	uint32_t rb = rb0 > rb1 ? rb0 : rb1;
	struct et_store_config ca = {
	    .ddr_bytes = 16ULL << 20,
	    .slot_bytes = rb,
	};
	struct et_store_config cb = {
	    .hbm_bytes = tier_bytes(rb, c->hbm_slots),
	    .ddr_bytes = tier_bytes(rb, c->ddr_slots),
	    .hbm_policy = c->hbm_policy,
	    .ddr_policy = c->ddr_policy,
	    .ways = c->ways,
	    .slot_bytes = c->classes ? 0 : rb,
	};
	struct batch bt[EQ_STEPS + 1][2];
	struct touched tch[2] = {{0}};
	uint64_t hot[EQ_HOT];
	struct tu_rng r;
	int ia = fx_new(f), ib = fx_new(f);
	et_store *sa = fx_open(f, ia, &ca), *sb = fx_open(f, ib, &cb);
	int ta[2], tb[2];
	uint64_t pf_calls = 0;
	size_t maxn = (size_t)c->max_bags * c->max_len + 8;
	uint32_t maxdim = c->dim[0] > c->dim[1] ? c->dim[0] : c->dim[1];
	float *oa = scratch(maxn * maxdim, sizeof(float));
	float *ob = scratch(maxn * maxdim, sizeof(float));
	float *gr = scratch(maxn * maxdim, sizeof(float));
	struct et_stats st;

	tu_rng_seed(&r, c->seed);
	for (int t = 0; t < 2; t++) {
		tch[t].cap = (EQ_STEPS + 1) * maxn + EQ_STEPS * 8;
		tch[t].ids = scratch(tch[t].cap, sizeof(uint64_t));
	}
	for (int t = 0; t < 2; t++) {
		const struct et_table_params p = {
		    .rows = TROWS,
		    .dim = c->dim[t],
		    .dtype = c->dtype,
		    .optim = c->optim,
		    .init = ET_INIT_UNIFORM,
		    .init_scale = 0.5f,
		    .seed = c->seed + (uint64_t)t,
		};

		assert_int_equal(et_table_create(sa, eq_names[t], &p, &ta[t]),
				 0);
		assert_int_equal(et_table_create(sb, eq_names[t], &p, &tb[t]),
				 0);
	}
	for (int k = 0; k < EQ_HOT; k++)
		hot[k] = (uint64_t)k * 619 % TROWS;
	for (int i = 0; i <= EQ_STEPS; i++)
		for (int t = 0; t < 2; t++) {
			batch_make(&bt[i][t], &r, hot, c);
			touch(&tch[t], bt[i][t].ids, bt[i][t].n);
		}
	/* The first batch is prefetched too, as a trainer would. */
	assert_int_equal(eq_prefetch(sb, tb, bt[0], &r, &pf_calls), 0);

	for (int i = 0; i < EQ_STEPS; i++) {
		bool pooled[2];
		et_pool mode[2];

		/* gather(i) */
		for (int t = 0; t < 2; t++) {
			struct batch *b = &bt[i][t];
			size_t nout;

			pooled[t] = tu_rng_below(&r, 3) != 0;
			mode[t] =
			    tu_rng_below(&r, 2) ? ET_POOL_MEAN : ET_POOL_SUM;
			if (pooled[t]) {
				nout = b->nbags * c->dim[t];
				assert_int_equal(
				    et_gather_pooled(sa, ta[t], b->ids, b->offs,
						     b->nbags, mode[t], oa),
				    0);
				assert_int_equal(
				    et_gather_pooled(sb, tb[t], b->ids, b->offs,
						     b->nbags, mode[t], ob),
				    0);
			} else {
				nout = b->n * c->dim[t];
				assert_int_equal(
				    et_gather(sa, ta[t], b->ids, b->n, oa), 0);
				assert_int_equal(
				    et_gather(sb, tb[t], b->ids, b->n, ob), 0);
			}
			eq_compare(c->name, i, t, oa, ob, nout);
		}
		/* prefetch(i + 1), on the pipelined store only */
		assert_int_equal(eq_prefetch(sb, tb, bt[i + 1], &r, &pf_calls),
				 0);
		if (tu_rng_below(&r, 12) == 0) /* stats drain early */
			st = stats_of(sb, -1);
		/* update(i) */
		for (int t = 0; t < 2; t++) {
			struct batch *b = &bt[i][t];
			size_t ng = pooled[t] ? b->nbags : b->n;

			if (tu_rng_below(&r, 5) == 0)
				continue;
			for (size_t k = 0; k < ng * c->dim[t]; k++)
				gr[k] = (float)tu_rng_double(&r, -1.0, 1.0);
			if (pooled[t]) {
				assert_int_equal(
				    et_update_pooled(sa, ta[t], b->ids, b->offs,
						     b->nbags, mode[t], gr,
						     &up),
				    0);
				assert_int_equal(
				    et_update_pooled(sb, tb[t], b->ids, b->offs,
						     b->nbags, mode[t], gr,
						     &up),
				    0);
			} else {
				assert_int_equal(
				    et_update(sa, ta[t], b->ids, b->n, gr, &up),
				    0);
				assert_int_equal(
				    et_update(sb, tb[t], b->ids, b->n, gr, &up),
				    0);
			}
		}
		/* write_rows: rows of the prefetched batch and others */
		if (tu_rng_below(&r, 5) == 0) {
			int t = (int)tu_rng_below(&r, 2);
			struct batch *nb = &bt[i + 1][t];
			uint64_t ids[8];
			size_t n = 1 + tu_rng_below(&r, 8);

			for (size_t k = 0; k < n; k++)
				ids[k] = nb->n && tu_rng_below(&r, 2)
					     ? nb->ids[tu_rng_below(&r, nb->n)]
					     : draw_id(&r, hot);
			for (size_t k = 0; k < n * c->dim[t]; k++)
				gr[k] = (float)tu_rng_double(&r, -2.0, 2.0);
			assert_int_equal(et_write_rows(sa, ta[t], ids, n, gr),
					 0);
			assert_int_equal(et_write_rows(sb, tb[t], ids, n, gr),
					 0);
			touch(&tch[t], ids, n);
		}
		if (tu_rng_below(&r, 10) == 0) {
			assert_int_equal(et_flush(sa), 0);
			assert_int_equal(et_flush(sb), 0);
		}
	}

	st = stats_of(sb, -1);
	assert_int_equal(st.prefetch_calls, pf_calls);
	assert_true(st.prefetch_rows > 0);
	/* The I/O thread read blocks. Not asked of the small batches (a few
	 * ids a step, of 160 hot rows): their prefetches find a row written
	 * home and evicted since only by chance, 0 to 5 times a run, as the
	 * placement of rows in sets falls. */
	if (c->max_bags * c->max_len >= 16) {
		assert_true(st.prefetch_reads > 0);
		assert_true(st.nvme_rows_read > 0);
	}
	assert_true(st.prefetch_hits > 0);
	assert_true(st.writebacks > 0);
	st = stats_of(sa, -1);
	assert_int_equal(st.prefetch_calls, 0);

	fx_close(f, ia);
	fx_close(f, ib);
	for (int t = 0; t < 2; t++) {
		compare_files(f->dirs[ia], f->dirs[ib], eq_names[t], tch[t].ids,
			      tch[t].n);
	}
}

static const struct eq_case eq_cases[] = {
    {"lru_f32_sgd_ddr",
     ET_F32,
     ET_OPT_SGD,
     {8, 8},
     0,
     96,
     2,
     ET_POLICY_LRU,
     ET_POLICY_LRU,
     10,
     4,
     101,
     false},
    {"lru_f32_adagrad_hbm",
     ET_F32,
     ET_OPT_ROWWISE_ADAGRAD,
     {8, 4},
     48,
     256,
     4,
     ET_POLICY_LRU,
     ET_POLICY_LRU,
     8,
     4,
     102,
     false},
    {"lfu_f16_sgd_hbm",
     ET_F16,
     ET_OPT_SGD,
     {8, 8},
     32,
     192,
     8,
     ET_POLICY_LFU,
     ET_POLICY_LFU,
     10,
     3,
     103,
     false},
    {"lfu_bf16_adagrad_ddr",
     ET_BF16,
     ET_OPT_ROWWISE_ADAGRAD,
     {16, 8},
     0,
     160,
     4,
     ET_POLICY_LFU,
     ET_POLICY_LFU,
     8,
     4,
     104,
     false},
    {"mixed_bf16_sgd_hbm_small_batches",
     ET_BF16,
     ET_OPT_SGD,
     {8, 6},
     40,
     200,
     2,
     ET_POLICY_LRU,
     ET_POLICY_LFU,
     4,
     2,
     105,
     false},
    {"mixed_f16_adagrad_hbm",
     ET_F16,
     ET_OPT_ROWWISE_ADAGRAD,
     {8, 8},
     64,
     320,
     8,
     ET_POLICY_LFU,
     ET_POLICY_LRU,
     12,
     3,
     106,
     false},
    {"lru_f32_adagrad_ddr_8way",
     ET_F32,
     ET_OPT_ROWWISE_ADAGRAD,
     {4, 4},
     0,
     320,
     8,
     ET_POLICY_LRU,
     ET_POLICY_LRU,
     12,
     4,
     107,
     false},
    {"lfu_f16_sgd_ddr_odd_dims",
     ET_F16,
     ET_OPT_SGD,
     {8, 5},
     0,
     128,
     4,
     ET_POLICY_LFU,
     ET_POLICY_LFU,
     8,
     3,
     108,
     false},
    {"dims_lru_f32_sgd_hbm",
     ET_F32,
     ET_OPT_SGD,
     {4, 128},
     48,
     256,
     4,
     ET_POLICY_LRU,
     ET_POLICY_LRU,
     8,
     4,
     109,
     true},
    {"dims_lfu_bf16_adagrad_ddr",
     ET_BF16,
     ET_OPT_ROWWISE_ADAGRAD,
     {64, 16},
     0,
     256,
     4,
     ET_POLICY_LFU,
     ET_POLICY_LFU,
     12,
     3,
     110,
     true},
};

#define EQ_TEST(k)                                                             \
	static void test_equiv_##k(void **state)                               \
	{                                                                      \
		run_eq_case(*state, &eq_cases[k]);                             \
	}
EQ_TEST(0)
EQ_TEST(1)
EQ_TEST(2)
EQ_TEST(3)
EQ_TEST(4)
EQ_TEST(5)
EQ_TEST(6)
EQ_TEST(7)
EQ_TEST(8)
EQ_TEST(9)

/* ------------------------------------------------------------ 2. hazards */

/*
 * (a) A row x in batch i and in batch i+1: gather(i); prefetch(i+1);
 * update(i); gather(i+1) must see the update. Two paths: x still cached
 * when the prefetch comes (it is only pinned again), and x bypassed by
 * gather(i) (three rows of batch i in one two-way set), so the prefetch
 * reads x from its file while update(i) is about to change it; the update
 * then drains the read first and applies to the installed row. Also with
 * et_write_rows in place of the update, and with an HBM tier, where x is
 * in DDR and the prefetch promotes it.
 */
static void hazard_both_batches(struct fx *f, const struct et_store_config *c,
				bool has_hbm)
{
	struct ht h;
	const uint64_t x = 3000, a1 = 1000, a2 = 2000, b = 4000;
	const uint64_t all[] = {a1, a2, x, b};
	const uint64_t bi1[] = {x, a1};
	const uint64_t bi[] = {a1, a2, x}, bn[] = {x, b};
	struct et_stats s0, s1;

	ht_init(&h, f, c, 0);
	/* every row on disk, none cached */
	assert_int_equal(ht_write(&h, all, 4, 2.0f), 0);
	ht_reopen(&h);

	/* x cached when prefetched */
	ht_check(&h, bi1, 2);
	assert_int_equal(ht_prefetch(&h, bn, 2), 0);
	assert_int_equal(ht_update(&h, bi1, 2, 0.5f), 0);
	ht_check(&h, bn, 2);

	/* x bypassed by gather(i), then read by the prefetch */
	ht_reopen(&h);
	s0 = stats_of(h.s, h.t);
	ht_check(&h, bi, 3);
	s1 = stats_of(h.s, h.t);
	if (!has_hbm)
		assert_int_equal(
		    s1.conflict_unique_misses - s0.conflict_unique_misses, 1);
	assert_int_equal(ht_prefetch(&h, bn, 2), 0);
	assert_int_equal(ht_update(&h, bi, 3, -1.5f), 0);
	ht_check(&h, bn, 2);
	s0 = stats_of(h.s, h.t);
	if (!has_hbm)
		assert_true(s0.prefetch_reads - s1.prefetch_reads >= 1);

	/* et_write_rows of x between the prefetch and the gather */
	ht_check(&h, bi, 3);
	assert_int_equal(ht_prefetch(&h, bn, 2), 0);
	assert_int_equal(ht_write(&h, &x, 1, 7.0f), 0);
	assert_int_equal(ht_update(&h, bi, 2, 0.5f), 0);
	ht_check(&h, bn, 2);
	ht_check(&h, all, 4);

	fx_close(f, h.si);
	ht_check_file(&h, all, 4);
}

static void test_hazard_row_in_both_batches(void **state)
{
	struct fx *f = *state;
	struct et_store_config c = ddr_only(2, 2, ET_POLICY_LRU);

	hazard_both_batches(f, &c, false);
	/* HBM of one two-way set over a DDR of two two-way sets */
	c.hbm_bytes = tier_bytes(HDIM * 4, 2);
	c.ddr_bytes = tier_bytes(HDIM * 4, 4);
	hazard_both_batches(f, &c, true);
}

/*
 * (b) Rows r and r+1 share a block. r is dirty in a one-set DDR; a prefetch
 * of [L, r+1], L a row never written, places L at once (no I/O), evicting r:
 * the I/O thread then writes r's block back and reads r+1 from the same
 * block, in that order. Both must read right afterwards, from the caches and
 * from the file. Two-way LRU: r+1 is installed (evicting a clean row) and
 * its gather is a prefetch hit; one-way: r+1 finds the set pinned by L and
 * is skipped, then read on demand. Then the roles of r and r+1 swap.
 */
static void hazard_wb_and_read(struct fx *f, uint32_t ways)
{
	struct et_store_config c = ddr_only(ways, ways, ET_POLICY_LRU);
	struct ht h;
	uint64_t r, x, L = 90000;
	struct et_stats s0, s1;

	ht_init(&h, f, &c, 0);
	r = 20 * (uint64_t)h.rpb;
	x = 30 * (uint64_t)h.rpb + 5;
	assert_int_equal(r / h.rpb, (r + 1) / h.rpb);
	assert_true(L / h.rpb != r / h.rpb && L / h.rpb != x / h.rpb);
	{
		const uint64_t w[] = {r, r + 1, x};

		assert_int_equal(ht_write(&h, w, 3, 3.0f), 0);
	}
	ht_reopen(&h);

	for (int round = 0; round < 2; round++) {
		uint64_t dirty = round ? r + 1 : r; /* written back */
		uint64_t read = round ? r : r + 1;  /* prefetched */
		const uint64_t pf[] = {L + (uint64_t)round, read};

		/* Two empty batches: the last round's pins are released. */
		assert_int_equal(et_prefetch(h.s, NULL, 0), 0);
		assert_int_equal(et_prefetch(h.s, NULL, 0), 0);

		assert_int_equal(ht_update(&h, &dirty, 1, 0.5f), 0);
		if (ways > 1)
			ht_check(&h, &x, 1); /* younger than dirty */
		s0 = stats_of(h.s, -1);
		assert_int_equal(ht_prefetch(&h, pf, 2), 0);
		ht_check(&h, &read, 1);
		s1 = stats_of(h.s, -1);
		assert_int_equal(s1.prefetch_reads - s0.prefetch_reads, 1);
		assert_int_equal(s1.writebacks - s0.writebacks, 1);
		assert_true(s1.log_rows_written - s0.log_rows_written >= 1);
		if (ways > 1) {
			assert_int_equal(s1.prefetch_hits - s0.prefetch_hits,
					 1);
		} else {
			assert_int_equal(
			    s1.prefetch_skipped - s0.prefetch_skipped, 1);
			assert_int_equal(s1.prefetch_hits - s0.prefetch_hits,
					 0);
		}
		ht_check(&h, &dirty, 1);
		ht_check(&h, &pf[0], 1);
	}
	{
		const uint64_t all[] = {r, r + 1, x, L, L + 1};

		ht_check(&h, all, 5);
		fx_close(f, h.si);
		ht_check_file(&h, all, 5);
	}
}

static void test_hazard_writeback_and_read_same_block(void **state)
{
	hazard_wb_and_read(*state, 2);
	hazard_wb_and_read(*state, 1);
}

/*
 * (c) A prefetch of 256 rows from 256 different blocks and, at once, a
 * gather of the same rows: the gather waits for the read in flight and
 * returns the file's values. Whether the read is still in flight when the
 * gather begins is up to the scheduler, so the pair is repeated on fresh
 * rows until prefetch_late has counted some (the first try, in practice).
 */
static void test_hazard_gather_in_flight(void **state)
{
	struct fx *f = *state;
	struct et_store_config c = ddr_only(4096, 16, ET_POLICY_LRU);
	struct ht h;
	uint64_t ids[256];
	struct et_stats s0, s1;
	int tries;

	ht_init(&h, f, &c, TROWS);
	for (tries = 0; tries < 20; tries++) {
		for (int j = 0; j < 256; j++)
			ids[j] = ((uint64_t)j * 383 + (uint64_t)tries) % TROWS;
		s0 = stats_of(h.s, h.t);
		assert_int_equal(ht_prefetch(&h, ids, 256), 0);
		ht_check(&h, ids, 256);
		s1 = stats_of(h.s, h.t);
		assert_int_equal(s1.prefetch_reads - s0.prefetch_reads, 256);
		assert_int_equal(s1.prefetch_hits - s0.prefetch_hits, 256);
		assert_int_equal(s1.unique_misses - s0.unique_misses, 0);
		assert_int_equal(s1.nvme_rows_read - s0.nvme_rows_read, 256);
		if (s1.prefetch_late > s0.prefetch_late) {
			assert_true(s1.prefetch_late - s0.prefetch_late <= 256);
			assert_true(s1.prefetch_wait_ns > s0.prefetch_wait_ns);
			break;
		}
	}
	assert_true(tries < 20);
}

/*
 * (d) Eviction pressure: batch B (half on disk, half never written) is
 * prefetched, then thousands of other rows are gathered and updated through
 * caches much smaller than them before B is gathered. B's rows stay pinned:
 * every one is a prefetch hit and none misses. Then one batch ahead: B1 and
 * B2 prefetched in turn with pressure after each; B1 is still pinned (as the
 * batch before the last) when it is gathered. With and without HBM; the top
 * tier can hold both batches.
 */
static void hazard_pressure(struct fx *f, bool hbm)
{
	struct et_store_config c = ddr_only(1024, 16, ET_POLICY_LRU);
	struct ht h;
	uint64_t b1[64], b2[64], other[256];
	struct et_stats s0, s1;
	uint64_t seq = 0;

	if (hbm) {
		c.hbm_bytes = tier_bytes(HDIM * 4, 1024);
		c.ddr_bytes = tier_bytes(HDIM * 4, 64);
		c.ways = 16;
		c.ddr_policy = ET_POLICY_LFU;
	}
	ht_init(&h, f, &c, 50000);
	for (int j = 0; j < 64; j++) {
		/* even: on disk; odd: never written (>= 50000) */
		uint64_t u = (uint64_t)j;

		b1[j] = j % 2 ? 50000 + u * 577 : u * 701;
		b2[j] = j % 2 ? 50001 + u * 613 : u * 709 + 1;
	}

	for (int phase = 0; phase < 2; phase++) {
		s0 = stats_of(h.s, h.t);
		assert_int_equal(ht_prefetch(&h, b1, 64), 0);
		for (int k = 0; k < 12; k++) {
			for (int j = 0; j < 256; j++)
				other[j] = 90000 + (seq++ * 37) % 10000;
			if (k % 3 == 2)
				assert_int_equal(
				    ht_update(&h, other, 256, 0.5f), 0);
			else
				ht_check(&h, other, 256);
			if (phase == 1 && k == 5)
				assert_int_equal(ht_prefetch(&h, b2, 64), 0);
		}
		s1 = stats_of(h.s, h.t);
		ht_check(&h, b1, 64);
		s0 = stats_of(h.s, h.t);
		assert_int_equal(s0.prefetch_hits - s1.prefetch_hits, 64);
		assert_int_equal(s0.unique_misses - s1.unique_misses, 0);
		assert_int_equal(s0.prefetch_skipped, 0);
		if (phase == 1) {
			s1 = s0;
			ht_check(&h, b2, 64);
			s0 = stats_of(h.s, h.t);
			assert_int_equal(s0.prefetch_hits - s1.prefetch_hits,
					 64);
			assert_int_equal(s0.unique_misses - s1.unique_misses,
					 0);
		}
		/* the pressure reached the files (write-backs wait for the
		 * next prefetch or a flush) */
		assert_int_equal(et_flush(h.s), 0);
		s0 = stats_of(h.s, h.t);
		assert_true(s0.writebacks > 0);
		/* fresh rows for the next phase */
		for (int j = 0; j < 64; j++)
			b1[j] += 3;
	}
}

static void test_hazard_eviction_pressure(void **state)
{
	hazard_pressure(*state, false);
	hazard_pressure(*state, true);
}

/*
 * (d, continued) Pins of a batch must survive the use of its rows. The
 * header: "The rows of this batch and of the one before it stay pinned
 * (never evicted) until the call after next". One-set, four-way LRU DDR:
 *
 *   1. set = {o1..o4}; prefetch(A = {a1, a2}) evicts o1, o2;
 *      gather(A) (the trainer's gather(i)); prefetch(B = {b1, b2, b3}):
 *      A is the batch before the last and stays pinned, so b1, b2 take
 *      o3, o4 and b3 finds every way pinned (skipped); update(A) then
 *      finds both rows of A in the cache.
 *   2. set = {p1..p4}; prefetch(C = {x, y}); update({x}) (x in batch i and
 *      i+1); three gathers of other rows; gather(C) finds x: it is pinned
 *      for C.
 */
static void test_hazard_pins_survive_use(void **state)
{
	struct fx *f = *state;
	struct et_store_config c = ddr_only(4, 4, ET_POLICY_LRU);
	struct ht h;
	struct et_stats s0, s1;
	const uint64_t o[] = {100, 200, 300, 400};
	const uint64_t A[] = {500, 600}, B[] = {700, 800, 900};
	const uint64_t p[] = {1100, 1200, 1300, 1400};
	const uint64_t C[] = {1500, 1600}, q[] = {1700, 1800, 1900};
	uint64_t miss_a, skip_b, miss_c;

	ht_init(&h, f, &c, 0);

	/* 1. batch A, gathered, then batch B prefetched */
	for (int k = 0; k < 4; k++)
		ht_check(&h, &o[k], 1);
	assert_int_equal(ht_prefetch(&h, A, 2), 0);
	ht_check(&h, A, 2);
	s0 = stats_of(h.s, h.t);
	assert_int_equal(ht_prefetch(&h, B, 3), 0);
	assert_int_equal(ht_update(&h, A, 2, 0.5f), 0);
	s1 = stats_of(h.s, h.t);
	miss_a = s1.unique_misses - s0.unique_misses;
	skip_b = s1.prefetch_skipped - s0.prefetch_skipped;
	ht_check(&h, A, 2);
	ht_check(&h, B, 3);

	/* 2. two empty batches let every pin go; x in batch i and C */
	assert_int_equal(et_prefetch(h.s, NULL, 0), 0);
	assert_int_equal(et_prefetch(h.s, NULL, 0), 0);
	for (int k = 0; k < 4; k++)
		ht_check(&h, &p[k], 1);
	assert_int_equal(ht_prefetch(&h, C, 2), 0);
	assert_int_equal(ht_update(&h, &C[0], 1, 0.5f), 0);
	for (int k = 0; k < 3; k++)
		ht_check(&h, &q[k], 1);
	s0 = stats_of(h.s, h.t);
	ht_check(&h, C, 2);
	s1 = stats_of(h.s, h.t);
	miss_c = s1.unique_misses - s0.unique_misses;

	if (miss_a || skip_b != 1)
		print_error("batch A lost its pins when gathered: update(A) "
			    "missed %llu rows, prefetch(B) skipped %llu "
			    "(want 0 and 1)\n",
			    (unsigned long long)miss_a,
			    (unsigned long long)skip_b);
	if (miss_c)
		print_error("row x of batch C lost its pin when updated: "
			    "gather(C) missed %llu rows (want 0)\n",
			    (unsigned long long)miss_c);
	assert_int_equal(miss_a, 0);
	assert_int_equal(skip_b, 1);
	assert_int_equal(miss_c, 0);
}

/*
 * (e) et_flush and et_store_close right after a prefetch whose reads and
 * dirty victims' write-backs are still with the I/O thread. Afterwards every
 * row reads right, through a new store and from the file, and the library's
 * host memory counter is back where it was before the store was opened.
 */
static void hazard_close(struct fx *f, bool hbm, size_t drift[2])
{
	struct et_store_config c = ddr_only(64, 4, ET_POLICY_LRU);
	struct ht h;
	uint64_t d[48], p1[128], p2[128], all[48 + 256];
	size_t base, after[2];
	struct et_stats st;

	if (hbm) {
		c.hbm_bytes = tier_bytes(HDIM * 4, 32);
		c.ddr_bytes = tier_bytes(HDIM * 4, 64);
	}
	for (int j = 0; j < 48; j++)
		d[j] = (uint64_t)j * 1013 + 7;
	for (int j = 0; j < 128; j++) {
		p1[j] = (uint64_t)j * 389 + 11 + (j % 2 ? 50000 : 0);
		p2[j] = (uint64_t)j * 383 + 13 + (j % 2 ? 50000 : 0);
	}
	memcpy(all, d, sizeof(d));
	memcpy(all + 48, p1, sizeof(p1));
	memcpy(all + 48 + 128, p2, sizeof(p2));

	base = mem_in_use();
	ht_init(&h, f, &c, 50000); /* p1, p2: half on disk, half not */
	/* dirty rows, then a prefetch that evicts them, then flush */
	assert_int_equal(ht_update(&h, d, 48, 0.5f), 0);
	assert_int_equal(ht_prefetch(&h, p1, 128), 0);
	assert_int_equal(et_flush(h.s), 0);
	st = stats_of(h.s, -1);
	assert_true(st.prefetch_reads > 0);
	assert_int_equal(st.ddr.dirty_rows + st.hbm.dirty_rows, 0);
	ht_check(&h, all, 48 + 256);

	/* again, then close at once */
	assert_int_equal(ht_update(&h, d, 48, -1.0f), 0);
	assert_int_equal(ht_prefetch(&h, p2, 128), 0);
	fx_close(f, h.si);
	h.s = NULL;
	after[0] = mem_in_use();
	ht_check_file(&h, all, 48 + 256);

	/* and a close with only a prefetch before it */
	h.s = fx_open(f, h.si, &c);
	assert_int_equal(et_table_open(h.s, "t", NULL, &h.t), 0);
	assert_int_equal(ht_update(&h, d, 48, 0.5f), 0);
	assert_int_equal(ht_prefetch(&h, p1, 128), 0);
	fx_close(f, h.si);
	after[1] = mem_in_use();
	h.s = fx_open(f, h.si, &c);
	assert_int_equal(et_table_open(h.s, "t", NULL, &h.t), 0);
	ht_check(&h, all, 48 + 256);
	fx_close(f, h.si);
	ht_check_file(&h, all, 48 + 256);
	drift[0] = after[0] - base;
	drift[1] = after[1] - base;
}

/* The memory checks come last, so that both variants' values are checked
 * whatever they say. */
static void test_hazard_close_in_flight(void **state)
{
	size_t drift[2][2];

	hazard_close(*state, false, drift[0]);
	hazard_close(*state, true, drift[1]);
	for (int k = 0; k < 2; k++) {
		if (drift[k][0] || drift[k][1])
			print_error("%s: host memory counted after close: %zu "
				    "and %zu bytes more than before open\n",
				    k ? "hbm" : "ddr", drift[k][0],
				    drift[k][1]);
		assert_int_equal(drift[k][0], 0);
		assert_int_equal(drift[k][1], 0);
	}
}

/*
 * Calls other than batch operations while a prefetch's write-backs and
 * reads are with the I/O thread: et_table_info, et_get_stats,
 * et_table_create, et_table_open of a name already open (-EEXIST), and a
 * second et_prefetch at once (the first batch then is the one before the
 * last, still pinned). Everything the gathers then return is right, and
 * both batches are prefetch hits.
 */
static void test_hazard_other_calls_in_flight(void **state)
{
	struct fx *f = *state;
	struct et_store_config c = ddr_only(256, 8, ET_POLICY_LRU);
	const struct et_table_params p = {
	    .rows = 1000,
	    .dim = HDIM,
	    .init = ET_INIT_ZEROS,
	};
	struct ht h;
	uint64_t d[224], b1[32], b2[32], wb0;
	struct et_table_info info;
	struct et_stats s0, s1;
	float out[32 * HDIM];
	int u, u2;

	ht_init(&h, f, &c, 50000);
	for (int j = 0; j < 224; j++)
		d[j] = (uint64_t)j * 211 + 1;
	for (int j = 0; j < 32; j++) {
		/* half on disk, half never written */
		b1[j] = (uint64_t)j * 1543 + 2 + (j % 2 ? 50000 : 0);
		b2[j] = (uint64_t)j * 1511 + 3 + (j % 2 ? 50000 : 0);
	}
	/* most of the cache dirty, then evicted by the rows never written */
	assert_int_equal(ht_update(&h, d, 224, 0.5f), 0);
	wb0 = stats_of(h.s, -1).writebacks;
	assert_int_equal(ht_prefetch(&h, b1, 32), 0);
	assert_int_equal(et_table_info(h.s, h.t, &info), 0);
	assert_true(info.blocks_written > 0);
	assert_int_equal(ht_prefetch(&h, b2, 32), 0);
	s0 = stats_of(h.s, -1);
	assert_int_equal(ht_prefetch(&h, b1, 32), 0); /* b1 again: cached */
	assert_int_equal(et_table_create(h.s, "u", &p, &u), 0);
	assert_int_equal(et_table_open(h.s, "u", NULL, &u2), -EEXIST);
	assert_int_equal(et_gather(h.s, u, d, 16, out), ET_EROWRANGE);
	{
		const uint64_t small[] = {1, 2, 999};

		assert_int_equal(et_gather(h.s, u, small, 3, out), 0);
		for (int k = 0; k < 3 * HDIM; k++)
			assert_true(out[k] == 0.0f);
	}
	ht_check(&h, b2, 32);
	ht_check(&h, b1, 32);
	s1 = stats_of(h.s, -1);
	/* b1 and b2, each placed by a prefetch and first used here */
	assert_int_equal(s1.prefetch_skipped, 0);
	assert_int_equal(s1.prefetch_hits - s0.prefetch_hits, 64);
	assert_true(s1.writebacks > wb0);
	ht_check(&h, d, 224);
	ht_reopen(&h);
	ht_check(&h, d, 224);
	ht_check(&h, b1, 32);
	ht_check(&h, b2, 32);
}

/* ----------------------------------------------------- 3. fault injection */

/*
 * A read fault under a prefetch. The prefetch returns 0 (it returns before
 * the disk); the I/O thread's read fails and drain() installs nothing (no
 * insert, no row read counted, even when only the third of the job's block
 * reads failed). The fault is one-shot and has fired before the gather's
 * own read, so the gather reads the rows on demand and returns the right
 * values. Where the error of a demand read surfaces is checked too: a
 * gather whose own read fails returns -EIO and leaves the store usable.
 */
static void test_fault_read_under_prefetch(void **state)
{
	struct fx *f = *state;
	struct et_store_config c = ddr_only(2048, 16, ET_POLICY_LRU);
	struct ht h;
	uint64_t ids[5][64];
	struct et_stats s0, s1;
	float *out;

	ht_init(&h, f, &c, TROWS);
	/* rows at least three blocks apart: one read request per row */
	for (int k = 0; k < 5; k++)
		for (int j = 0; j < 64; j++)
			ids[k][j] =
			    ((uint64_t)j * 4 * h.rpb + (uint64_t)k) % TROWS;
	out = scratch(64 * HDIM, sizeof(float));

	for (int k = 0; k < 2; k++) {
		s0 = stats_of(h.s, -1);
		io_fault_set(IO_READ, k ? 3 : 1, EIO, 0);
		assert_int_equal(ht_prefetch(&h, ids[k], 64), 0);
		s1 = stats_of(h.s, -1); /* drains: the read has failed */
		assert_true(io_fault_fired());
		io_fault_clear();
		assert_int_equal(s1.prefetch_calls - s0.prefetch_calls, 1);
		assert_int_equal(s1.prefetch_reads - s0.prefetch_reads, 64);
		assert_int_equal(s1.ddr.inserts, s0.ddr.inserts);
		assert_int_equal(s1.ddr.resident_rows, s0.ddr.resident_rows);
		assert_int_equal(s1.nvme_rows_read, s0.nvme_rows_read);
		ht_check(&h, ids[k], 64);
		s0 = stats_of(h.s, -1);
		assert_int_equal(s0.prefetch_hits, s1.prefetch_hits);
		assert_int_equal(s0.nvme_rows_read - s1.nvme_rows_read, 64);
	}

	/* armed while the read may or may not have started: same outcome */
	assert_int_equal(ht_prefetch(&h, ids[2], 64), 0);
	io_fault_set(IO_READ, 1, EIO, 0);
	ht_check(&h, ids[2], 64);
	io_fault_clear();

	/* the error of a demand read surfaces at the operation, once */
	io_fault_set(IO_READ, 1, EIO, 0);
	assert_int_equal(et_gather(h.s, h.t, ids[3], 64, out), -EIO);
	io_fault_clear();
	ht_check(&h, ids[3], 64);
	/* a failed prefetch read, then a failed demand read of its rows */
	io_fault_set(IO_READ, 1, EIO, 0);
	assert_int_equal(ht_prefetch(&h, ids[4], 64), 0);
	s0 = stats_of(h.s, -1);
	assert_true(io_fault_fired());
	io_fault_set(IO_READ, 1, EIO, 0);
	assert_int_equal(et_gather(h.s, h.t, ids[4], 64, out), -EIO);
	io_fault_clear();
	ht_check(&h, ids[4], 64);
	s1 = stats_of(h.s, -1);
	assert_int_equal(s1.prefetch_hits, s0.prefetch_hits);

	fx_close(f, h.si);
	ht_check_file(&h, ids[0], 64);
}

/*
 * Misses read from a table's blocks go straight from the read's stage into
 * the slots placed for them. Batches of 600 rows (duplicates, rows on disk,
 * rows never written, rows changed since and so read from the row log)
 * through caches smaller than one batch: gathered, updated, a read failing
 * halfway through a batch (rows already put in their slots must not stay
 * there), checkpointed, and gathered again after a reopen, bit for bit.
 */
static void prebuilt_reads(struct fx *f, bool hbm)
{
	struct et_store_config c = ddr_only(512, 16, ET_POLICY_LRU);
	const uint64_t span = 60000; /* the last 10000 never written */
	/* a ring of 8: a stage of 32 blocks in segments of 4, so that a
	 * batch's blocks go through many segments */
	uint64_t ids[600], all[3000], nread = 0;
	struct et_stats s0, s1;
	float *out = scratch(600 * HDIM, sizeof(float));
	struct ht h;

	c.io_depth = 8;
	if (hbm) {
		c.hbm_bytes = tier_bytes(HDIM * 4, 256);
		c.ways = 16;
	}
	ht_init(&h, f, &c, 50000);
	s0 = stats_of(h.s, h.t);
	for (uint64_t round = 0; round < 8; round++) {
		/* 7919 is prime to span: 598 distinct rows, then two again */
		for (uint64_t j = 0; j < 598; j++)
			ids[j] = (j * 7919 + round * 131) % span;
		ids[598] = ids[0];
		ids[599] = ids[1];
		ht_check(&h, ids, 600);
		if (round % 2 == 0)
			assert_int_equal(ht_update(&h, ids, 300, 0.5f), 0);
		if (round == 3) {
			/* the 12th read fails: the rows of the segments
			 * before it are in their slots already */
			for (uint64_t j = 0; j < 598; j++)
				ids[j] = (j * 7919 + 77) % span;
			io_fault_set(IO_READ, 12, EIO, 0);
			assert_int_equal(et_gather(h.s, h.t, ids, 598, out),
					 -EIO);
			io_fault_clear();
			ht_check(&h, ids, 598);
		}
		if (round == 5) {
			assert_int_equal(et_checkpoint(h.s, NULL, 0), 0);
			s1 = stats_of(h.s, h.t);
			nread = s1.nvme_rows_read - s0.nvme_rows_read;
			ht_reopen(&h);
			s0 = stats_of(h.s, h.t);
		}
	}
	s1 = stats_of(h.s, h.t);
	nread += s1.nvme_rows_read - s0.nvme_rows_read;
	assert_true(nread > 2000);
	for (uint64_t k = 0; k < span; k += 3000) {
		for (uint64_t j = 0; j < 3000; j++)
			all[j] = (k + j * 1009) % span;
		ht_check(&h, all, 3000);
	}
	fx_close(f, h.si);
}

static void test_prebuilt_reads(void **state)
{
	prebuilt_reads(*state, false);
	prebuilt_reads(*state, true);
}

/*
 * A write fault under a prefetch whose victims are dirty. A one-set, 8-way
 * DDR holds 8 dirty rows; a prefetch of 8 rows never written places them at
 * once and hands the 8 victims to the I/O thread, whose first write fails.
 * The prefetch returns 0; every operation after it is refused with
 * ET_EFAILED; et_flush (after io_fault_clear) succeeds and clears it; and
 * nothing is lost: a reference store that saw the same sequence without
 * prefetch or fault ends with the same files. The second round closes the
 * store straight after the failure instead of flushing.
 */
static void fault_write(struct fx *f, et_dtype dt, uint32_t dim)
{
	const struct et_update_params up = {.lr = 0.25f};
	const struct et_table_params p = {
	    .rows = TROWS,
	    .dim = dim,
	    .dtype = dt,
	    .optim = ET_OPT_ROWWISE_ADAGRAD,
	    .init = ET_INIT_UNIFORM,
	    .seed = 5,
	};
	uint32_t rb = row_bytes_of(dt, dim, p.optim);
	struct et_store_config cr = {.ddr_bytes = 8ULL << 20};
	struct et_store_config ct = {
	    .ddr_bytes = tier_bytes(rb, 8),
	    .ways = 8,
	};
	int ir = fx_new(f), it = fx_new(f);
	et_store *sr = fx_open(f, ir, &cr), *st = fx_open(f, it, &ct);
	struct et_batch_ids pb = {.n = 8};
	int tr, tt;
	uint64_t d[8], lz[8], all[16 * 2];
	float *g = scratch(8 * dim, sizeof(float));
	float *oa = scratch(8 * dim, sizeof(float));
	float *ob = scratch(8 * dim, sizeof(float));
	const uint64_t off[3] = {0, 4, 8};

	assert_int_equal(et_table_create(sr, "w", &p, &tr), 0);
	assert_int_equal(et_table_create(st, "w", &p, &tt), 0);
	pb.table = tt;
	for (size_t k = 0; k < 8 * dim; k++)
		g[k] = (float)(k % 7) * 0.25f - 0.75f;

	for (int round = 0; round < 2; round++) {
		for (int j = 0; j < 8; j++) {
			d[j] = (uint64_t)j * 1231 + 3 + (uint64_t)round;
			/* never written: fresh blocks each round */
			lz[j] =
			    60000 + (uint64_t)j * 4099 + (uint64_t)round * 2000;
			all[round * 16 + j] = d[j];
			all[round * 16 + 8 + j] = lz[j];
		}
		/* Two empty batches: the last round's pins are released. */
		assert_int_equal(et_prefetch(st, NULL, 0), 0);
		assert_int_equal(et_prefetch(st, NULL, 0), 0);
		/* the 8 rows dirty, in the one set of the tested store */
		for (int k = 0; k < 2; k++) {
			assert_int_equal(et_update(sr, tr, d, 8, g, &up), 0);
			assert_int_equal(et_update(st, tt, d, 8, g, &up), 0);
		}
		assert_int_equal(stats_of(st, -1).ddr.dirty_rows, 8);

		/* the victims' write-back runs on the I/O thread into the
		 * row log's buffer; the flush that writes it fails */
		pb.ids = lz;
		assert_int_equal(et_prefetch(st, &pb, 1), 0);
		assert_int_equal(et_gather(st, tt, d, 8, ob), 0);
		io_fault_set(IO_WRITE, 1, EIO, 0);
		assert_int_equal(et_flush(st), -EIO);
		assert_true(io_fault_fired());
		io_fault_clear();
		assert_int_equal(et_gather(st, tt, d, 8, ob), ET_EFAILED);
		assert_int_equal(
		    et_gather_pooled(st, tt, d, off, 2, ET_POOL_SUM, ob),
		    ET_EFAILED);
		assert_int_equal(et_update(st, tt, d, 8, g, &up), ET_EFAILED);
		assert_int_equal(et_write_rows(st, tt, d, 8, g), ET_EFAILED);
		assert_int_equal(et_prefetch(st, &pb, 1), ET_EFAILED);
		if (round == 0) {
			assert_int_equal(et_flush(st), 0);
		} else {
			fx_close(f, it);
			st = fx_open(f, it, &ct);
			assert_int_equal(et_table_open(st, "w", NULL, &tt), 0);
			pb.table = tt;
		}
		/* the refused operations, now accepted, on both stores */
		assert_int_equal(et_update(sr, tr, d, 8, g, &up), 0);
		assert_int_equal(et_update(st, tt, d, 8, g, &up), 0);
		assert_int_equal(et_update(sr, tr, lz, 8, g, &up), 0);
		assert_int_equal(et_update(st, tt, lz, 8, g, &up), 0);
		assert_int_equal(et_gather(sr, tr, d, 8, oa), 0);
		assert_int_equal(et_gather(st, tt, d, 8, ob), 0);
		assert_memory_equal(oa, ob, 8 * dim * sizeof(float));
		assert_int_equal(et_gather(sr, tr, lz, 8, oa), 0);
		assert_int_equal(et_gather(st, tt, lz, 8, ob), 0);
		assert_memory_equal(oa, ob, 8 * dim * sizeof(float));
	}
	fx_close(f, ir);
	fx_close(f, it);
	compare_files(f->dirs[ir], f->dirs[it], "w", all, 32);
}

static void test_fault_write_under_prefetch(void **state)
{
	fault_write(*state, ET_F32, 8);
}

/*
 * The same with rows of 5 f16 and the Adagrad state: 10 + 4 = 14 bytes,
 * cached in 16-byte slots. drain() puts the rows of the failed
 * write-back job back in the queue; the job holds rows of row_bytes each,
 * and a queue entry is a slot: the copy must not read past the job's last
 * row (an AddressSanitizer build checks it).
 */
static void test_fault_write_narrow_rows(void **state)
{
	fault_write(*state, ET_F16, 5);
}

/*
 * Prefetched rows installed where the HBM set is full of this batch's pins
 * go to DDR instead (place_row -> ddr_place). The rows come from the I/O
 * thread's job buffer, row_bytes apart; a slot is larger here (5 bf16 =
 * 10 bytes in 12-byte slots): the copy into DDR must not read past the
 * job's last row (checked by AddressSanitizer). Values must be right.
 */
static void test_install_conflict_narrow_rows(void **state)
{
	struct fx *f = *state;
	const struct et_table_params p = {
	    .rows = TROWS,
	    .dim = 5,
	    .dtype = ET_BF16,
	    .init = ET_INIT_UNIFORM,
	    .seed = 9,
	};
	struct et_store_config c = {
	    .hbm_bytes = tier_bytes(10, 2),
	    .ddr_bytes = tier_bytes(10, 256),
	    .ways = 2,
	};
	int i = fx_new(f);
	et_store *s = fx_open(f, i, &c);
	uint64_t ids[6];
	float v[6 * 5], out[6 * 5];
	struct et_batch_ids b = {.ids = ids, .n = 6};
	struct et_stats st;
	int t;

	assert_int_equal(et_table_create(s, "n", &p, &t), 0);
	b.table = t;
	for (int j = 0; j < 6; j++)
		ids[j] = (uint64_t)j * 3001 + 17;
	for (int k = 0; k < 30; k++)
		v[k] = (float)k * 0.5f - 4.0f; /* exact in bf16 */
	assert_int_equal(et_write_rows(s, t, ids, 6, v), 0);
	fx_close(f, i);
	s = fx_open(f, i, &c);
	assert_int_equal(et_table_open(s, "n", NULL, &t), 0);
	b.table = t;
	assert_int_equal(et_prefetch(s, &b, 1), 0);
	st = stats_of(s, -1);
	assert_int_equal(st.prefetch_reads, 6);
	assert_int_equal(st.hbm.resident_rows, 2);
	assert_int_equal(st.ddr.resident_rows, 4);
	assert_int_equal(et_gather(s, t, ids, 6, out), 0);
	assert_memory_equal(out, v, sizeof(v));
}

/*
 * A write fault after a prefetch that writes back and reads rows of one
 * block: r is dirty and evicted by prefetch [L, r+1] (as in hazard (b));
 * its write-back goes to the row log's buffer, and the read of r+1 (from
 * the block file) installs the right value. The flush that writes r fails:
 * every operation is refused until et_flush succeeds; then both rows read
 * right, and so do the files.
 */
static void test_fault_write_same_block_as_read(void **state)
{
	struct fx *f = *state;
	struct et_store_config c = ddr_only(2, 2, ET_POLICY_LRU);
	struct ht h;
	uint64_t r, x, pf[2];
	struct et_stats s0, s1;
	float out[HDIM];

	ht_init(&h, f, &c, 0);
	r = 40 * (uint64_t)h.rpb;
	x = 41 * (uint64_t)h.rpb + 9;
	{
		const uint64_t w[] = {r, r + 1, x};

		assert_int_equal(ht_write(&h, w, 3, 5.0f), 0);
	}
	ht_reopen(&h);
	assert_int_equal(ht_update(&h, &r, 1, -0.5f), 0);
	ht_check(&h, &x, 1);
	pf[0] = 95000;
	pf[1] = r + 1;
	s0 = stats_of(h.s, -1);
	assert_int_equal(ht_prefetch(&h, pf, 2), 0);
	assert_int_equal(et_gather(h.s, h.t, &r, 1, out), 0);
	s1 = stats_of(h.s, -1);
	assert_int_equal(s1.writebacks, s0.writebacks + 1);
	/* r + 1 by the prefetch, r by the gather (from the log's buffer) */
	assert_int_equal(s1.nvme_rows_read - s0.nvme_rows_read, 2);
	io_fault_set(IO_WRITE, 1, EIO, 0);
	assert_int_equal(et_flush(h.s), -EIO);
	assert_true(io_fault_fired());
	io_fault_clear();
	assert_int_equal(et_gather(h.s, h.t, &r, 1, out), ET_EFAILED);
	assert_int_equal(et_flush(h.s), 0);
	s0 = stats_of(h.s, -1);
	ht_check(&h, &pf[1], 1);
	s1 = stats_of(h.s, -1);
	assert_int_equal(s1.prefetch_hits - s0.prefetch_hits, 1);
	ht_check(&h, &r, 1);
	ht_check(&h, pf, 2);
	fx_close(f, h.si);
	{
		const uint64_t all[] = {r, r + 1, x, 95000};

		ht_check_file(&h, all, 4);
	}
}

/* ------------------------------------------------------------- 4. stats */

/* A pooled gather (sum, one id a bag) of ids through the multi-table
 * call, compared with exp bit for bit. */
static void ht_check_multi(struct ht *h, const uint64_t *ids, size_t n)
{
	float *out = scratch(n * HDIM, sizeof(float));
	uint64_t *off = scratch(n + 1, sizeof(uint64_t));
	struct et_table_batch b = {
	    .table = h->t, .ids = ids, .offsets = off, .nbags = n, .out = out};

	for (size_t i = 0; i <= n; i++)
		off[i] = i;
	assert_int_equal(et_gather_pooled_multi(h->s, &b, 1, ET_POOL_SUM), 0);
	for (size_t i = 0; i < n; i++)
		assert_memory_equal(out + i * HDIM, h->exp + ids[i] * HDIM,
				    HDIM * sizeof(float));
}

/*
 * (f) The operations on a prefetched batch reuse the slots the prefetch
 * found (the memo): a table of another row size created in between
 * reallocates the caches smaller (the slots mean nothing then), and rows
 * the batch's pins no longer hold may have moved. The gathers must read
 * right either way (under ASan, a stale slot past the new caches would
 * fail here too).
 */
static void test_memo_after_moves(void **state)
{
	struct fx *f = *state;
	struct et_store_config c = ddr_only(512, 4, ET_POLICY_LRU);
	const struct et_table_params p2 = {.rows = 1000,
					   .dim = 64,
					   .dtype = ET_F32,
					   .optim = ET_OPT_SGD,
					   .init = ET_INIT_ZEROS,
					   .seed = 1};
	uint64_t a[64], b[64];
	struct ht h;
	int t2;

	c.hbm_bytes = tier_bytes(HDIM * 4, 256);
	for (int j = 0; j < 64; j++) {
		a[j] = (uint64_t)j * 1009 + 3;
		b[j] = (uint64_t)j * 997 + 5;
	}
	ht_init(&h, f, &c, 0);
	assert_int_equal(ht_write(&h, a, 64, 2.0f), 0);
	assert_int_equal(ht_write(&h, b, 64, 3.0f), 0);

	/* a training step's order: the memo is used */
	assert_int_equal(ht_prefetch(&h, a, 64), 0);
	ht_check_multi(&h, a, 64);
	ht_check_multi(&h, a, 64);

	/* the caches reallocated between the prefetch and the gather */
	assert_int_equal(ht_prefetch(&h, b, 64), 0);
	assert_int_equal(et_table_create(h.s, "wide", &p2, &t2), 0);
	ht_check_multi(&h, b, 64);

	/* the batch's pins gone, then other rows through the small tiers */
	assert_int_equal(ht_prefetch(&h, a, 64), 0);
	assert_int_equal(et_prefetch(h.s, NULL, 0), 0);
	assert_int_equal(et_prefetch(h.s, NULL, 0), 0);
	ht_check(&h, b, 64);
	assert_int_equal(ht_update(&h, b, 64, 0.5f), 0);
	ht_check_multi(&h, a, 64);
	assert_int_equal(et_flush(h.s), 0);
	ht_check_multi(&h, a, 64);
}

/*
 * Counters where the sequence fixes them: prefetch_calls per call (errors
 * refused before counting anything), prefetch_rows = distinct rows per table
 * (a row id in two tables is two rows), prefetch_reads = those on disk and
 * not cached, rows_lazy = those never written, prefetch_hits = rows a gather
 * then found in the top tier because the prefetch put them there (not rows
 * that were there already), and the counters store-wide whatever table is
 * asked for.
 */
static void test_stats_prefetch(void **state)
{
	struct fx *f = *state;
	const struct et_table_params p = {
	    .rows = TROWS,
	    .dim = 4,
	    .init = ET_INIT_NORMAL,
	    .seed = 3,
	};
	struct et_store_config c = {
	    .hbm_bytes = tier_bytes(16, 512),
	    .ddr_bytes = tier_bytes(16, 512),
	    .ways = 16,
	};
	int i = fx_new(f), t0, t1;
	et_store *s = fx_open(f, i, &c);
	/* t0: 4 rows on disk, 6 never written, 2 cached; duplicates */
	const uint64_t a[] = {10000, 20000, 30000, 40000, 70001, 70002,
			      70003, 70004, 70005, 50000, 10000, 20000,
			      70001, 900,   901,   50000};
	/* t1: 3 on disk, 3 never written (50000 is in t0's batch too) */
	const uint64_t bb[] = {11000, 21000, 31000, 50000,
			       80001, 80002, 11000, 50000};
	const uint64_t disk0[] = {10000, 20000, 30000, 40000};
	const uint64_t disk1[] = {11000, 21000, 31000};
	const uint64_t cached[] = {900, 901};
	struct et_batch_ids b[2];
	struct et_stats s0, s1, s2;
	float out[16 * 4], v[4 * 4] = {0};
	uint64_t bad = TROWS;

	assert_int_equal(et_table_create(s, "s0", &p, &t0), 0);
	assert_int_equal(et_table_create(s, "s1", &p, &t1), 0);
	assert_int_equal(et_write_rows(s, t0, disk0, 4, v), 0);
	assert_int_equal(et_write_rows(s, t1, disk1, 3, v), 0);
	fx_close(f, i);
	s = fx_open(f, i, &c);
	assert_int_equal(et_table_open(s, "s0", NULL, &t0), 0);
	assert_int_equal(et_table_open(s, "s1", NULL, &t1), 0);
	assert_int_equal(et_gather(s, t0, cached, 2, out), 0);
	b[0] = (struct et_batch_ids){t0, a, 16};
	b[1] = (struct et_batch_ids){t1, bb, 8};

	s0 = stats_of(s, -1);
	assert_int_equal(s0.prefetch_calls, 0);
	/* refused: nothing counted */
	assert_int_equal(et_prefetch(s, NULL, 1), -EINVAL);
	b[1].ids = &bad;
	b[1].n = 1;
	assert_int_equal(et_prefetch(s, b, 2), ET_EROWRANGE);
	b[1] = (struct et_batch_ids){7, bb, 8};
	assert_int_equal(et_prefetch(s, b, 2), ET_ENOTABLE);
	b[1] = (struct et_batch_ids){t1, NULL, 3};
	assert_int_equal(et_prefetch(s, b, 2), -EINVAL);
	b[1] = (struct et_batch_ids){t1, bb, 8};
	s1 = stats_of(s, -1);
	assert_memory_equal(&s0, &s1, offsetof(struct et_stats, mem_bytes));

	assert_int_equal(et_prefetch(s, b, 2), 0);
	s1 = stats_of(s, -1);
	assert_int_equal(s1.prefetch_calls, 1);
	assert_int_equal(s1.prefetch_rows, 12 + 6);
	assert_int_equal(s1.prefetch_reads, 4 + 3);
	assert_int_equal(s1.nvme_rows_read - s0.nvme_rows_read, 4 + 3);
	assert_int_equal(s1.rows_lazy - s0.rows_lazy, 6 + 3);
	assert_int_equal(s1.prefetch_skipped, 0);
	assert_int_equal(s1.prefetch_hits, 0);
	assert_int_equal(et_gather(s, t0, a, 16, out), 0);
	assert_int_equal(et_gather(s, t1, bb, 8, out), 0);
	s2 = stats_of(s, -1);
	assert_int_equal(s2.prefetch_hits, 10 + 6);
	assert_int_equal(s2.unique_misses - s1.unique_misses, 0);
	/* per table: the same store-wide prefetch counters */
	s0 = stats_of(s, t1);
	assert_int_equal(s0.prefetch_calls, s2.prefetch_calls);
	assert_int_equal(s0.prefetch_rows, s2.prefetch_rows);
	assert_int_equal(s0.prefetch_hits, s2.prefetch_hits);

	/* everything cached now: nothing read, nothing more to hit */
	assert_int_equal(et_prefetch(s, b, 2), 0);
	assert_int_equal(et_gather(s, t0, a, 16, out), 0);
	assert_int_equal(et_gather(s, t1, bb, 8, out), 0);
	s1 = stats_of(s, -1);
	assert_int_equal(s1.prefetch_calls, 2);
	assert_int_equal(s1.prefetch_rows, 2 * 18);
	assert_int_equal(s1.prefetch_reads, 7);
	assert_int_equal(s1.prefetch_hits, 16);

	/* an empty prefetch is a call with no rows */
	assert_int_equal(et_prefetch(s, NULL, 0), 0);
	s2 = stats_of(s, -1);
	assert_int_equal(s2.prefetch_calls, 3);
	assert_int_equal(s2.prefetch_rows, s1.prefetch_rows);
}

/* ------------------------------------------ independent stores, threads */

/*
 * "Distinct handles are independent": two threads, each with its own
 * pipelined store, run the same sequence (write-backs every step, so each
 * sorts its write-back queue in wb_run and wb_submit). No cmocka assertion
 * in the threads: each records its first error. Their files must then be
 * identical. A ThreadSanitizer build reports any state the two share.
 */
struct thr {
	char *dir;
	int err;
};

static int thr_run(const char *dir)
{
	const struct et_table_params p = {
	    .rows = TROWS,
	    .dim = 8,
	    .init = ET_INIT_UNIFORM,
	    .seed = 4,
	};
	const struct et_store_config c = {
	    .ddr_bytes = tier_bytes(32, 64),
	    .ways = 4,
	};
	const struct et_update_params up = {.lr = 0.5f};
	uint64_t ids[64];
	float g[64 * 8], out[64 * 8];
	struct tu_rng r;
	et_store *s;
	int t[2], ret;

	ret = et_store_open(dir, &c, &s);
	if (ret)
		return ret;
	ret = et_table_create(s, "a", &p, &t[0]);
	if (!ret)
		ret = et_table_create(s, "b", &p, &t[1]);
	tu_rng_seed(&r, 77);
	for (int i = 0; i < 40 && !ret; i++) {
		struct et_batch_ids b;

		for (int j = 0; j < 64; j++)
			ids[j] = tu_rng_below(&r, 4000) * 23;
		for (int j = 0; j < 64 * 8; j++)
			g[j] = (float)(j % 5) * 0.125f;
		b = (struct et_batch_ids){t[i % 2], ids, 64};
		ret = et_prefetch(s, &b, 1);
		if (!ret)
			ret = et_gather(s, t[i % 2], ids, 64, out);
		if (!ret)
			ret = et_update(s, t[i % 2], ids, 64, g, &up);
	}
	if (ret) {
		et_store_close(s);
		return ret;
	}
	return et_store_close(s);
}

static void *thr_main(void *arg)
{
	struct thr *t = arg;

	t->err = thr_run(t->dir);
	return NULL;
}

static void test_two_stores_in_threads(void **state)
{
	struct fx *f = *state;
	struct thr th[2];
	pthread_t pt[2];
	uint64_t ids[4000];

	for (int k = 0; k < 2; k++) {
		th[k].dir = f->dirs[fx_new(f)];
		th[k].err = 0;
		assert_int_equal(pthread_create(&pt[k], NULL, thr_main, &th[k]),
				 0);
	}
	for (int k = 0; k < 2; k++) {
		assert_int_equal(pthread_join(pt[k], NULL), 0);
		assert_int_equal(th[k].err, 0);
	}
	for (int j = 0; j < 4000; j++)
		ids[j] = (uint64_t)j * 23;
	compare_files(th[0].dir, th[1].dir, "a", ids, 4000);
	compare_files(th[0].dir, th[1].dir, "b", ids, 4000);
}

/*
 * The prefetch's work on the store's threads (prefetch.c, pf_probe_all):
 * batches whose rows are all in DDR are probed, and their hits touched
 * and pinned, a table an item; batches with misses are placed table by
 * table. The policy words must come out as one thread leaves them: after
 * steps of all-hit batches (4 tables, one of them named twice in some
 * batches) and then of batches with new rows (misses whose placements
 * evict by those words), a store with 1 thread and one with 3 have the
 * same counters, hit for hit and eviction for eviction, and the same
 * rows.
 */
#define TS_TABLES 4
#define TS_ROWS	  512
#define TS_DIM	  8
#define TS_BATCH  TS_ROWS

/* n tables of TS_DIM (f32, SGD): TS_ROWS rows each, the one after
 * TS_TABLES 2^20; seeds from seed on. */
static void ts_tables(et_store *s, int n, uint64_t seed, int *t)
{
	for (int k = 0; k < n; k++) {
		struct et_table_params p = {.rows = k < TS_TABLES ? TS_ROWS
								  : 1 << 20,
					    .dim = TS_DIM,
					    .dtype = ET_F32,
					    .optim = ET_OPT_SGD,
					    .init = ET_INIT_UNIFORM,
					    .seed = seed + (uint64_t)k};
		char name[8];

		snprintf(name, sizeof(name), "t%d", k);
		assert_int_equal(et_table_create(s, name, &p, &t[k]), 0);
	}
}

/* The n tables ts_tables made, in a reopened store. */
static void ts_tables_open(et_store *s, int n, int *t)
{
	for (int k = 0; k < n; k++) {
		char name[8];

		snprintf(name, sizeof(name), "t%d", k);
		assert_int_equal(et_table_open(s, name, NULL, &t[k]), 0);
	}
}

static void threads_run(const char *dir, uint32_t threads, struct et_stats *out,
			float *rows)
{
	/* 1.5 slots a row of tables 0-3 in sets of 64 ways: all of them
	 * fit; table 4's new rows then evict */
	const struct et_store_config c = {.ddr_bytes =
					      3 * TS_TABLES * TS_ROWS / 2 *
					      (TS_DIM * 4 + ET_SLOT_META_BYTES),
					  .ways = 64,
					  .threads = threads};
	struct et_update_params up = {.lr = 0.5f};
	static uint64_t ids[2][TS_TABLES + 1][TS_BATCH], all[TS_ROWS * 8];
	static uint64_t offs[TS_BATCH + 1];
	static float vals[TS_ROWS * 8 * TS_DIM];
	static float out_b[TS_TABLES + 1][TS_BATCH * TS_DIM];
	static float grads[TS_BATCH * TS_DIM];
	struct et_table_batch tb[TS_TABLES + 1];
	struct et_batch_ids bi[TS_TABLES + 1];
	struct tu_rng r;
	et_store *s;
	int t[TS_TABLES + 1], ntab[2];

	assert_int_equal(et_store_open(dir, &c, &s), 0);
	ts_tables(s, TS_TABLES + 1, 7, t);
	for (uint64_t i = 0; i < TS_ROWS; i++)
		all[i] = i;
	for (int k = 0; k < TS_TABLES; k++) /* every row in DDR */
		assert_int_equal(et_gather(s, t[k], all, TS_ROWS, vals), 0);
	for (int b = 0; b <= TS_BATCH; b++)
		offs[b] = (uint64_t)b;
	for (int i = 0; i < TS_BATCH * TS_DIM; i++)
		grads[i] = (float)((i % 7) - 3) / 8.0f;
	tu_rng_seed(&r, 99);
	/* 30 steps of all-hit batches, then 30 with table 4's new rows */
	/* 6 steps whose batches are every row of tables 0-3 in a new order
	 * (the last policy words of every row are theirs), then 3 that add
	 * 512 new rows of table 4 each, and the rows of 0-3 they evict are
	 * the ones those words make the oldest */
	for (int step = 0; step < 10; step++) {
		int nx = step & 1, cur = nx ^ 1;
		size_t nb = 0;
		int nt;

		ntab[nx] = nt = step < 6 ? TS_TABLES : TS_TABLES + 1;
		for (int k = 0; k < nt; k++) {
			for (int i = 0; i < TS_BATCH; i++)
				ids[nx][k][i] =
				    k < TS_TABLES
					? (step < 6 ? (uint64_t)i
						    : tu_rng_below(&r, 16))
					: tu_rng_below(&r, 1 << 20);
			if (k < TS_TABLES && step < 6)
				tu_shuffle_u64(&r, ids[nx][k], TS_BATCH);
		}
		for (int k = 0; k < nt; k++)
			bi[nb++] = (struct et_batch_ids){
			    .table = t[k], .ids = ids[nx][k], .n = TS_BATCH};
		if (step == 3) /* a table twice: table by table */
			bi[nb++] = bi[0];
		assert_int_equal(et_prefetch(s, bi, nb), 0);
		if (!step)
			continue;
		nt = ntab[cur]; /* the batch prefetched the step before */
		for (int k = 0; k < nt; k++)
			tb[k] = (struct et_table_batch){.table = t[k],
							.ids = ids[cur][k],
							.offsets = offs,
							.nbags = TS_BATCH,
							.out = out_b[k],
							.grads = grads};
		/* one call, as the prefetch named the tables: the
		 * operations use its memo and touch nothing again */
		assert_int_equal(
		    et_gather_pooled_multi(s, tb, (size_t)nt, ET_POOL_SUM), 0);
		assert_int_equal(
		    et_update_pooled_multi(s, tb, (size_t)nt, ET_POOL_SUM, &up),
		    0);
	}
	/* rows 0-199 of each table read back: how many of them the new
	 * rows evicted says which rows the policy words made the oldest */
	for (int k = 0; k < TS_TABLES; k++)
		assert_int_equal(et_gather(s, t[k], all, 200, vals), 0);
	assert_int_equal(et_get_stats(s, -1, out), 0);
	for (int k = 0; k < TS_TABLES; k++)
		assert_int_equal(et_gather(s, t[k], all, TS_ROWS,
					   rows + (size_t)k * TS_ROWS * TS_DIM),
				 0);
	assert_int_equal(et_store_close(s), 0);
}

static void test_threads_same_policy_words(void **state)
{
	struct fx *f = *state;
	struct et_stats a, b;
	float *ra = tu_calloc((size_t)TS_TABLES * TS_ROWS * TS_DIM, 4);
	float *rb = tu_calloc((size_t)TS_TABLES * TS_ROWS * TS_DIM, 4);

	threads_run(f->dirs[fx_new(f)], 1, &a, ra);
	threads_run(f->dirs[fx_new(f)], 3, &b, rb);
	assert_true(a.ddr.evictions > 0); /* the words decided something */
	assert_int_equal(a.ddr.hits, b.ddr.hits);
	assert_int_equal(a.ddr.misses, b.ddr.misses);
	assert_int_equal(a.ddr.evictions, b.ddr.evictions);
	assert_int_equal(a.unique_misses, b.unique_misses);
	assert_int_equal(a.writebacks, b.writebacks);
	assert_int_equal(a.prefetch_hits, b.prefetch_hits);
	assert_memory_equal(ra, rb, (size_t)TS_TABLES * TS_ROWS * TS_DIM * 4);
	free(ra);
	free(rb);
}

/*
 * A DDR with a slot for every row is direct-mapped (a slot a row): a
 * prefetch of all tables at once then finds each row by its tag alone
 * and, with threads, readies the batch's hits on them (the rows a
 * prefetch placed and nothing used yet listed as well: prefetch_hits). Steps of prefetch,
 * pooled gather and update over four tables (every row read into DDR
 * first) give the same outputs at every step and the same rows with
 * 1 and 3 threads as a store whose class is not direct (a fifth table of
 * 2^20 rows, never used, in the same class: set-associative, 16 ways).
 */
#define DR_STEPS 8

static void direct_run(const char *dir, uint32_t threads, bool assoc,
		       struct et_stats *st, uint64_t *pf1, float *outs,
		       float *rows)
{
	const struct et_store_config c = {.ddr_bytes =
					      2 * TS_TABLES * TS_ROWS *
					      (TS_DIM * 4 + ET_SLOT_META_BYTES),
					  .threads = threads};
	struct et_update_params up = {.lr = 0.25f};
	static uint64_t ids[2][TS_TABLES][TS_BATCH], all[TS_ROWS];
	static uint64_t offs[TS_BATCH / 4 + 1];
	static float grads[TS_BATCH / 4 * TS_DIM];
	struct et_table_batch tb[TS_TABLES];
	struct et_batch_ids bi[TS_TABLES];
	struct tu_rng r;
	et_store *s;
	int t[TS_TABLES + 1];

	assert_int_equal(et_store_open(dir, &c, &s), 0);
	ts_tables(s, TS_TABLES + assoc, 31, t);
	for (uint64_t i = 0; i < TS_ROWS; i++)
		all[i] = i;
	for (int b = 0; b <= TS_BATCH / 4; b++)
		offs[b] = (uint64_t)b * 4; /* bags of 4 ids */
	for (int i = 0; i < TS_BATCH / 4 * TS_DIM; i++)
		grads[i] = (float)((i % 5) - 2) / 16.0f;
	/* every row in DDR but the first half of the last table's: the
	 * first batch's prefetch places those (and no table after it probes
	 * again); prefetched once more, every row is then a hit, some not
	 * used since a prefetch placed them */
	for (int k = 0; k < TS_TABLES; k++)
		assert_int_equal(
		    et_gather(s, t[k],
			      all + (k + 1 < TS_TABLES ? 0 : TS_ROWS / 2),
			      k + 1 < TS_TABLES ? TS_ROWS : TS_ROWS / 2, rows),
		    0);
	tu_rng_seed(&r, 5);
	for (int step = 0; step <= DR_STEPS; step++) {
		int nx = step & 1, cur = nx ^ 1;

		/* ids repeat within a batch: duplicates in the bags */
		for (int k = 0; k < TS_TABLES; k++) {
			for (int i = 0; i < TS_BATCH; i++)
				ids[nx][k][i] = tu_rng_below(&r, TS_ROWS);
			bi[k] = (struct et_batch_ids){
			    .table = t[k], .ids = ids[nx][k], .n = TS_BATCH};
		}
		assert_int_equal(et_prefetch(s, bi, TS_TABLES), 0);
		if (!step) {
			assert_int_equal(et_prefetch(s, bi, TS_TABLES), 0);
			continue;
		}
		for (int k = 0; k < TS_TABLES; k++)
			tb[k] = (struct et_table_batch){
			    .table = t[k],
			    .ids = ids[cur][k],
			    .offsets = offs,
			    .nbags = TS_BATCH / 4,
			    .out = outs + (((size_t)step - 1) * TS_TABLES + k) *
					      TS_BATCH / 4 * TS_DIM,
			    .grads = grads};
		assert_int_equal(
		    et_gather_pooled_multi(s, tb, TS_TABLES, ET_POOL_SUM), 0);
		assert_int_equal(
		    et_update_pooled_multi(s, tb, TS_TABLES, ET_POOL_SUM, &up),
		    0);
		if (step == 1) { /* the placed rows' first use counted */
			assert_int_equal(et_get_stats(s, -1, st), 0);
			*pf1 = st->prefetch_hits;
		}
	}
	assert_int_equal(et_get_stats(s, -1, st), 0);
	for (int k = 0; k < TS_TABLES; k++)
		assert_int_equal(et_gather(s, t[k], all, TS_ROWS,
					   rows + (size_t)k * TS_ROWS * TS_DIM),
				 0);
	assert_int_equal(et_store_close(s), 0);
}

static void test_direct_threads_same_rows(void **state)
{
	struct fx *f = *state;
	size_t no = (size_t)DR_STEPS * TS_TABLES * TS_BATCH / 4 * TS_DIM,
	       nr = (size_t)TS_TABLES * TS_ROWS * TS_DIM;
	float *o[3], *rw[3];
	struct et_stats st[3];
	uint64_t pf1[3];

	for (int v = 0; v < 3; v++) {
		o[v] = tu_calloc(no, sizeof(float));
		rw[v] = tu_calloc(nr, sizeof(float));
		direct_run(f->dirs[fx_new(f)], v ? 3 : 1, v == 2, &st[v],
			   &pf1[v], o[v], rw[v]);
	}
	assert_int_equal(st[0].ddr.direct_rows, TS_TABLES * TS_ROWS);
	assert_int_equal(st[1].ddr.direct_rows, TS_TABLES * TS_ROWS);
	assert_int_equal(st[2].ddr.direct_rows, 0);
	for (int v = 0; v < 3; v++) {
		assert_int_equal(st[v].ddr.evictions, 0);
		assert_true(pf1[v] > 0);
	}
	for (int v = 1; v < 3; v++) {
		assert_int_equal(st[v].ddr.hits, st[0].ddr.hits);
		assert_int_equal(st[v].ddr.misses, st[0].ddr.misses);
		assert_int_equal(st[v].prefetch_hits, st[0].prefetch_hits);
		assert_int_equal(pf1[v], pf1[0]);
		assert_memory_equal(o[v], o[0], no * sizeof(float));
		assert_memory_equal(rw[v], rw[0], nr * sizeof(float));
	}
	for (int v = 0; v < 3; v++) {
		free(o[v]);
		free(rw[v]);
	}
}

/*
 * An update after a prefetch on a direct tier marks dirty only the rows
 * the prefetch found clean, unless a dirty bit was cleared since. Here
 * every row is dirty when prefetched, a flush (or a checkpoint) then
 * writes them all back and cleans them, and the update that follows must
 * mark them dirty again: what the update wrote is what a reopened store
 * reads, and a second flush writes every updated row.
 */
static void test_direct_dirty_after_flush(void **state)
{
	struct fx *f = *state;
	const char *dir = f->dirs[fx_new(f)];
	const struct et_store_config c = {.ddr_bytes =
					      2 * TS_TABLES * TS_ROWS *
					      (TS_DIM * 4 + ET_SLOT_META_BYTES),
					  .threads = 2};
	struct et_update_params up = {.lr = 0.5f};
	static uint64_t ids[TS_TABLES][TS_BATCH], all[TS_ROWS];
	static uint64_t offs[TS_BATCH + 1];
	static float v[TS_ROWS * TS_DIM], out[TS_TABLES][TS_BATCH * TS_DIM];
	static float grads[TS_BATCH * TS_DIM],
	    want[TS_TABLES][TS_ROWS * TS_DIM];
	struct et_table_batch tb[TS_TABLES];
	struct et_batch_ids bi[TS_TABLES];
	struct et_stats st0, st1;
	et_store *s;
	int t[TS_TABLES];

	assert_int_equal(et_store_open(dir, &c, &s), 0);
	ts_tables(s, TS_TABLES, 51, t);
	for (uint64_t i = 0; i < TS_ROWS; i++)
		all[i] = i;
	for (int i = 0; i < TS_ROWS * TS_DIM; i++)
		v[i] = (float)(i % 13) - 6.0f;
	for (int i = 0; i < TS_BATCH * TS_DIM; i++)
		grads[i] = 0.25f;
	for (int b = 0; b <= TS_BATCH; b++)
		offs[b] = (uint64_t)b;
	for (int flush = 0; flush < 2; flush++) {
		for (int k = 0; k < TS_TABLES; k++) { /* every row dirty */
			assert_int_equal(
			    et_write_rows(s, t[k], all, TS_ROWS, v), 0);
			for (int i = 0; i < TS_BATCH; i++)
				ids[k][i] = (uint64_t)(i * 7 + k) % TS_ROWS;
			bi[k] = (struct et_batch_ids){
			    .table = t[k], .ids = ids[k], .n = TS_BATCH};
			tb[k] = (struct et_table_batch){.table = t[k],
							.ids = ids[k],
							.offsets = offs,
							.nbags = TS_BATCH,
							.out = out[k],
							.grads = grads};
		}
		assert_int_equal(et_prefetch(s, bi, TS_TABLES), 0);
		assert_int_equal(
		    flush ? et_flush(s) : et_checkpoint(s, NULL, 0), 0);
		assert_int_equal(et_get_stats(s, -1, &st0), 0);
		assert_int_equal(st0.ddr.dirty_rows, 0);
		assert_int_equal(
		    et_gather_pooled_multi(s, tb, TS_TABLES, ET_POOL_SUM), 0);
		assert_int_equal(
		    et_update_pooled_multi(s, tb, TS_TABLES, ET_POOL_SUM, &up),
		    0);
		assert_int_equal(et_get_stats(s, -1, &st1), 0);
		assert_int_equal(st1.ddr.dirty_rows, TS_TABLES * TS_ROWS);
		for (int k = 0; k < TS_TABLES; k++)
			assert_int_equal(
			    et_gather(s, t[k], all, TS_ROWS, want[k]), 0);
		assert_int_equal(et_store_close(s), 0);
		assert_int_equal(et_store_open(dir, &c, &s), 0);
		ts_tables_open(s, TS_TABLES, t);
		for (int k = 0; k < TS_TABLES; k++) {
			assert_int_equal(et_gather(s, t[k], all, TS_ROWS, v),
					 0);
			assert_memory_equal(v, want[k], sizeof(v));
		}
	}
	assert_int_equal(et_store_close(s), 0);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
	    T(test_equiv_0),
	    T(test_equiv_1),
	    T(test_equiv_2),
	    T(test_equiv_3),
	    T(test_equiv_4),
	    T(test_equiv_5),
	    T(test_equiv_6),
	    T(test_equiv_7),
	    T(test_equiv_8),
	    T(test_equiv_9),
	    T(test_hazard_row_in_both_batches),
	    T(test_hazard_writeback_and_read_same_block),
	    T(test_hazard_gather_in_flight),
	    T(test_hazard_eviction_pressure),
	    T(test_hazard_pins_survive_use),
	    T(test_hazard_close_in_flight),
	    T(test_hazard_other_calls_in_flight),
	    T(test_fault_read_under_prefetch),
	    T(test_prebuilt_reads),
	    T(test_fault_write_under_prefetch),
	    T(test_fault_write_same_block_as_read),
	    T(test_memo_after_moves),
	    T(test_stats_prefetch),
	    T(test_two_stores_in_threads),
	    T(test_threads_same_policy_words),
	    T(test_direct_threads_same_rows),
	    T(test_direct_dirty_after_flush),
	    T(test_fault_write_narrow_rows),
	    T(test_install_conflict_narrow_rows),
	};
	const char *filter = getenv("ET_PREFETCH_FILTER");

	if (filter && *filter)
		cmocka_set_test_filter(filter);
	return cmocka_run_group_tests_name("prefetch", tests, NULL, NULL);
}
