/*
 * run.c - the default subcommand: the store's run over a workload, then,
 * in the same process and over the same table files and batches, the
 * machine's limits and the peers, and one report.
 *
 * Tables are files t0.et, t1.et, ... of the run's directory (a temporary
 * one under $TMPDIR or /var/tmp unless --dir names one to keep and reuse).
 * Materializing writes every row (--materialize all, with large sequential
 * writes) or the blocks of the rows the run touches (touched), so that a
 * miss is a real read of the disk and never the initializer's shortcut;
 * every system reads the same bytes, values from fill_value().
 *
 * A run is a warm-up (not measured: until the DDR tier is 90% full, or
 * --warmup batches) and a measured phase (--seconds or --batches). Each
 * measured batch is timed as a whole (every table's call); off-CPU time of
 * the calling thread inside the calls is the time it waited on I/O. The
 * per-batch output hashes are kept so that the peers can show they
 * returned the same sums.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench.h"
#include "cli.h"
#include "progress.h"

/* ------------------------------------------------------------- the tables */

void tables_free(struct tables *tb)
{
	if (tb->temp && tb->dir)
		rm_tree(tb->dir);
	for (uint32_t t = 0; t < tb->n; t++)
		free(tb->path ? tb->path[t] : NULL);
	free(tb->path);
	free(tb->rows);
	free(tb->sid);
	free(tb->dir);
	memset(tb, 0, sizeof(*tb));
}

static int make_dir(struct tables *tb, const struct bench_opts *o)
{
	if (o->dir) {
		if (mkdir(o->dir, 0755) && errno != EEXIST) {
			cli_error("%s: %s", o->dir, strerror(errno));
			return -errno;
		}
		tb->dir = strdup(o->dir);
	} else {
		const char *tmp = getenv("TMPDIR");
		char buf[4096];

		/* /tmp is often tmpfs, which refuses O_DIRECT. */
		snprintf(buf, sizeof(buf), "%s/embtier-bench.XXXXXX",
			 tmp && *tmp ? tmp : "/var/tmp");
		if (!mkdtemp(buf)) {
			cli_error("%s: %s", buf, strerror(errno));
			return -errno;
		}
		tb->dir = strdup(buf);
		tb->temp = true;
	}
	return tb->dir ? 0 : -ENOMEM;
}

/* Rows [first, first + n) of table t, from fill_value(), as f32. */
static void fill_rows(float *buf, uint32_t t, const uint64_t *ids,
		      uint64_t first, uint64_t n, uint32_t dim)
{
	for (uint64_t i = 0; i < n; i++) {
		uint64_t r = ids ? ids[i] : first + i;

		for (uint32_t c = 0; c < dim; c++)
			buf[i * dim + c] = fill_value(t, r, c);
	}
}

#define CHUNK_ROWS 16384u

static int write_all(et_tfile *tf, uint32_t t, uint64_t rows, uint32_t dim,
		     float *buf, struct progress *pg, uint64_t *done)
{
	for (uint64_t r = 0; r < rows && !bench_stop; r += CHUNK_ROWS) {
		uint64_t n = rows - r < CHUNK_ROWS ? rows - r : CHUNK_ROWS;
		int ret;

		fill_rows(buf, t, NULL, r, n, dim);
		ret = et_tfile_write_range(tf, r, n, buf);
		if (ret)
			return ret;
		*done += n;
		progress_update(pg, *done);
	}
	return bench_stop ? -EINTR : 0;
}

/* Writes whole blocks around the given sorted rows: rows sharing a block
 * go out together, and a block written whole needs no read first. */
static int write_blocks(et_tfile *tf, uint32_t t, const uint64_t *ids,
			uint64_t n, const struct et_table_info *in, float *buf,
			struct progress *pg, uint64_t *done)
{
	uint64_t rows[CHUNK_ROWS];
	uint64_t k = 0, i = 0, last_block = UINT64_MAX;
	int ret;

	while (i < n || k) {
		while (i < n && k + in->rows_per_block <= CHUNK_ROWS) {
			uint64_t b = ids[i] / in->rows_per_block;

			if (b != last_block) {
				uint64_t r0 = b * in->rows_per_block;

				for (uint64_t r = r0;
				     r < r0 + in->rows_per_block &&
				     r < in->rows;
				     r++)
					rows[k++] = r;
				last_block = b;
			}
			i++;
		}
		if (!k)
			break;
		fill_rows(buf, t, rows, 0, k, in->dim);
		ret = et_tfile_write_rows(tf, rows, k, buf, NULL);
		if (ret)
			return ret;
		*done += k;
		progress_update(pg, *done);
		k = 0;
		if (bench_stop)
			return -EINTR;
	}
	return 0;
}

/* The table slots of the workload: their rows and paths. */
static int tables_slots(struct tables *tb, struct wl_gen *g)
{
	tb->n = wl_tables(g);
	tb->rows = calloc(tb->n, sizeof(*tb->rows));
	tb->path = calloc(tb->n, sizeof(*tb->path));
	tb->sid = calloc(tb->n, sizeof(*tb->sid));
	if (!tb->rows || !tb->path || !tb->sid)
		return -ENOMEM;
	for (uint32_t t = 0; t < tb->n; t++) {
		char p[4096];

		tb->rows[t] = wl_rows(g, t);
		tb->sid[t] = -1;
		snprintf(p, sizeof(p), "%s/t%u.et", tb->dir, t);
		tb->path[t] = strdup(p);
		if (!tb->path[t])
			return -ENOMEM;
		tb->total_rows += tb->rows[t];
	}
	return 0;
}

/* Creates or reuses each file; *todo counts the rows to write (for
 * --materialize touched, at most: tcount[t] blocks of table t). */
static int tables_create(struct tables *tb, const struct bench_opts *o,
			 const uint64_t *tcount, uint64_t *todo)
{
	for (uint32_t t = 0; t < tb->n; t++) {
		struct et_table_params p = {
		    .rows = tb->rows[t],
		    .dim = opt_dim(o, t),
		    .dtype = o->dtype,
		    .init = ET_INIT_UNIFORM,
		    .seed = t,
		};
		struct et_table_info in;
		et_tfile *tf;
		int ret;

		if (!tb->rows[t])
			continue;
		ret = et_tfile_open(tb->path[t], 0, &tf);
		if (ret == -ENOENT)
			ret = et_tfile_create(tb->path[t], &p, &tf);
		if (ret) {
			cli_error_code(tb->path[t], ret);
			return ret;
		}
		ret = et_tfile_info(tf, &in);
		et_tfile_close(tf);
		if (ret) {
			cli_error_code(tb->path[t], ret);
			return ret;
		}
		if (in.rows != p.rows || in.dim != p.dim ||
		    in.dtype != p.dtype) {
			cli_error("%s: exists with another shape (%" PRIu64
				  " rows, dim %u, %s); use another --dir",
				  tb->path[t], in.rows, in.dim,
				  cli_dtype_name(in.dtype));
			return ET_EMISMATCH;
		}
		if (!tb->info.rows)
			tb->info = in;
		if (o->materialize == MAT_ALL && in.blocks_written < in.blocks)
			*todo += in.rows;
		if (o->materialize == MAT_TOUCHED && in.blocks_written == 0)
			*todo += tcount[t] * in.rows_per_block; /* at most */
	}
	return 0;
}

/* Writes the rows --materialize asks for (todo of them, at most) into
 * the files that lack them; buf holds CHUNK_ROWS rows. */
static int tables_write(struct tables *tb, const struct bench_opts *o,
			uint64_t *const *tids, const uint64_t *tcount,
			uint64_t todo, float *buf)
{
	struct progress pg;
	uint64_t done = 0;
	int ret = 0;

	progress_start(&pg, "materializing", "rows", todo, o->quiet);
	for (uint32_t t = 0; t < tb->n && todo; t++) {
		struct et_table_info in;
		et_tfile *tf;

		if (!tb->rows[t])
			continue;
		ret = et_tfile_open(tb->path[t], 0, &tf);
		if (!ret)
			ret = et_tfile_info(tf, &in);
		if (!ret && o->materialize == MAT_ALL &&
		    in.blocks_written < in.blocks)
			ret =
			    write_all(tf, t, in.rows, in.dim, buf, &pg, &done);
		if (!ret && o->materialize == MAT_TOUCHED &&
		    in.blocks_written == 0)
			ret = write_blocks(tf, t, tids[t], tcount[t], &in, buf,
					   &pg, &done);
		if (!ret)
			ret = et_tfile_sync(tf);
		et_tfile_close(tf);
		if (ret) {
			progress_end(&pg);
			cli_error_code(tb->path[t], ret);
			return ret;
		}
	}
	progress_end(&pg);
	return 0;
}

int tables_setup(struct tables *tb, const struct bench_opts *o,
		 struct wl_gen *g, uint64_t touch_batches)
{
	uint64_t **tids = NULL, *tcount = NULL, todo = 0;
	float *buf = NULL;
	double t0 = now_s();
	int ret;

	memset(tb, 0, sizeof(*tb));
	ret = make_dir(tb, o);
	if (ret)
		return ret;
	ret = tables_slots(tb, g);
	buf = malloc((size_t)CHUNK_ROWS * o->dim * sizeof(float));
	if (!ret && !buf)
		ret = -ENOMEM;
	if (ret)
		goto out;
	if (o->materialize == MAT_TOUCHED) {
		tids = calloc(tb->n, sizeof(*tids));
		tcount = calloc(tb->n, sizeof(*tcount));
		if (!tids || !tcount) {
			ret = -ENOMEM;
			goto out;
		}
		ret = wl_touched_rows(g, tb->n, touch_batches, tids, tcount);
		if (ret) {
			cli_error("collecting the touched rows: %s",
				  strerror(-ret));
			goto out;
		}
	}
	ret = tables_create(tb, o, tcount, &todo);
	if (ret)
		goto out;
	/* the largest row, with several dims */
	tb->row_bytes = (uint32_t)(o->dim * dtype_bytes(o->dtype));
	ret = tables_write(tb, o, tids, tcount, todo, buf);
	if (ret)
		goto out;
	for (uint32_t t = 0; t < tb->n; t++) {
		struct et_table_info in;
		et_tfile *tf;

		if (!tb->rows[t] ||
		    et_tfile_open(tb->path[t], ET_TFILE_RDONLY, &tf))
			continue;
		if (!et_tfile_info(tf, &in))
			tb->blocks_written += in.blocks_written;
		et_tfile_close(tf);
	}
	tb->materialized = o->materialize != MAT_NONE;
	tb->setup_s = now_s() - t0;
out:
	if (tids)
		for (uint32_t t = 0; t < tb->n; t++)
			free(tids[t]);
	free(tids);
	free(tcount);
	free(buf);
	if (ret)
		tables_free(tb);
	return ret;
}

void store_config(const struct bench_opts *o, struct et_store_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->hbm_bytes = o->hbm_bytes;
	cfg->ddr_bytes = o->ddr_bytes;
	cfg->hbm_policy = o->policy;
	cfg->ddr_policy = o->policy;
	cfg->ways = o->ways;
	cfg->slot_bytes = o->slot_bytes;
	cfg->io_depth = o->io_depth;
	cfg->threads = o->threads;
}

int tables_store(struct tables *tb, const struct et_store_config *cfg,
		 et_store **out)
{
	et_store *s;
	int ret;

	ret = et_store_open(tb->dir, cfg, &s);
	if (ret) {
		cli_error_code("opening the store", ret);
		return ret;
	}
	for (uint32_t t = 0; t < tb->n; t++) {
		char name[32];

		tb->sid[t] = -1;
		if (!tb->rows[t])
			continue;
		snprintf(name, sizeof(name), "t%u", t);
		ret = et_table_open(s, name, NULL, &tb->sid[t]);
		if (ret) {
			cli_error_code(tb->path[t], ret);
			et_store_close(s);
			return ret;
		}
	}
	*out = s;
	return 0;
}

/* ------------------------------------------------------ the store's run */

struct op_bufs {
	float *out;
	size_t out_cap; /* floats */
	float *grads;
	size_t grad_cap;
};

static int bufs_fit(struct op_bufs *ob, const struct wl_batch *b,
		    const struct bench_opts *o)
{
	size_t need = 0, gneed = 0;
	int op = o->op;

	for (uint32_t k = 0; k < b->count; k++) {
		uint32_t dim = opt_dim(o, b->t[k].table);

		need +=
		    (size_t)(op == OP_POOLED ? b->t[k].nbags : b->t[k].n) * dim;
		if ((size_t)b->t[k].n * dim > gneed)
			gneed = (size_t)b->t[k].n * dim;
	}
	if (need > ob->out_cap) {
		free(ob->out);
		ob->out = malloc(need * sizeof(float));
		ob->out_cap = ob->out ? need : 0;
		if (!ob->out)
			return -ENOMEM;
	}
	if (gneed > ob->grad_cap) {
		free(ob->grads);
		ob->grads = malloc(gneed * sizeof(float));
		ob->grad_cap = ob->grads ? gneed : 0;
		if (!ob->grads)
			return -ENOMEM;
		for (size_t i = 0; i < gneed; i++)
			ob->grads[i] = 1e-3f;
	}
	return 0;
}

/* The pooled calls of a batch as one multi-table call (--multi). */
static int store_batch_multi(et_store *s, const struct tables *tb,
			     const struct wl_batch *b,
			     const struct bench_opts *o, struct op_bufs *ob,
			     size_t *floats)
{
	const struct et_update_params up = {.lr = 0.01f};
	struct et_table_batch *d = calloc(b->count ? b->count : 1, sizeof(*d));
	size_t off = 0;
	int ret;

	if (!d)
		return -ENOMEM;
	for (uint32_t k = 0; k < b->count; k++) {
		const struct wl_table_ids *t = &b->t[k];

		d[k] = (struct et_table_batch){.table = tb->sid[t->table],
					       .ids = t->ids,
					       .offsets = t->offsets,
					       .nbags = t->nbags,
					       .out = ob->out + off,
					       .grads = ob->grads};
		off += (size_t)t->nbags * opt_dim(o, t->table);
	}
	ret = et_gather_pooled_multi(s, d, b->count, ET_POOL_SUM);
	if (!ret && o->update)
		ret = et_update_pooled_multi(s, d, b->count, ET_POOL_SUM, &up);
	free(d);
	*floats = off;
	return ret;
}

/* Every table's call of one batch; *h receives the hash of the outputs. */
static int store_batch(et_store *s, const struct tables *tb,
		       const struct wl_batch *b, const struct bench_opts *o,
		       struct op_bufs *ob, size_t *floats)
{
	const struct et_update_params up = {.lr = 0.01f};
	size_t off = 0;
	int ret = 0;

	if (o->op == OP_POOLED && o->multi)
		return store_batch_multi(s, tb, b, o, ob, floats);
	for (uint32_t k = 0; k < b->count && !ret; k++) {
		const struct wl_table_ids *t = &b->t[k];
		int sid = tb->sid[t->table];
		float *out = ob->out + off;

		if (o->op == OP_POOLED) {
			ret = et_gather_pooled(s, sid, t->ids, t->offsets,
					       t->nbags, ET_POOL_SUM, out);
			off += (size_t)t->nbags * opt_dim(o, t->table);
			if (!ret && o->update)
				ret = et_update_pooled(
				    s, sid, t->ids, t->offsets, t->nbags,
				    ET_POOL_SUM, ob->grads, &up);
		} else {
			ret = et_gather(s, sid, t->ids, t->n, out);
			off += (size_t)t->n * opt_dim(o, t->table);
			if (!ret && o->update)
				ret = et_update(s, sid, t->ids, t->n, ob->grads,
						&up);
		}
	}
	*floats = off;
	return ret;
}

/* Auto warm-up ends when the DDR tier is 90% full, when a whole batch
 * missed nothing (everything fits), at the time cap, or after a quarter of
 * a trace. */
static bool warm_enough(et_store *s, const struct bench_opts *o, uint64_t done,
			double t0, uint64_t trace_batches,
			uint64_t *misses_before)
{
	struct et_stats st;
	uint64_t m;

	if (o->warmup >= 0)
		return done >= (uint64_t)o->warmup;
	if (now_s() - t0 >= o->warmup_max_s)
		return true;
	if (trace_batches && done >= trace_batches / 4)
		return true;
	if (et_get_stats(s, -1, &st))
		return true;
	m = st.unique_misses;
	if (done && m == *misses_before)
		return true;
	*misses_before = m;
	return st.ddr.resident_rows >= st.ddr.capacity_rows * 9 / 10;
}

/* A run of the store: its buffers and the batch in hand. */
struct store_pass {
	struct run_ctx *rc;
	et_store *s;
	struct wl_trace_writer *rec; /* also write each batch here */
	struct op_bufs ob;
	struct wl_batch b;
	bool gen_err; /* the workload failed */
};

/* The next batch, room for its outputs, and its record; 1 with a batch,
 * 0 at the end of a trace, or -errno. */
static int pass_next(struct store_pass *sp)
{
	int ret = wl_next(sp->rc->g, &sp->b);

	sp->gen_err = ret < 0;
	if (ret <= 0)
		return ret;
	ret = bufs_fit(&sp->ob, &sp->b, sp->rc->o);
	if (!ret && sp->rec)
		ret = wl_trace_write(sp->rec, &sp->b);
	return ret ? ret : 1;
}

/* The warm-up: not measured; rc->warmup counts its batches. */
static int store_warmup(struct store_pass *sp)
{
	struct run_ctx *rc = sp->rc;
	const struct bench_opts *o = rc->o;
	struct progress pg;
	uint64_t misses = 0;
	double t0;
	int ret = 0;

	progress_start(&pg, "warming up", "batches", 0, o->quiet);
	t0 = now_s();
	while (!bench_stop && !warm_enough(sp->s, o, rc->warmup, t0,
					   wl_batches(rc->g), &misses)) {
		size_t nf;

		ret = pass_next(sp);
		if (ret <= 0)
			break;
		ret = store_batch(sp->s, rc->tb, &sp->b, o, &sp->ob, &nf);
		if (ret)
			break;
		rc->warmup++;
		progress_update(&pg, rc->warmup);
	}
	progress_end(&pg);
	return ret;
}

/* The store's counters over the measured phase, from a to z. */
static void store_figures(struct sys_result *r, const struct et_stats *a,
			  const struct et_stats *z)
{
	r->unique = z->unique - a->unique;
	r->hbm_hits = z->hbm.hits - a->hbm.hits;
	r->ddr_hits = z->ddr.hits - a->ddr.hits;
	r->nvme_rows = z->nvme_rows_read - a->nvme_rows_read;
	r->lazy_rows = z->rows_lazy - a->rows_lazy;
	r->conflicts = z->conflict_unique_misses - a->conflict_unique_misses;
	r->reads = z->blocks_read - a->blocks_read;
	r->bytes_read = z->bytes_read - a->bytes_read;
	r->bytes_written = (z->bytes_written + z->log_bytes_written) -
			   (a->bytes_written + a->log_bytes_written);
	r->writebacks = z->writebacks - a->writebacks;
	r->miss_s = (double)(z->miss_wait_ns - a->miss_wait_ns) / 1e9;
	r->wb_s = (double)(z->writeback_ns - a->writeback_ns) / 1e9;
	r->mem_peak = z->mem_peak_bytes;
	r->row_bytes[0] = z->hbm.row_bytes;
	r->row_bytes[1] = z->ddr.row_bytes;
	r->capacity_bytes[0] = z->hbm.capacity_bytes;
	r->capacity_bytes[1] = z->ddr.capacity_bytes;
}

/* Room for batch i's latency and output hash; 0 or -ENOMEM. */
static int lat_fit(struct run_ctx *rc, double **lat, size_t *lat_cap,
		   uint64_t i)
{
	size_t c;
	double *l;
	uint64_t *h;

	if (i < *lat_cap)
		return 0;
	c = *lat_cap ? *lat_cap * 2 : 256;
	l = realloc(*lat, c * sizeof(*l));
	h = realloc(rc->ref.h, c * sizeof(*h));
	if (l)
		*lat = l;
	if (h)
		rc->ref.h = h;
	if (!l || !h)
		return -ENOMEM;
	*lat_cap = c;
	return 0;
}

/* The measured phase: --batches, or --seconds of batches, each timed as
 * a whole; its latencies in *lat (r->batches of them). */
static int store_measure(struct store_pass *sp, struct sys_result *r,
			 double **lat)
{
	struct run_ctx *rc = sp->rc;
	const struct bench_opts *o = rc->o;
	struct disk_sample da, db, acc;
	struct et_stats a, z;
	struct progress pg;
	size_t lat_cap = 0;
	double t0;
	int ret = 0;

	progress_start(&pg, "measuring", o->batches ? "batches" : "ms",
		       o->batches ? o->batches : (uint64_t)(o->seconds * 1000),
		       o->quiet);
	et_get_stats(sp->s, -1, &a);
	memset(&acc, 0, sizeof(acc));
	t0 = now_s();
	while (!bench_stop) {
		double w0, c0, w1, c1;
		size_t nf;

		if (o->batches ? r->batches >= o->batches
			       : now_s() - t0 >= o->seconds)
			break;
		ret = pass_next(sp);
		if (ret <= 0)
			break;
		/* the device over the store's calls only, not the
		 * workload's generation between them */
		disk_sample(&rc->disk, &da);
		w0 = now_s();
		c0 = thread_cpu_s();
		ret = store_batch(sp->s, rc->tb, &sp->b, o, &sp->ob, &nf);
		c1 = thread_cpu_s();
		w1 = now_s();
		disk_sample(&rc->disk, &db);
		disk_accum(&acc, &da, &db);
		if (!ret)
			ret = lat_fit(rc, lat, &lat_cap, r->batches);
		if (ret)
			break;
		(*lat)[r->batches] = w1 - w0;
		rc->ref.h[r->batches] = out_hash(sp->ob.out, nf);
		r->seconds += w1 - w0;
		r->io_wait_s += (w1 - w0) - (c1 - c0);
		r->ids += wl_batch_ids(&sp->b);
		r->calls += o->op == OP_POOLED && o->multi ? 1 : sp->b.count;
		r->batches++;
		progress_update(&pg, o->batches
					 ? r->batches
					 : (uint64_t)((now_s() - t0) * 1000));
	}
	et_get_stats(sp->s, -1, &z);
	progress_end(&pg);
	if (ret < 0)
		return ret;
	rc->measured = r->batches;
	rc->store_seconds = now_s() - t0;
	rc->ref.n = r->batches;
	r->planned = r->batches;
	memset(&da, 0, sizeof(da));
	disk_diff(&rc->disk, &da, &acc, &r->disk);
	store_figures(r, &a, &z);
	return 0;
}

static int store_run(struct run_ctx *rc, et_store *s, struct sys_result *r,
		     struct wl_trace_writer *rec)
{
	struct store_pass sp = {.rc = rc, .s = s, .rec = rec};
	double *lat = NULL;
	int ret;

	wl_batch_init(&sp.b);
	memset(r, 0, sizeof(*r));
	r->name = "embtier";
	r->has_tiers = true;
	r->has_reads = true;
	ret = store_warmup(&sp);
	if (ret >= 0)
		ret = store_measure(&sp, r, &lat);
	if (ret < 0) {
		if (sp.gen_err)
			cli_error("workload: %s", rc->g->err);
		else
			cli_error_code("store run", ret);
	} else {
		if (r->batches) {
			r->mean_ms = r->seconds / (double)r->batches * 1e3;
			r->p50_ms = percentile(lat, r->batches, 50) * 1e3;
			r->p99_ms = percentile(lat, r->batches, 99) * 1e3;
		}
		r->ran = true;
		ret = 0;
	}
	free(lat);
	free(sp.ob.out);
	free(sp.ob.grads);
	wl_batch_free(&sp.b);
	return ret;
}

/* --update-vs-read: after the read-only measurement, the same store goes on
 * with an update after every gather, for as long. It warms up first for
 * as many batches as the read-only run took to fill its DDR tier, so that
 * the tier it measures is full of dirty rows and write-back runs at its
 * steady rate. The limits and peers keep the read-only run's figures. */
static int update_run(struct run_ctx *rc, et_store *s, struct sys_result *r)
{
	struct bench_opts ou = *rc->o;
	struct run_ctx u = *rc;
	int ret;

	ou.update = true;
	ou.warmup = (int64_t)rc->warmup;
	ou.quiet = rc->o->quiet;
	u.o = &ou;
	u.warmup = 0;
	ret = store_run(&u, s, r, NULL);
	rc->ref.h = u.ref.h; /* store_run may have moved it */
	r->name = "embtier+update";
	return ret;
}

static int open_workload(const struct bench_opts *o, struct wl_gen *g)
{
	int ret = wl_open(g, &o->wl);

	if (ret)
		cli_error("workload: %s", g->err);
	return ret;
}

/* The store's part of the run, between two raw io_uring loops: its
 * read-only run, then --update-vs-read's run with updates; the batches
 * recorded if asked. */
static int run_store(struct run_ctx *rc, struct run_report *rep,
		     struct wl_trace_writer *rec)
{
	const struct bench_opts *o = rc->o;
	struct et_store_config cfg;
	et_store *s = NULL;
	int ret, r2;

	/* The disk's ceiling is measured on both sides of the store's run,
	 * so that a passing slow spell of the (virtual) disk weighs on both
	 * alike; the ratio uses their mean. */
	if (o->limits && rc->tb->materialized && !bench_stop)
		limit_uring(rc,
			    o->io_depth ? o->io_depth : BENCH_STORE_IO_DEPTH,
			    o->limit_seconds, 0, &rep->ul_pre);
	store_config(o, &cfg);
	ret = tables_store(rc->tb, &cfg, &s);
	if (ret)
		return ret;
	ret = store_run(rc, s, &rep->sys[0], o->record ? rec : NULL);
	if (!ret && o->update_vs_read && !bench_stop)
		ret = update_run(rc, s, &rep->upd);
	r2 = et_store_close(s);
	if (r2 && !ret) {
		cli_error_code("closing the store", r2);
		ret = r2;
	}
	if (o->record) {
		r2 = wl_trace_finish(rec);
		if (r2 && !ret) {
			cli_error("%s: %s", o->record, strerror(-r2));
			ret = r2;
		}
	}
	return ret;
}

/* The limits after the store's run: raw gather, raw io_uring at the
 * store's depth, in calls of the store's mean blocks read a call (if it
 * read any), and at the --limit-qd depths. */
static void run_limits(struct run_ctx *rc, struct run_report *rep)
{
	const struct bench_opts *o = rc->o;
	const struct sys_result *e = &rep->sys[0];
	unsigned qd = o->io_depth ? o->io_depth : BENCH_STORE_IO_DEPTH;
	uint64_t per = e->calls ? (e->reads + e->calls / 2) / e->calls : 0;

	if (!o->limits || bench_stop)
		return;
	limit_gather(rc, &rep->gl);
	limit_uring(rc, qd, o->limit_seconds, 0, &rep->ul);
	if (e->ran && per && per <= UINT32_MAX && !bench_stop)
		limit_uring(rc, qd, o->limit_seconds, (uint32_t)per,
			    &rep->ul_call);
	for (uint32_t i = 0; i < o->n_limit_qd && !bench_stop; i++)
		limit_uring(rc, o->limit_qd[i], o->limit_seconds, 0,
			    &rep->ul_qd[i]);
}

/* Whether a peer cannot run this run's batches; if so, why, in r's
 * note. */
static bool peer_skipped(const struct run_ctx *rc, struct sys_result *r,
			 const char *unmaterialized)
{
	const struct bench_opts *o = rc->o;
	const char *why = NULL;

	if (opt_mixed_dims(o))
		why = "tables of several dims";
	else if (o->update || o->update_vs_read)
		why = "updates change the rows";
	else if (!rc->tb->materialized)
		why = unmaterialized;
	if (why)
		snprintf(r->note, sizeof(r->note), "skipped: %s", why);
	return why != NULL;
}

static void run_peers(struct run_ctx *rc, struct run_report *rep)
{
	const struct bench_opts *o = rc->o;

	rep->sys[1].name = "pread";
	rep->sys[2].name = "rocksdb";
	if (o->pread && !bench_stop &&
	    !peer_skipped(rc, &rep->sys[1], "tables not materialized"))
		peer_pread(rc, &rep->sys[1]);
	if (o->rocksdb && !bench_stop &&
	    !peer_skipped(rc, &rep->sys[2],
			  "tables not materialized (their rows would differ "
			  "from what it loads)"))
		peer_rocksdb(rc, &rep->sys[2]);
}

/* --record: the trace the batches run are written to. */
static int open_record(const struct bench_opts *o, const struct tables *tb,
		       const struct wl_gen *g, struct wl_trace_writer *rec)
{
	int ret = wl_trace_create(
	    rec, o->record, tb->n, tb->rows,
	    o->wl.kind == WL_TRACE ? g->tr.pooling : o->wl.pooling, o->force);

	if (ret)
		cli_error("%s: %s", o->record,
			  ret == -EEXIST ? "exists (use --force)"
					 : strerror(-ret));
	return ret;
}

int cmd_run(const struct bench_opts *o)
{
	struct run_report rep;
	struct run_ctx rc;
	struct wl_trace_writer rec = {0};
	struct wl_gen g;
	struct tables tb;
	uint64_t touch = 0;
	int ret;

	memset(&rep, 0, sizeof(rep));
	memset(&rc, 0, sizeof(rc));
	if (o->update && o->update_vs_read) {
		cli_usage_error("--update and --update-vs-read: choose one");
		return CLI_EXIT_USAGE;
	}
	ret = open_workload(o, &g);
	if (ret)
		return CLI_EXIT_FAIL;
	if (o->materialize == MAT_TOUCHED) {
		if (o->wl.kind != WL_TRACE && (!o->batches || o->warmup < 0)) {
			cli_usage_error("--materialize touched needs --batches "
					"and --warmup (or a trace)");
			wl_close(&g);
			return CLI_EXIT_USAGE;
		}
		touch = o->wl.kind == WL_TRACE
			    ? 0
			    : o->batches + (uint64_t)o->warmup;
	}
	ret = tables_setup(&tb, o, &g, touch);
	if (ret) {
		wl_close(&g);
		return CLI_EXIT_FAIL;
	}
	rc.o = o;
	rc.g = &g;
	rc.tb = &tb;
	disk_open(&rc.disk, tb.dir);
	disk_background(&rc.disk, 0.5, &rep.background);
	if (o->record)
		ret = open_record(o, &tb, &g, &rec);
	if (!ret)
		ret = run_store(&rc, &rep, &rec);
	if (ret)
		goto out;
	if (!rc.measured) {
		cli_error("no batch was measured (a trace shorter than its "
			  "warm-up? try --warmup 0)");
		ret = -EINVAL;
		goto out;
	}
	run_limits(&rc, &rep);
	run_peers(&rc, &rep);
	rep.o = o;
	rep.tb = &tb;
	rep.g = &g;
	rep.warmup = rc.warmup;
	report_run(&rep);
	ret = bench_stop ? -EINTR : 0;
out:
	if (o->record && rec.f)
		wl_trace_abort(&rec);
	free(rc.ref.h);
	tables_free(&tb);
	wl_close(&g);
	return ret ? CLI_EXIT_FAIL : CLI_EXIT_OK;
}
