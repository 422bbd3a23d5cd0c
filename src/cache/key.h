/*
 * key.h - the key of a row in the caches, the lookahead window and the
 * write-back queue: row | (table + 1) << 40, with two flag bits on top
 * that a cache slot's key word carries (cache.h). 0 is no key. Not
 * installed.
 */
#ifndef ET_KEY_H
#define ET_KEY_H

#include <stdint.h>

#define CACHE_DIRTY    (1ULL << 63)
#define CACHE_PF       (1ULL << 62) /* placed by a prefetch, not yet used */
#define CACHE_KEY_MASK (~(CACHE_DIRTY | CACHE_PF))

static inline uint64_t cache_key(uint32_t table, uint64_t row)
{
	return ((uint64_t)(table + 1) << 40) | row;
}

static inline uint32_t cache_key_table(uint64_t key)
{
	return (uint32_t)(((key & CACHE_KEY_MASK) >> 40) - 1);
}

static inline uint64_t cache_key_row(uint64_t key)
{
	return key & ((1ULL << 40) - 1);
}

#endif
