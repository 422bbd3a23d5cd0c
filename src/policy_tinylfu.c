/*
 * policy_tinylfu.c - frequency admission over least-frequent eviction
 * (TinyLFU, Einziger, Friedman and Manes, ACM TOS 2017).
 *
 * A cache that admits every missed row lets a stream of rows seen once
 * push out rows seen every batch; on Zipf traffic most distinct rows of a
 * batch are such one-off rows, and LRU and the aging LFU both lose most of
 * their hot rows each batch. TinyLFU keeps a compact history instead: a
 * count-min sketch (sketch.h) of how often each key was asked for lately,
 * resident or not. When a set is full, the missed row replaces the victim
 * only if the sketch has seen it more often than the victim's count
 * (strictly: ties keep the resident row); otherwise it is not admitted and
 * the store serves it without caching it (its bypass path).
 *
 * While a row is cached its count lives in its slot, so a hit costs what
 * an LRU hit costs (one word written, no sketch access); the count goes
 * back into the sketch when the row leaves. A slot's word:
 *
 *       31                     12 11      8 7      4 3      0
 *      +-------------------------+---------+--------+--------+
 *      | last access (20 bits of |  epoch  |   0    | count  |
 *      | the clock, wraps)       | (mod 16)|        | (0..15)|
 *      +-------------------------+---------+--------+--------+
 *
 * Aging: counts are halved once per TLFU_HALVE turnovers of the cache
 * (the clock is scaled to POLICY_SCALE ticks a turnover, as for LFU), the
 * sketch all at once, a slot lazily: its count is shifted right by the
 * epochs since it was last written. Halving more often follows a change
 * of popularity sooner and forgets the tail of a steady one: on the
 * bench's Zipf 1.15 trace (at 12.5% of its distinct rows) every 1
 * turnover missed like LRU, every 4 missed 0.670, every 16 0.636; on its
 * shift trace (the ranks move every 10 batches) 4 and 16 both missed more
 * than LRU at 25%. The state the sketch needs is in the cache's clock, so
 * a hit stays one word written.
 *
 * The victim is the eligible way with the lowest count, then the oldest
 * access, then the lowest way: in-cache eviction by frequency, which is
 * what Zipf traffic rewards. The window LRU of W-TinyLFU (new rows
 * admitted to a small LRU first) is left out: per set it would be a way
 * or two, which the next miss of the set empties long before the batch
 * after, when a batch's rows come back.
 */
#include "policy.h"

#define TLFU_HALVE  16 /* turnovers between halvings */
#define TLFU_TICKS  (TLFU_HALVE * POLICY_SCALE)
#define TIME_MASK   0xfffffu
#define EPOCH_SHIFT 8

static inline uint32_t epoch_of(uint32_t now)
{
	return (now / TLFU_TICKS) & 0xf;
}

static inline uint32_t tlfu_count(uint32_t st, uint32_t now)
{
	uint32_t d = (epoch_of(now) - ((st >> EPOCH_SHIFT) & 0xf)) & 0xf;

	return d >= 4 ? 0 : (st & 0xf) >> d;
}

static inline uint32_t pack(uint32_t now, uint32_t count)
{
	return (now & TIME_MASK) << 12 | epoch_of(now) << EPOCH_SHIFT | count;
}

static void tlfu_insert(uint32_t *st, uint32_t now, uint32_t freq)
{
	*st = pack(now, freq > 15 ? 15 : freq);
}

static void tlfu_hit(uint32_t *st, uint32_t now)
{
	uint32_t c = tlfu_count(*st, now);

	*st = pack(now, c < 15 ? c + 1 : 15);
}

static unsigned tlfu_victim(const uint32_t *st, unsigned ways,
			    uint64_t eligible, uint32_t now)
{
	unsigned best = 0;
	uint32_t best_c = 0, best_age = 0;
	bool found = false;

	for (unsigned w = 0; w < ways; w++) {
		uint32_t c, age;

		if (!(eligible >> w & 1))
			continue;
		c = tlfu_count(st[w], now);
		age = (now - (st[w] >> 12)) & TIME_MASK;
		if (!found || c < best_c || (c == best_c && age > best_age)) {
			best = w;
			best_c = c;
			best_age = age;
			found = true;
		}
	}
	return best;
}

const struct policy_ops policy_tinylfu = {
    .name = "tinylfu",
    .scaled_clock = true,
    .on_hit = tlfu_hit,
    .on_insert = tlfu_insert,
    .victim = tlfu_victim,
    .halve_ticks = TLFU_TICKS,
    .freq = tlfu_count,
};
