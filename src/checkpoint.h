/*
 * checkpoint.h - the commit record of a store: the commit the table files
 * are at (their row log journals are replayed up to it), the last
 * et_checkpoint and the
 * caller's dense state saved with it, and whether the tables moved on since
 * that checkpoint (a clean close committed writes made after it). Written
 * atomically (temporary file, fsync, rename, fsync of the directory), so a
 * crash leaves either the old record or the new one.
 */
#ifndef ET_CHECKPOINT_H
#define ET_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#define CKPT_MOVED 0x1u /* tables committed past the dense state */

struct ckpt_rec {
	uint64_t commit; /* commits so far: checkpoints and clean closes */
	uint64_t id;	 /* et_checkpoint calls so far (0: none) */
	uint32_t flags;	 /* CKPT_* */
};

/* Writes DIR/CHECKPOINT: r with len bytes of dense state. */
int ckpt_write(const char *dir, const struct ckpt_rec *r, const void *dense,
	       size_t len);

/* Reads DIR/CHECKPOINT into *r (all zero and no state if there is none); if
 * dense is non-NULL, *dense receives a malloc()ed copy of the state (the
 * caller frees it) and *len its size. A damaged record is ET_EHDRSUM. */
int ckpt_read(const char *dir, struct ckpt_rec *r, void **dense, size_t *len);

#endif
