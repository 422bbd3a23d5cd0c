/*
 * test_dtype.c - f32 <-> f16 / bf16 conversions and the dtype helpers.
 * Decoding is checked exhaustively against an independent decoder built from
 * the formats' definitions (every 16-bit pattern); encoding is checked for
 * exact round trips of every representable value, and against a reference
 * rounding computed in double from the two neighbouring representable values
 * (round to nearest, ties to even), on every halfway point, on its f32
 * neighbours, and on a few million random f32 patterns. Overflow to infinity,
 * f16 subnormals, signed zeros and NaNs are covered explicitly.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "dtype.h"
#include "embtier.h"
#include "util.h"

/* The two 16-bit formats, described by their field widths. */
struct fmt {
	const char *name;
	unsigned mant_bits; /* 10 for f16, 7 for bf16 */
	unsigned exp_bits;  /* 5 for f16, 8 for bf16 */
	int bias;	    /* 15, 127 */
	uint16_t (*enc)(float);
	float (*dec)(uint16_t);
};

static const struct fmt f16 = {"f16", 10, 5, 15, et_f32_to_f16, et_f16_to_f32};
static const struct fmt bf16 = {"bf16",	       7, 8, 127, et_f32_to_bf16,
				et_bf16_to_f32};

static uint32_t f2u(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	return u;
}

static float u2f(uint32_t u)
{
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

static uint16_t exp_mask(const struct fmt *f)
{
	return (uint16_t)(((1u << f->exp_bits) - 1) << f->mant_bits);
}

static uint16_t mant_mask(const struct fmt *f)
{
	return (uint16_t)((1u << f->mant_bits) - 1);
}

static int is_nan16(const struct fmt *f, uint16_t h)
{
	return (h & exp_mask(f)) == exp_mask(f) && (h & mant_mask(f));
}

/*
 * Value of the non-negative pattern p (sign bit clear) as a double, from the
 * definition. The infinity pattern decodes to 2^(emax+1), the value the next
 * finite pattern would have with an unbounded exponent: that is exactly what
 * round-to-nearest compares against when deciding overflow (IEEE 754 rounds
 * to infinity at and beyond the midpoint between the largest finite value
 * and that number).
 */
static double ref_value(const struct fmt *f, uint16_t p)
{
	unsigned e = (p & exp_mask(f)) >> f->mant_bits;
	unsigned m = p & mant_mask(f);
	int shift = f->bias + (int)f->mant_bits - 1; /* 24 for f16 */

	if (e == 0)
		return ldexp((double)m, -shift);
	return ldexp((double)((1u << f->mant_bits) + m), (int)e - shift - 1);
}

/* Signed decode of any non-NaN pattern (infinity decodes to +-inf). */
static double ref_decode(const struct fmt *f, uint16_t h)
{
	uint16_t p = h & 0x7fff;
	double v = p == exp_mask(f) ? INFINITY : ref_value(f, p);

	return (h & 0x8000) ? -v : v;
}

/*
 * Reference encoder for a non-NaN float. Binary search the largest
 * non-negative pattern lo with value(lo) <= |x| (patterns of one sign are
 * ordered like their values), then round between lo and lo + 1 by comparing
 * 2|x| with value(lo) + value(lo + 1): all three are exact in double (the
 * f32 input has 24 significant bits, the neighbours at most 11, and they
 * are within a factor of two of each other, or the input is far below the
 * smallest subnormal step, where no tie is possible).
 */
static uint16_t ref_encode(const struct fmt *f, float x)
{
	uint16_t sign = signbit(x) ? 0x8000 : 0;
	double d = fabs((double)x);
	uint16_t inf = exp_mask(f);
	uint16_t lo = 0, hi = inf, r;

	if (isinf(x) || d >= ref_value(f, inf))
		return sign | inf;
	/* Invariant: value(lo) <= d < value(hi). */
	while (hi - lo > 1) {
		uint16_t mid = (uint16_t)(lo + (hi - lo) / 2);

		if (ref_value(f, mid) <= d)
			lo = mid;
		else
			hi = mid;
	}
	if (ref_value(f, lo) == d) {
		r = lo;
	} else {
		double twice = 2.0 * d;
		double sum = ref_value(f, lo) + ref_value(f, hi);

		if (twice < sum)
			r = lo;
		else if (twice > sum)
			r = hi;
		else
			r = (lo & 1) ? hi : lo; /* tie: the even pattern */
	}
	return sign | r;
}

/* Every pattern: decode matches the definition, non-NaNs round-trip
 * bit-exactly, NaNs decode to NaN and encode back to some NaN. */
static void check_exhaustive(const struct fmt *f)
{
	uint32_t i;
	unsigned nans = 0;

	for (i = 0; i <= 0xffff; i++) {
		uint16_t h = (uint16_t)i;
		float v = f->dec(h);

		if (is_nan16(f, h)) {
			nans++;
			if (!isnan(v))
				fail_msg("%s %#06x decodes to %a, not NaN",
					 f->name, h, v);
			if (!is_nan16(f, f->enc(v)))
				fail_msg("%s %#06x: NaN re-encodes to %#06x",
					 f->name, h, f->enc(v));
			continue;
		}
		if ((double)v != ref_decode(f, h) ||
		    !!signbit(v) != !!(h & 0x8000))
			fail_msg("%s %#06x decodes to %a, expected %a", f->name,
				 h, v, ref_decode(f, h));
		if (f->enc(v) != h)
			fail_msg("%s %#06x -> %a -> %#06x", f->name, h, v,
				 f->enc(v));
	}
	/* 2 signs x (2^mant - 1) NaN payloads. */
	assert_int_equal(nans, 2 * ((1u << f->mant_bits) - 1));
}

static void test_f16_exhaustive(void **state)
{
	check_exhaustive(&f16);
}

static void test_bf16_exhaustive(void **state)
{
	check_exhaustive(&bf16);
}

static void check_one(const struct fmt *f, float x)
{
	uint16_t got = f->enc(x), want = ref_encode(f, x);

	if (got != want)
		fail_msg("%s(%a = %.9g, bits %#010x) = %#06x, expected %#06x",
			 f->name, x, x, f2u(x), got, want);
}

/*
 * For every pair of neighbouring non-negative patterns (including the last
 * finite one and infinity), the exact midpoint (a tie) and its f32
 * neighbours on both sides, with both signs. The midpoints are all exactly
 * representable in f32 (one more significant bit than the format has).
 */
static void check_midpoints(const struct fmt *f)
{
	uint16_t p;
	unsigned ties = 0;

	for (p = 0; p < exp_mask(f); p++) {
		double mid = (ref_value(f, p) + ref_value(f, p + 1)) / 2;
		float m = (float)mid;
		int s;

		assert_true((double)m == mid);
		for (s = 0; s < 2; s++) {
			float base = s ? -m : m;

			check_one(f, base);
			check_one(f, nextafterf(base, INFINITY));
			check_one(f, nextafterf(base, -INFINITY));
		}
		/* The tie goes to the even pattern. */
		assert_int_equal(f->enc(m), (p & 1) ? p + 1 : p);
		ties++;
	}
	assert_int_equal(ties, exp_mask(f));
}

static void test_f16_ties(void **state)
{
	check_midpoints(&f16);
}

static void test_bf16_ties(void **state)
{
	check_midpoints(&bf16);
}

/* Random f32 bit patterns (every class: normals, subnormals, huge, tiny),
 * plus random values spread over the f16 range. */
static void check_random(const struct fmt *f, uint64_t seed)
{
	struct tu_rng r;
	int i;

	tu_rng_seed(&r, seed);
	for (i = 0; i < 2000000; i++) {
		float x = u2f((uint32_t)tu_rng_next(&r));

		if (isnan(x)) {
			assert_true(is_nan16(f, f->enc(x)));
			continue;
		}
		check_one(f, x);
	}
	for (i = 0; i < 1000000; i++) {
		float x = (float)tu_rng_double(&r, -70000.0, 70000.0);

		check_one(f, x);
		check_one(f, x * 0x1p-20f); /* f16 subnormal territory */
	}
}

static void test_f16_random(void **state)
{
	check_random(&f16, 1);
}

static void test_bf16_random(void **state)
{
	check_random(&bf16, 2);
}

/* Named edge cases, spelled out so a failure reads plainly. */
static void test_f16_edges(void **state)
{
	/* Largest finite, and the overflow threshold 65520 (the midpoint to
	 * 65536: ties to even, and 0x7bff is odd, so it goes to infinity). */
	assert_int_equal(et_f32_to_f16(65504.0f), 0x7bff);
	assert_int_equal(et_f32_to_f16(65519.996f), 0x7bff);
	assert_int_equal(et_f32_to_f16(65520.0f), 0x7c00);
	assert_int_equal(et_f32_to_f16(1e10f), 0x7c00);
	assert_int_equal(et_f32_to_f16(-1e10f), 0xfc00);
	assert_int_equal(et_f32_to_f16(INFINITY), 0x7c00);
	assert_int_equal(et_f32_to_f16(-INFINITY), 0xfc00);
	assert_true(isinf(et_f16_to_f32(0x7c00)));
	assert_true(et_f16_to_f32(0xfc00) < 0);
	/* Signed zeros. */
	assert_int_equal(et_f32_to_f16(0.0f), 0x0000);
	assert_int_equal(et_f32_to_f16(-0.0f), 0x8000);
	assert_true(et_f16_to_f32(0x8000) == 0.0f);
	assert_true(signbit(et_f16_to_f32(0x8000)));
	assert_false(signbit(et_f16_to_f32(0x0000)));
	/* Subnormals: the smallest is 2^-24, the largest 1023 * 2^-24. */
	assert_true(et_f16_to_f32(0x0001) == 0x1p-24f);
	assert_true(et_f16_to_f32(0x03ff) == 1023 * 0x1p-24f);
	assert_true(et_f16_to_f32(0x0400) == 0x1p-14f);
	assert_int_equal(et_f32_to_f16(0x1p-24f), 0x0001);
	assert_int_equal(et_f32_to_f16(-0x1p-24f), 0x8001);
	assert_int_equal(et_f32_to_f16(3 * 0x1p-25f), 0x0002); /* tie, even */
	assert_int_equal(et_f32_to_f16(5 * 0x1p-25f), 0x0002); /* tie, even */
	assert_int_equal(et_f32_to_f16(0x1p-25f), 0x0000);     /* tie to zero */
	assert_int_equal(et_f32_to_f16(nextafterf(0x1p-25f, 1)), 0x0001);
	assert_int_equal(et_f32_to_f16(-0x1p-26f), 0x8000); /* keeps sign */
	assert_int_equal(et_f32_to_f16(0x1p-149f), 0x0000); /* f32 subnormal */
	/* Subnormal to normal carry: just below 2^-14 rounds up to it. */
	assert_int_equal(et_f32_to_f16(nextafterf(0x1p-14f, 0)), 0x0400);
	/* Mantissa carry into the exponent: 2047/1024 rounds to 2.0. */
	assert_int_equal(et_f32_to_f16(2.0f - 0x1p-12f), 0x4000);
	assert_int_equal(et_f32_to_f16(1.0f), 0x3c00);
	assert_int_equal(et_f32_to_f16(-2.0f), 0xc000);
	assert_int_equal(et_f32_to_f16(0.1f), 0x2e66);
	/* NaN stays NaN, quiet or signalling, either sign. */
	assert_true(is_nan16(&f16, et_f32_to_f16(NAN)));
	assert_true(is_nan16(&f16, et_f32_to_f16(-NAN)));
	assert_true(is_nan16(&f16, et_f32_to_f16(u2f(0x7f800001))));
	assert_true(is_nan16(&f16, et_f32_to_f16(u2f(0x7fc00000))));
	assert_true(isnan(et_f16_to_f32(0x7e00)));
	assert_true(isnan(et_f16_to_f32(0x7c01)));
}

static void test_bf16_edges(void **state)
{
	/* bf16 is the top half of an f32. */
	assert_true(f2u(et_bf16_to_f32(0x3f80)) == 0x3f800000);
	assert_true(f2u(et_bf16_to_f32(0x8001)) == 0x80010000);
	assert_int_equal(et_f32_to_bf16(1.0f), 0x3f80);
	assert_int_equal(et_f32_to_bf16(u2f(0x3f808000)), 0x3f80); /* tie */
	assert_int_equal(et_f32_to_bf16(u2f(0x3f818000)), 0x3f82); /* tie */
	assert_int_equal(et_f32_to_bf16(u2f(0x3f808001)), 0x3f81);
	assert_int_equal(et_f32_to_bf16(u2f(0x3f807fff)), 0x3f80);
	/* Overflow: the largest finite f32 rounds to infinity in bf16, the
	 * largest finite bf16 stays. */
	assert_int_equal(et_f32_to_bf16(u2f(0x7f7fffff)), 0x7f80);
	assert_int_equal(et_f32_to_bf16(u2f(0x7f7f0000)), 0x7f7f);
	assert_int_equal(et_f32_to_bf16(u2f(0x7f7f7fff)), 0x7f7f);
	assert_int_equal(et_f32_to_bf16(u2f(0x7f7f8000)), 0x7f80); /* tie */
	assert_int_equal(et_f32_to_bf16(-INFINITY), 0xff80);
	/* Signed zeros and subnormals (bf16 has the f32 exponent range). */
	assert_int_equal(et_f32_to_bf16(0.0f), 0x0000);
	assert_int_equal(et_f32_to_bf16(-0.0f), 0x8000);
	assert_true(signbit(et_bf16_to_f32(0x8000)));
	assert_int_equal(et_f32_to_bf16(u2f(0x00010000)), 0x0001);
	assert_int_equal(et_f32_to_bf16(u2f(0x00008000)), 0x0000); /* tie */
	assert_int_equal(et_f32_to_bf16(u2f(0x00018000)), 0x0002); /* tie */
	assert_int_equal(et_f32_to_bf16(u2f(0x80008001)), 0x8001);
	/* NaNs stay NaN, even those whose payload is only in the low half
	 * (a naive round-and-truncate turns 0x7f800001 into infinity). */
	assert_true(is_nan16(&bf16, et_f32_to_bf16(u2f(0x7f800001))));
	assert_true(is_nan16(&bf16, et_f32_to_bf16(u2f(0xff800001))));
	assert_true(is_nan16(&bf16, et_f32_to_bf16(u2f(0x7fffffff))));
	assert_true(is_nan16(&bf16, et_f32_to_bf16(NAN)));
	assert_true(isnan(et_bf16_to_f32(0x7fc0)));
}

static void test_dtype_meta(void **state)
{
	assert_int_equal(dtype_size(ET_F32), 4);
	assert_int_equal(dtype_size(ET_F16), 2);
	assert_int_equal(dtype_size(ET_BF16), 2);
	assert_int_equal(dtype_size((et_dtype)0), 0);
	assert_int_equal(dtype_size((et_dtype)4), 0);
	assert_int_equal(dtype_size((et_dtype)-1), 0);
}

/* dtype_encode / dtype_decode over arrays, at odd lengths and unaligned
 * starting points, agree element-wise with the scalar conversions and
 * touch nothing outside [0, n). */
static void check_array(et_dtype t, size_t n, size_t skew)
{
	struct tu_rng r;
	size_t sz = dtype_size(t), i;
	float *src = tu_calloc(n + 1, sizeof(float));
	float *back = tu_calloc(n + 2, sizeof(float));
	uint8_t *raw = tu_calloc(n * sz + 16 + skew, 1);
	uint8_t *dst = raw + skew;

	tu_rng_seed(&r, n * 31 + skew + t);
	for (i = 0; i < n; i++) {
		switch (i % 5) {
		case 0:
			src[i] = (float)tu_rng_double(&r, -2.0, 2.0);
			break;
		case 1:
			src[i] = (float)tu_rng_double(&r, -1e5, 1e5);
			break;
		case 2:
			src[i] = (float)tu_rng_double(&r, -1e-6, 1e-6);
			break;
		case 3:
			src[i] = i & 8 ? -0.0f : 0.0f;
			break;
		default:
			src[i] = u2f((uint32_t)tu_rng_next(&r) & 0x7f7fffff);
		}
	}
	memset(raw, 0xa5, n * sz + 16 + skew);
	dtype_encode(t, src, dst, n);
	for (i = n * sz; i < n * sz + 16; i++)
		assert_int_equal(dst[i], 0xa5);
	for (i = 0; i < skew; i++)
		assert_int_equal(raw[i], 0xa5);
	for (i = 0; i < n; i++) {
		uint16_t h;
		uint32_t u;

		switch (t) {
		case ET_F32:
			memcpy(&u, dst + 4 * i, 4);
			assert_int_equal(u, f2u(src[i]));
			break;
		case ET_F16:
			memcpy(&h, dst + 2 * i, 2);
			assert_int_equal(h, et_f32_to_f16(src[i]));
			break;
		case ET_BF16:
			memcpy(&h, dst + 2 * i, 2);
			assert_int_equal(h, et_f32_to_bf16(src[i]));
			break;
		}
	}
	back[n] = 12345.0f;
	dtype_decode(t, dst, back, n);
	assert_true(back[n] == 12345.0f);
	for (i = 0; i < n; i++) {
		float want;
		uint16_t h;

		switch (t) {
		case ET_F32:
			want = src[i];
			break;
		case ET_F16:
			memcpy(&h, dst + 2 * i, 2);
			want = et_f16_to_f32(h);
			break;
		default:
			memcpy(&h, dst + 2 * i, 2);
			want = et_bf16_to_f32(h);
			break;
		}
		if (f2u(back[i]) != f2u(want))
			fail_msg("%s[%zu]: decoded %a, expected %a",
				 t == ET_F32   ? "f32"
				 : t == ET_F16 ? "f16"
					       : "bf16",
				 i, back[i], want);
	}
	free(src);
	free(back);
	free(raw);
}

static void test_dtype_arrays(void **state)
{
	static const size_t lens[] = {0,  1,  2,  3,   7,    8,	  15,
				      16, 17, 64, 129, 1000, 4099};
	static const et_dtype types[] = {ET_F32, ET_F16, ET_BF16};
	size_t ti, li, skew;

	for (ti = 0; ti < 3; ti++)
		for (li = 0; li < sizeof(lens) / sizeof(lens[0]); li++)
			for (skew = 0; skew < 3; skew += 2)
				check_array(types[ti], lens[li], skew);
}

/*
 * The array conversions go four values at a time (simd.h) and must give
 * the scalar functions' bits: every half decoded, and encoded f32s made of
 * every high half with low halves around the rounding points of both
 * formats (ties, their neighbours, and the ends). (All 2^32 f32s were
 * compared once, outside the suite: a minute of CPU.)
 */
static void test_dtype_arrays_match_scalar(void **state)
{
	static const uint16_t lows[] = {0x0000, 0x0001, 0x0fff, 0x1000,
					0x1001, 0x1fff, 0x2000, 0x3000,
					0x7fff, 0x8000, 0x8001, 0xffff};
	enum { NL = sizeof(lows) / sizeof(lows[0]) };
	uint16_t *h = malloc(65536 * 2), *got = malloc(65536 * NL * 2);
	float *f = malloc(65536 * NL * sizeof(*f));

	assert_non_null(h);
	assert_non_null(got);
	assert_non_null(f);
	for (uint32_t i = 0; i < 65536; i++)
		h[i] = (uint16_t)i;
	dtype_decode(ET_F16, h, f, 65536);
	for (uint32_t i = 0; i < 65536; i++)
		assert_int_equal(f2u(f[i]), f2u(et_f16_to_f32(h[i])));
	dtype_decode(ET_BF16, h, f, 65536);
	for (uint32_t i = 0; i < 65536; i++)
		assert_int_equal(f2u(f[i]), f2u(et_bf16_to_f32(h[i])));
	for (uint32_t i = 0; i < 65536; i++)
		for (uint32_t l = 0; l < NL; l++)
			f[i * NL + l] = u2f(i << 16 | lows[l]);
	dtype_encode(ET_F16, f, got, 65536 * NL);
	for (uint32_t i = 0; i < 65536 * NL; i++)
		if (got[i] != et_f32_to_f16(f[i]))
			fail_msg("f16 array %#010x: %#06x, scalar %#06x",
				 f2u(f[i]), got[i], et_f32_to_f16(f[i]));
	dtype_encode(ET_BF16, f, got, 65536 * NL);
	for (uint32_t i = 0; i < 65536 * NL; i++)
		if (got[i] != et_f32_to_bf16(f[i]))
			fail_msg("bf16 array %#010x: %#06x, scalar %#06x",
				 f2u(f[i]), got[i], et_f32_to_bf16(f[i]));
	free(h);
	free(got);
	free(f);
}

/* f32 storage keeps every bit, NaN payloads included. */
static void test_dtype_f32_bits(void **state)
{
	static const uint32_t pats[] = {0x7fc00001, 0xffa00000, 0x80000000,
					0x00000001, 0x7f800000, 0x3f800000};
	float src[6], back[6];
	uint32_t raw[6];
	int i;

	for (i = 0; i < 6; i++)
		src[i] = u2f(pats[i]);
	dtype_encode(ET_F32, src, raw, 6);
	dtype_decode(ET_F32, raw, back, 6);
	for (i = 0; i < 6; i++) {
		assert_int_equal(raw[i], pats[i]);
		assert_int_equal(f2u(back[i]), pats[i]);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_f16_exhaustive),
	    cmocka_unit_test(test_bf16_exhaustive),
	    cmocka_unit_test(test_f16_ties),
	    cmocka_unit_test(test_bf16_ties),
	    cmocka_unit_test(test_f16_random),
	    cmocka_unit_test(test_bf16_random),
	    cmocka_unit_test(test_f16_edges),
	    cmocka_unit_test(test_bf16_edges),
	    cmocka_unit_test(test_dtype_meta),
	    cmocka_unit_test(test_dtype_arrays),
	    cmocka_unit_test(test_dtype_arrays_match_scalar),
	    cmocka_unit_test(test_dtype_f32_bits),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
