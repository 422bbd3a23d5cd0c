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
 * than LRU at 25%. Since a sudden change of popularity is left to the
 * cache (when its hit ratio collapses it moves the clock on by TLFU_DRIFT,
 * policy_drift in policy.h, and every count reads 0), the halving need
 * only follow a slow drift: every 32 turnovers missed 0.5-1.3% less than
 * every 16 on both traces at 6% and 12.5% of their distinct rows (the
 * same at 25%, where 20 batches are fewer turnovers), and 64 no less than
 * 32 but at 6% on shift. The state the sketch needs is in the cache's
 * clock, so a hit stays one word written.
 *
 * The victim is the eligible way with the lowest count, then the oldest
 * access, then the lowest way: in-cache eviction by frequency, which is
 * what Zipf traffic rewards. W-TinyLFU, below, puts a window LRU in
 * front (per set: a way) and ages idle rows.
 */
#include "policy.h"

#define TLFU_HALVE  32 /* turnovers between halvings */
#define TLFU_TICKS  (TLFU_HALVE * POLICY_SCALE)
#define TIME_MASK   0xfffffu
#define EPOCH_SHIFT 8
/* A change of popularity (policy_drift) ages every count by four
 * halvings, to 0: on the bench's shift trace 2 and 3 missed up to 2% more. */
#define TLFU_DRIFT (4 * TLFU_TICKS)

static inline uint32_t epoch_of(uint32_t now)
{
	return (now / TLFU_TICKS) & 0xf;
}

/* The slot's count halved once per epoch since it was written. The epoch
 * field wraps every 16 epochs, the access time every 32: a slot idle for
 * 4 epochs' ticks or more reads 0 by its time, so that the epoch's wrap
 * cannot bring an old count back; only an idle stretch of 32 epochs (1024
 * turnovers, in which every eviction of the set would have chosen it)
 * could. */
static inline uint32_t tlfu_age(uint32_t st, uint32_t now)
{
	return (now - (st >> 12)) & TIME_MASK;
}

static inline uint32_t tlfu_count(uint32_t st, uint32_t now)
{
	uint32_t d = (epoch_of(now) - ((st >> EPOCH_SHIFT) & 0xf)) & 0xf;
	uint32_t age = tlfu_age(st, now);

	return d >= 4 || age >= 4 * TLFU_TICKS ? 0 : (st & 0xf) >> d;
}

static inline uint32_t pack(uint32_t now, uint32_t count)
{
	return (now & TIME_MASK) << 12 | epoch_of(now) << EPOCH_SHIFT | count;
}

static void tlfu_insert(uint32_t *st, uint32_t now, uint32_t freq)
{
	*st = pack(now, freq > 15 ? 15 : freq);
}

/* c + n, saturating at 15. */
static inline uint32_t count_add(uint32_t c, uint32_t n)
{
	return n < 15 - c ? c + n : 15;
}

static void tlfu_hits(uint32_t *st, uint32_t now, uint32_t n)
{
	*st = pack(now, count_add(tlfu_count(*st, now), n));
}

static void tlfu_hit(uint32_t *st, uint32_t now)
{
	tlfu_hits(st, now, 1);
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
		age = tlfu_age(st[w], now);
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
    .on_hits = tlfu_hits,
    .on_insert = tlfu_insert,
    .victim = tlfu_victim,
    .halve_ticks = TLFU_TICKS,
    .freq = tlfu_count,
    .drift_ticks = TLFU_DRIFT,
};

/*
 * W-TinyLFU (the same paper's section 4; Caffeine's policy), fitted to a
 * set: each way of a full set is in the window or in main, bit 4 of its
 * word (the rest as TinyLFU's: count, epoch, last access).
 *
 * Every missed row goes into the window (no refusal). When a full set
 * needs a way and its window holds its share (WT_WINDOW_16 / 16 of the
 * ways, at least one), the window's oldest row (the candidate) and main's
 * victim meet: if the candidate's count beats the victim's, the candidate
 * moves to main (its slot relabelled, no data moved) and the victim goes;
 * otherwise the candidate goes. A window below its share gives up main's
 * victim directly, and one above it (a set filled by inserts) moves its
 * oldest rows to main unchallenged.
 *
 * Main's victim is the row with the lowest count decayed by its idle
 * time (wt_count), then the oldest. That decay, not the window, is what
 * follows a change of popularity: rows that were hot keep a saturated
 * count until the sketch's halving (16 turnovers then) and TinyLFU refuses the
 * new hot rows against them until then. Measured on the bench's Zipf 1.15
 * and shift traces at 12.5% and 25% of their distinct rows (`embtier-bench
 * mrc`, misses; TinyLFU 0.622 0.527 0.702 0.634, LRU 0.848 0.611 0.780
 * 0.602):
 *
 *   main's victim by                       zipf 12.5  25%   shift 12.5  25%
 *   segmented LRU (Caffeine's)             0.641  0.540     0.733  0.653
 *   lowest count, no idle decay            0.640  0.539     0.717  0.647
 *   lowest count, half per turnover idle   0.727  0.580     0.728  0.598
 *   lowest count, half per 3 turnovers     0.675  0.546     0.692  0.609
 *   lowest count, half per expected gap    0.652  0.538     0.692  0.626
 *
 * (window 2 of 16 ways in the first three rows, then 1 of 16, which missed
 * up to 2% less than 2 or 4; a fixed period also lost most of the gain at
 * 6.2%, 0.943 on Zipf where the last row misses 0.827 and TinyLFU 0.735.)
 * A window of a way or two in a set is emptied by the set's next misses
 * long before the next batch, when a batch's rows come back, so it rarely
 * earns a row a hit; the candidate mostly brings its sketch count, as
 * under TinyLFU.
 */
#define WT_MAIN	     (1u << 4)
#define WT_WINDOW_16 1 /* window ways per 16 ways */

static inline bool wt_main(uint32_t st)
{
	return st & WT_MAIN;
}

static inline uint32_t wt_age(uint32_t st, uint32_t now)
{
	return tlfu_age(st, now);
}

/* The count of st, halved per WT_IDLE_TURNOVERS turnovers idle. */
/* The count of st decayed by its idle time: a row seen c times lately
 * (in a halving period of TLFU_TICKS) is expected back about every
 * TLFU_TICKS / c ticks; it loses half its count for every such interval
 * it has been idle. */
static inline uint32_t wt_count(uint32_t st, uint32_t now)
{
	uint32_t c = tlfu_count(st, now);
	uint64_t sh = (uint64_t)wt_age(st, now) * c / TLFU_TICKS;

	return sh >= 4 ? 0 : c >> sh;
}

static void wt_insert(uint32_t *st, uint32_t now, uint32_t freq)
{
	*st = pack(now, freq > 15 ? 15 : freq); /* in the window */
}

static void wt_hits(uint32_t *st, uint32_t now, uint32_t n)
{
	*st = pack(now, count_add(tlfu_count(*st, now), n)) | (*st & WT_MAIN);
}

static void wt_hit(uint32_t *st, uint32_t now)
{
	wt_hits(st, now, 1);
}

/* The oldest window way among mask (lowest way on a tie); -1 if none. */
static int wt_oldest(const uint32_t *st, unsigned ways, uint64_t mask,
		     uint32_t now)
{
	uint32_t best_age = 0;
	int best = -1;

	for (unsigned w = 0; w < ways; w++) {
		if (!(mask >> w & 1) || wt_main(st[w]))
			continue;
		if (best < 0 || wt_age(st[w], now) > best_age) {
			best = (int)w;
			best_age = wt_age(st[w], now);
		}
	}
	return best;
}

/* Main's way among mask with the lowest decayed count, then the oldest,
 * then the lowest; -1 if none. */
static int wt_least(const uint32_t *st, unsigned ways, uint64_t mask,
		    uint32_t now)
{
	uint32_t best_age = 0, best_c = 0;
	int best = -1;

	for (unsigned w = 0; w < ways; w++) {
		uint32_t age, c;

		if (!(mask >> w & 1) || !wt_main(st[w]))
			continue;
		age = wt_age(st[w], now);
		c = wt_count(st[w], now);
		if (best < 0 || c < best_c || (c == best_c && age > best_age)) {
			best = (int)w;
			best_age = age;
			best_c = c;
		}
	}
	return best;
}

static unsigned wt_evict(uint32_t *st, unsigned ways, uint64_t eligible,
			 uint32_t now)
{
	uint64_t all = ways >= 64 ? ~0ULL : (1ULL << ways) - 1;
	unsigned window = ways * WT_WINDOW_16 / 16, nwin = 0;
	int cand, victim;

	if (!window)
		window = 1;
	for (unsigned w = 0; w < ways; w++)
		nwin += !wt_main(st[w]);
	for (; nwin > window; nwin--)
		st[wt_oldest(st, ways, all, now)] |= WT_MAIN;
	victim = wt_least(st, ways, eligible, now);
	cand = nwin == window ? wt_oldest(st, ways, eligible, now) : -1;
	if (victim < 0) /* only window rows may go */
		return (unsigned)wt_oldest(st, ways, eligible, now);
	if (cand < 0)
		return (unsigned)victim;
	if (wt_count(st[cand], now) > wt_count(st[victim], now)) {
		st[cand] |= WT_MAIN;
		return (unsigned)victim;
	}
	return (unsigned)cand;
}

/* The way wt_evict would empty, leaving the states as they are. */
static unsigned wt_victim(const uint32_t *st, unsigned ways, uint64_t eligible,
			  uint32_t now)
{
	uint32_t copy[64];

	for (unsigned w = 0; w < ways; w++)
		copy[w] = st[w];
	return wt_evict(copy, ways, eligible, now);
}

const struct policy_ops policy_wtinylfu = {
    .name = "wtinylfu",
    .scaled_clock = true,
    .on_hit = wt_hit,
    .on_hits = wt_hits,
    .on_insert = wt_insert,
    .victim = wt_victim,
    .halve_ticks = TLFU_TICKS,
    .freq = tlfu_count,
    .evict = wt_evict,
    .drift_ticks = TLFU_DRIFT,
};
