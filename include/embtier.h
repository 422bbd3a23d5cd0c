/*
 * embtier.h - the one public header of libembtier, a tiered (HBM / DDR /
 * NVMe) embedding store for training recommendation models.
 *
 * Conventions, for every function below:
 *  - it returns 0 on success or a negative errno; library-specific conditions
 *    use codes in [ET_ERR_LAST, ET_ERR_BASE]; et_strerror() explains any code.
 *    errno is never set on purpose.
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

#define ET_VERSION_MAJOR 0
#define ET_VERSION_MINOR 1
#define ET_VERSION_PATCH 0
#define ET_VERSION_STRING "0.1.0"

/* Runtime version as (major << 16 | minor << 8 | patch); *str, if non-NULL,
 * receives a static string. */
int et_version(const char **str);

/* ------------------------------------------------------------------ errors */

enum {
	ET_ERR_BASE = -4000,
	ET_EMAGIC = -4001,     /* not an embtier table file */
	ET_EVERSION = -4002,   /* table file format version not supported */
	ET_EHDRSUM = -4003,    /* header checksum mismatch */
	ET_EHEADER = -4004,    /* header field out of range */
	ET_ETRUNC = -4005,     /* file shorter than its header says */
	ET_EBLOCKSUM = -4006,  /* block checksum mismatch: corrupt data */
	ET_EROWRANGE = -4007,  /* row id >= the table's logical rows */
	ET_EDIM = -4008,       /* dimension mismatch */
	ET_ENOTABLE = -4009,   /* no such table */
	ET_ECONFIG = -4010,    /* configuration makes no sense */
	ET_EURING = -4011,     /* io_uring could not be set up */
	ET_EMISMATCH = -4012,  /* table file disagrees with what was asked */
	ET_ECAPACITY = -4013,  /* a cache tier cannot hold what must be pinned */
	ET_EFAILED = -4014,    /* an earlier I/O failure left writes refused */
	ET_ESHORTIO = -4015,   /* the device transferred fewer bytes than asked */
	ET_ERR_LAST = -4015,
};

/* A message for any code this library returns (ours or a negated errno).
 * The string is static and valid forever. */
const char *et_strerror(int err);

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
	ET_OPT_SGD = 0,             /* no state */
	ET_OPT_ROWWISE_ADAGRAD = 1, /* one f32: the running mean of g^2 */
} et_optim;

/* Initial value of rows never written: a pure function of
 * (seed, row, column), so the same whenever it is first needed. */
typedef enum et_init {
	ET_INIT_ZEROS = 0,
	ET_INIT_UNIFORM = 1, /* uniform in [-scale, +scale] */
	ET_INIT_NORMAL = 2,  /* normal, mean 0, standard deviation scale */
} et_init;

/* Parameters of a new table file. Zero fields take the defaults shown. */
struct et_table_params {
	uint64_t rows;       /* logical rows, 1 .. ET_MAX_ROWS (required) */
	uint32_t dim;        /* values per row, 1 .. ET_MAX_DIM (required) */
	et_dtype dtype;      /* 0: ET_F32 */
	et_optim optim;      /* SGD (no state) when 0 */
	et_init init;        /* ET_INIT_ZEROS when 0 */
	float init_scale;    /* for uniform/normal; 0: 1/sqrt(dim) */
	uint64_t seed;       /* initializer seed; 0 is a valid seed */
	uint32_t block_size; /* bytes; 0: 4096, raised to the device's direct-I/O
			      * alignment and to fit at least one row */
};

#define ET_MAX_ROWS (1ULL << 40)
#define ET_MAX_DIM 65536

/* What a table file is; filled by et_tfile_info(). */
struct et_table_info {
	uint64_t rows;            /* logical rows */
	uint32_t dim;
	et_dtype dtype;
	et_optim optim;
	et_init init;
	float init_scale;
	uint64_t seed;
	uint32_t block_size;      /* bytes per block on disk */
	uint32_t rows_per_block;
	uint32_t row_bytes;       /* one row as stored: values, then state */
	uint32_t state_floats;    /* optimizer state per row (f32 each) */
	uint32_t format_version;
	uint64_t blocks;          /* logical blocks */
	uint64_t blocks_written;  /* materialized blocks (holes excluded) */
	uint64_t logical_bytes;   /* file size if every block were written */
	uint64_t disk_bytes;      /* bytes the file occupies on disk */
};

typedef struct et_tfile et_tfile;

/* Creates a new table file at path (which must not exist) and opens it for
 * reading and writing. It is sparse: creation writes one header block,
 * whatever the logical size. */
int et_tfile_create(const char *path, const struct et_table_params *p,
		    et_tfile **out);

#define ET_TFILE_RDONLY 0x1u

/* Opens an existing table file; the header and its checksum are verified and
 * the materialization map is rebuilt from the file's holes. */
int et_tfile_open(const char *path, unsigned flags, et_tfile **out);

/* Header fields and disk use. */
int et_tfile_info(et_tfile *tf, struct et_table_info *info);

/* Reads n rows (duplicates allowed, any order) into out, n x dim f32. If
 * state is non-NULL it receives n x state_floats optimizer state. Every block
 * read is checksum-verified; unwritten rows come from the initializer without
 * I/O. */
int et_tfile_read_rows(et_tfile *tf, const uint64_t *rows, size_t n,
		       float *out, float *state);

/* Writes n rows from in (n x dim f32) and, if state is non-NULL, their
 * optimizer state (else the stored state is kept, or zero for new rows).
 * Rows sharing a block are written with one read-modify-write of it. If a row
 * id repeats, the last occurrence wins. On an I/O error some blocks may have
 * been written; each block is written whole or not at all. */
int et_tfile_write_rows(et_tfile *tf, const uint64_t *rows, size_t n,
			const float *in, const float *state);

/* Writes the contiguous rows [first, first + n) from in (n x dim f32), with
 * large sequential I/O: the fast path for bulk loading. The optimizer state
 * of rows in whole blocks written this way is reset to zero. */
int et_tfile_write_range(et_tfile *tf, uint64_t first, uint64_t n,
			 const float *in);

/* Called by et_tfile_verify every so often; return non-zero to stop. */
typedef int (*et_progress_fn)(void *arg, uint64_t done, uint64_t total);

/* Reads and checks every materialized block. Returns 0 if all are good,
 * ET_EBLOCKSUM if any is bad (*bad_blocks counts them, *first_bad names
 * the first), or another error. */
int et_tfile_verify(et_tfile *tf, uint64_t *bad_blocks, uint64_t *first_bad,
		    et_progress_fn progress, void *arg);

/* fsync()s the file. */
int et_tfile_sync(et_tfile *tf);

/* Closes the file (without syncing). NULL is harmless. */
void et_tfile_close(et_tfile *tf);

/* ------------------------------------------------------------ conversions */

/* f32 <-> storage conversions, exposed for tools and tests. */
uint16_t et_f32_to_f16(float f);
float et_f16_to_f32(uint16_t h);
uint16_t et_f32_to_bf16(float f);
float et_bf16_to_f32(uint16_t h);

#ifdef __cplusplus
}
#endif

#endif /* EMBTIER_H */
