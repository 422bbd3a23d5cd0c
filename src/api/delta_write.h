/*
 * delta_write.h - the writing pass of et_delta_apply (delta_write.c):
 * a checked delta file's records into the copy's store, committed once.
 * Not installed.
 */
#ifndef ET_DELTA_WRITE_H
#define ET_DELTA_WRITE_H

#include "delta_file.h"
#include "delta_state.h"
#include "embtier.h"

/* Applies the records of r (rewound, already checked whole) to the store
 * directory dir, commits, and records the new standing in ds and DIR/DELTA.
 * info->rows, tombstones and stale count what was applied. lock_fd: the
 * directory's DIR/LOCK, held by the caller (a serving handle), or -1 (the
 * store takes it). */
int delta_write(struct df_reader *r, const struct df_header *h, const char *dir,
		int lock_fd, struct dstate *ds, struct et_delta_info *info);

/* et_delta_apply, the copy's DIR/LOCK held by the caller (lock_fd) or not
 * (-1). */
int delta_apply_lent(const char *path, const char *dir, int lock_fd,
		     struct et_delta_info *info);

#endif
