/*
 * idset.h - a set of row ids: the rows of one table that training has
 * updated. The trainer keeps one per table, so that the weights checksum
 * can read exactly those rows back (in sorted order) and a checkpoint can
 * carry them. Any u64 is an id (keyed tables). Open addressing over u64
 * keys; grows by doubling at half full. One thread at a time.
 */
#ifndef ET_TRAIN_IDSET_H
#define ET_TRAIN_IDSET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct idset {
	uint64_t *slot; /* id + 1, or 0 for empty */
	size_t cap;	/* a power of two, or 0 */
	size_t n;	/* ids in the set, max_in counted */
	bool max_in;	/* UINT64_MAX (whose id + 1 is 0) is in the set */
};

/* Adds n ids (duplicates allowed). Returns 0 or -ENOMEM (the set then
 * holds some of them). */
int idset_add(struct idset *s, const uint64_t *ids, size_t n);

/* The ids in increasing order, in a new array of s->n entries (NULL with
 * s->n == 0). Returns 0 or -ENOMEM. */
int idset_sorted(const struct idset *s, uint64_t **out);

void idset_free(struct idset *s);

#endif
