/*
 * trainer.h - what the files of embtier-train share: the state of a run
 * (struct trainer) and the functions one file calls in another.
 *
 *   train.c    main and the loop of steps (the design is described there)
 *   options.c  the command line (options.h)
 *   setup.c    the model, the data, the run directory and the store
 *   state.c    the dense state saved with each checkpoint, and read back
 *   step.c     a training step and the held-out evaluation
 *   report.c   log lines, the weights checksum and the final summary
 */
#ifndef ET_TRAIN_TRAINER_H
#define ET_TRAIN_TRAINER_H

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "data.h"
#include "embtier.h"
#include "gradsum.h"
#include "idset.h"
#include "model.h"
#include "options.h"
#include "progress.h"
#ifdef ET_WITH_MPI
#include "dist.h"
#endif

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
	/* --export-delta: the commit the next delta starts after (the last
	 * one exported by this process, 0 before its first), and the totals
	 * of the deltas exported */
	uint64_t delta_since;
	char delta_src[PATH_MAX]; /* the store directory exported: dir, or
				   * under MPI this rank's shard, dir/rank-N */
	char delta_out[PATH_MAX]; /* where its deltas go: --export-delta, or
				   * under MPI its rank-N */
	uint64_t deltas, delta_rows, delta_tombs, delta_bytes;
	double delta_s;	     /* the exports' own time */
	double delta_wait_s; /* training waited for them */
	/* the export in flight, on a thread of its own (state.c) */
	struct delta_job {
		struct trainer *tr;
		char path[PATH_MAX];
		uint64_t since, to, step;
		struct et_delta_info di;
		double secs;
		int ret;
		char err[256];
	} dj;
	pthread_t delta_th;
	bool delta_running;
	double open_s; /* store and tables opened in */
	double run_s, step_s, stall_s, flush_s, ckpt_s;
	struct et_stats st0;	/* store counters when training began */
	struct et_stats st_end; /* and when its last step ended: the summary's
				 * stall and hit ratios, not the closing
				 * checkpoint's or the checksum's */
	struct store_time eval_tm;     /* the store's time in evaluations */
	struct store_time eval_tm_end; /* of those before st_end */
	double loss_sum;	       /* over this run's steps */
	double loss_avg; /* moving average, for the progress bar */
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

/* What a run ends with: collect() fills it in for report(). */
struct results {
#ifdef ET_WITH_MPI
	struct dist_figures mine; /* this rank's, before the sums */
#endif
	uint64_t checksum;
	uint64_t logical_params, rows_touched, rows_bound, blocks_written;
	uint64_t disk_bytes, logical_bytes, maxrss;
	uint64_t keys_stored; /* keyed tables: ids with a row on disk */
	struct et_stats st;
	double eval_s;
};

/* 64-bit FNV-1a. */
#define FNV_BASIS 0xcbf29ce484222325ULL

static inline uint64_t fnv(uint64_t h, const void *p, size_t n)
{
	const unsigned char *c = p;

	for (size_t i = 0; i < n; i++) {
		h ^= c[i];
		h *= 0x100000001b3ULL;
	}
	return h;
}

static inline uint64_t fnv_u64(uint64_t h, uint64_t v)
{
	return fnv(h, &v, sizeof(v));
}

/* setup.c */

/* Prints "what: <err>" and returns err (-EINVAL for 0). */
int fail(const char *what, int err);
int data_fail(const char *path, const struct data_src *d, int err);
/* Everything before the first step: model, data, directory, store, and
 * under --resume the checkpoint's state. */
int setup(struct trainer *tr);
void teardown(struct trainer *tr);
void remove_dir(struct trainer *tr);

/* state.c */

uint64_t config_fingerprint(const struct trainer *tr, bool row_wise);
int checkpoint_write(struct trainer *tr);
/* Starts the delta of the last checkpoint on a thread; delta_join waits
 * for the one in flight (if any), prints its line and adds it up. */
int delta_export(struct trainer *tr);
int delta_join(struct trainer *tr);
int checkpoint_load(struct trainer *tr);
#ifdef ET_WITH_MPI
int reshard_check(void *arg, void *const *dense, const size_t *len, int nold,
		  char *msg, size_t cap);
#endif

/* step.c */

int evaluate(struct trainer *tr);
int next_batch(struct trainer *tr, struct batch *b);
int train_step(struct trainer *tr);

/* report.c */

/* Adds the store's clocks of b - a to *t. */
void store_time_add(struct store_time *t, const struct et_stats *a,
		    const struct et_stats *b);
int log_line(struct trainer *tr);
void eval_line(struct trainer *tr);
void delta_line(struct trainer *tr, uint64_t step, const char *path,
		const struct et_delta_info *di, double secs);
int weights_checksum(struct trainer *tr, uint64_t *out);
int collect(struct trainer *tr, struct results *r);
void report(struct trainer *tr, const struct results *r);

#endif
