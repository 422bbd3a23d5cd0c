/*
 * workers.c - a small pool of threads for data-parallel loops (see
 * workers.h).
 *
 * A run is published under the lock with a new generation number. Items
 * are handed out by one atomic ticket, generation in its high half and
 * the next item in its low half, so a thread that wakes late, after its
 * run is over, takes nothing from the next one by mistake. The caller
 * takes items too and then waits only for the items taken by others that
 * are still running, never for a thread that has not woken up yet: on a
 * busy machine a sleeping thread may not run for a whole time slice.
 * Between runs the threads sleep on a condition variable. A run begun
 * (workers_begin) goes on in the pool while the caller does something
 * else; workers_wait has the caller take what is left and wait.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "mem_host.h"
#include "workers.h"

struct run {
	uint32_t gen;
	work_fn fn;
	void *arg;
	size_t items;
};

struct workers {
	pthread_mutex_t lock;
	pthread_cond_t wake; /* a new run, or stop */
	pthread_cond_t done; /* the run's last item finished */
	struct run run;	     /* the current run, under the lock */
	bool stop;
	bool pending; /* a run begun and not yet waited for (the caller's) */
	_Atomic uint64_t ticket; /* gen << 32 | next item */
	atomic_size_t finished;	 /* items of the run finished */
	pthread_t tid[WORKERS_MAX];
	unsigned started;
};

/* Takes and runs items of run r while its ticket lasts. */
static void take(struct workers *w, const struct run *r, unsigned thread)
{
	uint64_t t = atomic_load(&w->ticket);

	for (;;) {
		if ((uint32_t)(t >> 32) != r->gen ||
		    (t & UINT32_MAX) >= r->items)
			return;
		if (!atomic_compare_exchange_weak(&w->ticket, &t, t + 1))
			continue;
		r->fn(r->arg, (size_t)(t & UINT32_MAX), thread);
		if (atomic_fetch_add(&w->finished, 1) + 1 == r->items) {
			pthread_mutex_lock(&w->lock);
			pthread_cond_signal(&w->done);
			pthread_mutex_unlock(&w->lock);
		}
		t = atomic_load(&w->ticket);
	}
}

struct start {
	struct workers *w;
	unsigned thread;
};

static void *worker(void *p)
{
	struct workers *w = ((struct start *)p)->w;
	unsigned thread = ((struct start *)p)->thread;
	uint32_t seen = 0;
	struct run r;

	mem_free(p, sizeof(struct start), 0);
	pthread_mutex_lock(&w->lock);
	for (;;) {
		while (!w->stop && w->run.gen == seen)
			pthread_cond_wait(&w->wake, &w->lock);
		if (w->stop)
			break;
		r = w->run;
		seen = r.gen;
		pthread_mutex_unlock(&w->lock);
		take(w, &r, thread);
		pthread_mutex_lock(&w->lock);
	}
	pthread_mutex_unlock(&w->lock);
	return NULL;
}

void workers_stop(struct workers *w)
{
	if (!w)
		return;
	workers_wait(w);
	pthread_mutex_lock(&w->lock);
	w->stop = true;
	pthread_cond_broadcast(&w->wake);
	pthread_mutex_unlock(&w->lock);
	for (unsigned i = 0; i < w->started; i++)
		pthread_join(w->tid[i], NULL);
	pthread_cond_destroy(&w->done);
	pthread_cond_destroy(&w->wake);
	pthread_mutex_destroy(&w->lock);
	mem_free(w, sizeof(*w), 0);
}

int workers_start(unsigned n, struct workers **out)
{
	struct workers *w;

	*out = NULL;
	if (n < 2 || n > WORKERS_MAX)
		return -EINVAL;
	w = mem_alloc(sizeof(*w), 0);
	if (!w)
		return -ENOMEM;
	pthread_mutex_init(&w->lock, NULL);
	pthread_cond_init(&w->wake, NULL);
	pthread_cond_init(&w->done, NULL);
	for (unsigned i = 1; i < n; i++) {
		struct start *st = mem_alloc(sizeof(*st), 0);
		int ret;

		if (!st) {
			workers_stop(w);
			return -ENOMEM;
		}
		st->w = w;
		st->thread = i;
		ret = pthread_create(&w->tid[w->started], NULL, worker, st);
		if (ret) {
			mem_free(st, sizeof(*st), 0);
			workers_stop(w);
			return -ret;
		}
		w->started++;
	}
	*out = w;
	return 0;
}

void workers_begin(struct workers *w, size_t n, work_fn fn, void *arg)
{
	struct run r;

	workers_wait(w);
	if (!w || n < 1 || n > UINT32_MAX) {
		for (size_t i = 0; i < n; i++)
			fn(arg, i, 0);
		return;
	}
	pthread_mutex_lock(&w->lock);
	r = (struct run){w->run.gen + 1 ? w->run.gen + 1 : 1, fn, arg, n};
	w->run = r;
	w->pending = true;
	atomic_store(&w->finished, 0);
	atomic_store(&w->ticket, (uint64_t)r.gen << 32);
	pthread_cond_broadcast(&w->wake);
	pthread_mutex_unlock(&w->lock);
}

void workers_wait(struct workers *w)
{
	struct run r;

	if (!w || !w->pending)
		return;
	r = w->run; /* the caller's own: only it changes the run */
	w->pending = false;
	take(w, &r, 0);
	pthread_mutex_lock(&w->lock);
	while (atomic_load(&w->finished) < r.items)
		pthread_cond_wait(&w->done, &w->lock);
	pthread_mutex_unlock(&w->lock);
}

void workers_run(struct workers *w, size_t n, work_fn fn, void *arg)
{
	if (!w || n < 2 || n > UINT32_MAX) {
		workers_wait(w);
		for (size_t i = 0; i < n; i++)
			fn(arg, i, 0);
		return;
	}
	workers_begin(w, n, fn, arg);
	workers_wait(w);
}
