/*
 * registry.c - the tables of a store and the size classes that split each
 * tier among them: the plan of every class's share, and its caches.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "mem_host.h"
#include "policy.h"
#include "state.h"

#define MAX_TABLES 65534

/* A cache slot's tag holds table + 1 in 30 bits (key.h). */
_Static_assert(MAX_TABLES < CACHE_MAX_TABLES, "table ids must fit a tag");

struct table *table_get(et_store *s, int id)
{
	if (!s || id < 0 || (uint32_t)id >= s->reg.ntables)
		return NULL;
	return &s->reg.tables[id];
}

/* The failure of table_get(s, id). */
int no_table(const et_store *s, int id)
{
	if (!s)
		return err_set(-EINVAL, "s is NULL");
	return err_set(ET_ENOTABLE, "table %d unknown: the store has %u", id,
		       s->reg.ntables);
}

/* ET_ECAPACITY unless a tier of bytes holds `ways` slots of slot bytes. */
int tier_fits(const char *field, uint64_t bytes, uint32_t ways, uint32_t slot,
	      et_policy pol)
{
	uint64_t per = cache_slot_cost(slot, policy_get(pol));

	if (bytes / per >= ways)
		return 0;
	return err_set(ET_ECAPACITY,
		       "et_store_config.%s %llu holds fewer than ways (%u) "
		       "slots of %u bytes (+%u of metadata)",
		       field, (unsigned long long)bytes, ways, slot,
		       (unsigned)(per - slot));
}

/* What a slot of class c costs in tier (0: HBM, 1: DDR). */
static uint64_t slot_cost(const et_store *s, int tier, uint32_t slot)
{
	return cache_slot_cost(
	    slot, policy_get(tier ? s->cfg.ddr_policy : s->cfg.hbm_policy));
}

/* Rows are stored in slots rounded to 4 bytes (the state is f32), and at
 * least cfg.slot_bytes big: rows up to that share one class. */
static uint32_t slot_of(uint32_t cfg_slot, uint32_t row_bytes)
{
	uint32_t slot = (row_bytes + 3) & ~3u;
	uint32_t min = (cfg_slot + 3) & ~3u;

	return slot > min ? slot : min;
}

static uint32_t slot_for(const et_store *s, uint32_t row_bytes)
{
	return slot_of(s->cfg.slot_bytes, row_bytes);
}

/* ET_ECAPACITY unless a tier of bytes (0: HBM, 1: DDR; policy pol, ways
 * a set) holds one set of each of the n classes cls[0..n). */
static int plan_fits(const struct sclass *cls, uint32_t n, int tier,
		     uint64_t bytes, uint32_t ways, et_policy pol)
{
	uint64_t need = 0;

	for (uint32_t i = 0; i < n; i++)
		need += (uint64_t)ways *
			cache_slot_cost(cls[i].slot_bytes, policy_get(pol));
	if (need <= bytes)
		return 0;
	return err_set(ET_ECAPACITY,
		       "et_store_config.%s %llu cannot hold one set (%u ways) "
		       "of each of the %u row sizes: %llu bytes needed",
		       tier ? "ddr_bytes" : "hbm_bytes",
		       (unsigned long long)bytes, ways, n,
		       (unsigned long long)need);
}

/*
 * Plans the split of a tier that plan_fits among the n classes into their
 * nsets[tier]: one set each, then the rest of the bytes in proportion to
 * the classes' weights (by cumulative sums, so the shares add up to the
 * tier exactly); and direct[tier], the slots of a share that has one for
 * every row of its class (0: not direct). Reads the classes' slot_bytes,
 * weight, rows and keyed only: et_direct_bytes plans with it too.
 */
static void plan_tier(struct sclass *cls, uint32_t n, int tier, uint64_t bytes,
		      uint32_t ways, et_policy pol)
{
	uint64_t rest = bytes, prev = 0;
	double wsum = 0, wcum = 0;

	for (uint32_t i = 0; i < n; i++) {
		rest -= (uint64_t)ways *
			cache_slot_cost(cls[i].slot_bytes, policy_get(pol));
		wsum += cls[i].weight;
	}
	for (uint32_t i = 0; i < n; i++) {
		struct sclass *c = &cls[i];
		uint64_t per = cache_slot_cost(c->slot_bytes, policy_get(pol));
		uint64_t upto;

		wcum += c->weight;
		upto = i + 1 == n ? rest
				  : (uint64_t)((double)rest * (wcum / wsum));
		if (upto > rest)
			upto = rest;
		if (upto < prev)
			upto = prev;
		c->nsets[tier] = 1 + (upto - prev) / per / ways;
		/* the share's bytes: one set, and upto - prev */
		c->direct[tier] = (ways * per + (upto - prev)) / per;
		if (c->keyed || c->rows > c->direct[tier])
			c->direct[tier] = 0;
		prev = upto;
	}
}

/* Plans the split of each tier among the first n classes (plan_tier).
 * ET_ECAPACITY if a tier cannot give every class one set; nothing is
 * changed then. */
static int plan(et_store *s, uint32_t n)
{
	const et_policy pol[2] = {s->cfg.hbm_policy, s->cfg.ddr_policy};
	const uint64_t bytes[2] = {s->cfg.hbm_bytes, s->cfg.ddr_bytes};
	int first = s->reg.has_hbm ? 0 : 1;

	for (int tier = first; tier < 2; tier++) {
		int ret = plan_fits(s->reg.cls, n, tier, bytes[tier],
				    s->cfg.ways, pol[tier]);

		if (ret)
			return ret;
	}
	for (int tier = first; tier < 2; tier++)
		plan_tier(s->reg.cls, n, tier, bytes[tier], s->cfg.ways,
			  pol[tier]);
	return 0;
}

/* Whether every class of cls[0..n) is direct in a tier of bytes. */
static bool all_direct(struct sclass *cls, uint32_t n, int tier, uint64_t bytes,
		       uint32_t ways, et_policy pol)
{
	uint64_t need = 0;

	for (uint32_t i = 0; i < n; i++) /* plan_fits, quietly */
		need += (uint64_t)ways *
			cache_slot_cost(cls[i].slot_bytes, policy_get(pol));
	if (need > bytes)
		return false;
	plan_tier(cls, n, tier, bytes, ways, pol);
	for (uint32_t i = 0; i < n; i++)
		if (!cls[i].direct[tier])
			return false;
	return true;
}

int reg_direct_bytes(const struct et_store_config *c, const uint32_t *row_bytes,
		     const uint64_t *rows, size_t n, int tier, uint64_t *bytes)
{
	et_policy pol = tier ? c->ddr_policy : c->hbm_policy;
	struct sclass *cls = calloc(n ? n : 1, sizeof(*cls));
	uint64_t lo = 0, hi = 0;
	uint32_t ncls = 0;
	int ret = 0;

	if (!cls)
		return -ENOMEM;
	for (size_t t = 0; t < n; t++) {
		uint32_t sl = slot_of(c->slot_bytes, row_bytes[t]), i;

		for (i = 0; i < ncls && cls[i].slot_bytes != sl; i++)
			;
		ncls += i == ncls;
		cls[i].slot_bytes = sl;
		cls[i].weight += (double)rows[t] * (sl + ET_SLOT_META_BYTES);
		cls[i].rows += rows[t];
		hi += rows[t] * cache_slot_cost(sl, policy_get(pol));
		if (hi > UINT64_MAX / 4) { /* 2^40 rows of 2^15 bytes fit */
			ret = err_set(ET_ECAPACITY,
				      "the tables take more than 2^62 bytes");
			goto out;
		}
	}
	/* hi: doubled until it holds them all; then the least that does
	 * (to within the split's rounding: a share is not monotone in the
	 * tier's bytes by a byte or so), by bisection */
	while (!all_direct(cls, ncls, tier, hi, c->ways, pol)) {
		if (hi > UINT64_MAX / 4) {
			ret = err_set(ET_ECAPACITY,
				      "no tier size holds these tables "
				      "direct-mapped");
			goto out;
		}
		lo = hi;
		hi *= 2;
	}
	while (hi - lo > 1) {
		uint64_t mid = lo + (hi - lo) / 2;

		if (all_direct(cls, ncls, tier, mid, c->ways, pol))
			hi = mid;
		else
			lo = mid;
	}
	*bytes = hi;
out:
	free(cls);
	return ret;
}

/* Whether instance k of class c in tier is as planned. */
static bool as_planned(const struct cache *k, const struct sclass *c, int tier)
{
	if (c->direct[tier])
		return k->direct && k->nsets == c->direct[tier];
	return !k->direct && k->nsets == c->nsets[tier];
}

/* Whether the allocated caches differ from the plan. */
static bool plan_changed(const et_store *s)
{
	for (uint32_t i = 0; i < s->reg.ncls; i++) {
		const struct sclass *c = &s->reg.cls[i];

		if ((s->reg.has_hbm && !as_planned(&c->hbm, c, 0)) ||
		    !as_planned(&c->ddr, c, 1))
			return true;
	}
	return false;
}

/* Frees every class's caches, keeping their counters. */
void caches_drop(et_store *s)
{
	for (uint32_t i = 0; i < s->reg.ncls; i++) {
		struct sclass *c = &s->reg.cls[i];

		if (c->hbm.keys) {
			c->kept[0] = c->hbm.st;
			cache_free(&c->hbm);
		}
		if (c->ddr.keys) {
			c->kept[1] = c->ddr.st;
			cache_free(&c->ddr);
		}
	}
	s->reg.caches_ready = false;
	s->reg.gen++; /* the memos' slots are void */
}

/* Allocates tier (0: HBM, 1: DDR) of class i as planned: set-associative,
 * or direct with the class's tables in the order they came. */
static int class_init(et_store *s, uint32_t i, int tier,
		      const struct mem_tier *mem)
{
	struct sclass *c = &s->reg.cls[i];
	struct cache *k = tier ? &c->ddr : &c->hbm;
	const struct policy_ops *pol =
	    policy_get(tier ? s->cfg.ddr_policy : s->cfg.hbm_policy);
	int ret;

	if (!c->direct[tier])
		return cache_init(k,
				  c->nsets[tier] * s->cfg.ways *
				      slot_cost(s, tier, c->slot_bytes),
				  s->cfg.ways, c->slot_bytes, pol, mem);
	ret = cache_init_direct(k, c->direct[tier], c->slot_bytes, pol, mem);
	for (uint32_t t = 0; t < s->reg.ntables && !ret; t++)
		if (s->reg.tables[t].cls == i)
			ret = cache_direct_add(k, t, s->reg.tables[t].g->rows);
	return ret;
}

/* Allocates the caches as planned, if they are not. Called by every entry
 * point that touches rows; tables are usually all registered by then, so
 * the caches are allocated once. */
int caches_ensure(et_store *s)
{
	const struct mem_tier *hm = &mem_tier_hbm_sim;
	int ret;

	if (s->reg.caches_ready || !s->reg.ncls)
		return 0;
	if (s->cfg.hbm_backend == ET_HBM_CUDA) {
		hm = mem_tier_hbm_cuda();
		if (!hm)
			return err_set(ET_ECONFIG,
				       "et_store_config.hbm_backend "
				       "ET_HBM_CUDA: no CUDA device, or a "
				       "build without CUDA");
	}
	ret = 0;
	for (uint32_t i = 0; i < s->reg.ncls && !ret; i++) {
		struct sclass *c = &s->reg.cls[i];

		if (s->reg.has_hbm) {
			ret = class_init(s, i, 0, hm);
			if (ret)
				break;
			c->hbm.st = c->kept[0];
			c->hbm.la = &s->la;
		}
		ret = class_init(s, i, 1, &mem_tier_host);
		if (!ret) {
			c->ddr.st = c->kept[1];
			c->ddr.la = &s->la;
		}
	}
	if (ret) {
		caches_drop(s);
		return ret;
	}
	s->reg.caches_ready = true;
	return 0;
}

/* The ids of one batch for table t: what names them in a message. */
int ids_check(const struct table *t, int table, const uint64_t *ids, size_t n,
	      const char *what)
{
	if (n && !ids)
		return err_set(-EINVAL, "%s is NULL, with %zu ids", what, n);
	if (n > UINT32_MAX)
		return err_set(-E2BIG, "%zu ids: at most %u a call", n,
			       UINT32_MAX);
	for (size_t i = 0; i < n && !t->g->keyed; i++)
		if (ids[i] >= t->g->rows)
			return err_set(ET_EROWRANGE,
				       "%s[%zu] %llu >= rows %llu of table %d",
				       what, i, (unsigned long long)ids[i],
				       (unsigned long long)t->g->rows, table);
	return 0;
}

/* The weight of a table of g in its class: the bytes its rows would take
 * if every one were cached. A keyed table has no number of rows: it
 * weighs as KEYED_WEIGHT_ROWS (weighed as 2^40, it left every other class
 * one set). */
#define KEYED_WEIGHT_ROWS (1ULL << 24)

static double class_weight(const et_store *s, const struct tf_geom *g)
{
	return (double)(g->keyed ? KEYED_WEIGHT_ROWS : g->rows) *
	       (slot_for(s, g->row_bytes) + ET_SLOT_META_BYTES);
}

int reg_class_plan(et_store *s, const struct tf_geom *g, uint32_t *cls,
		   bool *moves, uint32_t *slot)
{
	struct registry *r = &s->reg;
	uint32_t sl = slot_for(s, g->row_bytes), i;
	bool fresh;
	int ret;

	if (r->ntables >= MAX_TABLES)
		return err_set(-EMFILE, "%d tables open: no more allowed",
			       MAX_TABLES);
	if (r->ntables == r->tcap && array_grow((void **)&r->tables, &r->tcap,
						r->ntables, sizeof(*r->tables)))
		return -ENOMEM;
	for (i = 0; i < r->ncls; i++)
		if (r->cls[i].slot_bytes == sl)
			break;
	fresh = i == r->ncls;
	if (fresh && i == r->clscap &&
	    array_grow((void **)&r->cls, &r->clscap, r->ncls, sizeof(*r->cls)))
		return -ENOMEM;
	if (fresh) {
		memset(&r->cls[i], 0, sizeof(r->cls[i]));
		r->cls[i].slot_bytes = sl;
		r->ncls++;
	}
	r->cls[i].weight += class_weight(s, g);
	r->cls[i].rows += g->keyed ? 0 : g->rows;
	r->cls[i].keyed += g->keyed;
	ret = plan(s, r->ncls);
	if (ret) {
		reg_class_undo(s, g, i);
		return ret;
	}
	*moves = r->caches_ready && (fresh || plan_changed(s));
	*cls = i;
	*slot = sl;
	return 0;
}

/* Takes back what reg_class_plan did for a table of g that was not added:
 * its weight, and its class if no table is in it. */
void reg_class_undo(et_store *s, const struct tf_geom *g, uint32_t cls)
{
	struct registry *r = &s->reg;
	bool used = false;

	r->cls[cls].weight -= class_weight(s, g);
	r->cls[cls].rows -= g->keyed ? 0 : g->rows;
	r->cls[cls].keyed -= g->keyed;
	for (uint32_t k = 0; k < r->ntables && !used; k++)
		used = r->tables[k].cls == cls;
	if (!used && cls + 1 == r->ncls)
		r->ncls--; /* made for it: classes are appended */
	if (r->ncls)
		plan(s, r->ncls); /* succeeded before */
}

int reg_table_add(et_store *s, et_tfile *tf, const char *name, uint32_t cls,
		  int *id)
{
	struct registry *r = &s->reg;
	struct table *t = &r->tables[r->ntables]; /* room: reg_class_plan */
	struct sclass *c = &r->cls[cls];
	uint64_t hnext = c->hbm.dnext;
	int ret = 0;

	/* caches kept (the plan as it was): a direct one takes it in */
	if (r->caches_ready && c->hbm.direct)
		ret = cache_direct_add(&c->hbm, r->ntables, tf_geom(tf)->rows);
	if (!ret && r->caches_ready && c->ddr.direct)
		ret = cache_direct_add(&c->ddr, r->ntables, tf_geom(tf)->rows);
	if (ret) {
		c->hbm.dnext = hnext;
		return ret;
	}
	memset(t, 0, sizeof(*t));
	t->tf = tf;
	t->g = tf_geom(tf);
	t->cls = cls;
	snprintf(t->name, sizeof(t->name), "%s", name);
	*id = (int)r->ntables++;
	return 0;
}

void reg_memos_void(et_store *s)
{
	s->reg.gen++;
}

void reg_free(et_store *s)
{
	struct registry *r = &s->reg;

	for (uint32_t i = 0; i < r->ntables; i++) {
		et_tfile_close(r->tables[i].tf);
		keypol_free(&r->tables[i].kp);
	}
	mem_free(r->tables, r->tcap * sizeof(*r->tables), 0);
	caches_drop(s);
	mem_free(r->cls, r->clscap * sizeof(*r->cls), 0);
}
