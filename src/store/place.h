/*
 * place.h - where a row goes in the tiers (place.c): the pin epochs that
 * keep a batch's rows resident, the probe of the top tier, and placement
 * with demotion and eviction. Not installed.
 */
#ifndef ET_PLACE_H
#define ET_PLACE_H

#include <stdbool.h>
#include <stdint.h>

#include "cache.h"
#include "registry.h"
#include "scratch.h"

/*
 * The pins and the policies' clock. place.c alone moves the epochs;
 * `now` advances by one for every row an operation looks at, in the
 * probes of resolve.c and prefetch.c as in placement.
 */
struct pins {
	uint64_t now;	 /* access count: the policies' clock */
	uint32_t epoch;	 /* pin epoch of the operation in progress */
	uint32_t bcur;	 /* pin epoch of the last prefetched batch, or 0 */
	uint32_t bprev;	 /* and of the one before it */
	bool placing;	 /* et_prefetch is placing its batch's rows */
	struct sbuf tmp; /* one row: a victim on its way to DDR */
};

/* Sets a batch asks for ahead of probing them. */
#define PROBE_AHEAD 16

/* The pins that hold now: this operation's and the last two batches'. */
static inline struct pinset pins_of(const struct pins *p)
{
	struct pinset ps = {{p->epoch, p->bcur, p->bprev}};

	return ps;
}

/* Step i of a probe of the m rows at uniq, whose sets start at bases[]:
 * asks for the digests of the set PROBE_AHEAD rows on, and for the ways
 * those of the set half that far on match (the row, tag, policy and pin
 * words a hit reads and writes). probe_start asks for the first ones. */
static inline void probe_ask(const struct cache *top, uint32_t t,
			     const uint64_t *uniq, const uint64_t *bases,
			     size_t i, size_t m)
{
	const size_t half = PROBE_AHEAD / 2;

	if (i + PROBE_AHEAD < m)
		cache_prefetch_set(top, bases[i + PROBE_AHEAD]);
	if (i + half < m)
		cache_prefetch_hit(top, bases[i + half], t, uniq[i + half]);
}

/* Hashes each of the m rows at uniq to its set's first slot in bases and
 * asks for what the first probes read. */
static inline void probe_start(const struct cache *top, uint32_t t,
			       const uint64_t *uniq, uint64_t *bases, size_t m)
{
	for (size_t i = 0; i < m; i++)
		bases[i] = cache_set_base(top, t, uniq[i]);
	for (size_t i = 0; i < m && i < PROBE_AHEAD; i++)
		cache_prefetch_set(top, bases[i]);
	for (size_t i = 0; i < m && i < PROBE_AHEAD / 2; i++)
		cache_prefetch_hit(top, bases[i], t, uniq[i]);
}

/* The top-tier slot of each of the m unique rows of table t (the current
 * scratch's uniq) in slots, or CACHE_NONE. Reads the cache only. */
void probe_top(et_store *s, uint32_t t, const struct cache *top, size_t m,
	       uint64_t *slots);
/* The same for the m rows at uniq: reads nothing but top, so that the
 * parts of a batch may be probed on several threads. */
void probe_rows(const struct cache *top, uint32_t t, const uint64_t *uniq,
		size_t m, uint64_t *slots);
/* Pins slot for the operation, unless a live batch pins it already. */
void pin_op(et_store *s, struct cache *c, uint64_t slot);
/* A top-tier hit used by an operation, its ids naming the row n times:
 * counted as a prefetch's hit if one placed it, touched, pinned. */
void hit_use(et_store *s, struct cache *top, uint64_t slot, uint32_t n);
/* Places row of table t in the top tier (see place.c); *where and
 * *slot_out say where it went (K_HBM, K_DDR or K_BYPASS, with
 * K_CONFLICT). */
int place_row(et_store *s, uint32_t t, uint64_t row, const void *src,
	      uint32_t rb, uint64_t dslot, bool dirty, uint32_t pin, uint32_t n,
	      uint8_t *where, uint64_t *slot_out);
/* place_row; with later set, a row whose bytes are not in a cache slot
 * (dslot CACHE_NONE) and that goes to a slot of the top tier or of DDR
 * (*where K_HBM or K_DDR, with or without K_CONFLICT) is placed without
 * its bytes: the caller copies src into the slot before anything reads
 * it. src is read only if the row is dirty and no cache takes it (it is
 * then queued for write-back). */
int place_row_at(et_store *s, uint32_t t, uint64_t row, const void *src,
		 uint32_t rb, uint64_t dslot, bool dirty, uint32_t pin,
		 uint32_t n, bool later, uint8_t *where, uint64_t *slot_out);
void *where_row(struct sclass *cl, uint8_t where, uint64_t slot);
/* Moves to a fresh operation epoch. */
void epoch_next(et_store *s);
/* A prefetched batch begins: its pins and the last batch's hold, older
 * go, and its rows are placed as wanted (always admitted) until
 * pins_batch_end. */
void pins_batch_begin(et_store *s);
void pins_batch_end(et_store *s);
void pins_free(struct pins *p);

#endif
