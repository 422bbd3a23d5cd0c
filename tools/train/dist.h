/*
 * dist.h - embtier-train's hooks for a run over MPI ranks (built into
 * embtier-train-mpi only, with -DET_WITH_MPI; the plain trainer has no MPI
 * in it). The trainer calls them at its gather, prefetch, update and
 * dense-gradient points; they talk to the sharded store of embtier_mpi.h.
 *
 * The global batch of --batch samples is cut into --slices slices; rank r
 * trains on slices [r S / N, (r + 1) S / N), the samples of the global
 * batch in that range (synthetic data is read from its own position).
 */
#ifndef ET_TRAIN_DIST_H
#define ET_TRAIN_DIST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "data.h"
#include "embtier.h"

struct dist;

/* MPI_Init; rank and size of the world. */
int dist_init(int *argc, char ***argv, int *rank, int *nranks);
/* MPI_Finalize, or MPI_Abort if a rank failed on its own. */
void dist_end(bool abort_all);
/* Whether err is what every rank got from the last collective hook (a
 * refused resume, say): the run can end without MPI_Abort. */
bool dist_agreed(int err);

/* A run directory: rank 0 makes a fresh one under /var/tmp, every rank
 * learns its name. */
int dist_make_dir(char *dir, size_t len);

struct dist_table {
	char name[32];
	struct et_table_params p;
};

/* Opens this rank's shard of the store under dir (dir/rank-R) and the
 * tables; *tid receives each table's local id (-1: not held here).
 * row_wise picks the plan of every table. reshard_from (non-NULL): dir is
 * made from that sharded store's last checkpoint (etm_reshard), to be
 * committed by the caller's first checkpoint. On error msg says why (the
 * same on every rank). */
/* A reshard's check of the old ranks' dense states, before anything is
 * made: 0, or an error and its reason in msg. */
typedef int (*dist_reshard_check)(void *arg, void *const *dense,
				  const size_t *len, int nold, char *msg,
				  size_t msglen);

int dist_open(struct dist **out, const char *dir, const char *reshard_from,
	      dist_reshard_check check, void *check_arg,
	      const struct et_store_config *cfg, bool resume, bool row_wise,
	      const struct dist_table *tables, int ntables, int global_batch,
	      int *tid, char *msg, size_t msglen);
et_store *dist_store(struct dist *d);
/* Rows of table t this rank owns. */
uint64_t dist_owned_rows(struct dist *d, int t);
int dist_close(struct dist *d);
/* Removes this rank's shard directory, then (rank 0) dir itself. */
void dist_remove_dirs(const char *dir);

/* The local share of the next global batch from src (which stays at the
 * global position); b->pos and b->end are global positions. */
int dist_next_batch(struct dist *d, struct data_src *src, struct batch *b);

/* Ids of a batch to their owners ahead of its step (prefetched there). */
int dist_send_ids(struct dist *d, const struct batch *b, bool prefetch);
/* Pooled bags into emb (table t at emb + t * stride): of the batch sent
 * ahead (b NULL) or of b (its ids go now). */
int dist_forward(struct dist *d, const struct batch *b, float *emb,
		 size_t stride);
int dist_backward(struct dist *d, const float *grad, size_t stride, float lr);
/* Fixed-order sum of the ranks' dense gradients (etm_allreduce). */
int dist_allreduce(struct dist *d, float *buf, size_t n);
/* Sum over ranks, for figures. */
double dist_sum(double v);
void dist_sum_u64(uint64_t *v, int n);
/* Ids of table t this rank owns and updated in the last step. */
int dist_owned_ids(struct dist *d, int t, const uint64_t **ids, size_t *n);

/* A checkpoint committed by all ranks or none; its read back with the
 * ranks' agreement (msg says why not). */
int dist_checkpoint(struct dist *d, uint64_t step, const void *buf, size_t len);
int dist_checkpoint_read(struct dist *d, uint64_t *step, void **dense,
			 size_t *len, char *msg, size_t msglen);
/* After a reshard: the old checkpoint's step and the old ranks' dense
 * states (-ENOENT if the store was not resharded). */
int dist_resharded(struct dist *d, uint64_t *step, int *nranks,
		   void *const **dense, const size_t **len);
/* Rows and bytes every rank copied, and the slowest rank's seconds. */
void dist_reshard_figures(struct dist *d, uint64_t *rows, uint64_t *bytes,
			  double *seconds);
/* Whether this rank owns row id of table t. Not collective. */
bool dist_owns(struct dist *d, int t, uint64_t id);

/* Every rank's rows of a table (ids sorted on each rank, rank ranges
 * increasing), concatenated on rank 0 into *all_ids / *all_vals
 * (malloc()ed there; NULL elsewhere). */
int dist_table_rows(struct dist *d, const uint64_t *ids, const float *vals,
		    size_t n, int dim, uint64_t **all_ids, float **all_vals,
		    size_t *all_n);

/* Per-rank figures, printed by rank 0 beside the all-to-all traffic. */
struct dist_figures {
	double step_s, stall_s, samples;
	double hbm_hit, ddr_hit;
	uint64_t owned_params, rows_touched, disk_bytes, mem_peak, maxrss;
};
void dist_report(struct dist *d, const struct dist_figures *f, FILE *out);

#endif
