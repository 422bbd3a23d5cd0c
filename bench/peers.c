/*
 * peers.c - the pread peer, one of the other ways to serve the same
 * batches that run beside the store, in the same process, over the same
 * batches (warm-up included) and the same memory budget (the replay
 * engine, replay.c, runs them; the RocksDB peer is rocksdb.c):
 *
 *   pread    the table files read directly: for each distinct row of a
 *            table's batch, in row order, a synchronous O_DIRECT pread()
 *            of its block (rows sharing a block share the read), behind a
 *            row cache (LRU) as large as the store's DDR budget, split
 *            between the worker threads. No checksums are verified. It
 *            knows the file layout from docs/FORMAT.md (block b of the
 *            data starts at (b + 1) * block_size).
 *
 * It uses --peer-threads workers (default 2, the cores of the machine the
 * benchmark was written on), each with its own cache.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "rawio.h"
#include "replay.h"

/* ---------------------------------------------------------- the row cache */

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

/* -------------------------------------------------------------------- pread */

/* The files, shared by the workers. */
struct pread_peer {
	int *fds;
	uint32_t rows_per_block, file_row_bytes, block_size;
};

/* A worker's own: its row cache and one block. */
struct pread_worker {
	struct lru lru;
	unsigned char *blk; /* aligned for O_DIRECT */
};

static void pread_worker_free(void *p)
{
	struct pread_worker *pw = p;

	if (!pw)
		return;
	lru_free(&pw->lru);
	free(pw->blk);
	free(pw);
}

static int pread_fetch(struct worker *w, uint32_t t, const uint64_t *uniq,
		       size_t m, unsigned char *ubuf)
{
	struct replay *rp = w->rp;
	const struct pread_peer *pp = rp->peer;
	struct pread_worker *pw = w->peer;
	uint64_t cur = UINT64_MAX;
	size_t vb = rp->vb;

	for (size_t u = 0; u < m; u++) {
		uint64_t key = ((uint64_t)(t + 1) << 40) | uniq[u];
		const void *row = lru_get(&pw->lru, key);
		uint64_t blk;

		if (row) {
			memcpy(ubuf + u * vb, row, vb);
			w->hits++;
			continue;
		}
		w->misses++;
		blk = uniq[u] / pp->rows_per_block;
		if (blk != cur) {
			ssize_t n = pread(pp->fds[t], pw->blk, pp->block_size,
					  (off_t)((blk + 1) * pp->block_size));

			if (n != (ssize_t)pp->block_size) {
				snprintf(w->msg, sizeof(w->msg), "pread: %s",
					 n < 0 ? strerror(errno)
					       : "short read");
				return n < 0 ? -errno : -EIO;
			}
			w->reads++;
			cur = blk;
		}
		row = pw->blk + (size_t)(uniq[u] % pp->rows_per_block) *
				    pp->file_row_bytes;
		memcpy(ubuf + u * vb, row, vb);
		lru_put(&pw->lru, key, row);
	}
	return 0;
}

/* Opens every table file (O_DIRECT); on failure r's note says which. */
static int pread_open(const struct tables *tb, struct pread_peer *pp,
		      struct sys_result *r)
{
	pp->fds = malloc(tb->n * sizeof(*pp->fds));
	if (!pp->fds)
		return -ENOMEM;
	for (uint32_t t = 0; t < tb->n; t++)
		pp->fds[t] = -1;
	for (uint32_t t = 0; t < tb->n; t++) {
		int ret;

		if (!tb->rows[t])
			continue;
		ret = rawio_open_file(tb->path[t], O_RDONLY, &pp->fds[t]);
		if (ret) {
			snprintf(r->note, sizeof(r->note), "%s: %s",
				 tb->path[t], strerror(-ret));
			return ret;
		}
	}
	return 0;
}

/* Each worker's cache, cache_rows rows, and block. */
static int pread_workers(struct replay *rp, uint64_t cache_rows)
{
	const struct pread_peer *pp = rp->peer;

	for (unsigned i = 0; i < rp->nthreads; i++) {
		struct pread_worker *pw = calloc(1, sizeof(*pw));
		int ret;

		if (!pw)
			return -ENOMEM;
		rp->w[i].peer = pw;
		ret = lru_init(&pw->lru, cache_rows, rp->vb);
		if (ret)
			return ret;
		if (posix_memalign((void **)&pw->blk, 4096, pp->block_size))
			return -ENOMEM;
	}
	return 0;
}

void peer_pread(struct run_ctx *rc, struct sys_result *r)
{
	const struct bench_opts *o = rc->o;
	const struct tables *tb = rc->tb;
	struct pread_peer pp = {
	    .rows_per_block = tb->info.rows_per_block,
	    .file_row_bytes = tb->info.row_bytes,
	    .block_size = tb->info.block_size,
	};
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
	rp.peer = &pp;
	rp.peer_free = pread_worker_free;
	ret = pread_open(tb, &pp, r);
	if (!ret)
		ret = replay_start(&rp);
	if (ret)
		goto out;
	if (o->pread_cache)
		cache_rows =
		    o->ddr_bytes / rp.nthreads / (rp.vb + ET_SLOT_META_BYTES);
	ret = pread_workers(&rp, cache_rows);
	if (ret)
		goto out;
	replay_threads(&rp);
	snprintf(r->note, sizeof(r->note), "%u threads, O_DIRECT pread, %s",
		 rp.nthreads,
		 o->pread_cache ? "row LRU of the DDR budget" : "no cache");
	ret = replay_run(&rp, r, "pread peer");
out:
	if (ret) {
		replay_fail_note(&rp, ret, r);
		r->ran = false;
	}
	replay_end(&rp);
	if (pp.fds)
		for (uint32_t t = 0; t < tb->n; t++)
			if (pp.fds[t] >= 0)
				close(pp.fds[t]);
	free(pp.fds);
}
