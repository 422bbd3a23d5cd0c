/*
 * dtype.c - f32 <-> f16 / bf16 conversion.
 *
 * Both conversions round to nearest, ties to even, as IEEE 754 does by
 * default, and keep NaNs NaN (quiet). They are written out in integer
 * arithmetic so that the result does not depend on the compiler's or the
 * CPU's handling of half precision. Pure functions, any thread.
 *
 * dtype_encode and dtype_decode convert four values at a time with the
 * same arithmetic lane by lane (simd.h): every case of the scalar form is
 * computed for all lanes and the right one selected, so the bits are the
 * scalar functions' (tests/test_dtype.c compares them).
 */
#include <string.h>

#include "dtype.h"
#include "simd.h"

/*
 * bf16 is the top half of an f32: round the low 16 bits away, to nearest
 * even. Adding 0x7fff plus the lowest kept bit does exactly that; a carry
 * into the exponent rounds up to the next binade or to infinity, which is
 * the right answer.
 */
uint16_t et_f32_to_bf16(float f)
{
	uint32_t u = f32_bits(f);

	if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep sign, force quiet */
		return (uint16_t)((u >> 16) | 0x0040u);
	u += 0x7fffu + ((u >> 16) & 1u);
	return (uint16_t)(u >> 16);
}

float et_bf16_to_f32(uint16_t h)
{
	return bits_f32((uint32_t)h << 16);
}

/*
 * f16: 1 sign, 5 exponent (bias 15), 10 mantissa bits. An f32 of magnitude
 *
 *   >= 65520            rounds to infinity
 *   [2^-14, 65520)      is a normal f16: drop 13 mantissa bits, rounding
 *   [2^-25, 2^-14)      is a subnormal f16: shift the implicit-1 mantissa
 *                       right by the exponent deficit, rounding
 *   < 2^-25 (or = 2^-25 exactly: a tie, to even zero) becomes zero
 *
 * Rounding is done on the integer mantissa: add half an ulp minus one, plus
 * the lowest kept bit, then shift. A carry out of the mantissa bumps the
 * exponent, again the right answer.
 */
uint16_t et_f32_to_f16(float f)
{
	uint32_t u = f32_bits(f);
	uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
	uint32_t a = u & 0x7fffffffu;

	if (a > 0x7f800000u) /* NaN */
		return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
	if (a >= 0x477ff000u) /* >= 65520: rounds to inf (also inf itself) */
		return (uint16_t)(sign | 0x7c00u);
	if (a >= 0x38800000u) { /* >= 2^-14: normal */
		uint32_t r = a + 0xfffu + ((a >> 13) & 1u);
		return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
	}
	if (a <= 0x33000000u) /* <= 2^-25: zero (2^-25 is a tie, to even 0) */
		return sign;
	{
		uint32_t e = a >> 23; /* 102 .. 112 */
		uint32_t m = (a & 0x7fffffu) | 0x800000u;
		uint32_t shift = 126u - e; /* 14 .. 24 */
		uint32_t half = 1u << (shift - 1);
		uint32_t r = (m + half - 1u + ((m >> shift) & 1u)) >> shift;
		return (uint16_t)(sign | r);
	}
}

float et_f16_to_f32(uint16_t h)
{
	uint32_t sign = ((uint32_t)h & 0x8000u) << 16;
	uint32_t e = (h >> 10) & 0x1fu;
	uint32_t m = h & 0x3ffu;

	if (e == 0x1f) /* inf or NaN */
		return bits_f32(sign | 0x7f800000u | (m << 13));
	if (e != 0)
		return bits_f32(sign | ((e + 112u) << 23) | (m << 13));
	if (m == 0)
		return bits_f32(sign);
	/* subnormal: m * 2^-24, exact in f32 */
	{
		float v = (float)m * (1.0f / 16777216.0f);
		return sign ? -v : v;
	}
}

size_t dtype_size(et_dtype t)
{
	switch (t) {
	case ET_F32:
		return 4;
	case ET_F16:
	case ET_BF16:
		return 2;
	}
	return 0;
}

/* Four f16s to f32, as et_f16_to_f32 does each. */
static inline void f16x4_decode(const uint16_t *h, float *dst)
{
	vu4 x = vh4_load_wide(h);
	vu4 sign = (x & vu4_splat(0x8000u)) << 16;
	vu4 e = (x >> 10) & vu4_splat(0x1fu);
	vu4 m = x & vu4_splat(0x3ffu);
	vu4 normal = sign | ((e + vu4_splat(112u)) << 23) | (m << 13);
	vu4 special = sign | vu4_splat(0x7f800000u) | (m << 13);
	vf4 sub = __builtin_convertvector((vi4)m, vf4) *
		  vf4_splat(1.0f / 16777216.0f);
	vu4 r =
	    vu4_select(e == vu4_splat(0x1fu), special,
		       vu4_select(e != vu4_splat(0u), normal, (vu4)sub | sign));

	memcpy(dst, &r, sizeof(r));
}

/* Four f32s to f16, as et_f32_to_f16 does each. */
static inline void f16x4_encode(const float *src, uint16_t *h)
{
	vu4 u, sign, a, nan, inf, normal, sub, r;
	vi4 is_sub;

	memcpy(&u, src, sizeof(u));
	sign = (u >> 16) & vu4_splat(0x8000u);
	a = u & vu4_splat(0x7fffffffu);
	nan = sign | vu4_splat(0x7e00u) | ((a >> 13) & vu4_splat(0x3ffu));
	inf = sign | vu4_splat(0x7c00u);
	normal = a + vu4_splat(0xfffu) + ((a >> 13) & vu4_splat(1u));
	normal = sign | ((normal - vu4_splat(0x38000000u)) >> 13);
	is_sub = (a > vu4_splat(0x33000000u)) & (a < vu4_splat(0x38800000u));
	{
		/* exponent 102 .. 112 in the subnormal lanes; the others
		 * shift by 14, any valid count, and are not selected */
		vu4 shift = vu4_select(is_sub, vu4_splat(126u) - (a >> 23),
				       vu4_splat(14u));
		vu4 m = (a & vu4_splat(0x7fffffu)) | vu4_splat(0x800000u);
		vu4 half = vu4_splat(1u) << (shift - vu4_splat(1u));

		sub = sign | ((m + half - vu4_splat(1u) +
			       ((m >> shift) & vu4_splat(1u))) >>
			      shift);
	}
	r = vu4_select(is_sub, sub, sign); /* else zero */
	r = vu4_select(a >= vu4_splat(0x38800000u), normal, r);
	r = vu4_select(a >= vu4_splat(0x477ff000u), inf, r);
	r = vu4_select(a > vu4_splat(0x7f800000u), nan, r);
	vh4_store_narrow(h, r);
}

/* Four bf16s to f32. */
static inline void bf16x4_decode(const uint16_t *h, float *dst)
{
	vu4 r = vh4_load_wide(h) << 16;

	memcpy(dst, &r, sizeof(r));
}

/* Four f32s to bf16, as et_f32_to_bf16 does each. */
static inline void bf16x4_encode(const float *src, uint16_t *h)
{
	vu4 u, nan, r;

	memcpy(&u, src, sizeof(u));
	nan = (u >> 16) | vu4_splat(0x0040u);
	r = (u + vu4_splat(0x7fffu) + ((u >> 16) & vu4_splat(1u))) >> 16;
	r = vu4_select((u & vu4_splat(0x7fffffffu)) > vu4_splat(0x7f800000u),
		       nan, r);
	vh4_store_narrow(h, r);
}

void dtype_encode(et_dtype t, const float *src, void *dst, size_t n)
{
	uint16_t *h = dst;
	size_t i = 0;

	switch (t) {
	case ET_F32:
		memcpy(dst, src, n * sizeof(*src));
		break;
	case ET_F16:
		for (; i + VLANES <= n; i += VLANES)
			f16x4_encode(src + i, h + i);
		for (; i < n; i++)
			h[i] = et_f32_to_f16(src[i]);
		break;
	case ET_BF16:
		for (; i + VLANES <= n; i += VLANES)
			bf16x4_encode(src + i, h + i);
		for (; i < n; i++)
			h[i] = et_f32_to_bf16(src[i]);
		break;
	}
}

void dtype_decode(et_dtype t, const void *src, float *dst, size_t n)
{
	const uint16_t *h = src;
	size_t i = 0;

	switch (t) {
	case ET_F32:
		memcpy(dst, src, n * sizeof(*dst));
		break;
	case ET_F16:
		for (; i + VLANES <= n; i += VLANES)
			f16x4_decode(h + i, dst + i);
		for (; i < n; i++)
			dst[i] = et_f16_to_f32(h[i]);
		break;
	case ET_BF16:
		for (; i + VLANES <= n; i += VLANES)
			bf16x4_decode(h + i, dst + i);
		for (; i < n; i++)
			dst[i] = et_bf16_to_f32(h[i]);
		break;
	}
}
