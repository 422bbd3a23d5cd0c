/*
 * test_kernels.c - the row kernels (src/store/kernels.h) as a unit, on rows laid
 * out as the store hands them over (ptrs: each unique row's bytes, in
 * slots of the row rounded up to 4 bytes; inv: each input's unique index;
 * struct tf_geom describing a row), against a plain scalar reference
 * written here from the formulas of kernels.c and embtier.h:
 *
 *   - kern_gather decodes each input's row, bit for bit, for f32, f16 and
 *     bf16 rows, dims that are and are not multiples of 4, duplicate ids;
 *   - kern_pool adds each bag's rows in id order in f32 from zero (a -0
 *     becomes +0), divides by the bag's size for a mean, and writes zeros
 *     for an empty bag (first, middle, last, all empty);
 *   - kern_group lists each unique row's inputs (or bags) in input order,
 *     start[] the prefix sums, in exactly n + m + 1 u32;
 *   - kern_update applies SGD and row-wise Adagrad (state m += mean(g^2),
 *     w -= lr / (sqrt(m) + eps) * g, eps 0 meaning 1e-8) with duplicate
 *     ids' gradients summed in input order (a case where another order
 *     gives another answer), plain and pooled (sum, mean), dims above the
 *     kernel's 256-value pieces included, rows re-encoded to nearest even;
 *   - every kernel run over a range split in pieces ([i0, i1), [b0, b1),
 *     [u0, u1)) gives the same bits as one run over the whole range.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "dtype.h"
#include "embtier.h"
#include "kernels.h"
#include "table_file.h"
#include "util.h"

static const et_dtype dtypes[] = {ET_F32, ET_F16, ET_BF16};
/* multiples of 4 and not, one past the kernels' 256-value pieces */
static const uint32_t dims[] = {1, 2, 3, 4, 5, 7, 8, 13, 16, 64, 67, 259};

#define NDTYPES (sizeof(dtypes) / sizeof(dtypes[0]))
#define NDIMS	(sizeof(dims) / sizeof(dims[0]))

/* The geometry of a row, as the table file decodes it (only the row's
 * fields matter to the kernels). */
static struct tf_geom geom(uint32_t dim, et_dtype t, et_optim o)
{
	struct tf_geom g = {0};

	g.rows = 1u << 20;
	g.dim = dim;
	g.dtype = t;
	g.optim = o;
	g.state_floats = o == ET_OPT_ROWWISE_ADAGRAD ? 1 : 0;
	g.value_bytes = dim * (uint32_t)dtype_size(t);
	g.row_bytes = g.value_bytes + 4 * g.state_floats;
	return g;
}

/* m rows in slots of row_bytes rounded up to 4 (aligned to 4 only, as in
 * a cache), filled with values in [-2, 2) (every ninth -0, to see pooling
 * turn it to +0) and, with Adagrad, a state in [0, 3). */
struct rows {
	char *mem;
	void **ptrs;
	size_t m;
	uint32_t stride;
};

static void rows_make(struct rows *r, const struct tf_geom *g, size_t m,
		      struct tu_rng *rng)
{
	float *v = tu_calloc(g->dim, sizeof(float));

	r->m = m;
	r->stride = (g->row_bytes + 3) & ~3u;
	/* 4 bytes in: the rows are 4-aligned, not 8- or 16-aligned */
	r->mem = tu_calloc(m * r->stride + 4, 1);
	r->ptrs = tu_calloc(m ? m : 1, sizeof(void *));
	for (size_t u = 0; u < m; u++) {
		r->ptrs[u] = r->mem + 4 + u * r->stride;
		for (uint32_t c = 0; c < g->dim; c++)
			v[c] = tu_rng_below(rng, 9) == 0
				   ? -0.0f
				   : (float)tu_rng_double(rng, -2, 2);
		dtype_encode(g->dtype, v, r->ptrs[u], g->dim);
		if (g->state_floats) {
			float st = (float)tu_rng_double(rng, 0, 3);

			memcpy((char *)r->ptrs[u] + g->value_bytes, &st, 4);
		}
	}
	free(v);
}

/* A second set of rows with the same bytes (for the reference). */
static void rows_copy(struct rows *dst, const struct rows *src)
{
	*dst = *src;
	dst->mem = tu_calloc(src->m * src->stride + 4, 1);
	dst->ptrs = tu_calloc(src->m ? src->m : 1, sizeof(void *));
	memcpy(dst->mem, src->mem, src->m * src->stride + 4);
	for (size_t u = 0; u < src->m; u++)
		dst->ptrs[u] = dst->mem + 4 + u * src->stride;
}

static void rows_free(struct rows *r)
{
	free(r->mem);
	free(r->ptrs);
}

static void assert_rows_equal(const struct rows *a, const struct rows *b,
			      const struct tf_geom *g, const char *what)
{
	for (size_t u = 0; u < a->m; u++)
		if (memcmp(a->ptrs[u], b->ptrs[u], g->row_bytes))
			fail_msg("%s: row %zu differs (dim %u, dtype %d, "
				 "optim %d)",
				 what, u, g->dim, (int)g->dtype, (int)g->optim);
}

static void assert_floats_equal(const float *a, const float *b, size_t n,
				const char *what)
{
	for (size_t i = 0; i < n; i++)
		if (memcmp(&a[i], &b[i], sizeof(float)))
			fail_msg("%s: value %zu is %a, expected %a", what, i,
				 (double)a[i], (double)b[i]);
}

/* n inputs over m unique rows, each used at least once, in random order
 * (so, for n > m, with duplicates). */
static uint32_t *make_inv(size_t n, size_t m, struct tu_rng *rng)
{
	uint32_t *inv = tu_calloc(n ? n : 1, sizeof(*inv));

	for (size_t i = 0; i < n; i++)
		inv[i] = (uint32_t)(i < m ? i : tu_rng_below(rng, m));
	for (size_t i = n; i > 1; i--) {
		size_t j = tu_rng_below(rng, i);
		uint32_t t = inv[i - 1];

		inv[i - 1] = inv[j];
		inv[j] = t;
	}
	return inv;
}

/* Bag offsets for nbags bags over n inputs, some of them empty (the
 * first, the last, and others at random); n == 0 makes every bag empty. */
static uint64_t *make_offsets(size_t nbags, size_t n, struct tu_rng *rng)
{
	uint64_t *off = tu_calloc(nbags + 1, sizeof(*off));

	for (size_t b = 1; b < nbags; b++)
		off[b] = tu_rng_below(rng, n + 1);
	off[nbags] = n;
	/* sorted: non-decreasing, hence empty bags where values repeat */
	for (size_t i = 1; i < nbags; i++)
		for (size_t j = i; j > 1 && off[j - 1] > off[j]; j--) {
			uint64_t t = off[j];

			off[j] = off[j - 1];
			off[j - 1] = t;
		}
	if (nbags > 2) {
		off[1] = 0;	    /* bag 0 empty */
		off[nbags - 1] = n; /* the last bag empty */
	}
	return off;
}

/* ------------------------------------------------------------ reference */

/* Value c of a row, decoded one value at a time by the scalar
 * conversions of embtier.h. */
static float ref_get(et_dtype t, const void *row, uint32_t c)
{
	const uint16_t *h = row;
	float f;

	switch (t) {
	case ET_F16:
		return et_f16_to_f32(h[c]);
	case ET_BF16:
		return et_bf16_to_f32(h[c]);
	default:
		memcpy(&f, (const char *)row + 4 * (size_t)c, 4);
		return f;
	}
}

static void ref_set(et_dtype t, void *row, uint32_t c, float f)
{
	uint16_t *h = row;

	switch (t) {
	case ET_F16:
		h[c] = et_f32_to_f16(f);
		break;
	case ET_BF16:
		h[c] = et_f32_to_bf16(f);
		break;
	default:
		memcpy((char *)row + 4 * (size_t)c, &f, 4);
		break;
	}
}

static void ref_gather(const struct tf_geom *g, void *const *ptrs,
		       const uint32_t *inv, size_t n, float *out)
{
	for (size_t i = 0; i < n; i++)
		for (uint32_t c = 0; c < g->dim; c++)
			out[i * g->dim + c] =
			    ref_get(g->dtype, ptrs[inv[i]], c);
}

/* Each bag: from 0, its rows added in id order, divided by its size for a
 * mean; an empty bag is zeros. */
static void ref_pool(const struct tf_geom *g, void *const *ptrs,
		     const uint32_t *inv, const uint64_t *off, size_t nbags,
		     et_pool mode, float *out)
{
	for (size_t b = 0; b < nbags; b++)
		for (uint32_t c = 0; c < g->dim; c++) {
			float acc = 0.0f;
			uint64_t len = off[b + 1] - off[b];

			for (uint64_t i = off[b]; i < off[b + 1]; i++)
				acc += ref_get(g->dtype, ptrs[inv[i]], c);
			if (mode == ET_POOL_MEAN && len)
				acc /= (float)len;
			out[b * g->dim + c] = acc;
		}
}

/* The bag of input i. */
static size_t bag_of(const uint64_t *off, size_t i)
{
	size_t b = 0;

	while (off[b + 1] <= i)
		b++;
	return b;
}

/* The update, one unique row at a time, from inv directly (not from
 * kern_group's lists): the gradients of u's inputs summed in input order
 * (the first one taken as is, or divided by its bag's size for a mean),
 * then SGD or row-wise Adagrad in f32, the row re-encoded. */
static void ref_update(const struct tf_geom *g, void *const *ptrs, size_t m,
		       const uint32_t *inv, size_t n, const float *grads,
		       const uint64_t *off, et_pool mode,
		       const struct et_update_params *up)
{
	bool mean = off && mode == ET_POOL_MEAN;
	float eps = up->eps != 0.0f ? up->eps : 1e-8f;
	float *gs = tu_calloc(g->dim, sizeof(float));

	for (size_t u = 0; u < m; u++) {
		char *row = ptrs[u];
		bool first = true;
		float mul = up->lr;

		for (size_t i = 0; i < n; i++) {
			size_t gi = off ? bag_of(off, i) : i;
			float div = mean ? (float)(off[gi + 1] - off[gi]) : 1;

			if (inv[i] != u)
				continue;
			for (uint32_t c = 0; c < g->dim; c++) {
				float x = grads[gi * g->dim + c];

				if (mean)
					x = x / div;
				gs[c] = first ? x : gs[c] + x;
			}
			first = false;
		}
		if (first)
			continue; /* no input: untouched */
		if (g->optim == ET_OPT_ROWWISE_ADAGRAD) {
			float s = 0.0f, st;

			for (uint32_t c = 0; c < g->dim; c++)
				s += gs[c] * gs[c];
			memcpy(&st, row + g->value_bytes, 4);
			st += s / (float)g->dim;
			memcpy(row + g->value_bytes, &st, 4);
			mul = up->lr / (sqrtf(st) + eps);
		}
		for (uint32_t c = 0; c < g->dim; c++) {
			float w = ref_get(g->dtype, row, c);

			w -= mul * gs[c];
			ref_set(g->dtype, row, c, w);
		}
	}
	free(gs);
}

/* --------------------------------------------------------------- gather */

static void test_gather(void **state)
{
	struct tu_rng rng;

	(void)state;
	tu_rng_seed(&rng, 1);
	for (size_t t = 0; t < NDTYPES; t++)
		for (size_t d = 0; d < NDIMS; d++) {
			struct tf_geom g = geom(dims[d], dtypes[t], ET_OPT_SGD);
			size_t m = 1 + tu_rng_below(&rng, 30);
			size_t n = m + tu_rng_below(&rng, 40); /* dups */
			uint32_t *inv = make_inv(n, m, &rng);
			struct rows r;
			float *out, *ref, *pieces;
			size_t cut[] = {0, 1, n / 3, n / 2 + 1, n};
			size_t prev = 0;

			rows_make(&r, &g, m, &rng);
			out = tu_calloc(n * g.dim, sizeof(float));
			ref = tu_calloc(n * g.dim, sizeof(float));
			pieces = tu_calloc(n * g.dim, sizeof(float));
			memset(out, 0xff, n * g.dim * sizeof(float));
			ref_gather(&g, r.ptrs, inv, n, ref);
			kern_gather(&g, r.ptrs, inv, 0, n, out);
			assert_floats_equal(out, ref, n * g.dim, "gather");
			/* in pieces, each into its place of out */
			for (size_t k = 1; k < sizeof(cut) / sizeof(*cut);
			     k++) {
				size_t hi = cut[k] < prev ? prev : cut[k];

				kern_gather(&g, r.ptrs, inv, prev, hi,
					    pieces + prev * g.dim);
				prev = hi;
			}
			assert_floats_equal(pieces, out, n * g.dim,
					    "gather in pieces");
			/* a range writes only its own rows of out */
			memset(pieces, 0x7f, n * g.dim * sizeof(float));
			kern_gather(&g, r.ptrs, inv, n / 2, n / 2, pieces);
			for (size_t i = 0; i < n * g.dim; i++)
				assert_int_equal(((uint8_t *)pieces)[i], 0x7f);
			free(out);
			free(ref);
			free(pieces);
			free(inv);
			rows_free(&r);
		}
}

/* ------------------------------------------------------------------ pool */

/* One pooling case: the whole range and several splits of it against the
 * reference, for both modes. */
static void pool_case(const struct tf_geom *g, size_t m, size_t n, size_t nbags,
		      struct tu_rng *rng)
{
	static const et_pool modes[] = {ET_POOL_SUM, ET_POOL_MEAN};
	uint32_t *inv = make_inv(n, m ? m : 1, rng);
	uint64_t *off = make_offsets(nbags, n, rng);
	float *out = tu_calloc(nbags * g->dim + 1, sizeof(float));
	float *ref = tu_calloc(nbags * g->dim + 1, sizeof(float));
	float *pieces = tu_calloc(nbags * g->dim + 1, sizeof(float));
	float *tmp = tu_calloc(g->dim, sizeof(float));
	struct rows r;

	rows_make(&r, g, m ? m : 1, rng);
	for (size_t k = 0; k < 2; k++) {
		et_pool mode = modes[k];

		/* garbage in out: empty bags must be written as zeros */
		memset(out, 0xff, nbags * g->dim * sizeof(float));
		memset(pieces, 0xff, nbags * g->dim * sizeof(float));
		ref_pool(g, r.ptrs, inv, off, nbags, mode, ref);
		kern_pool(g, r.ptrs, inv, off, 0, nbags, mode, out, tmp);
		assert_floats_equal(out, ref, nbags * g->dim,
				    mode == ET_POOL_SUM ? "pool sum"
							: "pool mean");
		/* bag by bag, then in two uneven pieces */
		for (size_t b = 0; b < nbags; b++)
			kern_pool(g, r.ptrs, inv, off, b, b + 1, mode,
				  pieces + b * g->dim, tmp);
		assert_floats_equal(pieces, out, nbags * g->dim,
				    "pool bag by bag");
		memset(pieces, 0xff, nbags * g->dim * sizeof(float));
		kern_pool(g, r.ptrs, inv, off, 0, nbags / 3, mode, pieces, tmp);
		kern_pool(g, r.ptrs, inv, off, nbags / 3, nbags, mode,
			  pieces + nbags / 3 * g->dim, tmp);
		assert_floats_equal(pieces, out, nbags * g->dim,
				    "pool in two pieces");
	}
	free(out);
	free(ref);
	free(pieces);
	free(tmp);
	free(inv);
	free(off);
	rows_free(&r);
}

static void test_pool(void **state)
{
	struct tu_rng rng;

	(void)state;
	tu_rng_seed(&rng, 2);
	for (size_t t = 0; t < NDTYPES; t++)
		for (size_t d = 0; d < NDIMS; d++) {
			struct tf_geom g = geom(dims[d], dtypes[t], ET_OPT_SGD);
			size_t m = 1 + tu_rng_below(&rng, 20);

			pool_case(&g, m, m + tu_rng_below(&rng, 60),
				  3 + tu_rng_below(&rng, 12), &rng);
		}
}

/* Bags with no rows at all: zeros for both modes (no division by 0). */
static void test_pool_empty(void **state)
{
	struct tu_rng rng;

	(void)state;
	tu_rng_seed(&rng, 3);
	for (size_t t = 0; t < NDTYPES; t++) {
		struct tf_geom g = geom(7, dtypes[t], ET_OPT_SGD);
		uint64_t off[5] = {0, 0, 0, 0, 0};
		float out[4 * 7], tmp[7];
		uint32_t inv[1] = {0};
		struct rows r;

		rows_make(&r, &g, 1, &rng);
		for (int mode = ET_POOL_SUM; mode <= ET_POOL_MEAN; mode++) {
			memset(out, 0xff, sizeof(out));
			kern_pool(&g, r.ptrs, inv, off, 0, 4, (et_pool)mode,
				  out, tmp);
			for (size_t i = 0; i < 4 * 7; i++) {
				uint32_t bits;

				memcpy(&bits, &out[i], 4);
				assert_int_equal(bits, 0); /* +0.0f */
			}
		}
		rows_free(&r);
		/* and the mix of empty and full bags, every dim */
		for (size_t d = 0; d < NDIMS; d++) {
			struct tf_geom gd =
			    geom(dims[d], dtypes[t], ET_OPT_SGD);

			pool_case(&gd, 3, 5, 9, &rng);
		}
	}
}

/* A bag's rows are added in id order: the f32 sum of 1e8, -1e8 and 1 is 1
 * that way, 0 in the reverse order. */
static void test_pool_order(void **state)
{
	struct tf_geom g = geom(1, ET_F32, ET_OPT_SGD);
	float v[3] = {1e8f, -1e8f, 1.0f}, out[2], tmp[1];
	void *ptrs[3] = {&v[0], &v[1], &v[2]};
	uint32_t inv[3] = {0, 1, 2};
	uint64_t off[3] = {0, 3, 3};

	(void)state;
	kern_pool(&g, ptrs, inv, off, 0, 2, ET_POOL_SUM, out, tmp);
	assert_true(out[0] == 1.0f);
	assert_true(out[1] == 0.0f);
	kern_pool(&g, ptrs, inv, off, 0, 1, ET_POOL_MEAN, out, tmp);
	assert_true(out[0] == 1.0f / 3.0f);
}

/* ----------------------------------------------------------------- group */

/* kern_group against the definition: for each unique row u, the inputs i
 * with inv[i] == u in input order (their bags, with offsets). */
static void group_case(const uint32_t *inv, size_t n, size_t m,
		       const uint64_t *off)
{
	/* one buffer of n + m + 1 u32, as the store lays it out, and a
	 * canary past it */
	uint32_t *acc = tu_calloc(n + m + 2, sizeof(uint32_t));
	uint32_t *list = acc, *start = acc + n;
	size_t at = 0;

	acc[n + m + 1] = 0xdeadbeef;
	memset(acc, 0xff, (n + m + 1) * sizeof(uint32_t));
	kern_group(inv, n, m, off, list, start);
	assert_int_equal(acc[n + m + 1], 0xdeadbeef);
	for (size_t u = 0; u < m; u++) {
		assert_int_equal(start[u], at);
		for (size_t i = 0; i < n; i++)
			if (inv[i] == u) {
				size_t want = off ? bag_of(off, i) : i;

				assert_true(at < n);
				assert_int_equal(list[at], want);
				at++;
			}
	}
	assert_int_equal(at, n);
	assert_int_equal(start[m], n);
	free(acc);
}

static void test_group(void **state)
{
	struct tu_rng rng;
	/* a unique row with no input at all (u = 2) gets an empty list */
	const uint32_t gap[] = {3, 0, 1, 3, 0, 3};
	const uint64_t gap_off[] = {0, 2, 2, 6};

	(void)state;
	tu_rng_seed(&rng, 4);
	group_case(gap, 6, 4, NULL);
	group_case(gap, 6, 4, gap_off);
	group_case(gap, 0, 4, NULL);
	for (int k = 0; k < 200; k++) {
		size_t m = 1 + tu_rng_below(&rng, 40);
		size_t n = m + tu_rng_below(&rng, 100);
		size_t nbags = 1 + tu_rng_below(&rng, 20);
		uint32_t *inv = make_inv(n, m, &rng);
		uint64_t *off = make_offsets(nbags, n, &rng);

		group_case(inv, n, m, NULL);
		group_case(inv, n, m, off);
		free(inv);
		free(off);
	}
}

/* ---------------------------------------------------------------- update */

/* Runs kern_group and kern_update over [0, m) in pieces cut at cuts[]
 * (ending with m). */
static void run_update(const struct tf_geom *g, void *const *ptrs, size_t m,
		       const uint32_t *inv, size_t n, const float *grads,
		       const uint64_t *off, et_pool mode,
		       const struct et_update_params *up, const size_t *cuts,
		       size_t ncuts)
{
	uint32_t *acc = tu_calloc(n + m + 1, sizeof(uint32_t));
	float *gsum = tu_calloc(KERN_UPD_ROWS * (size_t)g->dim, sizeof(float));
	size_t u0 = 0;

	kern_group(inv, n, m, off, acc, acc + n);
	for (size_t k = 0; k < ncuts; k++) {
		kern_update(g, ptrs, u0, cuts[k], acc, acc + n, grads, off,
			    mode, up, gsum);
		u0 = cuts[k];
	}
	free(acc);
	free(gsum);
}

/* One update case: the reference, the whole range and a split of it, all
 * the same bytes. pooled: grads per bag (offsets), in mode. */
static void update_case(const struct tf_geom *g, bool pooled, et_pool mode,
			const struct et_update_params *up, struct tu_rng *rng)
{
	size_t m = 1 + tu_rng_below(rng, 23);
	size_t n = m + tu_rng_below(rng, 50);
	size_t nbags = pooled ? 2 + tu_rng_below(rng, 10) : n;
	uint32_t *inv = make_inv(n, m, rng);
	uint64_t *off = pooled ? make_offsets(nbags, n, rng) : NULL;
	float *grads = tu_calloc(nbags * g->dim, sizeof(float));
	struct rows r, ref, split;
	size_t whole[] = {m};
	/* pieces not of KERN_UPD_ROWS rows: 1, then 5, then the rest */
	size_t cuts[] = {m < 1 ? m : 1, m < 6 ? m : 6, m};

	for (size_t i = 0; i < nbags * g->dim; i++)
		grads[i] = (float)tu_rng_double(rng, -1, 1);
	rows_make(&r, g, m, rng);
	rows_copy(&ref, &r);
	rows_copy(&split, &r);
	ref_update(g, ref.ptrs, m, inv, n, grads, off, mode, up);
	run_update(g, r.ptrs, m, inv, n, grads, off, mode, up, whole, 1);
	assert_rows_equal(&r, &ref, g, "update");
	run_update(g, split.ptrs, m, inv, n, grads, off, mode, up, cuts, 3);
	assert_rows_equal(&split, &r, g, "update in pieces");
	rows_free(&r);
	rows_free(&ref);
	rows_free(&split);
	free(inv);
	free(off);
	free(grads);
}

static void update_all(et_optim optim, uint64_t seed)
{
	const struct et_update_params ups[] = {{0.05f, 0.0f}, {0.7f, 1e-3f}};
	struct tu_rng rng;

	tu_rng_seed(&rng, seed);
	for (size_t t = 0; t < NDTYPES; t++)
		for (size_t d = 0; d < NDIMS; d++)
			for (size_t p = 0; p < 2; p++) {
				struct tf_geom g =
				    geom(dims[d], dtypes[t], optim);

				update_case(&g, false, ET_POOL_SUM, &ups[p],
					    &rng);
				update_case(&g, true, ET_POOL_SUM, &ups[p],
					    &rng);
				update_case(&g, true, ET_POOL_MEAN, &ups[p],
					    &rng);
			}
}

static void test_update_sgd(void **state)
{
	(void)state;
	update_all(ET_OPT_SGD, 5);
}

static void test_update_adagrad(void **state)
{
	(void)state;
	update_all(ET_OPT_ROWWISE_ADAGRAD, 6);
}

/* Numbers worked by hand. SGD, lr 1, one row of 0 named three times with
 * gradients 1e8, -1e8, 1: summed in input order that is 1 (w = -1); in
 * any other order 0 or -1e8. Row-wise Adagrad, dim 4, g = 1 everywhere,
 * state 0: m = 4 / 4 = 1, the step lr / (1 + 1e-8) = lr in f32: w 1 -> 0.5
 * with lr 0.5, and the state 1. */
static void test_update_by_hand(void **state)
{
	struct et_update_params up = {1.0f, 0.0f};
	struct tf_geom g = geom(1, ET_F32, ET_OPT_SGD);
	float w = 0.0f, grads[3] = {1e8f, -1e8f, 1.0f}, gsum[KERN_UPD_ROWS];
	void *ptrs[1] = {&w};
	uint32_t inv[3] = {0, 0, 0}, acc[3 + 1 + 1];
	float row[5] = {1, 1, 1, 1, 0}, g4[4] = {1, 1, 1, 1};
	float gsum4[4 * KERN_UPD_ROWS];

	(void)state;
	kern_group(inv, 3, 1, NULL, acc, acc + 3);
	kern_update(&g, ptrs, 0, 1, acc, acc + 3, grads, NULL, ET_POOL_SUM, &up,
		    gsum);
	assert_true(w == -1.0f);

	g = geom(4, ET_F32, ET_OPT_ROWWISE_ADAGRAD);
	up.lr = 0.5f;
	ptrs[0] = row;
	kern_group(inv, 1, 1, NULL, acc, acc + 1);
	kern_update(&g, ptrs, 0, 1, acc, acc + 1, g4, NULL, ET_POOL_SUM, &up,
		    gsum4);
	for (int c = 0; c < 4; c++)
		assert_true(row[c] == 0.5f);
	assert_true(row[4] == 1.0f);

	/* a pooled mean: bag 0 (gradient 4) names unique row 0 twice, bag 1
	 * (gradient 3) once: its gradient is 4/2 + 4/2 + 3/1 = 7 */
	{
		struct tf_geom g1 = geom(1, ET_F32, ET_OPT_SGD);
		float w1 = 10.0f, bg[2] = {4.0f, 3.0f};
		uint64_t off[3] = {0, 2, 3};
		uint32_t inv3[3] = {0, 0, 0};

		up.lr = 1.0f;
		ptrs[0] = &w1;
		kern_group(inv3, 3, 1, off, acc, acc + 3);
		kern_update(&g1, ptrs, 0, 1, acc, acc + 3, bg, off,
			    ET_POOL_MEAN, &up, gsum);
		assert_true(w1 == 3.0f);
	}
}

/* Rows of f16 and bf16 are re-encoded to nearest even after the update:
 * a row of 1 stepped by each amount below, the exact f32 result rounded
 * to the bits given (ties to the even neighbour; bf16 has 7 fraction
 * bits, an ulp of 2^-8 below 1 and 2^-7 above; f16 10, 2^-11 and 2^-10). */
static void test_update_rounding(void **state)
{
	static const struct {
		et_dtype t;
		float step;
		uint16_t bits;
	} cases[] = {
	    {ET_BF16, 0x1p-9f, 0x3f80},	     /* 1 - half an ulp: tie, 1 */
	    {ET_BF16, 3 * 0x1p-9f, 0x3f7e},  /* tie, to 1 - 2^-7 */
	    {ET_BF16, 0x1p-8f, 0x3f7f},	     /* exact */
	    {ET_BF16, -0x1p-9f, 0x3f80},     /* a quarter ulp: down */
	    {ET_BF16, -0x1p-8f, 0x3f80},     /* tie, 1 */
	    {ET_BF16, -3 * 0x1p-8f, 0x3f82}, /* tie, to 1 + 2^-6 */
	    {ET_F16, 0x1p-12f, 0x3c00},	     /* tie, 1 */
	    {ET_F16, 3 * 0x1p-12f, 0x3bfe},  /* tie, to 1 - 2^-10 */
	    {ET_F16, 0x1p-11f, 0x3bff},	     /* exact */
	    {ET_F16, -0x1p-11f, 0x3c00},     /* tie, 1 */
	    {ET_F16, -3 * 0x1p-11f, 0x3c02}, /* tie, to 1 + 2^-9 */
	    {ET_F16, -0x1p-12f, 0x3c00},     /* a quarter ulp: down */
	};
	struct et_update_params up = {1.0f, 0.0f};
	float gsum[KERN_UPD_ROWS];
	uint32_t inv[1] = {0}, acc[3];

	(void)state;
	kern_group(inv, 1, 1, NULL, acc, acc + 1);
	for (size_t k = 0; k < sizeof(cases) / sizeof(*cases); k++) {
		struct tf_geom g = geom(1, cases[k].t, ET_OPT_SGD);
		uint16_t h;
		void *ptrs[1] = {&h};
		float one = 1.0f;

		dtype_encode(cases[k].t, &one, &h, 1);
		kern_update(&g, ptrs, 0, 1, acc, acc + 1, &cases[k].step, NULL,
			    ET_POOL_SUM, &up, gsum);
		assert_int_equal(h, cases[k].bits);
		/* as the scalar conversion rounds the exact result */
		assert_int_equal(h, cases[k].t == ET_F16
					? et_f32_to_f16(1.0f - cases[k].step)
					: et_f32_to_bf16(1.0f - cases[k].step));
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_gather),
	    cmocka_unit_test(test_pool),
	    cmocka_unit_test(test_pool_empty),
	    cmocka_unit_test(test_pool_order),
	    cmocka_unit_test(test_group),
	    cmocka_unit_test(test_update_sgd),
	    cmocka_unit_test(test_update_adagrad),
	    cmocka_unit_test(test_update_by_hand),
	    cmocka_unit_test(test_update_rounding),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
