/*
 * bench.h - what the parts of embtier-bench share: its options, the table
 * set a run works on, the result of one system's run, the machine's own
 * limits, the peers, and the report.
 *
 *   main.c      command line (one table of options), subcommands
 *               convert and gen
 *   run.c       table setup, the store's run, and the default subcommand
 *               that puts the store beside its limits and peers
 *   limits.c    raw random gather over memory; raw io_uring block reads
 *   rawio.c     those reads: O_DIRECT through liburing, the bench's own
 *   peers.c     pread from threads; rocksdb.c RocksDB (ET_HAVE_ROCKSDB);
 *               replay.c the engine that runs both
 *   mrc.c       miss-ratio curves: every policy in the store, Belady
 *   pipeline.c  a training loop with and without et_prefetch
 *   flush.c     write-back rate beside the disk's sequential writes
 *   reopen.c    reopen time after a journal snapshot vs ordinary batches
 *   keyed.c     a keyed table through HierarchicalKV's protocol, beside a
 *               row-indexed one and the raw gather limit; --train-keys N
 *               trains N distinct keys through one (the scale check)
 *   delta.c     delta export and apply against the rows changed, beside
 *               the disk's sequential reads; delta_serve.c its serving
 *               round (lookups while a delta applies)
 *   report.c    tables for people, JSON and CSV for scripts
 *   workload.c  generators and traces; convert.c text into traces;
 *               belady.c, learner.c, oracle.c the mrc references
 *   util.c      clocks, sizes, row values, device counters
 *
 * The benchmark uses the library's public header (embtier.h) alone.
 *
 * Everything runs on the calling thread except the peers' worker threads.
 */
#ifndef ET_BENCH_BENCH_H
#define ET_BENCH_BENCH_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include "embtier.h"
#include "workload.h"

enum { FMT_TABLE = 0, FMT_JSON = 1, FMT_CSV = 2 };
enum { OP_POOLED = 0, OP_GATHER = 1 };
enum { MAT_ALL = 0, MAT_TOUCHED = 1, MAT_NONE = 2 };
enum { COMPUTE_BUSY = 0, COMPUTE_SLEEP = 1 };

#define BENCH_MAX_LA   8
#define BENCH_MAX_DIMS 64
/* The store's io_uring depth when et_store_config's io_depth is 0
 * (embtier.h): the depth the raw io_uring limit runs at by default. */
#define BENCH_STORE_IO_DEPTH 128

struct bench_opts {
	/* workload */
	struct wl_params wl;
	uint32_t dim;		       /* the largest of dims */
	uint32_t dims[BENCH_MAX_DIMS]; /* --dim: table t has dims[t % ndims] */
	uint32_t ndims;
	et_dtype dtype;
	bool pooling_set; /* --pooling given (else a trace's hint) */
	/* store */
	uint64_t hbm_bytes;
	uint64_t ddr_bytes;
	et_policy policy; /* both tiers */
	uint32_t ways;
	uint32_t slot_bytes; /* et_store_config's; 0: slots per row size */
	uint32_t io_depth;   /* 0: the store's default */
	const char *dir;     /* NULL: a temporary directory */
	int materialize;     /* MAT_* */
	/* run length */
	double seconds;	  /* measured phase, if batches == 0 */
	uint64_t batches; /* measured batches; 0: by time */
	int64_t warmup;	  /* batches; -1: until DDR is full */
	double warmup_max_s;
	int op;	     /* OP_* */
	bool update; /* apply gradients after each gather */
	bool multi;  /* pooled: all tables of a batch in one multi-table call */
	bool update_vs_read; /* measure read-only, then with updates */
	/* what else runs */
	bool limits, pread, rocksdb;
	double limit_seconds;
	uint32_t limit_qd[4]; /* extra raw io_uring depths */
	uint32_t n_limit_qd;
	uint32_t peer_threads;
	uint32_t threads; /* the store's (et_store_config.threads) */
	bool pread_cache;
	double rocksdb_extra; /* fraction of untouched rows also loaded */
	double peer_max_s;    /* cap on each peer's replay */
	/* mrc */
	uint32_t points;
	const char *sizes;     /* comma list of DDR sizes, overrides points */
	uint32_t mrc_policies; /* bit 1 << et_policy per policy */
	uint32_t mrc_la[BENCH_MAX_LA]; /* lookahead windows, 0: none */
	uint32_t n_mrc_la;
	bool belady;
	const char *plot;
	uint32_t hit_rounds; /* mrc --hits N: time DDR hits, N rounds */
	/* pipeline */
	uint64_t compute_us;
	int compute; /* COMPUTE_* */
	float lr;
	/* reopen */
	uint32_t reps; /* timed reopens of each store */
	/* keyed */
	uint64_t keyed_keys; /* keys a call */
	double new_frac;     /* find_or_insert's share of new keys */
	uint64_t train_keys; /* keyed --train-keys: 0, the protocol */
	uint64_t check_keys; /* --train-keys: keys read back */
	/* output */
	int format;
	bool quiet;
	bool force;
	const char *record; /* also write the batches run to this trace */
};

/* The dim of table t. */
static inline uint32_t opt_dim(const struct bench_opts *o, uint32_t t)
{
	return o->dims[t % o->ndims];
}

/* Whether the tables have more than one dim. */
bool opt_mixed_dims(const struct bench_opts *o);
/* The mean dim over ntables tables (each table weighs the same). */
double opt_mean_dim(const struct bench_opts *o, uint32_t ntables);
/* "128" or "16,32,64" */
const char *opt_dims_str(const struct bench_opts *o, char *buf, size_t len);

/* Set by SIGINT/SIGTERM: loops stop early and clean up. */
extern volatile sig_atomic_t bench_stop;

/* ---------------------------------------------------------------- helpers */

double now_s(void);
/* Sequential 1 MiB O_DIRECT writes of bytes (rounded up to 1 MiB) into
 * dir/raw-write.tmp and a fdatasync, the file removed after: MB/s, or a
 * negative errno (util.c). */
double raw_seq_write(const char *dir, uint64_t bytes);
/* n bytes for a raw loop's I/O buffers: zeroed, at a 2 MiB boundary and
 * asked for transparent huge pages, as the store's own staging is, so
 * that a limit is the machine's best (here direct writes from a huge page
 * ran faster); NULL if memory runs out. */
void *raw_io_buf(size_t n);
void raw_io_buf_free(void *p, size_t n);
double thread_cpu_s(void);
/* p in [0, 100] of v[0..n) (sorts v). */
double percentile(double *v, size_t n, double p);
/* "256M", "1.5G", "4096", "2^30" into bytes; 0 or -EINVAL. */
int parse_size(const char *s, uint64_t *out);
/* Pooled sum of one bag, in id order, as et_gather_pooled does it. */
void add_row(float *acc, const void *raw, et_dtype t, uint32_t dim);
size_t dtype_bytes(et_dtype t);
/* Decodes one row of the storage type to f32. */
void decode_row(float *dst, const void *raw, et_dtype t, uint32_t dim);
/* The value every system stores for column c of row r of table t (before
 * rounding to the storage type). */
float fill_value(uint32_t t, uint64_t r, uint32_t c);
/* Hash of an output buffer, to show that systems returned the same. */
uint64_t out_hash(const float *v, size_t n);
/* Removes dir and everything under it (errors ignored). */
void rm_tree(const char *dir);

/* Device counters (/sys/dev/block/M:m/stat) of the disk holding a
 * directory. */
struct disk {
	char path[96];
	bool ok;
};
struct disk_sample {
	uint64_t reads, read_ms, writes, write_ms, io_ms, queue_ms;
	uint64_t sectors_read, sectors_written;
	double t;
};
void disk_open(struct disk *d, const char *dir);
void disk_sample(const struct disk *d, struct disk_sample *s);
/* Adds what the device did from a to b (and the time) to acc, which
 * starts zeroed: disk_diff of a zeroed sample and acc is then what it did
 * over those intervals alone (a run's calls, without the benchmark's own
 * work between them). */
void disk_accum(struct disk_sample *acc, const struct disk_sample *a,
		const struct disk_sample *b);

/* What the device did between two samples. */
struct disk_delta {
	bool ok;
	double seconds;
	uint64_t reads, writes, bytes_read, bytes_written;
	double read_iops, read_lat_ms, read_qd, qd;
	double write_iops;
	double util; /* share of the time the device had I/O in flight */
};
void disk_diff(const struct disk *d, const struct disk_sample *a,
	       const struct disk_sample *b, struct disk_delta *out);
/* What the disk does over secs while this process does nothing: other
 * processes' I/O, which would blur every device figure. Warns on stderr
 * if the disk was busy more than 5% of the time. */
void disk_background(const struct disk *d, double secs, struct disk_delta *out);

/* ------------------------------------------------------------- the tables */

/* The tables of a run, as files in the run's directory. */
struct tables {
	char *dir;
	bool temp;		   /* made here, removed at the end */
	uint32_t n;		   /* table slots (the workload's tables) */
	uint64_t *rows;		   /* per slot; 0: never used, no file */
	char **path;		   /* per slot: dir/tN.et */
	int *sid;		   /* store ids while a store is open */
	struct et_table_info info; /* of the first table: geometry */
	uint32_t row_bytes;	   /* as stored, values only (no state) */
	uint64_t total_rows;
	uint64_t blocks_written;
	double setup_s;	   /* time spent creating and materializing */
	bool materialized; /* every row a run reads is on disk */
};

/* Creates (or reuses) and materializes the tables of the workload. */
int tables_setup(struct tables *tb, const struct bench_opts *o,
		 struct wl_gen *g, uint64_t touch_batches);
/* Opens a store over the tables (tables registered in tb->sid). */
int tables_store(struct tables *tb, const struct et_store_config *cfg,
		 et_store **out);
/* Removes a temporary directory. */
void tables_free(struct tables *tb);
void store_config(const struct bench_opts *o, struct et_store_config *cfg);

/* ----------------------------------------------------------- one system */

struct sys_result {
	const char *name;
	bool ran;
	char note[200];
	uint64_t batches, ids, unique;
	uint64_t planned; /* batches it was asked to replay */
	double seconds;	  /* summed batch times */
	double mean_ms, p50_ms, p99_ms;
	/* where distinct lookups were served (embtier) */
	uint64_t hbm_hits, ddr_hits, nvme_rows, lazy_rows, conflicts;
	/* peers' caches */
	uint64_t cache_hits, cache_misses;
	bool has_tiers, has_cache;
	uint64_t reads; /* blocks (embtier) or preads issued */
	uint64_t calls; /* embtier: gather calls (one a table, or --multi's) */
	bool has_reads;
	uint64_t bytes_read, bytes_written, writebacks;
	double io_wait_s; /* off-CPU thread-seconds in the calls */
	/* the calls' time by the store's clocks (embtier, has_tiers):
	 * et_stats miss_wait_ns and writeback_ns; hit work is the rest */
	double miss_s, wb_s;
	struct disk_delta disk;
	int outputs; /* 0: not compared, 1: same, -1: differ */
	uint64_t mem_peak;
	/* capacity efficiency at the end (embtier): row bytes cached and
	 * tier bytes, HBM [0] and DDR [1] */
	uint64_t row_bytes[2], capacity_bytes[2];
};

/* Per-batch output hashes of the store's run, for the peers to match. */
struct out_ref {
	uint64_t *h;
	uint64_t n;
};

struct gather_limit {
	bool ran;
	uint64_t rows, rows_pf,
	    buf_bytes; /* rows: plain loop, rows_pf: prefetching */
	double seconds, rows_s, gbs;	      /* plain loop */
	double seconds_pf, rows_s_pf, gbs_pf; /* with software prefetch */
};

struct uring_limit {
	bool ran;
	char note[160];
	unsigned qd;
	uint64_t reads, blocks; /* reads done; blocks to pick from */
	uint32_t block_size;
	double seconds, iops, mbs, lat_mean_us, lat_p50_us, lat_p99_us;
	double qd_little; /* IOPS x mean latency */
	struct disk_delta disk;
	/* per_call 0: qd reads kept in flight all along; else calls of
	 * per_call reads, each waited for whole before the next (calls) */
	uint32_t per_call;
	uint64_t calls;
};

/* Run context shared by the store's run, the limits and the peers. */
struct run_ctx {
	const struct bench_opts *o;
	struct wl_gen *g;
	struct tables *tb;
	struct disk disk;
	uint64_t warmup, measured; /* batches the store ran */
	double store_seconds;	   /* wall time of its measured phase */
	struct out_ref ref;
};

void limit_gather(struct run_ctx *rc, struct gather_limit *out);
void limit_uring(struct run_ctx *rc, unsigned qd, double seconds,
		 uint32_t per_call, struct uring_limit *out);

void peer_pread(struct run_ctx *rc, struct sys_result *out);
void peer_rocksdb(struct run_ctx *rc, struct sys_result *out);

/* ----------------------------------------------------------------- report */

struct run_report {
	const struct bench_opts *o;
	const struct tables *tb;
	const struct wl_gen *g;
	uint64_t warmup;
	struct sys_result sys[3]; /* embtier, pread, rocksdb */
	struct sys_result upd;	  /* --update-vs-read: embtier with updates */
	struct gather_limit gl;
	struct uring_limit ul_pre;    /* at the store's depth, before it */
	struct uring_limit ul;	      /* at the store's depth, after it */
	struct uring_limit ul_qd[4];  /* at the --limit-qd depths */
	struct uring_limit ul_call;   /* in calls the size of the store's */
	struct disk_delta background; /* the disk before the run */
};

void report_run(const struct run_report *r);
/* Describes the workload in one line ("zipf s=1.15 ..."), into buf. */
const char *workload_desc(const struct bench_opts *o, const struct wl_gen *g,
			  char *buf, size_t len);
void json_str(const char *s);

/* -------------------------------------------------------------- commands */

int cmd_run(const struct bench_opts *o);
int cmd_mrc(const struct bench_opts *o);
int cmd_pipeline(const struct bench_opts *o);
int cmd_flush(const struct bench_opts *o);
int cmd_reopen(const struct bench_opts *o);
int cmd_keyed(const struct bench_opts *o);
int cmd_delta(const struct bench_opts *o);

/* delta_serve.c: a serving handle of the copy dir, one reader thread
 * looking up random batches of its table "t" (rows x dim), idle and then
 * while the delta at path is applied through the handle. */
struct serve_fig {
	uint32_t batch;		/* rows a lookup */
	double idle_s, apply_s; /* the phases' lengths */
	uint64_t lookups_idle, lookups_apply;
	double idle_rows_s, apply_rows_s;	/* rows looked up a second */
	double longest_idle_s, longest_apply_s; /* the slowest lookup */
	uint64_t index_bytes;			/* the handle's, after */
	uint64_t cache_bytes, cache_hits, cache_misses; /* its row cache */
	struct et_delta_info ap;
};
int delta_serve(const char *copy, const char *path, uint64_t rows, uint32_t dim,
		uint64_t seed, struct serve_fig *f);

#endif
