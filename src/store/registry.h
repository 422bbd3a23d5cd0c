/*
 * registry.h - the tables of a store and the size classes that split each
 * tier among them (registry.c alone writes them): which table is which,
 * each class's share of every tier, and its cache instances. Not
 * installed.
 */
#ifndef ET_REGISTRY_H
#define ET_REGISTRY_H

#include "admit.h"
#include <stdbool.h>
#include <stdint.h>

#include "cache.h"
#include "embtier.h"
#include "table_file.h"

#define NAME_MAX_LEN 64

struct table {
	et_tfile *tf;
	const struct tf_geom *g;
	uint32_t cls; /* its size class: the registry's cls[cls] */
	char name[NAME_MAX_LEN + 1];
	struct et_stats st; /* FBGEMM counters and NVMe counters */
	struct keypol kp;   /* a keyed table's policy (admit.h) */
};

/*
 * A size class: the tables whose rows take slots of one size, and the
 * cache instances of each tier holding them. Every class gets a share of
 * each tier: one set at least, the rest in proportion to its weight, the
 * bytes its tables would take if every row were cached (the split that
 * gives every row the same chance to be cached). Classes are made as
 * tables come and never go.
 */
struct sclass {
	uint32_t slot_bytes;
	double weight;	    /* sum over its tables: rows x (slot + metadata) */
	uint64_t rows;	    /* sum over its row-indexed tables */
	uint32_t keyed;	    /* keyed tables in it */
	uint64_t nsets[2];  /* sets of its HBM, DDR instance: its share */
	uint64_t direct[2]; /* slots of that share's bytes, if they are one
			     * for every row: the instance is direct, of
			     * these slots (else 0) */
	struct cache hbm, ddr;
	struct cache_stats kept[2]; /* counters while the caches are down */
};

struct registry {
	struct table *tables;
	uint32_t ntables, tcap;
	struct sclass *cls;
	uint32_t ncls, clscap;
	bool has_hbm;	   /* a HBM tier: rows are used there */
	bool count_draws;  /* a tier's policy counts accesses (on_hits) */
	bool caches_ready; /* every class's caches are allocated */
	uint64_t gen;	   /* bumped when the caches are freed or the pins
			    * wrap: earlier memos no longer stand */
};

/* The bytes of a row of table t, as stored. */
static inline uint32_t table_rb(const struct registry *r, uint32_t t)
{
	return r->tables[t].g->row_bytes;
}

/* The size class of table t. */
static inline struct sclass *class_of(const struct registry *r, uint32_t t)
{
	return &r->cls[r->tables[t].cls];
}

/* The tier where rows are used: HBM if there is one, else DDR. */
static inline struct cache *top_of(const struct registry *r, struct sclass *c)
{
	return r->has_hbm ? &c->hbm : &c->ddr;
}

/* Table id of s, or NULL; no_table is the error to return then. */
struct table *table_get(et_store *s, int id);
int no_table(const et_store *s, int id);
/* The ids of one batch for table t (named what in a message). */
int ids_check(const struct table *t, int table, const uint64_t *ids, size_t n,
	      const char *what);
/* Adds tf under name as table *id, in class cls (reg_class_plan). */
int reg_table_add(et_store *s, et_tfile *tf, const char *name, uint32_t cls,
		  int *id);

/* ET_ECAPACITY unless a tier of bytes holds `ways` slots of slot bytes. */
int tier_fits(const char *field, uint64_t bytes, uint32_t ways, uint32_t slot,
	      et_policy pol);
/* Enters a table of g in its size class (*cls, new if its slot size is),
 * plans the tiers again and says in *moves whether allocated caches
 * must be freed for the new plan (after a flush: reg_class_undo if that
 * fails). The store's slot is then *slot at least. */
/* et_direct_bytes of a checked config c (its defaults taken) and n
 * row-indexed tables of these row bytes and rows. */
int reg_direct_bytes(const struct et_store_config *c, const uint32_t *row_bytes,
		     const uint64_t *rows, size_t n, int tier, uint64_t *bytes);
int reg_class_plan(et_store *s, const struct tf_geom *g, uint32_t *cls,
		   bool *moves, uint32_t *slot);
void reg_class_undo(et_store *s, const struct tf_geom *g, uint32_t cls);
/* Allocates every class's caches as planned, if they are not. */
int caches_ensure(et_store *s);
/* Frees them, keeping their counters; memos no longer stand. */
void caches_drop(et_store *s);
/* The pins wrapped: memos no longer stand. */
void reg_memos_void(et_store *s);
void reg_free(et_store *s);

#endif
