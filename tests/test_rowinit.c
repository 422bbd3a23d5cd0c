/*
 * test_rowinit.c - the deterministic initializer of unwritten rows.
 * Checks that rowinit_fill is a pure function of (init, scale, seed, row,
 * column): the same bits on every call, in any order of rows, whatever the
 * dimension asked for; that distinct seeds, rows and columns give distinct
 * values (including ids differing only above bit 32); and, with loose bounds
 * that a broken generator still fails, that uniform values stay in
 * [-scale, scale] with mean 0 and variance scale^2/3, normal values have
 * mean 0, standard deviation scale and the normal's tail masses, and
 * neighbouring values are uncorrelated. Uniform values are also checked
 * bit for bit against the formula of rowinit.c, one column at a time,
 * for every start column and count the vector loop splits differently.
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

#include "embtier.h"
#include "hash.h"
#include "rowinit.h"
#include "util.h"

#define DIM   128
#define NROWS 8192 /* NROWS * DIM = 1M values for the statistics */
#define NVALS (NROWS * DIM)

static const et_init all_inits[] = {ET_INIT_ZEROS, ET_INIT_UNIFORM,
				    ET_INIT_NORMAL};

static uint32_t f2u(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	return u;
}

/* Same inputs, same bits; nothing written past dim. */
static void test_deterministic(void **state)
{
	float a[DIM + 4], b[DIM + 4];
	int i, k;

	for (i = 0; i < 3; i++) {
		for (k = 0; k < 50; k++) {
			uint64_t row = (uint64_t)k * 0x9e3779b97f4aULL;

			memset(a, 0x5a, sizeof(a));
			memset(b, 0x5a, sizeof(b));
			rowinit_fill(all_inits[i], 0.25f, 42, row, DIM, a);
			rowinit_fill(all_inits[i], 0.25f, 42, row, DIM, b);
			assert_memory_equal(a, b, sizeof(a));
			/* The sentinel past dim is intact. */
			assert_int_equal(f2u(a[DIM]), 0x5a5a5a5a);
			assert_int_equal(f2u(a[DIM + 3]), 0x5a5a5a5a);
		}
	}
}

/* Filling rows in a random order, interleaved with fills of an unrelated
 * table, gives the same bits as filling them one after another. */
static void test_order_independent(void **state)
{
	const uint32_t dim = 16;
	const size_t n = 2000;
	float *seq = tu_calloc(n * dim, sizeof(float));
	float *rnd = tu_calloc(n * dim, sizeof(float));
	uint64_t *order = tu_calloc(n, sizeof(uint64_t));
	float junk[64];
	struct tu_rng r;
	size_t i;
	int k;

	for (k = 1; k < 3; k++) {
		et_init init = all_inits[k];

		for (i = 0; i < n; i++) {
			rowinit_fill(init, 0.5f, 7, 1000 + i, dim,
				     seq + i * dim);
			order[i] = i;
		}
		tu_rng_seed(&r, 99 + k);
		tu_shuffle_u64(&r, order, n);
		for (i = 0; i < n; i++) {
			uint64_t j = order[i];

			rowinit_fill(ET_INIT_NORMAL, 3.0f, 8, j * 3, 64, junk);
			rowinit_fill(init, 0.5f, 7, 1000 + j, dim,
				     rnd + j * dim);
		}
		assert_memory_equal(seq, rnd, n * dim * sizeof(float));
	}
	free(seq);
	free(rnd);
	free(order);
}

/* The value of column c does not depend on how many columns were asked for
 * (rowinit.h: a pure function of (seed, row, column)). */
/* Uniform column c of row r (seed s, scale k) is (2u - 1) k with u the
 * top 24 bits of hash_mix(hash_u64(r, s) + c) over 2^24: computed here
 * one column at a time, it must match what the initializer computes
 * eight lanes at a time, whatever the start column and count. */
static void test_uniform_formula(void **state)
{
	static const float scales[] = {1.0f, 0.0883883f, 3.5f};
	float got[48];

	(void)state;
	for (uint64_t k = 0; k < 3000; k++) {
		uint64_t row = k < 2 ? (k ? UINT64_MAX : 0) : hash_mix(k);
		uint64_t seed = k % 7, base = hash_u64(row, seed);
		uint32_t col0 = (uint32_t)(k % 11), n = 1 + (uint32_t)(k % 41);
		float scale = scales[k % 3];

		memset(got, 0x5a, sizeof(got));
		rowinit_fill_cols(ET_INIT_UNIFORM, scale, seed, row, col0, n,
				  got);
		for (uint32_t c = 0; c < n; c++) {
			uint64_t w = hash_mix(base + col0 + c);
			float u = (float)(w >> 40) / 16777216.0f;
			float want = (2.0f * u - 1.0f) * scale;

			assert_int_equal(f2u(got[c]), f2u(want));
		}
		assert_int_equal(f2u(got[n]), 0x5a5a5a5a);
	}
}

static void test_dim_independent(void **state)
{
	static const uint32_t dims[] = {1, 2, 3, 7, 64, 127};
	float full[128], part[128];
	size_t d;
	int k;

	for (k = 1; k < 3; k++) {
		rowinit_fill(all_inits[k], 1.0f, 5, 77, 128, full);
		for (d = 0; d < sizeof(dims) / sizeof(dims[0]); d++) {
			rowinit_fill(all_inits[k], 1.0f, 5, 77, dims[d], part);
			assert_memory_equal(full, part,
					    dims[d] * sizeof(float));
		}
	}
}

static int rows_equal(const float *a, const float *b, uint32_t dim)
{
	return memcmp(a, b, dim * sizeof(float)) == 0;
}

/* Different seeds, rows and columns give different values; in particular
 * ids and seeds that differ only above bit 31 (no truncation to 32 bits). */
static void test_distinct(void **state)
{
	const uint32_t dim = 16;
	float a[16], b[16];
	int k;

	for (k = 1; k < 3; k++) {
		et_init init = all_inits[k];
		uint64_t i, j;
		float *many;
		const uint64_t n = 1000;

		rowinit_fill(init, 1.0f, 0, 0, dim, a);
		rowinit_fill(init, 1.0f, 1, 0, dim, b);
		assert_false(rows_equal(a, b, dim));
		rowinit_fill(init, 1.0f, 1ULL << 32, 0, dim, b);
		assert_false(rows_equal(a, b, dim));
		rowinit_fill(init, 1.0f, 0, 1ULL << 32, dim, b);
		assert_false(rows_equal(a, b, dim));
		rowinit_fill(init, 1.0f, 0, 1, dim, b);
		assert_false(rows_equal(a, b, dim));
		rowinit_fill(init, 1.0f, 0, ET_MAX_ROWS - 1, dim, b);
		assert_false(rows_equal(a, b, dim));
		/* The columns of a row are not all the same value. */
		for (i = 1; i < dim; i++)
			if (a[i] != a[0])
				break;
		assert_true(i < dim);

		/* No two of 1000 consecutive rows coincide, nor does any row
		 * equal another shifted by a column. */
		many = tu_calloc(n * dim, sizeof(float));
		for (i = 0; i < n; i++)
			rowinit_fill(init, 1.0f, 3, i, dim, many + i * dim);
		for (i = 0; i < n; i++)
			for (j = i + 1; j < n; j++) {
				if (rows_equal(many + i * dim, many + j * dim,
					       dim))
					fail_msg("rows %llu and %llu equal",
						 (unsigned long long)i,
						 (unsigned long long)j);
				if (rows_equal(many + i * dim + 1,
					       many + j * dim, dim - 1))
					fail_msg("row %llu is row %llu shifted",
						 (unsigned long long)j,
						 (unsigned long long)i);
			}
		free(many);
	}
}

/* Zeros are +0.0 bit for bit, whatever the scale and seed. */
static void test_zeros(void **state)
{
	float v[DIM];
	int i, k;

	for (k = 0; k < 100; k++) {
		memset(v, 0x77, sizeof(v));
		rowinit_fill(ET_INIT_ZEROS, k ? (float)k : 0.0f, k * 1234567ULL,
			     k * 31ULL, DIM, v);
		for (i = 0; i < DIM; i++)
			assert_int_equal(f2u(v[i]), 0);
	}
}

/* Moments and correlations of NROWS x DIM values. */
struct moments {
	double mean, var, min, max;
	double corr_col;   /* between columns c and c + 1 of a row */
	double corr_row;   /* between rows r and r + 1 at one column */
	double within[3];  /* fraction with |x| <= 1, 2, 3 scales */
	unsigned hist[10]; /* x / scale in ten equal bins over [-1, 1) */
	int all_finite;
};

static void measure(et_init init, float scale, uint64_t seed, struct moments *m)
{
	float *v = tu_calloc((size_t)NROWS * DIM, sizeof(float));
	double s = 0, s2 = 0, sc = 0, sr = 0;
	size_t n = (size_t)NROWS * DIM, i;
	uint64_t r;

	memset(m, 0, sizeof(*m));
	m->min = INFINITY;
	m->max = -INFINITY;
	m->all_finite = 1;
	for (r = 0; r < NROWS; r++)
		rowinit_fill(init, scale, seed, r, DIM, v + r * DIM);
	for (i = 0; i < n; i++) {
		double x = v[i];
		double z = fabs(x) / scale;
		int b;

		if (!isfinite(x))
			m->all_finite = 0;
		s += x;
		s2 += x * x;
		if (x < m->min)
			m->min = x;
		if (x > m->max)
			m->max = x;
		if (i % DIM != DIM - 1)
			sc += x * v[i + 1];
		if (i + DIM < n)
			sr += x * v[i + DIM];
		m->within[0] += z <= 1;
		m->within[1] += z <= 2;
		m->within[2] += z <= 3;
		b = (int)floor((x / scale + 1.0) * 5.0);
		if (b >= 0 && b < 10)
			m->hist[b]++;
		else if (b == 10)
			m->hist[9]++; /* x == scale exactly */
	}
	m->mean = s / n;
	m->var = s2 / n - m->mean * m->mean;
	m->corr_col = sc / (double)(NROWS * (DIM - 1)) / m->var;
	m->corr_row = sr / (double)((NROWS - 1) * DIM) / m->var;
	for (i = 0; i < 3; i++)
		m->within[i] /= n;
	free(v);
}

/*
 * Uniform(+-s) over 1M values: the sample mean has standard error
 * s/sqrt(3)/1000 = 0.00058 s and the sample variance 0.0003 s^2, so the
 * bounds below are about 8 and 15 standard errors wide; a bin of the
 * histogram holds 104858 +- 310, and may stray by 3% (10 errors).
 */
static void test_uniform_stats(void **state)
{
	static const float scales[] = {1.0f, 0.01f, 1.0f / 11.3137085f};
	size_t k;
	int b;

	for (k = 0; k < 3; k++) {
		const float s = scales[k];
		struct moments m;

		measure(ET_INIT_UNIFORM, s, 1000 + k, &m);
		print_message("uniform s=%g: mean %.3g var/s^2 %.5f min %.5f "
			      "max %.5f corr %.4f %.4f\n",
			      s, m.mean / s, m.var / (s * s), m.min / s,
			      m.max / s, m.corr_col, m.corr_row);
		assert_true(m.all_finite);
		assert_true(m.min >= -s && m.max <= s);
		assert_true(m.min < -0.999 * s && m.max > 0.999 * s);
		assert_true(fabs(m.mean) < 0.005 * s);
		assert_true(fabs(m.var - s * s / 3) < 0.005 * s * s);
		assert_true(fabs(m.corr_col) < 0.01);
		assert_true(fabs(m.corr_row) < 0.01);
		for (b = 0; b < 10; b++)
			if (fabs(m.hist[b] - NVALS / 10.0) > 0.03 * NVALS / 10)
				fail_msg("uniform bin %d holds %u of %d", b,
					 m.hist[b], NVALS);
	}
}

/*
 * Normal(0, s) over 1M values: the mean's standard error is 0.001 s, the
 * standard deviation's 0.0007 s; the masses within 1, 2, 3 s are 0.6827,
 * 0.9545, 0.9973 with standard errors of 0.0005, 0.0002, 0.00005.
 */
static void test_normal_stats(void **state)
{
	static const float scales[] = {1.0f, 0.05f};
	size_t k;

	for (k = 0; k < 2; k++) {
		const float s = scales[k];
		struct moments m;
		double sd;

		measure(ET_INIT_NORMAL, s, 2000 + k, &m);
		sd = sqrt(m.var);
		print_message("normal s=%g: mean %.3g sd/s %.5f within %.4f "
			      "%.4f %.5f max %.2f corr %.4f %.4f\n",
			      s, m.mean / s, sd / s, m.within[0], m.within[1],
			      m.within[2], fmax(-m.min, m.max) / s, m.corr_col,
			      m.corr_row);
		assert_true(m.all_finite);
		assert_true(fabs(m.mean) < 0.005 * s);
		assert_true(fabs(sd - s) < 0.01 * s);
		assert_true(fabs(m.within[0] - 0.6827) < 0.005);
		assert_true(fabs(m.within[1] - 0.9545) < 0.003);
		assert_true(fabs(m.within[2] - 0.9973) < 0.001);
		/* About 66 of 1M values lie beyond 4 s; none beyond 9 s. */
		assert_true(fmax(-m.min, m.max) > 4 * s);
		assert_true(fmax(-m.min, m.max) < 9 * s);
		assert_true(m.min < 0 && m.max > 0);
		assert_true(fabs(m.corr_col) < 0.01);
		assert_true(fabs(m.corr_row) < 0.01);
	}
}

/* The scale multiplies: uniform with scale 2s is twice uniform with s,
 * to rounding. */
static void test_scale_applies(void **state)
{
	float a[DIM], b[DIM];
	int k, i;

	for (k = 1; k < 3; k++) {
		rowinit_fill(all_inits[k], 0.5f, 9, 4, DIM, a);
		rowinit_fill(all_inits[k], 1.0f, 9, 4, DIM, b);
		for (i = 0; i < DIM; i++)
			assert_true(fabsf(2 * a[i] - b[i]) <=
				    1e-6f * (fabsf(b[i]) + 1e-6f));
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_deterministic),
	    cmocka_unit_test(test_order_independent),
	    cmocka_unit_test(test_dim_independent),
	    cmocka_unit_test(test_uniform_formula),
	    cmocka_unit_test(test_distinct),
	    cmocka_unit_test(test_zeros),
	    cmocka_unit_test(test_uniform_stats),
	    cmocka_unit_test(test_normal_stats),
	    cmocka_unit_test(test_scale_applies),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
