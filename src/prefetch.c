/*
 * prefetch.c - et_prefetch and its other half, drain: the next batch's
 * rows are looked up and pinned, the missing ones handed to the I/O thread
 * (after the queued write-backs), and what it read is installed in the
 * top tier by the next operation.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "error.h"
#include "mem_host.h"
#include "simd.h"
#include "prefetch.h"
#include "resolve.h"
#include "pipeline.h"
#include "state.h"

/* Rows a prefetch's promotions look ahead: at PF_AHEAD the lines of the
 * row's top-tier set and its DDR copy are asked for, at half that the
 * top tier's likely victim and where in DDR it is likely to go. */
#define PF_AHEAD 8

/*
 * Asks for the cache lines the promotion of row key from DDR slot dslot
 * into the top tier will touch, in two stages (see PF_AHEAD): stage 1
 * the top set's policy and pin words and the row's bytes; stage 2, once
 * those are in, the victim the policy will likely choose, its bytes, and
 * the DDR set it will be demoted to. Hints only: a wrong guess costs a
 * cache miss later, nothing else.
 */
static void promote_ahead(const et_store *s, struct cache *top,
			  struct cache *ddr, uint64_t key, uint64_t dslot,
			  uint32_t rb, int stage)
{
	struct pinset ps = {{s->pins.epoch, s->pins.bcur, s->pins.bprev}};
	uint64_t base = cache_set_base(top, key), v, vb;

	if (stage == 1) {
		__builtin_prefetch(&top->pstate[base], 1);
		__builtin_prefetch(&top->pin[base]);
		prefetch_bytes(cache_row(ddr, dslot), rb);
		return;
	}
	v = cache_guess(top, key, s->pins.now, &ps);
	if (v == CACHE_NONE || !top->keys[v])
		return;
	prefetch_bytes(cache_row(top, v), rb);
	vb = cache_set_base(ddr, top->keys[v] & CACHE_KEY_MASK);
	cache_prefetch_set(ddr, vb);
	__builtin_prefetch(&ddr->pstate[vb], 1);
	__builtin_prefetch(&ddr->pin[vb]);
}

/*
 * Classifies one table's ids of the next batch; rows to read are appended
 * to a new job in *job (NULL if none). If every row ends up in the top
 * tier, the scratch keeps their slots: a memo the operations on the batch
 * use instead of probing (see resolve_memo).
 *
 * In passes, so that the memory system works on many rows at once: the
 * top tier is probed for every row (probe_top) and its hits touched and
 * pinned; the DDR tier is probed for the rest the same way and its hits
 * pinned; then, in batch order, DDR hits are promoted into the top tier
 * (asking for the lines each promotion touches PF_AHEAD rows ahead) and
 * the other misses are installed or listed for reading. The batch's hits
 * are pinned before any promotion, so none of them is evicted by it.
 */
static int pf_table(et_store *s, uint32_t t, const uint64_t *ids, size_t n,
		    struct pl_job **job)
{
	struct table *tb = &s->reg.tables[t];
	struct sclass *cl = &s->reg.cls[tb->cls];
	struct cache *top = top_of(&s->reg, cl), *ddr = &cl->ddr;
	uint8_t top_kind = s->reg.has_hbm ? K_HBM : K_DDR;
	uint32_t rb = tb->g->row_bytes;
	const uint64_t *uniq;
	uint64_t *mrows, *tops;
	uint32_t *pend, *pfl;
	uint8_t *kind;
	void **ptrs;
	size_t m, nm = 0, np = 0, npfl = 0;
	int ret;

	*job = NULL;
	ret = dedup(s, ids, n, &m);
	s->sc.o->memo = false;
	if (!ret)
		ret = sbuf_reserve(&s->sc.o->mrows, m * sizeof(uint64_t));
	if (!ret)
		ret = sbuf_reserve(&s->sc.o->slots, m * sizeof(uint64_t));
	if (!ret)
		ret = sbuf_reserve(&s->sc.o->kind, m);
	if (!ret)
		ret = sbuf_reserve(&s->sc.o->ptrs, m * sizeof(void *));
	if (!ret)
		ret = sbuf_reserve(&s->sc.o->midx, m * sizeof(uint32_t));
	if (!ret)
		ret = sbuf_reserve(&s->sc.o->pfl, m * sizeof(uint32_t));
	if (!ret)
		ret = sbuf_reserve(&s->sc.o->mbuf, rb);
	if (!ret) /* the victims its placements may queue (see op_lookup) */
		ret = wb_reserve(s, 2 * m);
	if (ret)
		return ret;
	uniq = s->sc.o->uniq.p;
	mrows = s->sc.o->mrows.p;
	tops = s->sc.o->slots.p;
	kind = s->sc.o->kind.p;
	pend = s->sc.o->midx.p;
	ptrs = s->sc.o->ptrs.p;
	pfl = s->sc.o->pfl.p;
	s->pf.rows += m;
	/* 1. top-tier hits: touched and pinned for the batch */
	probe_top(s, t, top, m, tops);
	for (size_t i = 0; i < m; i++) {
		uint64_t slot = tops[i];

		if (slot == CACHE_NONE) {
			top->st.misses++;
			kind[i] = 0;
			pend[np++] = (uint32_t)i;
			continue;
		}
		s->pins.now++;
		cache_touch_n(top, slot, s->pins.now, op_draws(s->sc.o, i));
		cache_pin(top, slot, s->pins.bcur);
		top->st.hits++;
		kind[i] = top_kind;
		ptrs[i] = cache_row(top, slot);
		if (cache_is_pf(top, slot)) /* placed, not used yet */
			pfl[npfl++] = (uint32_t)i;
	}
	/* 2. DDR hits (under an HBM tier): pinned, to be promoted; tops[i]
	 * is the DDR slot meanwhile */
	if (s->reg.has_hbm) {
		for (size_t j = 0; j < np; j++)
			tops[pend[j]] =
			    cache_set_base(ddr, cache_key(t, uniq[pend[j]]));
		for (size_t j = 0; j < np && j < PF_AHEAD; j++)
			cache_prefetch_set(ddr, tops[pend[j]]);
		for (size_t j = 0; j < np; j++) {
			uint32_t i = pend[j];
			uint64_t slot;

			if (j + PF_AHEAD < np)
				cache_prefetch_set(ddr,
						   tops[pend[j + PF_AHEAD]]);
			slot = cache_lookup_at(ddr, tops[i],
					       cache_key(t, uniq[i]));
			tops[i] = slot;
			if (slot == CACHE_NONE) {
				ddr->st.misses++;
				continue;
			}
			ddr->st.hits++;
			cache_pin(ddr, slot, s->pins.bcur);
			kind[i] = K_DDR;
		}
	}
	/* 3. in batch order: promotions, installs, rows to read */
	for (size_t j = 0; j < np; j++) {
		uint32_t i = pend[j];
		uint64_t key = cache_key(t, uniq[i]);
		uint8_t where;
		int64_t at;

		for (int st = 1; st <= 2; st++) {
			size_t a = j + PF_AHEAD / (size_t)st;

			if (a < np && kind[pend[a]] == K_DDR)
				promote_ahead(s, top, ddr,
					      cache_key(t, uniq[pend[a]]),
					      tops[pend[a]], rb, st);
		}
		if (kind[i] == K_DDR) {
			uint64_t slot = tops[i];

			ret = place_row(s, key, cache_row(ddr, slot), rb, slot,
					cache_dirty(ddr, slot), s->pins.bcur,
					op_draws(s->sc.o, i), &where, &tops[i]);
			if (ret)
				return ret;
			if ((where & ~K_CONFLICT) == K_HBM)
				cache_mark_pf(&cl->hbm, tops[i]);
			kind[i] = where == K_HBM ? K_HBM : 0;
			if (kind[i]) {
				ptrs[i] = cache_row(top, tops[i]);
				pfl[npfl++] = i;
			}
			continue;
		}
		/* Evicted dirty, perhaps by this very prefetch: the queue
		 * has the truth. Copied out, as placing may grow the queue. */
		at = wb_find(s, key);
		if (at >= 0) {
			memcpy(s->sc.o->mbuf.p, wb_row(&s->wb, at), rb);
			ret = pf_install(s, t, uniq[i], s->sc.o->mbuf.p, true,
					 s->pins.bcur, &tops[i]);
			if (ret)
				return ret;
		} else if (!tf_row_materialized(tb->tf, uniq[i])) {
			tf_init_row_raw(tb->tf, uniq[i], s->sc.o->mbuf.p);
			tb->st.rows_lazy++;
			ret = pf_install(s, t, uniq[i], s->sc.o->mbuf.p, false,
					 s->pins.bcur, &tops[i]);
			if (ret)
				return ret;
		} else {
			mrows[nm++] = uniq[i];
			tops[i] = CACHE_NONE;
		}
		kind[i] = tops[i] == CACHE_NONE ? 0 : top_kind;
		if (kind[i]) { /* placed with CACHE_PF */
			ptrs[i] = cache_row(top, tops[i]);
			pfl[npfl++] = i;
		}
	}
	/* The memo: every row in the top tier, pinned for the batch, and
	 * the ones a prefetch placed and no operation used yet. */
	s->sc.o->m = m;
	s->sc.o->nbypass = 0;
	memo_set(s, s->sc.o, t, s->pins.bcur);
	if (s->sc.o->memo)
		s->sc.o->npfl = npfl;
	if (nm) {
		struct pl_job *j = pl_job_new(PL_READ, tb->tf, t, nm, rb);

		if (!j)
			return -ENOMEM;
		memcpy(j->rows, mrows, nm * sizeof(*mrows));
		j->epoch = s->pins.bcur;
		s->pf.reads += nm;
		*job = j;
	}
	return 0;
}

/* The work of et_prefetch on a checked batch: on the caller's thread, or
 * on the prefetch thread. */
static int pf_run(et_store *s, const struct et_batch_ids *batch, size_t ntables)
{
	struct pl_job *jobs = NULL, **tail = &jobs, *wjobs = NULL, *j;
	uint64_t t0, t1, w0;
	int ret;

	ret = scratch_grow(&s->pf.scr, &s->pf.nscr, ntables);
	if (ret)
		return ret;
	t0 = now_ns();
	ret = op_drain(s);
	if (s->failed || s->lost)
		return ET_EFAILED;
	if (!ret)
		ret = caches_ensure(s);
	if (ret)
		return ret;
	s->pf.calls++;
	/* A new batch: its pins and the last batch's hold; older go. */
	pins_batch_begin(s);
	for (size_t k = 0; k < ntables && !ret; k++) {
		scratch_use(
		    s,
		    &s->pf.scr[k]); /* kept for the operations on the batch */
		ret = pf_table(s, (uint32_t)batch[k].table, batch[k].ids,
			       batch[k].n, tail);
		if (*tail)
			tail = &(*tail)->next;
	}
	pins_batch_end(s);
	scratch_use(s, &s->sc.one);
	/* Victims first, then the reads: the I/O thread keeps the order. */
	w0 = now_ns();
	if (!ret)
		ret = wb_take_jobs(s, &wjobs);
	while ((j = wjobs)) { /* victims first: the I/O thread keeps order */
		wjobs = j->next;
		pl_submit(s->pf.pl, j);
		s->pf.pending = true;
	}
	while ((j = jobs)) {
		jobs = j->next;
		if (ret) {
			pl_job_free(j);
			continue;
		}
		pl_submit(s->pf.pl, j);
		s->pf.pending = true;
	}
	if (ret && s->wb.n) {
		/* Queued victims still go home, after the I/O thread. */
		struct pl_job *done;
		uint64_t late, waited;

		if (s->pf.pending) {
			done = pl_drain(s->pf.pl, &late, &waited);
			s->pf.pending = false;
			while ((j = done)) { /* only write-backs were queued */
				done = j->next;
				if (j->result && !s->failed)
					s->failed = j->result;
				pl_job_free(j);
			}
		}
		wb_run(s);
	}
	t1 = now_ns();
	s->tm.wb_ns += t1 - w0;
	s->tm.op_ns += t1 - t0;
	epoch_next(s);
	return ret;
}

/* ------------------------------------------------------ prefetch thread */

/*
 * With et_store_config.prefetch_thread, et_prefetch hands its checked
 * batch (a copy: the caller may reuse its arrays at once) to a thread of
 * the store's and returns; pf_run then does on that thread what it does
 * on the caller's. Every other call on the store begins with pf_wait, so
 * the store is never used by two threads at once and its operations run
 * in the same order as without the thread: results, counters and cache
 * contents are the same. What changes is only who waits: the caller's
 * next call instead of its et_prefetch, and in a training step the
 * dense forward and backward run in between, on the other core.
 *
 * Errors of the work on the thread are not returned (nothing is left to
 * return them to): rows it could not place are read on demand, where a
 * read error surfaces; a failure that loses a write-back is sticky and the
 * next call returns ET_EFAILED. Memory: the copy of the largest batch
 * handed in (8 bytes an id, 24 a table), and the thread's stack.
 */
struct pf_async {
	pthread_t thread;
	pthread_mutex_t lock;
	pthread_cond_t cv;
	bool busy; /* a batch handed over, not yet done */
	bool stop;
	struct et_batch_ids *b;
	size_t nb, bcap;
	uint64_t *ids;
	size_t icap;
};

static void *pf_thread(void *arg)
{
	et_store *s = arg;
	struct pf_async *a = s->pf.async;

	pthread_mutex_lock(&a->lock);
	for (;;) {
		while (!a->busy && !a->stop)
			pthread_cond_wait(&a->cv, &a->lock);
		if (!a->busy)
			break; /* stop */
		pthread_mutex_unlock(&a->lock);
		(void)pf_run(s, a->b, a->nb);
		pthread_mutex_lock(&a->lock);
		a->busy = false;
		pthread_cond_broadcast(&a->cv);
	}
	pthread_mutex_unlock(&a->lock);
	return NULL;
}

void pf_wait(et_store *s)
{
	struct pf_async *a = s ? s->pf.async : NULL;

	if (!a)
		return;
	pthread_mutex_lock(&a->lock);
	while (a->busy)
		pthread_cond_wait(&a->cv, &a->lock);
	pthread_mutex_unlock(&a->lock);
}

void pf_stop(et_store *s)
{
	struct pf_async *a = s ? s->pf.async : NULL;

	if (!a)
		return;
	pthread_mutex_lock(&a->lock);
	a->stop = true;
	pthread_cond_broadcast(&a->cv);
	pthread_mutex_unlock(&a->lock);
	pthread_join(a->thread, NULL);
	pthread_cond_destroy(&a->cv);
	pthread_mutex_destroy(&a->lock);
	mem_free(a->b, a->bcap * sizeof(*a->b), 0);
	mem_free(a->ids, a->icap * sizeof(*a->ids), 0);
	mem_free(a, sizeof(*a), 0);
	s->pf.async = NULL;
}

static int pf_start(et_store *s)
{
	struct pf_async *a = mem_alloc(sizeof(*a), 0);

	if (!a)
		return -ENOMEM;
	pthread_mutex_init(&a->lock, NULL);
	pthread_cond_init(&a->cv, NULL);
	s->pf.async = a;
	if (pthread_create(&a->thread, NULL, pf_thread, s)) {
		pthread_cond_destroy(&a->cv);
		pthread_mutex_destroy(&a->lock);
		mem_free(a, sizeof(*a), 0);
		s->pf.async = NULL;
		return -EAGAIN;
	}
	return 0;
}

/* Grows *p (cap elements of size) to hold n. */
static int grow_to(void **p, size_t *cap, size_t n, size_t size)
{
	size_t c = *cap ? *cap : 64;
	void *q;

	if (n <= *cap)
		return 0;
	while (c < n)
		c *= 2;
	q = mem_alloc(c * size, 0);
	if (!q)
		return -ENOMEM;
	mem_free(*p, *cap * size, 0);
	*p = q;
	*cap = c;
	return 0;
}

/* Hands a copy of the batch to the prefetch thread (started at the first
 * call); not 0 if it cannot (the caller then does the work itself). The
 * thread is idle (pf_wait ran). */
static int pf_post(et_store *s, const struct et_batch_ids *batch,
		   size_t ntables)
{
	struct pf_async *a;
	size_t nid = 0;
	int ret = 0;

	if (!s->pf.async)
		ret = pf_start(s);
	for (size_t k = 0; k < ntables; k++)
		nid += batch[k].n;
	a = s->pf.async;
	if (!ret)
		ret = grow_to((void **)&a->b, &a->bcap, ntables, sizeof(*a->b));
	if (!ret)
		ret = grow_to((void **)&a->ids, &a->icap, nid, sizeof(*a->ids));
	if (ret)
		return ret;
	nid = 0;
	for (size_t k = 0; k < ntables; k++) {
		a->b[k] = batch[k];
		a->b[k].ids = a->ids + nid;
		if (batch[k].n)
			memcpy(a->ids + nid, batch[k].ids,
			       batch[k].n * sizeof(*a->ids));
		nid += batch[k].n;
	}
	pthread_mutex_lock(&a->lock);
	a->nb = ntables;
	a->busy = true;
	pthread_cond_broadcast(&a->cv);
	pthread_mutex_unlock(&a->lock);
	return 0;
}

int et_prefetch(et_store *s, const struct et_batch_ids *batch, size_t ntables)
{
	int ret = 0;

	api_enter(s); /* the last one ends first */
	if (!s || (ntables && !batch))
		return err_set(-EINVAL, "%s is NULL", !s ? "s" : "batch");
	for (size_t k = 0; k < ntables; k++) {
		struct table *t = table_get(s, batch[k].table);
		char what[40];

		if (!t)
			return err_set(ET_ENOTABLE,
				       "batch[%zu].table %d unknown: the store "
				       "has %u",
				       k, batch[k].table, s->reg.ntables);
		snprintf(what, sizeof(what), "batch[%zu].ids", k);
		ret = ids_check(t, batch[k].table, batch[k].ids, batch[k].n,
				what);
		if (ret)
			return ret;
	}
	if (s->failed || s->lost)
		return ET_EFAILED;
	if (s->cfg.prefetch_thread && !pf_post(s, batch, ntables))
		return 0;
	return pf_run(s, batch, ntables);
}
