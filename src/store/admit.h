/*
 * admit.h - what a keyed table keeps: its admission filter and expiry
 * setting (et_key_policy_set), and the counts et_stats reports. One per
 * table, in struct table; used on the caller's thread only (an update
 * decides admission before its rows are placed or its kernels run).
 */
#ifndef ET_ADMIT_H
#define ET_ADMIT_H

#include <stdbool.h>
#include <stdint.h>

#include "embtier.h"
#include "sketch.h"

#define ADMIT_MAX      SKETCH_MAX /* admit_after up to the counters' top */
#define ADMIT_LOG2_DEF 20
#define ADMIT_LOG2_MIN 10
#define ADMIT_LOG2_MAX 30

struct keypol {
	uint32_t admit_after;  /* > 1: the filter is on */
	uint32_t expire_after; /* commits; 0: off */
	struct sketch filter;  /* sightings per id, one per update call */
	uint64_t dropped, erased, expired;
};

/* Checks p and applies it: a new filter (counts start at zero) when
 * admission is on, none when off. On error nothing changes. */
int keypol_set(struct keypol *k, const struct et_key_policy *p);
/* keypol_set's checks alone. */
int keypol_check(const struct et_key_policy *p);
void keypol_free(struct keypol *k);

/* One update call's sighting of id: whether the update may store it (it
 * has now been seen admit_after times, or stored is true: the table holds
 * it already). */
static inline bool keypol_admit(struct keypol *k, uint64_t id, bool stored)
{
	if (k->admit_after <= 1)
		return true;
	if (sketch_add(&k->filter, id) >= k->admit_after)
		return true;
	return stored;
}

/* id was written whole (et_write_rows): admitted from now on. */
static inline void keypol_written(struct keypol *k, uint64_t id)
{
	if (k->admit_after > 1)
		sketch_raise(&k->filter, id, k->admit_after);
}

#endif
