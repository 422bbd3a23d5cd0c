/*
 * test_cache.c - one set-associative slot cache (src/cache/cache.h) through its
 * API, with LRU (test_policy drives the policies through a one-set cache):
 *
 *   - cache_init refuses ways outside 1..64, no slot size or no policy
 *     (ET_ECONFIG) and bytes short of one set (ET_ECAPACITY); the slots
 *     with their 16 bytes of metadata never take more than the bytes given;
 *   - keys pack a table and a row, flags aside;
 *   - pick, fill, lookup: a key is found in its own set, with its row's
 *     bytes; used, row_bytes and the insert counters follow;
 *   - a stream of many more keys than slots, each victim removed before
 *     the fill: the cache holds exactly what a model of it says, never
 *     more than its slots;
 *   - LRU inside a set: the way touched longest ago goes; cache_guess
 *     agrees with cache_pick;
 *   - dirty bits: counted once, lookups see through them and the
 *     prefetch flag, removal uncounts them;
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

static void row_of(uint64_t key, unsigned char *row)
{
	for (int i = 0; i < SB; i++)
		row[i] = (unsigned char)(key * 31 + i);
}

static void new_cache(struct cache *c, uint64_t sets)
{
	assert_int_equal(cache_init(c, sets * WAYS * PER, WAYS, SB, &policy_lru,
				    &mem_tier_host),
			 0);
	assert_int_equal(c->nsets, sets);
}

/* n keys (table 3, rows from 0 up) that fall in the set at base. */
static void keys_in_set(const struct cache *c, uint64_t base, uint64_t *k,
			int n)
{
	for (uint64_t row = 0; n; row++)
		if (cache_set_base(c, cache_key(3, row)) == base) {
			*k++ = cache_key(3, row);
			n--;
		}
}

static uint64_t put(struct cache *c, uint64_t key, bool dirty, uint64_t now)
{
	unsigned char row[SB];
	uint64_t slot = cache_pick(c, key, now, &none, false);

	assert_true(slot < cache_slots(c));
	assert_false(cache_valid(c, slot));
	row_of(key, row);
	cache_fill(c, slot, key, dirty, row, SB, now);
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
	uint64_t k = cache_key(7, (1ULL << 40) - 1);

	(void)state;
	assert_int_equal(cache_key_table(k), 7);
	assert_int_equal(cache_key_row(k), (1ULL << 40) - 1);
	assert_int_equal(cache_key_table(k | CACHE_DIRTY | CACHE_PF), 7);
	assert_int_equal(cache_key_row(cache_key(0, 0)), 0);
	assert_int_equal(cache_key_table(cache_key(0, 0)), 0);
	assert_true(cache_key(0, 0) != 0); /* 0 is an empty slot */
	assert_true(cache_key(1, 5) != cache_key(0, 5));
}

static void test_fill_lookup(void **state)
{
	unsigned char want[SB];
	struct cache c;
	uint64_t slot[8];

	(void)state;
	new_cache(&c, 16);
	for (int i = 0; i < 8; i++) {
		uint64_t key = cache_key(i % 2, 100 + i);

		assert_int_equal(cache_lookup(&c, key), CACHE_NONE);
		slot[i] = put(&c, key, false, i + 1);
		assert_int_equal(slot[i] / WAYS * WAYS,
				 cache_set_base(&c, key));
	}
	for (int i = 0; i < 8; i++) {
		uint64_t key = cache_key(i % 2, 100 + i);

		assert_int_equal(cache_lookup(&c, key), slot[i]);
		row_of(key, want);
		assert_memory_equal(cache_row(&c, slot[i]), want, SB);
	}
	assert_int_equal(cache_lookup(&c, cache_key(2, 100)), CACHE_NONE);
	assert_int_equal(cache_lookup(&c, cache_key(0, 101)), CACHE_NONE);
	assert_int_equal(c.used, 8);
	assert_int_equal(c.row_bytes, 8 * SB);
	assert_int_equal(c.st.inserts, 8);
	assert_int_equal(c.st.bytes_in, 8 * SB);
	cache_remove(&c, slot[3], SB);
	assert_int_equal(cache_lookup(&c, cache_key(1, 103)), CACHE_NONE);
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
		uint64_t k = tu_rng_below(&g, NKEYS), key = cache_key(1, k);
		uint64_t slot = cache_lookup(&c, key);
		unsigned char row[SB];

		assert_int_equal(slot != CACHE_NONE, in[k]);
		if (slot != CACHE_NONE) {
			cache_touch(&c, slot, now);
			continue;
		}
		slot = cache_pick(&c, key, now, &none, false);
		assert_true(slot < cache_slots(&c));
		assert_int_equal(slot / WAYS * WAYS, cache_set_base(&c, key));
		if (cache_valid(&c, slot)) {
			in[cache_key_row(c.keys[slot])] = false;
			cache_remove(&c, slot, SB);
			evicted++;
			count--;
		}
		row_of(key, row);
		cache_fill(&c, slot, key, false, row, SB, now);
		in[k] = true;
		count++;
		assert_int_equal(c.used, count);
		assert_true(c.used <= cache_slots(&c));
	}
	assert_int_equal(count, cache_slots(&c)); /* every set full */
	assert_true(evicted > EVENTS / 2);
	for (uint64_t k = 0; k < NKEYS; k++) {
		uint64_t slot = cache_lookup(&c, cache_key(1, k));
		unsigned char row[SB];

		assert_int_equal(slot != CACHE_NONE, in[k]);
		if (slot != CACHE_NONE) {
			row_of(cache_key(1, k), row);
			assert_memory_equal(cache_row(&c, slot), row, SB);
		}
	}
	cache_free(&c);
	free(in);
}

static void test_lru_in_set(void **state)
{
	struct cache c;
	uint64_t k[6], slot[4], base, victim;

	(void)state;
	new_cache(&c, 8);
	base = cache_set_base(&c, cache_key(3, 0));
	keys_in_set(&c, base, k, 6);
	for (int i = 0; i < 4; i++)
		slot[i] = put(&c, k[i], false, 10 + i);
	cache_touch(&c, slot[0], 20); /* k[1] is now the oldest */
	victim = cache_pick(&c, k[4], 21, &none, false);
	assert_int_equal(victim, slot[1]);
	assert_int_equal(cache_guess(&c, k[4], 21, &none), victim);
	assert_true(cache_valid(&c, victim)); /* pick moves nothing */
	assert_int_equal(c.used, 4);
	cache_remove(&c, victim, SB);
	cache_fill(&c, victim, k[4], false, "x", 1, 21);
	assert_int_equal(cache_lookup(&c, k[1]), CACHE_NONE);
	assert_int_equal(cache_lookup(&c, k[4]), victim);
	/* next: k[2], touched at 12 */
	assert_int_equal(cache_pick(&c, k[5], 22, &none, false), slot[2]);
	cache_free(&c);
}

static void test_dirty(void **state)
{
	struct cache c;
	uint64_t a, b;

	(void)state;
	new_cache(&c, 4);
	a = put(&c, cache_key(0, 1), true, 1);
	b = put(&c, cache_key(0, 2), false, 2);
	assert_true(cache_dirty(&c, a));
	assert_false(cache_dirty(&c, b));
	assert_int_equal(c.dirty, 1);
	cache_set_dirty(&c, b);
	cache_set_dirty(&c, b); /* once */
	assert_true(cache_dirty(&c, b));
	assert_int_equal(c.dirty, 2);
	assert_int_equal(cache_lookup(&c, cache_key(0, 1)), a);
	assert_int_equal(cache_lookup(&c, cache_key(0, 2)), b);
	cache_remove(&c, a, SB);
	assert_int_equal(c.dirty, 1);
	/* the prefetch flag is no part of the key either */
	a = cache_pick(&c, cache_key(0, 3), 3, &none, false);
	cache_fill(&c, a, cache_key(0, 3) | CACHE_PF, false, "y", 1, 3);
	assert_int_equal(cache_lookup(&c, cache_key(0, 3)), a);
	assert_false(cache_dirty(&c, a));
	assert_int_equal(c.dirty, 1);
	cache_free(&c);
}

static void test_pins(void **state)
{
	struct cache c;
	uint64_t k[5], slot[4], base;
	struct pinset ps = {{7, 0, 0}};

	(void)state;
	new_cache(&c, 8);
	base = cache_set_base(&c, cache_key(3, 0));
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
	assert_int_equal(cache_pick(&c, k[4], 10, &ps, false), slot[2]);
	cache_pin(&c, slot[2], 7);
	cache_pin(&c, slot[3], 9);
	assert_int_equal(cache_pick(&c, k[4], 11, &ps, false), CACHE_NONE);
	assert_int_equal(cache_guess(&c, k[4], 11, &ps), CACHE_NONE);
	/* new epochs: nothing pinned, the LRU way goes */
	ps = (struct pinset){{10, 11, 12}};
	assert_false(cache_pinned(&c, slot[0], &ps));
	assert_int_equal(cache_pick(&c, k[4], 12, &ps, false), slot[0]);
	/* the old epochs again, but every pin cleared */
	ps = (struct pinset){{7, 9, 0}};
	cache_unpin_all(&c);
	for (int i = 0; i < 4; i++)
		assert_false(cache_pinned(&c, slot[i], &ps));
	assert_int_equal(cache_pick(&c, k[4], 13, &ps, false), slot[0]);
	cache_free(&c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_init_bounds),
	    cmocka_unit_test(test_keys),
	    cmocka_unit_test(test_fill_lookup),
	    cmocka_unit_test(test_stream_bounded),
	    cmocka_unit_test(test_lru_in_set),
	    cmocka_unit_test(test_dirty),
	    cmocka_unit_test(test_pins),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
