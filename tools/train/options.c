/*
 * options.c - embtier-train's command line: the presets, the table of
 * options, and the parser and usage text made from that table.
 *
 * Every option is one row of opt_defs: its names, its value's name, its
 * line in the usage, and how its value is parsed and stored (a kind, the
 * field of struct opts and the bounds, or a function). getopt_long's
 * array, its short-option string and the usage text are all made from the
 * table, so an option is added in one place.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "data.h"
#include "options.h"

/* ------------------------------------------------------------- presets */

static void preset_common(struct opts *o, int rank, int nranks)
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
	o->rank = rank;
	o->nranks = nranks;
}

static int apply_preset(struct opts *o, const char *name, int rank, int nranks)
{
	memset(o, 0, sizeof(*o));
	preset_common(o, rank, nranks);
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

/* ------------------------------------------------------ value parsers */

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

/* The options parsed by a function of their own (KIND_FUNC): name is the
 * option's, s its value (NULL for an option without one). */

static int parse_preset(struct opts *o, const char *name, const char *s)
{
	return 0; /* taken before the others: see parse_args */
}

static int parse_policy(struct opts *o, const char *name, const char *s)
{
	int v = cli_policy_parse(s);

	if (v < 0)
		return bad_value(name, s);
	o->policy = (et_policy)v;
	return 0;
}

static int parse_dtype(struct opts *o, const char *name, const char *s)
{
	int v = cli_dtype_parse(s);

	if (v < 0)
		return bad_value(name, s);
	o->dtype = (et_dtype)v;
	return 0;
}

static int parse_mlp_optim(struct opts *o, const char *name, const char *s)
{
	if (!strcmp(s, "sgd"))
		o->mlp_optim = MODEL_SGD;
	else if (!strcmp(s, "adagrad"))
		o->mlp_optim = MODEL_ADAGRAD;
	else
		return bad_value(name, s);
	return 0;
}

static int parse_bot(struct opts *o, const char *name, const char *s)
{
	return parse_sizes(name, s, o->bot, &o->nbot);
}

static int parse_top(struct opts *o, const char *name, const char *s)
{
	return parse_sizes(name, s, o->top, &o->ntop);
}

#ifdef ET_WITH_MPI
static int parse_plan(struct opts *o, const char *name, const char *s)
{
	if (!strcmp(s, "table"))
		o->row_wise = false;
	else if (!strcmp(s, "row"))
		o->row_wise = true;
	else
		return bad_value(name, s);
	return 0;
}
#endif

static int parse_reshard(struct opts *o, const char *name, const char *s)
{
#ifndef ET_WITH_MPI
	cli_usage_error("--reshard-from: a sharded run is "
			"resumed by embtier-train-mpi");
	return -EINVAL;
#endif
	o->reshard_from = s;
	o->resume = true;
	return 0;
}

static void usage(FILE *f);

static int show_help(struct opts *o, const char *name, const char *s)
{
	usage(stdout);
	exit(CLI_EXIT_OK);
}

/* ----------------------------------------------------- the option table */

enum opt_kind {
	KIND_SET,    /* no value: the bool becomes true */
	KIND_CLEAR,  /* no value: the bool becomes false */
	KIND_STRING, /* the const char * points at the value */
	KIND_U64,    /* a count in [lo, hi], into a uint64_t */
	KIND_INT,    /* a count in [lo, hi], into an int */
	KIND_F32,    /* a number in [flo, fhi], into a float */
	KIND_F64,    /* a number in [flo, fhi], into a double */
	KIND_FUNC,   /* parse() takes it */
};

struct opt_def {
	const char *heading; /* a row of its own: a usage heading */
	const char *name;    /* the long option, without "--" */
	char letter;	     /* the short option, or 0 */
	const char *arg;     /* the value's name in the usage; NULL: none */
	const char *help;    /* usage lines, split at '\n'; NULL: unlisted */
	enum opt_kind kind;
	size_t off;	 /* of its field in struct opts */
	uint64_t lo, hi; /* a count's bounds */
	double flo, fhi; /* a number's */
	int (*parse)(struct opts *o, const char *name, const char *s);
};

/* The offset of field f of struct opts, which must be of type t. */
#define FIELD(f, t)                                                            \
	_Generic(((struct opts *)0)->f, t : offsetof(struct opts, f))

#define HEADING(h)   .heading = h
#define OPT(n, a, h) .name = n, .arg = a, .help = h
#define SET(f)	     .kind = KIND_SET, .off = FIELD(f, bool)
#define CLEAR(f)     .kind = KIND_CLEAR, .off = FIELD(f, bool)
#define STRING(f)    .kind = KIND_STRING, .off = FIELD(f, const char *)
#define U64(f, l, h)                                                           \
	.kind = KIND_U64, .off = FIELD(f, uint64_t), .lo = (l), .hi = (h)
#define INT(f, l, h)                                                           \
	.kind = KIND_INT, .off = FIELD(f, int), .lo = (l), .hi = (h)
#define F32(f, l, h)                                                           \
	.kind = KIND_F32, .off = FIELD(f, float), .flo = (l), .fhi = (h)
#define F64(f, l, h)                                                           \
	.kind = KIND_F64, .off = FIELD(f, double), .flo = (l), .fhi = (h)
#define FUNC(fn) .kind = KIND_FUNC, .parse = (fn)

#ifdef ET_WITH_MPI
#define MPI_HELP(h) h
#else
#define MPI_HELP(h) NULL /* taken, to say so, but not listed */
#endif

/* In the order of the usage text. */
static const struct opt_def opt_defs[] = {
    {OPT("preset", "NAME",
	 "default (small, about a minute) or trillion\n"
	 "(26 tables, 10^12 parameters, a short run)"),
     FUNC(parse_preset)},
    {HEADING("model and data:")},
    {OPT("tables", "N", "embedding tables (sparse features)"),
     INT(ntables, 1, MAX_TABLES)},
    {OPT("rows", "N",
	 "logical rows of every table (N or B^E); --keyed:\n"
	 "the rows synthetic ids are drawn from"),
     U64(rows, 1, ET_MAX_ROWS)},
    {OPT("dim", "N", "embedding dimension = bottom MLP output"),
     INT(dim, 1, 4096)},
    {OPT("bot-mlp", "A-B-..", "bottom MLP hidden sizes (0: none)"),
     FUNC(parse_bot)},
    {OPT("top-mlp", "A-B-..", "top MLP hidden sizes (0: none)"),
     FUNC(parse_top)},
    {OPT("batch", "N", "samples per step"), INT(batch, 1, 1 << 20)},
    {OPT("steps", "N", "total steps (a resumed run continues to N)"),
     U64(steps, 0, UINT64_MAX / 2)},
    {OPT("lr", "F", "MLP learning rate"), F32(lr, 0, 1e6)},
    {OPT("emb-lr", "F", "embedding learning rate (default: --lr)"),
     F32(emb_lr, 0, 1e6)},
    {OPT("mlp-optim", "NAME", "sgd or adagrad"), FUNC(parse_mlp_optim)},
    {OPT("init-scale", "F", "embedding init uniform(+-F); 0: 1/sqrt(dim)"),
     F32(init_scale, 0, 1e6)},
    {OPT("seed", "N", "seed of data, weights and initializers"),
     U64(seed, 0, UINT64_MAX)},
    {OPT("data", "FILE", "Criteo TSV instead of synthetic data"), STRING(data)},
    {OPT("eval-data", "FILE",
	 "Criteo held-out file (default: the first\n"
	 "--eval-samples lines of --data)"),
     STRING(eval_data)},
    {OPT("bag", "N", "synthetic: ids per bag"), INT(bag, 1, 1024)},
    {OPT("hot", "N", "synthetic: distinct ids drawn per table"),
     U64(hot, 1, ET_MAX_ROWS)},
    {OPT("zipf", "F", "synthetic: skew of the id draws"), F64(zipf, 0.01, 10)},
    {OPT("teacher-dense", "F",
	 "synthetic: weight of dense features in the\n"
	 "hidden truth (0: clicks depend on ids only)"),
     F64(dense_weight, -100, 100)},
    {HEADING("store:")},
    {OPT("hbm-mb", "F", "HBM tier capacity in MiB (0: none)"),
     F64(hbm_mb, 0, 1 << 24)},
    {OPT("ddr-mb", "F", "DDR tier capacity in MiB"), F64(ddr_mb, 0, 1 << 24)},
    {OPT("policy", "NAME", "lru, lfu, tinylfu or wtinylfu"),
     FUNC(parse_policy)},
    {OPT("lookahead", "K",
	 "hand the store the ids of the next K batches\n"
	 "(et_lookahead, 1..32; 0: none)"),
     INT(lookahead, 0, ET_MAX_LOOKAHEAD)},
    {OPT("dtype", "NAME", "f32, f16 or bf16 storage"), FUNC(parse_dtype)},
    {OPT("keyed", NULL,
	 "keyed tables: an id is any u64 key with a row of\n"
	 "its own (Criteo: a hash of the feature and its\n"
	 "value; synthetic: the row drawn, mixed over u64)"),
     SET(keyed)},
    {OPT("admit", "N",
	 "--keyed: store an id once seen in N update calls,\n"
	 "dropping its gradients until then (1..15; 1, the\n"
	 "default: at its first update)"),
     INT(admit, 1, 15)},
    {OPT("expire-after", "T",
	 "--keyed: each checkpoint erases the ids not updated\n"
	 "in the last T checkpoints (needs --checkpoint-every:\n"
	 "without checkpoints nothing expires)"),
     U64(expire_after, 1, UINT32_MAX)},
    {OPT("max-keys", "M",
	 "--keyed: each checkpoint leaves at most M ids in\n"
	 "each table, those updated longest ago leaving first"),
     U64(max_keys, 1, UINT64_MAX / 2)},
    {OPT("half-life", "H",
	 "--max-keys: keep the ids updated in the most\n"
	 "checkpoints instead, each checkpoint's weight\n"
	 "halving every H checkpoints (1..2^20)"),
     U64(half_life, 1, 1u << 20)},
    {OPT("dir", "DIR",
	 "store directory (default: a fresh one under\n"
	 "/var/tmp, removed at the end unless --keep)"),
     STRING(dir)},
    {OPT("keep", NULL, "keep the default store directory"), SET(keep)},
    {OPT("no-prefetch", NULL, "do not prefetch the next batch"),
     CLEAR(prefetch)},
    {OPT("slices", "N",
	 "cut each batch into N slices whose MLP\n"
	 "gradients add along a fixed tree (1)"),
     INT(slices, 1, 1 << 20)},
#ifdef ET_WITH_MPI
    {OPT("plan", "NAME",
	 "table (whole tables per rank) or row\n"
	 "(each table's rows over all ranks)"),
     FUNC(parse_plan)},
#endif
    {HEADING("run:")},
    {OPT("threads", "N", "BLAS threads (default: CPUs - 1, at least 1)"),
     INT(threads, 1, 1024)},
    {OPT("store-threads", "N",
	 "threads of the store's gathers and updates (default\n"
	 "1, at most 64); any count gives the same bits"),
     INT(store_threads, 1, 64)},
    {OPT("prefetch-thread", "B",
	 "1 (default): the prefetch's work runs on the store's\n"
	 "thread, beside the dense step; 0: inside et_prefetch"),
     INT(pf_thread, 0, 1)},
    {OPT("eval-every", "N", "held-out evaluation every N steps (0: end)"),
     U64(eval_every, 0, UINT64_MAX)},
    {OPT("eval-samples", "N", "size of the held-out set"),
     U64(eval_samples, 1, 1ULL << 26)},
    {OPT("log-every", "N", "a log line every N steps (0: none)"),
     U64(log_every, 0, UINT64_MAX)},
    {OPT("checkpoint-every", "N", "checkpoint every N steps (0: never)"),
     U64(ckpt_every, 0, UINT64_MAX)},
    {OPT("export-delta", "DIR",
	 "after each checkpoint, write what it changed since\n"
	 "the last delta (the run's first: since nothing)\n"
	 "to DIR/delta-FROM-TO.etd, for a serving copy:\n"
	 "embtier-build --apply-delta applies them in\n"
	 "order (needs --checkpoint-every); exported\n"
	 "beside the next steps. Under MPI each rank its\n"
	 "shard's, to DIR/rank-N/"),
     STRING(export_delta)},
    {OPT("resume", NULL, "continue from DIR's last checkpoint"), SET(resume)},
    {OPT("reshard-from", "SRC",
	 MPI_HELP("continue, in DIR (new), from the last checkpoint of\n"
		  "the run in SRC made at another rank count or plan")),
     FUNC(parse_reshard)},
    {OPT("json", NULL, "final metrics as one JSON object on stdout"),
     SET(json)},
    {OPT("quiet", NULL, "no progress bar"), .letter = 'q', SET(quiet)},
    {OPT("help", NULL, "this text"), .letter = 'h', FUNC(show_help)},
};

#define NDEFS (sizeof(opt_defs) / sizeof(opt_defs[0]))

/* The column of the help texts: the flags are padded to it. */
#define HELP_COL 23

static void usage(FILE *f)
{
	fprintf(f, "usage: embtier-train [options]\n"
		   "Trains a DLRM whose embedding tables live in an embtier "
		   "store.\n"
		   "\n");
	for (size_t i = 0; i < NDEFS; i++) {
		const struct opt_def *d = &opt_defs[i];
		char flag[64];
		const char *p = d->help;
		int n = 0;

		if (d->heading)
			fprintf(f, "%s\n", d->heading);
		if (!d->name || !d->help)
			continue;
		if (d->letter)
			n = snprintf(flag, sizeof(flag), "-%c, ", d->letter);
		snprintf(flag + n, sizeof(flag) - n, "--%s%s%s", d->name,
			 d->arg ? " " : "", d->arg ? d->arg : "");
		fprintf(f, "  %-*s ", HELP_COL - 3, flag);
		/* the help's later lines start under its first */
		for (n = (int)strcspn(p, "\n"); p[n];
		     n = (int)strcspn(p, "\n")) {
			fprintf(f, "%.*s\n%*s", n, p, HELP_COL, "");
			p += n + 1;
		}
		fprintf(f, "%s\n", p);
	}
}

/* ---------------------------------------------------------- parsing */

/* Takes value s (NULL for an option without one) as d says. */
static int opt_store(struct opts *o, const struct opt_def *d, const char *s)
{
	char *field = (char *)o + d->off;
	uint64_t u;
	double v;
	int ret;

	switch (d->kind) {
	case KIND_SET:
	case KIND_CLEAR:
		*(bool *)field = d->kind == KIND_SET;
		return 0;
	case KIND_STRING:
		*(const char **)field = s;
		return 0;
	case KIND_U64:
		return parse_count(d->name, s, d->lo, d->hi, (uint64_t *)field);
	case KIND_INT:
		ret = parse_count(d->name, s, d->lo, d->hi, &u);
		if (!ret)
			*(int *)field = (int)u;
		return ret;
	case KIND_F32:
		ret = parse_real(d->name, s, d->flo, d->fhi, &v);
		if (!ret)
			*(float *)field = (float)v;
		return ret;
	case KIND_F64:
		return parse_real(d->name, s, d->flo, d->fhi, (double *)field);
	case KIND_FUNC:
		return d->parse(o, d->name, s);
	}
	return -EINVAL;
}

/* getopt_long's value for option i: its letter, or 256 + i. */
static int opt_val(size_t i)
{
	return opt_defs[i].letter ? opt_defs[i].letter : 256 + (int)i;
}

/* The option getopt_long returned c for, or NULL. */
static const struct opt_def *opt_find(int c)
{
	for (size_t i = 0; i < NDEFS; i++)
		if (opt_defs[i].name && opt_val(i) == c)
			return &opt_defs[i];
	return NULL;
}

/* getopt_long's array of options (NDEFS + 1) and its string of short
 * ones (2 NDEFS + 2), from the table. */
static void getopt_arrays(struct option *longs, char *shorts)
{
	int n = 0;

	*shorts++ = ':'; /* a missing value: ':', not '?' */
	for (size_t i = 0; i < NDEFS; i++) {
		const struct opt_def *d = &opt_defs[i];

		if (!d->name)
			continue;
		longs[n++] = (struct option){
		    .name = d->name,
		    .has_arg = d->arg ? required_argument : no_argument,
		    .val = opt_val(i)};
		if (d->letter)
			*shorts++ = d->letter;
		if (d->letter && d->arg)
			*shorts++ = ':';
	}
	longs[n] = (struct option){0};
	*shorts = '\0';
}

/* The flags, each over what the preset set. */
static int parse_flags(int argc, char **argv, struct opts *o)
{
	struct option longs[NDEFS + 1];
	char shorts[2 * NDEFS + 2];
	int c;

	getopt_arrays(longs, shorts);
	opterr = 0;
	while ((c = getopt_long(argc, argv, shorts, longs, NULL)) != -1) {
		const struct opt_def *d;
		int ret;

		if (c == ':') {
			cli_usage_error("%s needs a value", argv[optind - 1]);
			return -EINVAL;
		}
		d = opt_find(c);
		if (!d) {
			cli_usage_error("unknown option '%s'",
					argv[optind - 1]);
			return -EINVAL;
		}
		ret = opt_store(o, d, optarg);
		if (ret)
			return ret;
	}
	if (optind < argc) {
		cli_usage_error("unexpected argument '%s'", argv[optind]);
		return -EINVAL;
	}
	return 0;
}

/* What the options must agree on among themselves. */
static int check_opts(const struct opts *o)
{
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
	if ((o->admit || o->expire_after || o->max_keys) && !o->keyed) {
		cli_usage_error("%s needs --keyed (a row-indexed table keeps "
				"every row)",
				o->admit	  ? "--admit"
				: o->expire_after ? "--expire-after"
						  : "--max-keys");
		return -EINVAL;
	}
	if (o->half_life && !o->max_keys) {
		cli_usage_error("--half-life needs --max-keys (it orders the "
				"bound)");
		return -EINVAL;
	}
	if (o->export_delta && !o->ckpt_every) {
		cli_usage_error("--export-delta needs --checkpoint-every (a "
				"delta is exported after each checkpoint)");
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
	return 0;
}

/* What the flags left to be worked out. */
static void fill_defaults(struct opts *o)
{
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
}

int parse_args(int argc, char **argv, int rank, int nranks, struct opts *o)
{
	const char *preset = "default";
	int ret;

	/* the preset first, whatever its place: flags override it */
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--preset") && i + 1 < argc)
			preset = argv[i + 1];
		else if (!strncmp(argv[i], "--preset=", 9))
			preset = argv[i] + 9;
	}
	if (apply_preset(o, preset, rank, nranks)) {
		cli_usage_error("--preset: unknown preset '%s' (default, "
				"trillion)",
				preset);
		return -EINVAL;
	}
	ret = parse_flags(argc, argv, o);
	if (!ret)
		ret = check_opts(o);
	if (ret)
		return ret;
	fill_defaults(o);
	return 0;
}
