/*
 * test_table_file.c - table files, through the public et_tfile_* API and the
 * internal raw-row API (tf_*). A plain reference model (an array of every
 * row's expected f32 values and optimizer state, starting from the
 * initializer rounded to the storage type) runs beside the real file on
 * random batches with duplicates, shared blocks and bulk ranges, for every
 * storage type and optimizer, across close and reopen. Beyond that: lazy
 * rows cost no I/O and equal the initializer, a 2^33-row table is sparse,
 * out-of-range rows change nothing, every kind of corrupt file gives its own
 * error (bytes edited per docs/FORMAT.md), injected I/O faults surface from
 * reads and writes with every block left whole, and read-only files refuse
 * writes. Skips with a reason without io_uring or O_DIRECT.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "dtype.h"
#include "embtier.h"
#include "hash.h"
#include "io.h"
#include "mem_host.h"
#include "rowinit.h"
#include "table_file.h"
#include "util.h"

/* Format facts from docs/FORMAT.md, used to corrupt files on purpose. */
#define HDR_MAGIC_OFF	0
#define HDR_VERSION_OFF 8
#define HDR_ROWS_OFF	16
#define HDR_DIM_OFF	24
#define HDR_SUM_OFF	248
#define TRAILER		16

struct tfx {
	const char *path;
	et_tfile *tf;
	io_ctx *io; /* an external ring, when a test attaches one */
};

static int setup(void **state)
{
	*state = tu_calloc(1, sizeof(struct tfx));
	return 0;
}

static int teardown(void **state)
{
	struct tfx *f = *state;

	io_fault_clear();
	if (f->tf && f->io)
		tf_attach_io(f->tf, NULL);
	et_tfile_close(f->tf);
	io_close(f->io);
	if (f->path)
		tu_unlink(f->path);
	free(f);
	return 0;
}

static uint32_t f2u(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	return u;
}

/* f as the storage type t holds it. */
static float round_to(et_dtype t, float f)
{
	switch (t) {
	case ET_F16:
		return et_f16_to_f32(et_f32_to_f16(f));
	case ET_BF16:
		return et_bf16_to_f32(et_f32_to_bf16(f));
	default:
		return f;
	}
}

static const char *ename(int err)
{
	static char buf[128];

	snprintf(buf, sizeof(buf), "%d (%s)", err, et_strerror(err));
	return buf;
}

#define assert_err(expr, want)                                                 \
	do {                                                                   \
		int got_ = (expr);                                             \
		if (got_ != (want))                                            \
			fail_msg("%s = %s, expected %s", #expr, ename(got_),   \
				 et_strerror(want));                           \
	} while (0)

/* Creates a table at a fresh path, skipping when io_uring or O_DIRECT is
 * missing. */
static et_tfile *mk(struct tfx *f, const struct et_table_params *p)
{
	tu_require_uring();
	tu_require_direct();
	f->path = tu_path("tf");
	assert_err(et_tfile_create(f->path, p, &f->tf), 0);
	assert_non_null(f->tf);
	return f->tf;
}

static void reopen(struct tfx *f, unsigned flags)
{
	et_tfile_close(f->tf);
	f->tf = NULL;
	assert_err(et_tfile_open(f->path, flags, &f->tf), 0);
	assert_non_null(f->tf);
}

static struct et_table_info info_of(et_tfile *tf)
{
	struct et_table_info in;

	assert_err(et_tfile_info(tf, &in), 0);
	return in;
}

/* ---------------------------------------------------------------- model */

/* Every row's expected values (as stored, in f32) and state. */
struct model {
	uint64_t rows;
	uint32_t dim, sf;
	et_dtype dtype;
	float *val; /* rows x dim */
	float *st;  /* rows x sf */
};

/* The initial values of row as the file must serve them. */
static void init_row(const struct et_table_info *in, uint64_t row, float *out)
{
	uint32_t c;

	rowinit_fill(in->init, in->init_scale, in->seed, row, in->dim, out);
	for (c = 0; c < in->dim; c++)
		out[c] = round_to(in->dtype, out[c]);
}

static void model_init(struct model *m, const struct et_table_info *in)
{
	uint64_t r;

	m->rows = in->rows;
	m->dim = in->dim;
	m->sf = in->state_floats;
	m->dtype = in->dtype;
	m->val = tu_calloc(m->rows * m->dim, sizeof(float));
	m->st = tu_calloc(m->rows * (m->sf ? m->sf : 1), sizeof(float));
	for (r = 0; r < m->rows; r++)
		init_row(in, r, m->val + r * m->dim);
}

static void model_free(struct model *m)
{
	free(m->val);
	free(m->st);
}

/* Applies a write_rows batch to the model: in order, so the last of
 * repeated rows wins; without state, the stored state is kept. */
static void model_write(struct model *m, const uint64_t *rows, size_t n,
			const float *in, const float *st)
{
	size_t i;
	uint32_t c;

	for (i = 0; i < n; i++) {
		for (c = 0; c < m->dim; c++)
			m->val[rows[i] * m->dim + c] =
			    round_to(m->dtype, in[i * m->dim + c]);
		if (st && m->sf)
			memcpy(m->st + rows[i] * m->sf, st + i * m->sf,
			       m->sf * sizeof(float));
	}
}

static void fill_random(struct tu_rng *r, float *v, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		v[i] = (float)tu_rng_double(r, -3.0, 3.0);
}

static void expect_bits(const float *got, const float *want, size_t n,
			const char *what, uint64_t row)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (f2u(got[i]) != f2u(want[i]))
			fail_msg("%s of row %llu, [%zu]: got %a, expected %a",
				 what, (unsigned long long)row, i, got[i],
				 want[i]);
}

/* Reads rows (in the given order) and compares with the model. */
static void check_rows(et_tfile *tf, const struct model *m,
		       const uint64_t *rows, size_t n)
{
	float *out = tu_calloc(n * m->dim, sizeof(float));
	float *st = tu_calloc(n * (m->sf ? m->sf : 1), sizeof(float));
	size_t i;

	assert_err(et_tfile_read_rows(tf, rows, n, out, m->sf ? st : NULL), 0);
	for (i = 0; i < n; i++) {
		expect_bits(out + i * m->dim, m->val + rows[i] * m->dim, m->dim,
			    "value", rows[i]);
		if (m->sf)
			expect_bits(st + i * m->sf, m->st + rows[i] * m->sf,
				    m->sf, "state", rows[i]);
	}
	free(out);
	free(st);
}

/* Every row, in a shuffled order. */
static void check_all(et_tfile *tf, const struct model *m, uint64_t seed)
{
	uint64_t *rows = tu_calloc(m->rows, sizeof(uint64_t));
	struct tu_rng r;
	uint64_t i;

	for (i = 0; i < m->rows; i++)
		rows[i] = i;
	tu_rng_seed(&r, seed);
	tu_shuffle_u64(&r, rows, m->rows);
	check_rows(tf, m, rows, m->rows);
	free(rows);
}

/* One random write_rows batch of up to max_n rows, duplicates likely,
 * applied to both the file and the model. */
static void random_batch(et_tfile *tf, struct model *m, struct tu_rng *r,
			 size_t max_n)
{
	size_t n = 1 + tu_rng_below(r, max_n), i;
	uint64_t *rows = tu_calloc(n, sizeof(uint64_t));
	float *in = tu_calloc(n * m->dim, sizeof(float));
	float *st = tu_calloc(n * (m->sf ? m->sf : 1), sizeof(float));
	bool with_state = m->sf && tu_rng_below(r, 2);
	uint64_t hot = tu_rng_below(r, m->rows);

	for (i = 0; i < n; i++) {
		/* A third of the rows near one spot: shared blocks. */
		if (i % 3 == 0)
			rows[i] = (hot + tu_rng_below(r, 8)) % m->rows;
		else
			rows[i] = tu_rng_below(r, m->rows);
	}
	fill_random(r, in, n * m->dim);
	fill_random(r, st, n * (m->sf ? m->sf : 1));
	assert_err(et_tfile_write_rows(tf, rows, n, in, with_state ? st : NULL),
		   0);
	model_write(m, rows, n, in, with_state ? st : NULL);
	free(rows);
	free(in);
	free(st);
}

/* ---------------------------------------------------------- round trips */

static void check_header_bytes(const char *path, const struct et_table_info *in)
{
	unsigned char h[256];
	uint32_t v;
	uint64_t rows, sum;

	assert_int_equal(tu_pread(path, 0, h, sizeof(h)), 0);
	assert_memory_equal(h + HDR_MAGIC_OFF, "EMBTIERT", 8);
	memcpy(&v, h + HDR_VERSION_OFF, 4);
	assert_int_equal(v, in->format_version);
	memcpy(&rows, h + HDR_ROWS_OFF, 8);
	assert_int_equal(rows, in->rows);
	memcpy(&sum, h + HDR_SUM_OFF, 8);
	assert_true(sum == hash_bytes(h, HDR_SUM_OFF));
}

/*
 * For each storage type and optimizer: create, random batches against the
 * model, close, reopen (read-write, then read-only): every row, value and
 * state, is what the model says; f32 exactly what was written, f16 and
 * bf16 the written values converted.
 */
static void test_roundtrip_types(void **state)
{
	static const et_dtype types[] = {ET_F32, ET_F16, ET_BF16};
	static const et_optim optims[] = {ET_OPT_SGD, ET_OPT_ROWWISE_ADAGRAD};
	struct tfx *f = *state;
	size_t ti, oi;
	int k;

	for (ti = 0; ti < 3; ti++) {
		for (oi = 0; oi < 2; oi++) {
			struct et_table_params p = {
			    .rows = 1000,
			    .dim = 13,
			    .dtype = types[ti],
			    .optim = optims[oi],
			    .init = ET_INIT_UNIFORM,
			    .seed = 5 + ti * 2 + oi,
			};
			struct et_table_info in, in2;
			struct model m;
			struct tu_rng r;

			mk(f, &p);
			in = info_of(f->tf);
			assert_int_equal(in.dtype, types[ti]);
			assert_int_equal(in.optim, optims[oi]);
			assert_int_equal(in.state_floats, oi ? 1 : 0);
			assert_int_equal(in.row_bytes,
					 13 * dtype_size(types[ti]) + 4 * oi);
			model_init(&m, &in);
			tu_rng_seed(&r, 100 + ti * 2 + oi);
			for (k = 0; k < 40; k++)
				random_batch(f->tf, &m, &r, 30);
			check_all(f->tf, &m, 1);
			reopen(f, 0);
			in2 = info_of(f->tf);
			assert_int_equal(in2.rows, in.rows);
			assert_int_equal(in2.dim, in.dim);
			assert_int_equal(in2.dtype, in.dtype);
			assert_int_equal(in2.optim, in.optim);
			assert_int_equal(in2.init, in.init);
			assert_true(in2.init_scale == in.init_scale);
			assert_int_equal(in2.seed, in.seed);
			assert_int_equal(in2.block_size, in.block_size);
			check_all(f->tf, &m, 2);
			for (k = 0; k < 10; k++)
				random_batch(f->tf, &m, &r, 30);
			reopen(f, ET_TFILE_RDONLY);
			check_all(f->tf, &m, 3);
			check_header_bytes(f->path, &in2);
			assert_err(
			    et_tfile_verify(f->tf, NULL, NULL, NULL, NULL), 0);
			model_free(&m);
			et_tfile_close(f->tf);
			f->tf = NULL;
			tu_unlink(f->path);
		}
	}
}

/* Values that exercise the conversions (f16 overflow and subnormals,
 * signed zero) survive as the conversions say. */
static void test_roundtrip_special_values(void **state)
{
	static const et_dtype types[] = {ET_F32, ET_F16, ET_BF16};
	static const float vals[8] = {65520.0f,	 -1e-7f,	-0.0f,
				      3e38f,	 1.0009765625f, 0x1p-24f,
				      -65504.0f, 1e-30f};
	struct tfx *f = *state;
	size_t ti;
	int i;

	for (ti = 0; ti < 3; ti++) {
		struct et_table_params p = {
		    .rows = 10, .dim = 8, .dtype = types[ti]};
		uint64_t row = 3;
		float out[8];

		mk(f, &p);
		assert_err(et_tfile_write_rows(f->tf, &row, 1, vals, NULL), 0);
		reopen(f, 0);
		assert_err(et_tfile_read_rows(f->tf, &row, 1, out, NULL), 0);
		for (i = 0; i < 8; i++)
			if (f2u(out[i]) != f2u(round_to(types[ti], vals[i])))
				fail_msg("%s value %a read back as %a",
					 types[ti] == ET_F32   ? "f32"
					 : types[ti] == ET_F16 ? "f16"
							       : "bf16",
					 vals[i], out[i]);
		et_tfile_close(f->tf);
		f->tf = NULL;
		tu_unlink(f->path);
	}
}

/* Repeated rows: the last occurrence wins, within one batch, whatever
 * the order; rows sharing a block keep each other's values. */
static void test_duplicates_and_shared_blocks(void **state)
{
	struct tfx *f = *state;
	struct et_table_params p = {.rows = 200,
				    .dim = 64,
				    .optim = ET_OPT_ROWWISE_ADAGRAD,
				    .init = ET_INIT_NORMAL,
				    .seed = 9};
	struct et_table_info in;
	struct model m;
	float v[6 * 64], st[6], out[64], ost;
	uint64_t rows[6] = {5, 7, 5, 5, 100, 7};
	uint64_t one;
	struct tf_stats s0, s1;
	struct tu_rng r;
	int i;

	mk(f, &p);
	in = info_of(f->tf);
	assert_true(in.rows_per_block > 8); /* rows 0..8 share block 0 */
	model_init(&m, &in);
	tu_rng_seed(&r, 3);
	fill_random(&r, v, 6 * 64);
	for (i = 0; i < 6; i++)
		st[i] = (float)(i + 1);
	assert_err(et_tfile_write_rows(f->tf, rows, 6, v, st), 0);
	model_write(&m, rows, 6, v, st);
	one = 5;
	assert_err(et_tfile_read_rows(f->tf, &one, 1, out, &ost), 0);
	expect_bits(out, v + 3 * 64, 64, "row 5 (last of three)", 5);
	assert_true(ost == 4.0f);
	one = 7;
	assert_err(et_tfile_read_rows(f->tf, &one, 1, out, &ost), 0);
	expect_bits(out, v + 5 * 64, 64, "row 7 (last of two)", 7);
	assert_true(ost == 6.0f);

	/* Row 0 then row 1, separately: both in block 0, both survive, and
	 * the second is a read-modify-write of a written block. */
	tf_get_stats(f->tf, &s0);
	for (i = 0; i < 2; i++) {
		one = (uint64_t)i;
		fill_random(&r, v, 64);
		assert_err(et_tfile_write_rows(f->tf, &one, 1, v, NULL), 0);
		model_write(&m, &one, 1, v, NULL);
	}
	tf_get_stats(f->tf, &s1);
	assert_true(s1.rmw_reads >= s0.rmw_reads + 2);
	assert_int_equal(s1.blocks_written, s0.blocks_written + 2);
	check_all(f->tf, &m, 4);
	/* Rows of one block in one batch: one block write. */
	{
		uint64_t rs[4] = {2, 8, 3, 2};

		tf_get_stats(f->tf, &s0);
		fill_random(&r, v, 4 * 64);
		assert_err(et_tfile_write_rows(f->tf, rs, 4, v, NULL), 0);
		model_write(&m, rs, 4, v, NULL);
		tf_get_stats(f->tf, &s1);
		assert_int_equal(s1.blocks_written, s0.blocks_written + 1);
	}
	/* A hole block needs no read before its first write. */
	{
		uint64_t rs = in.rows_per_block * 5 + 1;

		tf_get_stats(f->tf, &s0);
		fill_random(&r, v, 64);
		assert_err(et_tfile_write_rows(f->tf, &rs, 1, v, NULL), 0);
		model_write(&m, &rs, 1, v, NULL);
		tf_get_stats(f->tf, &s1);
		assert_int_equal(s1.blocks_read, s0.blocks_read);
		assert_int_equal(s1.rmw_reads, s0.rmw_reads);
	}
	check_all(f->tf, &m, 5);
	/* Many random batches, small table: lots of sharing. */
	for (i = 0; i < 100; i++)
		random_batch(f->tf, &m, &r, 40);
	check_all(f->tf, &m, 6);
	reopen(f, 0);
	check_all(f->tf, &m, 7);
	model_free(&m);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Batches of hundreds of rows, sorted by block before they are read or
 * written: rows far apart (block numbers differing in three bytes, so
 * every pass of the sort counts), repeated within a batch (the last copy
 * of a row wins), read back in other orders with rows never written
 * among them, before and after a reopen. */
static void test_large_batches(void **state)
{
	struct tfx *f = *state;
	enum { K = 1500, W = 700, R = 1100, DIM = 4 };
	struct et_table_params p = {
	    .rows = 1ULL << 26, .dim = DIM, .init = ET_INIT_UNIFORM, .seed = 5};
	struct et_table_info in;
	uint64_t *set = tu_calloc(K, sizeof(uint64_t));
	float *want = tu_calloc((size_t)K * DIM, sizeof(float));
	uint64_t rows[R];
	size_t pick[R];
	float v[R * DIM], out[R * DIM];
	uint64_t blk[R], nb;
	struct tf_stats s0, s1;
	struct tu_rng r;

	mk(f, &p);
	in = info_of(f->tf);
	assert_true(in.blocks > (1u << 16));
	tu_rng_seed(&r, 41);
	/* K distinct rows: a cluster at the start, the rest anywhere */
	for (size_t k = 0; k < K; k++) {
		bool again;

		do {
			set[k] = k < 100
				     ? tu_rng_below(&r, 4 * in.rows_per_block)
				     : tu_rng_below(&r, p.rows);
			again = false;
			for (size_t j = 0; j < k && !again; j++)
				again = set[j] == set[k];
		} while (again);
		init_row(&in, set[k], want + k * DIM);
	}
	for (int round = 0; round < 6; round++) {
		/* a write of W rows of the first 2K/3, many twice or more */
		for (size_t i = 0; i < W; i++) {
			pick[i] = tu_rng_below(&r, 2 * K / 3);
			rows[i] = set[pick[i]];
		}
		fill_random(&r, v, W * DIM);
		assert_err(et_tfile_write_rows(f->tf, rows, W, v, NULL), 0);
		for (size_t i = 0; i < W; i++)
			memcpy(want + pick[i] * DIM, v + i * DIM,
			       DIM * sizeof(float));
		if (round == 4)
			reopen(f, 0);
		/* a read of R rows of all K, some twice */
		for (size_t i = 0; i < R; i++) {
			pick[i] = tu_rng_below(&r, K);
			rows[i] = set[pick[i]];
		}
		tf_get_stats(f->tf, &s0);
		assert_err(et_tfile_read_rows(f->tf, rows, R, out, NULL), 0);
		tf_get_stats(f->tf, &s1);
		for (size_t i = 0; i < R; i++)
			expect_bits(out + i * DIM, want + pick[i] * DIM, DIM,
				    "large batch", rows[i]);
		/* each written block read once: the batch was in block
		 * order */
		for (size_t i = 0; i < R; i++)
			blk[i] = tf_row_materialized(f->tf, rows[i])
				     ? rows[i] / in.rows_per_block
				     : UINT64_MAX;
		qsort(blk, R, sizeof(*blk), cmp_u64);
		nb = 0;
		for (size_t i = 0; i < R && blk[i] != UINT64_MAX; i++)
			nb += i == 0 || blk[i] != blk[i - 1];
		assert_int_equal(s1.blocks_read - s0.blocks_read, nb);
	}
	free(set);
	free(want);
}

/* Bulk path: ranges with partial blocks at both ends, ranges of more than
 * 8 MiB (more than the bulk writer's buffers hold at once), one ending at
 * the last (partial) block. */
static void test_write_range(void **state)
{
	struct tfx *f = *state;
	struct et_table_params p = {.rows = 80000,
				    .dim = 64,
				    .dtype = ET_F16,
				    .init = ET_INIT_UNIFORM,
				    .seed = 21};
	struct et_table_info in;
	struct model m;
	struct tu_rng r;
	struct tf_stats s;
	float *v = tu_calloc((size_t)80000 * 64, sizeof(float));
	uint64_t ids[3];
	static const uint64_t ranges[][2] = {
	    {3, 500}, {0, 1}, {79990, 10}, {1234, 70000}, {7, 1}, {0, 80000},
	};
	size_t k;

	mk(f, &p);
	in = info_of(f->tf);
	model_init(&m, &in);
	tu_rng_seed(&r, 8);
	for (k = 0; k < sizeof(ranges) / sizeof(ranges[0]); k++) {
		uint64_t first = ranges[k][0], n = ranges[k][1], i;

		fill_random(&r, v, n * 64);
		assert_err(et_tfile_write_range(f->tf, first, n, v), 0);
		for (i = 0; i < n; i++) {
			ids[0] = first + i;
			model_write(&m, ids, 1, v + i * 64, NULL);
		}
		if (k == 0 || k == 3) {
			/* Rows just outside the range are untouched. */
			ids[0] = first - 1;
			ids[1] = first + n;
			ids[2] = first + n + 1;
			check_rows(f->tf, &m, ids, 3);
		}
		if (k == 0)
			check_all(f->tf, &m, 9);
	}
	check_all(f->tf, &m, 10);
	in = info_of(f->tf);
	assert_int_equal(in.blocks_written, in.blocks);
	tf_get_stats(f->tf, &s);
	assert_true(s.blocks_written >= in.blocks);
	assert_err(et_tfile_verify(f->tf, NULL, NULL, NULL, NULL), 0);
	/* Empty ranges are no-ops. */
	assert_err(et_tfile_write_range(f->tf, 5, 0, v), 0);
	reopen(f, ET_TFILE_RDONLY);
	check_all(f->tf, &m, 11);
	model_free(&m);
	free(v);
}

/*
 * With row-wise Adagrad, a bulk range keeps no two policies for state at
 * once: rows of whole blocks and rows of the partial blocks at the ends
 * must come out the same way (all kept, or all reset to zero).
 */
static void test_write_range_state(void **state)
{
	struct tfx *f = *state;
	struct et_table_params p = {
	    .rows = 300, .dim = 16, .optim = ET_OPT_ROWWISE_ADAGRAD};
	struct et_table_info in;
	float v[300 * 16] = {0}, st[300], out[300 * 16], ost[300];
	uint64_t ids[300], i;
	int kept = 0, zeroed = 0;

	mk(f, &p);
	in = info_of(f->tf);
	assert_true(in.rows_per_block < 100);
	for (i = 0; i < 300; i++) {
		ids[i] = i;
		st[i] = 1.0f + (float)i;
		v[i * 16] = (float)i;
	}
	assert_err(et_tfile_write_rows(f->tf, ids, 300, v, st), 0);
	/* From mid-block to mid-block, several whole blocks between. */
	assert_err(et_tfile_write_range(f->tf, 5, 250, v), 0);
	assert_err(et_tfile_read_rows(f->tf, ids, 300, out, ost), 0);
	for (i = 0; i < 300; i++) {
		if (i < 5 || i >= 255) {
			assert_true(ost[i] == st[i]);
			continue;
		}
		assert_true(out[i * 16] == v[(i - 5) * 16]);
		if (ost[i] == st[i])
			kept++;
		else if (ost[i] == 0.0f)
			zeroed++;
		else
			fail_msg("row %llu state %g: neither kept nor zero",
				 (unsigned long long)i, ost[i]);
	}
	print_message("write_range state: %d rows kept, %d zeroed\n", kept,
		      zeroed);
	if (kept && zeroed)
		fail_msg("write_range kept the state of %d rows (partial "
			 "blocks) and zeroed %d (whole blocks)",
			 kept, zeroed);
}

/* ----------------------------------------------------------- lazy rows */

/*
 * Unwritten rows equal rowinit_fill converted to the storage type, bit for
 * bit, in any order, with duplicates, with zero state, and without any I/O.
 * After one row of a block is written, the block's other rows still read as
 * their initial values.
 */
static void test_lazy_rows(void **state)
{
	static const et_dtype types[] = {ET_F32, ET_F16, ET_BF16};
	static const et_init inits[] = {ET_INIT_NORMAL, ET_INIT_UNIFORM,
					ET_INIT_ZEROS};
	struct tfx *f = *state;
	const size_t n = 2000;
	uint64_t *rows = tu_calloc(n, sizeof(uint64_t));
	float *a = tu_calloc(n * 33, sizeof(float));
	float *b = tu_calloc(n * 33, sizeof(float));
	float *st = tu_calloc(n, sizeof(float));
	float want[33];
	unsigned char raw[33 * 4 + 4], rawwant[33 * 4 + 4];
	size_t ti, i;

	for (ti = 0; ti < 3; ti++) {
		struct et_table_params p = {
		    .rows = 1000000,
		    .dim = 33,
		    .dtype = types[ti],
		    .optim = ET_OPT_ROWWISE_ADAGRAD,
		    .init = inits[ti],
		    .init_scale = ti == 1 ? 0.5f : 0.0f,
		    .seed = 1ULL << 40,
		};
		struct et_table_info in;
		struct tf_stats s;
		struct tu_rng r;
		uint64_t w;

		mk(f, &p);
		in = info_of(f->tf);
		if (inits[ti] == ET_INIT_NORMAL)
			assert_true(fabsf(in.init_scale - 1 / sqrtf(33)) <
				    1e-6f);
		if (inits[ti] == ET_INIT_UNIFORM)
			assert_true(in.init_scale == 0.5f);
		tu_rng_seed(&r, 40 + ti);
		for (i = 0; i < n; i++)
			rows[i] = i % 10 == 9 ? rows[i / 2]
					      : tu_rng_below(&r, p.rows);
		memset(st, 0x55, n * sizeof(float));
		assert_err(et_tfile_read_rows(f->tf, rows, n, a, st), 0);
		for (i = 0; i < n; i++) {
			init_row(&in, rows[i], want);
			expect_bits(a + i * 33, want, 33, "lazy value",
				    rows[i]);
			assert_true(f2u(st[i]) == 0);
			assert_false(tf_row_materialized(f->tf, rows[i]));
		}
		/* Another order: the same values. */
		tu_shuffle_u64(&r, rows, n);
		assert_err(et_tfile_read_rows(f->tf, rows, n, b, NULL), 0);
		for (i = 0; i < n; i++) {
			init_row(&in, rows[i], want);
			expect_bits(b + i * 33, want, 33, "lazy value",
				    rows[i]);
		}
		tf_get_stats(f->tf, &s);
		assert_int_equal(s.blocks_read, 0);
		assert_int_equal(s.bytes_read, 0);
		assert_int_equal(s.rows_lazy, 2 * n);
		/* The raw record of an unwritten row. */
		tf_init_row_raw(f->tf, 777, raw);
		init_row(&in, 777, want);
		dtype_encode(in.dtype, want, rawwant, 33);
		memset(rawwant + in.row_bytes - 4, 0, 4);
		assert_memory_equal(raw, rawwant, in.row_bytes);
		/* Write one row of a block: its neighbours keep their
		 * initial values (not zeros) and their zero state. */
		w = in.rows_per_block * 1000 + 2;
		for (i = 0; i < 33; i++)
			want[i] = 1.5f;
		assert_err(et_tfile_write_rows(f->tf, &w, 1, want, NULL), 0);
		assert_true(tf_row_materialized(f->tf, w));
		assert_true(tf_row_materialized(f->tf, w - 2));
		assert_false(
		    tf_row_materialized(f->tf, w - 2 + in.rows_per_block));
		for (i = 0; i < in.rows_per_block; i++) {
			uint64_t q = w - 2 + i;

			if (q == w)
				continue;
			assert_err(et_tfile_read_rows(f->tf, &q, 1, a, st), 0);
			init_row(&in, q, want);
			expect_bits(a, want, 33, "neighbour of a write", q);
			assert_true(f2u(st[0]) == 0);
		}
		et_tfile_close(f->tf);
		f->tf = NULL;
		tu_unlink(f->path);
	}
	free(rows);
	free(a);
	free(b);
	free(st);
}

/* ------------------------------------------------------ a huge table */

/*
 * 2^33 rows of 128 f32 (4 TiB of row data, 5 TiB logical with padding):
 * creation writes one block and the file is sparse; the last row is
 * writable and readable; a reopen finds exactly the blocks written.
 */
static void test_huge_sparse(void **state)
{
	struct tfx *f = *state;
	const uint64_t rows = 1ULL << 33;
	struct et_table_params p = {
	    .rows = rows, .dim = 128, .init = ET_INIT_UNIFORM, .seed = 77};
	struct et_table_info in;
	float v[2][128], out[128], want[128];
	uint64_t ids[2], i, rpb;
	int err;

	tu_require_uring();
	tu_require_direct();
	f->path = tu_path("huge");
	err = et_tfile_create(f->path, &p, &f->tf);
	if (err == -EFBIG) {
		print_message("SKIP: %s cannot hold a 5 TiB sparse file\n",
			      tu_dir());
		skip();
	}
	assert_err(err, 0);
	in = info_of(f->tf);
	rpb = in.rows_per_block;
	assert_int_equal(in.rows, rows);
	assert_int_equal(in.blocks, (rows + rpb - 1) / rpb);
	assert_int_equal(in.logical_bytes,
			 (uint64_t)in.block_size * (1 + in.blocks));
	assert_int_equal(tu_file_size(f->path), (int64_t)in.logical_bytes);
	print_message("huge: %llu blocks, %llu logical bytes, %llu on disk\n",
		      (unsigned long long)in.blocks,
		      (unsigned long long)in.logical_bytes,
		      (unsigned long long)in.disk_bytes);
	assert_true(in.disk_bytes < (1u << 20));
	assert_true(tu_disk_bytes(f->path) < (1 << 20));
	assert_int_equal(in.blocks_written, 0);

	/* The last row, and a row in the middle of a full block. */
	ids[0] = rows - 1;
	ids[1] = rows - 3 * rpb - 2;
	for (i = 0; i < 128; i++) {
		v[0][i] = (float)i;
		v[1][i] = -(float)i;
	}
	assert_err(et_tfile_write_rows(f->tf, ids, 2, &v[0][0], NULL), 0);
	for (i = 0; i < 2; i++) {
		assert_err(et_tfile_read_rows(f->tf, &ids[i], 1, out, NULL), 0);
		expect_bits(out, v[i], 128, "huge row", ids[i]);
	}
	in = info_of(f->tf);
	assert_int_equal(in.blocks_written, 2);
	assert_true(in.disk_bytes < (1u << 20));

	reopen(f, 0);
	in = info_of(f->tf);
	assert_int_equal(in.blocks_written, 2);
	assert_true(tf_row_materialized(f->tf, ids[0]));
	assert_true(tf_row_materialized(f->tf, ids[1]));
	assert_false(tf_row_materialized(f->tf, 0));
	assert_false(tf_row_materialized(f->tf, ids[0] - rpb));
	for (i = 0; i < 2; i++) {
		assert_err(et_tfile_read_rows(f->tf, &ids[i], 1, out, NULL), 0);
		expect_bits(out, v[i], 128, "huge row after reopen", ids[i]);
	}
	/* A neighbour in the written block, and rows far away, are lazy
	 * values. */
	assert_int_equal(ids[1] / rpb, (ids[1] - 1) / rpb);
	ids[0] = ids[1] - 1;
	ids[1] = 12345678901ULL % rows;
	for (i = 0; i < 2; i++) {
		assert_err(et_tfile_read_rows(f->tf, &ids[i], 1, out, NULL), 0);
		init_row(&in, ids[i], want);
		expect_bits(out, want, 128, "huge lazy row", ids[i]);
	}
	assert_err(et_tfile_verify(f->tf, NULL, NULL, NULL, NULL), 0);
}

/* ------------------------------------------------------- bad requests */

/* Row ids past the end: ET_EROWRANGE, and nothing changes. */
static void test_row_range(void **state)
{
	struct tfx *f = *state;
	struct et_table_params p = {.rows = 100,
				    .dim = 8,
				    .optim = ET_OPT_ROWWISE_ADAGRAD,
				    .init = ET_INIT_NORMAL};
	struct et_table_info in0, in1;
	struct model m;
	float v[3 * 8] = {1, 2, 3, 4, 5, 6, 7, 8}, st[3] = {9, 9, 9};
	float out[3 * 8];
	unsigned char raw[3 * 36];
	uint64_t bad[][3] = {
	    {1, 100, 2}, {UINT64_MAX, 0, 0}, {99, 99, 1ULL << 40}};
	uint64_t ok = 1;
	size_t k;

	mk(f, &p);
	in0 = info_of(f->tf);
	model_init(&m, &in0);
	assert_err(et_tfile_write_rows(f->tf, &ok, 1, v, st), 0);
	model_write(&m, &ok, 1, v, st);
	in0 = info_of(f->tf);
	for (k = 0; k < 3; k++) {
		assert_err(et_tfile_read_rows(f->tf, bad[k], 3, out, NULL),
			   ET_EROWRANGE);
		assert_err(et_tfile_write_rows(f->tf, bad[k], 3, v, st),
			   ET_EROWRANGE);
		assert_err(et_tfile_write_rows(f->tf, bad[k], 3, v, NULL),
			   ET_EROWRANGE);
		assert_err(tf_read_rows_raw(f->tf, bad[k], 3, raw),
			   ET_EROWRANGE);
		assert_err(tf_write_rows_raw(f->tf, bad[k], 3, raw),
			   ET_EROWRANGE);
	}
	assert_err(et_tfile_write_range(f->tf, 95, 10, v), ET_EROWRANGE);
	assert_err(et_tfile_write_range(f->tf, 100, 1, v), ET_EROWRANGE);
	assert_err(et_tfile_write_range(f->tf, UINT64_MAX, 2, v), ET_EROWRANGE);
	assert_err(et_tfile_write_range(f->tf, 1, UINT64_MAX, v), ET_EROWRANGE);
	in1 = info_of(f->tf);
	assert_int_equal(in1.blocks_written, in0.blocks_written);
	assert_int_equal(in1.disk_bytes, in0.disk_bytes);
	check_all(f->tf, &m, 12);
	/* Empty batches are fine and change nothing. */
	assert_err(et_tfile_read_rows(f->tf, &ok, 0, out, NULL), 0);
	assert_err(et_tfile_write_rows(f->tf, &ok, 0, v, NULL), 0);
	check_all(f->tf, &m, 13);
	model_free(&m);
}

/* Nonsensical parameters are refused and leave no file behind; an
 * existing path is never overwritten. */
static void test_create_errors(void **state)
{
	struct tfx *f = *state;
	static const struct et_table_params bad[] = {
	    {.rows = 0, .dim = 8},
	    {.rows = ET_MAX_ROWS + 1, .dim = 8},
	    {.rows = 10, .dim = 0},
	    {.rows = 10, .dim = ET_MAX_DIM + 1},
	    {.rows = 10, .dim = 8, .dtype = (et_dtype)9},
	    {.rows = 10, .dim = 8, .optim = (et_optim)5},
	    {.rows = 10, .dim = 8, .init = (et_init)7},
	    {.rows = 10,
	     .dim = 8,
	     .init = ET_INIT_UNIFORM,
	     .init_scale = -1.0f},
	    {.rows = 10, .dim = 8, .init = ET_INIT_UNIFORM, .init_scale = NAN},
	    {.rows = 10, .dim = 8, .block_size = 1000},
	    {.rows = 10, .dim = 2000, .block_size = 4096},
	};
	struct et_table_params good = {.rows = 10, .dim = 8};
	et_tfile *tf = NULL;
	unsigned char before[4096], after[4096];
	size_t k;

	tu_require_uring();
	tu_require_direct();
	for (k = 0; k < sizeof(bad) / sizeof(bad[0]); k++) {
		const char *path = tu_path("bad");
		int err = et_tfile_create(path, &bad[k], &tf);

		if (err >= 0)
			fail_msg("bad params #%zu accepted", k);
		assert_null(tf);
		if (access(path, F_OK) == 0)
			fail_msg("bad params #%zu left %s behind", k, path);
	}
	f->path = tu_path("exists");
	assert_err(et_tfile_create(f->path, &good, &f->tf), 0);
	et_tfile_close(f->tf);
	f->tf = NULL;
	assert_int_equal(tu_pread(f->path, 0, before, sizeof(before)), 0);
	assert_err(et_tfile_create(f->path, &good, &tf), -EEXIST);
	assert_null(tf);
	assert_int_equal(tu_pread(f->path, 0, after, sizeof(after)), 0);
	assert_memory_equal(before, after, sizeof(before));
	assert_true(et_tfile_create(f->path, NULL, &tf) < 0);
	assert_true(et_tfile_open(f->path, 0x100, &tf) < 0);
	assert_null(tf);
	assert_err(et_tfile_open(tu_path("missing"), 0, &tf), -ENOENT);
	et_tfile_close(NULL);
}

/* et_tfile_info: every field, against the format's arithmetic. */
static void test_info(void **state)
{
	struct tfx *f = *state;
	static const struct {
		uint32_t dim, block_size;
		et_dtype dtype;
		et_optim optim;
	} cases[] = {
	    {128, 0, ET_F32, ET_OPT_SGD},
	    {128, 0, ET_F32, ET_OPT_ROWWISE_ADAGRAD},
	    {7, 8192, ET_BF16, ET_OPT_ROWWISE_ADAGRAD},
	    {4096, 0, ET_F32, ET_OPT_SGD}, /* one row > 4 KiB */
	    {1, 0, ET_F16, ET_OPT_SGD},
	    {1020, 0, ET_F32, ET_OPT_SGD}, /* exactly fills 4080 */
	};
	size_t k;

	for (k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
		struct et_table_params p = {
		    .rows = 12345,
		    .dim = cases[k].dim,
		    .dtype = cases[k].dtype,
		    .optim = cases[k].optim,
		    .init = ET_INIT_NORMAL,
		    .seed = 99,
		    .block_size = cases[k].block_size,
		};
		struct et_table_info in;
		uint32_t sf = cases[k].optim ? 1 : 0;
		uint32_t rb =
		    cases[k].dim * dtype_size(cases[k].dtype) + 4 * sf;
		float *v = tu_calloc(cases[k].dim * 2, sizeof(float));
		float *out = tu_calloc(cases[k].dim * 2, sizeof(float));
		uint64_t ids[2] = {12344, 0};

		mk(f, &p);
		in = info_of(f->tf);
		assert_int_equal(in.rows, 12345);
		assert_int_equal(in.dim, cases[k].dim);
		assert_int_equal(in.dtype, cases[k].dtype);
		assert_int_equal(in.optim, cases[k].optim);
		assert_int_equal(in.init, ET_INIT_NORMAL);
		assert_true(fabsf(in.init_scale - 1 / sqrtf(cases[k].dim)) <
			    1e-6f);
		assert_int_equal(in.seed, 99);
		assert_int_equal(in.state_floats, sf);
		assert_int_equal(in.row_bytes, rb);
		if (cases[k].block_size)
			assert_int_equal(in.block_size, cases[k].block_size);
		else if (rb + TRAILER <= 4096)
			assert_int_equal(in.block_size, 4096);
		assert_int_equal(in.block_size % 512, 0);
		assert_true(in.block_size >= rb + TRAILER);
		assert_int_equal(in.rows_per_block,
				 (in.block_size - TRAILER) / rb);
		assert_int_equal(in.blocks, (12345 + in.rows_per_block - 1) /
						in.rows_per_block);
		assert_int_equal(in.format_version, 1);
		assert_int_equal(in.blocks_written, 0);
		assert_int_equal(in.logical_bytes,
				 (uint64_t)in.block_size * (in.blocks + 1));
		assert_int_equal(tu_file_size(f->path),
				 (int64_t)in.logical_bytes);
		assert_int_equal(in.disk_bytes,
				 (uint64_t)tu_disk_bytes(f->path));
		check_header_bytes(f->path, &in);
		/* A row round-trips whatever the geometry. */
		for (uint32_t c = 0; c < 2 * cases[k].dim; c++)
			v[c] = (float)c * 0.25f;
		assert_err(et_tfile_write_rows(f->tf, ids, 2, v, NULL), 0);
		assert_err(et_tfile_read_rows(f->tf, ids, 2, out, NULL), 0);
		for (uint32_t c = 0; c < 2 * cases[k].dim; c++)
			assert_true(out[c] == round_to(cases[k].dtype, v[c]));
		in = info_of(f->tf);
		assert_int_equal(in.blocks_written, in.blocks > 1 ? 2 : 1);
		assert_int_equal(in.disk_bytes,
				 (uint64_t)tu_disk_bytes(f->path));
		et_tfile_close(f->tf);
		f->tf = NULL;
		tu_unlink(f->path);
		free(v);
		free(out);
	}
}

/* A reopen rebuilds the materialization map from the holes: exactly the
 * blocks written are materialized, other rows are lazy and cost no I/O. */
static void test_reopen_map(void **state)
{
	struct tfx *f = *state;
	struct et_table_params p = {
	    .rows = 5000, .dim = 16, .init = ET_INIT_UNIFORM, .seed = 4};
	static const uint64_t blocks[] = {0, 3, 4, 40};
	struct et_table_info in;
	struct model m;
	struct tf_stats s;
	float v[16];
	uint64_t r, rpb, *lazy;
	size_t k, nl = 0;
	struct tu_rng rng;

	mk(f, &p);
	in = info_of(f->tf);
	rpb = in.rows_per_block;
	model_init(&m, &in);
	tu_rng_seed(&rng, 17);
	for (k = 0; k < 4; k++) {
		r = blocks[k] * rpb + k;
		fill_random(&rng, v, 16);
		assert_err(et_tfile_write_rows(f->tf, &r, 1, v, NULL), 0);
		model_write(&m, &r, 1, v, NULL);
	}
	/* The last row: the last block, partial. */
	r = p.rows - 1;
	fill_random(&rng, v, 16);
	assert_err(et_tfile_write_rows(f->tf, &r, 1, v, NULL), 0);
	model_write(&m, &r, 1, v, NULL);
	assert_true(p.rows % rpb != 0);

	reopen(f, ET_TFILE_RDONLY);
	in = info_of(f->tf);
	assert_int_equal(in.blocks_written, 5);
	lazy = tu_calloc(p.rows, sizeof(uint64_t));
	for (r = 0; r < p.rows; r++) {
		uint64_t b = r / rpb;
		bool w = b == in.blocks - 1;

		for (k = 0; k < 4; k++)
			w |= b == blocks[k];
		if (tf_row_materialized(f->tf, r) != w)
			fail_msg("row %llu: materialized %d after reopen",
				 (unsigned long long)r, !w);
		if (!w)
			lazy[nl++] = r;
	}
	check_rows(f->tf, &m, lazy, nl);
	tf_get_stats(f->tf, &s);
	assert_int_equal(s.blocks_read, 0);
	assert_int_equal(s.rows_lazy, nl);
	check_all(f->tf, &m, 14);
	tf_get_stats(f->tf, &s);
	assert_int_equal(s.blocks_read, 5);

	reopen(f, 0);
	r = 20 * rpb;
	assert_err(et_tfile_write_rows(f->tf, &r, 1, v, NULL), 0);
	model_write(&m, &r, 1, v, NULL);
	reopen(f, 0);
	assert_int_equal(info_of(f->tf).blocks_written, 6);
	check_all(f->tf, &m, 15);
	free(lazy);
	model_free(&m);
}

/*
 * Blocks smaller than the filesystem's: a written block drags its
 * neighbours (and the header's) filesystem block into existence, so after
 * a reopen SEEK_DATA reports never-written blocks as data. Whatever the
 * map then says, their rows must read as their initial values, writes into
 * them must keep their neighbours, and the file must verify.
 */
static void test_small_blocks(void **state)
{
	struct tfx *f = *state;
	struct et_table_params p = {.rows = 1000,
				    .dim = 4,
				    .init = ET_INIT_NORMAL,
				    .seed = 13,
				    .block_size = 512};
	struct et_table_info in;
	struct model m;
	struct tu_rng r;
	float v[4];
	uint64_t id;
	int k;

	tu_require_uring();
	tu_require_direct();
	f->path = tu_path("small");
	if (et_tfile_create(f->path, &p, &f->tf) == ET_ECONFIG) {
		print_message("SKIP: 512-byte blocks refused on %s\n",
			      tu_dir());
		skip();
	}
	assert_non_null(f->tf);
	in = info_of(f->tf);
	assert_int_equal(in.block_size, 512);
	assert_int_equal(in.rows_per_block, (512 - TRAILER) / 16);
	model_init(&m, &in);
	tu_rng_seed(&r, 14);
	id = 2 * in.rows_per_block + 1;
	fill_random(&r, v, 4);
	assert_err(et_tfile_write_rows(f->tf, &id, 1, v, NULL), 0);
	model_write(&m, &id, 1, v, NULL);
	reopen(f, 0);
	in = info_of(f->tf);
	print_message("512-byte blocks: %llu of %llu reported written after "
		      "reopen (1 was)\n",
		      (unsigned long long)in.blocks_written,
		      (unsigned long long)in.blocks);
	assert_true(in.blocks_written >= 1);
	assert_true(tf_row_materialized(f->tf, id));
	check_all(f->tf, &m, 30);
	assert_err(et_tfile_verify(f->tf, NULL, NULL, NULL, NULL), 0);
	/* Into a never-written block next to the written one. */
	for (k = 0; k < 3; k++) {
		id = (uint64_t)k * in.rows_per_block + 5;
		fill_random(&r, v, 4);
		assert_err(et_tfile_write_rows(f->tf, &id, 1, v, NULL), 0);
		model_write(&m, &id, 1, v, NULL);
	}
	reopen(f, 0);
	check_all(f->tf, &m, 31);
	assert_err(et_tfile_verify(f->tf, NULL, NULL, NULL, NULL), 0);
	model_free(&m);
}

/* Verify over many chunks of blocks: bad blocks far from the start are
 * counted and the first is named; a progress callback that asks to stop
 * is obeyed. */
static int progress_stop(void *arg, uint64_t done, uint64_t total)
{
	int *calls = arg;

	(*calls)++;
	return 1;
}

/*
 * tf_read_multi: two files on one ring, rows of many blocks each, read
 * together give the rows each file's own read gives. A flipped byte in one
 * block of the second file fails its entry with ET_EBLOCKSUM (the call
 * returns it) while the first file's rows are still read right.
 */
static void test_read_multi(void **state)
{
	struct tfx *f = *state;
	struct et_table_params p = {
	    .rows = 20000, .dim = 32, .init = ET_INIT_UNIFORM, .seed = 3};
	float *v = tu_calloc((size_t)20000 * 32, sizeof(float));
	const char *path2;
	et_tfile *tf2 = NULL;
	struct et_table_info in;
	uint64_t ids[2][700];
	unsigned char *got[2], *want[2];
	struct tf_read rd[2];
	size_t rb;

	mk(f, &p);
	for (size_t i = 0; i < (size_t)20000 * 32; i++)
		v[i] = (float)i;
	assert_err(et_tfile_write_range(f->tf, 0, 20000, v), 0);
	path2 = tu_path("tf2");
	p.seed = 4;
	assert_err(et_tfile_create(path2, &p, &tf2), 0);
	for (size_t i = 0; i < (size_t)20000 * 32; i++)
		v[i] = -(float)i;
	assert_err(et_tfile_write_range(tf2, 0, 20000, v), 0);
	assert_err(io_open(64, &f->io, NULL), 0); /* closed by the teardown */
	tf_attach_io(f->tf, f->io);
	tf_attach_io(tf2, f->io);
	in = info_of(tf2);
	rb = tf_geom(tf2)->row_bytes;
	for (int k = 0; k < 2; k++) {
		for (size_t i = 0; i < 700; i++) /* ~ one a block, shuffled */
			ids[k][i] = (i * 7919 + (size_t)k * 13) % 20000;
		got[k] = tu_calloc(700, rb);
		want[k] = tu_calloc(700, rb);
	}
	assert_err(tf_read_rows_raw(f->tf, ids[0], 700, want[0]), 0);
	assert_err(tf_read_rows_raw(tf2, ids[1], 700, want[1]), 0);
	rd[0] = (struct tf_read){
	    .tf = f->tf, .rows = ids[0], .n = 700, .dst = got[0]};
	rd[1] = (struct tf_read){
	    .tf = tf2, .rows = ids[1], .n = 700, .dst = got[1]};
	assert_err(tf_read_multi(rd, 2), 0);
	assert_memory_equal(got[0], want[0], 700 * rb);
	assert_memory_equal(got[1], want[1], 700 * rb);
	/* The n-th read fails, for every n: at the start, across the segments
	 * of the stage (the chunks of each file stream through them) and at
	 * the end. Only its file's read fails, the other's rows are whole,
	 * and the next call reads both. */
	for (uint64_t n = 1;; n++) {
		int ret;

		memset(got[0], 0, 700 * rb);
		memset(got[1], 0, 700 * rb);
		io_fault_set(IO_READ, n, EIO, 0);
		ret = tf_read_multi(rd, 2);
		if (!io_fault_fired()) {
			io_fault_clear();
			assert_err(ret, 0);
			assert_true(n > 10); /* several chunks a file */
			break;
		}
		io_fault_clear();
		assert_err(ret, -EIO);
		assert_true((rd[0].result == -EIO) != (rd[1].result == -EIO));
		for (int r = 0; r < 2; r++)
			if (!rd[r].result)
				assert_memory_equal(got[r], want[r], 700 * rb);
		assert_err(tf_read_multi(rd, 2), 0);
		assert_memory_equal(got[0], want[0], 700 * rb);
		assert_memory_equal(got[1], want[1], 700 * rb);
	}
	/* the block of ids[1][350] goes bad */
	assert_int_equal(
	    tu_flip_byte(path2,
			 (off_t)in.block_size *
				 (off_t)(1 + ids[1][350] / in.rows_per_block) +
			     5,
			 0x01),
	    0);
	memset(got[0], 0, 700 * rb);
	assert_err(tf_read_multi(rd, 2), ET_EBLOCKSUM);
	assert_int_equal(rd[0].result, 0);
	assert_int_equal(rd[1].result, ET_EBLOCKSUM);
	assert_memory_equal(got[0], want[0], 700 * rb);
	for (int k = 0; k < 2; k++) {
		free(got[k]);
		free(want[k]);
	}
	et_tfile_close(tf2);
	tu_unlink(path2);
	free(v);
}

static void test_verify_many(void **state)
{
	struct tfx *f = *state;
	struct et_table_params p = {
	    .rows = 20000, .dim = 32, .init = ET_INIT_UNIFORM, .seed = 3};
	struct et_table_info in;
	float *v = tu_calloc((size_t)20000 * 32, sizeof(float));
	uint64_t bad = 0, first = 0;
	int calls = 0, err;

	mk(f, &p);
	assert_err(et_tfile_write_range(f->tf, 0, 20000, v), 0);
	in = info_of(f->tf);
	assert_true(in.blocks > 300);
	assert_int_equal(in.blocks_written, in.blocks);
	assert_int_equal(
	    tu_flip_byte(f->path, (off_t)in.block_size * (1 + 300) + 77, 0x01),
	    0);
	assert_int_equal(
	    tu_flip_byte(f->path, (off_t)in.block_size * (1 + in.blocks - 1),
			 0x01),
	    0);
	assert_err(et_tfile_verify(f->tf, &bad, &first, NULL, NULL),
		   ET_EBLOCKSUM);
	assert_int_equal(bad, 2);
	assert_int_equal(first, 300);
	/* Asked to stop at its first report, it reports no more. */
	err = et_tfile_verify(f->tf, &bad, &first, progress_stop, &calls);
	print_message("verify stopped by progress: %s after %d call(s)\n",
		      ename(err), calls);
	assert_true(calls <= 1);
	free(v);
}

/* --------------------------------------------------------- corruption */

/* A small table with rows written in blocks 1, 3 and 6, closed. */
static struct et_table_info make_victim(struct tfx *f, struct model *m)
{
	struct et_table_params p = {
	    .rows = 700, .dim = 16, .init = ET_INIT_UNIFORM, .seed = 6};
	struct et_table_info in;
	float v[3 * 16];
	uint64_t rows[3];
	struct tu_rng r;

	mk(f, &p);
	in = info_of(f->tf);
	rows[0] = 1 * in.rows_per_block + 2;
	rows[1] = 3 * in.rows_per_block + 5;
	rows[2] = 6 * in.rows_per_block;
	tu_rng_seed(&r, 61);
	fill_random(&r, v, 3 * 16);
	assert_err(et_tfile_write_rows(f->tf, rows, 3, v, NULL), 0);
	if (m) {
		model_init(m, &in);
		model_write(m, rows, 3, v, NULL);
	}
	et_tfile_close(f->tf);
	f->tf = NULL;
	return in;
}

static void expect_open(struct tfx *f, int want)
{
	et_tfile *tf = NULL;
	int err = et_tfile_open(f->path, 0, &tf);

	if (err != want)
		fail_msg("open = %s, expected %s", ename(err),
			 et_strerror(want));
	if (want) {
		assert_null(tf);
	} else {
		assert_non_null(tf);
		et_tfile_close(tf);
		tf = NULL;
	}
	err = et_tfile_open(f->path, ET_TFILE_RDONLY, &tf);
	if (err != want)
		fail_msg("rdonly open = %s, expected %s", ename(err),
			 et_strerror(want));
	if (want)
		assert_null(tf);
	else
		et_tfile_close(tf);
}

/* Rewrites n header bytes at off, recomputing the checksum if asked. */
static void hdr_put(const char *path, off_t off, const void *val, size_t n,
		    bool resum)
{
	unsigned char h[256];
	uint64_t sum;

	assert_int_equal(tu_pread(path, 0, h, sizeof(h)), 0);
	memcpy(h + off, val, n);
	if (resum) {
		sum = hash_bytes(h, HDR_SUM_OFF);
		memcpy(h + HDR_SUM_OFF, &sum, 8);
	}
	assert_int_equal(tu_pwrite(path, 0, h, sizeof(h)), 0);
}

static void test_bad_magic(void **state)
{
	struct tfx *f = *state;
	static const char junk[] = "this is not a table file at all, but it "
				   "is long enough to hold a header......";
	char *zeros = tu_calloc(8192, 1);
	const char *other;
	int fd;

	make_victim(f, NULL);
	assert_int_equal(tu_flip_byte(f->path, HDR_MAGIC_OFF, 0x20), 0);
	expect_open(f, ET_EMAGIC);
	assert_int_equal(tu_flip_byte(f->path, HDR_MAGIC_OFF, 0x20), 0);
	assert_int_equal(tu_flip_byte(f->path, 7, 0x01), 0);
	expect_open(f, ET_EMAGIC);
	/* Files that never were tables. */
	other = tu_path("junk");
	fd = open(other, O_WRONLY | O_CREAT | O_EXCL, 0600);
	assert_true(fd >= 0);
	close(fd);
	assert_int_equal(tu_pwrite(other, 0, zeros, 8192), 0);
	f->path = other;
	expect_open(f, ET_EMAGIC);
	assert_int_equal(tu_truncate(other, 0), 0);
	assert_int_equal(tu_pwrite(other, 0, junk, sizeof(junk)), 0);
	assert_int_equal(tu_truncate(other, 8192), 0);
	expect_open(f, ET_EMAGIC);
	free(zeros);
}

static void test_bad_version(void **state)
{
	struct tfx *f = *state;
	static const uint32_t versions[] = {0, 2, 9999, 0xffffffffu};
	size_t k;

	make_victim(f, NULL);
	for (k = 0; k < 4; k++) {
		/* The checksum is left stale: version is checked first. */
		hdr_put(f->path, HDR_VERSION_OFF, &versions[k], 4, false);
		expect_open(f, ET_EVERSION);
		/* With the checksum fixed too, still the version. */
		hdr_put(f->path, HDR_VERSION_OFF, &versions[k], 4, true);
		expect_open(f, ET_EVERSION);
	}
}

static void test_truncated_header(void **state)
{
	struct tfx *f = *state;
	static const off_t lens[] = {255, 100, 8, 3, 0};
	size_t k;

	make_victim(f, NULL);
	for (k = 0; k < sizeof(lens) / sizeof(lens[0]); k++) {
		assert_int_equal(tu_truncate(f->path, lens[k]), 0);
		expect_open(f, ET_ETRUNC);
	}
}

static void test_truncated_file(void **state)
{
	struct tfx *f = *state;
	struct et_table_info in = make_victim(f, NULL);

	assert_int_equal(tu_truncate(f->path, in.logical_bytes - 1), 0);
	expect_open(f, ET_ETRUNC);
	assert_int_equal(tu_truncate(f->path, in.logical_bytes - in.block_size),
			 0);
	expect_open(f, ET_ETRUNC);
	assert_int_equal(tu_truncate(f->path, 4 * in.block_size), 0);
	expect_open(f, ET_ETRUNC);
	/* Only the header left. */
	assert_int_equal(tu_truncate(f->path, in.block_size), 0);
	expect_open(f, ET_ETRUNC);
	/* Less than the header block but more than its 256 bytes. */
	assert_int_equal(tu_truncate(f->path, in.block_size - 1), 0);
	expect_open(f, ET_ETRUNC);
}

static void test_header_checksum(void **state)
{
	struct tfx *f = *state;
	static const off_t offs[] = {
	    HDR_SUM_OFF, HDR_SUM_OFF + 7, HDR_ROWS_OFF, HDR_DIM_OFF, 100, 247};
	size_t k;

	make_victim(f, NULL);
	for (k = 0; k < sizeof(offs) / sizeof(offs[0]); k++) {
		assert_int_equal(tu_flip_byte(f->path, offs[k], 0x04), 0);
		expect_open(f, ET_EHDRSUM);
		assert_int_equal(tu_flip_byte(f->path, offs[k], 0x04), 0);
	}
	/* Restored: opens again. */
	expect_open(f, 0);
}

/* Fields out of range with a valid checksum: ET_EHEADER. */
static void test_header_fields(void **state)
{
	struct tfx *f = *state;
	uint64_t orig_rows, rows;
	uint32_t orig_dim, dim;
	unsigned char h[256];

	make_victim(f, NULL);
	assert_int_equal(tu_pread(f->path, 0, h, sizeof(h)), 0);
	memcpy(&orig_rows, h + HDR_ROWS_OFF, 8);
	memcpy(&orig_dim, h + HDR_DIM_OFF, 4);
	rows = 0;
	hdr_put(f->path, HDR_ROWS_OFF, &rows, 8, true);
	expect_open(f, ET_EHEADER);
	rows = ET_MAX_ROWS + 1;
	hdr_put(f->path, HDR_ROWS_OFF, &rows, 8, true);
	expect_open(f, ET_EHEADER);
	hdr_put(f->path, HDR_ROWS_OFF, &orig_rows, 8, true);
	dim = 0;
	hdr_put(f->path, HDR_DIM_OFF, &dim, 4, true);
	expect_open(f, ET_EHEADER);
	hdr_put(f->path, HDR_DIM_OFF, &orig_dim, 4, true);
	expect_open(f, 0);
}

static void test_block_corruption(void **state)
{
	struct tfx *f = *state;
	struct model m;
	struct et_table_info in = make_victim(f, &m);
	uint64_t rpb = in.rows_per_block, bs = in.block_size;
	uint64_t r1 = 1 * rpb + 2, r3 = 3 * rpb + 5, r6 = 6 * rpb;
	uint64_t bad = 99, first = 99, ids[2];
	unsigned char *before = tu_calloc(bs, 1), *after = tu_calloc(bs, 1);
	float out[2 * 16], v[16] = {1};

	/* A flipped bit in block 3's rows. */
	assert_int_equal(tu_flip_byte(f->path, bs * (1 + 3) + 5 * 64 + 3, 0x10),
			 0);
	assert_err(et_tfile_open(f->path, 0, &f->tf), 0);
	assert_err(et_tfile_read_rows(f->tf, &r3, 1, out, NULL), ET_EBLOCKSUM);
	/* Any row of the block fails, not just the flipped one. */
	ids[0] = 3 * rpb;
	assert_err(et_tfile_read_rows(f->tf, ids, 1, out, NULL), ET_EBLOCKSUM);
	ids[0] = r1;
	ids[1] = r3;
	assert_err(et_tfile_read_rows(f->tf, ids, 2, out, NULL), ET_EBLOCKSUM);
	check_rows(f->tf, &m, &r1, 1);
	check_rows(f->tf, &m, &r6, 1);
	assert_err(et_tfile_verify(f->tf, &bad, &first, NULL, NULL),
		   ET_EBLOCKSUM);
	assert_int_equal(bad, 1);
	assert_int_equal(first, 3);

	/* A write into the bad block refuses to build on corrupt data,
	 * and leaves the block's bytes as they were. */
	assert_int_equal(tu_pread(f->path, bs * 4, before, bs), 0);
	ids[0] = 3 * rpb + 1;
	assert_err(et_tfile_write_rows(f->tf, ids, 1, v, NULL), ET_EBLOCKSUM);
	assert_int_equal(tu_pread(f->path, bs * 4, after, bs), 0);
	assert_memory_equal(before, after, bs);

	/* Block 6's trailer: its block number, then its checksum. */
	assert_int_equal(tu_flip_byte(f->path, bs * (1 + 6) + bs - 16, 0x01),
			 0);
	assert_err(et_tfile_read_rows(f->tf, &r6, 1, out, NULL), ET_EBLOCKSUM);
	bad = first = 99;
	assert_err(et_tfile_verify(f->tf, &bad, &first, NULL, NULL),
		   ET_EBLOCKSUM);
	assert_int_equal(bad, 2);
	assert_int_equal(first, 3);
	assert_int_equal(tu_flip_byte(f->path, bs * (1 + 6) + bs - 16, 0x01),
			 0);
	check_rows(f->tf, &m, &r6, 1);
	assert_int_equal(tu_flip_byte(f->path, bs * (1 + 6) + bs - 1, 0x80), 0);
	assert_err(et_tfile_read_rows(f->tf, &r6, 1, out, NULL), ET_EBLOCKSUM);
	/* The padding between the rows and the trailer is covered too. */
	assert_int_equal(tu_flip_byte(f->path, bs * (1 + 6) + bs - 1, 0x80), 0);
	if (rpb * in.row_bytes < bs - TRAILER) {
		assert_int_equal(tu_flip_byte(f->path,
					      bs * (1 + 6) + bs - TRAILER - 1,
					      0x01),
				 0);
		assert_err(et_tfile_read_rows(f->tf, &r6, 1, out, NULL),
			   ET_EBLOCKSUM);
	}
	free(before);
	free(after);
	model_free(&m);
}

/* A whole block copied to another block's place (a misdirected write):
 * its checksum is intact but it names the wrong block. */
static void test_misplaced_block(void **state)
{
	struct tfx *f = *state;
	struct model m;
	struct et_table_info in = make_victim(f, &m);
	uint64_t bs = in.block_size, r2 = 2 * in.rows_per_block + 1;
	unsigned char *blk = tu_calloc(bs, 1);
	float out[16];
	uint64_t bad = 0, first = 0;

	assert_int_equal(tu_pread(f->path, bs * (1 + 1), blk, bs), 0);
	assert_int_equal(tu_pwrite(f->path, bs * (1 + 2), blk, bs), 0);
	assert_err(et_tfile_open(f->path, 0, &f->tf), 0);
	assert_true(tf_row_materialized(f->tf, r2));
	assert_err(et_tfile_read_rows(f->tf, &r2, 1, out, NULL), ET_EBLOCKSUM);
	assert_err(et_tfile_verify(f->tf, &bad, &first, NULL, NULL),
		   ET_EBLOCKSUM);
	assert_int_equal(bad, 1);
	assert_int_equal(first, 2);
	free(blk);
	model_free(&m);
}

/* ------------------------------------------------------ I/O failures */

static uint32_t file_off_align(const char *path)
{
	uint32_t ma, oa;
	int fd;

	assert_int_equal(io_open_file(path, O_RDONLY, 0, &fd), 0);
	assert_int_equal(io_file_align(fd, &ma, &oa), 0);
	close(fd);
	return oa;
}

/* Injected read errors and short reads come back from read_rows; reading
 * only unwritten rows does no I/O, so an armed fault stays unfired. */
static void test_read_faults(void **state)
{
	struct tfx *f = *state;
	struct model m;
	struct et_table_info in = make_victim(f, &m);
	uint64_t ids[3] = {1 * in.rows_per_block + 2, 3 * in.rows_per_block + 5,
			   6 * in.rows_per_block};
	uint64_t lazy[2] = {0, 5 * in.rows_per_block};
	uint32_t oa = file_off_align(f->path);
	static const int errs[] = {EIO, ENOMEM, EBADMSG};
	float out[3 * 16];
	size_t k;

	assert_err(et_tfile_open(f->path, 0, &f->tf), 0);
	for (k = 0; k < 3; k++) {
		io_fault_set(IO_READ, 1, errs[k], 0);
		assert_err(et_tfile_read_rows(f->tf, ids, 3, out, NULL),
			   -errs[k]);
		assert_true(io_fault_fired());
		io_fault_clear();
		check_rows(f->tf, &m, ids, 3);
	}
	/* The second block read fails. */
	io_fault_set(IO_READ, 2, EIO, 0);
	assert_err(et_tfile_read_rows(f->tf, ids, 3, out, NULL), -EIO);
	io_fault_clear();
	/* Short. */
	io_fault_set(IO_READ, 1, 0, oa < in.block_size ? oa : in.block_size);
	assert_err(et_tfile_read_rows(f->tf, ids, 3, out, NULL), ET_ESHORTIO);
	assert_true(io_fault_fired());
	io_fault_clear();
	/* Lazy rows: no read to fail. */
	io_fault_set(IO_READ, 1, EIO, 0);
	check_rows(f->tf, &m, lazy, 2);
	assert_false(io_fault_fired());
	io_fault_clear();
	check_all(f->tf, &m, 16);
	/* Through verify too. */
	io_fault_set(IO_READ, 1, EIO, 0);
	assert_err(et_tfile_verify(f->tf, NULL, NULL, NULL, NULL), -EIO);
	io_fault_clear();
	assert_err(et_tfile_verify(f->tf, NULL, NULL, NULL, NULL), 0);
	model_free(&m);
}

/*
 * A batch of rows over six blocks (five written before, one a hole), the
 * third block write failing with ENOSPC. The error comes back; every block
 * reads as entirely old or entirely new; the old data is intact; the file
 * verifies, before and after a reopen.
 */
static void test_write_fault(void **state)
{
	struct tfx *f = *state;
	struct et_table_params p = {
	    .rows = 700, .dim = 16, .init = ET_INIT_NORMAL, .seed = 2};
	static const uint64_t blocks[] = {0, 1, 2, 3, 4, 7};
	struct et_table_info in;
	struct model m_old, m_new;
	struct tu_rng r;
	float *v = tu_calloc(700 * 16, sizeof(float));
	uint64_t ids[60], rpb, bad = 9, first = 9, i;
	size_t k, nold = 0;
	int e;

	mk(f, &p);
	in = info_of(f->tf);
	rpb = in.rows_per_block;
	model_init(&m_old, &in);
	tu_rng_seed(&r, 31);
	fill_random(&r, v, 5 * rpb * 16);
	assert_err(et_tfile_write_range(f->tf, 0, 5 * rpb, v), 0);
	for (i = 0; i < 5 * rpb; i++)
		model_write(&m_old, &i, 1, v + i * 16, NULL);
	model_init(&m_new, &in);
	memcpy(m_new.val, m_old.val, 700 * 16 * sizeof(float));
	for (k = 0; k < 6; k++)
		for (i = 0; i < 10; i++)
			ids[k * 10 + i] = blocks[k] * rpb + i * 3;
	fill_random(&r, v, 60 * 16);
	model_write(&m_new, ids, 60, v, NULL);

	/* ENOSPC, then EIO on the same batch from the state left. */
	for (e = 0; e < 2; e++) {
		static const int errs[] = {ENOSPC, EIO};

		io_fault_set(IO_WRITE, 3, errs[e], 0);
		assert_err(et_tfile_write_rows(f->tf, ids, 60, v, NULL),
			   -errs[e]);
		assert_true(io_fault_fired());
		io_fault_clear();
	}
	for (int pass = 0; pass < 2; pass++) {
		float out[16];
		size_t nnew = 0;

		nold = 0;
		for (k = 0; k < 6; k++) {
			int olds = 0, news = 0;

			for (i = 0; i < rpb; i++) {
				uint64_t q = blocks[k] * rpb + i;

				assert_err(
				    et_tfile_read_rows(f->tf, &q, 1, out, NULL),
				    0);
				if (!memcmp(out, m_new.val + q * 16,
					    sizeof(out)))
					news += memcmp(out, m_old.val + q * 16,
						       sizeof(out)) != 0;
				else if (!memcmp(out, m_old.val + q * 16,
						 sizeof(out)))
					olds++;
				else
					fail_msg("row %llu is neither old "
						 "nor new",
						 (unsigned long long)q);
			}
			if (olds && news)
				fail_msg("block %llu is torn: %d rows old, "
					 "%d new",
					 (unsigned long long)blocks[k], olds,
					 news);
			nold += olds > 0;
			nnew += news > 0;
		}
		print_message("after the failed writes: %zu blocks old, %zu "
			      "new\n",
			      nold, nnew);
		assert_true(nold >= 1);
		assert_err(et_tfile_verify(f->tf, &bad, &first, NULL, NULL), 0);
		assert_int_equal(bad, 0);
		if (pass == 0)
			reopen(f, 0);
	}
	/* Rows outside the batch are as before. */
	for (i = 0; i < 700; i++) {
		bool in_batch = false;

		for (k = 0; k < 60; k++)
			in_batch |= ids[k] == i;
		if (!in_batch)
			check_rows(f->tf, &m_old, &i, 1);
	}
	/* And a write now succeeds and sticks. */
	assert_err(et_tfile_write_rows(f->tf, ids, 60, v, NULL), 0);
	check_all(f->tf, &m_new, 17);
	assert_err(et_tfile_verify(f->tf, NULL, NULL, NULL, NULL), 0);
	model_free(&m_old);
	model_free(&m_new);
	free(v);
}

/* A read failing in the read-modify-write of a write changes nothing. */
static void test_write_rmw_read_fault(void **state)
{
	struct tfx *f = *state;
	struct model m;
	struct et_table_info in = make_victim(f, &m);
	uint64_t ids[2] = {1 * in.rows_per_block + 3, 0};
	float v[2 * 16] = {5, 5, 5};
	struct tf_stats s0, s1;

	assert_err(et_tfile_open(f->path, 0, &f->tf), 0);
	tf_get_stats(f->tf, &s0);
	io_fault_set(IO_READ, 1, EIO, 0);
	assert_err(et_tfile_write_rows(f->tf, ids, 2, v, NULL), -EIO);
	assert_true(io_fault_fired());
	io_fault_clear();
	tf_get_stats(f->tf, &s1);
	assert_int_equal(s1.blocks_written, s0.blocks_written);
	assert_int_equal(info_of(f->tf).blocks_written, 3);
	check_all(f->tf, &m, 18);
	model_free(&m);
}

/* A bulk range failing part-way: every block whole, the file verifies. */
static void test_write_range_fault(void **state)
{
	struct tfx *f = *state;
	struct et_table_params p = {
	    .rows = 20000, .dim = 32, .init = ET_INIT_UNIFORM, .seed = 12};
	struct et_table_info in;
	float *v = tu_calloc((size_t)20000 * 32, sizeof(float));
	float *out = tu_calloc((size_t)20000 * 32, sizeof(float));
	float want[32];
	uint64_t *ids = tu_calloc(20000, sizeof(uint64_t)), i, b;
	struct tu_rng r;
	size_t written = 0;

	mk(f, &p);
	in = info_of(f->tf);
	tu_rng_seed(&r, 5);
	fill_random(&r, v, (size_t)20000 * 32);
	io_fault_set(IO_WRITE, 3, EIO, 0);
	assert_err(et_tfile_write_range(f->tf, 10, 19980, v), -EIO);
	assert_true(io_fault_fired());
	io_fault_clear();
	assert_err(et_tfile_verify(f->tf, NULL, NULL, NULL, NULL), 0);
	for (i = 0; i < 20000; i++)
		ids[i] = i;
	assert_err(et_tfile_read_rows(f->tf, ids, 20000, out, NULL), 0);
	for (b = 0; b < in.blocks; b++) {
		int olds = 0, news = 0;

		for (i = b * in.rows_per_block;
		     i < (b + 1) * in.rows_per_block && i < 20000; i++) {
			bool in_range = i >= 10 && i < 19990;

			init_row(&in, i, want);
			if (in_range && !memcmp(out + i * 32, v + (i - 10) * 32,
						sizeof(want)))
				news++;
			else if (!memcmp(out + i * 32, want, sizeof(want)))
				olds += in_range;
			else
				fail_msg("row %llu neither old nor new",
					 (unsigned long long)i);
		}
		/* Of the rows in the range, a block has all or none. */
		if (news && olds)
			fail_msg("block %llu torn: %d rows old, %d new",
				 (unsigned long long)b, olds, news);
		written += news > 0;
	}
	print_message("write_range with a failed write: %zu of %llu blocks "
		      "written\n",
		      written, (unsigned long long)in.blocks);
	assert_true(written < in.blocks);
	reopen(f, 0);
	assert_err(et_tfile_verify(f->tf, NULL, NULL, NULL, NULL), 0);
	free(v);
	free(out);
	free(ids);
}

static void test_short_write(void **state)
{
	struct tfx *f = *state;
	struct model m;
	struct et_table_info in = make_victim(f, &m);
	uint32_t oa = file_off_align(f->path);
	uint64_t id = 3 * in.rows_per_block + 1;
	float v[16] = {1};

	assert_err(et_tfile_open(f->path, 0, &f->tf), 0);
	io_fault_set(IO_WRITE, 1, 0, oa < in.block_size ? oa : in.block_size);
	assert_err(et_tfile_write_rows(f->tf, &id, 1, v, NULL), ET_ESHORTIO);
	assert_true(io_fault_fired());
	io_fault_clear();
	/* Other blocks are untouched. */
	id = 1 * in.rows_per_block + 2;
	check_rows(f->tf, &m, &id, 1);
	id = 6 * in.rows_per_block;
	check_rows(f->tf, &m, &id, 1);
	model_free(&m);
}

static void test_sync(void **state)
{
	struct tfx *f = *state;
	struct et_table_params p = {.rows = 100, .dim = 4};
	uint64_t id = 3;
	float v[4] = {1, 2, 3, 4};

	mk(f, &p);
	assert_err(et_tfile_write_rows(f->tf, &id, 1, v, NULL), 0);
	assert_err(et_tfile_sync(f->tf), 0);
	io_fault_set(IO_FSYNC, 1, EIO, 0);
	assert_err(et_tfile_sync(f->tf), -EIO);
	assert_true(io_fault_fired());
	io_fault_clear();
	assert_err(et_tfile_sync(f->tf), 0);
}

/* ---------------------------------------------------------- read-only */

/* A file's stage holds no more blocks than the file has: the first read
 * of a table of four blocks takes a few blocks of memory, not the 2 MiB
 * stage (four times the ring's depth) a large table gets. */
static void test_small_stage(void **state)
{
	struct tfx *f = *state;
	struct et_table_params p = {.rows = 1024, .dim = 4}; /* 4 blocks */
	float v[4] = {1, 2, 3, 4}, out[4];
	size_t before;

	mk(f, &p);
	assert_err(et_tfile_write_rows(f->tf, (uint64_t[]){7}, 1, v, NULL), 0);
	reopen(f, 0);
	before = mem_in_use();
	assert_err(et_tfile_read_rows(f->tf, (uint64_t[]){7}, 1, out, NULL), 0);
	assert_memory_equal(out, v, sizeof(v));
	if (mem_in_use() - before >= (512u << 10))
		fail_msg("the first read of a 4-block table took %zu bytes",
			 mem_in_use() - before);
}

static void test_rdonly(void **state)
{
	struct tfx *f = *state;
	struct model m;
	struct et_table_info in = make_victim(f, &m);
	struct et_table_info in2;
	uint64_t ids[2] = {0, 1 * in.rows_per_block + 2};
	float v[2 * 16] = {7, 7};
	unsigned char raw[2 * 64];
	int err;

	assert_err(et_tfile_open(f->path, ET_TFILE_RDONLY, &f->tf), 0);
	err = et_tfile_write_rows(f->tf, ids, 2, v, NULL);
	if (err != -EBADF && err != -EROFS)
		fail_msg("write_rows on a read-only file = %s", ename(err));
	err = et_tfile_write_range(f->tf, 0, 2, v);
	if (err != -EBADF && err != -EROFS)
		fail_msg("write_range on a read-only file = %s", ename(err));
	memset(raw, 0, sizeof(raw));
	err = tf_write_rows_raw(f->tf, ids, 2, raw);
	if (err != -EBADF && err != -EROFS)
		fail_msg("tf_write_rows_raw on a read-only file = %s",
			 ename(err));
	in2 = info_of(f->tf);
	assert_int_equal(in2.blocks_written, in.blocks_written + 3);
	check_all(f->tf, &m, 19);
	assert_err(et_tfile_verify(f->tf, NULL, NULL, NULL, NULL), 0);
	reopen(f, 0);
	check_all(f->tf, &m, 20);
	model_free(&m);
}

/* ------------------------------------------------------------ raw API */

static int progress_calls;
static uint64_t progress_last;

static int progress(void *arg, uint64_t done, uint64_t total)
{
	uint64_t *total_seen = arg;

	assert_true(done <= total);
	assert_true(done >= progress_last);
	progress_last = done;
	*total_seen = total;
	progress_calls++;
	return 0;
}

/* Raw records round-trip byte for byte (any f16 bits, any state bits);
 * tf_geom agrees with et_tfile_info; verify reports progress. */
static void test_raw_api(void **state)
{
	struct tfx *f = *state;
	struct et_table_params p = {.rows = 3000,
				    .dim = 10,
				    .dtype = ET_F16,
				    .optim = ET_OPT_ROWWISE_ADAGRAD,
				    .init = ET_INIT_NORMAL,
				    .seed = 8};
	const struct tf_geom *g;
	struct et_table_info in;
	unsigned char *src, *dst;
	uint64_t ids[500], total = 0;
	struct tu_rng r;
	size_t i;

	mk(f, &p);
	in = info_of(f->tf);
	g = tf_geom(f->tf);
	assert_int_equal(g->rows, in.rows);
	assert_int_equal(g->dim, in.dim);
	assert_int_equal(g->dtype, in.dtype);
	assert_int_equal(g->optim, in.optim);
	assert_int_equal(g->init, in.init);
	assert_true(g->init_scale == in.init_scale);
	assert_int_equal(g->seed, in.seed);
	assert_int_equal(g->block_size, in.block_size);
	assert_int_equal(g->rows_per_block, in.rows_per_block);
	assert_int_equal(g->row_bytes, in.row_bytes);
	assert_int_equal(g->value_bytes, 10 * 2);
	assert_int_equal(g->state_floats, 1);
	assert_int_equal(g->blocks, in.blocks);
	assert_int_equal(g->data_off, in.block_size);

	src = tu_calloc(500, g->row_bytes);
	dst = tu_calloc(500, g->row_bytes);
	tu_rng_seed(&r, 71);
	for (i = 0; i < 500; i++)
		ids[i] = tu_rng_below(&r, 3000); /* duplicates likely */
	for (i = 0; i < 500 * g->row_bytes; i++)
		src[i] = (unsigned char)tu_rng_next(&r);
	/* Duplicates: the last occurrence of each row is what is read. */
	assert_err(tf_write_rows_raw(f->tf, ids, 500, src), 0);
	reopen(f, 0);
	g = tf_geom(f->tf); /* valid for the life of the handle only */
	assert_int_equal(g->row_bytes, in.row_bytes);
	assert_err(tf_read_rows_raw(f->tf, ids, 500, dst), 0);
	for (i = 0; i < 500; i++) {
		size_t j, last = i;

		for (j = i + 1; j < 500; j++)
			if (ids[j] == ids[i])
				last = j;
		if (memcmp(dst + i * g->row_bytes, src + last * g->row_bytes,
			   g->row_bytes))
			fail_msg("raw row %llu differs",
				 (unsigned long long)ids[i]);
	}
	progress_calls = 0;
	progress_last = 0;
	assert_err(et_tfile_verify(f->tf, NULL, NULL, progress, &total), 0);
	if (progress_calls)
		assert_int_equal(total, info_of(f->tf).blocks_written);
	free(src);
	free(dst);
}

static void test_strerror(void **state)
{
	int a, b;

	for (a = ET_ERR_LAST; a < ET_ERR_BASE; a++) {
		const char *s = et_strerror(a);

		assert_non_null(s);
		assert_true(strlen(s) > 5);
		for (b = a + 1; b < ET_ERR_BASE; b++)
			assert_string_not_equal(s, et_strerror(b));
	}
	assert_non_null(et_strerror(-EIO));
	assert_non_null(et_strerror(-123456));
}

/* The file's own ring first (staging sized to its depth), then a ring
 * shallower than that attached: batches larger than its depth still go
 * through it, whole. */
static void test_attach_small_ring(void **state)
{
	struct tfx *f = *state;
	struct et_table_params p = {
	    .rows = 20000, .dim = 8, .init = ET_INIT_UNIFORM, .seed = 2};
	struct et_table_info in;
	struct model m;
	struct io_stats st;
	struct tu_rng r;
	int k;

	mk(f, &p);
	in = info_of(f->tf);
	model_init(&m, &in);
	tu_rng_seed(&r, 6);
	for (k = 0; k < 5; k++)
		random_batch(f->tf, &m, &r, 400);
	check_all(f->tf, &m, 23);
	assert_int_equal(io_open(4, &f->io, NULL), 0);
	tf_attach_io(f->tf, f->io);
	for (k = 0; k < 5; k++)
		random_batch(f->tf, &m, &r, 400);
	check_all(f->tf, &m, 24);
	assert_err(et_tfile_verify(f->tf, NULL, NULL, NULL, NULL), 0);
	io_get_stats(f->io, &st);
	assert_true(st.writes > 0 && st.reads > 0);
	assert_true(st.inflight_sum <= st.submits * 4);
	tf_attach_io(f->tf, NULL);
	/* Back on its own ring. */
	random_batch(f->tf, &m, &r, 400);
	check_all(f->tf, &m, 25);
	model_free(&m);
}

/*
 * The table file used through a ring of the caller's (the store shares one
 * among its tables), then detached (NULL) and used on: the I/O goes to the
 * attached ring while attached, and the file keeps working afterwards.
 * Last in the program: on a bad detach it may crash.
 */
static void test_attach_detach_io(void **state)
{
	struct tfx *f = *state;
	struct et_table_params p = {
	    .rows = 1000, .dim = 8, .init = ET_INIT_UNIFORM, .seed = 1};
	struct et_table_info in;
	struct model m;
	struct io_stats st0, st1;
	struct tu_rng r;
	uint64_t id;
	int k;

	mk(f, &p);
	in = info_of(f->tf);
	model_init(&m, &in);
	assert_int_equal(io_open(16, &f->io, NULL), 0);
	tf_attach_io(f->tf, f->io);
	io_get_stats(f->io, &st0);
	tu_rng_seed(&r, 4);
	for (k = 0; k < 10; k++)
		random_batch(f->tf, &m, &r, 20);
	check_all(f->tf, &m, 21);
	io_get_stats(f->io, &st1);
	assert_true(st1.writes > st0.writes);
	assert_true(st1.reads > st0.reads);
	assert_err(et_tfile_sync(f->tf), 0);
	io_get_stats(f->io, &st0);
	assert_int_equal(st0.fsyncs, st1.fsyncs + 1);

	/* Detach, close the ring, and go on with the file's own I/O. */
	tf_attach_io(f->tf, NULL);
	io_close(f->io);
	f->io = NULL;
	for (k = 0; k < 5; k++)
		random_batch(f->tf, &m, &r, 20);
	check_all(f->tf, &m, 22);
	id = 5;
	check_rows(f->tf, &m, &id, 1);
	assert_err(et_tfile_verify(f->tf, NULL, NULL, NULL, NULL), 0);
	model_free(&m);
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)
	const struct CMUnitTest tests[] = {
	    T(test_roundtrip_types),
	    T(test_roundtrip_special_values),
	    T(test_duplicates_and_shared_blocks),
	    T(test_large_batches),
	    T(test_write_range),
	    T(test_write_range_state),
	    T(test_lazy_rows),
	    T(test_huge_sparse),
	    T(test_row_range),
	    T(test_create_errors),
	    T(test_info),
	    T(test_reopen_map),
	    T(test_small_blocks),
	    T(test_read_multi),
	    T(test_verify_many),
	    T(test_bad_magic),
	    T(test_bad_version),
	    T(test_truncated_header),
	    T(test_truncated_file),
	    T(test_header_checksum),
	    T(test_header_fields),
	    T(test_block_corruption),
	    T(test_misplaced_block),
	    T(test_read_faults),
	    T(test_write_fault),
	    T(test_write_rmw_read_fault),
	    T(test_write_range_fault),
	    T(test_short_write),
	    T(test_sync),
	    T(test_small_stage),
	    T(test_rdonly),
	    T(test_raw_api),
	    cmocka_unit_test(test_strerror),
	    T(test_attach_small_ring),
	    T(test_attach_detach_io),
	};
#undef T

	return cmocka_run_group_tests(tests, NULL, NULL);
}
