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
	bool counted;	       /* the filter changed since it was saved */
	uint64_t dropped, erased, expired;
};

/* Checks p and applies it: a new filter (counts start at zero) when
 * admission is on, none when off. On error nothing changes. */
int keypol_set(struct keypol *k, const struct et_key_policy *p);
/* keypol_set's checks alone. */
int keypol_check(const struct et_key_policy *p);

/*
 * The filter at a commit, in one of two files beside the table,
 * PATH.adm0 and PATH.adm1 (PATH the table file; docs/FORMAT.md,
 * "Admission filters"): commit c's goes to slot c % 2, written and synced
 * before the commit record that names c, so the slot of the record's
 * commit is never the one being written. keypol_save writes k's filter
 * as of commit (admission on). keypol_load, for a filter just made by
 * keypol_set with the same admit_after and filter_log2 as the file's,
 * takes the counts saved at commit: *loaded says whether it did (no file
 * of that commit, or other settings: the counts start at zero). A file of
 * that commit that fails its checks is ET_EHDRSUM or ET_EHEADER, the
 * detail naming it.
 */
int keypol_save(const struct keypol *k, const char *path, uint64_t commit);
/* et_key_policy_set's part: p applied to k (a table's file at path, the
 * store's last commit commit). Admission turned on, or on with other
 * settings: a new filter, with the counts saved at commit if they were
 * saved with these settings; on with the same settings: the filter kept
 * as it is. On error (p's checks, a damaged file) nothing changes. */
int keypol_apply(struct keypol *k, const struct et_key_policy *p,
		 const char *path, uint64_t commit);
int keypol_load(struct keypol *k, const char *path, uint64_t commit,
		bool *loaded);
void keypol_free(struct keypol *k);

/* One update call's sighting of id: whether the update may store it (it
 * has now been seen admit_after times, or stored is true: the table holds
 * it already). */
static inline bool keypol_admit(struct keypol *k, uint64_t id, bool stored)
{
	if (k->admit_after <= 1)
		return true;
	k->counted = true;
	if (sketch_add(&k->filter, id) >= k->admit_after)
		return true;
	return stored;
}

/* id was written whole (et_write_rows): admitted from now on. */
static inline void keypol_written(struct keypol *k, uint64_t id)
{
	if (k->admit_after > 1) {
		sketch_raise(&k->filter, id, k->admit_after);
		k->counted = true;
	}
}

#endif
