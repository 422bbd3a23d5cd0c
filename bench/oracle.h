/*
 * oracle.h - the "distribution oracle" of `embtier-bench mrc`: the best a
 * cache can expect to do without seeing the future draws, for the
 * synthetic Zipf and shift workloads.
 *
 * Their batches are independent draws from a known distribution (for
 * shift, one per phase of shift_every batches). Under such an independent
 * reference model the demand-paging policy with the least expected misses
 * evicts the resident row least likely to be asked next (A0; Aho, Denning
 * and Ullman, JACM 1971). The oracle runs A0 knowing the generator's
 * ranks, not its draws: every miss is loaded (demand fill, as Belady's),
 * evicting when full the resident row of the highest rank in the current
 * phase, so the cache settles on the most probable rows and frees a slot
 * for whatever else is asked. Every table has the same Zipf and draw
 * count, so a row's chance to be asked in a call falls with its rank
 * alone; ties between tables go to the lower table.
 *
 * It is a reference, not a policy a store could run: a gap between an
 * online policy and the oracle is room left for the policy; a gap between
 * the oracle and Belady is what no online policy can close in expectation.
 */
#ifndef ET_BENCH_ORACLE_H
#define ET_BENCH_ORACLE_H

#include <stddef.h>
#include <stdint.h>

#include "workload.h"

/* Misses of the oracle over keys[0..n) (key = (table + 1) << 40 | row),
 * batch b's lookups being keys[bstart[b] .. bstart[b + 1]), nb batches
 * drawn by g from its batch 0, with room for cap keys (cap >= 1).
 * 0, -EINVAL (cap 0), -ENOTSUP (g is not Zipf or shift) or -ENOMEM. */
int oracle_misses(const struct wl_gen *g, const uint64_t *keys,
		  const size_t *bstart, uint64_t nb, uint64_t cap,
		  uint64_t *misses);

#endif
