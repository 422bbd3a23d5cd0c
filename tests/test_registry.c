/*
 * test_registry.c - the registry of a store (src/store/registry.h): its tables
 * and the size classes that split each tier, reached through src/store/state.h
 * in real stores (et_store_open on a scratch directory, et_table_create):
 *
 *   - each table's class has slots of its row rounded up to 4 bytes (or
 *     et_store_config.slot_bytes, if larger): tables of one slot size
 *     share a class, every other size gets its own, and a class's weight is
 *     the sum over its tables of rows x (slot + ET_SLOT_META_BYTES);
 *   - after every table, in each tier (HBM and DDR; LRU and TinyLFU, whose
 *     sketch makes a slot cost 8 bytes more): every class has a set at
 *     least, the sets of all classes fit the tier (sum of nsets x ways x
 *     slot cost <= bytes), less than one set per class is left over, and
 *     beyond its first set each class's share follows its weight; a store
 *     without HBM plans no HBM sets;
 *   - the caches allocated by the next operation have the planned sets,
 *     and their bytes stay within each tier, also after a new class made
 *     the plan change;
 *   - a table whose new class cannot get one set (DDR or HBM) is refused
 *     with ET_ECAPACITY naming the tier, leaving classes, plan, tables and
 *     directory as they were; a table of an existing class still fits;
 *   - tier_fits at the boundary; ids_check (ET_EROWRANGE against each
 *     table's own rows, with the detail naming the id; -EINVAL, -E2BIG);
 *     table_get and no_table (ET_ENOTABLE, -EINVAL without a store).
 * Skips with a reason without io_uring or O_DIRECT.
 */
#include <errno.h>
#include <ftw.h>
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

#include <cmocka.h>

#include "cache.h"
#include "embtier.h"
#include "policy.h"
#include "registry.h"
#include "state.h"
#include "table_file.h"
#include "util.h"

struct fx {
	char *dir;
	et_store *s;
};

static int setup(void **state)
{
	*state = tu_calloc(1, sizeof(struct fx));
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	et_store_close(f->s);
	if (f->dir) {
		tu_rmtree(f->dir);
		free(f->dir);
	}
	free(f);
	return 0;
}

static et_store *fx_open(struct fx *f, const struct et_store_config *c)
{
	tu_require_uring();
	tu_require_direct();
	f->dir = strdup(tu_path("reg"));
	assert_non_null(f->dir);
	assert_int_equal(et_store_open(f->dir, c, &f->s), 0);
	return f->s;
}

static struct et_table_params params(uint64_t rows, uint32_t dim, et_dtype t,
				     et_optim o)
{
	struct et_table_params p = {
	    .rows = rows, .dim = dim, .dtype = t, .optim = o, .seed = 9};

	return p;
}

static int create(et_store *s, const char *name,
		  const struct et_table_params *p)
{
	int id = -1;
	int ret = et_table_create(s, name, p, &id);

	if (ret)
		fail_msg("et_table_create %s: %s (%s)", name, et_strerror(ret),
			 et_errdetail());
	return id;
}

/* The slot of a row of rb bytes in s. */
static uint32_t slot_of(const et_store *s, uint32_t rb)
{
	uint32_t slot = (rb + 3) & ~3u;
	uint32_t min = (s->cfg.slot_bytes + 3) & ~3u;

	return slot > min ? slot : min;
}

static uint64_t cost(const et_store *s, int tier, uint32_t slot)
{
	return cache_slot_cost(
	    slot, policy_get(tier ? s->cfg.ddr_policy : s->cfg.hbm_policy));
}

/*
 * Everything the registry promises about its tables and classes now:
 * classes by slot size and weights; and per tier, one set a class at
 * least, all within the tier, less than a set a class left over, and each
 * class's sets beyond the first in proportion to its weight.
 */
static void check_plan(const et_store *s)
{
	const struct registry *r = &s->reg;
	uint64_t bytes[2] = {s->cfg.hbm_bytes, s->cfg.ddr_bytes};
	double wsum = 0;

	assert_true(r->ncls >= 1);
	assert_true(r->ncls <= r->ntables);
	/* each table in the class of its slot; classes of distinct slots */
	for (uint32_t i = 0; i < r->ntables; i++) {
		const struct table *t = &r->tables[i];

		assert_true(t->cls < r->ncls);
		assert_int_equal(r->cls[t->cls].slot_bytes,
				 slot_of(s, t->g->row_bytes));
		assert_ptr_equal(t->g, tf_geom(t->tf));
	}
	for (uint32_t i = 0; i < r->ncls; i++) {
		double w = 0;
		uint64_t rows = 0;
		uint32_t keyed = 0;
		bool used = false;

		for (uint32_t k = i + 1; k < r->ncls; k++)
			assert_int_not_equal(r->cls[i].slot_bytes,
					     r->cls[k].slot_bytes);
		for (uint32_t k = 0; k < r->ntables; k++)
			if (r->tables[k].cls == i) {
				w +=
				    (double)r->tables[k].g->rows *
				    (r->cls[i].slot_bytes + ET_SLOT_META_BYTES);
				rows += r->tables[k].g->rows;
				keyed += r->tables[k].g->keyed;
				used = true;
			}
		assert_true(used);
		assert_true(r->cls[i].weight == w);
		assert_int_equal(r->cls[i].rows, rows);
		assert_int_equal(r->cls[i].keyed, keyed);
		wsum += w;
	}
	assert_int_equal(r->has_hbm, s->cfg.hbm_bytes != 0);
	for (int tier = 0; tier < 2; tier++) {
		uint64_t used = 0, one_each = 0, rest;

		if (tier == 0 && !r->has_hbm) {
			for (uint32_t i = 0; i < r->ncls; i++)
				assert_int_equal(r->cls[i].nsets[0], 0);
			continue;
		}
		for (uint32_t i = 0; i < r->ncls; i++) {
			uint64_t per = cost(s, tier, r->cls[i].slot_bytes);

			assert_true(r->cls[i].nsets[tier] >= 1);
			used += r->cls[i].nsets[tier] * s->cfg.ways * per;
			one_each += (uint64_t)s->cfg.ways * per;
		}
		if (used > bytes[tier])
			fail_msg("tier %d: %llu bytes of sets in %llu", tier,
				 (unsigned long long)used,
				 (unsigned long long)bytes[tier]);
		if (bytes[tier] - used >= one_each)
			fail_msg("tier %d: %llu bytes left over, a set of "
				 "each class is %llu",
				 tier, (unsigned long long)(bytes[tier] - used),
				 (unsigned long long)one_each);
		/* beyond one set each, shares by weight (within one set
		 * and a byte of rounding) */
		rest = bytes[tier] - one_each;
		for (uint32_t i = 0; i < r->ncls; i++) {
			uint64_t set =
			    s->cfg.ways * cost(s, tier, r->cls[i].slot_bytes);
			double share = (double)rest * (r->cls[i].weight / wsum);
			double got =
			    (double)((r->cls[i].nsets[tier] - 1) * set);

			if (got > share + 2 || got < share - (double)set - 2)
				fail_msg("tier %d class %u (slot %u): %.0f "
					 "bytes beyond its first set, its "
					 "share is %.0f",
					 tier, i, r->cls[i].slot_bytes, got,
					 share);
		}
	}
}

/* Runs an operation on every table (which allocates the caches), then
 * checks the caches against the plan and the tiers' bytes. */
static void check_caches(et_store *s)
{
	const struct registry *r = &s->reg;
	struct et_stats st;
	uint64_t id0 = 0;

	for (uint32_t i = 0; i < r->ntables; i++) {
		float out[1024];

		assert_true(r->tables[i].g->dim <= 1024);
		assert_int_equal(et_gather(s, (int)i, &id0, 1, out), 0);
	}
	assert_true(r->caches_ready);
	for (uint32_t i = 0; i < r->ncls; i++) {
		const struct sclass *c = &r->cls[i];

		/* a share with a slot for every row: direct, its tables
		 * one after another */
		for (int tier = r->has_hbm ? 0 : 1; tier < 2; tier++) {
			const struct cache *k = tier ? &c->ddr : &c->hbm;
			uint64_t next = 0;

			/* direct: the share's bytes in slots, each row one;
			 * less than a set more than its sets */
			if (c->direct[tier]) {
				assert_false(c->keyed);
				assert_true(c->rows <= c->direct[tier]);
				assert_true(c->direct[tier] >=
					    c->nsets[tier] * s->cfg.ways);
				assert_true(c->direct[tier] <
					    (c->nsets[tier] + 1) * s->cfg.ways);
			} else {
				assert_true(c->keyed ||
					    c->rows > (c->nsets[tier] - 1) *
							  s->cfg.ways);
			}
			assert_int_equal(k->direct, c->direct[tier] != 0);
			assert_int_equal(k->ways, k->direct ? 1 : s->cfg.ways);
			assert_int_equal(k->nsets, k->direct ? c->direct[tier]
							     : c->nsets[tier]);
			for (uint32_t t = 0; t < r->ntables && k->direct; t++)
				if (r->tables[t].cls == i) {
					assert_int_equal(k->tbase[t], next);
					next += r->tables[t].g->rows;
				}
			assert_int_equal(k->dnext, next);
		}
		assert_int_equal(c->ddr.slot_bytes, c->slot_bytes);
		if (r->has_hbm) {
			assert_int_equal(c->hbm.slot_bytes, c->slot_bytes);
		} else {
			assert_null(c->hbm.keys);
		}
	}
	assert_int_equal(et_get_stats(s, -1, &st), 0);
	assert_true(st.ddr.alloc_bytes <= st.ddr.capacity_bytes);
	assert_true(st.hbm.alloc_bytes <= st.hbm.capacity_bytes);
	assert_true(st.ddr.alloc_bytes > 0);
	assert_int_equal(st.hbm.alloc_bytes > 0, r->has_hbm);
}

/* ---------------------------------------------------------------- plans */

/* Tables of six row sizes (four slot sizes, and two tables sharing one
 * of them), a HBM tier under LRU and DDR under TinyLFU. */
static void test_classes(void **state)
{
	struct fx *f = *state;
	const struct et_store_config c = {.hbm_bytes = 64 << 10,
					  .ddr_bytes = 1 << 20,
					  .hbm_policy = ET_POLICY_LRU,
					  .ddr_policy = ET_POLICY_TINYLFU,
					  .ways = 4};
	const struct {
		const char *name;
		struct et_table_params p;
		uint32_t slot;
		uint32_t ncls; /* classes once it is in */
	} tabs[] = {
	    {"f32", params(100000, 8, ET_F32, ET_OPT_SGD), 32, 1},
	    {"f32ada", params(1000, 8, ET_F32, ET_OPT_ROWWISE_ADAGRAD), 36, 2},
	    {"bf16", params(50, 5, ET_BF16, ET_OPT_SGD), 12, 3},
	    /* 16 x 2 + 4 bytes: f32ada's class */
	    {"f16ada", params(20000, 16, ET_F16, ET_OPT_ROWWISE_ADAGRAD), 36,
	     3},
	    {"wide", params(300, 100, ET_F32, ET_OPT_SGD), 400, 4},
	    /* 7 x 2 + 4 = 18 bytes, slot 20: by far the heaviest */
	    {"huge", params(1ULL << 30, 7, ET_BF16, ET_OPT_ROWWISE_ADAGRAD), 20,
	     5},
	};
	et_store *s = fx_open(f, &c);

	assert_int_equal(s->reg.ntables, 0);
	assert_int_equal(s->reg.ncls, 0);
	for (size_t k = 0; k < sizeof(tabs) / sizeof(*tabs); k++) {
		int id = create(s, tabs[k].name, &tabs[k].p);
		const struct table *t = table_get(s, id);

		assert_int_equal(id, k);
		assert_non_null(t);
		assert_string_equal(t->name, tabs[k].name);
		assert_int_equal(s->reg.ntables, k + 1);
		assert_int_equal(s->reg.ncls, tabs[k].ncls);
		assert_int_equal(s->reg.cls[t->cls].slot_bytes, tabs[k].slot);
		check_plan(s);
		if (k == 3) /* allocated here; changed by the next ones */
			check_caches(s);
	}
	/* f32ada and f16ada share one class; the others have their own */
	assert_int_equal(s->reg.tables[1].cls, s->reg.tables[3].cls);
	for (int i = 0; i < 6; i++)
		for (int k = i + 1; k < 6; k++)
			if (!(i == 1 && k == 3))
				assert_int_not_equal(s->reg.tables[i].cls,
						     s->reg.tables[k].cls);
	/* the heaviest class has the most sets of both tiers */
	for (uint32_t i = 0; i < s->reg.ncls; i++)
		if (i != s->reg.tables[5].cls) {
			assert_true(s->reg.cls[i].nsets[0] <
				    s->reg.cls[s->reg.tables[5].cls].nsets[0]);
			assert_true(s->reg.cls[i].nsets[1] <
				    s->reg.cls[s->reg.tables[5].cls].nsets[1]);
		}
	check_caches(s);
}

/* No HBM: DDR alone is planned; slot_bytes makes small rows share one
 * class of its size. */
static void test_slot_bytes(void **state)
{
	struct fx *f = *state;
	const struct et_store_config c = {
	    .ddr_bytes = 256 << 10, .ways = 8, .slot_bytes = 62};
	et_store *s = fx_open(f, &c);
	struct et_table_params p1 = params(1000, 8, ET_F32, ET_OPT_SGD);
	struct et_table_params p2 =
	    params(3000, 8, ET_F32, ET_OPT_ROWWISE_ADAGRAD);
	struct et_table_params p3 = params(70, 5, ET_BF16, ET_OPT_SGD);
	struct et_table_params p4 = params(500, 100, ET_F32, ET_OPT_SGD);

	create(s, "a", &p1);
	create(s, "b", &p2);
	create(s, "c", &p3);
	assert_int_equal(s->reg.ncls, 1);
	assert_int_equal(s->reg.cls[0].slot_bytes, 64); /* 62 rounded up */
	assert_false(s->reg.has_hbm);
	check_plan(s);
	create(s, "d", &p4);
	assert_int_equal(s->reg.ncls, 2);
	assert_int_equal(s->reg.cls[s->reg.tables[3].cls].slot_bytes, 400);
	check_plan(s);
	check_caches(s);
}

/* A new class that a tier cannot give one set is refused, and nothing
 * changes; a table of a class already there still fits. */
static void test_capacity(void **state)
{
	struct fx *f = *state;
	/* LRU, 4 ways: one set of slot 32 is 4 x 53 bytes, of slot 400 is
	 * 4 x 421, of slot 36 4 x 57: two classes fit in 2000 bytes of DDR,
	 * not three */
	const struct et_store_config c = {.ddr_bytes = 2000, .ways = 4};
	et_store *s = fx_open(f, &c);
	struct et_table_params small = params(100, 8, ET_F32, ET_OPT_SGD);
	struct et_table_params wide = params(10, 100, ET_F32, ET_OPT_SGD);
	struct et_table_params other =
	    params(10, 8, ET_F32, ET_OPT_ROWWISE_ADAGRAD);
	uint64_t nsets[2];
	char path[PATH_MAX];
	struct stat st;
	int id = 77;

	create(s, "small", &small);
	create(s, "wide", &wide);
	check_plan(s);
	nsets[0] = s->reg.cls[0].nsets[1];
	nsets[1] = s->reg.cls[1].nsets[1];
	assert_int_equal(et_table_create(s, "other", &other, &id),
			 ET_ECAPACITY);
	assert_non_null(strstr(et_errdetail(), "ddr_bytes"));
	assert_int_equal(id, 77);
	assert_int_equal(s->reg.ntables, 2);
	assert_int_equal(s->reg.ncls, 2);
	assert_int_equal(s->reg.cls[0].nsets[1], nsets[0]);
	assert_int_equal(s->reg.cls[1].nsets[1], nsets[1]);
	assert_true(s->reg.cls[0].weight == 100.0 * (32 + ET_SLOT_META_BYTES));
	snprintf(path, sizeof(path), "%s/other.et", f->dir);
	assert_int_not_equal(stat(path, &st), 0);
	check_plan(s);
	/* the same row size as "small": its class */
	create(s, "small2", &small);
	assert_int_equal(s->reg.ncls, 2);
	assert_int_equal(s->reg.tables[2].cls, s->reg.tables[0].cls);
	check_plan(s);
	check_caches(s);
}

/* The same with HBM too small for a new class while DDR has room. */
static void test_capacity_hbm(void **state)
{
	struct fx *f = *state;
	const struct et_store_config c = {
	    .hbm_bytes = 2000, .ddr_bytes = 1 << 20, .ways = 4};
	et_store *s = fx_open(f, &c);
	struct et_table_params small = params(100, 8, ET_F32, ET_OPT_SGD);
	struct et_table_params wide = params(10, 100, ET_F32, ET_OPT_SGD);
	struct et_table_params other =
	    params(10, 8, ET_F32, ET_OPT_ROWWISE_ADAGRAD);
	int id;

	create(s, "small", &small);
	create(s, "wide", &wide);
	check_caches(s); /* allocated: a refused table must not move them */
	assert_int_equal(et_table_create(s, "other", &other, &id),
			 ET_ECAPACITY);
	assert_non_null(strstr(et_errdetail(), "hbm_bytes"));
	assert_int_equal(s->reg.ncls, 2);
	assert_int_equal(s->reg.ntables, 2);
	assert_true(s->reg.caches_ready);
	check_plan(s);
	check_caches(s);
}

static void test_tier_fits(void **state)
{
	(void)state;
	/* LRU: 53 bytes a slot of 32; TinyLFU 61 */
	assert_int_equal(tier_fits("ddr_bytes", 16 * 53, 16, 32, ET_POLICY_LRU),
			 0);
	assert_int_equal(
	    tier_fits("ddr_bytes", 16 * 53 - 1, 16, 32, ET_POLICY_LRU),
	    ET_ECAPACITY);
	assert_non_null(strstr(et_errdetail(), "ddr_bytes"));
	assert_int_equal(
	    tier_fits("hbm_bytes", 16 * 61, 16, 32, ET_POLICY_TINYLFU), 0);
	assert_int_equal(
	    tier_fits("hbm_bytes", 16 * 61 - 1, 16, 32, ET_POLICY_TINYLFU),
	    ET_ECAPACITY);
	assert_non_null(strstr(et_errdetail(), "hbm_bytes"));
}

/* -------------------------------------------------- ids, tables by id */

static void test_ids_check(void **state)
{
	struct fx *f = *state;
	const struct et_store_config c = {.ddr_bytes = 1 << 20};
	et_store *s = fx_open(f, &c);
	struct et_table_params p100 = params(100, 4, ET_F32, ET_OPT_SGD);
	struct et_table_params p5 = params(5, 4, ET_F16, ET_OPT_SGD);
	const uint64_t good[3] = {0, 99, 50}, bad[3] = {5, 100, 3};
	const uint64_t small[2] = {4, 5}, huge[1] = {UINT64_MAX};
	const struct table *t0, *t1;

	create(s, "t100", &p100);
	create(s, "t5", &p5);
	t0 = table_get(s, 0);
	t1 = table_get(s, 1);
	assert_int_equal(ids_check(t0, 0, good, 3, "ids"), 0);
	assert_int_equal(ids_check(t0, 0, bad, 3, "ids"), ET_EROWRANGE);
	assert_non_null(strstr(et_errdetail(), "ids[1] 100"));
	assert_non_null(strstr(et_errdetail(), "rows 100 of table 0"));
	/* each table's own rows */
	assert_int_equal(ids_check(t0, 0, small, 2, "ids"), 0);
	assert_int_equal(ids_check(t1, 1, small, 1, "ids"), 0);
	assert_int_equal(ids_check(t1, 1, small, 2, "batch"), ET_EROWRANGE);
	assert_non_null(strstr(et_errdetail(), "batch[1] 5"));
	assert_int_equal(ids_check(t0, 0, huge, 1, "ids"), ET_EROWRANGE);
	/* no ids: fine with none, -EINVAL with some */
	assert_int_equal(ids_check(t0, 0, NULL, 0, "ids"), 0);
	assert_int_equal(ids_check(t0, 0, NULL, 3, "ids"), -EINVAL);
	assert_non_null(strstr(et_errdetail(), "ids is NULL"));
	/* more ids than a call may have (not read) */
	if (SIZE_MAX > UINT32_MAX)
		assert_int_equal(
		    ids_check(t0, 0, good, (size_t)UINT32_MAX + 1, "ids"),
		    -E2BIG);
	/* and the store refuses the same through its API, changing nothing */
	{
		float out[4 * 3];

		assert_int_equal(et_gather(s, 0, bad, 3, out), ET_EROWRANGE);
	}
}

static void test_table_get(void **state)
{
	struct fx *f = *state;
	const struct et_store_config c = {.ddr_bytes = 1 << 20};
	et_store *s = fx_open(f, &c);
	struct et_table_params p = params(10, 4, ET_F32, ET_OPT_SGD);

	assert_null(table_get(s, 0)); /* no table yet */
	assert_int_equal(no_table(s, 0), ET_ENOTABLE);
	create(s, "x", &p);
	create(s, "y", &p);
	assert_ptr_equal(table_get(s, 0), &s->reg.tables[0]);
	assert_ptr_equal(table_get(s, 1), &s->reg.tables[1]);
	assert_string_equal(table_get(s, 1)->name, "y");
	assert_null(table_get(s, 2));
	assert_null(table_get(s, -1));
	assert_null(table_get(s, INT_MAX));
	assert_null(table_get(s, INT_MIN));
	assert_null(table_get(NULL, 0));
	assert_int_equal(no_table(s, 2), ET_ENOTABLE);
	assert_non_null(strstr(et_errdetail(), "table 2 unknown"));
	assert_non_null(strstr(et_errdetail(), "has 2"));
	assert_int_equal(no_table(s, -5), ET_ENOTABLE);
	assert_non_null(strstr(et_errdetail(), "table -5"));
	assert_int_equal(no_table(NULL, 0), -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_classes, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_slot_bytes, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_capacity, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_capacity_hbm, setup, teardown),
	    cmocka_unit_test(test_tier_fits),
	    cmocka_unit_test_setup_teardown(test_ids_check, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_table_get, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
