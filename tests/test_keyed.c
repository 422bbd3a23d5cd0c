/*
 * test_keyed.c - keyed tables (include/embtier.h: struct et_table_params,
 * ET_TABLE_KEYED, "keyed tables": et_erase, et_key_policy_set, and the
 * et_stats counters keys_dropped, keys_erased, keys_expired), through the
 * public header only, as a user would: create, train, checkpoint, close,
 * reopen.
 *
 *  - creation: ET_TABLE_KEYED with rows 0; rows != 0 or unknown flag bits
 *    refused with ET_ECONFIG and nothing left behind; et_table_info and the
 *    expect check of et_table_open;
 *  - initial values: any u64 id (0 and UINT64_MAX included) reads as the
 *    initializer's value, a pure function of (seed, id) equal to row id of
 *    a row-indexed table below 2^40, and reading stores nothing;
 *  - no collisions: 50 000 random ids, and ids differing only above bit 32
 *    or 40 or in bit 63, written, committed, reopened and read back, online
 *    and offline (et_tfile_rows, et_tfile_read_rows); the offline writes
 *    refused on a keyed file;
 *  - updates (SGD and row-wise Adagrad, plain and pooled) on keyed ids give
 *    the bits of the same updates on a row-indexed table, whatever the tiers
 *    (a 64 KiB DDR that evicts and writes back, with and without an HBM, and
 *    a big one);
 *  - et_erase of dirty, clean, disk-only, never-stored and repeated ids,
 *    and of ids a prefetch is reading or has pinned, durable from the next
 *    commit (a checkpoint or a clean close) and undone by a crash before
 *    it (a forked child that _exit()s with the store open); a churn of
 *    writes, updates and erases against a row-indexed mirror, with each
 *    erase's count and the file's listing checked;
 *  - the admission filter (admit_after, and a crowded filter giving the
 *    same bits whatever the tiers; its counts saved at each commit and
 *    back after a reopen, not after a crash past the commit) and expiry
 *    (at checkpoints and at the
 *    clean close's commit; ages from the open) of et_key_policy_set, and
 *    their bad values;
 *  - the multi-table calls, with prefetch, a lookahead window, admission
 *    and two threads, on a keyed and a row-indexed table, against the
 *    single-table calls in order.
 *
 * Every comparison of values is bit for bit. ET_TEST_FILTER=test_x runs
 * one test.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "embtier.h"
#include "util.h"

#define DIM   8
#define CHUNK 4096 /* ids per batch call when a test passes many */

/* 64 KiB of DDR: about 1 200 slots of a dim-8 row, so a few thousand ids
 * are evicted and written back; the big DDR holds everything. */
static const struct et_store_config CFG_TINY = {.ddr_bytes = 64 << 10};
static const struct et_store_config CFG_TINY_HBM = {.hbm_bytes = 16 << 10,
						    .ddr_bytes = 64 << 10};
static const struct et_store_config CFG_BIG = {.ddr_bytes = 64 << 20};

#define P40 (1ULL << 40)
#define P63 (1ULL << 63)

/* The edge ids of the brief, plus 2^40 - 1 (the last row of a row-indexed
 * table). */
static const uint64_t EDGES[] = {
    0, 1, 12345, P40 - 1, P40, P63, UINT64_MAX - 1, UINT64_MAX,
};
#define NEDGES (sizeof(EDGES) / sizeof(EDGES[0]))

/* Fails the test with the call, its code and et_errdetail() unless it
 * returned 0. */
#define OK(call)                                                               \
	do {                                                                   \
		int rc_ = (call);                                              \
		if (rc_ != 0) {                                                \
			print_error("%s:%d: %s = %d (%s) [%s]\n", __FILE__,    \
				    __LINE__, #call, rc_, et_strerror(rc_),    \
				    et_errdetail());                           \
			fail();                                                \
		}                                                              \
	} while (0)

/* ---------------------------------------------------------------- fixture */

#define MAXDIRS 16

struct fx {
	char *dirs[MAXDIRS];
	et_store *s[MAXDIRS];
	int n;
};

static int setup(void **state)
{
	*state = tu_calloc(1, sizeof(struct fx));
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	for (int i = 0; i < f->n; i++) {
		et_store_close(f->s[i]);
		tu_rmtree(f->dirs[i]);
		free(f->dirs[i]);
	}
	free(f);
	return 0;
}

/* A fresh store directory (not created): its index in f. */
static int fx_new(struct fx *f)
{
	assert_true(f->n < MAXDIRS);
	f->dirs[f->n] = strdup(tu_path("keyed"));
	assert_non_null(f->dirs[f->n]);
	return f->n++;
}

static et_store *fx_open(struct fx *f, int d, const struct et_store_config *c)
{
	tu_require_uring();
	tu_require_direct();
	assert_null(f->s[d]);
	OK(et_store_open(f->dirs[d], c, &f->s[d]));
	assert_non_null(f->s[d]);
	return f->s[d];
}

static void fx_close(struct fx *f, int d)
{
	int rc = et_store_close(f->s[d]);

	f->s[d] = NULL;
	if (rc)
		print_error("et_store_close: %d (%s)\n", rc, et_strerror(rc));
	assert_int_equal(rc, 0);
}

static void table_path(struct fx *f, int d, const char *name, char *out)
{
	snprintf(out, PATH_MAX, "%s/%s.et", f->dirs[d], name);
}

static bool exists(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0;
}

/* ---------------------------------------------------------------- helpers */

static struct et_table_params kparams(et_optim optim, uint64_t seed)
{
	struct et_table_params p = {
	    .rows = 0,
	    .dim = DIM,
	    .dtype = ET_F32,
	    .optim = optim,
	    .init = ET_INIT_UNIFORM,
	    .init_scale = 0.5f,
	    .seed = seed,
	    .flags = ET_TABLE_KEYED,
	};

	return p;
}

static struct et_table_params rparams(et_optim optim, uint64_t seed,
				      uint64_t rows)
{
	struct et_table_params p = kparams(optim, seed);

	p.flags = 0;
	p.rows = rows;
	return p;
}

static struct et_stats stats_of(et_store *s, int table)
{
	struct et_stats st;

	OK(et_get_stats(s, table, &st));
	return st;
}

static struct et_table_info info_of(et_store *s, int table)
{
	struct et_table_info in;

	OK(et_table_info(s, table, &in));
	return in;
}

static uint64_t mix64(uint64_t z)
{
	z += 0x9e3779b97f4a7c15ULL;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* The value column j of id is given in the tests that write ids: exact in
 * f32, in [-1, 1), and different for ids differing in any bit. */
static float val_of(uint64_t id, uint32_t j)
{
	int32_t v = (int32_t)(mix64(id * 31 + j) >> 40) - (1 << 23);

	return (float)v * 0x1p-23f;
}

static void vals_of(const uint64_t *ids, size_t n, float *out)
{
	for (size_t i = 0; i < n; i++)
		for (uint32_t j = 0; j < DIM; j++)
			out[i * DIM + j] = val_of(ids[i], j);
}

static void rand_floats(struct tu_rng *r, float *out, size_t n)
{
	for (size_t i = 0; i < n; i++)
		out[i] = (float)tu_rng_double(r, -1.0, 1.0);
}

/* et_gather of any number of ids, CHUNK at a time. */
static void gat(et_store *s, int t, const uint64_t *ids, size_t n, float *out)
{
	for (size_t i = 0; i < n; i += CHUNK) {
		size_t k = n - i < CHUNK ? n - i : CHUNK;

		OK(et_gather(s, t, ids + i, k, out + i * DIM));
	}
}

static void wr(et_store *s, int t, const uint64_t *ids, size_t n,
	       const float *vals)
{
	for (size_t i = 0; i < n; i += CHUNK) {
		size_t k = n - i < CHUNK ? n - i : CHUNK;

		OK(et_write_rows(s, t, ids + i, k, vals + i * DIM));
	}
}

/* One id's row. */
static void gat1(et_store *s, int t, uint64_t id, float *out)
{
	OK(et_gather(s, t, &id, 1, out));
}

static void upd1(et_store *s, int t, uint64_t id, const float *g,
		 const struct et_update_params *up)
{
	OK(et_update(s, t, &id, 1, g, up));
}

/* Rows a and b (n rows of DIM, of ids) are the same bits; else fails naming
 * the first id that differs. */
static void same_rows(const char *what, const uint64_t *ids, const float *a,
		      const float *b, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (memcmp(a + i * DIM, b + i * DIM, DIM * sizeof(float))) {
			uint32_t j = 0;

			while (j < DIM &&
			       !memcmp(&a[i * DIM + j], &b[i * DIM + j],
				       sizeof(float)))
				j++;
			print_error(
			    "%s: id %llu (#%zu) column %u: %a != %a\n", what,
			    (unsigned long long)(ids ? ids[i] : i), i, j,
			    (double)a[i * DIM + j], (double)b[i * DIM + j]);
			fail();
		}
	}
}

static bool row_eq(const float *a, const float *b)
{
	return memcmp(a, b, DIM * sizeof(float)) == 0;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Sorts a and drops repeats: the number of distinct ids. */
static size_t uniq(uint64_t *a, size_t n)
{
	size_t k = 0;

	qsort(a, n, sizeof(*a), cmp_u64);
	for (size_t i = 0; i < n; i++)
		if (!k || a[i] != a[k - 1])
			a[k++] = a[i];
	return k;
}

/* n distinct ids: the edges first, then random u64s (a few below 2^40),
 * in that order (the random part unsorted). */
static uint64_t *key_pool(uint64_t seed, size_t n)
{
	uint64_t *k = tu_calloc(n, sizeof(*k));
	uint64_t *chk = tu_calloc(n, sizeof(*chk));
	struct tu_rng r;
	size_t i;

	assert_true(n >= NEDGES);
	tu_rng_seed(&r, seed);
	for (i = 0; i < NEDGES; i++)
		k[i] = EDGES[i];
	for (; i < n; i++)
		k[i] = i % 4 == 0 ? tu_rng_below(&r, P40) : tu_rng_next(&r);
	memcpy(chk, k, n * sizeof(*k));
	assert_int_equal(uniq(chk, n), n);
	free(chk);
	return k;
}

/* Gathers n random never-stored ids of table t (reads store nothing),
 * enough to push a 64 KiB DDR's rows out. */
static void traffic(et_store *s, int t, struct tu_rng *r, size_t n)
{
	uint64_t *ids = tu_calloc(n, sizeof(*ids));
	float *out = tu_calloc(n * DIM, sizeof(float));

	for (size_t i = 0; i < n; i++)
		ids[i] = tu_rng_next(r) | 1; /* odd: never an id of ours */
	gat(s, t, ids, n, out);
	free(ids);
	free(out);
}

/* ------------------------------------------------------------ 1. creation */

static void test_create(void **state)
{
	struct fx *f = *state;
	int d = fx_new(f);
	et_store *s = fx_open(f, d, &CFG_BIG);
	const struct {
		uint64_t rows;
		uint32_t flags;
	} bad[] = {
	    {1, ET_TABLE_KEYED},
	    {1000, ET_TABLE_KEYED},
	    {ET_MAX_ROWS, ET_TABLE_KEYED},
	    {ET_MAX_ROWS + 1, ET_TABLE_KEYED},
	    {UINT64_MAX, ET_TABLE_KEYED},
	    {0, 0x2},
	    {0, 0x3},
	    {0, 0x80000000u},
	    {0, 0xffffffffu},
	    {1000, 0x2},
	    {1000, 0x4},
	    {0, 0}, /* row-indexed with no rows */
	};
	char path[PATH_MAX];
	struct et_table_params p = kparams(ET_OPT_ROWWISE_ADAGRAD, 3);
	struct et_table_info in;
	int id, rid, id2;

	table_path(f, d, "bad", path);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct et_table_params q = p;
		int rc;

		q.rows = bad[i].rows;
		q.flags = bad[i].flags;
		id = -7;
		rc = et_table_create(s, "bad", &q, &id);
		if (rc != ET_ECONFIG)
			print_error("bad #%zu (rows %llu flags %#x): %d (%s)\n",
				    i, (unsigned long long)q.rows, q.flags, rc,
				    et_strerror(rc));
		assert_int_equal(rc, ET_ECONFIG);
		assert_true(et_errdetail()[0] != '\0');
		assert_false(exists(path));
	}

	/* The refused name is still free; keyed and row-indexed tables share
	 * a store. */
	OK(et_table_create(s, "bad", &p, &id2));
	OK(et_table_create(s, "k", &p, &id));
	{
		struct et_table_params r = rparams(ET_OPT_SGD, 3, 1000);

		OK(et_table_create(s, "r", &r, &rid));
	}
	assert_true(exists(path));

	in = info_of(s, id);
	assert_int_equal(in.flags, ET_TABLE_KEYED);
	assert_int_equal(in.rows, 0);
	assert_int_equal(in.dim, DIM);
	assert_int_equal(in.optim, ET_OPT_ROWWISE_ADAGRAD);
	assert_int_equal(in.init, ET_INIT_UNIFORM);
	assert_int_equal(in.seed, 3);
	assert_int_equal(in.state_floats, 1);
	assert_int_equal(in.rows_logged, 0);
	in = info_of(s, rid);
	assert_int_equal(in.flags, 0);
	assert_int_equal(in.rows, 1000);
	fx_close(f, d);

	/* Reopened: the flag is in the file, and the expect check compares
	 * it (and rows) like any other field. */
	s = fx_open(f, d, &CFG_BIG);
	{
		struct et_table_params ek = {.flags = ET_TABLE_KEYED};
		struct et_table_params er = {.rows = 1000};

		assert_int_equal(et_table_open(s, "r", &ek, &rid),
				 ET_EMISMATCH);
		assert_int_equal(et_table_open(s, "k", &er, &id), ET_EMISMATCH);
		OK(et_table_open(s, "k", &ek, &id));
		OK(et_table_open(s, "r", &er, &rid));
	}
	in = info_of(s, id);
	assert_int_equal(in.flags, ET_TABLE_KEYED);
	assert_int_equal(in.rows, 0);
	assert_int_equal(in.rows_logged, 0);
	in = info_of(s, rid);
	assert_int_equal(in.flags, 0);
	assert_int_equal(in.rows, 1000);
	/* Any id of a keyed table is in range; row-indexed ones still are
	 * not. */
	{
		float out[2 * DIM];
		uint64_t ids[2] = {UINT64_MAX, 1000};

		OK(et_gather(s, id, ids, 2, out));
		assert_int_equal(et_gather(s, rid, ids + 1, 1, out),
				 ET_EROWRANGE);
	}
}

/* ------------------------------------------------------ 2. initial values */

/* Rows of the row-indexed tables compared with keyed ones: a table of
 * ET_MAX_ROWS rows of dim 8 would be a 32 TiB file, more than ext4 allows
 * (16 TiB); ids up to 2^40 - 1 are compared at dim 2 below. */
#define RBIG (1ULL << 38)

static void test_initial_values(void **state)
{
	struct fx *f = *state;
	const struct {
		et_init init;
		uint64_t seed;
	} cases[] = {{ET_INIT_UNIFORM, 42}, {ET_INIT_NORMAL, 0}};
	int d = fx_new(f), d2 = fx_new(f);
	et_store *s = fx_open(f, d, &CFG_BIG);
	et_store *s2 = fx_open(f, d2, &CFG_TINY);
	int k[2], r[2], k2[2];
	float a[NEDGES * DIM], b[NEDGES * DIM], c[NEDGES * DIM];
	uint64_t rev[NEDGES * 2];
	size_t nsmall = 0;

	for (int i = 0; i < 2; i++) {
		struct et_table_params pk = kparams(ET_OPT_SGD, cases[i].seed);
		struct et_table_params pr;
		char name[16];

		pk.init = cases[i].init;
		pr = pk;
		pr.flags = 0;
		pr.rows = RBIG;
		snprintf(name, sizeof(name), "k%d", i);
		OK(et_table_create(s, name, &pk, &k[i]));
		OK(et_table_create(s2, name, &pk, &k2[i]));
		snprintf(name, sizeof(name), "r%d", i);
		OK(et_table_create(s, name, &pr, &r[i]));
	}
	for (size_t i = 0; i < NEDGES; i++)
		nsmall += EDGES[i] < RBIG;
	/* Reversed, each twice: the same id gathered again in another order
	 * and batch. */
	for (size_t i = 0; i < NEDGES; i++)
		rev[2 * i] = rev[2 * i + 1] = EDGES[NEDGES - 1 - i];

	for (int t = 0; t < 2; t++) {
		float rv[2 * NEDGES * DIM];

		OK(et_gather(s, k[t], EDGES, NEDGES, a));
		/* Ids below 2^40: row id of a row-indexed table alike. */
		OK(et_gather(s, r[t], EDGES, nsmall, b));
		same_rows("keyed vs row-indexed", EDGES, a, b, nsmall);
		/* Again, in another order and with repeats. */
		OK(et_gather(s, k[t], rev, 2 * NEDGES, rv));
		for (size_t i = 0; i < NEDGES; i++) {
			same_rows("gathered again", &EDGES[i], a + i * DIM,
				  rv + (2 * (NEDGES - 1 - i)) * DIM, 1);
			same_rows("gathered again", &EDGES[i], a + i * DIM,
				  rv + (2 * (NEDGES - 1 - i) + 1) * DIM, 1);
		}
		/* Another store, same parameters: same bits. */
		OK(et_gather(s2, k2[t], EDGES, NEDGES, c));
		same_rows("second store", EDGES, a, c, NEDGES);
		/* A real initializer: uniform values within the scale, and no
		 * two of these ids alike (a key cut to 40 or 63 bits would
		 * make 0, 2^40 and 2^63 one). */
		for (size_t i = 0; i < NEDGES; i++) {
			for (uint32_t j = 0; j < DIM && t == 0; j++)
				assert_true(fabsf(a[i * DIM + j]) <= 0.5f);
			for (size_t m = 0; m < i; m++)
				if (row_eq(a + i * DIM, a + m * DIM)) {
					print_error(
					    "ids %llu and %llu read the"
					    " same initial row\n",
					    (unsigned long long)EDGES[i],
					    (unsigned long long)EDGES[m]);
					fail();
				}
		}
		/* Pooled too: the bag sum of 0 and UINT64_MAX, in id order. */
		{
			uint64_t ids[2] = {0, UINT64_MAX}, off[2] = {0, 2};
			float sum[DIM];

			OK(et_gather_pooled(s, k[t], ids, off, 1, ET_POOL_SUM,
					    sum));
			for (uint32_t j = 0; j < DIM; j++) {
				float e = a[j] + a[(NEDGES - 1) * DIM + j];

				assert_memory_equal(&sum[j], &e, sizeof(e));
			}
		}
	}

	/* Up to row 2^40 - 1, at dim 2 (an 8 TiB sparse file). */
	{
		struct et_table_params pk = kparams(ET_OPT_SGD, 42);
		struct et_table_params pr;
		const uint64_t ids[4] = {0, 1, 12345, P40 - 1};
		float x[4 * 2], y[4 * 2];
		int k2d, r2d;

		pk.dim = 2;
		pr = pk;
		pr.flags = 0;
		pr.rows = ET_MAX_ROWS;
		OK(et_table_create(s, "k2d", &pk, &k2d));
		OK(et_table_create(s, "r2d", &pr, &r2d));
		OK(et_gather(s, k2d, ids, 4, x));
		OK(et_gather(s, r2d, ids, 4, y));
		assert_memory_equal(x, y, sizeof(x));
	}

	/* Reading stored nothing, even rows a tiny DDR evicted. */
	{
		struct tu_rng rng;

		tu_rng_seed(&rng, 1);
		traffic(s2, k2[0], &rng, 5000);
		assert_true(stats_of(s2, -1).ddr.evictions > 0);
		OK(et_checkpoint(s2, NULL, 0));
		assert_int_equal(info_of(s2, k2[0]).rows_logged, 0);
		assert_int_equal(stats_of(s2, -1).writebacks, 0);
	}
	OK(et_checkpoint(s, NULL, 0));
	for (int t = 0; t < 2; t++) {
		assert_int_equal(info_of(s, k[t]).rows_logged, 0);
		assert_int_equal(stats_of(s, k[t]).log_index_rows, 0);
	}
	assert_int_equal(stats_of(s, -1).log_index_rows, 0);
	OK(et_gather(s, k[0], EDGES, NEDGES, a));
	fx_close(f, d);
	s = fx_open(f, d, &CFG_TINY);
	OK(et_table_open(s, "k0", NULL, &k[0]));
	assert_int_equal(info_of(s, k[0]).rows_logged, 0);
	OK(et_gather(s, k[0], EDGES, NEDGES, b));
	same_rows("after reopen", EDGES, a, b, NEDGES);
}

/* --------------------------------------------------------- 3. collisions */

/* Lists every stored id of the keyed file at path, max at a time, into a
 * (cap): their number. */
static size_t list_ids(const char *path, size_t max, uint64_t *out, size_t cap)
{
	uint64_t *buf = tu_calloc(max, sizeof(*buf)), from = 0;
	size_t n, total = 0;
	et_tfile *tf;

	OK(et_tfile_open(path, ET_TFILE_RDONLY, &tf));
	for (;;) {
		OK(et_tfile_rows(tf, from, buf, max, &n));
		assert_true(n <= max);
		for (size_t i = 0; i < n; i++) {
			assert_true(buf[i] >= from);
			assert_true(!i || buf[i] > buf[i - 1]);
			assert_true(!total || buf[i] > out[total - 1]);
			assert_true(total < cap);
			out[total++] = buf[i];
		}
		if (n < max || buf[n - 1] == UINT64_MAX)
			break;
		from = buf[n - 1] + 1;
	}
	et_tfile_close(tf);
	free(buf);
	return total;
}

static void test_no_collisions(void **state)
{
	struct fx *f = *state;
	const size_t nrand = 50000, nclose = 100;
	/* random ids, edges, and ids that differ only above bit 32 or 40,
	 * in bit 63, or in every bit */
	const size_t cap = nrand + NEDGES + 6 * nclose;
	uint64_t *ids = tu_calloc(cap, sizeof(*ids));
	uint64_t *sorted, *listed, *call_ids;
	float *vals, *got, *call_vals;
	uint64_t never[4] = {2, 3, P40 + 12345, UINT64_MAX - 2};
	float never_init[4 * DIM], never_off[4 * DIM];
	size_t n = 0, nd, nl;
	struct tu_rng r;
	struct et_table_params p = kparams(ET_OPT_ROWWISE_ADAGRAD, 17);
	char path[PATH_MAX];
	int d = fx_new(f), t;
	et_store *s = fx_open(f, d, &CFG_TINY);

	tu_rng_seed(&r, 3);
	for (size_t i = 0; i < nrand; i++)
		ids[n++] = tu_rng_next(&r);
	for (size_t i = 0; i < NEDGES; i++)
		ids[n++] = EDGES[i];
	for (uint64_t k = 0; k < nclose; k++) {
		ids[n++] = k + 10;
		ids[n++] = (k + 10) | (1ULL << 32);
		ids[n++] = (k + 10) | P40;
		ids[n++] = (k + 10) | P63;
		ids[n++] = ~(k + 10);
		ids[n++] = (k + 10) << 40;
	}
	assert_int_equal(n, cap);
	tu_shuffle_u64(&r, ids, n);
	sorted = tu_calloc(n, sizeof(*ids));
	memcpy(sorted, ids, n * sizeof(*ids));
	nd = uniq(sorted, n);
	for (size_t i = 0; i < 4; i++)
		assert_null(
		    bsearch(&never[i], sorted, nd, sizeof(*sorted), cmp_u64));

	vals = tu_calloc(n, DIM * sizeof(float));
	got = tu_calloc(n, DIM * sizeof(float));
	vals_of(ids, n, vals);
	OK(et_table_create(s, "k", &p, &t));
	gat(s, t, never, 4, never_init);

	/* In calls of CHUNK ids, each call naming its first 16 ids twice,
	 * garbage first: the last occurrence wins. */
	call_ids = tu_calloc(CHUNK + 16, sizeof(*call_ids));
	call_vals = tu_calloc(CHUNK + 16, DIM * sizeof(float));
	for (size_t i = 0; i < n; i += CHUNK) {
		size_t k = n - i < CHUNK ? n - i : CHUNK, g = k < 16 ? k : 16;

		memcpy(call_ids, ids + i, g * sizeof(*ids));
		for (size_t m = 0; m < g * DIM; m++)
			call_vals[m] = 1000.0f + (float)m;
		memcpy(call_ids + g, ids + i, k * sizeof(*ids));
		memcpy(call_vals + g * DIM, vals + i * DIM,
		       k * DIM * sizeof(float));
		OK(et_write_rows(s, t, call_ids, g + k, call_vals));
	}
	/* Some again, across calls. */
	wr(s, t, ids, 1000, vals);
	free(call_ids);
	free(call_vals);

	gat(s, t, ids, n, got);
	same_rows("before checkpoint", ids, vals, got, n);
	assert_true(stats_of(s, -1).ddr.evictions > 0);
	OK(et_checkpoint(s, NULL, 0));
	assert_int_equal(info_of(s, t).rows_logged, nd);
	assert_int_equal(stats_of(s, t).log_index_rows, nd);
	fx_close(f, d);

	s = fx_open(f, d, &CFG_TINY);
	OK(et_table_open(s, "k", NULL, &t));
	assert_int_equal(info_of(s, t).rows_logged, nd);
	memset(got, 0, n * DIM * sizeof(float));
	gat(s, t, ids, n, got);
	same_rows("after reopen", ids, vals, got, n);
	{
		float g4[4 * DIM];

		gat(s, t, never, 4, g4);
		same_rows("never written", never, never_init, g4, 4);
	}
	fx_close(f, d);

	/* Offline: the sorted set, its values; never-written ids read as
	 * the store read them. */
	table_path(f, d, "k", path);
	listed = tu_calloc(nd + 1, sizeof(*listed));
	for (size_t max = 1000; max <= 1001; max++) {
		memset(listed, 0, (nd + 1) * sizeof(*listed));
		nl = list_ids(path, max, listed, nd + 1);
		assert_int_equal(nl, nd);
		assert_memory_equal(listed, sorted, nd * sizeof(*sorted));
	}
	{
		et_tfile *tf;
		struct et_table_info in;
		uint64_t last[4];
		size_t nn;
		float *sv = tu_calloc(nd, DIM * sizeof(float));
		float *st = tu_calloc(nd, sizeof(float));

		OK(et_tfile_open(path, ET_TFILE_RDONLY, &tf));
		OK(et_tfile_info(tf, &in));
		assert_int_equal(in.flags, ET_TABLE_KEYED);
		assert_int_equal(in.rows, 0);
		assert_int_equal(in.rows_logged, nd);
		/* From UINT64_MAX: just it. */
		OK(et_tfile_rows(tf, UINT64_MAX, last, 4, &nn));
		assert_int_equal(nn, 1);
		assert_true(last[0] == UINT64_MAX);
		for (size_t i = 0; i < nd; i += CHUNK) {
			size_t k = nd - i < CHUNK ? nd - i : CHUNK;

			OK(et_tfile_read_rows(tf, sorted + i, k, got + i * DIM,
					      st + i));
		}
		vals_of(sorted, nd, sv);
		same_rows("offline read", sorted, sv, got, nd);
		OK(et_tfile_read_rows(tf, never, 4, never_off, NULL));
		same_rows("offline never written", never, never_init, never_off,
			  4);
		{
			uint64_t bad = 0, first = 0;

			OK(et_tfile_verify(tf, &bad, &first, NULL, NULL));
			assert_int_equal(bad, 0);
		}
		et_tfile_close(tf);
		free(sv);
		free(st);
	}

	/* Offline writes of a keyed file fail and change nothing. */
	{
		et_tfile *tf;
		struct et_table_info before, after;
		int64_t size = tu_file_size(path), disk = tu_disk_bytes(path);
		uint64_t w[3] = {0, 5, sorted[7]}; /* stored, never, stored */
		float buf[64 * DIM], r0[3 * DIM], r1[3 * DIM], e[DIM];
		int rc;

		assert_null(
		    bsearch(&w[1], sorted, nd, sizeof(*sorted), cmp_u64));
		for (size_t i = 0; i < 64 * DIM; i++)
			buf[i] = 7.0f;
		OK(et_tfile_open(path, 0, &tf));
		OK(et_tfile_info(tf, &before));
		OK(et_tfile_read_rows(tf, w, 3, r0, NULL));
		vals_of(&w[0], 1, e);
		same_rows("id 0 offline", &w[0], e, r0, 1);
		vals_of(&w[2], 1, e);
		same_rows("stored id offline", &w[2], e, r0 + 2 * DIM, 1);
		rc = et_tfile_write_rows(tf, w, 3, buf, NULL);
		if (rc == 0)
			print_error("et_tfile_write_rows on a keyed file: 0\n");
		assert_true(rc < 0);
		rc = et_tfile_write_range(tf, 0, 64, buf);
		if (rc == 0)
			print_error(
			    "et_tfile_write_range on a keyed file: 0\n");
		assert_true(rc < 0);
		OK(et_tfile_info(tf, &after));
		assert_int_equal(after.flags, ET_TABLE_KEYED);
		assert_int_equal(after.rows, 0);
		assert_int_equal(after.rows_logged, before.rows_logged);
		assert_int_equal(after.blocks_written, before.blocks_written);
		assert_int_equal(after.disk_bytes, before.disk_bytes);
		OK(et_tfile_read_rows(tf, w, 3, r1, NULL));
		same_rows("after refused writes", w, r0, r1, 3);
		et_tfile_close(tf);
		assert_int_equal(tu_file_size(path), size);
		assert_int_equal(tu_disk_bytes(path), disk);

		nl = list_ids(path, 4096, listed, nd + 1);
		assert_int_equal(nl, nd);
		assert_memory_equal(listed, sorted, nd * sizeof(*sorted));
		OK(et_tfile_open(path, ET_TFILE_RDONLY, &tf));
		OK(et_tfile_read_rows(tf, w, 3, r1, NULL));
		same_rows("after refused writes, reopened", w, r0, r1, 3);
		et_tfile_close(tf);

		/* And the store opens it as before. */
		s = fx_open(f, d, &CFG_BIG);
		OK(et_table_open(s, "k", NULL, &t));
		assert_int_equal(info_of(s, t).rows_logged, nd);
		OK(et_gather(s, t, w, 3, r1));
		same_rows("store after refused writes", w, r0, r1, 3);
	}
	free(ids);
	free(sorted);
	free(listed);
	free(vals);
	free(got);
}

/* ------------------------------------------------------------ 4. updates */

/*
 * The same updates on keyed table "k" (ids keys[]) and on row-indexed
 * table "r" (row i for keys[i]), whose rows are first written with k's
 * initial values: after every few calls, and at the end (before and after
 * a close), k's rows are r's, bit for bit. outk receives k's final rows.
 */
static void run_updates(struct fx *f, const struct et_store_config *c,
			et_optim optim, const uint64_t *keys, size_t nk,
			float *outk, struct et_stats *st)
{
	const size_t B = 384, NB = 64;
	int d = fx_new(f), tk, tr;
	et_store *s = fx_open(f, d, c);
	struct et_table_params pk = kparams(optim, 99);
	struct et_table_params pr = rparams(optim, 99, nk);
	struct et_update_params up = {.lr = 0.05f};
	uint64_t *rows = tu_calloc(nk, sizeof(*rows));
	uint64_t *kid = tu_calloc(B, sizeof(*kid));
	uint64_t *rid = tu_calloc(B, sizeof(*rid));
	uint64_t off[NB + 1];
	float *init = tu_calloc(nk, DIM * sizeof(float));
	float *outr = tu_calloc(nk, DIM * sizeof(float));
	float *g = tu_calloc(B, DIM * sizeof(float));
	float *ga = tu_calloc(B, DIM * sizeof(float));
	float *gb = tu_calloc(B, DIM * sizeof(float));
	bool *touched = tu_calloc(nk, sizeof(bool));
	size_t ntouched = 0;
	struct tu_rng rng;

	OK(et_table_create(s, "k", &pk, &tk));
	OK(et_table_create(s, "r", &pr, &tr));
	for (size_t i = 0; i < nk; i++)
		rows[i] = i;
	gat(s, tk, keys, nk, init);
	wr(s, tr, rows, nk, init);

	tu_rng_seed(&rng, 4242);
	for (int it = 0; it < 48; it++) {
		for (size_t i = 0; i < B; i++) {
			size_t p = tu_rng_below(&rng, 8) == 0
				       ? tu_rng_below(&rng, NEDGES)
				       : tu_rng_below(&rng, nk);

			kid[i] = keys[p];
			rid[i] = p;
			ntouched += !touched[p];
			touched[p] = true;
		}
		if (it % 3 == 0) {
			rand_floats(&rng, g, B * DIM);
			OK(et_update(s, tk, kid, B, g, &up));
			OK(et_update(s, tr, rid, B, g, &up));
		} else {
			et_pool mode = it % 3 == 1 ? ET_POOL_SUM : ET_POOL_MEAN;

			off[0] = 0;
			for (size_t b = 1; b < NB; b++)
				off[b] = tu_rng_below(&rng, B + 1);
			off[NB] = B;
			qsort(off + 1, NB - 1, sizeof(off[0]), cmp_u64);
			rand_floats(&rng, g, NB * DIM);
			OK(et_update_pooled(s, tk, kid, off, NB, mode, g, &up));
			OK(et_update_pooled(s, tr, rid, off, NB, mode, g, &up));
			if (it % 6 == 5) {
				OK(et_gather_pooled(s, tk, kid, off, NB, mode,
						    ga));
				OK(et_gather_pooled(s, tr, rid, off, NB, mode,
						    gb));
				same_rows("pooled gather", NULL, gb, ga, NB);
			}
		}
		if (it % 8 == 7) {
			OK(et_gather(s, tk, kid, B, ga));
			OK(et_gather(s, tr, rid, B, gb));
			same_rows("keyed vs row-indexed", kid, gb, ga, B);
		}
		if (it == 24)
			OK(et_checkpoint(s, NULL, 0));
	}
	gat(s, tk, keys, nk, outk);
	gat(s, tr, rows, nk, outr);
	same_rows("keyed vs row-indexed, final", keys, outr, outk, nk);
	*st = stats_of(s, -1);
	/* Stored: every key an update named (every id is in a bag). */
	OK(et_checkpoint(s, NULL, 0));
	assert_int_equal(info_of(s, tk).rows_logged, ntouched);
	assert_int_equal(info_of(s, tr).rows_logged, nk);
	fx_close(f, d);

	s = fx_open(f, d, c);
	OK(et_table_open(s, "k", NULL, &tk));
	OK(et_table_open(s, "r", NULL, &tr));
	gat(s, tk, keys, nk, init);
	same_rows("keyed after reopen", keys, outk, init, nk);
	gat(s, tr, rows, nk, init);
	same_rows("row-indexed after reopen", keys, outr, init, nk);
	fx_close(f, d);

	free(rows);
	free(kid);
	free(rid);
	free(init);
	free(outr);
	free(g);
	free(ga);
	free(gb);
	free(touched);
}

static void test_updates(void **state)
{
	struct fx *f = *state;
	const size_t nk = 2500;
	uint64_t *keys = key_pool(11, nk);
	float *a = tu_calloc(nk, DIM * sizeof(float));
	float *b = tu_calloc(nk, DIM * sizeof(float));
	float *c = tu_calloc(nk, DIM * sizeof(float));
	const et_optim optims[] = {ET_OPT_SGD, ET_OPT_ROWWISE_ADAGRAD};

	for (int o = 0; o < 2; o++) {
		struct et_stats st;

		run_updates(f, &CFG_TINY, optims[o], keys, nk, a, &st);
		/* The tiny DDR did evict and write rows back. */
		assert_true(st.ddr.evictions > 0);
		assert_true(st.writebacks > 0);
		run_updates(f, &CFG_BIG, optims[o], keys, nk, b, &st);
		same_rows("tiny vs big DDR", keys, a, b, nk);
		run_updates(f, &CFG_TINY_HBM, optims[o], keys, nk, c, &st);
		same_rows("tiny DDR vs tiny HBM + DDR", keys, a, c, nk);
	}
	free(keys);
	free(a);
	free(b);
	free(c);
}

/* -------------------------------------------------------------- 5. erase */

#define GN 64 /* ids per group */
#define GK 16 /* of which kept (not erased) */

enum { G_D1, G_D2, G_C, G_A, G_U, G_R, G_N, NGROUPS };
#define NSTORED (NGROUPS - 1) /* groups stored before the erase */

/*
 * Groups of GN ids: D1 stored, committed and the store closed (on disk
 * only); D2 stored and committed, then 4 000 other ids (F) written (on
 * disk only with the tiny DDR); C stored and committed (clean in the
 * cache); A written and U updated since (dirty); R committed with C, then
 * written again (dirty, an older value committed); N never stored. One
 * et_erase names all but the first GK of each group, some twice. snap
 * receives every group's and F's rows at the end; the table file then
 * lists exactly the ids still stored.
 */
static void erase_run(struct fx *f, const struct et_store_config *c,
		      float *snap, size_t nsnap)
{
	const size_t NF = 4000;
	int d = fx_new(f), t, ref, rowt;
	et_store *s = fx_open(f, d, c);
	struct et_table_params p = kparams(ET_OPT_SGD, 23);
	struct et_table_params pr = rparams(ET_OPT_SGD, 23, 1000);
	struct et_update_params up = {.lr = 0.25f};
	uint64_t *pool = key_pool(77, NGROUPS * GN + NF);
	uint64_t *grp[NGROUPS], *fill = pool + NGROUPS * GN;
	uint64_t *eids, erased = 0;
	size_t ne = 0, nstored;
	float *init = tu_calloc(NGROUPS * GN, DIM * sizeof(float));
	float *before = tu_calloc(NGROUPS * GN, DIM * sizeof(float));
	float *got = tu_calloc(NGROUPS * GN, DIM * sizeof(float));
	float *fv = tu_calloc(NF, DIM * sizeof(float));
	float *fg = tu_calloc(NF, DIM * sizeof(float));
	float *v = tu_calloc(GN, DIM * sizeof(float));
	float *gr = tu_calloc(GN, DIM * sizeof(float));
	struct tu_rng rng;
	struct et_stats st;

	assert_int_equal(nsnap, NGROUPS * GN + NF);
	tu_rng_seed(&rng, 5);
	for (int k = 0; k < NGROUPS; k++)
		grp[k] = pool + k * GN;
	/* The pool starts with the edges, all in D1's kept part: move
	 * UINT64_MAX into D2's erased part, 2^63 into A's and 0 into D1's. */
	{
		uint64_t x;

		x = grp[G_D2][GK];
		grp[G_D2][GK] = grp[G_D1][7]; /* UINT64_MAX */
		grp[G_D1][7] = x;
		x = grp[G_A][GK + 1];
		grp[G_A][GK + 1] = grp[G_D1][5]; /* 2^63 */
		grp[G_D1][5] = x;
		/* and 0 into D1's erased part */
		x = grp[G_D1][GK + 2];
		grp[G_D1][GK + 2] = grp[G_D1][0];
		grp[G_D1][0] = x;
	}
	vals_of(fill, NF, fv);

	OK(et_table_create(s, "t", &p, &t));
	OK(et_table_create(s, "ref", &p, &ref));
	OK(et_table_create(s, "rows", &pr, &rowt));
	gat(s, ref, pool, NGROUPS * GN, init);

	/* Session 1: D1. */
	vals_of(grp[G_D1], GN, v);
	wr(s, t, grp[G_D1], GN, v);
	OK(et_checkpoint(s, NULL, 0));
	fx_close(f, d);

	/* Session 2. */
	s = fx_open(f, d, c);
	OK(et_table_open(s, "t", NULL, &t));
	OK(et_table_open(s, "ref", NULL, &ref));
	OK(et_table_open(s, "rows", NULL, &rowt));
	vals_of(grp[G_D2], GN, v);
	wr(s, t, grp[G_D2], GN, v);
	OK(et_checkpoint(s, NULL, 0));
	wr(s, t, fill, NF, fv);
	OK(et_checkpoint(s, NULL, 0));
	vals_of(grp[G_C], GN, v);
	wr(s, t, grp[G_C], GN, v);
	vals_of(grp[G_R], GN, v);
	wr(s, t, grp[G_R], GN, v);
	OK(et_checkpoint(s, NULL, 0));
	vals_of(grp[G_A], GN, v);
	wr(s, t, grp[G_A], GN, v);
	rand_floats(&rng, gr, GN * DIM);
	OK(et_update(s, t, grp[G_U], GN, gr, &up));
	rand_floats(&rng, v, GN * DIM);
	wr(s, t, grp[G_R], GN, v);
	nstored = NSTORED * GN + NF;
	gat(s, t, pool, NGROUPS * GN, before);
	/* U was updated from its initial values, N is still initial. */
	assert_false(row_eq(before + G_U * GN * DIM, init + G_U * GN * DIM));
	same_rows("never stored", grp[G_N], init + G_N * GN * DIM,
		  before + G_N * GN * DIM, GN);
	st = stats_of(s, t);
	assert_int_equal(st.keys_erased, 0);

	/* One call: the erased part of every group, the first 10 of each
	 * twice, shuffled. */
	eids = tu_calloc(NGROUPS * GN * 2, sizeof(*eids));
	for (int k = 0; k < NGROUPS; k++)
		for (size_t i = GK; i < GN; i++) {
			eids[ne++] = grp[k][i];
			if (i < GK + 10)
				eids[ne++] = grp[k][i];
		}
	tu_shuffle_u64(&rng, eids, ne);
	erased = 12345;
	OK(et_erase(s, t, eids, ne, &erased));
	assert_int_equal(erased, NSTORED * (GN - GK));
	nstored -= NSTORED * (GN - GK);
	st = stats_of(s, t);
	assert_int_equal(st.keys_erased, NSTORED * (GN - GK));

	/* The erased read as initial, the rest as before; F untouched. */
	for (int pass = 0; pass < 2; pass++) {
		gat(s, t, pool, NGROUPS * GN, got);
		for (int k = 0; k < NGROUPS; k++) {
			size_t o = k * GN * DIM;

			same_rows("kept", grp[k], before + o, got + o, GK);
			same_rows("erased", grp[k] + GK, init + o + GK * DIM,
				  got + o + GK * DIM, GN - GK);
		}
		gat(s, t, fill, NF, fg);
		same_rows("other ids", fill, fv, fg, NF);
		if (pass == 0) {
			/* Erasing again erases nothing; nor does n 0. */
			OK(et_erase(s, t, eids, ne, &erased));
			assert_int_equal(erased, 0);
			OK(et_erase(s, t, eids, 0, &erased));
			assert_int_equal(erased, 0);
			OK(et_erase(s, t, eids, 1, NULL));
			assert_int_equal(stats_of(s, t).keys_erased,
					 NSTORED * (GN - GK));
			OK(et_checkpoint(s, NULL, 0));
			assert_int_equal(info_of(s, t).rows_logged, nstored);
			assert_int_equal(stats_of(s, t).log_index_rows,
					 nstored);
			fx_close(f, d);
			s = fx_open(f, d, c);
			OK(et_table_open(s, "t", NULL, &t));
			OK(et_table_open(s, "ref", NULL, &ref));
			OK(et_table_open(s, "rows", NULL, &rowt));
			assert_int_equal(info_of(s, t).rows_logged, nstored);
		}
	}

	/* Erased ids updated again: stored again, the update applied to
	 * their initial values, as on a table that never stored them. */
	{
		uint64_t again[3] = {0, UINT64_MAX, grp[G_A][GK + 3]};
		float a3[3 * DIM], b3[3 * DIM], g3[3 * DIM];

		rand_floats(&rng, g3, 3 * DIM);
		OK(et_update(s, t, again, 3, g3, &up));
		OK(et_update(s, ref, again, 3, g3, &up));
		OK(et_gather(s, t, again, 3, a3));
		OK(et_gather(s, ref, again, 3, b3));
		same_rows("updated after erase", again, b3, a3, 3);
		nstored += 3;
		OK(et_checkpoint(s, NULL, 0));
		assert_int_equal(info_of(s, t).rows_logged, nstored);
		/* The reference value is init - lr * g. */
		{
			float i3[3 * DIM];

			OK(et_gather(s, ref, again, 3, b3));
			/* ref stored them now; recompute the initial values
			 * from the pool's copy */
			for (size_t i = 0; i < 3; i++) {
				size_t pi = 0;

				while (pool[pi] != again[i])
					pi++;
				memcpy(i3 + i * DIM, init + pi * DIM,
				       DIM * sizeof(float));
			}
			for (size_t i = 0; i < 3 * DIM; i++)
				assert_true(
				    fabsf(b3[i] - (i3[i] - up.lr * g3[i])) <=
				    1e-6f);
		}
	}

	/* A row-indexed table: -EINVAL, nothing changed; an unknown table:
	 * ET_ENOTABLE. */
	{
		uint64_t r5 = 5;
		float w5[DIM], g5[DIM];
		int rc;

		vals_of(&r5, 1, w5);
		OK(et_write_rows(s, rowt, &r5, 1, w5));
		uint64_t base = stats_of(s, -1).keys_erased;

		rc = et_erase(s, rowt, &r5, 1, &erased);
		assert_int_equal(rc, -EINVAL);
		gat1(s, rowt, 5, g5);
		same_rows("row-indexed after refused erase", &r5, w5, g5, 1);
		assert_int_equal(et_erase(s, 99, &r5, 1, &erased), ET_ENOTABLE);
		assert_int_equal(et_erase(s, t, NULL, 1, &erased), -EINVAL);
		assert_true(et_errdetail()[0] != '\0');
		assert_int_equal(et_erase(NULL, t, &r5, 1, &erased), -EINVAL);
		assert_int_equal(stats_of(s, -1).keys_erased, base);
	}

	/* An erase, then a clean close without a checkpoint: the close
	 * commits it. */
	{
		float e8[8 * DIM];

		OK(et_erase(s, t, grp[G_C], 8, &erased));
		assert_int_equal(erased, 8);
		nstored -= 8;
		fx_close(f, d);
		s = fx_open(f, d, c);
		OK(et_table_open(s, "t", NULL, &t));
		assert_int_equal(info_of(s, t).rows_logged, nstored);
		gat(s, t, grp[G_C], 8, e8);
		same_rows("erased, closed without checkpoint", grp[G_C],
			  init + G_C * GN * DIM, e8, 8);
	}

	gat(s, t, pool, NGROUPS * GN, snap);
	gat(s, t, fill, NF, snap + NGROUPS * GN * DIM);
	fx_close(f, d);

	/* Offline, the file lists what is stored: the kept part of each
	 * stored group but C's first 8, F, and the 3 updated again. */
	{
		uint64_t *want = tu_calloc(NGROUPS * GN + NF, sizeof(*want));
		uint64_t *listed =
		    tu_calloc(NGROUPS * GN + NF + 1, sizeof(*listed));
		char path[PATH_MAX];
		size_t nw = 0, nl;

		for (int k = 0; k < NSTORED; k++)
			for (size_t i = k == G_C ? 8 : 0; i < GK; i++)
				want[nw++] = grp[k][i];
		memcpy(want + nw, fill, NF * sizeof(*fill));
		nw += NF;
		want[nw++] = 0;
		want[nw++] = UINT64_MAX;
		want[nw++] = grp[G_A][GK + 3];
		assert_int_equal(uniq(want, nw), nw);
		assert_int_equal(nw, nstored);
		table_path(f, d, "t", path);
		nl = list_ids(path, 1000, listed, NGROUPS * GN + NF + 1);
		assert_int_equal(nl, nw);
		assert_memory_equal(listed, want, nw * sizeof(*want));
		free(want);
		free(listed);
	}

	free(pool);
	free(eids);
	free(init);
	free(before);
	free(got);
	free(fv);
	free(fg);
	free(v);
	free(gr);
}

static void test_erase(void **state)
{
	struct fx *f = *state;
	const size_t n = NGROUPS * GN + 4000;
	float *a = tu_calloc(n, DIM * sizeof(float));
	float *b = tu_calloc(n, DIM * sizeof(float));

	erase_run(f, &CFG_TINY, a, n);
	erase_run(f, &CFG_BIG, b, n);
	same_rows("erase, tiny vs big DDR", NULL, a, b, n);
	erase_run(f, &CFG_TINY_HBM, b, n);
	same_rows("erase, tiny DDR vs HBM + DDR", NULL, a, b, n);
	free(a);
	free(b);
}

/* Erasing ids a prefetch is bringing up (on the store's prefetch thread
 * or not), or has pinned: they read as initial, then and after a reopen;
 * the others prefetched with them keep their values. */
static void test_erase_prefetched(void **state)
{
	struct fx *f = *state;
	const size_t n = 400;
	struct et_table_params p = kparams(ET_OPT_SGD, 29);
	uint64_t *ids = key_pool(44, n);
	float *v = tu_calloc(n, DIM * sizeof(float));
	float *init = tu_calloc(n, DIM * sizeof(float));
	float *got = tu_calloc(n, DIM * sizeof(float));

	vals_of(ids, n, v);
	for (int pft = 0; pft < 2; pft++) {
		struct et_store_config c = CFG_TINY_HBM;
		int d = fx_new(f), t, ref;
		et_store *s;
		uint64_t e;

		c.prefetch_thread = (uint32_t)pft;
		s = fx_open(f, d, &c);
		OK(et_table_create(s, "t", &p, &t));
		OK(et_table_create(s, "ref", &p, &ref));
		gat(s, ref, ids, n, init);
		wr(s, t, ids, n, v);
		OK(et_checkpoint(s, NULL, 0));
		fx_close(f, d);

		s = fx_open(f, d, &c);
		OK(et_table_open(s, "t", NULL, &t));
		for (int k = 0; k < 2; k++) {
			/* k 0: reads in flight; k 1: the rows pinned */
			const uint64_t *part = ids + k * (n / 2);
			struct et_batch_ids pb = {
			    .table = t, .ids = part, .n = n / 2};

			OK(et_prefetch(s, &pb, 1));
			if (k == 1)
				gat(s, t, part, n / 2, got);
			OK(et_erase(s, t, part, n / 4, &e));
			assert_int_equal(e, n / 4);
			gat(s, t, part, n / 2, got);
			same_rows("erased while prefetched", part,
				  init + k * (n / 2) * DIM, got, n / 4);
			same_rows("prefetched with them", part + n / 4,
				  v + (k * (n / 2) + n / 4) * DIM,
				  got + (n / 4) * DIM, n / 4);
		}
		fx_close(f, d);
		s = fx_open(f, d, &c);
		OK(et_table_open(s, "t", NULL, &t));
		assert_int_equal(info_of(s, t).rows_logged, n / 2);
		gat(s, t, ids, n, got);
		for (int k = 0; k < 2; k++) {
			size_t o = k * (n / 2);

			same_rows("erased, reopened", ids + o, init + o * DIM,
				  got + o * DIM, n / 4);
			same_rows("kept, reopened", ids + o + n / 4,
				  v + (o + n / 4) * DIM,
				  got + (o + n / 4) * DIM, n / 4);
		}
		fx_close(f, d);
	}
	free(ids);
	free(v);
	free(init);
	free(got);
}

/*
 * A crash (the process ends without et_store_close) returns the table to
 * its last commit: an erase since then is undone, and so are writes and
 * updates, even after an et_flush. Each session runs in a child that
 * _exit()s with the store open; the parent checks what reopens.
 */
#define CN 200

/* Child: one session on dir; ops 1 or 2. Exits 0 if every call did. */
static void crash_child(const char *dir, int ops, const uint64_t *ids,
			const uint64_t *fresh)
{
	struct et_update_params up = {.lr = 0.5f};
	static float v[CN * DIM];
	et_store *s;
	uint64_t e;
	int t;

	if (et_store_open(dir, &CFG_TINY, &s) ||
	    et_table_open(s, "t", NULL, &t))
		_exit(2);
	for (size_t i = 0; i < CN * DIM; i++)
		v[i] = (float)i;
	if (ops == 1) {
		/* an erase, flushed: never committed */
		if (et_erase(s, t, ids, CN / 2, &e) || e != CN / 2)
			_exit(3);
		if (et_flush(s) || et_write_rows(s, t, fresh, 50, v) ||
		    et_update(s, t, ids + 150, 10, v, &up) || et_flush(s))
			_exit(4);
	} else {
		/* an erase committed, a second one not */
		if (et_erase(s, t, ids, CN / 2, &e) || e != CN / 2 ||
		    et_checkpoint(s, NULL, 0))
			_exit(5);
		if (et_erase(s, t, ids + CN / 2, CN / 4, &e) || e != CN / 4 ||
		    et_write_rows(s, t, fresh, 50, v) || et_flush(s))
			_exit(6);
	}
	_exit(0); /* no close: a crash as far as the store can tell */
}

static void crash_session(struct fx *f, int d, int ops, const uint64_t *ids,
			  const uint64_t *fresh)
{
	int status = -1;
	pid_t pid = fork();

	assert_true(pid >= 0);
	if (pid == 0)
		crash_child(f->dirs[d], ops, ids, fresh);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		print_error("crash child (ops %d): status %#x\n", ops, status);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

static void test_erase_crash(void **state)
{
	struct fx *f = *state;
	int d = fx_new(f), t, ref;
	et_store *s = fx_open(f, d, &CFG_TINY);
	struct et_table_params p = kparams(ET_OPT_SGD, 61);
	uint64_t *pool = key_pool(99, CN + 50);
	const uint64_t *ids = pool, *fresh = pool + CN; /* edges in ids */
	float *v = tu_calloc(CN + 50, DIM * sizeof(float));
	float *init = tu_calloc(CN + 50, DIM * sizeof(float));
	float *got = tu_calloc(CN + 50, DIM * sizeof(float));

	OK(et_table_create(s, "t", &p, &t));
	OK(et_table_create(s, "ref", &p, &ref));
	gat(s, ref, pool, CN + 50, init);
	vals_of(ids, CN, v);
	wr(s, t, ids, CN, v);
	OK(et_checkpoint(s, NULL, 0));
	fx_close(f, d);

	/* An erase (and writes, updates) flushed but not committed. */
	crash_session(f, d, 1, ids, fresh);
	s = fx_open(f, d, &CFG_TINY);
	OK(et_table_open(s, "t", NULL, &t));
	assert_int_equal(info_of(s, t).rows_logged, CN);
	gat(s, t, pool, CN + 50, got);
	same_rows("erase undone by a crash", ids, v, got, CN);
	same_rows("writes undone by a crash", fresh, init + CN * DIM,
		  got + CN * DIM, 50);
	fx_close(f, d);

	/* An erase committed, then another not. */
	crash_session(f, d, 2, ids, fresh);
	s = fx_open(f, d, &CFG_TINY);
	OK(et_table_open(s, "t", NULL, &t));
	assert_int_equal(info_of(s, t).rows_logged, CN / 2);
	gat(s, t, pool, CN + 50, got);
	same_rows("committed erase", ids, init, got, CN / 2);
	same_rows("uncommitted erase", ids + CN / 2, v + CN / 2 * DIM,
		  got + CN / 2 * DIM, CN / 2);
	same_rows("uncommitted writes", fresh, init + CN * DIM, got + CN * DIM,
		  50);
	fx_close(f, d);

	free(pool);
	free(v);
	free(init);
	free(got);
}

/*
 * Churn: rounds of writes, updates and erases of random ids of a pool
 * (some named twice in a call, some erased and stored again in one
 * round), with commits by checkpoint and by clean close, mirrored on a
 * row-indexed table where an erase is a write of the id's initial value.
 * Each erase's count is the ids it named that were stored; after each
 * commit rows_logged is the number stored; at the end every id reads as
 * its mirror, and the file lists exactly the ids stored.
 */
static void test_erase_churn(void **state)
{
	struct fx *f = *state;
	const size_t np = 3000, B = 300;
	int d = fx_new(f), t, r;
	et_store *s = fx_open(f, d, &CFG_TINY);
	struct et_table_params pk = kparams(ET_OPT_SGD, 71);
	struct et_table_params pr = rparams(ET_OPT_SGD, 71, np);
	struct et_update_params up = {.lr = 0.25f};
	uint64_t *pool = key_pool(123, np);
	uint64_t *rows = tu_calloc(np, sizeof(*rows));
	uint64_t *kid = tu_calloc(B, sizeof(*kid));
	uint64_t *rid = tu_calloc(B, sizeof(*rid));
	float *init = tu_calloc(np, DIM * sizeof(float));
	float *a = tu_calloc(np, DIM * sizeof(float));
	float *b = tu_calloc(np, DIM * sizeof(float));
	float *g = tu_calloc(B, DIM * sizeof(float));
	bool *stored = tu_calloc(np, sizeof(bool));
	bool *named = tu_calloc(np, sizeof(bool));
	size_t nstored = 0;
	struct tu_rng rng;

	tu_rng_seed(&rng, 31);
	OK(et_table_create(s, "k", &pk, &t));
	OK(et_table_create(s, "r", &pr, &r));
	for (size_t i = 0; i < np; i++)
		rows[i] = i;
	gat(s, t, pool, np, init);
	wr(s, r, rows, np, init);

	for (int round = 0; round < 30; round++) {
		for (int op = 0; op < 3; op++) {
			/* ids: B of the pool, repeats allowed, the edges
			 * often */
			for (size_t i = 0; i < B; i++) {
				size_t p = tu_rng_below(&rng, 10) == 0
					       ? tu_rng_below(&rng, NEDGES)
					       : tu_rng_below(&rng, np);

				kid[i] = pool[p];
				rid[i] = p;
			}
			if (op == 0) {
				vals_of(kid, B, g);
				for (size_t i = 0; i < B * DIM; i++)
					g[i] += (float)round;
				OK(et_write_rows(s, t, kid, B, g));
				OK(et_write_rows(s, r, rid, B, g));
			} else if (op == 1) {
				rand_floats(&rng, g, B * DIM);
				OK(et_update(s, t, kid, B, g, &up));
				OK(et_update(s, r, rid, B, g, &up));
			}
			if (op < 2) {
				for (size_t i = 0; i < B; i++) {
					nstored += !stored[rid[i]];
					stored[rid[i]] = true;
				}
			} else {
				uint64_t e = 0, want = 0;

				for (size_t i = 0; i < B; i++) {
					if (!named[rid[i]] && stored[rid[i]])
						want++;
					named[rid[i]] = true;
				}
				OK(et_erase(s, t, kid, B, &e));
				assert_int_equal(e, want);
				for (size_t i = 0; i < B; i++) {
					size_t p = rid[i];

					named[p] = false;
					nstored -= stored[p];
					stored[p] = false;
					memcpy(g + i * DIM, init + p * DIM,
					       DIM * sizeof(float));
				}
				OK(et_write_rows(s, r, rid, B, g));
			}
			/* sometimes the erased part again, stored anew */
			if (op == 2 && round % 4 == 1) {
				vals_of(kid, B / 4, g);
				OK(et_write_rows(s, t, kid, B / 4, g));
				OK(et_write_rows(s, r, rid, B / 4, g));
				for (size_t i = 0; i < B / 4; i++) {
					nstored += !stored[rid[i]];
					stored[rid[i]] = true;
				}
			}
		}
		switch (round % 5) {
		case 0:
		case 1:
		case 3:
			OK(et_checkpoint(s, NULL, 0));
			assert_int_equal(info_of(s, t).rows_logged, nstored);
			break;
		case 2: /* a clean close commits */
			fx_close(f, d);
			s = fx_open(f, d, &CFG_TINY);
			OK(et_table_open(s, "k", NULL, &t));
			OK(et_table_open(s, "r", NULL, &r));
			assert_int_equal(info_of(s, t).rows_logged, nstored);
			break;
		default: /* no commit */
			break;
		}
		if (round % 3 == 0) {
			gat(s, t, pool, np, a);
			gat(s, r, rows, np, b);
			same_rows("churn", pool, b, a, np);
		}
	}
	OK(et_checkpoint(s, NULL, 0));
	assert_int_equal(info_of(s, t).rows_logged, nstored);
	assert_int_equal(stats_of(s, t).log_index_rows, nstored);
	fx_close(f, d);
	s = fx_open(f, d, &CFG_BIG);
	OK(et_table_open(s, "k", NULL, &t));
	OK(et_table_open(s, "r", NULL, &r));
	gat(s, t, pool, np, a);
	gat(s, r, rows, np, b);
	same_rows("churn, reopened", pool, b, a, np);
	fx_close(f, d);
	{
		uint64_t *want = tu_calloc(np, sizeof(*want));
		uint64_t *listed = tu_calloc(np + 1, sizeof(*listed));
		char path[PATH_MAX];
		size_t nw = 0;

		for (size_t i = 0; i < np; i++)
			if (stored[i])
				want[nw++] = pool[i];
		assert_int_equal(nw, nstored);
		uniq(want, nw);
		table_path(f, d, "k", path);
		assert_int_equal(list_ids(path, 512, listed, np + 1), nw);
		assert_memory_equal(listed, want, nw * sizeof(*want));
		free(want);
		free(listed);
	}
	free(pool);
	free(rows);
	free(kid);
	free(rid);
	free(init);
	free(a);
	free(b);
	free(g);
	free(stored);
	free(named);
}

/* ---------------------------------------------------------- 6. admission */

#define NADM 7

/* The admission scenario on table "t" (admit_after 3), mirrored on "ref"
 * (no policy) with only the updates "t" should apply. snap receives t's
 * rows of X, Y, Z, V, U, W, Q. */
static void admission_run(struct fx *f, const struct et_store_config *c,
			  float *snap)
{
	const uint64_t X = 0, Y = UINT64_MAX, Z = P63, V = 12345, U = P40,
		       W = 777, Q = P40 - 1;
	const uint64_t all[NADM] = {X, Y, Z, V, U, W, Q};
	const struct et_key_policy kp = {.admit_after = 3};
	const struct et_key_policy bad[] = {
	    {.admit_after = 16},
	    {.admit_after = 100},
	    {.admit_after = 3, .filter_log2 = 9},
	    {.admit_after = 3, .filter_log2 = 5},
	    {.admit_after = 3, .filter_log2 = 31},
	    {.admit_after = 3, .filter_log2 = 64},
	};
	struct et_update_params up = {.lr = 0.5f};
	struct et_table_params p = kparams(ET_OPT_SGD, 5);
	struct et_table_params pr = rparams(ET_OPT_SGD, 5, 1000);
	int d = fx_new(f), t, ref, t2, fill, rowt;
	et_store *s = fx_open(f, d, c);
	float init[NADM * DIM], a[4 * DIM], b[4 * DIM], g[4 * DIM];
	struct tu_rng rng;
	uint64_t dropped = 0, base = 0;

#define IDX(id)                                                                \
	(size_t)((id) == X   ? 0                                               \
		 : (id) == Y ? 1                                               \
		 : (id) == Z ? 2                                               \
		 : (id) == V ? 3                                               \
		 : (id) == U ? 4                                               \
		 : (id) == W ? 5                                               \
			     : 6)
#define INIT(id) (init + IDX(id) * DIM)
#define DROPPED(n)                                                             \
	do {                                                                   \
		dropped = (n);                                                 \
		assert_int_equal(stats_of(s, t).keys_dropped - base, dropped); \
	} while (0)

	tu_rng_seed(&rng, 8);
	OK(et_table_create(s, "t", &p, &t));
	OK(et_table_create(s, "ref", &p, &ref));
	OK(et_table_create(s, "t2", &p, &t2));
	OK(et_table_create(s, "fill", &p, &fill));
	OK(et_table_create(s, "rows", &pr, &rowt));
	OK(et_gather(s, ref, all, NADM, init));
	OK(et_key_policy_set(s, t, &kp));

	/* Call 1: X twice and Y: two ids dropped. */
	{
		uint64_t ids[3] = {X, X, Y};

		rand_floats(&rng, g, 3 * DIM);
		OK(et_update(s, t, ids, 3, g, &up));
		DROPPED(2);
		OK(et_gather(s, t, ids, 3, a));
		same_rows("call 1: X", &X, INIT(X), a, 1);
		same_rows("call 1: X", &X, INIT(X), a + DIM, 1);
		same_rows("call 1: Y", &Y, INIT(Y), a + 2 * DIM, 1);
	}
	traffic(s, fill, &rng, 3000);
	/* Call 2: X; gathers in between count for nothing. */
	rand_floats(&rng, g, DIM);
	upd1(s, t, X, g, &up);
	DROPPED(3);
	gat1(s, t, X, a);
	same_rows("call 2: X", &X, INIT(X), a, 1);
	gat1(s, t, X, a);
	traffic(s, fill, &rng, 3000);
	/* Call 3: X is admitted, this call's update applied. */
	rand_floats(&rng, g, DIM);
	upd1(s, t, X, g, &up);
	upd1(s, ref, X, g, &up);
	DROPPED(3);
	gat1(s, t, X, a);
	gat1(s, ref, X, b);
	same_rows("call 3: X", &X, b, a, 1);
	assert_false(row_eq(a, INIT(X)));

	/* Y: call 4 (twice in it), then a pooled call 5 with V: Y admitted,
	 * its bag's gradient applied; V dropped. */
	{
		uint64_t ids[2] = {Y, Y};
		uint64_t bag[2] = {Y, V}, off[2] = {0, 2}, offr[2] = {0, 1};

		rand_floats(&rng, g, 2 * DIM);
		OK(et_update(s, t, ids, 2, g, &up));
		DROPPED(4);
		gat1(s, t, Y, a);
		same_rows("call 4: Y", &Y, INIT(Y), a, 1);
		rand_floats(&rng, g, DIM);
		OK(et_update_pooled(s, t, bag, off, 1, ET_POOL_SUM, g, &up));
		OK(et_update_pooled(s, ref, bag, offr, 1, ET_POOL_SUM, g, &up));
		DROPPED(5);
		OK(et_gather(s, t, bag, 2, a));
		OK(et_gather(s, ref, bag, 1, b));
		same_rows("call 5: Y", &Y, b, a, 1);
		same_rows("call 5: V", &V, INIT(V), a + DIM, 1);
	}

	/* Z written: admitted at once. */
	{
		float vz[DIM];

		vals_of(&Z, 1, vz);
		OK(et_write_rows(s, t, &Z, 1, vz));
		OK(et_write_rows(s, ref, &Z, 1, vz));
		rand_floats(&rng, g, DIM);
		upd1(s, t, Z, g, &up);
		upd1(s, ref, Z, g, &up);
		DROPPED(5);
		gat1(s, t, Z, a);
		gat1(s, ref, Z, b);
		same_rows("written, then updated", &Z, b, a, 1);
	}
	/* V: its second call. */
	rand_floats(&rng, g, DIM);
	upd1(s, t, V, g, &up);
	DROPPED(6);

	/* Bad policies change nothing: t keeps admit_after 3 (U is dropped),
	 * t2 keeps none (U applied at once). */
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int rc = et_key_policy_set(s, t, &bad[i]);

		if (rc != -EINVAL && rc != ET_ECONFIG)
			print_error("bad policy #%zu: %d (%s)\n", i, rc,
				    et_strerror(rc));
		assert_true(rc == -EINVAL || rc == ET_ECONFIG);
		rc = et_key_policy_set(s, t2, &bad[i]);
		assert_true(rc == -EINVAL || rc == ET_ECONFIG);
	}
	rand_floats(&rng, g, DIM);
	upd1(s, t, U, g, &up);
	DROPPED(7);
	gat1(s, t, U, a);
	same_rows("U under a policy a bad call left", &U, INIT(U), a, 1);
	upd1(s, t2, U, g, &up);
	upd1(s, ref, U, g, &up);
	gat1(s, t2, U, a);
	gat1(s, ref, U, b);
	same_rows("U on t2, no policy", &U, b, a, 1);
	assert_int_equal(stats_of(s, t2).keys_dropped, 0);

	/* A row-indexed table takes no policy; its updates apply at once. */
	{
		float r0[DIM], r1[DIM];
		int rc = et_key_policy_set(s, rowt, &kp);

		assert_int_equal(et_key_policy_set(s, t, NULL), -EINVAL);
		assert_int_equal(et_key_policy_set(NULL, t, &kp), -EINVAL);
		assert_int_equal(et_key_policy_set(s, 99, &kp), ET_ENOTABLE);

		assert_true(rc != 0);
		gat1(s, rowt, 5, r0);
		rand_floats(&rng, g, DIM);
		upd1(s, rowt, 5, g, &up);
		gat1(s, rowt, 5, r1);
		assert_false(row_eq(r0, r1));
		assert_int_equal(stats_of(s, rowt).keys_dropped, 0);
	}
	/* The edges of the valid ranges: admit_after 1 is off; 2 with the
	 * smallest filter admits on the second call. */
	{
		struct et_key_policy one = {.admit_after = 1};
		struct et_key_policy two = {.admit_after = 2,
					    .filter_log2 = 10};
		struct et_key_policy fifteen = {.admit_after = 15,
						.filter_log2 = 12};

		OK(et_key_policy_set(s, fill, &fifteen));
		OK(et_key_policy_set(s, t2, &one));
		rand_floats(&rng, g, DIM);
		upd1(s, t2, W, g, &up);
		upd1(s, ref, W, g, &up);
		gat1(s, t2, W, a);
		gat1(s, ref, W, b);
		same_rows("admit_after 1", &W, b, a, 1);
		OK(et_key_policy_set(s, t2, &two));
		rand_floats(&rng, g, DIM);
		upd1(s, t2, Q, g, &up);
		gat1(s, t2, Q, a);
		same_rows("admit_after 2, call 1", &Q, INIT(Q), a, 1);
		assert_int_equal(stats_of(s, t2).keys_dropped, 1);
		rand_floats(&rng, g, DIM);
		upd1(s, t2, Q, g, &up);
		gat1(s, t2, Q, a);
		assert_false(row_eq(a, INIT(Q)));
		assert_int_equal(stats_of(s, t2).keys_dropped, 1);
	}
	assert_int_equal(stats_of(s, t).keys_dropped, 7);

	/* Stored: X, Y, Z; not V, U. */
	OK(et_checkpoint(s, NULL, 0));
	assert_int_equal(info_of(s, t).rows_logged, 3);
	assert_int_equal(stats_of(s, t).log_index_rows, 3);
	fx_close(f, d);

	/* Reopened, policy set again: X (stored) is updated at once; V's
	 * count goes on from the last commit (its two calls before the close
	 * count), so its first call after the reopen, its third, stores it. */
	s = fx_open(f, d, c);
	OK(et_table_open(s, "t", NULL, &t));
	OK(et_table_open(s, "ref", NULL, &ref));
	OK(et_table_open(s, "fill", NULL, &fill));
	OK(et_key_policy_set(s, t, &kp));
	base = stats_of(s, t).keys_dropped;
	rand_floats(&rng, g, DIM);
	upd1(s, t, X, g, &up);
	upd1(s, ref, X, g, &up);
	DROPPED(0);
	gat1(s, t, X, a);
	gat1(s, ref, X, b);
	same_rows("stored before the reopen", &X, b, a, 1);
	rand_floats(&rng, g, DIM);
	upd1(s, t, V, g, &up);
	gat1(s, t, V, a);
	traffic(s, fill, &rng, 2000);
	DROPPED(0);
	upd1(s, ref, V, g, &up);
	gat1(s, ref, V, b);
	same_rows("V admitted at its third call, after the reopen", &V, b, a,
		  1);
	OK(et_gather(s, t, all, NADM, snap));
	fx_close(f, d);
#undef IDX
#undef INIT
#undef DROPPED
}

/* A filter small enough for ids to share counters (4 x 2^10 of them for
 * 5 000 ids), admit_after 4: whatever it admits early, the same calls give
 * the same bits and the same keys_dropped whatever the tiers. */
static void admission_heavy(struct fx *f, const struct et_store_config *c,
			    const uint64_t *pool, size_t np, float *out,
			    uint64_t *dropped)
{
	const size_t B = 500;
	const struct et_key_policy kp = {.admit_after = 4, .filter_log2 = 10};
	struct et_table_params p = kparams(ET_OPT_ROWWISE_ADAGRAD, 13);
	struct et_update_params up = {.lr = 0.1f};
	int d = fx_new(f), t;
	et_store *s = fx_open(f, d, c);
	uint64_t *ids = tu_calloc(B, sizeof(*ids));
	float *g = tu_calloc(B, DIM * sizeof(float));
	struct tu_rng rng;

	tu_rng_seed(&rng, 555);
	OK(et_table_create(s, "t", &p, &t));
	OK(et_key_policy_set(s, t, &kp));
	for (int call = 0; call < 40; call++) {
		for (size_t i = 0; i < B; i++) {
			/* skewed: low indices far more often */
			uint64_t x = tu_rng_below(&rng, np);

			ids[i] = pool[tu_rng_below(&rng, x + 1)];
		}
		rand_floats(&rng, g, B * DIM);
		OK(et_update(s, t, ids, B, g, &up));
		if (call == 20)
			OK(et_checkpoint(s, NULL, 0));
	}
	gat(s, t, pool, np, out);
	*dropped = stats_of(s, t).keys_dropped;
	assert_true(*dropped > 0);
	fx_close(f, d);
	free(ids);
	free(g);
}

static void test_admission(void **state)
{
	struct fx *f = *state;
	float a[NADM * DIM], b[NADM * DIM];
	const size_t np = 5000;
	uint64_t *pool = key_pool(202, np), da, db, dc;
	float *x = tu_calloc(np, DIM * sizeof(float));
	float *y = tu_calloc(np, DIM * sizeof(float));
	float *z = tu_calloc(np, DIM * sizeof(float));

	admission_run(f, &CFG_TINY, a);
	admission_run(f, &CFG_BIG, b);
	same_rows("admission, tiny vs big DDR", NULL, a, b, NADM);

	admission_heavy(f, &CFG_TINY, pool, np, x, &da);
	admission_heavy(f, &CFG_BIG, pool, np, y, &db);
	admission_heavy(f, &CFG_TINY_HBM, pool, np, z, &dc);
	same_rows("crowded filter, tiny vs big DDR", pool, x, y, np);
	same_rows("crowded filter, tiny vs HBM", pool, x, z, np);
	assert_int_equal(da, db);
	assert_int_equal(da, dc);
	free(pool);
	free(x);
	free(y);
	free(z);
}

/* An id written or updated before admission is turned on, still only
 * dirty in a cache, is stored: its next update is applied, not dropped. */
static void test_admission_after_writes(void **state)
{
	struct fx *f = *state;
	const struct et_key_policy kp = {.admit_after = 3};
	struct et_update_params up = {.lr = 0.5f};
	struct et_table_params p = kparams(ET_OPT_SGD, 23);
	int d = fx_new(f), t;
	et_store *s = fx_open(f, d, &CFG_BIG);
	const uint64_t W = 1ULL << 63, U = 77;
	float g[DIM], w[DIM], x[DIM], y[DIM];

	for (uint32_t j = 0; j < DIM; j++) {
		g[j] = 0.125f * (float)(j + 1);
		w[j] = (float)j;
	}
	OK(et_table_create(s, "t", &p, &t));
	OK(et_write_rows(s, t, &W, 1, w));
	upd1(s, t, U, g, &up);
	gat1(s, t, U, y);
	OK(et_key_policy_set(s, t, &kp));
	upd1(s, t, W, g, &up);
	upd1(s, t, U, g, &up);
	gat1(s, t, W, x);
	assert_false(row_eq(x, w));
	gat1(s, t, U, x);
	assert_false(row_eq(x, y));
	assert_int_equal(stats_of(s, t).keys_dropped, 0);
}

/* Each of ids[0..n) updated once (one call each); returns how many of
 * those calls' updates the filter dropped. */
static uint64_t sight(et_store *s, int t, const uint64_t *ids, size_t n)
{
	struct et_update_params up = {.lr = 0.5f};
	uint64_t d0 = stats_of(s, t).keys_dropped;
	float g[DIM];

	for (uint32_t j = 0; j < DIM; j++)
		g[j] = 0.25f * (float)(j + 1);
	for (size_t i = 0; i < n; i++)
		upd1(s, t, ids[i], g, &up);
	return stats_of(s, t).keys_dropped - d0;
}

/*
 * The filter's counts at a commit come back with the policy after a
 * reopen (admit_after 3): an id seen before a checkpoint and a close is
 * stored at its third sighting after the reopen, as in a store never
 * closed. A clean close with dropped sightings alone commits them; the
 * sightings after the last commit are not kept by a crash (a child
 * _exit()s with the store open). The same settings set again mid-session
 * keep the counts; other settings start from zero. A filter file of the
 * last commit flipped, cut or zeroed is refused and changes nothing.
 */
/* Of the table file tp's two saved filters (docs/FORMAT.md), the one of
 * commit (its header's commit) into adm, the other slot's into other. */
static void adm_of(const char *tp, uint64_t commit, char *adm, char *other)
{
	int found = -1;

	for (int k = 0; k < 2; k++) {
		char p[PATH_MAX + 8];
		unsigned char h[8];

		snprintf(p, sizeof(p), "%s.adm%s", tp, k ? "1" : "0");
		if (tu_pread(p, 8, h, 8) == 0) {
			uint64_t c = 0;

			for (int b = 7; b >= 0; b--) /* little-endian */
				c = c << 8 | h[b];
			if (c == commit)
				found = k;
		}
	}
	assert_true(found >= 0);
	snprintf(adm, PATH_MAX + 8, "%s.adm%s", tp, found ? "1" : "0");
	snprintf(other, PATH_MAX + 8, "%s.adm%s", tp, found ? "0" : "1");
}

static void test_admission_reopen(void **state)
{
	struct fx *f = *state;
	const struct et_key_policy kp = {.admit_after = 3};
	const struct et_key_policy kp4 = {.admit_after = 4};
	struct et_table_params p = kparams(ET_OPT_SGD, 29);
	int d = fx_new(f), t;
	et_store *s = fx_open(f, d, &CFG_BIG);
	const uint64_t A = 5, B = UINT64_MAX, C = 1ULL << 40, D = 0, E = 7,
		       F = 8;
	char tp[PATH_MAX], adm[PATH_MAX + 8], other[PATH_MAX + 8];
	struct et_checkpoint_info ci;
	uint64_t saved;
	pid_t pid;
	int st;

	OK(et_table_create(s, "t", &p, &t));
	OK(et_key_policy_set(s, t, &kp));
	assert_int_equal(sight(s, t, (uint64_t[]){A, B, C}, 3), 3);
	OK(et_checkpoint(s, NULL, 0));
	assert_int_equal(sight(s, t, &B, 1), 1); /* B 2 */
	OK(et_key_policy_set(s, t, &kp));	 /* the same: go on */
	assert_int_equal(sight(s, t, (uint64_t[]){C, D}, 2), 2); /* C 2, D 1 */
	fx_close(f, d); /* only dropped sightings: the close commits them */
	s = fx_open(f, d, &CFG_BIG);
	OK(et_table_open(s, "t", NULL, &t));
	OK(et_key_policy_set(s, t, &kp));
	assert_int_equal(sight(s, t, &A, 1), 1); /* A 2 */
	assert_int_equal(sight(s, t, &A, 1), 0); /* A 3: stored */
	assert_int_equal(sight(s, t, &B, 1), 0); /* B 3 */
	assert_int_equal(sight(s, t, &D, 1), 1); /* D 2 */
	assert_int_equal(sight(s, t, &D, 1), 0); /* D 3 */
	fx_close(f, d);
	/* a crash after a checkpoint: E's sighting before it is kept, F's
	 * after it is not */
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		et_store *c;
		int ct;

		if (et_store_open(f->dirs[d], &CFG_BIG, &c) ||
		    et_table_open(c, "t", NULL, &ct) ||
		    et_key_policy_set(c, ct, &kp) || sight(c, ct, &E, 1) != 1 ||
		    et_checkpoint(c, NULL, 0) || sight(c, ct, &F, 1) != 1)
			_exit(1);
		_exit(0);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	s = fx_open(f, d, &CFG_BIG);
	OK(et_table_open(s, "t", NULL, &t));
	OK(et_key_policy_set(s, t, &kp));
	assert_int_equal(sight(s, t, (uint64_t[]){E, E}, 2), 1); /* E 2, 3 */
	assert_int_equal(sight(s, t, (uint64_t[]){F, F, F}, 3), 2);
	OK(et_checkpoint(s, NULL, 0));
	/* other settings: counts from zero (C's 2 forgotten) */
	OK(et_key_policy_set(s, t, &kp4));
	assert_int_equal(sight(s, t, (uint64_t[]){C, C, C}, 3), 3);
	OK(et_checkpoint_info(s, &ci));
	saved = ci.commit + 1; /* the close's commit saves C's 3 */
	fx_close(f, d);
	/* two commits with the table not open: its filter stays named */
	s = fx_open(f, d, &CFG_BIG);
	OK(et_checkpoint(s, NULL, 0));
	fx_close(f, d);
	/* the filter file of that commit damaged: refused, and the
	 * policy (off after the reopen) unchanged */
	s = fx_open(f, d, &CFG_BIG);
	OK(et_table_open(s, "t", NULL, &t));
	table_path(f, d, "t", tp);
	adm_of(tp, saved, adm, other);
	assert_true(exists(adm));
	assert_int_equal(tu_flip_byte(adm, 60, 0x10), 0);
	assert_int_equal(et_key_policy_set(s, t, &kp4), ET_EHDRSUM);
	assert_int_equal(sight(s, t, &(uint64_t){12}, 1), 0); /* off */
	assert_int_equal(tu_flip_byte(adm, 60, 0x10), 0);
	{ /* cut, and its header zeroed: refused too */
		int64_t sz = tu_file_size(adm);
		unsigned char *keep = malloc((size_t)sz), zero[48] = {0};

		assert_int_equal(tu_pread(adm, 0, keep, (size_t)sz), 0);
		assert_int_equal(tu_truncate(adm, sz - 9), 0);
		assert_int_equal(et_key_policy_set(s, t, &kp4), ET_EHDRSUM);
		assert_int_equal(tu_truncate(adm, 30), 0);
		assert_int_equal(et_key_policy_set(s, t, &kp4), ET_EHDRSUM);
		assert_int_equal(tu_pwrite(adm, 0, keep, (size_t)sz), 0);
		assert_int_equal(tu_pwrite(adm, 0, zero, sizeof(zero)), 0);
		assert_int_equal(et_key_policy_set(s, t, &kp4), ET_EHDRSUM);
		assert_int_equal(tu_pwrite(adm, 0, keep, (size_t)sz), 0);
		free(keep);
	}
	/* the file the record names deleted: ET_EMISSING; the other
	 * slot's file in its place: refused */
	{
		char keep[PATH_MAX + 16];

		snprintf(keep, sizeof(keep), "%s.keep", adm);
		assert_int_equal(rename(adm, keep), 0);
		assert_int_equal(et_key_policy_set(s, t, &kp4), ET_EMISSING);
		assert_true(exists(other));
		assert_int_equal(link(other, adm), 0);
		assert_int_equal(et_key_policy_set(s, t, &kp4), ET_EHDRSUM);
		assert_int_equal(unlink(adm), 0);
		assert_int_equal(rename(keep, adm), 0);
	}
	assert_int_equal(sight(s, t, &(uint64_t){13}, 1), 0); /* still off */
	OK(et_key_policy_set(s, t, &kp4));		      /* C 3 of 4 */
	assert_int_equal(sight(s, t, &C, 1), 0);
}

/* ------------------------------------------------------------- 7. expiry */

/* expire_after 2 on "t", mirrored on "ref" (no policy): A updated, W
 * written and G updated before commit 1 only (G gathered before every
 * commit); B updated before every commit. *at receives the commit at which
 * A, W and G went; snap the rows of A, W, G, B at the end. */
static void expiry_run(struct fx *f, const struct et_store_config *c,
		       float *snap, int *at)
{
	const uint64_t A = 0, W = UINT64_MAX, G = P63, B = 12345;
	const uint64_t ids[4] = {A, W, G, B};
	const struct et_key_policy kp = {.expire_after = 2};
	struct et_update_params up = {.lr = 0.5f};
	struct et_table_params p = kparams(ET_OPT_ROWWISE_ADAGRAD, 9);
	int d = fx_new(f), t, ref, fill;
	et_store *s = fx_open(f, d, c);
	float init[4 * DIM], cur[4 * DIM], rb[DIM], g[DIM];
	struct tu_rng rng;

	tu_rng_seed(&rng, 12);
	OK(et_table_create(s, "t", &p, &t));
	OK(et_table_create(s, "ref", &p, &ref));
	OK(et_table_create(s, "fill", &p, &fill));
	OK(et_gather(s, ref, ids, 4, init));
	OK(et_key_policy_set(s, t, &kp));
	*at = 0;
	for (int commit = 1; commit <= 5; commit++) {
		struct et_stats st;
		bool a, w, gg;

		rand_floats(&rng, g, DIM);
		upd1(s, t, B, g, &up);
		upd1(s, ref, B, g, &up);
		if (commit == 1) {
			float vw[DIM];

			rand_floats(&rng, g, DIM);
			upd1(s, t, A, g, &up);
			rand_floats(&rng, g, DIM);
			upd1(s, t, G, g, &up);
			vals_of(&W, 1, vw);
			OK(et_write_rows(s, t, &W, 1, vw));
		}
		gat1(s, t, G, cur);
		traffic(s, fill, &rng, 3000);
		OK(et_checkpoint(s, NULL, 0));

		st = stats_of(s, t);
		OK(et_gather(s, t, ids, 4, cur));
		gat1(s, ref, B, rb);
		same_rows("B, updated before every commit", &B, rb,
			  cur + 3 * DIM, 1);
		a = !row_eq(cur, init);
		w = !row_eq(cur + DIM, init + DIM);
		gg = !row_eq(cur + 2 * DIM, init + 2 * DIM);
		if (!(a == w && w == gg) || (!a && !*at) || (a && commit >= 3))
			print_message(
			    "expiry: commit %d: A %s, W %s, G %s, "
			    "keys_expired %llu, log_index_rows %llu\n",
			    commit, a ? "kept" : "gone", w ? "kept" : "gone",
			    gg ? "kept" : "gone",
			    (unsigned long long)st.keys_expired,
			    (unsigned long long)st.log_index_rows);
		assert_true(a == w && w == gg);
		if (a) {
			assert_int_equal(st.keys_expired, 0);
			assert_int_equal(st.log_index_rows, 4);
			assert_int_equal(info_of(s, t).rows_logged, 4);
			assert_int_equal(*at, 0);
		} else {
			same_rows("expired", ids, init, cur, 3);
			assert_int_equal(st.keys_expired, 3);
			assert_int_equal(st.log_index_rows, 1);
			assert_int_equal(info_of(s, t).rows_logged, 1);
			if (!*at)
				*at = commit;
		}
		assert_int_equal(stats_of(s, ref).keys_expired, 0);
	}
	/* Updated in commit 1's interval: still among the last 2 commits at
	 * commit 2, not at commit 3. */
	assert_int_equal(*at, 3);

	fx_close(f, d);
	s = fx_open(f, d, c);
	OK(et_table_open(s, "t", NULL, &t));
	OK(et_table_open(s, "ref", NULL, &ref));
	OK(et_key_policy_set(s, t, &kp));
	rand_floats(&rng, g, DIM);
	upd1(s, ref, A, g, &up); /* something to commit, not in t */
	OK(et_checkpoint(s, NULL, 0));
	OK(et_gather(s, t, ids, 4, snap));
	gat1(s, ref, B, rb);
	same_rows("B after the reopen and a commit", &B, rb, snap + 3 * DIM, 1);
	same_rows("expired, after the reopen", ids, init, snap, 3);
	assert_int_equal(info_of(s, t).rows_logged, 1);
	fx_close(f, d);
}

static void test_expiry(void **state)
{
	struct fx *f = *state;
	float a[4 * DIM], b[4 * DIM];
	int at_a, at_b;

	expiry_run(f, &CFG_TINY, a, &at_a);
	expiry_run(f, &CFG_BIG, b, &at_b);
	assert_int_equal(at_a, at_b);
	same_rows("expiry, tiny vs big DDR", NULL, a, b, 4);
}

/* A clean close is a commit, but expires nothing: only et_checkpoint
 * does. A, updated before commit 1 only, would have gone at commit 3,
 * the close; it goes at the first checkpoint after the reopen. B, updated
 * last before the close (commit 3), keeps its age across the reopen: kept
 * at commit 4, gone at commit 5, the second checkpoint after the open. */
static void test_expiry_close(void **state)
{
	struct fx *f = *state;
	const uint64_t A = UINT64_MAX, B = 0;
	const struct et_key_policy kp = {.expire_after = 2};
	struct et_update_params up = {.lr = 0.5f};
	struct et_table_params p = kparams(ET_OPT_SGD, 19);
	int d = fx_new(f), t, ref, gone = 0;
	et_store *s = fx_open(f, d, &CFG_TINY);
	float ia[DIM], ib[DIM], x[DIM], g[DIM];

	for (uint32_t j = 0; j < DIM; j++)
		g[j] = 0.25f * (float)(j + 1);
	OK(et_table_create(s, "t", &p, &t));
	OK(et_table_create(s, "ref", &p, &ref));
	gat1(s, ref, A, ia);
	gat1(s, ref, B, ib);
	OK(et_key_policy_set(s, t, &kp));
	upd1(s, t, A, g, &up);
	OK(et_checkpoint(s, NULL, 0)); /* 1 */
	upd1(s, t, B, g, &up);
	OK(et_checkpoint(s, NULL, 0)); /* 2 */
	gat1(s, t, A, x);
	assert_false(row_eq(x, ia));
	upd1(s, t, B, g, &up);
	fx_close(f, d); /* 3 */

	s = fx_open(f, d, &CFG_TINY);
	OK(et_table_open(s, "t", NULL, &t));
	OK(et_table_open(s, "ref", NULL, &ref));
	/* a close's commit expires nothing: only et_checkpoint does */
	assert_int_equal(info_of(s, t).rows_logged, 2);
	gat1(s, t, A, x);
	assert_false(row_eq(x, ia));
	gat1(s, t, B, x);
	assert_false(row_eq(x, ib));

	OK(et_key_policy_set(s, t, &kp));
	for (int c = 1; c <= 5 && !gone; c++) {
		upd1(s, ref, A, g, &up); /* writes elsewhere */
		OK(et_checkpoint(s, NULL, 0));
		gat1(s, t, B, x);
		if (row_eq(x, ib)) {
			gone = c;
			assert_int_equal(stats_of(s, t).keys_expired, 2);
			assert_int_equal(info_of(s, t).rows_logged, 0);
			gat1(s, t, A, x);
			same_rows("expired after the open", &A, ia, x, 1);
		}
	}
	print_message("expiry: B, not updated since the open, went at "
		      "commit %d after it\n",
		      gone);
	assert_int_equal(gone, 2);
}

/* The commit the store stands at. */
static uint64_t commit_of(et_store *s)
{
	struct et_checkpoint_info ci;

	OK(et_checkpoint_info(s, &ci));
	return ci.commit;
}

/* Whether id of table t still reads other than its initial value ini. */
static bool kept1(et_store *s, int t, uint64_t id, const float *ini)
{
	float x[DIM];

	gat1(s, t, id, x);
	return !row_eq(x, ini);
}

/* Checkpoints from commit first to last, each checked to be that commit;
 * gone_at[k]: the commit after which ids[k] first read as ini[k] (0:
 * kept to the end). Then closes the store. */
static void expire_until(struct fx *f, int d, et_store *s, int t,
			 const uint64_t *ids, float (*ini)[DIM], uint64_t first,
			 uint64_t last, int gone_at[3])
{
	for (int k = 0; k < 3; k++)
		gone_at[k] = 0;
	for (uint64_t c = first; c <= last; c++) {
		OK(et_checkpoint(s, NULL, 0));
		assert_int_equal(commit_of(s), c);
		for (int k = 0; k < 3; k++)
			if (!gone_at[k] && !kept1(s, t, ids[k], ini[k]))
				gone_at[k] = (int)c;
	}
	fx_close(f, d);
}

/*
 * Expiry ages survive a reopen, as the rows do: a stamp (the commit a
 * row's record went into) is journaled with it. ids[k] is updated before
 * commit k + 1 only; with expire_after 3 it goes at commit k + 4, whether
 * the store was closed and opened between (reopen) or not. With stamps
 * that restarted at the open, all three would go together, three commits
 * after it. Tiny tiers, so the rows go to the log before the commits.
 */
static void expiry_across(struct fx *f, bool reopen, int gone_at[3])
{
	const uint64_t ids[3] = {7, UINT64_MAX, 1ULL << 63};
	const struct et_key_policy kp = {.expire_after = 3};
	struct et_update_params up = {.lr = 0.5f};
	struct et_table_params p = kparams(ET_OPT_SGD, 23);
	int d = fx_new(f), t;
	et_store *s = fx_open(f, d, &CFG_TINY);
	float ini[3][DIM], g[DIM];

	for (uint32_t j = 0; j < DIM; j++)
		g[j] = 0.125f * (float)(j + 1);
	OK(et_table_create(s, "t", &p, &t));
	for (int k = 0; k < 3; k++)
		gat1(s, t, ids[k], ini[k]);
	OK(et_key_policy_set(s, t, &kp));
	for (int k = 0; k < 3; k++) {
		upd1(s, t, ids[k], g, &up);
		OK(et_checkpoint(s, NULL, 0)); /* commit k + 1 */
		assert_int_equal(commit_of(s), k + 1);
	}
	if (reopen) {
		fx_close(f, d); /* nothing written: no commit */
		s = fx_open(f, d, &CFG_TINY);
		OK(et_table_open(s, "t", NULL, &t));
		assert_int_equal(commit_of(s), 3);
		OK(et_key_policy_set(s, t, &kp));
	}
	expire_until(f, d, s, t, ids, ini, 4, 8, gone_at);
}

static void test_expiry_reopen(void **state)
{
	struct fx *f = *state;
	int straight[3], reopened[3];

	expiry_across(f, false, straight);
	expiry_across(f, true, reopened);
	print_message("expiry: gone at commits %d %d %d straight, %d %d %d "
		      "across a reopen\n",
		      straight[0], straight[1], straight[2], reopened[0],
		      reopened[1], reopened[2]);
	for (int k = 0; k < 3; k++) {
		assert_int_equal(straight[k], k + 4);
		assert_int_equal(reopened[k], k + 4);
	}
}

/*
 * Expiry turned on for a table whose rows are already committed: their
 * stamps (the next commit) exist only in memory until a commit journals
 * them all (a snapshot of the index), so that a reopen finds them. A and
 * B, committed before expiry was set (commit 1), are stamped 2 when it is
 * set; C is updated before commit 2. With expire_after 2, all three go at
 * commit 4, across a reopen after commit 2 or not. Had the reopen
 * stamped A and B anew (3), they would go at commit 5.
 */
static void expiry_turned_on(struct fx *f, bool reopen, int gone_at[3])
{
	const uint64_t ids[3] = {11, 12, UINT64_MAX - 1};
	const struct et_key_policy kp = {.expire_after = 2};
	struct et_update_params up = {.lr = 0.5f};
	struct et_table_params p = kparams(ET_OPT_SGD, 29);
	int d = fx_new(f), t;
	et_store *s = fx_open(f, d, &CFG_TINY);
	float ini[3][DIM], g[DIM];

	for (uint32_t j = 0; j < DIM; j++)
		g[j] = 0.5f - 0.0625f * (float)j;
	OK(et_table_create(s, "t", &p, &t));
	for (int k = 0; k < 3; k++)
		gat1(s, t, ids[k], ini[k]);
	upd1(s, t, ids[0], g, &up);
	upd1(s, t, ids[1], g, &up);
	OK(et_checkpoint(s, NULL, 0)); /* 1 */
	OK(et_key_policy_set(s, t, &kp));
	upd1(s, t, ids[2], g, &up);
	OK(et_checkpoint(s, NULL, 0)); /* 2 */
	assert_int_equal(commit_of(s), 2);
	if (reopen) {
		fx_close(f, d);
		s = fx_open(f, d, &CFG_TINY);
		OK(et_table_open(s, "t", NULL, &t));
		OK(et_key_policy_set(s, t, &kp));
	}
	for (int k = 0; k < 3; k++)
		assert_true(kept1(s, t, ids[k], ini[k]));
	expire_until(f, d, s, t, ids, ini, 3, 6, gone_at);
}

static void test_expiry_turned_on(void **state)
{
	struct fx *f = *state;
	int straight[3], reopened[3];

	expiry_turned_on(f, false, straight);
	expiry_turned_on(f, true, reopened);
	print_message("expiry set late: gone at commits %d %d %d straight, "
		      "%d %d %d across a reopen\n",
		      straight[0], straight[1], straight[2], reopened[0],
		      reopened[1], reopened[2]);
	for (int k = 0; k < 3; k++) {
		assert_int_equal(straight[k], 4);
		assert_int_equal(reopened[k], 4);
	}
}

/*
 * max_keys 5: a checkpoint leaves at most 5 ids, the ones updated longest
 * ago leaving first, among ids of one commit the smallest (as u64). A0..A3
 * are updated before commit 1, B0..B3 before commit 2, C0, C1 before
 * commit 3. At commit 2, three of the A leave (the smallest); at commit 3,
 * the last A and the smallest B. The same across a reopen after commit 2,
 * and through tiny tiers as through large ones.
 */
static void bound_run(struct fx *f, const struct et_store_config *c,
		      bool reopen, uint64_t evicted[3], bool kept[10])
{
	static const uint64_t ids[10] = {5,
					 UINT64_MAX,
					 0,
					 1ULL << 63, /* A */
					 UINT64_MAX - 1,
					 7,
					 3,
					 (1ULL << 63) - 1, /* B */
					 9,
					 2}; /* C */
	const struct et_key_policy kp = {.max_keys = 5};
	struct et_update_params up = {.lr = 0.5f};
	struct et_table_params p = kparams(ET_OPT_SGD, 31);
	int d = fx_new(f), t;
	et_store *s = fx_open(f, d, c);
	float ini[10][DIM], g[DIM];

	for (uint32_t j = 0; j < DIM; j++)
		g[j] = 0.25f + 0.125f * (float)j;
	OK(et_table_create(s, "t", &p, &t));
	for (int k = 0; k < 10; k++)
		gat1(s, t, ids[k], ini[k]);
	OK(et_key_policy_set(s, t, &kp));
	for (int c3 = 0; c3 < 3; c3++) {
		int lo = 4 * c3, hi = c3 < 2 ? lo + 4 : 10;

		for (int k = lo; k < hi; k++)
			upd1(s, t, ids[k], g, &up);
		OK(et_checkpoint(s, NULL, 0));
		evicted[c3] = stats_of(s, t).keys_evicted;
		assert_true(info_of(s, t).rows_logged <= 5);
		if (reopen && c3 == 1) {
			fx_close(f, d);
			s = fx_open(f, d, c);
			OK(et_table_open(s, "t", NULL, &t));
			OK(et_key_policy_set(s, t, &kp));
		}
	}
	for (int k = 0; k < 10; k++)
		kept[k] = kept1(s, t, ids[k], ini[k]);
	fx_close(f, d);
}

static void test_max_keys(void **state)
{
	struct fx *f = *state;
	/* A: 0 and 5 and 2^63 leave at commit 2 (UINT64_MAX stays), then
	 * UINT64_MAX and B's smallest, 3 */
	static const bool want[10] = {false, false, false, false, true,
				      true,  false, true,  true,  true};
	const struct et_store_config *cfg[2] = {&CFG_TINY, &CFG_BIG};
	uint64_t ev[3];
	bool kept[10];

	for (int r = 0; r < 4; r++) {
		bound_run(f, cfg[r % 2], r >= 2, ev, kept);
		print_message(
		    "max_keys 5 (%s, %s): evicted %llu, %llu, %llu\n",
		    r % 2 ? "big DDR" : "tiny tiers",
		    r >= 2 ? "reopened" : "straight", (unsigned long long)ev[0],
		    (unsigned long long)ev[1], (unsigned long long)ev[2]);
		assert_int_equal(ev[0], 0);
		/* keys_evicted counts since the open */
		assert_int_equal(ev[1], 3);
		assert_int_equal(ev[2], r >= 2 ? 2 : 5);
		for (int k = 0; k < 10; k++)
			if (kept[k] != want[k])
				fail_msg("run %d: id %d %s", r, k,
					 kept[k] ? "kept" : "gone");
	}
}

/*
 * max_keys 4 with half_life 2: the bound keeps the ids written in the
 * most commits, a commit's weight halving at each even commit number.
 * H (UINT64_MAX, 0) is updated before every commit, W (5, 2^63) before
 * commits 1 to 3, X (7, 3) before commit 4 only: at commit 4, H scores
 * 1/4 + 1/2 + 1/2 + 1, W 1/4 + 1/2 + 1/2, X 1, and X leaves (the bound by
 * age would keep X and drop W). Before commit 6, H and Y (9, 2,
 * UINT64_MAX - 1, 11) are updated: W has fallen to 5/8 (two halvings
 * since commit 3), under Y's 1, so W and the two smallest Y leave. The
 * same through tiny tiers and large ones, reopened before commit 4 (the
 * scores come back from the journal) or not.
 */
static void scored_run(struct fx *f, const struct et_store_config *c,
		       bool reopen, uint64_t evicted[3], bool kept4[10],
		       bool kept[10])
{
	static const uint64_t ids[10] = {UINT64_MAX, 0, 5, 1ULL << 63,	   7,
					 3,	     9, 2, UINT64_MAX - 1, 11};
	static const uint8_t until[10] = {6, 6, 3, 3, 4, 4, 6, 6, 6, 6};
	static const uint8_t from[10] = {1, 1, 1, 1, 4, 4, 6, 6, 6, 6};
	const struct et_key_policy kp = {.max_keys = 4, .half_life = 2};
	struct et_update_params up = {.lr = 0.5f};
	struct et_table_params p = kparams(ET_OPT_SGD, 31);
	int d = fx_new(f), t;
	et_store *s = fx_open(f, d, c);
	float ini[10][DIM], g[DIM];

	for (uint32_t j = 0; j < DIM; j++)
		g[j] = 0.25f + 0.125f * (float)j;
	OK(et_table_create(s, "t", &p, &t));
	for (int k = 0; k < 10; k++)
		gat1(s, t, ids[k], ini[k]);
	OK(et_key_policy_set(s, t, &kp));
	for (uint8_t cm = 1; cm <= 6; cm++) {
		for (int k = 0; k < 10; k++)
			if (from[k] <= cm && cm <= until[k])
				upd1(s, t, ids[k], g, &up);
		OK(et_checkpoint(s, NULL, 0));
		assert_int_equal(commit_of(s), cm);
		if (cm >= 4)
			evicted[cm - 4] = stats_of(s, t).keys_evicted;
		for (int k = 0; k < 10 && cm == 4; k++)
			kept4[k] = kept1(s, t, ids[k], ini[k]);
		assert_true(info_of(s, t).rows_logged <= (cm < 4 ? 6 : 4));
		if (reopen && cm == 3) {
			fx_close(f, d);
			s = fx_open(f, d, c);
			OK(et_table_open(s, "t", NULL, &t));
			OK(et_key_policy_set(s, t, &kp));
		}
	}
	for (int k = 0; k < 10; k++)
		kept[k] = kept1(s, t, ids[k], ini[k]);
	fx_close(f, d);
}

static void test_max_keys_scored(void **state)
{
	struct fx *f = *state;
	static const bool want[10] = {true,  true,  false, false, false,
				      false, false, false, true,  true};
	/* at commit 4: H and W (Y is not there yet) */
	static const bool want4[10] = {true,  true,  true,  true,  false,
				       false, false, false, false, false};
	const struct et_store_config *cfg[2] = {&CFG_TINY, &CFG_BIG};
	uint64_t ev[3];
	bool kept[10], kept4[10];

	for (int r = 0; r < 4; r++) {
		scored_run(f, cfg[r % 2], r >= 2, ev, kept4, kept);
		for (int k = 0; k < 10; k++)
			if (kept4[k] != want4[k])
				fail_msg("run %d, commit 4: id %d %s", r, k,
					 kept4[k] ? "kept" : "gone");
		/* keys_evicted counts since the open */
		assert_int_equal(ev[0], 2);
		assert_int_equal(ev[1], 2);
		assert_int_equal(ev[2], 6);
		for (int k = 0; k < 10; k++)
			if (kept[k] != want[k])
				fail_msg("run %d: id %d %s", r, k,
					 kept[k] ? "kept" : "gone");
	}
}

/* -------------------------------------------------- 8. multi and prefetch */

#define MSTEPS 24
#define MB     512 /* ids per table per step */
#define MBAGS  64

struct mstep {
	uint64_t kid[MB], rid[MB];
	uint64_t koff[MBAGS + 1], roff[MBAGS + 1];
	float kg[MBAGS * DIM], rg[MBAGS * 16];
};

static void offsets(struct tu_rng *r, uint64_t *off)
{
	off[0] = 0;
	for (size_t b = 1; b < MBAGS; b++)
		off[b] = tu_rng_below(r, MB + 1);
	off[MBAGS] = MB;
	qsort(off + 1, MBAGS - 1, sizeof(off[0]), cmp_u64);
}

/*
 * Store "m" (config cm, threads 2) runs each step with et_prefetch (of
 * this step before it, or of the next step after the one before) and the
 * multi-table calls; store "s" (big DDR, one thread) the single-table
 * calls, keyed table first. Keyed "k" (Adagrad, dim 8) and row-indexed
 * "r" (SGD, dim 16): two size classes.
 */
static void multi_run(struct fx *f, const struct et_store_config *cm,
		      const uint64_t *keys, size_t nk, struct mstep *steps)
{
	const uint64_t RROWS = 4000;
	struct et_table_params pk = kparams(ET_OPT_ROWWISE_ADAGRAD, 31);
	struct et_table_params pr = rparams(ET_OPT_SGD, 31, RROWS);
	struct et_update_params up = {.lr = 0.1f};
	const struct et_key_policy kp = {.admit_after = 2, .filter_log2 = 12};
	int dm = fx_new(f), ds = fx_new(f), mk, mr, sk, sr;
	et_store *m = fx_open(f, dm, cm), *s = fx_open(f, ds, &CFG_BIG);
	float ka[MBAGS * DIM], kb[MBAGS * DIM], ra[MBAGS * 16], rb[MBAGS * 16];
	uint64_t *rows = tu_calloc(RROWS, sizeof(*rows));
	float *x = tu_calloc(RROWS, 16 * sizeof(float));
	float *y = tu_calloc(RROWS, 16 * sizeof(float));

	pr.dim = 16;
	OK(et_table_create(m, "k", &pk, &mk));
	OK(et_table_create(m, "r", &pr, &mr));
	OK(et_table_create(s, "k", &pk, &sk));
	OK(et_table_create(s, "r", &pr, &sr));
	/* admission on the keyed table of both: counted once a call, a
	 * multi-table call being one call per table */
	OK(et_key_policy_set(m, mk, &kp));
	OK(et_key_policy_set(s, sk, &kp));

	for (int i = 0; i < MSTEPS; i++) {
		struct mstep *st = &steps[i];
		et_pool mode = i % 3 == 2 ? ET_POOL_MEAN : ET_POOL_SUM;
		struct et_table_batch gb[2] = {
		    {.table = mk,
		     .ids = st->kid,
		     .offsets = st->koff,
		     .nbags = MBAGS,
		     .out = ka},
		    {.table = mr,
		     .ids = st->rid,
		     .offsets = st->roff,
		     .nbags = MBAGS,
		     .out = ra},
		};
		struct et_table_batch ub[2] = {
		    {.table = mk,
		     .ids = st->kid,
		     .offsets = st->koff,
		     .nbags = MBAGS,
		     .grads = st->kg},
		    {.table = mr,
		     .ids = st->rid,
		     .offsets = st->roff,
		     .nbags = MBAGS,
		     .grads = st->rg},
		};

		if (i % 2 == 0) {
			struct et_batch_ids pb[2] = {
			    {.table = mk, .ids = st->kid, .n = MB},
			    {.table = mr, .ids = st->rid, .n = MB},
			};

			OK(et_prefetch(m, pb, 2));
		}
		if (i % 4 == 1) {
			/* a window of this step and the next, keyed ids */
			struct et_batch_ids lb[2] = {
			    {.table = mk, .ids = st->kid, .n = MB},
			    {.table = mk,
			     .ids = steps[i + 1 < MSTEPS ? i + 1 : i].kid,
			     .n = MB},
			};
			struct et_batch w[2] = {{&lb[0], 1}, {&lb[1], 1}};

			OK(et_lookahead(m, w, 2));
		}
		OK(et_gather_pooled_multi(m, gb, 2, mode));
		OK(et_gather_pooled(s, sk, st->kid, st->koff, MBAGS, mode, kb));
		OK(et_gather_pooled(s, sr, st->rid, st->roff, MBAGS, mode, rb));
		same_rows("multi gather, keyed", NULL, kb, ka, MBAGS);
		assert_memory_equal(ra, rb, sizeof(ra));
		OK(et_update_pooled_multi(m, ub, 2, mode, &up));
		OK(et_update_pooled(s, sk, st->kid, st->koff, MBAGS, mode,
				    st->kg, &up));
		OK(et_update_pooled(s, sr, st->rid, st->roff, MBAGS, mode,
				    st->rg, &up));
		if (i % 2 == 0 && i + 1 < MSTEPS) {
			/* the next step's ids, keyed only */
			struct et_batch_ids pb = {
			    .table = mk, .ids = steps[i + 1].kid, .n = MB};

			OK(et_prefetch(m, &pb, 1));
		}
		if (i == MSTEPS / 2) {
			OK(et_checkpoint(m, NULL, 0));
			OK(et_checkpoint(s, NULL, 0));
		}
	}
	assert_true(stats_of(m, -1).prefetch_rows > 0);
	assert_true(stats_of(m, mk).keys_dropped > 0);
	assert_int_equal(stats_of(m, mk).keys_dropped,
			 stats_of(s, sk).keys_dropped);
	{
		float *kx = tu_calloc(nk, DIM * sizeof(float));
		float *ky = tu_calloc(nk, DIM * sizeof(float));

		gat(m, mk, keys, nk, kx);
		gat(s, sk, keys, nk, ky);
		same_rows("multi vs single, keyed, final", keys, ky, kx, nk);
		free(kx);
		free(ky);
	}
	for (uint64_t i = 0; i < RROWS; i++)
		rows[i] = i;
	OK(et_gather(m, mr, rows, RROWS, x));
	OK(et_gather(s, sr, rows, RROWS, y));
	assert_memory_equal(x, y, RROWS * 16 * sizeof(float));
	fx_close(f, dm);
	fx_close(f, ds);
	free(rows);
	free(x);
	free(y);
}

static void test_multi_prefetch(void **state)
{
	struct fx *f = *state;
	const size_t nk = 3000;
	uint64_t *keys = key_pool(21, nk);
	struct mstep *steps = tu_calloc(MSTEPS, sizeof(*steps));
	struct et_store_config c1 = CFG_TINY, c2 = CFG_TINY_HBM, c3 = CFG_BIG;
	struct tu_rng rng;

	tu_rng_seed(&rng, 77);
	for (int i = 0; i < MSTEPS; i++) {
		struct mstep *st = &steps[i];

		for (size_t j = 0; j < MB; j++) {
			st->kid[j] = tu_rng_below(&rng, 8) == 0
					 ? EDGES[tu_rng_below(&rng, NEDGES)]
					 : keys[tu_rng_below(&rng, nk)];
			st->rid[j] = tu_rng_below(&rng, 4000);
		}
		offsets(&rng, st->koff);
		offsets(&rng, st->roff);
		rand_floats(&rng, st->kg, MBAGS * DIM);
		rand_floats(&rng, st->rg, MBAGS * 16);
	}
	c1.threads = 2;
	c2.threads = 2;
	c2.prefetch_thread = 1;
	c3.threads = 2;
	multi_run(f, &c1, keys, nk, steps);
	multi_run(f, &c2, keys, nk, steps);
	multi_run(f, &c3, keys, nk, steps);
	free(keys);
	free(steps);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
	    /* clang-format off */
	    T(test_create),
	    T(test_initial_values),
	    T(test_no_collisions),
	    T(test_updates),
	    T(test_erase),
	    T(test_erase_prefetched),
	    T(test_erase_crash),
	    T(test_erase_churn),
	    T(test_admission),
	    T(test_expiry),
	    T(test_admission_after_writes),
	    T(test_admission_reopen),
	    T(test_expiry_close),
	    T(test_expiry_reopen),
	    T(test_expiry_turned_on),
	    T(test_max_keys),
	    T(test_max_keys_scored),
	    T(test_multi_prefetch),
	/* clang-format on */
#undef T
	};
	const char *only = getenv("ET_TEST_FILTER");

	if (only && *only)
		cmocka_set_test_filter(only);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
