/*
 * delta_state.h - DIR/DELTA, what a copy brought up to date by deltas
 * (et_delta_apply) stands at: the source's commit, and for each table the
 * source journal's chain checksum at that commit, which the next delta
 * must start from (docs/FORMAT.md, "Delta files").
 *
 *   0   8  "ETDSTA01"
 *   8   8  the source's commit
 *  16   4  tables
 *  20   4  0
 *  24      72 a table: name (64, zero-padded), u64 chain checksum
 *  24+72n  8  XXH3-64 of everything before
 *
 * Written atomically (a temporary file, fsync, rename, directory sync).
 */
#ifndef ET_DELTA_STATE_H
#define ET_DELTA_STATE_H

#include <stdint.h>

struct dstate_table {
	char name[65];
	uint64_t sum;
};

struct dstate {
	uint64_t commit;
	uint32_t n;
	struct dstate_table *t; /* malloc()ed */
};

/* Reads DIR/DELTA: 0 (s->n may be 0), -ENOENT if there is none, ET_EDELTA
 * if it is damaged (the detail says how). */
int dstate_read(const char *dir, struct dstate *s);
int dstate_write(const char *dir, const struct dstate *s);
/* The entry of name, or NULL. */
struct dstate_table *dstate_find(const struct dstate *s, const char *name);
/* Sets name's checksum, adding an entry if needed. */
int dstate_set(struct dstate *s, const char *name, uint64_t sum);
void dstate_free(struct dstate *s);

#endif
