/*
 * simd.h - four-lane vectors for the row kernels (kernels.c, dtype.c),
 * written with the GCC/Clang vector extension: portable C that compiles to
 * SSE2 on any x86-64 and to NEON on arm64, with no intrinsics. (kernels.c
 * also has eight-lane loops, which its AVX2 clones run as one operation.)
 *
 * Every operation is lane by lane: lane c of a + b is a[c] + b[c], rounded
 * once, as the scalar loop computes it (the build has -ffp-contract=off, so
 * no multiply-add is fused). A kernel written with these gives the same
 * bits as its scalar form; only sums across lanes would not, and none is
 * taken here.
 *
 * Loads and stores go through memcpy: rows in cache slots are aligned to 4
 * bytes only.
 */
#ifndef ET_SIMD_H
#define ET_SIMD_H

#include <stdint.h>
#include <string.h>

#define VLANES 4

typedef float vf4 __attribute__((vector_size(16)));
typedef uint32_t vu4 __attribute__((vector_size(16)));
typedef int32_t vi4 __attribute__((vector_size(16)));
typedef uint16_t vh4 __attribute__((vector_size(8)));

static inline vf4 vf4_load(const float *p)
{
	vf4 v;

	memcpy(&v, p, sizeof(v));
	return v;
}

static inline void vf4_store(float *p, vf4 v)
{
	memcpy(p, &v, sizeof(v));
}

static inline vf4 vf4_splat(float f)
{
	vf4 v = {f, f, f, f};

	return v;
}

static inline vu4 vu4_splat(uint32_t u)
{
	vu4 v = {u, u, u, u};

	return v;
}

/* Four storage halves (f16 or bf16 bits), widened to 32-bit lanes. */
static inline vu4 vh4_load_wide(const uint16_t *p)
{
	vh4 h;

	memcpy(&h, p, sizeof(h));
	return __builtin_convertvector(h, vu4);
}

/* The low halves of four 32-bit lanes, stored. */
static inline void vh4_store_narrow(uint16_t *p, vu4 v)
{
	vh4 h = __builtin_convertvector(v, vh4);

	memcpy(p, &h, sizeof(h));
}

/* m ? a : b, lane by lane, for a mask m of all-ones or zero lanes. */
static inline vu4 vu4_select(vi4 m, vu4 a, vu4 b)
{
	vu4 mu = (vu4)m;

	return (a & mu) | (b & ~mu);
}

/* The cache lines of bytes at p, asked for ahead of their use. */
static inline void prefetch_bytes(const void *p, uint32_t bytes)
{
	uintptr_t a = (uintptr_t)p & ~(uintptr_t)63;
	uintptr_t end = (uintptr_t)p + bytes;

	for (; a < end; a += 64)
		__builtin_prefetch((const void *)a);
}

#endif
