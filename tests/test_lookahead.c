/*
 * test_lookahead.c - the window of upcoming batches (src/cache/lookahead.h) as a
 * unit, against a reference computed here from the batches themselves
 * (the first batch of the window naming a (table, row), batch 0 left out
 * for a table whose operation has begun):
 *
 *   - la_next gives the first batch that uses a key, whatever the order
 *     keys were added in, and LA_NONE for keys no batch uses (the same row
 *     of another table included) and for an empty or cleared window;
 *     rows are any u64 (0 of table 0, 2^40, UINT64_MAX); keys whose probes
 *     start at one entry (one row in two tables, rows 2^40 apart) are
 *     told apart;
 *   - la_consume(t) drops batch 0 for table t's keys alone (tables past
 *     64 included, tables beyond la_tables ignored), and does nothing
 *     before there is a window;
 *   - the map grows past its initial 1024 entries (thousands of keys, a
 *     power of two at least twice the keys), and keeps working through
 *     many slides that leave dead entries behind;
 *   - a window set twice with the same batches (or with its batches all
 *     alike, which slides) answers as one set once, consumption forgotten;
 *     a slid window answers as the same window made anew;
 *   - la_clear forgets the window; la_set with no batches is no window.
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

#include "embtier.h"
#include "hash.h"
#include "key.h"
#include "lookahead.h"
#include "util.h"

/* ------------------------------------------------------------ batches */

#define MAXT 4 /* tables a batch names at most here */

/* A sequence of batches, each naming up to MAXT tables. */
struct seq {
	size_t nb;
	struct et_batch *b;
	struct et_batch_ids *t; /* nb x MAXT */
	uint64_t **ids;		/* nb x MAXT arrays */
};

/* nb batches over the given tables, each with n random ids (rows below
 * rows, so that batches share some) per table. */
static void seq_make(struct seq *s, size_t nb, const int *tables, size_t nt,
		     size_t n, uint64_t rows, struct tu_rng *rng)
{
	assert_true(nt <= MAXT);
	s->nb = nb;
	s->b = tu_calloc(nb, sizeof(*s->b));
	s->t = tu_calloc(nb * MAXT, sizeof(*s->t));
	s->ids = tu_calloc(nb * MAXT, sizeof(*s->ids));
	for (size_t j = 0; j < nb; j++) {
		for (size_t k = 0; k < nt; k++) {
			uint64_t *ids = tu_calloc(n, sizeof(*ids));

			for (size_t i = 0; i < n; i++)
				ids[i] = tu_rng_below(rng, rows);
			s->ids[j * MAXT + k] = ids;
			s->t[j * MAXT + k] = (struct et_batch_ids){
			    .table = tables[k], .ids = ids, .n = n};
		}
		s->b[j] =
		    (struct et_batch){.tables = &s->t[j * MAXT], .ntables = nt};
	}
}

static void seq_free(struct seq *s)
{
	for (size_t i = 0; i < s->nb * MAXT; i++)
		free(s->ids[i]);
	free(s->ids);
	free(s->t);
	free(s->b);
}

/* The reference: the first of batches b[0..n) naming (table, row), batch
 * 0 skipped for a table in consumed (a bit per table below 64 * 4). */
static uint32_t ref_next(const struct et_batch *b, size_t n, int table,
			 uint64_t row, const uint64_t *consumed)
{
	for (size_t j = 0; j < n; j++) {
		if (j == 0 && consumed &&
		    (consumed[table / 64] >> (table % 64) & 1))
			continue;
		for (size_t k = 0; k < b[j].ntables; k++) {
			const struct et_batch_ids *t = &b[j].tables[k];

			if (t->table != table)
				continue;
			for (size_t i = 0; i < t->n; i++)
				if (t->ids[i] == row)
					return (uint32_t)j;
		}
	}
	return LA_NONE;
}

/* Every key of b[0..n) and of other[0..no), and rows beyond them, of the
 * given tables and of one more: la answers as the reference for b[0..n). */
static void check_window(const struct lookahead *la, const struct et_batch *b,
			 size_t n, const struct et_batch *other, size_t no,
			 const uint64_t *consumed, uint64_t rows)
{
	const struct et_batch *sets[2] = {b, other};
	size_t counts[2] = {n, no};

	for (int w = 0; w < 2; w++)
		for (size_t j = 0; j < counts[w]; j++)
			for (size_t k = 0; k < sets[w][j].ntables; k++) {
				const struct et_batch_ids *t =
				    &sets[w][j].tables[k];

				for (size_t i = 0; i < t->n; i++) {
					uint32_t tb = (uint32_t)t->table;
					uint64_t row = t->ids[i];
					uint32_t want =
					    ref_next(b, n, t->table, t->ids[i],
						     consumed);

					if (la_next(la, tb, row) != want)
						fail_msg("table %d row %llu: "
							 "next %u, expected %u",
							 t->table,
							 (unsigned long long)
							     t->ids[i],
							 la_next(la, tb, row),
							 want);
				}
			}
	/* rows no batch names */
	for (uint64_t r = rows; r < rows + 50; r++)
		assert_int_equal(la_next(la, 0, r), LA_NONE);
}

/* ------------------------------------------------------------- la_next */

static void test_next_first_batch(void **state)
{
	struct lookahead la = {0};

	(void)state;
	/* no window yet */
	assert_false(la_active(&la));
	assert_int_equal(la_next(&la, 0, 1), LA_NONE);
	assert_int_equal(la_tables(&la, 3), 0);
	/* added out of batch order: the first batch wins */
	assert_int_equal(la_add(&la, 1, 10, 5), 0);
	assert_int_equal(la_add(&la, 1, 10, 2), 0);
	assert_int_equal(la_add(&la, 1, 10, 9), 0);
	assert_int_equal(la_add(&la, 1, 11, LA_MAX_BATCH - 1), 0);
	assert_int_equal(la_add(&la, 2, 0, 0), 0);
	/* the same key twice in one batch: one key */
	assert_int_equal(la_add(&la, 2, 0, 0), 0);
	assert_true(la_active(&la));
	assert_int_equal(la.n, 3);
	assert_int_equal(la.depth, LA_MAX_BATCH);
	assert_int_equal(la_next(&la, 1, 10), 2);
	assert_int_equal(la_next(&la, 1, 11), LA_MAX_BATCH - 1);
	assert_int_equal(la_next(&la, 2, 0), 0);
	/* the same rows of other tables, and other rows, are not used */
	assert_int_equal(la_next(&la, 0, 10), LA_NONE);
	assert_int_equal(la_next(&la, 2, 10), LA_NONE);
	assert_int_equal(la_next(&la, 1, 0), LA_NONE);
	assert_int_equal(la_next(&la, 1, 12), LA_NONE);
	/* rows are any u64: 0 of table 0 is a key like any other (an empty
	 * entry is not it), and so are 2^40 and UINT64_MAX */
	assert_int_equal(la_next(&la, 0, 0), LA_NONE);
	assert_int_equal(la_add(&la, 2, (1ULL << 40) - 1, 7), 0);
	assert_int_equal(la_next(&la, 2, (1ULL << 40) - 1), 7);
	assert_int_equal(la_next(&la, 1, (1ULL << 40) - 1), LA_NONE);
	assert_int_equal(la_add(&la, 2, 1ULL << 40, 6), 0);
	assert_int_equal(la_add(&la, 2, UINT64_MAX, 4), 0);
	assert_int_equal(la_add(&la, 1, UINT64_MAX, 8), 0);
	assert_int_equal(la_add(&la, 0, 0, 9), 0);
	assert_int_equal(la.n, 8);
	assert_int_equal(la_next(&la, 2, 1ULL << 40), 6);
	assert_int_equal(la_next(&la, 2, UINT64_MAX), 4);
	assert_int_equal(la_next(&la, 1, UINT64_MAX), 8);
	assert_int_equal(la_next(&la, 0, 0), 9);
	assert_int_equal(la_next(&la, 0, UINT64_MAX), LA_NONE);
	assert_int_equal(la_next(&la, 2, UINT64_MAX - 1), LA_NONE);
	assert_int_equal(la_next(&la, 1, 0), LA_NONE);
	la_free(&la);
	assert_null(la.e);
	assert_int_equal(la.cap, 0);
}

/* Random windows through la_set, against the reference. */
static void test_set_random(void **state)
{
	const int tables[] = {0, 1, 3};
	struct tu_rng rng;

	(void)state;
	tu_rng_seed(&rng, 11);
	for (int k = 0; k < 20; k++) {
		struct lookahead la = {0};
		struct seq s;
		size_t nb = 1 + tu_rng_below(&rng, LA_MAX_BATCH);

		seq_make(&s, nb, tables, 3, 1 + tu_rng_below(&rng, 40), 300,
			 &rng);
		assert_int_equal(la_set(&la, s.b, nb, 4), 0);
		assert_int_equal(la.depth, nb);
		check_window(&la, s.b, nb, NULL, 0, NULL, 300);
		la_free(&la);
		seq_free(&s);
	}
}

/* ---------------------------------------------------------- la_consume */

static void test_consume(void **state)
{
	/* tables 0, 6 and 70: 70 shares bit 6 of its word with table 6 */
	const int tables[] = {0, 6, 70};
	uint64_t consumed[4] = {0};
	struct lookahead la = {0};
	struct tu_rng rng;
	struct seq s;

	(void)state;
	tu_rng_seed(&rng, 12);
	seq_make(&s, 5, tables, 3, 30, 100, &rng);
	/* before any window: nothing to consume, no effect later */
	la_consume(&la, 0);
	assert_int_equal(la_set(&la, s.b, 5, 71), 0);
	check_window(&la, s.b, 5, NULL, 0, consumed, 100);
	/* table 70's operation begins: its batch 0 is gone, 6's is not */
	la_consume(&la, 70);
	consumed[1] |= 1ULL << 6;
	check_window(&la, s.b, 5, NULL, 0, consumed, 100);
	la_consume(&la, 70); /* twice is once */
	check_window(&la, s.b, 5, NULL, 0, consumed, 100);
	la_consume(&la, 0);
	consumed[0] |= 1ULL << 0;
	check_window(&la, s.b, 5, NULL, 0, consumed, 100);
	/* a table past la_tables' room is ignored, not written */
	la_consume(&la, 4000);
	check_window(&la, s.b, 5, NULL, 0, consumed, 100);
	la_consume(&la, 6);
	consumed[0] |= 1ULL << 6;
	check_window(&la, s.b, 5, NULL, 0, consumed, 100);
	la_free(&la);
	seq_free(&s);
}

/* Where the map's probes for (t, row) start, in a map of up to 4096
 * entries: keys agreeing here meet in every probe. */
static uint32_t home(uint32_t t, uint64_t row)
{
	return (uint32_t)(hash_mix(cache_hkey(t, row)) & 4095);
}

/* Keys that share their probes' start: row r of tables 0 and 1, and rows
 * r and r + k 2^40 of table 0 (one key if rows were cut to 40 bits). */
static void test_next_colliding(void **state)
{
	struct lookahead la = {0};
	uint64_t r = 0, r2 = 0;

	(void)state;
	while (home(0, r) != home(1, r))
		r++;
	for (uint64_t k = 1; !r2; k++)
		if (home(0, 777 + (k << 40)) == home(0, 777))
			r2 = 777 + (k << 40);
	assert_int_equal(la_tables(&la, 2), 0);
	assert_int_equal(la_add(&la, 0, r, 3), 0);
	assert_int_equal(la_add(&la, 0, 777, 2), 0);
	assert_int_equal(la_next(&la, 1, r), LA_NONE);
	assert_int_equal(la_next(&la, 0, r2), LA_NONE);
	assert_int_equal(la_add(&la, 1, r, 4), 0);
	assert_int_equal(la_add(&la, 0, r2, 5), 0);
	assert_int_equal(la.n, 4);
	assert_int_equal(la_next(&la, 0, r), 3);
	assert_int_equal(la_next(&la, 1, r), 4);
	assert_int_equal(la_next(&la, 0, 777), 2);
	assert_int_equal(la_next(&la, 0, r2), 5);
	la_free(&la);
}

/* A key used only in batch 0, and one in batches 0 and 3: once the table
 * is consumed, LA_NONE and 3. */
static void test_consume_batch0(void **state)
{
	struct lookahead la = {0};

	(void)state;
	assert_int_equal(la_tables(&la, 2), 0);
	assert_int_equal(la_add(&la, 1, 5, 0), 0);
	assert_int_equal(la_add(&la, 1, 6, 0), 0);
	assert_int_equal(la_add(&la, 1, 6, 3), 0);
	assert_int_equal(la_add(&la, 0, 5, 0), 0);
	la_consume(&la, 1);
	assert_int_equal(la_next(&la, 1, 5), LA_NONE);
	assert_int_equal(la_next(&la, 1, 6), 3);
	assert_int_equal(la_next(&la, 0, 5), 0);
	/* the window is still active: its keys are still there */
	assert_true(la_active(&la));
	la_free(&la);
}

/* -------------------------------------------------------------- growth */

static void test_growth(void **state)
{
	struct lookahead la = {0};
	const size_t nkeys = 5000;

	(void)state;
	assert_int_equal(la_tables(&la, 2), 0);
	for (size_t i = 0; i < nkeys; i++) {
		assert_int_equal(la_add(&la, (uint32_t)(i & 1), i * 7919,
					(uint32_t)(i % 13) + 1),
				 0);
		if (i % 3 == 0) /* and an earlier batch for some */
			assert_int_equal(la_add(&la, (uint32_t)(i & 1),
						i * 7919, (uint32_t)(i % 5)),
					 0);
		if (i == 511) /* the initial map, half full */
			assert_int_equal(la.cap, 1024);
	}
	assert_int_equal(la.n, nkeys);
	assert_true(la.cap >= 2 * nkeys);
	assert_int_equal(la.cap & (la.cap - 1), 0);
	for (size_t i = 0; i < nkeys; i++) {
		uint32_t want = (uint32_t)(i % 13) + 1;

		if (i % 3 == 0 && i % 5 < want)
			want = (uint32_t)(i % 5);
		assert_int_equal(la_next(&la, (uint32_t)(i & 1), i * 7919),
				 want);
		/* the other table's key of that row is not there */
		assert_int_equal(la_next(&la, (uint32_t)(~i & 1), i * 7919),
				 LA_NONE);
	}
	la_free(&la);
}

/* A window sliding over fresh ids every step leaves dead entries; the map
 * is rebuilt as it fills and every answer stays the reference's. */
static void test_growth_sliding(void **state)
{
	const int tables[] = {0, 2};
	struct lookahead la = {0};
	struct tu_rng rng;
	struct seq s;
	const size_t steps = 60, depth = 4;

	(void)state;
	tu_rng_seed(&rng, 13);
	/* 400 ids a batch over a million rows: nearly all fresh */
	seq_make(&s, steps + depth, tables, 2, 200, 1 << 20, &rng);
	for (size_t j = 0; j < steps; j++) {
		size_t cap = la.cap;

		assert_int_equal(la_set(&la, s.b + j, depth, 3), 0);
		assert_true(la.cap >= 2 * la.n);
		assert_true(la.cap >= cap); /* never shrinks */
		if (j % 10 == 0 || j + 1 == steps)
			check_window(&la, s.b + j, depth,
				     j ? s.b + j - 1 : NULL, j ? 1 : 0, NULL,
				     1 << 20);
	}
	assert_true(la.cap > 1024);
	la_free(&la);
	seq_free(&s);
}

/* ------------------------------------------------------------- windows */

/* A window set twice with the same batches: the answers of one set, the
 * same number of keys, and consumption forgotten. */
static void test_set_twice(void **state)
{
	const int tables[] = {0, 1};
	uint64_t consumed[4] = {0};
	struct lookahead la = {0}, once = {0};
	struct tu_rng rng;
	struct seq s;

	(void)state;
	tu_rng_seed(&rng, 14);
	seq_make(&s, 6, tables, 2, 50, 200, &rng);
	assert_int_equal(la_set(&once, s.b, 6, 2), 0);
	assert_int_equal(la_set(&la, s.b, 6, 2), 0);
	la_consume(&la, 1);
	consumed[0] = 2;
	check_window(&la, s.b, 6, NULL, 0, consumed, 200);
	assert_int_equal(la_set(&la, s.b, 6, 2), 0);
	assert_int_equal(la.n, once.n);
	assert_int_equal(la.depth, 6);
	check_window(&la, s.b, 6, NULL, 0, NULL, 200);
	/* and a third time, for good measure */
	assert_int_equal(la_set(&la, s.b, 6, 2), 0);
	assert_int_equal(la.n, once.n);
	check_window(&la, s.b, 6, NULL, 0, NULL, 200);
	la_free(&la);
	la_free(&once);
	seq_free(&s);
}

/* Batches all alike: setting the window again slides it (each batch is
 * the last window's next), and the answers are still those of one set. */
static void test_set_twice_alike(void **state)
{
	const uint64_t a[] = {3, 9, 27, 9};
	const uint64_t c[] = {4};
	struct et_batch_ids t[2] = {{.table = 0, .ids = a, .n = 4},
				    {.table = 1, .ids = c, .n = 1}};
	struct et_batch b[3] = {{t, 2}, {t, 2}, {t, 2}};
	struct lookahead la = {0};

	(void)state;
	assert_int_equal(la_set(&la, b, 3, 2), 0);
	check_window(&la, b, 3, NULL, 0, NULL, 100);
	la_consume(&la, 0);
	assert_int_equal(la_next(&la, 0, 9), 1);
	assert_int_equal(la_set(&la, b, 3, 2), 0);
	check_window(&la, b, 3, NULL, 0, NULL, 100);
	assert_int_equal(la_next(&la, 0, 9), 0);
	assert_int_equal(la_next(&la, 1, 4), 0);
	/* shorter: the same batches, two of them */
	assert_int_equal(la_set(&la, b, 2, 2), 0);
	assert_int_equal(la.depth, 2);
	check_window(&la, b, 2, NULL, 0, NULL, 100);
	la_free(&la);
}

/* Slid windows (the last less its first, plus a new one; or with fewer
 * or more batches) answer as the same windows made anew. */
static void test_slide(void **state)
{
	const int tables[] = {0, 1, 2};
	struct lookahead la = {0};
	struct tu_rng rng;
	struct seq s;
	/* (first batch, batches) of each successive window */
	const size_t win[][2] = {{0, 5}, {1, 5}, {2, 5}, {3, 3}, {4, 6},
				 {5, 6}, {7, 2}, {7, 2}, {8, 1}, {9, 8}};

	(void)state;
	tu_rng_seed(&rng, 15);
	seq_make(&s, 20, tables, 3, 25, 120, &rng);
	for (size_t w = 0; w < sizeof(win) / sizeof(*win); w++) {
		struct lookahead fresh = {0};
		const struct et_batch *b = s.b + win[w][0];
		size_t n = win[w][1];

		assert_int_equal(la_set(&la, b, n, 3), 0);
		assert_int_equal(la_set(&fresh, b, n, 3), 0);
		assert_int_equal(la.depth, n);
		/* the keys of the batches before it must be gone */
		check_window(&la, b, n, s.b, win[w][0], NULL, 120);
		check_window(&fresh, b, n, s.b, win[w][0], NULL, 120);
		if (w % 2) { /* consumption does not leak into the next */
			la_consume(&la, 1);
			la_consume(&la, 2);
		}
		la_free(&fresh);
	}
	la_free(&la);
	seq_free(&s);
}

/* la_clear forgets the window: every answer LA_NONE, no window; the
 * memory is kept, and a window made after it answers as a fresh one. */
static void test_clear(void **state)
{
	const int tables[] = {0, 1};
	struct lookahead la = {0};
	struct tu_rng rng;
	struct seq s;
	size_t cap;

	(void)state;
	tu_rng_seed(&rng, 16);
	seq_make(&s, 4, tables, 2, 40, 100, &rng);
	assert_int_equal(la_set(&la, s.b, 3, 2), 0);
	la_consume(&la, 0);
	cap = la.cap;
	la_clear(&la);
	assert_false(la_active(&la));
	assert_int_equal(la.depth, 0);
	assert_int_equal(la.cap, cap);
	for (size_t j = 0; j < 4; j++)
		for (size_t k = 0; k < 2; k++)
			for (size_t i = 0; i < s.t[j * MAXT + k].n; i++)
				assert_int_equal(
				    la_next(&la, (uint32_t)tables[k],
					    s.ids[j * MAXT + k][i]),
				    LA_NONE);
	/* a new window over other batches than the cleared one's */
	assert_int_equal(la_set(&la, s.b + 3, 1, 2), 0);
	check_window(&la, s.b + 3, 1, s.b, 3, NULL, 100);
	/* no batches: no window */
	assert_int_equal(la_set(&la, s.b, 0, 2), 0);
	assert_false(la_active(&la));
	check_window(&la, s.b, 0, s.b, 4, NULL, 100);
	/* and the window after that, anew */
	assert_int_equal(la_set(&la, s.b, 4, 2), 0);
	check_window(&la, s.b, 4, NULL, 0, NULL, 100);
	la_free(&la);
	seq_free(&s);
}

/* A window cleared and then set to the cleared one's batches but the
 * first (what a slide would be) is made anew: la_clear forgets. */
static void test_clear_then_slide(void **state)
{
	const int tables[] = {0, 1};
	struct lookahead la = {0};
	struct tu_rng rng;
	struct seq s;

	(void)state;
	tu_rng_seed(&rng, 17);
	seq_make(&s, 4, tables, 2, 40, 100, &rng);
	assert_int_equal(la_set(&la, s.b, 3, 2), 0);
	la_clear(&la);
	assert_int_equal(la_set(&la, s.b + 1, 2, 2), 0);
	check_window(&la, s.b + 1, 2, NULL, 0, NULL, 100);
	la_free(&la);
	seq_free(&s);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_next_first_batch),
	    cmocka_unit_test(test_next_colliding),
	    cmocka_unit_test(test_set_random),
	    cmocka_unit_test(test_consume),
	    cmocka_unit_test(test_consume_batch0),
	    cmocka_unit_test(test_growth),
	    cmocka_unit_test(test_growth_sliding),
	    cmocka_unit_test(test_set_twice),
	    cmocka_unit_test(test_set_twice_alike),
	    cmocka_unit_test(test_slide),
	    cmocka_unit_test(test_clear),
	    cmocka_unit_test(test_clear_then_slide),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
