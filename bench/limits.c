/*
 * limits.c - what this machine can do at best, measured in the same run
 * as the store, so that each of the store's figures can be put beside its
 * ceiling.
 *
 * Gather: the batches the store measured, replayed as plain loads from a
 * buffer as large as the DDR budget: each (table, row) is hashed to a row
 * position of the buffer (so hot rows stay hot, as in the store's hashed
 * sets), and the op is done with nothing else: a memcpy of the row for
 * --op gather, a sum into the bag for --op pooled. One thread, like the
 * store's calls. Positions are computed before the clock starts. Batches
 * alternate between a plain loop (the limit the ratio uses) and one with
 * software prefetch of rows a few ids ahead (what a tuned kernel gets:
 * several DRAM misses in flight instead of one row's at a time). Each loop
 * thus finds in the CPU caches what the batches before left there, as the
 * store does; running both over the same batch would hand the second one
 * rows the first had just brought into the last-level cache.
 *
 * io_uring: 4 KiB-class random reads of written blocks of the same table
 * files (found with SEEK_DATA/SEEK_HOLE), O_DIRECT, through rawio.c (the
 * submit and reap loop of the library's own io.c, on liburing directly),
 * qd requests always in flight (each completion re-queues its request at
 * a new random block): what fio's randread with ioengine=io_uring,
 * direct=1, iodepth=qd would report. Latency is from queueing to
 * completion. The requests' buffers lie in one mapping asked for huge
 * pages (raw_io_buf), as the store's staging does.
 *
 * io_uring in calls: the same reads at the same depth, in calls of a
 * fixed number of reads (the store's mean blocks read a call), each call
 * waited for whole before the next one starts, with no work between
 * calls: what a synchronous call of that size could reach at best. Its
 * reads drain at the end of each call, as the store's do; the gap
 * between the two limits is what the call's shape costs, and the store's
 * figure over this one is what its own work around the reads costs.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench.h"
#include "cli.h"
#include "progress.h"
#include "rawio.h"

/* ------------------------------------------------------------------ gather */

static volatile uint64_t sink;

#define PF_DIST 8 /* rows ahead that the prefetching loop asks for */

/*
 * One table's ids, the op alone: rows copied out (gather) or summed into
 * their bags (pooled). With prefetch, the cache lines of the row PF_DIST
 * ids ahead are requested first, so that several DRAM misses are in
 * flight at once: what a tuned gather kernel does.
 */
static void gather_once(const struct bench_opts *o,
			const struct wl_table_ids *t, const unsigned char *buf,
			const uint64_t *pos, uint32_t rb, float *ob,
			bool prefetch)
{
	uint32_t dim = opt_dim(o, t->table);

	if (o->op == OP_GATHER) {
		for (uint32_t j = 0; j < t->n; j++) {
			if (prefetch && j + PF_DIST < t->n)
				for (uint32_t l = 0; l < rb; l += 64)
					__builtin_prefetch(
					    buf + pos[j + PF_DIST] + l);
			memcpy(ob + (size_t)j * dim, buf + pos[j], rb);
		}
		return;
	}
	for (uint32_t bg = 0; bg < t->nbags; bg++) {
		float *acc = ob + (size_t)bg * dim;

		memset(acc, 0, dim * sizeof(*acc));
		for (uint64_t j = t->offsets[bg]; j < t->offsets[bg + 1]; j++) {
			if (prefetch && j + PF_DIST < t->n)
				for (uint32_t l = 0; l < rb; l += 64)
					__builtin_prefetch(
					    buf + pos[j + PF_DIST] + l);
			add_row(acc, buf + pos[j], o->dtype, dim);
		}
	}
}

/*
 * The footprint is the DDR tier's bytes, rows of the largest size laid
 * out in it; with several dims each table reads rows of its own size at
 * multiples of that size over the same buffer.
 */
void limit_gather(struct run_ctx *rc, struct gather_limit *out)
{
	const struct bench_opts *o = rc->o;
	uint32_t rb = rc->tb->row_bytes, dim = o->dim;
	uint64_t nrows = o->ddr_bytes / rb;
	double floats = 0, floats_pf = 0;
	struct wl_batch b;
	struct progress pg;
	unsigned char *buf = NULL;
	uint64_t *pos = NULL;
	float *ob = NULL;
	size_t pos_cap = 0, ob_cap = 0;
	double t_all = now_s();

	memset(out, 0, sizeof(*out));
	wl_batch_init(&b);
	if (nrows == 0)
		return;
	buf = malloc(nrows * rb);
	if (!buf)
		goto out;
	/* Real values, so that nothing is folded away and pages exist. */
	for (uint64_t i = 0; i < nrows * rb / 4; i++) {
		float f = fill_value(0, i / dim, (uint32_t)(i % dim));

		if (o->dtype == ET_F32) {
			memcpy(buf + i * 4, &f, 4);
		} else {
			uint16_t h = o->dtype == ET_F16 ? et_f32_to_f16(f)
							: et_f32_to_bf16(f);

			memcpy(buf + i * 4, &h, 2);
			memcpy(buf + i * 4 + 2, &h, 2);
		}
	}
	out->buf_bytes = nrows * rb;
	if (wl_rewind(rc->g))
		goto out;
	for (uint64_t i = 0; i < rc->warmup; i++)
		if (wl_next(rc->g, &b) <= 0)
			goto out;
	progress_start(&pg, "gather limit", "batches", rc->measured, o->quiet);
	for (uint64_t i = 0; i < rc->measured && !bench_stop; i++) {
		double t0;

		if (wl_next(rc->g, &b) <= 0)
			break;
		for (uint32_t k = 0; k < b.count; k++) {
			const struct wl_table_ids *t = &b.t[k];
			uint32_t tdim = opt_dim(o, t->table);
			uint32_t trb = (uint32_t)(tdim * dtype_bytes(o->dtype));
			uint64_t tn = nrows * rb / trb;
			size_t need =
			    (size_t)(o->op == OP_POOLED ? t->nbags : t->n) *
			    tdim;

			if (t->n > pos_cap) {
				free(pos);
				pos = malloc((size_t)t->n * sizeof(*pos));
				pos_cap = pos ? t->n : 0;
			}
			if (need > ob_cap) {
				free(ob);
				ob = malloc(need * sizeof(*ob));
				ob_cap = ob ? need : 0;
			}
			if (!pos || !ob)
				goto out;
			for (uint32_t j = 0; j < t->n; j++)
				pos[j] =
				    (wl_mix(((uint64_t)(t->table + 1) << 40) ^
					    t->ids[j]) %
				     tn) *
				    trb;
			t0 = now_s();
			gather_once(o, t, buf, pos, trb, ob, i & 1);
			if (i & 1) {
				out->seconds_pf += now_s() - t0;
				out->rows_pf += t->n;
			} else {
				out->seconds += now_s() - t0;
				out->rows += t->n;
			}
			/* Read the result back, untimed, so that no store
			 * into ob can be optimized away. */
			sink ^= out_hash(ob, need);
			*(i & 1 ? &floats_pf : &floats) += (double)t->n * tdim;
		}
		progress_update(&pg, i + 1);
		/* at least a batch of each loop */
		if (i >= 1 && now_s() - t_all > o->limit_seconds * 4)
			break;
	}
	progress_end(&pg);
	if (out->seconds > 0 && out->seconds_pf > 0) {
		out->ran = true;
		out->rows_s = (double)out->rows / out->seconds;
		out->gbs = floats * 4 / out->seconds / 1e9;
		out->rows_s_pf = (double)out->rows_pf / out->seconds_pf;
		out->gbs_pf = floats_pf * 4 / out->seconds_pf / 1e9;
	}
out:
	free(buf);
	free(pos);
	free(ob);
	wl_batch_free(&b);
}

/* ---------------------------------------------------------------- io_uring */

struct extent {
	int fd;
	uint64_t first; /* block */
	uint64_t cum;	/* blocks in all earlier extents */
	uint64_t n;
};

struct ureq {
	struct rawio_req req;
	double t;
	struct uring_run *run;
};

struct uring_run {
	struct extent *ext;
	size_t next, ext_cap;
	uint64_t blocks;
	uint32_t bs;
	uint32_t mem_align;
	struct wl_rng rng;
	double deadline, last;
	float *lat; /* microseconds */
	size_t nlat, cap;
	uint64_t errors;
	bool calls;	    /* in calls: */
	uint64_t call_left; /* reads of this call not yet sent */
	struct progress *pg;
	double t0;
};

static uint64_t pick_offset(struct uring_run *u, int *fd)
{
	uint64_t x = wl_rng_below(&u->rng, u->blocks);
	size_t lo = 0, hi = u->next;

	while (hi - lo > 1) {
		size_t mid = (lo + hi) / 2;

		if (u->ext[mid].cum <= x)
			lo = mid;
		else
			hi = mid;
	}
	*fd = u->ext[lo].fd;
	/* The data region starts one block in (FORMAT.md: data_offset). */
	return (u->ext[lo].first + (x - u->ext[lo].cum) + 1) * u->bs;
}

/* A completion: its latency kept, the request aimed at a new random
 * block until the deadline. */
static bool ureq_done(struct rawio_req *r)
{
	struct ureq *q = r->arg;
	struct uring_run *u = q->run;
	double now = now_s();

	if (r->res != (int)r->len)
		u->errors++;
	if (u->nlat == u->cap) {
		size_t c = u->cap ? u->cap * 2 : 65536;
		float *l = realloc(u->lat, c * sizeof(*l));

		if (l) {
			u->lat = l;
			u->cap = c;
		}
	}
	if (u->nlat < u->cap)
		u->lat[u->nlat++] = (float)((now - q->t) * 1e6);
	u->last = now;
	if (u->nlat % 1024 == 0)
		progress_update(u->pg, (uint64_t)((now - u->t0) * 1000));
	if (u->calls ? u->call_left > 0 : now < u->deadline && !bench_stop) {
		if (u->calls)
			u->call_left--;
		r->off = pick_offset(u, &r->fd);
		q->t = now;
		return true;
	}
	return false;
}

static int fcmp(const void *a, const void *b)
{
	float x = *(const float *)a, y = *(const float *)b;

	return x < y ? -1 : x > y;
}

/* Adds the written blocks of one table file (its data regions, found
 * with SEEK_DATA and SEEK_HOLE) to u's extents. */
static int add_extents(struct uring_run *u, int fd, uint64_t blocks)
{
	off_t off = u->bs, d, h;

	while ((d = lseek(fd, off, SEEK_DATA)) >= 0) {
		uint64_t b0, b1;

		h = lseek(fd, d, SEEK_HOLE);
		if (h < 0)
			break;
		b0 = ((uint64_t)d - u->bs) / u->bs;
		b1 = ((uint64_t)h - u->bs + u->bs - 1) / u->bs;
		if (b1 > blocks)
			b1 = blocks;
		if (b1 > b0) {
			if (u->next == u->ext_cap) {
				size_t c = u->ext_cap ? 2 * u->ext_cap : 256;
				struct extent *e =
				    realloc(u->ext, c * sizeof(*e));

				if (!e)
					return -ENOMEM;
				u->ext = e;
				u->ext_cap = c;
			}
			u->ext[u->next++] = (struct extent){.fd = fd,
							    .first = b0,
							    .cum = u->blocks,
							    .n = b1 - b0};
			u->blocks += b1 - b0;
		}
		off = h;
	}
	return 0;
}

/* Opens every table file (fds[t], -1 for none) and finds its written
 * blocks; 0, or -1 with out->note set or -ENOMEM. */
static int open_tables(const struct tables *tb, struct uring_run *u, int *fds,
		       struct uring_limit *out)
{
	for (uint32_t t = 0; t < tb->n; t++)
		fds[t] = -1;
	for (uint32_t t = 0; t < tb->n; t++) {
		uint32_t ma;
		int ret;

		if (!tb->rows[t])
			continue;
		ret = rawio_open_file(tb->path[t], O_RDONLY, &fds[t]);
		if (ret) {
			snprintf(out->note, sizeof(out->note), "%s: %s",
				 tb->path[t], strerror(-ret));
			return -1;
		}
		ma = rawio_mem_align(fds[t]);
		if (ma > u->mem_align)
			u->mem_align = ma;
		ret = add_extents(u, fds[t], tb->info.blocks);
		if (ret)
			return ret;
	}
	return 0;
}

/* The loop's figures, from its latencies and the device's counters. */
static void uring_figures(struct uring_run *u, const struct disk *disk,
			  const struct disk_sample *da,
			  const struct disk_sample *db, struct uring_limit *out)
{
	double sum = 0;

	out->reads = u->nlat;
	out->seconds = u->last - u->t0;
	if (u->errors)
		snprintf(out->note, sizeof(out->note),
			 "%llu reads failed or were short",
			 (unsigned long long)u->errors);
	if (!out->reads || out->seconds <= 0)
		return;
	for (size_t i = 0; i < u->nlat; i++)
		sum += u->lat[i];
	qsort(u->lat, u->nlat, sizeof(*u->lat), fcmp);
	out->iops = (double)out->reads / out->seconds;
	out->mbs = out->iops * u->bs / 1e6;
	out->lat_mean_us = sum / (double)u->nlat;
	out->lat_p50_us = u->lat[(u->nlat - 1) / 2];
	out->lat_p99_us = u->lat[(size_t)((double)(u->nlat - 1) * 0.99)];
	out->qd_little = out->iops * out->lat_mean_us * 1e-6;
	disk_diff(disk, da, db, &out->disk);
	/* Every read here is one device read: more means other I/O. */
	if (out->disk.ok && !out->note[0] &&
	    (double)out->disk.reads > 1.05 * (double)out->reads)
		snprintf(
		    out->note, sizeof(out->note),
		    "the device did %.0f%% more reads than this loop: "
		    "other processes' I/O lowers this limit",
		    100.0 * ((double)out->disk.reads / (double)out->reads - 1));
	out->ran = true;
}

/* The bytes between two requests' block buffers. */
static size_t req_stride(const struct uring_run *u)
{
	size_t a = u->mem_align > 4096 ? u->mem_align : 4096;

	return (u->bs + a - 1) / a * a;
}

/* qd requests, each with its own block buffer (all in one raw_io_buf),
 * aimed at random blocks. */
static struct ureq *make_requests(struct uring_run *u, unsigned qd)
{
	struct ureq *q = calloc(qd, sizeof(*q));
	char *bufs = q ? raw_io_buf(qd * req_stride(u)) : NULL;

	if (!bufs) {
		free(q);
		return NULL;
	}
	for (unsigned i = 0; i < qd; i++) {
		q[i].req.buf = bufs + i * req_stride(u);
		q[i].run = u;
		q[i].req.len = u->bs;
		q[i].req.arg = &q[i];
	}
	return q;
}

/* One call: k of the requests sent (k <= the depth), each aimed again
 * until n reads are done, all waited for. */
static int uring_call(rawio *rio, struct uring_run *u, struct ureq *q,
		      unsigned k, uint64_t n)
{
	u->call_left = n - k;
	for (unsigned i = 0; i < k; i++) {
		q[i].req.off = pick_offset(u, &q[i].req.fd);
		q[i].t = now_s();
		rawio_queue(rio, &q[i].req); /* k fit: the ring's depth */
	}
	return rawio_run(rio, ureq_done);
}

void limit_uring(struct run_ctx *rc, unsigned qd, double seconds,
		 uint32_t per_call, struct uring_limit *out)
{
	const struct tables *tb = rc->tb;
	struct uring_run u;
	struct ureq *q = NULL;
	struct disk_sample da, db;
	struct progress pg;
	rawio *rio = NULL;
	int *fds = NULL, ret;

	memset(out, 0, sizeof(*out));
	memset(&u, 0, sizeof(u));
	out->qd = qd;
	out->per_call = per_call;
	u.calls = per_call > 0;
	u.bs = tb->info.block_size;
	u.mem_align = 4096;
	u.pg = &pg;
	wl_rng_seed(&u.rng, rc->o->wl.seed ^ 0x10ULL);
	fds = malloc(tb->n * sizeof(*fds));
	if (!fds || open_tables(tb, &u, fds, out))
		goto out;
	out->blocks = u.blocks;
	out->block_size = u.bs;
	if (!u.blocks) {
		snprintf(out->note, sizeof(out->note),
			 "no written blocks to read (tables not materialized)");
		goto out;
	}
	ret = rawio_open(qd, &rio);
	if (ret) {
		snprintf(out->note, sizeof(out->note), "io_uring: %s",
			 strerror(-ret));
		goto out;
	}
	q = make_requests(&u, qd);
	if (!q)
		goto out;
	progress_start(&pg, "io_uring limit", "ms", (uint64_t)(seconds * 1000),
		       rc->o->quiet);
	disk_sample(&rc->disk, &da);
	u.t0 = now_s();
	u.deadline = u.t0 + seconds;
	if (!u.calls) {
		ret = uring_call(rio, &u, q, qd, qd);
	} else {
		ret = 0;
		while (!ret && now_s() < u.deadline && !bench_stop) {
			ret =
			    uring_call(rio, &u, q,
				       per_call < qd ? per_call : qd, per_call);
			out->calls++;
		}
	}
	disk_sample(&rc->disk, &db);
	progress_end(&pg);
	if (ret < 0)
		snprintf(out->note, sizeof(out->note), "io_uring: %s",
			 strerror(-ret));
	else
		uring_figures(&u, &rc->disk, &da, &db, out);
out:
	rawio_close(rio);
	if (q)
		raw_io_buf_free(q[0].req.buf, qd * req_stride(&u));
	free(q);
	if (fds)
		for (uint32_t t = 0; t < tb->n; t++)
			if (fds[t] >= 0)
				close(fds[t]);
	free(fds);
	free(u.ext);
	free(u.lat);
}
