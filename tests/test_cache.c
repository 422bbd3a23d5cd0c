/*
 * test_cache.c - one set-associative slot cache (src/cache/cache.h) through its
 * API, with LRU (test_policy drives the policies through a one-set cache):
 *
 *   - cache_init refuses ways outside 1..64, no slot size or no policy
 *     (ET_ECONFIG) and bytes short of one set (ET_ECAPACITY); the slots
 *     with their ET_SLOT_META_BYTES of metadata never take more than the
 *     bytes given;
 *   - a key is the pair (table, row), the row any u64: rows 0, 1, 2^40,
 *     UINT64_MAX - 1 and UINT64_MAX, and one row id in two tables, are
 *     distinct keys in distinct slots, found again with their bytes and
 *     their own dirty and prefetch flags; an empty slot is no key, not
 *     row 0 of table 0;
 *   - pick, fill, lookup: a key is found in its own set, with its row's
 *     bytes; used, row_bytes and the insert counters follow;
 *   - a stream of many more keys than slots, each victim removed before
 *     the fill: the cache holds exactly what a model of it says, never
 *     more than its slots;
 *   - LRU inside a set: the way touched longest ago goes; cache_guess
 *     agrees with cache_pick;
 *   - dirty bits: counted once, lookups see through them and the
 *     prefetch flag, removal uncounts them;
 *   - row bytes: every slot has its own slot_bytes in the data, for any
 *     ways (1, 3, 16, 17, 64); way w of every set comes before way w + 1,
 *     so rows in the first ways of their sets lie in the front;
 *   - digests: in a set of 64 ways (and of 17, whose digests a probe
 *     reads past), keys of two tables that all share one digest are each
 *     found in their own way, a key of that digest never stored is not,
 *     and emptied ways are taken again before any victim;
 *   - pins: a pinned way is never the victim, a set all pinned gives
 *     CACHE_NONE, new epochs or cache_unpin_all release them all.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cache.h"
#include "embtier.h"
#include "policy.h"
#include "util.h"

#define SB   32 /* slot bytes */
#define PER  (SB + ET_SLOT_META_BYTES)
#define WAYS 4

static const struct pinset none = {{0, 0, 0}};

static struct rkey K(uint32_t t, uint64_t row) {
	return (struct rkey){.row = row, .table = t};
}

static void
row_of(struct rkey k, unsigned char *row)
{
	for (int i = 0; i < SB; i++)
		row[i] = (unsigned char)(k.row * 31 + k.table * 7 + i);
}

static uint64_t lookup(const struct cache *c, struct rkey k)
{
	return cache_lookup(c, k.table, k.row);
}

static uint64_t set_of(const struct cache *c, struct rkey k)
{
	return cache_set_base(c, k.table, k.row);
}

static uint64_t pick(struct cache *c, struct rkey k, uint64_t now,
		     const struct pinset *ps)
{
	return cache_pick(c, k.table, k.row, now, ps, false);
}

static uint64_t guess(const struct cache *c, struct rkey k, uint64_t now,
		      const struct pinset *ps)
{
	return cache_guess(c, k.table, k.row, now, ps);
}

static void fill(struct cache *c, uint64_t slot, struct rkey k, bool dirty,
		 uint64_t now)
{
	unsigned char row[SB];

	row_of(k, row);
	cache_fill(c, slot, k.table, k.row, dirty, row, SB, now);
}

static void new_cache(struct cache *c, uint64_t sets)
{
	assert_int_equal(cache_init(c, sets * WAYS * PER, WAYS, SB, &policy_lru,
				    &mem_tier_host),
			 0);
	assert_int_equal(c->nsets, sets);
}

/* n keys (table 3, rows from 0 up) that fall in the set at base. */
static void keys_in_set(const struct cache *c, uint64_t base, struct rkey *k,
			int n)
{
	for (uint64_t row = 0; n; row++)
		if (set_of(c, K(3, row)) == base) {
			*k++ = K(3, row);
			n--;
		}
}

static uint64_t put(struct cache *c, struct rkey key, bool dirty, uint64_t now)
{
	uint64_t slot = pick(c, key, now, &none);

	assert_true(slot < cache_slots(c));
	assert_false(cache_valid(c, slot));
	fill(c, slot, key, dirty, now);
	return slot;
}

static void test_init_bounds(void **state)
{
	struct cache c;

	(void)state;
	assert_int_equal(
	    cache_init(&c, 1 << 20, 0, SB, &policy_lru, &mem_tier_host),
	    ET_ECONFIG);
	assert_int_equal(
	    cache_init(&c, 1 << 20, 65, SB, &policy_lru, &mem_tier_host),
	    ET_ECONFIG);
	assert_int_equal(
	    cache_init(&c, 1 << 20, 4, 0, &policy_lru, &mem_tier_host),
	    ET_ECONFIG);
	assert_int_equal(cache_init(&c, 1 << 20, 4, SB, NULL, &mem_tier_host),
			 ET_ECONFIG);
	assert_int_equal(cache_init(&c, WAYS * PER - 1, WAYS, SB, &policy_lru,
				    &mem_tier_host),
			 ET_ECAPACITY);
	/* exactly one set, and sizes between whole sets round down */
	for (uint64_t bytes = WAYS * PER; bytes < 40 * WAYS * PER;
	     bytes += 37) {
		assert_int_equal(cache_init(&c, bytes, WAYS, SB, &policy_lru,
					    &mem_tier_host),
				 0);
		assert_int_equal(c.nsets, bytes / (WAYS * PER));
		assert_true(cache_slots(&c) * PER <= bytes);
		assert_true((cache_slots(&c) + WAYS) * PER > bytes);
		assert_int_equal(c.used, 0);
		for (uint64_t s = 0; s < cache_slots(&c); s++)
			assert_false(cache_valid(&c, s));
		cache_free(&c);
	}
	assert_int_equal(
	    cache_init(&c, 64 * PER, 64, SB, &policy_lru, &mem_tier_host), 0);
	assert_int_equal(cache_slots(&c), 64);
	cache_free(&c);
}

static void test_keys(void **state)
{
	(void)state;
	assert_int_equal(cache_tag_table(cache_tag(7)), 7);
	assert_int_equal(
	    cache_tag_table(cache_tag(7) | CACHE_TAG_DIRTY | CACHE_TAG_PF), 7);
	assert_int_equal(cache_tag_table(cache_tag(0)), 0);
	assert_true(cache_tag(0) != 0); /* 0 is an empty slot */
	assert_int_equal(cache_tag_table(cache_tag(CACHE_MAX_TABLES - 1)),
			 CACHE_MAX_TABLES - 1);
	assert_int_equal(cache_tag(CACHE_MAX_TABLES - 1) & ~CACHE_TAG_TABLE, 0);
	/* the hash key: a bijection of the row within a table */
	assert_true(cache_hkey(1, 5) != cache_hkey(0, 5));
	assert_true(cache_hkey(0, 5) != cache_hkey(0, 6));
	assert_true(cache_hkey(0, 0) != cache_hkey(0, UINT64_MAX));
}

/* The keys the wide-key tests put in one cache: extreme rows of table 0,
 * and rows named in two tables. */
static const struct rkey wide[] = {
    {0, 0},
    {1, 0},
    {UINT64_MAX, 0},
    {UINT64_MAX - 1, 0},
    {1ULL << 40, 0},
    {(1ULL << 40) - 1, 0},
    {0, 1},
    {UINT64_MAX, 1},
    {1ULL << 40, 1},
    {1, 2},
    {UINT64_MAX, CACHE_MAX_TABLES - 1},
};
#define NWIDE (sizeof(wide) / sizeof(wide[0]))

/* A cache of one set of 16 ways: every key in it meets every other. */
static void one_set16(struct cache *c)
{
	assert_int_equal(
	    cache_init(c, 16 * PER, 16, SB, &policy_lru, &mem_tier_host), 0);
	assert_int_equal(c->nsets, 1);
}

/* Rows that are any u64, and one row id in two tables, all in one set:
 * each its own slot, found again with its own bytes; nothing else is
 * found. */
static void test_wide_keys(void **state)
{
	unsigned char want[SB];
	uint64_t slot[NWIDE];
	struct cache c;

	(void)state;
	one_set16(&c);
	for (size_t i = 0; i < NWIDE; i++) {
		assert_int_equal(lookup(&c, wide[i]), CACHE_NONE);
		slot[i] = put(&c, wide[i], false, i + 1);
		assert_int_equal(slot[i], i); /* free ways first */
		assert_int_equal(cache_slot_row(&c, slot[i]), wide[i].row);
		assert_int_equal(cache_slot_table(&c, slot[i]), wide[i].table);
	}
	for (size_t i = 0; i < NWIDE; i++) {
		for (size_t j = 0; j < NWIDE; j++)
			if (j != i)
				assert_false(cache_holds(
				    &c, slot[i], wide[j].table, wide[j].row));
		assert_int_equal(lookup(&c, wide[i]), slot[i]);
		assert_true(
		    cache_holds(&c, slot[i], wide[i].table, wide[i].row));
		row_of(wide[i], want);
		assert_memory_equal(cache_row(&c, slot[i]), want, SB);
	}
	assert_int_equal(c.used, NWIDE);
	/* neighbours and other tables of the same rows are not there */
	assert_int_equal(lookup(&c, K(0, 2)), CACHE_NONE);
	assert_int_equal(lookup(&c, K(0, UINT64_MAX - 2)), CACHE_NONE);
	assert_int_equal(lookup(&c, K(1, 1)), CACHE_NONE);
	assert_int_equal(lookup(&c, K(2, 0)), CACHE_NONE);
	assert_int_equal(lookup(&c, K(2, UINT64_MAX)), CACHE_NONE);
	assert_int_equal(lookup(&c, K(3, 1ULL << 40)), CACHE_NONE);
	assert_int_equal(lookup(&c, K(CACHE_MAX_TABLES - 2, UINT64_MAX)),
			 CACHE_NONE);
	/* removing row 0 of table 0 leaves row 0 of table 1 and the rest */
	cache_remove(&c, slot[0], SB);
	assert_int_equal(lookup(&c, wide[0]), CACHE_NONE);
	for (size_t i = 1; i < NWIDE; i++)
		assert_int_equal(lookup(&c, wide[i]), slot[i]);
	cache_free(&c);
}

/* Every row in one set (a cache of one set): the row alone never finds
 * a slot, the table must agree too. */
static void test_same_row_two_tables(void **state)
{
	struct cache c;
	uint64_t a, b, d, e;

	(void)state;
	new_cache(&c, 1);
	a = put(&c, K(0, 42), false, 1);
	assert_int_equal(lookup(&c, K(1, 42)), CACHE_NONE);
	b = put(&c, K(1, 42), true, 2);
	assert_true(a != b);
	assert_int_equal(lookup(&c, K(0, 42)), a);
	assert_int_equal(lookup(&c, K(1, 42)), b);
	assert_false(cache_dirty(&c, a));
	assert_true(cache_dirty(&c, b));
	d = put(&c, K(0, UINT64_MAX), true, 3);
	e = put(&c, K(1, UINT64_MAX), false, 4);
	assert_int_equal(lookup(&c, K(0, UINT64_MAX)), d);
	assert_int_equal(lookup(&c, K(1, UINT64_MAX)), e);
	assert_true(cache_dirty(&c, d));
	assert_false(cache_dirty(&c, e));
	assert_int_equal(lookup(&c, K(2, 42)), CACHE_NONE);
	assert_int_equal(lookup(&c, K(2, UINT64_MAX)), CACHE_NONE);
	/* the flags are per slot: cleaning one leaves its twin */
	cache_clean(&c, b);
	cache_set_dirty(&c, a);
	assert_true(cache_dirty(&c, a));
	assert_false(cache_dirty(&c, b));
	cache_mark_pf(&c, e);
	assert_true(cache_is_pf(&c, e));
	assert_false(cache_is_pf(&c, d));
	assert_int_equal(lookup(&c, K(1, UINT64_MAX)), e); /* flag aside */
	assert_int_equal(c.dirty, 2);
	cache_remove(&c, a, SB);
	assert_int_equal(lookup(&c, K(0, 42)), CACHE_NONE);
	assert_int_equal(lookup(&c, K(1, 42)), b);
	assert_int_equal(c.dirty, 1);
	cache_free(&c);
}

/* Dirty flags of the wide keys: each slot keeps its own. */
static void test_wide_dirty(void **state)
{
	uint64_t slot[NWIDE];
	struct cache c;

	(void)state;
	one_set16(&c);
	for (size_t i = 0; i < NWIDE; i++)
		slot[i] = put(&c, wide[i], i % 2 == 0, i + 1);
	assert_int_equal(c.dirty, (NWIDE + 1) / 2);
	for (size_t i = 0; i < NWIDE; i++) {
		assert_int_equal(cache_dirty(&c, slot[i]), i % 2 == 0);
		assert_false(cache_is_pf(&c, slot[i]));
	}
	/* flip them all: the odd ones dirty, the even ones clean */
	for (size_t i = 0; i < NWIDE; i++) {
		if (i % 2)
			cache_set_dirty(&c, slot[i]);
		else
			cache_clean(&c, slot[i]);
	}
	assert_int_equal(c.dirty, NWIDE / 2);
	for (size_t i = 0; i < NWIDE; i++) {
		assert_int_equal(cache_dirty(&c, slot[i]), i % 2 == 1);
		assert_int_equal(lookup(&c, wide[i]), slot[i]);
		assert_int_equal(cache_slot_table(&c, slot[i]), wide[i].table);
	}
	cache_free(&c);
}

/* A fresh cache, and a slot emptied, hold no key: not row 0 of table 0
 * (whose row word is 0 too), and a set with row 0 of table 0 in one way
 * still has its other ways free. */
static void test_empty_not_row0(void **state)
{
	struct cache c;
	uint64_t a, b, base;

	(void)state;
	new_cache(&c, 1);
	for (uint64_t s = 0; s < cache_slots(&c); s++) {
		assert_false(cache_valid(&c, s));
		assert_false(cache_holds(&c, s, 0, 0));
	}
	assert_int_equal(lookup(&c, K(0, 0)), CACHE_NONE);
	assert_int_equal(c.used, 0);
	base = set_of(&c, K(0, 0));
	a = put(&c, K(0, 0), false, 1);
	assert_int_equal(a, base); /* the first free way */
	assert_int_equal(lookup(&c, K(0, 0)), a);
	b = put(&c, K(0, 1), false, 2);
	assert_int_equal(b, base + 1);
	assert_int_equal(c.used, 2);
	cache_remove(&c, a, SB);
	assert_false(cache_valid(&c, a));
	assert_int_equal(lookup(&c, K(0, 0)), CACHE_NONE);
	assert_int_equal(pick(&c, K(0, 0), 3, &none), a); /* free again */
	cache_remove(&c, a, SB); /* empty already: nothing */
	assert_int_equal(c.used, 1);
	cache_free(&c);
}

static void test_fill_lookup(void **state)
{
	unsigned char want[SB];
	struct cache c;
	uint64_t slot[8];

	(void)state;
	new_cache(&c, 16);
	for (int i = 0; i < 8; i++) {
		struct rkey key = K(i % 2, 100 + i);

		assert_int_equal(lookup(&c, key), CACHE_NONE);
		slot[i] = put(&c, key, false, i + 1);
		assert_int_equal(slot[i] / WAYS * WAYS, set_of(&c, key));
	}
	for (int i = 0; i < 8; i++) {
		struct rkey key = K(i % 2, 100 + i);

		assert_int_equal(lookup(&c, key), slot[i]);
		row_of(key, want);
		assert_memory_equal(cache_row(&c, slot[i]), want, SB);
	}
	assert_int_equal(lookup(&c, K(2, 100)), CACHE_NONE);
	assert_int_equal(lookup(&c, K(0, 101)), CACHE_NONE);
	assert_int_equal(c.used, 8);
	assert_int_equal(c.row_bytes, 8 * SB);
	assert_int_equal(c.st.inserts, 8);
	assert_int_equal(c.st.bytes_in, 8 * SB);
	cache_remove(&c, slot[3], SB);
	assert_int_equal(lookup(&c, K(1, 103)), CACHE_NONE);
	assert_false(cache_valid(&c, slot[3]));
	assert_int_equal(c.used, 7);
	assert_int_equal(c.row_bytes, 7 * SB);
	cache_remove(&c, slot[3], SB); /* empty already: nothing */
	assert_int_equal(c.used, 7);
	cache_free(&c);
}

static void test_stream_bounded(void **state)
{
	enum { NKEYS = 2000, EVENTS = 20000 };
	bool *in = tu_calloc(NKEYS, sizeof(*in));
	struct cache c;
	struct tu_rng g;
	uint64_t count = 0, evicted = 0;

	(void)state;
	new_cache(&c, 8);
	tu_rng_seed(&g, 99);
	for (uint64_t now = 1; now <= EVENTS; now++) {
		uint64_t k = tu_rng_below(&g, NKEYS);
		struct rkey key = K(1, k);
		uint64_t slot = lookup(&c, key);

		assert_int_equal(slot != CACHE_NONE, in[k]);
		if (slot != CACHE_NONE) {
			cache_touch(&c, slot, now);
			continue;
		}
		slot = pick(&c, key, now, &none);
		assert_true(slot < cache_slots(&c));
		assert_int_equal(slot / WAYS * WAYS, set_of(&c, key));
		if (cache_valid(&c, slot)) {
			assert_int_equal(cache_slot_table(&c, slot), 1);
			in[cache_slot_row(&c, slot)] = false;
			cache_remove(&c, slot, SB);
			evicted++;
			count--;
		}
		fill(&c, slot, key, false, now);
		in[k] = true;
		count++;
		assert_int_equal(c.used, count);
		assert_true(c.used <= cache_slots(&c));
	}
	assert_int_equal(count, cache_slots(&c)); /* every set full */
	assert_true(evicted > EVENTS / 2);
	for (uint64_t k = 0; k < NKEYS; k++) {
		uint64_t slot = lookup(&c, K(1, k));
		unsigned char row[SB];

		assert_int_equal(slot != CACHE_NONE, in[k]);
		if (slot != CACHE_NONE) {
			row_of(K(1, k), row);
			assert_memory_equal(cache_row(&c, slot), row, SB);
		}
	}
	cache_free(&c);
	free(in);
}

static void test_lru_in_set(void **state)
{
	struct cache c;
	struct rkey k[6];
	uint64_t slot[4], base, victim;

	(void)state;
	new_cache(&c, 8);
	base = set_of(&c, K(3, 0));
	keys_in_set(&c, base, k, 6);
	for (int i = 0; i < 4; i++)
		slot[i] = put(&c, k[i], false, 10 + i);
	cache_touch(&c, slot[0], 20); /* k[1] is now the oldest */
	victim = pick(&c, k[4], 21, &none);
	assert_int_equal(victim, slot[1]);
	assert_int_equal(guess(&c, k[4], 21, &none), victim);
	assert_true(cache_valid(&c, victim)); /* pick moves nothing */
	assert_int_equal(c.used, 4);
	cache_remove(&c, victim, SB);
	cache_fill(&c, victim, k[4].table, k[4].row, false, "x", 1, 21);
	assert_int_equal(lookup(&c, k[1]), CACHE_NONE);
	assert_int_equal(lookup(&c, k[4]), victim);
	/* next: k[2], touched at 12 */
	assert_int_equal(pick(&c, k[5], 22, &none), slot[2]);
	cache_free(&c);
}

static void test_dirty(void **state)
{
	struct cache c;
	uint64_t a, b;

	(void)state;
	new_cache(&c, 4);
	a = put(&c, K(0, 1), true, 1);
	b = put(&c, K(0, 2), false, 2);
	assert_true(cache_dirty(&c, a));
	assert_false(cache_dirty(&c, b));
	assert_int_equal(c.dirty, 1);
	cache_set_dirty(&c, b);
	cache_set_dirty(&c, b); /* once */
	assert_true(cache_dirty(&c, b));
	assert_int_equal(c.dirty, 2);
	assert_int_equal(lookup(&c, K(0, 1)), a);
	assert_int_equal(lookup(&c, K(0, 2)), b);
	cache_remove(&c, a, SB);
	assert_int_equal(c.dirty, 1);
	/* the prefetch flag is no part of the key either */
	a = pick(&c, K(0, 3), 3, &none);
	cache_fill(&c, a, 0, 3, false, "y", 1, 3);
	assert_false(cache_is_pf(&c, a));
	cache_mark_pf(&c, a);
	assert_true(cache_is_pf(&c, a));
	assert_int_equal(lookup(&c, K(0, 3)), a);
	assert_false(cache_dirty(&c, a));
	assert_int_equal(c.dirty, 1);
	assert_true(cache_take_pf(&c, a));
	assert_false(cache_is_pf(&c, a));
	assert_int_equal(lookup(&c, K(0, 3)), a);
	cache_free(&c);
}

/* cache_row is a bijection of the slots onto the data's rows, way by way:
 * way w of set s at row w * nsets + s. */
static void test_row_layout(void **state)
{
	const uint32_t ways[] = {1, 3, 16, 17, 64};

	(void)state;
	for (size_t i = 0; i < sizeof(ways) / sizeof(ways[0]); i++) {
		struct cache c;
		uint64_t n;
		uint8_t *seen;

		assert_int_equal(cache_init(&c, 37 * ways[i] * PER, ways[i], SB,
					    &policy_lru, &mem_tier_host),
				 0);
		assert_int_equal(c.nsets, 37);
		n = cache_slots(&c);
		seen = calloc(n, 1);
		assert_non_null(seen);
		for (uint64_t slot = 0; slot < n; slot++) {
			uint64_t off =
			    (uint64_t)((char *)cache_row(&c, slot) - c.data);

			assert_int_equal(off % SB, 0);
			assert_true(off / SB < n);
			assert_int_equal(off / SB, (slot % ways[i]) * c.nsets +
						       slot / ways[i]);
			assert_false(seen[off / SB]);
			seen[off / SB] = 1;
		}
		free(seen);
		cache_free(&c);
	}
}

/* Keys with one digest fill a set: the probe must tell them apart by row
 * and table, miss a key of the same digest that is not there, and see the
 * ways emptied among them as free. ways 64 (the whole mask) and 17 (the
 * set's digests read 16 at a time, past its end). */
static void digest_set(uint32_t ways)
{
	enum { N = 64 };
	struct cache c;
	struct rkey k[N + 1];
	uint64_t slot[N], base;
	uint8_t d = 0;
	int n = 0;

	assert_int_equal(cache_init(&c, 2 * ways * PER, ways, SB, &policy_lru,
				    &mem_tier_host),
			 0);
	assert_int_equal(c.nsets, 2);
	base = c.ways; /* the second set: its digests end the array */
	/* rows of tables 1 and 2 in that set sharing one digest, and one
	 * more never stored */
	for (uint64_t row = 0; n < (int)ways + 1; row++)
		for (uint32_t t = 1; t <= 2 && n < (int)ways + 1; t++) {
			if (set_of(&c, K(t, row)) != base)
				continue;
			if (!n)
				d = cache_digest(t, row);
			if (cache_digest(t, row) == d)
				k[n++] = K(t, row);
		}
	for (uint32_t i = 0; i < ways; i++)
		slot[i] = put(&c, k[i], false, i);
	assert_int_equal(cache_match(&c, base, 0), 0); /* full */
	for (uint32_t i = 0; i < ways; i++)
		assert_int_equal(lookup(&c, k[i]), slot[i]);
	assert_int_equal(lookup(&c, k[ways]), CACHE_NONE);
	/* two ways emptied: they are the next picks, not a victim */
	cache_remove(&c, slot[3], SB);
	cache_remove(&c, slot[ways - 1], SB);
	assert_int_equal(lookup(&c, k[3]), CACHE_NONE);
	assert_int_equal(lookup(&c, k[ways - 1]), CACHE_NONE);
	for (uint32_t i = 0; i < ways; i++)
		if (i != 3 && i != ways - 1)
			assert_int_equal(lookup(&c, k[i]), slot[i]);
	assert_int_equal(put(&c, k[ways], false, 100), slot[3]);
	assert_int_equal(lookup(&c, k[ways]), slot[3]);
	assert_int_equal(put(&c, k[3], false, 101), slot[ways - 1]);
	assert_int_equal(lookup(&c, k[3]), slot[ways - 1]);
	cache_free(&c);
}

static void test_digests(void **state)
{
	(void)state;
	digest_set(64);
	digest_set(17);
}

static void test_pins(void **state)
{
	struct cache c;
	struct rkey k[5];
	uint64_t slot[4], base;
	struct pinset ps = {{7, 0, 0}};

	(void)state;
	new_cache(&c, 8);
	base = set_of(&c, K(3, 0));
	keys_in_set(&c, base, k, 5);
	for (int i = 0; i < 4; i++)
		slot[i] = put(&c, k[i], false, 1 + i);
	/* the LRU victim slot[0] pinned by the operation, slot[1] by a
	 * batch: slot[2] goes */
	cache_pin(&c, slot[0], 7);
	cache_pin(&c, slot[1], 9);
	ps.e[2] = 9;
	assert_true(cache_pinned(&c, slot[0], &ps));
	assert_true(cache_pinned(&c, slot[1], &ps));
	assert_false(cache_pinned(&c, slot[2], &ps));
	assert_int_equal(pick(&c, k[4], 10, &ps), slot[2]);
	cache_pin(&c, slot[2], 7);
	cache_pin(&c, slot[3], 9);
	assert_int_equal(pick(&c, k[4], 11, &ps), CACHE_NONE);
	assert_int_equal(guess(&c, k[4], 11, &ps), CACHE_NONE);
	/* new epochs: nothing pinned, the LRU way goes */
	ps = (struct pinset){{10, 11, 12}};
	assert_false(cache_pinned(&c, slot[0], &ps));
	assert_int_equal(pick(&c, k[4], 12, &ps), slot[0]);
	/* the old epochs again, but every pin cleared */
	ps = (struct pinset){{7, 9, 0}};
	cache_unpin_all(&c);
	for (int i = 0; i < 4; i++)
		assert_false(cache_pinned(&c, slot[i], &ps));
	assert_int_equal(pick(&c, k[4], 13, &ps), slot[0]);
	cache_free(&c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_init_bounds),
	    cmocka_unit_test(test_keys),
	    cmocka_unit_test(test_wide_keys),
	    cmocka_unit_test(test_same_row_two_tables),
	    cmocka_unit_test(test_wide_dirty),
	    cmocka_unit_test(test_empty_not_row0),
	    cmocka_unit_test(test_fill_lookup),
	    cmocka_unit_test(test_stream_bounded),
	    cmocka_unit_test(test_lru_in_set),
	    cmocka_unit_test(test_dirty),
	    cmocka_unit_test(test_row_layout),
	    cmocka_unit_test(test_digests),
	    cmocka_unit_test(test_pins),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
