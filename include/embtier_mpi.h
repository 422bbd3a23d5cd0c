/*
 * embtier_mpi.h - embtier sharded over MPI ranks (libembtier_mpi, built
 * when an MPI compiler is present; libembtier itself has no MPI in it).
 *
 * Every rank opens its own et_store over its shard, in DIR/rank-R, and the
 * ranks together serve the tables of one model. Each table has a plan:
 *
 *  - table-wise: the whole table lives on one rank. Tables are placed
 *    greedily, largest rows x dim first (ties: lower index), each on the
 *    least loaded rank (ties: lower rank): the same placement on every rank
 *    and in every run with the same tables and rank count.
 *  - row-wise: row r of a table of R rows lives on rank floor(r * N / R)
 *    (contiguous ranges of equal size). Each rank's table file has the
 *    table's full logical size and keeps rows at their global index, so
 *    the initializer (a function of the global row) gives the same values
 *    whatever the rank count; rows a rank does not own are never written
 *    and cost nothing (table files are sparse).
 *
 * A keyed table (ET_TABLE_KEYED, rows 0: ids are any u64 key) is placed
 * the same way table-wise. Row-wise, each key falls by a fixed hash into
 * one of ETM_KEY_BUCKETS virtual buckets (etm_key_bucket), and rank r owns
 * the contiguous buckets b with floor(b * N / ETM_KEY_BUCKETS) = r: the
 * buckets never change, so another rank count moves whole buckets. Every
 * rank's shard is a keyed table of the same parameters, keys stay keys,
 * and a key never stored reads as the initializer's value of (seed, key)
 * at any rank count.
 *
 * One training step, for the local share of a global batch (bags in global
 * sample order: rank 0's samples first, then rank 1's...):
 *
 *   etm_send_ids(next)     ids go to their owners (all-to-all), which keep
 *                          them for the step that uses them and, if asked,
 *                          et_prefetch them: one batch ahead, as alone
 *   etm_forward(NULL)      owners gather and answer (all-to-all): pooled
 *                          bags (table-wise) or the rows (row-wise), which
 *                          the requester pools in id order
 *   etm_backward(grads)    gradients go to the owners (all-to-all), which
 *                          apply the optimizer with et_update_pooled
 *   etm_allreduce(dense)   sum of the ranks' dense gradients, fixed order
 *
 * Results are the same bits at any rank count: an owner sees the bags of
 * the global batch concatenated in rank order, i.e. in global sample order,
 * so a row receives its gradients in the same order as in a single store,
 * and a pooled bag is summed in id order exactly as et_gather_pooled does.
 * Row-wise owners return rows rather than partial sums for that reason
 * (a bag spread over k owners costs k - 1 more vectors; bags of one id,
 * the common case, cost nothing more). etm_allreduce sums the rank buffers
 * along a balanced binary tree over ranks in rank order, whatever the
 * timing.
 *
 * Every function is collective over the communicator unless it says
 * otherwise: all ranks call it, in the same order, with the same table
 * arguments.
 *
 * embtier.h's conventions hold here too. A function returns 0, a negative
 * errno, one of embtier.h's codes or one of the ETM_E codes below
 * (etm_strerror() explains any of them). Every function that can fail
 * clears et_errdetail() on entry, and a bad argument, or a checkpoint it
 * refuses, says there why (the argument, or the rank, step and rule; paths
 * are named by their argument, dir or src, never quoted). A collective
 * function's error is the same on every rank, and so is its detail: that
 * of the lowest rank that met the error, or, if that rank left none and
 * there are several, "rank R: " and etm_strerror()'s message. Only where
 * a function says so may ranks differ; then a caller should MPI_Abort.
 */
#ifndef EMBTIER_MPI_H
#define EMBTIER_MPI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <mpi.h>

#include "embtier.h"

#ifdef __cplusplus
extern "C" {
#endif

/*
 * ETM_API marks what libembtier_mpi exports, as ET_API does for
 * libembtier: the library is built with -fvisibility=hidden and ETM_BUILD
 * defined, so that nothing but the functions declared here is visible to
 * the dynamic linker, and libembtier_mpi.a defines no global symbol
 * outside them either (make check-symbols). For callers ETM_API is empty.
 */
#if defined(ETM_BUILD) && defined(__GNUC__)
#define ETM_API __attribute__((visibility("default")))
#else
#define ETM_API
#endif

/* ------------------------------------------------------------------ errors */

/*
 * libembtier_mpi's own codes lie in [ETM_ERR_LAST, ETM_ERR_BASE],
 * contiguous, from -31001 down: below embtier.h's [ET_ERR_LAST,
 * ET_ERR_BASE] (from -30901 down; libembtier keeps its codes above
 * ETM_ERR_BASE, and this library's build fails if it ever does not), so
 * the two never collide, and far outside errno's -4095..-1.
 * ETM_ERR_BASE itself is not a code.
 */
enum {
	ETM_ERR_BASE = -31000,
	ETM_ENRANKS = -31001, /* the global checkpoint was written by another
			       * rank count than the communicator's: resume
			       * at that count, or continue it in a new
			       * directory with etm_reshard */
	ETM_ETORN = -31002,   /* the ranks' stores do not all hold the step
			       * the global checkpoint record names (a crash
			       * between the ranks' commits, or a shard
			       * written and closed past it): a store keeps
			       * only its last checkpoint, so it can be
			       * neither resumed nor resharded */
	ETM_ERR_LAST = -31002,
};

/* A message for any code this library returns: its own, embtier.h's (as
 * et_strerror) or a negated errno. Static, valid forever. Not collective. */
ETM_API const char *etm_strerror(int err);

/* ----------------------------------------------------------------- stores */

typedef struct etm etm;

typedef enum etm_plan {
	ETM_TABLE_WISE = 0,
	ETM_ROW_WISE = 1,
} etm_plan;

/* One table of the sharded model, as the whole model sees it. */
struct etm_table_spec {
	const char *name;	  /* as for et_table_create */
	struct et_table_params p; /* global shape; rows are global (0, with
				   * ET_TABLE_KEYED in flags: keyed) */
	etm_plan plan;
};

/*
 * Keyed tables, row-wise: the virtual buckets keys are placed by. A key's
 * bucket is the top 12 bits of h, where h = key, then twice
 * h ^= h >> 32, h *= 0xd6e8feb86659fd93, then h ^= h >> 32 once more (a
 * bijection of the u64); rank floor(bucket * N / ETM_KEY_BUCKETS) of N
 * owns it. Both are fixed, whatever the rank count, and part of a sharded
 * store's format: its shards hold each key on its bucket's owner.
 */
#define ETM_KEY_BUCKETS 4096u

/* The bucket of a key (as above), 0 .. ETM_KEY_BUCKETS - 1. Not
 * collective. */
ETM_API uint32_t etm_key_bucket(uint64_t key);

/* etm_open flag: the shard directories must exist and the global
 * checkpoint record must say this rank count (else ETM_ENRANKS, on every
 * rank, before anything is created). A checkpoint of another rank count
 * is continued with etm_reshard. */
#define ETM_OPEN_RESUME 0x1u

/*
 * Opens rank R's store in dir/rank-R (creating dir and it unless
 * ETM_OPEN_RESUME). cfg is each rank's own tiers (NULL: the defaults,
 * as for et_store_open). comm is duplicated.
 */
ETM_API int etm_open(MPI_Comm comm, const char *dir,
		     const struct et_store_config *cfg, unsigned flags,
		     etm **out);

/* Closes the local store (et_store_close) and frees m. Not collective.
 * NULL is harmless. */
ETM_API int etm_close(etm *m);

/*
 * Declares the model's n tables (1..4096) and creates (create) or opens
 * the local shard of each: a table-wise table only on its owner, a
 * row-wise one on every rank. Called once, after etm_open. Table-wise
 * placement counts a keyed table, whose size is not known ahead, as
 * ET_MAX_ROWS rows: keyed tables are placed first, spread over the ranks,
 * and row-indexed tables fill in around them.
 */
ETM_API int etm_tables(etm *m, const struct etm_table_spec *spec, int n,
		       bool create);

/* Not collective. */
ETM_API int etm_rank(const etm *m);
ETM_API int etm_nranks(const etm *m);
ETM_API et_store *etm_store(etm *m); /* the local store */
/* The local store's table id of table t, or -1 if this rank holds none. */
ETM_API int etm_local_table(const etm *m, int t);
/* Owner of row id of table t (of a keyed table: of key id, any u64). */
ETM_API int etm_owner(const etm *m, int t, uint64_t id);
/* Rows of table t this rank owns; 0 for a keyed table, whose keys have no
 * count ahead (its shard's stored keys: et_table_info's rows_logged). */
ETM_API uint64_t etm_owned_rows(const etm *m, int t);

/* One table's bags of the local batch (as for et_gather_pooled). */
struct etm_bags {
	const uint64_t *ids;
	const uint64_t *offsets; /* nbags + 1 */
	size_t nbags;
};

/*
 * Sends the ids of the local batch (bags[t] for every table) to their
 * owners, for the next etm_forward(m, NULL, ...); with prefetch, each owner
 * then calls et_prefetch with all the rows it received. The buffers are
 * copied.
 */
ETM_API int etm_send_ids(etm *m, const struct etm_bags *bags, bool prefetch);

/*
 * Pooled bags of every table: out[t] receives bags[t].nbags x dim f32.
 * bags NULL: the batch of the last etm_send_ids (each batch's ids then
 * travel once); else the ids go now, and are not prefetched. mode is
 * the pooling of every table.
 */
ETM_API int etm_forward(etm *m, const struct etm_bags *bags, et_pool mode,
			float *const *out);

/*
 * The backward of the last etm_forward: grads[t] holds nbags x dim f32
 * per table, the gradient of each pooled bag. Owners apply them with
 * et_update_pooled.
 */
ETM_API int etm_backward(etm *m, const float *const *grads,
			 const struct et_update_params *up);

/*
 * The ids of table t this rank owns in the batch of the last etm_forward,
 * in the order its store saw them (global sample order). Valid until the
 * next etm_forward or etm_send_ids. Not collective.
 */
ETM_API int etm_owned_ids(const etm *m, int t, const uint64_t **ids, size_t *n);

/*
 * Replaces buf (n floats, the same n on every rank) by the sum of every
 * rank's buf, on every rank: a reduce-scatter then an all-gather, each
 * chunk summed along a balanced binary tree over ranks in rank order
 * (split at lo + (hi - lo) / 2), so the bits depend on the buffers only.
 */
ETM_API int etm_allreduce(etm *m, float *buf, size_t n);

/* Bytes this rank sent to other ranks (its own share excluded), and the
 * analytic minimum of the same traffic: 8 bytes per id sent to a remote
 * owner, one dim-vector per (bag, remote owner) each way, and
 * 2 (N - 1) / N x 4 bytes per all-reduced float. */
struct etm_traffic {
	uint64_t ids;	  /* ids sent to owners */
	uint64_t meta;	  /* counts, headers, bag lengths */
	uint64_t vectors; /* pooled bags or rows sent back */
	uint64_t grads;	  /* gradients sent to owners */
	uint64_t reduce;  /* all-reduce */
	uint64_t min_ids, min_vectors, min_grads, min_reduce;
	uint64_t steps; /* etm_backward calls */
};

/* Not collective. */
ETM_API void etm_get_traffic(const etm *m, struct etm_traffic *t);

/*
 * A checkpoint of all ranks, committed by all or none: each rank makes an
 * et_checkpoint of its store with len bytes of its dense state and step;
 * once every rank has, rank 0 writes (atomically) the global record
 * dir/etm-checkpoint naming step and the rank count. A crash before that
 * leaves the previous global record, and etm_checkpoint_read refuses the
 * ranks whose store went past it (ETM_ETORN).
 */
ETM_API int etm_checkpoint(etm *m, uint64_t step, const void *dense,
			   size_t len);

/*
 * The last global checkpoint: *step, and this rank's dense state in *dense
 * (malloc()ed, free() it) of *len bytes. Every rank gets the same verdict,
 * and the same et_errdetail() saying which: -ENOENT if there is none,
 * ETM_ENRANKS if it was written by another rank count, ETM_ETORN if some
 * rank's store holds another step or none (a crash between a rank's
 * commit and the global record; stores keep only their last checkpoint,
 * so such a run cannot be resumed), ET_EHDRSUM if the global record is
 * damaged, ET_EHEADER if a rank's store checkpoint is not a shard of this
 * model's. On error *dense is NULL.
 */
ETM_API int etm_checkpoint_read(etm *m, uint64_t *step, void **dense,
				size_t *len);

/*
 * Reshards: makes the sharded store in opts->dir, at this communicator's
 * rank count and with the plans of opts->spec, from the last global
 * checkpoint of the sharded store in opts->src, written at any rank count
 * with any plans; or from the last checkpoint of a plain store (src opened
 * with et_store_open, no MPI; its dense state is handed over whole, as
 * rank 0 of 1), so that a run started on one process goes on over many.
 * Every row a shard of src holds a value for (as of that checkpoint:
 * values and optimizer state, bit for bit) is written to its new owner's
 * store (et_write_rows_state); other rows stay lazy, and read as the
 * initializer's as before. Of a keyed table, every key a shard of src
 * stores (et_tfile_rows) goes to the new owner of its bucket: at another
 * rank count, whole buckets move. Tables of src that spec does not name
 * are left out. src is only read (each shard by table file and commit
 * record, never opened as a store), so it stays a valid checkpoint
 * whatever happens, and must be visible to every rank (one machine or a
 * shared file system). dir must not exist, or be empty. Memory: besides
 * its new store, a rank holds the row-log index of one old table file at
 * a time (15 to 20 bytes a logged row, plus 8 for a sorted copy of its
 * ids).
 *
 * Once the old ranks' dense states are read (info->dense[r], without
 * etm's shard header, on every rank), opts->check (if non-NULL) is called
 * on every rank, before anything is made: a non-zero return refuses the
 * reshard with it, and with the et_errdetail() it left (say why with
 * et_error_set). On success *out is open as by etm_open and etm_tables,
 * with nothing committed: the caller makes each rank's dense state from
 * the old ranks' and commits with etm_checkpoint(*out, info->step, ...);
 * until then dir holds no global record and a resume from it is refused.
 *
 * Refused on every rank, with the reason in et_errdetail(), before
 * anything is made: src without a global record (-ENOENT) or with a
 * damaged one (ET_EHDRSUM), a shard that is not one of it (ET_EHEADER),
 * a shard that committed another step or none, or was closed cleanly past
 * it (ETM_ETORN), a table of spec in no shard of src, or with another
 * shape (keyed or row-indexed included), storage type, optimizer or
 * initializer (spec's zeros taken as et_table_params' defaults;
 * ET_EMISMATCH), dir not empty (-EEXIST), check's verdict. After the
 * copy: a shard of src that committed meanwhile (a run still using it:
 * ET_EMISMATCH), and I/O errors; dir is then left made, without a global
 * record, and must be removed before another try. Free info with
 * etm_reshard_free after a success; after a failure it holds nothing to
 * free.
 */
struct etm_reshard_info {
	uint64_t step;	/* of src's last global checkpoint (plain: the
			 * store's et_checkpoint id) */
	bool plain;	/* src was one plain store */
	int nranks;	/* src's rank count */
	void **dense;	/* [nranks]: src rank r's dense state */
	size_t *len;	/* [nranks]: its bytes */
	uint64_t rows;	/* rows this rank wrote */
	uint64_t bytes; /* of their values and state */
	double seconds; /* this rank's copy */
};

/* opts->check: 0 lets the reshard go on; anything else refuses it. */
typedef int (*etm_reshard_check)(void *arg,
				 const struct etm_reshard_info *info);

/* What etm_reshard makes, and from what. Zero fields other than the
 * required ones take the defaults shown. */
struct etm_reshard_opts {
	const char *src;		   /* the old store (required) */
	const char *dir;		   /* the new one (required) */
	const struct etm_table_spec *spec; /* the model's tables, with their
					    * new plans (required) */
	int ntables;			   /* of spec: 1..4096 (required) */
	const struct et_store_config *cfg; /* each rank's tiers, as for
					    * etm_open; NULL: the
					    * defaults */
	etm_reshard_check check;	   /* NULL: none */
	void *check_arg;		   /* check's first argument */
};

ETM_API int etm_reshard(MPI_Comm comm, const struct etm_reshard_opts *opts,
			struct etm_reshard_info *info, etm **out);

/* Frees what etm_reshard put in info (not info). Not collective. */
ETM_API void etm_reshard_free(struct etm_reshard_info *info);

#ifdef __cplusplus
}
#endif

#endif /* EMBTIER_MPI_H */
