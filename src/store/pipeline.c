/*
 * pipeline.c - the I/O thread behind et_prefetch.
 *
 * Jobs go through two lists under one mutex: `queue` (submitted, not yet
 * started; the worker pops from its head) and `done` (finished, in order).
 * The worker runs a job with the lock released; the store's thread only
 * reads a job's results after pl_drain() saw it done under the lock, which
 * orders the worker's writes before the store's reads.
 *
 * Why a thread and not reaping completions inside later calls: a batch's
 * reads outnumber the ring's depth, so somebody must keep refilling the
 * ring while the caller computes; on 2 cores the worker costs a fraction of
 * one (it sleeps in io_uring_wait_cqe), and the disk never idles.
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "mem_host.h"
#include "pipeline.h"

struct pipeline {
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t wake; /* work queued, or stop */
	pthread_cond_t idle; /* a job finished */
	struct pl_job *queue, *queue_tail;
	struct pl_job *done, *done_tail;
	bool running;	    /* the worker holds a job: cur */
	struct pl_job *cur; /* with the reads run with it, linked */
	bool stop;
};

struct pl_job *pl_job_new(int kind, et_tfile *tf, uint32_t table, size_t n,
			  size_t row_bytes)
{
	struct pl_job *j = mem_alloc(sizeof(*j), 0);

	if (!j)
		return NULL;
	j->kind = kind;
	j->tf = tf;
	j->table = table;
	j->n = n;
	j->row_bytes = row_bytes;
	j->rows = mem_alloc(n * sizeof(*j->rows), 0);
	j->raw = mem_alloc(n * row_bytes, 0);
	if (!j->rows || !j->raw) {
		pl_job_free(j);
		return NULL;
	}
	return j;
}

void pl_job_free(struct pl_job *j)
{
	if (!j)
		return;
	mem_free(j->rows, j->n * sizeof(*j->rows), 0);
	mem_free(j->raw, j->n * j->row_bytes, 0);
	mem_free(j, sizeof(*j), 0);
}

/* Takes the next job off the queue (under the lock), and with a read the
 * reads queued right behind it, of other files, up to PL_GROUP: they run
 * as one, their reads in flight together. Returns them linked. */
#define PL_GROUP 64

static struct pl_job *take(struct pipeline *pl)
{
	struct pl_job *j = pl->queue, *last = j;
	unsigned n = 1;

	pl->queue = j->next;
	while (j->kind == PL_READ && pl->queue && pl->queue->kind == PL_READ &&
	       n < PL_GROUP) {
		struct pl_job *x;

		for (x = j; x != pl->queue; x = x->next)
			if (x->tf == pl->queue->tf)
				break;
		if (x != pl->queue)
			break; /* a file twice: the next group */
		last = pl->queue;
		pl->queue = last->next;
		n++;
	}
	last->next = NULL;
	if (!pl->queue)
		pl->queue_tail = NULL;
	return j;
}

/* Runs a job, or a group of reads (take) with one tf_read_multi. */
static void run(struct pl_job *j)
{
	struct tf_read rd[PL_GROUP];
	size_t n = 0;

	if (j->kind != PL_READ) {
		j->result = tf_write_rows_raw(j->tf, j->rows, j->n, j->raw);
		return;
	}
	for (struct pl_job *x = j; x; x = x->next)
		rd[n++] = (struct tf_read){
		    .tf = x->tf, .rows = x->rows, .n = x->n, .dst = x->raw};
	tf_read_multi(rd, n);
	n = 0;
	for (struct pl_job *x = j; x; x = x->next)
		x->result = rd[n++].result;
}

static void *worker(void *arg)
{
	struct pipeline *pl = arg;

	pthread_mutex_lock(&pl->lock);
	for (;;) {
		struct pl_job *j;

		while (!pl->queue && !pl->stop)
			pthread_cond_wait(&pl->wake, &pl->lock);
		if (!pl->queue)
			break; /* stop, and nothing left */
		j = take(pl);
		pl->running = true;
		pl->cur = j;
		pthread_mutex_unlock(&pl->lock);

		run(j);

		pthread_mutex_lock(&pl->lock);
		if (pl->done_tail)
			pl->done_tail->next = j;
		else
			pl->done = j;
		for (; j; j = j->next) {
			j->done = true;
			pl->done_tail = j;
		}
		pl->running = false;
		pl->cur = NULL;
		pthread_cond_broadcast(&pl->idle);
	}
	pthread_mutex_unlock(&pl->lock);
	return NULL;
}

int pl_start(struct pipeline **out)
{
	struct pipeline *pl = mem_alloc(sizeof(*pl), 0);
	int ret;

	if (!pl)
		return -ENOMEM;
	pthread_mutex_init(&pl->lock, NULL);
	pthread_cond_init(&pl->wake, NULL);
	pthread_cond_init(&pl->idle, NULL);
	ret = pthread_create(&pl->thread, NULL, worker, pl);
	if (ret) {
		pthread_cond_destroy(&pl->wake);
		pthread_cond_destroy(&pl->idle);
		pthread_mutex_destroy(&pl->lock);
		mem_free(pl, sizeof(*pl), 0);
		return -ret;
	}
	*out = pl;
	return 0;
}

void pl_stop(struct pipeline *pl)
{
	struct pl_job *j;

	if (!pl)
		return;
	pthread_mutex_lock(&pl->lock);
	/* Jobs not started are dropped: the caller has drained whatever it
	 * needed; a stop with jobs queued is an error path. */
	while ((j = pl->queue)) {
		pl->queue = j->next;
		pl_job_free(j);
	}
	pl->queue_tail = NULL;
	pl->stop = true;
	pthread_cond_signal(&pl->wake);
	pthread_mutex_unlock(&pl->lock);
	pthread_join(pl->thread, NULL);
	while ((j = pl->done)) {
		pl->done = j->next;
		pl_job_free(j);
	}
	pthread_cond_destroy(&pl->wake);
	pthread_cond_destroy(&pl->idle);
	pthread_mutex_destroy(&pl->lock);
	mem_free(pl, sizeof(*pl), 0);
}

void pl_submit(struct pipeline *pl, struct pl_job *j)
{
	j->next = NULL;
	j->done = false;
	pthread_mutex_lock(&pl->lock);
	if (pl->queue_tail)
		pl->queue_tail->next = j;
	else
		pl->queue = j;
	pl->queue_tail = j;
	pthread_cond_signal(&pl->wake);
	pthread_mutex_unlock(&pl->lock);
}

struct pl_job *pl_drain(struct pipeline *pl, uint64_t *late,
			uint64_t *waited_ns)
{
	struct pl_job *j, *out;
	uint64_t t0 = 0;

	*late = 0;
	*waited_ns = 0;
	pthread_mutex_lock(&pl->lock);
	if (pl->queue || pl->running) {
		t0 = now_ns();
		/* Rows not yet read: the running job's and the queued ones. */
		for (j = pl->queue; j; j = j->next)
			if (j->kind == PL_READ)
				*late += j->n;
		for (j = pl->cur; j; j = j->next) /* its group too */
			if (j->kind == PL_READ)
				*late += j->n;
	}
	while (pl->queue || pl->running)
		pthread_cond_wait(&pl->idle, &pl->lock);
	out = pl->done;
	pl->done = pl->done_tail = NULL;
	pthread_mutex_unlock(&pl->lock);
	if (t0)
		*waited_ns = now_ns() - t0;
	return out;
}
