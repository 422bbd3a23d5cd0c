/*
 * store.c - the store's lifetime and its tables: opening and closing a
 * store, commits, the table registry and the size classes that split the
 * tiers among tables, checkpoints and stats.
 *
 * How a batch goes through the tiers is in tier.c, the write-back queue in
 * writeback.c, the operations (gather, update) in kernels.c, prefetch in
 * prefetch.c; store_impl.h holds the state they share and an overview.
 *
 * One thread at a time per store.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint.h"
#include "commit.h"
#include "error.h"
#include "io.h"
#include "mem_host.h"
#include "policy.h"
#include "store_impl.h"
#include "workers.h"

#define MAX_TABLES   65534
#define DEFAULT_DDR  (256ULL << 20)
#define DEFAULT_WAYS 16
/* The largest slot that may be asked for: a row of ET_MAX_DIM f32 values and
 * its optimizer state, with room to spare. */
#define MAX_SLOT_BYTES (ET_MAX_DIM * 4u + 64)

int sbuf_reserve(struct sbuf *b, size_t bytes)
{
	void *p;
	size_t cap;

	if (bytes <= b->cap)
		return 0;
	cap = b->cap ? b->cap : 4096;
	while (cap < bytes)
		cap *= 2;
	p = mem_alloc(cap, 64);
	if (!p)
		return -ENOMEM;
	if (b->p) {
		memcpy(p, b->p, b->cap);
		mem_free(b->p, b->cap, 64);
	}
	b->p = p;
	b->cap = cap;
	return 0;
}

void sbuf_free(struct sbuf *b)
{
	mem_free(b->p, b->cap, 64);
	b->p = NULL;
	b->cap = 0;
}

/* ------------------------------------------------------------- registry */

/* Table names become file names: 1..64 of [A-Za-z0-9_.-], no leading '.'
 * (no hidden files, no "." or ".."). */
static int name_check(const char *name)
{
	size_t n;

	if (!name)
		return err_set(-EINVAL, "name is NULL");
	n = strlen(name);
	if (n == 0 || n > NAME_MAX_LEN)
		return err_set(ET_ECONFIG,
			       "table name of %zu characters: 1..%d allowed", n,
			       NAME_MAX_LEN);
	if (name[0] == '.')
		return err_set(ET_ECONFIG, "table name \"%s\" starts with '.'",
			       name);
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)name[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		      (c >= '0' && c <= '9') || c == '_' || c == '-' ||
		      c == '.'))
			return err_set(ET_ECONFIG,
				       "table name: character 0x%02x at %zu "
				       "not in [A-Za-z0-9_.-]",
				       c, i);
	}
	return 0;
}

static int name_free(const et_store *s, const char *name)
{
	for (uint32_t i = 0; i < s->ntables; i++)
		if (!strcmp(s->tables[i].name, name))
			return err_set(-EEXIST, "table \"%s\" already open",
				       name);
	return 0;
}

static int table_path(const et_store *s, const char *name, char **out)
{
	size_t n = strlen(s->dir) + strlen(name) + 5; /* "/", ".et", NUL */
	char *p = mem_alloc(n, 0);

	if (!p)
		return -ENOMEM;
	snprintf(p, n, "%s/%s.et", s->dir, name);
	*out = p;
	return 0;
}

struct table *table_get(et_store *s, int id)
{
	if (!s || id < 0 || (uint32_t)id >= s->ntables)
		return NULL;
	return &s->tables[id];
}

/* The failure of table_get(s, id). */
int no_table(const et_store *s, int id)
{
	if (!s)
		return err_set(-EINVAL, "s is NULL");
	return err_set(ET_ENOTABLE, "table %d unknown: the store has %u", id,
		       s->ntables);
}

/* Doubles the capacity *cap (from 8) of the array *p of n elements of
 * size bytes each. */
static int array_grow(void **p, uint32_t *cap, uint32_t n, size_t size)
{
	uint32_t ncap = *cap ? *cap * 2 : 8;
	void *np = mem_alloc(ncap * size, 0);

	if (!np)
		return -ENOMEM;
	if (*p) {
		memcpy(np, *p, n * size);
		mem_free(*p, *cap * size, 0);
	}
	*p = np;
	*cap = ncap;
	return 0;
}

/* ET_ECAPACITY unless a tier of bytes holds `ways` slots of slot bytes. */
static int tier_fits(const char *field, uint64_t bytes, uint32_t ways,
		     uint32_t slot, et_policy pol)
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
static uint32_t slot_for(const et_store *s, uint32_t row_bytes)
{
	uint32_t slot = (row_bytes + 3) & ~3u;
	uint32_t min = (s->cfg.slot_bytes + 3) & ~3u;

	return slot > min ? slot : min;
}

/*
 * Plans the split of each tier among the first n classes into their
 * nsets: one set each, then the rest of the tier's bytes in proportion to
 * the classes' weights (by cumulative sums, so the shares add up to the
 * tier exactly). ET_ECAPACITY if a tier cannot give every class one set;
 * nothing is changed then.
 */
static int plan(et_store *s, uint32_t n)
{
	uint64_t bytes[2] = {s->cfg.hbm_bytes, s->cfg.ddr_bytes};
	double wsum = 0;

	for (int tier = s->has_hbm ? 0 : 1; tier < 2; tier++) {
		uint64_t need = 0;

		for (uint32_t i = 0; i < n; i++)
			need += (uint64_t)s->cfg.ways *
				slot_cost(s, tier, s->cls[i].slot_bytes);
		if (need > bytes[tier])
			return err_set(ET_ECAPACITY,
				       "et_store_config.%s %llu cannot hold "
				       "one set (%u ways) of each of the %u "
				       "row sizes: %llu bytes needed",
				       tier ? "ddr_bytes" : "hbm_bytes",
				       (unsigned long long)bytes[tier],
				       s->cfg.ways, n,
				       (unsigned long long)need);
	}
	for (uint32_t i = 0; i < n; i++)
		wsum += s->cls[i].weight;
	for (int tier = s->has_hbm ? 0 : 1; tier < 2; tier++) {
		uint64_t rest = bytes[tier], prev = 0;
		double wcum = 0;

		for (uint32_t i = 0; i < n; i++)
			rest -= (uint64_t)s->cfg.ways *
				slot_cost(s, tier, s->cls[i].slot_bytes);
		for (uint32_t i = 0; i < n; i++) {
			struct sclass *c = &s->cls[i];
			uint64_t per = slot_cost(s, tier, c->slot_bytes);
			uint64_t upto;

			wcum += c->weight;
			upto = i + 1 == n
				   ? rest
				   : (uint64_t)((double)rest * (wcum / wsum));
			if (upto > rest)
				upto = rest;
			if (upto < prev)
				upto = prev;
			c->nsets[tier] = 1 + (upto - prev) / per / s->cfg.ways;
			prev = upto;
		}
	}
	return 0;
}

/* Whether the allocated caches differ from the plan. */
static bool plan_changed(const et_store *s)
{
	for (uint32_t i = 0; i < s->ncls; i++) {
		const struct sclass *c = &s->cls[i];

		if ((s->has_hbm && c->hbm.nsets != c->nsets[0]) ||
		    c->ddr.nsets != c->nsets[1])
			return true;
	}
	return false;
}

/* Frees every class's caches, keeping their counters. */
static void caches_drop(et_store *s)
{
	for (uint32_t i = 0; i < s->ncls; i++) {
		struct sclass *c = &s->cls[i];

		if (c->hbm.keys) {
			c->kept[0] = c->hbm.st;
			cache_free(&c->hbm);
		}
		if (c->ddr.keys) {
			c->kept[1] = c->ddr.st;
			cache_free(&c->ddr);
		}
	}
	s->caches_ready = false;
	s->gen++; /* the memos' slots are void */
}

/* Allocates the caches as planned, if they are not. Called by every entry
 * point that touches rows; tables are usually all registered by then, so
 * the caches are allocated once. */
int caches_ensure(et_store *s)
{
	const struct mem_tier *hm = &mem_tier_hbm_sim;
	int ret;

	if (s->caches_ready || !s->ncls)
		return 0;
	if (s->cfg.hbm_backend == ET_HBM_CUDA) {
		hm = mem_tier_hbm_cuda();
		if (!hm)
			return err_set(ET_ECONFIG,
				       "et_store_config.hbm_backend "
				       "ET_HBM_CUDA: no CUDA device, or a "
				       "build without CUDA");
	}
	ret = sbuf_reserve(&s->tmp, s->slot_bytes); /* place_row's victim */
	for (uint32_t i = 0; i < s->ncls && !ret; i++) {
		struct sclass *c = &s->cls[i];
		uint64_t per = slot_cost(s, 0, c->slot_bytes);

		if (s->has_hbm) {
			ret =
			    cache_init(&c->hbm, c->nsets[0] * s->cfg.ways * per,
				       s->cfg.ways, c->slot_bytes,
				       policy_get(s->cfg.hbm_policy), hm);
			if (ret)
				break;
			c->hbm.st = c->kept[0];
			c->hbm.la = &s->la;
		}
		per = slot_cost(s, 1, c->slot_bytes);
		ret = cache_init(&c->ddr, c->nsets[1] * s->cfg.ways * per,
				 s->cfg.ways, c->slot_bytes,
				 policy_get(s->cfg.ddr_policy), &mem_tier_host);
		if (!ret) {
			c->ddr.st = c->kept[1];
			c->ddr.la = &s->la;
		}
	}
	if (ret) {
		caches_drop(s);
		return ret;
	}
	s->caches_ready = true;
	return 0;
}

/*
 * Enters a table of g into its size class (a new one if its slot size is
 * new) and plans the tiers again. If the caches are allocated and the
 * plan moves them, every dirty row is written back first and the caches
 * are freed, to be allocated anew by the next operation: the store never
 * holds two generations of caches at once. On error nothing has changed.
 */
static int class_enter(et_store *s, const struct tf_geom *g, uint32_t *out)
{
	uint32_t slot = slot_for(s, g->row_bytes), i;
	double w = (double)g->rows * (slot + ET_SLOT_META_BYTES);
	int ret;

	for (i = 0; i < s->ncls; i++)
		if (s->cls[i].slot_bytes == slot)
			break;
	if (i == s->clscap &&
	    array_grow((void **)&s->cls, &s->clscap, s->ncls, sizeof(*s->cls)))
		return -ENOMEM;
	if (i == s->ncls) {
		memset(&s->cls[i], 0, sizeof(s->cls[i]));
		s->cls[i].slot_bytes = slot;
	}
	s->cls[i].weight += w;
	ret = plan(s, i == s->ncls ? s->ncls + 1 : s->ncls);
	if (!ret)
		ret = wb_widen(s, slot);
	if (!ret && s->caches_ready && (i == s->ncls || plan_changed(s))) {
		ret = et_flush(s); /* drains the I/O thread too */
		if (!ret)
			caches_drop(s);
	}
	if (ret) {
		s->cls[i].weight -= w;
		if (s->ncls)
			plan(s, s->ncls); /* succeeded before */
		return ret;
	}
	if (i == s->ncls)
		s->ncls++;
	*out = i;
	return 0;
}

static int table_add(et_store *s, et_tfile *tf, const char *name, int *id)
{
	const struct tf_geom *g = tf_geom(tf);
	struct table *t;
	uint32_t cls;
	int ret;

	ret = name_free(s, name);
	if (ret)
		return ret;
	if (s->ntables >= MAX_TABLES)
		return err_set(-EMFILE, "%d tables open: no more allowed",
			       MAX_TABLES);
	if (s->ntables == s->tcap && array_grow((void **)&s->tables, &s->tcap,
						s->ntables, sizeof(*s->tables)))
		return -ENOMEM;
	ret = class_enter(s, g, &cls);
	if (ret)
		return ret;
	t = &s->tables[s->ntables];
	memset(t, 0, sizeof(*t));
	t->tf = tf;
	t->g = g;
	t->cls = cls;
	snprintf(t->name, sizeof(t->name), "%s", name);
	tf_attach_io(tf, s->io);
	tf_log_writes(tf, true); /* rows go to the log, never in place */
	*id = (int)s->ntables++;
	return 0;
}

int et_table_create(et_store *s, const char *name,
		    const struct et_table_params *p, int *id)
{
	et_tfile *tf;
	char *path;
	int ret;

	api_enter(s);
	if (!s || !p || !id)
		return err_set(-EINVAL, "%s is NULL",
			       !s   ? "s"
			       : !p ? "p"
				    : "id");
	ret = name_check(name);
	if (!ret)
		ret = name_free(s, name);
	if (ret)
		return ret;
	ret = table_path(s, name, &path);
	if (ret)
		return ret;
	ret = tf_create(path, p, true, &tf);
	if (!ret) {
		ret = table_add(s, tf, name, id);
		if (ret) {
			et_tfile_close(tf);
			unlink(path);
		}
	}
	mem_free(path, strlen(path) + 1, 0);
	return ret;
}

/* ET_EMISMATCH, naming the first field, unless every non-zero field of e
 * matches the file. */
static int expect_check(const struct tf_geom *g,
			const struct et_table_params *e)
{
#define CHECK(field)                                                           \
	if (e->field && e->field != g->field)                                  \
		return err_set(ET_EMISMATCH,                                   \
			       "expect->" #field " %llu, the file has %llu",   \
			       (unsigned long long)e->field,                   \
			       (unsigned long long)g->field);
	CHECK(rows)
	CHECK(dim)
	CHECK(dtype)
	CHECK(optim)
	CHECK(init)
	if (e->init_scale && e->init_scale != g->init_scale)
		return err_set(ET_EMISMATCH,
			       "expect->init_scale %.9g, the file has %.9g",
			       e->init_scale, g->init_scale);
	CHECK(seed)
	CHECK(block_size)
#undef CHECK
	return 0;
}

int et_table_open(et_store *s, const char *name,
		  const struct et_table_params *expect, int *id)
{
	et_tfile *tf;
	char *path;
	int ret;

	api_enter(s);
	if (!s || !id)
		return err_set(-EINVAL, "%s is NULL", !s ? "s" : "id");
	ret = name_check(name);
	if (!ret)
		ret = name_free(s, name);
	if (ret)
		return ret;
	ret = table_path(s, name, &path);
	if (ret)
		return ret;
	ret = tf_open(path, 0, true, &tf);
	mem_free(path, strlen(path) + 1, 0);
	if (ret)
		return ret;
	ret = expect ? expect_check(tf_geom(tf), expect) : 0;
	if (!ret)
		ret = table_add(s, tf, name, id);
	if (ret)
		et_tfile_close(tf);
	return ret;
}

int et_table_info(et_store *s, int table, struct et_table_info *info)
{
	struct table *t = table_get(s, table);
	int ret;

	api_enter(s);
	if (!t)
		return no_table(s, table);
	ret = drain(s); /* the file's map is the I/O thread's meanwhile */
	return ret ? ret : et_tfile_info(t->tf, info);
}

/* ------------------------------------------------------------- lifetime */

static int config_check(struct et_store_config *c)
{
	int ret;

	if (!c->ddr_bytes)
		c->ddr_bytes = DEFAULT_DDR;
	if (!c->hbm_policy)
		c->hbm_policy = ET_POLICY_LRU;
	if (!c->ddr_policy)
		c->ddr_policy = ET_POLICY_LRU;
	if (!c->ways)
		c->ways = DEFAULT_WAYS;
	if (!c->io_depth)
		c->io_depth = IO_DEFAULT_DEPTH;
	if (!policy_get(c->hbm_policy))
		return err_set(ET_ECONFIG,
			       "et_store_config.hbm_policy %d unknown",
			       (int)c->hbm_policy);
	if (!policy_get(c->ddr_policy))
		return err_set(ET_ECONFIG,
			       "et_store_config.ddr_policy %d unknown",
			       (int)c->ddr_policy);
	if (c->ways > 64)
		return err_set(ET_ECONFIG,
			       "et_store_config.ways %u out of range 1..64",
			       c->ways);
	if (c->io_depth > IO_MAX_DEPTH)
		return err_set(ET_ECONFIG,
			       "et_store_config.io_depth %u out of range 1..%d",
			       c->io_depth, IO_MAX_DEPTH);
	if (c->hbm_backend != ET_HBM_SIM && c->hbm_backend != ET_HBM_CUDA)
		return err_set(ET_ECONFIG,
			       "et_store_config.hbm_backend %d unknown",
			       (int)c->hbm_backend);
	if (c->hbm_bytes && c->hbm_backend == ET_HBM_CUDA &&
	    !mem_tier_hbm_cuda())
		return err_set(ET_ECONFIG,
			       "et_store_config.hbm_backend ET_HBM_CUDA: no "
			       "CUDA device, or a build without CUDA");
	if (c->prefetch_thread > 1)
		return err_set(ET_ECONFIG,
			       "et_store_config.prefetch_thread %u: 0 or 1",
			       c->prefetch_thread);
	if (c->threads > WORKERS_MAX)
		return err_set(ET_ECONFIG,
			       "et_store_config.threads %u out of range 0..%d",
			       c->threads, WORKERS_MAX);
	if (c->slot_bytes > MAX_SLOT_BYTES)
		return err_set(ET_ECONFIG,
			       "et_store_config.slot_bytes %u out of range "
			       "0..%u",
			       c->slot_bytes, MAX_SLOT_BYTES);
	/* Capacities must hold one set of the smallest slot (or of the
	 * slots asked for). */
	{
		uint32_t slot = c->slot_bytes ? (c->slot_bytes + 3) & ~3u : 4;

		ret = tier_fits("ddr_bytes", c->ddr_bytes, c->ways, slot,
				c->ddr_policy);
		if (!ret && c->hbm_bytes)
			ret = tier_fits("hbm_bytes", c->hbm_bytes, c->ways,
					slot, c->hbm_policy);
	}
	return ret;
}

int et_store_open(const char *dir, const struct et_store_config *cfg,
		  et_store **out)
{
	struct et_store_config c = {0};
	struct stat st;
	et_store *s;
	int ret, why = 0;

	err_clear();
	if (!dir || !*dir || !out)
		return err_set(-EINVAL, "%s",
			       !out   ? "out is NULL"
			       : !dir ? "dir is NULL"
				      : "dir is empty");
	if (cfg)
		c = *cfg;
	ret = config_check(&c);
	if (ret)
		return ret;
	if (stat(dir, &st)) {
		if (errno != ENOENT)
			return -errno;
		if (mkdir(dir, 0755))
			return -errno;
	} else if (!S_ISDIR(st.st_mode)) {
		return err_set(-ENOTDIR, "dir exists and is not a directory");
	}
	s = mem_alloc(sizeof(*s), 0);
	if (!s)
		return -ENOMEM;
	s->cfg = c;
	s->has_hbm = c.hbm_bytes > 0;
	s->count_draws = (s->has_hbm && policy_get(c.hbm_policy)->on_hits) ||
			 policy_get(c.ddr_policy)->on_hits;
	s->epoch = 1;
	s->lock_fd = -1;
	s->o = &s->one;
	s->dir = mem_alloc(strlen(dir) + 1, 0);
	if (!s->dir) {
		ret = -ENOMEM;
		goto err_free;
	}
	memcpy(s->dir, dir, strlen(dir) + 1);
	ret = io_open(c.io_depth, &s->io, &why);
	if (ret)
		goto err_free;
	ret = pl_start(&s->pl);
	if (!ret && c.threads > 1)
		ret = workers_start(c.threads, &s->wk);
	if (ret)
		goto err_free;
	ret = commit_open(s);
	if (ret)
		goto err_free;
	*out = s;
	return 0;

err_free:
	commit_close(s);
	workers_stop(s->wk);
	sbuf_free(&s->trow);
	pl_stop(s->pl);
	io_close(s->io);
	if (s->dir)
		mem_free(s->dir, strlen(s->dir) + 1, 0);
	mem_free(s, sizeof(*s), 0);
	return ret;
}

static void opscr_free(struct opscr *o)
{
	struct sbuf *bufs[] = {&o->uniq, &o->inv,   &o->last,	&o->ptrs,
			       &o->kind, &o->slots, &o->mrows,	&o->midx,
			       &o->mbuf, &o->acc,   &o->bypass, &o->dids,
			       &o->pfl,	 &o->draws};

	for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
		sbuf_free(bufs[i]);
}

int scratch_grow(struct opscr **arr, uint32_t *n, size_t want)
{
	struct opscr *p;

	if (want <= *n)
		return 0;
	if (want > UINT32_MAX)
		return -E2BIG;
	p = mem_alloc(want * sizeof(*p), 0);
	if (!p)
		return -ENOMEM;
	if (*arr) {
		memcpy(p, *arr, *n * sizeof(*p));
		mem_free(*arr, *n * sizeof(*p), 0);
	}
	*arr = p;
	*n = (uint32_t)want;
	return 0;
}

bool scratch_holds(const struct opscr *o, const uint64_t *ids, size_t n)
{
	return o->dn == n && (!n || !memcmp(o->dids.p, ids, n * sizeof(*ids)));
}

static void store_free(et_store *s)
{
	pf_stop(s);
	pl_stop(s->pl); /* before the files and the ring it uses go */
	workers_stop(s->wk);
	for (uint32_t i = 0; i < s->ntables; i++)
		et_tfile_close(s->tables[i].tf);
	mem_free(s->tables, s->tcap * sizeof(*s->tables), 0);
	caches_drop(s);
	la_free(&s->la);
	mem_free(s->cls, s->clscap * sizeof(*s->cls), 0);
	io_close(s->io);
	struct sbuf *bufs[] = {&s->map,	  &s->tmp,    &s->wkeys, &s->wbuf,
			       &s->wsort, &s->wcount, &s->wrows, &s->wraw,
			       &s->widx,  &s->trow,   &s->rds};
	for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
		sbuf_free(bufs[i]);
	opscr_free(&s->one);
	for (uint32_t i = 0; i < s->nmulti; i++)
		opscr_free(&s->multi[i]);
	mem_free(s->multi, s->nmulti * sizeof(*s->multi), 0);
	for (uint32_t i = 0; i < s->npf; i++)
		opscr_free(&s->pf_scr[i]);
	mem_free(s->pf_scr, s->npf * sizeof(*s->pf_scr), 0);
	commit_close(s);
	mem_free(s->dir, strlen(s->dir) + 1, 0);
	mem_free(s, sizeof(*s), 0);
}

/* Whether any table's row log changed since the last commit. */
static bool changed_since_commit(const et_store *s)
{
	for (uint32_t i = 0; i < s->ntables; i++)
		if (tf_changed(s->tables[i].tf))
			return true;
	return false;
}

/*
 * A clean close commits what was written since the last commit: a new
 * record with the same checkpoint id and dense state and, if there was a
 * checkpoint, the flag that the tables moved on past it.
 */
static int close_commit(et_store *s)
{
	struct ckpt_rec r;
	void *dense = NULL;
	size_t len = 0;
	int ret;

	ret = ckpt_read(s->dir, &r, true, &dense, &len);
	ckpt_rec_free(&r);
	if (ret)
		return ret;
	if (r.commit != s->ckpt) {
		free(dense);
		return err_set(-ESTALE,
			       "%s/CHECKPOINT was replaced behind the "
			       "store's back",
			       s->dir);
	}
	r.commit = s->ckpt + 1;
	if (r.id)
		r.flags |= CKPT_MOVED;
	ret = commit_run(s, &r, dense, len);
	free(dense);
	return ret;
}

int et_store_close(et_store *s)
{
	int ret;

	if (!s)
		return 0;
	pf_stop(s); /* its thread, after the prefetch it runs */
	ret = et_flush(s);
	if (!ret && changed_since_commit(s))
		ret = close_commit(s);
	store_free(s);
	return ret;
}

/* ----------------------------------------------------------- checkpoint */

int et_checkpoint(et_store *s, const void *dense, size_t len)
{
	struct ckpt_rec r;
	int ret;

	api_enter(s);
	if (!s || (len && !dense))
		return err_set(-EINVAL, "%s",
			       !s ? "s is NULL"
				  : "dense is NULL, len is not 0");
	ret = et_flush(s); /* drains, writes back, syncs every file */
	if (ret)
		return ret;
	memset(&r, 0, sizeof(r));
	r.commit = s->ckpt + 1;
	r.id = s->ckpt_id + 1;
	return commit_run(s, &r, dense, len);
}

int et_checkpoint_read(et_store *s, uint64_t *id, void **dense, size_t *len)
{
	struct ckpt_rec r;
	int ret;

	api_enter(s);
	if (!s || !id)
		return err_set(-EINVAL, "%s is NULL", !s ? "s" : "id");
	ret = ckpt_read(s->dir, &r, true, dense, len);
	*id = r.id;
	ckpt_rec_free(&r);
	return ret;
}

int et_checkpoint_info(et_store *s, struct et_checkpoint_info *ci)
{
	api_enter(s);
	if (!s || !ci)
		return err_set(-EINVAL, "%s is NULL", !s ? "s" : "ci");
	return et_checkpoint_read_dir(s->dir, ci, NULL, NULL);
}

int et_checkpoint_read_dir(const char *dir, struct et_checkpoint_info *ci,
			   void **dense, size_t *len)
{
	struct ckpt_rec r;
	struct stat st;
	size_t n = 0;
	void *d = NULL;
	int ret;

	err_clear();
	if (!dir || !ci || (dense && !len))
		return err_set(-EINVAL, "%s is NULL",
			       !dir  ? "dir"
			       : !ci ? "ci"
				     : "len");
	memset(ci, 0, sizeof(*ci));
	if (dense) {
		*dense = NULL;
		*len = 0;
	}
	if (stat(dir, &st))
		return -errno;
	if (!S_ISDIR(st.st_mode))
		return -ENOTDIR;
	ret = ckpt_read(dir, &r, true, dense ? &d : NULL, &n);
	ckpt_rec_free(&r);
	if (ret)
		return ret;
	n = r.dense_len;
	ci->id = r.id;
	ci->commit = r.commit;
	ci->dense_len = n;
	ci->tables_moved = (r.flags & CKPT_MOVED) != 0;
	if (dense) {
		*dense = d;
		*len = n;
	} else {
		free(d);
	}
	return 0;
}

/* ---------------------------------------------------------------- stats */

/* Adds one class's instance of a tier to the tier's counters. */
static void tier_stats(const struct cache *c, struct et_tier_stats *ts)
{
	ts->capacity_rows += cache_slots(c);
	ts->resident_rows += c->used;
	ts->dirty_rows += c->dirty;
	ts->row_bytes += c->row_bytes;
	ts->alloc_bytes +=
	    cache_slots(c) * ((uint64_t)c->slot_bytes + ET_SLOT_META_BYTES) +
	    (c->pol->halve_ticks ? 2 * c->sk.cols : 0);
	ts->hits += c->st.hits;
	ts->misses += c->st.misses;
	ts->inserts += c->st.inserts;
	ts->evictions += c->st.evictions;
	ts->bytes_in += c->st.bytes_in;
	ts->bytes_out += c->st.bytes_out;
}

static void add_table(struct et_stats *st, const struct table *t)
{
	struct tf_stats f;

	st->calls += t->st.calls;
	st->requested += t->st.requested;
	st->unique += t->st.unique;
	st->unique_misses += t->st.unique_misses;
	st->conflict_unique_misses += t->st.conflict_unique_misses;
	st->conflict_misses += t->st.conflict_misses;
	st->nvme_rows_read += t->st.nvme_rows_read;
	st->rows_lazy += t->st.rows_lazy;
	st->rows_overwritten += t->st.rows_overwritten;
	st->writebacks += t->st.writebacks;
	tf_get_stats(t->tf, &f);
	st->blocks_read += f.blocks_read;
	st->blocks_written += f.blocks_written;
	st->bytes_read += f.bytes_read;
	st->bytes_written += f.bytes_written;
	st->log_rows_written += f.log.rows_appended;
	st->log_rows_cleaned += f.log.rows_cleaned;
	st->log_segments_cleaned += f.log.segs_cleaned;
	st->log_bytes_written += f.log.bytes_written;
	st->log_rows_read += f.log.rows_read;
	st->log_index_rows += f.log.index_rows;
	st->log_index_bytes += f.log.index_bytes;
	st->log_live_bytes += f.log.live_bytes;
	st->log_segment_bytes += f.log.log_bytes;
	st->log_records_damaged += f.log.bad_records;
}

int et_get_stats(et_store *s, int table, struct et_stats *st)
{
	int ret;

	api_enter(s);
	if (!s || !st)
		return err_set(-EINVAL, "%s is NULL", !s ? "s" : "st");
	/* The table files' counters are the I/O thread's while it works. */
	if (s->pl_pending) {
		ret = drain(s);
		if (ret)
			return ret;
	}
	if (table != -1 && !table_get(s, table))
		return no_table(s, table);
	ret = caches_ensure(s);
	if (ret)
		return ret;
	memset(st, 0, sizeof(*st));
	if (table != -1) {
		struct table *t = table_get(s, table);

		if (!t)
			return no_table(s, table);
		add_table(st, t);
	} else {
		for (uint32_t i = 0; i < s->ntables; i++)
			add_table(st, &s->tables[i]);
	}
	for (uint32_t i = 0; s->caches_ready && i < s->ncls; i++) {
		if (s->has_hbm)
			tier_stats(&s->cls[i].hbm, &st->hbm);
		tier_stats(&s->cls[i].ddr, &st->ddr);
	}
	st->hbm.capacity_bytes = s->cfg.hbm_bytes;
	st->ddr.capacity_bytes = s->cfg.ddr_bytes;
	st->prefetch_calls = s->pf.calls;
	st->prefetch_rows = s->pf.rows;
	st->prefetch_reads = s->pf.reads;
	st->prefetch_hits = s->pf.hits;
	st->prefetch_late = s->pf.late;
	st->prefetch_skipped = s->pf.skipped;
	st->prefetch_wait_ns = s->pf.wait_ns;
	st->op_ns = s->tm.op_ns;
	st->miss_wait_ns = s->tm.miss_ns;
	st->writeback_ns = s->tm.wb_ns;
	st->mem_bytes = mem_in_use();
	st->mem_peak_bytes = mem_peak();
	return 0;
}
