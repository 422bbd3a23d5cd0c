/*
 * policy_lfu.c - least frequently used, with aging.
 *
 * A slot's 32-bit state packs a logarithmic access counter with the time of
 * its last access, as Redis's LFU does:
 *
 *       31                          8 7          0
 *      +-----------------------------+------------+
 *      |  last access, now >> 8      |  counter   |
 *      |  (24 bits, wraps)           |  (0..255)  |
 *      +-----------------------------+------------+
 *
 * The counter starts at LFU_INIT on insert, so a new row is not the first
 * victim before it has had a chance to be hit again. A hit increments it
 * with probability 1 / ((counter - LFU_INIT) * LFU_LOG_FACTOR + 1): counts
 * grow logarithmically, so 8 bits tell apart a few hits from a million.
 * The probability is drawn from a hash of (now, state), not a random
 * generator, so runs are repeatable.
 *
 * Aging: a counter loses one for every LFU_DECAY_PERIOD units (of 256
 * ticks) since the slot's last access, so rows that were hot long ago
 * cannot hold the cache forever. The cache scales the clock it gives LFU
 * (scaled_clock) so that a tick is slots / POLICY_SCALE accesses: a row
 * not hit for a whole turnover of the cache (as many accesses as it has
 * slots) loses one count, whatever the cache's size. Unscaled, a big cache's
 * hot rows would decay below a fresh insert long before their next hit, and LFU
 * would act as LRU. The victim is the eligible way with the lowest decayed
 * counter; ties go to the least recently used, then the lowest way.
 */
#include "hash.h"
#include "policy.h"

#define LFU_INIT	 5
#define LFU_LOG_FACTOR	 10
#define LFU_DECAY_PERIOD 4 /* units of 256 accesses */

static inline uint32_t lfu_time(uint32_t now)
{
	return (now >> 8) & 0xffffffu;
}

/* The counter after aging to now. */
static uint32_t lfu_decayed(uint32_t st, uint32_t now)
{
	uint32_t elapsed = (lfu_time(now) - (st >> 8)) & 0xffffffu;
	uint32_t c = st & 0xffu;
	uint32_t d = elapsed / LFU_DECAY_PERIOD;

	return d >= c ? 0 : c - d;
}

static void lfu_insert(uint32_t *st, uint32_t now, uint32_t freq)
{
	(void)freq;
	*st = lfu_time(now) << 8 | LFU_INIT;
}

static void lfu_hit(uint32_t *st, uint32_t now)
{
	uint32_t c = lfu_decayed(*st, now);

	if (c < 255) {
		uint32_t base = c > LFU_INIT ? c - LFU_INIT : 0;
		uint64_t r = hash_mix((uint64_t)now << 32 | *st);
		/* r / 2^64 < 1 / (base * factor + 1) */
		if ((r >> 32) * (base * LFU_LOG_FACTOR + 1) < (1ULL << 32))
			c++;
	}
	*st = lfu_time(now) << 8 | c;
}

static unsigned lfu_victim(const uint32_t *st, unsigned ways, uint64_t eligible,
			   uint32_t now)
{
	unsigned best = 0;
	uint32_t best_c = 0, best_age = 0;
	bool found = false;

	for (unsigned w = 0; w < ways; w++) {
		uint32_t c, age;

		if (!(eligible >> w & 1))
			continue;
		c = lfu_decayed(st[w], now);
		age = (lfu_time(now) - (st[w] >> 8)) & 0xffffffu;
		if (!found || c < best_c || (c == best_c && age > best_age)) {
			best = w;
			best_c = c;
			best_age = age;
			found = true;
		}
	}
	return best;
}

const struct policy_ops policy_lfu = {
    .name = "lfu",
    .scaled_clock = true,
    .on_hit = lfu_hit,
    .on_insert = lfu_insert,
    .victim = lfu_victim,
};
