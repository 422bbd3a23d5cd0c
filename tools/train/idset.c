/*
 * idset.c - the set of row ids training has touched (see idset.h).
 *
 * Linear probing with a murmur3 finalizer as the hash; ids are stored
 * plus one so that zero marks an empty slot, and UINT64_MAX, whose id + 1
 * is zero, is a flag of its own (a keyed table's id is any u64).
 */
#include "idset.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

static size_t slot_of(uint64_t k, size_t cap)
{
	k ^= k >> 33;
	k *= 0xff51afd7ed558ccdULL;
	k ^= k >> 33;
	return (size_t)k & (cap - 1);
}

static void put(uint64_t *slot, size_t cap, uint64_t k, size_t *n)
{
	size_t h = slot_of(k, cap);

	while (slot[h] && slot[h] != k)
		h = (h + 1) & (cap - 1);
	if (!slot[h]) {
		slot[h] = k;
		(*n)++;
	}
}

static int grow(struct idset *s)
{
	size_t cap = s->cap ? s->cap * 2 : 1024, n = 0;
	uint64_t *slot = calloc(cap, sizeof(*slot));

	if (!slot)
		return -ENOMEM;
	for (size_t i = 0; i < s->cap; i++)
		if (s->slot[i])
			put(slot, cap, s->slot[i], &n);
	free(s->slot);
	s->slot = slot;
	s->cap = cap;
	return 0;
}

int idset_add(struct idset *s, const uint64_t *ids, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (ids[i] == UINT64_MAX) {
			s->n += !s->max_in;
			s->max_in = true;
			continue;
		}
		if (2 * (s->n + 1) > s->cap) {
			int ret = grow(s);

			if (ret)
				return ret;
		}
		put(s->slot, s->cap, ids[i] + 1, &s->n);
	}
	return 0;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

int idset_sorted(const struct idset *s, uint64_t **out)
{
	uint64_t *v;
	size_t k = 0;

	*out = NULL;
	if (!s->n)
		return 0;
	v = malloc(s->n * sizeof(*v));
	if (!v)
		return -ENOMEM;
	for (size_t i = 0; i < s->cap; i++)
		if (s->slot[i])
			v[k++] = s->slot[i] - 1;
	qsort(v, k, sizeof(*v), cmp_u64);
	if (s->max_in)
		v[k++] = UINT64_MAX; /* the largest: last */
	*out = v;
	return 0;
}

void idset_free(struct idset *s)
{
	free(s->slot);
	memset(s, 0, sizeof(*s));
}
