/*
 * options.h - embtier-train's command line: the settings of a run (struct
 * opts), filled from a preset and then the flags (options.c).
 */
#ifndef ET_TRAIN_OPTIONS_H
#define ET_TRAIN_OPTIONS_H

#include <stdbool.h>
#include <stdint.h>

#include "embtier.h"
#include "model.h"

#define MAX_TABLES 1024

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
	const char *export_delta; /* a delta after each checkpoint, here */
	bool resume;
	const char *reshard_from; /* MPI: a sharded run's directory */
	bool json;
	bool quiet;
	bool keyed;	       /* keyed tables (ET_TABLE_KEYED) */
	int admit;	       /* et_key_policy.admit_after; 0: not given */
	uint64_t expire_after; /* et_key_policy.expire_after; 0: off */
	uint64_t max_keys;     /* et_key_policy.max_keys; 0: off */
	uint64_t half_life;    /* et_key_policy.half_life; 0: off */
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

/*
 * Fills *o from the preset (--preset, "default" without it) and then the
 * flags, for this process's rank of nranks (0 and 1 without MPI), and
 * fills in what the flags left to defaults. Returns 0, or -EINVAL after a
 * usage error on stderr. --help prints the usage on stdout and exits.
 */
int parse_args(int argc, char **argv, int rank, int nranks, struct opts *o);

#endif
