/*
 * rowlog.c - the row log of a table file (see rowlog.h).
 *
 * PATH.log is an array of segments of seg_bytes. A segment holds rps
 * records of rec_bytes, one after the other from its start:
 *
 *   record: u64 row | u64 XXH3 of the row xor splitmix64(row id) | row
 *           (row_bytes, padded with zeros to a multiple of 8)
 *
 * A record is named by its number, recno = segment * rps + slot. Records
 * are written through an append buffer of abuf_bytes that mirrors the
 * file from an aligned offset in the head segment: when the next record
 * does not fit, the buffer goes out in one O_DIRECT write and what is left
 * of its last partial block moves to its front, so the disk sees large
 * sequential writes whatever the batch size. Reads take the aligned span
 * around a record (or copy it from the buffer, if it is still there).
 *
 * The index is an open-addressing hash from row to recno; the top bit of a
 * recno marks "changed since the last commit", and the first change of a
 * row also lists it in chg, so a commit's journal batch costs what changed.
 * live[s] counts the index entries in segment s; live_c[s] the same at the
 * last commit. A segment is free when neither the index nor the last commit
 * needs it (live and live_c both 0) and it is not the head: only then is it
 * reused or punched, so a crash can always go back to the commit.
 *
 * A record's checksum is bound to its row and, in logs whose journal is of
 * version 2, to its place: its recno and the generation of its segment (a
 * number given to a segment each time it becomes the head). So a record
 * read for another row, a write that landed elsewhere, or one that never
 * landed (the segment's previous record at that place) all fail.
 *
 * PATH.idx, the journal of the index, and how an open proves what is
 * committed in it: journal.h.
 *
 * The cleaner: when the segments in use (less those only the last commit
 * still needs) exceed max_amp times the live record bytes, plus two
 * segments, it moves the live records of the segment with the fewest, a
 * few segments per append call. A live record that fails its check is
 * left where it is (its reads fail, naming it) and its segment is not
 * cleaned again; the other rows go on.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "embtier.h"
#include "endian.h"
#include "error.h"
#include "fileio.h"
#include "hash.h"
#include "io.h"
#include "mem_host.h"
#include "rowlog.h"

#define RL_SEG_DEFAULT (8u << 20)
#define RL_ABUF	       (1u << 20) /* the append buffer's window, default */
#define RL_REC_HDR     16
#define RL_DIRTY       0x80000000u
#define RL_MAXREC      0x7fffffffu
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
#define RL_CLEAN_MAX   4 /* segments cleaned per append call, at most */

enum { W_FREE = 0, W_BUSY = 1, W_FAILED = 2 };

static double rl_max_amp = 1.3;
static uint64_t rl_snap_min = 64u << 20;

void rowlog_set_snapshot_min(uint64_t bytes)
{
	rl_snap_min = bytes ? bytes : 64u << 20;
}

static uint32_t rl_seg_bytes = RL_SEG_DEFAULT;
static uint32_t rl_abuf_bytes = RL_ABUF;

void rowlog_set_tuning(double max_amp, uint32_t segment_bytes)
{
	rl_max_amp = max_amp > 1.0 ? max_amp : 1.3;
	rl_seg_bytes = segment_bytes ? segment_bytes : RL_SEG_DEFAULT;
}

static bool rl_read_merge = true;

void rowlog_set_read_merge(bool on)
{
	rl_read_merge = on;
}

void rowlog_set_window(uint32_t bytes)
{
	rl_abuf_bytes = bytes >= 16384 ? bytes / 4096 * 4096 : RL_ABUF;
}

struct rowlog {
	char *plog, *pidx, *pnew;
	size_t plen;
	int fd;	 /* PATH.log, O_DIRECT; -1 until it exists */
	int jfd; /* PATH.idx; -1 until it exists */
	bool rdonly;
	uint64_t rows;
	uint32_t row_bytes, rec_bytes, seg_bytes, rps;
	uint32_t mem_align, off_align;
	/* the index */
	uint64_t *keys; /* row + 1; 0: empty */
	uint32_t *vals; /* recno | RL_DIRTY */
	uint64_t cap, count;
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
	char *bufs[2];
	int cur;
	uint64_t wb_off;
	uint64_t done_off; /* bytes below it are written, or being written */
	io_ctx *wio;	   /* the log's own ring, for the window in flight */
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
	struct rowlog_stats st;
};

/* ------------------------------------------------------------ the index */

/* Open addressing with linear probing in Robin Hood order: an entry is
 * never further from its home slot than an entry it passed, so a lookup
 * of an absent row stops as soon as it meets an entry nearer its home than
 * the probe has gone. That keeps probes short at a load of 0.9, and the
 * table grows by half when it passes that (any slot count: the home is
 * the hash scaled to the count), so an index is 0.6 to 0.9 full: 12 bytes
 * a slot, 13 to 20 bytes a row. */
#define IDX_MIN	 1024
#define IDX_LOAD 0.9

static uint64_t idx_home(uint64_t cap, uint64_t row)
{
	return (uint64_t)(((unsigned __int128)hash_mix(row) * cap) >> 64);
}

static uint64_t idx_slot0(const struct rowlog *l, uint64_t row)
{
	return idx_home(l->cap, row);
}

/* How far the entry in slot i sits from its home. */
static uint64_t idx_dist(const struct rowlog *l, uint64_t i)
{
	uint64_t h = idx_slot0(l, l->keys[i] - 1);

	return i >= h ? i - h : i + l->cap - h;
}

static int64_t idx_find(const struct rowlog *l, uint64_t row)
{
	if (!l->cap)
		return -1;
	for (uint64_t i = idx_slot0(l, row), d = 0;; d++) {
		if (l->keys[i] == row + 1)
			return (int64_t)i;
		if (!l->keys[i] || idx_dist(l, i) < d)
			return -1;
		if (++i == l->cap)
			i = 0;
	}
}

/* Places key (row + 1, absent) with val, starting at slot i, d slots from
 * its home, where the probe for it stopped; entries nearer their home move
 * along. Returns the slot where key went. There is a free slot. */
static uint64_t idx_put_at(uint64_t *keys, uint32_t *vals, uint64_t cap,
			   uint64_t i, uint64_t d, uint64_t key, uint32_t val)
{
	uint64_t at = UINT64_MAX;

	for (;; d++) {
		uint64_t h, di;

		if (!keys[i]) {
			keys[i] = key;
			vals[i] = val;
			return at == UINT64_MAX ? i : at;
		}
		h = idx_home(cap, keys[i] - 1);
		di = i >= h ? i - h : i + cap - h;
		if (di < d) {
			uint64_t k = keys[i];
			uint32_t v = vals[i];

			keys[i] = key;
			vals[i] = val;
			if (at == UINT64_MAX)
				at = i;
			key = k;
			val = v;
			d = di;
		}
		if (++i == cap)
			i = 0;
	}
}

static uint64_t idx_put(uint64_t *keys, uint32_t *vals, uint64_t cap,
			uint64_t key, uint32_t val)
{
	return idx_put_at(keys, vals, cap, idx_home(cap, key - 1), 0, key, val);
}

static int idx_resize(struct rowlog *l, uint64_t ncap)
{
	uint64_t ocap = l->cap;
	uint64_t *ok = l->keys, *nk;
	uint32_t *ov = l->vals, *nv;

	nk = mem_alloc(ncap * sizeof(*nk), 0);
	nv = mem_alloc(ncap * sizeof(*nv), 0);
	if (!nk || !nv) {
		mem_free(nk, ncap * sizeof(*nk), 0);
		mem_free(nv, ncap * sizeof(*nv), 0);
		return -ENOMEM;
	}
	for (uint64_t i = 0; i < ocap; i++)
		if (ok[i])
			idx_put(nk, nv, ncap, ok[i], ov[i]);
	l->keys = nk;
	l->vals = nv;
	l->cap = ncap;
	mem_free(ok, ocap * sizeof(*ok), 0);
	mem_free(ov, ocap * sizeof(*ov), 0);
	return 0;
}

static int idx_grow(struct rowlog *l)
{
	return idx_resize(l, l->cap ? l->cap + l->cap / 2 : IDX_MIN);
}

/* Room for want rows at a load of 3/4, made at once: a replay that knows
 * how many rows a batch brings sizes the index for them first, so that it
 * never inserts into a table too small for what is coming (a snapshot
 * arrives in hash order, which would pile every row into one cluster of a
 * small table). */
static int idx_reserve(struct rowlog *l, uint64_t want)
{
	uint64_t ncap = want + want / 3 + 1;

	if ((double)want <= IDX_LOAD * (double)l->cap)
		return 0;
	return idx_resize(l, ncap > IDX_MIN ? ncap : IDX_MIN);
}

/* The slot of row, inserted (value 0, not counted live) if new. An insert
 * may move other entries: slots found before it are stale after it. */
static int idx_slot(struct rowlog *l, uint64_t row, uint64_t *slot, bool *isnew)
{
	uint64_t i, d;

	if ((double)(l->count + 1) > IDX_LOAD * (double)l->cap) {
		int64_t k = idx_find(l, row);

		if (k >= 0) {
			*isnew = false;
			*slot = (uint64_t)k;
			return 0;
		}
		k = idx_grow(l);
		if (k)
			return (int)k;
	}
	/* one probe: the row, or where it goes */
	for (i = idx_slot0(l, row), d = 0;; d++) {
		if (l->keys[i] == row + 1) {
			*isnew = false;
			*slot = i;
			return 0;
		}
		if (!l->keys[i] || idx_dist(l, i) < d)
			break;
		if (++i == l->cap)
			i = 0;
	}
	*isnew = true;
	*slot = idx_put_at(l->keys, l->vals, l->cap, i, d, row + 1, 0);
	l->count++;
	return 0;
}

static void idx_clear(struct rowlog *l)
{
	if (l->cap) {
		memset(l->keys, 0, l->cap * sizeof(*l->keys));
		memset(l->vals, 0, l->cap * sizeof(*l->vals));
	}
	l->count = 0;
}

/* ------------------------------------------------------------- segments */

static void segs_free(struct rowlog *l)
{
	mem_free(l->live, l->segcap * sizeof(*l->live), 0);
	mem_free(l->live_c, l->segcap * sizeof(*l->live_c), 0);
	mem_free(l->gen, l->segcap * sizeof(*l->gen), 0);
	mem_free(l->punched, l->segcap, 0);
	mem_free(l->bad, l->segcap, 0);
	l->live = l->live_c = l->gen = NULL;
	l->punched = l->bad = NULL;
}

static int segs_reserve(struct rowlog *l, uint32_t n)
{
	uint32_t cap = l->segcap ? l->segcap : 16;
	uint32_t *nl, *nc, *ng;
	uint8_t *np, *nb;

	if (n <= l->segcap)
		return 0;
	while (cap < n)
		cap *= 2;
	nl = mem_alloc(cap * sizeof(*nl), 0);
	nc = mem_alloc(cap * sizeof(*nc), 0);
	ng = mem_alloc(cap * sizeof(*ng), 0);
	np = mem_alloc(cap, 0);
	nb = mem_alloc(cap, 0);
	if (!nl || !nc || !ng || !np || !nb) {
		mem_free(nl, cap * sizeof(*nl), 0);
		mem_free(nc, cap * sizeof(*nc), 0);
		mem_free(ng, cap * sizeof(*ng), 0);
		mem_free(np, cap, 0);
		mem_free(nb, cap, 0);
		return -ENOMEM;
	}
	if (l->segcap) {
		memcpy(nl, l->live, l->segcap * sizeof(*nl));
		memcpy(nc, l->live_c, l->segcap * sizeof(*nc));
		memcpy(ng, l->gen, l->segcap * sizeof(*ng));
		memcpy(np, l->punched, l->segcap);
		memcpy(nb, l->bad, l->segcap);
	}
	segs_free(l);
	l->live = nl;
	l->live_c = nc;
	l->gen = ng;
	l->punched = np;
	l->bad = nb;
	l->segcap = cap;
	return 0;
}

static bool seg_free(const struct rowlog *l, uint32_t s)
{
	return !l->live[s] && !l->live_c[s] && !(l->head_ok && s == l->hseg);
}

/* The key a record's checksum is bound to: its row and, from version 2,
 * its recno and its segment's generation. */
static uint64_t rec_key(const struct rowlog *l, uint64_t row, uint32_t recno)
{
	if (l->ver < 2)
		return row;
	return row ^ hash_mix((uint64_t)l->gen[recno / l->rps] << 32 | recno);
}

static uint64_t rec_sum(const struct rowlog *l, const void *p, uint64_t row,
			uint32_t recno)
{
	return hash_bytes_key(p, l->row_bytes, rec_key(l, row, recno));
}

static uint64_t rec_off(const struct rowlog *l, uint32_t recno)
{
	return (uint64_t)(recno / l->rps) * l->seg_bytes +
	       (uint64_t)(recno % l->rps) * l->rec_bytes;
}

static uint64_t align_down(uint64_t x, uint32_t a)
{
	return x / a * a;
}

static uint64_t align_up(uint64_t x, uint32_t a)
{
	return (x + a - 1) / a * a;
}

/* ----------------------------------------------------------------- I/O */

static int rl_io(io_ctx *io, int op, int fd, void *buf, uint64_t len,
		 uint64_t off)
{
	struct io_req r = {
	    .op = op, .fd = fd, .buf = buf, .len = (uint32_t)len, .off = off};

	return io_run(io, &r, 1);
}

static int log_file(struct rowlog *l)
{
	int ret;

	if (l->fd >= 0)
		return 0;
	ret = io_open_file(l->plog, l->rdonly ? O_RDONLY : O_RDWR | O_CREAT,
			   0644, &l->fd);
	if (ret)
		return ret;
	ret = io_file_align(l->fd, &l->mem_align, &l->off_align);
	if (!ret && (l->seg_bytes % l->off_align || l->off_align > 65536))
		ret = ET_EHEADER;
	/* a window holds a record and the partial blocks at both ends (the
	 * buffers are allocated after this, at the first append) */
	if (!ret && !l->abuf &&
	    l->abuf_bytes <
		align_up(l->rec_bytes, l->off_align) + 2 * l->off_align)
		l->abuf_bytes =
		    (uint32_t)(align_up(l->rec_bytes, l->off_align) +
			       2 * l->off_align);
	if (!ret)
		l->abuf_bytes = (uint32_t)align_up(l->abuf_bytes, l->off_align);
	if (ret) {
		close(l->fd);
		l->fd = -1;
	}
	return ret;
}

static int staging(struct rowlog *l)
{
	size_t span = align_up(l->rec_bytes, l->off_align) + l->off_align;
	size_t want = RL_READ_BATCH * span;

	if (want < RL_CLEAN_CHUNK + 2 * (size_t)l->off_align + l->rec_bytes)
		want = RL_CLEAN_CHUNK + 2 * (size_t)l->off_align + l->rec_bytes;
	want = align_up(want, l->mem_align);
	if (l->rbuf)
		return 0;
	l->rbuf = mem_alloc(want, l->mem_align);
	l->rreq = mem_alloc(RL_READ_BATCH * sizeof(*l->rreq), 0);
	l->rat = mem_alloc(RL_READ_RECS * sizeof(*l->rat), 0);
	l->rrel = mem_alloc(RL_READ_RECS * sizeof(*l->rrel), 0);
	l->rrec = mem_alloc(RL_READ_RECS * sizeof(*l->rrec), 0);
	if (!l->rbuf || !l->rreq || !l->rat || !l->rrel || !l->rrec) {
		mem_free(l->rbuf, want, l->mem_align);
		mem_free(l->rreq, RL_READ_BATCH * sizeof(*l->rreq), 0);
		mem_free(l->rat, RL_READ_RECS * sizeof(*l->rat), 0);
		mem_free(l->rrel, RL_READ_RECS * sizeof(*l->rrel), 0);
		mem_free(l->rrec, RL_READ_RECS * sizeof(*l->rrec), 0);
		l->rbuf = NULL;
		l->rreq = NULL;
		l->rat = l->rrel = l->rrec = NULL;
		return -ENOMEM;
	}
	l->rbuf_bytes = want;
	return 0;
}

/*
 * Finishes the write of the other buffer: waits for it; if it failed,
 * returns its error once, and writes it again (synchronously) at the next
 * call. Until this returns 0 its bytes are only in memory: nothing reads
 * them from the disk, and no write of the block it shares with the
 * current window is sent before it.
 */
static int other_settle(struct rowlog *l, io_ctx *io)
{
	int ret;

	if (l->wstate == W_BUSY) {
		while (l->wreq.res == INT_MIN) {
			ret = io_wait(l->wio, 1);
			if (ret < 0)
				return ret;
		}
		ret = io_req_result(&l->wreq);
		l->wstate = ret ? W_FAILED : W_FREE;
		if (ret)
			return ret;
		l->st.bytes_written += l->wreq.len;
	}
	if (l->wstate == W_FAILED) {
		ret = rl_io(io, IO_WRITE, l->fd, l->wreq.buf, l->wreq.len,
			    l->wreq.off);
		if (ret)
			return ret;
		l->st.bytes_written += l->wreq.len;
		l->wstate = W_FREE;
	}
	return 0;
}

/* The file range [*a, *b) of the current window that holds what is not
 * yet written below upto: from the block where the last write ended,
 * rounded out to the alignment. */
static void window_span(const struct rowlog *l, uint64_t upto, uint64_t *a,
			uint64_t *b)
{
	*a = align_down(l->done_off, l->off_align);
	if (*a < l->wb_off)
		*a = l->wb_off;
	*b = align_up(upto, l->off_align);
}

/* Sends the current window's bytes below upto (rounded up to the
 * alignment, from where the last write ended) without waiting, and makes
 * the other buffer, which now holds the block at upto, the window. */
static int window_next(struct rowlog *l, io_ctx *io, uint64_t upto)
{
	uint64_t nb = align_down(upto, l->off_align), a, b;
	char *next;
	int ret;

	ret = other_settle(l, io);
	if (ret)
		return ret;
	window_span(l, upto, &a, &b);
	if (b > a) {
		l->wreq = (struct io_req){.op = IO_WRITE,
					  .fd = l->fd,
					  .buf = l->abuf + (a - l->wb_off),
					  .len = (uint32_t)(b - a),
					  .off = a};
		io_queue(l->wio, &l->wreq);
		l->wreq.res = INT_MIN;	  /* until its completion says */
		ret = io_wait(l->wio, 0); /* sends it */
		l->wstate = W_BUSY;
		if (ret < 0)
			return ret; /* settled (written again) next time */
	}
	next = l->bufs[l->cur ^ 1];
	memcpy(next, l->abuf + (nb - l->wb_off), upto - nb);
	memset(next + (upto - nb), 0, l->abuf_bytes - (upto - nb));
	l->cur ^= 1;
	l->abuf = next;
	l->wb_off = nb;
	l->done_off = upto;
	return 0;
}

/* Writes the buffer's bytes up to the file offset upto (rounded up to
 * the alignment), from where the last write ended (rounded down): only
 * what is new, and the partial block it continues. */
static int abuf_write(struct rowlog *l, io_ctx *io, uint64_t upto)
{
	uint64_t a, b;
	int ret;

	ret = other_settle(l, io);
	if (ret)
		return ret;
	window_span(l, upto, &a, &b);
	if (b <= a || upto <= l->done_off)
		return 0;
	ret = rl_io(io, IO_WRITE, l->fd, l->abuf + (a - l->wb_off), b - a, a);
	if (!ret) {
		l->st.bytes_written += b - a;
		l->done_off = upto;
	}
	return ret;
}

/* The byte offset where the head's next record goes. */
static uint64_t head_off(const struct rowlog *l)
{
	return (uint64_t)l->hseg * l->seg_bytes +
	       (uint64_t)l->hslot * l->rec_bytes;
}

/* Allocates the disk behind the buffer's window ahead of its writes, so
 * they land in extents made at once, not in holes: a window at a time,
 * never more than one past what is written. */
static int prealloc(struct rowlog *l, uint64_t off)
{
	uint64_t end = (off / l->seg_bytes + 1) * l->seg_bytes;
	uint64_t len = end - off < l->abuf_bytes ? end - off : l->abuf_bytes;

	if (fallocate(l->fd, 0, (off_t)off, (off_t)len) && errno != EOPNOTSUPP)
		return -errno;
	return 0;
}

/* Moves the head to a free segment (the lowest), or a new one. */
static int new_head(struct rowlog *l)
{
	uint32_t s;
	int ret;

	for (s = 0; s < l->nsegs; s++)
		if (seg_free(l, s))
			break;
	if (s == l->nsegs) {
		if ((uint64_t)(s + 1) * l->rps > RL_MAXREC)
			return -ENOSPC; /* recno space of this log used up */
		ret = segs_reserve(l, s + 1);
		if (ret)
			return ret;
		l->nsegs = s + 1;
		l->live[s] = l->live_c[s] = 0;
		l->punched[s] = 1;
	}
	if (l->gen_next == UINT32_MAX)
		return -ENOSPC; /* generations of this log used up */
	ret = prealloc(l, (uint64_t)s * l->seg_bytes);
	if (ret)
		return ret;
	l->punched[s] = 0;
	l->bad[s] = 0;
	l->gen[s] = l->gen_next++;
	l->hseg = s;
	l->hslot = 0;
	l->head_ok = true;
	l->wb_off = l->done_off = (uint64_t)s * l->seg_bytes;
	memset(l->abuf, 0, l->abuf_bytes);
	return 0;
}

/* The buffer mirrors the head segment from wb_off; at open after a crash
 * (or a sync) its partial last block must come from the disk. */
static int abuf_load(struct rowlog *l, io_ctx *io)
{
	uint64_t off = head_off(l);

	l->wb_off = align_down(off, l->off_align);
	l->done_off = off;
	memset(l->abuf, 0, l->abuf_bytes);
	if (off == l->wb_off)
		return 0;
	return rl_io(io, IO_READ, l->fd, l->abuf, l->off_align, l->wb_off);
}

static int append_one(struct rowlog *l, io_ctx *io, uint64_t row,
		      const void *src)
{
	unsigned char h[RL_REC_HDR];
	uint64_t off, slot;
	uint32_t recno, old;
	bool isnew;
	int ret;

	if (!l->head_ok || l->hslot == l->rps) {
		if (l->head_ok) {
			ret = abuf_write(l, io, head_off(l));
			if (ret)
				return ret;
		}
		ret = new_head(l);
		if (ret)
			return ret;
	}
	off = head_off(l);
	if (off + l->rec_bytes > l->wb_off + l->abuf_bytes) {
		ret = prealloc(l, align_down(off, l->off_align));
		if (!ret)
			ret = window_next(l, io, off);
		if (ret)
			return ret;
	}
	if (l->nchg == l->chgcap) {
		/* room for the row in the list of changes, before the index
		 * holds it: a failure leaves nothing half done */
		size_t cap = l->chgcap ? l->chgcap * 2 : 1024;
		uint64_t *n = mem_alloc(cap * sizeof(*n), 0);

		if (!n)
			return -ENOMEM;
		if (l->chg) {
			memcpy(n, l->chg, l->nchg * sizeof(*n));
			mem_free(l->chg, l->chgcap * sizeof(*n), 0);
		}
		l->chg = n;
		l->chgcap = cap;
	}
	ret = idx_slot(l, row, &slot, &isnew);
	if (ret)
		return ret;
	recno = l->hseg * l->rps + l->hslot;
	put64(h, row);
	put64(h + 8, rec_sum(l, src, row, recno));
	memcpy(l->abuf + (off - l->wb_off), h, RL_REC_HDR);
	memcpy(l->abuf + (off - l->wb_off) + RL_REC_HDR, src, l->row_bytes);
	old = l->vals[slot];
	if (!isnew)
		l->live[(old & RL_MAXREC) / l->rps]--;
	if (!(old & RL_DIRTY))
		l->chg[l->nchg++] = row;
	l->vals[slot] = recno | RL_DIRTY;
	l->live[l->hseg]++;
	l->hslot++;
	l->st.rows_appended++;
	return 0;
}

static void bufs_free(struct rowlog *l)
{
	for (int i = 0; i < 2; i++) {
		if (l->bufs[i])
			mem_free(l->bufs[i], l->abuf_bytes, l->mem_align);
		l->bufs[i] = NULL;
	}
	l->abuf = NULL;
}

/* ------------------------------------------------------------- cleaner */

static bool needs_cleaning(const struct rowlog *l)
{
	uint64_t used = 0;

	for (uint32_t s = 0; s < l->nsegs; s++)
		if ((l->live[s] && !l->bad[s]) || (l->head_ok && s == l->hseg))
			used++;
	return (double)used * l->seg_bytes >
	       rl_max_amp * (double)l->count * l->rec_bytes +
		   2.0 * l->seg_bytes;
}

static int64_t pick_victim(const struct rowlog *l)
{
	int64_t best = -1;

	for (uint32_t s = 0; s < l->nsegs; s++) {
		if (!l->live[s] || l->bad[s] || (l->head_ok && s == l->hseg))
			continue;
		/* fewest live first; at equal, one the commit does not need
		 * (it is free at once) */
		if (best < 0 || l->live[s] < l->live[best] ||
		    (l->live[s] == l->live[best] && !l->live_c[s] &&
		     l->live_c[best]))
			best = s;
	}
	/* Moving a segment that is mostly live gains nothing. */
	if (best >= 0 && (uint64_t)l->live[best] * 10 > (uint64_t)l->rps * 9)
		return -1;
	return best;
}

/*
 * After a pass over segment s, index entries still in it are records the
 * pass could not move: damaged (checksum or row id). They stay where they
 * are, so that reading them fails and names them, rather than reading as
 * an older value; the segment is left alone from now on (a rewrite of
 * those rows frees it). Found by a walk of the index: rare.
 */
static void quarantine(struct rowlog *l, uint32_t s)
{
	for (uint64_t i = 0; i < l->cap; i++)
		if (l->keys[i] && (l->vals[i] & RL_MAXREC) / l->rps == s)
			l->st.bad_records++;
	l->bad[s] = 1;
}

static int clean_segment(struct rowlog *l, io_ctx *io, uint32_t s)
{
	uint32_t per = RL_CLEAN_CHUNK / l->rec_bytes;
	char *tmp;
	int ret = other_settle(l, io);

	if (ret)
		return ret;
	tmp = mem_alloc(l->row_bytes, 0);
	if (!tmp)
		return -ENOMEM;
	for (uint32_t i0 = 0; i0 < l->rps && l->live[s] && !ret; i0 += per) {
		uint32_t i1 = i0 + per < l->rps ? i0 + per : l->rps;
		uint64_t base = (uint64_t)s * l->seg_bytes;
		uint64_t a = align_down(base + (uint64_t)i0 * l->rec_bytes,
					l->off_align);
		uint64_t b =
		    align_up(base + (uint64_t)i1 * l->rec_bytes, l->off_align);

		ret = rl_io(io, IO_READ, l->fd, l->rbuf, b - a, a);
		if (ret)
			break;
		l->st.bytes_read += b - a;
		for (uint32_t i = i0; i < i1 && !ret; i++) {
			const unsigned char *r =
			    (unsigned char *)l->rbuf +
			    (base + (uint64_t)i * l->rec_bytes - a);
			uint64_t row = get64(r);
			uint32_t recno = s * l->rps + i;
			int64_t k;

			if (row >= l->rows)
				continue;
			k = idx_find(l, row);
			if (k < 0 || (l->vals[k] & RL_MAXREC) != recno)
				continue;
			if (rec_sum(l, r + RL_REC_HDR, row, recno) !=
			    get64(r + 8))
				continue; /* damaged: quarantined below */
			memcpy(tmp, r + RL_REC_HDR, l->row_bytes);
			ret = append_one(l, io, row, tmp);
			if (!ret)
				l->st.rows_cleaned++;
		}
	}
	mem_free(tmp, l->row_bytes, 0);
	if (!ret && l->live[s])
		quarantine(l, s);
	if (!ret)
		l->st.segs_cleaned++;
	return ret;
}

static int maybe_clean(struct rowlog *l, io_ctx *io)
{
	for (int n = 0; n < RL_CLEAN_MAX && needs_cleaning(l); n++) {
		int64_t v = pick_victim(l);
		int ret;

		if (v < 0)
			break;
		ret = clean_segment(l, io, (uint32_t)v);
		if (ret)
			return ret;
	}
	return 0;
}

/* ------------------------------------------------------------- the API */

bool rowlog_has(const struct rowlog *l, uint64_t row)
{
	return l && l->count && idx_find(l, row) >= 0;
}

bool rowlog_changed(const struct rowlog *l)
{
	return l && l->nchg;
}

uint64_t rowlog_count(const struct rowlog *l)
{
	return l ? l->count : 0;
}

int rowlog_append(struct rowlog *l, io_ctx *io, const uint64_t *rows, size_t n,
		  const void *src)
{
	int ret;

	if (l->rdonly)
		return -EBADF;
	ret = log_file(l);
	if (!ret)
		ret = staging(l);
	if (!ret && !l->wio)
		ret = io_open(4, &l->wio, NULL);
	if (!ret && !l->abuf) {
		l->bufs[0] = mem_alloc(l->abuf_bytes, l->mem_align);
		l->bufs[1] = mem_alloc(l->abuf_bytes, l->mem_align);
		l->cur = 0;
		l->abuf = l->bufs[0];
		if (!l->bufs[0] || !l->bufs[1])
			ret = -ENOMEM;
		else if (l->head_ok)
			ret = abuf_load(l, io);
		if (ret)
			bufs_free(l); /* the next append loads it again, or
				       * it would write zeros over records */
	}
	for (size_t i = 0; i < n && !ret; i++) {
		/* the index slots of rows a few ahead: random memory */
		if (i + 8 < n && l->cap)
			__builtin_prefetch(&l->keys[idx_slot0(l, rows[i + 8])]);
		ret = append_one(l, io, rows[i],
				 (const char *)src + i * l->row_bytes);
	}
	if (!ret)
		ret = maybe_clean(l, io);
	/* What is buffered goes out with the next full window or sync:
	 * reads find it in the buffer meanwhile, and a failed write keeps it
	 * there for the next try. */
	return ret;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/*
 * A read of many of the log's rows goes in log order: records near each
 * other then share reads, and the disk sees few large reads. Smaller reads
 * (a training step's misses, scattered over a large log) keep the
 * caller's order and skip the sort.
 */
static int read_order(struct rowlog *l, struct rl_read *r)
{
	if (!rl_read_merge || r->n < 2 || r->n * RL_ORDER_FRAC < l->count)
		return 0;
	if (r->n > l->ordcap) {
		size_t cap = r->n + r->n / 2;
		uint64_t *o = mem_alloc(cap * sizeof(*o), 0);

		if (!o)
			return 0; /* the caller's order works too */
		mem_free(l->ord, l->ordcap * sizeof(*l->ord), 0);
		l->ord = o;
		l->ordcap = cap;
	}
	for (size_t i = 0; i < r->n; i++) {
		int64_t e = idx_find(l, r->rows[r->idx[i]]);

		if (e < 0)
			return -EINVAL; /* not ours: a caller bug */
		l->ord[i] =
		    (uint64_t)(l->vals[e] & RL_MAXREC) << 32 | r->idx[i];
	}
	qsort(l->ord, r->n, sizeof(*l->ord), cmp_u64);
	r->ord = l->ord;
	return 0;
}

int rowlog_read_start(struct rowlog *l, io_ctx *io, struct rl_read *r,
		      const uint64_t *rows, const uint32_t *idx, size_t n,
		      void *dst)
{
	int ret = log_file(l);

	*r = (struct rl_read){.rows = rows, .idx = idx, .n = n, .dst = dst};
	if (!ret)
		ret = staging(l);
	if (!ret && l->wstate != W_FREE)
		ret = other_settle(l, io); /* never read what is in flight */
	if (!ret)
		ret = read_order(l, r);
	return ret;
}

int rowlog_read_queue(struct rowlog *l, io_ctx *io, struct rl_read *r)
{
	size_t used = 0; /* bytes of rbuf the reads take */
	unsigned nrec = 0;

	r->first = r->b;
	r->nq = 0;
	/* Records still in the append buffer are copied; the others are
	 * read with the aligned span around them, one read for records
	 * near each other. */
	for (; r->b < r->n; r->b++) {
		struct io_req *q = r->nq ? &l->rreq[r->nq - 1] : NULL;
		uint32_t at, recno;
		uint64_t off, lo, hi, end;

		if (r->ord) {
			at = (uint32_t)r->ord[r->b];
			recno = (uint32_t)(r->ord[r->b] >> 32);
		} else {
			int64_t e;

			at = r->idx[r->b];
			e = idx_find(l, r->rows[at]);
			if (e < 0)
				return -EINVAL; /* not ours: a caller bug */
			recno = l->vals[e] & RL_MAXREC;
		}
		off = rec_off(l, recno);
		if (l->abuf && l->head_ok && recno / l->rps == l->hseg &&
		    off >= l->wb_off) {
			memcpy((char *)r->dst + (size_t)at * l->row_bytes,
			       l->abuf + (off - l->wb_off) + RL_REC_HDR,
			       l->row_bytes);
			continue;
		}
		if (nrec == RL_READ_RECS)
			break;
		lo = align_down(off, l->off_align);
		hi = align_up(off + l->rec_bytes, l->off_align);
		end = q ? q->off + q->len : 0;
		if (rl_read_merge && q && lo >= q->off &&
		    lo <= end + RL_READ_GAP && hi - q->off <= RL_READ_SPAN &&
		    used + (hi > end ? hi - end : 0) <= l->rbuf_bytes) {
			if (hi > end) { /* the read grows to take it */
				used += hi - end;
				q->len = (uint32_t)(hi - q->off);
			}
			l->rrel[nrec] = (uint32_t)((char *)q->buf - l->rbuf +
						   (off - q->off));
		} else {
			if (r->nq == RL_READ_BATCH ||
			    used + (hi - lo) > l->rbuf_bytes)
				break;
			l->rreq[r->nq++] =
			    (struct io_req){.op = IO_READ,
					    .fd = l->fd,
					    .buf = l->rbuf + used,
					    .len = (uint32_t)(hi - lo),
					    .off = lo};
			l->rrel[nrec] = (uint32_t)(used + (off - lo));
			used += hi - lo;
		}
		l->rrec[nrec] = recno;
		l->rat[nrec++] = at;
	}
	r->nrec = nrec;
	for (unsigned q = 0; q < r->nq; q++)
		io_queue(io, &l->rreq[q]);
	return (int)r->nq;
}

int rowlog_read_check(struct rowlog *l, struct rl_read *r)
{
	unsigned nq = r->nq, nrec = r->nrec;
	int ret;

	r->nq = 0;
	r->nrec = 0;
	for (unsigned q = 0; q < nq; q++) {
		ret = io_req_result(&l->rreq[q]);
		if (ret)
			return ret;
		l->st.bytes_read += l->rreq[q].len;
	}
	for (unsigned k = 0; k < nrec; k++) {
		uint64_t row = r->rows[l->rat[k]];
		const unsigned char *rec =
		    (unsigned char *)l->rbuf + l->rrel[k];

		if (get64(rec) != row || rec_sum(l, rec + RL_REC_HDR, row,
						 l->rrec[k]) != get64(rec + 8))
			return err_set(
			    ET_EBLOCKSUM,
			    "%s: the record of row %llu (record "
			    "%u, byte %llu) is damaged",
			    l->plog, (unsigned long long)row, l->rrec[k],
			    (unsigned long long)rec_off(l, l->rrec[k]));
		memcpy((char *)r->dst + (size_t)l->rat[k] * l->row_bytes,
		       rec + RL_REC_HDR, l->row_bytes);
	}
	l->st.rows_read += r->b - r->first;
	return 0;
}

int rowlog_read(struct rowlog *l, io_ctx *io, const uint64_t *rows,
		const uint32_t *idx, size_t n, void *dst)
{
	struct rl_read r;
	int ret = rowlog_read_start(l, io, &r, rows, idx, n, dst);

	while (!ret && r.b < r.n) {
		ret = rowlog_read_queue(l, io, &r);
		if (ret > 0)
			ret = io_wait(io, (unsigned)ret);
		if (ret >= 0)
			ret = rowlog_read_check(l, &r);
	}
	return ret;
}

int rowlog_verify(struct rowlog *l, io_ctx *io, uint64_t *bad,
		  uint64_t *first_bad, int (*tick)(void *arg, uint64_t n),
		  void *arg)
{
	enum { B = 256 };
	uint64_t rows[B];
	uint32_t idx[B];
	char *buf;
	int ret = 0;

	*bad = 0;
	*first_bad = UINT64_MAX;
	if (!l->count)
		return 0;
	buf = mem_alloc((size_t)B * l->row_bytes, 0);
	if (!buf)
		return -ENOMEM;
	for (uint64_t i = 0; i < l->cap && !ret;) {
		uint32_t k = 0;

		for (; i < l->cap && k < B; i++)
			if (l->keys[i]) {
				rows[k] = l->keys[i] - 1;
				idx[k] = k;
				k++;
			}
		if (!k)
			break;
		ret = rowlog_read(l, io, rows, idx, k, buf);
		/* a bad record fails its batch: find it, and any other */
		for (uint32_t j = 0; ret == ET_EBLOCKSUM && j <= k; j++) {
			int r;

			if (j == k) {
				ret = 0;
				break;
			}
			r = rowlog_read(l, io, rows, &idx[j], 1, buf);
			if (r == ET_EBLOCKSUM) {
				(*bad)++;
				if (*first_bad == UINT64_MAX)
					*first_bad = rows[j];
			} else if (r) {
				ret = r;
			}
		}
		if (!ret && tick && tick(arg, k))
			break;
	}
	mem_free(buf, (size_t)B * l->row_bytes, 0);
	return ret;
}

int rowlog_sync(struct rowlog *l, io_ctx *io)
{
	int ret;

	if (l->rdonly || l->fd < 0)
		return 0;
	if (l->abuf && l->head_ok) {
		ret = abuf_write(l, io, head_off(l));
		if (ret)
			return ret;
	}
	return io_fsync(io, l->fd);
}

/* ------------------------------------------------------------- journal */

/* Entries of the batch being written: the rows changed since the last
 * commit, in the order they first changed. */
static void fill_changes(void *arg, unsigned char *p, uint64_t first, size_t n)
{
	struct rowlog *l = arg;

	for (size_t i = 0; i < n; i++, p += JR_ENT) {
		uint64_t row = l->chg[first + i];
		uint32_t rn = l->vals[idx_find(l, row)] & RL_MAXREC;

		put64(p, row);
		put32(p + 8, rn);
		put32(p + 12, l->ver >= 2 ? l->gen[rn / l->rps] : 0);
	}
}

/* Entries of a snapshot: every row of the index, in slot order. */
static void fill_index(void *arg, unsigned char *p, uint64_t first, size_t n)
{
	struct rowlog *l = arg;

	if (!first)
		l->fill_at = 0;
	for (size_t i = 0; i < n; i++, p += JR_ENT) {
		uint32_t rn;

		while (!l->keys[l->fill_at])
			l->fill_at++;
		rn = l->vals[l->fill_at] & RL_MAXREC;
		put64(p, l->keys[l->fill_at] - 1);
		put32(p + 8, rn);
		put32(p + 12, l->ver >= 2 ? l->gen[rn / l->rps] : 0);
		l->fill_at++;
	}
}

/* The journal open for appends, created (and its directory entry made
 * durable) if it is not there yet. */
static int journal_file(struct rowlog *l)
{
	int ret;

	if (l->jfd >= 0)
		return 0;
	l->jfd = open(l->pidx, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (l->jfd < 0)
		return -errno;
	ret = fio_sync_dir(l->pidx, 0);
	if (ret) {
		close(l->jfd);
		l->jfd = -1;
	}
	return ret;
}

/* Renames a committed snapshot over the journal; the journal goes on
 * from it. */
static int snap_install(struct rowlog *l)
{
	int ret = fio_rename(l->pnew, l->pidx);

	if (ret)
		return ret;
	/* Renamed: the journal is the snapshot now, whatever follows. A
	 * failed directory sync is settled by the next open (the record
	 * names the snapshot, found under either name). */
	if (l->jfd >= 0)
		close(l->jfd);
	l->jt = l->snap_t;
	l->snap = SNAP_NONE;
	l->jfd = open(l->pidx, O_RDWR | O_CLOEXEC);
	if (l->jfd < 0)
		return -errno;
	return fio_sync_dir(l->pidx, 0);
}

int rowlog_commit_prepare(struct rowlog *l, io_ctx *io, uint64_t commit)
{
	struct jr_batch b;
	uint64_t ibytes;
	int ret;

	if (l->rdonly)
		return 0;
	/* What an earlier commit left: a snapshot its record names is
	 * installed first (the journal goes on from it); one whose record
	 * was never written is dropped. */
	if (l->snap == SNAP_COMMITTED) {
		ret = snap_install(l);
		if (ret)
			return ret;
	} else if (l->snap == SNAP_PREPARED) {
		l->snap = SNAP_NONE;
		if (unlink(l->pnew) && errno != ENOENT)
			return -errno;
	}
	if (!l->nchg)
		return 0; /* nothing changed: earlier batches say it all */
	ret = rowlog_sync(l, io);
	if (ret)
		return ret;
	ibytes = l->count * JR_ENT + JR_HDR + JR_TRL;
	b = (struct jr_batch){.ver = l->ver,
			      .commit = commit,
			      .hseg = l->head_ok ? l->hseg : JR_NONE,
			      .hslot = l->hslot,
			      .rec_bytes = l->rec_bytes,
			      .seg_bytes = l->seg_bytes,
			      .hgen = l->head_ok ? l->gen[l->hseg] : 0};
	if (l->jt.len > rl_snap_min && l->jt.len > 2 * ibytes) {
		b.n = l->count;
		b.flags = JR_SNAPSHOT;
		ret = jr_write_new(io, l->pnew, &b, fill_index, l, &l->snap_t);
		if (ret)
			return ret;
		l->snap = SNAP_PREPARED;
		l->snap_commit = commit;
		l->st.bytes_written += l->snap_t.len;
		return 0;
	}
	b.n = l->nchg;
	ret = journal_file(l);
	if (!ret) {
		uint64_t was = l->jt.len;

		ret = jr_append(io, l->jfd, &b, fill_changes, l, &l->jt);
		if (!ret)
			l->st.bytes_written += l->jt.len - was;
	}
	return ret;
}

void rowlog_tail(const struct rowlog *l, struct jr_tail *t)
{
	*t = l->snap == SNAP_PREPARED ? l->snap_t : l->jt;
}

void rowlog_commit_done(struct rowlog *l, uint64_t commit, bool durable)
{
	if (l->rdonly)
		return;
	for (size_t i = 0; i < l->nchg; i++) {
		int64_t e = idx_find(l, l->chg[i]);

		if (e >= 0)
			l->vals[e] &= RL_MAXREC;
	}
	l->nchg = 0;
	if (l->snap == SNAP_PREPARED && l->snap_commit == commit)
		l->snap = SNAP_COMMITTED;
	/* The rename waits for a durable record (the old record, should
	 * it come back, names the old journal); a rename that fails is
	 * tried again by the next prepare, and finished by an open. */
	if (l->snap == SNAP_COMMITTED && durable)
		(void)snap_install(l);
	if (!durable)
		return; /* the old commit may still be the one on disk */
	for (uint32_t s = 0; s < l->nsegs; s++) {
		l->live_c[s] = l->live[s];
		if (seg_free(l, s) && !l->punched[s] && l->fd >= 0) {
			/* best effort: space, not data */
			if (!fallocate(l->fd,
				       FALLOC_FL_PUNCH_HOLE |
					   FALLOC_FL_KEEP_SIZE,
				       (off_t)s * l->seg_bytes, l->seg_bytes))
				l->punched[s] = 1;
		}
	}
}

/* ---------------------------------------------------------------- replay */

/* The replay of committed batches into the index (journal.h's sink). */
struct replay {
	struct rowlog *l;
	uint64_t log_size; /* bytes of the log file (0: none) */
	uint64_t log_segs; /* segments it has room for */
	bool first;
};

static int rp_begin(void *arg, const struct jr_batch *b)
{
	struct replay *r = arg;
	struct rowlog *l = r->l;

	if (r->first) {
		l->seg_bytes = b->seg_bytes;
		l->rps = l->seg_bytes / l->rec_bytes;
		l->ver = b->ver;
		r->first = false;
		r->log_segs = (r->log_size + l->seg_bytes - 1) / l->seg_bytes;
	} else if (b->seg_bytes != l->seg_bytes) {
		return err_set(ET_EJOURNAL,
			       "%s: batches disagree on the segment size",
			       l->pidx);
	}
	if (b->flags & JR_SNAPSHOT)
		idx_clear(l);
	/* a batch brings at most b->n new rows */
	return idx_reserve(l, l->count + b->n);
}

static int rp_entries(void *arg, const struct jr_batch *b,
		      const unsigned char *e, size_t n)
{
	struct replay *r = arg;
	struct rowlog *l = r->l;
	int ret;

	(void)b;
	for (size_t i = 0; i < n; i++, e += JR_ENT) {
		uint64_t row = get64(e), slot, seg;
		uint32_t rn = get32(e + 8);
		bool isnew;

		seg = rn / l->rps;
		if (row >= l->rows || rn > RL_MAXREC)
			return err_set(ET_EJOURNAL,
				       "%s: entry for row %llu, record %u, "
				       "out of range",
				       l->pidx, (unsigned long long)row, rn);
		if (seg >= r->log_segs)
			return err_set(
			    r->log_segs ? ET_ETRUNC : ET_EMISSING,
			    "%s is %s; its journal names record %u "
			    "of row %llu, in segment %llu",
			    l->plog, r->log_segs ? "cut short" : "missing", rn,
			    (unsigned long long)row, (unsigned long long)seg);
		ret = segs_reserve(l, (uint32_t)seg + 1);
		if (!ret)
			ret = idx_slot(l, row, &slot, &isnew);
		if (ret)
			return ret;
		l->vals[slot] = rn;
		l->gen[seg] = get32(e + 12);
	}
	return 0;
}

static int rp_end(void *arg, const struct jr_batch *b)
{
	struct replay *r = arg;
	struct rowlog *l = r->l;
	int ret;

	l->head_ok = b->hseg != JR_NONE;
	l->hseg = l->head_ok ? b->hseg : 0;
	l->hslot = b->hslot;
	if (l->head_ok && (b->hslot > l->rps || b->hseg >= r->log_segs))
		return err_set(ET_EJOURNAL,
			       "%s: head segment %u slot %u outside %s",
			       l->pidx, b->hseg, b->hslot, l->plog);
	if (l->head_ok) {
		ret = segs_reserve(l, b->hseg + 1);
		if (ret)
			return ret;
		l->gen[b->hseg] = b->hgen;
		l->gen_next = b->hgen + 1;
	}
	return 0;
}

static int paths(struct rowlog *l, const char *tf_path)
{
	l->plen = strlen(tf_path) + 9;
	l->plog = mem_alloc(l->plen, 0);
	l->pidx = mem_alloc(l->plen, 0);
	l->pnew = mem_alloc(l->plen, 0);
	if (!l->plog || !l->pidx || !l->pnew)
		return -ENOMEM;
	snprintf(l->plog, l->plen, "%s.log", tf_path);
	snprintf(l->pidx, l->plen, "%s.idx", tf_path);
	snprintf(l->pnew, l->plen, "%s.idx.new", tf_path);
	return 0;
}

int rowlog_recover(const char *tf_path, const struct jr_expect *x,
		   struct jr_tail *t)
{
	char p[4096], n[4096];
	int fd = -1, ret;

	if ((size_t)snprintf(p, sizeof(p), "%s.idx", tf_path) >= sizeof(p) ||
	    (size_t)snprintf(n, sizeof(n), "%s.idx.new", tf_path) >= sizeof(n))
		return -ENAMETOOLONG;
	ret = jr_open(p, n, 0, x, false, NULL, &fd, t);
	if (fd >= 0)
		close(fd);
	return ret;
}

int rowlog_open(const char *tf_path, uint32_t row_bytes, uint64_t rows,
		const struct jr_expect *x, bool rdonly, struct rowlog **out)
{
	struct rowlog *l = mem_alloc(sizeof(*l), 0);
	struct replay rp = {.l = l, .first = true};
	struct jr_sink sink = {.begin = rp_begin,
			       .entries = rp_entries,
			       .end = rp_end,
			       .arg = &rp};
	struct stat st;
	int ret;

	if (!l)
		return -ENOMEM;
	l->fd = l->jfd = -1;
	l->rdonly = rdonly;
	l->rows = rows;
	l->row_bytes = row_bytes;
	l->rec_bytes = (uint32_t)align_up(RL_REC_HDR + row_bytes, 8);
	l->seg_bytes = rl_seg_bytes;
	if (l->seg_bytes < l->rec_bytes)
		l->seg_bytes = (uint32_t)align_up(l->rec_bytes, 1u << 20);
	l->rps = l->seg_bytes / l->rec_bytes;
	l->mem_align = l->off_align = 4096;
	l->abuf_bytes = rl_abuf_bytes;
	l->ver = 2;
	l->gen_next = 1;

	ret = paths(l, tf_path);
	if (ret)
		goto err;
	/* The journal may name only records the log has room for: a
	 * damaged or cut log could otherwise ask for any number of
	 * segments. */
	if (!stat(l->plog, &st))
		rp.log_size = (uint64_t)st.st_size;
	else if (errno != ENOENT) {
		ret = -errno;
		goto err;
	}
	ret = jr_open(l->pidx, l->pnew, l->rec_bytes, x, rdonly, &sink, &l->jfd,
		      &l->jt);
	if (ret)
		goto err;
	if (l->jt.ver)
		l->ver = l->jt.ver;
	if (l->count || l->head_ok) {
		uint32_t ns = l->head_ok ? l->hseg + 1 : 0;
		uint64_t need;

		for (uint64_t i = 0; i < l->cap; i++)
			if (l->keys[i] && l->vals[i] / l->rps + 1 > ns)
				ns = l->vals[i] / l->rps + 1;
		if (stat(l->plog, &st)) {
			ret = err_set(ET_EMISSING,
				      "%s missing; its journal names %llu "
				      "rows in it",
				      l->plog, (unsigned long long)l->count);
			goto err;
		}
		/* every committed record, and the head, must be in it */
		need = l->head_ok ? head_off(l) : 0;
		for (uint64_t i = 0; i < l->cap; i++)
			if (l->keys[i] &&
			    rec_off(l, l->vals[i]) + l->rec_bytes > need)
				need = rec_off(l, l->vals[i]) + l->rec_bytes;
		if ((uint64_t)st.st_size < need) {
			ret = err_set(ET_ETRUNC,
				      "%s is %llu bytes; its journal names "
				      "records up to byte %llu",
				      l->plog, (unsigned long long)st.st_size,
				      (unsigned long long)need);
			goto err;
		}
		ret = segs_reserve(l, ns);
		if (ret)
			goto err;
		l->nsegs = ns;
		memset(l->live, 0, ns * sizeof(*l->live));
		for (uint64_t i = 0; i < l->cap; i++)
			if (l->keys[i])
				l->live[l->vals[i] / l->rps]++;
		memcpy(l->live_c, l->live, ns * sizeof(*l->live));
		ret = log_file(l);
		if (ret)
			goto err;
	} else if (!stat(l->plog, &st)) {
		ret = log_file(l); /* an old log with nothing committed */
		if (ret)
			goto err;
	}
	*out = l;
	return 0;
err:
	rowlog_close(l);
	return ret;
}

void rowlog_close(struct rowlog *l)
{
	if (!l)
		return;
	/* a window in flight finishes before its file and buffer go (a
	 * close without a sync keeps nothing it did not commit anyway) */
	io_close(l->wio);
	if (l->fd >= 0)
		close(l->fd);
	if (l->jfd >= 0)
		close(l->jfd);
	mem_free(l->keys, l->cap * sizeof(*l->keys), 0);
	mem_free(l->vals, l->cap * sizeof(*l->vals), 0);
	segs_free(l);
	bufs_free(l);
	mem_free(l->chg, l->chgcap * sizeof(*l->chg), 0);
	if (l->rbuf)
		mem_free(l->rbuf, l->rbuf_bytes, l->mem_align);
	mem_free(l->rreq, RL_READ_BATCH * sizeof(*l->rreq), 0);
	mem_free(l->rat, RL_READ_RECS * sizeof(*l->rat), 0);
	mem_free(l->rrel, RL_READ_RECS * sizeof(*l->rrel), 0);
	mem_free(l->rrec, RL_READ_RECS * sizeof(*l->rrec), 0);
	mem_free(l->ord, l->ordcap * sizeof(*l->ord), 0);
	mem_free(l->plog, l->plen, 0);
	mem_free(l->pidx, l->plen, 0);
	mem_free(l->pnew, l->plen, 0);
	mem_free(l, sizeof(*l), 0);
}

int rowlog_rows_sorted(const struct rowlog *l, uint64_t **out, size_t *n)
{
	uint64_t *rows;
	size_t k = 0;

	*out = NULL;
	*n = 0;
	if (!l || !l->count)
		return 0;
	rows = malloc(l->count * sizeof(*rows));
	if (!rows)
		return -ENOMEM;
	for (uint64_t i = 0; i < l->cap; i++)
		if (l->keys[i])
			rows[k++] = l->keys[i] - 1;
	qsort(rows, k, sizeof(*rows), cmp_u64);
	*out = rows;
	*n = k;
	return 0;
}

void rowlog_get_stats(const struct rowlog *l, struct rowlog_stats *st)
{
	uint64_t used = 0;

	memset(st, 0, sizeof(*st));
	if (!l)
		return;
	*st = l->st;
	for (uint32_t s = 0; s < l->nsegs; s++)
		if (!seg_free(l, s))
			used++;
	st->index_rows = l->count;
	st->index_bytes = l->cap * (sizeof(*l->keys) + sizeof(*l->vals)) +
			  (uint64_t)l->segcap * 9 + l->chgcap * sizeof(*l->chg);
	st->live_bytes = l->count * l->rec_bytes;
	st->log_bytes = used * l->seg_bytes;
}

uint64_t rowlog_disk_bytes(const struct rowlog *l)
{
	struct stat st;
	uint64_t n = 0;

	if (!l)
		return 0;
	if (l->fd >= 0 && !fstat(l->fd, &st))
		n += (uint64_t)st.st_blocks * 512;
	if (!stat(l->pidx, &st))
		n += (uint64_t)st.st_blocks * 512;
	return n;
}
