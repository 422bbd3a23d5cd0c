/*
 * workers.h - the store's threads: a multi-table call's row kernels, a
 * large placement's parts, an update's side work.
 *
 * workers_run hands items 0..n-1 of one function to the caller's thread
 * and the pool's threads, which take them in turn until none is left, and
 * returns when every item is done. Which thread runs which item changes
 * from run to run; callers make each item's work depend on the item alone
 * (the thread index only picks scratch memory), so results do not depend
 * on the number of threads. One caller at a time (the store's thread).
 */
#ifndef ET_WORKERS_H
#define ET_WORKERS_H

#include <stddef.h>

struct workers;

/* fn(arg, item, thread): thread is 0 for the caller, 1..n-1 for the pool. */
typedef void (*work_fn)(void *arg, size_t item, unsigned thread);

/* A pool of n - 1 threads (n: 2..WORKERS_MAX, counting the caller's). */
#define WORKERS_MAX 64
int workers_start(unsigned n, struct workers **out);
/* Stops and frees the pool; NULL is harmless. */
void workers_stop(struct workers *w);

/* Runs items [0, n) of fn over the caller and the pool (the caller alone
 * if w is NULL). */
void workers_run(struct workers *w, size_t n, work_fn fn, void *arg);

/* workers_run in two steps, so that the caller works on something else
 * meanwhile: workers_begin hands the items to the pool and returns at
 * once (with w NULL, it runs them first); workers_wait has the caller
 * take the items no thread has taken yet and returns when all are done.
 * A run begun is waited for before the next begins (workers_run and
 * workers_begin do it), and before the caller uses what it writes. */
void workers_begin(struct workers *w, size_t n, work_fn fn, void *arg);
void workers_wait(struct workers *w);

#endif
