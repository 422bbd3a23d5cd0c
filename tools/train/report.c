/*
 * report.c - what embtier-train prints: the log lines of the run, the
 * weights checksum, the figures collected at the end, and the summary
 * (text, or one JSON object under --json).
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "cli.h"
#include "trainer.h"

static double ratio(uint64_t hits, uint64_t misses)
{
	return hits + misses ? (double)hits / (double)(hits + misses) : NAN;
}

/* Takes the progress bar off the screen before a log line; the next
 * update draws it again. */
static void progress_clear(struct progress *p)
{
	if (p->on && p->drawn) {
		fputs("\r\033[K", stderr);
		fflush(stderr);
		p->drawn = false;
	}
}

static void fmt_ratio(char *buf, size_t len, double r)
{
	if (isnan(r))
		snprintf(buf, len, "-");
	else
		snprintf(buf, len, "%.4f", r);
}

/* Adds the store's clocks of b - a to *t. */
void store_time_add(struct store_time *t, const struct et_stats *a,
		    const struct et_stats *b)
{
	t->op += (double)(b->op_ns - a->op_ns) / 1e9;
	t->miss += (double)(b->miss_wait_ns - a->miss_wait_ns) / 1e9;
	t->wb += (double)(b->writeback_ns - a->writeback_ns) / 1e9;
}

/*
 * Splits stall, the time steps spent in the store's calls, by the store's
 * clocks b - a less those of the evaluations in between (ev): miss wait,
 * write-back and hit work (the rest), each a fraction of step_s.
 */
static void stall_split(double step_s, double stall, const struct et_stats *a,
			const struct et_stats *b, const struct store_time *ev,
			double *hit, double *miss, double *wb)
{
	struct store_time t = {0, 0, 0};

	store_time_add(&t, a, b);
	t.miss -= ev->miss;
	t.wb -= ev->wb;
	t.miss = t.miss > 0 ? t.miss : 0;
	t.wb = t.wb > 0 ? t.wb : 0;
	*hit = stall - t.miss - t.wb > 0 ? stall - t.miss - t.wb : 0;
	*hit = step_s > 0 ? *hit / step_s : 0;
	*miss = step_s > 0 ? t.miss / step_s : 0;
	*wb = step_s > 0 ? t.wb / step_s : 0;
}

int log_line(struct trainer *tr)
{
	struct interval *iv = &tr->iv;
	struct et_stats st;
	char hbm[16], ddr[16];
	double now = cli_now(), hit, miss, wb;
	int ret;

	ret = et_get_stats(tr->store, -1, &st);
	if (ret)
		return fail("stats", ret);
	stall_split(iv->step_s, iv->stall_s, &iv->st, &st, &iv->eval_tm, &hit,
		    &miss, &wb);
	fmt_ratio(hbm, sizeof(hbm),
		  tr->o.hbm_mb > 0 ? ratio(st.hbm.hits - iv->st.hbm.hits,
					   st.hbm.misses - iv->st.hbm.misses)
				   : NAN);
	fmt_ratio(ddr, sizeof(ddr),
		  ratio(st.ddr.hits - iv->st.ddr.hits,
			st.ddr.misses - iv->st.ddr.misses));
	progress_clear(&tr->prog);
	fprintf(tr->log,
		"step %" PRIu64 " loss %.5f samples/s %.0f hbm-hit %s "
		"ddr-hit %s stall %.3f (hit %.3f miss-wait %.3f write-back "
		"%.3f) prefetch-wait-ms %.1f\n",
		tr->step, iv->steps ? iv->loss / (double)iv->steps : NAN,
		iv->step_s > 0 ? (double)iv->samples / iv->step_s : 0.0, hbm,
		ddr, iv->step_s > 0 ? iv->stall_s / iv->step_s : 0.0, hit, miss,
		wb,
		(double)(st.prefetch_wait_ns - iv->st.prefetch_wait_ns) / 1e6);
	fflush(tr->log);
	{
		/* full: it evicted in this interval (a set-associative
		 * tier evicts before every slot is taken) */
		bool full = st.ddr.evictions > iv->st.ddr.evictions;
		int ph = full && tr->ddr_was_full;

		tr->phase[ph].samples += (double)iv->samples;
		tr->phase[ph].step_s += iv->step_s;
		tr->phase[ph].steps += iv->steps;
		tr->ddr_was_full = full;
	}
	memset(iv, 0, sizeof(*iv));
	iv->t0 = now;
	iv->st = st;
	return 0;
}

/* The line of an evaluation before the end. */
void eval_line(struct trainer *tr)
{
	progress_clear(&tr->prog);
	fprintf(tr->log, "eval step %" PRIu64 " logloss %.5f auc %.5f\n",
		tr->step, tr->eval_logloss, tr->eval_auc);
	fflush(tr->log);
}

/* The line of a delta exported after a checkpoint (--export-delta). */
void delta_line(struct trainer *tr, uint64_t step, const char *path,
		const struct et_delta_info *di, double secs)
{
	FILE *f = tr->log ? tr->log : stdout;

	progress_clear(&tr->prog);
	fprintf(f,
		"delta step %" PRIu64 " commit %" PRIu64 "-%" PRIu64
		" tables %u whole %u rows %" PRIu64 " tombstones %" PRIu64
		" bytes %" PRIu64 " seconds %.4f file %s\n",
		step, di->from_commit, di->to_commit, di->tables, di->whole,
		di->rows, di->tombstones, di->bytes, secs, path);
	fflush(f);
}

/* ------------------------------------------------------------- results */

/*
 * FNV-1a over every MLP weight (not the optimizer state), then, table by
 * table, the ids training updated in increasing order and their values
 * read back with et_gather. Values are what the API returns (f32), so the
 * checksum is the same whatever the tiers held when it was taken.
 */
#ifdef ET_WITH_MPI
/* Table t's touched rows of every rank, on rank 0: *ids (replaced) and
 * tr->rowvals, in increasing id order. */
static int dist_checksum_rows(struct trainer *tr, int t, uint64_t **ids,
			      uint64_t *n)
{
	size_t k = (size_t)*n, all_n = 0;
	float *vals = malloc((k ? k : 1) * tr->o.dim * sizeof(float));
	uint64_t *all_ids = NULL;
	int ret = vals ? 0 : -ENOMEM;

	if (!ret && k)
		ret = et_gather(tr->store, tr->tid[t], *ids, k, vals);
	if (ret) {
		free(vals);
		return fail("checksum gather", ret);
	}
	free(tr->rowvals);
	tr->rowvals = NULL;
	ret = dist_table_rows(tr->dist, *ids, vals, k, tr->o.dim, &all_ids,
			      &tr->rowvals, &all_n);
	free(vals);
	if (ret)
		return fail("checksum", ret);
	free(*ids);
	*ids = all_ids;
	*n = all_n;
	return 0;
}
#endif

/* Rows the checksum gathers a call: a large share of a table at once, so
 * that the store reads its row log in log order with merged reads (rows
 * sorted by id are scattered over the log), its buffer 64 MiB at most. */
static size_t checksum_chunk(const struct trainer *tr)
{
	size_t cap = ((size_t)64 << 20) / ((size_t)tr->o.dim * sizeof(float));

	return cap > 4096 ? cap : 4096;
}

/* Hashes k rows (their ids, then their values) 4096 at a time: the
 * checksum's bytes in the order they always had, whatever the chunk the
 * rows were gathered in. */
static uint64_t checksum_rows(uint64_t h, const uint64_t *ids,
			      const float *vals, size_t k, int dim)
{
	for (size_t i = 0; i < k; i += 4096) {
		size_t m = k - i < 4096 ? k - i : 4096;

		h = fnv(h, ids + i, m * sizeof(*ids));
		h = fnv(h, vals + i * (size_t)dim,
			m * (size_t)dim * sizeof(float));
	}
	return h;
}

#ifndef ET_WITH_MPI
/* k rows of table t into buf. When the run has just committed every row
 * (it ends on a checkpoint), from the table's file, opened read-only as
 * of that commit: the rows go from the row log in log order without
 * passing through the store's caches, which would place (and evict) each
 * of them. Otherwise through the store. The values are the same. */
static int checksum_read(struct trainer *tr, int t, const uint64_t *ids,
			 size_t k, float *buf, et_tfile **tf)
{
	char path[PATH_MAX + 16];
	int ret;

	if (!tr->ckpt_any || tr->ckpt_step != tr->step)
		return et_gather(tr->store, tr->tid[t], ids, k, buf);
	if (!*tf) { /* the first chunk of the table */
		snprintf(path, sizeof(path), "%s/t%02d.et", tr->dir, t);
		ret = et_tfile_open(path, ET_TFILE_RDONLY, tf);
		if (ret)
			return ret;
	}
	return et_tfile_read_rows(*tf, ids, k, buf, NULL);
}
#endif

int weights_checksum(struct trainer *tr, uint64_t *out)
{
	const size_t chunk = checksum_chunk(tr);
	int nst = model_state_count(&tr->m, 1);
	float *buf = malloc(chunk * (size_t)tr->o.dim * sizeof(float));
	uint64_t h = FNV_BASIS;
	int ret = 0;

	if (!buf)
		return fail("checksum", -ENOMEM);
	for (int i = 0; i < nst; i++) {
		size_t len;
		const float *a = model_state_array(&tr->m, i, &len);

		h = fnv(h, a, len * sizeof(*a));
	}
	for (int t = 0; t < tr->o.ntables && !ret; t++) {
		uint64_t *ids, n = tr->touched[t].n;
		et_tfile *tf = NULL;

		ret = idset_sorted(&tr->touched[t], &ids);
		if (ret) {
			fail("checksum", ret);
			break;
		}
#ifdef ET_WITH_MPI
		ret = dist_checksum_rows(tr, t, &ids, &n);
		if (ret)
			break;
#endif
		h = fnv_u64(h, (uint64_t)t);
		h = fnv_u64(h, n);
		for (uint64_t i = 0; i < n && tr->o.rank == 0; i += chunk) {
			size_t k = n - i < chunk ? (size_t)(n - i) : chunk;

#ifdef ET_WITH_MPI
			memcpy(buf, tr->rowvals + i * tr->o.dim,
			       k * tr->o.dim * sizeof(float));
#else
			ret = checksum_read(tr, t, ids + i, k, buf, &tf);
#endif
			if (ret) {
				fail("checksum read", ret);
				break;
			}
			h = checksum_rows(h, ids + i, buf, k, tr->o.dim);
		}
		et_tfile_close(tf);
		free(ids);
	}
	free(buf);
	*out = h;
	return ret;
}

int collect(struct trainer *tr, struct results *r)
{
	struct rusage ru;
	int ret;

	for (int t = 0; t < tr->o.ntables; t++) {
		struct et_table_info ti;

		if (tr->tid[t] < 0)
			continue; /* MPI: not this rank's */
		ret = et_table_info(tr->store, tr->tid[t], &ti);
		if (ret)
			return fail("table info", ret);
#ifdef ET_WITH_MPI
		ti.rows = dist_owned_rows(tr->dist, t);
#endif
		r->logical_params += ti.rows * ti.dim;
		r->rows_touched += tr->touched[t].n;
		r->blocks_written += ti.blocks_written;
		r->rows_bound += ti.blocks_written * ti.rows_per_block;
		r->disk_bytes += ti.disk_bytes;
		r->logical_bytes += ti.logical_bytes;
		if (ti.flags & ET_TABLE_KEYED)
			r->keys_stored += ti.rows_logged;
	}
	ret = et_get_stats(tr->store, -1, &r->st);
	if (ret)
		return fail("stats", ret);
	if (!getrusage(RUSAGE_SELF, &ru))
		r->maxrss = (uint64_t)ru.ru_maxrss * 1024;
#ifdef ET_WITH_MPI
	{
		struct dist_figures *f = &r->mine;
		uint64_t v[7] = {r->logical_params, r->rows_touched,
				 r->rows_bound,	    r->blocks_written,
				 r->disk_bytes,	    r->logical_bytes,
				 r->keys_stored};

		f->step_s = tr->step_s;
		f->stall_s = tr->stall_s;
		f->samples =
		    (double)(tr->step - tr->step0) * tr->o.batch / tr->o.nranks;
		f->hbm_hit = tr->o.hbm_mb > 0
				 ? ratio(r->st.hbm.hits, r->st.hbm.misses)
				 : NAN;
		f->ddr_hit = ratio(r->st.ddr.hits, r->st.ddr.misses);
		f->owned_params = r->logical_params;
		f->rows_touched = r->rows_touched;
		f->disk_bytes = r->disk_bytes;
		f->mem_peak = r->st.mem_peak_bytes;
		f->maxrss = r->maxrss;
		dist_sum_u64(v, 7);
		r->logical_params = v[0];
		r->rows_touched = v[1];
		r->rows_bound = v[2];
		r->blocks_written = v[3];
		r->disk_bytes = v[4];
		r->logical_bytes = v[5];
		r->keys_stored = v[6];
	}
#endif
	return 0;
}

/* A double for JSON: null where it is not a number. */
static void json_num(const char *key, double v, bool comma)
{
	if (isfinite(v))
		printf("\"%s\":%.6g%s", key, v, comma ? "," : "");
	else
		printf("\"%s\":null%s", key, comma ? "," : "");
}

/* The figures of this run both forms of the summary print. */
struct summary {
	uint64_t steps;	      /* in this run */
	double sps, stall;    /* samples a second, stall fraction */
	double hit, miss, wb; /* the stall's split: stall_split() */
	double hbm, ddr;      /* hit ratios */
	uint64_t malformed;   /* Criteo lines skipped */
	/* keyed tables: bytes a stored key of the row log's index (in
	 * memory) and on disk */
	double index_per_key, disk_per_key;
};

static void summarize(const struct trainer *tr, const struct results *r,
		      struct summary *s)
{
	const struct opts *o = &tr->o;
	const struct et_stats *st = &r->st;
	uint64_t samples;

	s->steps = tr->step - tr->step0;
	samples = s->steps * (uint64_t)o->batch;
	s->sps = tr->step_s > 0 ? (double)samples / tr->step_s : 0;
	s->stall = tr->step_s > 0 ? tr->stall_s / tr->step_s : 0;
	st = &tr->st_end; /* the training's, not the checksum's */
	s->hbm = o->hbm_mb > 0 ? ratio(st->hbm.hits, st->hbm.misses) : NAN;
	s->ddr = ratio(st->ddr.hits, st->ddr.misses);
	s->malformed = tr->train.c.malformed + tr->eval_malformed;
	s->index_per_key = r->keys_stored ? (double)r->st.log_index_bytes /
						(double)r->keys_stored
					  : NAN;
	s->disk_per_key = r->keys_stored
			      ? (double)r->disk_bytes / (double)r->keys_stored
			      : NAN;
	stall_split(tr->step_s, tr->stall_s, &tr->st0, &tr->st_end,
		    &tr->eval_tm_end, &s->hit, &s->miss, &s->wb);
}

/* --json: the summary as one object on stdout. */
static void report_json(const struct trainer *tr, const struct results *r,
			const struct summary *s)
{
	const struct opts *o = &tr->o;
	const struct et_stats *st = &r->st;

	printf("{\"preset\":\"%s\",\"tables\":%d,\"dim\":%d,"
	       "\"dtype\":\"%s\",\"batch\":%d,\"steps\":%" PRIu64
	       ",\"steps_this_run\":%" PRIu64 ",",
	       o->preset, o->ntables, o->dim, cli_dtype_name(o->dtype),
	       o->batch, tr->step, s->steps);
	printf("\"logical_parameters\":%" PRIu64 ",\"rows_touched\":%" PRIu64
	       ",\"rows_materialized_bound\":%" PRIu64
	       ",\"blocks_written\":%" PRIu64 ",\"disk_bytes\":%" PRIu64
	       ",\"logical_bytes\":%" PRIu64 ",\"mem_peak_bytes\":%" PRIu64
	       ",\"maxrss_bytes\":%" PRIu64 ",\"hbm_evictions\":%" PRIu64
	       ",\"ddr_evictions\":%" PRIu64 ",\"writebacks\":%" PRIu64
	       ",\"nvme_rows_read\":%" PRIu64 ",\"rows_lazy\":%" PRIu64
	       ",\"prefetch_wait_ns\":%" PRIu64 ",\"malformed_lines\":%" PRIu64
	       ",",
	       r->logical_params, r->rows_touched, r->rows_bound,
	       r->blocks_written, r->disk_bytes, r->logical_bytes,
	       st->mem_peak_bytes, r->maxrss, st->hbm.evictions,
	       st->ddr.evictions, st->writebacks, st->nvme_rows_read,
	       st->rows_lazy, st->prefetch_wait_ns, s->malformed);
	json_num("open_seconds", tr->open_s, true);
	json_num("run_seconds", tr->run_s, true);
	json_num("step_seconds", tr->step_s, true);
	json_num("ms_per_step", s->steps ? 1e3 * tr->step_s / s->steps : NAN,
		 true);
	json_num("stall_fraction", s->stall, true);
	json_num("hit_fraction", s->hit, true);
	json_num("miss_wait_fraction", s->miss, true);
	json_num("writeback_fraction", s->wb, true);
	json_num("samples_per_second", s->sps, true);
	json_num("flush_seconds", tr->flush_s, true);
	json_num("hbm_hit_ratio", s->hbm, true);
	json_num("ddr_hit_ratio", s->ddr, true);
	json_num("train_loss", s->steps ? tr->loss_sum / s->steps : NAN, true);
	json_num("eval_logloss", tr->eval_logloss, true);
	json_num("eval_auc", tr->eval_auc, true);
	json_num("teacher_logloss", tr->teacher_logloss, true);
	json_num("teacher_auc", tr->teacher_auc, true);
	if (o->keyed) {
		printf("\"keyed\":true,\"keys_stored\":%" PRIu64
		       ",\"keys_dropped\":%" PRIu64 ",\"keys_expired\":%" PRIu64
		       ",\"keys_erased\":%" PRIu64 ",\"keys_evicted\":%" PRIu64
		       ",",
		       r->keys_stored, st->keys_dropped, st->keys_expired,
		       st->keys_erased, st->keys_evicted);
		json_num("index_bytes_per_key", s->index_per_key, true);
		json_num("disk_bytes_per_key", s->disk_per_key, true);
	}
	if (o->export_delta) {
		printf("\"deltas_exported\":%" PRIu64 ",\"delta_rows\":%" PRIu64
		       ",\"delta_tombstones\":%" PRIu64
		       ",\"delta_bytes\":%" PRIu64 ",",
		       tr->deltas, tr->delta_rows, tr->delta_tombs,
		       tr->delta_bytes);
		json_num("delta_seconds", tr->delta_s, true);
		json_num("delta_wait_seconds", tr->delta_wait_s, true);
	}
	printf("\"eval_samples\":%" PRIu64
	       ",\"weights_checksum\":\"0x%016" PRIx64 "\"}\n",
	       tr->eval_n, r->checksum);
}

/* The summary's lines on the model, the time and the throughput. */
static void report_run(const struct trainer *tr, const struct results *r,
		       const struct summary *s)
{
	const struct opts *o = &tr->o;
	char b1[32], b2[32];

	printf("preset: %s\n", o->preset);
	cli_human_count((double)tr->rows[0], b1, sizeof(b1));
	cli_human_count((double)tr->rows[o->ntables - 1], b2, sizeof(b2));
	if (!o->keyed)
		printf("model: %d tables x %s..%s rows x %d (%s), batch %d, "
		       "%s samples\n",
		       o->ntables, b1, b2, o->dim, cli_dtype_name(o->dtype),
		       o->batch, o->data ? "Criteo" : "synthetic");
	else if (o->data)
		printf("model: %d keyed tables (a key a hash of feature and "
		       "value) x %d (%s), batch %d, Criteo samples\n",
		       o->ntables, o->dim, cli_dtype_name(o->dtype), o->batch);
	else
		printf("model: %d keyed tables (rows %s..%s drawn, mixed "
		       "over u64) x %d (%s), batch %d, synthetic samples\n",
		       o->ntables, b1, b2, o->dim, cli_dtype_name(o->dtype),
		       o->batch);
	if (!o->keyed)
		printf("logical-parameters: %" PRIu64 " (%.3g)\n",
		       r->logical_params, (double)r->logical_params);
	else
		printf("logical-parameters: any u64 id in each table; %" PRIu64
		       " (%.3g) stored\n",
		       r->keys_stored * (uint64_t)o->dim,
		       (double)r->keys_stored * o->dim);
	printf("store-open-seconds: %.4f\n", tr->open_s);
	printf("steps: %" PRIu64 " (%" PRIu64 " in this run)\n", tr->step,
	       s->steps);
	printf("run-seconds: %.2f (steps %.2f, stall %.2f, checkpoints %.2f, "
	       "final flush %.2f)\n",
	       tr->run_s, tr->step_s, tr->stall_s, tr->ckpt_s, tr->flush_s);
	printf("ms-per-step: %.3f\n",
	       s->steps ? 1e3 * tr->step_s / s->steps : 0.0);
	printf("samples-per-second: %.0f\n", s->sps);
	if (tr->phase[1].steps && tr->phase[0].step_s > 0 &&
	    tr->phase[1].step_s > 0) {
		double a = tr->phase[0].samples / tr->phase[0].step_s;
		double b = tr->phase[1].samples / tr->phase[1].step_s;

		printf("samples-per-second-by-phase: %.0f until the DDR tier "
		       "filled (%" PRIu64 " steps), %.0f with it full (%" PRIu64
		       " steps): %.2fx\n",
		       a, tr->phase[0].steps, b, tr->phase[1].steps, b / a);
	}
	printf("stall-fraction: %.3f (hit work %.3f, miss wait %.3f, "
	       "write-back %.3f)\n",
	       s->stall, s->hit, s->miss, s->wb);
}

/* The summary's lines on the store: hits, traffic, disk and memory. */
static void report_store(const struct trainer *tr, const struct results *r,
			 const struct summary *s)
{
	const struct opts *o = &tr->o;
	const struct et_stats *st = &r->st;
	char b1[32], b2[32], b3[32], b4[32];

	printf("prefetch-wait-ms: %.1f\n", (double)st->prefetch_wait_ns / 1e6);
	fmt_ratio(b1, sizeof(b1), s->hbm);
	fmt_ratio(b2, sizeof(b2), s->ddr);
	printf("hit-ratio: hbm %s ddr %s\n", b1, b2);
	printf("evictions: hbm %" PRIu64 " ddr %" PRIu64 "\n",
	       st->hbm.evictions, st->ddr.evictions);
	printf("writebacks: %" PRIu64 " rows (%" PRIu64
	       " NVMe rows read, %" PRIu64 " from the initializer)\n",
	       st->writebacks, st->nvme_rows_read, st->rows_lazy);
	printf("rows-touched: %" PRIu64 "\n", r->rows_touched);
	printf("rows-materialized: at most %" PRIu64 " (%" PRIu64
	       " blocks written)\n",
	       r->rows_bound, r->blocks_written);
	if (!o->keyed)
		printf(
		    "disk-bytes: %" PRIu64 " (%s of %s logical)\n",
		    r->disk_bytes,
		    cli_human_bytes((double)r->disk_bytes, b1, sizeof(b1)),
		    cli_human_bytes((double)r->logical_bytes, b2, sizeof(b2)));
	else
		printf("disk-bytes: %" PRIu64 " (%s)\n", r->disk_bytes,
		       cli_human_bytes((double)r->disk_bytes, b1, sizeof(b1)));
	if (st->log_index_rows) {
		/* the store's own figures: under MPI, rank 0's store */
		uint64_t disk = r->disk_bytes;

#ifdef ET_WITH_MPI
		disk = r->mine.disk_bytes;
#endif
		printf(
		    "row-log%s: %" PRIu64 " rows live, %s of records "
		    "(disk-bytes %.2fx that); index and rows changed since "
		    "the last commit %s in memory, %.1f B a row\n",
		    o->nranks > 1 ? " (rank 0)" : "", st->log_index_rows,
		    cli_human_bytes((double)st->log_live_bytes, b1, sizeof(b1)),
		    st->log_live_bytes
			? (double)disk / (double)st->log_live_bytes
			: 0.0,
		    cli_human_bytes((double)st->log_index_bytes, b3,
				    sizeof(b3)),
		    (double)st->log_index_bytes / (double)st->log_index_rows);
	}
	if (o->keyed) {
		printf("keys-stored: %" PRIu64 " (ids with a row of their own, "
		       "all tables)\n",
		       r->keys_stored);
		printf("keys-dropped: %" PRIu64 " (updates of ids not yet "
		       "admitted)\n",
		       st->keys_dropped);
		printf("keys-expired: %" PRIu64 "\n", st->keys_expired);
		printf("keys-evicted: %" PRIu64 " (beyond --max-keys, %s)\n",
		       st->keys_evicted,
		       o->half_life ? "the lowest decayed counts"
				    : "the oldest");
		printf("keys-erased: %" PRIu64 "\n", st->keys_erased);
		printf("bytes-per-stored-key: index %.1f, disk %.1f\n",
		       s->index_per_key, s->disk_per_key);
	}
	if (o->export_delta)
		printf("deltas: %" PRIu64 " exported to %s%s, %" PRIu64
		       " rows, %" PRIu64 " tombstones, %" PRIu64
		       " bytes (%s) in %.2f s, beside training (which waited "
		       "%.2f s for them)\n",
		       tr->deltas, tr->delta_out,
		       o->nranks > 1 ? " (this rank's shard; each rank "
				       "exports its own, to rank-N)"
				     : "",
		       tr->delta_rows, tr->delta_tombs, tr->delta_bytes,
		       cli_human_bytes((double)tr->delta_bytes, b1, sizeof(b1)),
		       tr->delta_s, tr->delta_wait_s);
	printf("peak-memory: library %s, process max RSS %s\n",
	       cli_human_bytes((double)st->mem_peak_bytes, b3, sizeof(b3)),
	       cli_human_bytes((double)r->maxrss, b4, sizeof(b4)));
}

/* The summary's lines on the scores, and the checksum. */
static void report_scores(const struct trainer *tr, const struct results *r,
			  const struct summary *s)
{
	const struct opts *o = &tr->o;

	if (o->data)
		printf("malformed-lines: %" PRIu64 "\n", s->malformed);
	printf("train-loss: %.5f\n", s->steps ? tr->loss_sum / s->steps : NAN);
	printf("eval-logloss: %.5f\n", tr->eval_logloss);
	printf("eval-auc: %.5f\n", tr->eval_auc);
	if (!o->data)
		printf("teacher: logloss %.5f auc %.5f (the planted truth)\n",
		       tr->teacher_logloss, tr->teacher_auc);
	printf("weights-checksum: 0x%016" PRIx64 "\n", r->checksum);
}

void report(struct trainer *tr, const struct results *r)
{
	struct summary s;

	summarize(tr, r, &s);
	if (tr->o.json) {
		report_json(tr, r, &s);
		return;
	}
	report_run(tr, r, &s);
	report_store(tr, r, &s);
	report_scores(tr, r, &s);
}
