/*
 * belady.h - Belady's MIN, the offline optimal replacement policy: the miss
 * count no cache of the same capacity can beat on the same access sequence.
 *
 * The cache is fully associative and demand-filled (every miss is inserted,
 * evicting the resident key whose next use is farthest in the future; keys
 * never used again go first), which is the model the store's caches follow
 * minus their set associativity and their pinning of a batch's rows. So
 * MIN is a lower bound for the store's miss count, not an achievable
 * target. Libc only; one thread.
 */
#ifndef ET_BENCH_BELADY_H
#define ET_BENCH_BELADY_H

#include <stddef.h>
#include <stdint.h>

/* Misses of MIN over keys[0..n) with room for cap keys (cap >= 1).
 * Returns 0, -EINVAL (cap == 0 or n >= 2^32 - 1) or -ENOMEM. */
int belady_misses(const uint64_t *keys, size_t n, uint64_t cap,
		  uint64_t *misses);

#endif
