/*
 * table_file.h - the NVMe tier: table files, their on-disk format, and batch
 * reads and write-back of rows in their storage format.
 *
 * This module alone knows where a row lives on disk (block, slot, offset);
 * the rest of the store sees rows as row_bytes records ("raw rows": the
 * values in the storage type, then the optimizer state as f32) and asks for
 * batches of them. See docs/FORMAT.md for the byte layout.
 *
 * Threads: an et_tfile is used by one thread at a time.
 */
#ifndef ET_TABLE_FILE_H
#define ET_TABLE_FILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "embtier.h"
#include "io.h"
#include "rowlog.h"

/* Decoded, validated geometry; constant for the file's life. */
struct tf_geom {
	uint64_t rows; /* 0 for a keyed table: any u64 row, no blocks */
	bool keyed;
	uint32_t dim;
	et_dtype dtype;
	et_optim optim;
	et_init init;
	float init_scale;
	uint64_t seed;
	uint32_t block_size;
	uint32_t rows_per_block;
	uint32_t row_bytes;   /* dim * dtype_size + state_floats * 4 */
	uint32_t value_bytes; /* dim * dtype_size */
	uint32_t state_floats;
	uint64_t blocks;
	uint64_t data_off; /* byte offset of block 0 */
};

const struct tf_geom *tf_geom(const et_tfile *tf);

/* The geometry in the header of the table file at path, checked as an
 * open checks it, without opening the table (tf_header.c). */
int tf_read_geom(const char *path, struct tf_geom *g);

/* Uses io for all I/O of tf instead of a ring of its own (the store shares
 * one ring among its tables). io must outlive tf or be detached with NULL. */
void tf_attach_io(et_tfile *tf, io_ctx *io);

/* Raw rows: n records of row_bytes each. */
int tf_read_rows_raw(et_tfile *tf, const uint64_t *rows, size_t n, void *dst);

/*
 * tf_read_rows_raw of several files at once, their reads in flight
 * together: rounds in which every file queues its next chunk of blocks
 * and of row-log records on its ring, the rings are waited for, and each
 * file's reads are checked (every block and record, as one file's read
 * checks them) and copied out. The files must be distinct. Sets each
 * entry's result (an entry's failure leaves the others' rows good) and
 * returns the first error in array order.
 */
/* The segments a read's stage is cut into: each is queued, waited for,
 * checked and copied out as one chunk, and queued again at once. */
#define TF_READ_SEGS 8

struct tf_read {
	et_tfile *tf;
	const uint64_t *rows;
	size_t n;
	void *dst;
	/* optional, n bytes: rows the initializer gives (never written) are
	 * not filled in dst but marked 1 here (the others 0), for the
	 * caller to fill where they go (tf_init_row_raw) */
	uint8_t *init;
	/* optional, n pointers, set by the caller before tf_read_end: row i
	 * read from its block goes to to[i] instead of dst if to[i] is not
	 * NULL, and to[i] is then set to NULL. Rows the initializer or the
	 * row log gives still go to dst (their to[i] stays). */
	void **to;
	int result;
	/* private to tf_block.c */
	struct ent *e;	/* rows read from blocks, sorted by block */
	size_t m, next; /* e[0..m); e[next..m) not yet queued */
	struct tf_seg {
		size_t i, j;	 /* its chunk of e: e[i..j) */
		uint32_t nb, nr; /* its blocks and reads */
		bool busy;	 /* queued, not yet checked */
	} h[TF_READ_SEGS];	 /* the segments of the stage */
	unsigned old;		 /* the segment queued first */
	unsigned qn;		 /* the segment queued next */
	uint32_t *lidx;		 /* rows read from the row log */
	size_t nl;
	bool lq; /* a batch of log records in flight */
	struct rl_read lr;
	io_ctx *io;
};

/* Whether p would make a table (et_table_create's checks of the file:
 * ET_ECONFIG naming the field), and the bytes of its rows as stored. */
int tf_params_check(const struct et_table_params *p);
uint32_t tf_params_row_bytes(const struct et_table_params *p);

int tf_read_multi(struct tf_read *rd, size_t nrd);
/* tf_read_multi in two halves, for a caller with work to do while the
 * reads are in flight: tf_read_begin starts them (the first chunks sent),
 * tf_read_poll (now and then, while the caller works) reaps what has
 * completed and sends more, tf_read_end finishes them and returns as
 * tf_read_multi does. Between begin and end, nothing else may use the
 * files or their rings, and the rows' destinations are not yet theirs. */
void tf_read_begin(struct tf_read *rd, size_t nrd);
void tf_read_poll(struct tf_read *rd, size_t nrd);
int tf_read_end(struct tf_read *rd, size_t nrd);
/* Whether reads begun have nothing left that could fail: every row is
 * the initializer's (no block or log record to read) and none failed. */
bool tf_read_settled(const struct tf_read *rd, size_t nrd);
int tf_write_rows_raw(et_tfile *tf, const uint64_t *rows, size_t n,
		      const void *src);
/* tf_write_rows_raw of a file whose writes go to its row log
 * (tf_log_writes), row i's bytes at ptrs[i]: one copy, into the log's
 * append buffer. -EINVAL for a file writing blocks. */
int tf_write_rows_ptrs(et_tfile *tf, const uint64_t *rows,
		       const void *const *ptrs, size_t n);
/* n rows are about to be written to a file writing to its row log
 * (rowlog_expect); a hint, for a write-back of many rows. */
void tf_expect_rows(et_tfile *tf, uint64_t n);

/* The raw record of a row never written: its initial values, zero state. */
void tf_init_row_raw(const et_tfile *tf, uint64_t row, void *dst);

/* Whether row's block has ever been written (else its value is the
 * initializer's, and reading it costs no I/O). */
bool tf_row_materialized(const et_tfile *tf, uint64_t row);

/* Counters since open. */
struct tf_stats {
	uint64_t blocks_read, blocks_written, rmw_reads;
	uint64_t rows_lazy; /* rows served from the initializer */
	uint64_t bytes_read, bytes_written;
	struct rowlog_stats log; /* the row log's */
};
void tf_get_stats(const et_tfile *tf, struct tf_stats *st);

/* The row log (src/rowlog.h). A store's files send row writes to it
 * (tf_write_rows_raw appends); others write blocks in place, and refuse
 * (-EBUSY) once the log holds rows. */
void tf_log_writes(et_tfile *tf, bool on);
/* A keyed table's rows in the log: tf_erase_rows forgets them (rowlog_erase;
 * -EINVAL for a row-indexed table); tf_stamps and tf_expired are
 * rowlog_stamps and rowlog_expired; tf_row_logged, whether row is there. */
int tf_erase_rows(et_tfile *tf, const uint64_t *rows, size_t n,
		  uint64_t *erased);
int tf_stamps(et_tfile *tf, uint32_t tick);
/* rowlog_scores. */
int tf_scores(et_tfile *tf, uint32_t tick, uint32_t half);
int tf_expired(const et_tfile *tf, uint32_t tick, uint32_t after,
	       uint64_t **rows, size_t *n);
/* rowlog_over. */
int tf_over(const et_tfile *tf, uint64_t keep, uint32_t tick, uint32_t half,
	    uint64_t **rows, size_t *n);
bool tf_row_logged(const et_tfile *tf, uint64_t row);
/* Every row in the file's row log with where its record is
 * (rowlog_entries); none if it has no log. */
int tf_log_entries(const et_tfile *tf, struct rl_changes *c);

/* et_tfile_create and et_tfile_open for a store (owned): its lock on the
 * directory covers the file, which takes no lock of its own. */
int tf_create(const char *path, const struct et_table_params *p, bool owned,
	      et_tfile **out);
int tf_open(const char *path, unsigned flags, bool owned, et_tfile **out);

/* Two-phase commit of the log: before and after the store's record
 * (rowlog.h); tf_tail, between them, what the record must name. */
int tf_commit_prepare(et_tfile *tf, uint64_t commit);
void tf_tail(const et_tfile *tf, struct jr_tail *t);
void tf_commit_done(et_tfile *tf, uint64_t commit, bool durable);
/* Whether the log changed since the last commit. */
bool tf_changed(const et_tfile *tf);

#endif
