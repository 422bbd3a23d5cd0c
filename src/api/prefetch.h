/*
 * prefetch.h - et_prefetch's thread, and with it the frame every public
 * call on a store opens with (api_enter): a prefetch running on that
 * thread ends first. Included by the API's files (store.c, ops.c,
 * stats.c, prefetch.c). Not installed.
 */
#ifndef ET_PREFETCH_H
#define ET_PREFETCH_H

#include "embtier.h"
#include "error.h"

/* Waits until a prefetch running on the prefetch thread has ended (no-op
 * without one). */
void pf_wait(et_store *s);
/* Ends the prefetch thread (after its prefetch) and frees it. */
void pf_stop(et_store *s);

/* The frame of every public call on a store: the prefetch on the store's
 * thread ends first (the store's state is the caller's again), and the
 * calling thread's error detail is cleared. */
static inline void api_enter(et_store *s)
{
	pf_wait(s);
	err_clear();
}

#endif
