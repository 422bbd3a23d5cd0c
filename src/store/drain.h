/*
 * drain.h - the prefetch's state, kept by prefetch.c (et_prefetch and its
 * thread) and drain.c (what the I/O thread did, taken in at the start of
 * every operation). Its counters are added to where the event happens.
 * Not installed.
 */
#ifndef ET_DRAIN_H
#define ET_DRAIN_H

#include <stdbool.h>
#include <stdint.h>

#include "embtier.h"
#include "scratch.h"

struct pipeline;
struct pf_async;

struct pf_state {
	struct pipeline *pl;	/* the I/O thread */
	bool pending;		/* jobs handed to it and not drained */
	struct pf_async *async; /* cfg.prefetch_thread: et_prefetch's thread,
				 * once started (prefetch.c) */
	struct opscr *scr;	/* per table of the last prefetch, kept:
				  * the operations on that batch take its
				  * dedup and memo */
	uint32_t nscr;		/* entries of scr */
	struct opscr *prev;	/* the same of the prefetch before it, whose
				  * batch runs while the last one is read */
	uint32_t nprev;		/* entries of prev */
	uint64_t calls, rows, reads, hits, late, skipped, wait_ns;
	/* tables of the last prefetch probed ahead on the store's threads
	 * (pf_probe_all), and of them those probed again as rows had moved:
	 * when most were, the next prefetch probes table by table */
	uint32_t ahead, stale, skips;
};

/* Installs what the I/O thread read for earlier prefetches and takes back
 * the write-backs it did; op_drain adds its wait to the operation's miss
 * wait. */
int drain(et_store *s);
int op_drain(et_store *s);
/* Places a prefetched row unless it became resident meanwhile. */
int pf_install(et_store *s, uint32_t t, uint64_t row, const void *raw,
	       bool dirty, uint32_t epoch, uint64_t *top);

#endif
