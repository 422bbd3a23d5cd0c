/*
 * replay.c - the peers' replay engine (see replay.h): the workers, the
 * hand-out of each batch, and the replay of the store's warm-up and
 * measured batches with its figures.
 */
#include "replay.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "progress.h"

static int u128cmp(const void *a, const void *b)
{
	const uint64_t *x = a, *y = b;

	if (x[0] != y[0])
		return x[0] < y[0] ? -1 : 1;
	return x[1] < y[1] ? -1 : x[1] > y[1];
}

static int worker_fit(struct worker *w, size_t n, size_t vb)
{
	if (n <= w->cap)
		return 0;
	free(w->pairs);
	free(w->uniq);
	free(w->inv);
	free(w->ubuf);
	w->pairs = malloc(n * 2 * sizeof(uint64_t));
	w->uniq = malloc(n * sizeof(uint64_t));
	w->inv = malloc(n * sizeof(uint32_t));
	w->ubuf = malloc(n * vb);
	w->cap = n;
	if (!w->pairs || !w->uniq || !w->inv || !w->ubuf) {
		w->cap = 0;
		return -ENOMEM;
	}
	return 0;
}

/* One table of one batch: dedup (sorted), fetch, pool. */
static int worker_table(struct worker *w, const struct wl_table_ids *t,
			float *out)
{
	const struct bench_opts *o = w->rp->rc->o;
	size_t vb = w->rp->vb, m = 0;
	int ret;

	ret = worker_fit(w, t->n, vb);
	if (ret)
		return ret;
	for (uint32_t i = 0; i < t->n; i++) {
		w->pairs[2 * i] = t->ids[i];
		w->pairs[2 * i + 1] = i;
	}
	qsort(w->pairs, t->n, 2 * sizeof(uint64_t), u128cmp);
	for (uint32_t i = 0; i < t->n; i++) {
		if (!m || w->uniq[m - 1] != w->pairs[2 * i])
			w->uniq[m++] = w->pairs[2 * i];
		w->inv[w->pairs[2 * i + 1]] = (uint32_t)(m - 1);
	}
	w->lookups += m;
	ret = w->rp->fetch(w, t->table, w->uniq, m, w->ubuf);
	if (ret)
		return ret;
	if (o->op == OP_GATHER) {
		for (uint32_t i = 0; i < t->n; i++)
			decode_row(out + (size_t)i * o->dim,
				   w->ubuf + (size_t)w->inv[i] * vb, o->dtype,
				   o->dim);
		return 0;
	}
	for (uint32_t b = 0; b < t->nbags; b++) {
		float *acc = out + (size_t)b * o->dim;

		memset(acc, 0, o->dim * sizeof(*acc));
		for (uint64_t i = t->offsets[b]; i < t->offsets[b + 1]; i++)
			add_row(acc, w->ubuf + (size_t)w->inv[i] * vb, o->dtype,
				o->dim);
	}
	return 0;
}

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct replay *rp = w->rp;

	for (;;) {
		double w0, c0;

		pthread_barrier_wait(&rp->go);
		if (rp->stop)
			break;
		w0 = now_s();
		c0 = thread_cpu_s();
		for (uint32_t k = 0; k < rp->b->count && !w->err; k++) {
			const struct wl_table_ids *t = &rp->b->t[k];

			if (t->table % rp->nthreads != w->idx)
				continue;
			w->err = worker_table(w, t, rp->out + rp->outoff[k]);
		}
		w->cpu += thread_cpu_s() - c0;
		w->wall += now_s() - w0;
		pthread_barrier_wait(&rp->done);
	}
	return NULL;
}

int replay_start(struct replay *rp)
{
	unsigned n = rp->nthreads;

	rp->w = calloc(n, sizeof(*rp->w));
	if (!rp->w)
		return -ENOMEM;
	pthread_barrier_init(&rp->go, NULL, n + 1);
	pthread_barrier_init(&rp->done, NULL, n + 1);
	for (unsigned i = 0; i < n; i++) {
		rp->w[i].idx = i;
		rp->w[i].rp = rp;
	}
	return 0;
}

void replay_threads(struct replay *rp)
{
	for (unsigned i = 0; i < rp->nthreads; i++) {
		int ret =
		    pthread_create(&rp->w[i].th, NULL, worker_main, &rp->w[i]);

		if (ret) {
			/* The barriers count every thread: without all of
			 * them nothing can run. */
			cli_error("pthread_create: %s", strerror(ret));
			exit(CLI_EXIT_FAIL);
		}
	}
}

void replay_end(struct replay *rp)
{
	if (!rp->w)
		return;
	if (rp->w[0].th) {
		rp->stop = true;
		pthread_barrier_wait(&rp->go);
		for (unsigned i = 0; i < rp->nthreads; i++)
			pthread_join(rp->w[i].th, NULL);
	}
	pthread_barrier_destroy(&rp->go);
	pthread_barrier_destroy(&rp->done);
	for (unsigned i = 0; i < rp->nthreads; i++) {
		struct worker *w = &rp->w[i];

		free(w->pairs);
		free(w->uniq);
		free(w->inv);
		free(w->ubuf);
		if (rp->peer_free)
			rp->peer_free(w->peer);
		else
			free(w->peer);
	}
	free(rp->w);
	free(rp->outoff);
	free(rp->out);
	rp->w = NULL;
}

void replay_fail_note(const struct replay *rp, int ret, struct sys_result *r)
{
	const char *why = strerror(-ret);

	for (unsigned i = 0; rp->w && i < rp->nthreads; i++)
		if (rp->w[i].msg[0])
			why = rp->w[i].msg;
	snprintf(r->note, sizeof(r->note), "failed: %s", why);
}

/* Hands b to the workers and waits; returns the first worker error. */
static int replay_batch(struct replay *rp, const struct wl_batch *b)
{
	const struct bench_opts *o = rp->rc->o;
	size_t off = 0;

	if (b->count + 1 > rp->off_cap) {
		free(rp->outoff);
		rp->outoff = malloc((b->count + 1) * sizeof(*rp->outoff));
		rp->off_cap = rp->outoff ? b->count + 1 : 0;
		if (!rp->outoff)
			return -ENOMEM;
	}
	for (uint32_t k = 0; k < b->count; k++) {
		rp->outoff[k] = off;
		off +=
		    (size_t)(o->op == OP_POOLED ? b->t[k].nbags : b->t[k].n) *
		    o->dim;
	}
	rp->outoff[b->count] = off;
	if (off + 1 > rp->out_cap) {
		free(rp->out);
		rp->out = malloc((off + 1) * sizeof(float));
		rp->out_cap = rp->out ? off + 1 : 0;
		if (!rp->out)
			return -ENOMEM;
	}
	rp->b = b;
	pthread_barrier_wait(&rp->go);
	pthread_barrier_wait(&rp->done);
	for (unsigned i = 0; i < rp->nthreads; i++)
		if (rp->w[i].err)
			return rp->w[i].err;
	return 0;
}

static double peer_cap_s(const struct run_ctx *rc)
{
	if (rc->o->peer_max_s > 0)
		return rc->o->peer_max_s;
	return 4 * rc->store_seconds + 5;
}

/* Replays the store's warm-up and measured batches; fills r. */
int replay_run(struct replay *rp, struct sys_result *r, const char *label)
{
	struct run_ctx *rc = rp->rc;
	struct wl_batch b;
	struct disk_sample da, db, acc;
	struct progress pg;
	double cap = peer_cap_s(rc), t0, *lat;
	bool differ = false;
	uint64_t w_done = 0;
	int ret = 0;

	wl_batch_init(&b);
	lat = calloc(rc->measured ? rc->measured : 1, sizeof(*lat));
	if (!lat)
		return -ENOMEM;
	ret = wl_rewind(rc->g);
	progress_start(&pg, label, "batches", rc->warmup + rc->measured,
		       rc->o->quiet);
	t0 = now_s();
	for (; !ret && w_done < rc->warmup && !bench_stop; w_done++) {
		if (now_s() - t0 > cap)
			break;
		ret = wl_next(rc->g, &b);
		if (ret <= 0) {
			ret = ret ? ret : -EIO;
			break;
		}
		ret = replay_batch(rp, &b);
		progress_update(&pg, w_done + 1);
	}
	/* Skip what the cap left out of the warm-up. */
	for (uint64_t i = w_done; !ret && i < rc->warmup; i++)
		ret = wl_next(rc->g, &b) > 0 ? 0 : -EIO;
	for (unsigned i = 0; i < rp->nthreads; i++) {
		struct worker *w = &rp->w[i];

		w->wall = w->cpu = 0;
		w->hits = w->misses = w->reads = w->lookups = 0;
	}
	memset(&acc, 0, sizeof(acc));
	t0 = now_s();
	for (uint64_t i = 0; !ret && i < rc->measured && !bench_stop; i++) {
		double s;

		if (now_s() - t0 > cap)
			break;
		ret = wl_next(rc->g, &b);
		if (ret <= 0) {
			ret = ret ? ret : -EIO;
			break;
		}
		disk_sample(&rc->disk, &da); /* the batches' time only */
		s = now_s();
		ret = replay_batch(rp, &b);
		lat[i] = now_s() - s;
		disk_sample(&rc->disk, &db);
		disk_accum(&acc, &da, &db);
		if (ret)
			break;
		r->seconds += lat[i];
		r->ids += wl_batch_ids(&b);
		r->batches++;
		if (i < rc->ref.n &&
		    out_hash(rp->out, rp->outoff[b.count]) != rc->ref.h[i])
			differ = true;
		progress_update(&pg, w_done + i + 1);
	}
	progress_end(&pg);
	if (ret) {
		free(lat);
		wl_batch_free(&b);
		return ret;
	}
	r->planned = rc->measured;
	memset(&da, 0, sizeof(da));
	disk_diff(&rc->disk, &da, &acc, &r->disk);
	for (unsigned i = 0; i < rp->nthreads; i++) {
		struct worker *w = &rp->w[i];

		r->io_wait_s += w->wall - w->cpu;
		r->cache_hits += w->hits;
		r->cache_misses += w->misses;
		r->reads += w->reads;
		r->unique += w->lookups;
	}
	if (r->batches) {
		r->mean_ms = r->seconds / (double)r->batches * 1e3;
		r->p50_ms = percentile(lat, r->batches, 50) * 1e3;
		r->p99_ms = percentile(lat, r->batches, 99) * 1e3;
		r->outputs = differ ? -1 : 1;
		r->ran = true;
	}
	if (w_done < rc->warmup || r->batches < rc->measured) {
		size_t l = strlen(r->note);

		snprintf(r->note + l, sizeof(r->note) - l,
			 "%sstopped at the %.0f s cap: %" PRIu64 "/%" PRIu64
			 " warm-up, %" PRIu64 "/%" PRIu64 " measured batches",
			 l ? "; " : "", cap, w_done, rc->warmup, r->batches,
			 rc->measured);
	}
	free(lat);
	wl_batch_free(&b);
	return 0;
}
