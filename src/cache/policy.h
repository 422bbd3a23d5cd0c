/*
 * policy.h - replacement policies behind one small ops table.
 *
 * A policy keeps one 32-bit word of state per cache slot and sees one set
 * at a time: it is told of hits and inserts, and asked for a victim among
 * the ways a caller marks eligible (valid and not pinned). It knows nothing
 * of tiers, tables or rows. "now" is a 32-bit access clock the caller
 * advances by one per access; policies compare times modulo 2^32.
 *
 * A policy with frequency admission (halve_ticks != 0) also has the cache
 * keep a count-min sketch of the keys it was asked to place (sketch.h),
 * halved every halve_ticks of its clock. The cache gives on_insert the
 * sketch's estimate for the new row, and when its set is full admits the
 * row only if that estimate beats freq() of the victim; a slot's count
 * goes back into the sketch when the row leaves (policy_tinylfu.c).
 * W-TinyLFU has the sketch too but no refusal: its evict() chooses the
 * victim and moves the set's window row to main when it wins.
 *
 * Pure functions of their arguments; any thread.
 */
#ifndef ET_POLICY_H
#define ET_POLICY_H

#include <stdbool.h>
#include <stdint.h>

#include "embtier.h"

struct policy_ops {
	const char *name;
	/* Whether the policy wants its clock scaled to the cache: advancing
	 * once per (slots / POLICY_SCALE) accesses rather than once per
	 * access, so that its notion of time (LFU's aging) is the same
	 * fraction of a cache turnover in a cache of any size. */
	bool scaled_clock;
	/* The slot whose state is *st was accessed (hit) at now. */
	void (*on_hit)(uint32_t *st, uint32_t now);
	/* The same, for n >= 1 accesses at once (a row an operation's ids
	 * name n times), for a policy that counts them; NULL: as on_hit. */
	void (*on_hits)(uint32_t *st, uint32_t now, uint32_t n);
	/* A row was placed in the slot at now; freq is the sketch's estimate
	 * of how often it was seen lately (0 without a sketch). */
	void (*on_insert)(uint32_t *st, uint32_t now, uint32_t freq);
	/* Index of the way to evict among those whose bit is set in
	 * eligible (never 0), given the states of the set's ways. */
	unsigned (*victim)(const uint32_t *st, unsigned ways, uint64_t eligible,
			   uint32_t now);
	/* Frequency admission: clock ticks between halvings of the counts
	 * (0: none, and freq is NULL); the slot's count now, 0..15. */
	uint32_t halve_ticks;
	uint32_t (*freq)(uint32_t st, uint32_t now);
	/* Admission inside the set (W-TinyLFU): a missed row always goes in
	 * (the cache never refuses it by frequency), and the cache asks
	 * evict() rather than victim() for the way to empty; evict() may
	 * relabel other ways of the set (a window row moving to the main
	 * part). NULL: victim() decides and the set keeps its labels. */
	unsigned (*evict)(uint32_t *st, unsigned ways, uint64_t eligible,
			  uint32_t now);
	/* Ticks the cache moves the policy's clock on when its hit ratio
	 * collapses (policy_drift below); 0: never. */
	uint32_t drift_ticks;
};

/*
 * A change of popularity seen from the hit ratio (policy_lru.c): the
 * cache feeds its cumulative hits and lookups (hits + misses) at each
 * pick; once per period (a sixteenth of its slots, at least
 * DRIFT_MIN_PERIOD lookups) the period's hit ratio is compared with the
 * previous period's, and a fall to under half of it, by more than a tenth,
 * adds jump (accesses) to warp, which the cache adds to its access count
 * before turning it into the policy's clock. Every count the policy keeps
 * then looks as old as it would after that much time: frequencies learnt
 * under the old popularity stop holding the cache against the new.
 */
struct policy_drift {
	uint64_t warp;		/* accesses added to the clock */
	uint64_t hits, lookups; /* at the start of the period */
	uint32_t prev;		/* last period's hit ratio, 1/65536 */
	uint32_t changes;	/* falls seen */
};

void policy_drift(struct policy_drift *d, uint64_t hits, uint64_t lookups,
		  uint64_t slots, uint64_t jump);

#define POLICY_SCALE 1024

extern const struct policy_ops policy_lru;
extern const struct policy_ops policy_lfu;
extern const struct policy_ops policy_tinylfu;
extern const struct policy_ops policy_wtinylfu;

/* The ops of p, or NULL if p is not a policy. */
const struct policy_ops *policy_get(et_policy p);

#endif
