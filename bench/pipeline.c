/*
 * pipeline.c - `embtier-bench pipeline`: a training-shaped loop run twice
 * over the same batches, without and with et_prefetch of the next batch,
 * to show how much of the store's time prefetching hides.
 *
 * One step of batch i, every table in turn at each stage:
 *
 *   et_gather_pooled(i)           -- forward's embedding lookup
 *   [et_prefetch(i + 1)]          -- with prefetch only
 *   compute                       -- --compute-us of busy-waiting (or
 *                                    sleeping): the dense forward/backward
 *   et_update_pooled(i)           -- the embedding gradients applied
 *
 * (with prefetch, batch 0 is prefetched before the first step). The step
 * time is the wall time of all of it; the stall is the step time minus the
 * compute actually spent, i.e. the time inside the store's calls. The
 * tables are materialized first and the DDR tier is small, so misses are
 * real reads of the disk and dirty victims real writes. Each run opens a
 * fresh store and warms it up with --warmup steps (default 5) before
 * --batches measured steps (default 20).
 *
 * "The disk keeps up" when its utilization (the share of time it had I/O
 * in flight, from its own counters) stays well below 100%: then the reads
 * of batch i + 1 can finish within batch i's compute.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench.h"
#include "cli.h"
#include "progress.h"

struct pl_result {
	bool prefetch, ran;
	char note[200];
	uint64_t steps;
	double step_s, compute_s, gather_s, prefetch_s, update_s;
	double step_p50, step_p99, stall_p50, stall_p99;
	struct et_stats d; /* counters of the measured steps */
	struct disk_delta disk;
};

static void compute_for(const struct bench_opts *o, double secs)
{
	double end = now_s() + secs;

	if (o->compute == COMPUTE_SLEEP) {
		struct timespec ts = {
		    .tv_sec = (time_t)secs,
		    .tv_nsec = (long)((secs - (double)(time_t)secs) * 1e9),
		};

		while (nanosleep(&ts, &ts) && errno == EINTR && !bench_stop)
			;
		return;
	}
	while (now_s() < end)
		;
}

static void stats_diff(const struct et_stats *a, const struct et_stats *b,
		       struct et_stats *d)
{
	const uint64_t *pa = (const uint64_t *)a, *pb = (const uint64_t *)b;
	uint64_t *pd = (uint64_t *)d;

	/* et_stats is all u64 counters (and capacities, which do not move) */
	for (size_t i = 0; i < sizeof(*d) / sizeof(uint64_t); i++)
		pd[i] = pb[i] - pa[i];
}

static int prefetch_batch(et_store *s, const struct tables *tb,
			  const struct wl_batch *b, struct et_batch_ids *bi)
{
	for (uint32_t k = 0; k < b->count; k++) {
		bi[k].table = tb->sid[b->t[k].table];
		bi[k].ids = b->t[k].ids;
		bi[k].n = b->t[k].n;
	}
	return et_prefetch(s, bi, b->count);
}

/* A run's buffers: the outputs and gradients of a step, and the batch
 * handed to et_prefetch. */
struct pl_bufs {
	float *out, *grads;
	size_t cap; /* floats */
	struct et_batch_ids *bi;
};

/* The clock at each stage of a step. */
struct pl_times {
	double t0, g0, p0, c0, c1, t1;
};

/* Room in pb for the outputs of batch b; 0 or -ENOMEM. */
static int pl_fit(struct pl_bufs *pb, const struct bench_opts *o,
		  const struct wl_batch *b)
{
	size_t need = 0;

	for (uint32_t k = 0; k < b->count; k++)
		need += (size_t)b->t[k].nbags * o->dim;
	if (need <= pb->cap)
		return 0;
	free(pb->out);
	free(pb->grads);
	pb->out = malloc(need * sizeof(*pb->out));
	pb->grads = malloc(need * sizeof(*pb->grads));
	pb->cap = pb->out && pb->grads ? need : 0;
	if (!pb->out || !pb->grads)
		return -ENOMEM;
	for (size_t q = 0; q < need; q++)
		pb->grads[q] = 1e-3f;
	return 0;
}

/*
 * One step over batch cur: every table's gather, the prefetch of next
 * (unless NULL), the compute, every table's update; the clock in *tm. On
 * an error, *what names the call that failed.
 */
static int pl_step(const struct bench_opts *o, et_store *s,
		   const struct tables *tb, const struct wl_batch *cur,
		   const struct wl_batch *next, struct pl_bufs *pb,
		   struct pl_times *tm, const char **what)
{
	const struct et_update_params up = {.lr = o->lr};
	size_t off = 0;
	int ret = 0;

	tm->t0 = now_s();
	for (uint32_t k = 0; k < cur->count && !ret; k++) {
		const struct wl_table_ids *t = &cur->t[k];

		ret = et_gather_pooled(s, tb->sid[t->table], t->ids, t->offsets,
				       t->nbags, ET_POOL_SUM, pb->out + off);
		off += (size_t)t->nbags * o->dim;
	}
	tm->g0 = now_s();
	if (ret) {
		*what = "et_gather_pooled";
		return ret;
	}
	if (next) {
		ret = prefetch_batch(s, tb, next, pb->bi);
		if (ret) {
			*what = "et_prefetch";
			return ret;
		}
	}
	tm->p0 = now_s();
	tm->c0 = now_s();
	compute_for(o, (double)o->compute_us * 1e-6);
	tm->c1 = now_s();
	off = 0;
	for (uint32_t k = 0; k < cur->count && !ret; k++) {
		const struct wl_table_ids *t = &cur->t[k];

		ret = et_update_pooled(s, tb->sid[t->table], t->ids, t->offsets,
				       t->nbags, ET_POOL_SUM, pb->grads + off,
				       &up);
		off += (size_t)t->nbags * o->dim;
	}
	tm->t1 = now_s();
	if (ret)
		*what = "et_update_pooled";
	return ret;
}

/* Measured step k: its times added to r, kept in step[] and stall[]. */
static void pl_account(struct pl_result *r, double *step, double *stall,
		       uint64_t k, const struct pl_times *tm)
{
	step[k] = tm->t1 - tm->t0;
	stall[k] = (tm->t1 - tm->t0) - (tm->c1 - tm->c0);
	r->step_s += tm->t1 - tm->t0;
	r->compute_s += tm->c1 - tm->c0;
	r->gather_s += tm->g0 - tm->t0;
	r->prefetch_s += tm->p0 - tm->g0;
	r->update_s += tm->t1 - tm->c1;
	r->steps++;
}

/* One run of the loop. */
struct pl_run {
	const struct bench_opts *o;
	struct wl_gen *g;
	const struct tables *tb;
	struct disk *disk;
	et_store *s;
	struct pl_result *r;
	struct wl_batch bufs[2];
	struct pl_bufs pb;
	double *step, *stall; /* of each measured step */
	struct et_stats a;    /* when the measured steps begin */
	struct disk_sample da;
	const char *what; /* the call that failed, for the note */
};

/* The first batch into bufs[0], prefetched if asked, from batch 0. */
static int pl_first(struct pl_run *p)
{
	int ret = wl_rewind(p->g);

	if (!ret)
		ret = wl_next(p->g, &p->bufs[0]);
	if (ret <= 0) {
		p->what = "workload";
		return ret ? ret : -ENODATA;
	}
	if (p->r->prefetch) {
		p->what = "et_prefetch";
		return prefetch_batch(p->s, p->tb, &p->bufs[0], p->pb.bi);
	}
	return 0;
}

/* The warm-up steps, then the measured ones. */
static int pl_steps(struct pl_run *p)
{
	const struct bench_opts *o = p->o;
	struct wl_batch *cur = &p->bufs[0], *next = &p->bufs[1];
	uint64_t warm = o->warmup >= 0 ? (uint64_t)o->warmup : 5;
	uint64_t total = warm + o->batches;
	struct progress pg;
	int ret = 0;

	progress_start(&pg, p->r->prefetch ? "prefetch on" : "prefetch off",
		       "steps", total, o->quiet);
	for (uint64_t i = 0; i < total && !bench_stop; i++) {
		struct pl_times tm;
		bool have_next;

		if (i == warm) {
			et_get_stats(p->s, -1, &p->a);
			disk_sample(p->disk, &p->da);
		}
		/* The next batch is known ahead, as in training. */
		ret = wl_next(p->g, next);
		if (ret < 0) {
			p->what = "workload";
			break;
		}
		have_next = ret > 0;
		ret = pl_fit(&p->pb, o, cur);
		if (!ret)
			ret = pl_step(o, p->s, p->tb, cur,
				      p->r->prefetch && have_next ? next : NULL,
				      &p->pb, &tm, &p->what);
		if (ret)
			break;
		if (i >= warm)
			pl_account(p->r, p->step, p->stall, i - warm, &tm);
		progress_update(&pg, i + 1);
		{
			struct wl_batch *x = cur;

			cur = next;
			next = x;
		}
		if (!have_next)
			break;
	}
	progress_end(&pg);
	return ret;
}

/* The figures of the measured steps. */
static void pl_figures(struct pl_run *p)
{
	struct pl_result *r = p->r;
	struct disk_sample db;
	struct et_stats z;

	disk_sample(p->disk, &db);
	et_get_stats(p->s, -1, &z);
	if (!r->steps) {
		snprintf(r->note, sizeof(r->note),
			 "no measured step (a trace shorter than --warmup?)");
		return;
	}
	stats_diff(&p->a, &z, &r->d);
	disk_diff(p->disk, &p->da, &db, &r->disk);
	r->step_p50 = percentile(p->step, r->steps, 50);
	r->step_p99 = percentile(p->step, r->steps, 99);
	r->stall_p50 = percentile(p->stall, r->steps, 50);
	r->stall_p99 = percentile(p->stall, r->steps, 99);
	r->ran = true;
}

static int pl_run(const struct bench_opts *o, struct wl_gen *g,
		  struct tables *tb, struct disk *disk, bool prefetch,
		  struct pl_result *r)
{
	struct pl_run p = {.o = o, .g = g, .tb = tb, .disk = disk, .r = r};
	uint64_t total =
	    (o->warmup >= 0 ? (uint64_t)o->warmup : 5) + o->batches;
	struct et_store_config cfg;
	int ret;

	p.what = "";
	memset(r, 0, sizeof(*r));
	r->prefetch = prefetch;
	wl_batch_init(&p.bufs[0]);
	wl_batch_init(&p.bufs[1]);
	p.step = calloc(total + 1, sizeof(*p.step));
	p.stall = calloc(total + 1, sizeof(*p.stall));
	p.pb.bi = calloc(wl_tables(g) + 1, sizeof(*p.pb.bi));
	if (!p.step || !p.stall || !p.pb.bi) {
		ret = -ENOMEM;
		goto out;
	}
	store_config(o, &cfg);
	ret = tables_store(tb, &cfg, &p.s);
	if (ret)
		goto quiet_out;
	ret = pl_first(&p);
	if (!ret)
		ret = pl_steps(&p);
	if (!ret)
		pl_figures(&p);
out:
	if (ret && *p.what)
		snprintf(r->note, sizeof(r->note), "%s: %.150s", p.what,
			 p.what[0] == 'w' && ret != -ENOMEM && ret != -ENODATA
			     ? g->err
			     : et_strerror(ret));
quiet_out:
	if (p.s) {
		int r2 = et_store_close(p.s);

		if (r2 && !ret) {
			snprintf(r->note, sizeof(r->note),
				 "closing the store: %s", et_strerror(r2));
			ret = r2;
		}
	}
	free(p.step);
	free(p.stall);
	free(p.pb.bi);
	free(p.pb.out);
	free(p.pb.grads);
	wl_batch_free(&p.bufs[0]);
	wl_batch_free(&p.bufs[1]);
	return ret;
}

static double per(double v, uint64_t n)
{
	return n ? v / (double)n : 0;
}

static void pl_print_json(const struct bench_opts *o, const struct wl_gen *g,
			  const struct pl_result *r,
			  const struct disk_delta *bg)
{
	char desc[256];

	printf("{\"workload\":");
	json_str(workload_desc(o, g, desc, sizeof(desc)));
	printf(",\"compute_us\":%" PRIu64 ",\"compute\":\"%s\","
	       "\"ddr_bytes\":%" PRIu64 ",\"hbm_bytes\":%" PRIu64
	       ",\"background_disk_util\":%.4f,\"runs\":[",
	       o->compute_us, o->compute == COMPUTE_SLEEP ? "sleep" : "busy",
	       o->ddr_bytes, o->hbm_bytes, bg->util);
	for (int i = 0; i < 2; i++) {
		const struct pl_result *x = &r[i];
		double st = per(x->step_s, x->steps);
		double stall = per(x->step_s - x->compute_s, x->steps);

		printf("%s{\"prefetch\":%s,\"ran\":%s,\"note\":", i ? "," : "",
		       x->prefetch ? "true" : "false",
		       x->ran ? "true" : "false");
		json_str(x->note);
		if (x->ran)
			printf(",\"steps\":%" PRIu64 ",\"step_ms\":%.4f,"
			       "\"step_p50_ms\":%.4f,\"step_p99_ms\":%.4f,"
			       "\"compute_ms\":%.4f,\"stall_ms\":%.4f,"
			       "\"stall_p50_ms\":%.4f,\"stall_p99_ms\":%."
			       "4f,"
			       "\"stall_share\":%.6f,"
			       "\"gather_ms\":%.4f,\"prefetch_ms\":%.4f,"
			       "\"update_ms\":%.4f,"
			       "\"nvme_rows_read\":%" PRIu64
			       ",\"blocks_read\":%" PRIu64
			       ",\"blocks_written\":%" PRIu64
			       ",\"prefetch_rows\":%" PRIu64
			       ",\"prefetch_hits\":%" PRIu64
			       ",\"prefetch_late\":%" PRIu64
			       ",\"prefetch_skipped\":%" PRIu64
			       ",\"prefetch_wait_ms\":%.4f"
			       ",\"miss_wait_ms\":%.4f,\"writeback_ms\":%."
			       "4f"
			       ",\"disk_util\":%.4f,\"disk_read_iops\":%."
			       "1f"
			       ",\"disk_write_iops\":%.1f}",
			       x->steps, st * 1e3, x->step_p50 * 1e3,
			       x->step_p99 * 1e3,
			       per(x->compute_s, x->steps) * 1e3, stall * 1e3,
			       x->stall_p50 * 1e3, x->stall_p99 * 1e3,
			       st > 0 ? stall / st : 0,
			       per(x->gather_s, x->steps) * 1e3,
			       per(x->prefetch_s, x->steps) * 1e3,
			       per(x->update_s, x->steps) * 1e3,
			       x->d.nvme_rows_read, x->d.blocks_read,
			       x->d.blocks_written, x->d.prefetch_rows,
			       x->d.prefetch_hits, x->d.prefetch_late,
			       x->d.prefetch_skipped,
			       (double)x->d.prefetch_wait_ns / 1e6,
			       per((double)x->d.miss_wait_ns / 1e6, x->steps),
			       per((double)x->d.writeback_ns / 1e6, x->steps),
			       x->disk.util, x->disk.read_iops,
			       x->disk.write_iops);
		else
			putchar('}');
	}
	printf("]}\n");
}

static void pl_print_csv(const struct pl_result *r)
{
	printf("prefetch,ran,steps,step_ms,step_p50_ms,step_p99_ms,"
	       "compute_ms,stall_ms,stall_share,gather_ms,prefetch_ms,"
	       "update_ms,blocks_read,blocks_written,prefetch_hits,"
	       "prefetch_late,prefetch_skipped,prefetch_wait_ms,"
	       "disk_util\n");
	for (int i = 0; i < 2; i++) {
		const struct pl_result *x = &r[i];
		double st = per(x->step_s, x->steps);
		double stall = per(x->step_s - x->compute_s, x->steps);

		printf("%d,%d,%" PRIu64 ",%.4f,%.4f,%.4f,%.4f,%.4f,%.6f,"
		       "%.4f,%.4f,%.4f,%" PRIu64 ",%" PRIu64 ",%" PRIu64
		       ",%" PRIu64 ",%" PRIu64 ",%.4f,%.4f\n",
		       x->prefetch, x->ran, x->steps, st * 1e3,
		       x->step_p50 * 1e3, x->step_p99 * 1e3,
		       per(x->compute_s, x->steps) * 1e3, stall * 1e3,
		       st > 0 ? stall / st : 0,
		       per(x->gather_s, x->steps) * 1e3,
		       per(x->prefetch_s, x->steps) * 1e3,
		       per(x->update_s, x->steps) * 1e3, x->d.blocks_read,
		       x->d.blocks_written, x->d.prefetch_hits,
		       x->d.prefetch_late, x->d.prefetch_skipped,
		       (double)x->d.prefetch_wait_ns / 1e6, x->disk.util);
	}
}

/* The table's heading: the workload, the store, the step. */
static void pl_print_head(const struct bench_opts *o, const struct wl_gen *g,
			  const struct tables *tb, const struct disk_delta *bg)
{
	char desc[256], b1[32], b2[32], b3[32];

	printf("workload: %s\n", workload_desc(o, g, desc, sizeof(desc)));
	printf("tables:   %s, %s materialized; store: hbm %s, ddr %s, "
	       "%s\n",
	       cli_human_bytes((double)tb->total_rows * tb->row_bytes, b1,
			       sizeof(b1)),
	       o->materialize == MAT_ALL       ? "all rows"
	       : o->materialize == MAT_TOUCHED ? "touched blocks"
					       : "nothing",
	       cli_human_bytes((double)o->hbm_bytes, b2, sizeof(b2)),
	       cli_human_bytes((double)o->ddr_bytes, b3, sizeof(b3)),
	       cli_policy_name(o->policy));
	printf("step:     gather_pooled, [prefetch next], %s %.1f ms, "
	       "update_pooled (SGD lr %g); %" PRId64 " warm-up steps\n",
	       o->compute == COMPUTE_SLEEP ? "sleep" : "busy-wait",
	       (double)o->compute_us / 1e3, (double)o->lr,
	       o->warmup >= 0 ? o->warmup : 5);
	if (bg->ok)
		printf("disk:     busy %.0f%% of the time before the runs "
		       "(other processes)\n",
		       100 * bg->util);
}

/* The table's rows, a column per run. */
static void pl_print_rows(const struct pl_result *r)
{
#define PL_ROW(label, fmt, ...)                                                \
	do {                                                                   \
		printf("  %-32s", label);                                      \
		for (int i = 0; i < 2; i++) {                                  \
			const struct pl_result *x = &r[i];                     \
			char c[48];                                            \
			if (x->ran)                                            \
				snprintf(c, sizeof(c), fmt, __VA_ARGS__);      \
			else                                                   \
				snprintf(c, sizeof(c), "-");                   \
			printf(" %14s", c);                                    \
		}                                                              \
		putchar('\n');                                                 \
	} while (0)
	PL_ROW("steps", "%" PRIu64, x->steps);
	PL_ROW("step ms (mean)", "%.2f", per(x->step_s, x->steps) * 1e3);
	PL_ROW("step ms p50 / p99", "%.1f / %.1f", x->step_p50 * 1e3,
	       x->step_p99 * 1e3);
	PL_ROW("compute ms", "%.2f", per(x->compute_s, x->steps) * 1e3);
	PL_ROW("stall ms (store calls)", "%.2f",
	       per(x->step_s - x->compute_s, x->steps) * 1e3);
	PL_ROW("stall ms p50 / p99", "%.1f / %.1f", x->stall_p50 * 1e3,
	       x->stall_p99 * 1e3);
	PL_ROW("stall share of step", "%.1f%%",
	       x->step_s > 0 ? 100 * (x->step_s - x->compute_s) / x->step_s
			     : 0);
	PL_ROW("  in gather ms", "%.2f", per(x->gather_s, x->steps) * 1e3);
	PL_ROW("  in prefetch ms", "%.2f", per(x->prefetch_s, x->steps) * 1e3);
	PL_ROW("  in update ms", "%.2f", per(x->update_s, x->steps) * 1e3);
	/* the store's own clocks (et_stats): what of the stall is waiting
	 * for the disk, writing back, and memory work (the rest) */
	PL_ROW("  miss wait ms", "%.2f",
	       per((double)x->d.miss_wait_ns / 1e6, x->steps));
	PL_ROW("  write-back ms", "%.2f",
	       per((double)x->d.writeback_ns / 1e6, x->steps));
	PL_ROW("  hit work ms", "%.2f",
	       per(x->step_s - x->compute_s -
		       (double)(x->d.miss_wait_ns + x->d.writeback_ns) / 1e9,
		   x->steps) *
		   1e3);
	PL_ROW("distinct lookups/step", "%.0f",
	       per((double)x->d.unique, x->steps));
	PL_ROW("NVMe rows read/step", "%.0f",
	       per((double)x->d.nvme_rows_read, x->steps));
	PL_ROW("blocks written/step", "%.0f",
	       per((double)x->d.blocks_written, x->steps));
	PL_ROW("prefetch rows/step", "%.0f",
	       per((double)x->d.prefetch_rows, x->steps));
	PL_ROW("prefetch hits/step", "%.0f",
	       per((double)x->d.prefetch_hits, x->steps));
	PL_ROW("prefetch late/step", "%.0f",
	       per((double)x->d.prefetch_late, x->steps));
	PL_ROW("prefetch skipped/step", "%.0f",
	       per((double)x->d.prefetch_skipped, x->steps));
	PL_ROW("prefetch wait ms/step", "%.2f",
	       per((double)x->d.prefetch_wait_ns / 1e6, x->steps));
	PL_ROW("device reads/s", "%.0f", x->disk.read_iops);
	PL_ROW("device writes/s", "%.0f", x->disk.write_iops);
	PL_ROW("device utilization", "%.0f%%", 100 * x->disk.util);
#undef PL_ROW
}

static void pl_print(const struct bench_opts *o, const struct wl_gen *g,
		     const struct tables *tb, const struct pl_result *r,
		     const struct disk_delta *bg)
{
	const char *name[2] = {"prefetch off", "prefetch on"};

	if (o->format == FMT_JSON) {
		pl_print_json(o, g, r, bg);
		return;
	}
	if (o->format == FMT_CSV) {
		pl_print_csv(r);
		return;
	}
	pl_print_head(o, g, tb, bg);
	printf("\n  %-32s %14s %14s\n", "", name[0], name[1]);
	pl_print_rows(r);
	for (int i = 0; i < 2; i++)
		if (r[i].note[0])
			printf("  %s: %s\n", name[i], r[i].note);
	if (r[0].ran && r[1].ran && r[1].steps && r[0].steps) {
		double s0 = per(r[0].step_s, r[0].steps);
		double s1 = per(r[1].step_s, r[1].steps);
		double share =
		    100 * (r[1].step_s - r[1].compute_s) / r[1].step_s;

		printf("\n  prefetch: step time %.2fx of without; stall %.1f%% "
		       "of the step %s (goal <= 10%% when the disk keeps up; "
		       "device busy %.0f%% of the time)\n",
		       s1 / s0, share, share <= 10 ? "met" : "NOT met",
		       100 * r[1].disk.util);
	}
}

int cmd_pipeline(const struct bench_opts *o)
{
	struct bench_opts oo = *o;
	struct pl_result r[2] = {0};
	struct tables tb;
	struct disk disk;
	struct disk_delta bg;
	struct wl_gen g;
	int ret;

	if (!oo.batches)
		oo.batches = 20;
	if (wl_open(&g, &oo.wl)) {
		cli_error("workload: %s", g.err);
		return CLI_EXIT_FAIL;
	}
	ret = tables_setup(
	    &tb, &oo, &g,
	    oo.wl.kind == WL_TRACE
		? 0
		: oo.batches + 1 + (oo.warmup >= 0 ? (uint64_t)oo.warmup : 5));
	if (ret) {
		wl_close(&g);
		return CLI_EXIT_FAIL;
	}
	disk_open(&disk, tb.dir);
	disk_background(&disk, 0.5, &bg);
	ret = pl_run(&oo, &g, &tb, &disk, false, &r[0]);
	if (!bench_stop)
		ret |= pl_run(&oo, &g, &tb, &disk, true, &r[1]);
	if (!bench_stop)
		pl_print(&oo, &g, &tb, r, &bg);
	for (int i = 0; i < 2; i++)
		if (r[i].note[0] && !r[i].ran)
			cli_error("%s: %s", i ? "prefetch on" : "prefetch off",
				  r[i].note);
	tables_free(&tb);
	wl_close(&g);
	return ret || bench_stop ? CLI_EXIT_FAIL : CLI_EXIT_OK;
}
