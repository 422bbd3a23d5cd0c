/*
 * rl_index.h - the row log's index: row -> a u32 value (the row log keeps
 * a record number and a "changed since the last commit" bit in it).
 *
 * Open addressing with linear probing in Robin Hood order: an entry is
 * never further from its home slot than an entry it passed, so a lookup
 * of an absent row stops as soon as it meets an entry nearer its home than
 * the probe has gone. That keeps probes short at a load of 0.9, and the
 * table grows by half when it passes that (any slot count: the home is
 * the hash scaled to the count), so an index is 0.6 to 0.9 full: 12 bytes
 * a slot, 13 to 20 bytes a row.
 *
 * One thread at a time, like its log.
 */
#ifndef ET_RL_INDEX_H
#define ET_RL_INDEX_H

#include <stdbool.h>
#include <stdint.h>

#include "hash.h"

struct rl_index {
	uint64_t *keys; /* row + 1; 0: empty */
	uint32_t *vals;
	uint64_t cap, count;
};

/* The slot where row's probe starts: the hash scaled to the count. */
static inline uint64_t rli_home(uint64_t cap, uint64_t row)
{
	return (uint64_t)(((unsigned __int128)hash_mix(row) * cap) >> 64);
}

/* The slot of row, or -1. */
int64_t rli_find(const struct rl_index *x, uint64_t row);

/* The slot of row, inserted (value 0) if new (*isnew). An insert may move
 * other entries: slots found before it are stale after it. */
int rli_slot(struct rl_index *x, uint64_t row, uint64_t *slot, bool *isnew);

/* Room for want rows at a load of 3/4, made at once (see rl_index.c). */
int rli_reserve(struct rl_index *x, uint64_t want);

/* Empties it, keeping its memory; rli_free gives the memory back. */
void rli_clear(struct rl_index *x);
void rli_free(struct rl_index *x);

#endif
