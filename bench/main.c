/*
 * main.c - embtier-bench's command line: the subcommands (run, mrc,
 * pipeline, convert, gen, flush, reopen), their options and defaults, and
 * --help, which documents every option and the trace format.
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "cli.h"

static void usage(void)
{
	printf(
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
	    "issued, device reads/s, latency and queue depth, bytes written "
	    "back and\n"
	    "time waited on I/O; each figure beside its limit as a ratio.\n"
	    "\n"
	    "Workload:\n"
	    "  -w, --workload KIND   uniform | zipf | shift | trace (default "
	    "zipf)\n"
	    "      --zipf-s S        Zipf exponent (default 1.15); hot ids "
	    "are\n"
	    "                        scattered over each table by a keyed "
	    "bijection\n"
	    "      --shift-every K   shift: the Zipf rank order moves every K "
	    "batches\n"
	    "                        (default 10)\n"
	    "      --shift-by R      shift: ranks rotated per move (default "
	    "rows/4)\n"
	    "      --trace FILE      replay a binary trace (implies --workload "
	    "trace)\n"
	    "      --tables N        tables (default 32; pipeline 8)\n"
	    "      --rows N          rows per table (default 2^16; pipeline "
	    "2^18);\n"
	    "                        counts accept 2^N\n"
	    "      --dim D[,D...]    values per row (default 128); a list "
	    "gives one\n"
	    "                        dim per table, repeated over the tables "
	    "(run and\n"
	    "                        pipeline; the peers and mrc take one "
	    "dim)\n"
	    "      --dtype T         f32 | f16 | bf16 (default f32)\n"
	    "      --batch B         bags per table per batch (default 512; "
	    "pipeline\n"
	    "                        256)\n"
	    "      --pooling L       ids per bag (default 20; traces: the "
	    "trace's)\n"
	    "      --seed N          generator seed (default 1)\n"
	    "\n"
	    "Store:\n"
	    "      --dir DIR         store directory, kept and reused when the "
	    "tables\n"
	    "                        have the same shape (default: a temporary "
	    "one\n"
	    "                        under $TMPDIR or /var/tmp, removed at the "
	    "end)\n"
	    "      --materialize M   all | touched | none: rows written before "
	    "the run\n"
	    "                        so that misses read the disk (default "
	    "all; touched\n"
	    "                        needs --batches and --warmup, or a "
	    "trace)\n"
	    "      --hbm SIZE        simulated HBM tier (default 0: none)\n"
	    "      --ddr SIZE        DDR tier (default 128M; pipeline 64M); "
	    "sizes take\n"
	    "                        K, M, G, T (binary) or 2^N\n"
	    "      --policy P        lru | lfu | tinylfu, both tiers (default "
	    "lru)\n"
	    "      --ways N          associativity (default 16)\n"
	    "      --slot-bytes N    smallest cache slot: rows up to N bytes "
	    "share one\n"
	    "                        size class (default 0: slots per row "
	    "size)\n"
	    "      --io-depth N      io_uring queue depth (default 128)\n"
	    "\n"
	    "Run length and operation:\n"
	    "      --seconds S       measured time (default 5)\n"
	    "      --batches N       measured batches instead (mrc: batches "
	    "held, default\n"
	    "                        20; pipeline: steps, default 20)\n"
	    "      --warmup N|auto   warm-up batches (default auto: until the "
	    "DDR tier\n"
	    "                        is 90%% full, --warmup-max seconds, or a "
	    "quarter of\n"
	    "                        a trace; pipeline: 5)\n"
	    "      --warmup-max S    cap of the auto warm-up (default 10)\n"
	    "      --op OP           pooled (et_gather_pooled, sum) | gather "
	    "(et_gather)\n"
	    "      --update          apply an update after each gather (peers "
	    "skipped)\n"
	    "      --update-vs-read  measure without updates, then, in the "
	    "same "
	    "process\n"
	    "                        and store, with them, for the same time "
	    "(peers\n"
	    "                        skipped)\n"
	    "      --multi           pooled: every table of a batch in one "
	    "et_gather_pooled_multi\n"
	    "                        (and et_update_pooled_multi) call, their "
	    "misses read\n"
	    "                        together\n"
	    "      --record FILE     also write the batches run to a trace\n"
	    "\n"
	    "Limits and peers (run):\n"
	    "      --no-limits       skip the raw gather and io_uring loops\n"
	    "      --limit-seconds S io_uring loop duration (default 2)\n"
	    "      --limit-qd LIST   also measure raw io_uring at these queue "
	    "depths,\n"
	    "                        e.g. 32,64 (up to 4; the store's depth "
	    "always)\n"
	    "      --no-pread        skip the pread peer\n"
	    "      --no-pread-cache  pread peer without its row cache\n"
	    "      --no-rocksdb      skip the RocksDB peer\n"
	    "      --rocksdb-extra F fraction of untouched rows also loaded "
	    "into\n"
	    "                        RocksDB (default 0.25)\n"
	    "      --peer-threads N  worker threads of the peers (default 2)\n"
	    "      --peer-max-seconds S  cap on each peer's warm-up and "
	    "measured phase\n"
	    "                        (default 4 x the store's measured time + "
	    "5)\n"
	    "\n"
	    "mrc:\n"
	    "      --points N        capacities, halving down from the trace's "
	    "distinct\n"
	    "                        rows (default 8)\n"
	    "      --sizes LIST      DDR sizes instead, e.g. 16M,64M,256M\n"
	    "      --policies LIST   of lru,lfu,tinylfu,wtinylfu (default "
	    "all)\n"
	    "      --hits N          also time DDR-hit gathers of every series "
	    "(every\n"
	    "                        row cached; N rounds, the series "
	    "alternating)\n"
	    "      --lookahead LIST  lookahead windows in batches, 0 for none "
	    "(default\n"
	    "                        0,1,4,16; at most 32)\n"
	    "      --no-belady       skip Belady's MIN (offline, fully "
	    "associative) and\n"
	    "                        the learner (exact counts of every "
	    "row's draws, the\n"
	    "                        best a policy can learn from its "
	    "lookups)\n"
	    "                        (zipf and shift also print the oracle: "
	    "A0 knowing\n"
	    "                        the generator's distribution, the best "
	    "an online\n"
	    "                        policy can expect)\n"
	    "      --plot FILE.png   draw the curves with gnuplot (skipped, "
	    "with a\n"
	    "                        message, if gnuplot is not installed)\n"
	    "\n"
	    "pipeline:\n"
	    "      --compute-us N    compute time per step standing for "
	    "forward and\n"
	    "                        backward (default 100000)\n"
	    "      --compute C       busy | sleep (default busy)\n"
	    "      --lr F            SGD learning rate of the updates (default "
	    "0.01)\n"
	    "\n"
	    "reopen:\n"
	    "      --reps N          timed reopens of each store (default 3)\n"
	    "\n"
	    "Output:\n"
	    "      --json            one JSON object on stdout\n"
	    "      --csv             CSV rows on stdout\n"
	    "  -q, --quiet           no progress bars or notes\n"
	    "  -f, --force           replace existing output files (convert, "
	    "gen,\n"
	    "                        --record)\n"
	    "  -h, --help            this help\n"
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
	    "Exit status: 0 ok, 1 failure, 2 bad command line.\n");
}

enum {
	O_WORKLOAD = 'w',
	O_ZIPF = 256,
	O_SHIFT_EVERY,
	O_SHIFT_BY,
	O_TRACE,
	O_TABLES,
	O_ROWS,
	O_DIM,
	O_DTYPE,
	O_BATCH,
	O_POOLING,
	O_SEED,
	O_DIR,
	O_MATERIALIZE,
	O_HBM,
	O_DDR,
	O_POLICY,
	O_WAYS,
	O_SLOT_BYTES,
	O_IODEPTH,
	O_SECONDS,
	O_BATCHES,
	O_WARMUP,
	O_WARMUP_MAX,
	O_OP,
	O_UPDATE,
	O_MULTI,
	O_UPDATE_VS_READ,
	O_RECORD,
	O_NO_LIMITS,
	O_LIMIT_SECONDS,
	O_LIMIT_QD,
	O_NO_PREAD,
	O_NO_PREAD_CACHE,
	O_NO_ROCKSDB,
	O_ROCKSDB_EXTRA,
	O_PEER_THREADS,
	O_PEER_MAX,
	O_POINTS,
	O_SIZES,
	O_POLICIES,
	O_LOOKAHEAD,
	O_NO_BELADY,
	O_PLOT,
	O_HITS,
	O_COMPUTE_US,
	O_COMPUTE,
	O_LR,
	O_REPS,
	O_JSON,
	O_CSV,
};

static const struct option longopts[] = {
    {"workload", required_argument, NULL, O_WORKLOAD},
    {"zipf-s", required_argument, NULL, O_ZIPF},
    {"shift-every", required_argument, NULL, O_SHIFT_EVERY},
    {"shift-by", required_argument, NULL, O_SHIFT_BY},
    {"trace", required_argument, NULL, O_TRACE},
    {"tables", required_argument, NULL, O_TABLES},
    {"rows", required_argument, NULL, O_ROWS},
    {"dim", required_argument, NULL, O_DIM},
    {"dtype", required_argument, NULL, O_DTYPE},
    {"batch", required_argument, NULL, O_BATCH},
    {"pooling", required_argument, NULL, O_POOLING},
    {"seed", required_argument, NULL, O_SEED},
    {"dir", required_argument, NULL, O_DIR},
    {"materialize", required_argument, NULL, O_MATERIALIZE},
    {"hbm", required_argument, NULL, O_HBM},
    {"ddr", required_argument, NULL, O_DDR},
    {"policy", required_argument, NULL, O_POLICY},
    {"ways", required_argument, NULL, O_WAYS},
    {"slot-bytes", required_argument, NULL, O_SLOT_BYTES},
    {"io-depth", required_argument, NULL, O_IODEPTH},
    {"seconds", required_argument, NULL, O_SECONDS},
    {"batches", required_argument, NULL, O_BATCHES},
    {"warmup", required_argument, NULL, O_WARMUP},
    {"warmup-max", required_argument, NULL, O_WARMUP_MAX},
    {"op", required_argument, NULL, O_OP},
    {"update", no_argument, NULL, O_UPDATE},
    {"multi", no_argument, NULL, O_MULTI},
    {"update-vs-read", no_argument, NULL, O_UPDATE_VS_READ},
    {"record", required_argument, NULL, O_RECORD},
    {"no-limits", no_argument, NULL, O_NO_LIMITS},
    {"limit-seconds", required_argument, NULL, O_LIMIT_SECONDS},
    {"limit-qd", required_argument, NULL, O_LIMIT_QD},
    {"no-pread", no_argument, NULL, O_NO_PREAD},
    {"no-pread-cache", no_argument, NULL, O_NO_PREAD_CACHE},
    {"no-rocksdb", no_argument, NULL, O_NO_ROCKSDB},
    {"rocksdb-extra", required_argument, NULL, O_ROCKSDB_EXTRA},
    {"peer-threads", required_argument, NULL, O_PEER_THREADS},
    {"peer-max-seconds", required_argument, NULL, O_PEER_MAX},
    {"points", required_argument, NULL, O_POINTS},
    {"sizes", required_argument, NULL, O_SIZES},
    {"policies", required_argument, NULL, O_POLICIES},
    {"lookahead", required_argument, NULL, O_LOOKAHEAD},
    {"no-belady", no_argument, NULL, O_NO_BELADY},
    {"plot", required_argument, NULL, O_PLOT},
    {"hits", required_argument, NULL, O_HITS},
    {"compute-us", required_argument, NULL, O_COMPUTE_US},
    {"compute", required_argument, NULL, O_COMPUTE},
    {"lr", required_argument, NULL, O_LR},
    {"reps", required_argument, NULL, O_REPS},
    {"json", no_argument, NULL, O_JSON},
    {"csv", no_argument, NULL, O_CSV},
    {"quiet", no_argument, NULL, 'q'},
    {"force", no_argument, NULL, 'f'},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

enum {
	CMD_RUN,
	CMD_MRC,
	CMD_PIPELINE,
	CMD_CONVERT,
	CMD_GEN,
	CMD_FLUSH,
	CMD_REOPEN
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
}

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

static int size(const char *opt, const char *arg, uint64_t *out)
{
	if (parse_size(arg, out))
		return bad(opt, arg);
	return 0;
}

/* Parses the options; returns 0, 1 for --help, or -1 (already reported). */
static int parse(int argc, char **argv, struct bench_opts *o)
{
	uint64_t v;
	double d;
	int c;

	while ((c = getopt_long(argc, argv, "w:qfh", longopts, NULL)) != -1) {
		const char *a = optarg;
		const char *n = NULL;

		for (const struct option *lo = longopts; lo->name; lo++)
			if (lo->val == c)
				n = lo->name;
		switch (c) {
		case O_WORKLOAD: {
			int k = wl_kind_parse(a);

			if (k < 0)
				return bad("--workload", a);
			o->wl.kind = (enum wl_kind)k;
			break;
		}
		case O_ZIPF:
			if (dbl(n, a, 1e-3, 50, &o->wl.zipf_s))
				return -1;
			break;
		case O_SHIFT_EVERY:
			if (num(n, a, 1, UINT32_MAX, &v))
				return -1;
			o->wl.shift_every = (uint32_t)v;
			break;
		case O_SHIFT_BY:
			if (num(n, a, 0, WL_MAX_ROWS, &o->wl.shift_by))
				return -1;
			break;
		case O_TRACE:
			o->wl.trace = a;
			o->wl.kind = WL_TRACE;
			break;
		case O_TABLES:
			if (num(n, a, 1, WL_TRACE_MAX_TABLES, &v))
				return -1;
			o->wl.tables = (uint32_t)v;
			break;
		case O_ROWS:
			if (num(n, a, 1, ET_MAX_ROWS, &o->wl.rows))
				return -1;
			break;
		case O_DIM:
			if (num_list(n, a, 1, ET_MAX_DIM, o->dims,
				     BENCH_MAX_DIMS, &o->ndims))
				return -1;
			o->dim = 0;
			for (uint32_t i = 0; i < o->ndims; i++)
				if (o->dims[i] > o->dim)
					o->dim = o->dims[i];
			break;
		case O_DTYPE: {
			int t = cli_dtype_parse(a);

			if (t < 0)
				return bad(n, a);
			o->dtype = (et_dtype)t;
			break;
		}
		case O_BATCH:
			if (num(n, a, 1, WL_TRACE_MAX_N, &v))
				return -1;
			o->wl.batch = (uint32_t)v;
			break;
		case O_POOLING:
			if (num(n, a, 1, WL_TRACE_MAX_N, &v))
				return -1;
			o->wl.pooling = (uint32_t)v;
			o->pooling_set = true;
			break;
		case O_SEED:
			if (num(n, a, 0, UINT64_MAX, &o->wl.seed))
				return -1;
			break;
		case O_DIR:
			o->dir = a;
			break;
		case O_MATERIALIZE:
			if (!strcmp(a, "all"))
				o->materialize = MAT_ALL;
			else if (!strcmp(a, "touched"))
				o->materialize = MAT_TOUCHED;
			else if (!strcmp(a, "none"))
				o->materialize = MAT_NONE;
			else
				return bad(n, a);
			break;
		case O_HBM:
			if (size(n, a, &o->hbm_bytes))
				return -1;
			break;
		case O_DDR:
			if (size(n, a, &o->ddr_bytes) || !o->ddr_bytes)
				return o->ddr_bytes ? -1 : bad(n, a);
			break;
		case O_POLICY:
			if (cli_policy_parse(a) < 0)
				return bad(n, a);
			o->policy = (et_policy)cli_policy_parse(a);
			break;
		case O_SLOT_BYTES:
			if (num(n, a, 0, (uint64_t)ET_MAX_DIM * 4 + 64, &v))
				return -1;
			o->slot_bytes = (uint32_t)v;
			break;
		case O_WAYS:
			if (num(n, a, 1, 64, &v))
				return -1;
			o->ways = (uint32_t)v;
			break;
		case O_IODEPTH:
			if (num(n, a, 1, 4096, &v))
				return -1;
			o->io_depth = (uint32_t)v;
			break;
		case O_SECONDS:
			if (dbl(n, a, 0.001, 1e6, &o->seconds))
				return -1;
			break;
		case O_BATCHES:
			if (num(n, a, 1, UINT32_MAX, &o->batches))
				return -1;
			break;
		case O_WARMUP:
			if (!strcmp(a, "auto")) {
				o->warmup = -1;
			} else {
				if (num(n, a, 0, UINT32_MAX, &v))
					return -1;
				o->warmup = (int64_t)v;
			}
			break;
		case O_WARMUP_MAX:
			if (dbl(n, a, 0, 1e6, &o->warmup_max_s))
				return -1;
			break;
		case O_OP:
			if (!strcmp(a, "pooled"))
				o->op = OP_POOLED;
			else if (!strcmp(a, "gather"))
				o->op = OP_GATHER;
			else
				return bad(n, a);
			break;
		case O_UPDATE:
			o->update = true;
			break;
		case O_MULTI:
			o->multi = true;
			break;
		case O_UPDATE_VS_READ:
			o->update_vs_read = true;
			break;
		case O_RECORD:
			o->record = a;
			break;
		case O_NO_LIMITS:
			o->limits = false;
			break;
		case O_LIMIT_SECONDS:
			if (dbl(n, a, 0.01, 1e5, &o->limit_seconds))
				return -1;
			break;
		case O_LIMIT_QD:
			if (num_list(n, a, 1, 4096, o->limit_qd, 4,
				     &o->n_limit_qd))
				return -1;
			break;
		case O_NO_PREAD:
			o->pread = false;
			break;
		case O_NO_PREAD_CACHE:
			o->pread_cache = false;
			break;
		case O_NO_ROCKSDB:
			o->rocksdb = false;
			break;
		case O_ROCKSDB_EXTRA:
			if (dbl(n, a, 0, 1, &o->rocksdb_extra))
				return -1;
			break;
		case O_PEER_THREADS:
			if (num(n, a, 1, 256, &v))
				return -1;
			o->peer_threads = (uint32_t)v;
			break;
		case O_PEER_MAX:
			if (dbl(n, a, 0.01, 1e6, &o->peer_max_s))
				return -1;
			break;
		case O_POINTS:
			if (num(n, a, 1, 64, &v))
				return -1;
			o->points = (uint32_t)v;
			break;
		case O_SIZES:
			o->sizes = a;
			break;
		case O_POLICIES: {
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
			break;
		}
		case O_LOOKAHEAD:
			if (num_list(n, a, 0, ET_MAX_LOOKAHEAD, o->mrc_la,
				     BENCH_MAX_LA, &o->n_mrc_la))
				return -1;
			break;
		case O_NO_BELADY:
			o->belady = false;
			break;
		case O_HITS:
			if (num(n, a, 1, 1000, &v))
				return -1;
			o->hit_rounds = (uint32_t)v;
			break;
		case O_PLOT:
			o->plot = a;
			break;
		case O_COMPUTE_US:
			if (num(n, a, 0, 3600000000ULL, &o->compute_us))
				return -1;
			break;
		case O_COMPUTE:
			if (!strcmp(a, "busy"))
				o->compute = COMPUTE_BUSY;
			else if (!strcmp(a, "sleep"))
				o->compute = COMPUTE_SLEEP;
			else
				return bad(n, a);
			break;
		case O_LR:
			if (dbl(n, a, -1e6, 1e6, &d))
				return -1;
			o->lr = (float)d;
			break;
		case O_REPS:
			if (num(n, a, 1, 1000, &v))
				return -1;
			o->reps = (uint32_t)v;
			break;
		case O_JSON:
			o->format = FMT_JSON;
			break;
		case O_CSV:
			o->format = FMT_CSV;
			break;
		case 'q':
			o->quiet = true;
			break;
		case 'f':
			o->force = true;
			break;
		case 'h':
			return 1;
		default:
			cli_usage_error("unknown option");
			return -1;
		}
	}
	if (o->wl.kind == WL_TRACE && !o->wl.trace) {
		cli_usage_error("--workload trace needs --trace FILE");
		return -1;
	}
	if (o->wl.kind == WL_TRACE && !o->pooling_set)
		o->wl.pooling = 0; /* the trace's hint */
	return 0;
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

static void on_signal(int sig)
{
	(void)sig;
	bench_stop = 1;
}

int main(int argc, char **argv)
{
	static const char *const names[] = {
	    "run", "mrc", "pipeline", "convert", "gen", "flush", "reopen"};
	struct sigaction sa;
	struct bench_opts o;
	int cmd = CMD_RUN, ret;

	cli_init("embtier-bench");
	if (argc > 1 && argv[1][0] != '-') {
		cmd = -1;
		for (int i = 0; i < 7; i++)
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
	ret = parse(argc, argv, &o);
	if (ret > 0) {
		usage();
		return CLI_EXIT_OK;
	}
	if (ret < 0)
		return CLI_EXIT_USAGE;
	if ((cmd == CMD_RUN || cmd == CMD_MRC || cmd == CMD_PIPELINE ||
	     cmd == CMD_FLUSH || cmd == CMD_REOPEN) &&
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
	default:
		return cmd_run(&o);
	}
}
