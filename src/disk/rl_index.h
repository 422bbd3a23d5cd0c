/*
 * rl_index.h - the row log's index: row -> a u32 value (the row log keeps
 * a record number and a "changed since the last commit" bit in it).
 *
 * Open addressing with linear probing in Robin Hood order: an entry is
 * never further from its home slot than an entry it passed, so a lookup
 * of an absent row stops as soon as it meets an entry nearer its home than
 * the probe has gone. A cluster is in the order of its entries' hashes,
 * so an insert is a shift of the slots up to the next empty one, and a
 * resize lays the entries out in one pass. The table grows by a third
 * when it passes a load of 0.8 (any slot count: the home is the hash
 * scaled to the count), so an index is 0.6 to 0.8 full: 12 bytes a slot
 * and a byte of the filter (rli_maybe), 16 to 22 bytes a row. (At 0.9, as
 * it was, the run to the next empty slot that an insert moves is four
 * times as long.)
 *
 * Rows are any u64 (a keyed table's keys): a slot holds row + 1, 0 being
 * empty, so the one row whose + 1 wraps, UINT64_MAX, has a slot of its
 * own past the others, slot cap (used when has_max). Walk the slots with
 * rli_end/rli_used/rli_row.
 *
 * One thread at a time, like its log.
 */
#ifndef ET_RL_INDEX_H
#define ET_RL_INDEX_H

#include <stdbool.h>
#include <stdint.h>

#include "hash.h"

struct rl_index {
	uint64_t *keys; /* [cap + 1] row + 1; 0: empty (slot cap: unused) */
	uint32_t *vals; /* [cap + 1] */
	uint64_t *bf;	/* [bf_words] the filter (see rli_maybe) */
	uint64_t bf_words;
	uint64_t bf_stale; /* entries deleted since it was built */
	uint32_t *aux;	   /* [(cap + 1) * aw] if kept (rli_keep_aux): aw words
			 * per entry that move with it (the row log's stamp,
			 * then its score) */
	uint64_t cap, count;
	uint32_t aw;  /* aux words an entry keeps (0: none) */
	bool has_max; /* row UINT64_MAX is in slot cap */
};

/* Slot i's aux words (aw of them; the index keeps some). */
static inline uint32_t *rli_aux(const struct rl_index *x, uint64_t i)
{
	return x->aux + i * x->aw;
}

/* One past the last slot of a walk over the index. */
static inline uint64_t rli_end(const struct rl_index *x)
{
	return x->cap ? x->cap + 1 : 0;
}

static inline bool rli_used(const struct rl_index *x, uint64_t i)
{
	return i < x->cap ? x->keys[i] != 0 : x->has_max;
}

/* The row in used slot i. */
static inline uint64_t rli_row(const struct rl_index *x, uint64_t i)
{
	return i < x->cap ? x->keys[i] - 1 : UINT64_MAX;
}

/* The home of a hash: scaled to the slot count, so that homes are in
 * the order of the hashes whatever the count. */
static inline uint64_t rli_hhome(uint64_t cap, uint64_t hash)
{
	return (uint64_t)(((unsigned __int128)hash * cap) >> 64);
}

/* The slot where row's probe starts. */
static inline uint64_t rli_home(uint64_t cap, uint64_t row)
{
	return rli_hhome(cap, hash_mix(row));
}

/*
 * The filter: a row that is absent is, nearly always, known to be absent
 * from one word, without the probe. Each row sets 4 bits of one 64-bit
 * word, both chosen by a hash of its own (not the one that places it in
 * the slots); a word per 8 slots (a byte a slot: 10 to 13 bits a row at
 * the index's load of 0.6 to 0.8, about 3% false "maybe"). The words are
 * cap bytes, where the slots are 12 cap: a lookup of an absent row reads
 * memory a twelfth of the size, which the processor's caches hold for
 * much larger indexes. Deletions leave their bits (a "maybe" too many);
 * the filter is built again when the table grows, and once the entries
 * deleted since it was built pass half of those live.
 */
static inline uint64_t rli_fhash(uint64_t row)
{
	return hash_mix(row ^ 0xA0761D6478BD642FULL);
}

static inline uint64_t rli_fword(const struct rl_index *x, uint64_t fh)
{
	return (uint64_t)(((unsigned __int128)fh * x->bf_words) >> 64);
}

static inline uint64_t rli_fmask(uint64_t fh)
{
	return 1ULL << (fh & 63) | 1ULL << (fh >> 6 & 63) |
	       1ULL << (fh >> 12 & 63) | 1ULL << (fh >> 18 & 63);
}

/* Whether row may be in the index (false: it is not). Any row but
 * UINT64_MAX (kept apart: has_max). */
static inline bool rli_maybe(const struct rl_index *x, uint64_t row)
{
	uint64_t fh = rli_fhash(row), m = rli_fmask(fh);

	return x->bf_words && (x->bf[rli_fword(x, fh)] & m) == m;
}

/* Asks for the filter's word of row (a batch of lookups asks some rows
 * ahead; rli_prefetch_probe nearer). Always inlined: GCC takes a
 * function whose only effect is a prefetch for one without effects, and
 * drops calls to it. */
static inline __attribute__((always_inline)) void
rli_prefetch(const struct rl_index *x, uint64_t row)
{
	if (x->bf_words)
		__builtin_prefetch(&x->bf[rli_fword(x, rli_fhash(row))]);
}

/* Asks for the line where row's probe starts, if the filter (asked for
 * before) says the row may be there. */
static inline __attribute__((always_inline)) void
rli_prefetch_probe(const struct rl_index *x, uint64_t row)
{
	if (x->cap && rli_maybe(x, row))
		__builtin_prefetch(&x->keys[rli_home(x->cap, row)]);
}

/* The same, and the line of its value, for a lookup that reads or sets
 * it. (rli_prefetch_ins: and the filter's word, for an insert.) */
static inline __attribute__((always_inline)) void
rli_prefetch_val(const struct rl_index *x, uint64_t row)
{
	if (x->cap) {
		uint64_t h = rli_home(x->cap, row);

		__builtin_prefetch(&x->keys[h]);
		__builtin_prefetch(&x->vals[h], 1);
	}
}

static inline __attribute__((always_inline)) void
rli_prefetch_ins(const struct rl_index *x, uint64_t row)
{
	rli_prefetch_val(x, row);
	if (x->bf_words)
		__builtin_prefetch(&x->bf[rli_fword(x, rli_fhash(row))], 1);
}

/* The slot of row, or -1. */
int64_t rli_find(const struct rl_index *x, uint64_t row);

/* The slot of row, inserted (value 0) if new (*isnew). An insert may move
 * other entries: slots found before it are stale after it. */
int rli_slot(struct rl_index *x, uint64_t row, uint64_t *slot, bool *isnew);

/* From now on keeps `words` aux words per entry, or more if it keeps
 * more: the words it kept stay, the others start at 0 (as they do for
 * each new entry). */
int rli_keep_aux(struct rl_index *x, uint32_t words);

/* Removes the entry in slot (from rli_find or rli_slot); entries after it
 * may move back one slot: slots found before are stale after it. */
void rli_del(struct rl_index *x, uint64_t slot);

/* Room for want rows at a load of 3/4, made at once (see rl_index.c). */
int rli_reserve(struct rl_index *x, uint64_t want);

/* Empties it, keeping its memory; rli_free gives the memory back. */
void rli_clear(struct rl_index *x);
void rli_free(struct rl_index *x);

#endif
