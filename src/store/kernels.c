/*
 * kernels.c - the operations on resolved rows: gather and pooled gather
 * (decode, sum, mean), update and pooled update (gradients summed per
 * unique row, then SGD or row-wise Adagrad in place), and et_write_rows.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "dtype.h"
#include "simd.h"
#include "kernels.h"

/* ---------------------------------------------------------- row kernels */

/*
 * The row kernels work on resolved rows (ptrs: each unique row's bytes in
 * its slot; inv: each input's unique index) and nothing else of the store,
 * so that disjoint parts of them may run on several threads.
 *
 * Rows are visited in input order after their addresses are known: asking
 * for every cache line of the row this many inputs ahead keeps several
 * DRAM misses in flight instead of one row's at a time. Arithmetic is lane
 * by lane (simd.h), so each output value is computed by the same
 * operations in the same order as the plain scalar loop.
 */
#define PREFETCH_AHEAD 16
/* An update reads and writes each row: fewer rows ahead leave the line
 * fill buffers to its misses and write-backs (the torch benchmark's shape
 * B, 512-byte rows: 4 ahead took about 3% less time than 16 at 1 thread,
 * 7% at 2; shape A, 256-byte Zipf rows, within the noise). */
#define UPD_AHEAD 4

/* The kernels are built twice on x86-64, for AVX2 and for any CPU, and
 * the loader picks one (an ifunc). Not under ThreadSanitizer, whose
 * runtime is not up yet when the loader runs an ifunc's resolver. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) &&         \
    !defined(__SANITIZE_THREAD__)
#define KERN_CLONES __attribute__((target_clones("avx2", "default")))
#else
#define KERN_CLONES
#endif

/* The rows a kernel's range starts with, asked for at once: the loop
 * asks `ahead` inputs ahead, so the first ones of each range
 * (an item of a multi-table call is 32 bags or 64 rows) would otherwise
 * be read one miss at a time. idx: each input's row index (NULL: i). */
static inline void prefetch_first(void *const *ptrs, const uint32_t *idx,
				  size_t i0, size_t i1, uint32_t bytes,
				  size_t ahead)
{
	for (size_t i = i0; i < i1 && i < i0 + ahead; i++)
		prefetch_bytes(ptrs[idx ? idx[i] : i], bytes);
}

/* Eight lanes at once: two SSE operations each in a generic build, one
 * AVX2 operation in the kernels' AVX2 clones (KERN_CLONES). Lane by lane
 * all the same, so the bits do not depend on which runs. */
typedef float vf8 __attribute__((vector_size(32)));

/* o[c] += r[c] */
static inline void row_add(float *o, const float *r, uint32_t dim)
{
	uint32_t c = 0;

	for (; c + 8 <= dim; c += 8) {
		vf8 a, b;

		memcpy(&a, o + c, sizeof(a));
		memcpy(&b, r + c, sizeof(b));
		a += b;
		memcpy(o + c, &a, sizeof(a));
	}
	for (; c + VLANES <= dim; c += VLANES)
		vf4_store(o + c, vf4_load(o + c) + vf4_load(r + c));
	for (; c < dim; c++)
		o[c] += r[c];
}

/* o[c] = 0 + r[c]: the first row of a sum from zero, in one pass (the
 * same bits as zeroing o and adding r: -0 becomes +0) */
static inline void row_first(float *o, const float *r, uint32_t dim)
{
	vf4 z = vf4_splat(0.0f);
	uint32_t c = 0;

	for (; c + 8 <= dim; c += 8) {
		vf8 a, zero = {0};

		memcpy(&a, r + c, sizeof(a));
		a = zero + a;
		memcpy(o + c, &a, sizeof(a));
	}
	for (; c + VLANES <= dim; c += VLANES)
		vf4_store(o + c, z + vf4_load(r + c));
	for (; c < dim; c++)
		o[c] = 0.0f + r[c];
}

/* o[c] /= d */
static inline void row_div(float *o, float d, uint32_t dim)
{
	vf4 dv = vf4_splat(d);
	uint32_t c = 0;

	for (; c + VLANES <= dim; c += VLANES)
		vf4_store(o + c, vf4_load(o + c) / dv);
	for (; c < dim; c++)
		o[c] /= d;
}

/* o[c] = r[c] / d */
static inline void row_set_div(float *o, const float *r, float d, uint32_t dim)
{
	vf4 dv = vf4_splat(d);
	uint32_t c = 0;

	for (; c + VLANES <= dim; c += VLANES)
		vf4_store(o + c, vf4_load(r + c) / dv);
	for (; c < dim; c++)
		o[c] = r[c] / d;
}

/* o[c] += r[c] / d */
static inline void row_add_div(float *o, const float *r, float d, uint32_t dim)
{
	vf4 dv = vf4_splat(d);
	uint32_t c = 0;

	for (; c + VLANES <= dim; c += VLANES)
		vf4_store(o + c, vf4_load(o + c) + vf4_load(r + c) / dv);
	for (; c < dim; c++)
		o[c] += r[c] / d;
}

/* w[c] -= mul * g[c] */
static inline void row_axpy(float *w, float mul, const float *g, uint32_t dim)
{
	vf4 mv = vf4_splat(mul);
	uint32_t c = 0;

	for (; c + 8 <= dim; c += 8) {
		vf8 a, b, m8 = {mul, mul, mul, mul, mul, mul, mul, mul};

		memcpy(&a, w + c, sizeof(a));
		memcpy(&b, g + c, sizeof(b));
		a -= m8 * b;
		memcpy(w + c, &a, sizeof(a));
	}
	for (; c + VLANES <= dim; c += VLANES)
		vf4_store(w + c, vf4_load(w + c) - mv * vf4_load(g + c));
	for (; c < dim; c++)
		w[c] -= mul * g[c];
}

/* Inputs [i0, i1) decoded into out (one row of dim each, from i0). */
void kern_gather(const struct tf_geom *g, void *const *ptrs,
		 const uint32_t *inv, size_t i0, size_t i1, float *out)
{
	prefetch_first(ptrs, inv, i0, i1, g->value_bytes, PREFETCH_AHEAD);
	for (size_t i = i0; i < i1; i++) {
		if (i + PREFETCH_AHEAD < i1)
			prefetch_bytes(ptrs[inv[i + PREFETCH_AHEAD]],
				       g->value_bytes);
		dtype_decode(g->dtype, ptrs[inv[i]], out + (i - i0) * g->dim,
			     g->dim);
	}
}

/*
 * Bags [b0, b1) into out (one row of dim each, from b0): each bag's rows
 * added in id order in f32 from zero, then divided by the bag's size for a
 * mean. tmp holds one decoded row (f16, bf16).
 */
static KERN_CLONES void pool_bags(const struct tf_geom *g, void *const *ptrs,
				  const uint32_t *inv, const uint64_t *offsets,
				  size_t b0, size_t b1, et_pool mode,
				  float *out, float *tmp)
{
	uint32_t dim = g->dim;
	size_t end = offsets[b1];

	prefetch_first(ptrs, inv, offsets[b0], end, g->value_bytes,
		       PREFETCH_AHEAD);
	for (size_t b = b0; b < b1; b++) {
		float *o = out + (b - b0) * dim;
		uint64_t len = offsets[b + 1] - offsets[b];

		if (!len)
			memset(o, 0, dim * sizeof(*o));
		for (uint64_t i = offsets[b]; i < offsets[b + 1]; i++) {
			const float *r = tmp;

			if (i + PREFETCH_AHEAD < end)
				prefetch_bytes(ptrs[inv[i + PREFETCH_AHEAD]],
					       g->value_bytes);
			if (g->dtype == ET_F32)
				r = ptrs[inv[i]]; /* no copy needed */
			else
				dtype_decode(g->dtype, ptrs[inv[i]], tmp, dim);
			if (i == offsets[b])
				row_first(o, r, dim);
			else
				row_add(o, r, dim);
		}
		if (mode == ET_POOL_MEAN && len)
			row_div(o, (float)len, dim);
	}
}

void kern_pool(const struct tf_geom *g, void *const *ptrs, const uint32_t *inv,
	       const uint64_t *offsets, size_t b0, size_t b1, et_pool mode,
	       float *out, float *tmp)
{
	pool_bags(g, ptrs, inv, offsets, b0, b1, mode, out, tmp);
}

/*
 * The inputs of each unique row, for the update: a stable counting sort of
 * the inputs by unique index. list[start[u] .. start[u + 1]) are the
 * gradient rows of unique u's inputs in input order: the input's own row,
 * or with offsets (a pooled backward) its bag's. list and start live in
 * acc: n + m + 1 u32.
 */
void kern_group(const uint32_t *inv, size_t n, size_t m,
		const uint64_t *offsets, uint32_t *list, uint32_t *start)
{
	memset(start, 0, (m + 1) * sizeof(*start));
	for (size_t i = 0; i < n; i++)
		start[inv[i] + 1]++;
	for (size_t u = 0; u < m; u++)
		start[u + 1] += start[u];
	for (size_t b = 0, i = 0; i < n; i++) {
		if (offsets)
			while (offsets[b + 1] <= i)
				b++;
		list[start[inv[i]]++] = (uint32_t)(offsets ? b : i);
	}
	for (size_t u = m; u > 0; u--) /* back to the starts */
		start[u] = start[u - 1];
	start[0] = 0;
}

/* Unique rows an update takes together: their sums of squares (row-wise
 * Adagrad) are independent chains of dependent adds, which run side by
 * side when interleaved. */
#define UPD_GROUP KERN_UPD_ROWS

/* Unique row i's gradient, summed in input order into gsum (see
 * kern_update). */
static void grad_sum(size_t i, const uint32_t *list, const uint32_t *start,
		     const float *grads, const uint64_t *offsets, bool mean,
		     uint32_t dim, float *gsum)
{
	for (uint32_t j = start[i]; j < start[i + 1]; j++) {
		const float *gi = grads + (size_t)list[j] * dim;
		float div =
		    mean ? (float)(offsets[list[j] + 1] - offsets[list[j]])
			 : 1.0f;

		if (j == start[i] && mean)
			row_set_div(gsum, gi, div, dim);
		else if (j == start[i])
			memcpy(gsum, gi, dim * sizeof(*gsum));
		else if (mean)
			row_add_div(gsum, gi, div, dim);
		else
			row_add(gsum, gi, dim);
	}
}

/* sum[r] = the sum over c of g[c]^2 of the k rows at gsum (dim apart), in
 * column order from zero: for a full group, the k chains interleaved. */
static void sq_sums(const float *gsum, size_t k, uint32_t dim, float *sum)
{
	if (k == UPD_GROUP) {
		float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
		const float *g0 = gsum, *g1 = g0 + dim, *g2 = g1 + dim,
			    *g3 = g2 + dim;

		for (uint32_t c = 0; c < dim; c++) {
			s0 += g0[c] * g0[c];
			s1 += g1[c] * g1[c];
			s2 += g2[c] * g2[c];
			s3 += g3[c] * g3[c];
		}
		sum[0] = s0;
		sum[1] = s1;
		sum[2] = s2;
		sum[3] = s3;
		return;
	}
	for (size_t r = 0; r < k; r++) {
		const float *g = gsum + r * dim;
		float sr = 0;

		for (uint32_t c = 0; c < dim; c++)
			sr += g[c] * g[c];
		sum[r] = sr;
	}
}

/*
 * Sums the gradients of unique rows [u0, u1) and applies them to the rows,
 * UPD_GROUP rows at a time. A row's gradients are summed in input order
 * in f32 (the first assigned, the others added; for a pooled mean each is
 * its bag's divided by the bag's size), then:
 *
 * SGD:        w[c] -= lr * g[c]
 * Row-wise Adagrad (FBGEMM EXACT_ROWWISE_ADAGRAD):
 *             s   = sum over c of g[c] * g[c]   (f32, column order)
 *             m  += s / dim
 *             mul = lr / (sqrtf(m) + eps)
 *             w[c] -= mul * g[c]
 * Each w[c] is decoded from the storage type, updated in f32, and encoded
 * back (rounded to nearest even for f16/bf16). Rows are distinct, so
 * taking several together changes no value. gsum holds UPD_GROUP rows of
 * dim.
 */
static KERN_CLONES void
update_rows(const struct tf_geom *g, void *const *ptrs, const uint32_t *sel,
	    size_t u0, size_t u1, const uint32_t *list, const uint32_t *start,
	    const float *grads, const uint64_t *offsets, et_pool mode,
	    const struct et_update_params *up, float *gsum)
{
	bool mean = offsets && mode == ET_POOL_MEAN;
	float eps = up->eps ? up->eps : 1e-8f;
	float lr = up->lr;
	uint32_t dim = g->dim;
	float w[256], sum[UPD_GROUP];

	prefetch_first(ptrs, sel, u0, u1, g->row_bytes, UPD_AHEAD);
	for (size_t i0 = u0; i0 < u1; i0 += UPD_GROUP) {
		size_t k = u1 - i0 < UPD_GROUP ? u1 - i0 : UPD_GROUP;

		for (size_t r = 0; r < k; r++) {
			size_t i = i0 + r;

			if (i + UPD_AHEAD < u1)
				prefetch_bytes(ptrs[sel ? sel[i + UPD_AHEAD]
							: i + UPD_AHEAD],
					       g->row_bytes);
			grad_sum(sel ? sel[i] : i, list, start, grads, offsets,
				 mean, dim, gsum + r * dim);
		}
		if (g->optim == ET_OPT_ROWWISE_ADAGRAD)
			sq_sums(gsum, k, dim, sum);
		for (size_t r = 0; r < k; r++) {
			char *row = ptrs[sel ? sel[i0 + r] : i0 + r];
			const float *gr = gsum + r * dim;
			float mul = lr;

			if (g->optim == ET_OPT_ROWWISE_ADAGRAD) {
				float st;

				memcpy(&st, row + g->value_bytes, sizeof(st));
				st += sum[r] / (float)dim;
				memcpy(row + g->value_bytes, &st, sizeof(st));
				mul = lr / (sqrtf(st) + eps);
			}
			if (g->dtype == ET_F32) {
				row_axpy((float *)row, mul, gr, dim);
				continue;
			}
			/* decode, update, encode in pieces: no allocation */
			for (uint32_t c0 = 0; c0 < dim; c0 += 256) {
				uint32_t n = dim - c0 < 256 ? dim - c0 : 256;

				dtype_decode(g->dtype, row + c0 * 2, w, n);
				row_axpy(w, mul, gr + c0, n);
				dtype_encode(g->dtype, w, row + c0 * 2, n);
			}
		}
	}
}

void kern_update(const struct tf_geom *g, void *const *ptrs, size_t u0,
		 size_t u1, const uint32_t *list, const uint32_t *start,
		 const float *grads, const uint64_t *offsets, et_pool mode,
		 const struct et_update_params *up, float *gsum)
{
	update_rows(g, ptrs, NULL, u0, u1, list, start, grads, offsets, mode,
		    up, gsum);
}

void kern_update_sel(const struct tf_geom *g, void *const *ptrs,
		     const uint32_t *sel, size_t j0, size_t j1,
		     const uint32_t *list, const uint32_t *start,
		     const float *grads, const uint64_t *offsets, et_pool mode,
		     const struct et_update_params *up, float *gsum)
{
	update_rows(g, ptrs, sel, j0, j1, list, start, grads, offsets, mode, up,
		    gsum);
}
