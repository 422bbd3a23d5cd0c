/*
 * etm_impl.h - the inside of an etm handle (embtier_mpi.h), shared by the
 * files of libembtier_mpi: shard.c (opening, plans, checkpoints),
 * exchange.c (the all-to-all steps) and allreduce.c.
 *
 * A handle is used by one thread at a time, like a store.
 */
#ifndef ETM_IMPL_H
#define ETM_IMPL_H

#include <stdint.h>

#include "embtier_mpi.h"

/* A buffer that grows by doubling and is never shrunk. */
struct etm_vec {
	void *p;
	size_t cap; /* bytes */
};

int etm_vec_reserve(struct etm_vec *v, size_t bytes);
void etm_vec_free(struct etm_vec *v);

struct etm_tbl {
	uint64_t rows; /* 0 for a keyed table */
	uint32_t dim;
	bool keyed; /* ET_TABLE_KEYED: ids are keys, placed by bucket */
	etm_plan plan;
	int owner; /* table-wise: its rank */
	int local; /* local store table id, or -1 */
};

/*
 * One table of one batch as routed. Requester side: its bags cut into
 * sub-bags, one per (bag, owner) with ids there, grouped by owner rank
 * (in bag order within an owner); gids holds their ids in the same
 * order, id_loc[i] the place of local id i in gids. Owner side: the
 * sub-bags received, concatenated in source rank order (global sample
 * order), with per-source prefix counts.
 */
struct etm_rt_table {
	size_t nbags;
	struct etm_vec offsets; /* u64 nbags + 1, the caller's, copied */
	struct etm_vec sub_bag; /* u32 per sub-bag: its local bag */
	struct etm_vec sub_len; /* u32 per sub-bag: ids in it */
	struct etm_vec gids;	/* u64 per id, grouped by owner */
	struct etm_vec id_loc;	/* u32 per local id: index in gids */
	struct etm_vec dst;	/* u32 x 2 (N + 1): sub-bag and id prefix
				 * counts per owner */
	/* owner side */
	struct etm_vec oids; /* u64 ids received */
	struct etm_vec ooff; /* u64 offsets of the sub-bags received */
	struct etm_vec src;  /* u32 x 2 (N + 1): sub-bag and id prefix
			      * counts per source */
};

struct etm_route {
	bool valid;
	struct etm_rt_table *t; /* ntables */
};

struct etm {
	MPI_Comm comm;
	int rank, nranks;
	char dir[4096];
	et_store *store;
	int ntables;
	struct etm_tbl *tbl;
	/* routes: the batch sent ahead, the one of the last forward, and
	 * a spare one for forwards given their ids directly */
	struct etm_route route[3];
	int next, cur, spare; /* indices into route */
	et_pool mode;	      /* of the last forward */
	/* scratch */
	struct etm_vec sbuf, rbuf, out, grad;
	int *scount, *sdispl, *rcount, *rdispl; /* nranks each */
	struct etm_traffic traffic;
};

/*
 * The same error on every rank: the most negative of the ranks' ret, and
 * the same et_errdetail(), that of the lowest rank with that error (or,
 * if it left none and there are several ranks, "rank R: " and
 * etm_strerror()'s message). Collective over comm.
 */
int etm_agree_comm(MPI_Comm comm, int ret);
int etm_agree(etm *m, int ret);

/* Bytes of et_errdetail(), its terminating 0 included. */
#define ETM_DETAIL_BYTES 256

/* A copy of et_errdetail(), kept across calls that clear it (closing a
 * store on the way out of a failure). */
struct etm_detail {
	char s[ETM_DETAIL_BYTES];
};

void etm_detail_save(struct etm_detail *d);
/* Sets et_errdetail() back to d and returns ret. */
int etm_detail_restore(const struct etm_detail *d, int ret);

/* What etm_checkpoint puts before the caller's dense state in a rank's
 * store checkpoint. */
#define SHARD_MAGIC "ETMSHRD1"
struct shard_hdr {
	char magic[8];
	uint32_t rank, nranks;
	uint64_t step;
};

/* dir's global checkpoint record: 0, -ENOENT (or another negated errno)
 * or ET_EHDRSUM. Sets no detail. */
int etm_global_read(const char *dir, uint32_t *nranks, uint64_t *step);
/* Table-wise owners of the tables (-1 for a row-wise one). */
int etm_place(const struct etm_table_spec *spec, int n, int nranks, int *owner);
/* Row-wise: the first row of rank r's range, ceil(r * rows / nranks);
 * of a keyed table, the first bucket, with rows ETM_KEY_BUCKETS. */
uint64_t etm_range_start(uint64_t rows, int r, int nranks);

/*
 * A key's virtual bucket (embtier_mpi.h, etm_key_bucket): the top 12 bits
 * of a fixed 64-bit mixer (xor-shift 32, multiply, twice), a bijection of
 * the key. Not the core's hash_mix: its top bits place a row in a table's
 * row-log index (rli_home), so buckets cut by them would crowd each
 * rank's keys into a slice of its index. Part of the format: a store's
 * keys sit on their buckets' owners, so it never changes.
 */
static inline uint32_t etm_bucket_of(uint64_t key)
{
	uint64_t h = key;

	h ^= h >> 32;
	h *= 0xd6e8feb86659fd93ULL;
	h ^= h >> 32;
	h *= 0xd6e8feb86659fd93ULL;
	h ^= h >> 32;
	return (uint32_t)(h >> 52);
}

_Static_assert(ETM_KEY_BUCKETS == 1u << 12,
	       "etm_bucket_of takes the top 12 bits");

/* Row-wise: the rank that owns bucket b of a keyed table. */
static inline int etm_bucket_owner(uint32_t b, int nranks)
{
	return (int)((uint64_t)b * (unsigned)nranks / ETM_KEY_BUCKETS);
}

void etm_route_free(struct etm_route *r, int ntables);

/* exchange.c, for backward.c: whether table t has rows on rank d; the
 * sub-bag prefix counts of a routing vector; m's send and receive
 * displacements and buffers from its counts (*rtotal: bytes to
 * receive); the all-to-all of m's buffers. */
static inline bool etm_serves(const etm *m, int t, int d)
{
	return m->tbl[t].plan == ETM_ROW_WISE || m->tbl[t].owner == d;
}

static inline uint32_t *etm_sub_prefix(struct etm_vec *v)
{
	return v->p;
}

int etm_size_buffers(etm *m, size_t *rtotal);
int etm_alltoallv(etm *m);

#endif
