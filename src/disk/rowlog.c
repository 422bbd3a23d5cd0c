/*
 * rowlog.c - the row log of a table file (see rowlog.h): open (the index
 * replayed from the journal, as of what the commit record names), close,
 * and the two phases of a commit. The record layout and the other pieces:
 * rl_layout.h; the journal: journal.h.
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

/* The tuning of logs opened from now on (rowlog.h): a test seam. Each
 * log copies it at open, so none changes under a log. */
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

/* ------------------------------------------------------------- the API */

bool rowlog_has(const struct rowlog *l, uint64_t row)
{
	return l && l->ix.count && rli_find(&l->ix, row) >= 0;
}

void rowlog_prefetch(const struct rowlog *l, uint64_t row)
{
	if (l && l->ix.count)
		rli_prefetch(&l->ix, row);
}

void rowlog_prefetch_probe(const struct rowlog *l, uint64_t row)
{
	if (l && l->ix.count)
		rli_prefetch_probe(&l->ix, row);
}

bool rowlog_changed(const struct rowlog *l)
{
	return l && l->nchg;
}

int rowlog_append(struct rowlog *l, io_ctx *io, const uint64_t *rows, size_t n,
		  const void *src)
{
	int ret;

	if (l->rdonly)
		return -EBADF;
	ret = append_rows(l, io, rows, n, src, NULL);
	return ret ? ret : maybe_clean(l, io);
}

int rowlog_append_ptrs(struct rowlog *l, io_ctx *io, const uint64_t *rows,
		       const void *const *ptrs, size_t n)
{
	int ret;

	if (l->rdonly)
		return -EBADF;
	ret = append_rows(l, io, rows, n, NULL, ptrs);
	return ret ? ret : maybe_clean(l, io);
}

int rowlog_erase(struct rowlog *l, const uint64_t *rows, size_t n,
		 uint64_t *erased)
{
	int ret;

	*erased = 0;
	if (l->rdonly || l->rows)
		return -EBADF;
	/* room in the list of changes for every row first: past it, nothing
	 * fails */
	ret = chg_reserve(l, n);
	if (ret)
		return ret;
	for (size_t i = 0; i < n; i++) {
		int64_t e = rli_find(&l->ix, rows[i]);
		uint32_t v;

		if (e < 0)
			continue;
		v = l->ix.vals[e];
		if (!(v & RL_DIRTY))
			l->chg[l->nchg++] = rows[i];
		l->live[(v & RL_MAXREC) / l->rps]--;
		rli_del(&l->ix, (uint64_t)e);
		l->epoch++;
		(*erased)++;
	}
	return 0;
}

/* Keeps a stamp beside each index entry from now on, those there now
 * stamped with. */
static int stamps_keep(struct rowlog *l, uint32_t with)
{
	int ret;

	if (l->ix.aw)
		return 0;
	ret = rli_keep_aux(&l->ix, 1);
	for (uint64_t i = 0; !ret && l->ix.aux && i < rli_end(&l->ix); i++)
		rli_aux(&l->ix, i)[0] = with;
	return ret;
}

/* Keeps a score beside each stamp from now on, those of the rows there
 * now `with` (score_bits; 0: unknown). */
static int scores_keep(struct rowlog *l, uint32_t with)
{
	int ret;

	if (l->ix.aw >= 2)
		return 0;
	ret = rli_keep_aux(&l->ix, 2);
	for (uint64_t i = 0; !ret && l->ix.aux && i < rli_end(&l->ix); i++)
		rli_aux(&l->ix, i)[1] = with;
	return ret;
}

int rowlog_stamps(struct rowlog *l, uint32_t tick)
{
	int ret;

	l->tick = tick;
	if (l->ix.aw) {
		/* from the journal: only rows it had no stamp for */
		for (uint64_t i = 0; l->stamp_unknown && i < rli_end(&l->ix);
		     i++)
			if (rli_used(&l->ix, i) && !rli_aux(&l->ix, i)[0])
				rli_aux(&l->ix, i)[0] = tick;
		l->stamp_unknown = false;
		return 0;
	}
	ret = stamps_keep(l, tick);
	/* the journal has none of them yet */
	if (!ret && !l->rdonly && l->ver >= 2)
		l->stamp_snap = true;
	return ret;
}

int rowlog_scores(struct rowlog *l, uint32_t tick, uint32_t half)
{
	bool had = l->ix.aw >= 2;
	int ret = rowlog_stamps(l, tick);

	if (ret)
		return ret;
	l->half = half;
	if (had) {
		/* from the journal: only rows it had no score for, each
		 * counted once, at its stamp */
		for (uint64_t i = 0; l->score_unknown && i < rli_end(&l->ix);
		     i++)
			if (rli_used(&l->ix, i) && !rli_aux(&l->ix, i)[1])
				rli_aux(&l->ix, i)[1] = f32_bits(1.0f);
		l->score_unknown = false;
		return 0;
	}
	ret = scores_keep(l, f32_bits(1.0f));
	/* the journal has none of them yet */
	if (!ret && !l->rdonly && l->ver >= 2)
		l->stamp_snap = true;
	return ret;
}

int rowlog_expired(const struct rowlog *l, uint32_t tick, uint32_t after,
		   uint64_t **out, size_t *n)
{
	size_t k = 0, cap = 0;
	uint64_t *rows = NULL;

	*out = NULL;
	*n = 0;
	if (!l->ix.aux)
		return 0;
	for (uint64_t i = 0; i < rli_end(&l->ix); i++) {
		if (!rli_used(&l->ix, i) ||
		    (uint32_t)(tick - rli_aux(&l->ix, i)[0]) < after)
			continue;
		if (k == cap) {
			uint64_t *r;

			cap = cap ? 2 * cap : 1024;
			r = realloc(rows, cap * sizeof(*rows));
			if (!r) {
				free(rows);
				return -ENOMEM;
			}
			rows = r;
		}
		rows[k++] = rli_row(&l->ix, i);
	}
	*out = rows;
	*n = k;
	return 0;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;

	return x < y ? -1 : x > y;
}

#define OVER_HIST_MAX (1u << 22) /* stamps counted in a histogram */

/* The stamp th at which the excess oldest rows end: fewer than excess
 * have an older stamp (*below of them), excess or more one up to th (*at
 * of them th itself). */
static int over_threshold(const struct rowlog *l, uint64_t excess, uint32_t *th,
			  uint64_t *below, uint64_t *at)
{
	uint32_t lo = UINT32_MAX, hi = 0;
	uint64_t cum = 0;

	for (uint64_t i = 0; i < rli_end(&l->ix); i++)
		if (rli_used(&l->ix, i)) {
			uint32_t a = rli_aux(&l->ix, i)[0];

			lo = a < lo ? a : lo;
			hi = a > hi ? a : hi;
		}
	if ((uint64_t)hi - lo < OVER_HIST_MAX) {
		uint64_t *cnt = calloc((size_t)(hi - lo) + 1, sizeof(*cnt));

		if (!cnt)
			return -ENOMEM;
		for (uint64_t i = 0; i < rli_end(&l->ix); i++)
			if (rli_used(&l->ix, i))
				cnt[rli_aux(&l->ix, i)[0] - lo]++;
		for (uint32_t d = 0;; d++) {
			if (cum + cnt[d] >= excess) {
				*th = lo + d;
				*at = cnt[d];
				break;
			}
			cum += cnt[d];
		}
		free(cnt);
	} else { /* stamps far apart: sorted */
		uint32_t *st = malloc(l->ix.count * sizeof(*st));
		uint64_t k = 0;

		if (!st)
			return -ENOMEM;
		for (uint64_t i = 0; i < rli_end(&l->ix); i++)
			if (rli_used(&l->ix, i))
				st[k++] = rli_aux(&l->ix, i)[0];
		qsort(st, k, sizeof(*st), cmp_u32);
		*th = st[excess - 1];
		while (cum < k && st[cum] < *th)
			cum++;
		for (*at = 0; cum + *at < k && st[cum + *at] == *th; (*at)++)
			;
		free(st);
	}
	*below = cum;
	return 0;
}

/* Slot i's score as seen from tick, as f32 bits: for scores, which are
 * never negative, the order of the bits is the order of the values. */
static uint32_t score_now(const struct rowlog *l, uint64_t i, uint32_t tick,
			  uint32_t half)
{
	const uint32_t *a = rli_aux(&l->ix, i);

	return f32_bits(score_at(bits_f32(a[1]), a[0], tick, half));
}

/* A row among those of the threshold score: its stamp, then its row. */
struct sr {
	uint32_t stamp;
	uint64_t row;
};

static int cmp_sr(const void *a, const void *b)
{
	const struct sr *x = a, *y = b;

	if (x->stamp != y->stamp)
		return x->stamp < y->stamp ? -1 : 1;
	return x->row < y->row ? -1 : x->row > y->row;
}

/* rowlog_over by score: the score bits th at which the excess lowest end
 * are found by their top 16 bits, then their low 16 among those, in two
 * counting passes; the rows below th go, and of those at th the oldest
 * stamps, then the smallest rows. */
static int over_scored(const struct rowlog *l, uint64_t excess, uint32_t tick,
		       uint32_t half, uint64_t *rows)
{
	uint64_t *cnt = calloc(65536, sizeof(*cnt)), cum = 0, k = 0, ne = 0;
	uint32_t th = 0;
	struct sr *eq;

	if (!cnt)
		return -ENOMEM;
	for (int pass = 0; pass < 2; pass++) {
		if (pass)
			memset(cnt, 0, 65536 * sizeof(*cnt));
		for (uint64_t i = 0; i < rli_end(&l->ix); i++) {
			uint32_t b;

			if (!rli_used(&l->ix, i))
				continue;
			b = score_now(l, i, tick, half);
			if (!pass)
				cnt[b >> 16]++;
			else if (b >> 16 == th >> 16)
				cnt[b & 0xffff]++;
		}
		for (uint32_t d = 0;; d++) {
			if (cum + cnt[d] >= excess) {
				th = pass ? (th & 0xffff0000u) | d : d << 16;
				break;
			}
			cum += cnt[d];
		}
		if (!pass)
			continue;
		ne = cnt[th & 0xffff];
	}
	free(cnt);
	eq = malloc(ne * sizeof(*eq));
	if (!eq)
		return -ENOMEM;
	ne = 0;
	for (uint64_t i = 0; i < rli_end(&l->ix); i++) {
		uint32_t b;

		if (!rli_used(&l->ix, i))
			continue;
		b = score_now(l, i, tick, half);
		if (b < th)
			rows[k++] = rli_row(&l->ix, i);
		else if (b == th)
			eq[ne++] = (struct sr){rli_aux(&l->ix, i)[0],
					       rli_row(&l->ix, i)};
	}
	qsort(eq, ne, sizeof(*eq), cmp_sr);
	for (uint64_t i = 0; k < excess; i++)
		rows[k++] = eq[i].row;
	free(eq);
	return 0;
}

int rowlog_over(const struct rowlog *l, uint64_t keep, uint32_t tick,
		uint32_t half, uint64_t **out, size_t *n)
{
	uint64_t excess, below, at, k = 0, ne = 0, *rows, *eq;
	uint32_t th;
	int ret;

	*out = NULL;
	*n = 0;
	if (!l->ix.aux || l->ix.count <= keep)
		return 0;
	excess = l->ix.count - keep;
	if (half && l->ix.aw >= 2) {
		rows = malloc(excess * sizeof(*rows));
		if (!rows)
			return -ENOMEM;
		ret = over_scored(l, excess, tick, half, rows);
		if (ret) {
			free(rows);
			return ret;
		}
		*out = rows;
		*n = (size_t)excess;
		return 0;
	}
	ret = over_threshold(l, excess, &th, &below, &at);
	if (ret)
		return ret;
	rows = malloc(excess * sizeof(*rows));
	eq = malloc(at * sizeof(*eq));
	if (!rows || !eq) {
		free(rows);
		free(eq);
		return -ENOMEM;
	}
	for (uint64_t i = 0; i < rli_end(&l->ix); i++) {
		if (!rli_used(&l->ix, i) || rli_aux(&l->ix, i)[0] > th)
			continue;
		if (rli_aux(&l->ix, i)[0] < th)
			rows[k++] = rli_row(&l->ix, i);
		else
			eq[ne++] = rli_row(&l->ix, i);
	}
	/* of the rows of stamp th, the smallest */
	qsort(eq, ne, sizeof(*eq), cmp_u64);
	for (uint64_t i = 0; k < excess; i++)
		rows[k++] = eq[i];
	free(eq);
	*out = rows;
	*n = (size_t)k;
	return 0;
}

uint64_t rowlog_epoch(const struct rowlog *l)
{
	return l ? l->epoch : 0;
}

uint64_t rowlog_count(const struct rowlog *l)
{
	return l ? l->ix.count : 0;
}

int rowlog_expect(struct rowlog *l, uint64_t n)
{
	if (!l || l->rdonly || n < RL_EXPECT_MIN || l->ix.count >= n / 4)
		return 0;
	return rli_reserve(&l->ix, l->ix.count + n);
}

/* ------------------------------------------------------------- journal */

/* Whether the log's batches are stamped: it keeps stamps, and its
 * journal is of version 2. */
static bool jr_stamped(const struct rowlog *l)
{
	return l->ver >= 2 && l->ix.aux;
}

/* ... and scored: it keeps scores too. */
static bool jr_scored(const struct rowlog *l)
{
	return jr_stamped(l) && l->ix.aw >= 2;
}

/* The bytes of an entry of the log's batches. */
static size_t jr_ent_of(const struct rowlog *l)
{
	return jr_scored(l) ? JR_ENT_SC : jr_stamped(l) ? JR_ENT_ST : JR_ENT;
}

/* Entries of the batch being written: the rows changed since the last
 * commit, in the order they first changed. Each row's index entry loses
 * its changed bit here, while its line is at hand, not in a second pass
 * at rowlog_commit_done: should this commit fail, its rows stay in the
 * list for the next one, and a row appended meanwhile is listed twice
 * (its entries then say the same, as after an erase and a rewrite). */
static void fill_changes(void *arg, unsigned char *p, uint64_t first, size_t n)
{
	struct rowlog *l = arg;
	size_t ent = jr_ent_of(l);

	for (size_t i = 0; i < n; i++, p += ent) {
		uint64_t row = l->chg[first + i];
		uint32_t rn = RL_TOMB;
		int64_t e;

		if (first + i + RL_AHEAD < l->nchg)
			rli_prefetch_val(&l->ix, l->chg[first + i + RL_AHEAD]);
		e = rli_find(&l->ix, row);
		if (e >= 0) {
			rn = l->ix.vals[e] & RL_MAXREC;
			l->ix.vals[e] = rn;
		}
		put64(p, row);
		put32(p + 8, rn);
		put32(p + 12, e >= 0 && l->ver >= 2 ? l->gen[rn / l->rps] : 0);
		if (jr_stamped(l))
			put32(p + 16, e >= 0 ? rli_aux(&l->ix, e)[0] : 0);
		if (jr_scored(l))
			put32(p + 20, e >= 0 ? rli_aux(&l->ix, e)[1] : 0);
	}
}

/* Entries of a snapshot: every row of the index, in slot order (each
 * losing its changed bit, as in fill_changes). */
static void fill_index(void *arg, unsigned char *p, uint64_t first, size_t n)
{
	struct rowlog *l = arg;
	size_t ent = jr_ent_of(l);

	if (!first)
		l->fill_at = 0;
	for (size_t i = 0; i < n; i++, p += ent) {
		uint32_t rn;

		while (!rli_used(&l->ix, l->fill_at))
			l->fill_at++;
		rn = l->ix.vals[l->fill_at] & RL_MAXREC;
		l->ix.vals[l->fill_at] = rn;
		put64(p, rli_row(&l->ix, l->fill_at));
		put32(p + 8, rn);
		put32(p + 12, l->ver >= 2 ? l->gen[rn / l->rps] : 0);
		if (jr_stamped(l))
			put32(p + 16, rli_aux(&l->ix, l->fill_at)[0]);
		if (jr_scored(l))
			put32(p + 20, rli_aux(&l->ix, l->fill_at)[1]);
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
	if (l->stamp_snap && !l->ix.count)
		l->stamp_snap = false; /* no row to stamp */
	if (!l->nchg && !l->stamp_snap)
		return 0; /* nothing changed: earlier batches say it all */
	ret = rowlog_sync(l, io);
	if (ret)
		return ret;
	ibytes = l->ix.count * jr_ent_of(l) + JR_HDR + JR_TRL;
	b = (struct jr_batch){.ver = l->ver,
			      .stamped = jr_stamped(l),
			      .scored = jr_scored(l),
			      .commit = commit,
			      .hseg = l->head_ok ? l->hseg : JR_NONE,
			      .hslot = l->hslot,
			      .rec_bytes = l->rec_bytes,
			      .seg_bytes = l->seg_bytes,
			      .hgen = l->head_ok ? l->gen[l->hseg] : 0};
	if (l->stamp_snap ||
	    (l->jt.len > l->snap_min && l->jt.len > 2 * ibytes)) {
		b.n = l->ix.count;
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
	l->nchg = 0; /* their changed bits went as the batch was filled */
	/* a large list of changes (a bulk write, a first fill) is not kept
	 * beside the index it would add half to */
	if (l->chgcap > RL_CHG_KEEP) {
		mem_free(l->chg, l->chgcap * sizeof(*l->chg), 0);
		l->chg = NULL;
		l->chgcap = 0;
	}
	if (l->snap == SNAP_PREPARED && l->snap_commit == commit) {
		l->snap = SNAP_COMMITTED;
		l->stamp_snap = false; /* every stamp is in it */
	}
	l->tick = (uint32_t)(commit + 1);
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
		rli_clear(&l->ix);
	/* a batch brings at most b->n new rows */
	return rli_reserve(&l->ix, l->ix.count + b->n);
}

static int rp_entries(void *arg, const struct jr_batch *b,
		      const unsigned char *e, size_t n)
{
	struct replay *r = arg;
	struct rowlog *l = r->l;
	size_t ent = jr_ent_bytes(b);
	int ret;

	/* A stamped batch: the log keeps stamps from here on, rows of the
	 * batches before it unknown (0) until rowlog_stamps */
	if (b->stamped && !l->ix.aw) {
		ret = stamps_keep(l, 0);
		if (ret)
			return ret;
		l->stamp_unknown = l->ix.count != 0;
	}
	/* ... and a scored batch, scores (unknown, 0, until rowlog_scores) */
	if (b->scored && l->ix.aw < 2) {
		ret = scores_keep(l, 0);
		if (ret)
			return ret;
		l->score_unknown = l->ix.count != 0;
	}
	for (size_t i = 0; i < n; i++, e += ent) {
		uint64_t row = get64(e), slot, seg;
		uint32_t rn = get32(e + 8);
		bool isnew;

		/* the slots of rows a few ahead: random memory (the index
		 * was sized for the batch first, so they stay put) */
		if (i + 8 < n)
			rli_prefetch_ins(&l->ix, get64(e + 8 * ent));

		if (rn == RL_TOMB && !l->rows) {
			int64_t k = rli_find(&l->ix, row);

			if (k >= 0)
				rli_del(&l->ix, (uint64_t)k);
			continue;
		}
		seg = rn / l->rps;
		if ((l->rows && row >= l->rows) || rn > RL_MAXREC)
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
			ret = rli_slot(&l->ix, row, &slot, &isnew);
		if (ret)
			return ret;
		l->ix.vals[slot] = rn;
		l->gen[seg] = get32(e + 12);
		if (l->ix.aux) {
			uint32_t *a = rli_aux(&l->ix, slot);

			a[0] = b->stamped ? get32(e + 16) : 0;
			l->stamp_unknown |= !a[0];
			if (l->ix.aw >= 2) {
				a[1] = b->scored ? get32(e + 20) : 0;
				l->score_unknown |= !a[1];
			}
			/* a score is a finite count, not negative */
			if (b->scored && get32(e + 20) >= 0x7f800000u)
				return err_set(ET_EJOURNAL,
					       "%s: row %llu has score "
					       "bits %08x, not a count",
					       l->pidx, (unsigned long long)row,
					       get32(e + 20));
		}
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

static int idx_paths(const char *tf_path, char *p, char *n, size_t cap)
{
	if ((size_t)snprintf(p, cap, "%s.idx", tf_path) >= cap ||
	    (size_t)snprintf(n, cap, "%s.idx.new", tf_path) >= cap)
		return -ENAMETOOLONG;
	return 0;
}

int rowlog_recover(const char *tf_path, const struct jr_expect *x,
		   struct jr_tail *t)
{
	char p[4096], n[4096];
	int fd = -1, ret = idx_paths(tf_path, p, n, sizeof(p));

	if (!ret)
		ret = jr_open(p, n, 0, x, true, NULL, &fd, t);
	return ret;
}

int rowlog_settle(const char *tf_path, const struct jr_tail *t)
{
	char p[4096], n[4096];
	int ret = idx_paths(tf_path, p, n, sizeof(p));

	return ret ? ret : jr_settle(p, n, t);
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
	l->max_amp = rl_max_amp;
	l->read_merge = rl_read_merge;
	l->snap_min = rl_snap_min;
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
	l->tick = (uint32_t)(x->commit + 1); /* rows appended now */
	if (l->ix.count || l->head_ok) {
		uint32_t ns = l->head_ok ? l->hseg + 1 : 0;
		uint64_t need;

		for (uint64_t i = 0; i < rli_end(&l->ix); i++)
			if (rli_used(&l->ix, i) &&
			    l->ix.vals[i] / l->rps + 1 > ns)
				ns = l->ix.vals[i] / l->rps + 1;
		if (stat(l->plog, &st)) {
			ret = err_set(ET_EMISSING,
				      "%s missing; its journal names %llu "
				      "rows in it",
				      l->plog, (unsigned long long)l->ix.count);
			goto err;
		}
		/* every committed record, and the head, must be in it */
		need = l->head_ok ? head_off(l) : 0;
		for (uint64_t i = 0; i < rli_end(&l->ix); i++)
			if (rli_used(&l->ix, i) &&
			    rec_off(l, l->ix.vals[i]) + l->rec_bytes > need)
				need = rec_off(l, l->ix.vals[i]) + l->rec_bytes;
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
		for (uint64_t i = 0; i < rli_end(&l->ix); i++)
			if (rli_used(&l->ix, i))
				l->live[l->ix.vals[i] / l->rps]++;
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
	rli_free(&l->ix);
	segs_free(l);
	bufs_free(l);
	mem_free(l->chg, l->chgcap * sizeof(*l->chg), 0);
	if (l->rbuf)
		mem_free_io(l->rbuf, l->rbuf_bytes, l->mem_align);
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
	if (!l || !l->ix.count)
		return 0;
	rows = malloc(l->ix.count * sizeof(*rows));
	if (!rows)
		return -ENOMEM;
	for (uint64_t i = 0; i < rli_end(&l->ix); i++)
		if (rli_used(&l->ix, i))
			rows[k++] = rli_row(&l->ix, i);
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
	st->index_rows = l->ix.count;
	st->index_bytes =
	    (l->ix.cap + !!l->ix.cap) *
		(sizeof(*l->ix.keys) + sizeof(*l->ix.vals) +
		 (l->ix.aux ? sizeof(*l->ix.aux) * l->ix.aw : 0)) +
	    l->ix.bf_words * sizeof(*l->ix.bf) + (uint64_t)l->segcap * 9 +
	    l->chgcap * sizeof(*l->chg);
	st->live_bytes = l->ix.count * l->rec_bytes;
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
