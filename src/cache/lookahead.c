/*
 * lookahead.c - the window of upcoming batches (see lookahead.h), and
 * et_lookahead, which fills it.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "embtier.h"
#include "key.h"
#include "hash.h"
#include "lookahead.h"
#include "mem_host.h"

void la_clear(struct lookahead *la)
{
	if (la->n)
		memset(la->e, 0, la->cap * sizeof(*la->e));
	if (la->done)
		memset(la->done, 0, la->done_words * sizeof(*la->done));
	la->n = 0;
	la->depth = 0;
	la->prev_nb = 0; /* nothing to slide from */
}

void la_free(struct lookahead *la)
{
	if (la->prev)
		mem_free(la->prev, la->prev_cap * sizeof(*la->prev), 64);
	if (la->e)
		mem_free(la->e, la->cap * sizeof(*la->e), 64);
	if (la->done)
		mem_free(la->done, la->done_words * sizeof(*la->done), 64);
	memset(la, 0, sizeof(*la));
}

int la_tables(struct lookahead *la, uint32_t tables)
{
	size_t words = tables / 64 + 1;
	uint64_t *d;

	if (words <= la->done_words)
		return 0;
	d = mem_alloc(words * sizeof(*d), 64);
	if (!d)
		return -ENOMEM;
	memset(d, 0, words * sizeof(*d));
	if (la->done)
		mem_free(la->done, la->done_words * sizeof(*la->done), 64);
	la->done = d;
	la->done_words = words;
	return 0;
}

/* The entry of row of table t, or the empty one where it would go. */
static struct la_entry *slot_of(struct la_entry *e, size_t cap, uint32_t t,
				uint64_t row)
{
	uint32_t tag = cache_tag(t);
	size_t i = hash_mix(cache_hkey(t, row)) & (cap - 1);

	while (e[i].tag && (e[i].row != row || e[i].tag != tag))
		i = (i + 1) & (cap - 1);
	return &e[i];
}

/* Rebuilds the table with its live entries (mask not 0): twice as big,
 * unless dead entries were most of it. */
static int grow(struct lookahead *la)
{
	size_t live = 0, cap;
	struct la_entry *e;

	for (size_t i = 0; i < la->cap; i++)
		live += la->e[i].mask != 0;
	cap = !la->cap ? 1024 : 4 * live < la->cap ? la->cap : 2 * la->cap;
	e = mem_alloc(cap * sizeof(*e), 64);
	if (!e) {
		la_clear(la);
		return -ENOMEM;
	}
	memset(e, 0, cap * sizeof(*e));
	for (size_t i = 0; i < la->cap; i++)
		if (la->e[i].mask)
			*slot_of(e, cap, cache_tag_table(la->e[i].tag),
				 la->e[i].row) = la->e[i];
	if (la->e)
		mem_free(la->e, la->cap * sizeof(*la->e), 64);
	la->e = e;
	la->cap = cap;
	la->n = live;
	return 0;
}

int la_add(struct lookahead *la, uint32_t t, uint64_t row, uint32_t b)
{
	struct la_entry *e;

	if (2 * (la->n + 1) > la->cap) {
		int ret = grow(la);

		if (ret)
			return ret;
	}
	e = slot_of(la->e, la->cap, t, row);
	if (!e->tag) {
		e->row = row;
		e->tag = cache_tag(t);
		la->n++;
	}
	e->mask |= 1u << b;
	if (b + 1 > la->depth)
		la->depth = b + 1;
	return 0;
}

uint32_t la_next(const struct lookahead *la, uint32_t t, uint64_t row)
{
	const struct la_entry *e;
	uint32_t mask;

	if (!la->n)
		return LA_NONE;
	e = slot_of(la->e, la->cap, t, row);
	mask = e->mask; /* 0 if the key is not there */
	if (t / 64 < la->done_words && la->done[t / 64] >> (t % 64) & 1)
		mask &= ~1u;
	return mask ? (uint32_t)__builtin_ctz(mask) : LA_NONE;
}

/* Checks the whole window first: bad input leaves the old one. */
/* ------------------------------------------------------------- windows */

/* Words batch b takes in the copy: per table its id, its n, its ids. */
static size_t batch_words(const struct et_batch *b)
{
	size_t w = 0;

	for (size_t k = 0; k < b->ntables; k++)
		w += 2 + b->tables[k].n;
	return w;
}

static bool batch_same(const struct et_batch *b, const uint64_t *w, size_t len)
{
	if (batch_words(b) != len)
		return false;
	for (size_t k = 0; k < b->ntables; k++) {
		const struct et_batch_ids *t = &b->tables[k];

		if (w[0] != (uint64_t)(uint32_t)t->table || w[1] != t->n ||
		    (t->n && memcmp(w + 2, t->ids, t->n * sizeof(*t->ids))))
			return false;
		w += 2 + t->n;
	}
	return true;
}

/* How many of the new batches are the last window's, moved down by one
 * (n and more: the window cannot slide). */
static size_t slid(const struct lookahead *la, const struct et_batch *b,
		   size_t n)
{
	size_t m;

	if (!la->prev_nb || !n)
		return SIZE_MAX;
	m = la->prev_nb - 1 < n ? la->prev_nb - 1 : n;
	for (size_t j = 0; j < m; j++)
		if (!batch_same(&b[j], la->prev + la->prev_off[j + 1],
				la->prev_off[j + 2] - la->prev_off[j + 1]))
			return SIZE_MAX;
	return m;
}

/* Keeps a copy of the window for the next call; without memory, none. */
static void remember(struct lookahead *la, const struct et_batch *b, size_t n)
{
	size_t words = 0;

	for (size_t j = 0; j < n; j++)
		words += batch_words(&b[j]);
	la->prev_nb = 0;
	if (words > la->prev_cap) {
		size_t cap = la->prev_cap ? la->prev_cap : 4096;
		uint64_t *p;

		while (cap < words)
			cap *= 2;
		p = mem_alloc(cap * sizeof(*p), 64);
		if (!p)
			return;
		if (la->prev)
			mem_free(la->prev, la->prev_cap * sizeof(*la->prev),
				 64);
		la->prev = p;
		la->prev_cap = cap;
	}
	words = 0;
	for (size_t j = 0; j < n; j++) {
		la->prev_off[j] = words;
		for (size_t k = 0; k < b[j].ntables; k++) {
			const struct et_batch_ids *t = &b[j].tables[k];

			la->prev[words++] = (uint64_t)(uint32_t)t->table;
			la->prev[words++] = t->n;
			if (t->n) /* ids may be NULL then */
				memcpy(la->prev + words, t->ids,
				       t->n * sizeof(*t->ids));
			words += t->n;
		}
	}
	la->prev_off[n] = words;
	la->prev_nb = (uint32_t)n;
}

int la_set(struct lookahead *la, const struct et_batch *b, size_t n,
	   uint32_t tables)
{
	size_t first = slid(la, b, n);
	uint32_t keep;
	int ret;

	if (first == SIZE_MAX) {
		la_clear(la);
		first = 0;
	} else {
		/* batch j + 1 of the last window is batch j now; batches
		 * from first on are added below */
		keep = first ? (1u << first) - 1 : 0;
		for (size_t i = 0; i < la->cap; i++)
			la->e[i].mask = (la->e[i].mask >> 1) & keep;
		if (la->done)
			memset(la->done, 0, la->done_words * sizeof(*la->done));
		la->depth = (uint32_t)first;
	}
	ret = la_tables(la, tables);
	for (size_t j = first; j < n && !ret; j++)
		for (size_t k = 0; k < b[j].ntables && !ret; k++) {
			const struct et_batch_ids *t = &b[j].tables[k];

			for (size_t i = 0; i < t->n && !ret; i++)
				ret = la_add(la, (uint32_t)t->table, t->ids[i],
					     (uint32_t)j);
		}
	if (ret) {
		/* a slid window is half made: none at all, as promised */
		la_clear(la);
		la->prev_nb = 0;
		return ret;
	}
	la->depth = (uint32_t)n;
	remember(la, b, n);
	return 0;
}
