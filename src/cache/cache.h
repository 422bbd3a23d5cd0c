/*
 * cache.h - a set-associative slot cache of rows; the HBM and the DDR tier
 * are both instances.
 *
 * Layout: the set of a key (table, row) is chosen by hashing the pair
 * (key.h); each set has `ways` slots. Metadata lives in five compact
 * arrays apart from the row data. A lookup reads the set's digests (one
 * byte a way: one cache line for up to 64 ways), then the row and tag of
 * each way whose digest matches (almost always the key's own way, or
 * none), and touches row data only on a hit. Per slot:
 *
 *   fps    [nsets * ways] u8    the key's digest, 1..255 (0: empty)
 *   keys   [nsets * ways] u64   the row, any u64 (valid if its tag is)
 *   tags   [nsets * ways] u32   table + 1 (bits 0-29; 0 = empty)
 *                               | PF << 30 | DIRTY << 31
 *   pstate [nsets * ways] u32   the policy's word
 *   pin    [nsets * ways] u32   epoch of the batch that pinned it
 *   data   [nsets * ways] slot_bytes each, from the tier's memory
 *
 * The digest is 8 bits of the same hash that picks the set (bits the set
 * choice hardly uses), so a way of another key matches with odds 1/255; a
 * probe with 32 ways reads about 3 lines where scanning the rows and tags
 * read 6, and a placement finds an empty way in the same line.
 *
 * All slots of one instance have one size: the store keeps one instance
 * per size class of rows in each tier (see struct sclass in registry.h).
 *
 * Direct instances (cache_init_direct): when an instance has a slot for
 * every row of its tables, row r of table t lives in slot tbase[t] + r,
 * one way a set, the tables one after another in the order they were
 * added (cache_direct_add). A key has one place, so a probe reads its tag
 * alone, nothing is ever evicted (a hit keeps no policy word or pin up to
 * date: cache_touch and cache_pin do nothing there), and the rows lie at
 * the front of the instance's memory. Fills, removals and dirty bits are
 * as in any instance.
 *
 * 21 bytes of metadata a slot (ET_SLOT_META_BYTES); a policy with
 * frequency admission adds one sketch per instance (2 bytes a column, as
 * many columns as slots rounded up to a power of two). A slot is pinned while
 * its pin word equals one of the (non-zero) pin epochs the caller passes
 * in; moving on to new epochs unpins everything at once, with no cleanup
 * pass.
 *
 * The cache knows nothing of tiers or files: the store moves rows between
 * instances and decides what a dirty victim means. One thread at a time.
 */
#ifndef ET_CACHE_H
#define ET_CACHE_H

#include <stdbool.h>
#include <stdint.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "hash.h"
#include "key.h"
#include "lookahead.h"
#include "policy.h"
#include "sketch.h"

#define CACHE_NONE   UINT64_MAX
#define CACHE_REJECT (UINT64_MAX - 1) /* cache_pick: not admitted */

/* Where a cache's row data lives (host memory, simulated or real HBM). */
struct mem_tier {
	const char *name;
	void *(*alloc)(size_t bytes);
	void (*free)(void *p, size_t bytes);
};

extern const struct mem_tier mem_tier_host;
extern const struct mem_tier mem_tier_hbm_sim;
const struct mem_tier *mem_tier_hbm_cuda(void); /* NULL if not built */

struct cache_stats {
	uint64_t hits, misses, inserts, evictions, bytes_in, bytes_out;
};

struct cache {
	const struct policy_ops *pol;
	const struct mem_tier *mem;
	uint32_t ways;
	uint32_t slot_bytes;
	uint64_t wmul; /* ceil(2^64 / ways): slot / ways as a multiply */
	uint64_t nsets;
	bool direct;	 /* one slot a row (cache_init_direct) */
	uint64_t *tbase; /* direct: table t's first slot (UINT64_MAX: none) */
	uint32_t ntb;	 /* direct: entries of tbase */
	uint64_t dnext;	 /* direct: the first slot no table has */
	uint8_t *fps;	 /* digests (0: empty), CACHE_FP_PAD bytes past */
	uint64_t *keys;	 /* rows */
	uint32_t *tags;	 /* table + 1 and flags (key.h) */
	uint32_t *pstate;
	uint32_t *pin;
	char *data;
	uint32_t clock_div; /* the policy's clock: accesses / clock_div */
	uint64_t used;	    /* valid slots */
	uint64_t dirty;	    /* dirty slots */
	uint64_t row_bytes; /* bytes of the rows in valid slots, as stored */
	uint64_t changes;   /* fills and removals: what a probe finds moved */
	uint64_t cleans;    /* dirty bits cleared (cache_clean, removals) */
	struct sketch sk;   /* frequency policies: recent counts (else empty) */
	const struct lookahead *la; /* the store's window, or NULL */
	uint64_t last_now;	    /* the access count at the last pick */
	struct policy_drift drift;  /* its warp moves the policy's clock */
	struct cache_stats st;
};

/* The most a policy's count-min sketch takes a slot (frequency policies:
 * 2 columns a slot, rounded up to a power of two, of 2 bytes). */
#define CACHE_SKETCH_BYTES 8

/* What one slot of slot_bytes costs under pol: the row, its metadata and,
 * for a frequency policy, its share of the sketch. */
static inline uint64_t cache_slot_cost(uint32_t slot_bytes,
				       const struct policy_ops *pol)
{
	return (uint64_t)slot_bytes + ET_SLOT_META_BYTES +
	       (pol && pol->halve_ticks ? CACHE_SKETCH_BYTES : 0);
}

/* Sizes the cache to fit bytes (metadata and sketch included). Returns ET_ECAPACITY
 * if not even one set fits, ET_ECONFIG for ways outside 1..64 or no slot
 * size, -ENOMEM if memory runs out. */
int cache_init(struct cache *c, uint64_t bytes, uint32_t ways,
	       uint32_t slot_bytes, const struct policy_ops *pol,
	       const struct mem_tier *mem);
/* A direct instance of `slots` slots (one way a set), holding no table
 * yet. */
int cache_init_direct(struct cache *c, uint64_t slots, uint32_t slot_bytes,
		      const struct policy_ops *pol, const struct mem_tier *mem);
/* Gives table t of `rows` rows the next rows slots of a direct instance:
 * ET_ECAPACITY if they are not there, -ENOMEM; nothing changed then. */
int cache_direct_add(struct cache *c, uint32_t t, uint64_t rows);
void cache_free(struct cache *c);

static inline uint64_t cache_slots(const struct cache *c)
{
	return c->nsets * c->ways;
}

/* Bytes the digest array holds past its last set, so that a set's
 * digests are read 16 at a time. */
#define CACHE_FP_PAD 64

/* Slot holding row of table t, or CACHE_NONE. Does not touch the
 * policy. */
uint64_t cache_lookup(const struct cache *c, uint32_t t, uint64_t row);

/* The set of (t, row) in an instance that is not direct: multiply-shift
 * maps the hash onto [0, nsets). */
static inline uint64_t cache_set_of(const struct cache *c, uint32_t t,
				    uint64_t row)
{
	uint64_t h = hash_mix(cache_hkey(t, row));

	return (uint64_t)(((unsigned __int128)h * c->nsets) >> 64);
}

/* The first slot of the set of (t, row): multiply-shift maps the hash
 * onto [0, nsets) without a division (a direct instance: its slot). */
static inline uint64_t cache_set_base(const struct cache *c, uint32_t t,
				      uint64_t row)
{
	if (c->direct)
		return c->tbase[t] + row;
	return cache_set_of(c, t, row) * c->ways;
}

/* The digest of (t, row): the hash's low byte (the set comes from its
 * high bits), 0 made 1, as 0 marks an empty way. */
static inline uint8_t cache_digest(uint32_t t, uint64_t row)
{
	uint8_t d = (uint8_t)hash_mix(cache_hkey(t, row));

	return d ? d : 1;
}

/* The ways of the set at base whose digest is d, as a bit mask (d = 0:
 * the empty ways). */
static inline uint64_t cache_match(const struct cache *c, uint64_t base,
				   uint8_t d)
{
	const uint8_t *f = c->fps + base;
	uint64_t m = 0;

#ifdef __SSE2__
	__m128i x = _mm_set1_epi8((char)d);

	for (uint32_t w = 0; w < c->ways; w += 16) {
		__m128i v = _mm_loadu_si128((const __m128i *)(f + w));

		m |= (uint64_t)(uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(v, x))
		     << w;
	}
	if (c->ways < 64)
		m &= (1ULL << c->ways) - 1;
#else
	for (uint32_t w = 0; w < c->ways; w++)
		m |= (uint64_t)(f[w] == d) << w;
#endif
	return m;
}

/* cache_lookup in the set starting at base (cache_set_base(c, t, row)): a
 * batch hashes its keys and asks for their sets first, then probes. Only
 * the ways whose digest matches are compared: the row, then the tag (an
 * empty way's digest matches no key). */
static inline uint64_t cache_lookup_at(const struct cache *c, uint64_t base,
				       uint32_t t, uint64_t row)
{
	uint64_t m;
	uint32_t tag = cache_tag(t);

	if (c->direct) /* the slot is the key's alone */
		return (c->tags[base] & CACHE_TAG_TABLE) == tag ? base
								: CACHE_NONE;
	m = cache_match(c, base, cache_digest(t, row));
	for (; m; m &= m - 1) {
		uint64_t slot = base + (uint64_t)__builtin_ctzll(m);

		if (c->keys[slot] == row &&
		    (c->tags[slot] & CACHE_TAG_TABLE) == tag)
			return slot;
	}
	return CACHE_NONE;
}

/* Asks for the cache lines of the set starting at base that a probe reads
 * first: its digests. */
static inline void cache_prefetch_set(const struct cache *c, uint64_t base)
{
	const char *f = (const char *)(c->fps + base);

	if (c->direct) { /* its tag */
		__builtin_prefetch(&c->tags[base]);
		return;
	}
	__builtin_prefetch(f);
	if (((uintptr_t)f & 63) + c->ways > 64)
		__builtin_prefetch(f + 63);
}

/* Once the set's digests are in (cache_prefetch_set), asks for what a
 * probe of (t, row) reads next and a hit then writes: the row, tag,
 * policy and pin words of each way whose digest matches. */
static inline void cache_prefetch_hit(const struct cache *c, uint64_t base,
				      uint32_t t, uint64_t row)
{
	if (c->direct) /* its tag, asked for by cache_prefetch_set, is all */
		return;
	for (uint64_t m = cache_match(c, base, cache_digest(t, row)); m;
	     m &= m - 1) {
		uint64_t slot = base + (uint64_t)__builtin_ctzll(m);

		__builtin_prefetch(&c->keys[slot]);
		__builtin_prefetch(&c->tags[slot]);
		__builtin_prefetch(&c->pstate[slot], 1);
		__builtin_prefetch(&c->pin[slot], 1);
	}
}

/* Asks for what placing a row in the set starting at base reads: its
 * digests (a probe's, and where the empty ways are), its pins and policy
 * words (a full set's victim) and its tags. */
static inline void cache_prefetch_place(const struct cache *c, uint64_t base)
{
	const char *p = (const char *)(c->pin + base);
	const char *q = (const char *)(c->pstate + base);
	const char *g = (const char *)(c->tags + base);

	cache_prefetch_set(c, base);
	for (uint32_t off = 0; off < c->ways * 4u; off += 64) {
		__builtin_prefetch(p + off, 1);
		__builtin_prefetch(q + off, 1);
		__builtin_prefetch(g + off, 1);
	}
}

/* A slot's row bytes. The data is laid out way by way (way w of every
 * set, then way w + 1), not set by set: a set's first empty way is the
 * one filled, so a tier holding fewer rows than its slots keeps them in
 * the front of its memory, and a gather over them touches fewer pages
 * (and TLB entries) than the whole tier. */
static inline void *cache_row(const struct cache *c, uint64_t slot)
{
	uint64_t set =
	    c->ways == 1
		? slot
		: (uint64_t)(((unsigned __int128)slot * c->wmul) >> 64);
	uint64_t way = slot - set * c->ways;

	return c->data + (way * c->nsets + set) * c->slot_bytes;
}

static inline bool cache_valid(const struct cache *c, uint64_t slot)
{
	return (c->tags[slot] & CACHE_TAG_TABLE) != 0;
}

/* The table and the row of a valid slot. */
static inline uint32_t cache_slot_table(const struct cache *c, uint64_t slot)
{
	return cache_tag_table(c->tags[slot]);
}

static inline uint64_t cache_slot_row(const struct cache *c, uint64_t slot)
{
	return c->keys[slot];
}

/* Whether slot holds row of table t (a direct slot holds its own key or
 * nothing: the tag tells). */
static inline bool cache_holds(const struct cache *c, uint64_t slot, uint32_t t,
			       uint64_t row)
{
	return (c->direct || c->keys[slot] == row) &&
	       (c->tags[slot] & CACHE_TAG_TABLE) == cache_tag(t);
}

/* Asks for what cache_holds reads of slot and a hit then writes. */
static inline void cache_prefetch_use(const struct cache *c, uint64_t slot)
{
	__builtin_prefetch(&c->tags[slot]);
	if (c->direct)
		return;
	__builtin_prefetch(&c->keys[slot]);
	__builtin_prefetch(&c->pstate[slot], 1);
	__builtin_prefetch(&c->pin[slot], 1);
}

static inline bool cache_dirty(const struct cache *c, uint64_t slot)
{
	return (c->tags[slot] & CACHE_TAG_DIRTY) != 0;
}

/* The epochs whose pins hold: the operation's and two batches'. */
struct pinset {
	uint32_t e[3];
};

static inline bool cache_pinned(const struct cache *c, uint64_t slot,
				const struct pinset *ps)
{
	uint32_t p = c->pin[slot];

	return p && (p == ps->e[0] || p == ps->e[1] || p == ps->e[2]);
}

/* The policy's clock at access count now. */
static inline uint32_t cache_clock(const struct cache *c, uint64_t now)
{
	return (uint32_t)((now + c->drift.warp) / c->clock_div);
}

/* The policy's word of a hit slot (a direct instance, which never
 * chooses a victim, keeps none up to date; nor its pins). */
static inline void cache_touch(struct cache *c, uint64_t slot, uint64_t now)
{
	if (c->direct)
		return;
	c->pol->on_hit(&c->pstate[slot], cache_clock(c, now));
}

/* The slot was accessed n >= 1 times at once (its row named n times by
 * one operation's ids): a policy that counts accesses counts n. */
static inline void cache_touch_n(struct cache *c, uint64_t slot, uint64_t now,
				 uint32_t n)
{
	if (c->direct)
		return;
	if (n > 1 && c->pol->on_hits)
		c->pol->on_hits(&c->pstate[slot], cache_clock(c, now), n);
	else
		c->pol->on_hit(&c->pstate[slot], cache_clock(c, now));
}

static inline void cache_pin(struct cache *c, uint64_t slot, uint32_t epoch)
{
	if (c->direct)
		return;
	c->pin[slot] = epoch;
}

void cache_set_dirty(struct cache *c, uint64_t slot);

/* The row of slot is home: its dirty bit is cleared. */
static inline void cache_clean(struct cache *c, uint64_t slot)
{
	if (c->tags[slot] & CACHE_TAG_DIRTY) {
		c->tags[slot] &= ~CACHE_TAG_DIRTY;
		c->dirty--;
		c->cleans++;
	}
}

/* Marks slot as placed by a prefetch and not used yet. */
static inline void cache_mark_pf(struct cache *c, uint64_t slot)
{
	c->tags[slot] |= CACHE_TAG_PF;
}

/* Whether slot was placed by a prefetch and not used since. */
static inline bool cache_is_pf(const struct cache *c, uint64_t slot)
{
	return (c->tags[slot] & CACHE_TAG_PF) != 0;
}

/* cache_is_pf, and the mark cleared: the row is used now. A hit on a
 * row with no mark writes nothing (its tag's line stays clean). */
static inline bool cache_take_pf(struct cache *c, uint64_t slot)
{
	if (!cache_is_pf(c, slot))
		return false;
	c->tags[slot] &= ~CACHE_TAG_PF;
	return true;
}

/*
 * A slot for row of table t (the key) in its set: a free one if any, else
 * a victim among slots not pinned by ps. CACHE_NONE if every way is
 * pinned. The caller moves the victim out (if valid) and then calls
 * cache_fill(); it changes nothing else but the policy's sketch (it counts
 * the key as seen).
 *
 * The victim: with a lookahead window (c->la active), the ways whose rows
 * the window does not use are the policy's to choose from; if the window
 * uses them all, the one used last in it goes (the policy breaking ties).
 * If admit is set, the row may be refused (CACHE_REJECT, the caller keeps
 * it out of the cache): by the window, when the victim is used in it
 * before key (or key is not); by frequency admission, when the window
 * says nothing of either and the policy's victim was seen as often (not
 * a policy with evict(): W-TinyLFU takes every row into its window and
 * admits by frequency inside the set, relabelling ways as it picks).
 */
uint64_t cache_pick_n(struct cache *c, uint32_t t, uint64_t row, uint64_t now,
		      const struct pinset *ps, bool admit, uint32_t n);

/* cache_pick_n for a key asked for once (cache_pick_n: n times at once,
 * the sketch counting n sightings). */
static inline uint64_t cache_pick(struct cache *c, uint32_t t, uint64_t row,
				  uint64_t now, const struct pinset *ps,
				  bool admit)
{
	return cache_pick_n(c, t, row, now, ps, admit, 1);
}

/*
 * The slot cache_pick would most likely choose for (t, row) now, reading the
 * set only: a hint for asking for the cache lines a placement will touch,
 * never acted on. CACHE_NONE if it cannot tell cheaply (a lookahead
 * window, a policy that relabels ways) or every way is pinned.
 */
uint64_t cache_guess(const struct cache *c, uint32_t t, uint64_t row,
		     uint64_t now, const struct pinset *ps);

/* Places row of table t in slot, which must be empty (the caller moves a
 * victim out and removes it first), and copies row_bytes of src into it
 * (src NULL: the caller copies them before anything reads the slot). The
 * prefetch flag starts clear (cache_mark_pf). */
void cache_fill(struct cache *c, uint64_t slot, uint32_t t, uint64_t row,
		bool dirty, const void *src, uint32_t row_bytes, uint64_t now);

/* Empties slot, whose row has row_bytes (as given to cache_fill). */
void cache_remove(struct cache *c, uint64_t slot, uint32_t row_bytes);

/*
 * Placement in one set alone, for placements of rows in disjoint sets on
 * several threads at once (resolve.c's set order): the caller makes sure
 * the instance has no sketch, no drift of its clock and no lookahead
 * window (its victims depend on their own set alone). Nothing outside the
 * set is written; what cache_pick_n, cache_remove and cache_fill would
 * add to the instance's counters goes into a cache_delta, added to it by
 * cache_delta_apply once the threads are done.
 */
struct cache_delta {
	int64_t used, dirty, row_bytes;
	uint64_t changes, cleans, inserts, evictions, bytes_in, bytes_out;
};

/* cache_pick_n's slot for (t, row) at policy clock `clock` (cache_clock),
 * admitting every row: a free way, else the policy's victim among the
 * ways ps does not pin; CACHE_NONE if every way is pinned. */
uint64_t cache_pick_set(const struct cache *c, uint32_t t, uint64_t row,
			const struct pinset *ps, uint32_t clock);
/* cache_remove of slot's row (if any, counted as an eviction; its size
 * vrb), then cache_fill of (t, row) without bytes (the caller copies rb
 * of them in), pinned with pin; the counters go to d. */
static inline void cache_replace(struct cache *c, uint64_t slot, uint32_t vrb,
				 uint32_t t, uint64_t row, bool dirty,
				 uint32_t rb, uint32_t clock, uint32_t pin,
				 struct cache_delta *d)
{
	if (cache_valid(c, slot)) { /* an eviction; cache_remove's counters */
		d->evictions++;
		d->bytes_out += vrb;
		if (c->tags[slot] & CACHE_TAG_DIRTY) {
			d->dirty--;
			d->cleans++;
		}
		d->changes++;
		d->used--;
		d->row_bytes -= vrb;
	}
	d->changes++; /* cache_fill's */
	c->fps[slot] = cache_digest(t, row);
	c->keys[slot] = row;
	c->tags[slot] = cache_tag(t) | (dirty ? CACHE_TAG_DIRTY : 0);
	d->used++;
	d->row_bytes += rb;
	d->dirty += dirty;
	c->pol->on_insert(&c->pstate[slot], clock, 0);
	d->inserts++;
	d->bytes_in += rb;
	cache_pin(c, slot, pin);
}
/* Adds d to c's counters. */
void cache_delta_apply(struct cache *c, const struct cache_delta *d);

/* Clears every pin (after the epoch counter wraps). */
void cache_unpin_all(struct cache *c);

#endif
