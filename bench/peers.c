/*
 * peers.c - other ways to serve the same batches, run in the same process
 * over the same batches (warm-up included) and the same memory budget as
 * the store:
 *
 *   pread    the table files read directly: for each distinct row of a
 *            table's batch, in row order, a synchronous O_DIRECT pread()
 *            of its block (rows sharing a block share the read), behind a
 *            row cache (LRU) as large as the store's DDR budget, split
 *            between the worker threads. No checksums are verified. It
 *            knows the file layout from docs/FORMAT.md (block b of the
 *            data starts at (b + 1) * block_size).
 *   rocksdb  rows as key (table, row), 12 big-endian bytes, -> the row's
 *            values as stored; direct reads (use_direct_reads), no
 *            compression, 4 KiB blocks, a full Bloom filter, and an LRU
 *            block cache of the DDR budget that also holds the index and
 *            filter blocks; one MultiGet per table and batch (the batched
 *            MultiGet, keys sorted). Loading every row of big tables takes
 *            long, so only the rows the run touches are loaded, plus a
 *            random fraction of the others (--rocksdb-extra), which the
 *            report states.
 *
 * Both use --peer-threads workers (default 2, the cores of the machine the
 * benchmark was written on); worker i serves the tables t with
 * t % threads == i, so each has its own cache and no locks are needed.
 * The main thread hands out each batch and waits for all workers (two
 * barriers); a batch's time is from hand-out to the last worker's end.
 * Outputs are pooled exactly as et_gather_pooled does (rows added in id
 * order, f32), so their hashes must equal the store's.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef ET_HAVE_ROCKSDB
#include <rocksdb/c.h>
#endif

#include "bench.h"
#include "cli.h"
#include "io.h"
#include "progress.h"

#define NIL UINT32_MAX

/* ---------------------------------------------------------- the row cache */

/* LRU of rows: a chained hash over slot indexes and a doubly linked list
 * from most (head) to least (tail) recently used. */
struct lru {
	uint32_t cap, used, head, tail, mask;
	size_t vb;
	uint64_t *key;
	uint32_t *prev, *next, *chain, *bucket;
	unsigned char *data;
};

static void lru_free(struct lru *l)
{
	free(l->key);
	free(l->prev);
	free(l->next);
	free(l->chain);
	free(l->bucket);
	free(l->data);
	memset(l, 0, sizeof(*l));
}

static int lru_init(struct lru *l, uint64_t cap, size_t vb)
{
	uint64_t nb = 16;

	memset(l, 0, sizeof(*l));
	if (cap == 0)
		return 0;
	if (cap > UINT32_MAX - 1)
		cap = UINT32_MAX - 1;
	while (nb < cap)
		nb *= 2;
	l->cap = (uint32_t)cap;
	l->mask = (uint32_t)(nb - 1);
	l->vb = vb;
	l->head = l->tail = NIL;
	l->key = malloc(cap * sizeof(*l->key));
	l->prev = malloc(cap * sizeof(*l->prev));
	l->next = malloc(cap * sizeof(*l->next));
	l->chain = malloc(cap * sizeof(*l->chain));
	l->bucket = malloc(nb * sizeof(*l->bucket));
	l->data = malloc(cap * vb);
	if (!l->key || !l->prev || !l->next || !l->chain || !l->bucket ||
	    !l->data) {
		lru_free(l);
		return -ENOMEM;
	}
	memset(l->bucket, 0xff, nb * sizeof(*l->bucket));
	return 0;
}

static void lru_unlink(struct lru *l, uint32_t s)
{
	if (l->prev[s] != NIL)
		l->next[l->prev[s]] = l->next[s];
	else
		l->head = l->next[s];
	if (l->next[s] != NIL)
		l->prev[l->next[s]] = l->prev[s];
	else
		l->tail = l->prev[s];
}

static void lru_front(struct lru *l, uint32_t s)
{
	l->prev[s] = NIL;
	l->next[s] = l->head;
	if (l->head != NIL)
		l->prev[l->head] = s;
	l->head = s;
	if (l->tail == NIL)
		l->tail = s;
}

static const void *lru_get(struct lru *l, uint64_t key)
{
	if (!l->cap)
		return NULL;
	for (uint32_t s = l->bucket[wl_mix(key) & l->mask]; s != NIL;
	     s = l->chain[s]) {
		if (l->key[s] == key) {
			if (l->head != s) {
				lru_unlink(l, s);
				lru_front(l, s);
			}
			return l->data + (size_t)s * l->vb;
		}
	}
	return NULL;
}

static void lru_put(struct lru *l, uint64_t key, const void *row)
{
	uint32_t s, *pp, b;

	if (!l->cap)
		return;
	if (l->used < l->cap) {
		s = l->used++;
	} else {
		s = l->tail;
		lru_unlink(l, s);
		for (pp = &l->bucket[wl_mix(l->key[s]) & l->mask]; *pp != s;
		     pp = &l->chain[*pp])
			;
		*pp = l->chain[s];
	}
	l->key[s] = key;
	memcpy(l->data + (size_t)s * l->vb, row, l->vb);
	lru_front(l, s);
	b = (uint32_t)(wl_mix(key) & l->mask);
	l->chain[s] = l->bucket[b];
	l->bucket[b] = s;
}

/* ------------------------------------------------------- the replay engine */

struct replay;

struct worker {
	pthread_t th;
	unsigned idx;
	struct replay *rp;
	int err;
	char msg[160];
	double wall, cpu;
	uint64_t hits, misses, reads, lookups;
	/* scratch for one table of one batch */
	uint64_t *pairs; /* (id, input index) */
	uint64_t *uniq;
	uint32_t *inv;
	unsigned char *ubuf; /* the distinct rows' values */
	size_t cap;
	struct lru lru;	    /* pread */
	unsigned char *blk; /* pread: one block, aligned */
	void *peer;	    /* rocksdb: its per-worker scratch */
};

/* Fetches the values of the m distinct rows uniq[] of table t into ubuf. */
typedef int (*fetch_fn)(struct worker *w, uint32_t t, const uint64_t *uniq,
			size_t m, unsigned char *ubuf);

struct replay {
	struct run_ctx *rc;
	unsigned nthreads;
	struct worker *w;
	pthread_barrier_t go, done;
	const struct wl_batch *b;
	size_t *outoff, off_cap;
	float *out;
	size_t out_cap;
	bool stop;
	fetch_fn fetch;
	size_t vb; /* value bytes of a row */
	/* pread */
	int *fds;
	uint32_t rows_per_block, file_row_bytes, block_size;
#ifdef ET_HAVE_ROCKSDB
	rocksdb_t *db;
	rocksdb_readoptions_t *ro;
	rocksdb_column_family_handle_t *cf;
#endif
};

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

static int replay_start(struct replay *rp)
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

static int replay_threads(struct replay *rp)
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
	return 0;
}

static void replay_end(struct replay *rp)
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
		free(w->blk);
		free(w->peer);
		lru_free(&w->lru);
	}
	free(rp->w);
	free(rp->outoff);
	free(rp->out);
	rp->w = NULL;
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
static int replay_run(struct replay *rp, struct sys_result *r,
		      const char *label)
{
	struct run_ctx *rc = rp->rc;
	struct wl_batch b;
	struct disk_sample da, db;
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
	disk_sample(&rc->disk, &da);
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
		s = now_s();
		ret = replay_batch(rp, &b);
		if (ret)
			break;
		lat[i] = now_s() - s;
		r->seconds += lat[i];
		r->ids += wl_batch_ids(&b);
		r->batches++;
		if (i < rc->ref.n &&
		    out_hash(rp->out, rp->outoff[b.count]) != rc->ref.h[i])
			differ = true;
		progress_update(&pg, w_done + i + 1);
	}
	disk_sample(&rc->disk, &db);
	progress_end(&pg);
	if (ret) {
		free(lat);
		wl_batch_free(&b);
		return ret;
	}
	r->planned = rc->measured;
	disk_diff(&rc->disk, &da, &db, &r->disk);
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

/* -------------------------------------------------------------------- pread */

static int pread_fetch(struct worker *w, uint32_t t, const uint64_t *uniq,
		       size_t m, unsigned char *ubuf)
{
	struct replay *rp = w->rp;
	uint64_t cur = UINT64_MAX;
	size_t vb = rp->vb;

	for (size_t u = 0; u < m; u++) {
		uint64_t key = ((uint64_t)(t + 1) << 40) | uniq[u];
		const void *row = lru_get(&w->lru, key);
		uint64_t blk;

		if (row) {
			memcpy(ubuf + u * vb, row, vb);
			w->hits++;
			continue;
		}
		w->misses++;
		blk = uniq[u] / rp->rows_per_block;
		if (blk != cur) {
			ssize_t n = pread(rp->fds[t], w->blk, rp->block_size,
					  (off_t)((blk + 1) * rp->block_size));

			if (n != (ssize_t)rp->block_size) {
				snprintf(w->msg, sizeof(w->msg), "pread: %s",
					 n < 0 ? strerror(errno)
					       : "short read");
				return n < 0 ? -errno : -EIO;
			}
			w->reads++;
			cur = blk;
		}
		row = w->blk + (size_t)(uniq[u] % rp->rows_per_block) *
				   rp->file_row_bytes;
		memcpy(ubuf + u * vb, row, vb);
		lru_put(&w->lru, key, row);
	}
	return 0;
}

void peer_pread(struct run_ctx *rc, struct sys_result *r)
{
	const struct bench_opts *o = rc->o;
	const struct tables *tb = rc->tb;
	struct replay rp;
	uint64_t cache_rows = 0;
	int ret;

	memset(&rp, 0, sizeof(rp));
	r->name = "pread";
	r->has_cache = o->pread_cache;
	r->has_reads = true;
	rp.rc = rc;
	rp.nthreads = o->peer_threads;
	rp.fetch = pread_fetch;
	rp.vb = tb->row_bytes;
	rp.rows_per_block = tb->info.rows_per_block;
	rp.file_row_bytes = tb->info.row_bytes;
	rp.block_size = tb->info.block_size;
	rp.fds = malloc(tb->n * sizeof(*rp.fds));
	if (!rp.fds) {
		ret = -ENOMEM;
		goto out;
	}
	for (uint32_t t = 0; t < tb->n; t++)
		rp.fds[t] = -1;
	for (uint32_t t = 0; t < tb->n; t++) {
		if (!tb->rows[t])
			continue;
		ret = io_open_file(tb->path[t], O_RDONLY, 0, &rp.fds[t]);
		if (ret) {
			snprintf(r->note, sizeof(r->note), "%s: %s",
				 tb->path[t], strerror(-ret));
			goto out;
		}
	}
	ret = replay_start(&rp);
	if (ret)
		goto out;
	if (o->pread_cache)
		cache_rows =
		    o->ddr_bytes / rp.nthreads / (rp.vb + ET_SLOT_META_BYTES);
	for (unsigned i = 0; i < rp.nthreads; i++) {
		struct worker *w = &rp.w[i];

		ret = lru_init(&w->lru, cache_rows, rp.vb);
		if (!ret &&
		    posix_memalign((void **)&w->blk, 4096, rp.block_size))
			ret = -ENOMEM;
		if (ret)
			goto out;
	}
	replay_threads(&rp);
	snprintf(r->note, sizeof(r->note), "%u threads, O_DIRECT pread, %s",
		 rp.nthreads,
		 o->pread_cache ? "row LRU of the DDR budget" : "no cache");
	ret = replay_run(&rp, r, "pread peer");
out:
	if (ret) {
		const char *why = strerror(-ret);

		for (unsigned i = 0; rp.w && i < rp.nthreads; i++)
			if (rp.w[i].msg[0])
				why = rp.w[i].msg;
		snprintf(r->note, sizeof(r->note), "failed: %s", why);
		r->ran = false;
	}
	replay_end(&rp);
	if (rp.fds)
		for (uint32_t t = 0; t < tb->n; t++)
			if (rp.fds[t] >= 0)
				close(rp.fds[t]);
	free(rp.fds);
}

/* ------------------------------------------------------------------ rocksdb */

#ifndef ET_HAVE_ROCKSDB

void peer_rocksdb(struct run_ctx *rc, struct sys_result *r)
{
	(void)rc;
	r->name = "rocksdb";
	snprintf(r->note, sizeof(r->note),
		 "not built (no librocksdb-dev when embtier-bench was built)");
}

#else

static int u64cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static void key_of(char *k, uint32_t t, uint64_t row)
{
	for (int i = 0; i < 4; i++)
		k[i] = (char)(t >> (24 - 8 * i));
	for (int i = 0; i < 8; i++)
		k[4 + i] = (char)(row >> (56 - 8 * i));
}

/* The row's values as stored (in the table's dtype). */
static void value_of(unsigned char *v, const struct bench_opts *o, uint32_t t,
		     uint64_t row)
{
	for (uint32_t c = 0; c < o->dim; c++) {
		float f = fill_value(t, row, c);

		if (o->dtype == ET_F32) {
			memcpy(v + 4 * (size_t)c, &f, 4);
		} else {
			uint16_t h = o->dtype == ET_F16 ? et_f32_to_f16(f)
							: et_f32_to_bf16(f);

			memcpy(v + 2 * (size_t)c, &h, 2);
		}
	}
}

struct rdb_scratch {
	size_t cap;
	char *keys;
	const char **kp;
	size_t *ks;
	rocksdb_pinnableslice_t **vals;
	char **errs;
};

static int rdb_fetch(struct worker *w, uint32_t t, const uint64_t *uniq,
		     size_t m, unsigned char *ubuf)
{
	struct replay *rp = w->rp;
	struct rdb_scratch *s = w->peer;
	int ret = 0;

	if (m > s->cap) {
		free(s->keys);
		free(s->kp);
		free(s->ks);
		free(s->vals);
		free(s->errs);
		s->keys = malloc(m * 12);
		s->kp = malloc(m * sizeof(*s->kp));
		s->ks = malloc(m * sizeof(*s->ks));
		s->vals = malloc(m * sizeof(*s->vals));
		s->errs = malloc(m * sizeof(*s->errs));
		s->cap = m;
		if (!s->keys || !s->kp || !s->ks || !s->vals || !s->errs) {
			s->cap = 0;
			return -ENOMEM;
		}
	}
	for (size_t u = 0; u < m; u++) {
		key_of(s->keys + 12 * u, t, uniq[u]);
		s->kp[u] = s->keys + 12 * u;
		s->ks[u] = 12;
	}
	rocksdb_batched_multi_get_cf(rp->db, rp->ro, rp->cf, m, s->kp, s->ks,
				     s->vals, s->errs, true);
	for (size_t u = 0; u < m; u++) {
		size_t len = 0;
		const char *v = NULL;

		if (s->errs[u]) {
			if (!ret)
				snprintf(w->msg, sizeof(w->msg), "MultiGet: %s",
					 s->errs[u]);
			ret = -EIO;
			rocksdb_free(s->errs[u]);
		}
		if (s->vals[u]) {
			v = rocksdb_pinnableslice_value(s->vals[u], &len);
			if (len == rp->vb)
				memcpy(ubuf + u * rp->vb, v, rp->vb);
			rocksdb_pinnableslice_destroy(s->vals[u]);
		}
		if (!ret && len != rp->vb) {
			snprintf(w->msg, sizeof(w->msg),
				 "table %u row %" PRIu64 ": %s", t, uniq[u],
				 v ? "value of the wrong size" : "not found");
			ret = -EIO;
		}
	}
	return ret;
}

/* "rocksdb.block.cache.data.hit COUNT : 123" */
static uint64_t stat_of(const char *s, const char *name)
{
	const char *p = s ? strstr(s, name) : NULL;
	unsigned long long v = 0;

	if (p && sscanf(p + strlen(name), " COUNT : %llu", &v) == 1)
		return v;
	return 0;
}

static void stats_now(rocksdb_options_t *opt, uint64_t *hit, uint64_t *miss)
{
	char *s = rocksdb_options_statistics_get_string(opt);

	*hit = stat_of(s, "rocksdb.block.cache.data.hit");
	*miss = stat_of(s, "rocksdb.block.cache.data.miss");
	rocksdb_free(s);
}

/* Writes the rows to load as one sorted SST file; returns rows written. */
static int rdb_write_sst(struct run_ctx *rc, rocksdb_options_t *opt,
			 const char *path, uint64_t *loaded, uint64_t *touched)
{
	const struct bench_opts *o = rc->o;
	const struct tables *tb = rc->tb;
	uint64_t **ids = NULL, *cnt = NULL, total = 0, done = 0;
	rocksdb_envoptions_t *env = rocksdb_envoptions_create();
	rocksdb_sstfilewriter_t *wr = NULL;
	struct progress pg;
	struct wl_rng rng;
	unsigned char *val = malloc(tb->row_bytes);
	char *err = NULL, key[12];
	int ret = -ENOMEM;

	ids = calloc(tb->n, sizeof(*ids));
	cnt = calloc(tb->n, sizeof(*cnt));
	if (!ids || !cnt || !val)
		goto out;
	ret =
	    wl_touched_rows(rc->g, tb->n, rc->warmup + rc->measured, ids, cnt);
	if (ret)
		goto out;
	wl_rng_seed(&rng, o->wl.seed ^ 0x2dbULL);
	*touched = 0;
	for (uint32_t t = 0; t < tb->n; t++) {
		uint64_t extra, m, *p;

		*touched += cnt[t];
		if (!tb->rows[t])
			continue;
		extra = (uint64_t)(o->rocksdb_extra *
				   (double)(tb->rows[t] - cnt[t]));
		p = realloc(ids[t], (cnt[t] + extra + 1) * sizeof(*p));
		if (!p) {
			ret = -ENOMEM;
			goto out;
		}
		ids[t] = p;
		for (uint64_t i = 0; i < extra; i++)
			p[cnt[t] + i] = wl_rng_below(&rng, tb->rows[t]);
		m = cnt[t] + extra;
		/* sort and drop duplicates */
		qsort(p, m, sizeof(*p), u64cmp);
		cnt[t] = 0;
		for (uint64_t i = 0; i < m; i++)
			if (!cnt[t] || p[i] != p[cnt[t] - 1])
				p[cnt[t]++] = p[i];
		total += cnt[t];
	}
	wr = rocksdb_sstfilewriter_create(env, opt);
	rocksdb_sstfilewriter_open(wr, path, &err);
	if (err)
		goto rerr;
	progress_start(&pg, "loading rocksdb", "rows", total, o->quiet);
	for (uint32_t t = 0; t < tb->n && !bench_stop; t++) {
		for (uint64_t i = 0; i < cnt[t]; i++) {
			key_of(key, t, ids[t][i]);
			value_of(val, o, t, ids[t][i]);
			rocksdb_sstfilewriter_put(wr, key, 12,
						  (const char *)val,
						  tb->row_bytes, &err);
			if (err)
				break;
			if (++done % 4096 == 0)
				progress_update(&pg, done);
		}
		if (err)
			break;
	}
	progress_end(&pg);
	if (!err)
		rocksdb_sstfilewriter_finish(wr, &err);
rerr:
	if (err) {
		cli_error("rocksdb: writing %s: %s", path, err);
		rocksdb_free(err);
		ret = -EIO;
	} else {
		ret = bench_stop ? -EINTR : 0;
	}
	*loaded = done;
out:
	if (wr)
		rocksdb_sstfilewriter_destroy(wr);
	rocksdb_envoptions_destroy(env);
	if (ids)
		for (uint32_t t = 0; t < tb->n; t++)
			free(ids[t]);
	free(ids);
	free(cnt);
	free(val);
	return ret;
}

void peer_rocksdb(struct run_ctx *rc, struct sys_result *r)
{
	const struct bench_opts *o = rc->o;
	const struct tables *tb = rc->tb;
	rocksdb_options_t *opt = rocksdb_options_create();
	rocksdb_block_based_table_options_t *bbt =
	    rocksdb_block_based_options_create();
	rocksdb_cache_t *cache = rocksdb_cache_create_lru(o->ddr_bytes);
	rocksdb_ingestexternalfileoptions_t *ing =
	    rocksdb_ingestexternalfileoptions_create();
	rocksdb_column_family_handle_t *cfh[1] = {NULL};
	const rocksdb_options_t *cfo[1];
	const char *cfn[1] = {"default"};
	char dbpath[4096], sst[4096], *err = NULL;
	const char *files[1];
	struct replay rp;
	uint64_t loaded = 0, touched = 0, h0, m0, h1, m1;
	double t0 = now_s(), load_s;
	int ret;

	memset(&rp, 0, sizeof(rp));
	r->name = "rocksdb";
	r->has_cache = true;
	r->has_reads = true;
	snprintf(dbpath, sizeof(dbpath), "%s/rocksdb", tb->dir);
	snprintf(sst, sizeof(sst), "%s/rocksdb-load.sst", tb->dir);
	rm_tree(dbpath);
	rocksdb_options_set_create_if_missing(opt, 1);
	rocksdb_options_set_compression(opt, rocksdb_no_compression);
	rocksdb_options_set_use_direct_reads(opt, 1);
	rocksdb_options_set_use_direct_io_for_flush_and_compaction(opt, 1);
	rocksdb_options_set_max_open_files(opt, -1);
	rocksdb_options_enable_statistics(opt);
	rocksdb_block_based_options_set_block_size(bbt, 4096);
	rocksdb_block_based_options_set_block_cache(bbt, cache);
	rocksdb_block_based_options_set_cache_index_and_filter_blocks(bbt, 1);
	rocksdb_block_based_options_set_filter_policy(
	    bbt, rocksdb_filterpolicy_create_bloom_full(10));
	rocksdb_options_set_block_based_table_factory(opt, bbt);

	ret = rdb_write_sst(rc, opt, sst, &loaded, &touched);
	if (ret)
		goto out;
	cfo[0] = opt;
	rp.db =
	    rocksdb_open_column_families(opt, dbpath, 1, cfn, cfo, cfh, &err);
	if (err)
		goto rerr;
	rp.cf = cfh[0];
	files[0] = sst;
	rocksdb_ingestexternalfileoptions_set_move_files(ing, 1);
	rocksdb_ingest_external_file(rp.db, files, 1, ing, &err);
	if (err)
		goto rerr;
	load_s = now_s() - t0;
	snprintf(r->note, sizeof(r->note),
		 "loaded %" PRIu64 " rows (%" PRIu64
		 " the run touches + %.0f%% of the others, %.0f%% of all) in "
		 "%.1f s",
		 loaded, touched, o->rocksdb_extra * 100,
		 100.0 * (double)loaded / (double)tb->total_rows, load_s);

	rp.ro = rocksdb_readoptions_create();
	rp.rc = rc;
	rp.nthreads = o->peer_threads;
	rp.fetch = rdb_fetch;
	rp.vb = tb->row_bytes;
	ret = replay_start(&rp);
	for (unsigned i = 0; !ret && i < rp.nthreads; i++) {
		rp.w[i].peer = calloc(1, sizeof(struct rdb_scratch));
		if (!rp.w[i].peer)
			ret = -ENOMEM;
	}
	if (ret)
		goto out;
	replay_threads(&rp);
	/* cache counters of the measured phase only: sampled around it */
	stats_now(opt, &h0, &m0);
	ret = replay_run(&rp, r, "rocksdb peer");
	stats_now(opt, &h1, &m1);
	if (!ret) {
		/* rows are not cached, 4 KiB blocks of them are */
		r->cache_hits = h1 - h0;
		r->cache_misses = m1 - m0;
		r->reads = m1 - m0;
	}
	goto out;
rerr:
	cli_error("rocksdb: %s", err);
	snprintf(r->note, sizeof(r->note), "failed: %s", err);
	rocksdb_free(err);
	ret = -EIO;
out:
	if (ret && ret != -EIO) {
		const char *why = strerror(-ret);

		for (unsigned i = 0; rp.w && i < rp.nthreads; i++)
			if (rp.w[i].msg[0])
				why = rp.w[i].msg;
		snprintf(r->note, sizeof(r->note), "failed: %s", why);
	}
	if (ret)
		r->ran = false;
	if (rp.w)
		for (unsigned i = 0; i < rp.nthreads; i++) {
			struct rdb_scratch *s = rp.w[i].peer;

			if (!s)
				continue;
			free(s->keys);
			free(s->kp);
			free(s->ks);
			free(s->vals);
			free(s->errs);
		}
	replay_end(&rp);
	if (rp.ro)
		rocksdb_readoptions_destroy(rp.ro);
	if (cfh[0])
		rocksdb_column_family_handle_destroy(cfh[0]);
	if (rp.db)
		rocksdb_close(rp.db);
	rocksdb_ingestexternalfileoptions_destroy(ing);
	rocksdb_options_destroy(opt);
	rocksdb_block_based_options_destroy(bbt);
	rocksdb_cache_destroy(cache);
	rm_tree(dbpath);
	unlink(sst);
}

#endif
