/*
 * learner.h - the "learner" reference of `embtier-bench mrc`: the best a
 * cache can expect to do by learning popularity from what it is asked,
 * given unbounded memory and no sets.
 *
 * It counts every draw of every row (the ids of a call with their repeats,
 * which a store sees too) since the start of the trace or, if told a phase
 * length (the shift workload's), since the start of the current phase: it
 * is told when popularity changes, which a policy has to notice. The
 * resident row with the fewest draws, then the least recently asked, is
 * the victim, and a missed row goes in only if it was drawn more often
 * than that victim (else it is served without being cached, as a store's
 * frequency admission does). Fully associative.
 *
 * Why it is the bar for online policies on the zipf and shift workloads:
 * their batches are independent draws from a distribution over rows that
 * the rows' ids say nothing about, so before the next draw every row drawn
 * c times (in the phase) is as likely as any other drawn c times, and more
 * likely than one drawn fewer times. A policy that knows only what it saw
 * can rank rows by nothing better than their counts; this one keeps them
 * all, exactly. The oracle (oracle.h) knows the ranks instead; the gap
 * between the two is the cost of learning, which no policy escapes.
 */
#ifndef ET_BENCH_LEARNER_H
#define ET_BENCH_LEARNER_H

#include <stddef.h>
#include <stdint.h>

/* Misses of the learner over keys[0..n) (n = bstart[nb]), batch b's
 * lookups being keys[bstart[b] .. bstart[b + 1]), key i drawn draws[i]
 * times in its call (>= 1), with room for cap keys; counts restart every
 * phase batches (0: never). 0, -EINVAL (cap 0) or -ENOMEM. */
int learner_misses(const uint64_t *keys, const uint32_t *draws,
		   const size_t *bstart, uint64_t nb, uint64_t phase,
		   uint64_t cap, uint64_t *misses);

#endif
