/*
 * test_store.c - the store's public API (include/embtier.h, "store"):
 * configurations refused with ET_ECONFIG (or ET_ECAPACITY for tiers too
 * small) and no directory left behind;
 * table create, open, info and the expect check (ET_EMISMATCH); row ids out
 * of range (ET_EROWRANGE) and unknown tables (ET_ENOTABLE) refused with
 * nothing changed; updates kept across close and reopen; the optimizer
 * formulas on numbers worked by hand; and the statistics, where a known
 * sequence determines them exactly (FBGEMM's counters, per-tier hits,
 * misses, inserts, evictions, lazy rows, write-backs). Two tests pin down
 * corners of the tiered hierarchy with one-set caches: a row found in DDR
 * whose DDR slot is taken by a demotion earlier in the same batch, and
 * rows served from the bypass buffer (or placed in DDR) when every way of
 * the top tier is pinned. The library's own byte count (mem_host.h) must
 * return to where it was once a store is closed.
 *
 * The random, long-running comparison with a reference model is in
 * test_model.c; this file asserts on small, hand-checked cases.
 */
#include <errno.h>
#include <ftw.h>
#include <limits.h>
#include <math.h>
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
#include "mem_host.h"
#include "util.h"

#define META ET_SLOT_META_BYTES

/* Store directories made by a test, removed by the teardown. */
#define FX_DIRS 8

struct fx {
	char *dirs[FX_DIRS];
	et_store *s[FX_DIRS];
	int ndirs;
};

static int setup(void **state)
{
	*state = tu_calloc(1, sizeof(struct fx));
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	for (int i = 0; i < f->ndirs; i++) {
		et_store_close(f->s[i]);
		tu_rmtree(f->dirs[i]);
		free(f->dirs[i]);
	}
	free(f);
	return 0;
}

/* A fresh store directory path (not created). */
static const char *fx_dir(struct fx *f)
{
	assert_true(f->ndirs < FX_DIRS);
	f->dirs[f->ndirs] = strdup(tu_path("store"));
	assert_non_null(f->dirs[f->ndirs]);
	return f->dirs[f->ndirs++];
}

/* Opens a store in a fresh directory; the teardown closes it unless the
 * test did (and set the handle to NULL). */
static et_store **fx_open(struct fx *f, const struct et_store_config *c)
{
	const char *dir = fx_dir(f);
	et_store **s = &f->s[f->ndirs - 1];

	tu_require_uring();
	tu_require_direct();
	assert_int_equal(et_store_open(dir, c, s), 0);
	assert_non_null(*s);
	return s;
}

static bool exists(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0;
}

static void table_file_path(const char *dir, const char *name, char *out)
{
	snprintf(out, PATH_MAX, "%s/%s.et", dir, name);
}

static struct et_table_params small_params(uint32_t dim, et_optim optim)
{
	struct et_table_params p = {
	    .rows = 1000,
	    .dim = dim,
	    .dtype = ET_F32,
	    .optim = optim,
	    .init = ET_INIT_UNIFORM,
	    .init_scale = 0.5f,
	    .seed = 7,
	};

	return p;
}

static struct et_stats stats_of(et_store *s, int table)
{
	struct et_stats st;

	assert_int_equal(et_get_stats(s, table, &st), 0);
	return st;
}

/* ----------------------------------------------------------- configuration */

/* Each nonsensical configuration is refused with ET_ECONFIG, and tiers too
 * small for one set with ET_ECAPACITY, before the directory is made. */
static void test_open_bad_config(void **state)
{
	struct fx *f = *state;
	const struct {
		struct et_store_config c;
		int rc;
	} bad[] = {
	    {{.ways = 65}, ET_ECONFIG},
	    {{.ways = 1000}, ET_ECONFIG},
	    {{.ways = UINT32_MAX}, ET_ECONFIG},
	    {{.hbm_policy = (et_policy)5}, ET_ECONFIG},
	    {{.ddr_policy = (et_policy)99}, ET_ECONFIG},
	    {{.ddr_policy = (et_policy)-1}, ET_ECONFIG},
	    {{.hbm_backend = (et_hbm_backend)7}, ET_ECONFIG},
	    /* A DDR too small for one set of 16 slots of 64 bytes. */
	    {{.ddr_bytes = 16 * (64 + META) - 1, .slot_bytes = 64},
	     ET_ECAPACITY},
	    /* An HBM too small for one set of 4 slots. */
	    {{.hbm_bytes = 4 * (64 + META) - 1, .ways = 4, .slot_bytes = 64},
	     ET_ECAPACITY},
	    /* Too small for one set of anything at all. */
	    {{.hbm_bytes = 1}, ET_ECAPACITY},
	    {{.ddr_bytes = 15, .ways = 1}, ET_ECAPACITY},
	    /* A slot bigger than any row can be. */
	    {{.slot_bytes = UINT32_MAX}, ET_ECONFIG},
	};
	const char *dir = fx_dir(f);

	tu_require_uring();
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		et_store *s = NULL;
		int rc = et_store_open(dir, &bad[i].c, &s);

		if (rc != bad[i].rc)
			print_error("config #%zu: %d (%s)\n", i, rc,
				    et_strerror(rc));
		assert_int_equal(rc, bad[i].rc);
		assert_false(exists(dir));
		if (rc == 0)
			et_store_close(s);
	}
}

/* The edges of what is valid: ways 0 (default 16), 1 and 64; a DDR of
 * exactly one set; an HBM of exactly one set. */
static void test_open_good_config(void **state)
{
	struct fx *f = *state;
	struct et_table_params p = small_params(4, ET_OPT_SGD); /* 16 B */
	struct et_stats st;
	et_store **s;
	int id;

	/* Default ways: 16. One set of 16 slots of 16 bytes. */
	s = fx_open(f,
		    &(struct et_store_config){.ddr_bytes = 16 * (16 + META)});
	assert_int_equal(et_table_create(*s, "t", &p, &id), 0);
	st = stats_of(*s, -1);
	assert_int_equal(st.ddr.capacity_rows, 16);
	assert_int_equal(st.hbm.capacity_rows, 0);
	assert_int_equal(et_store_close(*s), 0);
	*s = NULL;

	/* 64 ways, HBM and DDR one set each. */
	s = fx_open(
	    f, &(struct et_store_config){.ways = 64,
					 .hbm_bytes = 64 * (16 + META),
					 .ddr_bytes = 65 * (16 + META) - 1});
	assert_int_equal(et_table_create(*s, "t", &p, &id), 0);
	st = stats_of(*s, -1);
	assert_int_equal(st.hbm.capacity_rows, 64);
	assert_int_equal(st.ddr.capacity_rows, 64);
	assert_int_equal(et_store_close(*s), 0);
	*s = NULL;

	/* One way: capacity is bytes / (slot + meta), any count of sets. */
	s = fx_open(f, &(struct et_store_config){
			   .ways = 1, .ddr_bytes = 1000 * (16 + META) + 5});
	assert_int_equal(et_table_create(*s, "t", &p, &id), 0);
	st = stats_of(*s, -1);
	assert_int_equal(st.ddr.capacity_rows, 1000);
	/* Nothing resident, nothing counted yet. */
	assert_int_equal(st.ddr.resident_rows, 0);
	assert_int_equal(st.calls, 0);
}

/* A value as a table of dtype stores it. */
static float stored(et_dtype t, float v)
{
	if (t == ET_F16)
		return et_f16_to_f32(et_f32_to_f16(v));
	if (t == ET_BF16)
		return et_bf16_to_f32(et_f32_to_bf16(v));
	return v;
}

/* The value written to column c of row r of table k. */
static float dims_value(int k, uint64_t r, uint32_t c)
{
	return (float)((int)((k * 7919 + r * 131 + c * 17) % 2001) - 1000) /
	       256.0f;
}

#define DIMS_ROWS 4096
#define DIMS_IDS  48

/* Row ids of table k: spread over the table, some repeated blocks. */
static void dims_ids(int k, uint64_t *ids)
{
	for (int i = 0; i < DIMS_IDS; i++)
		ids[i] = ((uint64_t)i * 83 + (uint64_t)k * 29) % DIMS_ROWS;
}

/* Gathers table k's rows and compares them with what was written and
 * updated: one SGD or row-wise Adagrad step of gradient 1/8 on the first
 * half of the ids (lr 0.5, eps 0.25). */
static void dims_check(et_store *s, int id, int k,
		       const struct et_table_params *p)
{
	uint64_t ids[DIMS_IDS];
	float *out = tu_calloc((size_t)DIMS_IDS * p->dim, sizeof(float));

	dims_ids(k, ids);
	assert_int_equal(et_gather(s, id, ids, DIMS_IDS, out), 0);
	for (int i = 0; i < DIMS_IDS; i++) {
		float mul = 0.5f;

		if (p->optim == ET_OPT_ROWWISE_ADAGRAD) {
			float sum = 0, m;

			for (uint32_t c = 0; c < p->dim; c++)
				sum += 0.125f * 0.125f;
			m = sum / (float)p->dim;
			mul = 0.5f / (sqrtf(m) + 0.25f);
		}
		for (uint32_t c = 0; c < p->dim; c++) {
			float want = stored(p->dtype, dims_value(k, ids[i], c));

			if (i < DIMS_IDS / 2)
				want = stored(p->dtype, want - mul * 0.125f);
			if (memcmp(&want, &out[(size_t)i * p->dim + c], 4)) {
				print_error("table %d (dim %u dtype %d optim "
					    "%d) row %llu col %u: %a, want "
					    "%a\n",
					    k, p->dim, p->dtype, p->optim,
					    (unsigned long long)ids[i], c,
					    out[(size_t)i * p->dim + c], want);
				fail();
			}
		}
	}
	free(out);
}

static const et_dtype dims_dtypes[] = {ET_F32, ET_F16, ET_BF16};

/* Table k of a run over dims: dims in the given order, then each dtype
 * and optimizer. */
static struct et_table_params dims_params(const uint32_t *dims, int k)
{
	struct et_table_params p = {
	    .rows = DIMS_ROWS,
	    .dim = dims[k / 6],
	    .dtype = dims_dtypes[(k / 2) % 3],
	    .optim = k % 2 ? ET_OPT_ROWWISE_ADAGRAD : ET_OPT_SGD,
	    .init = ET_INIT_NORMAL,
	    .seed = (uint64_t)k,
	};

	return p;
}

/* Creates the nt tables of a run over dims in order, or opens them in the
 * reverse order. */
static void dims_register(et_store *s, const uint32_t *dims, int nt, int *id,
			  bool create)
{
	for (int i = 0; i < nt; i++) {
		int k = create ? i : nt - 1 - i;
		struct et_table_params p = dims_params(dims, k);
		char name[16];

		snprintf(name, sizeof(name), "t%d", k);
		if (create)
			assert_int_equal(et_table_create(s, name, &p, &id[k]),
					 0);
		else
			assert_int_equal(et_table_open(s, name, &p, &id[k]), 0);
	}
}

/*
 * A store opened with a zeroed configuration takes tables of every dim in
 * dims (created in that order), each in f32, f16 and bf16 with SGD and
 * row-wise Adagrad; rows written and updated read back bit for bit, before
 * and after a close and reopen (tables opened in the reverse order).
 */
static void dims_run(struct fx *f, const uint32_t *dims, int ndims)
{
	struct et_store_config zero;
	struct et_update_params up = {.lr = 0.5f, .eps = 0.25f};
	int nt = ndims * 6, id[6 * 6];
	uint64_t ids[DIMS_IDS];
	et_store **s;
	struct et_stats st;
	uint64_t rows_bytes = 0;

	memset(&zero, 0, sizeof(zero));
	s = fx_open(f, &zero);
	dims_register(*s, dims, nt, id, true);
	for (int k = 0; k < nt; k++) {
		struct et_table_params p = dims_params(dims, k);
		float *v = tu_calloc((size_t)DIMS_IDS * p.dim, sizeof(float));
		float *g = tu_calloc((size_t)DIMS_IDS * p.dim, sizeof(float));

		dims_ids(k, ids);
		for (int i = 0; i < DIMS_IDS; i++)
			for (uint32_t c = 0; c < p.dim; c++) {
				v[(size_t)i * p.dim + c] =
				    dims_value(k, ids[i], c);
				g[(size_t)i * p.dim + c] = 0.125f;
			}
		assert_int_equal(et_write_rows(*s, id[k], ids, DIMS_IDS, v), 0);
		assert_int_equal(
		    et_update(*s, id[k], ids, DIMS_IDS / 2, g, &up), 0);
		rows_bytes +=
		    DIMS_IDS * (p.dim * (p.dtype == ET_F32 ? 4 : 2) +
				(p.optim == ET_OPT_ROWWISE_ADAGRAD ? 4 : 0));
		free(v);
		free(g);
	}
	for (int k = 0; k < nt; k++) {
		struct et_table_params p = dims_params(dims, k);

		dims_check(*s, id[k], k, &p);
	}
	/* All in DDR (256 MiB by default), each row in a slot of its own
	 * size: the resident bytes are the rows' own. Every class has a
	 * slot for each of its rows: direct-mapped. */
	st = stats_of(*s, -1);
	assert_int_equal(st.ddr.resident_rows, (uint64_t)nt * DIMS_IDS);
	assert_int_equal(st.ddr.row_bytes, rows_bytes);
	assert_int_equal(st.ddr.capacity_bytes, 256u << 20);
	assert_int_equal(st.ddr.direct_rows, (uint64_t)nt * DIMS_ROWS);
	assert_true(st.ddr.alloc_bytes <= st.ddr.capacity_bytes);
	assert_true(st.ddr.alloc_bytes > st.ddr.capacity_bytes / 100 * 99);
	assert_int_equal(st.writebacks, 0);
	assert_int_equal(et_store_close(*s), 0);

	assert_int_equal(et_store_open(f->dirs[f->ndirs - 1], &zero, s), 0);
	dims_register(*s, dims, nt, id, false);
	for (int k = 0; k < nt; k++) {
		struct et_table_params p = dims_params(dims, k);

		dims_check(*s, id[k], k, &p);
	}
}

static void test_mixed_dims(void **state)
{
	static const uint32_t up[] = {4, 8, 16, 64, 128, 256};
	static const uint32_t down[] = {256, 128, 16, 4, 64, 8};

	dims_run(*state, up, 6);
	dims_run(*state, down, 6);
}

/*
 * slot_bytes 0: each row size gets slots of its own size; a larger table
 * after a smaller one is fine. slot_bytes given: rows up to it share one
 * class of slots that big (the capacity is in slots of slot_bytes), larger
 * rows get a class of their own. A DDR that cannot hold one set of a
 * table's rows refuses it and leaves no file behind.
 */
static void test_slot_sizing(void **state)
{
	struct fx *f = *state;
	struct et_table_params small = small_params(4, ET_OPT_SGD);
	struct et_table_params big = small_params(64, ET_OPT_SGD);
	char path[PATH_MAX];
	float v[64];
	uint64_t id0 = 3;
	struct et_stats st;
	et_store **s;
	int a, b = -1, rc;

	s = fx_open(f, &(struct et_store_config){.ddr_bytes = 1 << 20});
	assert_int_equal(et_table_create(*s, "small", &small, &a), 0);
	assert_int_equal(et_table_create(*s, "big", &big, &b), 0);
	assert_int_equal(et_gather(*s, a, &id0, 1, v), 0);
	assert_int_equal(et_gather(*s, b, &id0, 1, v), 0);
	st = stats_of(*s, -1);
	assert_int_equal(st.ddr.row_bytes, 16 + 256);
	assert_true(st.ddr.alloc_bytes <= 1 << 20);
	/* each class's share holds all its 1000 rows: direct-mapped */
	assert_int_equal(st.ddr.direct_rows, 2000);

	/* With slot_bytes 256, both share slots of 256 bytes (a tier
	 * smaller than their rows: 16-way sets). */
	s = fx_open(f, &(struct et_store_config){.ddr_bytes = 256 << 10,
						 .slot_bytes = 256});
	assert_int_equal(et_table_create(*s, "small", &small, &a), 0);
	assert_int_equal(et_table_create(*s, "big", &big, &b), 0);
	assert_int_not_equal(a, b);
	st = stats_of(*s, -1);
	assert_int_equal(st.ddr.capacity_rows,
			 (256 << 10) / (256 + META) / 16 * 16);
	assert_int_equal(st.ddr.direct_rows, 0);
	/* With slot_bytes 16, they are classes of their own. */
	s = fx_open(f, &(struct et_store_config){.ddr_bytes = 256 << 10,
						 .slot_bytes = 16});
	assert_int_equal(et_table_create(*s, "small", &small, &a), 0);
	assert_int_equal(et_table_create(*s, "big", &big, &b), 0);
	st = stats_of(*s, -1);
	assert_true(st.ddr.capacity_rows > (256 << 10) / (256 + META));

	/* ways 1, 100 bytes of DDR: fine for 20-byte slots, but the first
	 * table has 256-byte rows. */
	s = fx_open(f, &(struct et_store_config){.ddr_bytes = 100, .ways = 1});
	rc = et_table_create(*s, "big", &big, &b);
	assert_int_equal(rc, ET_ECAPACITY);
	table_file_path(f->dirs[3], "big", path);
	assert_false(exists(path));
}

/*
 * Tables of one row size created one after another while rows are cached
 * and dirty: while the tier has a slot for every row of them it stays
 * direct-mapped and keeps what it holds (the new table takes the next
 * slots: nothing is written back); a table that does not fit makes the
 * class set-associative, which writes the dirty rows back first. Every
 * row reads back as written, before and after a reopen.
 */
/* The tables' direct rows in tier (0: HBM) of a store of config c with
 * the tables p[0..n) created in it. */
static uint64_t direct_in(struct fx *f, const struct et_store_config *c,
			  const struct et_table_params *p, size_t n, int tier)
{
	et_store **s = fx_open(f, c);
	char name[16];
	struct et_stats st;
	int t;

	for (size_t i = 0; i < n; i++) {
		snprintf(name, sizeof(name), "t%zu", i);
		assert_int_equal(et_table_create(*s, name, &p[i], &t), 0);
	}
	st = stats_of(*s, -1);
	assert_int_equal(et_store_close(*s), 0);
	*s = NULL;
	return tier ? st.ddr.direct_rows : st.hbm.direct_rows;
}

/* et_direct_bytes: a tier of that size holds the tables direct-mapped,
 * 1% less does not; with other ways, a policy with more metadata a slot,
 * shared slots, and for HBM. Bad arguments are refused. */
static void test_direct_bytes(void **state)
{
	struct fx *f = *state;
	struct et_table_params p[3] = {small_params(16, ET_OPT_SGD),
				       small_params(32, ET_OPT_ROWWISE_ADAGRAD),
				       small_params(16, ET_OPT_SGD)};
	const struct et_store_config cfgs[3] = {
	    {0},
	    {.ways = 4, .ddr_policy = ET_POLICY_TINYLFU},
	    {.slot_bytes = 256, .ddr_policy = ET_POLICY_LFU}};
	const uint64_t rows = 1000 + 3000 + 500;
	uint64_t b, h;

	p[1].rows = 3000;
	p[2].rows = 500;
	p[2].dtype = ET_F16;
	for (int k = 0; k < 3; k++) {
		struct et_store_config c = cfgs[k];

		assert_int_equal(et_direct_bytes(k ? &c : NULL, p, 3, 1, &b),
				 0);
		c.ddr_bytes = b;
		assert_int_equal(direct_in(f, &c, p, 3, 1), rows);
		c.ddr_bytes = b - b / 100;
		assert_true(direct_in(f, &c, p, 3, 1) < rows);
		print_message("direct DDR of config %d: %llu bytes for %llu "
			      "rows\n",
			      k, (unsigned long long)b,
			      (unsigned long long)rows);
	}
	/* HBM: a store with both tiers */
	assert_int_equal(et_direct_bytes(NULL, p, 3, 0, &h), 0);
	{
		struct et_store_config c = {.hbm_bytes = h,
					    .ddr_bytes = 1 << 20};

		assert_int_equal(direct_in(f, &c, p, 3, 0), rows);
	}
	/* refused */
	p[2].flags = ET_TABLE_KEYED;
	p[2].rows = 0;
	assert_int_equal(et_direct_bytes(NULL, p, 3, 1, &b), ET_ECONFIG);
	assert_non_null(strstr(et_errdetail(), "keyed"));
	p[2].flags = 0;
	p[2].rows = 500;
	p[2].dim = 0;
	assert_int_equal(et_direct_bytes(NULL, p, 3, 1, &b), ET_ECONFIG);
	p[2].dim = 16;
	assert_int_equal(et_direct_bytes(NULL, p, 3, 2, &b), ET_ECONFIG);
	assert_int_equal(et_direct_bytes(NULL, p, 3, 1, NULL), -EINVAL);
	{
		struct et_store_config c = {.ways = 65};

		assert_int_equal(et_direct_bytes(&c, p, 3, 1, &b), ET_ECONFIG);
	}
	assert_int_equal(et_direct_bytes(NULL, p, 0, 1, &b), 0);
	/* more bytes than any tier could have */
	{
		struct et_table_params huge[300];

		for (int i = 0; i < 300; i++) {
			huge[i] = small_params(ET_MAX_DIM, ET_OPT_SGD);
			huge[i].rows = ET_MAX_ROWS;
		}
		assert_int_equal(et_direct_bytes(NULL, huge, 300, 1, &b),
				 ET_ECAPACITY);
	}
}

static void test_direct_tables_added(void **state)
{
	struct fx *f = *state;
	const struct et_store_config c = {.ddr_bytes = 1 << 20};
	struct et_table_params p = small_params(4, ET_OPT_SGD);
	struct et_table_params big = small_params(4, ET_OPT_SGD);
	static uint64_t ids[1000];
	static float v[2][1000 * 4], got[1000 * 4];
	struct et_stats st;
	et_store **s;
	int t[3];

	big.rows = 1 << 20;
	for (int i = 0; i < 1000; i++)
		ids[i] = (uint64_t)i;
	for (int i = 0; i < 1000 * 4; i++) {
		v[0][i] = (float)i * 0.5f;
		v[1][i] = -(float)i;
	}
	s = fx_open(f, &c);
	assert_int_equal(et_table_create(*s, "a", &p, &t[0]), 0);
	assert_int_equal(et_write_rows(*s, t[0], ids, 1000, v[0]), 0);
	st = stats_of(*s, -1);
	assert_int_equal(st.ddr.direct_rows, 1000);
	assert_int_equal(st.ddr.dirty_rows, 1000);

	/* b fits beside a: the cache stays, a's dirty rows with it */
	assert_int_equal(et_table_create(*s, "b", &p, &t[1]), 0);
	assert_int_equal(et_write_rows(*s, t[1], ids, 1000, v[1]), 0);
	st = stats_of(*s, -1);
	assert_int_equal(st.ddr.direct_rows, 2000);
	assert_int_equal(st.ddr.dirty_rows, 2000);
	assert_int_equal(st.writebacks, 0);
	for (int k = 0; k < 2; k++) {
		assert_int_equal(et_gather(*s, t[k], ids, 1000, got), 0);
		assert_memory_equal(got, v[k], sizeof(got));
	}

	/* 2^20 rows more do not fit: set-associative, written back first */
	assert_int_equal(et_table_create(*s, "big", &big, &t[2]), 0);
	st = stats_of(*s, -1);
	assert_int_equal(st.ddr.direct_rows, 0);
	assert_int_equal(st.ddr.dirty_rows, 0);
	for (int k = 0; k < 2; k++) {
		assert_int_equal(et_gather(*s, t[k], ids, 1000, got), 0);
		assert_memory_equal(got, v[k], sizeof(got));
	}
	assert_int_equal(et_store_close(*s), 0);
	assert_int_equal(et_store_open(f->dirs[f->ndirs - 1], &c, s), 0);
	for (int k = 0; k < 2; k++) {
		assert_int_equal(et_table_open(*s, k ? "b" : "a", NULL, &t[k]),
				 0);
		assert_int_equal(et_gather(*s, t[k], ids, 1000, got), 0);
		assert_memory_equal(got, v[k], sizeof(got));
	}
	st = stats_of(*s, -1);
	assert_int_equal(st.ddr.direct_rows, 2000); /* big not opened */
}

/*
 * A table of a new size class after rows are cached and dirty: the tiers
 * are divided again, the dirty rows written back first; nothing is lost,
 * and a class that cannot get a set is refused with nothing changed.
 */
static void test_new_class_later(void **state)
{
	struct fx *f = *state;
	struct et_table_params small = small_params(4, ET_OPT_SGD);
	struct et_table_params mid = small_params(16, ET_OPT_ROWWISE_ADAGRAD);
	struct et_table_params huge = small_params(1024, ET_OPT_SGD);
	uint64_t ids[8] = {0, 5, 999, 7, 12, 300, 301, 302};
	float v[8 * 16], w[8 * 16];
	struct et_stats st;
	et_store **s;
	int a, b, c, rc;

	for (int i = 0; i < 8 * 16; i++)
		v[i] = (float)i - 40.5f;
	/* a DDR with room for a set of 4 slots of 4 KiB, an HBM without */
	s = fx_open(f, &(struct et_store_config){.ddr_bytes = 80 << 10,
						 .hbm_bytes = 8 << 10,
						 .ways = 4});
	assert_int_equal(et_table_create(*s, "small", &small, &a), 0);
	assert_int_equal(et_write_rows(*s, a, ids, 8, v), 0);
	st = stats_of(*s, -1);
	assert_int_equal(st.hbm.dirty_rows + st.ddr.dirty_rows, 8);
	assert_int_equal(st.writebacks, 0);
	assert_int_equal(et_table_create(*s, "mid", &mid, &b), 0);
	st = stats_of(*s, -1);
	assert_int_equal(st.writebacks, 8);
	assert_int_equal(st.hbm.resident_rows + st.ddr.resident_rows, 0);
	assert_int_equal(et_write_rows(*s, b, ids, 8, v), 0);
	/* 4 KiB rows: the HBM cannot give their class a set */
	rc = et_table_create(*s, "huge", &huge, &c);
	assert_int_equal(rc, ET_ECAPACITY);
	st = stats_of(*s, -1);
	assert_int_equal(st.hbm.dirty_rows + st.ddr.dirty_rows, 8);
	assert_int_equal(et_gather(*s, a, ids, 8, w), 0);
	assert_memory_equal(v, w, 8 * 4 * sizeof(float));
	assert_int_equal(et_gather(*s, b, ids, 8, w), 0);
	assert_memory_equal(v, w, 8 * 16 * sizeof(float));
}

/*
 * Dirty rows evicted and held in the write-back queue (a store that
 * prefetches defers their write to the next prefetch) when a table of
 * larger rows arrives: the queue is widened to the larger slots with its
 * rows intact, and they reach their file.
 */
static void test_new_class_with_queue(void **state)
{
	struct fx *f = *state;
	struct et_table_params small = small_params(4, ET_OPT_SGD);
	struct et_table_params big = small_params(256, ET_OPT_SGD);
	enum { N = 64 };
	uint64_t ids[N];
	float v[N * 4], w[N * 4];
	struct et_batch_ids b;
	struct et_stats st;
	et_store **s;
	int a, c;

	for (int i = 0; i < N; i++)
		ids[i] = (uint64_t)i * 13;
	for (int i = 0; i < N * 4; i++)
		v[i] = (float)i * 0.5f - 7.0f;
	s = fx_open(f,
		    &(struct et_store_config){.ddr_bytes = 1 << 20, .ways = 1});
	assert_int_equal(et_table_create(*s, "small", &small, &a), 0);
	/* a first store for the class, then one of 4 slots: most of the
	 * written rows are evicted dirty */
	assert_int_equal(et_store_close(*s), 0);
	assert_int_equal(
	    et_store_open(f->dirs[0],
			  &(struct et_store_config){
			      .ddr_bytes = 4 * (16 + META), .ways = 1},
			  s),
	    0);
	assert_int_equal(et_table_open(*s, "small", NULL, &a), 0);
	b = (struct et_batch_ids){a, ids, 1};
	assert_int_equal(et_prefetch(*s, &b, 1), 0);
	assert_int_equal(et_write_rows(*s, a, ids, N, v), 0);
	st = stats_of(*s, -1);
	assert_int_equal(st.writebacks, 0); /* queued, not yet written */
	/* rows of 1 KiB need more than the 4 slots of 16 bytes: refused,
	 * with the queue kept */
	assert_int_equal(et_table_create(*s, "big", &big, &c), ET_ECAPACITY);
	assert_int_equal(et_gather(*s, a, ids, N, w), 0);
	assert_memory_equal(v, w, sizeof(v));
	assert_int_equal(et_store_close(*s), 0);

	/* Again with room for both classes. */
	assert_int_equal(
	    et_store_open(
		f->dirs[0],
		&(struct et_store_config){
		    .ddr_bytes = 4 * (16 + META) + 1024 + META, .ways = 1},
		s),
	    0);
	assert_int_equal(et_table_open(*s, "small", NULL, &a), 0);
	assert_int_equal(et_prefetch(*s, &b, 1), 0);
	for (int i = 0; i < N * 4; i++)
		v[i] = -v[i];
	assert_int_equal(et_write_rows(*s, a, ids, N, v), 0);
	assert_int_equal(et_table_create(*s, "big", &big, &c), 0);
	assert_int_equal(et_gather(*s, a, ids, N, w), 0);
	assert_memory_equal(v, w, sizeof(v));
	assert_int_equal(et_store_close(*s), 0);
	*s = NULL;
	{
		char path[PATH_MAX];
		et_tfile *tf;

		table_file_path(f->dirs[0], "small", path);
		assert_int_equal(et_tfile_open(path, ET_TFILE_RDONLY, &tf), 0);
		assert_int_equal(et_tfile_read_rows(tf, ids, N, w, NULL), 0);
		et_tfile_close(tf);
		assert_memory_equal(v, w, sizeof(v));
	}
}

/*
 * Capacity efficiency: tables of dims 16 and 256 (f32) sharing a 1 MiB
 * DDR, more rows touched than fit: the resident row bytes are at least
 * 0.85 of the tier (slots of the rows' own sizes; with one slot size of
 * the largest row, dim-16 rows would use 6% of theirs).
 */
static void test_capacity_efficiency(void **state)
{
	struct fx *f = *state;
	struct et_table_params p16 = small_params(16, ET_OPT_SGD);
	struct et_table_params p256 = small_params(256, ET_OPT_SGD);
	enum { N = 512 };
	uint64_t ids[N];
	float *out = tu_calloc((size_t)N * 256, sizeof(float));
	struct et_stats st;
	et_store **s;
	int a, b;

	p16.rows = p256.rows = 1 << 20;
	s = fx_open(f, &(struct et_store_config){.ddr_bytes = 1 << 20});
	assert_int_equal(et_table_create(*s, "d16", &p16, &a), 0);
	assert_int_equal(et_table_create(*s, "d256", &p256, &b), 0);
	for (uint64_t r = 0; r < 32 * N; r += N) {
		for (int i = 0; i < N; i++)
			ids[i] = (r + (uint64_t)i) * 97 % (1 << 20);
		assert_int_equal(et_gather(*s, a, ids, N, out), 0);
		assert_int_equal(et_gather(*s, b, ids, N, out), 0);
	}
	st = stats_of(*s, -1);
	print_message("ddr: %llu row bytes of %llu (%.3f), %llu rows\n",
		      (unsigned long long)st.ddr.row_bytes,
		      (unsigned long long)st.ddr.capacity_bytes,
		      (double)st.ddr.row_bytes / (double)st.ddr.capacity_bytes,
		      (unsigned long long)st.ddr.resident_rows);
	assert_true(st.ddr.row_bytes * 100 >= st.ddr.capacity_bytes * 85);
	assert_true(st.ddr.alloc_bytes <= st.ddr.capacity_bytes);
	free(out);
}

static void test_open_not_dir(void **state)
{
	const char *p = tu_path("notdir");
	FILE *fp = fopen(p, "w");
	et_store *s = NULL;

	tu_require_uring();
	assert_non_null(fp);
	fclose(fp);
	assert_true(et_store_open(p, NULL, &s) < 0);
	assert_true(et_store_open("", NULL, &s) < 0);
	/* close(NULL) is harmless. */
	assert_int_equal(et_store_close(NULL), 0);
	tu_unlink(p);
}

/* ------------------------------------------------------------------ tables */

static void test_table_create_open(void **state)
{
	struct fx *f = *state;
	struct et_store_config c = {.ddr_bytes = 1 << 20};
	struct et_table_params p = {
	    .rows = 123457,
	    .dim = 12,
	    .dtype = ET_BF16,
	    .optim = ET_OPT_ROWWISE_ADAGRAD,
	    .init = ET_INIT_NORMAL,
	    .init_scale = 0.125f,
	    .seed = 0xfeedULL,
	};
	struct et_table_params q = small_params(4, ET_OPT_SGD);
	struct et_table_info info;
	char name64[65];
	et_store **s;
	int id, id2, id3;
	const char *dir;

	s = fx_open(f, &c);
	dir = f->dirs[0];
	assert_int_equal(et_table_create(*s, "emb.0_x-Y", &p, &id), 0);
	assert_int_equal(et_table_info(*s, id, &info), 0);
	assert_int_equal(info.rows, 123457);
	assert_int_equal(info.dim, 12);
	assert_int_equal(info.dtype, ET_BF16);
	assert_int_equal(info.optim, ET_OPT_ROWWISE_ADAGRAD);
	assert_int_equal(info.init, ET_INIT_NORMAL);
	assert_true(info.init_scale == 0.125f);
	assert_int_equal(info.seed, 0xfeed);
	assert_int_equal(info.state_floats, 1);
	assert_int_equal(info.row_bytes, 12 * 2 + 4);
	assert_int_equal(info.blocks_written, 0);

	/* A second table gets another id; a name taken is refused. */
	assert_int_equal(et_table_create(*s, "second", &q, &id2), 0);
	assert_int_not_equal(id, id2);
	assert_true(et_table_create(*s, "second", &q, &id3) < 0);
	assert_true(et_table_create(*s, "emb.0_x-Y", &p, &id3) < 0);
	/* Opening a table already open is refused too. */
	assert_true(et_table_open(*s, "second", NULL, &id3) < 0);

	/* Names: 1..64 of [A-Za-z0-9_.-]. */
	memset(name64, 'n', 64);
	name64[64] = 0;
	assert_int_equal(et_table_create(*s, name64, &q, &id3), 0);
	{
		char name65[66];

		memset(name65, 'm', 65);
		name65[65] = 0;
		assert_true(et_table_create(*s, name65, &q, &id3) < 0);
	}
	assert_true(et_table_create(*s, "", &q, &id3) < 0);
	assert_true(et_table_create(*s, "a/b", &q, &id3) < 0);
	assert_true(et_table_create(*s, "../escape", &q, &id3) < 0);
	assert_true(et_table_create(*s, "sp ace", &q, &id3) < 0);
	assert_true(et_table_create(*s, "uni\xc3\xa9", &q, &id3) < 0);
	{
		char path[PATH_MAX];

		snprintf(path, sizeof(path), "%s/../escape.et", dir);
		assert_false(exists(path));
	}
	/* Bad parameters: no table, no file. */
	{
		struct et_table_params z = q;
		char path[PATH_MAX];

		z.rows = 0;
		assert_true(et_table_create(*s, "zero", &z, &id3) < 0);
		z = q;
		z.dim = 0;
		assert_true(et_table_create(*s, "zero", &z, &id3) < 0);
		z = q;
		z.rows = ET_MAX_ROWS + 1;
		assert_true(et_table_create(*s, "zero", &z, &id3) < 0);
		table_file_path(dir, "zero", path);
		assert_false(exists(path));
	}
	assert_int_equal(et_store_close(*s), 0);
	*s = NULL;

	/* Reopen: the tables are there, with their parameters. */
	assert_int_equal(et_store_open(dir, &c, s), 0);
	assert_true(et_table_open(*s, "missing", NULL, &id) < 0);
	assert_int_equal(et_table_open(*s, "emb.0_x-Y", &p, &id), 0);
	assert_int_equal(et_table_info(*s, id, &info), 0);
	assert_int_equal(info.rows, 123457);
	assert_int_equal(info.dtype, ET_BF16);
	assert_int_equal(et_table_open(*s, "second", NULL, &id2), 0);
	assert_int_not_equal(id, id2);
	assert_int_equal(
	    et_table_open(*s, name64, &(struct et_table_params){0}, &id3), 0);
}

/* et_table_open with expect: each non-zero field that differs from the
 * file is ET_EMISMATCH; zero fields are not compared. */
static void test_table_open_expect(void **state)
{
	struct fx *f = *state;
	struct et_store_config c = {.ddr_bytes = 1 << 20, .slot_bytes = 512};
	struct et_table_params p = {
	    .rows = 5000,
	    .dim = 8,
	    .dtype = ET_F16,
	    .optim = ET_OPT_ROWWISE_ADAGRAD,
	    .init = ET_INIT_UNIFORM,
	    .init_scale = 0.25f,
	    .seed = 99,
	};
	struct et_table_params e;
	struct et_table_info info;
	et_store **s;
	int id;

	s = fx_open(f, &c);
	assert_int_equal(et_table_create(*s, "t", &p, &id), 0);
	assert_int_equal(et_table_info(*s, id, &info), 0);
	assert_int_equal(et_store_close(*s), 0);
	*s = NULL;
	assert_int_equal(et_store_open(f->dirs[0], &c, s), 0);

#define MISMATCH(field, value)                                                 \
	do {                                                                   \
		int id_ = -1;                                                  \
		e = p;                                                         \
		e.field = value;                                               \
		assert_int_equal(et_table_open(*s, "t", &e, &id_),             \
				 ET_EMISMATCH);                                \
		memset(&e, 0, sizeof(e));                                      \
		e.field = value;                                               \
		assert_int_equal(et_table_open(*s, "t", &e, &id_),             \
				 ET_EMISMATCH);                                \
	} while (0)

	MISMATCH(rows, 5001);
	MISMATCH(dim, 16);
	MISMATCH(dtype, ET_BF16);
	MISMATCH(dtype, ET_F32);
	MISMATCH(optim, (et_optim)2);
	MISMATCH(init, ET_INIT_NORMAL);
	MISMATCH(init_scale, 0.5f);
	MISMATCH(seed, 100);
	MISMATCH(block_size, info.block_size * 2);
#undef MISMATCH
	/* Only-zero and exact expectations open it. */
	e = p;
	e.block_size = info.block_size;
	assert_int_equal(et_table_open(*s, "t", &e, &id), 0);
	{
		float v[8];
		uint64_t r = 4999;

		assert_int_equal(et_gather(*s, id, &r, 1, v), 0);
	}
}

/* --------------------------------------------------------- bad arguments */

static void fill_sentinel(float *v, size_t n)
{
	memset(v, 0x7b, n * sizeof(*v));
}

static bool is_sentinel(const float *v, size_t n)
{
	const uint8_t *b = (const uint8_t *)v;

	for (size_t i = 0; i < n * sizeof(*v); i++)
		if (b[i] != 0x7b)
			return false;
	return true;
}

/* A row id >= rows anywhere in a batch: ET_EROWRANGE, and nothing
 * changed -- not the output, not the valid rows of the batch, not the
 * counters. */
static void test_row_range(void **state)
{
	struct fx *f = *state;
	struct et_table_params p = small_params(4, ET_OPT_ROWWISE_ADAGRAD);
	struct et_update_params up = {.lr = 0.5f};
	const uint64_t bads[] = {1000, 1001, UINT64_MAX, ET_MAX_ROWS};
	float before[2 * 4], after[2 * 4], out[3 * 4], g[3 * 4];
	uint64_t good[2] = {5, 999};
	uint64_t off[3] = {0, 1, 3};
	struct et_stats st0, st1;
	et_store **s;
	int id;

	s = fx_open(f, &(struct et_store_config){.hbm_bytes = 64 * 64,
						 .ddr_bytes = 256 * 64,
						 .ways = 4});
	assert_int_equal(et_table_create(*s, "t", &p, &id), 0);
	for (int i = 0; i < 12; i++)
		g[i] = (float)(i + 1);
	assert_int_equal(et_write_rows(*s, id, good, 2, g), 0);
	assert_int_equal(et_gather(*s, id, good, 2, before), 0);
	st0 = stats_of(*s, id);
	for (size_t b = 0; b < sizeof(bads) / sizeof(bads[0]); b++) {
		uint64_t ids[3] = {5, bads[b], 999};

		fill_sentinel(out, 12);
		assert_int_equal(et_gather(*s, id, ids, 3, out), ET_EROWRANGE);
		assert_true(is_sentinel(out, 12));
		fill_sentinel(out, 12);
		assert_int_equal(
		    et_gather_pooled(*s, id, ids, off, 2, ET_POOL_SUM, out),
		    ET_EROWRANGE);
		assert_true(is_sentinel(out, 12));
		assert_int_equal(et_update(*s, id, ids, 3, g, &up),
				 ET_EROWRANGE);
		assert_int_equal(
		    et_update_pooled(*s, id, ids, off, 2, ET_POOL_MEAN, g, &up),
		    ET_EROWRANGE);
		assert_int_equal(et_write_rows(*s, id, ids, 3, g),
				 ET_EROWRANGE);
	}
	st1 = stats_of(*s, id);
	assert_int_equal(st1.calls, st0.calls);
	assert_int_equal(st1.requested, st0.requested);
	assert_int_equal(st1.unique, st0.unique);
	assert_int_equal(st1.hbm.dirty_rows, st0.hbm.dirty_rows);
	assert_int_equal(et_gather(*s, id, good, 2, after), 0);
	assert_memory_equal(before, after, sizeof(before));
	/* The optimizer state did not move either: the same update now
	 * gives the same result as on a fresh store with the same writes. */
	assert_int_equal(et_update(*s, id, good, 2, g, &up), 0);
	assert_int_equal(et_gather(*s, id, good, 2, after), 0);
	{
		et_store **s2 =
		    fx_open(f, &(struct et_store_config){.ddr_bytes = 1 << 20});
		float ref[8];
		int id2;

		assert_int_equal(et_table_create(*s2, "t", &p, &id2), 0);
		assert_int_equal(et_write_rows(*s2, id2, good, 2, g), 0);
		assert_int_equal(et_update(*s2, id2, good, 2, g, &up), 0);
		assert_int_equal(et_gather(*s2, id2, good, 2, ref), 0);
		assert_memory_equal(ref, after, sizeof(ref));
	}
}

/* Unknown table ids: ET_ENOTABLE everywhere, and nothing written. */
static void test_unknown_table(void **state)
{
	struct fx *f = *state;
	struct et_table_params p = small_params(4, ET_OPT_SGD);
	struct et_update_params up = {.lr = 0.5f};
	struct et_table_info info;
	struct et_stats st;
	uint64_t ids[2] = {1, 2}, off[2] = {0, 2};
	float out[8], g[8] = {1, 2, 3, 4, 5, 6, 7, 8};
	const int bad[] = {1, 2, 1000, INT32_MAX, -1, -3, INT32_MIN};
	et_store **s;
	int id;

	s = fx_open(f, &(struct et_store_config){.ddr_bytes = 1 << 20});
	assert_int_equal(et_table_create(*s, "t", &p, &id), 0);
	assert_int_equal(id, 0); /* so that 1, 2, ... are unknown */
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		int t = bad[i];

		assert_int_equal(et_gather(*s, t, ids, 2, out), ET_ENOTABLE);
		assert_int_equal(
		    et_gather_pooled(*s, t, ids, off, 1, ET_POOL_SUM, out),
		    ET_ENOTABLE);
		assert_int_equal(et_update(*s, t, ids, 2, g, &up), ET_ENOTABLE);
		assert_int_equal(
		    et_update_pooled(*s, t, ids, off, 1, ET_POOL_SUM, g, &up),
		    ET_ENOTABLE);
		assert_int_equal(et_write_rows(*s, t, ids, 2, g), ET_ENOTABLE);
		assert_int_equal(et_table_info(*s, t, &info), ET_ENOTABLE);
		if (t >= 0)
			assert_int_equal(et_get_stats(*s, t, &st), ET_ENOTABLE);
	}
	st = stats_of(*s, -1);
	assert_int_equal(st.calls, 0);
	assert_int_equal(st.ddr.resident_rows, 0);
	/* -1 means every table; any other negative id names none. */
	assert_int_equal(et_get_stats(*s, -3, &st), ET_ENOTABLE);
	assert_int_equal(et_get_stats(*s, INT32_MIN, &st), ET_ENOTABLE);
}

/* Bad offsets, pool modes and hyper-parameters: refused, nothing changed. */
static void test_bad_arguments(void **state)
{
	struct fx *f = *state;
	struct et_table_params p = small_params(4, ET_OPT_SGD);
	struct et_update_params up = {.lr = 0.5f};
	uint64_t ids[3] = {1, 2, 3};
	uint64_t off_start[3] = {1, 2, 3}, off_dec[3] = {0, 2, 1};
	float out[12], g[12], before[12], after[12];
	et_store **s;
	int id;

	for (int i = 0; i < 12; i++)
		g[i] = 1.0f + (float)i;
	s = fx_open(f, &(struct et_store_config){.ddr_bytes = 1 << 20});
	assert_int_equal(et_table_create(*s, "t", &p, &id), 0);
	assert_int_equal(et_gather(*s, id, ids, 3, before), 0);
	fill_sentinel(out, 12);
	assert_true(
	    et_gather_pooled(*s, id, ids, off_start, 2, ET_POOL_SUM, out) < 0);
	assert_true(
	    et_gather_pooled(*s, id, ids, off_dec, 2, ET_POOL_SUM, out) < 0);
	assert_true(et_gather_pooled(*s, id, ids, (uint64_t[]){0, 3}, 1,
				     (et_pool)2, out) < 0);
	assert_true(is_sentinel(out, 12));
	assert_true(
	    et_update_pooled(*s, id, ids, off_dec, 2, ET_POOL_SUM, g, &up) < 0);
	assert_true(et_update_pooled(*s, id, ids, (uint64_t[]){0, 3}, 1,
				     (et_pool)5, g, &up) < 0);
	assert_true(et_update(*s, id, ids, 3, g, NULL) < 0);
	assert_true(et_update(*s, id, ids, 3, g,
			      &(struct et_update_params){.lr = NAN}) < 0);
	assert_true(et_update(*s, id, ids, 3, g,
			      &(struct et_update_params){.lr = INFINITY}) < 0);
	assert_true(et_update(*s, id, ids, 3, g,
			      &(struct et_update_params){.lr = 1, .eps = -1}) <
		    0);
	assert_true(et_gather(*s, id, ids, 3, NULL) < 0);
	assert_true(et_write_rows(*s, id, ids, 3, NULL) < 0);
	assert_true(et_update(*s, id, ids, 3, NULL, &up) < 0);
	assert_int_equal(et_gather(*s, id, ids, 3, after), 0);
	assert_memory_equal(before, after, sizeof(before));
	/* Empty batches are fine and change nothing. */
	assert_int_equal(et_gather(*s, id, NULL, 0, NULL), 0);
	assert_int_equal(et_update(*s, id, NULL, 0, NULL, &up), 0);
	assert_int_equal(et_write_rows(*s, id, NULL, 0, NULL), 0);
	fill_sentinel(out, 12);
	assert_int_equal(et_gather_pooled(*s, id, NULL, (uint64_t[]){0, 0, 0},
					  2, ET_POOL_MEAN, out),
			 0);
	for (int i = 0; i < 8; i++)
		assert_true(out[i] == 0.0f);
	assert_true(is_sentinel(out + 8, 4));
	assert_int_equal(et_gather(*s, id, ids, 3, after), 0);
	assert_memory_equal(before, after, sizeof(before));
}

/* ------------------------------------------------------------- semantics */

/* Gather of rows never written: the initializer's values, rounded to the
 * storage type, with duplicates; a pooled sum and mean over them. */
static void test_gather_and_pool(void **state)
{
	struct fx *f = *state;
	struct et_table_params p = small_params(4, ET_OPT_SGD);
	uint64_t ids[5] = {10, 11, 10, 12, 10};
	uint64_t off[4] = {0, 2, 2, 5}; /* bags: {10,11} {} {10,12,10} */
	float v[5 * 4], pooled[3 * 4], w[4 * 4];
	et_store **s;
	int id;

	s = fx_open(f,
		    &(struct et_store_config){.ddr_bytes = 1 << 20, .ways = 1});
	assert_int_equal(et_table_create(*s, "t", &p, &id), 0);
	/* Known values, exact in f32 sums. */
	for (int i = 0; i < 16; i++)
		w[i] = (float)(i + 1) * 0.25f;
	assert_int_equal(
	    et_write_rows(*s, id, (uint64_t[]){10, 11, 12, 13}, 4, w), 0);
	assert_int_equal(et_gather(*s, id, ids, 5, v), 0);
	assert_memory_equal(v + 0, w + 0, 16);
	assert_memory_equal(v + 4, w + 4, 16);
	assert_memory_equal(v + 8, w + 0, 16);
	assert_memory_equal(v + 12, w + 8, 16);
	assert_memory_equal(v + 16, w + 0, 16);
	assert_int_equal(
	    et_gather_pooled(*s, id, ids, off, 3, ET_POOL_SUM, pooled), 0);
	for (int c = 0; c < 4; c++) {
		assert_true(pooled[c] == w[c] + w[4 + c]);
		assert_true(pooled[4 + c] == 0.0f);
		assert_true(pooled[8 + c] == (w[c] + w[8 + c]) + w[c]);
	}
	assert_int_equal(
	    et_gather_pooled(*s, id, ids, off, 3, ET_POOL_MEAN, pooled), 0);
	for (int c = 0; c < 4; c++) {
		assert_true(pooled[c] == (w[c] + w[4 + c]) / 2.0f);
		assert_true(pooled[4 + c] == 0.0f);
		assert_true(pooled[8 + c] == ((w[c] + w[8 + c]) + w[c]) / 3.0f);
	}
	/* Write with a repeated id: the last wins. */
	assert_int_equal(et_write_rows(*s, id, (uint64_t[]){20, 20, 20}, 3, w),
			 0);
	assert_int_equal(et_gather(*s, id, (uint64_t[]){20}, 1, v), 0);
	assert_memory_equal(v, w + 8, 16);
}

/* SGD and row-wise Adagrad on numbers worked out by hand, with repeated ids
 * (gradients summed first) and f16 storage rounding. */
static void test_optimizers(void **state)
{
	struct fx *f = *state;
	struct et_table_params sgd = small_params(4, ET_OPT_SGD);
	struct et_table_params ada = small_params(4, ET_OPT_ROWWISE_ADAGRAD);
	struct et_update_params up = {.lr = 0.5f};
	float g[3 * 4] = {1, 2, 3, 4, 0.5f, 0.5f, 0.5f, 0.5f, -1, -1, -1, -1};
	float zero[4] = {0}, v[4], want[4];
	uint64_t three[3] = {7, 8, 7};
	et_store **s;
	int ts, ta, th;

	sgd.init = ET_INIT_ZEROS;
	ada.init = ET_INIT_ZEROS;
	s = fx_open(f, &(struct et_store_config){.ddr_bytes = 1 << 20,
						 .slot_bytes = 64});
	assert_int_equal(et_table_create(*s, "sgd", &sgd, &ts), 0);
	assert_int_equal(et_table_create(*s, "ada", &ada, &ta), 0);

	/* SGD: row 7 gets g0 + g2 = (0, 1, 2, 3); w = -0.5 * that. */
	assert_int_equal(et_update(*s, ts, three, 3, g, &up), 0);
	assert_int_equal(et_gather(*s, ts, (uint64_t[]){7}, 1, v), 0);
	assert_true(v[0] == 0.0f && v[1] == -0.5f && v[2] == -1.0f &&
		    v[3] == -1.5f);
	assert_int_equal(et_gather(*s, ts, (uint64_t[]){8}, 1, v), 0);
	for (int c = 0; c < 4; c++)
		assert_true(v[c] == -0.25f);

	/* Adagrad: row 8 gets (0.5 x4): m = 0.25, mul = 0.5 / (0.5 + 1e-8)
	 * = 1 in f32, w = -0.5. Row 7: g = (0, 1, 2, 3), m = 14 / 4 = 3.5,
	 * mul = 0.5 / (sqrtf(3.5) + 1e-8f). A second update of row 8 with
	 * (0.5 x4): m = 0.5, mul = 0.5 / sqrtf(0.5). */
	assert_int_equal(et_update(*s, ta, three, 3, g, &up), 0);
	assert_int_equal(et_gather(*s, ta, (uint64_t[]){8}, 1, v), 0);
	for (int c = 0; c < 4; c++)
		assert_true(v[c] == -0.5f);
	assert_int_equal(et_gather(*s, ta, (uint64_t[]){7}, 1, v), 0);
	{
		float mul = 0.5f / (sqrtf(3.5f) + 1e-8f);

		for (int c = 0; c < 4; c++) {
			want[c] = 0.0f;
			want[c] -= mul * (float)c;
		}
		assert_memory_equal(v, want, sizeof(v));
	}
	assert_int_equal(et_update(*s, ta, (uint64_t[]){8}, 1, g + 4, &up), 0);
	assert_int_equal(et_gather(*s, ta, (uint64_t[]){8}, 1, v), 0);
	{
		float mul = 0.5f / (sqrtf(0.5f) + 1e-8f);

		for (int c = 0; c < 4; c++) {
			want[c] = -0.5f;
			want[c] -= mul * 0.5f;
		}
		assert_memory_equal(v, want, sizeof(v));
	}
	/* write_rows keeps the state: row 8 is reset to 0, then the same
	 * gradient again: m = 0.75. */
	assert_int_equal(et_write_rows(*s, ta, (uint64_t[]){8}, 1, zero), 0);
	assert_int_equal(et_update(*s, ta, (uint64_t[]){8}, 1, g + 4, &up), 0);
	assert_int_equal(et_gather(*s, ta, (uint64_t[]){8}, 1, v), 0);
	{
		float mul = 0.5f / (sqrtf(0.75f) + 1e-8f);

		for (int c = 0; c < 4; c++) {
			want[c] = 0.0f;
			want[c] -= mul * 0.5f;
		}
		assert_memory_equal(v, want, sizeof(v));
	}

	/* f16 storage: 1/3 is stored as the nearest f16. */
	{
		struct et_table_params h = sgd;
		float third[4] = {1.0f / 3, 1.0f / 3, 1.0f / 3, 1.0f / 3};

		h.dtype = ET_F16;
		assert_int_equal(et_table_create(*s, "half", &h, &th), 0);
		assert_int_equal(
		    et_write_rows(*s, th, (uint64_t[]){1}, 1, third), 0);
		assert_int_equal(et_gather(*s, th, (uint64_t[]){1}, 1, v), 0);
		assert_true(v[0] == et_f16_to_f32(et_f32_to_f16(1.0f / 3)));
		assert_true(v[0] != 1.0f / 3);
	}
	/* The state is on disk after close. */
	assert_int_equal(et_store_close(*s), 0);
	*s = NULL;
	{
		char path[PATH_MAX];
		et_tfile *tf;
		float st[2], v2[2 * 4];

		table_file_path(f->dirs[0], "ada", path);
		assert_int_equal(et_tfile_open(path, ET_TFILE_RDONLY, &tf), 0);
		assert_int_equal(
		    et_tfile_read_rows(tf, (uint64_t[]){7, 8}, 2, v2, st), 0);
		assert_memory_equal(v2 + 4, want, sizeof(want));
		et_tfile_close(tf);
		assert_true(st[0] == 3.5f);
		assert_true(st[1] == 0.75f);
	}
}

/* Everything written or updated survives close and reopen, through tiny
 * caches that wrote most of it back long before. Two stores run the same
 * updates, one closed and reopened half-way: the same bytes at the end
 * (which covers the optimizer state). */
static void test_reopen_keeps_updates(void **state)
{
	struct fx *f = *state;
	struct et_table_params p = small_params(8, ET_OPT_ROWWISE_ADAGRAD);
	struct et_store_config tiny = {.hbm_bytes = 16 * (36 + META),
				       .ddr_bytes = 32 * (36 + META),
				       .ways = 4};
	struct et_update_params up = {.lr = 0.1f};
	enum { N = 600, ROUNDS = 4 };
	uint64_t ids[N];
	float *g = tu_calloc(N * 8, sizeof(float));
	float *a = tu_calloc(N * 8, sizeof(float));
	float *b = tu_calloc(N * 8, sizeof(float));
	struct tu_rng r;
	et_store **s1, **s2;
	int t1, t2;

	p.rows = 100000;
	tu_rng_seed(&r, 5);
	s1 = fx_open(f, &tiny);
	s2 = fx_open(f, &tiny);
	assert_int_equal(et_table_create(*s1, "t", &p, &t1), 0);
	assert_int_equal(et_table_create(*s2, "t", &p, &t2), 0);
	for (int round = 0; round < ROUNDS; round++) {
		for (int i = 0; i < N; i++) {
			ids[i] = tu_rng_below(&r, p.rows);
			for (int c = 0; c < 8; c++)
				g[i * 8 + c] =
				    (float)tu_rng_double(&r, -1.0, 1.0);
		}
		for (int i = 0; i < N; i += 20) {
			assert_int_equal(
			    et_update(*s1, t1, ids + i, 20, g + i * 8, &up), 0);
			assert_int_equal(
			    et_update(*s2, t2, ids + i, 20, g + i * 8, &up), 0);
		}
		if (round == 1) {
			assert_int_equal(et_write_rows(*s1, t1, ids, 50, g), 0);
			assert_int_equal(et_write_rows(*s2, t2, ids, 50, g), 0);
		}
		if (round == 2) {
			/* Snapshot, close, reopen, compare. */
			assert_int_equal(et_gather(*s1, t1, ids, N, a), 0);
			assert_int_equal(et_store_close(*s1), 0);
			*s1 = NULL;
			assert_int_equal(et_store_open(f->dirs[0], &tiny, s1),
					 0);
			assert_int_equal(et_table_open(*s1, "t", &p, &t1), 0);
			assert_int_equal(et_gather(*s1, t1, ids, N, b), 0);
			assert_memory_equal(a, b, N * 8 * sizeof(float));
		}
	}
	assert_true(stats_of(*s2, -1).writebacks > 0);
	assert_int_equal(et_gather(*s1, t1, ids, N, a), 0);
	assert_int_equal(et_gather(*s2, t2, ids, N, b), 0);
	assert_memory_equal(a, b, N * 8 * sizeof(float));
	free(g);
	free(a);
	free(b);
}

/*
 * A first write-back of a full tier: 150,000 rows of one table dirty in
 * DDR (its index sized for them at once, rowlog_expect) and a few of
 * another; then some of them updated and a few new, checkpointed, the
 * store closed and reopened: every row reads what was written or updated.
 */
static void test_first_writeback_many(void **state)
{
	struct fx *f = *state;
	struct et_table_params p = small_params(4, ET_OPT_SGD);
	struct et_store_config c = {.ddr_bytes = 24u << 20};
	struct et_update_params up = {.lr = 0.5f};
	enum { N = 150000, FEW = 300, UPD = 5000 };
	uint64_t *ids = tu_calloc(N, sizeof(*ids));
	float *v = tu_calloc((size_t)N * 4, sizeof(float));
	float *got = tu_calloc((size_t)N * 4, sizeof(float));
	float few[FEW * 4];
	struct tu_rng r;
	et_store **s;
	int t, t2;

	p.rows = 1ULL << 34;
	tu_rng_seed(&r, 11);
	for (size_t i = 0; i < N; i++) {
		ids[i] = (i * 0x9e3779b97f4a7c15ULL) >> 30; /* distinct */
		for (int k = 0; k < 4; k++)
			v[i * 4 + k] = (float)tu_rng_double(&r, -1.0, 1.0);
	}
	s = fx_open(f, &c);
	assert_int_equal(et_table_create(*s, "big", &p, &t), 0);
	assert_int_equal(et_table_create(*s, "few", &p, &t2), 0);
	assert_int_equal(et_write_rows(*s, t, ids, N, v), 0);
	assert_int_equal(et_write_rows(*s, t2, ids, FEW, v), 0);
	memcpy(few, v, sizeof(few));
	assert_true(stats_of(*s, -1).ddr.dirty_rows >= N / 2);
	assert_int_equal(et_flush(*s), 0);
	/* train on: rows updated (v follows), then a commit */
	for (size_t i = 0; i < UPD; i++)
		for (int k = 0; k < 4; k++)
			got[i * 4 + k] = 1.0f;
	assert_int_equal(et_update(*s, t, ids, UPD, got, &up), 0);
	for (size_t i = 0; i < UPD * 4; i++)
		v[i] -= 0.5f;
	assert_int_equal(et_checkpoint(*s, NULL, 0), 0);
	/* the index was sized once for the rows, at a load of 3/4 (13 bytes
	 * a slot, the filter's byte included; the list of changes is gone
	 * with the commit): growing by a third from 1024 slots would have
	 * ended at 242,263 */
	assert_int_equal(stats_of(*s, t).log_index_rows, N);
	assert_true(stats_of(*s, t).log_index_bytes <=
		    13 * (N * 4 / 3 + 2) + 65536);
	assert_int_equal(et_store_close(*s), 0);
	*s = NULL;
	assert_int_equal(et_store_open(f->dirs[0], &c, s), 0);
	assert_int_equal(et_table_open(*s, "big", &p, &t), 0);
	assert_int_equal(et_table_open(*s, "few", &p, &t2), 0);
	assert_int_equal(et_gather(*s, t, ids, N, got), 0);
	assert_memory_equal(got, v, (size_t)N * 4 * sizeof(float));
	assert_int_equal(et_gather(*s, t2, ids, FEW, got), 0);
	assert_memory_equal(got, few, sizeof(few));
	free(ids);
	free(v);
	free(got);
}

/* ------------------------------------------------------------------- stats */

/* Big caches and an HBM: a known sequence determines the counters. */
static void test_stats_exact(void **state)
{
	struct fx *f = *state;
	struct et_table_params p = small_params(4, ET_OPT_SGD);
	struct et_update_params up = {.lr = 1.0f};
	struct et_store_config c = {.hbm_bytes = 1 << 16, .ddr_bytes = 1 << 18};
	float out[4 * 4], g[2 * 4] = {1, 1, 1, 1, 1, 1, 1, 1};
	struct et_stats st, t1;
	et_store **s;
	int t0, tb;

	s = fx_open(f, &c);
	assert_int_equal(et_table_create(*s, "a", &p, &t0), 0);
	assert_int_equal(et_table_create(*s, "b", &p, &tb), 0);

	assert_int_equal(et_gather(*s, t0, (uint64_t[]){1, 2, 2, 3}, 4, out),
			 0);
	st = stats_of(*s, t0);
	assert_int_equal(st.calls, 1);
	assert_int_equal(st.requested, 4);
	assert_int_equal(st.unique, 3);
	assert_int_equal(st.unique_misses, 3);
	assert_int_equal(st.conflict_unique_misses, 0);
	assert_int_equal(st.conflict_misses, 0);
	assert_int_equal(st.hbm.hits, 0);
	assert_int_equal(st.hbm.misses, 3);
	assert_int_equal(st.ddr.hits, 0);
	assert_int_equal(st.ddr.misses, 3);
	assert_int_equal(st.rows_lazy, 3);
	assert_int_equal(st.nvme_rows_read, 0);
	assert_int_equal(st.blocks_read, 0);
	assert_int_equal(st.hbm.inserts, 3);
	assert_int_equal(st.hbm.resident_rows, 3);
	assert_int_equal(st.ddr.resident_rows, 0); /* exclusive tiers */
	assert_int_equal(st.ddr.inserts, 0);
	assert_int_equal(st.hbm.dirty_rows, 0);
	assert_int_equal(st.writebacks, 0);

	assert_int_equal(et_gather(*s, t0, (uint64_t[]){3, 1, 4}, 3, out), 0);
	assert_int_equal(et_update(*s, t0, (uint64_t[]){1, 1}, 2, g, &up), 0);
	st = stats_of(*s, t0);
	assert_int_equal(st.calls, 3);
	assert_int_equal(st.requested, 9);
	assert_int_equal(st.unique, 7);
	assert_int_equal(st.unique_misses, 4);
	assert_int_equal(st.hbm.hits, 3);
	assert_int_equal(st.hbm.misses, 4);
	assert_int_equal(st.rows_lazy, 4);
	assert_int_equal(st.hbm.resident_rows, 4);
	assert_int_equal(st.hbm.dirty_rows, 1);
	assert_int_equal(st.hbm.evictions, 0);
	/* Table b saw nothing; the tiers are store-wide either way. */
	t1 = stats_of(*s, tb);
	assert_int_equal(t1.calls, 0);
	assert_int_equal(t1.requested, 0);
	assert_int_equal(t1.rows_lazy, 0);
	assert_int_equal(t1.hbm.resident_rows, 4);

	assert_int_equal(et_flush(*s), 0);
	st = stats_of(*s, -1);
	assert_int_equal(st.hbm.dirty_rows, 0);
	assert_int_equal(st.hbm.resident_rows, 4); /* flush keeps rows */
	assert_int_equal(st.writebacks, 1);
	assert_int_equal(st.log_rows_written, 1); /* appended, not in place */
	assert_int_equal(st.blocks_written, 0);
	assert_int_equal(st.log_index_rows, 1);
	assert_int_equal(st.calls, 3);

	/* After reopen row 1 is on disk (read), row 2 is not (lazy). */
	assert_int_equal(et_store_close(*s), 0);
	*s = NULL;
	assert_int_equal(et_store_open(f->dirs[0], &c, s), 0);
	assert_int_equal(et_table_open(*s, "a", NULL, &t0), 0);
	assert_int_equal(et_gather(*s, t0, (uint64_t[]){1}, 1, out), 0);
	/* uniform(+-0.5) - 1 * (1 + 1) */
	for (int i = 0; i < 4; i++)
		assert_true(out[i] >= -2.5f && out[i] <= -1.5f);
	assert_int_equal(et_gather(*s, t0, (uint64_t[]){1, 2}, 2, out), 0);
	st = stats_of(*s, t0);
	assert_int_equal(st.calls, 2);
	/* row 1 from the log; row 2 was never written: the initializer */
	assert_int_equal(st.nvme_rows_read, 1);
	assert_int_equal(st.rows_lazy, 1);
	assert_int_equal(st.hbm.hits, 1);
	assert_int_equal(st.hbm.misses, 2);
	assert_int_equal(st.writebacks, 0);
}

/* A one-set HBM of 2 ways over a DDR: LRU order decides every move. */
static void test_stats_demotion(void **state)
{
	struct fx *f = *state;
	struct et_table_params p = small_params(4, ET_OPT_SGD); /* 16 B */
	struct et_store_config c = {.hbm_bytes = 2 * (16 + META),
				    .ddr_bytes = 64 * (16 + META),
				    .ways = 2};
	float out[4];
	struct et_stats st;
	et_store **s;
	int t;

	s = fx_open(f, &c);
	assert_int_equal(et_table_create(*s, "t", &p, &t), 0);
	for (uint64_t r = 1; r <= 3; r++)
		assert_int_equal(et_gather(*s, t, &r, 1, out), 0);
	/* Row 3 pushed row 1 (least recent) down to DDR. */
	st = stats_of(*s, t);
	assert_int_equal(st.hbm.capacity_rows, 2);
	assert_int_equal(st.hbm.inserts, 3);
	assert_int_equal(st.hbm.evictions, 1);
	assert_int_equal(st.ddr.inserts, 1);
	assert_int_equal(st.ddr.resident_rows, 1);
	assert_int_equal(st.hbm.resident_rows, 2);
	assert_int_equal(st.ddr.misses, 3);
	/* Row 1 again: a DDR hit, promoted; row 2 goes down. */
	assert_int_equal(et_gather(*s, t, (uint64_t[]){1}, 1, out), 0);
	st = stats_of(*s, t);
	assert_int_equal(st.hbm.hits, 0);
	assert_int_equal(st.hbm.misses, 4);
	assert_int_equal(st.ddr.hits, 1);
	assert_int_equal(st.ddr.misses, 3);
	assert_int_equal(st.hbm.evictions, 2);
	assert_int_equal(st.ddr.inserts, 2);
	assert_int_equal(st.ddr.resident_rows, 1); /* row 1 left, row 2 came */
	assert_int_equal(st.hbm.resident_rows, 2);
	assert_int_equal(st.rows_lazy, 3);
	assert_int_equal(st.unique_misses, 4);
	/* Rows 3 and 1 are in HBM: hits. */
	assert_int_equal(et_gather(*s, t, (uint64_t[]){3}, 1, out), 0);
	assert_int_equal(et_gather(*s, t, (uint64_t[]){1}, 1, out), 0);
	st = stats_of(*s, t);
	assert_int_equal(st.hbm.hits, 2);
	assert_int_equal(st.hbm.evictions, 2);
}

/* Tiny DDR, no HBM: every update of a new row past capacity evicts a
 * dirty row, which is written back. */
static void test_stats_writeback(void **state)
{
	struct fx *f = *state;
	struct et_table_params p = small_params(4, ET_OPT_SGD);
	struct et_update_params up = {.lr = 1.0f};
	float g[4] = {1, 2, 3, 4};
	struct et_stats st;
	et_store **s;
	int t;

	p.rows = 100000;
	p.init = ET_INIT_ZEROS;
	s = fx_open(f, &(struct et_store_config){.ddr_bytes = 16 * (16 + META),
						 .ways = 4});
	assert_int_equal(et_table_create(*s, "t", &p, &t), 0);
	for (uint64_t r = 0; r < 100; r++) {
		uint64_t id = r * 997;

		assert_int_equal(et_update(*s, t, &id, 1, g, &up), 0);
	}
	st = stats_of(*s, t);
	assert_int_equal(st.ddr.capacity_rows, 16);
	assert_int_equal(st.calls, 100);
	assert_int_equal(st.unique_misses, 100);
	assert_int_equal(st.rows_lazy, 100);
	assert_int_equal(st.ddr.inserts, 100);
	assert_int_equal(st.ddr.dirty_rows, st.ddr.resident_rows);
	assert_int_equal(st.ddr.evictions, 100 - st.ddr.resident_rows);
	assert_true(st.ddr.resident_rows >= 4 && st.ddr.resident_rows <= 16);
	assert_int_equal(st.writebacks, st.ddr.evictions);
	assert_true(st.writebacks >= 84);
	assert_int_equal(st.log_rows_written, st.writebacks);
	assert_int_equal(et_flush(*s), 0);
	st = stats_of(*s, t);
	assert_int_equal(st.writebacks, 100);
	assert_int_equal(st.ddr.dirty_rows, 0);
	/* Every row reads back as updated (zeros - 1 * g), most from disk. */
	for (uint64_t r = 0; r < 100; r++) {
		uint64_t id = r * 997;
		float v[4];

		assert_int_equal(et_gather(*s, t, &id, 1, v), 0);
		for (int c = 0; c < 4; c++)
			assert_true(v[c] == -g[c]);
	}
	st = stats_of(*s, t);
	assert_true(st.nvme_rows_read >= 84);
}

/* One-way HBM of one slot over a big DDR: the second distinct row of a
 * batch finds its only way pinned (a conflict) and goes to DDR. The
 * conflict counters count it once per distinct id and once per id. */
static void test_stats_conflicts(void **state)
{
	struct fx *f = *state;
	struct et_table_params p = small_params(4, ET_OPT_SGD);
	float out[4 * 4];
	struct et_stats st;
	et_store **s;
	int t;

	s = fx_open(f, &(struct et_store_config){.hbm_bytes = 16 + META,
						 .ddr_bytes = 1 << 16,
						 .ways = 1});
	assert_int_equal(et_table_create(*s, "t", &p, &t), 0);
	assert_int_equal(et_gather(*s, t, (uint64_t[]){5, 6, 6, 5}, 4, out), 0);
	assert_memory_equal(out, out + 12, 16);
	assert_memory_equal(out + 4, out + 8, 16);
	st = stats_of(*s, t);
	assert_int_equal(st.hbm.capacity_rows, 1);
	assert_int_equal(st.unique, 2);
	assert_int_equal(st.unique_misses, 2);
	assert_int_equal(st.conflict_unique_misses, 1);
	assert_int_equal(st.conflict_misses, 2);
}

/* ----------------------------------------------------- tier corner cases */

/*
 * One slot of HBM over one slot of DDR (ways 1: one set each).
 *   write A        HBM {A*}
 *   write B        HBM {B*}   DDR {A*}      (A demoted)
 *   gather C, A    C misses, A is found in DDR; placing C demotes B,
 *                  which takes DDR's only slot -- A's. A must still be
 *                  served its written value.
 */
static void test_ddr_hit_displaced_by_demotion(void **state)
{
	struct fx *f = *state;
	struct et_table_params p = small_params(4, ET_OPT_SGD);
	float a[4] = {1, 2, 3, 4}, b[4] = {5, 6, 7, 8}, out[2 * 4];
	et_store **s;
	int t;

	s = fx_open(f, &(struct et_store_config){.hbm_bytes = 16 + META,
						 .ddr_bytes = 16 + META,
						 .ways = 1});
	assert_int_equal(et_table_create(*s, "t", &p, &t), 0);
	assert_int_equal(et_write_rows(*s, t, (uint64_t[]){100}, 1, a), 0);
	assert_int_equal(et_write_rows(*s, t, (uint64_t[]){200}, 1, b), 0);
	assert_int_equal(et_gather(*s, t, (uint64_t[]){300, 100}, 2, out), 0);
	assert_memory_equal(out + 4, a, sizeof(a));
	assert_int_equal(et_gather(*s, t, (uint64_t[]){100, 200}, 2, out), 0);
	assert_memory_equal(out, a, sizeof(a));
	assert_memory_equal(out + 4, b, sizeof(b));
}

/*
 * One slot of DDR, no HBM, slots of 64 bytes for rows of 16: a batch of
 * 256 distinct new rows places the first and serves the other 255 from
 * the bypass, reading them in one batch (256 x 16 bytes) and writing the
 * updated ones straight back. Values and counters must be exact.
 */
/*
 * A window handed batch by batch slides (the store shifts the last one and
 * adds the new batch); the same windows handed after a clearing call are
 * built anew. Both must give the same evictions and admissions, so the
 * same counters, and the same values; and a window must change what is
 * cached (fewer misses than none), or this test would test nothing.
 */
static void test_lookahead_slides(void **state)
{
	struct fx *f = *state;
	struct et_table_params p = small_params(4, ET_OPT_SGD);
	struct et_store_config c = {.ddr_bytes = 64 * (16 + META),
				    .ways = 4,
				    .ddr_policy = ET_POLICY_TINYLFU};
	enum { NB = 40, N = 48, K = 6 };
	uint64_t ids[NB][N], state_rng = 5;
	float out[3][N * 4];
	struct et_batch_ids bi[NB];
	struct et_stats st[3];
	et_store **s[3];
	int t[3];

	p.rows = 400;
	for (int b = 0; b < NB; b++)
		for (int i = 0; i < N; i++) {
			/* a hot set of 40 rows and a uniform tail */
			state_rng = state_rng * 6364136223846793005ULL + 1;
			ids[b][i] = (state_rng >> 33) % 3
					? (state_rng >> 40) % 40
					: (state_rng >> 40) % 400;
		}
	for (int k = 0; k < 3; k++) {
		s[k] = fx_open(f, &c);
		assert_int_equal(et_table_create(*s[k], "t", &p, &t[k]), 0);
	}
	for (int b = 0; b < NB; b++) {
		size_t n = NB - b < K ? (size_t)(NB - b) : K;
		struct et_batch w[K];

		for (size_t j = 0; j < n; j++) {
			bi[b + j] = (struct et_batch_ids){t[0], ids[b + j], N};
			w[j] = (struct et_batch){&bi[b + j], 1};
		}
		assert_int_equal(et_lookahead(*s[0], w, n), 0);
		assert_int_equal(et_lookahead(*s[1], NULL, 0), 0);
		assert_int_equal(et_lookahead(*s[1], w, n), 0);
		for (int k = 0; k < 3; k++)
			assert_int_equal(
			    et_gather(*s[k], t[k], ids[b], N, out[k]), 0);
		assert_memory_equal(out[0], out[1], sizeof(out[0]));
		assert_memory_equal(out[0], out[2], sizeof(out[0]));
	}
	for (int k = 0; k < 3; k++)
		st[k] = stats_of(*s[k], t[k]);
	assert_int_equal(st[0].ddr.hits, st[1].ddr.hits);
	assert_int_equal(st[0].ddr.misses, st[1].ddr.misses);
	assert_int_equal(st[0].ddr.evictions, st[1].ddr.evictions);
	assert_int_equal(st[0].ddr.resident_rows, st[1].ddr.resident_rows);
	assert_true(st[0].ddr.misses < st[2].ddr.misses);
}

static void test_bypass(void **state)
{
	struct fx *f = *state;
	struct et_table_params p = small_params(4, ET_OPT_SGD);
	struct et_update_params up = {.lr = 0.5f};
	enum { N = 256 };
	uint64_t ids[N];
	float *g = tu_calloc(N * 4, sizeof(float));
	float *v = tu_calloc(N * 4, sizeof(float));
	struct et_stats st;
	et_store **s;
	int t;

	p.init = ET_INIT_ZEROS;
	p.rows = 10 * N;
	for (int i = 0; i < N; i++) {
		ids[i] = (uint64_t)i * 7;
		for (int c = 0; c < 4; c++)
			g[i * 4 + c] = (float)(i * 4 + c);
	}
	s = fx_open(f, &(struct et_store_config){.ddr_bytes = 64 + META,
						 .slot_bytes = 64,
						 .ways = 1});
	assert_int_equal(et_table_create(*s, "t", &p, &t), 0);
	assert_int_equal(et_update(*s, t, ids, N, g, &up), 0);
	st = stats_of(*s, t);
	assert_int_equal(st.ddr.capacity_rows, 1);
	assert_int_equal(st.unique, N);
	assert_int_equal(st.conflict_unique_misses, N - 1);
	assert_int_equal(st.conflict_misses, N - 1);
	assert_int_equal(st.ddr.resident_rows, 1);
	assert_int_equal(st.writebacks, N - 1);
	assert_int_equal(et_gather(*s, t, ids, N, v), 0);
	for (int i = 0; i < N * 4; i++)
		assert_true(v[i] == -0.5f * g[i]);
	/* The same through a close: the files hold every row. */
	assert_int_equal(et_store_close(*s), 0);
	*s = NULL;
	{
		char path[PATH_MAX];
		et_tfile *tf;

		table_file_path(f->dirs[0], "t", path);
		assert_int_equal(et_tfile_open(path, ET_TFILE_RDONLY, &tf), 0);
		memset(v, 0, N * 4 * sizeof(float));
		assert_int_equal(et_tfile_read_rows(tf, ids, N, v, NULL), 0);
		et_tfile_close(tf);
		for (int i = 0; i < N * 4; i++)
			assert_true(v[i] == -0.5f * g[i]);
	}
	free(g);
	free(v);
}

/*
 * One slot of HBM (ways 1) over a big DDR, slots of 64 bytes for rows of
 * 16: a batch of 256 distinct new rows places the first in HBM; the others
 * find the only HBM way pinned and are placed in DDR from the batch's read
 * buffer (256 x 16 bytes). Values and counters must be exact.
 */
static void test_conflict_to_ddr(void **state)
{
	struct fx *f = *state;
	struct et_table_params p = small_params(4, ET_OPT_SGD);
	struct et_update_params up = {.lr = 0.25f};
	enum { N = 256 };
	uint64_t ids[N];
	float *g = tu_calloc(N * 4, sizeof(float));
	float *v = tu_calloc(N * 4, sizeof(float));
	struct et_stats st;
	et_store **s;
	int t;

	p.init = ET_INIT_ZEROS;
	p.rows = 10 * N;
	for (int i = 0; i < N; i++) {
		ids[i] = (uint64_t)i * 5 + 1;
		for (int c = 0; c < 4; c++)
			g[i * 4 + c] = (float)(i * 4 + c) + 1.0f;
	}
	s = fx_open(f,
		    &(struct et_store_config){.hbm_bytes = 64 + META,
					      .ddr_bytes = 4096 * (64 + META),
					      .slot_bytes = 64,
					      .ways = 1});
	assert_int_equal(et_table_create(*s, "t", &p, &t), 0);
	assert_int_equal(et_update(*s, t, ids, N, g, &up), 0);
	st = stats_of(*s, t);
	assert_int_equal(st.hbm.capacity_rows, 1);
	assert_int_equal(st.hbm.resident_rows, 1);
	assert_int_equal(st.conflict_unique_misses, N - 1);
	assert_int_equal(st.conflict_misses, N - 1);
	/* Those that found a free DDR way are there, dirty; the others
	 * (their DDR set full with rows of this batch) went home. */
	assert_int_equal(st.ddr.resident_rows + st.writebacks, N - 1);
	assert_int_equal(st.ddr.dirty_rows, st.ddr.resident_rows);
	assert_int_equal(et_gather(*s, t, ids, N, v), 0);
	for (int i = 0; i < N * 4; i++)
		assert_true(v[i] == -0.25f * g[i]);
	free(g);
	free(v);
}

/* The library counts every byte it allocates (mem_in_use); once a store
 * is closed the count is back where it was, however many tables were
 * created and opened, in a directory whose name is short or long. */
static void test_close_frees_memory(void **state)
{
	struct fx *f = *state;
	struct et_table_params p = small_params(4, ET_OPT_ROWWISE_ADAGRAD);
	struct et_store_config c = {
	    .hbm_bytes = 64 * 64, .ddr_bytes = 256 * 64, .ways = 4};
	struct et_update_params up = {.lr = 0.1f};
	float g[8 * 4] = {1, 2, 3, 4};
	const char *names[] = {"t", "table_with_a_longer_name", "x.y-z"};
	size_t before = mem_in_use();
	const char *dir;
	et_store **s;
	int id;

	s = fx_open(f, &c);
	dir = f->dirs[0];
	for (int k = 0; k < 3; k++) {
		assert_int_equal(et_table_create(*s, names[k], &p, &id), 0);
		assert_int_equal(
		    et_update(*s, id, (uint64_t[]){1, 2, 900}, 3, g, &up), 0);
	}
	assert_true(mem_in_use() > before);
	assert_int_equal(et_store_close(*s), 0);
	*s = NULL;
	assert_int_equal(mem_in_use(), before);
	for (int round = 0; round < 3; round++) {
		assert_int_equal(et_store_open(dir, &c, s), 0);
		for (int k = 0; k < 3; k++)
			assert_int_equal(et_table_open(*s, names[k], NULL, &id),
					 0);
		assert_true(et_table_open(*s, "absent", NULL, &id) < 0);
		assert_int_equal(et_store_close(*s), 0);
		*s = NULL;
		assert_int_equal(mem_in_use(), before);
	}
	/* A failed open or create gives everything back too. */
	assert_true(
	    et_store_open(dir, &(struct et_store_config){.ways = 65}, s) < 0);
	assert_int_equal(mem_in_use(), before);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
	    T(test_open_bad_config),
	    T(test_open_good_config),
	    T(test_slot_sizing),
	    T(test_direct_tables_added),
	    T(test_direct_bytes),
	    T(test_mixed_dims),
	    T(test_new_class_later),
	    T(test_new_class_with_queue),
	    T(test_capacity_efficiency),
	    T(test_open_not_dir),
	    T(test_table_create_open),
	    T(test_table_open_expect),
	    T(test_row_range),
	    T(test_unknown_table),
	    T(test_bad_arguments),
	    T(test_gather_and_pool),
	    T(test_optimizers),
	    T(test_reopen_keeps_updates),
	    T(test_first_writeback_many),
	    T(test_stats_exact),
	    T(test_stats_demotion),
	    T(test_stats_writeback),
	    T(test_stats_conflicts),
	    T(test_ddr_hit_displaced_by_demotion),
	    T(test_bypass),
	    T(test_conflict_to_ddr),
	    T(test_close_frees_memory),
	    T(test_lookahead_slides),
#undef T
	};

	const char *only = getenv("ET_TEST_FILTER"); /* e.g. "test_bypass" */

	if (only && *only)
		cmocka_set_test_filter(only);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
