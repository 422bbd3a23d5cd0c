/*
 * policy_lru.c - least recently used.
 *
 * A slot's state is the clock at its last access; the victim is the
 * eligible way with the greatest age (now - state, modulo 2^32), the lowest
 * way on a tie, so a set's choice is deterministic.
 */
#include "policy.h"

static void lru_touch(uint32_t *st, uint32_t now)
{
	*st = now;
}

static void lru_insert(uint32_t *st, uint32_t now, uint32_t freq)
{
	(void)freq;
	*st = now;
}

static unsigned lru_victim(const uint32_t *st, unsigned ways, uint64_t eligible,
			   uint32_t now)
{
	unsigned best = 0;
	uint64_t best_key = 0;

	/* The oldest eligible way, the first of equals: the age above the
	 * way's complement, so that one maximum picks both; 0 for the
	 * ineligible (their key is below every eligible one's). */
	for (unsigned w = 0; w < ways; w++) {
		uint64_t key = ((uint64_t)(now - st[w]) << 8 | (255u - w)) + 1;

		key &= -(uint64_t)(eligible >> w & 1);
		if (key > best_key) {
			best_key = key;
			best = w;
		}
	}
	return best;
}

const struct policy_ops policy_lru = {
    .name = "lru",
    .on_hit = lru_touch,
    .on_insert = lru_insert,
    .victim = lru_victim,
};

const struct policy_ops *policy_get(et_policy p)
{
	switch (p) {
	case ET_POLICY_LRU:
		return &policy_lru;
	case ET_POLICY_LFU:
		return &policy_lfu;
	case ET_POLICY_TINYLFU:
		return &policy_tinylfu;
	case ET_POLICY_WTINYLFU:
		return &policy_wtinylfu;
	}
	return NULL;
}

/* A fall of the hit ratio by at least this much (of 65536) and to under
 * half of the last period's is taken for a change of popularity. Periods
 * are a sixteenth of the cache's slots (on the bench's shift trace, a
 * period of all of them missed 5% more at 25% of the distinct rows, the
 * change being seen a batch later), at least DRIFT_MIN_PERIOD lookups so
 * that small caches do not take noise for a change. */
#define DRIFT_MIN_DROP	 (65536 / 10)
#define DRIFT_PERIOD_DIV 16
#define DRIFT_MIN_PERIOD 1024

void policy_drift(struct policy_drift *d, uint64_t hits, uint64_t lookups,
		  uint64_t slots, uint64_t jump)
{
	uint64_t n = lookups - d->lookups, period = slots / DRIFT_PERIOD_DIV;
	uint32_t h;

	if (period < DRIFT_MIN_PERIOD)
		period = DRIFT_MIN_PERIOD;
	if (n < period)
		return;
	h = (uint32_t)(((hits - d->hits) << 16) / n);
	if (d->prev && h < d->prev / 2 && d->prev - h > DRIFT_MIN_DROP) {
		d->warp += jump;
		d->changes++;
	}
	d->prev = h;
	d->hits = hits;
	d->lookups = lookups;
}
