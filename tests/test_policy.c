/*
 * test_policy.c - the replacement policies (src/policy_lru.c,
 * src/policy_lfu.c) driven through their ops tables with hand-built access
 * sequences whose victims are known in advance.
 *
 * LRU: the victim is the eligible way touched longest ago, measured modulo
 * 2^32 (so a clock that wrapped still orders correctly, and ages above 2^31
 * are not mistaken for negative), the lowest way on a tie, never a way
 * outside the eligible mask (up to 64 ways).
 *
 * LFU: what policy_lfu.c guarantees, worked out from its code: an insert
 * starts at LFU_INIT (5); a hit at or below LFU_INIT always increments, above
 * it with a probability falling as 1 / ((c - 5) * 10 + 1), drawn from a hash
 * (so identical sequences give identical states); a counter loses one per 4
 * units of 256 accesses since the slot's last access; the victim has the
 * lowest decayed counter, then the oldest last access (in 256-access units),
 * then the lowest way. Hence: a row hit 1000 times and then left alone for
 * many decay periods goes before a row hit a few times recently; a fresh
 * insert goes after an older row whose counter decayed below LFU_INIT, and
 * after an untouched row inserted in an earlier unit, but before a row hit
 * recently (a fresh row has no protection against that).
 *
 * The LFU state word's layout (time << 8 | counter) is documented in
 * policy_lfu.c; a few tests read the counter byte to check growth rates.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "embtier.h"
#include "policy.h"
#include "util.h"

#define LFU_INIT 5
#define UNIT	 256u	     /* accesses per LFU time unit */
#define DECAY	 (4u * UNIT) /* accesses per LFU decay step */

static const struct policy_ops *lru = &policy_lru;
static const struct policy_ops *lfu = &policy_lfu;

static uint64_t all_ways(unsigned ways)
{
	return ways == 64 ? UINT64_MAX : (1ULL << ways) - 1;
}

static unsigned lfu_count(uint32_t st)
{
	return st & 0xffu;
}

/* ------------------------------------------------------------------ LRU */

/* Ways touched in a known order: the victim is the least recently touched,
 * and touching it again moves the victim to the next one. */
static void test_lru_order(void **state)
{
	uint32_t st[8];
	uint32_t now = 100;
	/* Touch order: way 5 first (oldest), then 2, 7, 0, 1, 3, 6, 4. */
	static const unsigned order[8] = {5, 2, 7, 0, 1, 3, 6, 4};
	unsigned i;

	for (i = 0; i < 8; i++)
		lru->on_insert(&st[order[i]], now++, 0);
	for (i = 0; i < 8; i++) {
		unsigned v = lru->victim(st, 8, all_ways(8), now);

		assert_int_equal(v, order[i]);
		/* The victim is replaced by a new row: it becomes newest. */
		lru->on_insert(&st[v], now++, 0);
	}
	/* A hit refreshes: touch way 5 (the oldest now), victim moves on. */
	assert_int_equal(lru->victim(st, 8, all_ways(8), now), 5);
	lru->on_hit(&st[5], now++);
	assert_int_equal(lru->victim(st, 8, all_ways(8), now), 2);
	lru->on_hit(&st[2], now++);
	lru->on_hit(&st[7], now++);
	assert_int_equal(lru->victim(st, 8, all_ways(8), now), 0);
}

/* Ineligible ways (pinned, or empty) are never chosen, even when oldest. */
static void test_lru_eligible(void **state)
{
	uint32_t st[64];
	uint32_t now = 1000;
	unsigned w;

	/* way w touched at 1000 + w: way 0 oldest, way 63 newest */
	for (w = 0; w < 64; w++)
		lru->on_insert(&st[w], now++, 0);
	assert_int_equal(lru->victim(st, 64, all_ways(64), now), 0);
	assert_int_equal(lru->victim(st, 64, all_ways(64) & ~1ULL, now), 1);
	assert_int_equal(lru->victim(st, 64, 1ULL << 63, now), 63);
	assert_int_equal(lru->victim(st, 64, 1ULL << 40 | 1ULL << 63, now), 40);
	assert_int_equal(lru->victim(st, 64, 0xf0f0ULL << 16, now), 20);
	/* The same with 4 ways. */
	assert_int_equal(lru->victim(st, 4, 0x8, now), 3);
	assert_int_equal(lru->victim(st, 4, 0xc, now), 2);
	/* With 1 way the only way is the victim. */
	assert_int_equal(lru->victim(st, 1, 0x1, now), 0);
}

/* Equal ages: the lowest eligible way wins, so choices are deterministic. */
static void test_lru_ties(void **state)
{
	uint32_t st[16];
	unsigned w;

	for (w = 0; w < 16; w++)
		lru->on_insert(&st[w], 77, 0);
	assert_int_equal(lru->victim(st, 16, all_ways(16), 80), 0);
	assert_int_equal(lru->victim(st, 16, 0xfff0, 80), 4);
	assert_int_equal(lru->victim(st, 16, 0x8000, 80), 15);
	/* Two oldest tie: the lower of them. */
	lru->on_hit(&st[0], 78);
	lru->on_hit(&st[1], 78);
	lru->on_hit(&st[9], 76);
	lru->on_hit(&st[12], 76);
	assert_int_equal(lru->victim(st, 16, all_ways(16), 80), 9);
	assert_int_equal(lru->victim(st, 16, all_ways(16) & ~(1u << 9), 80),
			 12);
}

/* The clock wraps: ages are now - state modulo 2^32. */
static void test_lru_wrap(void **state)
{
	uint32_t st[4];
	uint32_t now;

	/* Way 0 touched just before the wrap, ways 1..3 after it: way 0 is
	 * the oldest although its state is numerically the largest. */
	lru->on_insert(&st[0], 0xfffffff0u, 0);
	lru->on_insert(&st[1], 0xfffffffeu, 0);
	lru->on_insert(&st[2], 0x00000005u, 0);
	lru->on_insert(&st[3], 0x0000000fu, 0);
	now = 0x10;
	assert_int_equal(lru->victim(st, 4, 0xf, now), 0);
	assert_int_equal(lru->victim(st, 4, 0xe, now), 1);
	assert_int_equal(lru->victim(st, 4, 0xc, now), 2);
	/* Walk the clock across the wrap with one access per tick: the
	 * victim sequence equals the touch order. */
	now = 0xfffffffcu;
	for (unsigned w = 0; w < 4; w++)
		lru->on_insert(&st[(w + 2) % 4], now++, 0);
	assert_int_equal(now, 0);
	for (unsigned w = 0; w < 4; w++) {
		unsigned v = lru->victim(st, 4, 0xf, now);

		assert_int_equal(v, (w + 2) % 4);
		lru->on_hit(&st[v], now++);
	}
	/* Ages above 2^31 are still ages, not negative numbers. */
	now = 0x12345678u;
	lru->on_insert(&st[0], now - 0x7fffffffu, 0);
	lru->on_insert(&st[1], now - 0x80000001u, 0);
	lru->on_insert(&st[2], now - 0xfffffff0u, 0);
	lru->on_insert(&st[3], now - 1, 0);
	assert_int_equal(lru->victim(st, 4, 0xf, now), 2);
	assert_int_equal(lru->victim(st, 4, 0xb, now), 1);
	assert_int_equal(lru->victim(st, 4, 0x9, now), 0);
}

/* The state is the access time itself, hit or insert alike. */
static void test_lru_state(void **state)
{
	uint32_t st = 0;

	lru->on_insert(&st, 0xdeadbeefu, 0);
	assert_int_equal(st, 0xdeadbeefu);
	lru->on_hit(&st, 3);
	assert_int_equal(st, 3);
	assert_string_equal(lru->name, "lru");
}

/* ------------------------------------------------------------------ LFU */

/* Insert starts at LFU_INIT with the insert's time unit; a first hit
 * always counts. */
static void test_lfu_insert_and_first_hit(void **state)
{
	uint32_t st;
	uint32_t now;

	for (now = 0; now < 5u * UNIT; now += 37) {
		lfu->on_insert(&st, now, 0);
		assert_int_equal(lfu_count(st), LFU_INIT);
		assert_int_equal(st >> 8, now >> 8);
		lfu->on_hit(&st, now + 1);
		assert_int_equal(lfu_count(st), LFU_INIT + 1);
		assert_int_equal(st >> 8, (now + 1) >> 8);
	}
	assert_string_equal(lfu->name, "lfu");
}

/* The least-hit way goes first; equal counts go to the least recently
 * accessed (by time unit), then to the lowest way. */
static void test_lfu_least_hit(void **state)
{
	uint32_t st[4];
	unsigned w;

	for (w = 0; w < 4; w++)
		lfu->on_insert(&st[w], 1000, 0);
	/* One hit each for ways 0, 1, 3: counter 6 for certain. */
	lfu->on_hit(&st[0], 1001);
	lfu->on_hit(&st[1], 1002);
	lfu->on_hit(&st[3], 1003);
	assert_int_equal(lfu->victim(st, 4, 0xf, 1004), 2);
	/* Without way 2, three ways tie on count and time unit: lowest. */
	assert_int_equal(lfu->victim(st, 4, 0xb, 1004), 0);
	assert_int_equal(lfu->victim(st, 4, 0xa, 1004), 1);
	/* Way 0 hit again two units later: now way 1 and 3 are older; way 0
	 * has either 6 or 7 hits, both > way 1's. */
	lfu->on_hit(&st[0], 1000 + 2 * UNIT);
	assert_int_equal(lfu->victim(st, 4, 0xb, 1000 + 2 * UNIT), 1);
	/* Ways 1 and 3 equal in count; refresh way 1 a unit later with a
	 * hit: it then has the higher count or the newer time. */
	lfu->on_hit(&st[1], 1000 + 3 * UNIT);
	assert_int_equal(lfu->victim(st, 4, 0xb, 1000 + 3 * UNIT), 3);
}

/* Equal count, different time unit: the older goes first even when it has
 * the higher way index. */
static void test_lfu_tie_by_age(void **state)
{
	uint32_t st[3];

	lfu->on_insert(&st[2], 0, 0);
	lfu->on_insert(&st[0], 2 * UNIT, 0);
	lfu->on_insert(&st[1], 3 * UNIT, 0);
	assert_int_equal(lfu->victim(st, 3, 0x7, 3 * UNIT + 5), 2);
	assert_int_equal(lfu->victim(st, 3, 0x3, 3 * UNIT + 5), 0);
	/* Within one unit, time does not separate: lowest way. */
	lfu->on_insert(&st[2], 3 * UNIT + 200, 0);
	assert_int_equal(lfu->victim(st, 3, 0x6, 3 * UNIT + 201), 1);
}

/* The eligible mask is respected, up to 64 ways. */
static void test_lfu_eligible(void **state)
{
	uint32_t st[64];
	unsigned w;

	/* Every way but 10 and 63 hit once (count 6); 10 and 63 stay at 5. */
	for (w = 0; w < 64; w++) {
		lfu->on_insert(&st[w], 50, 0);
		if (w != 10 && w != 63)
			lfu->on_hit(&st[w], 51 + w);
	}
	assert_int_equal(lfu->victim(st, 64, all_ways(64), 200), 10);
	assert_int_equal(lfu->victim(st, 64, all_ways(64) & ~(1ULL << 10), 200),
			 63);
	assert_int_equal(lfu->victim(st, 64, 1ULL << 63 | 1ULL << 62, 200), 63);
	assert_int_equal(lfu->victim(st, 64, 1ULL << 62 | 1ULL << 61, 200), 61);
	assert_int_equal(lfu->victim(st, 64, 1ULL << 33, 200), 33);
}

/* A row hit 1000 times is kept over one hit a few times -- until it has
 * been idle for many decay periods; then the recently hit row is kept. */
static void test_lfu_aging(void **state)
{
	uint32_t st[2];
	uint32_t now = 0;
	unsigned i;

	lfu->on_insert(&st[0], now++, 0);
	for (i = 0; i < 1000; i++)
		lfu->on_hit(&st[0], now++);
	/* Continuous hits never decay (each hit is at most a unit after the
	 * last); logarithmic growth: about 5 + sqrt(2 * 1000 / 10). */
	assert_in_range(lfu_count(st[0]), 12, 40);

	lfu->on_insert(&st[1], now++, 0);
	for (i = 0; i < 3; i++)
		lfu->on_hit(&st[1], now++);
	assert_in_range(lfu_count(st[1]), LFU_INIT + 1, LFU_INIT + 3);
	assert_int_equal(lfu->victim(st, 2, 0x3, now), 1);

	/* 255 decay periods later any counter is 0. The few-hits row was hit
	 * again just now, the hot row not: the hot row is the victim. */
	now += 255 * DECAY;
	for (i = 0; i < 3; i++)
		lfu->on_hit(&st[1], now++);
	assert_int_equal(lfu->victim(st, 2, 0x3, now), 0);

	/* Aging is applied at a hit, too: one hit on the stale row leaves it
	 * at 0 + 1, below a fresh insert's LFU_INIT, although it is now the
	 * more recently accessed of the two. */
	lfu->on_insert(&st[1], now++, 0);
	lfu->on_hit(&st[0], now++);
	assert_int_equal(lfu_count(st[0]), 1);
	assert_int_equal(lfu->victim(st, 2, 0x3, now), 0);
}

/* Decay is one per LFU_DECAY_PERIOD (4) units since the last access. */
static void test_lfu_decay_rate(void **state)
{
	uint32_t st[2];
	uint32_t t0 = 10 * UNIT;
	unsigned k;

	/* Way 0: counter 6, hit at unit 10. Way 1: a fresh insert (5) at
	 * unit 10 + 4k. Way 0 outlives way 1 while its decayed count is
	 * above 5: for elapsed < 4 units only (6 - 0 > 5); at 4..7 units it
	 * is 5 and ties, and as the older it goes. */
	for (k = 0; k < 4; k++) {
		uint32_t now = t0 + k * DECAY;

		lfu->on_insert(&st[0], t0, 0);
		lfu->on_hit(&st[0], t0 + 1);
		assert_int_equal(lfu_count(st[0]), 6);
		lfu->on_insert(&st[1], now, 0);
		assert_int_equal(lfu->victim(st, 2, 0x3, now + 1),
				 k == 0 ? 1 : 0);
	}
	/* Exactly at the boundary: 3 units idle keeps 6, 4 units gives 5. */
	lfu->on_insert(&st[0], t0, 0);
	lfu->on_hit(&st[0], t0 + 1);
	lfu->on_insert(&st[1], t0 + 3 * UNIT, 0);
	assert_int_equal(lfu->victim(st, 2, 0x3, t0 + 3 * UNIT + 255), 1);
	lfu->on_insert(&st[1], t0 + 4 * UNIT, 0);
	assert_int_equal(lfu->victim(st, 2, 0x3, t0 + 4 * UNIT), 0);
}

/* A new insert is kept over an old row whose count has decayed below
 * LFU_INIT, and over an untouched row of an earlier unit. */
static void test_lfu_new_insert(void **state)
{
	uint32_t st[2];

	/* Way 0 inserted at 0 and hit once (6); way 1 inserted 32 units
	 * later: way 0's count is 6 - 8 -> 0. */
	lfu->on_insert(&st[0], 0, 0);
	lfu->on_hit(&st[0], 10);
	lfu->on_insert(&st[1], 32 * UNIT, 0);
	assert_int_equal(lfu->victim(st, 2, 0x3, 32 * UNIT + 1), 0);
	/* Way 1 (the newcomer) sits in the lower way now: same answer. */
	lfu->on_insert(&st[1], 0, 0);
	lfu->on_hit(&st[1], 10);
	lfu->on_insert(&st[0], 32 * UNIT, 0);
	assert_int_equal(lfu->victim(st, 2, 0x3, 32 * UNIT + 1), 1);
	/* Both untouched, newcomer a unit younger: the older goes. */
	lfu->on_insert(&st[0], 5 * UNIT, 0);
	lfu->on_insert(&st[1], 4 * UNIT, 0);
	assert_int_equal(lfu->victim(st, 2, 0x3, 5 * UNIT + 3), 1);
	/* But a row hit recently beats a newcomer: LFU_INIT < 6. */
	lfu->on_insert(&st[0], 4 * UNIT, 0);
	lfu->on_hit(&st[0], 5 * UNIT);
	lfu->on_insert(&st[1], 5 * UNIT + 1, 0);
	assert_int_equal(lfu->victim(st, 2, 0x3, 5 * UNIT + 2), 1);
}

/* The 24-bit time unit wraps with the clock: elapsed units are taken
 * modulo 2^24. */
static void test_lfu_wrap(void **state)
{
	uint32_t st[2];
	uint32_t now;

	/* Way 1: inserted 258 units before "now" (before the wrap), never
	 * hit: decays to 0. Way 0: inserted just before the wrap and hit
	 * once: 6, 3 units idle, no decay. */
	lfu->on_insert(&st[1], 0xffff0000u, 0);
	lfu->on_insert(&st[0], 0xffffff00u, 0);
	lfu->on_hit(&st[0], 0xffffff01u);
	now = 0x00000200u;
	assert_int_equal(lfu->victim(st, 2, 0x3, now), 1);
	/* A hit after the wrap sees way 0's count intact: > 6 or = 6. */
	lfu->on_hit(&st[0], now);
	assert_in_range(lfu_count(st[0]), 6, 7);
	assert_int_equal(st[0] >> 8, now >> 8);
	/* Way 0 hit once just before the wrap (6), way 1 a fresh insert just
	 * after it (5): way 0's two units of idleness do not decay it. */
	lfu->on_insert(&st[0], 0xffffff00u, 0);
	lfu->on_hit(&st[0], 0xffffff10u);
	lfu->on_insert(&st[1], 0x00000100u, 0);
	assert_int_equal(lfu->victim(st, 2, 0x3, 0x00000101u), 1);
	/* Decay counts across the wrap too: way 0 hit once (6) 12 units
	 * before now, on the far side of the wrap, has decayed to 3, below a
	 * fresh insert. */
	lfu->on_insert(&st[0], 0xfffffc00u, 0);
	lfu->on_hit(&st[0], 0xfffffc01u);
	lfu->on_insert(&st[1], 0x00000800u, 0);
	assert_int_equal(lfu->victim(st, 2, 0x3, 0x00000801u), 0);
	lfu->on_hit(&st[0], 0x00000802u); /* decayed 3, then + 1 */
	assert_int_equal(lfu_count(st[0]), 4);
	/* Way 1 inserted one unit before the wrap, way 0 one after, both
	 * untouched: way 1 is older. */
	lfu->on_insert(&st[1], 0xffffff80u, 0);
	lfu->on_insert(&st[0], 0x00000080u, 0);
	assert_int_equal(lfu->victim(st, 2, 0x3, 0x00000090u), 1);
}

/* Counts grow logarithmically and saturate at 255; the draws come from a
 * hash, so an identical sequence gives identical states. */
static void test_lfu_growth(void **state)
{
	uint32_t a, b, c255;
	uint32_t now = 12345;
	unsigned i, prev;

	lfu->on_insert(&a, now, 0);
	lfu->on_insert(&b, now, 0);
	prev = lfu_count(a);
	for (i = 1; i <= 100000; i++) {
		lfu->on_hit(&a, now + i);
		lfu->on_hit(&b, now + i);
		assert_int_equal(a, b);
		/* Never decreases while hit continuously, by at most 1. */
		assert_in_range(lfu_count(a), prev, prev + 1);
		prev = lfu_count(a);
		if (i == 100)
			assert_in_range(prev, 7, 14);
		if (i == 10000)
			assert_in_range(prev, 40, 80);
	}
	/* sqrt(2 * 100000 / 10) = 141 above LFU_INIT, give or take. */
	assert_in_range(lfu_count(a), 110, 180);
	/* A saturated counter stays at 255. */
	c255 = (now >> 8) << 8 | 255;
	for (i = 0; i < 1000; i++)
		lfu->on_hit(&c255, now + i);
	assert_int_equal(lfu_count(c255), 255);
	assert_int_equal(c255 >> 8, (now + 999) >> 8);
}

static void test_policy_get(void **state)
{
	assert_ptr_equal(policy_get(ET_POLICY_LRU), &policy_lru);
	assert_ptr_equal(policy_get(ET_POLICY_LFU), &policy_lfu);
	assert_null(policy_get((et_policy)0));
	assert_ptr_equal(policy_get(ET_POLICY_TINYLFU), &policy_tinylfu);
	assert_null(policy_get((et_policy)4));
	assert_null(policy_get((et_policy)-1));
	assert_null(policy_get((et_policy)0x7fffffff));
	assert_non_null(policy_lru.on_hit);
	assert_non_null(policy_lru.on_insert);
	assert_non_null(policy_lru.victim);
	assert_non_null(policy_lfu.on_hit);
	assert_non_null(policy_lfu.on_insert);
	assert_non_null(policy_lfu.victim);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_lru_order),
	    cmocka_unit_test(test_lru_eligible),
	    cmocka_unit_test(test_lru_ties),
	    cmocka_unit_test(test_lru_wrap),
	    cmocka_unit_test(test_lru_state),
	    cmocka_unit_test(test_lfu_insert_and_first_hit),
	    cmocka_unit_test(test_lfu_least_hit),
	    cmocka_unit_test(test_lfu_tie_by_age),
	    cmocka_unit_test(test_lfu_eligible),
	    cmocka_unit_test(test_lfu_aging),
	    cmocka_unit_test(test_lfu_decay_rate),
	    cmocka_unit_test(test_lfu_new_insert),
	    cmocka_unit_test(test_lfu_wrap),
	    cmocka_unit_test(test_lfu_growth),
	    cmocka_unit_test(test_policy_get),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
