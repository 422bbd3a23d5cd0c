/*
 * sketch.h - a count-min sketch of 4-bit counters: how often keys were
 * seen lately, for frequency admission (TinyLFU, see policy_tinylfu.c).
 *
 * Four rows of `cols` counters (a power of two), 16 to a 64-bit word; a
 * key's counter in row i is chosen by 32 bits of two mixes of the key,
 * and its estimate is the least of its four counters (the other keys that
 * share a counter can only raise it). Increments are conservative: only
 * the counters equal to the least are raised, which keeps estimates close.
 * Counters saturate at 15. The whole sketch is halved (every counter
 * shifted right by one) each time the caller's halving epoch moves on, so
 * old counts fade and a change of popularity is seen.
 *
 * Memory: 2 bytes a column (4 rows x 4 bits). Owned by one cache; one
 * thread at a time.
 */
#ifndef ET_SKETCH_H
#define ET_SKETCH_H

#include <stdint.h>

#define SKETCH_MAX 15u

struct sketch {
	uint64_t *w;	/* 4 rows of cols / 16 words */
	uint64_t cols;	/* counters per row, a power of two >= 16 */
	uint32_t epoch; /* halving epoch the counters are at */
};

/* A sketch of cols counters a row, rounded up to a power of two (at least
 * 16); its epoch starts at epoch. 0 or -ENOMEM. */
int sketch_init(struct sketch *s, uint64_t cols, uint32_t epoch);
void sketch_free(struct sketch *s);

static inline uint64_t sketch_bytes(const struct sketch *s)
{
	return 2 * s->cols;
}

/* Halves every counter once for each epoch since the sketch's (at most
 * four times: by then every counter is 0). */
void sketch_age(struct sketch *s, uint32_t epoch);

/* Counts n >= 1 more sightings of key (conservative update: the
 * counters below the new estimate are raised to it); returns the estimate
 * after them. */
uint32_t sketch_add_n(struct sketch *s, uint64_t key, uint32_t n);

static inline uint32_t sketch_add(struct sketch *s, uint64_t key)
{
	return sketch_add_n(s, key, 1);
}

/* The estimate for key. */
uint32_t sketch_get(const struct sketch *s, uint64_t key);

/* Raises key's counters to at least f (a count kept elsewhere while the
 * key was cached comes back into the sketch when it leaves). */
void sketch_raise(struct sketch *s, uint64_t key, uint32_t f);

#endif
