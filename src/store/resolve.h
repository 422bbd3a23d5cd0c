/*
 * resolve.h - a batch through the tiers (resolve.c): an operation's frame
 * (op_begin ... op_end) and resolve, which makes every unique row of the
 * batch resident in the top tier, pinned, with a pointer to its bytes.
 * Not installed.
 */
#ifndef ET_RESOLVE_H
#define ET_RESOLVE_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "registry.h"
#include "scratch.h"

/* Checks, bookkeeping and op_start of a single-table operation. */
int op_begin(et_store *s, int table, const uint64_t *ids, size_t n,
	     struct table **out);
/* The start of every operation: the I/O thread's results taken in, the
 * caches made ready. */
int op_start(et_store *s);
/* Dedups (unless deduped) and resolves; the unique rows are then at the
 * scratch's ptrs. With overwrite, misses are not read. */
int op_prepare(et_store *s, struct table *t, const uint64_t *ids, size_t n,
	       size_t *m, bool deduped, bool overwrite);
/* op_prepare in steps, for a multi-table call: op_lookup of each table,
 * one resolve_fetch of all, op_place of each. resolve_fetch places the
 * rows of the tables it can while their misses are read, and op_place
 * then copies in the misses' bytes: a call places every table before
 * anything else of it may fail. */
int op_lookup(et_store *s, struct table *t, const uint64_t *ids, size_t n,
	      size_t *m, bool deduped);
int resolve_fetch(et_store *s, struct opscr *os, size_t nt);
int op_place(et_store *s, struct table *t, size_t n);
/* A batch with at least this many misses is placed in the order of the
 * misses' sets, where that gives the result of batch order (resolve.c,
 * "Misses in set order"); 4096. Tests lower it, to compare the orders. */
extern size_t place_set_order_min;
/* How many placements in set order have run an operation's side work
 * beside their parts (struct side_work), for the tests to see that they
 * did; counted by every store of the process. */
extern _Atomic size_t place_side_runs;
/* A single-table call of at least this many inputs (unique rows for an
 * update) runs its kernel on the store's threads (ops.c); 4096. Tests
 * lower it. */
extern size_t op_par_min;
/* Records a memo in o if every unique row is in the top tier. */
void memo_set(const et_store *s, struct opscr *o, uint32_t t, uint32_t pin);
/* Ends an operation: op_bypass_done, then op_finish. */
int op_end(et_store *s, uint32_t t, bool changed);
int op_bypass_done(et_store *s, uint32_t t, bool changed);
int op_finish(et_store *s, int ret);

#endif
