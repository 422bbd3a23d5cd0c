/*
 * prefetch.c - et_prefetch (its other half is drain.c): the next batch's
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
#include "workers.h"

/* Rows a prefetch's promotions look ahead: at PF_AHEAD the lines of the
 * row's top-tier set and its DDR copy are asked for, at half that the
 * top tier's likely victim and where in DDR it is likely to go. */
#define PF_AHEAD 8

/*
 * Asks for the cache lines the promotion of row of table t from DDR slot
 * dslot into the top tier will touch, in two stages (see PF_AHEAD): stage 1
 * the top set's policy and pin words and the row's bytes; stage 2, once
 * those are in, the victim the policy will likely choose, its bytes, and
 * the DDR set it will be demoted to. Hints only: a wrong guess costs a
 * cache miss later, nothing else.
 */
static void promote_ahead(const et_store *s, struct cache *top,
			  struct cache *ddr, uint32_t t, uint64_t row,
			  uint64_t dslot, uint32_t rb, int stage)
{
	struct pinset ps = pins_of(&s->pins);
	uint64_t base = cache_set_base(top, t, row), v, vb;

	if (stage == 1) {
		__builtin_prefetch(&top->pstate[base], 1);
		__builtin_prefetch(&top->pin[base]);
		prefetch_bytes(cache_row(ddr, dslot), rb);
		return;
	}
	v = cache_guess(top, t, row, s->pins.now, &ps);
	if (v == CACHE_NONE || !cache_valid(top, v))
		return;
	prefetch_bytes(cache_row(top, v), rb);
	vb = cache_set_base(ddr, cache_slot_table(top, v),
			    cache_slot_row(top, v));
	cache_prefetch_set(ddr, vb);
	__builtin_prefetch(&ddr->pstate[vb], 1);
	__builtin_prefetch(&ddr->pin[vb]);
}

/* One table's part of a prefetch, as its passes go. */
struct pf_part {
	et_store *s;
	uint32_t t;
	struct table *tb;
	struct sclass *cl;
	struct cache *top, *ddr;
	uint8_t top_kind;
	uint32_t rb;
	const uint64_t *uniq; /* the unique rows */
	uint64_t *mrows;      /* rows to read */
	uint64_t *tops;	      /* per unique: its top (or DDR) slot */
	uint32_t *pend;	      /* uniques missing from the top tier */
	uint32_t *pfl;	      /* uniques placed by a prefetch, not used */
	uint8_t *kind;
	uint8_t *wasdirty; /* per unique: dirty when found (direct tops) */
	void **ptrs;
	size_t m, nm, np, npfl;
	bool dirty_known; /* wasdirty filled by the pass of the hits */
};

/* The scratch of a part of m unique rows, and room for the victims its
 * placements may queue (see op_lookup). */
static int pf_reserve(et_store *s, struct pf_part *p)
{
	struct opscr *o = s->sc.o;
	size_t m = p->m;
	int ret;

	ret = sbuf_reserve(&o->mrows, m * sizeof(uint64_t));
	if (!ret)
		ret = sbuf_reserve(&o->slots, m * sizeof(uint64_t));
	if (!ret)
		ret = sbuf_reserve(&o->kind, m);
	if (!ret)
		ret = sbuf_reserve(&o->ptrs, m * sizeof(void *));
	if (!ret)
		ret = sbuf_reserve(&o->midx, m * sizeof(uint32_t));
	if (!ret)
		ret = sbuf_reserve(&o->pfl, m * sizeof(uint32_t));
	if (!ret)
		ret = sbuf_reserve(&o->wasdirty, m);
	if (!ret)
		ret = sbuf_reserve(&o->mbuf, p->rb);
	if (!ret)
		ret = wb_reserve(s, 2 * m);
	if (ret)
		return ret;
	p->uniq = o->uniq.p;
	p->mrows = o->mrows.p;
	p->tops = o->slots.p;
	p->kind = o->kind.p;
	p->pend = o->midx.p;
	p->ptrs = o->ptrs.p;
	p->pfl = o->pfl.p;
	p->wasdirty = o->wasdirty.p;
	return 0;
}

/* Hit i of a part's m unique rows (slots: their top-tier slots) used by
 * a prefetch: touched at access count now and pinned for the batch, the
 * words of hit i + PF_AHEAD asked for (a probe made ahead on another
 * thread left them in that core's cache). Whether a prefetch placed it
 * and no operation used it yet. */
static bool pf_hit(struct cache *top, const uint64_t *slots, size_t i, size_t m,
		   uint64_t now, uint32_t draws, uint32_t pin)
{
	if (i + PF_AHEAD < m && slots[i + PF_AHEAD] != CACHE_NONE)
		cache_prefetch_use(top, slots[i + PF_AHEAD]);
	cache_touch_n(top, slots[i], now, draws);
	cache_pin(top, slots[i], pin);
	return cache_is_pf(top, slots[i]);
}

/* probe_rows on a direct top tier, and what hits_item does for the
 * hits in the same pass: a direct slot is the row's, its tag says
 * whether the row is in, and its hits are neither touched nor pinned.
 * The misses, counted. */
static size_t probe_direct(const struct cache *top, uint32_t t,
			   uint8_t top_kind, struct opscr *o)
{
	const uint64_t *uniq = o->uniq.p, *base = top->tbase + t;
	uint64_t *slots = o->slots.p;
	uint8_t *kind = o->kind.p;
	void **ptrs = o->ptrs.p;
	uint32_t *pfl = o->pfl.p, tag = cache_tag(t);
	uint8_t *wasdirty = o->wasdirty.p;
	size_t misses = 0, npfl = 0;

	o->dirty_cleans = top->cleans;
	for (size_t i = 0; i < o->dm && i < PF_AHEAD; i++)
		__builtin_prefetch(&top->tags[*base + uniq[i]]);
	for (size_t i = 0; i < o->dm; i++) {
		uint64_t slot = *base + uniq[i];
		uint32_t g = top->tags[slot];

		if (i + PF_AHEAD < o->dm)
			__builtin_prefetch(
			    &top->tags[*base + uniq[i + PF_AHEAD]]);
		wasdirty[i] = (g & CACHE_TAG_DIRTY) != 0;
		if ((g & CACHE_TAG_TABLE) != tag) {
			slots[i] = CACHE_NONE;
			misses++;
			continue;
		}
		slots[i] = slot;
		kind[i] = top_kind;
		ptrs[i] = cache_row(top, slot);
		if (g & CACHE_TAG_PF)
			pfl[npfl++] = (uint32_t)i;
	}
	o->npfl_ahead = npfl;
	o->hits_ready = !misses;
	return misses;
}

/* Pass 1 on a direct top tier: probe_direct, then the misses listed in
 * pend and the hits counted (the access count moving as in pass 1). */
static void pf_top_direct(struct pf_part *p)
{
	probe_direct(p->top, p->t, p->top_kind, p->s->sc.o);
	p->dirty_known = true;
	p->npfl = p->s->sc.o->npfl_ahead;
	for (size_t i = 0; i < p->m; i++) {
		if (p->tops[i] == CACHE_NONE) {
			p->top->st.misses++;
			p->kind[i] = 0;
			p->pend[p->np++] = (uint32_t)i;
			continue;
		}
		p->s->pins.now++;
		p->top->st.hits++;
	}
}

/* Pass 1: top-tier hits, touched and pinned for the batch; the rest
 * listed in pend. */
static void pf_top_hits(struct pf_part *p)
{
	et_store *s = p->s;
	struct cache *top = p->top;

	if (s->sc.o->hits_done) { /* every row a hit, used ahead */
		p->dirty_known = s->sc.o->hits_ready; /* probe_direct's */
		s->sc.o->hits_done = s->sc.o->probed = false;
		s->pins.now += p->m;
		top->st.hits += p->m;
		p->npfl = s->sc.o->npfl_ahead;
		return;
	}
	if (!s->sc.o->probed || s->sc.o->probe_changes != top->changes) {
		s->pf.stale += s->sc.o->probed;
		if (top->direct) { /* probed and used in one pass */
			s->sc.o->probed = false;
			pf_top_direct(p);
			return;
		}
		probe_top(s, p->t, top, p->m, p->tops);
	}
	s->sc.o->probed = false;
	for (size_t i = 0; i < p->m; i++) {
		uint64_t slot = p->tops[i];

		if (slot == CACHE_NONE) {
			top->st.misses++;
			p->kind[i] = 0;
			p->pend[p->np++] = (uint32_t)i;
			continue;
		}
		s->pins.now++;
		top->st.hits++;
		p->kind[i] = p->top_kind;
		p->ptrs[i] = cache_row(top, slot);
		if (pf_hit(top, p->tops, i, p->m, s->pins.now,
			   op_draws(s->sc.o, i), s->pins.bcur))
			p->pfl[p->npfl++] = (uint32_t)i; /* not used yet */
	}
}

/* Pass 2 (under an HBM tier): DDR hits, pinned, to be promoted; tops[i]
 * is the DDR slot meanwhile. */
static void pf_ddr_hits(struct pf_part *p)
{
	struct cache *ddr = p->ddr;
	uint64_t *tops = p->tops;
	const uint32_t *pend = p->pend;
	size_t np = p->np;

	for (size_t j = 0; j < np; j++)
		tops[pend[j]] = cache_set_base(ddr, p->t, p->uniq[pend[j]]);
	for (size_t j = 0; j < np && j < PF_AHEAD; j++)
		cache_prefetch_set(ddr, tops[pend[j]]);
	for (size_t j = 0; j < np && j < PF_AHEAD / 2; j++)
		cache_prefetch_hit(ddr, tops[pend[j]], p->t, p->uniq[pend[j]]);
	for (size_t j = 0; j < np; j++) {
		uint32_t i = pend[j];
		uint64_t slot;

		if (j + PF_AHEAD < np)
			cache_prefetch_set(ddr, tops[pend[j + PF_AHEAD]]);
		if (j + PF_AHEAD / 2 < np)
			cache_prefetch_hit(ddr, tops[pend[j + PF_AHEAD / 2]],
					   p->t,
					   p->uniq[pend[j + PF_AHEAD / 2]]);
		slot = cache_lookup_at(ddr, tops[i], p->t, p->uniq[i]);
		tops[i] = slot;
		if (slot == CACHE_NONE) {
			ddr->st.misses++;
			continue;
		}
		ddr->st.hits++;
		cache_pin(ddr, slot, p->s->pins.bcur);
		p->kind[i] = K_DDR;
	}
}

/* Pass 3 for unique i, not a top-tier hit: a DDR hit is promoted; a row
 * queued for write-back or never written is installed; the others are
 * listed to be read. */
static int pf_miss(struct pf_part *p, uint32_t i)
{
	et_store *s = p->s;
	uint64_t row = p->uniq[i];
	void *buf = s->sc.o->mbuf.p;
	uint8_t where;
	int64_t at;
	int ret = 0;

	if (p->kind[i] == K_DDR) {
		uint64_t slot = p->tops[i];

		ret = place_row(s, p->t, row, cache_row(p->ddr, slot), p->rb,
				slot, cache_dirty(p->ddr, slot), s->pins.bcur,
				op_draws(s->sc.o, i), &where, &p->tops[i]);
		if (ret)
			return ret;
		if ((where & ~K_CONFLICT) == K_HBM)
			cache_mark_pf(&p->cl->hbm, p->tops[i]);
		p->kind[i] = where == K_HBM ? K_HBM : 0;
		if (p->kind[i]) {
			p->ptrs[i] = cache_row(p->top, p->tops[i]);
			p->pfl[p->npfl++] = i;
		}
		return 0;
	}
	/* Evicted dirty, perhaps by this very prefetch: the queue has the
	 * truth. Copied out, as placing may grow the queue. */
	at = wb_find(s, p->t, row);
	if (at >= 0) {
		memcpy(buf, wb_row(&s->wb, at), p->rb);
		ret = pf_install(s, p->t, p->uniq[i], buf, true, s->pins.bcur,
				 &p->tops[i]);
	} else if (!tf_row_materialized(p->tb->tf, p->uniq[i])) {
		tf_init_row_raw(p->tb->tf, p->uniq[i], buf);
		p->tb->st.rows_lazy++;
		ret = pf_install(s, p->t, p->uniq[i], buf, false, s->pins.bcur,
				 &p->tops[i]);
	} else {
		p->mrows[p->nm++] = p->uniq[i];
		p->tops[i] = CACHE_NONE;
	}
	if (ret)
		return ret;
	p->kind[i] = p->tops[i] == CACHE_NONE ? 0 : p->top_kind;
	if (p->kind[i]) { /* placed, marked as a prefetch's */
		p->ptrs[i] = cache_row(p->top, p->tops[i]);
		p->pfl[p->npfl++] = i;
	}
	return 0;
}

/* Pass 3, in batch order, asking for the lines each promotion touches
 * PF_AHEAD rows ahead. */
static int pf_misses(struct pf_part *p)
{
	for (size_t j = 0; j < p->np; j++) {
		for (int st = 1; st <= 2; st++) {
			size_t a = j + PF_AHEAD / (size_t)st;

			if (a < p->np && p->kind[p->pend[a]] == K_DDR)
				promote_ahead(p->s, p->top, p->ddr, p->t,
					      p->uniq[p->pend[a]],
					      p->tops[p->pend[a]], p->rb, st);
		}
		int ret = pf_miss(p, p->pend[j]);

		if (ret)
			return ret;
	}
	return 0;
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
	struct pf_part p = {.s = s, .t = t, .tb = &s->reg.tables[t]};
	int ret;

	p.cl = &s->reg.cls[p.tb->cls];
	p.top = top_of(&s->reg, p.cl);
	p.ddr = &p.cl->ddr;
	p.top_kind = s->reg.has_hbm ? K_HBM : K_DDR;
	p.rb = p.tb->g->row_bytes;
	*job = NULL;
	ret = dedup(s, ids, n, &p.m);
	s->sc.o->memo = false;
	if (!ret)
		ret = pf_reserve(s, &p);
	if (ret)
		return ret;
	s->pf.rows += p.m;
	pf_top_hits(&p);
	if (s->reg.has_hbm)
		pf_ddr_hits(&p);
	ret = pf_misses(&p);
	if (ret)
		return ret;
	/* The memo: every row in the top tier, pinned for the batch, and
	 * the ones a prefetch placed and no operation used yet. */
	s->sc.o->m = p.m;
	s->sc.o->nbypass = 0;
	memo_set(s, s->sc.o, t, s->pins.bcur);
	if (s->sc.o->memo) {
		s->sc.o->npfl = p.npfl;
		/* every row a hit when found (a miss placed now is in the
		 * memo too, its wasdirty 0) */
		s->sc.o->memo_dirty = p.dirty_known;
	}
	if (p.nm) {
		struct pl_job *j = pl_job_new(PL_READ, p.tb->tf, t, p.nm, p.rb);

		if (!j)
			return -ENOMEM;
		memcpy(j->rows, p.mrows, p.nm * sizeof(*p.mrows));
		j->epoch = s->pins.bcur;
		s->pf.reads += p.nm;
		*job = j;
	}
	return 0;
}

/*
 * The scratches of the last two prefetched batches are kept, as their pins
 * are: a caller that prefetches batch k + 1 before it runs batch k (the
 * loop the README shows) still finds batch k's dedup and memo. Each
 * prefetch takes the older set for its batch.
 */
static void pf_scratch_turn(et_store *s)
{
	struct opscr *o = s->pf.prev;
	uint32_t n = s->pf.nprev;

	s->pf.prev = s->pf.scr;
	s->pf.nprev = s->pf.nscr;
	s->pf.scr = o;
	s->pf.nscr = n;
}

/*
 * With the store's threads, a prefetch first deduplicates and probes the
 * top tier for every table of the batch at once, a table an item (each
 * with its own slice of the dedup hash), before any table is placed. The
 * placements then go table by table as before, each using its probe if
 * the top tier's changes count says no row came or went since; else (a
 * table before it placed rows) probing again. So the rows found, and
 * everything after, are what probing table by table finds. Memory is
 * reserved first, on the store's thread; the items only read the caches.
 * A prefetch whose tables mostly had to probe again (misses being
 * placed) makes the next ones probe table by table, trying ahead again
 * every PROBE_RETRY prefetches.
 *
 * When every row of every table was found (and no table appears twice),
 * nothing will be placed: the hits are then touched and pinned on the
 * threads too, table k's i-th unique row with the access count the pass
 * table by table gives it (the count before the batch, plus the unique
 * rows of the tables before k, plus i + 1), so policy words, pins and
 * counters come out as that pass leaves them. Each table writes only the
 * words of its own rows' slots. A direct top tier (cache.h) needs none of
 * that: its hits are neither touched nor pinned, so its probe readies
 * them (probe_direct) in the same pass, each row's tag read once.
 */
#define PROBE_RETRY 16

struct pf_ahead {
	et_store *s;
	const struct et_batch_ids *b;
	size_t cap;	    /* u32 entries of a thread's slice of the hash */
	const uint64_t *at; /* hits: the access count before table k's */
};

static void probe_item(void *arg, size_t k, unsigned thread)
{
	const struct pf_ahead *a = arg;
	et_store *s = a->s;
	struct opscr *o = &s->pf.scr[k];
	const struct table *tb = &s->reg.tables[a->b[k].table];
	const struct cache *top = top_of(&s->reg, &s->reg.cls[tb->cls]);

	dedup_into(s, o, (uint32_t *)s->sc.tmap.p + thread * a->cap,
		   a->b[k].ids, a->b[k].n);
	o->probed = true;
	o->probe_changes = top->changes;
	o->hits_ready = false;
	if (top->direct) {
		o->probe_misses =
		    probe_direct(top, (uint32_t)a->b[k].table,
				 s->reg.has_hbm ? K_HBM : K_DDR, o);
		return;
	}
	probe_rows(top, (uint32_t)a->b[k].table, o->uniq.p, o->dm, o->slots.p);
	o->probe_misses = 0;
	for (size_t i = 0; i < o->dm; i++)
		o->probe_misses +=
		    ((const uint64_t *)o->slots.p)[i] == CACHE_NONE;
}

/* What pf_top_hits does for table k's part, every row a hit. */
static void hits_item(void *arg, size_t k, unsigned thread)
{
	const struct pf_ahead *a = arg;
	et_store *s = a->s;
	struct opscr *o = &s->pf.scr[k];
	const struct table *tb = &s->reg.tables[a->b[k].table];
	struct cache *top = top_of(&s->reg, &s->reg.cls[tb->cls]);
	const uint64_t *slots = o->slots.p;
	uint8_t top_kind = s->reg.has_hbm ? K_HBM : K_DDR;
	uint8_t *kind = o->kind.p;
	void **ptrs = o->ptrs.p;
	uint32_t *pfl = o->pfl.p;
	size_t npfl = 0;

	(void)thread;
	if (o->hits_ready) { /* probe_direct did it */
		o->hits_done = true;
		return;
	}
	for (size_t i = 0; i < o->dm; i++) {
		kind[i] = top_kind;
		ptrs[i] = cache_row(top, slots[i]);
		if (pf_hit(top, slots, i, o->dm, a->at[k] + i + 1,
			   op_draws(o, i), s->pins.bcur))
			pfl[npfl++] = (uint32_t)i;
	}
	o->npfl_ahead = npfl;
	o->hits_done = true;
}

/* After the probes ahead: if every table's rows were all found and no
 * table is twice in the batch, their hits used on the threads too. */
static void pf_hits_ahead(et_store *s, struct pf_ahead *a, size_t nt)
{
	uint64_t *at;
	uint8_t *seen;

	for (size_t k = 0; k < nt; k++)
		if (s->pf.scr[k].probe_misses)
			return;
	if (sbuf_reserve(&s->sc.map,
			 s->reg.ntables + 7 + (nt + 1) * sizeof(*at)))
		return;
	seen = s->sc.map.p;
	at = (uint64_t *)(void *)((char *)s->sc.map.p +
				  ((s->reg.ntables + 7) & ~(size_t)7));
	memset(seen, 0, s->reg.ntables);
	at[0] = s->pins.now;
	for (size_t k = 0; k < nt; k++) {
		struct opscr *o = &s->pf.scr[k];

		if (seen[a->b[k].table]++)
			return;
		at[k + 1] = at[k] + o->dm;
	}
	a->at = at;
	workers_run(s->wk, nt, hits_item, a);
}

static void pf_probe_all(et_store *s, const struct et_batch_ids *b, size_t nt)
{
	struct pf_ahead a = {s, b, 0, NULL};
	unsigned threads = s->cfg.threads;

	for (size_t k = 0; k < nt; k++)
		s->pf.scr[k].probed = s->pf.scr[k].hits_done = false;
	if (!s->wk || nt < 2)
		return;
	if (s->pf.ahead && 2 * s->pf.stale > s->pf.ahead &&
	    ++s->pf.skips % PROBE_RETRY)
		return;
	s->pf.ahead = s->pf.stale = 0;
	for (size_t k = 0; k < nt; k++) {
		struct opscr *o = &s->pf.scr[k];

		if (dedup_cap(b[k].n) > a.cap)
			a.cap = dedup_cap(b[k].n);
		if (dedup_reserve(s, o, b[k].n) ||
		    sbuf_reserve(&o->slots, b[k].n * sizeof(uint64_t)) ||
		    sbuf_reserve(&o->kind, b[k].n) ||
		    sbuf_reserve(&o->ptrs, b[k].n * sizeof(void *)) ||
		    sbuf_reserve(&o->pfl, b[k].n * sizeof(uint32_t)) ||
		    sbuf_reserve(&o->wasdirty, b[k].n))
			return; /* table by table: it fails there */
	}
	if (sbuf_reserve(&s->sc.tmap, threads * a.cap * sizeof(uint32_t)))
		return;
	workers_run(s->wk, nt, probe_item, &a);
	s->pf.ahead = (uint32_t)nt;
	pf_hits_ahead(s, &a, nt);
}

/* The work of et_prefetch on a checked batch: on the caller's thread, or
 * on the prefetch thread. */
static int pf_run(et_store *s, const struct et_batch_ids *batch, size_t ntables)
{
	struct pl_job *jobs = NULL, **tail = &jobs, *wjobs = NULL, *j;
	uint64_t t0, t1, w0;
	int ret;

	pf_scratch_turn(s);
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
	pf_probe_all(s, batch, ntables);
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
