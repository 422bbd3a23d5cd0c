/*
 * build.c - embtier-build: creates a table file from raw little-endian f32
 * rows, from a .npy array, or from the initializer alone (a lazy table,
 * which costs one header block whatever its logical size).
 *
 * Bulk loading is a two-stage pipeline over two chunk buffers:
 *
 *   reader thread:  pread chunk k+1 (f16 -> f32)  | pread chunk k+2 ...
 *   main thread:    et_tfile_write_range(chunk k) | write chunk k+1 ...
 *
 * A chunk is a whole number of blocks' rows (about --chunk-size bytes of
 * input), so every write_range call starts on a block boundary and writes
 * whole blocks: large sequential writes, no block read back. The output is
 * built under a temporary name beside it and renamed into place after
 * et_tfile_sync(), so a failure or an interrupt never leaves a partial table
 * at the output path, and --force replaces an old table only on success.
 *
 * --apply-delta FILE --dir DIR applies a delta (made by embtier-inspect
 * --delta-since or embtier-train --export-delta) to the serving copy DIR
 * with et_delta_apply: the file is checked whole first, must start at the
 * commit DIR stands at, and is committed at once, so a failure leaves DIR
 * as it was.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* renameat2, RENAME_NOREPLACE */
#endif
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "embtier.h"
#include "npy.h"
#include "progress.h"

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "embtier-build reads little-endian input into host floats"
#endif

#define DEFAULT_CHUNK (32u << 20) /* bytes of f32 rows per write_range */

struct opts {
	const char *out;
	const char *raw, *npy;	  /* at most one input */
	uint64_t rows;		  /* 0: from the input */
	uint32_t dim;		  /* 0: from the input */
	int dtype;		  /* -1: f32, or the .npy input's type */
	struct et_table_params p; /* the rest of the table's parameters */
	uint64_t chunk_bytes;
	bool force, quiet;
	const char *delta; /* --apply-delta: the delta file */
	const char *dir;   /* --dir: the serving copy it brings up */
	bool table_opt;	   /* an option of a table build was given */
};

/* An input file of rows, as the reader thread sees it. */
struct input {
	const char *path;
	int fd;
	uint64_t off; /* file offset of row 0 */
	uint64_t rows;
	uint32_t dim;
	bool f16; /* values are '<f2', else '<f4' */
};

/*
 * The two chunk buffers and their hand-over. Slot k % 2 holds chunk k;
 * full[i] says the reader has filled it and the writer not yet consumed
 * it. The reader stops at the end of the input, on an error (err, why),
 * or when the writer sets stop.
 */
struct loader {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	const struct input *in;
	uint64_t chunk_rows;
	float *buf[2];
	uint16_t *half; /* f16 staging, chunk_rows x dim; or NULL */
	uint64_t n[2];	/* rows in buf[i] */
	bool full[2];
	bool stop;
	int err;	 /* reader's error, -errno */
	const char *why; /* or a message of its own, with err -EIO */
};

static volatile sig_atomic_t interrupted;

static void on_signal(int sig)
{
	interrupted = sig;
}

static void usage(void)
{
	printf(
	    "usage: embtier-build [options] OUTPUT\n"
	    "       embtier-build --apply-delta FILE --dir DIR\n"
	    "Creates the table file OUTPUT; or applies a delta to the store\n"
	    "directory DIR.\n"
	    "\n"
	    "Input (at most one; without one, a lazy table of --rows):\n"
	    "  --from-raw FILE    raw little-endian f32 rows (needs --dim)\n"
	    "  --from-npy FILE    a 2-D .npy array, dtype '<f4' or '<f2'\n"
	    "  --rows N           logical rows (N or B^E, e.g. 2^33); with an\n"
	    "                     input, rows past its end stay lazy\n"
	    "  --dim D            values per row\n"
	    "\n"
	    "Table:\n"
	    "  --dtype T          storage type: f32, f16, bf16 (default f32,\n"
	    "                     or f16 for a '<f2' .npy input)\n"
	    "  --optim O          sgd or adagrad (row-wise; default sgd)\n"
	    "  --init I           rows never written: zeros, uniform, normal\n"
	    "  --scale S          initializer scale (default 1/sqrt(dim))\n"
	    "  --seed N           initializer seed (default 0)\n"
	    "  --block-size B     bytes per block (default 4096)\n"
	    "\n"
	    "Other:\n"
	    "  -o, --output FILE  the output (or give it as the argument)\n"
	    "  -f, --force        replace OUTPUT if it exists\n"
	    "  --chunk-size B     bytes of rows per write (default 32 MiB)\n"
	    "  -q, --quiet        no progress bar and no summary\n"
	    "  -h, --help         this help\n"
	    "\n"
	    "Deltas:\n"
	    "  --apply-delta FILE apply the delta FILE (embtier-inspect\n"
	    "                     --delta-since, embtier-train "
	    "--export-delta)\n"
	    "                     to the serving copy --dir, created with its\n"
	    "                     tables if missing. FILE is checked whole\n"
	    "                     first and must start at the commit DIR\n"
	    "                     stands at (a delta from 0 applies to any);\n"
	    "                     it is committed at once, so a failure "
	    "leaves\n"
	    "                     DIR as it was. Apply deltas in commit order\n"
	    "  --dir DIR          the serving copy (a store directory not "
	    "open\n"
	    "                     elsewhere)\n");
}

enum {
	OPT_RAW = 256,
	OPT_NPY,
	OPT_ROWS,
	OPT_DIM,
	OPT_DTYPE,
	OPT_OPTIM,
	OPT_INIT,
	OPT_SCALE,
	OPT_SEED,
	OPT_BLOCK,
	OPT_CHUNK,
	OPT_APPLY_DELTA,
	OPT_DIR,
};

static const struct option long_opts[] = {
    {"from-raw", required_argument, NULL, OPT_RAW},
    {"from-npy", required_argument, NULL, OPT_NPY},
    {"rows", required_argument, NULL, OPT_ROWS},
    {"dim", required_argument, NULL, OPT_DIM},
    {"dtype", required_argument, NULL, OPT_DTYPE},
    {"optim", required_argument, NULL, OPT_OPTIM},
    {"init", required_argument, NULL, OPT_INIT},
    {"scale", required_argument, NULL, OPT_SCALE},
    {"seed", required_argument, NULL, OPT_SEED},
    {"block-size", required_argument, NULL, OPT_BLOCK},
    {"chunk-size", required_argument, NULL, OPT_CHUNK},
    {"apply-delta", required_argument, NULL, OPT_APPLY_DELTA},
    {"dir", required_argument, NULL, OPT_DIR},
    {"output", required_argument, NULL, 'o'},
    {"force", no_argument, NULL, 'f'},
    {"quiet", no_argument, NULL, 'q'},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

/* Parses a count option into *v, within [lo, hi]; 0 or a usage error. */
static int opt_u64(const char *name, const char *s, uint64_t lo, uint64_t hi,
		   uint64_t *v)
{
	int err = cli_parse_u64(s, v);

	if (err || *v < lo || *v > hi) {
		cli_usage_error("--%s: '%s' is not a number in %" PRIu64
				"..%" PRIu64,
				name, s, lo, hi);
		return -EINVAL;
	}
	return 0;
}

static int opt_name(const char *name, const char *s, int v)
{
	if (v < 0)
		cli_usage_error("--%s: unknown value '%s'", name, s);
	return v;
}

/* The option being parsed, named as the user wrote it. */
static const char *opt_spelling(char **argv, int c)
{
	static char buf[3];

	if (c == 0 || c >= 256 || !strchr("ofqh", c))
		return argv[optind - 1];
	buf[0] = '-';
	buf[1] = (char)c;
	buf[2] = '\0';
	return buf;
}

static int parse_args(int argc, char **argv, struct opts *o)
{
	uint64_t v;
	int c, r;

	memset(o, 0, sizeof(*o));
	o->dtype = -1;
	o->chunk_bytes = DEFAULT_CHUNK;
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":o:fqh", long_opts, NULL)) != -1) {
		/* every option but these builds a table */
		o->table_opt |= c != OPT_APPLY_DELTA && c != OPT_DIR &&
				c != 'q' && c != 'h' && c != ':' && c != '?';
		switch (c) {
		case OPT_RAW:
			o->raw = optarg;
			break;
		case OPT_NPY:
			o->npy = optarg;
			break;
		case OPT_ROWS:
			if (opt_u64("rows", optarg, 1, ET_MAX_ROWS, &o->rows))
				return -EINVAL;
			break;
		case OPT_DIM:
			if (opt_u64("dim", optarg, 1, ET_MAX_DIM, &v))
				return -EINVAL;
			o->dim = (uint32_t)v;
			break;
		case OPT_DTYPE:
			o->dtype =
			    opt_name("dtype", optarg, cli_dtype_parse(optarg));
			if (o->dtype < 0)
				return -EINVAL;
			break;
		case OPT_OPTIM:
			r = opt_name("optim", optarg, cli_optim_parse(optarg));
			if (r < 0)
				return -EINVAL;
			o->p.optim = (et_optim)r;
			break;
		case OPT_INIT:
			r = opt_name("init", optarg, cli_init_parse(optarg));
			if (r < 0)
				return -EINVAL;
			o->p.init = (et_init)r;
			break;
		case OPT_SCALE:
			if (cli_parse_float(optarg, &o->p.init_scale) ||
			    o->p.init_scale < 0) {
				cli_usage_error("--scale: '%s' is not a "
						"finite number >= 0",
						optarg);
				return -EINVAL;
			}
			break;
		case OPT_SEED:
			if (opt_u64("seed", optarg, 0, UINT64_MAX, &o->p.seed))
				return -EINVAL;
			break;
		case OPT_BLOCK:
			if (opt_u64("block-size", optarg, 1, UINT32_MAX, &v))
				return -EINVAL;
			o->p.block_size = (uint32_t)v;
			break;
		case OPT_CHUNK:
			if (opt_u64("chunk-size", optarg, 1, 1ULL << 32,
				    &o->chunk_bytes))
				return -EINVAL;
			break;
		case OPT_APPLY_DELTA:
			o->delta = optarg;
			break;
		case OPT_DIR:
			o->dir = optarg;
			break;
		case 'o':
			o->out = optarg;
			break;
		case 'f':
			o->force = true;
			break;
		case 'q':
			o->quiet = true;
			break;
		case 'h':
			usage();
			exit(CLI_EXIT_OK);
		case ':':
			cli_usage_error("option '%s' needs a value",
					opt_spelling(argv, optopt));
			return -EINVAL;
		default:
			if (optopt && optopt < 256)
				cli_usage_error("unknown option '-%c'", optopt);
			else
				cli_usage_error("unknown option '%s'",
						argv[optind - 1]);
			return -EINVAL;
		}
	}
	if (o->delta || o->dir) {
		if (!o->delta || !o->dir) {
			cli_usage_error(o->delta ? "--apply-delta needs --dir "
						   "DIR"
						 : "--dir goes with "
						   "--apply-delta");
			return -EINVAL;
		}
		if (o->table_opt || optind < argc) {
			cli_usage_error("--apply-delta takes only --dir and "
					"--quiet");
			return -EINVAL;
		}
		return 0;
	}
	if (optind < argc && !o->out)
		o->out = argv[optind++];
	if (optind < argc) {
		cli_usage_error("unexpected argument '%s'", argv[optind]);
		return -EINVAL;
	}
	if (!o->out) {
		cli_usage_error("no output file given");
		return -EINVAL;
	}
	if (o->raw && o->npy) {
		cli_usage_error("--from-raw and --from-npy exclude each other");
		return -EINVAL;
	}
	if (o->raw && !o->dim) {
		cli_usage_error("--from-raw needs --dim");
		return -EINVAL;
	}
	if (!o->raw && !o->npy && (!o->rows || !o->dim)) {
		cli_usage_error("need --from-raw, --from-npy, or --rows and "
				"--dim for a lazy table");
		return -EINVAL;
	}
	return 0;
}

/*
 * Opens the input and works out its rows and dim, checking them against
 * the options. Prints its own one-line error.
 */
static int open_input(const struct opts *o, struct input *in)
{
	uint64_t value_bytes, need;
	struct npy_header h;
	const char *why;
	struct stat st;
	int err;

	memset(in, 0, sizeof(*in));
	in->path = o->raw ? o->raw : o->npy;
	in->fd = open(in->path, O_RDONLY | O_CLOEXEC);
	if (in->fd < 0) {
		err = -errno;
		cli_error_code(in->path, err);
		return err;
	}
	if (fstat(in->fd, &st)) {
		err = -errno;
		cli_error_code(in->path, err);
		goto err_close;
	}
	if (!S_ISREG(st.st_mode)) {
		err = -EINVAL;
		cli_error("%s: not a regular file", in->path);
		goto err_close;
	}
	if (o->raw) {
		uint64_t row = (uint64_t)o->dim * 4;

		if (st.st_size == 0) {
			err = -EINVAL;
			cli_error("%s: empty input", in->path);
			goto err_close;
		}
		if ((uint64_t)st.st_size % row) {
			err = -EINVAL;
			cli_error("%s: size %jd is not a multiple of the row "
				  "size %" PRIu64 " (dim %u x 4 bytes)",
				  in->path, (intmax_t)st.st_size, row, o->dim);
			goto err_close;
		}
		in->rows = (uint64_t)st.st_size / row;
		in->dim = o->dim;
		in->off = 0;
		if (in->rows > ET_MAX_ROWS) {
			err = -EINVAL;
			cli_error("%s: %" PRIu64 " rows, more than the %llu a "
				  "table can hold",
				  in->path, in->rows, ET_MAX_ROWS);
			goto err_close;
		}
	} else {
		err = npy_read_header(in->fd, &h, &why);
		if (err) {
			if (why)
				cli_error("%s: %s", in->path, why);
			else
				cli_error_code(in->path, err);
			goto err_close;
		}
		err = -EINVAL;
		if (h.rows == 0 || h.rows > ET_MAX_ROWS || h.cols == 0 ||
		    h.cols > ET_MAX_DIM) {
			cli_error("%s: shape (%" PRIu64 ", %" PRIu64
				  ") out of range (rows 1..%llu, dim 1..%u)",
				  in->path, h.rows, h.cols, ET_MAX_ROWS,
				  ET_MAX_DIM);
			goto err_close;
		}
		if (o->dim && o->dim != h.cols) {
			cli_error("%s: dim is %" PRIu64 " but --dim says %u",
				  in->path, h.cols, o->dim);
			goto err_close;
		}
		value_bytes = h.rows * h.cols * h.item_size;
		need = h.data_off + value_bytes;
		if ((uint64_t)st.st_size < need) {
			cli_error("%s: truncated .npy data: %jd bytes, the "
				  "header says %" PRIu64,
				  in->path, (intmax_t)st.st_size, need);
			goto err_close;
		}
		in->rows = h.rows;
		in->dim = (uint32_t)h.cols;
		in->off = h.data_off;
		in->f16 = h.dtype == NPY_F16;
	}
	if (o->rows && o->rows < in->rows) {
		err = -EINVAL;
		cli_error("%s: holds %" PRIu64
			  " rows, more than --rows %" PRIu64,
			  in->path, in->rows, o->rows);
		goto err_close;
	}
	posix_fadvise(in->fd, 0, 0, POSIX_FADV_SEQUENTIAL);
	return 0;
err_close:
	close(in->fd);
	in->fd = -1;
	return err;
}

/* Reads chunk [first, first + n) into dst as f32. Any thread. */
static int read_chunk(struct loader *l, uint64_t first, uint64_t n, float *dst)
{
	const struct input *in = l->in;
	uint64_t vals = n * in->dim;
	size_t item = in->f16 ? 2 : 4;
	void *buf = in->f16 ? (void *)l->half : (void *)dst;
	uint64_t off = in->off + first * in->dim * item;
	ssize_t got;

	got = cli_pread_full(in->fd, buf, vals * item, off);
	if (got < 0)
		return (int)got;
	if ((uint64_t)got < vals * item) {
		l->why = "input ended early (truncated while reading?)";
		return -EIO;
	}
	if (in->f16)
		for (uint64_t i = 0; i < vals; i++)
			dst[i] = et_f16_to_f32(l->half[i]);
	return 0;
}

static void *reader_main(void *arg)
{
	struct loader *l = arg;
	uint64_t first = 0;
	unsigned k = 0;
	int err;

	while (first < l->in->rows) {
		unsigned i = k++ & 1;
		uint64_t n = l->in->rows - first;

		if (n > l->chunk_rows)
			n = l->chunk_rows;
		pthread_mutex_lock(&l->lock);
		while (l->full[i] && !l->stop)
			pthread_cond_wait(&l->cond, &l->lock);
		if (l->stop) {
			pthread_mutex_unlock(&l->lock);
			break;
		}
		pthread_mutex_unlock(&l->lock);

		err = read_chunk(l, first, n, l->buf[i]);

		pthread_mutex_lock(&l->lock);
		if (err)
			l->err = err;
		l->n[i] = n;
		l->full[i] = true;
		pthread_cond_broadcast(&l->cond);
		pthread_mutex_unlock(&l->lock);
		if (err)
			break;
		first += n;
	}
	return NULL;
}

/*
 * Writes every input row into tf. Returns 0, or an error with *subject
 * naming the file it concerns and *why, if non-NULL, replacing
 * et_strerror's text.
 */
static int load(et_tfile *tf, const struct input *in, uint64_t chunk_rows,
		bool quiet, const char *out, const char **subject,
		const char **why)
{
	struct loader l = {.in = in, .chunk_rows = chunk_rows};
	size_t bytes = chunk_rows * in->dim * sizeof(float);
	struct progress pr;
	pthread_t reader;
	uint64_t first = 0;
	unsigned k = 0;
	int err = 0;

	*subject = out;
	*why = NULL;
	pthread_mutex_init(&l.lock, NULL);
	pthread_cond_init(&l.cond, NULL);
	for (int i = 0; i < 2; i++) {
		if (posix_memalign((void **)&l.buf[i], 4096, bytes)) {
			err = -ENOMEM;
			goto out_free;
		}
	}
	if (in->f16) {
		l.half = malloc(chunk_rows * in->dim * sizeof(uint16_t));
		if (!l.half) {
			err = -ENOMEM;
			goto out_free;
		}
	}
	err = -pthread_create(&reader, NULL, reader_main, &l);
	if (err)
		goto out_free;

	progress_start(&pr, "writing", "rows", in->rows, quiet);
	while (first < in->rows) {
		unsigned i = k++ & 1;

		pthread_mutex_lock(&l.lock);
		while (!l.full[i] && !l.err)
			pthread_cond_wait(&l.cond, &l.lock);
		if (!l.full[i] || l.err) {
			/* The reader failed at or before this chunk. */
			err = l.err;
			*why = l.why;
			*subject = in->path;
			pthread_mutex_unlock(&l.lock);
			break;
		}
		pthread_mutex_unlock(&l.lock);

		if (interrupted) {
			err = -EINTR;
			break;
		}
		err = et_tfile_write_range(tf, first, l.n[i], l.buf[i]);
		if (err)
			break;
		first += l.n[i];
		progress_update(&pr, first);

		pthread_mutex_lock(&l.lock);
		l.full[i] = false;
		pthread_cond_broadcast(&l.cond);
		pthread_mutex_unlock(&l.lock);
	}
	progress_end(&pr);

	pthread_mutex_lock(&l.lock);
	l.stop = true;
	pthread_cond_broadcast(&l.cond);
	pthread_mutex_unlock(&l.lock);
	pthread_join(reader, NULL);
out_free:
	free(l.half);
	free(l.buf[0]);
	free(l.buf[1]);
	pthread_cond_destroy(&l.cond);
	pthread_mutex_destroy(&l.lock);
	return err;
}

/* fsyncs the directory holding path, so a rename in it is durable. */
static int sync_parent(const char *path)
{
	char *dir = strdup(path), *slash;
	int fd, err = 0;

	if (!dir)
		return -ENOMEM;
	slash = strrchr(dir, '/');
	if (!slash)
		strcpy(dir, ".");
	else if (slash == dir)
		slash[1] = '\0';
	else
		*slash = '\0';
	fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0 || fsync(fd))
		err = -errno;
	if (fd >= 0)
		close(fd);
	free(dir);
	return err;
}

/*
 * Renames the finished table into place: over an existing file only with
 * force. Where the filesystem lacks RENAME_NOREPLACE, a check just before
 * a plain rename stands in for it.
 */
static int publish(const char *tmp, const char *out, bool force)
{
	if (!force) {
		if (!renameat2(AT_FDCWD, tmp, AT_FDCWD, out, RENAME_NOREPLACE))
			return 0;
		if (errno != EINVAL && errno != ENOSYS)
			return -errno;
		if (access(out, F_OK) == 0)
			return -EEXIST;
	}
	return rename(tmp, out) ? -errno : 0;
}

static void install_signals(void)
{
	struct sigaction sa;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGHUP, &sa, NULL);
	/* Past a file size limit, a write should fail (and the partial
	 * output be removed), not kill us. */
	signal(SIGXFSZ, SIG_IGN);
}

static void print_summary(const char *out, const struct et_table_info *ti,
			  uint64_t loaded, double secs)
{
	char a[32], b[32], c[32], d[32];

	cli_human_bytes((double)ti->logical_bytes, a, sizeof(a));
	cli_human_bytes((double)ti->disk_bytes, b, sizeof(b));
	if (!loaded) {
		cli_note("%s: %" PRIu64 " rows x %u %s, lazy: %s logical, %s "
			 "on disk",
			 out, ti->rows, ti->dim, cli_dtype_name(ti->dtype), a,
			 b);
		return;
	}
	/* The rate that compares with the disk's is of bytes on disk. */
	cli_human_bytes(secs > 0 ? (double)ti->disk_bytes / secs : 0, c,
			sizeof(c));
	cli_human_count(secs > 0 ? (double)loaded / secs : 0, d, sizeof(d));
	cli_note("%s: %" PRIu64 " rows x %u %s, %" PRIu64
		 " loaded%s: %s on disk in %.2f s, %s/s, %s rows/s",
		 out, ti->rows, ti->dim, cli_dtype_name(ti->dtype), loaded,
		 loaded < ti->rows ? " (the rest lazy)" : "", b, secs, c, d);
}

/*
 * --apply-delta: brings the serving copy o->dir to the delta's commit and
 * prints what changed (unless --quiet), or the error.
 */
static int apply_delta(const struct opts *o)
{
	struct et_delta_info di;
	double t0 = cli_now(), secs;
	char b[32];
	int err;

	if (access(o->delta, R_OK)) {
		err = -errno;
		cli_error_code(o->delta, err);
		return err;
	}
	err = et_delta_apply(o->delta, o->dir, &di);
	secs = cli_now() - t0;
	if (err) {
		/* a damaged file is the file's fault, the rest the copy's:
		 * the detail names what and where */
		cli_error_code(err == ET_EDELTA ? o->delta : o->dir, err);
		return err;
	}
	if (o->quiet)
		return 0;
	cli_human_bytes((double)di.bytes, b, sizeof(b));
	cli_note("%s: commit %" PRIu64 " -> %" PRIu64 " (checkpoint %" PRIu64
		 "): %u table%s (%u whole), %" PRIu64 " rows%s, %" PRIu64
		 " tombstones, %" PRIu64 " stale rows dropped; %" PRIu64
		 " bytes (%s) in %.3f s, %.1f MB/s",
		 o->dir, di.from_commit, di.to_commit, di.checkpoint_id,
		 di.tables, di.tables == 1 ? "" : "s", di.whole, di.rows,
		 di.flags & ET_DELTA_STATE ? " with optimizer state" : "",
		 di.tombstones, di.stale, di.bytes, b, secs,
		 secs > 0 ? (double)di.bytes / 1e6 / secs : 0.0);
	return 0;
}

int main(int argc, char **argv)
{
	struct input in = {.fd = -1};
	struct et_table_info ti;
	const char *subject, *why;
	struct opts o;
	et_tfile *tf = NULL;
	uint64_t chunk_rows;
	char *tmp = NULL;
	size_t tmp_len;
	double t0;
	int err;

	cli_init("embtier-build");
	if (parse_args(argc, argv, &o))
		return CLI_EXIT_USAGE;
	if (o.delta)
		return apply_delta(&o) ? CLI_EXIT_FAIL : CLI_EXIT_OK;
	if ((o.raw || o.npy) && open_input(&o, &in))
		return CLI_EXIT_FAIL;

	o.p.rows = o.rows ? o.rows : in.rows;
	o.p.dim = o.dim ? o.dim : in.dim;
	if (o.dtype > 0)
		o.p.dtype = (et_dtype)o.dtype;
	else
		o.p.dtype = in.f16 ? ET_F16 : ET_F32;

	if (!o.force && access(o.out, F_OK) == 0) {
		cli_error("%s: %s (use --force to replace it)", o.out,
			  et_strerror(-EEXIST));
		goto err_input;
	}

	/* Built as "OUT.partial.PID" and renamed into place when done. */
	tmp_len = strlen(o.out) + 32;
	tmp = malloc(tmp_len);
	if (!tmp) {
		cli_error_code(o.out, -ENOMEM);
		goto err_input;
	}
	snprintf(tmp, tmp_len, "%s.partial.%ld", o.out, (long)getpid());
	install_signals();

	t0 = cli_now();
	err = et_tfile_create(tmp, &o.p, &tf);
	if (err) { /* the detail names the option's field, if one is wrong */
		cli_error_code(o.out, err);
		goto err_input;
	}
	err = et_tfile_info(tf, &ti);
	if (err) {
		cli_error_code(o.out, err);
		goto err_remove;
	}
	if (in.fd >= 0) {
		/* Whole blocks per chunk, at least one. */
		chunk_rows = o.chunk_bytes / ((uint64_t)ti.dim * 4);
		chunk_rows -= chunk_rows % ti.rows_per_block;
		if (!chunk_rows)
			chunk_rows = ti.rows_per_block;
		err = load(tf, &in, chunk_rows, o.quiet, o.out, &subject, &why);
		if (err == -EINTR && interrupted) {
			cli_error("interrupted; %s not written", o.out);
			goto err_remove;
		}
		if (err) {
			if (why)
				cli_error("%s: %s", subject, why);
			else
				cli_error_code(subject, err);
			goto err_remove;
		}
	}
	err = et_tfile_sync(tf);
	if (!err)
		err = et_tfile_info(tf, &ti);
	if (err) {
		cli_error_code(o.out, err);
		goto err_remove;
	}
	et_tfile_close(tf);
	tf = NULL;
	if (interrupted) {
		cli_error("interrupted; %s not written", o.out);
		goto err_remove;
	}
	err = publish(tmp, o.out, o.force);
	if (!err)
		err = sync_parent(o.out);
	if (err) {
		cli_error_code(o.out, err);
		goto err_remove;
	}
	if (!o.quiet)
		print_summary(o.out, &ti, in.fd >= 0 ? in.rows : 0,
			      cli_now() - t0);
	if (in.fd >= 0)
		close(in.fd);
	free(tmp);
	return CLI_EXIT_OK;

err_remove:
	et_tfile_close(tf);
	unlink(tmp);
err_input:
	free(tmp);
	if (in.fd >= 0)
		close(in.fd);
	if (interrupted) {
		signal(interrupted, SIG_DFL);
		raise(interrupted);
	}
	return CLI_EXIT_FAIL;
}
