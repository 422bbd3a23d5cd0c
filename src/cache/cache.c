/*
 * cache.c - the set-associative slot cache (see cache.h for the layout).
 *
 * Mechanism only: finding a key's set and way, choosing a slot for a new
 * key with the policy, and filling or emptying slots. What a victim means
 * (demotion to a lower tier, write-back) is the store's business.
 */
#include <errno.h>
#include <string.h>

#include "cache.h"
#include "embtier.h"
#include "hash.h"
#include "mem_host.h"

/* Sketch columns per slot (rounded up to a power of two): fewer make the
 * counts of rows that share counters collide more (on Zipf 1.15 at 12.5%
 * of the distinct rows, 1 column a slot missed 3% more than 4). */
#define SKETCH_COLS_PER_SLOT 2

/* Arrays of 2 MiB or more come from mem_alloc_huge: a tier's rows are
 * spread over all of it, and with 4 KiB pages nearly every random row
 * would cost a TLB miss and a page walk. */
#define HUGE_BYTES ((size_t)2 << 20)

static void *big_alloc(size_t n)
{
	return n < HUGE_BYTES ? mem_alloc(n, 64) : mem_alloc_huge(n);
}

static void big_free(void *p, size_t n)
{
	if (n < HUGE_BYTES)
		mem_free(p, n, 64);
	else
		mem_free_huge(p, n);
}

static void *host_alloc(size_t n)
{
	return big_alloc(n);
}

static void host_free(void *p, size_t n)
{
	big_free(p, n);
}

const struct mem_tier mem_tier_host = {
    .name = "ddr",
    .alloc = host_alloc,
    .free = host_free,
};

int cache_init(struct cache *c, uint64_t bytes, uint32_t ways,
	       uint32_t slot_bytes, const struct policy_ops *pol,
	       const struct mem_tier *mem)
{
	uint64_t per = cache_slot_cost(slot_bytes, pol);
	uint64_t n;

	memset(c, 0, sizeof(*c));
	if (!ways || ways > 64 || !slot_bytes || !pol || !mem)
		return ET_ECONFIG;
	c->nsets = bytes / per / ways;
	if (c->nsets == 0)
		return ET_ECAPACITY;
	c->ways = ways;
	c->wmul = ways > 1 ? UINT64_MAX / ways + 1 : 0;
	c->slot_bytes = slot_bytes;
	c->pol = pol;
	c->mem = mem;
	n = cache_slots(c);
	c->clock_div = 1;
	if (pol->scaled_clock && n / POLICY_SCALE > 1) /* else unscaled */
		c->clock_div = (uint32_t)(n / POLICY_SCALE);
	c->fps = big_alloc(n + CACHE_FP_PAD); /* zeroed: all empty */
	c->keys = big_alloc(n * sizeof(*c->keys));
	c->tags = big_alloc(n * sizeof(*c->tags)); /* zeroed: all empty */
	c->pstate = big_alloc(n * sizeof(*c->pstate));
	c->pin = big_alloc(n * sizeof(*c->pin));
	c->data = mem->alloc(n * slot_bytes);
	if (pol->halve_ticks &&
	    sketch_init(&c->sk, n * SKETCH_COLS_PER_SLOT, 0)) {
		cache_free(c);
		return -ENOMEM;
	}
	if (!c->fps || !c->keys || !c->tags || !c->pstate || !c->pin ||
	    !c->data) {
		cache_free(c);
		return -ENOMEM;
	}
	return 0;
}

int cache_init_direct(struct cache *c, uint64_t slots, uint32_t slot_bytes,
		      const struct policy_ops *pol, const struct mem_tier *mem)
{
	int ret;

	if (!slots)
		return ET_ECONFIG;
	ret = cache_init(c, slots * cache_slot_cost(slot_bytes, pol), 1,
			 slot_bytes, pol, mem);
	if (!ret)
		c->direct = true;
	return ret;
}

int cache_direct_add(struct cache *c, uint32_t t, uint64_t rows)
{
	if (!c->direct || rows > c->nsets - c->dnext)
		return ET_ECAPACITY;
	if (t >= c->ntb) {
		uint32_t n = t + 1 > c->ntb * 2 ? t + 1 : c->ntb * 2;
		uint64_t *b = mem_alloc(n * sizeof(*b), 0);

		if (!b)
			return -ENOMEM;
		for (uint32_t i = 0; i < n; i++)
			b[i] = i < c->ntb ? c->tbase[i] : UINT64_MAX;
		if (c->tbase)
			mem_free(c->tbase, c->ntb * sizeof(*c->tbase), 0);
		c->tbase = b;
		c->ntb = n;
	}
	c->tbase[t] = c->dnext;
	c->dnext += rows;
	return 0;
}

void cache_free(struct cache *c)
{
	uint64_t n = cache_slots(c);

	if (c->tbase)
		mem_free(c->tbase, c->ntb * sizeof(*c->tbase), 0);
	if (c->fps)
		big_free(c->fps, n + CACHE_FP_PAD);
	big_free(c->keys, n * sizeof(*c->keys));
	big_free(c->tags, n * sizeof(*c->tags));
	big_free(c->pstate, n * sizeof(*c->pstate));
	big_free(c->pin, n * sizeof(*c->pin));
	if (c->data)
		c->mem->free(c->data, n * c->slot_bytes);
	sketch_free(&c->sk);
	memset(c, 0, sizeof(*c));
}

uint64_t cache_lookup(const struct cache *c, uint32_t t, uint64_t row)
{
	return cache_lookup_at(c, cache_set_base(c, t, row), t, row);
}

/* The policy's victim among eligible ways of the set at base; a policy
 * that admits inside the set may relabel its ways as it chooses. */
static unsigned policy_victim(struct cache *c, uint64_t base, uint64_t eligible,
			      uint32_t clock)
{
	if (c->pol->evict)
		return c->pol->evict(c->pstate + base, c->ways, eligible,
				     clock);
	return c->pol->victim(c->pstate + base, c->ways, eligible, clock);
}

/* The way among eligible whose row the window uses last (ties: the
 * policy's choice among them); *next its next use, LA_NONE if one is not
 * used at all (then the policy chooses among every such way). */
static unsigned window_victim(struct cache *c, uint64_t base, uint64_t eligible,
			      uint32_t clock, uint32_t *next)
{
	uint64_t unused = 0, last = 0;
	uint32_t far = 0;

	for (uint32_t w = 0; w < c->ways; w++) {
		uint32_t d;

		if (!(eligible >> w & 1))
			continue;
		d = la_next(c->la, cache_slot_table(c, base + w),
			    c->keys[base + w]);
		if (d == LA_NONE) {
			unused |= 1ULL << w;
		} else if (d > far) {
			far = d;
			last = 1ULL << w;
		} else if (d == far) {
			last |= 1ULL << w;
		}
	}
	*next = unused ? LA_NONE : far;
	return policy_victim(c, base, unused ? unused : last, clock);
}

/* The set at base's first empty way, if any; else CACHE_NONE, and the
 * ways not pinned by ps in *eligible. */
static uint64_t free_or_eligible(const struct cache *c, uint64_t base,
				 const struct pinset *ps, uint64_t *eligible)
{
	const uint32_t *pin = c->pin + base;
	uint64_t empty = cache_match(c, base, 0), pinned = 0;
	uint32_t w = 0;

	if (empty) {
		*eligible = 0;
		return base + (uint64_t)__builtin_ctzll(empty);
	}
#ifdef __SSE2__
	/* Four ways at a time: a way is pinned if its word is one of the
	 * (non-zero) epochs; a zero word matches none. */
	__m128i e0 = _mm_set1_epi32((int)ps->e[0]);
	__m128i e1 = _mm_set1_epi32((int)ps->e[1]);
	__m128i e2 = _mm_set1_epi32((int)ps->e[2]);
	__m128i zero = _mm_setzero_si128();

	for (; w + 4 <= c->ways; w += 4) {
		__m128i p = _mm_loadu_si128((const __m128i *)(pin + w));
		__m128i hit = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi32(p, e0),
							_mm_cmpeq_epi32(p, e1)),
					   _mm_cmpeq_epi32(p, e2));

		hit = _mm_andnot_si128(_mm_cmpeq_epi32(p, zero), hit);
		pinned |=
		    (uint64_t)(uint32_t)_mm_movemask_ps(_mm_castsi128_ps(hit))
		    << w;
	}
#endif
	for (; w < c->ways; w++) {
		uint32_t p = pin[w];

		pinned |= (uint64_t)(p != 0 && (p == ps->e[0] ||
						p == ps->e[1] || p == ps->e[2]))
			  << w;
	}
	*eligible = ~pinned & (c->ways == 64 ? ~0ULL : (1ULL << c->ways) - 1);
	return CACHE_NONE;
}

uint64_t cache_pick_n(struct cache *c, uint32_t t, uint64_t row, uint64_t now,
		      const struct pinset *ps, bool admit, uint32_t n)
{
	uint64_t base = cache_set_base(c, t, row), eligible, slot;
	uint32_t clock = cache_clock(c, now), fkey = 0;
	unsigned v;

	c->last_now = now;
	if (c->pol->drift_ticks) { /* may move the clock on */
		policy_drift(&c->drift, c->st.hits, c->st.hits + c->st.misses,
			     cache_slots(c),
			     (uint64_t)c->pol->drift_ticks * c->clock_div);
		clock = cache_clock(c, now);
	}
	if (c->pol->halve_ticks) {
		sketch_age(&c->sk, clock / c->pol->halve_ticks);
		fkey = sketch_add_n(&c->sk, cache_hkey(t, row), n);
	}
	slot = free_or_eligible(c, base, ps, &eligible);
	if (slot != CACHE_NONE || !eligible)
		return slot;
	if (la_active(c->la)) {
		uint32_t vnext, knext;

		v = window_victim(c, base, eligible, clock, &vnext);
		if (vnext != LA_NONE) {
			/* Every candidate is used within the window: key
			 * goes in only if it is needed before the victim. */
			knext = la_next(c->la, t, row);
			return admit && (knext == LA_NONE || knext > vnext)
				   ? CACHE_REJECT
				   : base + v;
		}
		if (la_next(c->la, t, row) != LA_NONE)
			return base + v; /* needed soon, the victim is not */
	} else {
		v = policy_victim(c, base, eligible, clock);
	}
	if (admit && c->pol->freq && !c->pol->evict &&
	    fkey <= c->pol->freq(c->pstate[base + v], clock))
		return CACHE_REJECT;
	return base + v;
}

uint64_t cache_guess(const struct cache *c, uint32_t t, uint64_t row,
		     uint64_t now, const struct pinset *ps)
{
	if (c->pol->evict || la_active(c->la))
		return CACHE_NONE;
	return cache_pick_set(c, t, row, ps, cache_clock(c, now));
}

uint64_t cache_pick_set(const struct cache *c, uint32_t t, uint64_t row,
			const struct pinset *ps, uint32_t clock)
{
	uint64_t base = cache_set_base(c, t, row), eligible, slot;

	slot = free_or_eligible(c, base, ps, &eligible);
	if (slot != CACHE_NONE || !eligible)
		return slot;
	return base +
	       c->pol->victim(c->pstate + base, c->ways, eligible, clock);
}

void cache_delta_apply(struct cache *c, const struct cache_delta *d)
{
	c->used += (uint64_t)d->used;
	c->dirty += (uint64_t)d->dirty;
	c->row_bytes += (uint64_t)d->row_bytes;
	c->changes += d->changes;
	c->cleans += d->cleans;
	c->st.inserts += d->inserts;
	c->st.evictions += d->evictions;
	c->st.bytes_in += d->bytes_in;
	c->st.bytes_out += d->bytes_out;
}

void cache_set_dirty(struct cache *c, uint64_t slot)
{
	if (!(c->tags[slot] & CACHE_TAG_DIRTY)) {
		c->tags[slot] |= CACHE_TAG_DIRTY;
		c->dirty++;
	}
}

void cache_fill(struct cache *c, uint64_t slot, uint32_t t, uint64_t row,
		bool dirty, const void *src, uint32_t row_bytes, uint64_t now)
{
	c->changes++;
	c->fps[slot] = cache_digest(t, row);
	c->keys[slot] = row;
	c->tags[slot] = cache_tag(t) | (dirty ? CACHE_TAG_DIRTY : 0);
	c->used++;
	c->row_bytes += row_bytes;
	if (dirty)
		c->dirty++;
	c->pol->on_insert(
	    &c->pstate[slot], cache_clock(c, now),
	    c->pol->halve_ticks ? sketch_get(&c->sk, cache_hkey(t, row)) : 0);
	if (src)
		memcpy(cache_row(c, slot), src, row_bytes);
	c->st.inserts++;
	c->st.bytes_in += row_bytes;
}

void cache_remove(struct cache *c, uint64_t slot, uint32_t row_bytes)
{
	if (!cache_valid(c, slot))
		return;
	if (c->tags[slot] & CACHE_TAG_DIRTY) {
		c->dirty--;
		c->cleans++;
	}
	if (c->pol->halve_ticks) /* its count, for when it comes back */
		sketch_raise(
		    &c->sk,
		    cache_hkey(cache_slot_table(c, slot), c->keys[slot]),
		    c->pol->freq(c->pstate[slot], cache_clock(c, c->last_now)));
	c->changes++;
	c->fps[slot] = 0;
	c->keys[slot] = 0;
	c->tags[slot] = 0;
	c->used--;
	c->row_bytes -= row_bytes;
}

void cache_unpin_all(struct cache *c)
{
	memset(c->pin, 0, cache_slots(c) * sizeof(*c->pin));
}
