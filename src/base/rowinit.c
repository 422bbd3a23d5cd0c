/*
 * rowinit.c - deterministic initial values of rows never written.
 *
 * Row r of a table with seed s starts a counter-based stream at
 * base = XXH3(r; seed s); its column c draws hash_mix(base + c), a 64-bit
 * word no other (s, r, c) shares in practice. Uniform values take the top
 * 24 bits as a fraction (exact in f32); normal values pair two such words
 * through Box-Muller. Nothing here keeps state: the value of a row is the
 * same whenever it is computed, in whatever order. Any thread.
 */
#include <math.h>
#include <string.h>

#include "hash.h"
#include "rowinit.h"

/* A uniform draw in [0, 1) with 24 significant bits. */
static inline float unit24(uint64_t w)
{
	return (float)(w >> 40) * (1.0f / 16777216.0f);
}

/* Built for AVX-512, AVX2 and any CPU on x86-64, the loader picking one
 * (as the row kernels are; see kernels.c). */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) &&         \
    !defined(__SANITIZE_THREAD__)
#define INIT_CLONES                                                            \
	__attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#else
#define INIT_CLONES
#endif

typedef uint64_t vq8 __attribute__((vector_size(64)));
typedef int32_t vi8 __attribute__((vector_size(32)));
typedef float vf8 __attribute__((vector_size(32)));

/* Uniform columns col0.. col0 + n - 1 of the stream at base, eight at a
 * time: hash_mix lane by lane, and the same float operations as the
 * scalar tail (unit24's top 24 bits fit an int32 exactly, so converting
 * through it gives the same float), so every value is bit for bit the
 * scalar one. */
INIT_CLONES static void fill_uniform(uint64_t base, uint32_t col0, uint32_t n,
				     float scale, float *out)
{
	const vq8 lane = {0, 1, 2, 3, 4, 5, 6, 7};
	uint32_t c = 0;

	for (; c + 8 <= n; c += 8) {
		vq8 x = base + col0 + c + lane;
		vf8 u, v;

		x += 0x9e3779b97f4a7c15ULL;
		x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
		x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
		x ^= x >> 31;
		u = __builtin_convertvector(
			__builtin_convertvector(x >> 40, vi8), vf8) *
		    (1.0f / 16777216.0f);
		v = (2.0f * u - 1.0f) * scale;
		memcpy(out + c, &v, sizeof(v));
	}
	for (; c < n; c++) {
		float u = unit24(hash_mix(base + col0 + c));

		out[c] = (2.0f * u - 1.0f) * scale;
	}
}

void rowinit_fill(et_init init, float scale, uint64_t seed, uint64_t row,
		  uint32_t dim, float *out)
{
	rowinit_fill_cols(init, scale, seed, row, 0, dim, out);
}

void rowinit_fill_cols(et_init init, float scale, uint64_t seed, uint64_t row,
		       uint32_t col0, uint32_t n, float *out)
{
	uint64_t base;
	uint32_t c;

	if (init == ET_INIT_ZEROS) {
		memset(out, 0, (size_t)n * sizeof(*out));
		return;
	}
	base = hash_u64(row, seed);
	if (init == ET_INIT_UNIFORM) {
		fill_uniform(base, col0, n, scale, out);
		return;
	}
	/* Normal: Box-Muller on two words per column (no pairing across
	 * columns, so column c never depends on dim). */
	for (c = 0; c < n; c++) {
		uint64_t w = hash_mix(base + col0 + c);
		double u1 =
		    ((double)(w >> 11) + 1.0) * (1.0 / 9007199254740993.0);
		double u2 =
		    (double)(hash_mix(w) >> 11) * (1.0 / 9007199254740992.0);
		double z = sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
		out[c] = (float)(z * scale);
	}
}
