/*
 * rl_append.c - the row log's write path: segments (which are free, the
 * head, each one's generation), the append buffer that turns records into
 * large aligned O_DIRECT writes, one window in flight while the next fills,
 * and the sync a commit starts with. See rl_layout.h for the layout.
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
#include "le.h"
#include "error.h"
#include "fileio.h"
#include "hash.h"
#include "io.h"
#include "mem_host.h"
#include "rl_layout.h"

void segs_free(struct rowlog *l)
{
	mem_free(l->live, l->segcap * sizeof(*l->live), 0);
	mem_free(l->live_c, l->segcap * sizeof(*l->live_c), 0);
	mem_free(l->gen, l->segcap * sizeof(*l->gen), 0);
	mem_free(l->punched, l->segcap, 0);
	mem_free(l->bad, l->segcap, 0);
	l->live = l->live_c = l->gen = NULL;
	l->punched = l->bad = NULL;
}

int segs_reserve(struct rowlog *l, uint32_t n)
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

int rl_io(io_ctx *io, int op, int fd, void *buf, uint64_t len, uint64_t off)
{
	struct io_req r = {
	    .op = op, .fd = fd, .buf = buf, .len = (uint32_t)len, .off = off};

	return io_run(io, &r, 1);
}

int log_file(struct rowlog *l)
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

int staging(struct rowlog *l)
{
	size_t span = align_up(l->rec_bytes, l->off_align) + l->off_align;
	size_t want = RL_READ_BATCH * span;

	if (want < RL_CLEAN_CHUNK + 2 * (size_t)l->off_align + l->rec_bytes)
		want = RL_CLEAN_CHUNK + 2 * (size_t)l->off_align + l->rec_bytes;
	want = align_up(want, l->mem_align);
	if (l->rbuf)
		return 0;
	l->rbuf = mem_alloc_io(want, l->mem_align);
	l->rreq = mem_alloc(RL_READ_BATCH * sizeof(*l->rreq), 0);
	l->rat = mem_alloc(RL_READ_RECS * sizeof(*l->rat), 0);
	l->rrel = mem_alloc(RL_READ_RECS * sizeof(*l->rrel), 0);
	l->rrec = mem_alloc(RL_READ_RECS * sizeof(*l->rrec), 0);
	if (!l->rbuf || !l->rreq || !l->rat || !l->rrel || !l->rrec) {
		mem_free_io(l->rbuf, want, l->mem_align);
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
int other_settle(struct rowlog *l, io_ctx *io)
{
	int ret;

	if (l->wstate == W_BUSY) {
		ret = io_wait_reqs(l->wio, &l->wreq, 1);
		if (ret < 0)
			return ret;
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

/* Zeros the window from upto (the head: records lie below it) to b, the
 * end of the block a write sends: the only bytes written that no record
 * holds. A buffer is not cleared when it becomes the window, so a write
 * never sends what an earlier window left there. */
static void window_pad(struct rowlog *l, uint64_t upto, uint64_t b)
{
	if (b > upto)
		memset(l->abuf + (upto - l->wb_off), 0, b - upto);
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
		window_pad(l, upto, b);
		l->wreq = (struct io_req){.op = IO_WRITE,
					  .fd = l->fd,
					  .buf = l->abuf + (a - l->wb_off),
					  .len = (uint32_t)(b - a),
					  .off = a};
		io_queue(l->wio, &l->wreq); /* IO_PENDING until it completes */
		ret = io_wait(l->wio, 0);   /* sends it */
		l->wstate = W_BUSY;
		if (ret < 0)
			return ret; /* settled (written again) next time */
	}
	next = l->bufs[l->cur ^ 1];
	memcpy(next, l->abuf + (nb - l->wb_off), upto - nb);
	l->cur ^= 1;
	l->abuf = next;
	l->wb_off = nb;
	l->done_off = upto;
	return 0;
}

/* Writes the buffer's bytes up to the file offset upto (rounded up to
 * the alignment), from where the last write ended (rounded down): only
 * what is new, and the partial block it continues. */
int abuf_write(struct rowlog *l, io_ctx *io, uint64_t upto)
{
	uint64_t a, b;
	int ret;

	ret = other_settle(l, io);
	if (ret)
		return ret;
	window_span(l, upto, &a, &b);
	if (b <= a || upto <= l->done_off)
		return 0;
	window_pad(l, upto, b);
	ret = rl_io(io, IO_WRITE, l->fd, l->abuf + (a - l->wb_off), b - a, a);
	if (!ret) {
		l->st.bytes_written += b - a;
		l->done_off = upto;
	}
	return ret;
}

/* Allocates the disk behind the buffer's window ahead of its writes, so
 * they land in extents made at once, not in holes. A new head segment
 * gets its first window; once a window of it is full (a log taking many
 * rows), the rest of it at once (rest): two calls a segment, not one a
 * window, each costing about as much system time as the other (0.1 ms
 * here). So a log holds at most its head segment allocated past what is
 * written, and one window if it writes little. */
static int prealloc(struct rowlog *l, uint64_t off, bool rest)
{
	uint64_t end = (off / l->seg_bytes + 1) * l->seg_bytes;
	uint64_t len = end - off;

	if (!rest && len > l->abuf_bytes)
		len = l->abuf_bytes;
	if (off + len <= l->alloc_end) /* the head segment's, done already */
		return 0;
	if (fallocate(l->fd, 0, (off_t)off, (off_t)len) && errno != EOPNOTSUPP)
		return -errno;
	l->alloc_end = off + len;
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
	l->alloc_end = 0;
	ret = prealloc(l, (uint64_t)s * l->seg_bytes, false);
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

int chg_reserve(struct rowlog *l, size_t k)
{
	if (l->nchg + k > l->chgcap) {
		size_t cap = l->chgcap ? l->chgcap * 2 : 1024;
		uint64_t *n;

		while (cap < l->nchg + k)
			cap *= 2;
		n = mem_alloc(cap * sizeof(*n), 0);

		if (!n)
			return -ENOMEM;
		if (l->chg) {
			memcpy(n, l->chg, l->nchg * sizeof(*n));
			mem_free(l->chg, l->chgcap * sizeof(*n), 0);
		}
		l->chg = n;
		l->chgcap = cap;
	}
	return 0;
}

int append_one(struct rowlog *l, io_ctx *io, uint64_t row, const void *src)
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
		ret = prealloc(l, align_down(off, l->off_align), true);
		if (!ret)
			ret = window_next(l, io, off);
		if (ret)
			return ret;
	}
	/* room for the row in the list of changes, before the index holds
	 * it: a failure leaves nothing half done */
	ret = chg_reserve(l, 1);
	if (ret)
		return ret;
	ret = rli_slot(&l->ix, row, &slot, &isnew);
	if (ret)
		return ret;
	recno = l->hseg * l->rps + l->hslot;
	put64(h, row);
	put64(h + 8, rec_sum(l, src, row, recno));
	memcpy(l->abuf + (off - l->wb_off), h, RL_REC_HDR);
	memcpy(l->abuf + (off - l->wb_off) + RL_REC_HDR, src, l->row_bytes);
	old = l->ix.vals[slot];
	if (!isnew)
		l->live[(old & RL_MAXREC) / l->rps]--;
	else
		l->epoch++;
	if (!(old & RL_DIRTY))
		l->chg[l->nchg++] = row;
	l->ix.vals[slot] = recno | RL_DIRTY;
	if (l->ix.aux && (isnew || !l->in_clean)) {
		uint32_t *a = rli_aux(&l->ix, slot);

		/* a score counts the ticks the row was appended in */
		if (l->ix.aw >= 2 && (isnew || a[0] != l->tick))
			a[1] = f32_bits((isnew ? 0.0f
					       : score_at(bits_f32(a[1]), a[0],
							  l->tick, l->half)) +
					1.0f);
		a[0] = l->tick;
	}
	l->live[l->hseg]++;
	l->hslot++;
	l->st.rows_appended++;
	return 0;
}

void bufs_free(struct rowlog *l)
{
	/* the two windows are halves of one mapping (append_rows) */
	mem_free_io(l->bufs[0], 2 * (size_t)l->abuf_bytes, l->mem_align);
	l->bufs[0] = l->bufs[1] = NULL;
	l->abuf = NULL;
}

int append_rows(struct rowlog *l, io_ctx *io, const uint64_t *rows, size_t n,
		const void *src, const void *const *ptrs)
{
	int ret = log_file(l);

	if (!ret)
		ret = staging(l);
	if (!ret && !l->wio)
		ret = io_open(4, &l->wio, NULL);
	if (!ret && !l->abuf) {
		/* both windows in one staging of 2 MiB at the default, on
		 * one huge page */
		l->bufs[0] =
		    mem_alloc_io(2 * (size_t)l->abuf_bytes, l->mem_align);
		l->bufs[1] =
		    l->bufs[0] ? (char *)l->bufs[0] + l->abuf_bytes : NULL;
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
		/* the index slots of rows a few ahead, and the filter's
		 * words (a new row sets bits in one): random memory */
		if (i + 8 < n)
			rli_prefetch_ins(&l->ix, rows[i + 8]);
		/* and the rows themselves (cache slots, all over the tier):
		 * the record's checksum is the first to read them */
		if (i + 4 < n) {
			const char *p =
			    ptrs ? ptrs[i + 4]
				 : (const char *)src + (i + 4) * l->row_bytes;

			for (uint32_t b = 0; b < l->row_bytes; b += 64)
				__builtin_prefetch(p + b);
		}
		ret = append_one(l, io, rows[i],
				 ptrs ? ptrs[i]
				      : (const char *)src + i * l->row_bytes);
	}
	/* What is buffered goes out with the next full window or sync:
	 * reads find it in the buffer meanwhile, and a failed write keeps it
	 * there for the next try. */
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
