/*
 * rl_read.c - the row log's reads: records near each other share one
 * aligned read, large reads go in log order, records still in the append
 * buffer are copied from it, and every record is checked (its row id, and
 * its checksum bound to its row and place) before its row is used; the
 * walk of et_tfile_verify over every live record.
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

int cmp_u64(const void *a, const void *b)
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
	if (!l->read_merge || r->n < 2 || r->n * RL_ORDER_FRAC < l->ix.count)
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
		int64_t e = rli_find(&l->ix, r->rows[r->idx[i]]);

		if (e < 0)
			return -EINVAL; /* not ours: a caller bug */
		l->ord[i] =
		    (uint64_t)(l->ix.vals[e] & RL_MAXREC) << 32 | r->idx[i];
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
			e = rli_find(&l->ix, r->rows[at]);
			if (e < 0)
				return -EINVAL; /* not ours: a caller bug */
			recno = l->ix.vals[e] & RL_MAXREC;
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
		if (l->read_merge && q && lo >= q->off &&
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

int rowlog_read_wait(struct rowlog *l, io_ctx *io, const struct rl_read *r)
{
	return io_wait_reqs(io, l->rreq, r->nq);
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
	if (!l->ix.count)
		return 0;
	buf = mem_alloc((size_t)B * l->row_bytes, 0);
	if (!buf)
		return -ENOMEM;
	for (uint64_t i = 0; i < rli_end(&l->ix) && !ret;) {
		uint32_t k = 0;

		for (; i < rli_end(&l->ix) && k < B; i++)
			if (rli_used(&l->ix, i)) {
				rows[k] = rli_row(&l->ix, i);
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
