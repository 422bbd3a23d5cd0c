/*
 * inspect.c - embtier-inspect: shows what a table file is (its header and
 * disk use, as text or JSON), verifies the checksum of every materialized
 * block, prints rows as text, and exports rows as a '<f4' .npy array or as
 * raw f32.
 *
 * The file is opened read-only and only read through the public API, so
 * every value shown or exported went through the same checks (header and
 * block checksums) as in training. Rows are read in chunks with
 * et_tfile_read_rows(); a lazy row costs no I/O. Exports are written to a
 * new file (replaced only with --force), removed again if anything fails.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "embtier.h"
#include "npy.h"
#include "progress.h"

#define CHUNK_BYTES (8u << 20) /* bytes of f32 rows per read_rows call */

struct opts {
	const char *file;
	bool json, verify, state, force, quiet;
	bool written;	   /* only rows with a stored value */
	const char *ids;   /* --written exports: the rows' ids */
	const char *dump;  /* "A:B" */
	const char *range; /* "A:B" for the exports */
	const char *export_npy, *export_raw;
};

static void usage(void)
{
	printf(
	    "usage: embtier-inspect [options] FILE\n"
	    "Shows, checks and exports the table file FILE. With no action,\n"
	    "prints its header and disk use.\n"
	    "\n"
	    "  --json             the header and disk use as one JSON object\n"
	    "  --verify           check every written block's checksum and "
	    "every\n"
	    "                     row log record's; exit 1 if any is bad\n"
	    "  --dump A:B         print rows [A,B) as text, one per line: the\n"
	    "                     row id, then its values (%%.9g)\n"
	    "  --export OUT.npy   write rows as a '<f4' .npy array (n, dim)\n"
	    "  --export-raw OUT   write rows as raw little-endian f32\n"
	    "  --range A:B        the rows to export (default: all)\n"
	    "  --state            add the optimizer state after each row's\n"
	    "                     values, in dumps and exports\n"
	    "  --written          dump or export only the rows with a stored\n"
	    "                     value (written by training or a load; the\n"
	    "                     others are the initializer's): what a huge\n"
	    "                     lazy table holds\n"
	    "  --ids OUT          with --written and an export: the rows' ids\n"
	    "                     ('<u8' .npy with --export, raw "
	    "little-endian\n"
	    "                     u64 with --export-raw), in the rows' order\n"
	    "  -f, --force        replace an existing export file\n"
	    "  -q, --quiet        no progress bar, no verify summary\n"
	    "  -h, --help         this help\n"
	    "\n"
	    "A:B is a half-open row range; A: runs to the end, :B starts at "
	    "0,\n"
	    "a lone A is one row. Numbers may be written B^E (2^33).\n");
}

enum {
	OPT_JSON = 256,
	OPT_VERIFY,
	OPT_DUMP,
	OPT_EXPORT,
	OPT_EXPORT_RAW,
	OPT_RANGE,
	OPT_STATE,
	OPT_WRITTEN,
	OPT_IDS,
};

static const struct option long_opts[] = {
    {"json", no_argument, NULL, OPT_JSON},
    {"verify", no_argument, NULL, OPT_VERIFY},
    {"dump", required_argument, NULL, OPT_DUMP},
    {"export", required_argument, NULL, OPT_EXPORT},
    {"export-raw", required_argument, NULL, OPT_EXPORT_RAW},
    {"range", required_argument, NULL, OPT_RANGE},
    {"state", no_argument, NULL, OPT_STATE},
    {"written", no_argument, NULL, OPT_WRITTEN},
    {"ids", required_argument, NULL, OPT_IDS},
    {"force", no_argument, NULL, 'f'},
    {"quiet", no_argument, NULL, 'q'},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

static int parse_args(int argc, char **argv, struct opts *o)
{
	int c;

	memset(o, 0, sizeof(*o));
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":fqh", long_opts, NULL)) != -1) {
		switch (c) {
		case OPT_JSON:
			o->json = true;
			break;
		case OPT_VERIFY:
			o->verify = true;
			break;
		case OPT_DUMP:
			o->dump = optarg;
			break;
		case OPT_EXPORT:
			o->export_npy = optarg;
			break;
		case OPT_EXPORT_RAW:
			o->export_raw = optarg;
			break;
		case OPT_RANGE:
			o->range = optarg;
			break;
		case OPT_STATE:
			o->state = true;
			break;
		case OPT_WRITTEN:
			o->written = true;
			break;
		case OPT_IDS:
			o->ids = optarg;
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
					argv[optind - 1]);
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
	if (optind < argc)
		o->file = argv[optind++];
	if (optind < argc) {
		cli_usage_error("unexpected argument '%s'", argv[optind]);
		return -EINVAL;
	}
	if (!o->file) {
		cli_usage_error("no table file given");
		return -EINVAL;
	}
	if (o->range && !o->export_npy && !o->export_raw) {
		cli_usage_error("--range applies to --export and --export-raw");
		return -EINVAL;
	}
	if (o->written && !o->dump && !o->export_npy && !o->export_raw) {
		cli_usage_error("--written applies to --dump and the exports");
		return -EINVAL;
	}
	if (o->ids && (!o->written || (!o->export_npy == !o->export_raw))) {
		cli_usage_error("--ids goes with --written and one export");
		return -EINVAL;
	}
	if (o->written && (o->export_npy || o->export_raw) && !o->ids) {
		cli_usage_error(
		    "--written exports need --ids OUT for the rows' "
		    "ids");
		return -EINVAL;
	}
	return 0;
}

/* Parses a range option; prints the error. */
static int get_range(const char *file, const char *opt, const char *s,
		     const struct et_table_info *ti, uint64_t *a, uint64_t *b)
{
	int err = cli_parse_range(s, ti->rows, a, b);

	if (err == ET_EROWRANGE)
		cli_error("%s: rows %s: %s (the table has %" PRIu64 " rows)",
			  file, s, et_strerror(err), ti->rows);
	else if (err)
		cli_usage_error("%s: '%s' is not a row range A:B with A <= B",
				opt, s);
	return err;
}

/* disk_bytes as a percentage of logical_bytes, readable at any scale. */
static void format_percent(const struct et_table_info *ti, char *buf,
			   size_t len)
{
	double pc = ti->logical_bytes ? 100.0 * (double)ti->disk_bytes /
					    (double)ti->logical_bytes
				      : 0;

	if (pc == 0 || pc >= 0.01)
		snprintf(buf, len, "%.2f%%", pc);
	else
		snprintf(buf, len, "%.2g%%", pc);
}

static void print_info_text(const char *file, const struct et_table_info *ti)
{
	char a[32], b[32], pc[32];

	format_percent(ti, pc, sizeof(pc));
	printf("file            %s\n", file);
	printf("format version  %u\n", ti->format_version);
	printf("rows            %" PRIu64 "\n", ti->rows);
	printf("dim             %u\n", ti->dim);
	printf("dtype           %s\n", cli_dtype_name(ti->dtype));
	printf("optimizer       %s (%u state floats per row)\n",
	       cli_optim_name(ti->optim), ti->state_floats);
	printf("init            %s\n", cli_init_name(ti->init));
	printf("init scale      %.9g\n", ti->init_scale);
	printf("seed            %" PRIu64 "\n", ti->seed);
	printf("block size      %u\n", ti->block_size);
	printf("rows per block  %u\n", ti->rows_per_block);
	printf("row bytes       %u\n", ti->row_bytes);
	printf("blocks          %" PRIu64 "\n", ti->blocks);
	printf("blocks written  %" PRIu64 "\n", ti->blocks_written);
	printf("logical size    %" PRIu64 " (%s)\n", ti->logical_bytes,
	       cli_human_bytes((double)ti->logical_bytes, a, sizeof(a)));
	printf("disk use        %" PRIu64 " (%s, %s of logical)\n",
	       ti->disk_bytes,
	       cli_human_bytes((double)ti->disk_bytes, b, sizeof(b)), pc);
}

static void print_json_string(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;

		if (ch == '"' || ch == '\\')
			printf("\\%c", ch);
		else if (ch < 0x20)
			printf("\\u%04x", ch);
		else
			putchar(ch);
	}
	putchar('"');
}

static void print_info_json(const char *file, const struct et_table_info *ti)
{
	double pc = ti->logical_bytes ? 100.0 * (double)ti->disk_bytes /
					    (double)ti->logical_bytes
				      : 0;

	printf("{\"file\": ");
	print_json_string(file);
	printf(", \"format_version\": %u", ti->format_version);
	printf(", \"rows\": %" PRIu64, ti->rows);
	printf(", \"dim\": %u", ti->dim);
	printf(", \"dtype\": \"%s\"", cli_dtype_name(ti->dtype));
	printf(", \"optim\": \"%s\"", cli_optim_name(ti->optim));
	printf(", \"state_floats\": %u", ti->state_floats);
	printf(", \"init\": \"%s\"", cli_init_name(ti->init));
	if (isfinite(ti->init_scale))
		printf(", \"init_scale\": %.9g", ti->init_scale);
	else
		printf(", \"init_scale\": null");
	printf(", \"seed\": %" PRIu64, ti->seed);
	printf(", \"block_size\": %u", ti->block_size);
	printf(", \"rows_per_block\": %u", ti->rows_per_block);
	printf(", \"row_bytes\": %u", ti->row_bytes);
	printf(", \"blocks\": %" PRIu64, ti->blocks);
	printf(", \"blocks_written\": %" PRIu64, ti->blocks_written);
	printf(", \"logical_bytes\": %" PRIu64, ti->logical_bytes);
	printf(", \"disk_bytes\": %" PRIu64, ti->disk_bytes);
	printf(", \"disk_percent\": %.6g}\n", pc);
}

static int verify(et_tfile *tf, const struct opts *o,
		  const struct et_table_info *ti)
{
	uint64_t bad = 0, first_bad = 0;
	struct progress pr;
	int err;

	progress_start(&pr, "verifying", "blocks and records",
		       ti->blocks_written + ti->rows_logged, o->quiet);
	err = et_tfile_verify(tf, &bad, &first_bad, progress_callback, &pr);
	progress_end(&pr);
	if (err == ET_EBLOCKSUM) {
		cli_error("%s: %s: %" PRIu64 " bad of %" PRIu64
			  " written blocks and %" PRIu64
			  " row log records, the first in block %" PRIu64,
			  o->file, et_strerror(err), bad, ti->blocks_written,
			  ti->rows_logged, first_bad);
		return err;
	}
	if (err) {
		cli_error_code(o->file, err);
		return err;
	}
	if (!o->quiet)
		printf("%s: %" PRIu64 " written block%s and %" PRIu64
		       " row log record%s verified, all good\n",
		       o->file, ti->blocks_written,
		       ti->blocks_written == 1 ? "" : "s", ti->rows_logged,
		       ti->rows_logged == 1 ? "" : "s");
	return 0;
}

/*
 * Reads rows [a, b) chunk by chunk and hands each chunk to emit() as
 * n x cols f32 (cols = dim, plus state_floats with --state). Returns 0 or
 * the error; read errors are printed here, emit() prints its own.
 */
typedef int (*emit_fn)(void *arg, const uint64_t *ids, uint64_t n,
		       const float *rows, uint32_t cols);

/* Rows with a stored value in [a, b). */
static int count_written(et_tfile *tf, uint64_t a, uint64_t b, uint64_t *n)
{
	enum { B = 65536 };
	uint64_t *ids = malloc(B * sizeof(*ids));
	size_t k = B;
	int err = ids ? 0 : -ENOMEM;

	*n = 0;
	while (!err && k == B && a < b) {
		err = et_tfile_rows(tf, a, ids, B, &k);
		for (size_t i = 0; !err && i < k; i++) {
			if (ids[i] >= b) {
				k = 0;
				break;
			}
			++*n;
		}
		if (!err && k)
			a = ids[k - 1] + 1;
	}
	free(ids);
	return err;
}

static int for_rows(et_tfile *tf, const struct opts *o,
		    const struct et_table_info *ti, uint64_t a, uint64_t b,
		    const char *label, emit_fn emit, void *arg)
{
	uint32_t sf = o->state ? ti->state_floats : 0;
	uint32_t cols = ti->dim + sf;
	uint64_t chunk = CHUNK_BYTES / ((uint64_t)cols * 4);
	float *vals = NULL, *state = NULL, *joined = NULL;
	uint64_t *ids = NULL;
	struct progress pr;
	int err = -ENOMEM;

	uint64_t total = b - a, done = 0;

	if (!chunk)
		chunk = 1;
	if (chunk > b - a)
		chunk = b - a ? b - a : 1;
	if (o->written) {
		err = count_written(tf, a, b, &total);
		if (err) {
			cli_error_code(o->file, err);
			return err;
		}
	}
	ids = malloc(chunk * sizeof(*ids));
	vals = malloc(chunk * ti->dim * sizeof(*vals));
	if (sf) {
		state = malloc(chunk * sf * sizeof(*state));
		joined = malloc(chunk * cols * sizeof(*joined));
	}
	if (!ids || !vals || (sf && (!state || !joined))) {
		cli_error_code(o->file, err);
		goto out;
	}
	err = 0;
	progress_start(&pr, label, "rows", total, o->quiet);
	for (uint64_t first = a; first < b && done < total;) {
		uint64_t n = b - first < chunk ? b - first : chunk;
		const float *out = vals;

		if (o->written) {
			size_t k;

			err = et_tfile_rows(tf, first, ids, chunk, &k);
			if (err) {
				cli_error_code(o->file, err);
				break;
			}
			for (n = 0; n < k && ids[n] < b;)
				n++;
			if (!n)
				break;
		} else {
			for (uint64_t i = 0; i < n; i++)
				ids[i] = first + i;
		}
		err = et_tfile_read_rows(tf, ids, n, vals, state);
		if (err) {
			progress_end(&pr);
			cli_error("%s: rows %" PRIu64 "..%" PRIu64 ": %s",
				  o->file, ids[0], ids[n - 1] + 1,
				  et_strerror(err));
			break;
		}
		if (sf) {
			for (uint64_t i = 0; i < n; i++) {
				memcpy(joined + i * cols, vals + i * ti->dim,
				       ti->dim * sizeof(float));
				memcpy(joined + i * cols + ti->dim,
				       state + i * sf, sf * sizeof(float));
			}
			out = joined;
		}
		err = emit(arg, ids, n, out, cols);
		if (err)
			break;
		done += n;
		first = ids[n - 1] + 1;
		progress_update(&pr, done);
	}
	progress_end(&pr);
out:
	free(joined);
	free(state);
	free(vals);
	free(ids);
	return err;
}

static int emit_text(void *arg, const uint64_t *ids, uint64_t n,
		     const float *rows, uint32_t cols)
{
	for (uint64_t i = 0; i < n; i++) {
		printf("%" PRIu64, ids[i]);
		for (uint32_t c = 0; c < cols; c++)
			printf(" %.9g", rows[i * cols + c]);
		putchar('\n');
	}
	if (ferror(stdout)) {
		cli_error_code("stdout", -EIO);
		return -EIO;
	}
	return 0;
}

struct export_file {
	const char *path;
	int fd;
	const char *ids_path; /* --ids */
	int ids_fd;
};

static int emit_file(void *arg, const uint64_t *ids, uint64_t n,
		     const float *rows, uint32_t cols)
{
	struct export_file *f = arg;
	int err = cli_write_full(f->fd, rows, n * cols * sizeof(float));

	if (err) {
		cli_error_code(f->path, err);
		return err;
	}
	if (f->ids_fd >= 0) { /* native order, as the values: little-endian
			       * hosts only, like the rest of the format */
		err = cli_write_full(f->ids_fd, ids, n * sizeof(*ids));
		if (err)
			cli_error_code(f->ids_path, err);
	}
	return err;
}

static int dump(et_tfile *tf, const struct opts *o,
		const struct et_table_info *ti)
{
	uint64_t a, b;
	int err;

	err = get_range(o->file, "--dump", o->dump, ti, &a, &b);
	if (err)
		return err;
	err = for_rows(tf, o, ti, a, b, "reading", emit_text, NULL);
	if (!err && fflush(stdout)) {
		err = -errno;
		cli_error_code("stdout", err);
	}
	return err;
}

/* Opens an export's output; prints the error. */
static int open_out(const char *path, bool force, int *fd, bool *regular)
{
	struct stat st;
	int err;

	*fd = open(path,
		   O_WRONLY | O_CREAT | O_CLOEXEC | (force ? O_TRUNC : O_EXCL),
		   0644);
	if (*fd < 0) {
		err = -errno;
		if (err == -EEXIST)
			cli_error("%s: %s (use --force to replace it)", path,
				  et_strerror(err));
		else
			cli_error_code(path, err);
		return err;
	}
	*regular = fstat(*fd, &st) == 0 && S_ISREG(st.st_mode);
	return 0;
}

/* Syncs (a regular file) and closes an export's output. */
static int close_out(const char *path, int *fd, bool regular)
{
	int err = 0;

	if ((regular && fsync(*fd)) || close(*fd)) {
		err = -errno;
		cli_error_code(path, err);
	}
	*fd = -1;
	return err;
}

/*
 * Writes rows to path (and, --written, their ids to --ids). A regular
 * file is synced when done and removed if anything fails; anything else
 * (a device, a pipe) is only written to.
 */
static int export(et_tfile *tf, const struct opts *o,
		  const struct et_table_info *ti, const char *path, bool npy)
{
	struct export_file f = {.path = path, .fd = -1, .ids_fd = -1};
	uint32_t cols = ti->dim + (o->state ? ti->state_floats : 0);
	uint64_t a = 0, b = ti->rows, n;
	bool regular = false, ids_regular = false;
	int err;

	if (o->range) {
		err = get_range(o->file, "--range", o->range, ti, &a, &b);
		if (err)
			return err;
	}
	if (a == b) {
		cli_error("%s: the range holds no rows", path);
		return -EINVAL;
	}
	n = b - a;
	if (o->written) {
		err = count_written(tf, a, b, &n);
		if (err) {
			cli_error_code(o->file, err);
			return err;
		}
	}
	err = open_out(path, o->force, &f.fd, &regular);
	if (err)
		return err;
	if (o->written) {
		f.ids_path = o->ids;
		err = open_out(o->ids, o->force, &f.ids_fd, &ids_regular);
		if (err)
			goto err_remove;
	}
	if (npy) {
		err = npy_write_header_f32(f.fd, n, cols);
		if (err >= 0 && f.ids_fd >= 0) {
			err = npy_write_header_u64(f.ids_fd, n);
			if (err < 0) {
				cli_error_code(o->ids, err);
				goto err_remove;
			}
		}
		if (err < 0) {
			cli_error_code(path, err);
			goto err_remove;
		}
	}
	err = for_rows(tf, o, ti, a, b, "exporting", emit_file, &f);
	if (err)
		goto err_remove;
	err = close_out(path, &f.fd, regular);
	if (!err && f.ids_fd >= 0)
		err = close_out(o->ids, &f.ids_fd, ids_regular);
	if (err)
		goto err_remove;
	return 0;
err_remove:
	if (f.fd >= 0)
		close(f.fd);
	if (f.ids_fd >= 0)
		close(f.ids_fd);
	if (regular)
		unlink(path);
	if (ids_regular)
		unlink(o->ids);
	return err;
}

int main(int argc, char **argv)
{
	struct et_table_info ti;
	et_tfile *tf = NULL;
	struct opts o;
	bool info;
	int err;

	cli_init("embtier-inspect");
	if (parse_args(argc, argv, &o))
		return CLI_EXIT_USAGE;
	info = o.json || !(o.verify || o.dump || o.export_npy || o.export_raw);

	err = et_tfile_open(o.file, ET_TFILE_RDONLY, &tf);
	if (err) {
		cli_error_code(o.file, err);
		return CLI_EXIT_FAIL;
	}
	err = et_tfile_info(tf, &ti);
	if (err) {
		cli_error_code(o.file, err);
		goto out;
	}
	if (info) {
		if (o.json)
			print_info_json(o.file, &ti);
		else
			print_info_text(o.file, &ti);
		if (fflush(stdout)) {
			err = -errno;
			cli_error_code("stdout", err);
			goto out;
		}
	}
	if (o.verify) {
		err = verify(tf, &o, &ti);
		if (err)
			goto out;
	}
	if (o.dump) {
		err = dump(tf, &o, &ti);
		if (err)
			goto out;
	}
	if (o.export_npy) {
		err = export(tf, &o, &ti, o.export_npy, true);
		if (err)
			goto out;
	}
	if (o.export_raw)
		err = export(tf, &o, &ti, o.export_raw, false);
out:
	et_tfile_close(tf);
	return err ? CLI_EXIT_FAIL : CLI_EXIT_OK;
}
