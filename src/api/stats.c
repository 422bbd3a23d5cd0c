/*
 * stats.c - et_get_stats: the tables' counters, each tier's, the prefetch's
 * and the store's clocks.
 */
#include <errno.h>
#include <string.h>

#include "prefetch.h"
#include "state.h"
#include "mem_host.h"

/* Adds one class's instance of a tier to the tier's counters. */
static void tier_stats(const struct cache *c, struct et_tier_stats *ts)
{
	ts->capacity_rows += cache_slots(c);
	ts->direct_rows += c->dnext;
	ts->resident_rows += c->used;
	ts->dirty_rows += c->dirty;
	ts->row_bytes += c->row_bytes;
	ts->alloc_bytes +=
	    cache_slots(c) * ((uint64_t)c->slot_bytes + ET_SLOT_META_BYTES) +
	    (c->pol->halve_ticks ? 2 * c->sk.cols : 0);
	ts->hits += c->st.hits;
	ts->misses += c->st.misses;
	ts->inserts += c->st.inserts;
	ts->evictions += c->st.evictions;
	ts->bytes_in += c->st.bytes_in;
	ts->bytes_out += c->st.bytes_out;
}

static void add_table(struct et_stats *st, const struct table *t)
{
	struct tf_stats f;

	st->calls += t->st.calls;
	st->requested += t->st.requested;
	st->unique += t->st.unique;
	st->unique_misses += t->st.unique_misses;
	st->conflict_unique_misses += t->st.conflict_unique_misses;
	st->conflict_misses += t->st.conflict_misses;
	st->keys_dropped += t->st.keys_dropped;
	st->keys_erased += t->st.keys_erased;
	st->keys_expired += t->st.keys_expired;
	st->keys_evicted += t->st.keys_evicted;
	st->nvme_rows_read += t->st.nvme_rows_read;
	st->rows_lazy += t->st.rows_lazy;
	st->rows_overwritten += t->st.rows_overwritten;
	st->writebacks += t->st.writebacks;
	tf_get_stats(t->tf, &f);
	st->blocks_read += f.blocks_read;
	st->blocks_written += f.blocks_written;
	st->bytes_read += f.bytes_read;
	st->bytes_written += f.bytes_written;
	st->log_rows_written += f.log.rows_appended;
	st->log_rows_cleaned += f.log.rows_cleaned;
	st->log_segments_cleaned += f.log.segs_cleaned;
	st->log_bytes_written += f.log.bytes_written;
	st->log_rows_read += f.log.rows_read;
	st->log_index_rows += f.log.index_rows;
	st->log_index_bytes += f.log.index_bytes;
	st->log_live_bytes += f.log.live_bytes;
	st->log_segment_bytes += f.log.log_bytes;
	st->log_records_damaged += f.log.bad_records;
}

int et_get_stats(et_store *s, int table, struct et_stats *st)
{
	int ret;

	api_enter(s);
	if (!s || !st)
		return err_set(-EINVAL, "%s is NULL", !s ? "s" : "st");
	/* The table files' counters are the I/O thread's while it works. */
	if (s->pf.pending) {
		ret = drain(s);
		if (ret)
			return ret;
	}
	if (table != -1 && !table_get(s, table))
		return no_table(s, table);
	ret = caches_ensure(s);
	if (ret)
		return ret;
	memset(st, 0, sizeof(*st));
	if (table != -1) {
		struct table *t = table_get(s, table);

		if (!t)
			return no_table(s, table);
		add_table(st, t);
	} else {
		for (uint32_t i = 0; i < s->reg.ntables; i++)
			add_table(st, &s->reg.tables[i]);
	}
	for (uint32_t i = 0; s->reg.caches_ready && i < s->reg.ncls; i++) {
		if (s->reg.has_hbm)
			tier_stats(&s->reg.cls[i].hbm, &st->hbm);
		tier_stats(&s->reg.cls[i].ddr, &st->ddr);
	}
	st->hbm.capacity_bytes = s->cfg.hbm_bytes;
	st->ddr.capacity_bytes = s->cfg.ddr_bytes;
	st->prefetch_calls = s->pf.calls;
	st->prefetch_rows = s->pf.rows;
	st->prefetch_reads = s->pf.reads;
	st->prefetch_hits = s->pf.hits;
	st->prefetch_late = s->pf.late;
	st->prefetch_skipped = s->pf.skipped;
	st->prefetch_wait_ns = s->pf.wait_ns;
	st->op_ns = s->tm.op_ns;
	st->miss_wait_ns = s->tm.miss_ns;
	st->writeback_ns = s->tm.wb_ns;
	st->mem_bytes = mem_in_use();
	st->mem_peak_bytes = mem_peak();
	return 0;
}
