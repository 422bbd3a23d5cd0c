/*
 * test_set_order.c - a batch's misses placed in the order of their sets
 * (resolve.c, "Misses in set order") leave the store as placing them in
 * batch order does.
 *
 * Two stores of one configuration get the same calls, one placing every
 * batch in batch order (place_set_order_min past any batch), the other
 * every batch in set order (place_set_order_min 1, so even small
 * batches). After each call the two must agree bit for bit on what the
 * call returned, and on every counter that follows from which rows the
 * caches hold: resident and dirty rows, hits, misses, inserts, evictions,
 * conflicts, rows read, rows initialized, write-backs and rows logged. A
 * placement given another clock, or a set's misses taken out of their
 * batch order, picks other victims, and the counters part after a few
 * calls. The caches are small (a few thousand slots) and the batches
 * large (up to twice the slots), so that placements evict, find every
 * way pinned (rows bypass the cache), meet rows queued for write-back
 * (after a prefetch, dirty victims wait there for the next one) and
 * victims that are dirty; a row-indexed and a keyed table share one size
 * class. Operations: update (SGD), pooled update (mean), gather, pooled
 * gather (bags of 1 to 8), pooled multi-table update and gather,
 * write_rows, erase of keyed ids, flush, checkpoint, prefetches in
 * between, and a close and reopen of both stores. With threads 2 and 16 ways, the set order's parts are
 * placed on two threads at once (against one thread in batch order);
 * run under TSan in CI.
 *
 * The last two tests pair a store on one thread with one on two, both
 * in set order and with single-table calls of 256 inputs or more on the
 * threads (op_par_min): the kernels run in pieces, an update groups its
 * gradients beside its lookup and updates its hits beside the
 * placement's parts. They fail if no placement ran that side work.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "embtier.h"
#include "resolve.h"
#include "util.h"

#define DIM    16
#define POOL   12000 /* ids a table draws from */
#define MAXN   8192  /* ids a call */
#define ROUNDS 60

struct pair {
	const char *dir[2];
	et_store *s[2];
	int t[2][2]; /* [store][0: row-indexed, 1: keyed] */
	struct et_store_config c[2];
	int ord[2]; /* each store's order (see order) */
};

/* Runs the next store call in batch order (0) or set order (1). */
static void order(int k)
{
	place_set_order_min = k ? 1 : SIZE_MAX;
}

static void open_pair(struct pair *p, bool create)
{
	struct et_table_params a = {.rows = 1000000,
				    .dim = DIM,
				    .dtype = ET_F32,
				    .optim = ET_OPT_SGD,
				    .init = ET_INIT_UNIFORM,
				    .init_scale = 0.5f,
				    .seed = 7};
	struct et_table_params k = a;

	k.rows = 0;
	k.flags = ET_TABLE_KEYED;
	k.seed = 8;
	for (int i = 0; i < 2; i++) {
		order(p->ord[i]);
		assert_int_equal(et_store_open(p->dir[i], &p->c[i], &p->s[i]),
				 0);
		if (create) {
			assert_int_equal(
			    et_table_create(p->s[i], "a", &a, &p->t[i][0]), 0);
			assert_int_equal(
			    et_table_create(p->s[i], "k", &k, &p->t[i][1]), 0);
		} else {
			assert_int_equal(
			    et_table_open(p->s[i], "a", NULL, &p->t[i][0]), 0);
			assert_int_equal(
			    et_table_open(p->s[i], "k", NULL, &p->t[i][1]), 0);
		}
	}
}

static void close_pair(struct pair *p)
{
	for (int i = 0; i < 2; i++) {
		order(p->ord[i]);
		assert_int_equal(et_store_close(p->s[i]), 0);
	}
}

/* The counters that follow from what the caches hold agree. */
static void same_state(const struct pair *p, int round, const char *op)
{
	struct et_stats st[2];

	for (int i = 0; i < 2; i++)
		assert_int_equal(et_get_stats(p->s[i], -1, &st[i]), 0);
#define SAME(f)                                                                \
	do {                                                                   \
		if (st[0].f != st[1].f)                                        \
			fail_msg("round %d (%s): %s %llu in the first store, " \
				 "%llu in the second",                         \
				 round, op, #f, (unsigned long long)st[0].f,   \
				 (unsigned long long)st[1].f);                 \
	} while (0)
	SAME(ddr.resident_rows);
	SAME(ddr.dirty_rows);
	SAME(ddr.hits);
	SAME(ddr.misses);
	SAME(ddr.inserts);
	SAME(ddr.evictions);
	SAME(unique_misses);
	SAME(conflict_unique_misses);
	SAME(conflict_misses);
	SAME(nvme_rows_read);
	SAME(rows_lazy);
	SAME(writebacks);
	SAME(log_index_rows);
#undef SAME
}

/* Id x of the pool of table kind kd (0 row-indexed, 1 keyed: ids over
 * the whole u64 range, 0 and UINT64_MAX among them). */
static uint64_t id_of(int kd, uint64_t x)
{
	if (!kd)
		return x * 83; /* spread over the rows */
	return x == 0	? 0
	       : x == 1 ? UINT64_MAX
			: (x * 0x9E3779B97F4A7C15ULL) ^ 0x55;
}

/* n ids of table kind kd: a hot share and the pool, duplicates among
 * them. */
static void draw(struct tu_rng *r, int kd, uint64_t *ids, size_t n)
{
	for (size_t i = 0; i < n; i++)
		ids[i] =
		    id_of(kd, tu_rng_below(r, 8) == 0 ? tu_rng_below(r, 64)
						      : tu_rng_below(r, POOL));
}

static void same_floats(const float *a, const float *b, size_t n, int round,
			const char *op)
{
	if (memcmp(a, b, n * sizeof(float)))
		fail_msg("round %d (%s): the stores' results differ", round,
			 op);
}

/* Runs the calls on two stores: configurations c0 and c1, orders ord0 and
 * ord1 (see order). */
static void run_pair(struct et_store_config c0, struct et_store_config c1,
		     int ord0, int ord1, uint64_t seed)
{
	struct pair p = {.c = {c0, c1}, .ord = {ord0, ord1}};
	struct et_update_params up = {.lr = 0.05f};
	uint64_t *ids = tu_calloc(MAXN, sizeof(*ids));
	uint64_t *ids2 = tu_calloc(MAXN, sizeof(*ids2));
	uint64_t *ids3 = tu_calloc(MAXN, sizeof(*ids3));
	uint64_t off[2][MAXN + 1];
	float *g = tu_calloc((size_t)MAXN * DIM, sizeof(float));
	float *out[2];
	struct tu_rng r;

	for (int i = 0; i < 2; i++)
		out[i] = tu_calloc((size_t)MAXN * DIM, sizeof(float));
	p.dir[0] = tu_path("set_order_batch");
	p.dir[1] = tu_path("set_order_set");
	tu_rng_seed(&r, seed);
	open_pair(&p, true);
	for (int round = 0; round < ROUNDS; round++) {
		int op = (int)tu_rng_below(&r, 10),
		    kd = (int)tu_rng_below(&r, 2);
		size_t n = 256 + (size_t)tu_rng_below(&r, MAXN - 256);
		const char *name = "";
		uint64_t erased[2] = {0, 0};

		draw(&r, kd, ids, n);
		draw(&r, 1 - kd, ids2, n / 4 * 4); /* a multi call's other */
		for (size_t i = 0; i < n * DIM; i++)
			g[i] = (float)tu_rng_double(&r, -1, 1);
		if (op == 8 && round % 20 == 19) {
			name = "reopen";
			close_pair(&p);
			open_pair(&p, false);
			same_state(&p, round, name);
			continue;
		}
		if (tu_rng_below(&r, 3) == 0) {
			/* a prefetch of another batch: from now on dirty
			 * victims wait in the write-back queue for the next
			 * prefetch, and misses meet them there */
			struct et_batch_ids pb;
			size_t pn = 256 + (size_t)tu_rng_below(&r, MAXN - 256);

			draw(&r, kd, ids3, pn);
			for (int i = 0; i < 2; i++) {
				order(p.ord[i]);
				pb = (struct et_batch_ids){
				    .table = p.t[i][kd], .ids = ids3, .n = pn};
				assert_int_equal(et_prefetch(p.s[i], &pb, 1),
						 0);
			}
		}
		for (int i = 0; i < 2; i++) {
			int t = p.t[i][kd], ret = 0;

			order(p.ord[i]);
			memset(out[i], 0, (size_t)n * DIM * sizeof(float));
			switch (op) {
			case 0:
			case 1:
				name = "update";
				ret = et_update(p.s[i], t, ids, n, g, &up);
				break;
			case 2: /* bags of 4, their mean */
				name = "update_pooled";
				for (size_t j = 0; j <= n / 4; j++)
					off[0][j] = j * 4;
				ret = et_update_pooled(p.s[i], t, ids, off[0],
						       n / 4, ET_POOL_MEAN, g,
						       &up);
				break;
			case 3:
			case 4:
				name = "gather";
				ret = et_gather(p.s[i], t, ids, n, out[i]);
				break;
			case 5: {
				/* both tables in one call, bags of 4 */
				struct et_table_batch b[2];
				size_t nb = n / 4;

				name = "multi";
				for (int k = 0; k < 2; k++)
					for (size_t j = 0; j <= nb; j++)
						off[k][j] = j * 4;
				b[0] =
				    (struct et_table_batch){.table = p.t[i][kd],
							    .ids = ids,
							    .offsets = off[0],
							    .nbags = nb,
							    .out = out[i],
							    .grads = g};
				b[1] = (struct et_table_batch){
				    .table = p.t[i][1 - kd],
				    .ids = ids2,
				    .offsets = off[1],
				    .nbags = nb,
				    .out = out[i] + nb * DIM,
				    .grads = g + nb * DIM};
				ret = round % 2
					  ? et_update_pooled_multi(
						p.s[i], b, 2, ET_POOL_SUM, &up)
					  : et_gather_pooled_multi(p.s[i], b, 2,
								   ET_POOL_SUM);
				break;
			}
			case 6:
				name = "write_rows";
				ret = et_write_rows(p.s[i], t, ids, n, g);
				break;
			case 7:
				name = kd ? "erase" : "flush";
				ret = kd ? et_erase(p.s[i], t, ids, n / 8,
						    &erased[i])
					 : et_flush(p.s[i]);
				break;
			case 8:
				name = "checkpoint";
				ret = et_checkpoint(p.s[i], NULL, 0);
				break;
			default: { /* bags of 1 to 8 ids, their sum */
				size_t nb = 0;

				name = "gather_pooled";
				off[0][0] = 0;
				while (off[0][nb] < n) {
					uint64_t next = off[0][nb] + 1 +
							(nb * 7 + round) % 8;

					off[0][++nb] = next < n ? next : n;
				}
				ret = et_gather_pooled(p.s[i], t, ids, off[0],
						       nb, ET_POOL_SUM, out[i]);
				break;
			}
			}
			if (ret)
				fail_msg("round %d (%s): %s", round, name,
					 et_strerror(ret));
		}
		same_floats(out[0], out[1], (size_t)n * DIM, round, name);
		assert_int_equal(erased[0], erased[1]);
		same_state(&p, round, name);
	}
	/* every id of the pools read back alike */
	for (int kd = 0; kd < 2; kd++)
		for (size_t at = 0; at < POOL; at += MAXN) {
			size_t n = POOL - at < MAXN ? POOL - at : MAXN;

			for (size_t i = 0; i < n; i++)
				ids[i] = id_of(kd, at + i);
			for (int i = 0; i < 2; i++) {
				order(p.ord[i]);
				assert_int_equal(et_gather(p.s[i], p.t[i][kd],
							   ids, n, out[i]),
						 0);
			}
			same_floats(out[0], out[1], n * DIM, ROUNDS, "read");
			same_state(&p, ROUNDS, "read");
		}
	close_pair(&p);
	place_set_order_min = 4096;
	op_par_min = 4096;
	for (int i = 0; i < 2; i++) {
		tu_rmtree(p.dir[i]);
		free(out[i]);
	}
	free(ids);
	free(ids2);
	free(ids3);
	free(g);
}

static struct et_store_config base_config(et_policy pol, uint32_t ways)
{
	struct et_store_config c;

	memset(&c, 0, sizeof(c));
	c.ddr_bytes = 384 << 10; /* about 4000 slots of 64-byte rows */
	c.ddr_policy = pol;
	c.ways = ways;
	return c;
}

static void test_lru_w16(void **state)
{
	struct et_store_config c = base_config(ET_POLICY_LRU, 16);

	(void)state;
	run_pair(c, c, 0, 1, 0x5e7001);
}

static void test_lru_w4(void **state)
{
	struct et_store_config c = base_config(ET_POLICY_LRU, 4);

	(void)state;
	run_pair(c, c, 0, 1, 0x5e7002);
}

static void test_lfu_w8(void **state)
{
	struct et_store_config c = base_config(ET_POLICY_LFU, 8);

	(void)state;
	run_pair(c, c, 0, 1, 0x5e7003);
}

static void test_lru_w16_threads(void **state)
{
	struct et_store_config c = base_config(ET_POLICY_LRU, 16);

	(void)state;
	c.threads = 2;
	run_pair(c, c, 0, 1, 0x5e7004);
}

static void test_lfu_w16_threads(void **state)
{
	struct et_store_config c = base_config(ET_POLICY_LFU, 16);

	(void)state;
	c.threads = 2;
	run_pair(c, c, 0, 1, 0x5e7005);
}

/* One thread against two, both in set order, single-table calls of 256
 * inputs or more on the threads: the kernels in pieces, an update's
 * grouping beside its lookup and its hits beside the placement's parts
 * (which must have run). */
static void threads_pair(et_policy pol, uint64_t seed)
{
	struct et_store_config c1 = base_config(pol, 16), c2 = c1;
	size_t side0 = place_side_runs;

	c2.threads = 2;
	op_par_min = 256;
	run_pair(c1, c2, 1, 1, seed);
	if (place_side_runs == side0)
		fail_msg("no placement ran an update's side work");
}

static void test_lru_one_two_threads(void **state)
{
	(void)state;
	threads_pair(ET_POLICY_LRU, 0x5e7006);
}

static void test_lfu_one_two_threads(void **state)
{
	(void)state;
	threads_pair(ET_POLICY_LFU, 0x5e7007);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_lru_w16),
	    cmocka_unit_test(test_lru_w4),
	    cmocka_unit_test(test_lfu_w8),
	    cmocka_unit_test(test_lru_w16_threads),
	    cmocka_unit_test(test_lfu_w16_threads),
	    cmocka_unit_test(test_lru_one_two_threads),
	    cmocka_unit_test(test_lfu_one_two_threads),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
