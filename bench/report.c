/*
 * report.c - the default subcommand's report: a table for people (one
 * column per system, then the limits and the ratios to them), or one JSON
 * object, or CSV rows, on stdout.
 *
 * Rates are over the summed batch times of the measured phase (time in
 * the systems' calls only, not generating ids). "Served from" shares are
 * of distinct ids per call (the store's unique lookups). Device figures
 * come from the disk's own counters over the measured phase: reads/s,
 * mean read latency, and queue depth both as reads/s x latency (Little)
 * and as the kernel's average queue size (iostat's aqu-sz).
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "bench.h"
#include "cli.h"

static double rate(double n, double s)
{
	return s > 0 ? n / s : 0;
}

static double share(uint64_t a, uint64_t b)
{
	return b ? (double)a / (double)b : 0;
}

const char *workload_desc(const struct bench_opts *o, const struct wl_gen *g,
			  char *buf, size_t len)
{
	char kind[96];
	char rows[32];
	char dims[BENCH_MAX_DIMS * 7];

	opt_dims_str(o, dims, sizeof(dims));
	switch (o->wl.kind) {
	case WL_UNIFORM:
		snprintf(kind, sizeof(kind), "uniform");
		break;
	case WL_ZIPF:
		snprintf(kind, sizeof(kind), "zipf s=%.3g", o->wl.zipf_s);
		break;
	case WL_SHIFT:
		snprintf(kind, sizeof(kind),
			 "shifting zipf s=%.3g (ranks rotate by %" PRIu64
			 " every %u batches)",
			 o->wl.zipf_s, g->p.shift_by, o->wl.shift_every);
		break;
	default:
		snprintf(kind, sizeof(kind), "trace %s", o->wl.trace);
		break;
	}
	if (o->wl.kind == WL_TRACE) {
		uint32_t l = o->wl.pooling ? o->wl.pooling : g->tr.pooling;

		if (l)
			snprintf(buf, len,
				 "%s: %u tables, dim %s %s, bags of %u", kind,
				 wl_tables(g), dims, cli_dtype_name(o->dtype),
				 l);
		else
			snprintf(buf, len,
				 "%s: %u tables, dim %s %s, one bag per table",
				 kind, wl_tables(g), dims,
				 cli_dtype_name(o->dtype));
		return buf;
	}
	cli_human_count((double)o->wl.rows, rows, sizeof(rows));
	snprintf(buf, len,
		 "%s: %u tables x %s rows, dim %s %s, batch %u x pooling %u "
		 "= %" PRIu64 " ids",
		 kind, o->wl.tables, rows, dims, cli_dtype_name(o->dtype),
		 o->wl.batch, o->wl.pooling,
		 (uint64_t)o->wl.batch * o->wl.pooling * o->wl.tables);
	return buf;
}

void json_str(const char *s)
{
	putchar('"');
	for (; s && *s; s++) {
		if (*s == '"' || *s == '\\')
			printf("\\%c", *s);
		else if ((unsigned char)*s < 0x20)
			printf("\\u%04x", *s);
		else
			putchar(*s);
	}
	putchar('"');
}

/* ---------------------------------------------------------------- figures */

struct fig {
	double ids_s, gbs, uniq_b, reads_s, io_wait_pct;
	double hbm, ddr, nvme, init, cache;
};

static void figures(const struct sys_result *r, double dim, struct fig *f)
{
	memset(f, 0, sizeof(*f));
	f->ids_s = rate((double)r->ids, r->seconds);
	f->gbs = f->ids_s * dim * 4 / 1e9;
	f->uniq_b = r->batches ? (double)r->unique / (double)r->batches : 0;
	f->reads_s = rate((double)r->reads, r->seconds);
	f->io_wait_pct = r->seconds > 0 ? 100 * r->io_wait_s / r->seconds : 0;
	f->hbm = share(r->hbm_hits, r->unique);
	f->ddr = share(r->ddr_hits, r->unique);
	f->nvme = share(r->nvme_rows, r->unique);
	f->init = share(r->lazy_rows, r->unique);
	f->cache = share(r->cache_hits, r->cache_hits + r->cache_misses);
}

/* The mean dim of the run's tables: GB/s figures count ids x dim x 4. */
static double mdim(const struct run_report *rp)
{
	return opt_mean_dim(rp->o, wl_tables(rp->g));
}

/* Capacity efficiency of tier i (0 HBM, 1 DDR) at the end of the run: row
 * bytes cached / tier bytes; -1 if the tier does not exist. */
static double cap_eff(const struct sys_result *r, int i)
{
	return r->capacity_bytes[i]
		   ? (double)r->row_bytes[i] / (double)r->capacity_bytes[i]
		   : -1;
}

/* The disk's ceiling at the store's depth: the mean of the loops before
 * and after the store's run (or the one that ran). */
static double raw_iops(const struct run_report *rp)
{
	if (rp->ul_pre.ran && rp->ul.ran)
		return (rp->ul_pre.iops + rp->ul.iops) / 2;
	return rp->ul.ran ? rp->ul.iops : rp->ul_pre.iops;
}

struct ratios {
	double gather, gather_pf, miss, miss_dev, pread, rocksdb;
	double miss_call, miss_call_dev; /* over raw io_uring in calls */
};

static void compute_ratios(const struct run_report *rp, struct ratios *q)
{
	const struct sys_result *e = &rp->sys[0];
	struct fig f, p, k;

	memset(q, 0, sizeof(*q));
	figures(e, mdim(rp), &f);
	figures(&rp->sys[1], mdim(rp), &p);
	figures(&rp->sys[2], mdim(rp), &k);
	if (rp->gl.ran && rp->gl.rows_s > 0) {
		q->gather = f.ids_s / rp->gl.rows_s;
		q->gather_pf = f.ids_s / rp->gl.rows_s_pf;
	}
	if (rp->ul.ran && rp->ul.iops > 0) {
		double iops = raw_iops(rp);

		q->miss = f.reads_s / iops;
		if (e->disk.ok)
			q->miss_dev =
			    rate((double)e->disk.reads, e->seconds) / iops;
	}
	if (rp->ul_call.ran && rp->ul_call.iops > 0) {
		q->miss_call = f.reads_s / rp->ul_call.iops;
		if (e->disk.ok)
			q->miss_call_dev =
			    rate((double)e->disk.reads, e->seconds) /
			    rp->ul_call.iops;
	}
	if (rp->sys[1].ran && p.ids_s > 0)
		q->pread = f.ids_s / p.ids_s;
	if (rp->sys[2].ran && k.ids_s > 0)
		q->rocksdb = f.ids_s / k.ids_s;
}

/* ------------------------------------------------------------------ table */

#define NSYS 3

static void row(const char *label, const struct run_report *rp,
		const char *const cell[NSYS])
{
	printf("  %-30s", label);
	for (int i = 0; i < NSYS; i++)
		if (rp->sys[i].ran)
			printf(" %14s", cell[i]);
	putchar('\n');
}

typedef void (*cell_fn)(const struct sys_result *r, const struct fig *f,
			double dim, char *buf, size_t len);

static void line(const char *label, const struct run_report *rp, cell_fn fn)
{
	char c[NSYS][64];
	const char *cp[NSYS];

	for (int i = 0; i < NSYS; i++) {
		struct fig f;

		c[i][0] = '\0';
		figures(&rp->sys[i], mdim(rp), &f);
		if (rp->sys[i].ran)
			fn(&rp->sys[i], &f, mdim(rp), c[i], sizeof(c[i]));
		cp[i] = c[i];
	}
	row(label, rp, cp);
}

#define CELL(name, body)                                                       \
	static void name(const struct sys_result *r, const struct fig *f,      \
			 double dim, char *b, size_t n)                        \
	{                                                                      \
		(void)r;                                                       \
		(void)f;                                                       \
		(void)dim;                                                     \
		body;                                                          \
	}

static const char *pct(double v, char *b, size_t n)
{
	snprintf(b, n, "%.1f%%", 100 * v);
	return b;
}

CELL(c_batches, snprintf(b, n, "%" PRIu64, r->batches))
CELL(c_ids, {
	char h[32];
	snprintf(b, n, "%s", cli_human_count(f->ids_s, h, sizeof(h)));
})
CELL(c_gbs, snprintf(b, n, "%.2f", f->gbs))
CELL(c_uniq, snprintf(b, n, "%.0f", f->uniq_b))
CELL(c_p50, snprintf(b, n, "%.2f", r->p50_ms))
CELL(c_p99, snprintf(b, n, "%.2f", r->p99_ms))
CELL(c_hbm, if (r->has_tiers) pct(f->hbm, b, n); else snprintf(b, n, "-"))
CELL(c_ddr, if (r->has_tiers) pct(f->ddr, b, n); else snprintf(b, n, "-"))
CELL(c_nvme, if (r->has_tiers) pct(f->nvme, b, n); else snprintf(b, n, "-"))
CELL(c_init, if (r->has_tiers) pct(f->init, b, n); else snprintf(b, n, "-"))
CELL(c_cache, if (r->has_cache) pct(f->cache, b, n); else snprintf(b, n, "-"))
CELL(c_eff_hbm, if (r->has_tiers && cap_eff(r, 0) >= 0)
		    snprintf(b, n, "%.3f", cap_eff(r, 0));
     else snprintf(b, n, "-"))
CELL(c_eff_ddr, if (r->has_tiers && cap_eff(r, 1) >= 0)
		    snprintf(b, n, "%.3f", cap_eff(r, 1));
     else snprintf(b, n, "-"))

/* The calls' time: hit work / miss wait / write-back, in % of it. */
static void time_split(const struct sys_result *r, double *hit, double *miss,
		       double *wb)
{
	double t = r->seconds > 0 ? r->seconds : 1;
	double h = r->seconds - r->miss_s - r->wb_s;

	*hit = 100 * (h > 0 ? h : 0) / t;
	*miss = 100 * r->miss_s / t;
	*wb = 100 * r->wb_s / t;
}

static void split_cell(const struct sys_result *r, char *b, size_t n)
{
	double h, m, w;

	if (!r->has_tiers) {
		snprintf(b, n, "-");
		return;
	}
	time_split(r, &h, &m, &w);
	snprintf(b, n, "%.0f / %.0f / %.0f%%", h, m, w);
}

CELL(c_split, split_cell(r, b, n))
CELL(c_reads, snprintf(b, n, "%" PRIu64, r->reads))
CELL(c_reads_s, {
	char h[32];
	snprintf(b, n, "%s", cli_human_count(f->reads_s, h, sizeof(h)));
})
CELL(c_dev_iops, {
	char h[32];
	if (r->disk.ok)
		snprintf(b, n, "%s",
			 cli_human_count(r->disk.read_iops, h, sizeof(h)));
	else
		snprintf(b, n, "n/a");
})
CELL(c_dev_lat, if (r->disk.ok) snprintf(b, n, "%.3f", r->disk.read_lat_ms);
     else snprintf(b, n, "n/a"))
CELL(c_dev_qd, if (r->disk.ok) snprintf(b, n, "%.1f", r->disk.read_qd);
     else snprintf(b, n, "n/a"))
CELL(c_dev_aqu, if (r->disk.ok) snprintf(b, n, "%.1f", r->disk.qd);
     else snprintf(b, n, "n/a"))
CELL(c_written, {
	char h[32];
	snprintf(b, n, "%s",
		 cli_human_bytes((double)r->bytes_written, h, sizeof(h)));
})
CELL(c_wait, snprintf(b, n, "%.2f (%.0f%%)", r->io_wait_s, f->io_wait_pct))
CELL(c_out, snprintf(b, n, "%s",
		     r->outputs == 0  ? "reference"
		     : r->outputs > 0 ? "same"
				      : "DIFFER"))

static const char *goal(double v, double want, char *b, size_t n)
{
	if (v <= 0)
		snprintf(b, n, "n/a");
	else
		snprintf(b, n, "%s (goal >= %.2f)",
			 v >= want ? "met" : "NOT met", want);
	return b;
}

/* The table's heading: the workload, the tables, the store, the run. */
static void report_head(const struct run_report *rp)
{
	const struct bench_opts *o = rp->o;
	const struct sys_result *e = &rp->sys[0];
	char w[256], b1[32], b2[32];

	printf("workload: %s\n", workload_desc(o, rp->g, w, sizeof(w)));
	printf("tables:   %s in %s, %s materialized (%s on disk)\n",
	       cli_human_bytes((double)rp->tb->total_rows * rp->tb->row_bytes,
			       b1, sizeof(b1)),
	       rp->tb->dir,
	       o->materialize == MAT_ALL       ? "all rows"
	       : o->materialize == MAT_TOUCHED ? "touched blocks"
					       : "nothing",
	       cli_human_bytes((double)rp->tb->blocks_written *
				   rp->tb->info.block_size,
			       b2, sizeof(b2)));
	printf("store:    hbm %s, ddr %s, %s, %u ways, io depth %u, %s\n",
	       cli_human_bytes((double)o->hbm_bytes, b1, sizeof(b1)),
	       cli_human_bytes((double)o->ddr_bytes, b2, sizeof(b2)),
	       cli_policy_name(o->policy), o->ways ? o->ways : 16,
	       o->io_depth ? o->io_depth : 128,
	       o->op == OP_POOLED ? "et_gather_pooled (sum)" : "et_gather");
	printf("run:      %" PRIu64 " warm-up batches, %" PRIu64
	       " measured (%.2f s in the store's calls)%s\n",
	       rp->warmup, e->batches, e->seconds,
	       o->update ? ", each gather followed by its update" : "");
	if (rp->background.ok)
		printf(
		    "disk:     busy %.0f%% of the time before the run (other "
		    "processes: %.0f reads/s, %.0f writes/s)\n",
		    100 * rp->background.util, rp->background.read_iops,
		    rp->background.write_iops);
	putchar('\n');
}

/* A column per system, then the systems' notes. */
static void report_systems(const struct run_report *rp)
{
	const struct sys_result *e = &rp->sys[0];
	const char *names[NSYS];

	for (int i = 0; i < NSYS; i++)
		names[i] = rp->sys[i].name;
	row("", rp, names);
	line("batches", rp, c_batches);
	line("ids/s", rp, c_ids);
	line("GB/s (ids x dim x 4 B)", rp, c_gbs);
	line("unique ids/batch", rp, c_uniq);
	line("batch p50 ms", rp, c_p50);
	line("batch p99 ms", rp, c_p99);
	line("served from HBM", rp, c_hbm);
	line("served from DDR", rp, c_ddr);
	line("served from NVMe", rp, c_nvme);
	line("served from init (no I/O)", rp, c_init);
	line("cache hit ratio", rp, c_cache);
	line("capacity efficiency HBM", rp, c_eff_hbm);
	line("capacity efficiency DDR", rp, c_eff_ddr);
	line("reads issued", rp, c_reads);
	line("reads issued/s", rp, c_reads_s);
	line("device reads/s", rp, c_dev_iops);
	line("device read latency ms", rp, c_dev_lat);
	line("device QD (reads/s x lat)", rp, c_dev_qd);
	line("device aqu-sz", rp, c_dev_aqu);
	line("bytes written back", rp, c_written);
	line("I/O wait thread-s", rp, c_wait);
	line("time: hit / miss / write-back", rp, c_split);
	line("outputs", rp, c_out);
	for (int i = 0; i < NSYS; i++)
		if (rp->sys[i].note[0])
			printf("  %s: %s\n", rp->sys[i].name, rp->sys[i].note);
	if (e->conflicts)
		printf("  embtier: %" PRIu64 " set-conflict misses\n",
		       e->conflicts);
	printf("  (reads issued: embtier blocks read, pread preads, rocksdb "
	       "block-cache misses; cache hit ratio: pread rows, rocksdb "
	       "4 KiB blocks)\n");
}

/* The raw gather and io_uring loops of the same run. */
static void report_limits(const struct run_report *rp)
{
	const struct bench_opts *o = rp->o;
	char b1[32], b2[32], b3[32];

	printf("\nlimits, same run:\n");
	if (rp->gl.ran)
		printf(
		    "  raw gather   %s rows/s, %.2f GB/s: the same ids hashed "
		    "over a %s buffer, %s, 1 thread; with software prefetch "
		    "%s rows/s, %.2f GB/s\n",
		    cli_human_count(rp->gl.rows_s, b1, sizeof(b1)), rp->gl.gbs,
		    cli_human_bytes((double)rp->gl.buf_bytes, b2, sizeof(b2)),
		    o->op == OP_POOLED ? "summed into bags" : "memcpy",
		    cli_human_count(rp->gl.rows_s_pf, b3, sizeof(b3)),
		    rp->gl.gbs_pf);
	else if (o->limits)
		printf("  raw gather   did not run\n");
	for (uint32_t i = 0; i <= o->n_limit_qd + 1; i++) {
		const struct uring_limit *u = i == 0   ? &rp->ul_pre
					      : i == 1 ? &rp->ul
						       : &rp->ul_qd[i - 2];
		const char *when = i == 0   ? "before the store, "
				   : i == 1 ? "after the store, "
					    : "";

		if (!o->limits || (i == 0 && !u->ran && !u->note[0]))
			continue;
		if (u->ran)
			printf(
			    "  raw io_uring %s%s reads/s (%.0f MB/s), QD %u, "
			    "%u B O_DIRECT random reads over %s written "
			    "blocks: latency mean %.0f us, p50 %.0f, p99 "
			    "%.0f; QD by Little %.1f%s%s\n",
			    when, cli_human_count(u->iops, b1, sizeof(b1)),
			    u->mbs, u->qd, u->block_size,
			    cli_human_count((double)u->blocks, b2, sizeof(b2)),
			    u->lat_mean_us, u->lat_p50_us, u->lat_p99_us,
			    u->qd_little, u->note[0] ? "; " : "", u->note);
		else
			printf("  raw io_uring %sQD %u did not run%s%s\n", when,
			       u->qd, u->note[0] ? ": " : "", u->note);
	}
	if (rp->ul_call.ran) {
		const struct uring_limit *u = &rp->ul_call;

		printf("  raw io_uring in calls of %u reads (the store's mean "
		       "blocks read a call), QD %u, each call waited for "
		       "whole: %s reads/s in %" PRIu64 " calls of %.2f ms; "
		       "latency mean %.0f us, p99 %.0f%s%s\n",
		       u->per_call, u->qd,
		       cli_human_count(u->iops, b1, sizeof(b1)), u->calls,
		       u->calls ? u->seconds / (double)u->calls * 1e3 : 0,
		       u->lat_mean_us, u->lat_p99_us, u->note[0] ? "; " : "",
		       u->note);
	}
	if (!o->limits)
		printf("  (not measured: --no-limits)\n");
}

/* Each of the store's figures over its limit, judged where the run is
 * bound by what the limit measures. */
static void report_ratios(const struct run_report *rp)
{
	const struct sys_result *e = &rp->sys[0];
	struct ratios q;
	struct fig fe;
	char w[256], b1[32], b2[32], b3[32], g[64];

	compute_ratios(rp, &q);
	figures(e, mdim(rp), &fe);
	printf("\nratios:\n");
	/* A ratio to a limit says something only when the run is bound by
	 * what the limit measures; otherwise it is shown, not judged. */
	if (q.gather > 0) {
		bool fit = fe.ddr + fe.hbm >= 0.95;

		printf(
		    "  DDR-hit gather  embtier ids/s / raw gather = %.2f  %s; "
		    "/ prefetching raw gather = %.2f; %s of lookups hit "
		    "DDR/HBM%s\n",
		    q.gather,
		    fit ? goal(q.gather, 0.70, g, sizeof(g))
			: "(goal >= 0.70 not judged)",
		    q.gather_pf, pct(fe.ddr + fe.hbm, b3, sizeof(b3)),
		    fit ? "" : ": not a DDR-hit run");
	}
	if (q.miss > 0) {
		bool bound = fe.nvme >= 0.9;

		printf(
		    "  NVMe miss path  embtier blocks/s / raw io_uring (mean "
		    "of before and after, %s reads/s) = %.2f  %s; device "
		    "reads/s ratio %.2f; %s of lookups went to NVMe%s\n",
		    cli_human_count(raw_iops(rp), b1, sizeof(b1)), q.miss,
		    bound ? goal(q.miss, 0.85, g, sizeof(g))
			  : "(goal >= 0.85 not judged)",
		    q.miss_dev, pct(fe.nvme, b3, sizeof(b3)),
		    bound ? "" : ": not a miss-bound run");
	}
	if (q.miss_call > 0)
		printf("  in calls        embtier blocks/s / raw io_uring in "
		       "calls of the store's size = %.2f; device reads/s "
		       "%.2f (raw in calls / raw = %.2f: what waiting for each "
		       "call's last read costs)\n",
		       q.miss_call, q.miss_call_dev,
		       raw_iops(rp) > 0 ? rp->ul_call.iops / raw_iops(rp) : 0);
	if (rp->upd.ran) {
		const struct sys_result *u = &rp->upd;
		double ru =
		    u->seconds > 0 ? (double)u->nvme_rows / u->seconds : 0;
		double re =
		    e->seconds > 0 ? (double)e->nvme_rows / e->seconds : 0;
		char g2[32];
		struct fig fu;

		figures(u, mdim(rp), &fu);
		printf("  training path   embtier ids/s with an update after "
		       "each gather / without = %.2f  %s (%s vs %s ids/s; "
		       "rows read from NVMe %s/s vs %s/s; with updates %s "
		       "written back, batch p50 %.2f ms, p99 %.2f ms)\n",
		       fe.ids_s > 0 ? fu.ids_s / fe.ids_s : 0,
		       fe.ids_s > 0
			   ? goal(fu.ids_s / fe.ids_s, 0.8, g, sizeof(g))
			   : "",
		       cli_human_count(fu.ids_s, b1, sizeof(b1)),
		       cli_human_count(fe.ids_s, b2, sizeof(b2)),
		       cli_human_count(ru, b3, sizeof(b3)),
		       cli_human_count(re, g2, sizeof(g2)),
		       cli_human_bytes((double)u->bytes_written, w, sizeof(w)),
		       u->p50_ms, u->p99_ms);
	}
	if (q.pread > 0)
		printf("  vs pread        embtier ids/s / pread = %.2f\n",
		       q.pread);
	if (q.rocksdb > 0)
		printf("  vs RocksDB      embtier ids/s / rocksdb = %.2f  %s\n",
		       q.rocksdb, goal(q.rocksdb, 5, g, sizeof(g)));
}

static void report_table(const struct run_report *rp)
{
	report_head(rp);
	report_systems(rp);
	report_limits(rp);
	report_ratios(rp);
}

/* ------------------------------------------------------------------- json */

static void json_sys(const struct sys_result *r, double dim)
{
	struct fig f;

	figures(r, dim, &f);
	printf("{\"name\":\"%s\",\"ran\":%s,\"note\":", r->name,
	       r->ran ? "true" : "false");
	json_str(r->note);
	if (!r->ran) {
		putchar('}');
		return;
	}
	printf(",\"batches\":%" PRIu64 ",\"planned_batches\":%" PRIu64
	       ",\"ids\":%" PRIu64 ",\"seconds\":%.6f,\"ids_per_s\":%.1f"
	       ",\"gb_per_s\":%.4f,\"unique_per_batch\":%.1f"
	       ",\"batch_ms\":{\"mean\":%.4f,\"p50\":%.4f,\"p99\":%.4f}",
	       r->batches, r->planned, r->ids, r->seconds, f.ids_s, f.gbs,
	       f.uniq_b, r->mean_ms, r->p50_ms, r->p99_ms);
	if (r->has_tiers)
		printf(",\"served\":{\"hbm\":%.6f,\"ddr\":%.6f,\"nvme\":%.6f,"
		       "\"init\":%.6f},\"conflict_misses\":%" PRIu64,
		       f.hbm, f.ddr, f.nvme, f.init, r->conflicts);
	if (r->has_cache)
		printf(",\"cache_hit_ratio\":%.6f", f.cache);
	if (r->has_tiers)
		printf(",\"time_s\":{\"hit\":%.6f,\"miss_wait\":%.6f,"
		       "\"writeback\":%.6f}",
		       r->seconds - r->miss_s - r->wb_s, r->miss_s, r->wb_s);
	if (r->has_tiers)
		printf(",\"capacity_efficiency\":{\"hbm\":%.6f,\"ddr\":%.6f}"
		       ",\"row_bytes\":{\"hbm\":%" PRIu64 ",\"ddr\":%" PRIu64
		       "}",
		       cap_eff(r, 0), cap_eff(r, 1), r->row_bytes[0],
		       r->row_bytes[1]);
	printf(",\"reads\":%" PRIu64 ",\"reads_per_s\":%.1f"
	       ",\"bytes_read\":%" PRIu64 ",\"bytes_written\":%" PRIu64
	       ",\"writebacks\":%" PRIu64 ",\"io_wait_s\":%.6f",
	       r->reads, f.reads_s, r->bytes_read, r->bytes_written,
	       r->writebacks, r->io_wait_s);
	if (r->disk.ok)
		printf(",\"device\":{\"reads\":%" PRIu64 ",\"writes\":%" PRIu64
		       ",\"read_iops\":%.1f,\"read_latency_ms\":%.4f"
		       ",\"read_qd\":%.2f,\"aqu_sz\":%.2f}",
		       r->disk.reads, r->disk.writes, r->disk.read_iops,
		       r->disk.read_lat_ms, r->disk.read_qd, r->disk.qd);
	printf(",\"outputs\":\"%s\"}", r->outputs == 0	? "reference"
				       : r->outputs > 0 ? "same"
							: "differ");
}

static void json_uring(const struct uring_limit *u)
{
	if (!u->ran) {
		printf("null");
		return;
	}
	printf("{\"qd\":%u,\"block_size\":%u,\"reads\":%" PRIu64
	       ",\"seconds\":%.6f,\"iops\":%.1f,\"mb_per_s\":%.2f"
	       ",\"latency_us\":{\"mean\":%.2f,\"p50\":%.2f,\"p99\":%.2f}"
	       ",\"qd_little\":%.2f,\"note\":",
	       u->qd, u->block_size, u->reads, u->seconds, u->iops, u->mbs,
	       u->lat_mean_us, u->lat_p50_us, u->lat_p99_us, u->qd_little);
	json_str(u->note);
	putchar('}');
}

static void report_json(const struct run_report *rp)
{
	const struct bench_opts *o = rp->o;
	struct ratios q;
	char w[256];

	compute_ratios(rp, &q);
	printf("{\"workload\":{\"desc\":");
	json_str(workload_desc(o, rp->g, w, sizeof(w)));
	printf(",\"kind\":\"%s\",\"tables\":%u,\"dim\":%u,\"dims\":[%s],"
	       "\"dtype\":\"%s\",\"seed\":%" PRIu64 "},",
	       wl_kind_name(o->wl.kind), wl_tables(rp->g), o->dim,
	       opt_dims_str(o, w, sizeof(w)), cli_dtype_name(o->dtype),
	       o->wl.seed);
	printf("\"store\":{\"hbm_bytes\":%" PRIu64 ",\"ddr_bytes\":%" PRIu64
	       ",\"policy\":\"%s\",\"ways\":%u,\"io_depth\":%u,\"op\":\"%s\","
	       "\"update\":%s},",
	       o->hbm_bytes, o->ddr_bytes, cli_policy_name(o->policy),
	       o->ways ? o->ways : 16, o->io_depth ? o->io_depth : 128,
	       o->op == OP_POOLED ? "pooled" : "gather",
	       o->update ? "true" : "false");
	printf("\"tables\":{\"bytes\":%" PRIu64 ",\"disk_bytes\":%" PRIu64
	       ",\"materialize\":\"%s\",\"setup_s\":%.3f},",
	       rp->tb->total_rows * rp->tb->row_bytes,
	       rp->tb->blocks_written * rp->tb->info.block_size,
	       o->materialize == MAT_ALL       ? "all"
	       : o->materialize == MAT_TOUCHED ? "touched"
					       : "none",
	       rp->tb->setup_s);
	printf("\"background_disk\":{\"util\":%.4f,\"read_iops\":%.1f,"
	       "\"write_iops\":%.1f},",
	       rp->background.util, rp->background.read_iops,
	       rp->background.write_iops);
	printf("\"warmup_batches\":%" PRIu64 ",\"systems\":[", rp->warmup);
	for (int i = 0; i < NSYS; i++) {
		if (i)
			putchar(',');
		json_sys(&rp->sys[i], mdim(rp));
	}
	printf("],\"update_run\":");
	if (rp->upd.ran)
		json_sys(&rp->upd, mdim(rp));
	else
		printf("null");
	printf(",\"limits\":{\"gather\":");
	if (rp->gl.ran)
		printf(
		    "{\"rows\":%" PRIu64 ",\"seconds\":%.6f,\"rows_per_s\":%.1f"
		    ",\"gb_per_s\":%.4f,\"prefetch_rows_per_s\":%.1f,"
		    "\"prefetch_gb_per_s\":%.4f,\"buffer_bytes\":%" PRIu64 "}",
		    rp->gl.rows, rp->gl.seconds, rp->gl.rows_s, rp->gl.gbs,
		    rp->gl.rows_s_pf, rp->gl.gbs_pf, rp->gl.buf_bytes);
	else
		printf("null");
	printf(",\"io_uring_before\":");
	json_uring(&rp->ul_pre);
	printf(",\"io_uring\":");
	json_uring(&rp->ul);
	printf(",\"io_uring_mean_iops\":%.1f", raw_iops(rp));
	printf(",\"io_uring_in_calls\":");
	json_uring(&rp->ul_call);
	if (rp->ul_call.ran)
		printf(
		    ",\"io_uring_call_reads\":%u,\"io_uring_calls\":%" PRIu64,
		    rp->ul_call.per_call, rp->ul_call.calls);
	printf(",\"io_uring_at_qd\":[");
	for (uint32_t i = 0; i < o->n_limit_qd; i++) {
		if (i)
			putchar(',');
		json_uring(&rp->ul_qd[i]);
	}
	putchar(']');
	printf("},\"ratios\":{\"ddr_gather\":%.4f,"
	       "\"ddr_gather_vs_prefetching\":%.4f,\"miss_path\":%.4f,"
	       "\"miss_path_device\":%.4f,\"miss_path_in_calls\":%.4f,"
	       "\"miss_path_in_calls_device\":%.4f,\"vs_pread\":%.4f,"
	       "\"vs_rocksdb\":%.4f}}\n",
	       q.gather, q.gather_pf, q.miss, q.miss_dev, q.miss_call,
	       q.miss_call_dev, q.pread, q.rocksdb);
}

/* -------------------------------------------------------------------- csv */

static void report_csv(const struct run_report *rp)
{
	printf("system,ran,batches,ids,seconds,ids_per_s,gb_per_s,"
	       "unique_per_batch,p50_ms,p99_ms,hbm,ddr,nvme,init,cache_hit,"
	       "reads,reads_per_s,dev_read_iops,dev_read_lat_ms,dev_read_qd,"
	       "dev_aqu_sz,bytes_written,io_wait_s,outputs\n");
	for (int i = 0; i <= NSYS; i++) {
		const struct sys_result *r = i < NSYS ? &rp->sys[i] : &rp->upd;
		struct fig f;

		if (i == NSYS && !r->ran)
			break;

		figures(r, mdim(rp), &f);
		printf("%s,%d,%" PRIu64 ",%" PRIu64 ",%.6f,%.1f,%.4f,%.1f,%.4f,"
		       "%.4f,%.6f,%.6f,%.6f,%.6f,%.6f,%" PRIu64 ",%.1f,%.1f,"
		       "%.4f,%.2f,%.2f,%" PRIu64 ",%.6f,%s\n",
		       r->name, r->ran, r->batches, r->ids, r->seconds, f.ids_s,
		       f.gbs, f.uniq_b, r->p50_ms, r->p99_ms, f.hbm, f.ddr,
		       f.nvme, f.init, f.cache, r->reads, f.reads_s,
		       r->disk.read_iops, r->disk.read_lat_ms, r->disk.read_qd,
		       r->disk.qd, r->bytes_written, r->io_wait_s,
		       r->outputs == 0	? "reference"
		       : r->outputs > 0 ? "same"
					: "differ");
	}
	if (rp->gl.ran) {
		printf("limit_gather,1,,%" PRIu64
		       ",%.6f,%.1f,%.4f,,,,,,,,,,,,,,"
		       ",,,\n",
		       rp->gl.rows, rp->gl.seconds, rp->gl.rows_s, rp->gl.gbs);
		printf("limit_gather_prefetch,1,,%" PRIu64
		       ",%.6f,%.1f,%.4f,,,,,"
		       ",,,,,,,,,,,,\n",
		       rp->gl.rows_pf, rp->gl.seconds_pf, rp->gl.rows_s_pf,
		       rp->gl.gbs_pf);
	}
	for (uint32_t i = 0; i <= rp->o->n_limit_qd + 1; i++) {
		const struct uring_limit *u = i == 0   ? &rp->ul_pre
					      : i == 1 ? &rp->ul
						       : &rp->ul_qd[i - 2];

		if (u->ran)
			printf(
			    "limit_io_uring%s_qd%u,1,,,%.6f,,,,%.4f,%.4f,,,,,,"
			    "%" PRIu64 ",%.1f,%.1f,%.4f,%.2f,%.2f,,,\n",
			    i == 0 ? "_before" : "", u->qd, u->seconds,
			    u->lat_p50_us / 1e3, u->lat_p99_us / 1e3, u->reads,
			    u->iops, u->disk.read_iops, u->disk.read_lat_ms,
			    u->disk.read_qd, u->disk.qd);
	}
}

void report_run(const struct run_report *rp)
{
	switch (rp->o->format) {
	case FMT_JSON:
		report_json(rp);
		break;
	case FMT_CSV:
		report_csv(rp);
		break;
	default:
		report_table(rp);
	}
	fflush(stdout);
}
