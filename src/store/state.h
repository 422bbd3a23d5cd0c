/*
 * state.h - the state of a store: one part per module, each written by
 * its module alone (the part's header says who), composed here. Not
 * installed.
 *
 * Every batch operation goes the same way (docs/ARCHITECTURE.md has the
 * flows):
 *
 *   ids --dedup--> unique rows --resolve--> a pointer to each row's bytes
 *       --kernel--> (decode into the caller's buffer | update in place)
 *       --write-back--> dirty victims and bypassed rows to the row log
 *
 * resolve (resolve.c) makes every unique row resident in the top tier
 * (HBM if there is one, else DDR) and pins it for the operation: a hit is
 * pinned, a DDR hit promoted, a miss read from its table file (one batch
 * for all; unwritten rows come from the initializer) and placed
 * (place.c). An HBM victim is demoted to DDR keeping its dirty bit; a
 * dirty DDR victim is queued for write-back (writeback.c). The hierarchy
 * is exclusive and rows are held in their storage type everywhere, so
 * results do not depend on capacities, policies or the order of
 * evictions (docs/ARCHITECTURE.md, invariants 1-3). A row no cache can
 * take (every way of its set pinned by the batch) is served from a bypass
 * buffer and written straight back if it changed: slower, never wrong.
 *
 * If a write-back fails the rows stay queued, `failed` is set, and every
 * call but et_flush and et_store_close returns ET_EFAILED until a flush
 * succeeds. If rows could not be kept at all (no memory to queue a
 * victim), `lost` is set and stays: nothing more is committed. Both are
 * set by whichever module sees the failure; only et_flush clears
 * `failed`.
 *
 * Scratch buffers grow to the largest batch seen and are kept; with the
 * queue they are the store's only memory beyond the configured
 * capacities (README, Memory).
 */
#ifndef ET_STATE_H
#define ET_STATE_H

#include <stdbool.h>
#include <stdint.h>

#include "cache.h"
#include "clock.h"
#include "commit.h"
#include "drain.h"
#include "embtier.h"
#include "error.h"
#include "io.h"
#include "lookahead.h"
#include "place.h"
#include "registry.h"
#include "scratch.h"
#include "writeback.h"

struct workers;

/* The store's clocks, added to by the operations (et_stats). */
struct timers {
	uint64_t t0;	  /* start of the operation in progress */
	uint64_t op_ns;	  /* et_stats.op_ns */
	uint64_t miss_ns; /* et_stats.miss_wait_ns */
	uint64_t wb_ns;	  /* et_stats.writeback_ns */
};

struct et_store {
	char *dir;
	struct et_store_config cfg; /* as checked at open; never changes */
	io_ctx *io;		    /* the store's ring (io.c) */
	struct workers *wk;	    /* cfg.threads > 1: the kernels' threads */
	struct registry reg;	    /* tables, classes, caches: registry.c */
	struct pins pins;	    /* pin epochs, policy clock: place.c */
	struct wbq wb;		    /* the write-back queue: writeback.c */
	struct scratch sc;	    /* an operation's scratch: scratch.c */
	struct pf_state pf;	    /* prefetch.c, drain.c */
	struct commit_state cm;	    /* commit.c */
	struct lookahead la;	    /* et_lookahead's window (api/store.c) */
	struct timers tm;
	int failed; /* first write-back error not yet recovered, or 0 */
	int lost;   /* rows could not be kept: every later call fails */
};

/* Frees s as a crash would leave it: nothing written back, nothing
 * committed; what it wrote since the last commit is cut at the next open
 * (api/store.c; et_delta_apply's way out of a failed apply). */
void store_discard(et_store *s);
/* et_store_open of a directory whose DIR/LOCK the caller holds (lock_fd,
 * from dir_lock): the store uses it and leaves it held at close. */
int store_open_lent(const char *dir, const struct et_store_config *cfg,
		    int lock_fd, et_store **out);

/* 0 if name may name a table: 1..64 of [A-Za-z0-9_.-], no leading '.'
 * (api/store.c); else ET_ECONFIG (or -EINVAL for NULL) with the detail. */
int table_name_check(const char *name);

#endif
