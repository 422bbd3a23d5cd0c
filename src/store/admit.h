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
#define ADMIT_HALF_MAX (1u << 20) /* half_life, in commits */

/* A saved filter as a commit record names it (ckpt_table asum, aref):
 * its header's checksum, and its commit << 1 | its slot; 0, 0: none. */
struct adm_ref {
	uint64_t sum;
	uint64_t ref;
};

struct keypol {
	uint32_t admit_after;  /* > 1: the filter is on */
	uint32_t expire_after; /* commits; 0: off */
	uint64_t max_keys;     /* 0: no bound */
	uint32_t half_life;    /* the bound's order: 0 by stamp, else by
				* score (commits a weight halves in) */
	struct sketch filter;  /* sightings per id, one per update call */
	bool counted;	       /* the filter changed since it was saved */
	struct adm_ref saved;  /* what keypol_save wrote for the commit being
				* made (0, 0: admission off at it) */
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
 * "Admission filters"), and named by the commit record (struct adm_ref):
 * a commit's filter goes to the slot the last record does not name,
 * written and synced before the record that names it, so the file a
 * record names is never the one being written.
 *
 * keypol_save writes k's filter as of commit (admission on) into the
 * slot other than named's, and sets k->saved to what the next record
 * is to name. keypol_load, for a filter just made by keypol_set, takes
 * the counts of the file named (none named: admission was off at that
 * commit, counts from zero; named, with other admit_after or filter_log2:
 * counts from zero). The named file missing is ET_EMISSING; cut, damaged,
 * or not the one named (the other slot's, another commit's) ET_EHDRSUM;
 * the detail names it. *loaded says whether counts were taken.
 */
int keypol_save(struct keypol *k, const char *path, uint64_t commit,
		const struct adm_ref *named);
/* et_key_policy_set's part: p applied to k (a table's file at path; the
 * last commit's record names named). Admission turned on, or on with
 * other settings: a new filter, with the counts of the named file if
 * they were saved with these settings; on with the same settings: the
 * filter kept as it is. On error (p's checks, a missing or damaged file)
 * nothing changes. */
int keypol_apply(struct keypol *k, const struct et_key_policy *p,
		 const char *path, const struct adm_ref *named);
int keypol_load(struct keypol *k, const char *path, const struct adm_ref *named,
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
