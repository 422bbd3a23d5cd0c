/*
 * scratch.h - the memory an operation works in, owned by scratch.c: the
 * growable buffers every module uses, the scratch of one table's part of
 * a batch (struct opscr: its dedup, then where each unique row is), and
 * the store's set of them. The operation in progress fills its opscr;
 * which one is in use (o) changes only through scratch_use. Not
 * installed.
 */
#ifndef ET_SCRATCH_H
#define ET_SCRATCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "embtier.h"

/* A growable scratch buffer: it grows to the largest size asked for and
 * is kept. */
struct sbuf {
	void *p;
	size_t cap;
};

int sbuf_reserve(struct sbuf *b, size_t bytes);
void sbuf_free(struct sbuf *b);
/* Doubles *cap (from 8) of the array *p of n elements of size bytes. */
int array_grow(void **p, uint32_t *cap, uint32_t n, size_t size);

/* Where a unique row of an operation was found, then where it is
 * (opscr.kind). */
enum {
	K_HBM = 1,    /* in HBM */
	K_DDR = 2,    /* in DDR */
	K_MISS = 3,   /* in neither: read from its table file */
	K_BYPASS = 4, /* served outside the caches */
	K_WB = 5,     /* in neither, but queued for write-back: dirty */
	K_CONFLICT = 0x80,
};

/* The parts of a batch's misses in set order, placed on the store's
 * threads (resolve.c). */
#define PLACE_PARTS 8

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
	/* a prefetch's probe of the top tier for these ids, made before its
	 * tables were placed (pf_probe_all): slots holds it, valid while the
	 * top tier's changes count is still probe_changes */
	bool probed;
	uint64_t probe_changes;
	size_t probe_misses; /* rows the probe did not find */
	/* ... and every row of the batch was found, so its hits were
	 * touched and pinned ahead as well (pf_hits_ahead): npfl_ahead of
	 * them in pfl */
	bool hits_done;
	size_t npfl_ahead;
	/* a direct top tier's probe also filled kind, ptrs and pfl (its
	 * hits need no touch or pin): the hits are ready to use */
	bool hits_ready;
	/* ... and wasdirty (u8 a unique row: its slot was dirty), which
	 * holds while the tier's cleans count is dirty_cleans */
	struct sbuf wasdirty;
	uint64_t dirty_cleans;
	/* The memo of the last resolve into this scratch: if memo is set,
	 * every unique row of table memo_t was put in the top tier at
	 * slots[i] (kind[i] the top's, ptrs[i] its bytes) by a resolve or
	 * prefetch of these ids while s->reg.gen was memo_gen; if memo_pin is
	 * not 0, every one is pinned by that batch epoch (a prefetch's),
	 * and pfl lists those placed by a prefetch and not used yet. The
	 * next operation on the same ids uses it (see resolve_memo in
	 * resolve.c). */
	bool memo;
	uint32_t memo_t;
	uint32_t memo_pin;
	uint64_t memo_gen;
	struct sbuf pfl; /* u32 unique indexes */
	size_t npfl;
	/* with the memo of a prefetch on a direct top tier: wasdirty says
	 * which of its rows were dirty then (an update marks the others
	 * only), while the tier's cleans count is dirty_cleans */
	bool memo_dirty;
	/* an update's unique rows admission dropped (ops.c): drop, u8 per
	 * unique; their own ptrs while the kernel runs on zeroed rows of
	 * djunk instead */
	struct sbuf drop, dsave, djunk;
	size_t ndrop;
	/* resolve_fetch placed these rows while the misses were read (the
	 * first pass of the placement, place_slots): later lists (u32 miss
	 * indexes) the nlater misses whose bytes op_place copies into their
	 * slots, place_ret is what placing returned, conflicts0 the table's
	 * conflict count before it */
	bool placed;
	int place_ret;
	uint64_t conflicts0;
	struct sbuf later;
	size_t nlater;
	/* direct: the read put the bytes of the misses placed straight into
	 * their slots (to, a pointer per miss, as tf_read.to: those it has
	 * not put there stay set, for op_place to copy from mbuf) */
	bool direct;
	struct sbuf to;
	/* sorted: the misses (mrows, midx) are in the order of their sets in
	 * the top tier, not in batch order (resolve_sort); order holds, per
	 * miss, where placing put it (u64 slot), its rank in batch order (u32,
	 * | ORD_WB if queued for write-back) and its kind (u8), then the
	 * sort's own room */
	bool sorted;
	bool init_later; /* ... and the read left the initial rows to
			  * place_copy (marked in order) */
	struct sbuf order;
	/* ... cut in PLACE_PARTS parts at bucket boundaries (no set in two
	 * parts): part k is misses cut[k] to cut[k + 1] - 1 */
	uint32_t cut[PLACE_PARTS + 1];
	size_t nwb; /* misses queued for write-back (K_WB) */
	/* work the operation hands to its placement in set order, to run
	 * beside the parts (NULL: none); sel is its room (ops.c) */
	struct side_work *side;
	struct sbuf sel;
};

/*
 * Work of an operation that may run on the store's threads beside a
 * placement's parts (place_sorted), once nothing of the call can fail:
 * no read in flight, every miss given by the initializer. fn runs items
 * 0..n-1 (thread: which scratch); ran says whether it did. If it did not,
 * the operation does the work itself after the placement.
 */
struct side_work {
	void (*fn)(void *arg, size_t item, unsigned thread);
	void *arg;
	size_t n;
	bool ran;
};

/* The store's scratches. */
struct scratch {
	struct opscr *o;     /* the table's in progress: &one, or multi[k] */
	struct opscr one;    /* single-table operations and prefetch */
	struct opscr *multi; /* per table of a multi-table call */
	uint32_t nmulti;     /* entries of multi */
	struct sbuf trow;    /* f32 per thread: decoded rows */
	struct sbuf map;     /* dedup hash: u32 unique index + 1 */
	struct sbuf tmap;    /* the same, a slice per worker thread */
	struct sbuf rds;     /* resolve_fetch: a tf_read and tf_stats a table */
};

/* How many of the ids deduplicated into o name its unique row j: what a
 * policy counting accesses (TinyLFU, W-TinyLFU) counts for one lookup; 1
 * if the store's policies count none. */
static inline uint32_t op_draws(const struct opscr *o, size_t j)
{
	return o->counted ? ((const uint32_t *)o->draws.p)[j] : 1;
}

/* Grows *arr (n scratches) to want, keeping the ones it has. */
int scratch_grow(struct opscr **arr, uint32_t *n, size_t want);
/* Whether o's dedup is of these ids. */
bool scratch_holds(const struct opscr *o, const uint64_t *ids, size_t n);
/* Makes o the scratch of the operation's current table. */
void scratch_use(et_store *s, struct opscr *o);
void opscr_free(struct opscr *o);
void scratch_free(struct scratch *sc);

/* Dedups a batch into the current scratch: uniq, inv, last (and draws);
 * *m_out unique rows. */
int dedup(et_store *s, const uint64_t *ids, size_t n, size_t *m_out);
/* Its parts, for dedups on several threads: the u32 entries of the hash
 * for n ids, the room in o, and the work into o with the hash ht (which
 * changes nothing else). */
size_t dedup_cap(size_t n);
int dedup_reserve(const et_store *s, struct opscr *o, size_t n);
void dedup_into(const et_store *s, struct opscr *o, uint32_t *ht,
		const uint64_t *ids, size_t n);

#endif
