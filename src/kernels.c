/*
 * kernels.c - the operations on resolved rows: gather and pooled gather
 * (decode, sum, mean), update and pooled update (gradients summed per
 * unique row, then SGD or row-wise Adagrad in place), and et_write_rows.
 */
#include <errno.h>
#include <math.h>
#include <string.h>

#include "dtype.h"
#include "error.h"
#include "store_impl.h"

/* ------------------------------------------------------------ operations */

/* Rows are touched in id order after their addresses are known: asking the
 * memory system for a row this many ids ahead hides most of its latency. */
#define PREFETCH_AHEAD 8

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
	{
		void *const *ptrs = s->ptrs.p;
		const uint32_t *inv = s->inv.p;
		uint32_t dim = t->g->dim;

		for (size_t i = 0; i < n; i++) {
			if (i + PREFETCH_AHEAD < n)
				__builtin_prefetch(
				    ptrs[inv[i + PREFETCH_AHEAD]]);
			dtype_decode(t->g->dtype, ptrs[inv[i]], out + i * dim,
				     dim);
		}
	}
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
	{
		void *const *ptrs = s->ptrs.p;
		const uint32_t *inv = s->inv.p;
		uint32_t dim = t->g->dim;
		float *row = s->acc.p;

		/* Bag b: rows added in id order in f32, then divided by
		 * the bag's size for a mean. */
		for (size_t b = 0; b < nbags; b++) {
			float *o = out + b * dim;
			uint64_t len = offsets[b + 1] - offsets[b];

			memset(o, 0, dim * sizeof(*o));
			for (uint64_t i = offsets[b]; i < offsets[b + 1]; i++) {
				const float *r = row;

				if (i + PREFETCH_AHEAD < n)
					__builtin_prefetch(
					    ptrs[inv[i + PREFETCH_AHEAD]]);
				if (t->g->dtype == ET_F32)
					r = ptrs[inv[i]]; /* no copy needed */
				else
					dtype_decode(t->g->dtype, ptrs[inv[i]],
						     row, dim);
				for (uint32_t c = 0; c < dim; c++)
					o[c] += r[c];
			}
			if (mode == ET_POOL_MEAN && len)
				for (uint32_t c = 0; c < dim; c++)
					o[c] /= (float)len;
		}
	}
	return n ? op_end(s, (uint32_t)table, false) : 0;
}

/*
 * Applies the summed gradients acc (m x dim) to the resolved rows.
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
static void apply(et_store *s, struct table *t, size_t m, const float *acc,
		  const struct et_update_params *up)
{
	void *const *ptrs = s->ptrs.p;
	const struct tf_geom *g = t->g;
	float eps = up->eps ? up->eps : 1e-8f;
	float lr = up->lr;
	float w[256];

	for (size_t i = 0; i < m; i++) {
		char *row = ptrs[i];
		const float *gr = acc + i * g->dim;
		float mul = lr;

		if (g->optim == ET_OPT_ROWWISE_ADAGRAD) {
			float sum = 0, st;

			for (uint32_t c = 0; c < g->dim; c++)
				sum += gr[c] * gr[c];
			memcpy(&st, row + g->value_bytes, sizeof(st));
			st += sum / (float)g->dim;
			memcpy(row + g->value_bytes, &st, sizeof(st));
			mul = lr / (sqrtf(st) + eps);
		}
		/* decode, update, encode in pieces: no allocation */
		for (uint32_t c0 = 0; c0 < g->dim; c0 += 256) {
			uint32_t k = g->dim - c0 < 256 ? g->dim - c0 : 256;
			size_t es = dtype_size(g->dtype);

			dtype_decode(g->dtype, row + c0 * es, w, k);
			for (uint32_t c = 0; c < k; c++)
				w[c] -= mul * gr[c0 + c];
			dtype_encode(g->dtype, w, row + c0 * es, k);
		}
	}
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

/* Sums per-input gradients into one per unique row, in input order. With
 * offsets (a pooled backward), input i's gradient is its bag's, divided by
 * the bag's size for a mean. */
static int accumulate(et_store *s, const struct table *t, size_t n, size_t m,
		      const float *grads, const uint64_t *offsets, et_pool mode)
{
	uint32_t dim = t->g->dim;
	const uint32_t *inv = s->inv.p;
	uint8_t *seen;
	float *acc;
	int ret;

	ret = sbuf_reserve(&s->acc, m * dim * sizeof(float) + m);
	if (ret)
		return ret;
	acc = s->acc.p;
	seen = (uint8_t *)(acc + m * dim);
	memset(seen, 0, m);
	for (size_t b = 0, i = 0; i < n; i++) {
		float *a = acc + (size_t)inv[i] * dim;
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
		if (!seen[inv[i]]) {
			seen[inv[i]] = 1;
			for (uint32_t c = 0; c < dim; c++)
				a[c] = offsets && mode == ET_POOL_MEAN
					   ? gi[c] / div
					   : gi[c];
		} else {
			for (uint32_t c = 0; c < dim; c++)
				a[c] += offsets && mode == ET_POOL_MEAN
					    ? gi[c] / div
					    : gi[c];
		}
	}
	return 0;
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
	ret = accumulate(s, t, n, m, grads, offsets, mode);
	if (ret)
		return ret;
	ret = op_prepare(s, t, ids, n, &m, true);
	if (ret)
		return ret;
	apply(s, t, m, s->acc.p, up);
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
