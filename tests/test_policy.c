/*
 * test_policy.c - the replacement policies (src/cache/policy_lru.c,
 * src/cache/policy_lfu.c) driven through their ops tables with hand-built access
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
 *
 * TinyLFU (policy_tinylfu.c): an insert takes the sketch's estimate as its
 * count (at most 15), a hit adds one (saturating at 15), counts halve once
 * every 32 x 1024 clock ticks; the victim has the lowest count, then the
 * oldest access, then the lowest way. Its sketch (sketch.c): estimates
 * never fall below the true count of a key until it saturates at 15 or an
 * epoch halves it. Through a one-set cache (cache.c): a missed key is
 * refused when the set is full and the sketch has seen it no more often
 * than the victim, taken once it has been seen more often, and never
 * refused when the caller does not ask for admission (prefetch).
 *
 * Drift (policy_drift in policy_lru.c): a collapse of the hit ratio from
 * one period to the next moves the policy's clock on, by four halvings for
 * TinyLFU, so every count, in slots and in the sketch, reads 0.
 *
 * The lookahead window (lookahead.c through cache_pick, any policy): the
 * victim is a way the window does not use if there is one (the policy
 * choosing among those), else the way used last in it; a missed key that
 * the window uses after every candidate, or not at all, is refused; the
 * first operation on a table (la_consume) makes batch 0 no longer count
 * for that table's rows.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "cache.h"
#include "embtier.h"
#include "lookahead.h"
#include "mem_host.h"
#include "policy.h"
#include "sketch.h"
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
/* The victim against its definition, the oldest eligible way (age now -
 * state modulo 2^32, the lowest way on a tie), for every way count and
 * random states, clocks and masks: ages across the wrap, equal ages,
 * age 0, one eligible way. The store's victim takes four ways at a time
 * where it can; the definition is one way at a time. */
static void test_lru_victim_random(void **state)
{
	struct tu_rng r;
	uint32_t st[64];

	(void)state;
	tu_rng_seed(&r, 0x1e0);
	for (int it = 0; it < 200000; it++) {
		unsigned ways = 1 + (unsigned)tu_rng_below(&r, 64), want = 0;
		uint32_t now = (uint32_t)tu_rng_next(&r);
		uint64_t elig = tu_rng_next(&r), best = 0;

		if (ways < 64)
			elig &= (1ULL << ways) - 1;
		if (it % 7 == 0) /* one eligible way */
			elig = 1ULL << tu_rng_below(&r, ways);
		if (!elig)
			elig = 1;
		for (unsigned w = 0; w < ways; w++)
			switch (tu_rng_below(&r, 4)) {
			case 0: /* few distinct ages: ties */
				st[w] = now - (uint32_t)tu_rng_below(&r, 3);
				break;
			case 1: /* across the wrap */
				st[w] = (uint32_t)tu_rng_below(&r, 8) -
					(uint32_t)tu_rng_below(&r, 8);
				break;
			default:
				st[w] = (uint32_t)tu_rng_next(&r);
			}
		for (unsigned w = 0; w < ways; w++) {
			uint64_t age = now - st[w];

			if ((elig >> w & 1) && (age + 1 > best)) {
				best = age + 1;
				want = w;
			}
		}
		if (policy_lru.victim(st, ways, elig, now) != want)
			fail_msg("ways %u, mask %#llx, now %u: way %u, not %u",
				 ways, (unsigned long long)elig, now,
				 policy_lru.victim(st, ways, elig, now), want);
	}
}

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

/* -------------------------------------------------------------- TinyLFU */

static const struct policy_ops *tlfu = &policy_tinylfu;
static const struct policy_ops *wtlfu = &policy_wtinylfu;

#define TLFU_EPOCH (32u * 1024u) /* clock ticks between halvings */

static void test_tlfu_counts(void **state)
{
	uint32_t st;

	tlfu->on_insert(&st, 100, 3);
	assert_int_equal(tlfu->freq(st, 100), 3);
	tlfu->on_hit(&st, 101);
	tlfu->on_hit(&st, 102);
	assert_int_equal(tlfu->freq(st, 103), 5);
	for (uint32_t i = 0; i < 40; i++)
		tlfu->on_hit(&st, 104 + i);
	assert_int_equal(tlfu->freq(st, 200), 15);
	tlfu->on_insert(&st, 100, 99); /* an estimate above 15 */
	assert_int_equal(tlfu->freq(st, 100), 15);
	tlfu->on_insert(&st, 100, 0);
	assert_int_equal(tlfu->freq(st, 100), 0);
	tlfu->on_hit(&st, 100);
	assert_int_equal(tlfu->freq(st, 100), 1);
}

/* Counts halve once an epoch, lazily, and a hit after the halving starts
 * from the halved count. */
static void test_tlfu_halving(void **state)
{
	uint32_t st, e = TLFU_EPOCH;

	tlfu->on_insert(&st, 5, 12);
	assert_int_equal(tlfu->freq(st, e - 1), 12);
	assert_int_equal(tlfu->freq(st, e), 6);
	assert_int_equal(tlfu->freq(st, 2 * e + 7), 3);
	assert_int_equal(tlfu->freq(st, 3 * e), 1);
	assert_int_equal(tlfu->freq(st, 4 * e), 0);
	tlfu->on_hit(&st, e + 1); /* 12 halved to 6, then one more */
	assert_int_equal(tlfu->freq(st, e + 2), 7);
	assert_int_equal(tlfu->freq(st, 2 * e), 3);
	/* the epoch field wraps after 16, the time after 32: an idle count
	 * stays 0 */
	tlfu->on_insert(&st, 5, 12);
	for (uint32_t k = 4; k < 32; k++)
		assert_int_equal(tlfu->freq(st, 5 + k * e), 0);
	assert_int_equal(wtlfu->freq(st, 5 + 16 * e), 0);
}

static void test_tlfu_victim(void **state)
{
	uint32_t st[8];

	/* counts 5 4 9 4 7 4 8 6, inserted in way order */
	static const uint32_t c[8] = {5, 4, 9, 4, 7, 4, 8, 6};

	for (unsigned w = 0; w < 8; w++)
		tlfu->on_insert(&st[w], 1000 + w, c[w]);
	/* lowest count 4: ways 1, 3, 5; the oldest of them is way 1 */
	assert_int_equal(tlfu->victim(st, 8, all_ways(8), 2000), 1);
	assert_int_equal(tlfu->victim(st, 8, all_ways(8) & ~2ULL, 2000), 3);
	/* a hit on way 3 makes it 5, and newest: way 5 goes next */
	tlfu->on_hit(&st[3], 1500);
	assert_int_equal(tlfu->victim(st, 8, all_ways(8) & ~2ULL, 2000), 5);
	/* only ineligible ways have the lowest count: the next count */
	assert_int_equal(tlfu->victim(st, 8, 0xd5, 2000), 0);
	assert_int_equal(tlfu->victim(st, 8, 0x44, 2000), 6);
	/* equal counts and equal times: the lowest way */
	for (unsigned w = 0; w < 8; w++)
		tlfu->on_insert(&st[w], 7, 2);
	assert_int_equal(tlfu->victim(st, 8, 0xf0, 9), 4);
}

static void test_sketch(void **state)
{
	struct sketch sk;
	uint64_t keys[200];

	assert_int_equal(sketch_init(&sk, 1000, 0), 0);
	assert_int_equal(sk.cols, 1024);
	assert_int_equal(sketch_bytes(&sk), 2048);
	for (unsigned i = 0; i < 200; i++)
		keys[i] = 0x10000000000ULL + i * 7919;
	/* key i seen i % 14 times: never under-estimated */
	for (unsigned i = 0; i < 200; i++)
		for (unsigned k = 0; k < i % 14; k++)
			assert_int_equal(sketch_add(&sk, keys[i]) >= k + 1, 1);
	for (unsigned i = 0; i < 200; i++)
		assert_true(sketch_get(&sk, keys[i]) >= i % 14);
	/* with 200 keys in 1024 columns, most are exact */
	{
		unsigned exact = 0;

		for (unsigned i = 0; i < 200; i++)
			exact += sketch_get(&sk, keys[i]) == i % 14;
		assert_true(exact > 180);
	}
	/* saturation */
	for (unsigned k = 0; k < 30; k++)
		sketch_add(&sk, 42);
	assert_int_equal(sketch_get(&sk, 42), 15);
	/* halving: one epoch halves, four clear */
	sketch_age(&sk, 1);
	assert_int_equal(sketch_get(&sk, 42), 7);
	sketch_age(&sk, 1); /* the same epoch: nothing */
	assert_int_equal(sketch_get(&sk, 42), 7);
	sketch_age(&sk, 3);
	assert_int_equal(sketch_get(&sk, 42), 1);
	/* raise: to at least f, never lowers */
	sketch_raise(&sk, 42, 9);
	assert_int_equal(sketch_get(&sk, 42), 9);
	sketch_raise(&sk, 42, 2);
	assert_int_equal(sketch_get(&sk, 42), 9);
	sketch_raise(&sk, 42, 40);
	assert_int_equal(sketch_get(&sk, 42), 15);
	sketch_age(&sk, 7);
	for (unsigned i = 0; i < 200; i++)
		assert_int_equal(sketch_get(&sk, keys[i]), 0);
	sketch_free(&sk);
}

/* A cache of one set of 4 ways (16-byte slots), filled with keys 1..4. */
static void one_set(struct cache *c, const struct policy_ops *pol,
		    uint64_t *now)
{
	const struct pinset none = {{0, 0, 0}};
	char row[16] = {0};

	assert_int_equal(cache_init(c, 4 * cache_slot_cost(16, pol), 4, 16, pol,
				    &mem_tier_host),
			 0);
	assert_int_equal(c->nsets, 1);
	for (uint64_t k = 1; k <= 4; k++) {
		uint64_t slot = cache_pick(c, 0, k, ++*now, &none, true);

		assert_int_equal(slot, k - 1); /* free ways first */
		cache_fill(c, slot, 0, k, false, row, 16, *now);
	}
}

static void test_tlfu_admission(void **state)
{
	const struct pinset none = {{0, 0, 0}};
	struct cache c;
	uint64_t now = 0, slot;
	uint64_t newk = 99; /* a row of table 0 */
	char row[16] = {0};

	one_set(&c, tlfu, &now);
	/* every resident has count 1; hits make way 0..2 count 2 */
	for (uint64_t s = 0; s < 3; s++)
		cache_touch(&c, s, ++now);
	/* a new key seen once ties with way 3's 1: refused */
	assert_int_equal(cache_pick(&c, 0, newk, ++now, &none, true),
			 CACHE_REJECT);
	/* not when the caller asks for no admission: way 3 is the victim */
	assert_int_equal(cache_pick(&c, 0, newk, ++now, &none, false), 3);
	/* seen a third time (the sketch counted each pick), it beats 1 */
	slot = cache_pick(&c, 0, newk, ++now, &none, true);
	assert_int_equal(slot, 3);
	cache_remove(&c, slot, 16);
	cache_fill(&c, slot, 0, newk, false, row, 16, now);
	assert_int_equal(c.pol->freq(c.pstate[3], cache_clock(&c, now)), 3);
	/* the evicted key 4 left its count (1) in the sketch */
	assert_int_equal(sketch_get(&c.sk, cache_hkey(0, 4)), 1);
	/* every way pinned: CACHE_NONE, not a refusal */
	{
		const struct pinset all = {{7, 0, 0}};

		for (uint64_t s = 0; s < 4; s++)
			cache_pin(&c, s, 7);
		assert_int_equal(cache_pick(&c, 0, 5, ++now, &all, true),
				 CACHE_NONE);
	}
	cache_free(&c);
}

static bool wt_in_main(uint32_t st);

/* on_hit of a policy that only counts its calls */
static void count_hit(uint32_t *st, uint32_t now)
{
	(void)now;
	++*st;
}

/* A row named n times by one operation counts n: in the sketch when it
 * is picked (cache_pick_n), in its slot when it is hit (cache_touch_n),
 * saturating at 15; LRU, which counts nothing, takes it as one hit. */
static void test_counted_accesses(void **state)
{
	const struct pinset none = {{0, 0, 0}};
	struct cache c;
	uint64_t now = 0, slot;
	uint64_t newk = 99; /* a row of table 0 */
	char row[16] = {0};
	struct sketch sk;

	/* the sketch: n sightings at once, as n single ones */
	assert_int_equal(sketch_init(&sk, 64, 0), 0);
	assert_int_equal(sketch_add_n(&sk, 7, 3), 3);
	assert_int_equal(sketch_add(&sk, 7), 4);
	assert_int_equal(sketch_add_n(&sk, 7, 100), 15);
	assert_int_equal(sketch_get(&sk, 8), 0);
	sketch_free(&sk);

	one_set(&c, tlfu, &now);
	for (uint64_t s = 0; s < 3; s++)
		cache_touch(&c, s, ++now);
	/* way 3 holds 1; a new key named twice in its operation has been
	 * seen twice and beats it (named once, it would tie and be refused,
	 * test_tlfu_admission) */
	slot = cache_pick_n(&c, 0, newk, ++now, &none, true, 2);
	assert_int_equal(slot, 3);
	cache_remove(&c, slot, 16);
	cache_fill(&c, slot, 0, newk, false, row, 16, now);
	assert_int_equal(c.pol->freq(c.pstate[3], cache_clock(&c, now)), 2);
	/* a hit naming it 5 times: 7; 20 more: 15 */
	cache_touch_n(&c, 3, ++now, 5);
	assert_int_equal(c.pol->freq(c.pstate[3], cache_clock(&c, now)), 7);
	cache_touch_n(&c, 3, ++now, 20);
	assert_int_equal(c.pol->freq(c.pstate[3], cache_clock(&c, now)), 15);
	cache_free(&c);

	/* W-TinyLFU keeps a way's part (window or main) */
	now = 0;
	one_set(&c, wtlfu, &now);
	c.pstate[0] |= 1u << 4;
	cache_touch_n(&c, 0, ++now, 4);
	assert_true(wt_in_main(c.pstate[0]));
	assert_int_equal(c.pol->freq(c.pstate[0], cache_clock(&c, now)), 5);
	cache_touch_n(&c, 1, ++now, 4);
	assert_false(wt_in_main(c.pstate[1]));
	cache_free(&c);

	/* a policy without on_hits (LRU, LFU) is told of one access */
	{
		struct policy_ops one = *policy_get(ET_POLICY_LRU);
		uint32_t before;

		one.on_hit = count_hit;
		now = 0;
		one_set(&c, &one, &now);
		before = c.pstate[2];
		cache_touch_n(&c, 2, ++now, 9);
		assert_int_equal(c.pstate[2], before + 1);
	}
	cache_free(&c);
}

/* W-TinyLFU: whether a slot's word says main (bit 4) or window. */
static bool wt_in_main(uint32_t st)
{
	return st >> 4 & 1;
}

/* A set filled by inserts (all in the window) keeps one window way per 16
 * and moves the oldest to main unchallenged; the window's oldest row then
 * meets main's lowest count: it goes if its count is not higher, else it
 * takes main's place. victim() answers as evict() without relabelling. */
static void test_wtlfu_window(void **state)
{
	static const uint32_t c[16] = {5, 4, 9, 4, 7, 6, 8, 6,
				       9, 9, 9, 9, 9, 9, 9, 2};
	uint32_t st[16], copy[16];

	for (unsigned w = 0; w < 16; w++)
		wtlfu->on_insert(&st[w], 1000 + w, c[w]);
	for (unsigned w = 0; w < 16; w++)
		assert_false(wt_in_main(st[w]));
	memcpy(copy, st, sizeof(st));
	/* the candidate (way 15, count 2) loses to main's least (4) */
	assert_int_equal(wtlfu->victim(st, 16, all_ways(16), 2000), 15);
	assert_memory_equal(copy, st, sizeof(st));
	assert_int_equal(wtlfu->evict(st, 16, all_ways(16), 2000), 15);
	for (unsigned w = 0; w < 15; w++)
		assert_true(wt_in_main(st[w]));
	assert_false(wt_in_main(st[15]));
	/* three hits (count 5, still in the window) beat main's 4: the
	 * oldest way of count 4 goes and way 15 moves to main */
	for (unsigned i = 0; i < 3; i++)
		wtlfu->on_hit(&st[15], 1500 + i);
	assert_false(wt_in_main(st[15]));
	assert_int_equal(wtlfu->victim(st, 16, all_ways(16), 2000), 1);
	assert_false(wt_in_main(st[15]));
	assert_int_equal(wtlfu->evict(st, 16, all_ways(16), 2000), 1);
	assert_true(wt_in_main(st[15]));
	/* way 1's slot takes a new row: the window again */
	wtlfu->on_insert(&st[1], 2000, 0);
	assert_false(wt_in_main(st[1]));
	/* way 1 (the window, count 0) pinned: main's least eligible goes */
	assert_int_equal(wtlfu->evict(st, 16, all_ways(16) & ~2ULL, 2001), 3);
	/* only the window eligible: it goes */
	assert_int_equal(wtlfu->evict(st, 16, 2ULL, 2001), 1);
	/* a hit in main keeps it in main and counts */
	wtlfu->on_hit(&st[0], 2002);
	assert_true(wt_in_main(st[0]));
	assert_int_equal(wtlfu->freq(st[0], 2003), 6);
}

/* Main's counts decay with idle time: a row of count c halves for every
 * 32 x 1024 / c clock ticks since its last access (its expected gap),
 * while freq() (what goes back into the sketch) is TinyLFU's count. */
static void test_wtlfu_idle(void **state)
{
	uint32_t st[4];

	wtlfu->on_insert(&st[0], 0, 8);
	wtlfu->on_insert(&st[1], 0, 9);
	wtlfu->on_insert(&st[2], 1500, 2);
	wtlfu->on_insert(&st[3], 1600, 3);
	/* 4 ways: 1 window way (3, the newest); 0..2 move to main */
	assert_int_equal(wtlfu->evict(st, 4, 0xf, 2000), 2);
	assert_true(wt_in_main(st[0]) && wt_in_main(st[1]));
	assert_true(wt_in_main(st[2]) && wt_in_main(st[3]));
	/* again, from the same words: way 3 (3) beat way 2 (2) */
	wtlfu->on_insert(&st[2], 1500, 2);
	wtlfu->on_insert(&st[3], 1600, 3);
	st[2] |= 1u << 4;
	/* way 0's gap is 32768 / 8 = 4096 ticks, way 1's 3640: at 12400
	 * both were idle 3 gaps, 8 >> 3 and 9 >> 3 are 1, below way 2's 2
	 * (idle less than its gap of 16384); equal age: the lower way */
	assert_int_equal(wtlfu->victim(st, 4, 0xf, 12400), 0);
	assert_int_equal(wtlfu->freq(st[0], 12400), 8);
	/* at 8200, 2 gaps: 8 >> 2 and 9 >> 2 are 2 as way 2's, and ways 0
	 * and 1 are older: way 0 */
	assert_int_equal(wtlfu->victim(st, 4, 0xf, 8200), 0);
	/* before its first gap way 0 holds 8: way 2 is main's least */
	assert_int_equal(wtlfu->victim(st, 4, 0xf, 2000), 2);
	/* a candidate no better than main's least goes itself */
	st[3] = (st[3] & ~0xfu) | 2;
	assert_int_equal(wtlfu->victim(st, 4, 0xf, 2000), 3);
}

/* Through a one-set cache: W-TinyLFU never refuses a missed row (it goes
 * to the window); the window's row moves to main if it beats main's
 * least, else a later miss evicts it. */
static void test_wtlfu_admission(void **state)
{
	const struct pinset none = {{0, 0, 0}};
	struct cache c;
	uint64_t now = 0, slot;
	char row[16] = {0};

	one_set(&c, wtlfu, &now);
	/* counts 1; hits make ways 0..2 count 2 (still the window) */
	for (uint64_t s = 0; s < 3; s++)
		cache_touch(&c, s, ++now);
	/* TinyLFU would refuse a key seen once against count 1; here ways
	 * 3, 0, 1 (oldest) move to main, window way 2 (2) beats way 3 (1) */
	slot = cache_pick(&c, 0, 99, ++now, &none, true);
	assert_int_equal(slot, 3);
	assert_true(wt_in_main(c.pstate[2]));
	cache_remove(&c, slot, 16);
	cache_fill(&c, slot, 0, 99, false, row, 16, now);
	assert_false(wt_in_main(c.pstate[3]));
	/* the next miss: key 99 (window, 1) does not beat main's 2: it goes */
	assert_int_equal(cache_pick(&c, 0, 98, ++now, &none, true), 3);
	cache_free(&c);
}

/* policy_drift: a period's hit ratio under half the last period's and
 * lower by more than a tenth moves the clock on by the jump, once per
 * such fall; a steady or rising ratio, a small fall or a fall from a low
 * ratio does not; periods are a sixteenth of the slots, at least 1024
 * lookups. */
static void test_drift(void **state)
{
	struct policy_drift d = {0};
	uint64_t hits = 0, looks = 0;

	(void)state;
	/* slots 64: the period is 1024 lookups; 1000 are not one */
	hits += 500, looks += 1000;
	policy_drift(&d, hits, looks, 64, 77);
	assert_int_equal(d.prev, 0);
	hits += 12, looks += 24; /* 512 of 1024: ratio 1/2 */
	policy_drift(&d, hits, looks, 64, 77);
	assert_int_equal(d.prev, 32768);
	assert_int_equal(d.warp, 0);
	hits += 300, looks += 1024; /* 0.29: not under half */
	policy_drift(&d, hits, looks, 64, 77);
	assert_int_equal(d.warp, 0);
	hits += 100, looks += 1024; /* 0.098: under half, by 0.19 */
	policy_drift(&d, hits, looks, 64, 77);
	assert_int_equal(d.warp, 77);
	assert_int_equal(d.changes, 1);
	hits += 40, looks += 1024; /* 0.039: under half, by 0.059 only */
	policy_drift(&d, hits, looks, 64, 77);
	assert_int_equal(d.warp, 77);
	hits += 1000, looks += 1024; /* rising */
	policy_drift(&d, hits, looks, 64, 77);
	hits += 10, looks += 1024; /* falls again */
	policy_drift(&d, hits, looks, 64, 77);
	assert_int_equal(d.warp, 154);
	assert_int_equal(d.changes, 2);
	/* 32768 slots: the period is 2048 lookups */
	hits += 2000, looks += 2047;
	policy_drift(&d, hits, looks, 32768, 77);
	assert_int_equal(d.changes, 2);
	hits += 0, looks += 1;
	policy_drift(&d, hits, looks, 32768, 77);
	assert_int_equal(d.prev, (uint32_t)((2000ULL << 16) / 2048));
}

/* Through a one-set TinyLFU cache: rows whose counts refuse a new key
 * stop refusing it once the cache's hit ratio collapses (every count and
 * the sketch aged to 0), and the oldest row goes. */
static void test_drift_admission(void **state)
{
	const struct pinset none = {{0, 0, 0}};
	struct cache c;
	uint64_t now = 0;
	uint64_t newk = 99; /* a row of table 0 */

	one_set(&c, tlfu, &now);
	for (uint64_t s = 0; s < 4; s++) /* counts 2 */
		cache_touch(&c, s, ++now);
	c.st.hits += 900, c.st.misses += 124;
	assert_int_equal(cache_pick(&c, 0, newk, ++now, &none, true),
			 CACHE_REJECT);
	assert_int_equal(c.drift.warp, 0);
	c.st.misses += 1024; /* a period without a hit */
	assert_int_equal(cache_pick(&c, 0, newk, ++now, &none, true), 0);
	assert_int_equal(c.drift.changes, 1);
	assert_int_equal(c.pol->freq(c.pstate[0], cache_clock(&c, now)), 0);
	cache_free(&c);
}

static void test_window(void **state)
{
	const struct pinset none = {{0, 0, 0}};
	struct lookahead la = {0};
	struct cache c;
	uint64_t now = 0;

	one_set(&c, &policy_lru, &now); /* LRU order: 1 2 3 4 */
	c.la = &la;
	assert_int_equal(la_tables(&la, 3), 0);
	/* keys 1 and 2 used in batch 0, key 3 in batch 2: key 4 is not
	 * used, so it goes although it is the newest */
	assert_int_equal(la_add(&la, 0, 1, 0), 0);
	assert_int_equal(la_add(&la, 0, 2, 0), 0);
	assert_int_equal(la_add(&la, 0, 3, 2), 0);
	assert_int_equal(la_add(&la, 0, 2, 3), 0);
	assert_int_equal(la_next(&la, 0, 2), 0);
	assert_int_equal(la_next(&la, 0, 4), LA_NONE);
	assert_int_equal(cache_pick(&c, 0, 50, ++now, &none, true), 3);
	/* key 4 in batch 1: now all are used; key 3 (batch 2) is last,
	 * though key 1 is older */
	assert_int_equal(la_add(&la, 0, 4, 1), 0);
	assert_int_equal(la_add(&la, 0, 50, 1), 0);
	assert_int_equal(cache_pick(&c, 0, 50, ++now, &none, true), 2);
	/* a key needed after every candidate, or never, is refused... */
	assert_int_equal(la_add(&la, 0, 60, 5), 0);
	assert_int_equal(cache_pick(&c, 0, 60, ++now, &none, true),
			 CACHE_REJECT);
	assert_int_equal(cache_pick(&c, 0, 61, ++now, &none, true),
			 CACHE_REJECT);
	/* ...unless the caller asks for no admission */
	assert_int_equal(cache_pick(&c, 0, 61, ++now, &none, false), 2);
	/* table 0's operation begins: batch 0 no longer counts for its
	 * rows; key 1 is then unused, key 2 next used in batch 3 */
	la_consume(&la, 0);
	assert_int_equal(la_next(&la, 0, 1), LA_NONE);
	assert_int_equal(la_next(&la, 0, 2), 3);
	assert_int_equal(cache_pick(&c, 0, 50, ++now, &none, true), 0);
	/* another table's batch 0 still counts */
	assert_int_equal(la_add(&la, 1, 1, 0), 0);
	assert_int_equal(la_next(&la, 1, 1), 0);
	/* cleared: no window, plain LRU (key 1, the oldest) */
	la_clear(&la);
	assert_false(la_active(&la));
	assert_int_equal(cache_pick(&c, 0, 50, ++now, &none, true), 0);
	cache_free(&c);
	la_free(&la);
}

/* A window that fails to slide for memory is no window at all, not the
 * old one shifted by a batch. */
static void test_window_enomem(void **state)
{
	uint64_t ids[3][3] = {{1, 2, 3}, {4, 5, 6}, {7, 8, 9}};
	struct et_batch_ids t[3];
	struct et_batch b[3];
	struct lookahead la = {0};

	for (int j = 0; j < 3; j++) {
		t[j] = (struct et_batch_ids){.table = 0, .ids = ids[j], .n = 3};
		b[j] = (struct et_batch){.tables = &t[j], .ntables = 1};
	}
	assert_int_equal(la_set(&la, b, 2, 1), 0);
	assert_int_equal(la_next(&la, 0, 4), 1);
	/* the window slides by one and needs room for 64 more tables: that
	 * allocation fails after the masks have moved */
	mem_fault_set(1);
	assert_int_equal(la_set(&la, b + 1, 2, 130), -ENOMEM);
	assert_true(mem_fault_fired());
	mem_fault_clear();
	assert_false(la_active(&la));
	assert_int_equal(la_next(&la, 0, 4), LA_NONE);
	assert_int_equal(la_next(&la, 0, 7), LA_NONE);
	/* and the next call builds the window anew */
	assert_int_equal(la_set(&la, b + 1, 2, 1), 0);
	assert_int_equal(la_next(&la, 0, 4), 0);
	assert_int_equal(la_next(&la, 0, 7), 1);
	la_free(&la);
	(void)state;
}

static void test_policy_get(void **state)
{
	assert_ptr_equal(policy_get(ET_POLICY_LRU), &policy_lru);
	assert_ptr_equal(policy_get(ET_POLICY_LFU), &policy_lfu);
	assert_null(policy_get((et_policy)0));
	assert_ptr_equal(policy_get(ET_POLICY_TINYLFU), &policy_tinylfu);
	assert_ptr_equal(policy_get(ET_POLICY_WTINYLFU), &policy_wtinylfu);
	assert_null(policy_get((et_policy)5));
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
	    cmocka_unit_test(test_lru_victim_random),
	    cmocka_unit_test(test_lfu_insert_and_first_hit),
	    cmocka_unit_test(test_lfu_least_hit),
	    cmocka_unit_test(test_lfu_tie_by_age),
	    cmocka_unit_test(test_lfu_eligible),
	    cmocka_unit_test(test_lfu_aging),
	    cmocka_unit_test(test_lfu_decay_rate),
	    cmocka_unit_test(test_lfu_new_insert),
	    cmocka_unit_test(test_lfu_wrap),
	    cmocka_unit_test(test_lfu_growth),
	    cmocka_unit_test(test_tlfu_counts),
	    cmocka_unit_test(test_tlfu_halving),
	    cmocka_unit_test(test_counted_accesses),
	    cmocka_unit_test(test_tlfu_victim),
	    cmocka_unit_test(test_sketch),
	    cmocka_unit_test(test_tlfu_admission),
	    cmocka_unit_test(test_wtlfu_window),
	    cmocka_unit_test(test_wtlfu_idle),
	    cmocka_unit_test(test_wtlfu_admission),
	    cmocka_unit_test(test_drift),
	    cmocka_unit_test(test_drift_admission),
	    cmocka_unit_test(test_window),
	    cmocka_unit_test(test_window_enomem),
	    cmocka_unit_test(test_policy_get),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
