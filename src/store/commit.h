/*
 * commit.h - a store's commits: the one owner of its directory's commit
 * record (checkpoint.h) and of the lock that makes the store its only
 * writer.
 *
 * Open: the directory is locked (DIR/LOCK, flock, held until close), the
 * record read and checked whole, and every table's journal settled
 * against it: each table the record names must have its files and its
 * committed journal bytes (else ET_EMISSING or ET_EJOURNAL), bytes past
 * them are cut, and a table it does not name may hold no committed batch.
 * A directory with no record gets one (commit 0) at once, so that a
 * missing record is always damage, never a new store.
 *
 * A commit is a small state machine, every step of which can fail and be
 * retried:
 *   1. prepare every table (rowlog_commit_prepare: log synced, journal
 *      batch or snapshot written and synced); a failure here changes
 *      nothing the record names, and the next attempt starts over;
 *   2. write the record, naming every table's journal tail (those open
 *      now, and those of earlier sessions as the old record named them);
 *   3. once it is renamed into place the commit has happened: every table
 *      is told (rowlog_commit_done); if the directory sync then failed,
 *      the call says so, but the store goes on from the new commit.
 */
#ifndef ET_COMMIT_H
#define ET_COMMIT_H

#include <stddef.h>
#include <stdint.h>

#include "checkpoint.h"

typedef struct et_store et_store;

/* A store's commits (commit.c alone writes them). */
struct commit_state {
	uint64_t ckpt;	     /* last commit; 0: none */
	uint64_t ckpt_id;    /* et_checkpoint calls it includes */
	uint32_t flags;	     /* CKPT_* of the record */
	struct ckpt_rec rec; /* the record on disk: its table list names
			      * tables this session has not opened too */
	int lock_fd;	     /* DIR/LOCK, flock()ed for the store's life */
	bool lock_lent;	     /* lock_fd is its lender's (a serving handle
			      * applying a delta): kept open at close */
};

/* Takes DIR/LOCK as a store does (exclusive; ET_ELOCKED naming the
 * process that holds it), for a serving handle, which lends it to the
 * stores of its applies. *fd: -1 on error. */
int dir_lock(const char *dir, int *fd);
/* Releases a lock dir_lock took (-1 is harmless). */
void dir_unlock(int fd);

/* Locks s->dir (unless the lock is lent), reads its record into s->rec and settles every table's
 * journal. */
int commit_open(et_store *s);

/* Commits r (commit, id, flags; the table list is the store's) with len
 * bytes of dense state. */
int commit_run(et_store *s, struct ckpt_rec *r, const void *dense, size_t len);

/* Frees the record and releases the lock. */
void commit_close(et_store *s);

/* Tests: releases the lock of a store left open as a crash would leave
 * it, so that its directory can be opened again in the same process. */
void commit_drop_lock(et_store *s);

#endif
