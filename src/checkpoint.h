/*
 * checkpoint.h - the checkpoint record of a store: which checkpoint the
 * table files' undo logs belong to, and the caller's dense state saved with
 * it. Written atomically (temporary file, fsync, rename, fsync of the
 * directory), so a crash leaves either the old record or the new one.
 */
#ifndef ET_CHECKPOINT_H
#define ET_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

/* Writes DIR/CHECKPOINT for checkpoint id with len bytes of dense state. */
int ckpt_write(const char *dir, uint64_t id, const void *dense, size_t len);

/* Reads DIR/CHECKPOINT: *id (0 and no state if there is none); if dense is
 * non-NULL, *dense receives a malloc()ed copy of the state (the caller
 * frees it) and *len its size. A damaged record is ET_EHDRSUM. */
int ckpt_read(const char *dir, uint64_t *id, void **dense, size_t *len);

#endif
