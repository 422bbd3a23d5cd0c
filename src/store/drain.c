/*
 * drain.c - the store's side of the I/O thread: what it read for earlier
 * prefetches is installed in the top tier, and the write-backs it did are
 * taken back, at the start of every operation.
 */
#include <errno.h>
#include <string.h>

#include "pipeline.h"
#include "state.h"

/* Places a prefetched row, unless it became resident meanwhile (its cached
 * copy is then the truth), pinned for the batch that asked for it. If
 * top is not NULL, *top is the top-tier slot the row went to, or
 * CACHE_NONE if it went elsewhere. */
int pf_install(et_store *s, uint32_t t, uint64_t row, const void *raw,
	       bool dirty, uint32_t epoch, uint64_t *top)
{
	uint64_t slot;
	struct sclass *cl = &s->reg.cls[s->reg.tables[t].cls];
	uint8_t top_kind = s->reg.has_hbm ? K_HBM : K_DDR;
	uint8_t where;
	int ret;

	if (top)
		*top = CACHE_NONE;
	if ((s->reg.has_hbm && cache_lookup(&cl->hbm, t, row) != CACHE_NONE) ||
	    cache_lookup(&cl->ddr, t, row) != CACHE_NONE ||
	    (!dirty && wb_find(s, t, row) >= 0))
		return 0;
	ret = place_row(s, t, row, raw, s->reg.tables[t].g->row_bytes,
			CACHE_NONE, dirty, epoch, 1, &where, &slot);
	if (ret)
		return ret;
	if ((where & ~K_CONFLICT) == top_kind)
		cache_mark_pf(top_of(&s->reg, cl), slot);
	else if ((where & ~K_CONFLICT) == K_BYPASS)
		s->pf.skipped++;
	if (top && where == top_kind)
		*top = slot;
	return 0;
}

/*
 * Installs what the I/O thread has read for earlier prefetches, and takes
 * back the write-backs it did. Called first by every operation: afterwards
 * the store's thread owns the table files and the ring again.
 */
int drain(et_store *s)
{
	struct pl_job *j, *next;
	uint64_t late, waited;
	int ret = 0;

	if (!s->pf.pending)
		return 0;
	j = pl_drain(s->pf.pl, &late, &waited);
	s->pf.pending = false;
	s->pf.late += late;
	s->pf.wait_ns += waited;
	{
		/* Room for every row the jobs may queue: a failed write's
		 * rows, and a victim for each row read. Without it a row
		 * could be dropped; the store then refuses to go on. */
		size_t need = 0;

		for (struct pl_job *k = j; k; k = k->next)
			if (k->kind != PL_WRITE || k->result)
				need += k->n;
		if (wb_reserve(s, 2 * need))
			s->lost = -ENOMEM;
	}
	for (; j; j = next) {
		struct table *tb = &s->reg.tables[j->table];

		next = j->next;
		if (j->kind == PL_WRITE) {
			if (j->result) {
				/* Not home: keep the rows in memory and
				 * refuse to go on, as a failed write-back
				 * in the foreground would. */
				for (size_t i = 0; i < j->n && !ret; i++)
					ret = wb_queue(s, j->table, j->rows[i],
						       (char *)j->raw +
							   i * j->row_bytes);
				if (ret && !s->lost)
					s->lost = ret;
				if (!s->failed)
					s->failed = j->result;
			} else {
				tb->st.writebacks += j->n;
			}
		} else if (!j->result && !s->lost) {
			tb->st.nvme_rows_read += j->n;
			for (size_t i = 0; i < j->n && !ret; i++)
				ret = pf_install(s, j->table, j->rows[i],
						 (char *)j->raw +
						     i * j->row_bytes,
						 false, j->epoch, NULL);
		}
		/* A failed read installs nothing: the rows are read on
		 * demand, and the error surfaces there. */
		pl_job_free(j);
	}
	return ret;
}

/* drain at the start of an operation: its wait is the operation's miss
 * wait (et_stats.miss_wait_ns). */
int op_drain(et_store *s)
{
	uint64_t w0 = s->pf.wait_ns;
	int ret = drain(s);

	s->tm.miss_ns += s->pf.wait_ns - w0;
	return ret;
}
