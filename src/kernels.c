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
#include "error.h"
#include "mem_host.h"
#include "store_impl.h"
#include "workers.h"

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

/* The rows a kernel's range starts with, asked for at once: the loop
 * asks PREFETCH_AHEAD inputs ahead, so the first ones of each range
 * (an item of a multi-table call is 32 bags or 64 rows) would otherwise
 * be read one miss at a time. idx: each input's row index (NULL: i). */
static inline void prefetch_first(void *const *ptrs, const uint32_t *idx,
				  size_t i0, size_t i1, uint32_t bytes)
{
	for (size_t i = i0; i < i1 && i < i0 + PREFETCH_AHEAD; i++)
		prefetch_bytes(ptrs[idx ? idx[i] : i], bytes);
}

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

/* o[c] = 0 + r[c]: the first row of a sum from zero, in one pass (the
 * same bits as zeroing o and adding r: -0 becomes +0) */
static inline void row_first(float *o, const float *r, uint32_t dim)
{
	vf4 z = vf4_splat(0.0f);
	uint32_t c = 0;

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

	for (; c + VLANES <= dim; c += VLANES)
		vf4_store(w + c, vf4_load(w + c) - mv * vf4_load(g + c));
	for (; c < dim; c++)
		w[c] -= mul * g[c];
}

/* Inputs [i0, i1) decoded into out (one row of dim each, from i0). */
static void kern_gather(const struct tf_geom *g, void *const *ptrs,
			const uint32_t *inv, size_t i0, size_t i1, float *out)
{
	prefetch_first(ptrs, inv, i0, i1, g->value_bytes);
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

	prefetch_first(ptrs, inv, offsets[b0], end, g->value_bytes);
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

/*
 * The inputs of each unique row, for the update: a stable counting sort of
 * the inputs by unique index. list[start[u] .. start[u + 1]) are the
 * gradient rows of unique u's inputs in input order: the input's own row,
 * or with offsets (a pooled backward) its bag's. list and start live in
 * acc: n + m + 1 u32.
 */
static void kern_group(const uint32_t *inv, size_t n, size_t m,
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
#define UPD_GROUP 4

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
static void kern_update(const struct tf_geom *g, void *const *ptrs, size_t u0,
			size_t u1, const uint32_t *list, const uint32_t *start,
			const float *grads, const uint64_t *offsets,
			et_pool mode, const struct et_update_params *up,
			float *gsum)
{
	bool mean = offsets && mode == ET_POOL_MEAN;
	float eps = up->eps ? up->eps : 1e-8f;
	float lr = up->lr;
	uint32_t dim = g->dim;
	float w[256], sum[UPD_GROUP];

	prefetch_first(ptrs, NULL, u0, u1, g->row_bytes);
	for (size_t i0 = u0; i0 < u1; i0 += UPD_GROUP) {
		size_t k = u1 - i0 < UPD_GROUP ? u1 - i0 : UPD_GROUP;

		for (size_t r = 0; r < k; r++) {
			size_t i = i0 + r;

			if (i + PREFETCH_AHEAD < u1)
				prefetch_bytes(ptrs[i + PREFETCH_AHEAD],
					       g->row_bytes);
			grad_sum(i, list, start, grads, offsets, mean, dim,
				 gsum + r * dim);
		}
		if (g->optim == ET_OPT_ROWWISE_ADAGRAD)
			sq_sums(gsum, k, dim, sum);
		for (size_t r = 0; r < k; r++) {
			char *row = ptrs[i0 + r];
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

/* ------------------------------------------------------------ operations */

/* The start of a single-table call with a buffer named what: op_begin, the
 * buffer checked, op_prepare. An empty batch stops after op_begin. */
/* op_begin, then op_prepare; write: the call replaces each row's values
 * (with_state: and its optimizer state), so a row replaced whole is not
 * read first. */
static int op_open(et_store *s, int table, const uint64_t *ids, size_t n,
		   const void *buf, const char *what, struct table **t,
		   size_t *m, bool write, bool with_state)
{
	int ret = op_begin(s, table, ids, n, t);

	if (ret || n == 0)
		return ret;
	if (!buf)
		return err_set(-EINVAL, "%s is NULL", what);
	return op_prepare(s, *t, ids, n, m, false,
			  write && (with_state || !(*t)->g->state_floats));
}

int et_gather(et_store *s, int table, const uint64_t *ids, size_t n, float *out)
{
	struct table *t;
	size_t m;
	int ret;

	api_enter(s);
	ret = op_open(s, table, ids, n, out, "out", &t, &m, false, false);
	if (ret || n == 0)
		return ret;
	kern_gather(t->g, s->o->ptrs.p, s->o->inv.p, 0, n, out);
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

	api_enter(s);
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
		ret = op_prepare(s, t, ids, n, &m, false, false);
		if (ret)
			return ret;
		ret = sbuf_reserve(&s->o->acc, t->g->dim * sizeof(float));
		if (ret) {
			op_end(s, (uint32_t)table, false);
			return ret;
		}
	}
	kern_pool(t->g, s->o->ptrs.p, s->o->inv.p, offsets, 0, nbags, mode, out,
		  s->o->acc.p);
	return n ? op_end(s, (uint32_t)table, false) : 0;
}

/* Marks the resolved rows of t dirty in whichever tier holds them. */
static void mark_dirty(et_store *s, const struct table *t, size_t m)
{
	const uint8_t *kind = s->o->kind.p;
	const uint64_t *slots = s->o->slots.p;
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

static int check_update_params(const struct et_update_params *up)
{
	if (!up)
		return err_set(-EINVAL, "up is NULL");
	if (!isfinite(up->lr))
		return err_set(-EINVAL, "up->lr %g not finite", up->lr);
	if (!isfinite(up->eps) || up->eps < 0)
		return err_set(-EINVAL, "up->eps %g not finite and >= 0",
			       up->eps);
	return 0;
}

static int update_common(et_store *s, int table, const uint64_t *ids, size_t n,
			 const float *grads, const uint64_t *offsets,
			 et_pool mode, const struct et_update_params *up)
{
	struct table *t;
	size_t m;
	int ret;

	ret = check_update_params(up);
	if (!ret)
		ret = op_begin(s, table, ids, n, &t);
	if (ret || n == 0)
		return ret;
	if (!grads)
		return err_set(-EINVAL, "%s is NULL",
			       offsets ? "bag_grads" : "grads");
	ret = dedup(s, ids, n, &m);
	if (ret)
		return ret;
	ret = sbuf_reserve(&s->o->acc, (n + m + 1) * sizeof(uint32_t));
	if (!ret)
		ret = sbuf_reserve(&s->trow,
				   UPD_GROUP * t->g->dim * sizeof(float));
	if (ret)
		return ret;
	kern_group(s->o->inv.p, n, m, offsets, s->o->acc.p,
		   (uint32_t *)s->o->acc.p + n);
	ret = op_prepare(s, t, ids, n, &m, true, false);
	if (ret)
		return ret;
	kern_update(t->g, s->o->ptrs.p, 0, m, s->o->acc.p,
		    (uint32_t *)s->o->acc.p + n, grads, offsets, mode, up,
		    s->trow.p);
	mark_dirty(s, t, m);
	return op_end(s, (uint32_t)table, true);
}

int et_update(et_store *s, int table, const uint64_t *ids, size_t n,
	      const float *grads, const struct et_update_params *up)
{
	api_enter(s);
	return update_common(s, table, ids, n, grads, NULL, ET_POOL_SUM, up);
}

int et_update_pooled(et_store *s, int table, const uint64_t *ids,
		     const uint64_t *offsets, size_t nbags, et_pool mode,
		     const float *bag_grads, const struct et_update_params *up)
{
	size_t n;
	int ret;

	api_enter(s);
	ret = check_pool(mode);
	if (!ret)
		ret = check_offsets(offsets, nbags, &n);
	if (ret)
		return ret;
	return update_common(s, table, ids, n, bag_grads, offsets, mode, up);
}

int et_write_rows_state(et_store *s, int table, const uint64_t *ids, size_t n,
			const float *vals, const float *state)
{
	struct table *t;
	size_t m;
	int ret;

	api_enter(s);
	ret = op_open(s, table, ids, n, vals, "vals", &t, &m, true,
		      state != NULL);
	if (ret || n == 0)
		return ret;
	{
		void *const *ptrs = s->o->ptrs.p;
		const uint32_t *last = s->o->last.p;
		uint32_t dim = t->g->dim, sf = t->g->state_floats;

		for (size_t i = 0; i < m; i++) {
			dtype_encode(t->g->dtype, vals + (size_t)last[i] * dim,
				     ptrs[i], dim);
			if (state && sf)
				memcpy((char *)ptrs[i] + t->g->value_bytes,
				       state + (size_t)last[i] * sf,
				       sf * sizeof(float));
		}
	}
	mark_dirty(s, t, m);
	return op_end(s, (uint32_t)table, true);
}

int et_write_rows(et_store *s, int table, const uint64_t *ids, size_t n,
		  const float *vals)
{
	return et_write_rows_state(s, table, ids, n, vals, NULL);
}

/* ---------------------------------------------------------- multi-table */

/*
 * A multi-table call runs in two phases. On the store's thread, table by
 * table in batch order, exactly what a single call does before its
 * kernel: dedup, then resolve, each into the table's own scratch
 * (s->multi[k]); the rows of every table stay pinned with the call's
 * epoch, so no later table's placement moves an earlier table's rows.
 * Then the row kernels run as items over the threads (workers.c): bags of
 * one table for a gather; a range of one table's unique rows, summed and
 * applied, for an update. Items write disjoint outputs and each computes
 * its values exactly as the single call does, so the results are the
 * same bits for any number of threads. Last, on the store's thread again,
 * rows are marked dirty and the call ends as one operation.
 */

/* Bags or unique rows an item takes at least. */
#define ITEM_BAGS 32
#define ITEM_ROWS 64

struct multi {
	et_store *s;
	const struct et_table_batch *b;
	size_t nt;
	et_pool mode;
	const struct et_update_params *up;
	const size_t *first; /* item of each table's first piece; [nt]: all */
	size_t trow_dim;     /* floats of each thread's scratch rows */
};

/* Checks every descriptor and the tables' uniqueness; nothing changes. */
static int multi_check(et_store *s, const struct et_table_batch *b, size_t nt,
		       et_pool mode, bool update)
{
	uint8_t *seen;
	int ret;

	if (!s)
		return err_set(-EINVAL, "s is NULL");
	if (nt && !b)
		return err_set(-EINVAL, "batch is NULL, with %zu tables", nt);
	ret = check_pool(mode);
	if (!ret)
		ret = sbuf_reserve(&s->map, s->ntables ? s->ntables : 1);
	if (ret)
		return ret;
	seen = s->map.p;
	memset(seen, 0, s->ntables);
	for (size_t k = 0; k < nt; k++) {
		struct table *t = table_get(s, b[k].table);
		char what[48];
		size_t n;

		if (!t)
			return err_set(ET_ENOTABLE,
				       "batch[%zu].table %d unknown: the store "
				       "has %u",
				       k, b[k].table, s->ntables);
		if (seen[b[k].table])
			return err_set(-EINVAL,
				       "batch[%zu].table %d appears twice", k,
				       b[k].table);
		seen[b[k].table] = 1;
		if (!b[k].offsets)
			return err_set(-EINVAL, "batch[%zu].offsets is NULL",
				       k);
		ret = check_offsets(b[k].offsets, b[k].nbags, &n);
		if (ret) {
			char why[200];

			snprintf(why, sizeof(why), "%s", et_errdetail());
			return err_set(ret, "batch[%zu].%s", k, why);
		}
		if (update ? !b[k].grads && b[k].nbags
			   : !b[k].out && b[k].nbags)
			return err_set(-EINVAL, "batch[%zu].%s is NULL", k,
				       update ? "grads" : "out");
		snprintf(what, sizeof(what), "batch[%zu].ids", k);
		ret = ids_check(t, b[k].table, b[k].ids, n, what);
		if (ret)
			return ret;
	}
	return 0;
}

/* Phase one: every table's batch deduplicated and looked up, the misses
 * of all of them read at once, then placed table by table, and (for an
 * update) room for the summed gradients. On failure the call has ended. */
static int multi_prepare(et_store *s, const struct et_table_batch *b, size_t nt,
			 bool update, size_t *trow_dim)
{
	int ret = 0;

	*trow_dim = 0;
	for (size_t k = 0; k < nt; k++) {
		struct table *t = &s->tables[b[k].table];
		struct opscr *o = &s->multi[k];
		size_t n = b[k].offsets[b[k].nbags];

		bool held = n && scratch_holds(o, b[k].ids, n);

		/* the batch prefetched at this place: its dedup (and memo)
		 * stands */
		if (n && !held && k < s->npf &&
		    scratch_holds(&s->pf_scr[k], b[k].ids, n)) {
			struct opscr x = *o;

			*o = s->pf_scr[k];
			s->pf_scr[k] = x;
			held = true;
		}
		o->m = held ? o->dm : 0;
		o->nm = 0;
		o->nbypass = 0;
		o->t = (uint32_t)b[k].table;
		if (t->g->dim > *trow_dim)
			*trow_dim = t->g->dim;
		if (!n)
			continue;
		s->o = o;
		ret = op_lookup(s, t, b[k].ids, n, &o->m, held);
		if (ret) /* it has ended the call, or not begun it */
			goto out;
	}
	ret = resolve_read(s, s->multi, nt);
	if (ret) {
		op_finish(s, 0);
		goto out;
	}
	for (size_t k = 0; k < nt; k++) {
		struct table *t = &s->tables[b[k].table];
		struct opscr *o = &s->multi[k];
		size_t n = b[k].offsets[b[k].nbags];

		if (!n)
			continue;
		s->o = o;
		ret = op_place(s, t, n);
		if (ret) /* it has ended the call */
			goto out;
		if (update) { /* the inputs of each unique row */
			ret = sbuf_reserve(&o->acc,
					   (n + o->m + 1) * sizeof(uint32_t));
			if (ret) {
				op_finish(s, 0);
				goto out;
			}
			kern_group(o->inv.p, n, o->m, b[k].offsets, o->acc.p,
				   (uint32_t *)o->acc.p + n);
		}
	}
	*trow_dim *= UPD_GROUP; /* an update's rows taken together */
	ret = sbuf_reserve(&s->trow, (s->cfg.threads > 1 ? s->cfg.threads : 1) *
					 *trow_dim * sizeof(float));
	if (ret)
		op_finish(s, 0);
out:
	s->o = &s->one;
	return ret;
}

/* Pieces of table k: bags (gather) or unique rows (update), in items. */
static size_t multi_pieces(const struct multi *mu, size_t k, bool update)
{
	size_t n = update ? mu->s->multi[k].m : mu->b[k].nbags;
	size_t per = update ? ITEM_ROWS : ITEM_BAGS;

	return (n + per - 1) / per;
}

/* The table of item i and the piece [lo, hi) of its bags or rows. */
static size_t multi_item(const struct multi *mu, size_t i, bool update,
			 size_t *lo, size_t *hi)
{
	size_t k = 0, n, pieces, j;

	while (mu->first[k + 1] <= i)
		k++;
	n = update ? mu->s->multi[k].m : mu->b[k].nbags;
	pieces = mu->first[k + 1] - mu->first[k];
	j = i - mu->first[k];
	/* pieces of equal size but for the remainder, which the first
	 * ones take */
	*lo = j * (n / pieces) + (j < n % pieces ? j : n % pieces);
	*hi = *lo + n / pieces + (j < n % pieces);
	return k;
}

static void gather_item(void *arg, size_t i, unsigned thread)
{
	const struct multi *mu = arg;
	size_t lo, hi, k = multi_item(mu, i, false, &lo, &hi);
	const struct table *t = &mu->s->tables[mu->b[k].table];
	const struct opscr *o = &mu->s->multi[k];

	kern_pool(t->g, o->ptrs.p, o->inv.p, mu->b[k].offsets, lo, hi, mu->mode,
		  mu->b[k].out + lo * t->g->dim,
		  (float *)mu->s->trow.p + thread * mu->trow_dim);
}

static void update_item(void *arg, size_t i, unsigned thread)
{
	const struct multi *mu = arg;
	size_t lo, hi, k = multi_item(mu, i, true, &lo, &hi);
	const struct table *t = &mu->s->tables[mu->b[k].table];
	const struct opscr *o = &mu->s->multi[k];
	size_t n = mu->b[k].offsets[mu->b[k].nbags];

	kern_update(t->g, o->ptrs.p, lo, hi, o->acc.p, (uint32_t *)o->acc.p + n,
		    mu->b[k].grads, mu->b[k].offsets, mu->mode, mu->up,
		    (float *)mu->s->trow.p + thread * mu->trow_dim);
}

static int multi_run(et_store *s, const struct et_table_batch *b, size_t nt,
		     et_pool mode, const struct et_update_params *up)
{
	bool update = up != NULL;
	struct multi mu = {s, b, nt, mode, up, NULL, 0};
	size_t *first;
	int ret;

	s->tm.t0 = now_ns();
	ret = op_start(s);
	if (!ret)
		ret = scratch_grow(&s->multi, &s->nmulti, nt);
	if (ret)
		return ret;
	ret = multi_prepare(s, b, nt, update, &mu.trow_dim);
	if (ret)
		return ret;
	/* the item index of each table's first piece, in s->map */
	ret = sbuf_reserve(&s->map, (nt + 1) * sizeof(*first));
	if (ret) {
		op_finish(s, 0);
		return ret;
	}
	first = s->map.p;
	first[0] = 0;
	for (size_t k = 0; k < nt; k++)
		first[k + 1] = first[k] + multi_pieces(&mu, k, update);
	mu.first = first;
	workers_run(s->wk, first[nt], update ? update_item : gather_item, &mu);
	for (size_t k = 0; k < nt && update; k++) {
		s->o = &s->multi[k];
		mark_dirty(s, &s->tables[b[k].table], s->o->m);
		if (!ret)
			ret = op_bypass_done(s, (uint32_t)b[k].table, true);
	}
	for (size_t k = 0; k < nt; k++) /* pins end with the call */
		s->multi[k].nbypass = 0;
	s->o = &s->one;
	return op_finish(s, ret);
}

int et_gather_pooled_multi(et_store *s, const struct et_table_batch *batch,
			   size_t ntables, et_pool mode)
{
	int ret;

	api_enter(s);
	ret = multi_check(s, batch, ntables, mode, false);
	return ret ? ret : multi_run(s, batch, ntables, mode, NULL);
}

int et_update_pooled_multi(et_store *s, const struct et_table_batch *batch,
			   size_t ntables, et_pool mode,
			   const struct et_update_params *up)
{
	int ret;

	api_enter(s);
	ret = check_update_params(up);
	if (!ret)
		ret = multi_check(s, batch, ntables, mode, true);
	return ret ? ret : multi_run(s, batch, ntables, mode, up);
}
