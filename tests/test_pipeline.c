/*
 * test_pipeline.c - the store's I/O thread (src/store/pipeline.h) as a unit,
 * with read and write jobs against real table files (src/disk/table_file.h):
 *
 *   - pl_job_new sizes a job (rows, raw bytes) and fills its fields;
 *     pl_stop(NULL) and pl_job_free(NULL) are harmless;
 *   - pl_drain of an idle pipeline returns nothing, late 0, waited 0;
 *   - jobs run strictly in submission order: reads between writes of the
 *     same rows see exactly the writes submitted before them (reads of
 *     other files grouped with them or not), and pl_drain returns every
 *     job done, in submission order, and only the jobs since the last
 *     drain; *late never counts more rows than the reads submitted;
 *   - a write job's rows read back as written (raw and decoded, after a
 *     reopen too), a read job gives a file's rows, duplicates included, and
 *     the initializer's bytes for rows never written;
 *   - a failing job's result is reported on that job alone: a read of a
 *     row out of range (ET_EROWRANGE) grouped with good reads of other
 *     files, a write of a row out of range (nothing written), a write to a
 *     read-only file (-EBADF); jobs after it still run;
 *   - pl_stop frees the jobs it was handed, drained or not: the library's
 *     byte count (mem_host.h) returns to where it was.
 * Skips with a reason without io_uring or O_DIRECT.
 */
#include <errno.h>
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
#include "mem_host.h"
#include "pipeline.h"
#include "table_file.h"
#include "util.h"

#define NFILES 3

struct fx {
	const char *path[NFILES];
	et_tfile *tf[NFILES];
	struct pipeline *pl;
};

/* Three files of different rows: f32 SGD, bf16 Adagrad, f16 SGD. */
static const struct et_table_params params[NFILES] = {
    {.rows = 5000,
     .dim = 8,
     .dtype = ET_F32,
     .init = ET_INIT_UNIFORM,
     .seed = 3},
    {.rows = 3000,
     .dim = 5,
     .dtype = ET_BF16,
     .optim = ET_OPT_ROWWISE_ADAGRAD,
     .init = ET_INIT_NORMAL,
     .seed = 4},
    {.rows = 700,
     .dim = 33,
     .dtype = ET_F16,
     .init = ET_INIT_UNIFORM,
     .seed = 5},
};

static int setup(void **state)
{
	*state = tu_calloc(1, sizeof(struct fx));
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	pl_stop(f->pl);
	for (int i = 0; i < NFILES; i++) {
		et_tfile_close(f->tf[i]);
		if (f->path[i])
			tu_unlink(f->path[i]);
	}
	free(f);
	return 0;
}

/* Creates the files (skipping without io_uring or O_DIRECT). */
static void fx_files(struct fx *f)
{
	tu_require_uring();
	tu_require_direct();
	for (int i = 0; i < NFILES; i++) {
		f->path[i] = tu_path("pl");
		assert_int_equal(
		    et_tfile_create(f->path[i], &params[i], &f->tf[i]), 0);
	}
}

static uint32_t rb_of(et_tfile *tf)
{
	return tf_geom(tf)->row_bytes;
}

/* The raw bytes of row `row`, version v: values and state made from
 * both, so that every version of every row differs. */
static void raw_row(et_tfile *tf, uint64_t row, uint32_t v, void *dst)
{
	const struct tf_geom *g = tf_geom(tf);
	float vals[64];

	assert_true(g->dim <= 64);
	for (uint32_t c = 0; c < g->dim; c++)
		vals[c] = (float)(row % 97) * 0.25f + (float)v * 2.0f +
			  (float)c / 8.0f;
	dtype_encode(g->dtype, vals, dst, g->dim);
	if (g->state_floats) {
		float st = (float)v + 0.5f;

		memcpy((char *)dst + g->value_bytes, &st, 4);
	}
}

static struct pl_job *job(int kind, et_tfile *tf, uint32_t table,
			  const uint64_t *rows, size_t n, uint32_t v)
{
	struct pl_job *j = pl_job_new(kind, tf, table, n, rb_of(tf));

	assert_non_null(j);
	for (size_t i = 0; i < n; i++) {
		j->rows[i] = rows[i];
		if (kind == PL_WRITE)
			raw_row(tf, rows[i], v,
				(char *)j->raw + i * j->row_bytes);
	}
	return j;
}

/* The raw bytes of rows[0..n) in tf, read in the caller's thread. */
static char *read_raw(et_tfile *tf, const uint64_t *rows, size_t n)
{
	char *buf = tu_calloc(n, rb_of(tf));

	assert_int_equal(tf_read_rows_raw(tf, rows, n, buf), 0);
	return buf;
}

static void free_list(struct pl_job *j)
{
	while (j) {
		struct pl_job *next = j->next;

		pl_job_free(j);
		j = next;
	}
}

/* ------------------------------------------------------------- basics */

static void test_job_new(void **state)
{
	size_t base = mem_in_use();
	struct pl_job *j;

	(void)state;
	j = pl_job_new(PL_READ, NULL, 7, 100, 36);
	assert_non_null(j);
	assert_int_equal(j->kind, PL_READ);
	assert_null(j->tf);
	assert_int_equal(j->table, 7);
	assert_int_equal(j->n, 100);
	assert_int_equal(j->row_bytes, 36);
	assert_non_null(j->rows);
	assert_non_null(j->raw);
	/* room for every row and its bytes (zeroed) */
	for (size_t i = 0; i < 100; i++)
		assert_int_equal(j->rows[i], 0);
	for (size_t i = 0; i < 100 * 36; i++)
		assert_int_equal(((uint8_t *)j->raw)[i], 0);
	assert_false(j->done);
	assert_int_equal(j->result, 0);
	assert_true(mem_in_use() >= base + 100 * 8 + 100 * 36);
	pl_job_free(j);
	assert_int_equal(mem_in_use(), base);
	pl_job_free(NULL);
	pl_stop(NULL);
	/* out of memory: NULL, nothing kept */
	mem_fault_set(2);
	assert_null(pl_job_new(PL_WRITE, NULL, 0, 10, 8));
	assert_true(mem_fault_fired());
	mem_fault_clear();
	assert_int_equal(mem_in_use(), base);
}

static void test_idle(void **state)
{
	struct fx *f = *state;
	uint64_t late = 99, waited = 99;
	size_t base = mem_in_use();

	assert_int_equal(pl_start(&f->pl), 0);
	assert_null(pl_drain(f->pl, &late, &waited));
	assert_int_equal(late, 0);
	assert_int_equal(waited, 0);
	assert_null(pl_drain(f->pl, &late, &waited));
	pl_stop(f->pl);
	f->pl = NULL;
	assert_int_equal(mem_in_use(), base);
}

/* -------------------------------------------------------------- order */

/*
 * 12 rounds on file 0: write rows R as version k, then read R (with a
 * duplicate); between them reads of files 1 and 2, which the worker may
 * run in one group with file 0's reads, and two reads of file 0 in a row
 * (never one group). All submitted before a single drain: the jobs come
 * back done, in order, and each read of file 0 holds version k.
 */
static void test_order(void **state)
{
	struct fx *f = *state;
	enum { ROUNDS = 12, NR = 9 };
	const uint64_t rows[NR] = {0, 1, 2, 17, 130, 131, 4999, 2500, 1};
	const uint64_t other[4] = {5, 2999, 5, 100};
	struct pl_job *sub[ROUNDS * 5], *j, *out;
	size_t ns = 0, read_rows = 0;
	uint64_t late, waited;
	char *want;

	fx_files(f);
	want = tu_calloc(NR, rb_of(f->tf[0]));
	assert_int_equal(pl_start(&f->pl), 0);
	for (uint32_t k = 0; k < ROUNDS; k++) {
		/* rows 0..7 written (row 1 once: a write's rows distinct) */
		sub[ns++] = job(PL_WRITE, f->tf[0], 0, rows, NR - 1, k + 1);
		sub[ns++] = job(PL_READ, f->tf[1], 1, other, 4, 0);
		sub[ns++] = job(PL_READ, f->tf[0], 0, rows, NR, 0);
		sub[ns++] = job(PL_READ, f->tf[2], 2, other + 2, 2, 0);
		sub[ns++] = job(PL_READ, f->tf[0], 0, rows, NR, 0);
		read_rows += 4 + NR + 2 + NR;
	}
	for (size_t i = 0; i < ns; i++)
		pl_submit(f->pl, sub[i]);
	out = pl_drain(f->pl, &late, &waited);
	assert_true(late <= read_rows);
	j = out;
	for (size_t i = 0; i < ns; i++, j = j->next) {
		assert_ptr_equal(j, sub[i]);
		assert_true(j->done);
		assert_int_equal(j->result, 0);
	}
	assert_null(j);
	/* each read of file 0 saw the write of its round */
	for (uint32_t k = 0; k < ROUNDS; k++)
		for (int r = 2; r <= 4; r += 2) {
			const struct pl_job *rd = sub[k * 5 + r];

			for (size_t i = 0; i < NR; i++)
				raw_row(f->tf[0], rows[i], k + 1,
					want + i * rd->row_bytes);
			assert_memory_equal(rd->raw, want, NR * rd->row_bytes);
		}
	free_list(out);
	free(want);
	/* nothing since: an empty drain */
	assert_null(pl_drain(f->pl, &late, &waited));
	assert_int_equal(late, 0);
	assert_int_equal(waited, 0);
}

/* Two waves: each drain returns the jobs submitted since the last one. */
static void test_waves(void **state)
{
	struct fx *f = *state;
	const uint64_t rows[3] = {10, 11, 12};
	struct pl_job *a, *b, *c, *out;
	uint64_t late, waited;

	fx_files(f);
	assert_int_equal(pl_start(&f->pl), 0);
	a = job(PL_WRITE, f->tf[1], 1, rows, 3, 1);
	b = job(PL_READ, f->tf[1], 1, rows, 3, 0);
	pl_submit(f->pl, a);
	pl_submit(f->pl, b);
	out = pl_drain(f->pl, &late, &waited);
	assert_ptr_equal(out, a);
	assert_ptr_equal(a->next, b);
	assert_null(b->next);
	assert_true(late <= 3);
	c = job(PL_READ, f->tf[1], 1, rows + 1, 2, 0);
	pl_submit(f->pl, c);
	assert_ptr_equal(pl_drain(f->pl, &late, &waited), c);
	assert_null(c->next);
	assert_true(c->done);
	assert_int_equal(c->result, 0);
	/* the read of the first wave and of the second agree */
	assert_memory_equal(c->raw, (char *)b->raw + b->row_bytes,
			    2 * b->row_bytes);
	free_list(out);
	free_list(c);
}

/* ------------------------------------------------------- file contents */

static void test_read_write_file(void **state)
{
	struct fx *f = *state;
	const uint64_t wrows[6] = {3, 64, 65, 1000, 2999, 0};
	/* written, never written, duplicates */
	const uint64_t rrows[9] = {64, 7, 3, 64, 2998, 0, 1000, 7, 2999};
	char *want, *got;
	float vals[9 * 5], st[9];
	struct pl_job *w, *r, *out;
	uint64_t late, waited;
	uint32_t rb;

	fx_files(f);
	rb = rb_of(f->tf[1]);
	assert_int_equal(pl_start(&f->pl), 0);
	w = job(PL_WRITE, f->tf[1], 1, wrows, 6, 3);
	r = job(PL_READ, f->tf[1], 1, rrows, 9, 0);
	pl_submit(f->pl, w);
	pl_submit(f->pl, r);
	out = pl_drain(f->pl, &late, &waited);
	assert_ptr_equal(out, w);
	assert_int_equal(w->result, 0);
	assert_int_equal(r->result, 0);
	/* what the read job holds: the written bytes, or the initializer's */
	want = tu_calloc(9, rb);
	for (size_t i = 0; i < 9; i++) {
		bool written = false;

		for (size_t k = 0; k < 6; k++)
			written |= wrows[k] == rrows[i];
		if (written)
			raw_row(f->tf[1], rrows[i], 3, want + i * rb);
		else
			tf_init_row_raw(f->tf[1], rrows[i], want + i * rb);
	}
	assert_memory_equal(r->raw, want, 9 * rb);
	/* and the file agrees, raw and decoded */
	got = read_raw(f->tf[1], rrows, 9);
	assert_memory_equal(got, want, 9 * rb);
	assert_int_equal(et_tfile_read_rows(f->tf[1], rrows, 9, vals, st), 0);
	for (size_t i = 0; i < 9; i++) {
		float dec[5];

		dtype_decode(ET_BF16, want + i * rb, dec, 5);
		assert_memory_equal(vals + i * 5, dec, sizeof(dec));
		assert_memory_equal(&st[i], want + i * rb + 10, 4);
	}
	free(got);
	free_list(out);
	/* after a sync and a reopen too */
	pl_stop(f->pl);
	f->pl = NULL;
	assert_int_equal(et_tfile_sync(f->tf[1]), 0);
	et_tfile_close(f->tf[1]);
	f->tf[1] = NULL;
	assert_int_equal(et_tfile_open(f->path[1], 0, &f->tf[1]), 0);
	got = read_raw(f->tf[1], rrows, 9);
	assert_memory_equal(got, want, 9 * rb);
	free(got);
	free(want);
}

/* A read job of rows written by the table file's own API. */
static void test_read_written_elsewhere(void **state)
{
	struct fx *f = *state;
	const uint64_t rows[4] = {699, 0, 350, 699};
	float in[4 * 33];
	struct pl_job *r, *out;
	uint64_t late, waited;
	char *want;

	fx_files(f);
	for (size_t i = 0; i < 4 * 33; i++)
		in[i] = (float)i / 16.0f - 3.0f;
	assert_int_equal(et_tfile_write_rows(f->tf[2], rows, 3, in, NULL), 0);
	want = read_raw(f->tf[2], rows, 4);
	assert_int_equal(pl_start(&f->pl), 0);
	r = job(PL_READ, f->tf[2], 2, rows, 4, 0);
	pl_submit(f->pl, r);
	out = pl_drain(f->pl, &late, &waited);
	assert_ptr_equal(out, r);
	assert_int_equal(r->result, 0);
	assert_memory_equal(r->raw, want, 4 * r->row_bytes);
	free_list(out);
	free(want);
}

/* ------------------------------------------------------------ failures */

static void test_failure(void **state)
{
	struct fx *f = *state;
	const uint64_t good0[3] = {1, 2, 3}, good2[2] = {5, 6};
	const uint64_t bad1[3] = {0, 3000, 1};	 /* file 1 has 3000 rows */
	const uint64_t badw[3] = {20, 21, 5000}; /* file 0 has 5000 */
	const uint64_t w0[2] = {20, 21};
	struct pl_job *sub[7], *j, *out;
	const char *ro_path;
	et_tfile *ro = NULL;
	uint64_t late, waited;
	char *before, *after, *want;

	fx_files(f);
	/* a read-only file: a copy of file 0's parameters, reopened */
	ro_path = tu_path("pl-ro");
	assert_int_equal(et_tfile_create(ro_path, &params[0], &ro), 0);
	et_tfile_close(ro);
	assert_int_equal(et_tfile_open(ro_path, ET_TFILE_RDONLY, &ro), 0);
	before = read_raw(f->tf[0], w0, 2);
	assert_int_equal(pl_start(&f->pl), 0);
	/* three reads of three files, run as one group: the bad one fails
	 * alone */
	sub[0] = job(PL_READ, f->tf[0], 0, good0, 3, 0);
	sub[1] = job(PL_READ, f->tf[1], 1, bad1, 3, 0);
	sub[2] = job(PL_READ, f->tf[2], 2, good2, 2, 0);
	/* a write with a row out of range: nothing written */
	sub[3] = job(PL_WRITE, f->tf[0], 0, badw, 3, 9);
	/* a write to a read-only file */
	sub[4] = job(PL_WRITE, ro, 0, good0, 3, 9);
	/* and jobs after them still run */
	sub[5] = job(PL_WRITE, f->tf[0], 0, good0, 3, 4);
	sub[6] = job(PL_READ, f->tf[0], 0, good0, 3, 0);
	for (int i = 0; i < 7; i++)
		pl_submit(f->pl, sub[i]);
	out = pl_drain(f->pl, &late, &waited);
	j = out;
	for (int i = 0; i < 7; i++, j = j->next) {
		assert_ptr_equal(j, sub[i]);
		assert_true(j->done);
	}
	assert_int_equal(sub[0]->result, 0);
	assert_int_equal(sub[1]->result, ET_EROWRANGE);
	assert_int_equal(sub[2]->result, 0);
	assert_int_equal(sub[3]->result, ET_EROWRANGE);
	assert_int_equal(sub[4]->result, -EBADF);
	assert_int_equal(sub[5]->result, 0);
	assert_int_equal(sub[6]->result, 0);
	/* the good reads of the failed group hold their rows */
	want = read_raw(f->tf[2], good2, 2);
	assert_memory_equal(sub[2]->raw, want, 2 * sub[2]->row_bytes);
	free(want);
	want = tu_calloc(3, sub[0]->row_bytes);
	for (int i = 0; i < 3; i++)
		tf_init_row_raw(f->tf[0], good0[i],
				want + i * sub[0]->row_bytes);
	assert_memory_equal(sub[0]->raw, want, 3 * sub[0]->row_bytes);
	/* the last read saw the last write */
	for (int i = 0; i < 3; i++)
		raw_row(f->tf[0], good0[i], 4, want + i * sub[6]->row_bytes);
	assert_memory_equal(sub[6]->raw, want, 3 * sub[6]->row_bytes);
	free(want);
	/* rows 20 and 21 of the refused write are as they were */
	after = read_raw(f->tf[0], w0, 2);
	assert_memory_equal(after, before, 2 * rb_of(f->tf[0]));
	free(after);
	free(before);
	free_list(out);
	et_tfile_close(ro);
	tu_unlink(ro_path);
}

/* --------------------------------------------------------------- stop */

/* pl_stop frees every job it holds: done and not drained, or queued. */
static void test_stop_frees(void **state)
{
	struct fx *f = *state;
	const uint64_t rows[5] = {9, 8, 7, 6, 5};
	struct pl_job *out;
	uint64_t late, waited;
	size_t base;

	fx_files(f);
	/* the files' own buffers, grown once before the count is taken */
	assert_int_equal(pl_start(&f->pl), 0);
	for (int i = 0; i < NFILES; i++) {
		pl_submit(f->pl, job(PL_WRITE, f->tf[i], i, rows, 5, 1));
		pl_submit(f->pl, job(PL_READ, f->tf[i], i, rows, 5, 0));
	}
	out = pl_drain(f->pl, &late, &waited);
	free_list(out);
	pl_stop(f->pl);
	f->pl = NULL;

	base = mem_in_use();
	assert_int_equal(pl_start(&f->pl), 0);
	for (int k = 0; k < 20; k++)
		for (int i = 0; i < NFILES; i++) {
			pl_submit(f->pl,
				  job(PL_WRITE, f->tf[i], i, rows, 5, 2 + k));
			pl_submit(f->pl, job(PL_READ, f->tf[i], i, rows, 5, 0));
		}
	pl_stop(f->pl);
	f->pl = NULL;
	assert_int_equal(mem_in_use(), base);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_job_new),
	    cmocka_unit_test_setup_teardown(test_idle, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_order, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_waves, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_read_write_file, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_read_written_elsewhere, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_failure, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_stop_frees, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
