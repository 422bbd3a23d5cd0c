/*
 * embtier.h - the one public header of libembtier, a tiered (HBM / DDR /
 * NVMe) embedding store for training recommendation models.
 *
 * Conventions, for every function below:
 *  - it returns 0 on success or a negative errno; library-specific conditions
 *    use codes in [ET_ERR_LAST, ET_ERR_BASE]; et_strerror() explains any code,
 *    et_errdetail() says which argument was wrong. errno is never set on
 *    purpose.
 *  - handles are opaque; each is created and destroyed by a named pair, and
 *    destroying NULL is harmless.
 *  - on error nothing visible has changed, unless the prototype says so.
 *  - buffers passed in are owned by the caller and used only for the call.
 *  - a handle may be used by one thread at a time; distinct handles are
 *    independent.
 *
 * Not in this header means not API.
 */
#ifndef EMBTIER_H
#define EMBTIER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * ET_API marks what the library exports. libembtier is built with
 * -fvisibility=hidden and ET_BUILD defined, so that nothing but the
 * functions declared here is visible to the dynamic linker; libembtier.a
 * defines no global symbol outside the et_ prefix either (make
 * check-symbols). For callers ET_API is empty.
 */
#if defined(ET_BUILD) && defined(__GNUC__)
#define ET_API __attribute__((visibility("default")))
#else
#define ET_API
#endif

#define ET_VERSION_MAJOR  0
#define ET_VERSION_MINOR  1
#define ET_VERSION_PATCH  0
#define ET_VERSION_STRING "0.1.0"

/* Runtime version as (major << 16 | minor << 8 | patch); *str, if non-NULL,
 * receives a static string. */
ET_API int et_version(const char **str);

/* ------------------------------------------------------------------ errors */

/*
 * The library's own codes lie in [ET_ERR_LAST, ET_ERR_BASE], contiguous,
 * from -30901 down: far outside -4095..-1, where Linux's negated errno
 * values live, and below LMDB's codes (-30799 .. about -30776), so a
 * program seeing errno values, LMDB's codes and ours can tell them apart.
 * ET_ERR_BASE itself is not a code.
 */
enum {
	ET_ERR_BASE = -30900,
	ET_EMAGIC = -30901,    /* not an embtier table file */
	ET_EVERSION = -30902,  /* table file format version not supported */
	ET_EHDRSUM = -30903,   /* header checksum mismatch */
	ET_EHEADER = -30904,   /* header field out of range */
	ET_ETRUNC = -30905,    /* file shorter than its header says */
	ET_EBLOCKSUM = -30906, /* block checksum mismatch: corrupt data */
	ET_EROWRANGE = -30907, /* row id >= the table's logical rows */
	ET_ENOTABLE = -30908,  /* no such table */
	ET_ECONFIG = -30909,   /* a parameter or configuration field out of
				* range, or a table name not allowed */
	ET_EURING = -30910,    /* io_uring could not be set up */
	ET_EMISMATCH = -30911, /* table file disagrees with what was asked */
	ET_ECAPACITY = -30912, /* a cache tier cannot hold `ways` slots of a
				* row: at et_store_open for the smallest row
				* (or slot_bytes), at et_table_create/open for
				* the table's rows */
	ET_EFAILED = -30913,   /* an earlier I/O failure left writes refused */
	ET_ESHORTIO = -30914,  /* the device moved fewer bytes than asked */
	ET_ERECORD = -30915,   /* the store's commit record (CHECKPOINT) is
				* damaged: bad magic, truncated, or failing
				* its checksum */
	ET_EJOURNAL = -30916,  /* a table's journal (.et.idx) contradicts the
				* commit record: damaged or missing bytes the
				* record says were committed */
	ET_EMISSING = -30917,  /* a file the commit record needs is missing:
				* CHECKPOINT beside committed journals, or a
				* table's .et, .et.idx or .et.log */
	ET_ELOCKED = -30918,   /* the store directory, or the table file, is
				* open for writing elsewhere (another
				* et_store_open, here or in another process) */
	ET_EDELTA = -30919,    /* a delta file is damaged, truncated or not
				* a delta file (et_delta_apply) */
	ET_ERR_LAST = -30919,
};

/* A message for any code this library returns (ours or a negated errno).
 * The string is static and valid forever. */
ET_API const char *et_strerror(int err);

/*
 * What made the calling thread's last failed call fail, beyond its code:
 * the argument or field, its value and the rule it broke, for instance
 * "et_store_config.ways 65 out of range 1..64" (ET_ECONFIG) or "ids[3]
 * 1000 >= rows 1000 of table 0" (ET_EROWRANGE).
 *
 * Every function of this header that can fail clears it on entry. Every
 * bad input the header describes sets it: a NULL or inconsistent argument
 * (-EINVAL, -E2BIG), each field of et_table_params and et_store_config
 * outside its documented range (ET_ECONFIG), a table name not allowed
 * (ET_ECONFIG), tiers too small (ET_ECAPACITY), an expect field that the
 * file contradicts (ET_EMISMATCH), an unknown table (ET_ENOTABLE), a row id
 * out of range (ET_EROWRANGE); so does ET_EURING, with the kernel's reason.
 * Other failures (I/O, corrupt files) leave it "": et_strerror() says all.
 *
 * Thread-local, since some failures happen before any handle exists: the
 * string belongs to the calling thread and stays valid until that thread's
 * next call of a function that can fail. Never NULL.
 */
ET_API const char *et_errdetail(void);

/*
 * For libraries layered on this one (libembtier_mpi): makes the calling
 * thread's et_errdetail() the printf-style fmt (truncated to 255 bytes;
 * fmt NULL makes it "") and returns code, which is not checked: such a
 * library's functions clear the detail on entry and fail with
 * `return et_error_set(code, "...", ...)` as this one's do. Changes
 * nothing else.
 */
ET_API int et_error_set(int code, const char *fmt, ...)
#ifdef __GNUC__
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* ------------------------------------------------------------ table files */

/* Storage type of a row's values. The API always speaks f32; conversion to
 * f16 or bf16 rounds to nearest, ties to even. */
typedef enum et_dtype {
	ET_F32 = 1,
	ET_F16 = 2,
	ET_BF16 = 3,
} et_dtype;

/* Optimizer whose per-row state is stored beside the row (always f32). */
typedef enum et_optim {
	ET_OPT_SGD = 0,		    /* no state */
	ET_OPT_ROWWISE_ADAGRAD = 1, /* one f32: the running mean of g^2 */
} et_optim;

/* Initial value of rows never written: a pure function of
 * (seed, row, column), so the same whenever it is first needed. */
typedef enum et_init {
	ET_INIT_ZEROS = 0,
	ET_INIT_UNIFORM = 1, /* uniform in [-scale, +scale] */
	ET_INIT_NORMAL = 2,  /* normal, mean 0, standard deviation scale */
} et_init;

/*
 * Parameters of a new table file. Zero fields take the defaults shown.
 *
 * A table is row-indexed (ids are rows 0 .. rows-1) or, with
 * ET_TABLE_KEYED in flags and rows 0, keyed: its ids are any u64 (0 and
 * UINT64_MAX included: raw feature ids, hashes), each with a row of its
 * own, so two ids never share one. An id never written reads as its
 * initializer's value, a pure function of (seed, id), and costs nothing;
 * its first write or update stores it (in the table's row log, whose index
 * costs 15-20 bytes a stored id), and et_erase removes it again. Every
 * call of this header takes keyed tables, where "row" means the id.
 * Offline writes (et_tfile_write_rows, et_tfile_write_range) do not:
 * a keyed table is written through a store, which commits its log.
 */
struct et_table_params {
	uint64_t rows;	     /* logical rows, 1 .. ET_MAX_ROWS (required);
			      * 0 for a keyed table */
	uint32_t dim;	     /* values per row, 1 .. ET_MAX_DIM (required) */
	et_dtype dtype;	     /* 0: ET_F32 */
	et_optim optim;	     /* SGD (no state) when 0 */
	et_init init;	     /* ET_INIT_ZEROS when 0 */
	float init_scale;    /* for uniform/normal; 0: 1/sqrt(dim) */
	uint64_t seed;	     /* initializer seed; 0 is a valid seed */
	uint32_t block_size; /* bytes; 0: 4096, raised to the device's
			      * direct-I/O alignment and to fit one row */
	uint32_t flags;	     /* ET_TABLE_KEYED or 0 */
};

#define ET_TABLE_KEYED 0x1u /* ids are any u64 key (see above) */
#define ET_MAX_ROWS    (1ULL << 40)
#define ET_MAX_DIM     65536

/* What a table file is; filled by et_tfile_info(). */
struct et_table_info {
	uint64_t rows; /* logical rows */
	uint32_t dim;
	et_dtype dtype;
	et_optim optim;
	et_init init;
	float init_scale;
	uint64_t seed;
	uint32_t block_size; /* bytes per block on disk */
	uint32_t rows_per_block;
	uint32_t row_bytes;    /* one row as stored: values, then state */
	uint32_t state_floats; /* optimizer state per row (f32 each) */
	uint32_t format_version;
	uint64_t blocks;	 /* logical blocks */
	uint64_t blocks_written; /* materialized blocks (holes excluded) */
	uint64_t logical_bytes;	 /* file size if every block were written */
	uint64_t disk_bytes;	 /* bytes the file occupies on disk, with
				  * its row log */
	uint64_t rows_logged;	 /* rows whose newest value is in the row
				  * log (written by a store); of a keyed
				  * table, its stored ids */
	uint32_t flags;		 /* ET_TABLE_KEYED or 0 (then rows is 0) */
};

typedef struct et_tfile et_tfile;

/* Creates a new table file at path (which must not exist) and opens it for
 * reading and writing. It is sparse: creation writes one header block,
 * whatever the logical size. */
ET_API int et_tfile_create(const char *path, const struct et_table_params *p,
			   et_tfile **out);

#define ET_TFILE_RDONLY 0x1u

/* Opens an existing table file; the header and its checksum are verified and
 * the materialization map is rebuilt from the file's holes. A store's file
 * opens as of the store's last commit (ET_TFILE_RDONLY beside a live store
 * too: a commit during the open is retried). Later commits of a live
 * store are not seen, but can make reads of rows they moved fail their
 * checksums or return a newer value: read a closed store for a
 * consistent copy (etm_reshard checks that none came).
 *
 * Opened for writing (flags 0), and by et_tfile_create, the file is locked
 * for the handle's life, and so, shared, is the DIR/LOCK of a store's
 * directory: a second writer of the file, or a store open on its
 * directory, is ET_ELOCKED (and a store cannot open the directory while
 * a tool writes one of its files). ET_TFILE_RDONLY takes no lock. */
ET_API int et_tfile_open(const char *path, unsigned flags, et_tfile **out);

/* Header fields and disk use. */
ET_API int et_tfile_info(et_tfile *tf, struct et_table_info *info);

/* Reads n rows (duplicates allowed, any order) into out, n x dim f32. If
 * state is non-NULL it receives n x state_floats optimizer state. Every block
 * read is checksum-verified; unwritten rows come from the initializer without
 * I/O. The file keeps a scratch of the largest call's rows as stored
 * (row_bytes each) until it is closed. */
ET_API int et_tfile_read_rows(et_tfile *tf, const uint64_t *rows, size_t n,
			      float *out, float *state);

/* Writes n rows from in (n x dim f32) and, if state is non-NULL, their
 * optimizer state (else the stored state is kept, or zero for new rows).
 * Rows sharing a block are written with one read-modify-write of it. If a row
 * id repeats, the last occurrence wins. On an I/O error some blocks may have
 * been written; each block is written whole or not at all. */
ET_API int et_tfile_write_rows(et_tfile *tf, const uint64_t *rows, size_t n,
			       const float *in, const float *state);

/* Writes the contiguous rows [first, first + n) from in (n x dim f32), with
 * large sequential I/O: the fast path for bulk loading. The optimizer state
 * of every row in the range is reset to zero. */
ET_API int et_tfile_write_range(et_tfile *tf, uint64_t first, uint64_t n,
				const float *in);

/* Called by et_tfile_verify every so often; return non-zero to stop. */
typedef int (*et_progress_fn)(void *arg, uint64_t done, uint64_t total);

/* Reads and checks every materialized block, then every record of the
 * row log that holds a row's newest value (row id and checksum). Returns 0
 * if all are good, ET_EBLOCKSUM if any is bad (*bad_blocks counts bad
 * blocks and records; *first_bad names the first bad block, or, if only
 * records are bad, the block of the first bad record's row), or another
 * error. progress counts blocks and records; if it stops the walk early,
 * the result covers what was checked so far. */
ET_API int et_tfile_verify(et_tfile *tf, uint64_t *bad_blocks,
			   uint64_t *first_bad, et_progress_fn progress,
			   void *arg);

/* Lists the file's materialized rows (those with a stored value: in a
 * written block or in the row log; every other row reads as its
 * initializer's) from row `from` on, ascending: up to max of them into
 * rows, their number in *n (fewer than max: there are no more). A store's
 * file is listed as of its store's last commit. The first call, and the
 * first after the row log's rows changed, sorts a copy of the log's row ids
 * (8 bytes a logged row, kept until close). A keyed table lists its stored
 * ids: a caller going on from the last id + 1 stops when n < max or that
 * id is UINT64_MAX. */
ET_API int et_tfile_rows(et_tfile *tf, uint64_t from, uint64_t *rows,
			 size_t max, size_t *n);

/* fsync()s the file. */
ET_API int et_tfile_sync(et_tfile *tf);

/* Closes the file (without syncing). NULL is harmless. */
ET_API void et_tfile_close(et_tfile *tf);

/* ------------------------------------------------------------------ store */

/*
 * A store is a directory of table files served through up to three tiers:
 * HBM (optional; simulated in host memory, or CUDA memory), DDR (host
 * memory) and NVMe (the table files). Every row lives in at most one cache
 * tier; its table file is its home. Batches of row ids go through
 * et_gather / et_update; results never depend on the tier sizes, policies
 * or lookahead windows (bit for bit).
 */
typedef struct et_store et_store;

typedef enum et_policy {
	ET_POLICY_LRU = 1,     /* least recently used (access tick) */
	ET_POLICY_LFU = 2,     /* least frequently used, counts age with time */
	ET_POLICY_TINYLFU = 3, /* frequency admission (TinyLFU): a missed row
				* replaces the victim only if seen more often
				* lately (count-min sketch per cache) */
	ET_POLICY_WTINYLFU = 4, /* W-TinyLFU: every missed row enters a small
				 * LRU window of its set; the window's oldest
				 * row moves to the main (segmented LRU) part
				 * only if seen more often than main's victim */
} et_policy;

typedef enum et_hbm_backend {
	ET_HBM_SIM = 0,	 /* host memory standing in for accelerator memory */
	ET_HBM_CUDA = 1, /* real device memory (builds with CUDA only) */
} et_hbm_backend;

/*
 * Store configuration. Zero fields take the defaults shown. Capacities
 * count row data and per-slot metadata (ET_SLOT_META_BYTES a slot; up to
 * 8 bytes a slot more under TinyLFU and W-TinyLFU, for their count-min
 * sketch).
 *
 * Tables of any row size share a store. Each tier is divided among size
 * classes: the tables whose rows take slots of one size (the row rounded
 * up to 4 bytes, or slot_bytes if larger). A class gets one set of slots
 * at least, and the rest of the tier in proportion to the bytes its
 * tables would take if every row were cached (a keyed table counting as
 * 2^24 rows). A class whose share has a slot for every row of its
 * tables (none keyed) is direct-mapped in that tier: row r of a table has
 * one slot of its own (et_tier_stats.direct_rows counts them), a lookup
 * reads that slot's tag alone, nothing is ever evicted and ways do not
 * apply. The split is made again
 * when a table is created or opened; if it changes while the caches hold
 * rows, dirty rows are written back (as by et_flush) and the caches start
 * empty (a table joining a direct-mapped class that has slots for its
 * rows changes nothing). A table whose class cannot get one set in each tier (beside one
 * set of every other class) is refused with ET_ECAPACITY.
 */
struct et_store_config {
	uint64_t hbm_bytes;   /* 0: no HBM tier */
	uint64_t ddr_bytes;   /* 0: 256 MiB */
	et_policy hbm_policy; /* 0: LRU */
	et_policy ddr_policy; /* 0: LRU */
	uint32_t ways;	      /* associativity, 1..64; 0: 16 */
	uint32_t io_depth;    /* io_uring queue depth; 0: 128 */
	uint32_t slot_bytes;  /* the smallest slot: rows up to this size share
			       * one class of slots this big (padding traded
			       * for one shared cache). 0 (recommended):
			       * every row size gets slots of its own size */
	et_hbm_backend hbm_backend;
	/* threads of the multi-table calls' row work, of a single-table
	 * call's when it has 4096 ids or more, and of the placement of a
	 * call's misses when they are many (4096 or more, with DDR as the
	 * top tier, LRU or LFU, ways a multiple of 16, no lookahead; an
	 * update then also updates its cached rows meanwhile); the
	 * caller's counted: 0 or 1 the caller's alone, up to 64. Results
	 * are the same bits for any count. */
	uint32_t threads;
	uint32_t prefetch_thread; /* 1: et_prefetch returns once its
				   * arguments are checked and its ids
				   * copied; its work (lookups, promotions
				   * into HBM, handing reads to the I/O
				   * thread) runs on a thread of the
				   * store's, overlapping the caller's work,
				   * and every other call on the store waits
				   * for it first. 0: on the caller's
				   * thread. Results are the same bits. */
};

#define ET_SLOT_META_BYTES                                                     \
	21 /* digest 1, row key 8, table tag 4, policy 4, pin 4 */

/* Opens (creating if needed) the store directory dir. The caches are
 * allocated by the first operation after tables are registered, within
 * the configured capacities, and never grow.
 *
 * The store is the directory's only writer: it holds a lock on DIR/LOCK
 * until et_store_close, and a second et_store_open of dir, in this process
 * or another, is ET_ELOCKED (a child forked meanwhile does not keep the
 * lock, nor may it use the store). Before it returns, every table's journal is
 * settled against the commit record (see "durability" below): a record,
 * journal, log or table file that is damaged or missing is refused
 * (ET_ERECORD, ET_EJOURNAL, ET_EMISSING, or a table file's own codes),
 * et_errdetail() naming the file, and nothing is changed. */
ET_API int et_store_open(const char *dir, const struct et_store_config *cfg,
			 et_store **out);

/*
 * Tables that fit in memory, direct-mapped: the smallest capacity (to
 * within a few bytes of the split's rounding) of tier 1 (ddr_bytes) or 0
 * (hbm_bytes) with which a store of config cfg (NULL: the defaults; its
 * ways, slot_bytes and that tier's policy count, its capacities do not)
 * gives every row of the n row-indexed tables p[0..n) a slot of its own
 * in that tier, were they its only tables (et_store_config above). A
 * direct-mapped tier is the fastest: a lookup reads the row's own slot,
 * nothing is evicted. Tables created later need more. ET_ECONFIG for a
 * keyed table (it has no number of rows), parameters et_table_create
 * refuses, a config et_store_open refuses, or a tier other than 0 and 1;
 * ET_ECAPACITY for tables of more than 2^62 bytes.
 */
ET_API int et_direct_bytes(const struct et_store_config *cfg,
			   const struct et_table_params *p, size_t n, int tier,
			   uint64_t *bytes);

/* Writes back every dirty row, syncs, commits (see "durability" below) and
 * frees the store. Returns the first error met while flushing or
 * committing; the store is freed whatever happens. Every write that a call
 * returned 0 for survives a close that returns 0. NULL is harmless. */
ET_API int et_store_close(et_store *s);

/* Creates table file dir/name.et and registers it; *id names it in later
 * calls. name: 1..64 characters of [A-Za-z0-9_.-], not starting with '.'. */
ET_API int et_table_create(et_store *s, const char *name,
			   const struct et_table_params *p, int *id);

/* Opens an existing table of the store. If expect is non-NULL, its
 * non-zero fields must match the file's header, else ET_EMISMATCH. */
ET_API int et_table_open(et_store *s, const char *name,
			 const struct et_table_params *expect, int *id);

/* Header fields and disk use of a registered table. */
ET_API int et_table_info(et_store *s, int table, struct et_table_info *info);

/* Copies rows ids[0..n) (duplicates allowed) into out, n x dim f32. */
ET_API int et_gather(et_store *s, int table, const uint64_t *ids, size_t n,
		     float *out);

typedef enum et_pool {
	ET_POOL_SUM = 0,
	ET_POOL_MEAN = 1,
} et_pool;

/* Embedding bag: bag b is ids[offsets[b] .. offsets[b+1]), offsets has
 * nbags + 1 non-decreasing entries starting at 0. out receives nbags x dim
 * f32: the sum (or mean; zeros for an empty bag) of each bag's rows,
 * added in id order. */
ET_API int et_gather_pooled(et_store *s, int table, const uint64_t *ids,
			    const uint64_t *offsets, size_t nbags, et_pool mode,
			    float *out);

/* Optimizer hyper-parameters of an update. */
struct et_update_params {
	float lr;  /* learning rate */
	float eps; /* Adagrad's epsilon; 0: 1e-8 */
};

/* Applies gradients grads (n x dim f32) to rows ids[0..n) with the table's
 * optimizer. Gradients of a repeated id are summed first, in index order.
 * SGD: w -= lr * g. Row-wise Adagrad (FBGEMM's EXACT_ROWWISE_ADAGRAD):
 * m += mean(g^2); w -= lr * g / (sqrt(m) + eps). */
ET_API int et_update(et_store *s, int table, const uint64_t *ids, size_t n,
		     const float *grads, const struct et_update_params *up);

/* The backward of et_gather_pooled: bag_grads is nbags x dim; each id of a
 * bag receives its bag's gradient (divided by the bag size for mean). */
ET_API int et_update_pooled(et_store *s, int table, const uint64_t *ids,
			    const uint64_t *offsets, size_t nbags, et_pool mode,
			    const float *bag_grads,
			    const struct et_update_params *up);

/* One table's part of a multi-table call. */
struct et_table_batch {
	int table;
	const uint64_t *ids;	 /* offsets[nbags] ids */
	const uint64_t *offsets; /* nbags + 1, as for et_gather_pooled */
	size_t nbags;
	float *out;	    /* gather: nbags x dim, the pooled bags */
	const float *grads; /* update: nbags x dim, the bags' gradients */
};

/* et_gather_pooled of the tables of batch[0..ntables) in one call, with
 * the same results, bit for bit, as one call per table in order: every
 * table's rows are looked up and placed first (the misses of all tables
 * read together; a failed read fails the call and places nothing), then
 * the bags pooled over et_store_config.threads threads. A table may
 * appear once. A bad descriptor (unknown or repeated table, NULL pointer,
 * bad offsets, id out of range) is an error naming batch[k] and nothing
 * is done. */
ET_API int et_gather_pooled_multi(et_store *s,
				  const struct et_table_batch *batch,
				  size_t ntables, et_pool mode);

/* et_update_pooled of the tables of batch[0..ntables) in one call (grads
 * of each descriptor), as one call per table in order; the gradients are
 * summed and applied over et_store_config.threads threads. */
ET_API int et_update_pooled_multi(et_store *s,
				  const struct et_table_batch *batch,
				  size_t ntables, et_pool mode,
				  const struct et_update_params *up);

/* Overwrites the values of rows ids[0..n) with vals (n x dim f32); their
 * optimizer state is kept. If an id repeats, the last one wins. */
ET_API int et_write_rows(et_store *s, int table, const uint64_t *ids, size_t n,
			 const float *vals);

/* et_write_rows, and the optimizer state too (n x state_floats f32, as
 * et_tfile_read_rows gives it; NULL: kept): how a row saved elsewhere
 * (another store's file, an export) is restored whole. */
ET_API int et_write_rows_state(et_store *s, int table, const uint64_t *ids,
			       size_t n, const float *vals, const float *state);

/* Writes back every dirty row and syncs every table file. Waits for any
 * prefetch in flight first. It does not commit: after a crash the tables
 * still return to the last commit (see "durability" below). */
ET_API int et_flush(et_store *s);

/* ----------------------------------------------------------- durability */

/*
 * The contract:
 *  - what a call returned 0 for survives an et_store_close that returns 0;
 *  - a crash (kill -9, power loss) returns the tables to exactly the last
 *    commit: the last et_checkpoint, or a clean close after it; writes
 *    since are lost, whole (et_flush alone commits nothing);
 *  - nothing in between is ever torn.
 *
 * The store never overwrites a table file's blocks: rows it writes back
 * are appended to the table's row log (docs/FORMAT.md). A commit syncs
 * every row log and its journal of index changes, then writes one small
 * record atomically (write, fsync, rename, fsync the directory) that names
 * it, and which names, for every table of the directory, how much of its
 * journal that commit is. After a crash, et_store_open cuts every table's
 * journal back to what the record names, so each table returns to exactly
 * that commit, and before the first commit to its state at creation (or
 * bulk load). What the record names must all be there and intact: damage
 * inside it is refused, never taken for a torn tail. A checkpoint that
 * fails may be retried (after et_flush succeeds, if the failure was a
 * write-back's); once it returns 0 it is durable. A live log record found
 * damaged is left in place: that row's reads fail with ET_EBLOCKSUM
 * naming it (et_stats.log_records_damaged counts them), every other row
 * goes on.
 *
 * A clean close after a checkpoint commits the tables as they are, keeping
 * the checkpoint's id and dense state: the tables have then moved on past
 * that dense state, and et_checkpoint_info says so (tables_moved), so a
 * trainer resuming from the dense state can tell its embeddings are newer
 * than its dense weights and decide (embtier-train refuses to resume). A
 * close that wrote nothing since the checkpoint commits nothing.
 */

/* Makes a checkpoint: waits for any prefetch, writes back every dirty row,
 * syncs every table file, and commits len bytes of the caller's dense state
 * (model weights, data position...; may be NULL/0) with them. */
ET_API int et_checkpoint(et_store *s, const void *dense, size_t len);

/* The last checkpoint of the store: *id (0 if none) and, if dense is
 * non-NULL, a malloc()ed copy of its dense state in *dense (free() it) of
 * *len bytes. */
ET_API int et_checkpoint_read(et_store *s, uint64_t *id, void **dense,
			      size_t *len);

/* Where the store's tables stand, as committed on disk. */
struct et_checkpoint_info {
	uint64_t id;	 /* the last et_checkpoint (0: none) */
	uint64_t commit; /* commits: checkpoints and clean closes after one */
	uint64_t dense_len; /* bytes of its dense state */
	bool tables_moved;  /* a clean close after that checkpoint committed
			     * writes made since: the tables are newer than
			     * the dense state */
};

ET_API int et_checkpoint_info(et_store *s, struct et_checkpoint_info *ci);

/* et_checkpoint_info and et_checkpoint_read of the store directory dir,
 * read from its commit record without opening the store (tools, or
 * another process of a sharded run). dense may be NULL; else *dense gets a
 * malloc()ed copy of the dense state (free() it) and *len
 * its bytes. -ENOENT if dir does not exist; a directory with no
 * commit record gives *ci all zero. */
ET_API int et_checkpoint_read_dir(const char *dir,
				  struct et_checkpoint_info *ci, void **dense,
				  size_t *len);

/* ------------------------------------------------------------- prefetch */

/* The ids of one table in the next batch. */
struct et_batch_ids {
	int table;
	const uint64_t *ids; /* copied: the caller may reuse the buffer */
	size_t n;
};

/*
 * Starts bringing the rows of the next batch up to the top tier and returns
 * without waiting for the disk: rows already cached are pinned (promoted
 * from DDR if need be), rows never written are filled from the initializer,
 * and reads for the rest are handed to the store's I/O thread. The next
 * operation on the store installs what has arrived and waits only for what
 * has not.
 *
 * Each call opens a new batch. The rows of this batch and of the one
 * before it stay pinned (never evicted) until the call after next: no
 * cleanup call is needed. Rows that cannot be placed because every way of
 * their set is pinned are skipped (counted in prefetch_skipped) and read on
 * demand later: prefetch never changes results, only their speed.
 *
 * With et_store_config.prefetch_thread, all of that runs on a thread of
 * the store's and the call returns once its arguments are checked and its
 * ids copied; the next call on the store waits for it. Bad arguments are
 * still returned here, and ET_EFAILED for a store that lost rows; other
 * errors of the work on the thread are not returned (rows it could not
 * place are read on demand, where an error surfaces).
 */
ET_API int et_prefetch(et_store *s, const struct et_batch_ids *batch,
		       size_t ntables);

/* One upcoming batch: the ids of each table it reads. */
struct et_batch {
	const struct et_batch_ids *tables;
	size_t ntables;
};

#define ET_MAX_LOOKAHEAD 32

/*
 * Hands the store the ids of the next nbatches batches (0..ET_MAX_LOOKAHEAD),
 * batches[0] being the next batch the caller will run (the one it would
 * prefetch) and batches[k] the k-th after it; a data loader can read them
 * cheaply. The store keeps them as a window until the next call, which
 * replaces it (nbatches 0 clears it): call once per batch, beside
 * et_prefetch. Eviction then keeps rows the window uses when it can, and
 * among those it must evict, the one whose next use is farthest goes first
 * (Belady's rule inside the window); the tier's policy decides among rows
 * the window does not use. A missed row the window does not use, or uses
 * after every candidate victim, is served without being cached. Only
 * which rows stay cached depends on the window, never any result; a wrong
 * window costs misses, nothing else.
 *
 * The first operation on a table after the call is taken as that table's
 * part of batches[0]: from then on batches[0] no longer counts as a coming
 * use of the table's rows. When a call's batches are the last call's less
 * its first (compared id for id) plus new ones, the store only adds the new
 * ones: a sliding window costs about one batch's ids a call.
 *
 * Memory (kept for the next call): a hash map of at most 128 bytes a
 * distinct id of the largest window (16 KiB at least), and a copy of the window's ids (8
 * bytes an id). Bad input (ids out of range, an unknown table, nbatches too
 * large) changes nothing; -ENOMEM leaves no window.
 */
ET_API int et_lookahead(et_store *s, const struct et_batch *batches,
			size_t nbatches);

/* Counters of one cache tier. Its capacity efficiency, the share of the
 * tier's bytes that holds rows, is row_bytes / capacity_bytes. */
struct et_tier_stats {
	uint64_t capacity_bytes;      /* the configured bytes of the tier */
	uint64_t alloc_bytes;	      /* bytes of its slots, their
				       * metadata and sketch
				       * (<= capacity_bytes) */
	uint64_t row_bytes;	      /* bytes of the rows cached now, as
				       * stored (no padding, no metadata) */
	uint64_t capacity_rows;	      /* slots, all size classes */
	uint64_t direct_rows;	      /* rows with a slot of their own:
				       * those of direct-mapped classes
				       * (see et_store_config) */
	uint64_t resident_rows;	      /* slots in use now */
	uint64_t dirty_rows;	      /* of which dirty */
	uint64_t hits, misses;	      /* distinct-row lookups that reached the
				       * tier, by operations and prefetches */
	uint64_t inserts;	      /* rows placed in the tier */
	uint64_t evictions;	      /* rows pushed out to make room */
	uint64_t bytes_in, bytes_out; /* row bytes copied into / out of it */
};

/* ------------------------------------------------------------ keyed tables */

/*
 * A keyed table (ET_TABLE_KEYED, see struct et_table_params) stores an id
 * when it is first written or updated, and forgets it when erased: then it
 * reads as its initializer's value again, and its index entry is freed at
 * once, its bytes on disk when the log is cleaned. The erase, like a
 * write, is durable from the next commit. *erased (if non-NULL) counts the
 * distinct ids that were stored (0 if the call fails). -EINVAL for a
 * row-indexed table.
 */
ET_API int et_erase(et_store *s, int table, const uint64_t *ids, size_t n,
		    uint64_t *erased);

/*
 * Which ids a keyed table keeps (Monolith's admission filter and expiry).
 * Zero fields: the policy is off. Set after et_table_create or
 * et_table_open: a reopened store needs it set again. The admission
 * filter's counts are saved at each commit (DIR/NAME.et.adm0 and .adm1,
 * alternating; the commit record names the file and its checksum:
 * docs/FORMAT.md) and come back when admission is set again with the same
 * admit_after and filter_log2 (other settings, or no filter at the last
 * commit: counts from zero; set again mid-session with the same settings:
 * the counts go on), so a store reopened at its last commit admits as one
 * never closed. The named file missing is ET_EMISSING; damaged, cut, or
 * another commit's (the other slot's) ET_EHDRSUM; either changes nothing.
 * A clean close commits a filter that counted since the last commit.
 * Expiry ages are committed with the ids (the table's journal holds each
 * id's stamp), so they too come back at the last commit, whatever the
 * expire_after set again.
 *
 * Admission: an update stores an id only once the id has been seen in
 * admit_after update calls (this one counted; each call counts an id once,
 * however many times it names it). Until then the update's gradients for
 * it are dropped (et_stats.keys_dropped) and it reads as its initializer's.
 * Ids are counted in a count-min filter of 4 x 2^filter_log2 four-bit
 * counters (2^(filter_log2 + 1) bytes), so an id can be admitted early
 * when others share its counters: docs/KEYED.md gives the rate measured
 * against the number of distinct ids. An id the table already stores, or
 * that et_write_rows wrote, is always admitted. Deterministic: the same
 * calls give the same results whatever the tiers.
 *
 * Expiry: each et_checkpoint erases the ids not updated or written in
 * the table's last expire_after commits, itself counted (expire_after 1:
 * those not updated since the last checkpoint), counted in
 * et_stats.keys_expired. The commit of a clean close expires nothing.
 * Set on a table whose ids are already committed, expiry counts their
 * ages from the next commit, which then also writes every id's stamp
 * (the whole index, once: docs/KEYED.md).
 *
 * A bound: with max_keys, each et_checkpoint, after expiry, erases the
 * stored ids updated or written longest ago (by commit, as expiry counts
 * ages; among ids of one commit, the smallest first) until at most
 * max_keys are stored (HierarchicalKV's epoch-LRU eviction), counted in
 * et_stats.keys_evicted; so the table's index stays bounded, and its
 * disk once the cleaner has moved the live records. Between checkpoints
 * the table may hold more.
 *
 * With half_life H as well, the bound keeps the ids by a decayed count
 * instead (FBGEMM's counter eviction, HierarchicalKV's epoch-LFU): an
 * id's score counts the commits it was updated or written in, a commit's
 * weight halving each time the commit number passes a multiple of H; the
 * lowest scores go first (ties: the oldest stamp, then the smallest id).
 * An id erased and stored again starts from 1. Scores are committed with
 * the ids (4 more bytes an id in memory, and in the journal), and survive
 * a reopen and a crash; set the policy again after each open, before the
 * first update, for updates to be counted with H. Ids committed before
 * half_life was first set start at 1. half_life needs max_keys; at most
 * 2^20.
 */
struct et_key_policy {
	uint32_t admit_after;  /* 0 or 1: off; 2 .. 15 */
	uint32_t filter_log2;  /* 0: 20 (2 MiB); 10 .. 30 */
	uint32_t expire_after; /* commits; 0: off */
	uint64_t max_keys;     /* ids kept at most; 0: no bound */
	uint32_t half_life;    /* the bound keeps: 0 the ids written last,
				* else those of the greatest decayed count
				* (commits a commit's weight halves in) */
};

ET_API int et_key_policy_set(et_store *s, int table,
			     const struct et_key_policy *kp);

/* ------------------------------------------------------------ deltas */

/*
 * A delta carries what changed in a store's tables between two of its
 * commits, to bring a copy (a serving store) from the first commit to the
 * second: the rows written since (their values as stored, and with
 * ET_DELTA_STATE their optimizer state), the ids of keyed tables erased or
 * expired since (tombstones), and the commit's dense state. docs/FORMAT.md
 * has the file's layout, docs/DELTA.md how it is made and applied.
 *
 * et_delta_export writes the delta of the store directory dir from commit
 * `since` (0: from nothing, every stored row) to its last commit into a
 * new file path, reading the directory as a read-only opener does: it may
 * run beside a live store, in its process or another, and never sees a
 * half-done commit (if a commit lands while it reads, it starts again, up
 * to 8 times, then fails with -EAGAIN). Its cost is that of the rows that
 * changed, not of the tables: each table's journal says which rows its
 * commits after `since` changed and where their records are, which are
 * read straight from the row log in log order. A table whose journal no
 * longer goes back to `since` (a journal snapshot came after it), and
 * every table of a delta from 0, is taken whole (through its index), and
 * the delta says so: the copy's rows not in it are then dropped. Memory:
 * 16 bytes a changed row, plus a chunk of 65536 rows.
 *
 * et_delta_apply applies the delta at path to the store directory dir (a
 * copy: created with its tables if missing, and not open elsewhere). The
 * whole file is checked first; a damaged or cut file is ET_EDELTA and
 * changes nothing. A delta must start where the copy stands: the copy
 * records (DIR/DELTA) the source's commit and each table's journal chain
 * checksum it was brought to, and a delta from another commit or another
 * store is ET_EMISMATCH (a delta from 0, or one taking every table whole,
 * applies to any copy). The copy's tables are written through a store and
 * committed once, with the delta's dense state, so a crash during an apply
 * leaves the copy as it was; applying the same delta again is harmless.
 * info, if non-NULL, receives what was exported or applied.
 */
#define ET_DELTA_STATE 0x1u /* carry each row's optimizer state */

struct et_delta_info {
	uint64_t from_commit; /* the commit the delta starts after (0: none) */
	uint64_t to_commit;   /* the source's commit it brings a copy to */
	uint64_t checkpoint_id; /* the source's et_checkpoint count then */
	uint64_t rows;		/* rows carried */
	uint64_t tombstones;	/* erased ids carried */
	uint64_t stale;		/* apply: rows of whole tables the copy had and
			  * the delta did not, dropped */
	uint64_t bytes;		/* of the delta file */
	uint32_t tables;	/* tables in the delta */
	uint32_t whole;		/* of which taken whole */
	uint32_t flags;		/* ET_DELTA_STATE */
};

ET_API int et_delta_export(const char *dir, uint64_t since, const char *path,
			   unsigned flags, struct et_delta_info *info);
ET_API int et_delta_apply(const char *path, const char *dir,
			  struct et_delta_info *info);

/* ----------------------------------------------------------- serving */

/*
 * A serving handle: a store directory (a copy deltas keep current) opened
 * for lookups only, with deltas applied to it while readers go on. Each
 * lookup reads one version of the copy, the last commit as of the call:
 * readers see the old or the new version of each delta, never a mix.
 * No optimizer state is held in memory. Rows are cached as stored (f16
 * and bf16 stay 2 bytes, converted to f32 as they are copied out) in one
 * set-associative LRU cache of cfg->ddr_bytes (metadata included; rows
 * larger than the largest of the tables the copy had when the cache was
 * made are not cached), shared by the versions: an apply drops the
 * cached rows its delta changed (every row of a table it took whole).
 * The misses of a lookup are read from the table files and row logs, their
 * reads in flight together.
 *
 * et_serve_open opens dir (created, empty, if missing) and holds its
 * DIR/LOCK for the handle's life, as a store does: a store or another
 * serving handle on dir is ET_ELOCKED, and so is this open if one is
 * there. cfg may be NULL (the defaults). Its memory is the cache, each
 * table's row-log index (15-20 bytes a stored
 * row, as a store's) and the dense state.
 *
 * et_serve_apply applies the delta at path as et_delta_apply does (the
 * same checks and errors; a failed apply changes nothing readers see),
 * then opens the new version beside the old, switches readers to it, and
 * returns once no lookup still reads the old one. During an apply the
 * copy's index is held up to three times: the readers' version, the
 * apply's store and the new version. One apply at a time (a second call
 * waits); lookups, et_serve_table, et_serve_dense and et_serve_info may
 * come from any thread at any time, lookups of one table one at a time.
 *
 * Tables are named: et_serve_table gives the number of a table the
 * current version holds (-ENOENT if none), which stays valid across
 * applies. et_serve_lookup reads n rows (row numbers, or ids of a keyed
 * table: never-stored ids read their initializer's values) into out,
 * n x dim f32; *commit, if non-NULL, receives the source commit the rows
 * are of (compare it to group calls of one version). et_serve_dense copies
 * the version's dense state (at most cap bytes; *len its size). Closing
 * with calls under way is not allowed.
 */
typedef struct et_serve et_serve;

struct et_serve_info {
	uint64_t commit;       /* the source commit the copy stands at
				* (DIR/DELTA; 0: none yet) */
	uint64_t store_commit; /* the copy's own last commit */
	uint64_t applies;      /* deltas applied through this handle */
	uint64_t index_bytes;  /* memory of the tables' indexes */
	uint64_t dense_bytes;
	uint64_t cache_bytes; /* the row cache, metadata included */
	uint64_t cache_rows;  /* rows it can hold */
	uint64_t cache_hits, cache_misses; /* rows looked up, since open */
	uint32_t tables;
};

#define ET_SERVE_NO_CACHE 0x1u /* every lookup reads the files */

struct et_serve_config {
	uint64_t ddr_bytes; /* the row cache; 0: 256 MiB; else >= 64 KiB
			     * (a cache that cannot hold one set of 8 of
			     * the tables' rows is not made) */
	uint32_t flags;	    /* ET_SERVE_NO_CACHE */
};

ET_API int et_serve_open(const char *dir, const struct et_serve_config *cfg,
			 et_serve **out);
ET_API int et_serve_table(et_serve *sv, const char *name, int *table,
			  struct et_table_info *info);
ET_API int et_serve_lookup(et_serve *sv, int table, const uint64_t *ids,
			   size_t n, float *out, uint64_t *commit);
ET_API int et_serve_dense(et_serve *sv, void *buf, size_t cap, size_t *len,
			  uint64_t *commit);
ET_API int et_serve_apply(et_serve *sv, const char *path,
			  struct et_delta_info *info);
ET_API int et_serve_info(et_serve *sv, struct et_serve_info *info);
ET_API void et_serve_close(et_serve *sv);

/* Counters of the store, or of one table. */
struct et_stats {
	struct et_tier_stats hbm, ddr;
	/* FBGEMM's six cache counters, for the top tier (HBM, else DDR) */
	uint64_t calls;			 /* batch operations */
	uint64_t requested;		 /* ids passed in, duplicates counted */
	uint64_t unique;		 /* distinct ids per call, summed */
	uint64_t unique_misses;		 /* distinct ids not in the top tier */
	uint64_t conflict_unique_misses; /* distinct ids that found no free or
					  * evictable way in the top tier */
	uint64_t conflict_misses;	 /* the same, duplicates counted */
	/* NVMe tier */
	uint64_t nvme_rows_read;   /* rows read from table files */
	uint64_t rows_lazy;	   /* rows served from the initializer */
	uint64_t rows_overwritten; /* misses et_write_rows replaced whole,
				    * so never read */
	uint64_t writebacks;	   /* dirty rows written back */
	uint64_t blocks_read, blocks_written; /* block files (bulk loads) */
	uint64_t bytes_read, bytes_written;   /* block files */
	/* the row log, where the store writes rows (docs/FORMAT.md) */
	uint64_t log_rows_written; /* records appended, cleaning included */
	uint64_t log_rows_cleaned; /* live records moved by the cleaner */
	uint64_t log_segments_cleaned;
	uint64_t log_bytes_written; /* log and index journal */
	uint64_t log_rows_read;
	uint64_t log_index_rows;      /* rows whose newest copy is logged */
	uint64_t log_index_bytes;     /* memory of the index */
	uint64_t log_live_bytes;      /* live records x record bytes */
	uint64_t log_segment_bytes;   /* segments in use x segment bytes */
	uint64_t log_records_damaged; /* live records the cleaner found
				       * damaged: left in place, their reads
				       * fail with ET_EBLOCKSUM naming them,
				       * et_tfile_verify counts them */
	/* prefetch (store-wide) */
	uint64_t prefetch_calls;
	uint64_t prefetch_rows;	   /* distinct rows asked for */
	uint64_t prefetch_reads;   /* of which read from table files */
	uint64_t prefetch_hits;	   /* rows an operation found in the top
				    * tier because a prefetch put them
				    * there */
	uint64_t prefetch_late;	   /* rows still being read when the
				    * next operation began */
	uint64_t prefetch_skipped; /* rows that found no unpinned way */
	uint64_t prefetch_wait_ns; /* time operations waited for reads */
	/* Where the time inside the batch calls went (store-wide): op_ns in
	 * the gather, update, write_rows and prefetch calls, of which
	 * miss_wait_ns reading missed rows (from the table files or the
	 * initializer) and waiting for the I/O thread, and writeback_ns
	 * writing dirty rows home or handing them to the I/O thread. The
	 * rest, op_ns - miss_wait_ns - writeback_ns, is memory work: hashing,
	 * lookups, placement, copies, pooling, the optimizer. */
	uint64_t op_ns;
	uint64_t miss_wait_ns;
	uint64_t writeback_ns;
	/* memory */
	uint64_t mem_bytes; /* host bytes the library holds now */
	uint64_t mem_peak_bytes;
	/* keyed tables (stored ids: log_index_rows after a commit) */
	uint64_t keys_dropped; /* ids whose update admission dropped */
	uint64_t keys_erased;  /* stored ids et_erase removed */
	uint64_t keys_expired; /* stored ids expiry removed */
	uint64_t keys_evicted; /* stored ids et_key_policy.max_keys removed */
};

/* Fills st for table (or all tables with table = -1). Tier capacity and
 * residency are store-wide either way. */
ET_API int et_get_stats(et_store *s, int table, struct et_stats *st);

/* ------------------------------------------------------------ conversions */

/* f32 <-> storage conversions, exposed for tools and tests. */
ET_API uint16_t et_f32_to_f16(float f);
ET_API float et_f16_to_f32(uint16_t h);
ET_API uint16_t et_f32_to_bf16(float f);
ET_API float et_bf16_to_f32(uint16_t h);

#ifdef __cplusplus
}
#endif

#endif /* EMBTIER_H */
