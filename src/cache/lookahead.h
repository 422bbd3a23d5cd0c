/*
 * lookahead.h - the window of upcoming batches a caller handed the store
 * (et_lookahead), as a map from a row's key (table, row) to the batches of
 * the window that use it.
 *
 * An open-addressing hash table (linear probing, at most half full) of
 * (row, table, mask): bit b of mask is set if batch b of the window uses
 * the row, batch 0 being the one the caller runs next. Each et_lookahead call
 * replaces the whole window. The first operation on a table after the
 * call is that table's part of batch 0: from then on batch 0 no longer
 * counts as an upcoming use of the table's rows (la_consume). The caches
 * ask la_next() for a key's next use when they choose a victim: rows used
 * within the window are kept when possible, and among them the one used
 * last goes first (Belady's rule inside the window).
 *
 * A window usually slides: the caller hands the same batches again, less
 * the first, plus a new last one. The last window's ids are kept, and when
 * the new one starts with them (compared word for word, a sequential pass)
 * every mask is shifted down by one batch and only the new batches' ids
 * are added: O(one batch's ids) of map updates a call instead of O(the
 * window's). Keys no batch uses any more stay as dead entries (mask 0) until
 * the table is rebuilt as it fills.
 *
 * Memory: 16 bytes an entry, entries a power of two at least twice the
 * keys (live or dead) in the map; when it fills it is rebuilt with its live
 * keys, twice as big only if a quarter of it is live; kept between calls:
 * at most 128 bytes per distinct id of the largest window handed in (at
 * least 1024 entries); the
 * copy of the last window, 8 bytes an id and 16 a (batch, table); a bit
 * per table.
 *
 * Owned by the store; one thread at a time.
 */
#ifndef ET_LOOKAHEAD_H
#define ET_LOOKAHEAD_H

#include <stddef.h>
#include <stdint.h>

#define LA_NONE	     UINT32_MAX /* not used within the window */
#define LA_MAX_BATCH 32u	/* batches a window holds at most */

struct la_entry {
	uint64_t row;
	uint32_t tag; /* table + 1 (cache_tag); 0: empty */
	uint32_t mask;
};

struct lookahead {
	struct la_entry *e;
	size_t cap;	/* entries, a power of two; 0 before the first */
	size_t n;	/* keys in the window */
	uint32_t depth; /* batches in the window; 0: no window */
	uint64_t *done; /* bit per table: its part of batch 0 has run */
	size_t done_words;
	uint64_t *prev;	 /* the last window: per batch, per table, its
			    * table, its n and its n ids */
	size_t prev_cap; /* words of prev */
	size_t prev_off[LA_MAX_BATCH + 1]; /* batch b: prev[off[b], off[b+1]) */
	uint32_t prev_nb;		   /* batches in it; 0: none kept */
};

struct et_batch;

/* Makes the window of et_lookahead's batches (checked by the caller): by
 * sliding the last one when it can, else anew. 0 or -ENOMEM (the window
 * is then empty). */
int la_set(struct lookahead *la, const struct et_batch *b, size_t n,
	   uint32_t tables);

/* Forgets the window (keeps the memory for the next). */
void la_clear(struct lookahead *la);
void la_free(struct lookahead *la);

/* Makes room for tables tables. 0 or -ENOMEM. */
int la_tables(struct lookahead *la, uint32_t tables);

/* Records that batch b (< LA_MAX_BATCH) of the window uses row of table
 * t (t < CACHE_MAX_TABLES). 0, or -ENOMEM (the window is then empty). */
int la_add(struct lookahead *la, uint32_t t, uint64_t row, uint32_t b);

/* An operation on table t begins: its part of batch 0 is now. */
static inline void la_consume(struct lookahead *la, uint32_t t)
{
	if (la->n && t / 64 < la->done_words)
		la->done[t / 64] |= 1ULL << (t % 64);
}

/* The first batch of the window that will use row of table t, or
 * LA_NONE. */
uint32_t la_next(const struct lookahead *la, uint32_t t, uint64_t row);

static inline int la_active(const struct lookahead *la)
{
	return la && la->n;
}

#endif
