/*
 * rowlog.h - the row log of a table file: rows written back by the store
 * are appended to segments of PATH.log in large aligned O_DIRECT writes,
 * an in-memory index maps each logged row to its newest record, a journal
 * (PATH.idx) persists the index changes of each commit, and a cleaner
 * rewrites the live rows of mostly dead segments. docs/FORMAT.md has the
 * byte layout; docs/DECISIONS.md the reasoning.
 *
 * A row in the index is read from the log; any other row from the table's
 * block file (bulk loads) or its initializer. Commits are two-phase: the
 * store calls rowlog_commit_prepare on every table (log synced, journal
 * batch written and synced), writes its commit record naming each
 * journal's tail (rowlog_tail), then calls rowlog_commit_done (segments
 * the new commit no longer needs become free). A failed step leaves
 * nothing armed: the next prepare starts over. At open, exactly the
 * journal bytes the record names are replayed (journal.h), so a crash
 * returns every log to the last commit and damage is refused.
 *
 * Threads: one thread at a time per log, like its et_tfile.
 */
#ifndef ET_ROWLOG_H
#define ET_ROWLOG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "io.h"
#include "journal.h"

struct rowlog;

struct rowlog_stats {
	uint64_t rows_appended; /* records written, cleaning included */
	uint64_t rows_cleaned;	/* live records moved by the cleaner */
	uint64_t segs_cleaned;
	uint64_t bytes_written; /* log and journal */
	uint64_t rows_read, bytes_read;
	uint64_t index_rows;  /* rows in the index */
	uint64_t index_bytes; /* memory of the index and segment table */
	uint64_t live_bytes;  /* live records x record bytes */
	uint64_t log_bytes;   /* segments in use x segment bytes */
	uint64_t bad_records; /* live records the cleaner found damaged and
			       * left in place (their reads fail) */
};

/* Opens the log of the table file at tf_path (PATH.log, PATH.idx) for rows
 * of row_bytes, loading the index as of what x says is committed
 * (journal.h; ET_EJOURNAL, ET_EMISSING or ET_ETRUNC, the detail naming the
 * file, when the files do not hold it). Files that nothing committed
 * needs may be missing; they are created on the first append. rdonly:
 * never writes. */
/* rows: the table's; 0 for a keyed table (any u64 row, rowlog_erase). */
int rowlog_open(const char *tf_path, uint32_t row_bytes, uint64_t rows,
		const struct jr_expect *x, bool rdonly, struct rowlog **out);
void rowlog_close(struct rowlog *l);

/* Forgets the rows of a keyed table's log (opened with rows 0) that it
 * holds, *erased of them: they read as their initializer's again, and the
 * next commit's batch names them with tombstones. -EBADF for a read-only
 * or row-indexed log. */
int rowlog_erase(struct rowlog *l, const uint64_t *rows, size_t n,
		 uint64_t *erased);

/* Stamps: from now on the index keeps a u32 per row, the tick at which
 * its newest record was appended (the cleaner's moves keep it); rows in
 * it now, and those appended until the next call, take tick. Journaled
 * (stamped batches) on a version 2 journal, whose replay gives them back
 * (rows of unstamped batches take tick); in memory only on version 1. */
int rowlog_stamps(struct rowlog *l, uint32_t tick);

/* Scores too (rowlog_stamps, and from now on an f32 per row): the count
 * of the ticks its records were appended in, each tick's weight halving
 * every `half` ticks (0: never; rl_layout.h, score_at). Rows in the index
 * now start at 1 as of their stamp, as do those of unscored batches a
 * replay found; the next commit journals every row's (scored batches).
 * Again with another half: the count goes on, with the new half. */
int rowlog_scores(struct rowlog *l, uint32_t tick, uint32_t half);

/* The rows whose stamp is `after` or more ticks before tick, in a
 * malloc()ed array (NULL if none). */
int rowlog_expired(const struct rowlog *l, uint32_t tick, uint32_t after,
		   uint64_t **out, size_t *n);

/* The rows to forget so that at most keep stay, in a malloc()ed array
 * (NULL if none): with half 0 (or no scores kept), the oldest stamps
 * first, among equal stamps the smallest rows; with half, the lowest
 * scores as seen from tick under that half first, then the oldest stamps,
 * then the smallest rows. */
int rowlog_over(const struct rowlog *l, uint64_t keep, uint32_t tick,
		uint32_t half, uint64_t **out, size_t *n);

/* A number that changes whenever the index's set of rows may have. */
uint64_t rowlog_epoch(const struct rowlog *l);

/* Whether row has a record in the log. */
bool rowlog_has(const struct rowlog *l, uint64_t row);
/* Asks for the index's filter word of row (rowlog_has a few rows later
 * finds it in cache; an absent row is nearly always ruled out there). */
void rowlog_prefetch(const struct rowlog *l, uint64_t row);
/* The second step of it, a few rows nearer: asks for the index's slots
 * of row, unless its filter (asked for by rowlog_prefetch) rules the row
 * out. */
void rowlog_prefetch_probe(const struct rowlog *l, uint64_t row);
uint64_t rowlog_count(const struct rowlog *l);

/* n rows are about to be appended, some perhaps stored already. An index
 * that holds fewer than n / 4 rows (a first write-back of many rows) is
 * sized for count + n at once, instead of growing by a third some dozen
 * times on the way (each growth a copy into new, zeroed memory): at most
 * 1.25 times what the rows it then holds need. A hint: -ENOMEM leaves the
 * index as it was, to grow as it goes. */
int rowlog_expect(struct rowlog *l, uint64_t n);

/* Reads the rows at idx[0..n) of rows (each in the log) into
 * dst + idx[i] * row_bytes; every record is checked. */
int rowlog_read(struct rowlog *l, io_ctx *io, const uint64_t *rows,
		const uint32_t *idx, size_t n, void *dst);

/*
 * rowlog_read in steps, so that the reads of several logs (or of a log and
 * its table's blocks) share one ring: start; then, while r.b < r.n, queue
 * (copies the rows still in the append buffer, queues up to RL_READ_BATCH
 * reads on io and returns how many), wait for them (io_wait), and check
 * (the results, each record's row id and checksum; copies the rows out).
 * Records near each other in the log share one read; a read of a good
 * part of the log's rows is made in log order, so that it is a few large
 * reads rather than one small read a row.
 * One read of a log at a time: the queued reads use the log's staging.
 */
struct rl_read {
	const uint64_t *rows;
	const uint32_t *idx;
	size_t n, b, first; /* idx[first, b): the batch queued */
	void *dst;
	unsigned nq;	     /* reads queued, not yet checked */
	unsigned nrec;	     /* records they hold */
	const uint64_t *ord; /* NULL, or the records in log order:
			      * recno << 32 | index in idx's order */
};

int rowlog_read_start(struct rowlog *l, io_ctx *io, struct rl_read *r,
		      const uint64_t *rows, const uint32_t *idx, size_t n,
		      void *dst);
int rowlog_read_queue(struct rowlog *l, io_ctx *io, struct rl_read *r);
/* Waits until the reads rowlog_read_queue queued have completed. */
int rowlog_read_wait(struct rowlog *l, io_ctx *io, const struct rl_read *r);
int rowlog_read_check(struct rowlog *l, struct rl_read *r);

/* Reads and checks every record the index points to (row id and
 * checksum). *bad counts the bad ones, *first_bad is the row of the first
 * found (UINT64_MAX: none). tick, if given, hears of every batch of n
 * records checked and stops the walk by returning non-zero. Returns 0
 * (bad records included) or the first error that is not a bad record. */
int rowlog_verify(struct rowlog *l, io_ctx *io, uint64_t *bad,
		  uint64_t *first_bad, int (*tick)(void *arg, uint64_t n),
		  void *arg);

/* Appends n rows (row_bytes each from src); a repeated row: the last one
 * wins. Full windows of the append buffer are written as they fill (and
 * may fail here); the rest waits for the next window or rowlog_sync. May
 * run the cleaner. On error some rows may have been appended; appending
 * them again is harmless. */
int rowlog_append(struct rowlog *l, io_ctx *io, const uint64_t *rows, size_t n,
		  const void *src);
/* The same with row i's bytes at ptrs[i]: copied once, into the append
 * buffer. */
int rowlog_append_ptrs(struct rowlog *l, io_ctx *io, const uint64_t *rows,
		       const void *const *ptrs, size_t n);

/* Whether the index changed since the last commit. */
bool rowlog_changed(const struct rowlog *l);

/* Writes what is buffered and syncs the log. */
int rowlog_sync(struct rowlog *l, io_ctx *io);

/* First phase of commit: finishes or drops what an earlier commit left
 * (a snapshot to install, or one prepared for a commit that failed), then
 * syncs the log and writes the journal batch of every index change since
 * the last commit (or a snapshot of the whole index), synced. */
int rowlog_commit_prepare(struct rowlog *l, io_ctx *io, uint64_t commit);
/* The journal as the commit record must name it after the prepare. */
void rowlog_tail(const struct rowlog *l, struct jr_tail *t);
/* Second phase, once the store's record for commit is in place; durable:
 * the directory sync after it succeeded (only then do segments the old
 * commit needed become free). */
void rowlog_commit_done(struct rowlog *l, uint64_t commit, bool durable);

/* Checks the journal of the table file at tf_path against x without
 * opening the table or changing anything; *t: its committed tail. Then
 * rowlog_settle makes the files say t (what lies past it cut). A store's
 * open checks every table of its directory first, and settles them only
 * if all are good. */
int rowlog_recover(const char *tf_path, const struct jr_expect *x,
		   struct jr_tail *t);
int rowlog_settle(const char *tf_path, const struct jr_tail *t);

/* A row's newest record, as a journal entry names it. */
struct rl_chg {
	uint64_t row;
	uint32_t recno; /* RL_CHG_ERASED: its last change erased it */
	uint32_t gen;	/* the generation of the record's segment */
};

#define RL_CHG_ERASED 0xffffffffu

/* What changed in a table after a commit, from its journal. */
struct rl_changes {
	struct rl_chg *e; /* [n] each row once, with its last change */
	size_t n;
	bool complete;	   /* false: a snapshot after the commit forgot which
			    * rows changed (e is then NULL): take the table
			    * whole */
	uint64_t from_sum; /* the journal's chain checksum at the commit */
	uint64_t to_sum;   /* and at the commit x names */
	int ver;	   /* the log's version, its records' geometry */
	uint32_t rec_bytes, seg_bytes;
};

/* The rows named by the committed batches (as x says, read-only, as
 * rowlog_recover) of a commit above since, in *c (rl_changes.c): the
 * batches at or below since skimmed, a row's last entry kept. Memory: 16
 * bytes an entry of the batches taken, and, when there are several, a
 * hash of their rows (15-20 bytes a row) for a moment; then 16 bytes a
 * changed row. rowlog_changes_free frees them. */
int rowlog_changes(const char *tf_path, const struct jr_expect *x,
		   uint64_t since, struct rl_changes *c);
/* Every entry of the index of an open log, as rowlog_changes would list
 * them from nothing. */
int rowlog_entries(const struct rowlog *l, struct rl_changes *c);
void rowlog_changes_free(struct rl_changes *c);

/* Puts e[0..n) in log order (a radix sort of recnos), the erased last;
 * *live: the entries before them. */
int rowlog_changes_order(struct rl_chg *e, size_t n, size_t *live);

/* Reads records of a log straight from PATH.log, without the index, in
 * log order: spans of up to 1 MiB (records closer than 64 KiB share one),
 * O_DIRECT, 4 in flight on an io_uring of its own. */
struct rl_creader;
int rowlog_creader_open(const char *tf_path, const struct rl_changes *c,
			uint32_t row_bytes, struct rl_creader **out);
/* The records of e[0..n) (not erased, in log order): the id of each at
 * dst + i x stride, and the first copy bytes of its row (values, then
 * state, as stored) after it. Each record's row id and checksum are
 * checked (ET_EBLOCKSUM naming the record: damaged, or moved by a commit
 * since c was read). */
int rowlog_creader_read(struct rl_creader *r, const struct rl_chg *e, size_t n,
			void *dst, size_t stride, uint32_t copy);
void rowlog_creader_close(struct rl_creader *r);

/* The rows in the index, ascending, in a malloc()ed array (NULL if none). */
int rowlog_rows_sorted(const struct rowlog *l, uint64_t **out, size_t *n);

void rowlog_get_stats(const struct rowlog *l, struct rowlog_stats *st);

/* Bytes on disk of the log and the journal. */
uint64_t rowlog_disk_bytes(const struct rowlog *l);

/*
 * The setters below are test seams, process-wide like the fault seams:
 * each tunes the logs opened after it (a log keeps what it was opened
 * with), and 0 restores the default.
 */

/* Space amplification allowed before the cleaner runs: segment bytes in
 * use over live record bytes (default 1.3; tests lower the segment size
 * to force cleaning). */
void rowlog_set_tuning(double max_amp, uint32_t segment_bytes);

/* Whether records near each other share reads, and large reads go in log
 * order (default on; fault tests turn it off to count one read a record).
 */
void rowlog_set_read_merge(bool on);

/* The journal length past which a commit writes a snapshot instead of a
 * batch (when the journal is also twice the index); 0: 64 MiB. Tests lower
 * it. */
void rowlog_set_snapshot_min(uint64_t bytes);

/* The append buffer's window for logs opened from now on (tests make it
 * small so that write-backs fill windows; default 1 MiB, at least 16 KiB).
 */
void rowlog_set_window(uint32_t bytes);

#endif
