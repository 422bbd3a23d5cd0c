/*
 * serve_cache.c - a serving handle's row cache; see serve_cache.h for what
 * an entry's epoch promises.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "embtier.h"
#include "dtype.h"
#include "error.h"
#include "hash.h"
#include "serve_cache.h"

#define SC_META (8 + 4 + 4 + 4) /* key, table, epoch, stamp */

int sc_init(struct scache *c, uint64_t bytes, uint32_t slot_bytes)
{
	uint64_t per_set = (uint64_t)SC_WAYS * (slot_bytes + SC_META);
	uint64_t slots;

	memset(c, 0, sizeof(*c));
	c->slot_bytes = slot_bytes;
	c->nsets = per_set ? bytes / per_set : 0;
	if (!c->nsets)
		return err_set(ET_ECAPACITY,
			       "a serving cache of %llu bytes holds no set of "
			       "%u rows of %u bytes",
			       (unsigned long long)bytes, SC_WAYS, slot_bytes);
	slots = c->nsets * SC_WAYS;
	c->keys = calloc(slots, sizeof(*c->keys));
	c->table = calloc(slots, sizeof(*c->table));
	c->epoch = calloc(slots, sizeof(*c->epoch));
	c->stamp = calloc(slots, sizeof(*c->stamp));
	c->data = malloc(slots * slot_bytes);
	if (!c->keys || !c->table || !c->epoch || !c->stamp || !c->data) {
		sc_free(c);
		return -ENOMEM;
	}
	c->bytes = slots * (slot_bytes + SC_META);
	for (int i = 0; i < SC_STRIPES; i++)
		pthread_mutex_init(&c->mu[i], NULL);
	return 0;
}

void sc_free(struct scache *c)
{
	if (c->nsets && c->data)
		for (int i = 0; i < SC_STRIPES; i++)
			pthread_mutex_destroy(&c->mu[i]);
	free(c->keys);
	free(c->table);
	free(c->epoch);
	free(c->stamp);
	free(c->data);
	memset(c, 0, sizeof(*c));
}

static uint64_t set_of(const struct scache *c, uint32_t table, uint64_t id)
{
	uint64_t h = hash_u64(id, 0x5345525645ULL + table);

	return (uint64_t)(((unsigned __int128)h * c->nsets) >> 64);
}

/* The way of (table, id) in set s, or -1 (its stripe held). */
static int find(const struct scache *c, uint64_t s, uint32_t table, uint64_t id)
{
	uint64_t b = s * SC_WAYS;

	for (int w = 0; w < SC_WAYS; w++)
		if (c->table[b + w] == table + 1 && c->keys[b + w] == id)
			return w;
	return -1;
}

/* The set's next stamp (its stripe held): one above its ways'. */
static uint32_t next_stamp(const struct scache *c, uint64_t s)
{
	uint32_t m = 0;

	for (int w = 0; w < SC_WAYS; w++)
		if (c->stamp[s * SC_WAYS + w] > m)
			m = c->stamp[s * SC_WAYS + w];
	return m + 1;
}

bool sc_get(struct scache *c, uint32_t table, uint64_t id, uint32_t e,
	    et_dtype dt, uint32_t dim, float *out)
{
	uint64_t s = set_of(c, table, id), slot;
	pthread_mutex_t *mu = &c->mu[s % SC_STRIPES];
	uint32_t clean = __atomic_load_n(&c->clean, __ATOMIC_ACQUIRE);
	bool hit = false;
	int w;

	pthread_mutex_lock(mu);
	w = find(c, s, table, id);
	if (w >= 0) {
		slot = s * SC_WAYS + (uint64_t)w;
		if (c->epoch[slot] == e || (c->epoch[slot] < e && clean >= e)) {
			dtype_decode(dt, c->data + slot * c->slot_bytes, out,
				     dim);
			c->stamp[slot] = next_stamp(c, s);
			hit = true;
		}
	}
	pthread_mutex_unlock(mu);
	__atomic_add_fetch(hit ? &c->hits : &c->misses, 1, __ATOMIC_RELAXED);
	return hit;
}

void sc_put(struct scache *c, uint32_t table, uint64_t id, uint32_t e,
	    const void *src, uint32_t row_bytes)
{
	uint64_t s = set_of(c, table, id), b = s * SC_WAYS, slot;
	pthread_mutex_t *mu = &c->mu[s % SC_STRIPES];
	int w;

	if (row_bytes > c->slot_bytes)
		return;
	pthread_mutex_lock(mu);
	w = find(c, s, table, id);
	if (w >= 0 && c->epoch[b + (uint64_t)w] > e) {
		/* a newer reader's: keep it */
		pthread_mutex_unlock(mu);
		return;
	}
	if (w < 0) { /* an empty way, else the least recently used */
		w = 0;
		for (int k = 0; k < SC_WAYS; k++) {
			if (!c->table[b + k]) {
				w = k;
				break;
			}
			if (c->stamp[b + k] < c->stamp[b + w])
				w = k;
		}
	}
	slot = b + (uint64_t)w;
	c->keys[slot] = id;
	c->table[slot] = table + 1;
	c->epoch[slot] = e;
	c->stamp[slot] = next_stamp(c, s);
	memcpy(c->data + slot * c->slot_bytes, src, row_bytes);
	pthread_mutex_unlock(mu);
	__atomic_add_fetch(&c->inserts, 1, __ATOMIC_RELAXED);
}

void sc_forget(struct scache *c, uint32_t table, const uint64_t *ids, size_t n,
	       uint32_t e)
{
	for (size_t i = 0; i < n; i++) {
		uint64_t s = set_of(c, table, ids[i]);
		pthread_mutex_t *mu = &c->mu[s % SC_STRIPES];
		int w;

		pthread_mutex_lock(mu);
		w = find(c, s, table, ids[i]);
		if (w >= 0 && c->epoch[s * SC_WAYS + (uint64_t)w] < e)
			c->table[s * SC_WAYS + (uint64_t)w] = 0;
		pthread_mutex_unlock(mu);
	}
}

/* Drops the entries of epochs before e of table (all tables: UINT32_MAX). */
static void forget_where(struct scache *c, uint32_t table, uint32_t e)
{
	for (uint64_t s = 0; s < c->nsets; s++) {
		pthread_mutex_t *mu = &c->mu[s % SC_STRIPES];

		pthread_mutex_lock(mu);
		for (uint64_t k = s * SC_WAYS; k < (s + 1) * SC_WAYS; k++)
			if (c->table[k] &&
			    (table == UINT32_MAX || c->table[k] == table + 1) &&
			    c->epoch[k] < e)
				c->table[k] = 0;
		pthread_mutex_unlock(mu);
	}
}

void sc_forget_table(struct scache *c, uint32_t table, uint32_t e)
{
	forget_where(c, table, e);
}

void sc_forget_all(struct scache *c, uint32_t e)
{
	forget_where(c, UINT32_MAX, e);
}

void sc_clean(struct scache *c, uint32_t e)
{
	__atomic_store_n(&c->clean, e, __ATOMIC_RELEASE);
}
