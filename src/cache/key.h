/*
 * key.h - the identity of a row in the caches, the lookahead window and
 * the write-back queue: the pair (table, row), the row any u64 (0 and
 * UINT64_MAX included). Hot paths pass the two as two arguments; struct
 * rkey holds them where a pair is stored.
 *
 * A cache slot keeps the row in its key word (u64) and a tag (u32): the
 * table + 1 in the low 30 bits (0: an empty slot), the prefetch flag in
 * bit 30 and the dirty flag in bit 31 (cache.h). Tables are therefore
 * fewer than CACHE_MAX_TABLES. Not installed.
 */
#ifndef ET_KEY_H
#define ET_KEY_H

#include <stdint.h>

#define CACHE_TAG_TABLE	 ((1u << 30) - 1) /* table + 1; 0: empty */
#define CACHE_TAG_PF	 (1u << 30) /* placed by a prefetch, not yet used */
#define CACHE_TAG_DIRTY	 (1u << 31)
#define CACHE_MAX_TABLES CACHE_TAG_TABLE /* table ids are below this */

struct rkey {
	uint64_t row;
	uint32_t table;
};

/* The tag bits naming table t (flags clear). */
static inline uint32_t cache_tag(uint32_t t)
{
	return t + 1;
}

/* The table a slot's tag names (the slot must be valid). */
static inline uint32_t cache_tag_table(uint32_t tag)
{
	return (tag & CACHE_TAG_TABLE) - 1;
}

/* (t, row) folded into one u64 for hashing: a bijection of the row for
 * each table, so two rows of one table never fold together; callers mix
 * it (hash_mix), which spreads sequential rows. */
static inline uint64_t cache_hkey(uint32_t t, uint64_t row)
{
	return row ^ ((uint64_t)(t + 1) * 0x9E3779B97F4A7C15ULL);
}

#endif
