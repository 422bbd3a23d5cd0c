/*
 * lookahead.c - the window of upcoming batches (see lookahead.h), and
 * et_lookahead, which fills it.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "cache.h"
#include "error.h"
#include "hash.h"
#include "lookahead.h"
#include "mem_host.h"
#include "store_impl.h"

void la_clear(struct lookahead *la)
{
	if (la->n)
		memset(la->e, 0, la->cap * sizeof(*la->e));
	if (la->done)
		memset(la->done, 0, la->done_words * sizeof(*la->done));
	la->n = 0;
	la->depth = 0;
}

void la_free(struct lookahead *la)
{
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

static struct la_entry *slot_of(struct la_entry *e, size_t cap, uint64_t key)
{
	size_t i = hash_mix(key) & (cap - 1);

	while (e[i].key && e[i].key != key)
		i = (i + 1) & (cap - 1);
	return &e[i];
}

/* Doubles the table (or makes the first), keeping its entries. */
static int grow(struct lookahead *la)
{
	size_t cap = la->cap ? 2 * la->cap : 1024;
	struct la_entry *e = mem_alloc(cap * sizeof(*e), 64);

	if (!e) {
		la_clear(la);
		return -ENOMEM;
	}
	memset(e, 0, cap * sizeof(*e));
	for (size_t i = 0; i < la->cap && la->n; i++)
		if (la->e[i].key)
			*slot_of(e, cap, la->e[i].key) = la->e[i];
	if (la->e)
		mem_free(la->e, la->cap * sizeof(*la->e), 64);
	la->e = e;
	la->cap = cap;
	return 0;
}

int la_add(struct lookahead *la, uint64_t key, uint32_t b)
{
	struct la_entry *e;

	if (2 * (la->n + 1) > la->cap) {
		int ret = grow(la);

		if (ret)
			return ret;
	}
	e = slot_of(la->e, la->cap, key);
	if (!e->key) {
		e->key = key;
		la->n++;
	}
	e->mask |= 1u << b;
	if (b + 1 > la->depth)
		la->depth = b + 1;
	return 0;
}

uint32_t la_next(const struct lookahead *la, uint64_t key)
{
	const struct la_entry *e;
	uint32_t mask, t;

	if (!la->n)
		return LA_NONE;
	e = slot_of(la->e, la->cap, key);
	mask = e->mask; /* 0 if key is not there */
	t = cache_key_table(key);
	if (t / 64 < la->done_words && la->done[t / 64] >> (t % 64) & 1)
		mask &= ~1u;
	return mask ? (uint32_t)__builtin_ctz(mask) : LA_NONE;
}

/* Checks the whole window first: bad input leaves the old one. */
int et_lookahead(et_store *s, const struct et_batch *batches, size_t nbatches)
{
	int ret;

	err_clear();
	if (!s || (nbatches && !batches))
		return err_set(-EINVAL, "%s is NULL", !s ? "s" : "batches");
	if (nbatches > ET_MAX_LOOKAHEAD)
		return err_set(-EINVAL, "nbatches %zu out of range 0..%d",
			       nbatches, ET_MAX_LOOKAHEAD);
	for (size_t b = 0; b < nbatches; b++) {
		const struct et_batch *bt = &batches[b];

		if (bt->ntables && !bt->tables)
			return err_set(-EINVAL, "batches[%zu].tables is NULL",
				       b);
		for (size_t k = 0; k < bt->ntables; k++) {
			struct table *t = table_get(s, bt->tables[k].table);
			char what[48];

			if (!t)
				return err_set(ET_ENOTABLE,
					       "batches[%zu].tables[%zu].table "
					       "%d unknown: the store has %u",
					       b, k, bt->tables[k].table,
					       s->ntables);
			snprintf(what, sizeof(what),
				 "batches[%zu].tables[%zu].ids", b, k);
			ret =
			    ids_check(t, bt->tables[k].table, bt->tables[k].ids,
				      bt->tables[k].n, what);
			if (ret)
				return ret;
		}
	}
	la_clear(&s->la);
	ret = la_tables(&s->la, s->ntables);
	for (size_t b = 0; b < nbatches && !ret; b++)
		for (size_t k = 0; k < batches[b].ntables && !ret; k++) {
			const struct et_batch_ids *bi = &batches[b].tables[k];

			for (size_t i = 0; i < bi->n && !ret; i++)
				ret = la_add(
				    &s->la,
				    cache_key((uint32_t)bi->table, bi->ids[i]),
				    (uint32_t)b);
		}
	return ret;
}
