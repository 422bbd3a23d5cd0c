/*
 * delta_file.h - the delta file (docs/FORMAT.md, "Delta files"): a header,
 * then records, each checksummed with its place in the file, the last one
 * an END record that counts them. Writer and reader of the bytes only;
 * what the records mean for a store is src/api/delta.c's.
 *
 *   header  64: "ETDELTA1", u32 version 1, u32 flags (ET_DELTA_STATE),
 *               u64 from commit, u64 to commit, u64 checkpoint id,
 *               u32 tables, u32 0, u64 dense bytes, u64 XXH3-64 of [0, 56)
 *   record  16 + payload + 8: u32 kind, u32 n, u64 payload bytes, the
 *               payload, u64 XXH3-64 of the 16 bytes and the payload,
 *               seeded with the record's number (1, 2, ...)
 *
 * Kinds: DENSE (the dense state, first), TABLE (a table's header: 136
 * bytes), ROWS (n x (u64 id, the row as stored)), TOMBS (n x u64 id),
 * TABLE_END (u64 rows, u64 tombstones of the table), END (u64 rows, u64
 * tombstones, u64 records before it). Nothing follows END.
 */
#ifndef ET_DELTA_FILE_H
#define ET_DELTA_FILE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DF_HDR	      64
#define DF_REC_HDR    16
#define DF_TABLE      136
#define DF_CHUNK_ROWS 65536u /* rows or ids a ROWS or TOMBS record holds */

enum df_kind {
	DF_DENSE = 1,
	DF_TABLE_HDR = 2,
	DF_ROWS = 3,
	DF_TOMBS = 4,
	DF_TABLE_END = 5,
	DF_END = 6,
};

struct df_header {
	uint32_t flags;
	uint64_t from_commit, to_commit, checkpoint_id;
	uint32_t tables;
	uint64_t dense_len;
};

/* A table's header record. */
struct df_table {
	char name[65];
	uint64_t rows;
	uint32_t dim, dtype, optim, state_floats, init;
	float init_scale;
	uint64_t seed;
	uint32_t flags; /* ET_TABLE_KEYED */
	uint32_t whole; /* 1: the table is all here; the copy drops the rest */
	uint32_t rec;	/* bytes of a row after its id */
	uint64_t from_sum, to_sum; /* journal chain checksums */
};

/* Writing: to path.tmp, renamed to path by df_finish. */
struct df_async;

struct df_writer {
	int fd;
	char *path, *tmp;
	unsigned char *buf;
	size_t len, cap;
	uint64_t off, seq;
	struct df_async *a; /* df_async_start's thread, or NULL */
};

int df_create(struct df_writer *w, const char *path, const struct df_header *h);
/* One record; payload bytes from p. */
int df_record(struct df_writer *w, uint32_t kind, uint32_t n, const void *p,
	      uint64_t bytes);
/* Puts the table header record (its payload laid out from t). */
int df_table(struct df_writer *w, const struct df_table *t);
/* The END record, a sync, the rename and the directory's sync; *bytes: the
 * file's size. */
int df_finish(struct df_writer *w, uint64_t rows, uint64_t tombs,
	      uint64_t *bytes);
/* Drops what was written (the temporary file). */
void df_abort(struct df_writer *w);

/*
 * From df_async_start to df_async_stop, df_record hands each record to a
 * thread of the writer's, which checksums and writes it while the caller
 * goes on (one record at a time: df_record waits for the one before), so
 * the caller must not change a payload until the record after it has been
 * handed over, nor call any other writer function meanwhile. An error of
 * the thread comes back from the next df_record or from df_async_stop.
 * df_async_start failing leaves the writer as it was (records are written
 * in the caller's thread).
 */
int df_async_start(struct df_writer *w);
int df_async_stop(struct df_writer *w);

/* Reading: every record is checked before it is handed out. */
struct df_reader {
	int fd;
	const char *path;
	uint64_t size, off, seq;
	unsigned char *buf; /* the current record's payload */
	size_t cap;
	bool ended;
};

struct df_rec {
	uint32_t kind, n;
	uint64_t bytes;
	const unsigned char *p; /* payload, valid until the next call */
};

/* Opens path and checks its header: ET_EDELTA (the detail naming the
 * file and what is wrong), or -errno. */
int df_open(struct df_reader *r, const char *path, struct df_header *h);
/* The next record: 0 and *rec; ET_EDELTA for a damaged, misplaced or
 * missing one (past END: a record there, or bytes). */
int df_next(struct df_reader *r, struct df_rec *rec);
/* Lays out a TABLE payload into t; ET_EDELTA if a field is out of range. */
int df_table_parse(struct df_reader *r, const struct df_rec *rec,
		   struct df_table *t);
/* Back to the first record (a second pass). */
void df_rewind(struct df_reader *r);
void df_close(struct df_reader *r);

#endif
