/*
 * scratch.c - the memory an operation works in: growable buffers, the
 * per-table scratch of a batch (struct opscr) and the batch's dedup.
 */
#include <errno.h>
#include <string.h>

#include "hash.h"
#include "mem_host.h"
#include "state.h"

int sbuf_reserve(struct sbuf *b, size_t bytes)
{
	void *p;
	size_t cap;

	if (bytes <= b->cap)
		return 0;
	cap = b->cap ? b->cap : 4096;
	while (cap < bytes)
		cap *= 2;
	p = mem_alloc(cap, 64);
	if (!p)
		return -ENOMEM;
	if (b->p) {
		memcpy(p, b->p, b->cap);
		mem_free(b->p, b->cap, 64);
	}
	b->p = p;
	b->cap = cap;
	return 0;
}

void sbuf_free(struct sbuf *b)
{
	mem_free(b->p, b->cap, 64);
	b->p = NULL;
	b->cap = 0;
}

/* Doubles the capacity *cap (from 8) of the array *p of n elements of
 * size bytes each. */
int array_grow(void **p, uint32_t *cap, uint32_t n, size_t size)
{
	uint32_t ncap = *cap ? *cap * 2 : 8;
	void *np = mem_alloc(ncap * size, 0);

	if (!np)
		return -ENOMEM;
	if (*p) {
		memcpy(np, *p, n * size);
		mem_free(*p, *cap * size, 0);
	}
	*p = np;
	*cap = ncap;
	return 0;
}

void opscr_free(struct opscr *o)
{
	struct sbuf *bufs[] = {
	    &o->uniq,  &o->inv,	  &o->last, &o->ptrs,  &o->kind,   &o->slots,
	    &o->mrows, &o->midx,  &o->mbuf, &o->acc,   &o->bypass, &o->dids,
	    &o->pfl,   &o->draws, &o->drop, &o->dsave, &o->djunk,  &o->wasdirty,
	    &o->later, &o->order, &o->sel,  &o->to};

	for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
		sbuf_free(bufs[i]);
}

int scratch_grow(struct opscr **arr, uint32_t *n, size_t want)
{
	struct opscr *p;

	if (want <= *n)
		return 0;
	if (want > UINT32_MAX)
		return -E2BIG;
	p = mem_alloc(want * sizeof(*p), 0);
	if (!p)
		return -ENOMEM;
	if (*arr) {
		memcpy(p, *arr, *n * sizeof(*p));
		mem_free(*arr, *n * sizeof(*p), 0);
	}
	*arr = p;
	*n = (uint32_t)want;
	return 0;
}

bool scratch_holds(const struct opscr *o, const uint64_t *ids, size_t n)
{
	return o->dn == n && (!n || !memcmp(o->dids.p, ids, n * sizeof(*ids)));
}

/* The slots of dedup's hash for n ids: a power of two, at least 2n. */
size_t dedup_cap(size_t n)
{
	size_t cap = 16;

	while (cap < 2 * n)
		cap *= 2;
	return cap;
}

int dedup_reserve(const et_store *s, struct opscr *o, size_t n)
{
	int ret = sbuf_reserve(&o->dids, n * sizeof(uint64_t));

	if (!ret)
		ret = sbuf_reserve(&o->uniq, n * sizeof(uint64_t));
	if (!ret)
		ret = sbuf_reserve(&o->inv, n * sizeof(uint32_t));
	if (!ret)
		ret = sbuf_reserve(&o->last, n * sizeof(uint32_t));
	if (!ret && s->reg.count_draws)
		ret = sbuf_reserve(&o->draws, n * sizeof(uint32_t));
	return ret;
}

/*
 * Distinct ids of a batch in order of first appearance: uniq[0..m), and
 * for each input i the index inv[i] of its id in uniq, and for each unique
 * the index of its last appearance and, if the store's policies count
 * accesses, how many inputs name it (draws). Open addressing in ht, of
 * dedup_cap(n) entries; o's room is reserved (dedup_reserve). Touches
 * nothing of the store but reads whether it counts draws, so the parts of
 * a batch may be deduplicated on several threads, each with its own ht.
 */
void dedup_into(const et_store *s, struct opscr *o, uint32_t *ht,
		const uint64_t *ids, size_t n)
{
	size_t cap = dedup_cap(n), m = 0;
	uint32_t *inv, *last, *draws = NULL;
	uint64_t *uniq;
	bool pre;

	o->dn = 0;
	o->memo = false;
	o->probed = o->hits_done = false;
	memset(ht, 0, cap * sizeof(*ht));
	uniq = o->uniq.p;
	inv = o->inv.p;
	last = o->last.p;
	o->counted = s->reg.count_draws;
	if (s->reg.count_draws)
		draws = o->draws.p;
	/* the hashes first (inv holds them until the second loop), which
	 * the compiler can pipeline, then the probes */
	pre = cap - 1 <= UINT32_MAX;
	for (size_t i = 0; pre && i < n; i++)
		inv[i] = (uint32_t)(hash_mix(ids[i] + 1) & (cap - 1));
	for (size_t i = 0; i < n; i++) {
		uint64_t id = ids[i];
		size_t h = pre ? inv[i] : hash_mix(id + 1) & (cap - 1);

		while (ht[h] && uniq[ht[h] - 1] != id)
			h = (h + 1) & (cap - 1);
		if (!ht[h]) {
			if (draws)
				draws[m] = 0;
			uniq[m++] = id;
			ht[h] = (uint32_t)m;
		}
		if (draws)
			draws[ht[h] - 1]++;
		inv[i] = ht[h] - 1;
		last[ht[h] - 1] = (uint32_t)i;
	}
	if (n)
		memcpy(o->dids.p, ids, n * sizeof(*ids));
	o->dn = n;
	o->dm = m;
}

int dedup(et_store *s, const uint64_t *ids, size_t n, size_t *m_out)
{
	struct opscr *o = s->sc.o;
	int ret;

	/* The same ids as this scratch's last dedup (a multi-table update
	 * after the gather of its batch): the result stands. */
	if (n && scratch_holds(o, ids, n)) {
		*m_out = o->dm;
		return 0;
	}
	o->dn = 0;
	o->memo = false;
	o->probed = o->hits_done = false;
	/* the hash holds unique index + 1 (0: empty), 4 bytes an entry */
	ret = sbuf_reserve(&s->sc.map, dedup_cap(n) * sizeof(uint32_t));
	if (!ret)
		ret = dedup_reserve(s, o, n);
	if (ret)
		return ret;
	dedup_into(s, o, s->sc.map.p, ids, n);
	*m_out = o->dm;
	return 0;
}

void scratch_use(et_store *s, struct opscr *o)
{
	s->sc.o = o;
}

void scratch_free(struct scratch *sc)
{
	opscr_free(&sc->one);
	for (uint32_t i = 0; i < sc->nmulti; i++)
		opscr_free(&sc->multi[i]);
	mem_free(sc->multi, sc->nmulti * sizeof(*sc->multi), 0);
	sbuf_free(&sc->trow);
	sbuf_free(&sc->map);
	sbuf_free(&sc->tmap);
	sbuf_free(&sc->rds);
}
