/*
 * store_impl.h - the state of a store, shared by the files that implement
 * it (store.c, tier.c, writeback.c, kernels.c, prefetch.c). Not installed.
 *
 *
 * Every batch operation goes the same way:
 *
 *   ids --dedup--> unique rows --resolve--> a pointer to each row's bytes
 *       --op--> (decode into the caller's buffer | update in place, dirty)
 *       --writeback--> dirty victims and bypassed rows to the row log
 *
 * resolve() (tier.c) makes every unique row of the batch resident in the top tier
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
 * is there and dirty that copy is the truth (docs/ARCHITECTURE.md, invariant 1). Rows are
 * held in their storage type everywhere (invariant 2), so the result of any
 * sequence of operations is the same bytes whatever the capacities,
 * policies, or order of evictions (invariant 3).
 *
 * When a row cannot be placed because every way of its set is pinned by
 * this batch (more distinct rows of the batch hash to one set than it has
 * ways), it is served from a bypass buffer: read from its file, used, and
 * written straight back if the operation changed it. Slower, never wrong.
 *
 * Write-back happens at the end of each operation, or with the next
 * prefetch when the caller prefetches (writeback.c), all queued rows of a
 * table in one batch appended to its row log. If it fails,
 * the queued rows stay in memory, the store refuses every operation but
 * et_flush and et_store_close with ET_EFAILED, and a later successful flush
 * writes them and clears the failure: nothing is lost or read stale.
 *
 * Scratch buffers grow to the largest batch seen and are kept; they are the
 * store's only memory beyond the configured capacities (see README).
 *
 */
#ifndef ET_STATE_H
#define ET_STATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#include "cache.h"
#include "checkpoint.h"
#include "clock.h"
#include "error.h"
#include "embtier.h"
#include "lookahead.h"
#include "pipeline.h"
#include "table_file.h"

#define NAME_MAX_LEN 64

/* A growable scratch buffer. */
struct sbuf {
	void *p;
	size_t cap;
};

int sbuf_reserve(struct sbuf *b, size_t bytes);
void sbuf_free(struct sbuf *b);

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

/*
 * The scratch of one table's part of an operation: its batch deduplicated
 * and resolved. A multi-table call keeps one per table until its kernels
 * have run.
 */
struct opscr {
	struct sbuf uniq;  /* u64 unique row ids */
	struct sbuf inv;   /* u32 per input id: index in uniq */
	struct sbuf last;  /* u32 per unique: last input index */
	struct sbuf draws; /* u32 per unique: inputs naming it, if the store
			    * counts them (op_draws) */
	struct sbuf ptrs;  /* void * per unique: the row's bytes */
	struct sbuf kind;  /* u8 per unique: where it was found, then where
			     * it is (K_*), | K_CONFLICT */
	struct sbuf slots; /* u64 per unique: its slot in that tier */
	struct sbuf mrows; /* u64 rows missing from both caches */
	struct sbuf midx;  /* u32 unique index of each miss */
	struct sbuf mbuf;  /* their bytes as read */
	struct sbuf acc; /* update: u32 inputs of each unique row (kern_group);
			     * pooled gather: one decoded row */
	struct sbuf bypass; /* u32 unique indexes served from the bypass */
	size_t nbypass;
	size_t m;	  /* unique rows */
	size_t nm;	  /* misses listed in mrows, midx */
	uint32_t t;	  /* the table resolved */
	struct sbuf dids; /* u64: the ids uniq, inv and last are of */
	size_t dn, dm;	  /* their count, and the unique rows among them */
	bool counted;	  /* draws holds their counts */
	/* The memo of the last resolve into this scratch: if memo is set,
	 * every unique row of table memo_t was put in the top tier at
	 * slots[i] (kind[i] the top's, ptrs[i] its bytes) by a resolve or
	 * prefetch of these ids while s->gen was memo_gen; if memo_pin is
	 * not 0, every one is pinned by that batch epoch (a prefetch's),
	 * and pfl lists those placed by a prefetch and not used yet. The
	 * next operation on the same ids uses it (see resolve_memo in
	 * tier.c). */
	bool memo;
	uint32_t memo_t;
	uint32_t memo_pin;
	uint64_t memo_gen;
	struct sbuf pfl; /* u32 unique indexes */
	size_t npfl;
};

struct workers;
struct pf_async;

struct et_store {
	char *dir;
	struct et_store_config cfg;
	io_ctx *io;
	struct table *tables;
	uint32_t ntables, tcap;
	bool has_hbm;
	bool count_draws;  /* a tier's policy counts accesses (on_hits) */
	bool caches_ready; /* every class's caches are allocated */
	struct sclass *cls;
	uint32_t ncls, clscap;
	uint32_t slot_bytes; /* the largest slot: stride of the write-back
			      * queue and of tmp */
	uint64_t now;	     /* access count: the policies' clock */
	uint32_t epoch;	     /* pin epoch of the operation in progress */
	uint32_t bcur;	     /* pin epoch of the last prefetched batch, or 0 */
	uint32_t bprev;	     /* and of the one before it */
	uint64_t gen;	     /* bumped when the caches are freed or the pins
			      * wrap: earlier memos no longer stand */
	int failed;	  /* first write-back error not yet recovered, or 0 */
	int lost;	  /* rows could not be kept (no memory to queue them):
		   * every later call fails, nothing more is committed */
	size_t wb_room;	  /* queue entries the operation has reserved */
	bool pf_placing;  /* et_prefetch is placing its batch's rows */
	uint64_t ckpt;	  /* last commit; 0: none */
	uint64_t ckpt_id; /* et_checkpoint calls it includes */
	uint32_t ckpt_flags; /* CKPT_* of the record */
	struct ckpt_rec rec; /* the record on disk: its table list names
			      * tables this session has not opened too */
	int lock_fd;	     /* DIR/LOCK, flock()ed for the store's life */
	struct pipeline *pl; /* the I/O thread */
	bool pl_pending;     /* jobs handed to it and not drained */
	struct {
		uint64_t calls, rows, reads, hits, late, skipped, wait_ns;
	} pf;
	struct {
		uint64_t t0;	  /* start of the operation in progress */
		uint64_t op_ns;	  /* et_stats.op_ns */
		uint64_t miss_ns; /* et_stats.miss_wait_ns */
		uint64_t wb_ns;	  /* et_stats.writeback_ns */
	} tm;
	struct lookahead la; /* et_lookahead's window (see lookahead.h) */

	/* per-operation scratch */
	struct opscr *o;      /* the table's in progress: &one, or multi[k] */
	struct opscr one;     /* single-table operations and prefetch */
	struct opscr *multi;  /* per table of a multi-table call */
	uint32_t nmulti;      /* entries of multi */
	struct opscr *pf_scr; /* per table of a prefetch, kept: a multi-table
			       * call of that batch takes its dedup over */
	uint32_t npf;	      /* entries of pf_scr */
	struct workers *wk;   /* cfg.threads > 1: the kernels' threads */
	struct pf_async *pfa; /* cfg.prefetch_thread: et_prefetch's thread,
			       * once started (prefetch.c) */
	struct sbuf trow;     /* f32 per thread: a decoded row */
	struct sbuf map;      /* dedup hash: u32 unique index + 1 */
	struct sbuf tmp;      /* one row */
	struct sbuf wkeys;    /* u64 keys queued for write-back */
	struct sbuf wbuf;     /* their bytes */
	size_t nwb;	      /* rows queued for write-back */
	struct sbuf widx;     /* u32 hash index over wkeys: position + 1 */
	size_t widx_cap;      /* entries in widx, a power of two */
	struct sbuf wsort;    /* u32 order for write-back grouping */
	struct sbuf wcount;   /* size_t per table + 1: counting sort */
	struct sbuf wrows;    /* u64 rows of one table for write-back */
	struct sbuf wraw;     /* their bytes, grouped */
	struct sbuf rds;      /* resolve_read: a tf_read and tf_stats a table */
};

enum {
	K_HBM = 1,    /* in HBM */
	K_DDR = 2,    /* in DDR */
	K_MISS = 3,   /* in neither: read from its table file */
	K_BYPASS = 4, /* served outside the caches */
	K_WB = 5,     /* in neither, but queued for write-back: dirty */
	K_CONFLICT = 0x80,
};

static inline uint32_t key_rb(const et_store *s, uint64_t key)
{
	return s->tables[cache_key_table(key)].g->row_bytes;
}

static inline struct sclass *class_of(const et_store *s, uint64_t key)
{
	return &s->cls[s->tables[cache_key_table(key)].cls];
}

/* The tier where rows are used: HBM if there is one, else DDR. */
static inline struct cache *top_of(const et_store *s, struct sclass *c)
{
	return s->has_hbm ? &c->hbm : &c->ddr;
}

/* store.c: tables and caches; scratches */
int scratch_grow(struct opscr **arr, uint32_t *n, size_t want);
bool scratch_holds(const struct opscr *o, const uint64_t *ids, size_t n);
struct table *table_get(et_store *s, int id);
int no_table(const et_store *s, int id);
int caches_ensure(et_store *s);
void caches_drop(et_store *s);
int array_grow(void **p, uint32_t *cap, uint32_t n, size_t size);
int tier_fits(const char *field, uint64_t bytes, uint32_t ways, uint32_t slot,
	      et_policy pol);
uint32_t slot_for(const et_store *s, uint32_t row_bytes);
int plan(et_store *s, uint32_t n);
bool plan_changed(const et_store *s);
void opscr_free(struct opscr *o);
void hit_use(et_store *s, struct cache *top, uint64_t slot, uint32_t n);
#define PROBE_AHEAD 16
void pin_op(et_store *s, struct cache *c, uint64_t slot);
void *where_row(struct sclass *cl, uint8_t where, uint64_t slot);
int pf_install(et_store *s, uint32_t t, uint64_t row, const void *raw,
	       bool dirty, uint32_t epoch, uint64_t *top);

/* tier.c: a batch through the tiers */
int dedup(et_store *s, const uint64_t *ids, size_t n, size_t *m_out);
void probe_top(et_store *s, uint32_t t, const struct cache *top, size_t m,
	       uint64_t *slots);
int place_row(et_store *s, uint64_t key, const void *src, uint32_t rb,
	      uint64_t dslot, bool dirty, uint32_t pin, uint32_t n,
	      uint8_t *where, uint64_t *slot_out);

/* How many of the ids deduplicated into o name its unique row j: what a
 * policy counting accesses (TinyLFU, W-TinyLFU) counts for one lookup; 1
 * if the store's policies count none. */
static inline uint32_t op_draws(const struct opscr *o, size_t j)
{
	return o->counted ? ((const uint32_t *)o->draws.p)[j] : 1;
}
int ids_check(const struct table *t, int table, const uint64_t *ids, size_t n,
	      const char *what);
int op_begin(et_store *s, int table, const uint64_t *ids, size_t n,
	     struct table **out);
int op_prepare(et_store *s, struct table *t, const uint64_t *ids, size_t n,
	       size_t *m, bool deduped, bool overwrite);
int op_lookup(et_store *s, struct table *t, const uint64_t *ids, size_t n,
	      size_t *m, bool deduped);
void memo_set(const et_store *s, struct opscr *o, uint32_t t, uint32_t pin);
int resolve_read(et_store *s, struct opscr *os, size_t nt);
int op_place(et_store *s, struct table *t, size_t n);
int op_start(et_store *s);

int op_end(et_store *s, uint32_t t, bool changed);
int op_bypass_done(et_store *s, uint32_t t, bool changed);
int op_finish(et_store *s, int ret);
void epoch_next(et_store *s);

/* writeback.c: the write-back queue */
int wb_widen(et_store *s, uint32_t slot_bytes);
int64_t wb_find(const et_store *s, uint64_t key);
int wb_reserve(et_store *s, size_t extra);
int wb_queue(et_store *s, uint64_t key, const void *raw);
int wb_run(et_store *s);
bool wb_deferrable(const et_store *s);
int wb_submit(et_store *s);

/* prefetch.c: the I/O thread's results */
int drain(et_store *s);
int op_drain(et_store *s);

#endif
