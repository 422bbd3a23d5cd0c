/*
 * delta.c - embtier-bench delta: a delta's size and export time against
 * the rows that changed, not the table, and the export's rate against the
 * disk's sequential read limit measured in the same run.
 *
 * In a scratch directory under --dir (removed at the end):
 *
 *   setup     a store (src/) of one row-indexed table "t" of --rows rows x
 *             --dim --dtype (SGD, uniform initializer), every row written
 *             once (et_write_rows, ids in order, 65,536 a call through a
 *             --ddr tier), then et_checkpoint: commit A. Untimed (its time
 *             is printed).
 *   full      et_delta_export from 0 (every stored row: the table whole)
 *             to a file, and et_delta_apply of it to an empty serving copy
 *             (copy/), each timed: the figures for scale.
 *   serve     (after 10%) 1% more rewritten and exported the same way,
 *             then applied through a serving handle of the copy while a
 *             reader thread looks up Zipf-drawn rows (delta_serve.c):
 *             lookup rates and the longest lookup, idle and during the
 *             apply, and the row cache's hits.
 *   1%, 10%   f x rows distinct rows drawn at random (a keyed bijection of
 *             the ids) rewritten with new values, in the bijection's
 *             order, and et_checkpoint (untimed, printed); then, timed,
 *             et_delta_export from the commit before to a file and
 *             et_delta_apply of that file to the copy, which stands at the
 *             commit before.
 *   raw       sequential 1 MiB O_DIRECT reads of the source's row log
 *             (t.et.log, as large as the log: at least 1 GiB read, passes
 *             over it repeated if it is smaller, at most 3 s) through
 *             rawio.c, at queue depth 1 (dd's) and 8; the limit is the
 *             faster.
 *   copy      the 10% export's bytes moved raw, at once on the one disk:
 *             its log record bytes read (1 MiB O_DIRECT, depth 8) while
 *             another thread writes its delta's bytes (1 MiB O_DIRECT and
 *             a fdatasync): the export's own limit, delta bytes over the
 *             wall time of both, printed beside the goal's ratio.
 *
 * The source store stays open while its deltas are exported (as a trainer
 * pausing for its export would: no commit can land). Before each timed
 * export the page cache of the source directory's files is dropped, and
 * before each apply that of the delta file (posix_fadvise DONTNEED of the
 * synced files: no privilege needed), and the bytes still cached are
 * counted (mincore) and printed. The row log is read with O_DIRECT by the
 * library in any case; the journal, the commit record and the delta file
 * are read through the page cache. What each export had read from
 * storage is this process's /proc/self/io read_bytes (io_uring's workers
 * included); the device's counters (/sys/dev/block/M:m/stat) are printed
 * too, but count every process's reads.
 *
 * Figures: rows and bytes of each delta, export seconds and MB/s (delta
 * bytes / s, and log record bytes / s: rows x the log's record bytes, what
 * the export had to read at least), bytes the device read, apply seconds
 * and MB/s (delta bytes / s); the ratios export MB/s / raw MB/s (goal >=
 * 0.5) and bytes(10%) / bytes(1%), time(10%) / time(1%) (ideally ~10).
 * Also timed on their own: et_tfile_open read-only of the source table
 * and of the copy's (after the full apply), which load the table's whole
 * index: the table-sized cost of anything that opens the table (a whole
 * export, the store an apply writes through).
 *
 * Checks (a failed one fails the run): each incremental delta carries
 * exactly the rows rewritten and no table whole; after each apply, 10^5
 * rows drawn at random (every row when fewer) of the copy equal the
 * source's, and up to 10^4 of the rows just rewritten equal the values
 * written (rounded to the dtype) in both (et_tfile_open read-only of both,
 * et_tfile_read_rows).
 */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "bench.h"
#include "cli.h"
#include "progress.h"
#include "rawio.h"

#define D_BATCH	    65536u	   /* rows a write call, a check chunk */
#define D_SAMPLE    100000u	   /* random rows checked after an apply */
#define D_SAMPLE_CH 10000u	   /* rewritten rows checked too */
#define D_RAW_CHUNK (1u << 20)	   /* bytes of a raw read */
#define D_RAW_MIN   (1ULL << 30)   /* bytes the raw loop reads at least */
#define D_RAW_MAX_S 3.0		   /* ... unless that takes longer */
#define D_SLACK	    (256ULL << 20) /* segments, windows, headers */
#define D_JOURNAL   16		   /* bytes of a journal entry */
#define D_BAD	    1		   /* a check failed (and said so) */
#define D_ROUNDS    4		   /* full, 1%, 10%, serve */
#define D_SERVE	    3		   /* the round applied while served */

static const double d_frac[D_ROUNDS] = {0, 0.01, 0.10, 0.01};
static const char *const d_name[D_ROUNDS] = {"full", "1%", "10%", "serve"};
static const unsigned d_qd[2] = {1, 8};

/* One delta: exported from the source, applied to the copy. */
struct dround {
	const char *name;
	double frac;	     /* of the rows rewritten; 0: the full delta */
	uint64_t changed;    /* rows rewritten (full: the rows) */
	double rewrite_s;    /* writes and checkpoint before, untimed */
	uint64_t from, to;   /* commits */
	uint64_t cached_src; /* bytes of the source's files still cached */
	uint64_t cached_dl;  /* bytes of the delta file still cached */
	struct et_delta_info ex, ap;
	double export_s, export_cpu_s, apply_s, apply_cpu_s;
	struct disk_delta ex_disk, ap_disk;
	uint64_t ex_read; /* bytes the export read from storage (this
			   * process: /proc/self/io read_bytes) */
	uint64_t checked, checked_changed;
	double check_s;
};

struct raw_read {
	unsigned qd;
	uint64_t bytes, passes_bytes;
	double seconds, mbs;
	struct disk_delta disk;
	char note[160];
};

struct dbench {
	const struct bench_opts *o;
	uint64_t n;
	uint32_t dim, row_bytes, rec_bytes;
	char dir[4096], src[4200], copy[4200], table[4300], ctable[4300],
	    log[4300], dpath[4300];
	et_store *s;
	int t;
	struct disk disk;
	uint64_t need, avail;
	double setup_s;
	uint64_t setup_commit;
	uint64_t log_bytes; /* t.et.log's size at the end */
	double open_ro_s;   /* et_tfile_open RDONLY of the source table */
	double open_cp_s;   /* the same of the copy's, after the full apply */
	bool proc_io;	    /* /proc/self/io can be read */
	struct dround r[D_ROUNDS];
	struct raw_read raw[2];
	double raw_mbs;	     /* the faster of raw[] */
	struct serve_fig sf; /* round D_SERVE's */
	/* the 10% export's read and write, raw, at once (copy_limit) */
	double copy_s, copy_read_s, copy_write_s, copy_mbs;
	char copy_note[160];
	double wall_s;
	/* buffers */
	uint64_t *ids;
	float *vals, *a, *b;
};

static double ratio(double a, double b)
{
	return b > 0 ? a / b : 0;
}

static double mbs(uint64_t bytes, double s)
{
	return s > 0 ? (double)bytes / s / 1e6 : 0;
}

static double cpu_s(void)
{
	struct rusage ru;

	if (getrusage(RUSAGE_SELF, &ru))
		return 0;
	return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 +
	       (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
}

/* Bytes this process has had read from storage (its threads and
 * io_uring's workers included), or UINT64_MAX if it cannot tell. */
static uint64_t proc_read_bytes(void)
{
	char line[128];
	uint64_t v = UINT64_MAX;
	FILE *f = fopen("/proc/self/io", "r");

	if (!f)
		return v;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "read_bytes: %" SCNu64, &v) == 1)
			break;
	fclose(f);
	return v;
}

/* Rounds v to the table's dtype, as the store keeps it. */
static float as_stored(float v, et_dtype dt)
{
	if (dt == ET_F16)
		return et_f16_to_f32(et_f32_to_f16(v));
	if (dt == ET_BF16)
		return et_bf16_to_f32(et_f32_to_bf16(v));
	return v;
}

/* ------------------------------------------------------- the page cache */

/* Drops the cached pages of the file (synced: they are clean) and
 * returns the bytes still cached (mincore), or 0 if it cannot tell. */
static uint64_t drop_file(const char *path)
{
	long pg = sysconf(_SC_PAGESIZE);
	unsigned char *vec = NULL;
	uint64_t cached = 0;
	struct stat st;
	size_t pages;
	void *m;
	int fd;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
	if (fstat(fd, &st) || st.st_size == 0 || pg <= 0) {
		close(fd);
		return 0;
	}
	pages = ((size_t)st.st_size + (size_t)pg - 1) / (size_t)pg;
	m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
	vec = m == MAP_FAILED ? NULL : malloc(pages);
	if (vec && !mincore(m, (size_t)st.st_size, vec))
		for (size_t i = 0; i < pages; i++)
			cached += (vec[i] & 1) ? (uint64_t)pg : 0;
	free(vec);
	if (m != MAP_FAILED)
		munmap(m, (size_t)st.st_size);
	close(fd);
	return cached;
}

/* drop_file() of every regular file of dir; the bytes still cached. */
static uint64_t drop_dir(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	uint64_t cached = 0;
	char path[4600];

	if (!d)
		return 0;
	while ((de = readdir(d))) {
		struct stat st;

		snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
		if (!stat(path, &st) && S_ISREG(st.st_mode))
			cached += drop_file(path);
	}
	closedir(d);
	return cached;
}

/* ------------------------------------------------------------ the source */

/* Whether the two stores, a delta and the slack fit in the free space. */
static int space(struct dbench *d)
{
	struct statvfs vfs;
	uint64_t one;
	char a[32], b[32];

	if (statvfs(d->dir, &vfs)) {
		cli_error("%s: %s", d->dir, strerror(errno));
		return D_BAD;
	}
	d->avail = (uint64_t)vfs.f_bavail * vfs.f_frsize;
	/* a store: every row's record and journal entry, and the rewrites
	 * (11%) */
	one = d->n * (d->rec_bytes + D_JOURNAL);
	one += one * 11 / 100;
	d->need = 2 * one + d->n * (8 + (uint64_t)d->row_bytes) + D_SLACK;
	if (d->need > d->avail) {
		cli_error("%s: %s free, and %" PRIu64 " rows need about %s "
			  "(two stores and the full delta): fewer --rows, a "
			  "smaller --dim, or a --dir with room",
			  d->dir,
			  cli_human_bytes((double)d->avail, a, sizeof(a)), d->n,
			  cli_human_bytes((double)d->need, b, sizeof(b)));
		return D_BAD;
	}
	return 0;
}

/* The values of row id at generation gen (0: the setup's). */
static void row_vals(uint64_t id, uint32_t gen, uint32_t dim, float *v)
{
	for (uint32_t c = 0; c < dim; c++)
		v[c] = fill_value(gen, id, c);
}

/* Every row written once, in id order, and committed: commit A. */
static int setup(struct dbench *d)
{
	const struct bench_opts *o = d->o;
	struct et_table_params p = {.rows = d->n,
				    .dim = d->dim,
				    .dtype = o->dtype,
				    .optim = ET_OPT_SGD,
				    .init = ET_INIT_UNIFORM,
				    .seed = o->wl.seed};
	struct et_checkpoint_info ci;
	struct et_store_config c;
	struct progress pg;
	double t0 = now_s();
	int ret;

	store_config(o, &c);
	ret = et_store_open(d->src, &c, &d->s);
	if (!ret)
		ret = et_table_create(d->s, "t", &p, &d->t);
	if (ret)
		return ret;
	progress_start(&pg, "writing", "rows", d->n, o->quiet);
	for (uint64_t i0 = 0; !ret && i0 < d->n; i0 += D_BATCH) {
		size_t m = d->n - i0 < D_BATCH ? (size_t)(d->n - i0) : D_BATCH;

		if (bench_stop) {
			ret = -EINTR;
			break;
		}
		for (size_t i = 0; i < m; i++) {
			d->ids[i] = i0 + i;
			row_vals(i0 + i, 0, d->dim, d->vals + i * d->dim);
		}
		ret = et_write_rows(d->s, d->t, d->ids, m, d->vals);
		progress_update(&pg, i0 + m);
	}
	progress_end(&pg);
	if (!ret)
		ret = et_checkpoint(d->s, NULL, 0);
	if (!ret)
		ret = et_checkpoint_info(d->s, &ci);
	if (!ret)
		d->setup_commit = ci.commit;
	d->setup_s = now_s() - t0;
	return ret;
}

/* The i-th row rewritten by round k (a keyed bijection of the ids). */
static void round_perm(const struct dbench *d, int k, struct wl_perm *p)
{
	wl_perm_init(p, d->n, d->o->wl.seed ^ (0x64656c7461ULL + (uint64_t)k));
}

/* Round k's rows rewritten with generation k's values, committed. */
static int rewrite(struct dbench *d, int k, struct dround *r)
{
	struct wl_perm perm;
	struct progress pg;
	double t0 = now_s();
	int ret = 0;

	round_perm(d, k, &perm);
	progress_start(&pg, "rewriting", "rows", r->changed, d->o->quiet);
	for (uint64_t i0 = 0; !ret && i0 < r->changed; i0 += D_BATCH) {
		size_t m = r->changed - i0 < D_BATCH ? (size_t)(r->changed - i0)
						     : D_BATCH;

		if (bench_stop) {
			ret = -EINTR;
			break;
		}
		for (size_t i = 0; i < m; i++) {
			d->ids[i] = wl_perm_apply(&perm, i0 + i);
			row_vals(d->ids[i], (uint32_t)k, d->dim,
				 d->vals + i * d->dim);
		}
		ret = et_write_rows(d->s, d->t, d->ids, m, d->vals);
		progress_update(&pg, i0 + m);
	}
	progress_end(&pg);
	if (!ret)
		ret = et_checkpoint(d->s, NULL, 0);
	r->rewrite_s = now_s() - t0;
	return ret;
}

/* ------------------------------------------------------------- the check */

/* Reads ids[0..n) of both files and compares them; with gen >= 0 they
 * must also be generation gen's values. */
static int compare(struct dbench *d, et_tfile *src, et_tfile *cp, size_t n,
		   int gen, const char *what)
{
	et_dtype dt = d->o->dtype;
	int ret;

	ret = et_tfile_read_rows(src, d->ids, n, d->a, NULL);
	if (!ret)
		ret = et_tfile_read_rows(cp, d->ids, n, d->b, NULL);
	if (ret)
		return ret;
	for (size_t i = 0; i < n; i++) {
		const float *x = d->a + i * d->dim, *y = d->b + i * d->dim;

		if (memcmp(x, y, d->dim * sizeof(float))) {
			uint32_t c = 0;

			while (c + 1 < d->dim && x[c] == y[c])
				c++;
			cli_error("%s row %" PRIu64 " column %u: the copy "
				  "reads %.9g, the source %.9g",
				  what, d->ids[i], c, y[c], x[c]);
			return D_BAD;
		}
		if (gen < 0)
			continue;
		row_vals(d->ids[i], (uint32_t)gen, d->dim, d->vals);
		for (uint32_t c = 0; c < d->dim; c++) {
			float want = as_stored(d->vals[c], dt);

			if (memcmp(&want, &x[c], sizeof(want))) {
				cli_error("%s row %" PRIu64 " column %u reads "
					  "%.9g, not the %.9g written",
					  what, d->ids[i], c, x[c], want);
				return D_BAD;
			}
		}
	}
	return 0;
}

/* After round k's apply: D_SAMPLE random rows (every row when fewer) of
 * the copy equal the source's, and up to D_SAMPLE_CH rows the round
 * rewrote equal its values in both. */
static int check(struct dbench *d, int k, struct dround *r)
{
	uint64_t m = d->n < D_SAMPLE ? d->n : D_SAMPLE;
	uint64_t mc =
	    k ? (r->changed < D_SAMPLE_CH ? r->changed : D_SAMPLE_CH) : 0;
	et_tfile *src = NULL, *cp = NULL;
	struct wl_perm perm;
	double t0 = now_s();
	int ret;

	r->checked = r->checked_changed = 0;
	ret = et_tfile_open(d->table, ET_TFILE_RDONLY, &src);
	if (!ret)
		ret = et_tfile_open(d->ctable, ET_TFILE_RDONLY, &cp);
	wl_perm_init(&perm, d->n,
		     d->o->wl.seed ^ 0x636865636bULL ^ (uint64_t)k);
	for (uint64_t i0 = 0; !ret && i0 < m; i0 += D_BATCH) {
		size_t n = m - i0 < D_BATCH ? (size_t)(m - i0) : D_BATCH;

		for (size_t i = 0; i < n; i++)
			d->ids[i] =
			    m == d->n ? i0 + i : wl_perm_apply(&perm, i0 + i);
		ret = compare(d, src, cp, n, -1, "random");
		if (!ret)
			r->checked += n;
	}
	round_perm(d, k, &perm);
	for (uint64_t i0 = 0; !ret && i0 < mc; i0 += D_BATCH) {
		size_t n = mc - i0 < D_BATCH ? (size_t)(mc - i0) : D_BATCH;

		for (size_t i = 0; i < n; i++)
			d->ids[i] = wl_perm_apply(&perm, i0 + i);
		ret = compare(d, src, cp, n, k, "rewritten");
		if (!ret)
			r->checked_changed += n;
	}
	et_tfile_close(src);
	et_tfile_close(cp);
	r->check_s = now_s() - t0;
	return ret;
}

/* ------------------------------------------------------------ the rounds */

static int one_round(struct dbench *d, int k)
{
	struct dround *r = &d->r[k];
	struct et_checkpoint_info ci;
	struct disk_sample da, db;
	double t0, c0;
	uint64_t rb;
	int ret;

	r->name = d_name[k];
	r->frac = d_frac[k];
	if (k == 0) {
		r->changed = d->n;
		r->from = 0;
	} else {
		r->changed = (uint64_t)((double)d->n * r->frac + 0.5);
		if (!r->changed)
			r->changed = 1;
		ret = et_checkpoint_info(d->s, &ci);
		if (ret)
			return ret;
		r->from = ci.commit;
		if (!d->o->quiet)
			cli_note("%s: rewriting %" PRIu64 " rows", r->name,
				 r->changed);
		ret = rewrite(d, k, r);
		if (ret)
			return ret;
	}
	ret = et_checkpoint_info(d->s, &ci);
	if (ret)
		return ret;
	r->to = ci.commit;
	if (!d->o->quiet)
		cli_note("%s: export %" PRIu64 " -> %" PRIu64, r->name, r->from,
			 r->to);
	r->cached_src = drop_dir(d->src);
	disk_sample(&d->disk, &da);
	rb = proc_read_bytes();
	c0 = cpu_s();
	t0 = now_s();
	ret = et_delta_export(d->src, r->from, d->dpath, 0, &r->ex);
	r->export_s = now_s() - t0;
	r->export_cpu_s = cpu_s() - c0;
	r->ex_read = proc_read_bytes() - rb;
	disk_sample(&d->disk, &db);
	disk_diff(&d->disk, &da, &db, &r->ex_disk);
	d->proc_io = rb != UINT64_MAX;
	if (ret)
		return ret;
	if (!d->o->quiet)
		cli_note("%s: exported in %.2f s; applying", r->name,
			 r->export_s);
	r->cached_dl = drop_file(d->dpath);
	disk_sample(&d->disk, &da);
	c0 = cpu_s();
	t0 = now_s();
	if (k == D_SERVE) {
		ret = delta_serve(d->copy, d->dpath, d->n, d->dim,
				  d->o->wl.seed, &d->sf);
		r->ap = d->sf.ap;
		r->apply_s = d->sf.apply_s;
	} else {
		ret = et_delta_apply(d->dpath, d->copy, &r->ap);
		r->apply_s = now_s() - t0;
	}
	r->apply_cpu_s = cpu_s() - c0;
	disk_sample(&d->disk, &db);
	disk_diff(&d->disk, &da, &db, &r->ap_disk);
	unlink(d->dpath);
	if (ret)
		return ret;
	if (k && (r->ex.rows != r->changed || r->ex.whole)) {
		cli_error("the delta %" PRIu64 " -> %" PRIu64
			  " carries %" PRIu64 " rows%s, not the %" PRIu64
			  " rewritten",
			  r->from, r->to, r->ex.rows,
			  r->ex.whole ? " (the table whole)" : "", r->changed);
		return D_BAD;
	}
	if (r->ap.rows != r->ex.rows || r->ap.to_commit != r->to) {
		cli_error(
		    "the apply of %" PRIu64 " -> %" PRIu64 " says %" PRIu64
		    " rows to commit %" PRIu64 ", the export %" PRIu64 " rows",
		    r->from, r->to, r->ap.rows, r->ap.to_commit, r->ex.rows);
		return D_BAD;
	}
	if (!d->o->quiet)
		cli_note("%s: applied in %.2f s; checking the copy", r->name,
			 r->apply_s);
	return check(d, k, r);
}

/* et_tfile_open read-only of a table (path, in the directory dir)
 * alone, its cache dropped first: what loading its whole index costs. */
static int open_ro(const char *dir, const char *path, double *s)
{
	et_tfile *tf = NULL;
	double t0;
	int ret;

	drop_dir(dir);
	t0 = now_s();
	ret = et_tfile_open(path, ET_TFILE_RDONLY, &tf);
	*s = now_s() - t0;
	et_tfile_close(tf);
	return ret;
}

/* -------------------------------------------------------------- raw read */

struct seq {
	uint64_t chunks; /* whole 1 MiB chunks of the file */
	uint64_t next;	 /* chunks sent */
	uint64_t want;	 /* chunks to read */
	uint64_t bytes;	 /* read */
	double deadline;
	int err;
};

/* A completion: the request aimed at the next chunk (the file's start
 * again past its end) until enough is read. */
static bool seq_done(struct rawio_req *req)
{
	struct seq *s = req->arg;

	if (req->res != (int)req->len) {
		if (!s->err)
			s->err = req->res < 0 ? req->res : -EIO;
		return false;
	}
	s->bytes += req->len;
	if (s->next >= s->want || bench_stop ||
	    (s->next % 64 == 0 && now_s() > s->deadline))
		return false;
	req->off = (s->next++ % s->chunks) * D_RAW_CHUNK;
	return true;
}

/* Sequential 1 MiB O_DIRECT reads of path at depth qd (rawio.c): want
 * bytes (rounded up to 1 MiB), or 0: at least D_RAW_MIN (passes over the
 * file repeated), at most D_RAW_MAX_S seconds. */
static void raw_read(struct dbench *d, const char *path, unsigned qd,
		     uint64_t want, struct raw_read *out)
{
	struct rawio_req req[8];
	struct disk_sample da, db;
	struct seq s = {0};
	struct stat st;
	rawio *rio = NULL;
	uint32_t align;
	int fd = -1, ret;
	double t0;

	memset(out, 0, sizeof(*out));
	memset(req, 0, sizeof(req));
	out->qd = qd;
	ret = rawio_open_file(path, O_RDONLY, &fd);
	if (!ret && fstat(fd, &st))
		ret = -errno;
	if (ret) {
		snprintf(out->note, sizeof(out->note), "the row log: %s",
			 strerror(-ret));
		goto out;
	}
	s.chunks = (uint64_t)st.st_size / D_RAW_CHUNK;
	if (!s.chunks) {
		snprintf(out->note, sizeof(out->note),
			 "the row log is smaller than 1 MiB");
		goto out;
	}
	s.want = s.chunks > D_RAW_MIN / D_RAW_CHUNK ? s.chunks
						    : D_RAW_MIN / D_RAW_CHUNK;
	if (want)
		s.want = (want + D_RAW_CHUNK - 1) / D_RAW_CHUNK;
	out->passes_bytes = s.chunks * D_RAW_CHUNK;
	align = rawio_mem_align(fd);
	ret = rawio_open(qd, &rio);
	for (unsigned i = 0; !ret && i < qd; i++) {
		req[i] =
		    (struct rawio_req){.fd = fd, .len = D_RAW_CHUNK, .arg = &s};
		if (posix_memalign(&req[i].buf, align > 4096 ? align : 4096,
				   D_RAW_CHUNK))
			ret = -ENOMEM;
	}
	if (ret) {
		snprintf(out->note, sizeof(out->note), "io_uring: %s",
			 strerror(-ret));
		goto out;
	}
	disk_sample(&d->disk, &da);
	t0 = now_s();
	s.deadline = t0 + D_RAW_MAX_S;
	for (unsigned i = 0; i < qd && s.next < s.want; i++) {
		req[i].off = (s.next++ % s.chunks) * D_RAW_CHUNK;
		rawio_queue(rio, &req[i]);
	}
	ret = rawio_run(rio, seq_done);
	out->seconds = now_s() - t0;
	disk_sample(&d->disk, &db);
	disk_diff(&d->disk, &da, &db, &out->disk);
	if (!ret)
		ret = s.err;
	if (ret) {
		snprintf(out->note, sizeof(out->note), "%s", strerror(-ret));
		goto out;
	}
	out->bytes = s.bytes;
	out->mbs = mbs(s.bytes, out->seconds);
out:
	rawio_close(rio);
	for (unsigned i = 0; i < 8; i++)
		free(req[i].buf);
	if (fd >= 0)
		close(fd);
}

/* ---------------------------------------------------------------- report */

/* The 10% export's own limit: its record bytes read from the row log
 * (sequential 1 MiB O_DIRECT reads, depth 8) and its delta's bytes
 * written (sequential 1 MiB O_DIRECT writes and a fdatasync, on another
 * thread), both at once on the one disk: delta bytes / the wall time. */
struct wjob {
	const char *dir;
	uint64_t bytes;
	double mbs, secs;
};

static void *wjob_main(void *arg)
{
	struct wjob *j = arg;
	double t0 = now_s();

	j->mbs = raw_seq_write(j->dir, j->bytes);
	j->secs = now_s() - t0;
	return NULL;
}

static void copy_limit(struct dbench *d)
{
	const struct dround *r = &d->r[2];
	struct wjob j = {.dir = d->dir, .bytes = r->ex.bytes};
	struct raw_read rr;
	pthread_t th;
	double t0 = now_s();
	bool threaded = !pthread_create(&th, NULL, wjob_main, &j);

	raw_read(d, d->log, 8, r->ex.rows * d->rec_bytes, &rr);
	if (threaded)
		pthread_join(th, NULL);
	else
		wjob_main(&j);
	d->copy_s = now_s() - t0;
	d->copy_read_s = rr.seconds;
	d->copy_write_s = j.secs;
	if (rr.note[0] || j.mbs < 0)
		snprintf(d->copy_note, sizeof(d->copy_note), "%s",
			 rr.note[0] ? rr.note : strerror((int)-j.mbs));
	else
		d->copy_mbs = mbs(r->ex.bytes, d->copy_s);
}

static double ex_mbs(const struct dround *r)
{
	return mbs(r->ex.bytes, r->export_s);
}

static double rec_mbs(const struct dbench *d, const struct dround *r)
{
	return mbs(r->ex.rows * d->rec_bytes, r->export_s);
}

static void print_json(const struct dbench *d)
{
	const struct bench_opts *o = d->o;
	const struct dround *a = &d->r[1], *b = &d->r[2];

	printf("{\"mode\":\"delta\",\"rows\":%" PRIu64
	       ",\"dim\":%u,\"dtype\":\"%s\",\"row_bytes\":%u,"
	       "\"record_bytes\":%u,\"ddr_bytes\":%" PRIu64
	       ",\"disk_free_bytes\":%" PRIu64 ",\"disk_need_bytes\":%" PRIu64
	       ",\"setup_s\":%.3f,\"setup_commit\":%" PRIu64
	       ",\"log_bytes\":%" PRIu64 ",\"open_ro_s\":%.4f,"
	       "\"open_ro_copy_s\":%.4f,\"rounds\":[",
	       d->n, d->dim, cli_dtype_name(o->dtype), d->row_bytes,
	       d->rec_bytes, o->ddr_bytes, d->avail, d->need, d->setup_s,
	       d->setup_commit, d->log_bytes, d->open_ro_s, d->open_cp_s);
	for (int k = 0; k < D_ROUNDS; k++) {
		const struct dround *r = &d->r[k];

		printf("%s{\"name\":\"%s\",\"frac\":%.4f,\"changed\":%" PRIu64
		       ",\"rewrite_s\":%.4f,\"from\":%" PRIu64
		       ",\"to\":%" PRIu64 ",\"rows\":%" PRIu64
		       ",\"whole\":%u,\"bytes\":%" PRIu64
		       ",\"cached_before_export\":%" PRIu64
		       ",\"export_s\":%.6f,\"export_cpu_s\":%.6f,"
		       "\"export_mbs\":%.3f,\"record_bytes_read\":%" PRIu64
		       ",\"record_mbs\":%.3f,\"device_read_bytes\":%" PRIu64
		       ",\"device_reads\":%" PRIu64
		       ",\"process_read_bytes\":%" PRId64
		       ",\"cached_before_apply\":%" PRIu64
		       ",\"apply_s\":%.6f,\"apply_cpu_s\":%.6f,"
		       "\"apply_mbs\":%.3f,\"apply_rows\":%" PRIu64
		       ",\"device_write_bytes_apply\":%" PRIu64
		       ",\"checked\":%" PRIu64 ",\"checked_changed\":%" PRIu64
		       ",\"check_s\":%.3f}",
		       k ? "," : "", r->name, r->frac, r->changed, r->rewrite_s,
		       r->from, r->to, r->ex.rows, r->ex.whole, r->ex.bytes,
		       r->cached_src, r->export_s, r->export_cpu_s, ex_mbs(r),
		       r->ex.rows * d->rec_bytes, rec_mbs(d, r),
		       r->ex_disk.bytes_read, r->ex_disk.reads,
		       d->proc_io ? (int64_t)r->ex_read : -1, r->cached_dl,
		       r->apply_s, r->apply_cpu_s, mbs(r->ex.bytes, r->apply_s),
		       r->ap.rows, r->ap_disk.bytes_written, r->checked,
		       r->checked_changed, r->check_s);
	}
	printf("],\"raw\":[");
	for (int q = 0; q < 2; q++)
		printf("%s{\"qd\":%u,\"bytes\":%" PRIu64
		       ",\"file_bytes\":%" PRIu64 ",\"seconds\":%.4f,"
		       "\"mbs\":%.3f,\"device_read_bytes\":%" PRIu64 "}",
		       q ? "," : "", d->raw[q].qd, d->raw[q].bytes,
		       d->raw[q].passes_bytes, d->raw[q].seconds, d->raw[q].mbs,
		       d->raw[q].disk.bytes_read);
	printf("],\"serve\":{\"batch\":%u,\"idle_s\":%.4f,\"apply_s\":%.4f,"
	       "\"lookups_idle\":%" PRIu64 ",\"lookups_apply\":%" PRIu64
	       ",\"idle_rows_s\":%.1f,\"apply_rows_s\":%.1f,"
	       "\"longest_idle_s\":%.6f,\"longest_apply_s\":%.6f,"
	       "\"index_bytes\":%" PRIu64 ",\"cache_bytes\":%" PRIu64
	       ",\"cache_hits\":%" PRIu64 ",\"cache_misses\":%" PRIu64 "}",
	       d->sf.batch, d->sf.idle_s, d->sf.apply_s, d->sf.lookups_idle,
	       d->sf.lookups_apply, d->sf.idle_rows_s, d->sf.apply_rows_s,
	       d->sf.longest_idle_s, d->sf.longest_apply_s, d->sf.index_bytes,
	       d->sf.cache_bytes, d->sf.cache_hits, d->sf.cache_misses);
	printf(",\"copy\":{\"seconds\":%.4f,\"read_s\":%.4f,"
	       "\"write_s\":%.4f,\"mbs\":%.3f,\"ratio_export_10\":%.4f}",
	       d->copy_s, d->copy_read_s, d->copy_write_s, d->copy_mbs,
	       ratio(ex_mbs(b), d->copy_mbs));
	printf(",\"raw_mbs\":%.3f,\"ratio_export_raw\":{\"full\":%.4f,"
	       "\"1%%\":%.4f,\"10%%\":%.4f},\"ratio_bytes_10_1\":%.4f,"
	       "\"ratio_time_10_1\":%.4f,\"check_ok\":true,\"wall_s\":%.2f}\n",
	       d->raw_mbs, ratio(ex_mbs(&d->r[0]), d->raw_mbs),
	       ratio(ex_mbs(a), d->raw_mbs), ratio(ex_mbs(b), d->raw_mbs),
	       ratio((double)b->ex.bytes, (double)a->ex.bytes),
	       ratio(b->export_s, a->export_s), d->wall_s);
}

static void print_text(const struct dbench *d)
{
	const struct bench_opts *o = d->o;
	const struct dround *a = &d->r[1], *b = &d->r[2];
	char h1[32], h2[32];

	printf("store:      1 row-indexed table of %" PRIu64 " rows x dim %u "
	       "%s (%u B a row, %u B a log record), DDR %s\n",
	       d->n, d->dim, cli_dtype_name(o->dtype), d->row_bytes,
	       d->rec_bytes, cli_human_bytes((double)o->ddr_bytes, h1, 32));
	printf("setup:      %" PRIu64 " rows written and committed in %.1f s "
	       "(commit %" PRIu64 ", untimed)\n",
	       d->n, d->setup_s, d->setup_commit);
	printf("open:       et_tfile_open read-only of the table alone (its "
	       "whole index loaded: a table-sized cost): source %.3f s, the "
	       "copy after the full apply %.3f s\n",
	       d->open_ro_s, d->open_cp_s);
	for (int k = 0; k < D_ROUNDS; k++) {
		const struct dround *r = &d->r[k];

		if (k)
			printf("%-11s rewrote %" PRIu64 " distinct rows drawn "
			       "at random and committed in %.2f s "
			       "(untimed)\n",
			       strcat(strcpy(h1, r->name), ":"), r->changed,
			       r->rewrite_s);
		else
			printf("full:       the delta from 0 (the table "
			       "whole), for scale\n");
		printf("  export    %" PRIu64 " -> %" PRIu64 ": %" PRIu64
		       " rows, %.3f MB in %.4f s = %.1f MB/s (log records "
		       "%.3f MB: %.1f MB/s); CPU %.3f s\n",
		       r->from, r->to, r->ex.rows, (double)r->ex.bytes / 1e6,
		       r->export_s, ex_mbs(r),
		       (double)(r->ex.rows * d->rec_bytes) / 1e6, rec_mbs(d, r),
		       r->export_cpu_s);
		if (d->proc_io)
			printf("            read from storage %.1f MB (this "
			       "process); %s of the source cached before\n",
			       (double)r->ex_read / 1e6,
			       cli_human_bytes((double)r->cached_src, h2, 32));
		if (r->ex_disk.ok)
			printf("            the device (all processes) read "
			       "%.1f MB in %" PRIu64 " reads (%.0f KB each)\n",
			       (double)r->ex_disk.bytes_read / 1e6,
			       r->ex_disk.reads,
			       r->ex_disk.reads
				   ? (double)r->ex_disk.bytes_read /
					 (double)r->ex_disk.reads / 1e3
				   : 0);
		if (k == D_SERVE) {
			const struct serve_fig *f = &d->sf;

			printf("  serve     through a serving handle "
			       "(et_serve_apply), a reader thread looking up "
			       "%u Zipf rows a call: apply %" PRIu64
			       " rows in %.4f s = %.1f MB/s\n",
			       f->batch, r->ap.rows, r->apply_s,
			       mbs(r->ex.bytes, r->apply_s));
			printf("            lookups: idle %.2f M rows/s "
			       "(%" PRIu64 " calls in %.2f s, longest %.1f "
			       "ms); during the apply %.2f M rows/s "
			       "(%" PRIu64 " calls, longest %.1f ms): %.2f of "
			       "idle\n",
			       f->idle_rows_s / 1e6, f->lookups_idle, f->idle_s,
			       f->longest_idle_s * 1e3, f->apply_rows_s / 1e6,
			       f->lookups_apply, f->longest_apply_s * 1e3,
			       ratio(f->apply_rows_s, f->idle_rows_s));
			printf("            the handle's row cache %.0f MiB: "
			       "%.1f%% of the rows looked up were hits\n",
			       (double)f->cache_bytes / 1048576.0,
			       100.0 * ratio((double)f->cache_hits,
					     (double)(f->cache_hits +
						      f->cache_misses)));
		} else {
			printf("  apply     %" PRIu64 " rows in %.4f s = %.1f "
			       "MB/s; CPU %.3f s\n",
			       r->ap.rows, r->apply_s,
			       mbs(r->ex.bytes, r->apply_s), r->apply_cpu_s);
		}
		printf("  check     the copy: %" PRIu64
		       " random rows equal the "
		       "source's, %" PRIu64 " rewritten rows the values "
		       "written: ok (%.2f s)\n",
		       r->checked, r->checked_changed, r->check_s);
	}
	for (int q = 0; q < 2; q++) {
		const struct raw_read *w = &d->raw[q];

		if (w->note[0])
			printf("raw:        QD %u: could not be measured: %s\n",
			       w->qd, w->note);
		else
			printf("raw:        sequential 1 MiB O_DIRECT reads of "
			       "the row log (%.1f MB), QD %u: %.1f MB in %.2f "
			       "s = %.0f MB/s\n",
			       (double)w->passes_bytes / 1e6, w->qd,
			       (double)w->bytes / 1e6, w->seconds, w->mbs);
	}
	if (d->copy_note[0])
		printf("copy:       could not be measured: %s\n", d->copy_note);
	else
		printf("copy:       the 10%% export's bytes, raw and at once: "
		       "%.1f MB read (1 MiB O_DIRECT, QD 8; %.2f s) beside "
		       "%.1f MB written (1 MiB O_DIRECT + fdatasync; %.2f s): "
		       "%.3f s = %.0f MB/s of delta\n",
		       (double)(b->ex.rows * d->rec_bytes) / 1e6,
		       d->copy_read_s, (double)b->ex.bytes / 1e6,
		       d->copy_write_s, d->copy_s, d->copy_mbs);
	printf("ratios:     export MB/s / raw %.0f MB/s: 1%% %.3f, 10%% %.3f "
	       "(goal >= 0.5); full %.3f\n",
	       d->raw_mbs, ratio(ex_mbs(a), d->raw_mbs),
	       ratio(ex_mbs(b), d->raw_mbs),
	       ratio(ex_mbs(&d->r[0]), d->raw_mbs));
	if (!d->copy_note[0])
		printf("            10%% export / its copy limit %.0f MB/s: "
		       "%.3f\n",
		       d->copy_mbs, ratio(ex_mbs(b), d->copy_mbs));
	printf("            log records MB/s / raw: 1%% %.3f, 10%% %.3f\n",
	       ratio(rec_mbs(d, a), d->raw_mbs),
	       ratio(rec_mbs(d, b), d->raw_mbs));
	printf("            10%% / 1%%: bytes %.2f, export time %.2f, apply "
	       "time %.2f (ideally ~10)\n",
	       ratio((double)b->ex.bytes, (double)a->ex.bytes),
	       ratio(b->export_s, a->export_s), ratio(b->apply_s, a->apply_s));
	printf("            10%% / full: bytes %.3f, export time %.3f\n",
	       ratio((double)b->ex.bytes, (double)d->r[0].ex.bytes),
	       ratio(b->export_s, d->r[0].export_s));
	printf("check:      after each apply, the copy equals the source on "
	       "%" PRIu64 " random rows, and on %" PRIu64 " and %" PRIu64
	       " rewritten rows the values written: ok\n",
	       d->r[0].checked, a->checked_changed, b->checked_changed);
	printf("time:       %.1f s\n", d->wall_s);
}

/* -------------------------------------------------------------- the mode */

int cmd_delta(const struct bench_opts *o)
{
	struct dbench d = {.o = o, .n = o->wl.rows, .dim = o->dim, .t = -1};
	const char *base = o->dir, *td = getenv("TMPDIR");
	double t_all = now_s();
	struct stat st;
	int ret;

	if (opt_mixed_dims(o) || o->format == FMT_CSV) {
		cli_usage_error("delta takes one --dim and prints text or "
				"--json");
		return CLI_EXIT_USAGE;
	}
	if (d.n < 100) {
		cli_usage_error("delta: --rows %" PRIu64 " < 100 (1%% of them "
				"are rewritten)",
				d.n);
		return CLI_EXIT_USAGE;
	}
	d.row_bytes = (uint32_t)(d.dim * dtype_bytes(o->dtype));
	d.rec_bytes = (16 + d.row_bytes + 7) / 8 * 8;
	if (!base)
		base = td && *td ? td : "/var/tmp";
	if (mkdir(base, 0755) && errno != EEXIST) {
		cli_error("%s: %s", base, strerror(errno));
		return CLI_EXIT_FAIL;
	}
	snprintf(d.dir, sizeof(d.dir), "%s/embtier-delta.XXXXXX", base);
	if (!mkdtemp(d.dir)) {
		cli_error("mkdtemp %s: %s", d.dir, strerror(errno));
		return CLI_EXIT_FAIL;
	}
	snprintf(d.src, sizeof(d.src), "%s/src", d.dir);
	snprintf(d.copy, sizeof(d.copy), "%s/copy", d.dir);
	snprintf(d.table, sizeof(d.table), "%s/t.et", d.src);
	snprintf(d.ctable, sizeof(d.ctable), "%s/t.et", d.copy);
	snprintf(d.log, sizeof(d.log), "%s/t.et.log", d.src);
	snprintf(d.dpath, sizeof(d.dpath), "%s/d.delta", d.dir);
	disk_open(&d.disk, d.dir);
	ret = space(&d);
	if (ret)
		goto out;
	d.ids = malloc(D_BATCH * sizeof(*d.ids));
	d.vals = malloc((size_t)D_BATCH * d.dim * sizeof(float));
	d.a = malloc((size_t)D_BATCH * d.dim * sizeof(float));
	d.b = malloc((size_t)D_BATCH * d.dim * sizeof(float));
	if (!d.ids || !d.vals || !d.a || !d.b) {
		ret = -ENOMEM;
		goto out;
	}
	if (!o->quiet) {
		char a[32], b[32];

		cli_note("%" PRIu64 " rows x dim %u %s under %s; %s free, "
			 "about %s needed",
			 d.n, d.dim, cli_dtype_name(o->dtype), d.dir,
			 cli_human_bytes((double)d.avail, a, sizeof(a)),
			 cli_human_bytes((double)d.need, b, sizeof(b)));
	}
	ret = setup(&d);
	if (ret)
		goto out;
	if (!o->quiet)
		cli_note("setup: %" PRIu64 " rows committed in %.1f s", d.n,
			 d.setup_s);
	ret = open_ro(d.src, d.table, &d.open_ro_s);
	for (int k = 0; k < D_ROUNDS && !ret; k++) {
		ret = bench_stop ? -EINTR : one_round(&d, k);
		if (!ret && k == 0)
			ret = open_ro(d.copy, d.ctable, &d.open_cp_s);
	}
	if (ret)
		goto out;
	if (!stat(d.log, &st))
		d.log_bytes = (uint64_t)st.st_size;
	if (!o->quiet)
		cli_note("raw sequential reads of %s", d.log);
	for (int q = 0; q < 2 && !bench_stop; q++) {
		raw_read(&d, d.log, d_qd[q], 0, &d.raw[q]);
		if (d.raw[q].mbs > d.raw_mbs)
			d.raw_mbs = d.raw[q].mbs;
	}
	if (!bench_stop)
		copy_limit(&d);
	if (bench_stop) {
		ret = -EINTR;
		goto out;
	}
	ret = et_store_close(d.s);
	d.s = NULL;
	if (ret)
		goto out;
	d.wall_s = now_s() - t_all;
	if (o->format == FMT_JSON)
		print_json(&d);
	else
		print_text(&d);
out:
	if (ret == -EINTR)
		cli_error("%s: interrupted", d.dir);
	else if (ret < 0)
		cli_error_code(d.dir, ret);
	if (d.s)
		et_store_close(d.s);
	rm_tree(d.dir);
	free(d.ids);
	free(d.vals);
	free(d.a);
	free(d.b);
	return ret ? CLI_EXIT_FAIL : CLI_EXIT_OK;
}
