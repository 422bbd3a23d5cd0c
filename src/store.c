/*
 * store.c - the facade: opening a store, the table registry, routing a
 * batch through the tiers, stats.
 *
 * Every batch operation goes the same way:
 *
 *   ids --dedup--> unique rows --resolve--> a pointer to each row's bytes
 *       --op--> (decode into the caller's buffer | update in place, dirty)
 *       --writeback--> dirty victims and bypassed rows to their blocks
 *
 * resolve() makes every unique row of the batch resident in the top tier
 * (HBM if there is one, else DDR) and pins it for the operation:
 *
 *   HBM hit          pin it
 *   DDR hit          promote: copy to an HBM slot, free the DDR slot
 *   miss             read from the table file (one batch for all misses;
 *                    unwritten rows come from the initializer, no I/O),
 *                    place in the top tier
 *   HBM victim       demoted to DDR (keeping its dirty bit)
 *   DDR victim       dropped if clean; if dirty, queued for write-back
 *
 * Each tier is a set of cache instances, one per size class of rows (see
 * struct sclass): a table's rows live in its class's instances only.
 *
 * The hierarchy is exclusive: a row is in at most one cache tier, and if it
 * is there and dirty that copy is the truth (DESIGN invariant 1). Rows are
 * held in their storage type everywhere (invariant 2), so the result of any
 * sequence of operations is the same bytes whatever the capacities,
 * policies, or order of evictions (invariant 3).
 *
 * When a row cannot be placed because every way of its set is pinned by
 * this batch (more distinct rows of the batch hash to one set than it has
 * ways), it is served from a bypass buffer: read from its file, used, and
 * written straight back if the operation changed it. Slower, never wrong.
 *
 * Write-back happens at the end of each operation, all queued rows of a
 * table in one batch (the table file coalesces rows per block). If it fails,
 * the queued rows stay in memory, the store refuses every operation but
 * et_flush and et_store_close with ET_EFAILED, and a later successful flush
 * writes them and clears the failure: nothing is lost or read stale.
 *
 * Scratch buffers grow to the largest batch seen and are kept; they are the
 * store's only memory beyond the configured capacities (see README).
 *
 * One thread at a time per store.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache.h"
#include "checkpoint.h"
#include "dtype.h"
#include "error.h"
#include "hash.h"
#include "io.h"
#include "mem_host.h"
#include "pipeline.h"
#include "policy.h"
#include "table_file.h"

#define MAX_TABLES   65534
#define NAME_MAX_LEN 64
#define DEFAULT_DDR  (256ULL << 20)
#define DEFAULT_WAYS 16
/* The largest slot that may be asked for: a row of ET_MAX_DIM f32 values and
 * its optimizer state, with room to spare. */
#define MAX_SLOT_BYTES (ET_MAX_DIM * 4u + 64)

/* A growable scratch buffer. */
struct sbuf {
	void *p;
	size_t cap;
};

static int sbuf_reserve(struct sbuf *b, size_t bytes)
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

static void sbuf_free(struct sbuf *b)
{
	mem_free(b->p, b->cap, 64);
	b->p = NULL;
	b->cap = 0;
}

struct table {
	et_tfile *tf;
	const struct tf_geom *g;
	uint32_t cls; /* its size class: s->cls[cls] */
	char name[NAME_MAX_LEN + 1];
	struct et_stats st; /* FBGEMM counters and NVMe counters */
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
	double weight;	   /* sum over its tables: rows x (slot + metadata) */
	uint64_t nsets[2]; /* sets of its HBM, DDR instance */
	struct cache hbm, ddr;
	struct cache_stats kept[2]; /* counters while the caches are down */
};

struct et_store {
	char *dir;
	struct et_store_config cfg;
	io_ctx *io;
	struct table *tables;
	uint32_t ntables, tcap;
	bool has_hbm;
	bool caches_ready; /* every class's caches are allocated */
	struct sclass *cls;
	uint32_t ncls, clscap;
	uint32_t slot_bytes; /* the largest slot: stride of the write-back
			      * queue and of tmp */
	uint64_t now;	     /* access count: the policies' clock */
	uint32_t epoch;	     /* pin epoch of the operation in progress */
	uint32_t bcur;	     /* pin epoch of the last prefetched batch, or 0 */
	uint32_t bprev;	     /* and of the one before it */
	int failed;	  /* first write-back error not yet recovered, or 0 */
	uint64_t ckpt;	  /* last commit; 0: none */
	uint64_t ckpt_id; /* et_checkpoint calls it includes */
	uint32_t ckpt_flags; /* CKPT_* of the record */
	struct pipeline *pl; /* the I/O thread */
	bool pl_pending;     /* jobs handed to it and not drained */
	struct {
		uint64_t calls, rows, reads, hits, late, skipped, wait_ns;
	} pf;

	/* per-operation scratch */
	struct sbuf uniq;   /* u64 unique row ids */
	struct sbuf inv;    /* u32 per input id: index in uniq */
	struct sbuf last;   /* u32 per unique: last input index */
	struct sbuf map;    /* dedup hash: u64 key+1, u32 index */
	struct sbuf ptrs;   /* void * per unique: the row's bytes */
	struct sbuf kind;   /* u8 per unique: where it was found, then where
			     * it is (K_*), | K_CONFLICT */
	struct sbuf slots;  /* u64 per unique: its slot in that tier */
	struct sbuf mrows;  /* u64 rows missing from both caches */
	struct sbuf midx;   /* u32 unique index of each miss */
	struct sbuf mbuf;   /* their bytes as read */
	struct sbuf acc;    /* f32 per unique x dim: summed gradients */
	struct sbuf tmp;    /* one row */
	struct sbuf wkeys;  /* u64 keys queued for write-back */
	struct sbuf wbuf;   /* their bytes */
	size_t nwb;	    /* rows queued for write-back */
	struct sbuf widx;   /* u32 hash index over wkeys: position + 1 */
	size_t widx_cap;    /* entries in widx, a power of two */
	struct sbuf wsort;  /* u32 order for write-back grouping */
	struct sbuf wcount; /* size_t per table + 1: counting sort */
	struct sbuf wrows;  /* u64 rows of one table for write-back */
	struct sbuf wraw;   /* their bytes, grouped */
	struct sbuf bypass; /* u32 unique indexes served from the bypass */
	size_t nbypass;
};

enum {
	K_HBM = 1,    /* in HBM */
	K_DDR = 2,    /* in DDR */
	K_MISS = 3,   /* in neither: read from its table file */
	K_BYPASS = 4, /* served outside the caches */
	K_WB = 5,     /* in neither, but queued for write-back: dirty */
	K_CONFLICT = 0x80,
};

static void epoch_next(et_store *s);
static int drain(et_store *s);
static int pf_install(et_store *s, uint32_t t, uint64_t row, const void *raw,
		      bool dirty, uint32_t epoch);

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

static struct table *table_get(et_store *s, int id)
{
	if (!s || id < 0 || (uint32_t)id >= s->ntables)
		return NULL;
	return &s->tables[id];
}

/* The failure of table_get(s, id). */
static int no_table(const et_store *s, int id)
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
		     uint32_t slot)
{
	uint64_t per = (uint64_t)slot + ET_SLOT_META_BYTES;

	if (bytes / per >= ways)
		return 0;
	return err_set(ET_ECAPACITY,
		       "et_store_config.%s %llu holds fewer than ways (%u) "
		       "slots of %u bytes (+%d of metadata)",
		       field, (unsigned long long)bytes, ways, slot,
		       ET_SLOT_META_BYTES);
}

/* Rows are stored in slots rounded to 4 bytes (the state is f32), and at
 * least cfg.slot_bytes big: rows up to that share one class. */
static uint32_t slot_for(const et_store *s, uint32_t row_bytes)
{
	uint32_t slot = (row_bytes + 3) & ~3u;
	uint32_t min = (s->cfg.slot_bytes + 3) & ~3u;

	return slot > min ? slot : min;
}

static uint32_t key_rb(const et_store *s, uint64_t key)
{
	return s->tables[cache_key_table(key)].g->row_bytes;
}

static struct sclass *class_of(const et_store *s, uint64_t key)
{
	return &s->cls[s->tables[cache_key_table(key)].cls];
}

/* The tier where rows are used: HBM if there is one, else DDR. */
static struct cache *top_of(const et_store *s, struct sclass *c)
{
	return s->has_hbm ? &c->hbm : &c->ddr;
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
				(s->cls[i].slot_bytes + ET_SLOT_META_BYTES);
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
				(s->cls[i].slot_bytes + ET_SLOT_META_BYTES);
		for (uint32_t i = 0; i < n; i++) {
			struct sclass *c = &s->cls[i];
			uint64_t per = c->slot_bytes + ET_SLOT_META_BYTES;
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
}

/* Allocates the caches as planned, if they are not. Called by every entry
 * point that touches rows; tables are usually all registered by then, so
 * the caches are allocated once. */
static int caches_ensure(et_store *s)
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
		uint64_t per = c->slot_bytes + ET_SLOT_META_BYTES;

		if (s->has_hbm) {
			ret =
			    cache_init(&c->hbm, c->nsets[0] * s->cfg.ways * per,
				       s->cfg.ways, c->slot_bytes,
				       policy_get(s->cfg.hbm_policy), hm);
			if (ret)
				break;
			c->hbm.st = c->kept[0];
		}
		ret = cache_init(&c->ddr, c->nsets[1] * s->cfg.ways * per,
				 s->cfg.ways, c->slot_bytes,
				 policy_get(s->cfg.ddr_policy), &mem_tier_host);
		if (!ret)
			c->ddr.st = c->kept[1];
	}
	if (ret) {
		caches_drop(s);
		return ret;
	}
	s->caches_ready = true;
	return 0;
}

/*
 * Makes the write-back queue's stride (and tmp) fit slots of slot_bytes.
 * Queued rows are moved to the wider stride, last first.
 */
static int wb_widen(et_store *s, uint32_t slot_bytes)
{
	size_t old = s->slot_bytes;
	int ret;

	if (slot_bytes <= old)
		return 0;
	ret = sbuf_reserve(&s->wbuf, s->nwb * (size_t)slot_bytes);
	if (!ret && s->caches_ready)
		ret = sbuf_reserve(&s->tmp, slot_bytes);
	if (ret)
		return ret;
	for (size_t i = s->nwb; i-- > 0;)
		memmove((char *)s->wbuf.p + i * slot_bytes,
			(char *)s->wbuf.p + i * old, old);
	s->slot_bytes = slot_bytes;
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

	err_clear();
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
	ret = et_tfile_create(path, p, &tf);
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

	err_clear();
	if (!s || !id)
		return err_set(-EINVAL, "%s is NULL", !s ? "s" : "id");
	ret = name_check(name);
	if (ret)
		return ret;
	ret = table_path(s, name, &path);
	if (ret)
		return ret;
	ret = et_tfile_open(path, 0, &tf);
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

	err_clear();
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
	if (c->slot_bytes > MAX_SLOT_BYTES)
		return err_set(ET_ECONFIG,
			       "et_store_config.slot_bytes %u out of range "
			       "0..%u",
			       c->slot_bytes, MAX_SLOT_BYTES);
	/* Capacities must hold one set of the smallest slot (or of the
	 * slots asked for). */
	{
		uint32_t slot = c->slot_bytes ? (c->slot_bytes + 3) & ~3u : 4;

		ret = tier_fits("ddr_bytes", c->ddr_bytes, c->ways, slot);
		if (!ret && c->hbm_bytes)
			ret =
			    tier_fits("hbm_bytes", c->hbm_bytes, c->ways, slot);
	}
	return ret;
}

/*
 * After a crash, cuts every table's journal of its row log back to the
 * last commit, whether or not the caller opens that table in this
 * session: the next commit would otherwise make a batch a crash left
 * behind look committed.
 */
static int recover_all(et_store *s)
{
	struct dirent *de;
	DIR *d;
	int ret = 0;

	d = opendir(s->dir);
	if (!d)
		return -errno;
	while (!ret && (de = readdir(d))) {
		size_t n = strlen(de->d_name), pl;
		char *p;

		if (n <= 7 || strcmp(de->d_name + n - 7, ".et.idx"))
			continue;
		pl = strlen(s->dir) + n - 2; /* "/" + name less ".idx" + NUL */
		p = mem_alloc(pl, 0);
		if (!p) {
			ret = -ENOMEM;
			break;
		}
		snprintf(p, pl, "%s/%.*s", s->dir, (int)(n - 4), de->d_name);
		ret = rowlog_recover(p, s->ckpt);
		mem_free(p, pl, 0);
	}
	closedir(d);
	return ret;
}

int et_store_open(const char *dir, const struct et_store_config *cfg,
		  et_store **out)
{
	struct et_store_config c = {0};
	struct ckpt_rec rec;
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
	s->epoch = 1;
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
	if (ret)
		goto err_free;
	ret = ckpt_read(dir, &rec, NULL, NULL);
	if (!ret) {
		s->ckpt = rec.commit;
		s->ckpt_id = rec.id;
		s->ckpt_flags = rec.flags;
		ret = recover_all(s);
	}
	if (ret)
		goto err_free;
	*out = s;
	return 0;

err_free:
	pl_stop(s->pl);
	io_close(s->io);
	if (s->dir)
		mem_free(s->dir, strlen(s->dir) + 1, 0);
	mem_free(s, sizeof(*s), 0);
	return ret;
}

static void store_free(et_store *s)
{
	pl_stop(s->pl); /* before the files and the ring it uses go */
	for (uint32_t i = 0; i < s->ntables; i++)
		et_tfile_close(s->tables[i].tf);
	mem_free(s->tables, s->tcap * sizeof(*s->tables), 0);
	caches_drop(s);
	mem_free(s->cls, s->clscap * sizeof(*s->cls), 0);
	io_close(s->io);
	struct sbuf *bufs[] = {&s->uniq, &s->inv,    &s->last,	 &s->map,
			       &s->ptrs, &s->kind,   &s->mrows,	 &s->midx,
			       &s->mbuf, &s->acc,    &s->tmp,	 &s->wkeys,
			       &s->wbuf, &s->wsort,  &s->wcount, &s->wrows,
			       &s->wraw, &s->bypass, &s->slots,	 &s->widx};
	for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
		sbuf_free(bufs[i]);
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
 * A commit, two-phase: every table's log synced and its journal batch
 * written and synced, then the record (atomic), then each log told. A
 * crash before the record returns every table to the previous commit; the
 * journal batches it left are cut at the next open (recover_all).
 */
static int commit(et_store *s, const struct ckpt_rec *r, const void *dense,
		  size_t len)
{
	int ret;

	for (uint32_t i = 0; i < s->ntables; i++) {
		ret = tf_commit_prepare(s->tables[i].tf, r->commit);
		if (ret)
			return ret;
	}
	ret = ckpt_write(s->dir, r, dense, len);
	if (ret)
		return ret;
	s->ckpt = r->commit;
	s->ckpt_id = r->id;
	s->ckpt_flags = r->flags;
	for (uint32_t i = 0; i < s->ntables; i++) {
		ret = tf_commit_done(s->tables[i].tf);
		if (ret)
			return ret; /* committed; only space is at stake */
	}
	return 0;
}

/*
 * A clean close commits what was written since the last commit: a new
 * record with the same checkpoint id and dense state and, if there was a
 * checkpoint, the flag that the tables moved on past it.
 */
static int commit_close(et_store *s)
{
	struct ckpt_rec r;
	void *dense = NULL;
	size_t len = 0;
	int ret;

	ret = ckpt_read(s->dir, &r, &dense, &len);
	if (ret)
		return ret;
	if (r.commit != s->ckpt) {
		free(dense);
		return -ESTALE; /* another store wrote the record */
	}
	r.commit = s->ckpt + 1;
	if (r.id)
		r.flags |= CKPT_MOVED;
	ret = commit(s, &r, dense, len);
	free(dense);
	return ret;
}

int et_store_close(et_store *s)
{
	int ret;

	if (!s)
		return 0;
	ret = et_flush(s);
	if (!ret && changed_since_commit(s))
		ret = commit_close(s);
	store_free(s);
	return ret;
}

/* ------------------------------------------------------------ write-back */

/*
 * The write-back queue is a tier of its own: a row evicted dirty is in no
 * cache and not yet home, so until the queue is written, lookups that miss
 * both caches must look here before the table file (wb_find). Each key is
 * queued once; queueing it again replaces its bytes.
 */
static void widx_clear(et_store *s)
{
	if (s->widx_cap)
		memset(s->widx.p, 0, s->widx_cap * sizeof(uint32_t));
}

static int64_t wb_find(const et_store *s, uint64_t key)
{
	const uint64_t *keys = s->wkeys.p;
	const uint32_t *ix = s->widx.p;
	size_t h;

	if (!s->nwb)
		return -1;
	key &= CACHE_KEY_MASK;
	for (h = hash_mix(key) & (s->widx_cap - 1); ix[h];
	     h = (h + 1) & (s->widx_cap - 1))
		if (keys[ix[h] - 1] == key)
			return ix[h] - 1;
	return -1;
}

static void widx_insert(et_store *s, uint64_t key, size_t pos)
{
	uint32_t *ix = s->widx.p;
	size_t h = hash_mix(key) & (s->widx_cap - 1);

	while (ix[h])
		h = (h + 1) & (s->widx_cap - 1);
	ix[h] = (uint32_t)(pos + 1);
}

static int wb_queue(et_store *s, uint64_t key, const void *raw)
{
	uint32_t rb;
	int64_t at;
	int ret;

	key &= CACHE_KEY_MASK;
	rb = s->tables[cache_key_table(key)].g->row_bytes;
	at = wb_find(s, key);
	if (at >= 0) {
		memcpy((char *)s->wbuf.p + (size_t)at * s->slot_bytes, raw, rb);
		return 0;
	}
	ret = sbuf_reserve(&s->wkeys, (s->nwb + 1) * sizeof(uint64_t));
	if (!ret)
		ret = sbuf_reserve(&s->wbuf, (s->nwb + 1) * s->slot_bytes);
	if (ret)
		return ret;
	if (2 * (s->nwb + 1) > s->widx_cap) { /* grow and rebuild */
		size_t cap = s->widx_cap ? s->widx_cap * 2 : 1024;

		ret = sbuf_reserve(&s->widx, cap * sizeof(uint32_t));
		if (ret)
			return ret;
		s->widx_cap = cap;
		widx_clear(s);
		for (size_t i = 0; i < s->nwb; i++)
			widx_insert(s, ((uint64_t *)s->wkeys.p)[i], i);
	}
	((uint64_t *)s->wkeys.p)[s->nwb] = key;
	memcpy((char *)s->wbuf.p + s->nwb * s->slot_bytes, raw, rb);
	widx_insert(s, key, s->nwb);
	s->nwb++;
	return 0;
}

static void wb_reset(et_store *s)
{
	s->nwb = 0;
	widx_clear(s);
}

/* The write-back queue in key order: (key, position) pairs. */
struct wb_ord {
	uint64_t key;
	size_t pos;
};

/*
 * The queue in table order (a stable counting sort: within a table, in
 * queue order). The row log appends rows wherever they are, so only the
 * grouping by table matters, and it costs O(n + tables).
 */
static int wb_sort(et_store *s, struct wb_ord **out)
{
	const uint64_t *keys = s->wkeys.p;
	struct wb_ord *o;
	size_t *at;
	int ret;

	ret = sbuf_reserve(&s->wsort, s->nwb * sizeof(*o));
	if (!ret)
		ret = sbuf_reserve(&s->wcount,
				   ((size_t)s->ntables + 1) * sizeof(*at));
	if (ret)
		return ret;
	o = s->wsort.p;
	at = s->wcount.p;
	memset(at, 0, ((size_t)s->ntables + 1) * sizeof(*at));
	for (size_t i = 0; i < s->nwb; i++)
		at[cache_key_table(keys[i]) + 1]++;
	for (uint32_t t = 0; t < s->ntables; t++)
		at[t + 1] += at[t];
	for (size_t i = 0; i < s->nwb; i++) {
		struct wb_ord *e = &o[at[cache_key_table(keys[i])]++];

		e->key = keys[i];
		e->pos = i;
	}
	*out = o;
	return 0;
}

/* Writes every queued row home, grouped by table. On failure the queue is
 * kept whole (rewriting a row is harmless) and the store is marked failed. */
static int wb_run(et_store *s)
{
	struct wb_ord *o;
	size_t i = 0;
	int ret;

	if (!s->nwb)
		return 0;
	ret = wb_sort(s, &o);
	if (!ret)
		ret = sbuf_reserve(&s->wrows, s->nwb * sizeof(uint64_t));
	if (!ret)
		ret = sbuf_reserve(&s->wraw, s->nwb * s->slot_bytes);
	if (ret)
		goto fail;
	for (i = 0; i < s->nwb;) {
		uint32_t t = cache_key_table(o[i].key);
		struct table *tb = &s->tables[t];
		uint64_t *rows = s->wrows.p;
		size_t n = 0;

		while (i < s->nwb && cache_key_table(o[i].key) == t) {
			rows[n] = cache_key_row(o[i].key);
			memcpy((char *)s->wraw.p + n * tb->g->row_bytes,
			       (char *)s->wbuf.p + o[i].pos * s->slot_bytes,
			       tb->g->row_bytes);
			n++;
			i++;
		}
		ret = tf_write_rows_raw(tb->tf, rows, n, s->wraw.p);
		if (ret)
			goto fail;
		tb->st.writebacks += n;
	}
	wb_reset(s);
	return 0;
fail:
	if (!s->failed)
		s->failed = ret;
	return ret;
}

/* ---------------------------------------------------------------- dedup */

/*
 * Distinct ids of a batch in order of first appearance: uniq[0..m), and
 * for each input i the index inv[i] of its id in uniq, and for each unique
 * the index of its last appearance. Open addressing, table of at least 2n.
 */
static int dedup(et_store *s, const uint64_t *ids, size_t n, size_t *m_out)
{
	size_t cap = 16, m = 0;
	uint64_t *hk;
	uint32_t *hv, *inv, *last;
	uint64_t *uniq;
	int ret;

	while (cap < 2 * n)
		cap *= 2;
	ret =
	    sbuf_reserve(&s->map, cap * (sizeof(uint64_t) + sizeof(uint32_t)));
	if (!ret)
		ret = sbuf_reserve(&s->uniq, n * sizeof(uint64_t));
	if (!ret)
		ret = sbuf_reserve(&s->inv, n * sizeof(uint32_t));
	if (!ret)
		ret = sbuf_reserve(&s->last, n * sizeof(uint32_t));
	if (ret)
		return ret;
	hk = s->map.p;
	hv = (uint32_t *)(hk + cap);
	memset(hk, 0, cap * sizeof(*hk));
	uniq = s->uniq.p;
	inv = s->inv.p;
	last = s->last.p;
	for (size_t i = 0; i < n; i++) {
		uint64_t k = ids[i] + 1;
		size_t h = hash_mix(k) & (cap - 1);

		while (hk[h] && hk[h] != k)
			h = (h + 1) & (cap - 1);
		if (!hk[h]) {
			hk[h] = k;
			hv[h] = (uint32_t)m;
			uniq[m++] = ids[i];
		}
		inv[i] = hv[h];
		last[hv[h]] = (uint32_t)i;
	}
	*m_out = m;
	return 0;
}

/* -------------------------------------------------------------- resolve */

/* The pins that hold now: this operation's and the last two batches'. */
static struct pinset pins_now(const et_store *s)
{
	struct pinset ps = {{s->epoch, s->bcur, s->bprev}};

	return ps;
}

/* Pins slot for this operation, unless a live batch pins it already (its
 * pin must outlast the operation). */
static void pin_op(et_store *s, struct cache *c, uint64_t slot)
{
	struct pinset ps = pins_now(s);

	if (!cache_pinned(c, slot, &ps))
		cache_pin(c, slot, s->epoch);
}

/* Places a row demoted from HBM (or a row with no better place) in DDR.
 * A dirty DDR victim is queued for write-back; if every way is pinned the
 * row itself goes home (dirty) or is dropped (clean). Returns the DDR slot
 * or CACHE_NONE in *slot_out. */
static int ddr_place(et_store *s, uint64_t key, const void *raw, bool dirty,
		     uint64_t *slot_out)
{
	struct cache *d = &class_of(s, key)->ddr;
	struct pinset ps = pins_now(s);
	uint64_t slot = cache_pick(d, key & CACHE_KEY_MASK, s->now, &ps);
	int ret;

	*slot_out = slot;
	if (slot == CACHE_NONE)
		return dirty ? wb_queue(s, key, raw) : 0;
	if (cache_valid(d, slot)) {
		uint32_t vrb = key_rb(s, d->keys[slot]);

		if (cache_dirty(d, slot)) {
			ret = wb_queue(s, d->keys[slot], cache_row(d, slot));
			if (ret)
				return ret;
		}
		d->st.evictions++;
		d->st.bytes_out += vrb;
		cache_remove(d, slot, vrb);
	}
	cache_fill(d, slot, key & CACHE_KEY_MASK, dirty, raw, key_rb(s, key),
		   s->now);
	return 0;
}

/*
 * Places row key in the top tier, pinned with epoch pin, dirty or not. Its
 * bytes are at src (rb of them); if dslot is not CACHE_NONE, src is that
 * DDR slot, which is freed (a promotion). The top
 * tier's victim, if any, is demoted to DDR (with an HBM tier) or goes home
 * (without). If every top way is pinned (a set conflict), the row stays in
 * or goes to DDR, and failing that is left where it is: *where says which
 * (K_HBM, K_DDR or K_BYPASS, with K_CONFLICT), *slot_out the slot.
 */
static int place_row(et_store *s, uint64_t key, const void *src, uint32_t rb,
		     uint64_t dslot, bool dirty, uint32_t pin, uint8_t *where,
		     uint64_t *slot_out)
{
	struct sclass *cl = class_of(s, key);
	struct cache *top = top_of(s, cl), *ddr = &cl->ddr;
	struct pinset ps = pins_now(s);
	uint64_t slot;
	int ret;

	s->now++;
	slot = cache_pick(top, key, s->now, &ps);
	if (slot == CACHE_NONE) {
		*where = K_CONFLICT;
		if (dslot != CACHE_NONE) {
			cache_touch(ddr, dslot, s->now);
			cache_pin(ddr, dslot, pin);
			*where |= K_DDR;
			*slot_out = dslot;
			return 0;
		}
		if (s->has_hbm) {
			ret = ddr_place(s, key, src, dirty, slot_out);
			if (ret)
				return ret;
			if (*slot_out != CACHE_NONE) {
				cache_pin(ddr, *slot_out, pin);
				*where |= K_DDR;
				return 0;
			}
		}
		*where |= K_BYPASS;
		/* A dirty row no cache can take goes home now. */
		return dirty ? wb_queue(s, key, src) : 0;
	}
	if (cache_valid(top, slot)) {
		uint64_t vkey = top->keys[slot];
		uint32_t vrb = key_rb(s, vkey);

		top->st.evictions++;
		top->st.bytes_out += vrb;
		if (s->has_hbm) {
			/* Copy the victim out first: placing it in DDR may
			 * reuse the slot src is in. */
			memcpy(s->tmp.p, cache_row(top, slot), vrb);
			cache_remove(top, slot, vrb);
			cache_fill(top, slot, key, dirty, src, rb, s->now);
			if (dslot != CACHE_NONE) {
				cache_remove(ddr, dslot, rb);
				ddr->st.bytes_out += rb;
			}
			ret = ddr_place(s, vkey, s->tmp.p, vkey & CACHE_DIRTY,
					&dslot);
			if (ret)
				return ret;
			goto placed;
		}
		if (vkey & CACHE_DIRTY) {
			ret = wb_queue(s, vkey, cache_row(top, slot));
			if (ret)
				return ret;
		}
		cache_remove(top, slot, vrb);
	}
	cache_fill(top, slot, key, dirty, src, rb, s->now);
	if (dslot != CACHE_NONE) {
		cache_remove(ddr, dslot, rb);
		ddr->st.bytes_out += rb;
	}
placed:
	cache_pin(top, slot, pin);
	*where = s->has_hbm ? K_HBM : K_DDR;
	*slot_out = slot;
	return 0;
}

static void *where_row(struct sclass *cl, uint8_t where, uint64_t slot)
{
	switch (where & ~K_CONFLICT) {
	case K_HBM:
		return cache_row(&cl->hbm, slot);
	case K_DDR:
		return cache_row(&cl->ddr, slot);
	}
	return NULL;
}

/*
 * Makes the m unique rows of table t resident in the top tier (or the
 * bypass), pinned for this operation, and points ptrs[i] at each one's
 * bytes. Updates the stats.
 */
static int resolve(et_store *s, uint32_t t, size_t m)
{
	struct table *tb = &s->tables[t];
	const uint64_t *uniq = s->uniq.p;
	struct sclass *cl = &s->cls[tb->cls];
	struct cache *top = top_of(s, cl), *ddr = &cl->ddr;
	uint8_t *kind;
	uint64_t *slots;
	void **ptrs;
	uint64_t *mrows;
	uint32_t *midx;
	size_t nm = 0;
	uint32_t rb = tb->g->row_bytes;
	struct tf_stats t0, t1;
	int ret;

	ret = sbuf_reserve(&s->ptrs, m * sizeof(void *));
	if (!ret)
		ret = sbuf_reserve(&s->kind, m);
	if (!ret) /* twice: the second half holds the rows to read */
		ret = sbuf_reserve(&s->mrows, 2 * m * sizeof(uint64_t));
	if (!ret)
		ret = sbuf_reserve(&s->midx, m * sizeof(uint32_t));
	if (!ret)
		ret = sbuf_reserve(&s->bypass, m * sizeof(uint32_t));
	if (!ret)
		ret = sbuf_reserve(&s->slots, m * sizeof(uint64_t));
	if (ret)
		return ret;
	kind = s->kind.p;
	slots = s->slots.p;
	ptrs = s->ptrs.p;
	mrows = s->mrows.p;
	midx = s->midx.p;
	s->nbypass = 0;

	/* 1. Look up every row, top tier first. */
	for (size_t i = 0; i < m; i++) {
		uint64_t key = cache_key(t, uniq[i]);
		uint64_t slot = cache_lookup(top, key);

		s->now++;
		if (slot != CACHE_NONE) {
			if (top->keys[slot] & CACHE_PF) {
				top->keys[slot] &= ~CACHE_PF;
				s->pf.hits++;
			}
			cache_touch(top, slot, s->now);
			pin_op(s, top, slot);
			ptrs[i] = cache_row(top, slot);
			slots[i] = slot;
			kind[i] = s->has_hbm ? K_HBM : K_DDR;
			top->st.hits++;
			continue;
		}
		top->st.misses++;
		tb->st.unique_misses++;
		if (s->has_hbm) {
			slot = cache_lookup(ddr, key);
			if (slot != CACHE_NONE) {
				/* pinned so that no demotion of this batch
				 * pushes it out before its promotion */
				pin_op(s, ddr, slot);
				ddr->st.hits++;
				kind[i] = K_DDR;
				slots[i] = slot;
				continue;
			}
			ddr->st.misses++;
		}
		kind[i] = wb_find(s, key) >= 0 ? K_WB : K_MISS;
		midx[nm] = (uint32_t)i;
		mrows[nm++] = uniq[i];
	}

	/* 2. Read every miss in one batch; rows queued for write-back are
	 * copied from the queue (their file may not have them yet). */
	if (nm) {
		size_t nr = 0;

		ret = sbuf_reserve(&s->mbuf, nm * (size_t)rb);
		if (ret)
			return ret;
		for (size_t q = 0; q < nm; q++) {
			uint64_t key = cache_key(t, mrows[q]);

			if (kind[midx[q]] == K_WB)
				memcpy((char *)s->mbuf.p + q * (size_t)rb,
				       (char *)s->wbuf.p +
					   (size_t)wb_find(s, key) *
					       s->slot_bytes,
				       rb);
			else
				nr++;
		}
		if (nr) {
			/* compact the rows to read, then spread them back */
			uint64_t *rr = mrows + nm; /* room reserved below */
			size_t k = 0;

			for (size_t q = 0; q < nm; q++)
				if (kind[midx[q]] != K_WB)
					rr[k++] = mrows[q];
			ret = sbuf_reserve(&s->wraw, nr * (size_t)rb);
			if (ret)
				return ret;
			tf_get_stats(tb->tf, &t0);
			ret = tf_read_rows_raw(tb->tf, rr, nr, s->wraw.p);
			tf_get_stats(tb->tf, &t1);
			tb->st.rows_lazy += t1.rows_lazy - t0.rows_lazy;
			tb->st.nvme_rows_read +=
			    nr - (t1.rows_lazy - t0.rows_lazy);
			if (ret)
				return ret;
			k = 0;
			for (size_t q = 0; q < nm; q++)
				if (kind[midx[q]] != K_WB)
					memcpy((char *)s->mbuf.p +
						   q * (size_t)rb,
					       (char *)s->wraw.p +
						   (k++) * (size_t)rb,
					       rb);
		}
	}

	/* 3. Place DDR hits and misses in the top tier, in batch order. */
	for (size_t j = 0, q = 0; j < m; j++) {
		uint64_t dslot = CACHE_NONE;
		const void *src;
		bool dirty;

		if (kind[j] == K_HBM || (kind[j] == K_DDR && !s->has_hbm))
			continue;
		if (kind[j] == K_MISS || kind[j] == K_WB) {
			while (midx[q] != j)
				q++;
			src = (char *)s->mbuf.p + q * (size_t)rb;
			dirty = kind[j] == K_WB;
		} else {
			dslot = slots[j];
			src = cache_row(ddr, dslot);
			dirty = cache_dirty(ddr, dslot);
		}
		ret = place_row(s, cache_key(t, uniq[j]), src, rb, dslot, dirty,
				s->epoch, &kind[j], &slots[j]);
		if (ret)
			return ret;
		if (kind[j] & K_CONFLICT)
			tb->st.conflict_unique_misses++;
		if ((kind[j] & ~K_CONFLICT) == K_BYPASS) {
			ptrs[j] = (void *)src;
			((uint32_t *)s->bypass.p)[s->nbypass++] = (uint32_t)j;
		} else {
			ptrs[j] = where_row(cl, kind[j], slots[j]);
		}
	}
	return 0;
}

/*
 * Whether the write-back queue may wait for the next prefetch. When the
 * caller prefetches, the queue goes to the I/O thread with the next batch's
 * reads and is written while the caller computes, instead of now, in the
 * caller's time. The queue is looked up like a tier meanwhile, so nothing
 * is read stale; it is bounded by WB_DEFER_BYTES of rows.
 */
#define WB_DEFER_BYTES (8u << 20)

static bool wb_deferrable(const et_store *s)
{
	return s->pf.calls && s->nwb * (size_t)s->slot_bytes <= WB_DEFER_BYTES;
}

/* Ends an operation: bypassed rows it changed join the dirty victims in the
 * write-back queue, which is written now or (see wb_deferrable) with the
 * next prefetch; the operation's pins are released. */
static int op_end(et_store *s, uint32_t t, bool changed)
{
	const void *const *ptrs = s->ptrs.p;
	const uint32_t *by = s->bypass.p;
	const uint64_t *uniq = s->uniq.p;
	int ret = 0;

	if (changed)
		for (size_t i = 0; i < s->nbypass && !ret; i++)
			ret =
			    wb_queue(s, cache_key(t, uniq[by[i]]), ptrs[by[i]]);
	s->nbypass = 0;
	if (ret) {
		if (!s->failed)
			s->failed = ret;
	} else if (!wb_deferrable(s)) {
		/* The operation is done and its results stand; a failed
		 * write-back of its victims is the store's failure, not the
		 * call's: the rows stay queued, later calls get ET_EFAILED
		 * and et_flush retries them. */
		(void)wb_run(s);
	}
	epoch_next(s);
	return ret;
}

/* Moves to a fresh operation epoch. Epoch 0 means "not pinned"; when the
 * counter wraps every pin is forgotten (pins only ever cost speed). */
static void epoch_next(et_store *s)
{
	if (++s->epoch == 0) {
		for (uint32_t i = 0; s->caches_ready && i < s->ncls; i++) {
			if (s->has_hbm)
				cache_unpin_all(&s->cls[i].hbm);
			cache_unpin_all(&s->cls[i].ddr);
		}
		s->bcur = s->bprev = 0;
		s->epoch = 1;
	}
}

/* Places a prefetched row, unless it became resident meanwhile (its cached
 * copy is then the truth), pinned for the batch that asked for it. */
static int pf_install(et_store *s, uint32_t t, uint64_t row, const void *raw,
		      bool dirty, uint32_t epoch)
{
	uint64_t key = cache_key(t, row), slot;
	struct sclass *cl = &s->cls[s->tables[t].cls];
	uint8_t where;
	int ret;

	if ((s->has_hbm && cache_lookup(&cl->hbm, key) != CACHE_NONE) ||
	    cache_lookup(&cl->ddr, key) != CACHE_NONE ||
	    (!dirty && wb_find(s, key) >= 0))
		return 0;
	ret = place_row(s, key, raw, s->tables[t].g->row_bytes, CACHE_NONE,
			dirty, epoch, &where, &slot);
	if (ret)
		return ret;
	if ((where & ~K_CONFLICT) == (s->has_hbm ? K_HBM : K_DDR))
		top_of(s, cl)->keys[slot] |= CACHE_PF;
	else if ((where & ~K_CONFLICT) == K_BYPASS)
		s->pf.skipped++;
	return 0;
}

/*
 * Installs what the I/O thread has read for earlier prefetches, and takes
 * back the write-backs it did. Called first by every operation: afterwards
 * the store's thread owns the table files and the ring again.
 */
static int drain(et_store *s)
{
	struct pl_job *j, *next;
	uint64_t late, waited;
	int ret = 0;

	if (!s->pl_pending)
		return 0;
	j = pl_drain(s->pl, &late, &waited);
	s->pl_pending = false;
	s->pf.late += late;
	s->pf.wait_ns += waited;
	for (; j; j = next) {
		struct table *tb = &s->tables[j->table];

		next = j->next;
		if (j->kind == PL_WRITE) {
			if (j->result) {
				/* Not home: keep the rows in memory and
				 * refuse to go on, as a failed write-back
				 * in the foreground would. */
				for (size_t i = 0; i < j->n && !ret; i++)
					ret = wb_queue(
					    s, cache_key(j->table, j->rows[i]),
					    (char *)j->raw + i * j->row_bytes);
				if (!s->failed)
					s->failed = j->result;
			} else {
				tb->st.writebacks += j->n;
			}
		} else if (!j->result) {
			tb->st.nvme_rows_read += j->n;
			for (size_t i = 0; i < j->n && !ret; i++)
				ret = pf_install(s, j->table, j->rows[i],
						 (char *)j->raw +
						     i * j->row_bytes,
						 false, j->epoch);
		}
		/* A failed read installs nothing: the rows are read on
		 * demand, and the error surfaces there. */
		pl_job_free(j);
	}
	return ret;
}

/* The ids of one batch for table t: what names them in a message. */
static int ids_check(const struct table *t, int table, const uint64_t *ids,
		     size_t n, const char *what)
{
	if (n && !ids)
		return err_set(-EINVAL, "%s is NULL, with %zu ids", what, n);
	if (n > UINT32_MAX)
		return err_set(-E2BIG, "%zu ids: at most %u a call", n,
			       UINT32_MAX);
	for (size_t i = 0; i < n; i++)
		if (ids[i] >= t->g->rows)
			return err_set(ET_EROWRANGE,
				       "%s[%zu] %llu >= rows %llu of table %d",
				       what, i, (unsigned long long)ids[i],
				       (unsigned long long)t->g->rows, table);
	return 0;
}

/* Common entry checks and bookkeeping of a batch operation. */
static int op_begin(et_store *s, int table, const uint64_t *ids, size_t n,
		    struct table **out)
{
	struct table *t = table_get(s, table);
	int ret;

	if (!t)
		return no_table(s, table);
	ret = ids_check(t, table, ids, n, "ids");
	if (ret)
		return ret;
	ret = drain(s);
	if (s->failed)
		return ET_EFAILED;
	if (!ret)
		ret = caches_ensure(s);
	if (ret)
		return ret;
	*out = t;
	return 0;
}

/* Dedups and resolves; on success the unique rows are at s->ptrs. */
static int op_prepare(et_store *s, struct table *t, const uint64_t *ids,
		      size_t n, size_t *m, bool deduped)
{
	uint32_t tid = (uint32_t)(t - s->tables);
	uint64_t conflicts0 = t->st.conflict_unique_misses;
	int ret;

	ret = deduped ? 0 : dedup(s, ids, n, m);
	if (ret)
		return ret;
	t->st.calls++;
	t->st.requested += n;
	t->st.unique += *m;
	ret = resolve(s, tid, *m);
	if (ret) {
		/* Nothing changed but pins, policy words and, perhaps,
		 * rows moved between tiers; dirty victims are queued. */
		op_end(s, tid, false);
		return ret;
	}
	/* conflict misses with duplicates counted */
	if (t->st.conflict_unique_misses != conflicts0) {
		const uint8_t *kind = s->kind.p;
		const uint32_t *inv = s->inv.p;

		for (size_t i = 0; i < n; i++)
			if (kind[inv[i]] & K_CONFLICT)
				t->st.conflict_misses++;
	}
	return 0;
}

/* ------------------------------------------------------------ operations */

/* Rows are touched in id order after their addresses are known: asking the
 * memory system for a row this many ids ahead hides most of its latency. */
#define PREFETCH_AHEAD 8

int et_gather(et_store *s, int table, const uint64_t *ids, size_t n, float *out)
{
	struct table *t;
	size_t m;
	int ret;

	err_clear();
	ret = op_begin(s, table, ids, n, &t);
	if (ret || n == 0)
		return ret;
	if (!out)
		return err_set(-EINVAL, "out is NULL");
	ret = op_prepare(s, t, ids, n, &m, false);
	if (ret)
		return ret;
	{
		void *const *ptrs = s->ptrs.p;
		const uint32_t *inv = s->inv.p;
		uint32_t dim = t->g->dim;

		for (size_t i = 0; i < n; i++) {
			if (i + PREFETCH_AHEAD < n)
				__builtin_prefetch(
				    ptrs[inv[i + PREFETCH_AHEAD]]);
			dtype_decode(t->g->dtype, ptrs[inv[i]], out + i * dim,
				     dim);
		}
	}
	return op_end(s, (uint32_t)table, false);
}

static int check_pool(et_pool mode)
{
	if (mode != ET_POOL_SUM && mode != ET_POOL_MEAN)
		return err_set(-EINVAL, "pool mode %d unknown", (int)mode);
	return 0;
}

static int check_offsets(const uint64_t *offsets, size_t nbags, size_t *n)
{
	if (!offsets)
		return err_set(-EINVAL, "offsets is NULL");
	if (offsets[0] != 0)
		return err_set(-EINVAL, "offsets[0] %llu, not 0",
			       (unsigned long long)offsets[0]);
	for (size_t b = 0; b < nbags; b++)
		if (offsets[b + 1] < offsets[b])
			return err_set(
			    -EINVAL, "offsets[%zu] %llu < offsets[%zu] %llu",
			    b + 1, (unsigned long long)offsets[b + 1], b,
			    (unsigned long long)offsets[b]);
	*n = offsets[nbags];
	return 0;
}

int et_gather_pooled(et_store *s, int table, const uint64_t *ids,
		     const uint64_t *offsets, size_t nbags, et_pool mode,
		     float *out)
{
	struct table *t;
	size_t n, m;
	int ret;

	err_clear();
	if (!s || !out)
		return err_set(-EINVAL, "%s is NULL", !s ? "s" : "out");
	ret = check_pool(mode);
	if (!ret)
		ret = check_offsets(offsets, nbags, &n);
	if (ret)
		return ret;
	ret = op_begin(s, table, ids, n, &t);
	if (ret)
		return ret;
	if (n) {
		ret = op_prepare(s, t, ids, n, &m, false);
		if (ret)
			return ret;
		ret = sbuf_reserve(&s->acc, t->g->dim * sizeof(float));
		if (ret) {
			op_end(s, (uint32_t)table, false);
			return ret;
		}
	}
	{
		void *const *ptrs = s->ptrs.p;
		const uint32_t *inv = s->inv.p;
		uint32_t dim = t->g->dim;
		float *row = s->acc.p;

		/* Bag b: rows added in id order in f32, then divided by
		 * the bag's size for a mean. */
		for (size_t b = 0; b < nbags; b++) {
			float *o = out + b * dim;
			uint64_t len = offsets[b + 1] - offsets[b];

			memset(o, 0, dim * sizeof(*o));
			for (uint64_t i = offsets[b]; i < offsets[b + 1]; i++) {
				const float *r = row;

				if (i + PREFETCH_AHEAD < n)
					__builtin_prefetch(
					    ptrs[inv[i + PREFETCH_AHEAD]]);
				if (t->g->dtype == ET_F32)
					r = ptrs[inv[i]]; /* no copy needed */
				else
					dtype_decode(t->g->dtype, ptrs[inv[i]],
						     row, dim);
				for (uint32_t c = 0; c < dim; c++)
					o[c] += r[c];
			}
			if (mode == ET_POOL_MEAN && len)
				for (uint32_t c = 0; c < dim; c++)
					o[c] /= (float)len;
		}
	}
	return n ? op_end(s, (uint32_t)table, false) : 0;
}

/*
 * Applies the summed gradients acc (m x dim) to the resolved rows.
 *
 * SGD:        w[c] -= lr * g[c]
 * Row-wise Adagrad (FBGEMM EXACT_ROWWISE_ADAGRAD):
 *             s   = sum over c of g[c] * g[c]   (f32, column order)
 *             m  += s / dim
 *             mul = lr / (sqrtf(m) + eps)
 *             w[c] -= mul * g[c]
 * Each w[c] is decoded from the storage type, updated in f32, and encoded
 * back (rounded to nearest even for f16/bf16).
 */
static void apply(et_store *s, struct table *t, size_t m, const float *acc,
		  const struct et_update_params *up)
{
	void *const *ptrs = s->ptrs.p;
	const struct tf_geom *g = t->g;
	float eps = up->eps ? up->eps : 1e-8f;
	float lr = up->lr;
	float w[256];

	for (size_t i = 0; i < m; i++) {
		char *row = ptrs[i];
		const float *gr = acc + i * g->dim;
		float mul = lr;

		if (g->optim == ET_OPT_ROWWISE_ADAGRAD) {
			float sum = 0, st;

			for (uint32_t c = 0; c < g->dim; c++)
				sum += gr[c] * gr[c];
			memcpy(&st, row + g->value_bytes, sizeof(st));
			st += sum / (float)g->dim;
			memcpy(row + g->value_bytes, &st, sizeof(st));
			mul = lr / (sqrtf(st) + eps);
		}
		/* decode, update, encode in pieces: no allocation */
		for (uint32_t c0 = 0; c0 < g->dim; c0 += 256) {
			uint32_t k = g->dim - c0 < 256 ? g->dim - c0 : 256;
			size_t es = dtype_size(g->dtype);

			dtype_decode(g->dtype, row + c0 * es, w, k);
			for (uint32_t c = 0; c < k; c++)
				w[c] -= mul * gr[c0 + c];
			dtype_encode(g->dtype, w, row + c0 * es, k);
		}
	}
}

/* Marks the resolved rows of t dirty in whichever tier holds them. */
static void mark_dirty(et_store *s, const struct table *t, size_t m)
{
	const uint8_t *kind = s->kind.p;
	const uint64_t *slots = s->slots.p;
	struct sclass *cl = &s->cls[t->cls];

	for (size_t i = 0; i < m; i++) {
		switch (kind[i] & ~K_CONFLICT) {
		case K_HBM:
			cache_set_dirty(&cl->hbm, slots[i]);
			break;
		case K_DDR:
			cache_set_dirty(&cl->ddr, slots[i]);
			break;
		}
	}
}

/* Sums per-input gradients into one per unique row, in input order. With
 * offsets (a pooled backward), input i's gradient is its bag's, divided by
 * the bag's size for a mean. */
static int accumulate(et_store *s, const struct table *t, size_t n, size_t m,
		      const float *grads, const uint64_t *offsets, et_pool mode)
{
	uint32_t dim = t->g->dim;
	const uint32_t *inv = s->inv.p;
	uint8_t *seen;
	float *acc;
	int ret;

	ret = sbuf_reserve(&s->acc, m * dim * sizeof(float) + m);
	if (ret)
		return ret;
	acc = s->acc.p;
	seen = (uint8_t *)(acc + m * dim);
	memset(seen, 0, m);
	for (size_t b = 0, i = 0; i < n; i++) {
		float *a = acc + (size_t)inv[i] * dim;
		const float *gi;
		float div = 1.0f;

		if (offsets) {
			while (offsets[b + 1] <= i)
				b++;
			gi = grads + b * dim;
			if (mode == ET_POOL_MEAN)
				div = (float)(offsets[b + 1] - offsets[b]);
		} else {
			gi = grads + i * dim;
		}
		if (!seen[inv[i]]) {
			seen[inv[i]] = 1;
			for (uint32_t c = 0; c < dim; c++)
				a[c] = offsets && mode == ET_POOL_MEAN
					   ? gi[c] / div
					   : gi[c];
		} else {
			for (uint32_t c = 0; c < dim; c++)
				a[c] += offsets && mode == ET_POOL_MEAN
					    ? gi[c] / div
					    : gi[c];
		}
	}
	return 0;
}

static int update_common(et_store *s, int table, const uint64_t *ids, size_t n,
			 const float *grads, const uint64_t *offsets,
			 et_pool mode, const struct et_update_params *up)
{
	struct table *t;
	size_t m;
	int ret;

	if (!up)
		return err_set(-EINVAL, "up is NULL");
	if (!isfinite(up->lr))
		return err_set(-EINVAL, "up->lr %g not finite", up->lr);
	if (!isfinite(up->eps) || up->eps < 0)
		return err_set(-EINVAL, "up->eps %g not finite and >= 0",
			       up->eps);
	ret = op_begin(s, table, ids, n, &t);
	if (ret || n == 0)
		return ret;
	if (!grads)
		return err_set(-EINVAL, "%s is NULL",
			       offsets ? "bag_grads" : "grads");
	ret = dedup(s, ids, n, &m);
	if (ret)
		return ret;
	ret = accumulate(s, t, n, m, grads, offsets, mode);
	if (ret)
		return ret;
	ret = op_prepare(s, t, ids, n, &m, true);
	if (ret)
		return ret;
	apply(s, t, m, s->acc.p, up);
	mark_dirty(s, t, m);
	return op_end(s, (uint32_t)table, true);
}

int et_update(et_store *s, int table, const uint64_t *ids, size_t n,
	      const float *grads, const struct et_update_params *up)
{
	err_clear();
	return update_common(s, table, ids, n, grads, NULL, ET_POOL_SUM, up);
}

int et_update_pooled(et_store *s, int table, const uint64_t *ids,
		     const uint64_t *offsets, size_t nbags, et_pool mode,
		     const float *bag_grads, const struct et_update_params *up)
{
	size_t n;
	int ret;

	err_clear();
	ret = check_pool(mode);
	if (!ret)
		ret = check_offsets(offsets, nbags, &n);
	if (ret)
		return ret;
	return update_common(s, table, ids, n, bag_grads, offsets, mode, up);
}

int et_write_rows(et_store *s, int table, const uint64_t *ids, size_t n,
		  const float *vals)
{
	struct table *t;
	size_t m;
	int ret;

	err_clear();
	ret = op_begin(s, table, ids, n, &t);
	if (ret || n == 0)
		return ret;
	if (!vals)
		return err_set(-EINVAL, "vals is NULL");
	ret = op_prepare(s, t, ids, n, &m, false);
	if (ret)
		return ret;
	{
		void *const *ptrs = s->ptrs.p;
		const uint32_t *last = s->last.p;
		uint32_t dim = t->g->dim;

		for (size_t i = 0; i < m; i++)
			dtype_encode(t->g->dtype, vals + (size_t)last[i] * dim,
				     ptrs[i], dim);
	}
	mark_dirty(s, t, m);
	return op_end(s, (uint32_t)table, true);
}

/* ------------------------------------------------------------- prefetch */

/* Hands the queued write-backs to the I/O thread as one job per table, in
 * front of the reads that follow them. */
static int wb_submit(et_store *s)
{
	struct wb_ord *o;
	int ret;

	if (!s->nwb)
		return 0;
	ret = wb_sort(s, &o);
	if (ret)
		return ret;
	for (size_t i = 0; i < s->nwb;) {
		uint32_t t = cache_key_table(o[i].key);
		struct table *tb = &s->tables[t];
		size_t k = i;
		struct pl_job *j;

		while (k < s->nwb && cache_key_table(o[k].key) == t)
			k++;
		j = pl_job_new(PL_WRITE, tb->tf, t, k - i, tb->g->row_bytes);
		if (!j)
			return -ENOMEM; /* the queue is intact: wb_run later */
		for (size_t q = i; q < k; q++) {
			j->rows[q - i] = cache_key_row(o[q].key);
			memcpy((char *)j->raw + (q - i) * tb->g->row_bytes,
			       (char *)s->wbuf.p + o[q].pos * s->slot_bytes,
			       tb->g->row_bytes);
		}
		/* If a later table's job cannot be made, the whole queue
		 * stays for wb_run: rewriting rows already handed over is
		 * harmless, as the I/O thread writes them first. */
		pl_submit(s->pl, j);
		s->pl_pending = true;
		i = k;
	}
	wb_reset(s);
	return 0;
}

/* Classifies one table's ids of the next batch; rows to read are appended
 * to a new job in *job (NULL if none). */
static int pf_table(et_store *s, uint32_t t, const uint64_t *ids, size_t n,
		    struct pl_job **job)
{
	struct table *tb = &s->tables[t];
	struct sclass *cl = &s->cls[tb->cls];
	struct cache *top = top_of(s, cl), *ddr = &cl->ddr;
	uint32_t rb = tb->g->row_bytes;
	const uint64_t *uniq;
	uint64_t *mrows;
	size_t m, nm = 0;
	int ret;

	*job = NULL;
	ret = dedup(s, ids, n, &m);
	if (!ret)
		ret = sbuf_reserve(&s->mrows, m * sizeof(uint64_t));
	if (!ret)
		ret = sbuf_reserve(&s->mbuf, rb);
	if (ret)
		return ret;
	uniq = s->uniq.p;
	mrows = s->mrows.p;
	s->pf.rows += m;
	for (size_t i = 0; i < m; i++) {
		uint64_t key = cache_key(t, uniq[i]);
		uint64_t slot = cache_lookup(top, key);
		uint8_t where;
		int64_t at;

		if (slot != CACHE_NONE) {
			s->now++;
			cache_touch(top, slot, s->now);
			cache_pin(top, slot, s->bcur);
			top->st.hits++;
			continue;
		}
		top->st.misses++;
		if (s->has_hbm) {
			slot = cache_lookup(ddr, key);
			if (slot == CACHE_NONE)
				ddr->st.misses++;
			if (slot != CACHE_NONE) {
				ddr->st.hits++;
				cache_pin(ddr, slot, s->bcur);
				ret =
				    place_row(s, key, cache_row(ddr, slot), rb,
					      slot, cache_dirty(ddr, slot),
					      s->bcur, &where, &slot);
				if (ret)
					return ret;
				if ((where & ~K_CONFLICT) == K_HBM)
					cl->hbm.keys[slot] |= CACHE_PF;
				continue;
			}
		}
		/* Evicted dirty, perhaps by this very prefetch: the queue
		 * has the truth. Copied out, as placing may grow the queue. */
		at = wb_find(s, key);
		if (at >= 0) {
			memcpy(s->mbuf.p,
			       (char *)s->wbuf.p + (size_t)at * s->slot_bytes,
			       rb);
			ret =
			    pf_install(s, t, uniq[i], s->mbuf.p, true, s->bcur);
			if (ret)
				return ret;
			continue;
		}
		if (!tf_row_materialized(tb->tf, uniq[i])) {
			tf_init_row_raw(tb->tf, uniq[i], s->mbuf.p);
			tb->st.rows_lazy++;
			ret = pf_install(s, t, uniq[i], s->mbuf.p, false,
					 s->bcur);
			if (ret)
				return ret;
			continue;
		}
		mrows[nm++] = uniq[i];
	}
	if (nm) {
		struct pl_job *j = pl_job_new(PL_READ, tb->tf, t, nm, rb);

		if (!j)
			return -ENOMEM;
		memcpy(j->rows, mrows, nm * sizeof(*mrows));
		j->epoch = s->bcur;
		s->pf.reads += nm;
		*job = j;
	}
	return 0;
}

int et_prefetch(et_store *s, const struct et_batch_ids *batch, size_t ntables)
{
	struct pl_job *jobs = NULL, **tail = &jobs, *j;
	int ret = 0;

	err_clear();
	if (!s || (ntables && !batch))
		return err_set(-EINVAL, "%s is NULL", !s ? "s" : "batch");
	for (size_t k = 0; k < ntables; k++) {
		struct table *t = table_get(s, batch[k].table);
		char what[40];

		if (!t)
			return err_set(ET_ENOTABLE,
				       "batch[%zu].table %d unknown: the store "
				       "has %u",
				       k, batch[k].table, s->ntables);
		snprintf(what, sizeof(what), "batch[%zu].ids", k);
		ret = ids_check(t, batch[k].table, batch[k].ids, batch[k].n,
				what);
		if (ret)
			return ret;
	}
	ret = drain(s);
	if (s->failed)
		return ET_EFAILED;
	if (!ret)
		ret = caches_ensure(s);
	if (ret)
		return ret;
	s->pf.calls++;
	/* A new batch: its pins and the last batch's hold; older go. */
	s->bprev = s->bcur;
	s->bcur = s->epoch;
	for (size_t k = 0; k < ntables && !ret; k++) {
		ret = pf_table(s, (uint32_t)batch[k].table, batch[k].ids,
			       batch[k].n, tail);
		if (*tail)
			tail = &(*tail)->next;
	}
	/* Victims first, then the reads: the I/O thread keeps the order. */
	if (!ret)
		ret = wb_submit(s);
	while ((j = jobs)) {
		jobs = j->next;
		if (ret) {
			pl_job_free(j);
			continue;
		}
		pl_submit(s->pl, j);
		s->pl_pending = true;
	}
	if (ret && s->nwb) {
		/* Queued victims still go home, after the I/O thread. */
		struct pl_job *done;
		uint64_t late, waited;

		if (s->pl_pending) {
			done = pl_drain(s->pl, &late, &waited);
			s->pl_pending = false;
			while ((j = done)) { /* only write-backs were queued */
				done = j->next;
				if (j->result && !s->failed)
					s->failed = j->result;
				pl_job_free(j);
			}
		}
		wb_run(s);
	}
	epoch_next(s);
	return ret;
}

/* ---------------------------------------------------------------- flush */

#define FLUSH_ROWS 4096

/* Queues every dirty row of cache c, chunk by chunk, writing each chunk;
 * clears the dirty bits of what was written. */
static int flush_cache(et_store *s, struct cache *c)
{
	uint64_t n = cache_slots(c), b = 0;
	int ret;

	/* Batches of up to FLUSH_ROWS dirty rows: big enough for the table
	 * file to keep its queue full, small enough to bound the scratch. */
	while (b < n) {
		uint64_t e = b;

		for (; e < n && s->nwb < FLUSH_ROWS; e++) {
			if (!cache_dirty(c, e))
				continue;
			ret = wb_queue(s, c->keys[e], cache_row(c, e));
			if (ret)
				return ret;
		}
		ret = wb_run(s);
		if (ret)
			return ret;
		for (uint64_t i = b; i < e; i++)
			if (cache_dirty(c, i)) {
				c->keys[i] &= ~CACHE_DIRTY;
				c->dirty--;
			}
		b = e;
	}
	return 0;
}

int et_flush(et_store *s)
{
	int ret;

	err_clear();
	if (!s)
		return err_set(-EINVAL, "s is NULL");
	ret = drain(s);
	if (ret)
		return ret;
	/* Rows left over from a failed write-back first. */
	ret = wb_run(s);
	if (ret)
		return ret;
	s->failed = 0;
	for (uint32_t i = 0; s->caches_ready && i < s->ncls && !ret; i++) {
		if (s->has_hbm)
			ret = flush_cache(s, &s->cls[i].hbm);
		if (!ret)
			ret = flush_cache(s, &s->cls[i].ddr);
	}
	if (ret)
		return ret;
	for (uint32_t i = 0; i < s->ntables; i++) {
		ret = et_tfile_sync(s->tables[i].tf);
		if (ret) {
			s->failed = s->failed ? s->failed : ret;
			return ret;
		}
	}
	return 0;
}

/* ----------------------------------------------------------- checkpoint */

int et_checkpoint(et_store *s, const void *dense, size_t len)
{
	struct ckpt_rec r;
	int ret;

	err_clear();
	if (!s || (len && !dense))
		return err_set(-EINVAL, "%s",
			       !s ? "s is NULL"
				  : "dense is NULL, len is not 0");
	ret = et_flush(s); /* drains, writes back, syncs every file */
	if (ret)
		return ret;
	r.commit = s->ckpt + 1;
	r.id = s->ckpt_id + 1;
	r.flags = 0;
	return commit(s, &r, dense, len);
}

int et_checkpoint_read(et_store *s, uint64_t *id, void **dense, size_t *len)
{
	struct ckpt_rec r;
	int ret;

	err_clear();
	if (!s || !id)
		return err_set(-EINVAL, "%s is NULL", !s ? "s" : "id");
	ret = ckpt_read(s->dir, &r, dense, len);
	*id = r.id;
	return ret;
}

int et_checkpoint_info(et_store *s, struct et_checkpoint_info *ci)
{
	struct ckpt_rec r;
	size_t len = 0;
	void *dense = NULL;
	int ret;

	err_clear();
	if (!s || !ci)
		return err_set(-EINVAL, "%s is NULL", !s ? "s" : "ci");
	memset(ci, 0, sizeof(*ci));
	ret = ckpt_read(s->dir, &r, &dense, &len);
	free(dense);
	if (ret)
		return ret;
	ci->id = r.id;
	ci->commit = r.commit;
	ci->dense_len = len;
	ci->tables_moved = (r.flags & CKPT_MOVED) != 0;
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
	    cache_slots(c) * ((uint64_t)c->slot_bytes + ET_SLOT_META_BYTES);
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
}

int et_get_stats(et_store *s, int table, struct et_stats *st)
{
	int ret;

	err_clear();
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
	st->mem_bytes = mem_in_use();
	st->mem_peak_bytes = mem_peak();
	return 0;
}
