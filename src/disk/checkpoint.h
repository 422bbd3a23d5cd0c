/*
 * checkpoint.h - the commit record of a store, DIR/CHECKPOINT: the one
 * place that says what is committed.
 *
 * It names the commit the tables are at and, for every table of the
 * directory, what its journal must hold for that commit: the journal's
 * committed length and the checksum of its last batch (journal.h). An
 * open replays exactly those bytes, refuses the table if they are not all
 * there and intact, and cuts only what lies past them. It also holds the
 * last et_checkpoint's id and the caller's dense state.
 *
 * Written atomically: a temporary file, fsync, rename, fsync of the
 * directory. A crash leaves the old record or the new one.
 *
 * Version 3 ("ETCKPT03"):
 *
 *   0   8  "ETCKPT03"
 *   8   8  commit (1, 2, ...)
 *  16   8  checkpoint id: et_checkpoint calls so far
 *  24   4  flags: bit 0, the tables moved on since the checkpoint
 *  28   4  tables named below
 *  32   8  dense state length
 *  40   8  XXH3-64 of the dense state
 *  48   8  XXH3-64 of bytes [0, 48) and the table list
 *  56      table list, 96 bytes a table: name (64, zero-padded), u64
 *          journal bytes, u64 XXH3 of the journal's last batch (0: none),
 *          u64 the header checksum of the keyed table's saved admission
 *          filter (0: none), u64 which file: its commit << 1 | its slot
 *          (NAME.et.adm0 or .adm1; 0: none). Records written before
 *          these two were used hold zeros there.
 *  56+96n  dense state
 *
 * Versions 1 and 2 (no table list) are still read; the store's next
 * commit writes version 3.
 */
#ifndef ET_CHECKPOINT_H
#define ET_CHECKPOINT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define CKPT_MOVED    0x1u /* tables committed past the dense state */
#define CKPT_NAME_MAX 64

/* What one table's journal must hold at the record's commit. */
struct ckpt_table {
	char name[CKPT_NAME_MAX + 1];
	uint64_t jlen; /* committed bytes of NAME.et.idx */
	uint64_t jsum; /* checksum of its last batch (0 when jlen is 0) */
	uint64_t asum; /* header checksum of its admission filter (0: none) */
	uint64_t aref; /* the filter's commit << 1 | slot (0: none) */
};

struct ckpt_rec {
	uint32_t version; /* 0: no record; 1, 2: no table list; 3 */
	uint64_t commit;  /* commits so far: checkpoints and clean closes */
	uint64_t id;	  /* et_checkpoint calls so far (0: none) */
	uint32_t flags;	  /* CKPT_* */
	uint32_t ntables;
	struct ckpt_table *tables; /* malloc()ed; ckpt_rec_free() */
	uint64_t dense_len;
};

/* Writes DIR/CHECKPOINT (version 3): r with len bytes of dense state.
 * *placed says whether the new record was renamed into place (it may then
 * be what a crash returns to even if the call failed at the directory
 * sync). */
int ckpt_write(const char *dir, const struct ckpt_rec *r, const void *dense,
	       size_t len, bool *placed);

/* Reads DIR/CHECKPOINT into *r (r->version 0 and no tables if there is
 * none). If dense is non-NULL, *dense receives a malloc()ed copy of the
 * state (the caller frees it) and *len its size; the state's checksum is
 * checked when dense is non-NULL or check_dense is true. A damaged record
 * is ET_ERECORD with the detail naming the file and what is wrong. */
int ckpt_read(const char *dir, struct ckpt_rec *r, bool check_dense,
	      void **dense, size_t *len);

void ckpt_rec_free(struct ckpt_rec *r);

/* The entry of table name in r, or NULL. */
const struct ckpt_table *ckpt_find(const struct ckpt_rec *r, const char *name);

#endif
