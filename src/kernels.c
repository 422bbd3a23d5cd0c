/*
 * kernels.c - the operations on resolved rows: gather and pooled gather
 * (decode, sum, mean), update and pooled update (gradients summed per
 * unique row, then SGD or row-wise Adagrad in place), and et_write_rows.
 */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "dtype.h"
#include "simd.h"
#include "error.h"
#include "store_impl.h"

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

/* o[c] += r[c] */
static inline void row_add(float *o, const float *r, uint32_t dim)
{
	uint32_t c = 0;

	for (; c + 2 * VLANES <= dim; c += 2 * VLANES) {
		vf4_store(o + c, vf4_load(o + c) + vf4_load(r + c));
		vf4_store(o + c + VLANES,
			  vf4_load(o + c + VLANES) + vf4_load(r + c + VLANES));
	}
	for (; c + VLANES <= dim; c += VLANES)
		vf4_store(o + c, vf4_load(o + c) + vf4_load(r + c));
	for (; c < dim; c++)
		o[c] += r[c];
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
static inline void row_set_div(float *o, const float *r, float d,
			       uint32_t dim)
{
	vf4 dv = vf4_splat(d);
	uint32_t c = 0;

	for (; c + VLANES <= dim; c += VLANES)
		vf4_store(o + c, vf4_load(r + c) / dv);
	for (; c < dim; c++)
		o[c] = r[c] / d;
}

/* o[c] += r[c] / d */
static inline void row_add_div(float *o, const float *r, float d,
			       uint32_t dim)
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

	for (; c + VLANES <= dim; c += VLANES)
		vf4_store(w + c, vf4_load(w + c) - mv * vf4_load(g + c));
	for (; c < dim; c++)
		w[c] -= mul * g[c];
}

/* Inputs [i0, i1) decoded into out (one row of dim each, from i0). */
static void kern_gather(const struct tf_geom *g, void *const *ptrs,
			const uint32_t *inv, size_t i0, size_t i1, float *out)
{
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
static void kern_pool(const struct tf_geom *g, void *const *ptrs,
		      const uint32_t *inv, const uint64_t *offsets, size_t b0,
		      size_t b1, et_pool mode, float *out, float *tmp)
{
	uint32_t dim = g->dim;
	size_t end = offsets[b1];

	for (size_t b = b0; b < b1; b++) {
		float *o = out + (b - b0) * dim;
		uint64_t len = offsets[b + 1] - offsets[b];

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
			row_add(o, r, dim);
		}
		if (mode == ET_POOL_MEAN && len)
			row_div(o, (float)len, dim);
	}
}

/*
 * Sums per-input gradients into one per unique row, in input order, for
 * the unique rows [u0, u1): acc holds their rows (from u0). With offsets
 * (a pooled backward), input i's gradient is its bag's, divided by the
 * bag's size for a mean. seen: one byte per unique row of the range.
 */
static void kern_accumulate(uint32_t dim, const uint32_t *inv, size_t n,
			    const float *grads, const uint64_t *offsets,
			    et_pool mode, size_t u0, size_t u1, float *acc,
			    uint8_t *seen)
{
	bool mean = offsets && mode == ET_POOL_MEAN;

	memset(seen, 0, u1 - u0);
	for (size_t b = 0, i = 0; i < n; i++) {
		size_t u = inv[i];
		float *a = acc + (u - u0) * dim;
		const float *gi;
		float div = 1.0f;

		if (offsets) {
			while (offsets[b + 1] <= i)
				b++;
			gi = grads + b * dim;
			if (mode == ET_POOL_MEAN)
				div = (float)(offsets[b + 1] - offsets[b]);
		} else {
			gi = grads + i * dim;
		}
		if (u < u0 || u >= u1)
			continue;
		if (!seen[u - u0]) {
			seen[u - u0] = 1;
			if (mean)
				row_set_div(a, gi, div, dim);
			else
				memcpy(a, gi, dim * sizeof(*a));
		} else if (mean) {
			row_add_div(a, gi, div, dim);
		} else {
			row_add(a, gi, dim);
		}
	}
}

/*
 * Applies the summed gradients acc (one row per unique, from u0) to the
 * unique rows [u0, u1).
 *
 * SGD:        w[c] -= lr * g[c]
 * Row-wise Adagrad (FBGEMM EXACT_ROWWISE_ADAGRAD):
 *             s   = sum over c of g[c] * g[c]   (f32, column order)
 *             m  += s / dim
 *             mul = lr / (sqrtf(m) + eps)
 *             w[c] -= mul * g[c]
 * Each w[c] is decoded from the storage type, updated in f32, and encoded
 * back (rounded to nearest even for f16/bf16).
 */
static void kern_apply(const struct tf_geom *g, void *const *ptrs, size_t u0,
		       size_t u1, const float *acc,
		       const struct et_update_params *up)
{
	float eps = up->eps ? up->eps : 1e-8f;
	float lr = up->lr;
	uint32_t dim = g->dim;
	float w[256];

	for (size_t i = u0; i < u1; i++) {
		char *row = ptrs[i];
		const float *gr = acc + (i - u0) * dim;
		float mul = lr;

		if (i + PREFETCH_AHEAD < u1)
			prefetch_bytes(ptrs[i + PREFETCH_AHEAD], g->row_bytes);
		if (g->optim == ET_OPT_ROWWISE_ADAGRAD) {
			float sum = 0, st;

			for (uint32_t c = 0; c < dim; c++)
				sum += gr[c] * gr[c];
			memcpy(&st, row + g->value_bytes, sizeof(st));
			st += sum / (float)dim;
			memcpy(row + g->value_bytes, &st, sizeof(st));
			mul = lr / (sqrtf(st) + eps);
		}
		if (g->dtype == ET_F32) {
			row_axpy((float *)row, mul, gr, dim); /* in place */
			continue;
		}
		/* decode, update, encode in pieces: no allocation */
		for (uint32_t c0 = 0; c0 < dim; c0 += 256) {
			uint32_t k = dim - c0 < 256 ? dim - c0 : 256;

			dtype_decode(g->dtype, row + c0 * 2, w, k);
			row_axpy(w, mul, gr + c0, k);
			dtype_encode(g->dtype, w, row + c0 * 2, k);
		}
	}
}

/* ------------------------------------------------------------ operations */

int et_gather(et_store *s, int table, const uint64_t *ids, size_t n, float *out)
{
	struct table *t;
	size_t m;
	int ret;

	err_clear();
	ret = op_begin(s, table, ids, n, &t);
	if (ret || n == 0)
		return ret;
	if (!out)
		return err_set(-EINVAL, "out is NULL");
	ret = op_prepare(s, t, ids, n, &m, false);
	if (ret)
		return ret;
	kern_gather(t->g, s->ptrs.p, s->inv.p, 0, n, out);
	return op_end(s, (uint32_t)table, false);
}

static int check_pool(et_pool mode)
{
	if (mode != ET_POOL_SUM && mode != ET_POOL_MEAN)
		return err_set(-EINVAL, "pool mode %d unknown", (int)mode);
	return 0;
}

static int check_offsets(const uint64_t *offsets, size_t nbags, size_t *n)
{
	if (!offsets)
		return err_set(-EINVAL, "offsets is NULL");
	if (offsets[0] != 0)
		return err_set(-EINVAL, "offsets[0] %llu, not 0",
			       (unsigned long long)offsets[0]);
	for (size_t b = 0; b < nbags; b++)
		if (offsets[b + 1] < offsets[b])
			return err_set(
			    -EINVAL, "offsets[%zu] %llu < offsets[%zu] %llu",
			    b + 1, (unsigned long long)offsets[b + 1], b,
			    (unsigned long long)offsets[b]);
	*n = offsets[nbags];
	return 0;
}

int et_gather_pooled(et_store *s, int table, const uint64_t *ids,
		     const uint64_t *offsets, size_t nbags, et_pool mode,
		     float *out)
{
	struct table *t;
	size_t n, m;
	int ret;

	err_clear();
	if (!s || !out)
		return err_set(-EINVAL, "%s is NULL", !s ? "s" : "out");
	ret = check_pool(mode);
	if (!ret)
		ret = check_offsets(offsets, nbags, &n);
	if (ret)
		return ret;
	ret = op_begin(s, table, ids, n, &t);
	if (ret)
		return ret;
	if (n) {
		ret = op_prepare(s, t, ids, n, &m, false);
		if (ret)
			return ret;
		ret = sbuf_reserve(&s->acc, t->g->dim * sizeof(float));
		if (ret) {
			op_end(s, (uint32_t)table, false);
			return ret;
		}
	}
	kern_pool(t->g, s->ptrs.p, s->inv.p, offsets, 0, nbags, mode, out,
		  s->acc.p);
	return n ? op_end(s, (uint32_t)table, false) : 0;
}

/* Marks the resolved rows of t dirty in whichever tier holds them. */
static void mark_dirty(et_store *s, const struct table *t, size_t m)
{
	const uint8_t *kind = s->kind.p;
	const uint64_t *slots = s->slots.p;
	struct sclass *cl = &s->cls[t->cls];

	for (size_t i = 0; i < m; i++) {
		switch (kind[i] & ~K_CONFLICT) {
		case K_HBM:
			cache_set_dirty(&cl->hbm, slots[i]);
			break;
		case K_DDR:
			cache_set_dirty(&cl->ddr, slots[i]);
			break;
		}
	}
}

static int update_common(et_store *s, int table, const uint64_t *ids, size_t n,
			 const float *grads, const uint64_t *offsets,
			 et_pool mode, const struct et_update_params *up)
{
	struct table *t;
	size_t m;
	int ret;

	if (!up)
		return err_set(-EINVAL, "up is NULL");
	if (!isfinite(up->lr))
		return err_set(-EINVAL, "up->lr %g not finite", up->lr);
	if (!isfinite(up->eps) || up->eps < 0)
		return err_set(-EINVAL, "up->eps %g not finite and >= 0",
			       up->eps);
	ret = op_begin(s, table, ids, n, &t);
	if (ret || n == 0)
		return ret;
	if (!grads)
		return err_set(-EINVAL, "%s is NULL",
			       offsets ? "bag_grads" : "grads");
	ret = dedup(s, ids, n, &m);
	if (ret)
		return ret;
	ret = sbuf_reserve(&s->acc, m * t->g->dim * sizeof(float) + m);
	if (ret)
		return ret;
	kern_accumulate(t->g->dim, s->inv.p, n, grads, offsets, mode, 0, m,
			s->acc.p, (uint8_t *)s->acc.p + m * t->g->dim * 4);
	ret = op_prepare(s, t, ids, n, &m, true);
	if (ret)
		return ret;
	kern_apply(t->g, s->ptrs.p, 0, m, s->acc.p, up);
	mark_dirty(s, t, m);
	return op_end(s, (uint32_t)table, true);
}

int et_update(et_store *s, int table, const uint64_t *ids, size_t n,
	      const float *grads, const struct et_update_params *up)
{
	err_clear();
	return update_common(s, table, ids, n, grads, NULL, ET_POOL_SUM, up);
}

int et_update_pooled(et_store *s, int table, const uint64_t *ids,
		     const uint64_t *offsets, size_t nbags, et_pool mode,
		     const float *bag_grads, const struct et_update_params *up)
{
	size_t n;
	int ret;

	err_clear();
	ret = check_pool(mode);
	if (!ret)
		ret = check_offsets(offsets, nbags, &n);
	if (ret)
		return ret;
	return update_common(s, table, ids, n, bag_grads, offsets, mode, up);
}

int et_write_rows(et_store *s, int table, const uint64_t *ids, size_t n,
		  const float *vals)
{
	struct table *t;
	size_t m;
	int ret;

	err_clear();
	ret = op_begin(s, table, ids, n, &t);
	if (ret || n == 0)
		return ret;
	if (!vals)
		return err_set(-EINVAL, "vals is NULL");
	ret = op_prepare(s, t, ids, n, &m, false);
	if (ret)
		return ret;
	{
		void *const *ptrs = s->ptrs.p;
		const uint32_t *last = s->last.p;
		uint32_t dim = t->g->dim;

		for (size_t i = 0; i < m; i++)
			dtype_encode(t->g->dtype, vals + (size_t)last[i] * dim,
				     ptrs[i], dim);
	}
	mark_dirty(s, t, m);
	return op_end(s, (uint32_t)table, true);
}
