/*
 * test_writeback.c - the write-back queue (src/store/writeback.h) as a unit,
 * inside a real store (et_store_open on a scratch directory, tables made
 * with et_table_create) reached through src/store/state.h:
 *
 *   - wb_queue queues a key (table, row) once: queueing it again replaces
 *     its bytes in place; wb_find finds every queued key and no other (not
 *     the same row of another table), wb_row holds its bytes; rows are
 *     any u64 (0, 2^40, UINT64_MAX), each table's in its own entries, and
 *     the jobs carry them whole;
 *   - thousands of keys of two tables (the index grown and rebuilt past
 *     its initial 1024 entries, a power of two at least twice the keys)
 *     are all found with their bytes;
 *   - wb_run writes every queued row home (the table file's raw rows read
 *     them back, and so does et_gather), empties the queue and counts the
 *     table's write-backs; a queued row is served by et_gather before it
 *     is written; a wb_run that fails (an injected write error) keeps the
 *     queue whole and marks the store failed until et_flush writes it;
 *   - wb_reserve makes room: the queueing after it allocates nothing (an
 *     armed allocation fault does not fire); wb_room_add adds up;
 *   - wb_take_jobs empties the queue into one write job per table, in
 *     table order, rows in queue order, with their bytes; run by the I/O
 *     thread (pipeline.h), the rows read back; an empty queue gives none;
 *   - wb_widen (also through et_table_create of a table of wider rows)
 *     keeps every queued row's bytes, and never narrows the stride.
 * Skips with a reason without io_uring or O_DIRECT.
 */
#include <errno.h>
#include <ftw.h>
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
#include "hash.h"
#include "io.h"
#include "key.h"
#include "mem_host.h"
#include "pipeline.h"
#include "state.h"
#include "table_file.h"
#include "util.h"
#include "writeback.h"

struct fx {
	char *dir;
	et_store *s;
};

static int setup(void **state)
{
	*state = tu_calloc(1, sizeof(struct fx));
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	io_fault_clear();
	mem_fault_clear();
	et_store_close(f->s);
	if (f->dir) {
		tu_rmtree(f->dir);
		free(f->dir);
	}
	free(f);
	return 0;
}

/* A store in a fresh directory with 1 MiB of DDR. */
static et_store *fx_open(struct fx *f)
{
	struct et_store_config c = {.ddr_bytes = 1 << 20, .ways = 8};

	tu_require_uring();
	tu_require_direct();
	f->dir = strdup(tu_path("wb"));
	assert_non_null(f->dir);
	assert_int_equal(et_store_open(f->dir, &c, &f->s), 0);
	return f->s;
}

/* Tables of several row sizes: 32 bytes (f32 SGD), 14 (bf16 Adagrad),
 * 66 (f16 SGD), 164 (f32 Adagrad), 256 (f32 SGD, more rows). */
enum { T_F32 = 0, T_BF16, T_F16, T_WIDE, T_BIG };

static int mk_table(et_store *s, int kind)
{
	static const struct et_table_params p[] = {
	    {.rows = 10000, .dim = 8, .dtype = ET_F32, .seed = 1},
	    {.rows = 5000,
	     .dim = 5,
	     .dtype = ET_BF16,
	     .optim = ET_OPT_ROWWISE_ADAGRAD,
	     .init = ET_INIT_UNIFORM,
	     .seed = 2},
	    {.rows = 800, .dim = 33, .dtype = ET_F16, .seed = 3},
	    {.rows = 300,
	     .dim = 40,
	     .dtype = ET_F32,
	     .optim = ET_OPT_ROWWISE_ADAGRAD,
	     .seed = 4},
	    {.rows = 20000, .dim = 64, .dtype = ET_F32, .seed = 5},
	};
	static const char *names[] = {"a", "b", "c", "wide", "big"};
	int id = -1;

	assert_int_equal(et_table_create(s, names[kind], &p[kind], &id), 0);
	return id;
}

static const struct tf_geom *geom_of(et_store *s, int table)
{
	return s->reg.tables[table].g;
}

/* The raw bytes of row `row` of table, version v: every (table, row, v)
 * different. */
static void raw_row(et_store *s, int table, uint64_t row, uint32_t v, void *dst)
{
	const struct tf_geom *g = geom_of(s, table);
	float vals[64];

	for (uint32_t c = 0; c < g->dim; c++)
		vals[c] = (float)(row % 251) * 0.125f + (float)v * 4.0f +
			  (float)table * 1000.0f + (float)c / 16.0f;
	dtype_encode(g->dtype, vals, dst, g->dim);
	if (g->state_floats) {
		float st = (float)v + (float)row / 8.0f;

		memcpy((char *)dst + g->value_bytes, &st, 4);
	}
}

/* Queues (table, row) at version v. */
static void queue(et_store *s, int table, uint64_t row, uint32_t v)
{
	char raw[256];

	raw_row(s, table, row, v, raw);
	assert_int_equal(wb_queue(s, (uint32_t)table, row, raw), 0);
}

/* (table, row) is queued with version v's bytes. */
static void assert_queued(et_store *s, int table, uint64_t row, uint32_t v)
{
	char raw[256];
	int64_t at = wb_find(s, (uint32_t)table, row);

	if (at < 0)
		fail_msg("table %d row %llu not queued", table,
			 (unsigned long long)row);
	assert_true((size_t)at < s->wb.n);
	raw_row(s, table, row, v, raw);
	assert_memory_equal(wb_row(&s->wb, at), raw,
			    geom_of(s, table)->row_bytes);
}

/* The table file holds (table, rows[i]) at versions v[i]: its raw rows,
 * read directly. */
static void assert_home(et_store *s, int table, const uint64_t *rows,
			const uint32_t *v, size_t n)
{
	uint32_t rb = geom_of(s, table)->row_bytes;
	char *got = tu_calloc(n, rb), *want = tu_calloc(n, rb);

	for (size_t i = 0; i < n; i++)
		raw_row(s, table, rows[i], v[i], want + i * rb);
	assert_int_equal(
	    tf_read_rows_raw(s->reg.tables[table].tf, rows, n, got), 0);
	for (size_t i = 0; i < n; i++)
		if (memcmp(got + i * rb, want + i * rb, rb))
			fail_msg("table %d row %llu: not version %u at home",
				 table, (unsigned long long)rows[i], v[i]);
	free(got);
	free(want);
}

/* et_gather of (table, rows[i]) gives version v[i]'s values. */
static void assert_gather(et_store *s, int table, const uint64_t *rows,
			  const uint32_t *v, size_t n)
{
	const struct tf_geom *g = geom_of(s, table);
	float *out = tu_calloc(n * g->dim, sizeof(float));
	float dec[64];
	char raw[256];

	assert_int_equal(et_gather(s, table, rows, n, out), 0);
	for (size_t i = 0; i < n; i++) {
		raw_row(s, table, rows[i], v[i], raw);
		dtype_decode(g->dtype, raw, dec, g->dim);
		assert_memory_equal(out + i * g->dim, dec,
				    g->dim * sizeof(float));
	}
	free(out);
}

static uint64_t writebacks(et_store *s, int table)
{
	struct et_stats st;

	assert_int_equal(et_get_stats(s, table, &st), 0);
	return st.writebacks;
}

/* ------------------------------------------------------- queue, replace */

static void test_queue_replace(void **state)
{
	struct fx *f = *state;
	et_store *s = fx_open(f);
	int a = mk_table(s, T_F32);
	const uint32_t ta = (uint32_t)a;
	const uint64_t rows[2] = {5, 6};
	const uint32_t vers[2] = {2, 1};
	int64_t at;

	assert_int_equal(s->wb.stride, 32);
	assert_int_equal(s->wb.n, 0);
	assert_int_equal(wb_find(s, ta, 5), -1);
	queue(s, a, 5, 1);
	assert_int_equal(s->wb.n, 1);
	at = wb_find(s, ta, 5);
	assert_int_equal(at, 0);
	assert_queued(s, a, 5, 1);
	/* again: replaced */
	{
		char raw[32];

		raw_row(s, a, 5, 2, raw);
		assert_int_equal(wb_queue(s, ta, 5, raw), 0);
	}
	assert_int_equal(s->wb.n, 1);
	assert_int_equal(wb_find(s, ta, 5), at);
	assert_queued(s, a, 5, 2);
	/* a neighbour, and the same row of another table: not queued */
	assert_int_equal(wb_find(s, ta, 4), -1);
	assert_int_equal(wb_find(s, ta + 1, 5), -1);
	queue(s, a, 6, 1);
	assert_int_equal(s->wb.n, 2);
	assert_queued(s, a, 5, 2);
	assert_queued(s, a, 6, 1);
	/* written home: the queue empties, the file has the last bytes */
	assert_int_equal(wb_run(s), 0);
	assert_int_equal(s->wb.n, 0);
	assert_int_equal(wb_find(s, ta, 5), -1);
	assert_int_equal(wb_find(s, ta, 6), -1);
	assert_home(s, a, rows, vers, 2);
	assert_int_equal(writebacks(s, a), 2);
	assert_gather(s, a, rows, vers, 2);
	/* an empty queue: nothing to do */
	assert_int_equal(wb_run(s), 0);
	assert_int_equal(writebacks(s, a), 2);
}

/* A queued row is a tier: et_gather serves it before it is written, and
 * a flush takes it home. */
static void test_gather_from_queue(void **state)
{
	struct fx *f = *state;
	et_store *s = fx_open(f);
	int a = mk_table(s, T_F32), b = mk_table(s, T_BF16);
	const uint64_t ra[3] = {100, 7, 9999}, rb[2] = {4999, 0};
	const uint32_t va[3] = {3, 5, 8}, vb[2] = {6, 7};

	for (int i = 0; i < 3; i++)
		queue(s, a, ra[i], va[i]);
	for (int i = 0; i < 2; i++)
		queue(s, b, rb[i], vb[i]);
	assert_gather(s, a, ra, va, 3);
	assert_gather(s, b, rb, vb, 2);
	assert_int_equal(et_flush(s), 0);
	assert_int_equal(s->wb.n, 0);
	assert_home(s, a, ra, va, 3);
	assert_home(s, b, rb, vb, 2);
}

/* ---------------------------------------------------------- many keys */

static void test_index_growth(void **state)
{
	struct fx *f = *state;
	et_store *s = fx_open(f);
	int a = mk_table(s, T_F32), b = mk_table(s, T_BF16);
	enum { NA = 3000, NB = 2000 };
	uint64_t *rows_a = tu_calloc(NA, 8), *rows_b = tu_calloc(NB, 8);
	uint32_t *va = tu_calloc(NA, 4), *vb = tu_calloc(NB, 4);
	size_t na = 0, nb = 0;

	/* interleaved; rows spread over the table, every third row */
	for (size_t i = 0; na < NA || nb < NB; i++) {
		if (na < NA) {
			rows_a[na] = (na * 3) % 10000;
			va[na] = 1;
			queue(s, a, rows_a[na], 1);
			na++;
		}
		if (nb < NB && i % 3 != 2) {
			rows_b[nb] = (nb * 2 + 1) % 5000;
			vb[nb] = 1;
			queue(s, b, rows_b[nb], 1);
			nb++;
		}
		/* the initial index, up to half full, then twice as big */
		if (s->wb.n <= 512)
			assert_int_equal(s->wb.idx_cap, 1024);
		else if (s->wb.n <= 1024)
			assert_int_equal(s->wb.idx_cap, 2048);
	}
	assert_int_equal(s->wb.n, NA + NB);
	assert_true(s->wb.idx_cap >= 2 * s->wb.n);
	assert_int_equal(s->wb.idx_cap & (s->wb.idx_cap - 1), 0);
	for (size_t i = 0; i < NA; i++)
		assert_queued(s, a, rows_a[i], 1);
	for (size_t i = 0; i < NB; i++)
		assert_queued(s, b, rows_b[i], 1);
	/* rows not queued: not found (a's rows are multiples of 3 below
	 * 9000, b's odd) */
	for (uint64_t r = 1; r < 9000; r += 3)
		assert_int_equal(wb_find(s, (uint32_t)a, r), -1);
	for (uint64_t r = 0; r < 5000; r += 2)
		assert_int_equal(wb_find(s, (uint32_t)b, r), -1);
	/* every third key again: replaced, no new entries */
	for (size_t i = 0; i < NA; i += 3) {
		va[i] = 2;
		queue(s, a, rows_a[i], 2);
	}
	for (size_t i = 1; i < NB; i += 3) {
		vb[i] = 3;
		queue(s, b, rows_b[i], 3);
	}
	assert_int_equal(s->wb.n, NA + NB);
	for (size_t i = 0; i < NA; i++)
		assert_queued(s, a, rows_a[i], va[i]);
	for (size_t i = 0; i < NB; i++)
		assert_queued(s, b, rows_b[i], vb[i]);
	assert_int_equal(wb_run(s), 0);
	assert_int_equal(s->wb.n, 0);
	assert_int_equal(writebacks(s, a), NA);
	assert_int_equal(writebacks(s, b), NB);
	assert_home(s, a, rows_a, va, NA);
	assert_home(s, b, rows_b, vb, NB);
	assert_gather(s, a, rows_a, va, 200);
	assert_gather(s, b, rows_b + 1000, vb + 1000, 200);
	free(rows_a);
	free(rows_b);
	free(va);
	free(vb);
}

/* -------------------------------------------------------------- reserve */

static void test_reserve(void **state)
{
	struct fx *f = *state;
	et_store *s = fx_open(f);
	int a = mk_table(s, T_F32), b = mk_table(s, T_F16);

	queue(s, a, 1, 1);
	assert_int_equal(wb_reserve(s, 1500), 0);
	assert_true(s->wb.keys.cap >= (1 + 1500) * sizeof(uint64_t));
	assert_true(s->wb.buf.cap >= (1 + 1500) * (size_t)s->wb.stride);
	assert_true(s->wb.idx_cap >= 2 * (1 + 1500));
	/* the next allocation would fail: queueing 1500 rows needs none */
	mem_fault_set(1);
	for (uint64_t r = 0; r < 1500; r++) {
		char raw[256];
		int t = r % 2 ? a : b;

		raw_row(s, t, 2 + r / 2, 4, raw);
		assert_int_equal(wb_queue(s, (uint32_t)t, 2 + r / 2, raw), 0);
	}
	assert_false(mem_fault_fired());
	mem_fault_clear();
	assert_int_equal(s->wb.n, 1501);
	assert_queued(s, a, 1, 1);
	for (uint64_t r = 0; r < 1500; r++)
		assert_queued(s, r % 2 ? a : b, 2 + r / 2, 4);
	/* an operation's room adds up, and is cleared */
	wb_room_clear(s);
	assert_int_equal(wb_room_add(s, 1000), 0);
	assert_int_equal(wb_room_add(s, 3000), 0);
	assert_int_equal(s->wb.room, 4000);
	assert_true(s->wb.keys.cap >= (1501 + 4000) * sizeof(uint64_t));
	assert_true(s->wb.idx_cap >= 2 * (1501 + 4000));
	wb_room_clear(s);
	assert_int_equal(s->wb.room, 0);
	assert_int_equal(s->wb.n, 1501);
}

/* A write-back that fails keeps the queue whole and the store failed
 * (ET_EFAILED for operations) until et_flush writes it. */
static void test_run_failure(void **state)
{
	struct fx *f = *state;
	et_store *s = fx_open(f);
	int a = mk_table(s, T_BIG);
	enum { N = 10000 }; /* 2.5 MiB of log records: writes happen */
	uint64_t *rows = tu_calloc(N, 8);
	uint32_t *v = tu_calloc(N, 4);
	float out[64];
	int ret;

	for (size_t i = 0; i < N; i++) {
		rows[i] = i;
		v[i] = 7;
		queue(s, a, i, 7);
	}
	io_fault_set_sticky(IO_WRITE, EIO);
	ret = wb_run(s);
	io_fault_clear();
	assert_int_not_equal(ret, 0);
	assert_int_equal(s->failed, ret);
	assert_int_equal(s->wb.n, N);
	for (size_t i = 0; i < N; i += 97)
		assert_queued(s, a, i, 7);
	assert_int_equal(et_gather(s, a, rows, 1, out), ET_EFAILED);
	assert_int_equal(et_flush(s), 0);
	assert_int_equal(s->failed, 0);
	assert_int_equal(s->wb.n, 0);
	assert_home(s, a, rows, v, N);
	assert_gather(s, a, rows + 5000, v, 100);
	free(rows);
	free(v);
}

/* ----------------------------------------------------------- take jobs */

static void test_take_jobs(void **state)
{
	struct fx *f = *state;
	et_store *s = fx_open(f);
	int t[3];
	struct pl_job *jobs, *j, *out;
	struct pipeline *pl;
	uint64_t rows[3][40], late, waited;
	uint32_t v[3][40];
	size_t n[3] = {0, 0, 0};

	t[0] = mk_table(s, T_F32);
	t[1] = mk_table(s, T_BF16);
	t[2] = mk_table(s, T_F16);
	assert_int_equal(wb_take_jobs(s, &jobs), 0);
	assert_null(jobs);
	/* interleaved: c, a, b, c, a, ... (table 1 one row in three) */
	for (uint64_t i = 0; i < 90; i++) {
		int k = (int)((i + 2) % 3);

		if (k == 1 && i % 2)
			continue;
		rows[k][n[k]] = (i * 37) % 800;
		v[k][n[k]] = (uint32_t)i;
		queue(s, t[k], rows[k][n[k]], (uint32_t)i);
		n[k]++;
	}
	assert_int_equal(wb_take_jobs(s, &jobs), 0);
	assert_int_equal(s->wb.n, 0);
	for (int k = 0; k < 3; k++)
		assert_int_equal(wb_find(s, (uint32_t)t[k], rows[k][0]), -1);
	/* one job per table, in table order, rows in queue order */
	j = jobs;
	for (int k = 0; k < 3; k++, j = j->next) {
		const struct tf_geom *g = geom_of(s, t[k]);
		char raw[256];

		assert_non_null(j);
		assert_int_equal(j->kind, PL_WRITE);
		assert_ptr_equal(j->tf, s->reg.tables[t[k]].tf);
		assert_int_equal(j->table, t[k]);
		assert_int_equal(j->n, n[k]);
		assert_int_equal(j->row_bytes, g->row_bytes);
		for (size_t i = 0; i < n[k]; i++) {
			assert_int_equal(j->rows[i], rows[k][i]);
			raw_row(s, t[k], rows[k][i], v[k][i], raw);
			assert_memory_equal((char *)j->raw + i * g->row_bytes,
					    raw, g->row_bytes);
		}
	}
	assert_null(j);
	/* the I/O thread writes them home */
	assert_int_equal(pl_start(&pl), 0);
	while ((j = jobs)) {
		jobs = j->next;
		pl_submit(pl, j);
	}
	out = pl_drain(pl, &late, &waited);
	for (j = out; j; j = out) {
		assert_int_equal(j->result, 0);
		out = j->next;
		pl_job_free(j);
	}
	pl_stop(pl);
	for (int k = 0; k < 3; k++) {
		assert_home(s, t[k], rows[k], v[k], n[k]);
		assert_gather(s, t[k], rows[k], v[k], n[k]);
	}
	/* one table alone: one job */
	queue(s, t[1], 3, 99);
	assert_int_equal(wb_take_jobs(s, &jobs), 0);
	assert_non_null(jobs);
	assert_null(jobs->next);
	assert_int_equal(jobs->table, t[1]);
	assert_int_equal(jobs->n, 1);
	pl_job_free(jobs);
}

/* ---------------------------------------------------------- wide rows */

/* Where the index's probes for (table t, row) start, in an index of up to
 * 4096 entries: keys agreeing here meet in every probe. */
static uint32_t home(int t, uint64_t row)
{
	return (uint32_t)(hash_mix(cache_hkey((uint32_t)t, row)) & 4095);
}

/* Rows anywhere in the u64 range, and one row id in two tables: each its
 * own entry, found with its own bytes; the jobs carry them whole, grouped
 * by table. The rows are past the tables' ends, so the jobs are freed
 * unwritten (the queue knows nothing of a table's size). */
static void test_wide_rows(void **state)
{
	static const uint64_t wide[] = {
	    0, 1, UINT64_MAX, UINT64_MAX - 1, 1ULL << 40, 42, (1ULL << 40) - 1};
	enum { NW = sizeof(wide) / sizeof(wide[0]) };
	struct fx *f = *state;
	et_store *s = fx_open(f);
	int a = mk_table(s, T_F32), b = mk_table(s, T_BF16);
	struct pl_job *jobs, *j;
	uint64_t r = 0, r2 = 0;

	/* b's rows first: the jobs come in table order all the same */
	for (size_t i = 0; i < NW; i++)
		queue(s, b, wide[i], 7);
	for (size_t i = 0; i < NW; i++) {
		assert_int_equal(wb_find(s, (uint32_t)a, wide[i]), -1);
		queue(s, a, wide[i], 3);
	}
	assert_int_equal(s->wb.n, 2 * NW);
	for (size_t i = 0; i < NW; i++) {
		assert_queued(s, a, wide[i], 3);
		assert_queued(s, b, wide[i], 7);
		assert_true(wb_find(s, (uint32_t)a, wide[i]) !=
			    wb_find(s, (uint32_t)b, wide[i]));
	}
	assert_int_equal(wb_find(s, (uint32_t)a, 2), -1);
	assert_int_equal(wb_find(s, (uint32_t)b, UINT64_MAX - 2), -1);
	assert_int_equal(wb_find(s, (uint32_t)b + 1, UINT64_MAX), -1);
	/* again: replaced, one entry each */
	queue(s, a, UINT64_MAX, 4);
	queue(s, b, 0, 8);
	assert_int_equal(s->wb.n, 2 * NW);
	assert_queued(s, a, UINT64_MAX, 4);
	assert_queued(s, b, 0, 8);
	assert_queued(s, a, 0, 3);
	assert_queued(s, b, UINT64_MAX, 7);
	assert_int_equal(wb_take_jobs(s, &jobs), 0);
	assert_int_equal(s->wb.n, 0);
	j = jobs;
	for (int k = 0; k < 2; k++, j = j->next) {
		int t = k ? b : a;

		assert_non_null(j);
		assert_int_equal(j->table, t);
		assert_int_equal(j->n, NW);
		for (size_t i = 0; i < NW; i++)
			assert_int_equal(j->rows[i], wide[i]);
	}
	assert_null(j);
	while ((j = jobs)) {
		jobs = j->next;
		pl_job_free(j);
	}
	/* Keys whose probes start at one index entry (the index holds 1024
	 * entries here): row r of a and of b, and rows 777 and 777 + k 2^40
	 * of a (one key if rows were cut to 40 bits). */
	while (home(a, r) != home(b, r))
		r++;
	for (uint64_t k = 1; !r2; k++)
		if (home(a, 777 + (k << 40)) == home(a, 777))
			r2 = 777 + (k << 40);
	assert_int_equal(s->wb.idx_cap, 1024);
	queue(s, a, r, 5);
	queue(s, a, 777, 5);
	assert_int_equal(wb_find(s, (uint32_t)b, r), -1);
	assert_int_equal(wb_find(s, (uint32_t)a, r2), -1);
	queue(s, b, r, 6);
	queue(s, a, r2, 6);
	assert_int_equal(s->wb.n, 4);
	assert_queued(s, a, r, 5);
	assert_queued(s, b, r, 6);
	assert_queued(s, a, 777, 5);
	assert_queued(s, a, r2, 6);
	assert_int_equal(wb_take_jobs(s, &jobs), 0);
	while ((j = jobs)) {
		jobs = j->next;
		pl_job_free(j);
	}
}

/* --------------------------------------------------------------- widen */

static void test_widen(void **state)
{
	struct fx *f = *state;
	et_store *s = fx_open(f);
	int a = mk_table(s, T_F32), b = mk_table(s, T_BF16), w;
	enum { N = 300 };
	uint64_t rows[N], wrows[3] = {0, 150, 299};
	uint32_t v[N], wv[3] = {5, 5, 5};

	assert_int_equal(s->wb.stride, 32);
	for (size_t i = 0; i < N; i++) {
		rows[i] = i * 31;
		v[i] = (uint32_t)i;
		queue(s, a, rows[i], v[i]);
		if (i % 10 == 0)
			queue(s, b, i, 1);
	}
	/* no narrower */
	assert_int_equal(wb_widen(s, 16), 0);
	assert_int_equal(wb_widen(s, 32), 0);
	assert_int_equal(s->wb.stride, 32);
	/* a table of 164-byte rows: its slot widens the queue, rows kept
	 * (no operation ran: the caches are not planned again) */
	w = mk_table(s, T_WIDE);
	assert_int_equal(s->wb.stride, 164);
	assert_int_equal(s->wb.n, N + N / 10);
	for (size_t i = 0; i < N; i++) {
		assert_queued(s, a, rows[i], v[i]);
		if (i % 10 == 0)
			assert_queued(s, b, i, 1);
	}
	/* wider still, by hand */
	assert_int_equal(wb_widen(s, 1000), 0);
	assert_int_equal(s->wb.stride, 1000);
	assert_true(s->wb.buf.cap >= s->wb.n * (size_t)1000);
	for (size_t i = 0; i < N; i++)
		assert_queued(s, a, rows[i], v[i]);
	for (size_t i = 0; i < 3; i++)
		queue(s, w, wrows[i], 5);
	assert_queued(s, w, 150, 5);
	assert_int_equal(wb_run(s), 0);
	assert_home(s, a, rows, v, N);
	assert_home(s, w, wrows, wv, 3);
	assert_gather(s, w, wrows, wv, 3);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_setup_teardown(test_queue_replace, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_gather_from_queue, setup,
					    teardown),
	    cmocka_unit_test_setup_teardown(test_index_growth, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_reserve, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_run_failure, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_take_jobs, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_wide_rows, setup, teardown),
	    cmocka_unit_test_setup_teardown(test_widen, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
