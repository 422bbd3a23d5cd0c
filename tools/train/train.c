/*
 * train.c - embtier-train: a complete DLRM training loop over an embtier
 * store, the store's reference user.
 *
 * Each step i of the loop is
 *
 *   gather(i)      et_gather_pooled, every table: the batch's bags, summed
 *   prefetch(i+1)  et_prefetch of the next batch's ids, every table
 *   forward(i)     bottom MLP, interaction, top MLP, loss (model.c)
 *   backward(i)
 *   update(i)      et_update_pooled, every table (row-wise Adagrad)
 *   MLP step       SGD or Adagrad on the dense weights
 *
 * so the store reads batch i+1's rows while batch i computes. Time spent
 * inside gather, prefetch and update is the "stall": what a step loses to
 * the store. The store's own clocks (et_stats.miss_wait_ns, writeback_ns)
 * split it into miss wait (reading missed rows, waiting for the I/O
 * thread), write-back, and the rest, hit work: the memory work of the
 * lookups, copies, pooling and optimizer. Every --eval-every steps, and at the end, the model is scored
 * on a held-out set (log loss, exact AUC).
 *
 * Checkpoints. Every --checkpoint-every steps (and at the end of a run that
 * checkpoints at all) et_checkpoint flushes the store and saves the dense
 * state beside the table files, atomically: MLP weights and optimizer
 * state, the step, the data position, and the ids each table has had
 * updated (what the weights checksum reads back). --resume opens the
 * tables - which rolls them back to the last checkpoint if a run was
 * killed after it - reads the state back, and continues: it ends with the
 * same bits as a run never stopped, however the earlier one ended. If the
 * tables moved on after the last checkpoint (a run without
 * --checkpoint-every closed the store cleanly after training on from it),
 * --resume refuses: the embeddings are newer than the dense state.
 *
 * Determinism. Synthetic samples are pure functions of (seed, index),
 * Criteo ones of a byte offset; the model's sums are taken in a fixed order,
 * and the store's results do not depend on its tiers or on prefetch; with the
 * same BLAS thread count, the same flags give the same weights checksum, bit
 * for bit.
 *
 * Output: log lines and a summary on stdout (or one JSON object with
 * --json, the log lines then going to stderr); a progress bar and errors
 * on stderr.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cblas.h>

#include "cli.h"
#include "data.h"
#include "embtier.h"
#include "gradsum.h"
#include "idset.h"
#include "model.h"
#include "progress.h"
#ifdef ET_WITH_MPI
#include "dist.h"
#endif

#define CKPT_MAGIC   "ETTRAIN1"
#define CKPT_VERSION 1
#define MAX_TABLES   1024

/* This process's rank and the rank count (0 and 1 without MPI). */
static int g_rank, g_nranks = 1;

/* ------------------------------------------------------------- options */

struct opts {
	const char *preset;
	int ntables;
	uint64_t rows;		   /* every table; 0: the preset's spread */
	uint64_t rows_lo, rows_hi; /* the spread, log-spaced over tables */
	int dim;
	int batch;
	uint64_t steps;
	float lr;	  /* MLP learning rate */
	float emb_lr;	  /* embeddings; 0: lr */
	float init_scale; /* embedding init, uniform; 0: 1/sqrt(dim) */
	double hbm_mb, ddr_mb;
	et_policy policy;
	et_dtype dtype;
	const char *dir;
	bool keep;
	uint64_t seed;
	int threads;	   /* BLAS threads; 0: nproc - 1 */
	int store_threads; /* et_store_config.threads */
	int pf_thread;	   /* et_store_config.prefetch_thread */
	bool prefetch;
	int lookahead;	       /* batches handed to et_lookahead; 0: none */
	const char *data;      /* Criteo TSV; NULL: synthetic */
	const char *eval_data; /* Criteo held-out file; NULL: head of data */
	uint64_t eval_every, eval_samples;
	uint64_t log_every;
	uint64_t ckpt_every;
	bool resume;
	const char *reshard_from; /* MPI: a sharded run's directory */
	bool json;
	bool quiet;
	enum model_optim mlp_optim;
	int bot[MODEL_MAX_LAYERS - 1], nbot;
	int top[MODEL_MAX_LAYERS - 1], ntop;
	int bag;
	uint64_t hot;
	double zipf;
	double dense_weight;
	int slices;	  /* the dense gradient's fixed summation tree */
	bool row_wise;	  /* MPI: every table sharded by rows */
	int rank, nranks; /* MPI; 0 and 1 alone */
};

static void preset_common(struct opts *o)
{
	o->ntables = 26;
	o->batch = 256;
	o->policy = ET_POLICY_LRU;
	o->dtype = ET_F32;
	o->seed = 1;
	o->prefetch = true;
	o->pf_thread = 1;
	o->mlp_optim = MODEL_ADAGRAD;
	o->bag = 1;
	o->zipf = 1.1;
	o->dense_weight = 1.0;
	o->lr = 0.05f;
	o->nbot = 1;
	o->ntop = 1;
#ifdef ET_WITH_MPI
	/* 8 slices: the same bits at 1, 2, 4 and 8 ranks */
	o->slices = 8;
#else
	o->slices = 1;
#endif
	o->rank = g_rank;
	o->nranks = g_nranks;
}

static int apply_preset(struct opts *o, const char *name)
{
	memset(o, 0, sizeof(*o));
	preset_common(o);
	o->preset = name;
	if (!strcmp(name, "default")) {
		/* about a minute on two cores */
		o->rows_lo = 1000000;
		o->rows_hi = 10000000;
		o->dim = 16;
		o->steps = 5000;
		o->lr = 0.02f;
		o->emb_lr = 0.05f;
		o->hbm_mb = 4;
		o->ddr_mb = 32;
		o->hot = 3000;
		o->bot[0] = 64;
		o->top[0] = 64;
		o->eval_every = 1000;
		o->eval_samples = 16384;
		o->log_every = 500;
		return 0;
	}
	if (!strcmp(name, "trillion")) {
		/* 26 x 601,000,000 x 64 = 1.00006e12 parameters */
		o->rows = 601000000;
		o->dim = 64;
		o->steps = 200;
		o->hbm_mb = 256;
		o->ddr_mb = 2048;
		o->hot = 1000000;
		o->bot[0] = 128;
		o->top[0] = 128;
		o->eval_every = 0;
		o->eval_samples = 4096;
		o->log_every = 50;
		return 0;
	}
	return -EINVAL;
}

static void usage(FILE *f)
{
	fprintf(
	    f,
	    "usage: embtier-train [options]\n"
	    "Trains a DLRM whose embedding tables live in an embtier store.\n"
	    "\n"
	    "  --preset NAME        default (small, about a minute) or "
	    "trillion\n"
	    "                       (26 tables, 10^12 parameters, a short "
	    "run)\n"
	    "model and data:\n"
	    "  --tables N           embedding tables (sparse features)\n"
	    "  --rows N             logical rows of every table (N or B^E)\n"
	    "  --dim N              embedding dimension = bottom MLP output\n"
	    "  --bot-mlp A-B-..     bottom MLP hidden sizes (0: none)\n"
	    "  --top-mlp A-B-..     top MLP hidden sizes (0: none)\n"
	    "  --batch N            samples per step\n"
	    "  --steps N            total steps (a resumed run continues to "
	    "N)\n"
	    "  --lr F               MLP learning rate\n"
	    "  --emb-lr F           embedding learning rate (default: --lr)\n"
	    "  --mlp-optim NAME     sgd or adagrad\n"
	    "  --init-scale F       embedding init uniform(+-F); 0: "
	    "1/sqrt(dim)\n"
	    "  --seed N             seed of data, weights and initializers\n"
	    "  --data FILE          Criteo TSV instead of synthetic data\n"
	    "  --eval-data FILE     Criteo held-out file (default: the first\n"
	    "                       --eval-samples lines of --data)\n"
	    "  --bag N              synthetic: ids per bag\n"
	    "  --hot N              synthetic: distinct ids drawn per table\n"
	    "  --zipf F             synthetic: skew of the id draws\n"
	    "  --teacher-dense F    synthetic: weight of dense features in "
	    "the\n"
	    "                       hidden truth (0: clicks depend on ids "
	    "only)\n"
	    "store:\n"
	    "  --hbm-mb F           HBM tier capacity in MiB (0: none)\n"
	    "  --ddr-mb F           DDR tier capacity in MiB\n"
	    "  --policy NAME        lru, lfu, tinylfu or wtinylfu\n"
	    "  --lookahead K        hand the store the ids of the next K "
	    "batches\n"
	    "                       (et_lookahead, 1..32; 0: none)\n"
	    "  --dtype NAME         f32, f16 or bf16 storage\n"
	    "  --dir DIR            store directory (default: a fresh one "
	    "under\n"
	    "                       /var/tmp, removed at the end unless "
	    "--keep)\n"
	    "  --keep               keep the default store directory\n"
	    "  --no-prefetch        do not prefetch the next batch\n"
	    "  --slices N           cut each batch into N slices whose MLP\n"
	    "                       gradients add along a fixed tree (1)\n"
#ifdef ET_WITH_MPI
	    "  --plan NAME          table (whole tables per rank) or row\n"
	    "                       (each table's rows over all ranks)\n"
#endif

	    "run:\n"
	    "  --threads N          BLAS threads (default: CPUs - 1, at least "
	    "1)\n"
	    "  --store-threads N    threads of the store's gathers and "
	    "updates (default\n"
	    "                       1, at most 64); any count gives the same "
	    "bits\n"
	    "  --prefetch-thread B  1 (default): the prefetch's work runs on "
	    "the store's\n"
	    "                       thread, beside the dense step; 0: inside "
	    "et_prefetch\n"
	    "  --eval-every N       held-out evaluation every N steps (0: "
	    "end)\n"
	    "  --eval-samples N     size of the held-out set\n"
	    "  --log-every N        a log line every N steps (0: none)\n"
	    "  --checkpoint-every N checkpoint every N steps (0: never)\n"
	    "  --resume             continue from DIR's last checkpoint\n"
#ifdef ET_WITH_MPI
	    "  --reshard-from SRC   continue, in DIR (new), from the last "
	    "checkpoint of\n"
	    "                       the run in SRC made at another rank "
	    "count or plan\n"
#endif
	    "  --json               final metrics as one JSON object on "
	    "stdout\n"
	    "  -q, --quiet          no progress bar\n"
	    "  -h, --help           this text\n");
}

enum {
	OPT_PRESET = 256,
	OPT_TABLES,
	OPT_ROWS,
	OPT_DIM,
	OPT_BATCH,
	OPT_STEPS,
	OPT_LR,
	OPT_EMB_LR,
	OPT_HBM,
	OPT_DDR,
	OPT_POLICY,
	OPT_DTYPE,
	OPT_DIR,
	OPT_KEEP,
	OPT_SEED,
	OPT_THREADS,
	OPT_STORE_THREADS,
	OPT_PF_THREAD,
	OPT_NO_PREFETCH,
	OPT_LOOKAHEAD,
	OPT_DATA,
	OPT_EVAL_DATA,
	OPT_EVAL_EVERY,
	OPT_EVAL_SAMPLES,
	OPT_LOG_EVERY,
	OPT_CKPT_EVERY,
	OPT_RESUME,
	OPT_RESHARD,
	OPT_JSON,
	OPT_MLP_OPTIM,
	OPT_BOT,
	OPT_TOP,
	OPT_BAG,
	OPT_HOT,
	OPT_ZIPF,
	OPT_TEACHER_DENSE,
	OPT_INIT_SCALE,
	OPT_SLICES,
	OPT_PLAN,
};

static const struct option long_opts[] = {
    {"preset", required_argument, NULL, OPT_PRESET},
    {"tables", required_argument, NULL, OPT_TABLES},
    {"rows", required_argument, NULL, OPT_ROWS},
    {"dim", required_argument, NULL, OPT_DIM},
    {"batch", required_argument, NULL, OPT_BATCH},
    {"steps", required_argument, NULL, OPT_STEPS},
    {"lr", required_argument, NULL, OPT_LR},
    {"emb-lr", required_argument, NULL, OPT_EMB_LR},
    {"hbm-mb", required_argument, NULL, OPT_HBM},
    {"ddr-mb", required_argument, NULL, OPT_DDR},
    {"policy", required_argument, NULL, OPT_POLICY},
    {"dtype", required_argument, NULL, OPT_DTYPE},
    {"dir", required_argument, NULL, OPT_DIR},
    {"keep", no_argument, NULL, OPT_KEEP},
    {"seed", required_argument, NULL, OPT_SEED},
    {"threads", required_argument, NULL, OPT_THREADS},
    {"store-threads", required_argument, NULL, OPT_STORE_THREADS},
    {"prefetch-thread", required_argument, NULL, OPT_PF_THREAD},
    {"no-prefetch", no_argument, NULL, OPT_NO_PREFETCH},
    {"lookahead", required_argument, NULL, OPT_LOOKAHEAD},
    {"data", required_argument, NULL, OPT_DATA},
    {"eval-data", required_argument, NULL, OPT_EVAL_DATA},
    {"eval-every", required_argument, NULL, OPT_EVAL_EVERY},
    {"eval-samples", required_argument, NULL, OPT_EVAL_SAMPLES},
    {"log-every", required_argument, NULL, OPT_LOG_EVERY},
    {"checkpoint-every", required_argument, NULL, OPT_CKPT_EVERY},
    {"resume", no_argument, NULL, OPT_RESUME},
    {"reshard-from", required_argument, NULL, OPT_RESHARD},
    {"json", no_argument, NULL, OPT_JSON},
    {"mlp-optim", required_argument, NULL, OPT_MLP_OPTIM},
    {"bot-mlp", required_argument, NULL, OPT_BOT},
    {"top-mlp", required_argument, NULL, OPT_TOP},
    {"bag", required_argument, NULL, OPT_BAG},
    {"hot", required_argument, NULL, OPT_HOT},
    {"zipf", required_argument, NULL, OPT_ZIPF},
    {"teacher-dense", required_argument, NULL, OPT_TEACHER_DENSE},
    {"init-scale", required_argument, NULL, OPT_INIT_SCALE},
    {"slices", required_argument, NULL, OPT_SLICES},
#ifdef ET_WITH_MPI
    {"plan", required_argument, NULL, OPT_PLAN},
#endif
    {"quiet", no_argument, NULL, 'q'},
    {"help", no_argument, NULL, 'h'},
    {NULL, 0, NULL, 0},
};

/* A count in [lo, hi]. */
static int parse_count(const char *name, const char *s, uint64_t lo,
		       uint64_t hi, uint64_t *out)
{
	int ret = cli_parse_u64(s, out);

	if (ret || *out < lo || *out > hi) {
		cli_usage_error("--%s: '%s' is not a count in [%" PRIu64
				", %" PRIu64 "]",
				name, s, lo, hi);
		return -EINVAL;
	}
	return 0;
}

static int parse_int_opt(const char *name, const char *s, int lo, int hi,
			 int *out)
{
	uint64_t v;
	int ret = parse_count(name, s, (uint64_t)lo, (uint64_t)hi, &v);

	if (!ret)
		*out = (int)v;
	return ret;
}

static int parse_real(const char *name, const char *s, double lo, double hi,
		      double *out)
{
	float v;

	if (cli_parse_float(s, &v) || v < lo || v > hi) {
		cli_usage_error("--%s: '%s' is not a number in [%g, %g]", name,
				s, lo, hi);
		return -EINVAL;
	}
	*out = v;
	return 0;
}

/* "64-32", "64,32", or "0" for none. */
static int parse_sizes(const char *name, const char *s, int *sizes, int *n)
{
	const char *p = s;

	*n = 0;
	if (!strcmp(s, "0") || !*s)
		return 0;
	while (*p) {
		char *end;
		long v;

		errno = 0;
		v = strtol(p, &end, 10);
		if (end == p || errno || v < 1 || v > 65536 ||
		    *n == MODEL_MAX_LAYERS - 1 ||
		    (*end && *end != '-' && *end != ','))
			goto bad;
		sizes[(*n)++] = (int)v;
		p = *end ? end + 1 : end;
		if (*end && !*p)
			goto bad;
	}
	return 0;
bad:
	cli_usage_error("--%s: '%s' is not a list of up to %d sizes like "
			"64-32",
			name, s, MODEL_MAX_LAYERS - 1);
	return -EINVAL;
}

static int bad_value(const char *name, const char *s)
{
	cli_usage_error("--%s: unknown value '%s'", name, s);
	return -EINVAL;
}

static int parse_args(int argc, char **argv, struct opts *o)
{
	const char *preset = "default";
	double d;
	int c, v;

	/* the preset first, whatever its place: flags override it */
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--preset") && i + 1 < argc)
			preset = argv[i + 1];
		else if (!strncmp(argv[i], "--preset=", 9))
			preset = argv[i] + 9;
	}
	if (apply_preset(o, preset)) {
		cli_usage_error("--preset: unknown preset '%s' (default, "
				"trillion)",
				preset);
		return -EINVAL;
	}
	opterr = 0;
	while ((c = getopt_long(argc, argv, ":qh", long_opts, NULL)) != -1) {
		uint64_t u;
		int ret = 0;

		switch (c) {
		case OPT_PRESET:
			break;
		case OPT_TABLES:
			ret = parse_int_opt("tables", optarg, 1, MAX_TABLES,
					    &o->ntables);
			break;
		case OPT_ROWS:
			ret = parse_count("rows", optarg, 1, ET_MAX_ROWS,
					  &o->rows);
			break;
		case OPT_DIM:
			ret = parse_int_opt("dim", optarg, 1, 4096, &o->dim);
			break;
		case OPT_BATCH:
			ret = parse_int_opt("batch", optarg, 1, 1 << 20,
					    &o->batch);
			break;
		case OPT_STEPS:
			ret = parse_count("steps", optarg, 0, UINT64_MAX / 2,
					  &o->steps);
			break;
		case OPT_LR:
			ret = parse_real("lr", optarg, 0, 1e6, &d);
			o->lr = (float)d;
			break;
		case OPT_EMB_LR:
			ret = parse_real("emb-lr", optarg, 0, 1e6, &d);
			o->emb_lr = (float)d;
			break;
		case OPT_INIT_SCALE:
			ret = parse_real("init-scale", optarg, 0, 1e6, &d);
			o->init_scale = (float)d;
			break;
		case OPT_HBM:
			ret = parse_real("hbm-mb", optarg, 0, 1 << 24,
					 &o->hbm_mb);
			break;
		case OPT_DDR:
			ret = parse_real("ddr-mb", optarg, 0, 1 << 24,
					 &o->ddr_mb);
			break;
		case OPT_POLICY:
			if (cli_policy_parse(optarg) < 0)
				return bad_value("policy", optarg);
			o->policy = (et_policy)cli_policy_parse(optarg);
			break;
		case OPT_DTYPE:
			v = cli_dtype_parse(optarg);
			if (v < 0)
				return bad_value("dtype", optarg);
			o->dtype = (et_dtype)v;
			break;
		case OPT_DIR:
			o->dir = optarg;
			break;
		case OPT_KEEP:
			o->keep = true;
			break;
		case OPT_SEED:
			ret = parse_count("seed", optarg, 0, UINT64_MAX,
					  &o->seed);
			break;
		case OPT_THREADS:
			ret = parse_int_opt("threads", optarg, 1, 1024,
					    &o->threads);
			break;
		case OPT_STORE_THREADS:
			ret = parse_int_opt("store-threads", optarg, 1, 64,
					    &o->store_threads);
			break;
		case OPT_PF_THREAD:
			ret = parse_int_opt("prefetch-thread", optarg, 0, 1,
					    &o->pf_thread);
			break;
		case OPT_NO_PREFETCH:
			o->prefetch = false;
			break;
		case OPT_LOOKAHEAD:
			ret = parse_int_opt("lookahead", optarg, 0,
					    ET_MAX_LOOKAHEAD, &o->lookahead);
			break;
		case OPT_DATA:
			o->data = optarg;
			break;
		case OPT_EVAL_DATA:
			o->eval_data = optarg;
			break;
		case OPT_EVAL_EVERY:
			ret = parse_count("eval-every", optarg, 0, UINT64_MAX,
					  &o->eval_every);
			break;
		case OPT_EVAL_SAMPLES:
			ret = parse_count("eval-samples", optarg, 1, 1ULL << 26,
					  &o->eval_samples);
			break;
		case OPT_LOG_EVERY:
			ret = parse_count("log-every", optarg, 0, UINT64_MAX,
					  &o->log_every);
			break;
		case OPT_CKPT_EVERY:
			ret = parse_count("checkpoint-every", optarg, 0,
					  UINT64_MAX, &o->ckpt_every);
			break;
		case OPT_RESUME:
			o->resume = true;
			break;
		case OPT_RESHARD:
#ifndef ET_WITH_MPI
			cli_usage_error("--reshard-from: a sharded run is "
					"resumed by embtier-train-mpi");
			return -EINVAL;
#endif
			o->reshard_from = optarg;
			o->resume = true;
			break;
		case OPT_JSON:
			o->json = true;
			break;
		case OPT_MLP_OPTIM:
			if (!strcmp(optarg, "sgd"))
				o->mlp_optim = MODEL_SGD;
			else if (!strcmp(optarg, "adagrad"))
				o->mlp_optim = MODEL_ADAGRAD;
			else
				return bad_value("mlp-optim", optarg);
			break;
		case OPT_BOT:
			ret = parse_sizes("bot-mlp", optarg, o->bot, &o->nbot);
			break;
		case OPT_TOP:
			ret = parse_sizes("top-mlp", optarg, o->top, &o->ntop);
			break;
		case OPT_BAG:
			ret = parse_int_opt("bag", optarg, 1, 1024, &o->bag);
			break;
		case OPT_HOT:
			ret = parse_count("hot", optarg, 1, ET_MAX_ROWS, &u);
			o->hot = u;
			break;
		case OPT_ZIPF:
			ret = parse_real("zipf", optarg, 0.01, 10, &o->zipf);
			break;
		case OPT_TEACHER_DENSE:
			ret = parse_real("teacher-dense", optarg, -100, 100,
					 &o->dense_weight);
			break;
		case OPT_SLICES:
			ret = parse_int_opt("slices", optarg, 1, 1 << 20,
					    &o->slices);
			break;
		case OPT_PLAN:
			if (!strcmp(optarg, "table"))
				o->row_wise = false;
			else if (!strcmp(optarg, "row"))
				o->row_wise = true;
			else
				return bad_value("plan", optarg);
			break;
		case 'q':
			o->quiet = true;
			break;
		case 'h':
			usage(stdout);
			exit(CLI_EXIT_OK);
		case ':':
			cli_usage_error("%s needs a value", argv[optind - 1]);
			return -EINVAL;
		default:
			cli_usage_error("unknown option '%s'",
					argv[optind - 1]);
			return -EINVAL;
		}
		if (ret)
			return ret;
	}
	if (optind < argc) {
		cli_usage_error("unexpected argument '%s'", argv[optind]);
		return -EINVAL;
	}
	if (o->resume && !o->dir) {
		cli_usage_error("%s needs --dir", o->reshard_from
						      ? "--reshard-from"
						      : "--resume");
		return -EINVAL;
	}
	if (o->data && o->ntables > CRITEO_NCAT) {
		cli_usage_error("--tables: Criteo data has %d categorical "
				"features",
				CRITEO_NCAT);
		return -EINVAL;
	}
	if (o->eval_data && !o->data) {
		cli_usage_error("--eval-data needs --data");
		return -EINVAL;
	}
#ifdef ET_WITH_MPI
	if (o->lookahead) {
		cli_usage_error("--lookahead: not under MPI yet (each rank "
				"would need the ids it owns of K batches)");
		return -EINVAL;
	}
#endif
	if (o->batch % o->slices) {
		cli_usage_error("--slices: %d does not divide the batch (%d)",
				o->slices, o->batch);
		return -EINVAL;
	}
	if (o->nranks > 1 || o->slices > 1) {
		int per = o->slices / o->nranks;

		/* each rank's slices must be one node of the fixed tree */
		if (o->slices % o->nranks || (o->nranks & (o->nranks - 1)) ||
		    (per & (per - 1))) {
			cli_usage_error(
			    "--slices: %d ranks need a power-of-two "
			    "count of slices per rank (--slices "
			    "%d = %d x a power of two)",
			    o->nranks, o->slices, o->nranks);
			return -EINVAL;
		}
	}
	if (!o->emb_lr)
		o->emb_lr = o->lr;
	if (o->rank != 0)
		o->quiet = true;
	if (!o->threads) {
		long n = sysconf(_SC_NPROCESSORS_ONLN) / o->nranks;

		o->threads = n > 1 ? (int)n - 1 : 1;
	}
	if (!o->store_threads)
		o->store_threads = 1;
	return 0;
}

/* ------------------------------------------------------------ the run */

/* The store's clocks (et_stats), in seconds. */
struct store_time {
	double op, miss, wb; /* op_ns, miss_wait_ns, writeback_ns */
};

struct interval {
	double t0;		   /* start (monotonic s) */
	double step_s;		   /* time inside steps */
	double stall_s;		   /* of which in gather, prefetch, update */
	struct store_time eval_tm; /* the store's time in evaluations */
	double loss;		   /* summed batch losses */
	uint64_t steps, samples;
	struct et_stats st; /* store counters at the start */
};

struct trainer {
	struct opts o;
	uint64_t *rows; /* per table */
	int *tid;	/* store table ids */
	et_store *store;
	struct model m;
	struct data_src train;
	struct batch bat[ET_MAX_LOOKAHEAD + 1]; /* the current batch, then
						  * those read ahead */
	int nahead;				/* batches read ahead */
	struct et_batch *la;			/* --lookahead: the window */
	struct et_batch_ids *la_ids;		/* its tables */
	struct batch *eval; /* the held-out set, in batches */
	int neval;
	uint64_t eval_n;
	uint64_t eval_malformed;
	struct idset *touched;	   /* per table: rows updated */
	float *emb, *grad;	   /* ntables x batch x dim */
	struct et_batch_ids *pf;   /* ntables */
	struct et_table_batch *tb; /* ntables: the multi-table calls */
	char dir[PATH_MAX];
	bool dir_made; /* ours: removed at the end unless --keep */
	uint64_t fingerprint;
	uint64_t step, step0; /* steps done; where this run began */
	uint64_t next_pos;    /* data position of the first sample not
			       * yet trained on */
	uint64_t ckpt_step;   /* step of the last checkpoint written */
	bool ckpt_any;
	double open_s; /* store and tables opened in */
	double run_s, step_s, stall_s, flush_s, ckpt_s;
	struct et_stats st0;	   /* store counters when training began */
	struct store_time eval_tm; /* the store's time in evaluations */
	double loss_sum;	   /* over this run's steps */
	double loss_avg;	   /* moving average, for the progress bar */
	struct interval iv;
	/* samples and step time by phase, from the log lines: [1] the
	 * intervals in which the DDR tier evicted, as in the one before (it
	 * is full and rows come back from NVMe), [0] the others */
	struct {
		double samples, step_s;
		uint64_t steps;
	} phase[2];
	bool ddr_was_full;
	struct progress prog;
	char prog_label[64];
	FILE *log; /* stdout, or stderr under --json */
	double eval_logloss, eval_auc;
	double teacher_logloss, teacher_auc; /* synthetic: the planted truth */
	float *scores, *labels;		     /* eval_n */
	struct gradsum gs;		     /* the slices' MLP gradients */
	float *rowvals;			     /* MPI checksum: a table's rows */
	struct dist *dist;		     /* MPI: the sharded store */
};

static int fail(const char *what, int err)
{
	cli_error_code(what, err);
	return err ? err : -EINVAL;
}

/* A data source's error: the file and, for a file without one good
 * line, what was wrong with it. */
static int data_fail(const char *path, const struct data_src *d, int err)
{
	if (err == -ENODATA) {
		cli_error("%s: no valid Criteo line in a whole pass (%" PRIu64
			  " malformed)",
			  path, d->c.malformed);
		return err;
	}
	return fail(path, err);
}

/* 64-bit FNV-1a. */
#define FNV_BASIS 0xcbf29ce484222325ULL

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
	const unsigned char *c = p;

	for (size_t i = 0; i < n; i++) {
		h ^= c[i];
		h *= 0x100000001b3ULL;
	}
	return h;
}

static uint64_t fnv_u64(uint64_t h, uint64_t v)
{
	return fnv(h, &v, sizeof(v));
}

/* What a checkpoint must agree on to be resumed: shapes and data (and the
 * plan, row_wise, which only a reshard may change). */
static uint64_t config_fingerprint(const struct trainer *tr, bool row_wise)
{
	const struct opts *o = &tr->o;
	uint64_t h = FNV_BASIS;

	h = fnv_u64(h, (uint64_t)o->ntables);
	for (int t = 0; t < o->ntables; t++)
		h = fnv_u64(h, tr->rows[t]);
	h = fnv_u64(h, (uint64_t)o->dim);
	if (o->init_scale) /* (the default leaves older fingerprints alone) */
		h = fnv(h, &o->init_scale, sizeof(o->init_scale));
	h = fnv_u64(h, (uint64_t)o->dtype);
	h = fnv_u64(h, (uint64_t)o->batch);
	h = fnv_u64(h, o->seed);
	h = fnv_u64(h, (uint64_t)o->mlp_optim);
	if (o->slices > 1 || row_wise) {
		h = fnv_u64(h, (uint64_t)o->slices);
		h = fnv_u64(h, row_wise ? 1 : 0);
	}
	h = fnv_u64(h, (uint64_t)o->nbot);
	for (int i = 0; i < o->nbot; i++)
		h = fnv_u64(h, (uint64_t)o->bot[i]);
	h = fnv_u64(h, (uint64_t)o->ntop);
	for (int i = 0; i < o->ntop; i++)
		h = fnv_u64(h, (uint64_t)o->top[i]);
	h = fnv_u64(h, o->data ? 1 : 0);
	if (o->data) {
		/* the held-out head decides where training passes start */
		h = fnv(h, o->data, strlen(o->data));
		h = fnv_u64(h, o->eval_data ? 0 : o->eval_samples);
	} else {
		h = fnv_u64(h, (uint64_t)o->bag);
		h = fnv_u64(h, o->hot);
		h = fnv(h, &o->zipf, sizeof(o->zipf));
		h = fnv(h, &o->dense_weight, sizeof(o->dense_weight));
	}
	return h;
}

/* Rows of table t: --rows, or log-spaced between the preset's bounds. */
static uint64_t table_rows(const struct opts *o, int t)
{
	double a, b, f;

	if (o->rows)
		return o->rows;
	if (o->ntables == 1)
		return o->rows_lo;
	a = log((double)o->rows_lo);
	b = log((double)o->rows_hi);
	f = (double)t / (o->ntables - 1);
	return (uint64_t)llround(exp(a + f * (b - a)));
}

/* --------------------------------------------------------- checkpoint */

/*
 * The dense state saved with each store checkpoint (et_checkpoint writes
 * it beside the table files, atomically, and the store's undo logs roll
 * the tables back to the same point after a crash). Native byte order:
 *
 *   struct ckpt_header
 *   f32 x nfloats        model_state_array(0..), in order
 *   per table: u64 n, then n u64 row ids (sorted): the rows updated
 */
struct ckpt_header {
	char magic[8];
	uint32_t version;
	uint32_t ntables;
	uint64_t fingerprint; /* config_fingerprint() of the run */
	uint64_t step;	      /* steps done */
	uint64_t data_pos;    /* where the next batch starts */
	uint64_t nfloats;
};

static int checkpoint_write(struct trainer *tr)
{
	struct ckpt_header h = {0};
	int nst = model_state_count(&tr->m, 0);
	size_t len = sizeof(h), off = 0;
	double t0 = cli_now();
	unsigned char *buf;
	int ret = 0;

	memcpy(h.magic, CKPT_MAGIC, 8);
	h.version = CKPT_VERSION;
	h.ntables = (uint32_t)tr->o.ntables;
	h.fingerprint = tr->fingerprint;
	h.step = tr->step;
	h.data_pos = tr->next_pos;
	for (int i = 0; i < nst; i++) {
		size_t n;

		model_state_array(&tr->m, i, &n);
		h.nfloats += n;
	}
	len += h.nfloats * sizeof(float);
	for (int t = 0; t < tr->o.ntables; t++)
		len += sizeof(uint64_t) * (1 + tr->touched[t].n);
	buf = malloc(len);
	if (!buf)
		return fail("checkpoint", -ENOMEM);
	memcpy(buf, &h, sizeof(h));
	off = sizeof(h);
	for (int i = 0; i < nst; i++) {
		size_t n;
		const float *a = model_state_array(&tr->m, i, &n);

		memcpy(buf + off, a, n * sizeof(*a));
		off += n * sizeof(*a);
	}
	for (int t = 0; t < tr->o.ntables && !ret; t++) {
		uint64_t n = tr->touched[t].n, *ids;

		memcpy(buf + off, &n, sizeof(n));
		off += sizeof(n);
		ret = idset_sorted(&tr->touched[t], &ids);
		if (ret) {
			fail("checkpoint", ret);
			break;
		}
		if (n)
			memcpy(buf + off, ids, n * sizeof(*ids));
		off += n * sizeof(*ids);
		free(ids);
	}
	if (!ret) {
#ifdef ET_WITH_MPI
		if (tr->dist)
			ret = dist_checkpoint(tr->dist, tr->step, buf, len);
		else
#endif
			ret = et_checkpoint(tr->store, buf, len);
		if (ret)
			fail("checkpoint", ret);
	}
	free(buf);
	if (ret)
		return ret;
	tr->ckpt_step = tr->step;
	tr->ckpt_any = true;
	tr->ckpt_s += cli_now() - t0;
	return 0;
}

/* Takes n bytes from the saved state, if it has them. */
static bool take(const unsigned char *buf, size_t len, size_t *off, void *p,
		 size_t n)
{
	if (len - *off < n)
		return false;
	memcpy(p, buf + *off, n);
	*off += n;
	return true;
}

#ifdef ET_WITH_MPI
/* Appends n bytes to a growing buffer. */
static int put(unsigned char **buf, size_t *len, size_t *cap, const void *p,
	       size_t n)
{
	if (*len + n > *cap) {
		size_t c = *cap ? *cap : 4096;
		unsigned char *b;

		while (c < *len + n)
			c *= 2;
		b = realloc(*buf, c);
		if (!b)
			return -ENOMEM;
		*buf = b;
		*cap = c;
	}
	memcpy(*buf + *len, p, n);
	*len += n;
	return 0;
}

/*
 * A reshard's check, on every rank before anything is made: the old ranks'
 * states are this model's (magic, shapes and data by the fingerprint, with
 * either plan), hold the same model state, step and data position, and
 * list touched rows in range.
 */
static int reshard_check(void *arg, void *const *dense, const size_t *len,
			 int nold, char *msg, size_t cap)
{
	struct trainer *tr = arg;
	struct ckpt_header h;
	size_t head;

	memset(&h, 0, sizeof(h));
	if (len[0] >= sizeof(h))
		memcpy(&h, dense[0], sizeof(h));
	if (memcmp(h.magic, CKPT_MAGIC, 8) || h.version != CKPT_VERSION) {
		snprintf(msg, cap,
			 "the checkpoint holds no embtier-train state");
		return -EINVAL;
	}
	if ((h.fingerprint != tr->fingerprint &&
	     h.fingerprint != config_fingerprint(tr, !tr->o.row_wise)) ||
	    h.ntables != (uint32_t)tr->o.ntables) {
		snprintf(msg, cap,
			 "the checkpoint was made with other shapes, seed or "
			 "data than this command line's");
		return -EINVAL;
	}
	if (h.nfloats > (len[0] - sizeof(h)) / sizeof(float)) {
		snprintf(msg, cap, "rank 0's checkpoint state is truncated");
		return ET_ETRUNC;
	}
	head = sizeof(h) + h.nfloats * sizeof(float);
	for (int r = 0; r < nold; r++) {
		const unsigned char *p = dense[r];
		size_t off = head;

		if (len[r] < head || memcmp(p, dense[0], head)) {
			snprintf(msg, cap,
				 "rank %d's model state differs from rank 0's",
				 r);
			return ET_EMISMATCH;
		}
		for (int t = 0; t < tr->o.ntables; t++) {
			uint64_t n, v;

			if (len[r] - off < sizeof(n))
				goto trunc;
			memcpy(&n, p + off, sizeof(n));
			off += sizeof(n);
			if (n > (len[r] - off) / sizeof(v))
				goto trunc;
			for (uint64_t i = 0; i < n; i++, off += sizeof(v)) {
				memcpy(&v, p + off, sizeof(v));
				if (v >= tr->rows[t]) {
					snprintf(msg, cap,
						 "rank %d's state lists row "
						 "%llu of table %d, past its "
						 "end",
						 r, (unsigned long long)v, t);
					return ET_EROWRANGE;
				}
			}
		}
		if (off != len[r])
			goto trunc;
		continue;
	trunc:
		snprintf(msg, cap, "rank %d's checkpoint state is damaged", r);
		return ET_EHEADER;
	}
	return 0;
}

/*
 * After a reshard (--reshard-from): this rank's dense state, made from the
 * old ranks'. The model state, step and data position are the same bits on
 * every old rank (checked); the rows each table had updated are the union
 * of the old ranks' lists, kept where this rank now owns them.
 */
static int reshard_state(struct trainer *tr, void **out, size_t *outlen)
{
	void *const *dense;
	const size_t *len;
	struct ckpt_header h;
	unsigned char *buf = NULL;
	size_t head, blen = 0, cap = 0, *off = NULL;
	uint64_t step;
	int nold, ret = dist_resharded(tr->dist, &step, &nold, &dense, &len);

	if (ret)
		return fail("reshard", ret);
	memset(&h, 0, sizeof(h));
	if (len[0] >= sizeof(h))
		memcpy(&h, dense[0], sizeof(h));
	if (memcmp(h.magic, CKPT_MAGIC, 8) || h.version != CKPT_VERSION ||
	    h.ntables != (uint32_t)tr->o.ntables ||
	    h.nfloats > (len[0] - sizeof(h)) / sizeof(float)) {
		cli_error("%s: the checkpoint holds no embtier-train state of "
			  "this model",
			  tr->o.reshard_from);
		return -EINVAL;
	}
	head = sizeof(h) + h.nfloats * sizeof(float);
	for (int r = 1; r < nold; r++)
		if (len[r] < head || memcmp(dense[r], dense[0], head)) {
			cli_error("%s: rank %d's dense state differs from rank "
				  "0's",
				  tr->o.reshard_from, r);
			return ET_EMISMATCH;
		}
	off = calloc(nold, sizeof(*off));
	if (!off)
		return fail("reshard", -ENOMEM);
	for (int r = 0; r < nold; r++)
		off[r] = head;
	ret = put(&buf, &blen, &cap, dense[0], head);
	for (int t = 0; t < tr->o.ntables && !ret; t++) {
		size_t at = blen;
		uint64_t k = 0;

		ret = put(&buf, &blen, &cap, &k, sizeof(k));
		for (int r = 0; r < nold && !ret; r++) {
			const unsigned char *p = dense[r];
			uint64_t n;

			if (len[r] - off[r] < sizeof(n)) {
				ret = ET_ETRUNC;
				break;
			}
			memcpy(&n, p + off[r], sizeof(n));
			off[r] += sizeof(n);
			if (n > (len[r] - off[r]) / sizeof(uint64_t)) {
				ret = ET_ETRUNC;
				break;
			}
			for (uint64_t i = 0; i < n && !ret; i++) {
				uint64_t v;

				memcpy(&v, p + off[r], sizeof(v));
				off[r] += sizeof(v);
				if (v >= tr->rows[t])
					ret = ET_EROWRANGE;
				else if (dist_owns(tr->dist, t, v)) {
					ret = put(&buf, &blen, &cap, &v,
						  sizeof(v));
					k++;
				}
			}
		}
		if (!ret)
			memcpy(buf + at, &k, sizeof(k));
	}
	for (int r = 0; r < nold && !ret; r++)
		if (off[r] != len[r])
			ret = ET_EHEADER;
	free(off);
	if (ret) {
		free(buf);
		return fail("resharded checkpoint state", ret);
	}
	*out = buf;
	*outlen = blen;
	return 0;
}
#endif

static int checkpoint_load(struct trainer *tr)
{
	struct et_checkpoint_info ci;
	struct ckpt_header h;
	int nst = model_state_count(&tr->m, 0);
	uint64_t id, total = 0;
	unsigned char *buf = NULL;
	size_t len = 0, off = 0;
	void *dense = NULL;
	int ret;

	/* et_table_open has rolled every table back to the checkpoint */
#ifdef ET_WITH_MPI
	if (tr->dist) {
		char msg[256];

		if (tr->o.reshard_from)
			ret = reshard_state(tr, &dense, &len);
		else
			ret = dist_checkpoint_read(tr->dist, &id, &dense, &len,
						   msg, sizeof(msg));
		if (ret && tr->o.reshard_from)
			return ret; /* reshard_state said why */
		if (ret) {
			if (tr->o.rank == 0) /* every rank has the verdict */
				cli_error("%s: %s", tr->o.dir, msg);
			return ret;
		}
		id = 1;
	} else
#endif
		ret = et_checkpoint_read(tr->store, &id, &dense, &len);
	if (ret)
		return fail("read checkpoint", ret);
	buf = dense;
	if (!id) {
		cli_error("%s: no checkpoint to resume from", tr->dir);
		free(dense);
		return -ENOENT;
	}
	ret = et_checkpoint_info(tr->store, &ci);
	if (ret) {
		free(dense);
		return fail("read checkpoint", ret);
	}
	if (ci.tables_moved) {
		/* A clean close after the checkpoint kept later writes: the
		 * embeddings are past the dense weights and data position
		 * saved with it. Pairing them would not be the run it was. */
		cli_error("%s: the tables moved on after the last checkpoint "
			  "(the store was closed cleanly after it, without "
			  "checkpointing); they no longer match its dense "
			  "state, so there is nothing exact to resume from",
			  tr->dir);
		free(dense);
		return ET_EMISMATCH;
	}
	if (!take(buf, len, &off, &h, sizeof(h)) ||
	    memcmp(h.magic, CKPT_MAGIC, 8) || h.version != CKPT_VERSION) {
		cli_error("%s: the checkpoint holds no embtier-train state",
			  tr->dir);
		free(dense);
		return -EINVAL;
	}
	if ((h.fingerprint != tr->fingerprint &&
	     !(tr->o.reshard_from &&
	       h.fingerprint == config_fingerprint(tr, !tr->o.row_wise))) ||
	    h.ntables != (uint32_t)tr->o.ntables) {
		cli_error("%s: the checkpoint was made with other shapes, seed "
			  "or data than this command line's",
			  tr->dir);
		free(dense);
		return -EINVAL;
	}
	for (int i = 0; i < nst; i++) {
		size_t n;

		model_state_array(&tr->m, i, &n);
		total += n;
	}
	ret = h.nfloats == total ? 0 : ET_EMISMATCH;
	for (int i = 0; i < nst && !ret; i++) {
		size_t n;
		float *a = model_state_array(&tr->m, i, &n);

		if (!take(buf, len, &off, a, n * sizeof(*a)))
			ret = ET_ETRUNC;
	}
	for (int t = 0; t < tr->o.ntables && !ret; t++) {
		uint64_t n;

		if (!take(buf, len, &off, &n, sizeof(n)) ||
		    n > (len - off) / sizeof(uint64_t)) {
			ret = ET_ETRUNC;
			break;
		}
		for (uint64_t i = 0; i < n && !ret; i++) {
			uint64_t v;

			take(buf, len, &off, &v, sizeof(v));
			if (v >= tr->rows[t])
				ret = ET_EROWRANGE;
			else
				ret = idset_add(&tr->touched[t], &v, 1);
		}
	}
	if (!ret && off != len)
		ret = ET_EHEADER;
	free(dense);
	if (ret)
		return fail("checkpoint state", ret);
	tr->step = tr->step0 = tr->ckpt_step = h.step;
	tr->ckpt_any = true;
	ret = data_seek(&tr->train, h.data_pos);
	if (ret)
		return fail("seek in data", ret);
	tr->next_pos = h.data_pos;
	return 0;
}

/* --------------------------------------------------------------- setup */

static int make_dir(struct trainer *tr)
{
	if (tr->o.dir) {
		if (strlen(tr->o.dir) >= sizeof(tr->dir) - 32)
			return fail(tr->o.dir, -ENAMETOOLONG);
		snprintf(tr->dir, sizeof(tr->dir), "%s", tr->o.dir);
		return 0;
	}
#ifdef ET_WITH_MPI
	{
		int ret = dist_make_dir(tr->dir, sizeof(tr->dir));

		if (ret)
			return fail("/var/tmp", ret);
		tr->dir_made = true;
		return 0;
	}
#endif
	snprintf(tr->dir, sizeof(tr->dir), "/var/tmp/embtier-train.XXXXXX");
	if (!mkdtemp(tr->dir))
		return fail("/var/tmp", -errno);
	tr->dir_made = true;
	return 0;
}

/* Removes the directory we made and the files in it. */
static void remove_dir(struct trainer *tr)
{
	DIR *d = opendir(tr->dir);
	struct dirent *e;

	if (!d) {
		cli_error("%s: cannot remove: %s", tr->dir, strerror(errno));
		return;
	}
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		if (unlinkat(dirfd(d), e->d_name, 0))
			cli_error("%s/%s: cannot remove: %s", tr->dir,
				  e->d_name, strerror(errno));
	}
	closedir(d);
	if (rmdir(tr->dir))
		cli_error("%s: cannot remove: %s", tr->dir, strerror(errno));
}

static void table_params(const struct opts *o, const uint64_t *rows, int t,
			 struct et_table_params *p)
{
	memset(p, 0, sizeof(*p));
	p->rows = rows[t];
	p->dim = (uint32_t)o->dim;
	p->dtype = o->dtype;
	p->optim = ET_OPT_ROWWISE_ADAGRAD;
	p->init = ET_INIT_UNIFORM;
	p->init_scale = o->init_scale;
	p->seed = data_mix64(o->seed ^ (0x7461626cULL << 32)) + (uint64_t)t;
}

#ifdef ET_WITH_MPI
/* The MPI build: this rank's shard of every table (dist.h). */
static int open_dist(struct trainer *tr, const struct et_store_config *cfg,
		     double t0)
{
	const struct opts *o = &tr->o;
	struct dist_table *dt = calloc(o->ntables, sizeof(*dt));
	char msg[256];
	int ret;

	if (!dt)
		return fail("setup", -ENOMEM);
	for (int t = 0; t < o->ntables; t++) {
		snprintf(dt[t].name, sizeof(dt[t].name), "t%02d", t);
		table_params(o, tr->rows, t, &dt[t].p);
	}
	ret = dist_open(&tr->dist, tr->dir, o->reshard_from, reshard_check, tr,
			cfg, o->resume, o->row_wise, dt, o->ntables, o->batch,
			tr->tid, msg, sizeof(msg));
	free(dt);
	if (ret) {
		if (o->rank == 0 && o->reshard_from) /* every rank has it */
			cli_error("reshard from %s: %s", o->reshard_from, msg);
		else if (o->rank == 0)
			cli_error("%s: %s", tr->dir, msg);
		return ret;
	}
	tr->store = dist_store(tr->dist);
	tr->open_s = cli_now() - t0;
	return 0;
}
#endif

static int open_store(struct trainer *tr)
{
	const struct opts *o = &tr->o;
	struct et_store_config cfg = {
	    .hbm_bytes = (uint64_t)(o->hbm_mb * 1048576.0),
	    .ddr_bytes = (uint64_t)(o->ddr_mb * 1048576.0),
	    .hbm_policy = o->policy,
	    .ddr_policy = o->policy,
	    .threads = (uint32_t)o->store_threads,
	    .prefetch_thread = (uint32_t)o->pf_thread,
	};
	double t0 = cli_now();
	char what[96];
	int ret;

	if (!cfg.ddr_bytes) {
		cli_usage_error("--ddr-mb: the DDR tier cannot be empty");
		return -EINVAL;
	}
#ifdef ET_WITH_MPI
	return open_dist(tr, &cfg, t0);
#endif
	ret = et_store_open(tr->dir, &cfg, &tr->store);
	if (ret)
		return fail(tr->dir, ret);
	for (int t = 0; t < o->ntables; t++) {
		struct et_table_params p;
		char name[32];

		table_params(o, tr->rows, t, &p);
		snprintf(name, sizeof(name), "t%02d", t);
		if (o->resume) {
			ret = et_table_open(tr->store, name, &p, &tr->tid[t]);
		} else {
			ret = et_table_create(tr->store, name, &p, &tr->tid[t]);
			if (ret == -EEXIST) {
				cli_error("%s: table %s exists (use --resume, "
					  "or a fresh --dir)",
					  tr->dir, name);
				return ret;
			}
		}
		if (ret) {
			snprintf(what, sizeof(what), "%s table %s",
				 o->resume ? "open" : "create", name);
			return fail(what, ret);
		}
	}
	tr->open_s = cli_now() - t0;
	return 0;
}

static double auc_exact(const float *score, const float *label, size_t n);

/* How well the hidden teacher itself scores the held-out set: the
 * ceiling a model of these samples can reach. */
static void teacher_score(struct trainer *tr)
{
	double loss = 0;
	size_t k = 0;

	for (int i = 0; i < tr->neval; i++) {
		const struct batch *b = &tr->eval[i];

		for (int j = 0; j < b->n; j++, k++) {
			tr->scores[k] = b->truth[j];
			tr->labels[k] = b->label[j];
			loss += model_logloss(b->truth[j], b->label[j]);
		}
	}
	tr->teacher_logloss = loss / (double)k;
	tr->teacher_auc = auc_exact(tr->scores, tr->labels, k);
}

static int open_data(struct trainer *tr)
{
	const struct opts *o = &tr->o;
	struct data_src ev;
	uint64_t left = o->eval_samples;
	int ret;

	tr->neval = (int)((o->eval_samples + o->batch - 1) / o->batch);
	tr->eval = calloc(tr->neval, sizeof(*tr->eval));
	tr->scores = calloc(o->eval_samples, sizeof(float));
	tr->labels = calloc(o->eval_samples, sizeof(float));
	if (!tr->eval || !tr->scores || !tr->labels)
		return fail("eval set", -ENOMEM);
	for (int i = 0; i < tr->neval; i++) {
		int cap = left < (uint64_t)o->batch ? (int)left : o->batch;

		ret = batch_alloc(&tr->eval[i], cap, o->ntables,
				  o->data ? 1 : o->bag);
		if (ret)
			return fail("eval set", ret);
		left -= (uint64_t)cap;
	}
	for (int i = 0; i < 2 + (o->lookahead > 1 ? o->lookahead - 1 : 0);
	     i++) {
		/* this rank's share of the global batch */
		ret = batch_alloc(&tr->bat[i], o->batch / o->nranks, o->ntables,
				  o->data ? 1 : o->bag);
		if (ret)
			return fail("batch", ret);
	}

	if (!o->data) {
		struct synth_params sp = {
		    .seed = o->seed,
		    .ntables = o->ntables,
		    .rows = tr->rows,
		    .hot = o->hot,
		    .zipf = o->zipf,
		    .bag = o->bag,
		    .dense_weight = o->dense_weight,
		};

		for (int t = 0; t < o->ntables; t++)
			if (sp.hot > tr->rows[t])
				sp.hot = tr->rows[t];
		ret = data_synth_init(&ev, &sp, 1);
		if (ret)
			return fail("synthetic data", ret);
		for (int i = 0; i < tr->neval; i++)
			data_next(&ev, &tr->eval[i]);
		data_close(&ev);
		teacher_score(tr);
		ret = data_synth_init(&tr->train, &sp, 0);
		if (ret)
			return fail("synthetic data", ret);
		return 0;
	}

	/* Criteo: the held-out set is the head of --eval-data or --data */
	{
		const char *ef = o->eval_data ? o->eval_data : o->data;
		uint64_t salt = data_mix64(o->seed ^ 0x637269ULL);

		ret = data_criteo_open(&ev, ef, o->ntables, tr->rows, salt);
		if (ret)
			return fail(ef, ret);
		for (int i = 0; i < tr->neval && !ret; i++) {
			ret = data_next(&ev, &tr->eval[i]);
			if (!ret && ev.c.wraps) {
				cli_error("%s: fewer than %" PRIu64
					  " valid lines for the held-out set",
					  ef, o->eval_samples);
				data_close(&ev);
				return -ENODATA;
			}
		}
		if (ret) {
			data_fail(ef, &ev, ret);
			data_close(&ev);
			return ret;
		}
		tr->eval_malformed = ev.c.malformed;
		ret = data_criteo_open(&tr->train, o->data, o->ntables,
				       tr->rows, salt);
		if (ret) {
			data_close(&ev);
			return fail(o->data, ret);
		}
		if (!o->eval_data) {
			/* training passes start after the held-out lines */
			ret = data_seek(&tr->train, data_tell(&ev));
			data_set_start(&tr->train);
		}
		data_close(&ev);
		if (ret)
			return fail(o->data, ret);
	}
	return 0;
}

static int setup(struct trainer *tr)
{
	const struct opts *o = &tr->o;
	struct model_config mc = {
	    .ndense = DATA_NDENSE,
	    .ntables = o->ntables,
	    .dim = o->dim,
	    .nbot = o->nbot,
	    .ntop = o->ntop,
	    .max_batch = o->batch,
	    .optim = o->mlp_optim,
	    .lr = o->lr,
	    .eps = 1e-8f,
	    .seed = o->seed,
	};
	size_t nemb = (size_t)o->ntables * o->batch * o->dim;
	int ret;

	memcpy(mc.bot, o->bot, sizeof(mc.bot));
	memcpy(mc.top, o->top, sizeof(mc.top));
	tr->rows = calloc(o->ntables, sizeof(*tr->rows));
	tr->tid = calloc(o->ntables, sizeof(*tr->tid));
	tr->touched = calloc(o->ntables, sizeof(*tr->touched));
	tr->pf = calloc(o->ntables, sizeof(*tr->pf));
	tr->tb = calloc(o->ntables, sizeof(*tr->tb));
	if (o->lookahead) {
		tr->la = calloc((size_t)o->lookahead, sizeof(*tr->la));
		tr->la_ids = calloc((size_t)o->lookahead * (size_t)o->ntables,
				    sizeof(*tr->la_ids));
		if (!tr->la || !tr->la_ids)
			return fail("lookahead", -ENOMEM);
	}
	tr->emb = calloc(nemb, sizeof(float));
	tr->grad = calloc(nemb, sizeof(float));
	if (!tr->rows || !tr->tid || !tr->touched || !tr->pf || !tr->tb ||
	    !tr->emb || !tr->grad)
		return fail("setup", -ENOMEM);
	for (int t = 0; t < o->ntables; t++)
		tr->rows[t] = table_rows(o, t);
	tr->fingerprint = config_fingerprint(tr, o->row_wise);
	ret = model_init(&tr->m, &mc);
	if (!ret)
		ret = gradsum_init(&tr->gs, &tr->m, o->slices);
	if (ret)
		return fail("model", ret);
	ret = open_data(tr);
	if (ret)
		return ret;
	ret = make_dir(tr);
	if (ret)
		return ret;
	ret = open_store(tr);
	if (ret)
		return ret;
	if (!o->resume)
		return 0;
	ret = checkpoint_load(tr);
	/* a resharded store is committed at once: from now on it resumes
	 * like any other */
	if (!ret && o->reshard_from)
		ret = checkpoint_write(tr);
	return ret;
}

static void teardown(struct trainer *tr)
{
	model_free(&tr->m);
	gradsum_free(&tr->gs);
	data_close(&tr->train);
	for (int i = 0; i <= ET_MAX_LOOKAHEAD; i++)
		batch_free(&tr->bat[i]);
	free(tr->la);
	free(tr->la_ids);
	for (int i = 0; tr->eval && i < tr->neval; i++)
		batch_free(&tr->eval[i]);
	free(tr->eval);
	for (int t = 0; tr->touched && t < tr->o.ntables; t++)
		idset_free(&tr->touched[t]);
	free(tr->touched);
	free(tr->rows);
	free(tr->tid);
	free(tr->pf);
	free(tr->tb);
	free(tr->emb);
	free(tr->grad);
	free(tr->scores);
	free(tr->labels);
	free(tr->rowvals);
	if (tr->log && tr->log != stdout && tr->log != stderr)
		fclose(tr->log);
}

/* ---------------------------------------------------------------- eval */

struct scored {
	float s;
	float y;
};

static int cmp_scored(const void *a, const void *b)
{
	float x = ((const struct scored *)a)->s;
	float y = ((const struct scored *)b)->s;

	return x < y ? -1 : x > y;
}

/* Exact AUC: the rank-sum statistic, tied scores sharing their average
 * rank. NAN if one class is missing. */
static double auc_exact(const float *score, const float *label, size_t n)
{
	struct scored *v = malloc(n * sizeof(*v));
	double pos = 0, neg = 0, rank_sum = 0;

	if (!v)
		return NAN;
	for (size_t i = 0; i < n; i++) {
		v[i].s = score[i];
		v[i].y = label[i];
	}
	qsort(v, n, sizeof(*v), cmp_scored);
	for (size_t i = 0; i < n;) {
		size_t j = i;
		double p = 0, avg;

		while (j < n && v[j].s == v[i].s) {
			p += v[j].y > 0.5f;
			j++;
		}
		avg = ((double)i + 1 + (double)j) / 2; /* ranks i+1 .. j */
		rank_sum += p * avg;
		pos += p;
		neg += (double)(j - i) - p;
		i = j;
	}
	free(v);
	if (!pos || !neg)
		return NAN;
	return (rank_sum - pos * (pos + 1) / 2) / (pos * neg);
}

/* Gathers batch b's bags into the model and runs the forward. */
static int forward_batch(struct trainer *tr, const struct batch *b,
			 double *stall)
{
	const struct opts *o = &tr->o;
	size_t d = (size_t)o->dim;
	double t0 = cli_now();
	int ret;

#ifdef ET_WITH_MPI
	/* the training batch's ids went ahead with the step before */
	ret = dist_forward(tr->dist, stall ? NULL : b, tr->emb,
			   (size_t)o->batch * d);
	if (ret)
		return fail("gather", ret);
	if (stall)
		*stall += cli_now() - t0;
	return 0;
#endif
	for (int t = 0; t < o->ntables; t++)
		tr->tb[t] = (struct et_table_batch){
		    .table = tr->tid[t],
		    .ids = b->ids[t],
		    .offsets = b->offsets[t],
		    .nbags = (size_t)b->n,
		    .out = tr->emb + (size_t)t * o->batch * d};
	ret = et_gather_pooled_multi(tr->store, tr->tb, (size_t)o->ntables,
				     ET_POOL_SUM);
	if (ret)
		return fail("gather", ret);
	if (stall)
		*stall += cli_now() - t0;
	return 0;
}

/* Copies gathered bags lo .. lo + n - 1 into the model's interaction
 * input. */
static void bags_in(struct trainer *tr, int lo, int n)
{
	size_t d = (size_t)tr->o.dim, nv = (size_t)tr->m.nvec;

	for (int t = 0; t < tr->o.ntables; t++)
		for (int b = 0; b < n; b++)
			memcpy(tr->m.vec + ((size_t)b * nv + 1 + t) * d,
			       tr->emb + ((size_t)t * tr->o.batch + lo + b) * d,
			       d * sizeof(float));
}

/* Adds the store's clocks of b - a to *t. */
static void store_time_add(struct store_time *t, const struct et_stats *a,
			   const struct et_stats *b)
{
	t->op += (double)(b->op_ns - a->op_ns) / 1e9;
	t->miss += (double)(b->miss_wait_ns - a->miss_wait_ns) / 1e9;
	t->wb += (double)(b->writeback_ns - a->writeback_ns) / 1e9;
}

/*
 * Splits stall, the time steps spent in the store's calls, by the store's
 * clocks b - a less those of the evaluations in between (ev): miss wait,
 * write-back and hit work (the rest), each a fraction of step_s.
 */
static void stall_split(double step_s, double stall, const struct et_stats *a,
			const struct et_stats *b, const struct store_time *ev,
			double *hit, double *miss, double *wb)
{
	struct store_time t = {0, 0, 0};

	store_time_add(&t, a, b);
	t.miss -= ev->miss;
	t.wb -= ev->wb;
	t.miss = t.miss > 0 ? t.miss : 0;
	t.wb = t.wb > 0 ? t.wb : 0;
	*hit = stall - t.miss - t.wb > 0 ? stall - t.miss - t.wb : 0;
	*hit = step_s > 0 ? *hit / step_s : 0;
	*miss = step_s > 0 ? t.miss / step_s : 0;
	*wb = step_s > 0 ? t.wb / step_s : 0;
}

static int evaluate_batches(struct trainer *tr);

/* The held-out score, with the store's time in it kept apart from the
 * training steps'. */
static int evaluate(struct trainer *tr)
{
	struct et_stats a, b;
	int ret;

	ret = et_get_stats(tr->store, -1, &a);
	if (ret)
		return fail("stats", ret);
	ret = evaluate_batches(tr);
	if (ret)
		return ret;
	ret = et_get_stats(tr->store, -1, &b);
	if (ret)
		return fail("stats", ret);
	store_time_add(&tr->eval_tm, &a, &b);
	store_time_add(&tr->iv.eval_tm, &a, &b);
	return 0;
}

static int evaluate_batches(struct trainer *tr)
{
	size_t k = 0;
	double loss = 0;
	int ret;

	for (int i = 0; i < tr->neval; i++) {
		const struct batch *b = &tr->eval[i];

		ret = forward_batch(tr, b, NULL);
		if (ret)
			return ret;
		model_forward(&tr->m, b->dense, b->n);
		bags_in(tr, 0, b->n);
		model_interact(&tr->m, b->n);
		for (int j = 0; j < b->n; j++, k++) {
			tr->scores[k] = tr->m.logit[j];
			tr->labels[k] = b->label[j];
			loss += model_logloss(tr->m.logit[j], b->label[j]);
		}
	}
	tr->eval_n = k;
	tr->eval_logloss = k ? loss / (double)k : NAN;
	tr->eval_auc = auc_exact(tr->scores, tr->labels, k);
	return 0;
}

/* ----------------------------------------------------------- training */

/* The next batch of this process: the whole batch, or a rank's share. */
static int next_batch(struct trainer *tr, struct batch *b)
{
	int ret;

#ifdef ET_WITH_MPI
	ret = dist_next_batch(tr->dist, &tr->train, b);
#else
	ret = data_next(&tr->train, b);
#endif
	if (ret)
		return data_fail(tr->o.data ? tr->o.data : "data", &tr->train,
				 ret);
	return 0;
}

/* Starts reading batch b's rows; under MPI its ids go to their owners,
 * which prefetch them. */
static int prefetch_batch(struct trainer *tr, const struct batch *b)
{
	const struct opts *o = &tr->o;
	int ret;

#ifdef ET_WITH_MPI
	ret = dist_send_ids(tr->dist, b, o->prefetch);
	return ret ? fail("prefetch", ret) : 0;
#endif
	if (!o->prefetch)
		return 0;
	for (int t = 0; t < o->ntables; t++) {
		tr->pf[t].table = tr->tid[t];
		tr->pf[t].ids = b->ids[t];
		tr->pf[t].n = b->offsets[t][b->n];
	}
	ret = et_prefetch(tr->store, tr->pf, (size_t)o->ntables);
	return ret ? fail("prefetch", ret) : 0;
}

/*
 * Forward and backward of the dense model over the n samples of cur,
 * slice by slice: the bags' gradients land in tr->grad, the MLP's in the
 * model, summed over slices (and ranks) along the fixed tree of
 * gradsum.h. Returns the global batch's mean loss.
 */
static double dense_step(struct trainer *tr, const struct batch *cur, int n,
			 int *err)
{
	const struct opts *o = &tr->o;
	int per = o->slices / o->nranks, sl = n / per;
	size_t d = (size_t)o->dim, nv = (size_t)tr->m.nvec;
	bool tree = o->slices > 1 || tr->dist;
	double loss = 0;

	*err = 0;
	for (int j = 0; j < per; j++) {
		int lo = j * sl;

		model_forward(&tr->m, cur->dense + (size_t)lo * DATA_NDENSE,
			      sl);
		bags_in(tr, lo, sl);
		model_interact(&tr->m, sl);
		loss += model_loss_part(&tr->m, cur->label + lo, sl, o->batch);
		model_backward(&tr->m, sl);
		for (int t = 0; t < o->ntables; t++)
			for (int b = 0; b < sl; b++)
				memcpy(tr->grad +
					   ((size_t)t * o->batch + lo + b) * d,
				       tr->m.dvec +
					   ((size_t)b * nv + 1 + t) * d,
				       d * sizeof(float));
		if (tree)
			gradsum_push(&tr->gs, &tr->m);
	}
	if (tree) {
		float *g = gradsum_result(&tr->gs);

#ifdef ET_WITH_MPI
		*err = dist_allreduce(tr->dist, g, tr->gs.n);
		if (*err) {
			fail("all-reduce", *err);
			return NAN;
		}
		loss = dist_sum(loss);
#endif
		gradsum_store(&tr->gs, &tr->m, g);
	}
	return loss / o->batch;
}

/* The bags' gradients to the store (under MPI, to the owners). */
static int update_batch(struct trainer *tr, const struct batch *cur, int n)
{
	const struct opts *o = &tr->o;
	struct et_update_params up = {.lr = o->emb_lr};
	size_t d = (size_t)o->dim;
	int ret;

#ifdef ET_WITH_MPI
	ret =
	    dist_backward(tr->dist, tr->grad, (size_t)o->batch * d, o->emb_lr);
	if (ret)
		return fail("update", ret);
	/* the rows this rank owns are the ones its checkpoint and
	 * checksum speak for */
	for (int t = 0; t < o->ntables; t++) {
		const uint64_t *ids;
		size_t k;

		ret = dist_owned_ids(tr->dist, t, &ids, &k);
		if (!ret)
			ret = idset_add(&tr->touched[t], ids, k);
		if (ret)
			return fail("touched ids", ret);
	}
	return 0;
#endif
	for (int t = 0; t < o->ntables; t++)
		tr->tb[t] = (struct et_table_batch){
		    .table = tr->tid[t],
		    .ids = cur->ids[t],
		    .offsets = cur->offsets[t],
		    .nbags = (size_t)n,
		    .grads = tr->grad + (size_t)t * o->batch * d};
	ret = et_update_pooled_multi(tr->store, tr->tb, (size_t)o->ntables,
				     ET_POOL_SUM, &up);
	return ret ? fail("update", ret) : 0;
}

/* The trainer's own record of the rows batch cur changed (for the weights
 * checksum): not the store's time, so outside the stall. Under MPI,
 * update_batch keeps the rows this rank owns. */
static int touched_add(struct trainer *tr, const struct batch *cur, int n)
{
#ifndef ET_WITH_MPI
	for (int t = 0; t < tr->o.ntables; t++) {
		int ret =
		    idset_add(&tr->touched[t], cur->ids[t], cur->offsets[t][n]);

		if (ret)
			return fail("touched ids", ret);
	}
#else
	(void)tr;
	(void)cur;
	(void)n;
#endif
	return 0;
}

/*
 * --lookahead K: reads batches i+1 .. i+K-1 ahead (those the run has) and
 * hands the store the window i .. i+K-1 before batch i's first operation.
 * The window changes which rows stay cached, never a result.
 */
static int lookahead_window(struct trainer *tr, double *stall)
{
	const struct opts *o = &tr->o;
	uint64_t left = o->steps - tr->step - 1; /* batches after this one */
	int want = o->lookahead - 1, ret;
	double t0;

	if ((uint64_t)want > left)
		want = (int)left;
	while (tr->nahead < want) {
		ret = next_batch(tr, &tr->bat[1 + tr->nahead]);
		if (ret)
			return ret;
		tr->nahead++;
	}
	for (int b = 0; b <= want; b++) {
		const struct batch *bt = &tr->bat[b];
		struct et_batch_ids *ids = tr->la_ids + (size_t)b * o->ntables;

		for (int t = 0; t < o->ntables; t++) {
			ids[t].table = tr->tid[t];
			ids[t].ids = bt->ids[t];
			ids[t].n = bt->offsets[t][bt->n];
		}
		tr->la[b].tables = ids;
		tr->la[b].ntables = (size_t)o->ntables;
	}
	t0 = cli_now();
	ret = et_lookahead(tr->store, tr->la, (size_t)want + 1);
	*stall += cli_now() - t0;
	return ret ? fail("lookahead", ret) : 0;
}

static int train_step(struct trainer *tr)
{
	const struct opts *o = &tr->o;
	struct batch *cur = &tr->bat[0], *nxt = &tr->bat[1], tmp;
	double t0 = cli_now(), stall = 0, t1, loss;
	int n = cur->n, ret;

	if (o->lookahead) {
		ret = lookahead_window(tr, &stall);
		if (ret)
			return ret;
	}
	ret = forward_batch(tr, cur, &stall);
	if (ret)
		return ret;
	if (tr->step + 1 < o->steps) {
		if (!tr->nahead) {
			ret = next_batch(tr, nxt);
			if (ret)
				return ret;
			tr->nahead = 1;
		}
		t1 = cli_now();
		ret = prefetch_batch(tr, nxt);
		stall += cli_now() - t1;
		if (ret)
			return ret;
	}

	loss = dense_step(tr, cur, n, &ret);
	if (ret)
		return ret;
	t1 = cli_now();
	ret = update_batch(tr, cur, n);
	stall += cli_now() - t1;
	if (!ret)
		ret = touched_add(tr, cur, n);
	if (ret)
		return ret;
	model_step(&tr->m);

	tr->next_pos = cur->end;
	/* the next batch read ahead becomes the current one */
	tmp = tr->bat[0];
	for (int b = 0; b < tr->nahead; b++)
		tr->bat[b] = tr->bat[b + 1];
	tr->bat[tr->nahead] = tmp;
	if (tr->nahead)
		tr->nahead--;
	tr->step++;
	t1 = cli_now() - t0;
	tr->step_s += t1;
	tr->stall_s += stall;
	tr->loss_sum += loss;
	tr->loss_avg = tr->step == tr->step0 + 1
			   ? loss
			   : 0.98 * tr->loss_avg + 0.02 * loss;
	tr->iv.step_s += t1;
	tr->iv.stall_s += stall;
	tr->iv.loss += loss;
	tr->iv.steps++;
	tr->iv.samples += (uint64_t)n * (uint64_t)o->nranks;
	return 0;
}

static double ratio(uint64_t hits, uint64_t misses)
{
	return hits + misses ? (double)hits / (double)(hits + misses) : NAN;
}

/* Takes the progress bar off the screen before a log line; the next
 * update draws it again. */
static void progress_clear(struct progress *p)
{
	if (p->on && p->drawn) {
		fputs("\r\033[K", stderr);
		fflush(stderr);
		p->drawn = false;
	}
}

static void fmt_ratio(char *buf, size_t len, double r)
{
	if (isnan(r))
		snprintf(buf, len, "-");
	else
		snprintf(buf, len, "%.4f", r);
}

static int log_line(struct trainer *tr)
{
	struct interval *iv = &tr->iv;
	struct et_stats st;
	char hbm[16], ddr[16];
	double now = cli_now(), hit, miss, wb;
	int ret;

	ret = et_get_stats(tr->store, -1, &st);
	if (ret)
		return fail("stats", ret);
	stall_split(iv->step_s, iv->stall_s, &iv->st, &st, &iv->eval_tm, &hit,
		    &miss, &wb);
	fmt_ratio(hbm, sizeof(hbm),
		  tr->o.hbm_mb > 0 ? ratio(st.hbm.hits - iv->st.hbm.hits,
					   st.hbm.misses - iv->st.hbm.misses)
				   : NAN);
	fmt_ratio(ddr, sizeof(ddr),
		  ratio(st.ddr.hits - iv->st.ddr.hits,
			st.ddr.misses - iv->st.ddr.misses));
	progress_clear(&tr->prog);
	fprintf(tr->log,
		"step %" PRIu64 " loss %.5f samples/s %.0f hbm-hit %s "
		"ddr-hit %s stall %.3f (hit %.3f miss-wait %.3f write-back "
		"%.3f) prefetch-wait-ms %.1f\n",
		tr->step, iv->steps ? iv->loss / (double)iv->steps : NAN,
		iv->step_s > 0 ? (double)iv->samples / iv->step_s : 0.0, hbm,
		ddr, iv->step_s > 0 ? iv->stall_s / iv->step_s : 0.0, hit, miss,
		wb,
		(double)(st.prefetch_wait_ns - iv->st.prefetch_wait_ns) / 1e6);
	fflush(tr->log);
	{
		/* full: it evicted in this interval (a set-associative
		 * tier evicts before every slot is taken) */
		bool full = st.ddr.evictions > iv->st.ddr.evictions;
		int ph = full && tr->ddr_was_full;

		tr->phase[ph].samples += (double)iv->samples;
		tr->phase[ph].step_s += iv->step_s;
		tr->phase[ph].steps += iv->steps;
		tr->ddr_was_full = full;
	}
	memset(iv, 0, sizeof(*iv));
	iv->t0 = now;
	iv->st = st;
	return 0;
}

/* ------------------------------------------------------------- results */

/*
 * FNV-1a over every MLP weight (not the optimizer state), then, table by
 * table, the ids training updated in increasing order and their values
 * read back with et_gather. Values are what the API returns (f32), so the
 * checksum is the same whatever the tiers held when it was taken.
 */
#ifdef ET_WITH_MPI
/* Table t's touched rows of every rank, on rank 0: *ids (replaced) and
 * tr->rowvals, in increasing id order. */
static int dist_checksum_rows(struct trainer *tr, int t, uint64_t **ids,
			      uint64_t *n)
{
	size_t k = (size_t)*n, all_n = 0;
	float *vals = malloc((k ? k : 1) * tr->o.dim * sizeof(float));
	uint64_t *all_ids = NULL;
	int ret = vals ? 0 : -ENOMEM;

	if (!ret && k)
		ret = et_gather(tr->store, tr->tid[t], *ids, k, vals);
	if (ret) {
		free(vals);
		return fail("checksum gather", ret);
	}
	free(tr->rowvals);
	tr->rowvals = NULL;
	ret = dist_table_rows(tr->dist, *ids, vals, k, tr->o.dim, &all_ids,
			      &tr->rowvals, &all_n);
	free(vals);
	if (ret)
		return fail("checksum", ret);
	free(*ids);
	*ids = all_ids;
	*n = all_n;
	return 0;
}
#endif

static int weights_checksum(struct trainer *tr, uint64_t *out)
{
	const size_t chunk = 4096;
	int nst = model_state_count(&tr->m, 1);
	float *buf = malloc(chunk * (size_t)tr->o.dim * sizeof(float));
	uint64_t h = FNV_BASIS;
	int ret = 0;

	if (!buf)
		return fail("checksum", -ENOMEM);
	for (int i = 0; i < nst; i++) {
		size_t len;
		const float *a = model_state_array(&tr->m, i, &len);

		h = fnv(h, a, len * sizeof(*a));
	}
	for (int t = 0; t < tr->o.ntables && !ret; t++) {
		uint64_t *ids, n = tr->touched[t].n;

		ret = idset_sorted(&tr->touched[t], &ids);
		if (ret) {
			fail("checksum", ret);
			break;
		}
#ifdef ET_WITH_MPI
		ret = dist_checksum_rows(tr, t, &ids, &n);
		if (ret)
			break;
#endif
		h = fnv_u64(h, (uint64_t)t);
		h = fnv_u64(h, n);
		for (uint64_t i = 0; i < n && tr->o.rank == 0; i += chunk) {
			size_t k = n - i < chunk ? (size_t)(n - i) : chunk;

#ifdef ET_WITH_MPI
			memcpy(buf, tr->rowvals + i * tr->o.dim,
			       k * tr->o.dim * sizeof(float));
#else
			ret = et_gather(tr->store, tr->tid[t], ids + i, k, buf);
#endif
			if (ret) {
				fail("checksum gather", ret);
				break;
			}
			h = fnv(h, ids + i, k * sizeof(*ids));
			h = fnv(h, buf, k * (size_t)tr->o.dim * sizeof(float));
		}
		free(ids);
	}
	free(buf);
	*out = h;
	return ret;
}

struct results {
#ifdef ET_WITH_MPI
	struct dist_figures mine; /* this rank's, before the sums */
#endif
	uint64_t checksum;
	uint64_t logical_params, rows_touched, rows_bound, blocks_written;
	uint64_t disk_bytes, logical_bytes, maxrss;
	struct et_stats st;
	double eval_s;
};

static int collect(struct trainer *tr, struct results *r)
{
	struct rusage ru;
	int ret;

	for (int t = 0; t < tr->o.ntables; t++) {
		struct et_table_info ti;

		if (tr->tid[t] < 0)
			continue; /* MPI: not this rank's */
		ret = et_table_info(tr->store, tr->tid[t], &ti);
		if (ret)
			return fail("table info", ret);
#ifdef ET_WITH_MPI
		ti.rows = dist_owned_rows(tr->dist, t);
#endif
		r->logical_params += ti.rows * ti.dim;
		r->rows_touched += tr->touched[t].n;
		r->blocks_written += ti.blocks_written;
		r->rows_bound += ti.blocks_written * ti.rows_per_block;
		r->disk_bytes += ti.disk_bytes;
		r->logical_bytes += ti.logical_bytes;
	}
	ret = et_get_stats(tr->store, -1, &r->st);
	if (ret)
		return fail("stats", ret);
	if (!getrusage(RUSAGE_SELF, &ru))
		r->maxrss = (uint64_t)ru.ru_maxrss * 1024;
#ifdef ET_WITH_MPI
	{
		struct dist_figures *f = &r->mine;
		uint64_t v[6] = {r->logical_params, r->rows_touched,
				 r->rows_bound,	    r->blocks_written,
				 r->disk_bytes,	    r->logical_bytes};

		f->step_s = tr->step_s;
		f->stall_s = tr->stall_s;
		f->samples =
		    (double)(tr->step - tr->step0) * tr->o.batch / tr->o.nranks;
		f->hbm_hit = tr->o.hbm_mb > 0
				 ? ratio(r->st.hbm.hits, r->st.hbm.misses)
				 : NAN;
		f->ddr_hit = ratio(r->st.ddr.hits, r->st.ddr.misses);
		f->owned_params = r->logical_params;
		f->rows_touched = r->rows_touched;
		f->disk_bytes = r->disk_bytes;
		f->mem_peak = r->st.mem_peak_bytes;
		f->maxrss = r->maxrss;
		dist_sum_u64(v, 6);
		r->logical_params = v[0];
		r->rows_touched = v[1];
		r->rows_bound = v[2];
		r->blocks_written = v[3];
		r->disk_bytes = v[4];
		r->logical_bytes = v[5];
	}
#endif
	return 0;
}

/* A double for JSON: null where it is not a number. */
static void json_num(const char *key, double v, bool comma)
{
	if (isfinite(v))
		printf("\"%s\":%.6g%s", key, v, comma ? "," : "");
	else
		printf("\"%s\":null%s", key, comma ? "," : "");
}

static void report(struct trainer *tr, const struct results *r)
{
	const struct opts *o = &tr->o;
	const struct et_stats *st = &r->st;
	uint64_t steps = tr->step - tr->step0;
	uint64_t samples = steps * (uint64_t)o->batch;
	double sps = tr->step_s > 0 ? (double)samples / tr->step_s : 0;
	double stall = tr->step_s > 0 ? tr->stall_s / tr->step_s : 0;
	double hit, miss, wb;
	double hbm = o->hbm_mb > 0 ? ratio(st->hbm.hits, st->hbm.misses) : NAN;
	double ddr = ratio(st->ddr.hits, st->ddr.misses);
	uint64_t malformed = tr->train.c.malformed + tr->eval_malformed;
	char b1[32], b2[32], b3[32], b4[32];

	stall_split(tr->step_s, tr->stall_s, &tr->st0, st, &tr->eval_tm, &hit,
		    &miss, &wb);
	if (o->json) {
		printf("{\"preset\":\"%s\",\"tables\":%d,\"dim\":%d,"
		       "\"dtype\":\"%s\",\"batch\":%d,\"steps\":%" PRIu64
		       ",\"steps_this_run\":%" PRIu64 ",",
		       o->preset, o->ntables, o->dim, cli_dtype_name(o->dtype),
		       o->batch, tr->step, steps);
		printf(
		    "\"logical_parameters\":%" PRIu64
		    ",\"rows_touched\":%" PRIu64
		    ",\"rows_materialized_bound\":%" PRIu64
		    ",\"blocks_written\":%" PRIu64 ",\"disk_bytes\":%" PRIu64
		    ",\"logical_bytes\":%" PRIu64 ",\"mem_peak_bytes\":%" PRIu64
		    ",\"maxrss_bytes\":%" PRIu64 ",\"hbm_evictions\":%" PRIu64
		    ",\"ddr_evictions\":%" PRIu64 ",\"writebacks\":%" PRIu64
		    ",\"nvme_rows_read\":%" PRIu64 ",\"rows_lazy\":%" PRIu64
		    ",\"prefetch_wait_ns\":%" PRIu64
		    ",\"malformed_lines\":%" PRIu64 ",",
		    r->logical_params, r->rows_touched, r->rows_bound,
		    r->blocks_written, r->disk_bytes, r->logical_bytes,
		    st->mem_peak_bytes, r->maxrss, st->hbm.evictions,
		    st->ddr.evictions, st->writebacks, st->nvme_rows_read,
		    st->rows_lazy, st->prefetch_wait_ns, malformed);
		json_num("open_seconds", tr->open_s, true);
		json_num("run_seconds", tr->run_s, true);
		json_num("step_seconds", tr->step_s, true);
		json_num("ms_per_step", steps ? 1e3 * tr->step_s / steps : NAN,
			 true);
		json_num("stall_fraction", stall, true);
		json_num("hit_fraction", hit, true);
		json_num("miss_wait_fraction", miss, true);
		json_num("writeback_fraction", wb, true);
		json_num("samples_per_second", sps, true);
		json_num("flush_seconds", tr->flush_s, true);
		json_num("hbm_hit_ratio", hbm, true);
		json_num("ddr_hit_ratio", ddr, true);
		json_num("train_loss", steps ? tr->loss_sum / steps : NAN,
			 true);
		json_num("eval_logloss", tr->eval_logloss, true);
		json_num("eval_auc", tr->eval_auc, true);
		json_num("teacher_logloss", tr->teacher_logloss, true);
		json_num("teacher_auc", tr->teacher_auc, true);
		printf("\"eval_samples\":%" PRIu64
		       ",\"weights_checksum\":\"0x%016" PRIx64 "\"}\n",
		       tr->eval_n, r->checksum);
		return;
	}
	printf("preset: %s\n", o->preset);
	printf(
	    "model: %d tables x %s..%s rows x %d (%s), batch %d, "
	    "%s samples\n",
	    o->ntables, cli_human_count((double)tr->rows[0], b1, sizeof(b1)),
	    cli_human_count((double)tr->rows[o->ntables - 1], b2, sizeof(b2)),
	    o->dim, cli_dtype_name(o->dtype), o->batch,
	    o->data ? "Criteo" : "synthetic");
	printf("logical-parameters: %" PRIu64 " (%.3g)\n", r->logical_params,
	       (double)r->logical_params);
	printf("store-open-seconds: %.4f\n", tr->open_s);
	printf("steps: %" PRIu64 " (%" PRIu64 " in this run)\n", tr->step,
	       steps);
	printf("run-seconds: %.2f (steps %.2f, stall %.2f, checkpoints %.2f, "
	       "final flush %.2f)\n",
	       tr->run_s, tr->step_s, tr->stall_s, tr->ckpt_s, tr->flush_s);
	printf("ms-per-step: %.3f\n", steps ? 1e3 * tr->step_s / steps : 0.0);
	printf("samples-per-second: %.0f\n", sps);
	if (tr->phase[1].steps && tr->phase[0].step_s > 0 &&
	    tr->phase[1].step_s > 0) {
		double a = tr->phase[0].samples / tr->phase[0].step_s;
		double b = tr->phase[1].samples / tr->phase[1].step_s;

		printf("samples-per-second-by-phase: %.0f until the DDR tier "
		       "filled (%" PRIu64 " steps), %.0f with it full (%" PRIu64
		       " steps): %.2fx\n",
		       a, tr->phase[0].steps, b, tr->phase[1].steps, b / a);
	}
	printf("stall-fraction: %.3f (hit work %.3f, miss wait %.3f, "
	       "write-back %.3f)\n",
	       stall, hit, miss, wb);
	printf("prefetch-wait-ms: %.1f\n", (double)st->prefetch_wait_ns / 1e6);
	fmt_ratio(b1, sizeof(b1), hbm);
	fmt_ratio(b2, sizeof(b2), ddr);
	printf("hit-ratio: hbm %s ddr %s\n", b1, b2);
	printf("evictions: hbm %" PRIu64 " ddr %" PRIu64 "\n",
	       st->hbm.evictions, st->ddr.evictions);
	printf("writebacks: %" PRIu64 " rows (%" PRIu64
	       " NVMe rows read, %" PRIu64 " from the initializer)\n",
	       st->writebacks, st->nvme_rows_read, st->rows_lazy);
	printf("rows-touched: %" PRIu64 "\n", r->rows_touched);
	printf("rows-materialized: at most %" PRIu64 " (%" PRIu64
	       " blocks written)\n",
	       r->rows_bound, r->blocks_written);
	printf("disk-bytes: %" PRIu64 " (%s of %s logical)\n", r->disk_bytes,
	       cli_human_bytes((double)r->disk_bytes, b1, sizeof(b1)),
	       cli_human_bytes((double)r->logical_bytes, b2, sizeof(b2)));
	if (st->log_index_rows) {
		/* the store's own figures: under MPI, rank 0's store */
		uint64_t disk = r->disk_bytes;

#ifdef ET_WITH_MPI
		disk = r->mine.disk_bytes;
#endif
		printf(
		    "row-log%s: %" PRIu64 " rows live, %s of records "
		    "(disk-bytes %.2fx that); index and rows changed since "
		    "the last commit %s in memory, %.1f B a row\n",
		    o->nranks > 1 ? " (rank 0)" : "", st->log_index_rows,
		    cli_human_bytes((double)st->log_live_bytes, b1, sizeof(b1)),
		    st->log_live_bytes
			? (double)disk / (double)st->log_live_bytes
			: 0.0,
		    cli_human_bytes((double)st->log_index_bytes, b3,
				    sizeof(b3)),
		    (double)st->log_index_bytes / (double)st->log_index_rows);
	}
	printf("peak-memory: library %s, process max RSS %s\n",
	       cli_human_bytes((double)st->mem_peak_bytes, b3, sizeof(b3)),
	       cli_human_bytes((double)r->maxrss, b4, sizeof(b4)));
	if (o->data)
		printf("malformed-lines: %" PRIu64 "\n", malformed);
	printf("train-loss: %.5f\n", steps ? tr->loss_sum / steps : NAN);
	printf("eval-logloss: %.5f\n", tr->eval_logloss);
	printf("eval-auc: %.5f\n", tr->eval_auc);
	if (!o->data)
		printf("teacher: logloss %.5f auc %.5f (the planted truth)\n",
		       tr->teacher_logloss, tr->teacher_auc);
	printf("weights-checksum: 0x%016" PRIx64 "\n", r->checksum);
}

static int run(struct trainer *tr)
{
	const struct opts *o = &tr->o;
	struct results r = {0};
	double t0;
	int ret;

	tr->log = o->json ? stderr : stdout;
	if (o->rank != 0) {
		/* rank 0 speaks for the run */
		tr->log = fopen("/dev/null", "w");
		if (!tr->log)
			return fail("/dev/null", -errno);
	}
	if (!o->resume)
		tr->next_pos = data_tell(&tr->train);
#ifdef ET_WITH_MPI
	if (o->reshard_from) {
		uint64_t rows, bytes;
		double sec;

		dist_reshard_figures(tr->dist, &rows, &bytes, &sec);
		fprintf(tr->log,
			"resharded %s to %d ranks at step %" PRIu64 ": %" PRIu64
			" rows (%.1f MiB) copied in %.2f s, committed in "
			"%.2f s\n",
			o->reshard_from, o->nranks, tr->step, rows,
			bytes / 1048576.0, sec, tr->ckpt_s);
	}
#endif
	if (tr->step < o->steps) {
		ret = next_batch(tr, &tr->bat[0]);
#ifdef ET_WITH_MPI
		/* the first batch's ids go now, later ones a step ahead */
		if (!ret)
			ret = dist_send_ids(tr->dist, &tr->bat[0], false);
		if (ret)
			return fail("send ids", ret);
#endif
		if (ret)
			return ret;
	}
	snprintf(tr->prog_label, sizeof(tr->prog_label), "training");
	progress_start(&tr->prog, tr->prog_label, "samples",
		       (o->steps > tr->step ? o->steps - tr->step : 0) *
			   (uint64_t)o->batch,
		       o->quiet);
	tr->iv.t0 = t0 = cli_now();
	ret = et_get_stats(tr->store, -1, &tr->iv.st);
	if (ret)
		return fail("stats", ret);
	tr->st0 = tr->iv.st;
	while (tr->step < o->steps) {
		ret = train_step(tr);
		if (ret)
			return ret;
		snprintf(tr->prog_label, sizeof(tr->prog_label),
			 "training loss %.4f", tr->loss_avg);
		progress_update(&tr->prog,
				(tr->step - tr->step0) * (uint64_t)o->batch);
		if (o->log_every && tr->step % o->log_every == 0) {
			ret = log_line(tr);
			if (ret)
				return ret;
		}
		if (o->eval_every && tr->step % o->eval_every == 0 &&
		    tr->step < o->steps) {
			ret = evaluate(tr);
			if (ret)
				return ret;
			progress_clear(&tr->prog);
			fprintf(tr->log,
				"eval step %" PRIu64 " logloss %.5f auc %.5f\n",
				tr->step, tr->eval_logloss, tr->eval_auc);
			fflush(tr->log);
		}
		if (o->ckpt_every && tr->step % o->ckpt_every == 0) {
			ret = checkpoint_write(tr);
			if (ret)
				return ret;
		}
	}
	progress_end(&tr->prog);
	/* a run that checkpoints ends on one, so that it can be resumed */
	if (o->ckpt_every && (!tr->ckpt_any || tr->ckpt_step != tr->step)) {
		ret = checkpoint_write(tr);
		if (ret)
			return ret;
	}
	tr->run_s = cli_now() - t0;
	ret = evaluate(tr);
	if (!ret)
		ret = weights_checksum(tr, &r.checksum);
	if (ret)
		return ret;
	t0 = cli_now();
	ret = et_flush(tr->store);
	if (ret)
		return fail("flush", ret);
	tr->flush_s = cli_now() - t0;
	ret = collect(tr, &r);
	if (ret)
		return ret;
	if (o->rank == 0)
		report(tr, &r);
#ifdef ET_WITH_MPI
	dist_report(tr->dist, &r.mine, tr->log);
#endif
	return 0;
}

int main(int argc, char **argv)
{
	struct trainer *tr;
	int ret, status;

	cli_init("embtier-train");
#ifdef ET_WITH_MPI
	if (dist_init(&argc, &argv, &g_rank, &g_nranks)) {
		cli_error("MPI could not start");
		return CLI_EXIT_FAIL;
	}
#endif
	tr = calloc(1, sizeof(*tr));
	if (!tr) {
		cli_error("out of memory");
		return CLI_EXIT_FAIL;
	}
	tr->teacher_logloss = tr->teacher_auc = NAN;
	if (parse_args(argc, argv, &tr->o)) {
		free(tr);
#ifdef ET_WITH_MPI
		dist_end(false); /* every rank parsed the same flags */
#endif
		return CLI_EXIT_USAGE;
	}
	openblas_set_num_threads(tr->o.threads);
	ret = setup(tr);
	if (!ret)
		ret = run(tr);
	progress_end(&tr->prog);
	status = ret ? CLI_EXIT_FAIL : CLI_EXIT_OK;
#ifdef ET_WITH_MPI
	if (ret && !dist_agreed(ret)) {
		/* a failure of this rank alone: the others may wait for it
		 * in a collective */
		dist_end(true);
	}
	if (tr->dist) {
		ret = dist_close(tr->dist);
		tr->store = NULL;
		if (ret) {
			cli_error_code("close store", ret);
			status = CLI_EXIT_FAIL;
		}
	}
#endif
	if (tr->store) {
		ret = et_store_close(tr->store);
		if (ret) {
			cli_error_code("close store", ret);
			status = CLI_EXIT_FAIL;
		}
	}
#ifdef ET_WITH_MPI
	if (tr->dir_made && !tr->o.keep) {
		dist_remove_dirs(tr->dir);
		tr->dir_made = false;
	}
#endif
	if (tr->dir_made && !tr->o.keep)
		remove_dir(tr);
	else if (tr->dir_made && !tr->o.json && tr->o.rank == 0)
		cli_note("store kept in %s", tr->dir);
	teardown(tr);
	free(tr);
#ifdef ET_WITH_MPI
	dist_end(false);
#endif
	return status;
}
