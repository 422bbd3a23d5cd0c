/*
 * test_workers.c - the store's thread pool (src/store/workers.h):
 *
 *   - workers_start refuses fewer than 2 or more than WORKERS_MAX threads;
 *     workers_stop(NULL) is harmless;
 *   - for 1 (no pool) to 8 threads, every item of a run, from 0 to 10000
 *     items, runs exactly once, with a thread index below the count and
 *     the caller's 0 when there is no pool;
 *   - many runs back to back on one pool (a late thread must take nothing
 *     of the next run), each complete when workers_run returns;
 *   - a computation whose items depend on the item alone gives the same
 *     bytes whatever the thread count;
 *   - a run begun (workers_begin) is complete, each item once, when
 *     workers_wait returns, the caller having worked meanwhile; a second
 *     begin, a workers_run or a workers_stop waits for it first; with no
 *     pool, workers_begin runs the items at once.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "workers.h"
#include "util.h"

struct tally {
	_Atomic uint32_t *runs;	       /* per item */
	_Atomic uint32_t threads_seen; /* bit per thread index */
	unsigned nthreads;
	_Atomic uint32_t bad_thread;
};

static void count_item(void *arg, size_t item, unsigned thread)
{
	struct tally *t = arg;

	atomic_fetch_add(&t->runs[item], 1);
	if (thread >= t->nthreads)
		atomic_fetch_add(&t->bad_thread, 1);
	else
		atomic_fetch_or(&t->threads_seen, 1u << thread);
}

static struct workers *pool(unsigned n)
{
	struct workers *w = NULL;

	if (n > 1)
		assert_int_equal(workers_start(n, &w), 0);
	return w;
}

static void test_start_limits(void **state)
{
	struct workers *w = (struct workers *)1;

	(void)state;
	assert_int_equal(workers_start(0, &w), -EINVAL);
	assert_null(w);
	assert_int_equal(workers_start(1, &w), -EINVAL);
	assert_int_equal(workers_start(WORKERS_MAX + 1, &w), -EINVAL);
	assert_null(w);
	assert_int_equal(workers_start(WORKERS_MAX, &w), 0);
	assert_non_null(w);
	workers_stop(w);
	workers_stop(NULL);
}

static void test_each_item_once(void **state)
{
	static const size_t sizes[] = {0, 1, 2, 3, 7, 64, 1000, 10000};
	enum { MAXN = 10000 };
	struct tally t;

	(void)state;
	t.runs = tu_calloc(MAXN, sizeof(*t.runs));
	for (unsigned n = 1; n <= 8; n++) {
		struct workers *w = pool(n);

		for (size_t s = 0; s < sizeof(sizes) / sizeof(*sizes); s++) {
			for (size_t i = 0; i < MAXN; i++)
				atomic_store(&t.runs[i], 0);
			atomic_store(&t.threads_seen, 0);
			atomic_store(&t.bad_thread, 0);
			t.nthreads = n;
			workers_run(w, sizes[s], count_item, &t);
			for (size_t i = 0; i < MAXN; i++)
				assert_int_equal(atomic_load(&t.runs[i]),
						 i < sizes[s] ? 1 : 0);
			assert_int_equal(atomic_load(&t.bad_thread), 0);
			if (n == 1 && sizes[s])
				assert_int_equal(atomic_load(&t.threads_seen),
						 1);
		}
		workers_stop(w);
	}
	free((void *)t.runs);
}

/* Runs back to back: item i of run r adds r * 100000 + i to a sum. */
struct seq {
	_Atomic uint64_t sum;
	_Atomic uint64_t calls;
	uint64_t r;
};

static void seq_item(void *arg, size_t item, unsigned thread)
{
	struct seq *q = arg;

	(void)thread;
	atomic_fetch_add(&q->sum, q->r * 100000 + item);
	atomic_fetch_add(&q->calls, 1);
}

static void test_back_to_back(void **state)
{
	(void)state;
	for (unsigned n = 2; n <= 8; n += 3) {
		struct workers *w = pool(n);
		struct seq q;

		for (uint64_t r = 0; r < 2000; r++) {
			size_t items = 2 + r % 37;

			atomic_store(&q.sum, 0);
			atomic_store(&q.calls, 0);
			q.r = r;
			workers_run(w, items, seq_item, &q);
			assert_int_equal(atomic_load(&q.calls), items);
			assert_int_equal(atomic_load(&q.sum),
					 items * r * 100000 +
					     items * (items - 1) / 2);
		}
		workers_stop(w);
	}
}

/* Item i writes a value depending on i alone into out[i], using the
 * thread's scratch the way the store's kernels do. */
struct calc {
	uint64_t *out;
	uint64_t scratch[8][16];
};

static void calc_item(void *arg, size_t item, unsigned thread)
{
	struct calc *c = arg;
	uint64_t *s = c->scratch[thread];
	struct tu_rng g;

	tu_rng_seed(&g, item + 1);
	for (int i = 0; i < 16; i++)
		s[i] = tu_rng_next(&g);
	for (int k = 0; k < 100; k++)
		for (int i = 0; i < 16; i++)
			s[i] = s[i] * 6364136223846793005ULL + s[(i + 1) % 16];
	c->out[item] = s[0] ^ s[15];
}

static void test_same_result_any_threads(void **state)
{
	enum { N = 5000 };
	uint64_t *first = tu_calloc(N, sizeof(*first));
	struct calc *c = tu_calloc(1, sizeof(*c));

	(void)state;
	c->out = tu_calloc(N, sizeof(*c->out));
	for (unsigned n = 1; n <= 8; n++) {
		struct workers *w = pool(n);

		memset(c->out, 0, N * sizeof(*c->out));
		workers_run(w, N, calc_item, c);
		workers_stop(w);
		if (n == 1) {
			memcpy(first, c->out, N * sizeof(*first));
			for (size_t i = 1; i < N; i++)
				assert_true(first[i] != first[i - 1]);
		} else {
			assert_memory_equal(c->out, first, N * sizeof(*first));
		}
	}
	free(c->out);
	free(c);
	free(first);
}

/* A run that counts into t and, at each item, checks that the run begun
 * before it (other_runs, other_n items) had finished: early counts the
 * items that found it not yet done. */
struct begun {
	struct tally t;
	_Atomic uint32_t *other_runs; /* the run begun before, or NULL */
	size_t other_n;
	_Atomic uint32_t early; /* items that ran before the other was done */
};

static void begun_item(void *arg, size_t item, unsigned thread)
{
	struct begun *b = arg;

	for (size_t i = 0; b->other_runs && i < b->other_n; i++)
		if (atomic_load(&b->other_runs[i]) != 1) {
			atomic_fetch_add(&b->early, 1);
			break;
		}
	count_item(&b->t, item, thread);
}

static void test_begin_wait(void **state)
{
	enum { N = 3000 };
	struct begun a, b;

	(void)state;
	for (unsigned n = 1; n <= 4; n++) {
		struct workers *w = pool(n);

		memset(&a, 0, sizeof(a));
		memset(&b, 0, sizeof(b));
		a.t.runs = tu_calloc(N, sizeof(*a.t.runs));
		b.t.runs = tu_calloc(N, sizeof(*b.t.runs));
		a.t.nthreads = b.t.nthreads = n;
		b.other_runs = a.t.runs;
		b.other_n = N;
		/* one item alone goes to the pool; the caller works on */
		workers_begin(w, 1, count_item, &a.t);
		workers_wait(w);
		assert_int_equal(atomic_load(&a.t.runs[0]), 1);
		atomic_store(&a.t.runs[0], 0);
		/* a begun run, then another begun: the second's items all
		 * see the first one finished */
		workers_begin(w, N, count_item, &a.t);
		workers_begin(w, N, begun_item, &b);
		workers_wait(w);
		workers_wait(w); /* nothing pending: harmless */
		for (size_t i = 0; i < N; i++) {
			assert_int_equal(atomic_load(&a.t.runs[i]), 1);
			assert_int_equal(atomic_load(&b.t.runs[i]), 1);
		}
		assert_int_equal(atomic_load(&b.early), 0);
		assert_int_equal(atomic_load(&a.t.bad_thread), 0);
		assert_int_equal(atomic_load(&b.t.bad_thread), 0);
		/* a begun run, then workers_run and workers_stop */
		for (size_t i = 0; i < N; i++) {
			atomic_store(&a.t.runs[i], 0);
			atomic_store(&b.t.runs[i], 0);
		}
		workers_begin(w, N, count_item, &a.t);
		workers_run(w, N, begun_item, &b);
		for (size_t i = 0; i < N; i++)
			assert_int_equal(atomic_load(&b.t.runs[i]), 1);
		assert_int_equal(atomic_load(&b.early), 0);
		for (size_t i = 0; i < N; i++)
			atomic_store(&a.t.runs[i], 0);
		workers_begin(w, N, count_item, &a.t);
		workers_stop(w);
		for (size_t i = 0; i < N; i++)
			assert_int_equal(atomic_load(&a.t.runs[i]), 1);
		free((void *)a.t.runs);
		free((void *)b.t.runs);
	}
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_start_limits),
	    cmocka_unit_test(test_each_item_once),
	    cmocka_unit_test(test_back_to_back),
	    cmocka_unit_test(test_same_result_any_threads),
	    cmocka_unit_test(test_begin_wait),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
