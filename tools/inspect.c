/*
 * inspect.c - embtier-inspect: shows what a table file is (its header and
 * disk use, as text or JSON), verifies the checksum of every materialized
 * block, prints rows as text, and exports rows as a '<f4' .npy array or as
 * raw f32. With --delta-since, it exports the delta of a store directory
 * instead (et_delta_export: what changed after a commit, to bring a serving
 * copy up to the store's last commit with embtier-build --apply-delta).
 *
 * The file is opened read-only and only read through the public API, so
 * every value shown or exported went through the same checks (header and
 * block checksums) as in training. Rows are read in chunks with
 * et_tfile_read_rows(); a lazy row costs no I/O. Exports are written to a
 * new file (replaced only with --force), removed again if anything fails.
 *
 * A keyed table (ET_TABLE_KEYED) has no rows: its ids are any u64, each
 * with a row of its own, and it stores those a store wrote. Its ranges are
 * of ids, UINT64_MAX included ("A:" runs through it), so every walk over
 * ids here stops at the last id of its span instead of stepping past it.
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
	const char *list;  /* "A:B": the ids with a stored value */
	const char *dump;  /* "A:B" */
	const char *range; /* "A:B" for the exports */
	const char *export_npy, *export_raw;
	const char *delta_out; /* --delta-since: the delta file */
	uint64_t delta_since;
	bool delta;
};

static void usage(void)
{
	printf(
	    "usage: embtier-inspect [options] FILE\n"
	    "       embtier-inspect --delta-since N --out OUT [--state] DIR\n"
	    "Shows, checks and exports the table file FILE. With no action,\n"
	    "prints its header and disk use.\n"
	    "\n"
	    "  --json             the header and disk use as one JSON object\n"
	    "  --verify           check every written block's checksum and "
	    "every\n"
	    "                     row log record's; exit 1 if any is bad\n"
	    "  --dump A:B         print rows [A,B) as text, one per line: the\n"
	    "                     row id, then its values (%%.9g)\n"
	    "  --list A:B         print the ids of the rows in [A,B) with a\n"
	    "                     stored value, one per line, ascending (of a\n"
	    "                     keyed table: its stored ids; ':' lists all)\n"
	    "  --export OUT.npy   write rows as a '<f4' .npy array (n, dim)\n"
	    "  --export-raw OUT   write rows as raw little-endian f32\n"
	    "  --range A:B        the rows to export (default: all)\n"
	    "  --state            add the optimizer state after each row's\n"
	    "                     values, in dumps, exports and deltas\n"
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
	    "Deltas (of the store directory DIR, not of a table file):\n"
	    "  --delta-since N    write what DIR's tables changed after its\n"
	    "                     commit N (0: every stored row) up to its\n"
	    "                     last commit, and that commit's dense state,\n"
	    "                     to the new file --out; prints what it holds\n"
	    "                     (--json: as one JSON object). It reads DIR\n"
	    "                     as a read-only opener does: a live store "
	    "may\n"
	    "                     go on. embtier-build --apply-delta applies "
	    "it\n"
	    "  --out OUT          the delta file (replaced only with --force)\n"
	    "\n"
	    "A:B is a half-open row range; A: runs to the end, :B starts at "
	    "0,\n"
	    "a lone A is one row. Numbers may be written B^E (2^33).\n"
	    "\n"
	    "A keyed table (ids any u64, each with a row of its own) shows\n"
	    "\"keyed\" and its stored ids instead of rows; its ranges are of "
	    "ids\n"
	    "(unsigned decimal), and A: runs through 18446744073709551615. "
	    "Its rows\n"
	    "not stored read as the initializer's: dump or export its stored "
	    "ids\n"
	    "with --written (exports need it, or a bounded --range).\n");
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
	OPT_LIST,
	OPT_DELTA_SINCE,
	OPT_OUT,
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
    {"list", required_argument, NULL, OPT_LIST},
    {"delta-since", required_argument, NULL, OPT_DELTA_SINCE},
    {"out", required_argument, NULL, OPT_OUT},
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
		case OPT_LIST:
			o->list = optarg;
			break;
		case OPT_DELTA_SINCE:
			if (cli_parse_u64(optarg, &o->delta_since)) {
				cli_usage_error("--delta-since: '%s' is not a "
						"commit number",
						optarg);
				return -EINVAL;
			}
			o->delta = true;
			break;
		case OPT_OUT:
			o->delta_out = optarg;
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
		cli_usage_error(o->delta ? "no store directory given"
					 : "no table file given");
		return -EINVAL;
	}
	if (o->delta_out && !o->delta) {
		cli_usage_error("--out goes with --delta-since");
		return -EINVAL;
	}
	if (o->delta && !o->delta_out) {
		cli_usage_error("--delta-since needs --out FILE");
		return -EINVAL;
	}
	if (o->delta && (o->verify || o->list || o->dump || o->export_npy ||
			 o->export_raw || o->range || o->written || o->ids)) {
		cli_usage_error(
		    "--delta-since takes a store directory: only "
		    "--out, --state, --json and --force go with it");
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

static bool is_keyed(const struct et_table_info *ti)
{
	return ti->flags & ET_TABLE_KEYED;
}

/* Ids first .. last (inclusive, so that it can hold UINT64_MAX), or none. */
struct span {
	uint64_t first, last;
	bool empty;
	bool open; /* "A:" or ":" of a keyed table: through UINT64_MAX */
};

/* The ids of a span, saturated at UINT64_MAX. */
static uint64_t span_count(const struct span *sp)
{
	if (sp->empty)
		return 0;
	return sp->last - sp->first == UINT64_MAX ? UINT64_MAX
						  : sp->last - sp->first + 1;
}

/* "A:B" over a keyed table's ids: any u64, B exclusive; "A:" through
 * UINT64_MAX; a lone A is that id. 0 or -EINVAL (-ERANGE). */
static int parse_keyed_range(const char *s, struct span *sp)
{
	const char *colon = strchr(s, ':');
	uint64_t a = 0, b = 0;
	char left[64];
	size_t llen;
	int err;

	memset(sp, 0, sizeof(*sp));
	if (!colon) {
		err = cli_parse_u64(s, &a);
		sp->first = sp->last = a;
		return err;
	}
	llen = (size_t)(colon - s);
	if (llen >= sizeof(left))
		return -EINVAL;
	memcpy(left, s, llen);
	left[llen] = '\0';
	if (llen && (err = cli_parse_u64(left, &a)))
		return err;
	sp->first = a;
	if (!colon[1]) {
		sp->last = UINT64_MAX;
		sp->open = true;
		return 0;
	}
	err = cli_parse_u64(colon + 1, &b);
	if (err)
		return err;
	if (a > b)
		return -EINVAL;
	sp->empty = a == b;
	sp->last = b - !sp->empty;
	return 0;
}

/* Parses a range option; prints the error. */
static int get_range(const char *file, const char *opt, const char *s,
		     const struct et_table_info *ti, struct span *sp)
{
	uint64_t a, b;
	int err;

	if (is_keyed(ti)) {
		err = parse_keyed_range(s, sp);
		if (err)
			cli_usage_error("%s: '%s' is not a range A:B of ids "
					"(u64) with A <= B",
					opt, s);
		return err;
	}
	err = cli_parse_range(s, ti->rows, &a, &b);
	if (err == ET_EROWRANGE)
		cli_error("%s: rows %s: %s (the table has %" PRIu64 " rows)",
			  file, s, et_strerror(err), ti->rows);
	else if (err)
		cli_usage_error("%s: '%s' is not a row range A:B with A <= B",
				opt, s);
	if (!err)
		*sp = (struct span){
		    .first = a, .last = b ? b - 1 : 0, .empty = a == b};
	return err;
}

/* Of a keyed table, the ids a store wrote; of another, all its rows. */
static void whole_span(const struct et_table_info *ti, struct span *sp)
{
	if (is_keyed(ti))
		*sp =
		    (struct span){.first = 0, .last = UINT64_MAX, .open = true};
	else
		*sp = (struct span){.first = 0,
				    .last = ti->rows ? ti->rows - 1 : 0,
				    .empty = !ti->rows};
}

/* Walking every id of an unbounded span of a keyed table would never end:
 * only its stored ids (--written) may be walked. Prints the error. */
static int check_walk(const struct opts *o, const struct et_table_info *ti,
		      const struct span *sp, const char *what)
{
	if (!is_keyed(ti) || o->written || !sp->open)
		return 0;
	cli_usage_error("%s is keyed (its ids are any u64): %s its stored ids "
			"with --written, or a bounded range A:B",
			o->file, what);
	return -EINVAL;
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
	if (is_keyed(ti)) {
		printf("rows            keyed (ids are any u64)\n");
		printf("stored ids      %" PRIu64 "\n", ti->rows_logged);
	} else {
		printf("rows            %" PRIu64 "\n", ti->rows);
	}
	printf("dim             %u\n", ti->dim);
	printf("dtype           %s\n", cli_dtype_name(ti->dtype));
	printf("optimizer       %s (%u state floats per row)\n",
	       cli_optim_name(ti->optim), ti->state_floats);
	printf("init            %s\n", cli_init_name(ti->init));
	printf("init scale      %.9g\n", ti->init_scale);
	printf("seed            %" PRIu64 "\n", ti->seed);
	printf("block size      %u\n", ti->block_size);
	if (is_keyed(ti)) { /* no blocks: every stored id is in the row log */
		printf("row bytes       %u\n", ti->row_bytes);
		printf("disk use        %" PRIu64 " (%s", ti->disk_bytes,
		       cli_human_bytes((double)ti->disk_bytes, b, sizeof(b)));
		if (ti->rows_logged)
			printf(", %.1f bytes a stored id",
			       (double)ti->disk_bytes /
				   (double)ti->rows_logged);
		printf(")\n");
		return;
	}
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
	printf(", \"disk_percent\": %.6g", pc);
	printf(", \"rows_logged\": %" PRIu64, ti->rows_logged);
	printf(", \"keyed\": %s", is_keyed(ti) ? "true" : "false");
	if (is_keyed(ti))
		printf(", \"stored_ids\": %" PRIu64, ti->rows_logged);
	printf("}\n");
}

/*
 * Of a keyed table, et_tfile_verify names the first bad record by its id
 * divided by rows_per_block: reads the stored ids of that stretch one by
 * one for one whose record fails its checksum.
 */
static bool bad_id(et_tfile *tf, const struct et_table_info *ti, uint64_t blk,
		   uint64_t *id)
{
	uint32_t rpb = ti->rows_per_block;
	uint64_t from, to, *ids;
	float *v;
	size_t k = 0;
	bool found = false;

	if (!rpb || blk > UINT64_MAX / rpb)
		return false;
	from = blk * rpb;
	to = from > UINT64_MAX - (rpb - 1) ? UINT64_MAX : from + (rpb - 1);
	ids = malloc(rpb * sizeof(*ids));
	v = malloc((size_t)ti->dim * sizeof(*v));
	if (ids && v && !et_tfile_rows(tf, from, ids, rpb, &k))
		for (size_t i = 0; i < k && ids[i] <= to && !found; i++)
			if (et_tfile_read_rows(tf, &ids[i], 1, v, NULL) ==
			    ET_EBLOCKSUM) {
				*id = ids[i];
				found = true;
			}
	free(ids);
	free(v);
	return found;
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
	if (err == ET_EBLOCKSUM && is_keyed(ti)) {
		uint64_t id;
		char one[64] = "";

		if (bad_id(tf, ti, first_bad, &id))
			snprintf(one, sizeof(one),
				 ", id %" PRIu64 " among them", id);
		cli_error("%s: %s: %" PRIu64 " bad of %" PRIu64
			  " row log records (of the stored ids)%s",
			  o->file, et_strerror(err), bad, ti->rows_logged, one);
		return err;
	}
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
	if (!o->quiet && is_keyed(ti))
		printf("%s: keyed, %" PRIu64 " stored id%s: %" PRIu64
		       " row log record%s verified, all good\n",
		       o->file, ti->rows_logged,
		       ti->rows_logged == 1 ? "" : "s", ti->rows_logged,
		       ti->rows_logged == 1 ? "" : "s");
	else if (!o->quiet)
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

/*
 * Hands the ids of sp with a stored value to fn, ascending, in runs;
 * stops at fn's first error. Never steps past the span's last id (nor
 * UINT64_MAX).
 */
static int each_written(et_tfile *tf, const struct span *sp,
			int (*fn)(void *arg, const uint64_t *ids, size_t n),
			void *arg)
{
	enum { B = 65536 };
	uint64_t *ids = malloc(B * sizeof(*ids)), from = sp->first;
	bool more = !sp->empty;
	int err = ids ? 0 : -ENOMEM;

	while (!err && more) {
		size_t k = 0, n = 0;

		err = et_tfile_rows(tf, from, ids, B, &k);
		if (err)
			break;
		while (n < k && ids[n] <= sp->last)
			n++;
		if (n)
			err = fn(arg, ids, n);
		more = n == B && ids[n - 1] < sp->last;
		if (more)
			from = ids[n - 1] + 1;
	}
	free(ids);
	return err;
}

static int count_fn(void *arg, const uint64_t *ids, size_t n)
{
	(void)ids;
	*(uint64_t *)arg += n;
	return 0;
}

/* Rows with a stored value in sp. */
static int count_written(et_tfile *tf, const struct span *sp, uint64_t *n)
{
	*n = 0;
	return each_written(tf, sp, count_fn, n);
}

static int for_rows(et_tfile *tf, const struct opts *o,
		    const struct et_table_info *ti, const struct span *sp,
		    const char *label, emit_fn emit, void *arg)
{
	uint32_t sf = o->state ? ti->state_floats : 0;
	uint32_t cols = ti->dim + sf;
	uint64_t chunk = CHUNK_BYTES / ((uint64_t)cols * 4);
	float *vals = NULL, *state = NULL, *joined = NULL;
	uint64_t *ids = NULL;
	struct progress pr;
	int err = -ENOMEM;

	uint64_t total = span_count(sp), done = 0, first = sp->first;
	bool more;

	if (!chunk)
		chunk = 1;
	if (chunk > total)
		chunk = total ? total : 1;
	if (o->written) {
		err = count_written(tf, sp, &total);
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
	more = !sp->empty && total;
	progress_start(&pr, label, "rows", total, o->quiet);
	while (more && done < total) {
		/* ids left after first, less one: no overflow at UINT64_MAX */
		uint64_t left = sp->last - first, n;
		const float *out = vals;

		if (o->written) {
			size_t k;

			err = et_tfile_rows(tf, first, ids, chunk, &k);
			if (err) {
				cli_error_code(o->file, err);
				break;
			}
			for (n = 0; n < k && ids[n] <= sp->last;)
				n++;
			if (!n)
				break;
			more = n == chunk;
		} else {
			n = left < chunk - 1 ? left + 1 : chunk;
			for (uint64_t i = 0; i < n; i++)
				ids[i] = first + i;
		}
		err = et_tfile_read_rows(tf, ids, n, vals, state);
		if (err) {
			progress_end(&pr);
			if (is_keyed(ti))
				cli_error("%s: ids %" PRIu64 " to %" PRIu64
					  ": %s",
					  o->file, ids[0], ids[n - 1],
					  et_strerror(err));
			else
				cli_error("%s: rows %" PRIu64 "..%" PRIu64
					  ": %s",
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
		if (ids[n - 1] >= sp->last)
			more = false;
		else
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
	struct span sp;
	int err;

	err = get_range(o->file, "--dump", o->dump, ti, &sp);
	if (!err)
		err = check_walk(o, ti, &sp, "dump");
	if (err)
		return err;
	err = for_rows(tf, o, ti, &sp, "reading", emit_text, NULL);
	if (!err && fflush(stdout)) {
		err = -errno;
		cli_error_code("stdout", err);
	}
	return err;
}

static int list_fn(void *arg, const uint64_t *ids, size_t n)
{
	(void)arg;
	for (size_t i = 0; i < n; i++)
		printf("%" PRIu64 "\n", ids[i]);
	return ferror(stdout) ? -EIO : 0;
}

/* --list: the ids with a stored value, one a line. */
static int list(et_tfile *tf, const struct opts *o,
		const struct et_table_info *ti)
{
	struct span sp;
	int err;

	err = get_range(o->file, "--list", o->list, ti, &sp);
	if (err)
		return err;
	err = each_written(tf, &sp, list_fn, NULL);
	if (!err && fflush(stdout))
		err = -errno;
	if (err == -EIO || (err && ferror(stdout)))
		cli_error_code("stdout", err);
	else if (err)
		cli_error_code(o->file, err);
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
	bool regular = false, ids_regular = false;
	struct span sp;
	uint64_t n;
	int err;

	whole_span(ti, &sp);
	if (o->range) {
		err = get_range(o->file, "--range", o->range, ti, &sp);
		if (err)
			return err;
	}
	err = check_walk(o, ti, &sp, "export");
	if (err)
		return err;
	if (sp.empty) {
		cli_error("%s: the range holds no rows", path);
		return -EINVAL;
	}
	n = span_count(&sp);
	if (o->written) {
		err = count_written(tf, &sp, &n);
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
	err = for_rows(tf, o, ti, &sp, "exporting", emit_file, &f);
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

/* MB/s (decimal, as disks are rated) of bytes in secs. */
static double mb_per_s(uint64_t bytes, double secs)
{
	return secs > 0 ? (double)bytes / 1e6 / secs : 0;
}

static void print_delta_text(const struct opts *o,
			     const struct et_delta_info *di, double secs)
{
	char b[32];

	printf("store           %s\n", o->file);
	printf("delta file      %s\n", o->delta_out);
	printf("from commit     %" PRIu64 "%s\n", di->from_commit,
	       di->from_commit ? "" : " (nothing: every stored row)");
	printf("to commit       %" PRIu64 " (checkpoint %" PRIu64 ")\n",
	       di->to_commit, di->checkpoint_id);
	printf("tables          %u (%u taken whole)\n", di->tables, di->whole);
	printf("rows            %" PRIu64 "%s\n", di->rows,
	       di->flags & ET_DELTA_STATE ? " (with optimizer state)" : "");
	printf("tombstones      %" PRIu64 "\n", di->tombstones);
	printf("bytes           %" PRIu64 " (%s)\n", di->bytes,
	       cli_human_bytes((double)di->bytes, b, sizeof(b)));
	printf("seconds         %.3f\n", secs);
	printf("rate            %.1f MB/s\n", mb_per_s(di->bytes, secs));
}

static void print_delta_json(const struct opts *o,
			     const struct et_delta_info *di, double secs)
{
	printf("{\"store\": ");
	print_json_string(o->file);
	printf(", \"delta_file\": ");
	print_json_string(o->delta_out);
	printf(", \"from_commit\": %" PRIu64, di->from_commit);
	printf(", \"to_commit\": %" PRIu64, di->to_commit);
	printf(", \"checkpoint_id\": %" PRIu64, di->checkpoint_id);
	printf(", \"tables\": %u", di->tables);
	printf(", \"whole\": %u", di->whole);
	printf(", \"rows\": %" PRIu64, di->rows);
	printf(", \"tombstones\": %" PRIu64, di->tombstones);
	printf(", \"state\": %s",
	       di->flags & ET_DELTA_STATE ? "true" : "false");
	printf(", \"bytes\": %" PRIu64, di->bytes);
	printf(", \"seconds\": %.6f", secs);
	printf(", \"mb_per_s\": %.6g}\n", mb_per_s(di->bytes, secs));
}

/*
 * --delta-since: the delta of the store directory o->file after commit
 * o->delta_since, into the new file o->delta_out (an existing one is
 * replaced only with --force). Prints what it holds, or the error.
 */
static int delta_export(const struct opts *o)
{
	struct et_delta_info di;
	struct stat st;
	double t0;
	int err;

	/* (the library would only find no commit record there) */
	err = stat(o->file, &st) ? -errno : S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
	if (err) {
		cli_error_code(o->file, err);
		return err;
	}
	if (lstat(o->delta_out, &st) == 0) {
		if (!o->force) {
			cli_error("%s: %s (use --force to replace it)",
				  o->delta_out, et_strerror(-EEXIST));
			return -EEXIST;
		}
		if (unlink(o->delta_out)) {
			err = -errno;
			cli_error_code(o->delta_out, err);
			return err;
		}
	}
	t0 = cli_now();
	err = et_delta_export(o->file, o->delta_since, o->delta_out,
			      o->state ? ET_DELTA_STATE : 0, &di);
	if (err) {
		cli_error_code(o->file, err);
		return err;
	}
	if (o->json)
		print_delta_json(o, &di, cli_now() - t0);
	else
		print_delta_text(o, &di, cli_now() - t0);
	if (fflush(stdout)) {
		err = -errno;
		cli_error_code("stdout", err);
	}
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
	if (o.delta)
		return delta_export(&o) ? CLI_EXIT_FAIL : CLI_EXIT_OK;
	info = o.json ||
	       !(o.verify || o.list || o.dump || o.export_npy || o.export_raw);

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
	if (o.list) {
		err = list(tf, &o, &ti);
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
