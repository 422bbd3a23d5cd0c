/*
 * main.c - embtier-bench's command line: the subcommands (run, mrc,
 * pipeline, convert, gen, flush, reopen, keyed, delta), their options and
 * defaults, and --help, which documents every option and the trace
 * format.
 *
 * Every option is one entry of opts[] below: its names, its argument, its
 * help lines, and how its argument is parsed and where it is stored.
 * getopt_long's table, the short-option string and the options part of
 * --help are all made from it, so an option cannot be parsed without
 * being documented, or the other way round.
 *
 * The subcommand, if any, comes first; its defaults are set before the
 * options are read, so that an option always wins. SIGINT and SIGTERM stop
 * the loops at the next batch, and the run cleans up (its temporary
 * directory included) before exiting non-zero.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "cli.h"

/* ------------------------------------------------------- argument parsers */

static int bad(const char *opt, const char *arg)
{
	cli_usage_error("%s: bad value '%s'", opt, arg);
	return -1;
}

static int num(const char *opt, const char *arg, uint64_t lo, uint64_t hi,
	       uint64_t *out)
{
	if (cli_parse_u64(arg, out) || *out < lo || *out > hi)
		return bad(opt, arg);
	return 0;
}

/* A comma-separated list of 1..max numbers in [lo, hi]. */
static int num_list(const char *opt, const char *arg, uint64_t lo, uint64_t hi,
		    uint32_t *out, uint32_t max, uint32_t *n)
{
	char *copy = strdup(arg), *save = NULL, *tok;
	uint64_t v;

	if (!copy)
		return bad(opt, arg);
	*n = 0;
	for (tok = strtok_r(copy, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		if (*n == max || cli_parse_u64(tok, &v) || v < lo || v > hi) {
			free(copy);
			*n = 0;
			return bad(opt, arg);
		}
		out[(*n)++] = (uint32_t)v;
	}
	free(copy);
	return *n ? 0 : bad(opt, arg);
}

static int dbl(const char *opt, const char *arg, double lo, double hi,
	       double *out)
{
	char *end;

	errno = 0;
	*out = strtod(arg, &end);
	if (end == arg || *end || errno || !(*out >= lo && *out <= hi))
		return bad(opt, arg);
	return 0;
}

/* ------------------------------------------- options parsed by a function */

static int set_workload(struct bench_opts *o, const char *n, const char *a)
{
	int k = wl_kind_parse(a);

	(void)n;
	if (k < 0)
		return bad("--workload", a);
	o->wl.kind = (enum wl_kind)k;
	return 0;
}

static int set_trace(struct bench_opts *o, const char *n, const char *a)
{
	(void)n;
	o->wl.trace = a;
	o->wl.kind = WL_TRACE;
	return 0;
}

static int set_dim(struct bench_opts *o, const char *n, const char *a)
{
	if (num_list(n, a, 1, ET_MAX_DIM, o->dims, BENCH_MAX_DIMS, &o->ndims))
		return -1;
	o->dim = 0;
	for (uint32_t i = 0; i < o->ndims; i++)
		if (o->dims[i] > o->dim)
			o->dim = o->dims[i];
	return 0;
}

static int set_dtype(struct bench_opts *o, const char *n, const char *a)
{
	int t = cli_dtype_parse(a);

	if (t < 0)
		return bad(n, a);
	o->dtype = (et_dtype)t;
	return 0;
}

static int set_pooling(struct bench_opts *o, const char *n, const char *a)
{
	uint64_t v;

	if (num(n, a, 1, WL_TRACE_MAX_N, &v))
		return -1;
	o->wl.pooling = (uint32_t)v;
	o->pooling_set = true;
	return 0;
}

static int set_policy(struct bench_opts *o, const char *n, const char *a)
{
	int p = cli_policy_parse(a);

	if (p < 0)
		return bad(n, a);
	o->policy = (et_policy)p;
	return 0;
}

static int set_warmup(struct bench_opts *o, const char *n, const char *a)
{
	uint64_t v;

	if (!strcmp(a, "auto")) {
		o->warmup = -1;
		return 0;
	}
	if (num(n, a, 0, UINT32_MAX, &v))
		return -1;
	o->warmup = (int64_t)v;
	return 0;
}

static int set_policies(struct bench_opts *o, const char *n, const char *a)
{
	char *copy = strdup(a), *save = NULL, *tok;

	if (!copy)
		return bad(n, a);
	o->mrc_policies = 0;
	for (tok = strtok_r(copy, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		int p = cli_policy_parse(tok);

		if (p < 0) {
			free(copy);
			return bad(n, a);
		}
		o->mrc_policies |= 1u << p;
	}
	free(copy);
	return 0;
}

/* ------------------------------------------------------- the option table */

/* How an option's argument is parsed, and where it is stored. */
enum opt_kind {
	K_FLAG,	 /* no argument: bool at off = set */
	K_SET,	 /* no argument: int at off = set */
	K_U32,	 /* a count (2^N too) in [lo, hi]: uint32_t at off */
	K_U64,	 /* the same: uint64_t at off */
	K_DBL,	 /* a real in [dlo, dhi]: double at off */
	K_F32,	 /* the same: float at off */
	K_SIZE,	 /* a size (parse_size) of at least lo: uint64_t at off */
	K_STR,	 /* the argument itself: const char * at off */
	K_NAMED, /* one of names[]: its index, int at off */
	K_LIST,	 /* counts in [lo, hi], comma-separated: uint32_t[max] at
		  * off, how many at off_n */
	K_FUNC,	 /* fn parses and stores */
	K_HELP,	 /* --help */
};

struct opt {
	const char *section; /* opens a section of --help with this heading */
	const char *name;    /* without the "--" */
	char short_name;     /* 0: none */
	const char *arg;     /* the argument, as --help names it; NULL: none */
	const char *help;    /* lines separated by '\n' */
	enum opt_kind kind;
	size_t off, off_n; /* fields of struct bench_opts */
	uint32_t max;
	uint64_t lo, hi;
	double dlo, dhi;
	int set;
	const char *const *names; /* K_NAMED: NULL-terminated */
	/* K_FUNC: 0, or -1 with the error reported; n is the name */
	int (*fn)(struct bench_opts *o, const char *n, const char *a);
};

/* The offset of field f of struct bench_opts, which must be of type T (a
 * compile error otherwise). */
#define FIELD(f, T)                                                            \
	(offsetof(struct bench_opts, f) +                                      \
	 0 * sizeof(char[_Generic(((struct bench_opts *)0)->f, T : 1)]))
#define NELEM(f) (sizeof(((struct bench_opts *)0)->f) / sizeof(uint32_t))

#define FLAG(f, v) .kind = K_FLAG, .off = FIELD(f, bool), .set = (v)
#define SET(f, v)  .kind = K_SET, .off = FIELD(f, int), .set = (v)
#define U32(f, l, h)                                                           \
	.kind = K_U32, .off = FIELD(f, uint32_t), .lo = (l), .hi = (h)
#define U64(f, l, h)                                                           \
	.kind = K_U64, .off = FIELD(f, uint64_t), .lo = (l), .hi = (h)
#define DBL(f, l, h)                                                           \
	.kind = K_DBL, .off = FIELD(f, double), .dlo = (l), .dhi = (h)
#define F32(f, l, h)                                                           \
	.kind = K_F32, .off = FIELD(f, float), .dlo = (l), .dhi = (h)
#define SIZE(f, l)     .kind = K_SIZE, .off = FIELD(f, uint64_t), .lo = (l)
#define STR(f)	       .kind = K_STR, .off = FIELD(f, const char *)
#define NAMED(f, list) .kind = K_NAMED, .off = FIELD(f, int), .names = (list)
#define LIST(f, n, l, h)                                                       \
	.kind = K_LIST, .off = FIELD(f[0], uint32_t),                          \
	.off_n = FIELD(n, uint32_t), .max = NELEM(f), .lo = (l), .hi = (h)
#define FUNC(f) .kind = K_FUNC, .fn = (f)

/* K_NAMED lists: the index of a name is the value stored. */
static const char *const materialize_names[] = {"all", "touched", "none", NULL};
static const char *const op_names[] = {"pooled", "gather", NULL};
static const char *const compute_names[] = {"busy", "sleep", NULL};
_Static_assert(MAT_ALL == 0 && MAT_TOUCHED == 1 && MAT_NONE == 2,
	       "materialize_names");
_Static_assert(OP_POOLED == 0 && OP_GATHER == 1, "op_names");
_Static_assert(COMPUTE_BUSY == 0 && COMPUTE_SLEEP == 1, "compute_names");

/* In the order of --help. */
static const struct opt opts[] = {
    {.section = "Workload",
     .name = "workload",
     .short_name = 'w',
     .arg = "KIND",
     .help = "uniform | zipf | shift | trace (default zipf)",
     FUNC(set_workload)},
    {.name = "zipf-s",
     .arg = "S",
     .help = "Zipf exponent (default 1.15); hot ids are\n"
	     "scattered over each table by a keyed bijection",
     DBL(wl.zipf_s, 1e-3, 50)},
    {.name = "shift-every",
     .arg = "K",
     .help = "shift: the Zipf rank order moves every K batches\n"
	     "(default 10)",
     U32(wl.shift_every, 1, UINT32_MAX)},
    {.name = "shift-by",
     .arg = "R",
     .help = "shift: ranks rotated per move (default rows/4)",
     U64(wl.shift_by, 0, WL_MAX_ROWS)},
    {.name = "trace",
     .arg = "FILE",
     .help = "replay a binary trace (implies --workload trace)",
     FUNC(set_trace)},
    {.name = "tables",
     .arg = "N",
     .help = "tables (default 32; pipeline 8)",
     U32(wl.tables, 1, WL_TRACE_MAX_TABLES)},
    {.name = "rows",
     .arg = "N",
     .help = "rows per table (default 2^16; pipeline 2^18;\n"
	     "delta 10^7); counts accept 2^N",
     U64(wl.rows, 1, ET_MAX_ROWS)},
    {.name = "dim",
     .arg = "D[,D...]",
     .help = "values per row (default 128; flush 64, keyed and\n"
	     "delta 32); a list gives one dim per table,\n"
	     "repeated over the tables (run and pipeline; the\n"
	     "peers, mrc, keyed and delta take one dim)",
     FUNC(set_dim)},
    {.name = "dtype",
     .arg = "T",
     .help = "f32 | f16 | bf16 (default f32)",
     FUNC(set_dtype)},
    {.name = "batch",
     .arg = "B",
     .help = "bags per table per batch (default 512; pipeline\n"
	     "256)",
     U32(wl.batch, 1, WL_TRACE_MAX_N)},
    {.name = "pooling",
     .arg = "L",
     .help = "ids per bag (default 20; traces: the trace's)",
     FUNC(set_pooling)},
    {.name = "seed",
     .arg = "N",
     .help = "generator seed (default 1)",
     U64(wl.seed, 0, UINT64_MAX)},
    {.section = "Store",
     .name = "dir",
     .arg = "DIR",
     .help = "store directory, kept and reused when the tables\n"
	     "have the same shape (default: a temporary one\n"
	     "under $TMPDIR or /var/tmp, removed at the end)",
     STR(dir)},
    {.name = "materialize",
     .arg = "M",
     .help = "all | touched | none: rows written before the run\n"
	     "so that misses read the disk (default all; touched\n"
	     "needs --batches and --warmup, or a trace)",
     NAMED(materialize, materialize_names)},
    {.name = "hbm",
     .arg = "SIZE",
     .help = "simulated HBM tier (default 0: none)",
     SIZE(hbm_bytes, 0)},
    {.name = "ddr",
     .arg = "SIZE",
     .help = "DDR tier (default 128M; pipeline 64M, flush 1G,\n"
	     "keyed and delta 512M); sizes take K, M, G, T\n"
	     "(binary) or 2^N",
     SIZE(ddr_bytes, 1)},
    {.name = "policy",
     .arg = "P",
     .help = "lru | lfu | tinylfu, both tiers (default lru)",
     FUNC(set_policy)},
    {.name = "ways",
     .arg = "N",
     .help = "associativity (default 16)",
     U32(ways, 1, 64)},
    {.name = "slot-bytes",
     .arg = "N",
     .help = "smallest cache slot: rows up to N bytes share one\n"
	     "size class (default 0: slots per row size)",
     U32(slot_bytes, 0, (uint64_t)ET_MAX_DIM * 4 + 64)},
    {.name = "io-depth",
     .arg = "N",
     .help = "io_uring queue depth (default 128)",
     U32(io_depth, 1, 4096)},
    {.section = "Run length and operation",
     .name = "seconds",
     .arg = "S",
     .help = "measured time (default 5; keyed: of each op at\n"
	     "each load, 0.5)",
     DBL(seconds, 0.001, 1e6)},
    {.name = "batches",
     .arg = "N",
     .help = "measured batches instead (mrc: batches held, default\n"
	     "20; pipeline: steps, default 20)",
     U64(batches, 1, UINT32_MAX)},
    {.name = "warmup",
     .arg = "N|auto",
     .help = "warm-up batches (default auto: until the DDR tier\n"
	     "is 90% full, --warmup-max seconds, or a quarter of\n"
	     "a trace; pipeline: 5)",
     FUNC(set_warmup)},
    {.name = "warmup-max",
     .arg = "S",
     .help = "cap of the auto warm-up (default 10)",
     DBL(warmup_max_s, 0, 1e6)},
    {.name = "op",
     .arg = "OP",
     .help = "pooled (et_gather_pooled, sum) | gather (et_gather)",
     NAMED(op, op_names)},
    {.name = "update",
     .help = "apply an update after each gather (peers skipped)",
     FLAG(update, true)},
    {.name = "update-vs-read",
     .help = "measure without updates, then, in the same process\n"
	     "and store, with them, for the same time (peers\n"
	     "skipped)",
     FLAG(update_vs_read, true)},
    {.name = "multi",
     .help = "pooled: every table of a batch in one et_gather_pooled_multi\n"
	     "(and et_update_pooled_multi) call, their misses read\n"
	     "together",
     FLAG(multi, true)},
    {.name = "record",
     .arg = "FILE",
     .help = "also write the batches run to a trace",
     STR(record)},
    {.section = "Limits and peers (run)",
     .name = "no-limits",
     .help = "skip the raw gather and io_uring loops",
     FLAG(limits, false)},
    {.name = "limit-seconds",
     .arg = "S",
     .help = "io_uring loop duration (default 2)",
     DBL(limit_seconds, 0.01, 1e5)},
    {.name = "limit-qd",
     .arg = "LIST",
     .help = "also measure raw io_uring at these queue depths,\n"
	     "e.g. 32,64 (up to 4; the store's depth always)",
     LIST(limit_qd, n_limit_qd, 1, 4096)},
    {.name = "no-pread", .help = "skip the pread peer", FLAG(pread, false)},
    {.name = "no-pread-cache",
     .help = "pread peer without its row cache",
     FLAG(pread_cache, false)},
    {.name = "no-rocksdb",
     .help = "skip the RocksDB peer",
     FLAG(rocksdb, false)},
    {.name = "rocksdb-extra",
     .arg = "F",
     .help = "fraction of untouched rows also loaded into\n"
	     "RocksDB (default 0.25)",
     DBL(rocksdb_extra, 0, 1)},
    {.name = "threads",
     .arg = "N",
     .help = "the store's threads (et_store_config.threads:\n"
	     "its calls' row work and the placement of a\n"
	     "large batch's misses; default 1)",
     U32(threads, 1, 64)},
    {.name = "peer-threads",
     .arg = "N",
     .help = "worker threads of the peers (default 2)",
     U32(peer_threads, 1, 256)},
    {.name = "peer-max-seconds",
     .arg = "S",
     .help = "cap on each peer's warm-up and measured phase\n"
	     "(default 4 x the store's measured time + 5)",
     DBL(peer_max_s, 0.01, 1e6)},
    {.section = "mrc",
     .name = "points",
     .arg = "N",
     .help = "capacities, halving down from the trace's distinct\n"
	     "rows (default 8)",
     U32(points, 1, 64)},
    {.name = "sizes",
     .arg = "LIST",
     .help = "DDR sizes instead, e.g. 16M,64M,256M",
     STR(sizes)},
    {.name = "policies",
     .arg = "LIST",
     .help = "of lru,lfu,tinylfu,wtinylfu (default all)",
     FUNC(set_policies)},
    {.name = "hits",
     .arg = "N",
     .help = "also time DDR-hit gathers of every series (every\n"
	     "row cached; N rounds, the series alternating)",
     U32(hit_rounds, 1, 1000)},
    {.name = "lookahead",
     .arg = "LIST",
     .help = "lookahead windows in batches, 0 for none (default\n"
	     "0,1,4,16; at most 32)",
     LIST(mrc_la, n_mrc_la, 0, ET_MAX_LOOKAHEAD)},
    {.name = "no-belady",
     .help = "skip Belady's MIN (offline, fully associative) and\n"
	     "the learner (exact counts of every row's draws, the\n"
	     "best a policy can learn from its lookups)\n"
	     "(zipf and shift also print the oracle: A0 knowing\n"
	     "the generator's distribution, the best an online\n"
	     "policy can expect)",
     FLAG(belady, false)},
    {.name = "plot",
     .arg = "FILE.png",
     .help = "draw the curves with gnuplot (skipped, with a\n"
	     "message, if gnuplot is not installed)",
     STR(plot)},
    {.section = "pipeline",
     .name = "compute-us",
     .arg = "N",
     .help = "compute time per step standing for forward and\n"
	     "backward (default 100000)",
     U64(compute_us, 0, 3600000000ULL)},
    {.name = "compute",
     .arg = "C",
     .help = "busy | sleep (default busy)",
     NAMED(compute, compute_names)},
    {.name = "lr",
     .arg = "F",
     .help = "SGD learning rate of the updates (default 0.01;\n"
	     "keyed 0)",
     F32(lr, -1e6, 1e6)},
    {.section = "reopen",
     .name = "reps",
     .arg = "N",
     .help = "timed reopens of each store (default 3)",
     U32(reps, 1, 1000)},
    {.section = "keyed",
     .name = "keys",
     .arg = "N",
     .help = "keys a call (default 2^20 = 1048576, as\n"
	     "HierarchicalKV's benchmark); at most half the\n"
	     "capacity",
     U64(keyed_keys, 1, WL_TRACE_MAX_N)},
    {.name = "new-frac",
     .arg = "F",
     .help = "share of never-seen keys in a find_or_insert call\n"
	     "(default 0.5)",
     DBL(new_frac, 0, 1)},
    {.name = "train-keys",
     .arg = "N",
     .help = "instead of the protocol, the scale check: train N\n"
	     "distinct random keys through a keyed table, --keys\n"
	     "a call (default 65536), --dim 8, --ddr 1G, --lr\n"
	     "0.01 unless given (see keyed --train-keys above)",
     U64(train_keys, 1, 2000000000)},
    {.name = "check-keys",
     .arg = "N",
     .help = "--train-keys: keys read back after the checkpoint\n"
	     "and a reopen, drawn at random (default 1000000;\n"
	     "all of them when N is fewer)",
     U64(check_keys, 1, UINT64_MAX)},
    {.section = "Output",
     .name = "json",
     .help = "one JSON object on stdout",
     SET(format, FMT_JSON)},
    {.name = "csv", .help = "CSV rows on stdout", SET(format, FMT_CSV)},
    {.name = "quiet",
     .short_name = 'q',
     .help = "no progress bars or notes",
     FLAG(quiet, true)},
    {.name = "force",
     .short_name = 'f',
     .help = "replace existing output files (convert, gen,\n"
	     "--record)",
     FLAG(force, true)},
    {.name = "help", .short_name = 'h', .help = "this help", .kind = K_HELP},
};

#define NOPTS	 (sizeof(opts) / sizeof(opts[0]))
#define HELP_COL 24 /* where the help lines start */

/* getopt_long's val of an option: its short name, else 256 + its index. */
static int opt_val(const struct opt *op)
{
	return op->short_name ? op->short_name : 256 + (int)(op - opts);
}

static const struct opt *opt_of_val(int val)
{
	for (size_t i = 0; i < NOPTS; i++)
		if (opt_val(&opts[i]) == val)
			return &opts[i];
	return NULL;
}

/* getopt_long's tables, from opts[]. */
static void make_getopt(struct option *lo, char *so)
{
	for (size_t i = 0; i < NOPTS; i++) {
		const struct opt *op = &opts[i];

		lo[i] = (struct option){
		    op->name, op->arg ? required_argument : no_argument, NULL,
		    opt_val(op)};
		if (op->short_name) {
			*so++ = op->short_name;
			if (op->arg)
				*so++ = ':';
		}
	}
	lo[NOPTS] = (struct option){NULL, 0, NULL, 0};
	*so = '\0';
}

/* Parses a's value for op into o; 0, 1 for --help, -1 (reported). */
static int apply(const struct opt *op, const char *a, struct bench_opts *o)
{
	void *f = (char *)o + op->off;
	const char *n = op->name;
	uint64_t v;
	double d;

	switch (op->kind) {
	case K_FLAG:
		*(bool *)f = op->set;
		return 0;
	case K_SET:
		*(int *)f = op->set;
		return 0;
	case K_U32:
		if (num(n, a, op->lo, op->hi, &v))
			return -1;
		*(uint32_t *)f = (uint32_t)v;
		return 0;
	case K_U64:
		return num(n, a, op->lo, op->hi, f);
	case K_DBL:
		return dbl(n, a, op->dlo, op->dhi, f);
	case K_F32:
		if (dbl(n, a, op->dlo, op->dhi, &d))
			return -1;
		*(float *)f = (float)d;
		return 0;
	case K_SIZE:
		if (parse_size(a, &v) || v < op->lo)
			return bad(n, a);
		*(uint64_t *)f = v;
		return 0;
	case K_STR:
		*(const char **)f = a;
		return 0;
	case K_NAMED:
		for (int i = 0; op->names[i]; i++)
			if (!strcmp(a, op->names[i])) {
				*(int *)f = i;
				return 0;
			}
		return bad(n, a);
	case K_LIST:
		return num_list(n, a, op->lo, op->hi, f, op->max,
				(uint32_t *)((char *)o + op->off_n));
	case K_FUNC:
		return op->fn(o, n, a);
	case K_HELP:
		return 1;
	}
	return -1;
}

/* Parses the options, marking in seen[] (NOPTS) those given; returns 0,
 * 1 for --help, or -1 (already reported). */
static int parse(int argc, char **argv, struct bench_opts *o, bool *seen)
{
	struct option longopts[NOPTS + 1];
	char shortopts[2 * NOPTS + 1];
	int c;

	make_getopt(longopts, shortopts);
	while ((c = getopt_long(argc, argv, shortopts, longopts, NULL)) != -1) {
		const struct opt *op = opt_of_val(c);
		int ret;

		if (!op) {
			cli_usage_error("unknown option");
			return -1;
		}
		seen[op - opts] = true;
		ret = apply(op, optarg, o);
		if (ret)
			return ret;
	}
	if (o->wl.kind == WL_TRACE && !o->wl.trace) {
		cli_usage_error("--workload trace needs --trace FILE");
		return -1;
	}
	if (o->wl.kind == WL_TRACE && !o->pooling_set)
		o->wl.pooling = 0; /* the trace's hint */
	return 0;
}

/* ----------------------------------------------------------------- --help */

static const char usage_head[] =
    "usage: embtier-bench [run] [options]          the store beside "
    "its limits\n"
    "                                               and its peers\n"
    "       embtier-bench mrc [options]             miss-ratio curves: "
    "every\n"
    "                                               policy, Belady\n"
    "       embtier-bench pipeline [options]        step time with and "
    "without\n"
    "                                               et_prefetch\n"
    "       embtier-bench convert [-f] [--pooling L] IN.txt OUT.trace\n"
    "       embtier-bench gen [options] OUT.trace   write a generated "
    "workload\n"
    "       embtier-bench flush [options]           write-back rate "
    "beside\n"
    "                                               sequential writes\n"
    "       embtier-bench reopen [options]          reopen time after "
    "a journal\n"
    "                                               snapshot vs "
    "ordinary batches\n"
    "       embtier-bench keyed [options]           a keyed table "
    "through\n"
    "                                               HierarchicalKV's "
    "protocol\n"
    "       embtier-bench delta [options]           delta export and "
    "apply vs\n"
    "                                               rows changed, disk "
    "reads\n"
    "\n"
    "flush: a DDR tier (--ddr, default 1G) full of dirty rows of "
    "--tables\n"
    "(default 8) lazy tables of --rows (default 2^30) x --dim (default "
    "64),\n"
    "then et_flush, then the same again and et_checkpoint; beside raw\n"
    "sequential 1 MiB O_DIRECT writes of as many bytes + fdatasync.\n"
    "\n"
    "reopen: two stores of one table of 4 x --rows (default 10^6) rows "
    "x dim 8\n"
    "f32, each with the same --rows distinct rows: written in 3 "
    "commits (an\n"
    "index journal of ordinary batches), and rewritten over commits "
    "until one\n"
    "writes a journal snapshot (past max(64 MiB, twice the index)); "
    "then\n"
    "et_store_open + et_table_open + et_store_close of each, timed "
    "--reps N\n"
    "times (default 3): min, median and their ratio. The stores are "
    "made in a\n"
    "scratch directory under --dir (default $TMPDIR or /var/tmp), "
    "removed at\n"
    "the end.\n"
    "\n"
    "keyed: HierarchicalKV's benchmark (--keys keys a call, default "
    "1048576;\n"
    "load factors 0.5 and 1.0) on a store of one keyed table "
    "(ET_TABLE_KEYED)\n"
    "of --dim (default 32) --dtype. Capacity = the DDR tier's slots "
    "(--ddr,\n"
    "default 512M), printed in keys; load = slots in use / capacity, "
    "filled with\n"
    "et_write_rows of fresh random u64 keys to within 0.001 of each "
    "load (past\n"
    "a set's ways a new key evicts one to NVMe). At each load, timed "
    "calls of:\n"
    "find (et_gather of stored keys drawn at random from the latest "
    "stored,\n"
    "gathered once untimed first: all DDR hits), assign (et_write_rows "
    "of\n"
    "such keys) and one find_or_insert (et_update, SGD --lr, default 0, "
    "of\n"
    "stored keys and a --new-frac share, default 0.5, of new keys, "
    "which it\n"
    "stores). find and assign repeat until --seconds (default 0.5) of "
    "timed\n"
    "calls. Beside it, the same steps on a row-indexed table of the "
    "same dim\n"
    "(its own store, --ddr too), the raw random gather of limits.c over "
    "a\n"
    "--ddr buffer (--no-limits skips it), and after a checkpoint of "
    "each: index\n"
    "and disk bytes per stored key. Ratios: keyed find / row-indexed "
    "gather\n"
    "(goal >= 0.8), find_or_insert at 1.0 / find at 0.5 (goal >= 0.5). "
    "Fails\n"
    "if a find returns other values than written, or the stored keys "
    "after\n"
    "the checkpoint are not those filled and inserted. The stores are "
    "made in\n"
    "a scratch directory under --dir (default $TMPDIR or /var/tmp), "
    "removed at\n"
    "the end.\n"
    "\n"
    "keyed --train-keys N: the scale check instead. N distinct random "
    "u64 keys\n"
    "(a bijection of a counter) trained through a store of one keyed "
    "table of\n"
    "--dim (default here 8) --dtype: et_update (SGD, --lr, default here "
    "0.01)\n"
    "of --keys fresh keys a call (default here 65536, at most half the "
    "DDR\n"
    "slots), each key's gradient powers of two, through a DDR tier "
    "(--ddr,\n"
    "default here 1G) far smaller than the keys, so that most rows go to "
    "NVMe;\n"
    "then et_checkpoint. Refused first if the directory's free space "
    "cannot\n"
    "hold the row log and its journal (16 + the row, rounded up to 8, "
    "and 16\n"
    "bytes a key). Prints: keys stored (et_stats log_index_rows and "
    "et_table_info\n"
    "rows_logged, both must be N), index and disk bytes per stored key, "
    "keys/s\n"
    "of the training, the checkpoint's time and the peak RSS. Then the "
    "store is\n"
    "closed and reopened, and --check-keys keys drawn at random (default "
    "10^6;\n"
    "every key when N is fewer) are read back: each must be exactly its "
    "initial\n"
    "value (a fresh keyed table file of the same seed) - lr x its "
    "gradient, and\n"
    "as many never-trained keys their initial value; else the run fails. "
    "Made\n"
    "in a scratch directory under --dir (default $TMPDIR or /var/tmp), "
    "removed\n"
    "at the end.\n"
    "\n"
    "delta: a store of one row-indexed table of --rows (default 10^7) x --dim\n"
    "(default 32) --dtype, every row written (et_write_rows, 65536 a call,\n"
    "through a --ddr tier, default 512M) and committed (untimed, its time\n"
    "printed). Then, timed: et_delta_export from 0 (the table whole, for "
    "scale)\n"
    "and et_delta_apply of it to an empty serving copy; and for 1% and 10%:\n"
    "that share of the rows, distinct, drawn at random, rewritten and\n"
    "committed (untimed), et_delta_export from the commit before and\n"
    "et_delta_apply to the copy. The page cache of the source's files (and of\n"
    "the delta before an apply) is dropped first (posix_fadvise DONTNEED; the\n"
    "bytes still cached are printed); the row log is read O_DIRECT. Prints\n"
    "rows, bytes, seconds and MB/s of each export (delta bytes, and log\n"
    "records: rows x record bytes), the bytes it read from storage\n"
    "(/proc/self/io), apply seconds and MB/s, and et_tfile_open read-only of\n"
    "the source's and the copy's table alone (their whole index loaded).\n"
    "Beside them, the disk's sequential read limit: 1 MiB O_DIRECT reads of\n"
    "the row log (at least 1 GiB, at most 3 s; passes repeated if it is\n"
    "smaller) through io_uring at QD 1 and 8, the faster. Ratios: export MB/s\n"
    "/ raw (goal >= 0.5); 10% / 1% of bytes and of export time (ideally ~10).\n"
    "Fails unless each 1%/10% delta carries exactly the rows rewritten, and\n"
    "after each apply 10^5 random rows of the copy equal the source's and up\n"
    "to 10^4 rewritten rows the values written. Made in a scratch directory\n"
    "under --dir (default $TMPDIR or /var/tmp), removed at the end.\n"
    "\n"
    "run: a warm-up (not measured), then batches of et_gather_pooled "
    "over\n"
    "every table, timed; then, in the same process over the same files "
    "and\n"
    "batches: a raw random-gather loop over a DDR-sized buffer and raw "
    "io_uring\n"
    "random block reads at the same queue depth (the limits), and the "
    "peers:\n"
    "O_DIRECT pread from threads with a row cache, and RocksDB (direct "
    "reads,\n"
    "an LRU block cache of the DDR budget, one MultiGet per table and "
    "batch).\n"
    "It reports per system: ids/s and GB/s, distinct ids per batch, "
    "batch p50\n"
    "and p99, where lookups were served (HBM, DDR, NVMe, initializer), "
    "reads\n"
    "issued, device reads/s, latency and queue depth (over the system's\n"
    "calls, not the workload's generation between them), bytes written "
    "back\n"
    "and time waited on I/O; each figure beside its limit as a ratio.\n";

static const char usage_tail[] =
    "\n"
    "Trace format (bench/TRACE.md), all integers little-endian:\n"
    "  header  \"EMBTRACE\", u32 version 1, u32 ntables, u32 pooling "
    "hint (0:\n"
    "          none), u32 flags 0, u64 nbatches (0: read to the end), "
    "then\n"
    "          ntables x u64 rows (every id of table t is < rows[t])\n"
    "  batch   u32 \"BTCH\", u32 k, then k records in ascending table "
    "order:\n"
    "          u32 table, u32 n, n x u64 row ids\n"
    "  A replayed table's ids are cut into bags of --pooling (else the "
    "hint,\n"
    "  else one bag). `convert` reads text lines \"batch table row\" "
    "(blank\n"
    "  lines and # comments skipped; batch labels must not decrease; "
    "lines of\n"
    "  one label form a batch; a table's rows = its largest id + 1).\n"
    "\n"
    "Exit status: 0 ok, 1 failure, 2 bad command line.\n";

/* "      --name ARG        first help line", then the others indented. */
static void usage_opt(const struct opt *op)
{
	const char *h = op->help;
	int n;

	if (op->short_name)
		n = printf("  -%c, --%s", op->short_name, op->name);
	else
		n = printf("      --%s", op->name);
	if (op->arg)
		n += printf(" %s", op->arg);
	printf("%*s", n < HELP_COL ? HELP_COL - n : 2, "");
	for (;;) {
		const char *nl = strchr(h, '\n');

		if (!nl) {
			printf("%s\n", h);
			return;
		}
		printf("%.*s\n%*s", (int)(nl - h), h, HELP_COL, "");
		h = nl + 1;
	}
}

static void usage(void)
{
	fputs(usage_head, stdout);
	for (size_t i = 0; i < NOPTS; i++) {
		if (opts[i].section)
			printf("\n%s:\n", opts[i].section);
		usage_opt(&opts[i]);
	}
	fputs(usage_tail, stdout);
}

/* ------------------------------------------------------------- subcommands */

enum {
	CMD_RUN,
	CMD_MRC,
	CMD_PIPELINE,
	CMD_CONVERT,
	CMD_GEN,
	CMD_FLUSH,
	CMD_REOPEN,
	CMD_KEYED,
	CMD_DELTA
};

static void defaults(struct bench_opts *o, int cmd)
{
	memset(o, 0, sizeof(*o));
	o->wl.kind = WL_ZIPF;
	o->wl.tables = cmd == CMD_PIPELINE ? 8 : 32;
	o->wl.rows = cmd == CMD_PIPELINE ? 1ULL << 18 : 1ULL << 16;
	o->wl.batch = cmd == CMD_PIPELINE ? 256 : 512;
	o->wl.pooling = 20;
	o->wl.zipf_s = 1.15;
	o->wl.shift_every = 10;
	o->wl.seed = 1;
	o->dim = 128;
	o->dims[0] = 128;
	o->ndims = 1;
	o->dtype = ET_F32;
	o->ddr_bytes = cmd == CMD_PIPELINE ? 64ULL << 20 : 128ULL << 20;
	o->policy = ET_POLICY_LRU;
	o->materialize = MAT_ALL;
	o->seconds = 5;
	o->warmup = cmd == CMD_PIPELINE ? 5 : -1;
	o->warmup_max_s = 10;
	o->op = OP_POOLED;
	o->limits = o->pread = o->rocksdb = true;
	o->limit_seconds = 2;
	o->peer_threads = 2;
	o->threads = 1;
	o->pread_cache = true;
	o->rocksdb_extra = 0.25;
	o->mrc_policies = 1u << ET_POLICY_LRU | 1u << ET_POLICY_LFU |
			  1u << ET_POLICY_TINYLFU | 1u << ET_POLICY_WTINYLFU;
	o->mrc_la[0] = 0;
	o->mrc_la[1] = 1;
	o->mrc_la[2] = 4;
	o->mrc_la[3] = 16;
	o->n_mrc_la = 4;
	o->belady = true;
	o->compute_us = 100000;
	o->compute = COMPUTE_BUSY;
	o->lr = 0.01f;
	if (cmd == CMD_GEN)
		o->batches = 10;
	if (cmd == CMD_FLUSH) {
		o->wl.tables = 8;
		o->wl.rows = 1ULL << 30;
		o->dim = o->dims[0] = 64;
		o->ddr_bytes = 1ULL << 30;
	}
	o->reps = 3;
	if (cmd == CMD_REOPEN)
		o->wl.rows = 1000000;
	o->keyed_keys = 1ULL << 20;
	o->new_frac = 0.5;
	o->check_keys = 1000000;
	if (cmd == CMD_KEYED) {
		o->dim = o->dims[0] = 32;
		o->ddr_bytes = 512ULL << 20;
		o->seconds = 0.5;
		o->lr = 0;
	}
	if (cmd == CMD_DELTA) {
		o->wl.rows = 10000000;
		o->dim = o->dims[0] = 32;
		o->ddr_bytes = 512ULL << 20;
	}
}

static int cmd_convert(const struct bench_opts *o, int argc, char **argv)
{
	uint64_t lines = 0, batches = 0;
	char err[512];
	int ret;

	if (argc != 2) {
		cli_usage_error("convert needs IN.txt OUT.trace");
		return CLI_EXIT_USAGE;
	}
	ret = wl_trace_convert(argv[0], argv[1],
			       o->pooling_set ? o->wl.pooling : 0, o->force,
			       err, sizeof(err), &lines, &batches);
	if (ret) {
		cli_error("%s", err);
		return CLI_EXIT_FAIL;
	}
	if (!o->quiet)
		cli_note("%s: %" PRIu64 " ids in %" PRIu64 " batches", argv[1],
			 lines, batches);
	return CLI_EXIT_OK;
}

static int cmd_gen(const struct bench_opts *o, int argc, char **argv)
{
	struct wl_trace_writer w;
	struct wl_batch b;
	struct wl_gen g;
	uint64_t *rows, n = 0;
	int ret;

	if (argc != 1) {
		cli_usage_error("gen needs OUT.trace");
		return CLI_EXIT_USAGE;
	}
	if (wl_open(&g, &o->wl)) {
		cli_error("workload: %s", g.err);
		return CLI_EXIT_FAIL;
	}
	rows = calloc(wl_tables(&g), sizeof(*rows));
	if (!rows) {
		wl_close(&g);
		cli_error("out of memory");
		return CLI_EXIT_FAIL;
	}
	for (uint32_t t = 0; t < wl_tables(&g); t++)
		rows[t] = wl_rows(&g, t);
	ret = wl_trace_create(
	    &w, argv[0], wl_tables(&g), rows,
	    o->wl.kind == WL_TRACE ? g.tr.pooling : o->wl.pooling, o->force);
	if (ret) {
		cli_error("%s: %s", argv[0],
			  ret == -EEXIST ? "exists (use --force to replace)"
					 : strerror(-ret));
		if (ret != -EEXIST)
			wl_trace_abort(&w);
		free(rows);
		wl_close(&g);
		return CLI_EXIT_FAIL;
	}
	wl_batch_init(&b);
	while (n < o->batches && !bench_stop) {
		ret = wl_next(&g, &b);
		if (ret <= 0)
			break;
		ret = wl_trace_write(&w, &b);
		if (ret)
			break;
		n++;
	}
	if (ret < 0 || bench_stop) {
		if (ret < 0 && g.err[0])
			cli_error("workload: %s", g.err);
		else
			cli_error("%s: %s", argv[0],
				  strerror(ret < 0 ? -ret : EINTR));
		wl_trace_abort(&w);
		ret = -1;
	} else {
		ret = wl_trace_finish(&w);
		if (ret)
			cli_error("%s: %s", argv[0], strerror(-ret));
	}
	if (!ret && !o->quiet)
		cli_note("%s: %" PRIu64 " batches", argv[0], n);
	wl_batch_free(&b);
	free(rows);
	wl_close(&g);
	return ret ? CLI_EXIT_FAIL : CLI_EXIT_OK;
}

/* Whether the option named name was given. */
static bool given(const bool *seen, const char *name)
{
	for (size_t i = 0; i < NOPTS; i++)
		if (!strcmp(opts[i].name, name))
			return seen[i];
	return false;
}

/* keyed --train-keys: its own defaults, for the options not given. */
static int train_defaults(struct bench_opts *o, int cmd, const bool *seen)
{
	if (cmd != CMD_KEYED) {
		cli_usage_error("--train-keys is keyed's");
		return -1;
	}
	if (o->format == FMT_CSV) {
		cli_usage_error("keyed --train-keys prints text or --json");
		return -1;
	}
	if (!given(seen, "dim"))
		o->dim = o->dims[0] = 8;
	if (!given(seen, "ddr"))
		o->ddr_bytes = 1ULL << 30;
	if (!given(seen, "keys"))
		o->keyed_keys = 65536;
	if (!given(seen, "lr"))
		o->lr = 0.01f;
	return 0;
}

static void on_signal(int sig)
{
	(void)sig;
	bench_stop = 1;
}

int main(int argc, char **argv)
{
	static const char *const names[] = {"run",     "mrc",	"pipeline",
					    "convert", "gen",	"flush",
					    "reopen",  "keyed", "delta"};
	bool seen[NOPTS] = {false};
	struct sigaction sa;
	struct bench_opts o;
	int cmd = CMD_RUN, ret;

	cli_init("embtier-bench");
	if (argc > 1 && argv[1][0] != '-') {
		cmd = -1;
		for (int i = 0; i < (int)(sizeof(names) / sizeof(*names)); i++)
			if (!strcmp(argv[1], names[i]))
				cmd = i;
		if (cmd < 0) {
			cli_usage_error("unknown command '%s'", argv[1]);
			return CLI_EXIT_USAGE;
		}
		argv[1] = argv[0];
		argv++;
		argc--;
	}
	defaults(&o, cmd);
	ret = parse(argc, argv, &o, seen);
	if (ret > 0) {
		usage();
		return CLI_EXIT_OK;
	}
	if (ret < 0)
		return CLI_EXIT_USAGE;
	if (given(seen, "check-keys") && !given(seen, "train-keys")) {
		cli_usage_error("--check-keys goes with --train-keys");
		return CLI_EXIT_USAGE;
	}
	if (given(seen, "train-keys") && train_defaults(&o, cmd, seen))
		return CLI_EXIT_USAGE;
	if ((cmd == CMD_RUN || cmd == CMD_MRC || cmd == CMD_PIPELINE ||
	     cmd == CMD_FLUSH || cmd == CMD_REOPEN || cmd == CMD_KEYED ||
	     cmd == CMD_DELTA) &&
	    optind != argc) {
		cli_usage_error("unexpected argument '%s'", argv[optind]);
		return CLI_EXIT_USAGE;
	}

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sa.sa_flags = SA_RESTART;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);

	switch (cmd) {
	case CMD_MRC:
		return cmd_mrc(&o);
	case CMD_PIPELINE:
		return cmd_pipeline(&o);
	case CMD_CONVERT:
		return cmd_convert(&o, argc - optind, argv + optind);
	case CMD_GEN:
		return cmd_gen(&o, argc - optind, argv + optind);
	case CMD_FLUSH:
		return cmd_flush(&o);
	case CMD_REOPEN:
		return cmd_reopen(&o);
	case CMD_KEYED:
		return cmd_keyed(&o);
	case CMD_DELTA:
		return cmd_delta(&o);
	default:
		return cmd_run(&o);
	}
}
