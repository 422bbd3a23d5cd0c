/*
 * rl_clean.c - the row log's cleaner. When the segments in use (less
 * those only the last commit still needs, and those holding damage) exceed
 * max_amp times the live record bytes, plus two segments, it moves the
 * live records of the segment with the fewest, a few segments per append
 * call. A live record that fails its check is left where it is (its reads
 * fail, naming it) and its segment is not cleaned again; the other rows go
 * on. A segment is reused only once neither the index nor the last commit
 * needs it.
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

static bool needs_cleaning(const struct rowlog *l)
{
	uint64_t used = 0;

	for (uint32_t s = 0; s < l->nsegs; s++)
		if ((l->live[s] && !l->bad[s]) || (l->head_ok && s == l->hseg))
			used++;
	return (double)used * l->seg_bytes >
	       l->max_amp * (double)l->ix.count * l->rec_bytes +
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
	for (uint64_t i = 0; i < rli_end(&l->ix); i++)
		if (rli_used(&l->ix, i) &&
		    (l->ix.vals[i] & RL_MAXREC) / l->rps == s)
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

			if (l->rows && row >= l->rows)
				continue;
			k = rli_find(&l->ix, row);
			if (k < 0 || (l->ix.vals[k] & RL_MAXREC) != recno)
				continue;
			if (rec_sum(l, r + RL_REC_HDR, row, recno) !=
			    get64(r + 8))
				continue; /* damaged: quarantined below */
			memcpy(tmp, r + RL_REC_HDR, l->row_bytes);
			l->in_clean = true;
			ret = append_one(l, io, row, tmp);
			l->in_clean = false;
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

int maybe_clean(struct rowlog *l, io_ctx *io)
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
