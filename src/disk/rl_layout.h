/*
 * rl_layout.h - the row log's layout and the state its files share:
 *
 *   rowlog.c    open, close, commit (journal batches, snapshots), replay
 *   rl_append.c segments, the append buffer, appends and syncs
 *   rl_read.c   reads and verify
 *   rl_clean.c  the cleaner
 *   rl_index.c  the index (row -> record)
 *   journal.c   the journal's format and how an open proves it
 *
 * PATH.log is an array of segments of seg_bytes. A segment holds rps
 * records of rec_bytes, one after the other from its start:
 *
 *   record: u64 row | u64 checksum | row (row_bytes, zero-padded to a
 *           multiple of 8)
 *   checksum = XXH3-64 of the row's bytes xor splitmix64(key), key = row
 *           id (version 1) or row id xor splitmix64(generation << 32 |
 *           recno) (version 2)
 *
 * A record is named by its number, recno = segment * rps + slot. Records
 * are written through an append buffer of abuf_bytes that mirrors the
 * file from an aligned offset in the head segment: when the next record
 * does not fit, the buffer goes out in one O_DIRECT write and what is left
 * of its last partial block moves to its front, so the disk sees large
 * sequential writes whatever the batch size. Reads take the aligned span
 * around a record (or copy it from the buffer, if it is still there).
 *
 * A keyed table's log (rows 0: any u64 row) can also erase rows: the
 * index forgets them, and the commit's batch names each with recno
 * RL_TOMB (a tombstone), which a replay applies by forgetting it too.
 *
 * The index maps a row to its newest recno; the top bit of a recno marks
 * "changed since the last commit", and the first change of a row also
 * lists it in chg, so a commit's journal batch costs what changed. live[s]
 * counts the index entries in segment s; live_c[s] the same at the last
 * commit. A segment is free when neither the index nor the last commit
 * needs it (live and live_c both 0) and it is not the head: only then is
 * it reused or punched, so a crash can always go back to the commit.
 *
 * A record's checksum is bound to its row and, in logs whose journal is of
 * version 2, to its place: its recno and the generation of its segment (a
 * number given to a segment each time it becomes the head). So a record
 * read for another row, a write that landed elsewhere, or one that never
 * landed (the segment's previous record at that place) all fail.
 */
#ifndef ET_RL_LAYOUT_H
#define ET_RL_LAYOUT_H

#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "dtype.h"
#include "hash.h"
#include "io.h"
#include "journal.h"
#include "rl_index.h"
#include "rowlog.h"

#define RL_SEG_DEFAULT (8u << 20)
#define RL_ABUF	       (1u << 20) /* the append buffer's window, default */
#define RL_REC_HDR     16
#define RL_AHEAD       8     /* index lookups of a loop prefetched ahead */
#define RL_EXPECT_MIN  65536 /* rowlog_expect: fewer rows, no reserve */
#define RL_DIRTY       0x80000000u
#define RL_MAXREC      0x7fffffffu
#define RL_TOMB	       0xffffffffu /* a journal entry's recno: erased */
#define RL_READ_BATCH  256
/* Reads of log records: at most RL_READ_RECS records a batch; records
 * within RL_READ_GAP of the read before share it, up to RL_READ_SPAN a
 * read; a read of 1/RL_ORDER_FRAC of the log's rows or more goes in log
 * order. */
#define RL_READ_RECS   4096
#define RL_READ_GAP    (16u << 10)
#define RL_READ_SPAN   (128u << 10)
#define RL_ORDER_FRAC  16
#define RL_CLEAN_CHUNK (1u << 20)
#define RL_CLEAN_MAX   4     /* segments cleaned per append call, at most */
#define RL_CHG_KEEP    65536 /* rows of the list of changes kept past a commit */

enum { W_FREE = 0, W_BUSY = 1, W_FAILED = 2 };

struct rowlog {
	char *plog, *pidx, *pnew;
	size_t plen;
	int fd;	 /* PATH.log, O_DIRECT; -1 until it exists */
	int jfd; /* PATH.idx; -1 until it exists */
	bool rdonly;
	uint64_t rows; /* 0: keyed, any u64 row */
	uint32_t row_bytes, rec_bytes, seg_bytes, rps;
	uint32_t mem_align, off_align;
	struct rl_index ix; /* row -> recno | RL_DIRTY */
	/* segments */
	uint32_t *live, *live_c;
	uint32_t *gen; /* each segment's generation (version 2) */
	uint8_t *punched;
	uint8_t *bad; /* holds a damaged live record: not cleaned */
	uint32_t gen_next;
	int ver; /* of the journal and its records: 1 or 2 */
	uint32_t nsegs, segcap;
	bool head_ok;
	uint32_t hseg, hslot;
	/* the append buffer: file bytes [wb_off, wb_off + abuf_bytes); it is
	 * one of two, the other holding the window before while its write
	 * is in flight on wio (or failed, to be written again) */
	char *abuf;
	uint32_t abuf_bytes;
	/* tuning, as the setters of rowlog.h said when the log was opened */
	double max_amp;
	bool read_merge;
	uint64_t snap_min;
	char *bufs[2];
	int cur;
	uint64_t wb_off;
	uint64_t done_off;  /* bytes below it are written, or being written */
	uint64_t alloc_end; /* the head segment is allocated below it (0:
			     * not known, after an open) */
	io_ctx *wio;	    /* the log's own ring, for the window in flight */
	struct io_req wreq;
	int wstate; /* W_* of the other buffer */
	/* rows changed since the last commit */
	uint64_t *chg;
	size_t nchg, chgcap;
	struct jr_tail jt; /* the journal's committed tail */
	/* a snapshot in PATH.idx.new: written for snap_commit and awaiting
	 * its record, or named by a record and awaiting its rename */
	enum { SNAP_NONE, SNAP_PREPARED, SNAP_COMMITTED } snap;
	uint64_t snap_commit;
	struct jr_tail snap_t;
	uint64_t fill_at; /* a batch being written: next index slot */
	/* read and clean staging */
	char *rbuf;
	size_t rbuf_bytes;
	struct io_req *rreq;
	uint32_t *rat;	/* [RL_READ_RECS] each record read: index in dst */
	uint32_t *rrel; /* and its offset in rbuf */
	uint32_t *rrec; /* and its recno */
	uint64_t *ord;	/* a read's records in log order */
	size_t ordcap;
	uint64_t epoch; /* rowlog_epoch */
	uint32_t tick;	/* the stamp of rows appended now: the commit to
			 * come */
	bool in_clean;	/* the cleaner's appends keep their rows' stamps */
	/* Stamps (ix.aux, kept once a keyed table has expiry, or once the
	 * journal has stamped batches) go into the journal, each entry's
	 * beside it (stamped batches, journal.h). */
	bool stamp_unknown; /* some stamps are 0: rows a replay found in
			     * unstamped batches, stamped at rowlog_stamps */
	bool stamp_snap;    /* stamps began in memory: the next commit
			     * journals every row's (a snapshot) */
	/* Scores (the second aux word, kept once a keyed table's bound
	 * keeps ids by count: rowlog_scores), journaled as stamps are
	 * (scored batches). */
	uint32_t half;	    /* ticks a score's weight halves in (0: never) */
	bool score_unknown; /* some scores are 0: rows a replay found in
			     * unscored batches, scored at rowlog_scores */
	struct rowlog_stats st;
};

/* Scores: an f32 per row, the decayed count of the ticks (commits) its
 * records were appended in, as of the tick of its stamp. A tick's weight
 * halves at each epoch (tick / half) boundary passed: v seen from tick
 * `to` is v * 2^(epoch(from) - epoch(to)), exact in binary floating
 * point, so every machine orders rows alike. */
static inline float score_at(float v, uint32_t from, uint32_t to, uint32_t half)
{
	int64_t d = half ? (int64_t)(to / half) - (int64_t)(from / half) : 0;

	return d <= 0 ? v : d > 300 ? 0.0f : ldexpf(v, -(int)d);
}

static inline bool seg_free(const struct rowlog *l, uint32_t s)
{
	return !l->live[s] && !l->live_c[s] && !(l->head_ok && s == l->hseg);
}

/* The key a record's checksum is bound to: its row and, from version 2,
 * its recno and its segment's generation. */
static inline uint64_t rec_key(const struct rowlog *l, uint64_t row,
			       uint32_t recno)
{
	if (l->ver < 2)
		return row;
	return row ^ hash_mix((uint64_t)l->gen[recno / l->rps] << 32 | recno);
}

static inline uint64_t rec_sum(const struct rowlog *l, const void *p,
			       uint64_t row, uint32_t recno)
{
	return hash_bytes_key(p, l->row_bytes, rec_key(l, row, recno));
}

static inline uint64_t rec_off(const struct rowlog *l, uint32_t recno)
{
	return (uint64_t)(recno / l->rps) * l->seg_bytes +
	       (uint64_t)(recno % l->rps) * l->rec_bytes;
}

static inline uint64_t align_down(uint64_t x, uint32_t a)
{
	return x / a * a;
}

static inline uint64_t align_up(uint64_t x, uint32_t a)
{
	return (x + a - 1) / a * a;
}

/* The byte offset where the head's next record goes. */
static inline uint64_t head_off(const struct rowlog *l)
{
	return (uint64_t)l->hseg * l->seg_bytes +
	       (uint64_t)l->hslot * l->rec_bytes;
}

/* rl_append.c */
void segs_free(struct rowlog *l);
int segs_reserve(struct rowlog *l, uint32_t n);
int rl_io(io_ctx *io, int op, int fd, void *buf, uint64_t len, uint64_t off);
int log_file(struct rowlog *l);
int staging(struct rowlog *l);
int other_settle(struct rowlog *l, io_ctx *io);
int abuf_write(struct rowlog *l, io_ctx *io, uint64_t upto);
int append_one(struct rowlog *l, io_ctx *io, uint64_t row, const void *src);
/* Room for k more rows in l->chg. */
int chg_reserve(struct rowlog *l, size_t k);
/* rowlog_append less the cleaner (which appends too: it calls down here,
 * and rowlog.c calls both): row i's bytes at ptrs[i], or, with ptrs NULL,
 * at src + i * row_bytes */
int append_rows(struct rowlog *l, io_ctx *io, const uint64_t *rows, size_t n,
		const void *src, const void *const *ptrs);
void bufs_free(struct rowlog *l);

/* rl_read.c */
int cmp_u64(const void *a, const void *b);

/* rl_clean.c */
int maybe_clean(struct rowlog *l, io_ctx *io);

#endif
