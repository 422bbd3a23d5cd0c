/*
 * test_sketch.c - TinyLFU's count-min sketch of 4-bit counters
 * (src/cache/sketch.h) as a unit (test_policy checks it beside the policies):
 *
 *   - sketch_init rounds the columns up to a power of two, at least 16,
 *     and sketch_bytes is 2 a column; sketch_free leaves it empty;
 *   - an estimate starts at 0, rises by n with sketch_add_n (which returns
 *     the new estimate, as sketch_get then says) and saturates at 15;
 *   - estimates never fall below the true count (up to 15) of any key,
 *     even in a sketch of 16 columns shared by hundreds of keys;
 *   - aging halves every count once per epoch moved on (exactly v >> d),
 *     across the epoch counter's wrap; four or more epochs clear it all
 *     (the sketch has no reset call: this is its reset);
 *   - sketch_raise raises to at least f (at most 15) and never lowers;
 *   - on a skewed stream with aging, every hot key ranks above every
 *     cold one.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "admit.h"
#include "sketch.h"
#include "util.h"

static void test_init_sizes(void **state)
{
	static const uint64_t ask[] = {0, 1, 16, 17, 1000, 1024, 1025};
	static const uint64_t got[] = {16, 16, 16, 32, 1024, 1024, 2048};
	struct sketch s;

	(void)state;
	for (size_t i = 0; i < sizeof(ask) / sizeof(*ask); i++) {
		assert_int_equal(sketch_init(&s, ask[i], 9), 0);
		assert_int_equal(s.cols, got[i]);
		assert_int_equal(sketch_bytes(&s), 2 * got[i]);
		assert_int_equal(s.epoch, 9);
		for (uint64_t k = 0; k < 64; k++)
			assert_int_equal(sketch_get(&s, k), 0);
		sketch_free(&s);
		assert_null(s.w);
		assert_int_equal(s.cols, 0);
	}
}

static void test_add_and_saturate(void **state)
{
	struct sketch s;

	(void)state;
	assert_int_equal(sketch_init(&s, 1 << 12, 0), 0);
	for (uint32_t i = 1; i <= 40; i++)
		assert_int_equal(sketch_add(&s, 77), i < 15 ? i : 15);
	assert_int_equal(sketch_get(&s, 77), SKETCH_MAX);
	assert_int_equal(sketch_add_n(&s, 77, 1000), 15);
	/* add_n: one call counts n */
	assert_int_equal(sketch_add_n(&s, 78, 6), 6);
	assert_int_equal(sketch_add_n(&s, 78, 6), 12);
	assert_int_equal(sketch_add_n(&s, 78, 6), 15);
	assert_int_equal(sketch_get(&s, 78), 15);
	assert_int_equal(sketch_add_n(&s, 79, UINT32_MAX), 15);
	/* other keys untouched (a large sketch, few keys) */
	assert_int_equal(sketch_get(&s, 80), 0);
	sketch_free(&s);
}

/* A stream over nkeys keys in a sketch of cols columns: every estimate
 * at least min(true count, 15); each add returns min(before + n, 15) and
 * sketch_get agrees. Returns how many keys are estimated exactly. */
static uint64_t stream(uint64_t cols, uint64_t nkeys, uint64_t events)
{
	uint32_t *cnt = tu_calloc(nkeys, sizeof(*cnt));
	struct sketch s;
	struct tu_rng g;
	uint64_t exact = 0;

	tu_rng_seed(&g, cols * 31 + nkeys);
	assert_int_equal(sketch_init(&s, cols, 0), 0);
	for (uint64_t e = 0; e < events; e++) {
		uint64_t k = tu_rng_below(&g, nkeys);
		uint32_t n = 1 + (uint32_t)tu_rng_below(&g, 3);
		uint32_t before = sketch_get(&s, k * 0x9e37 + 5);
		uint32_t want = before + n < 15 ? before + n : 15;

		assert_int_equal(sketch_add_n(&s, k * 0x9e37 + 5, n), want);
		assert_int_equal(sketch_get(&s, k * 0x9e37 + 5), want);
		cnt[k] += n;
	}
	for (uint64_t k = 0; k < nkeys; k++) {
		uint32_t est = sketch_get(&s, k * 0x9e37 + 5);
		uint32_t tru = cnt[k] < 15 ? cnt[k] : 15;

		assert_true(est >= tru);
		assert_true(est <= 15);
		exact += est == tru;
	}
	sketch_free(&s);
	free(cnt);
	return exact;
}

static void test_never_underestimates(void **state)
{
	(void)state;
	/* crowded: every counter shared by dozens of keys */
	stream(16, 500, 1500);
	stream(64, 2000, 3000);
	/* roomy: almost every key exact */
	assert_true(stream(1 << 16, 1000, 3000) >= 990);
}

static void test_aging_halves(void **state)
{
	struct sketch s;

	(void)state;
	assert_int_equal(sketch_init(&s, 1 << 16, 0), 0);
	for (uint32_t v = 0; v <= 15; v++) {
		if (v)
			sketch_add_n(&s, 1000 + v, v);
		assert_int_equal(sketch_get(&s, 1000 + v), v);
	}
	sketch_age(&s, 0); /* the same epoch: nothing */
	for (uint32_t v = 0; v <= 15; v++)
		assert_int_equal(sketch_get(&s, 1000 + v), v);
	sketch_age(&s, 1);
	for (uint32_t v = 0; v <= 15; v++)
		assert_int_equal(sketch_get(&s, 1000 + v), v >> 1);
	sketch_age(&s, 3); /* two epochs at once: quartered */
	for (uint32_t v = 0; v <= 15; v++)
		assert_int_equal(sketch_get(&s, 1000 + v), v >> 3);
	/* counts after aging go on rising from where they are */
	assert_int_equal(sketch_add(&s, 1015), 2);
	sketch_age(&s, 7); /* four: everything cleared */
	for (uint32_t v = 0; v <= 15; v++)
		assert_int_equal(sketch_get(&s, 1000 + v), 0);
	for (uint64_t i = 0; i < sketch_bytes(&s) / 8; i++)
		assert_int_equal(s.w[i], 0);
	assert_int_equal(s.epoch, 7);
	sketch_free(&s);

	/* the epoch counter wraps: UINT32_MAX -> 0 is one epoch */
	assert_int_equal(sketch_init(&s, 256, UINT32_MAX), 0);
	sketch_add_n(&s, 5, 13);
	sketch_age(&s, 0);
	assert_int_equal(sketch_get(&s, 5), 6);
	sketch_age(&s, 2);
	assert_int_equal(sketch_get(&s, 5), 1);
	sketch_free(&s);
}

static void test_raise(void **state)
{
	struct sketch s;

	(void)state;
	assert_int_equal(sketch_init(&s, 1 << 12, 0), 0);
	sketch_raise(&s, 9, 4);
	assert_int_equal(sketch_get(&s, 9), 4);
	sketch_raise(&s, 9, 2); /* never lowers */
	assert_int_equal(sketch_get(&s, 9), 4);
	sketch_raise(&s, 9, 0);
	assert_int_equal(sketch_get(&s, 9), 4);
	sketch_raise(&s, 9, 100); /* at most 15 */
	assert_int_equal(sketch_get(&s, 9), 15);
	assert_int_equal(sketch_add(&s, 9), 15);
	sketch_free(&s);
}

static void test_skew_ranks_hot_keys(void **state)
{
	enum { HOT = 16, COLD = 4000, EVENTS = 40000, AGE_EVERY = 6000 };
	struct sketch s;
	struct tu_rng g;
	uint32_t min_hot = 15, max_cold = 0;
	uint64_t cold_sum = 0;

	(void)state;
	tu_rng_seed(&g, 2024);
	/* about the size TinyLFU gives a cache of 1024 slots */
	assert_int_equal(sketch_init(&s, 2048, 0), 0);
	for (uint32_t e = 0; e < EVENTS; e++) {
		/* half the accesses to 16 keys, half spread over 4000 */
		uint64_t k = tu_rng_below(&g, 2) ? tu_rng_below(&g, HOT)
						 : HOT + tu_rng_below(&g, COLD);

		sketch_age(&s, e / AGE_EVERY);
		sketch_add(&s, k);
	}
	for (uint64_t k = 0; k < HOT; k++) {
		uint32_t v = sketch_get(&s, k);

		min_hot = v < min_hot ? v : min_hot;
	}
	for (uint64_t k = HOT; k < HOT + COLD; k++) {
		uint32_t v = sketch_get(&s, k);

		max_cold = v > max_cold ? v : max_cold;
		cold_sum += v;
	}
	assert_true(min_hot > max_cold);
	assert_true(min_hot >= 12);
	/* the cold keys' counts are mostly faded and small */
	assert_true(cold_sum < 2 * COLD);
	sketch_free(&s);
}

/* The admission filter's early admissions (admit.h): with admit_after 2,
 * D distinct ids seen once each, in a filter of w columns: the fraction
 * admitted at their first sighting, because every one of their four
 * counters was raised by others. Printed for D/w = 1/16 .. 1 (the figures
 * docs/KEYED.md quotes) and held to twice the estimate for four
 * independent counters each hit with probability 1 - e^(-D/w) (plus a
 * little for small counts). */
static void test_admission_false_positives(void **state)
{
	static const double loads[] = {1.0 / 16, 1.0 / 4, 1.0 / 2, 1.0};
	const uint32_t lg = 16;
	struct tu_rng rng;

	(void)state;
	tu_rng_seed(&rng, 7);
	for (size_t l = 0; l < sizeof(loads) / sizeof(loads[0]); l++) {
		struct et_key_policy p = {.admit_after = 2, .filter_log2 = lg};
		struct keypol k = {0};
		uint64_t d = (uint64_t)(loads[l] * (double)(1u << lg)),
			 early = 0;
		double est = pow(1 - exp(-loads[l]), 4), rate;

		assert_int_equal(keypol_set(&k, &p), 0);
		for (uint64_t i = 0; i < d; i++)
			early += keypol_admit(&k, tu_rng_next(&rng), false);
		rate = (double)early / (double)d;
		print_message("admission filter, %llu ids seen once in 2^%u "
			      "columns (load %.4g): %.5f admitted early "
			      "(estimate %.5f)\n",
			      (unsigned long long)d, lg, loads[l], rate, est);
		assert_true(rate <= 2 * est + 0.001);
		/* and a second sighting admits every one of them */
		keypol_free(&k);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_init_sizes),
	    cmocka_unit_test(test_add_and_saturate),
	    cmocka_unit_test(test_never_underestimates),
	    cmocka_unit_test(test_aging_halves),
	    cmocka_unit_test(test_raise),
	    cmocka_unit_test(test_skew_ranks_hot_keys),
	    cmocka_unit_test(test_admission_false_positives),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
