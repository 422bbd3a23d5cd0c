/*
 * table_file_impl.h - the state of a table file, shared by the files that
 * implement it (table_file.c has the map of which does what). Not
 * installed, and not for the rest of the store: it uses table_file.h, and
 * sees an et_tfile only through it.
 *
 * The functions here are those more than one of the files calls; each is
 * described where it is defined, when its name does not say enough.
 */
#ifndef ET_TABLE_FILE_IMPL_H
#define ET_TABLE_FILE_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "embtier.h"
#include "io.h"
#include "rowlog.h"
#include "table_file.h"

#define TF_VERSION   1
#define TF_TRAILER   16		/* u64 block number, u64 checksum */
#define TF_MAX_BLOCK (1u << 20) /* fits the largest row: 65536 f32 + state */

/* The materialization map: a bit per block, two levels, leaves lazily. */
struct matmap {
	uint64_t nleaves;
	uint64_t **leaves;
	uint64_t count; /* bits set */
};

struct et_tfile {
	int fd;
	int lock_fd; /* DIR/LOCK, shared, while a tool writes (-1: none) */
	bool rdonly;
	struct tf_geom g;
	uint32_t mem_align;
	io_ctx *io;	/* the ring in use: attached, or own_io */
	io_ctx *own_io; /* made on first I/O if none was attached */
	struct matmap map;
	char *stage; /* stage_blocks aligned blocks for batch I/O */
	struct io_req *reqs;
	uint32_t stage_blocks;
	char *wr_buf; /* bulk-load ring (WR_SLOTS x WR_SLOT_BYTES), kept
		       * from the first et_tfile_write_range to close */
	size_t wr_bytes;
	uint8_t *stage_hole; /* per stage block: filled from the initializer
			      * (a hole on disk), not read */
	uint64_t *stage_blk; /* per stage block: which block it holds */
	char *pre;	     /* the stage before a write's rows go in: what a
			      * block held, should its write fail */
	char *path;
	size_t path_len;
	struct torn *torn; /* blocks whose last write failed: their image */
	size_t ntorn, torn_cap;
	struct rowlog *log; /* rows written by a store (PATH.log) */
	uint64_t *lrows;    /* et_tfile_rows: the log's rows, sorted */
	size_t nlrows;
	uint64_t lrows_epoch; /* rowlog_epoch when lrows was made */
	unsigned char *rraw;  /* et_tfile_read_rows: raw rows, kept for the
			      * next call (the largest call's size) */
	size_t rraw_bytes;
	bool log_writes; /* row writes go to the log (a store's file) */
	struct tf_stats st;
};

/*
 * A block write that fails (an error, or a short transfer) may have left
 * the block torn on disk: half new, half old, failing its checksum. What
 * the block held before that write is kept here until a write of the block
 * succeeds, and stands in for the disk when the block is read meanwhile:
 * readers see the block as not written at all, as promised, and a retry of
 * the write-back (et_flush) rebuilds the block instead of tripping over its
 * own half-written copy. Few blocks, only after I/O errors.
 */
struct torn {
	uint64_t block;
	void *img; /* the block before the failed write */
};

/* table_file.c */
int tf_io(et_tfile *tf, io_ctx **out);

/* tf_map.c */
int tf_map_init(struct matmap *m, uint64_t blocks);
void tf_map_free(struct matmap *m);
bool tf_map_test(const struct matmap *m, uint64_t b);
int tf_map_set(struct matmap *m, uint64_t b);
uint64_t tf_map_next(const struct matmap *m, uint64_t b, uint64_t end);
int tf_map_load(et_tfile *tf);

/* tf_header.c */
void tf_header_encode(const struct tf_geom *g, unsigned char *h);
int tf_header_decode(const unsigned char *h, size_t n, struct tf_geom *g);
uint32_t tf_state_floats_of(et_optim o);
bool tf_geom_derive(struct tf_geom *g);

/* tf_block.c */
int tf_stage(et_tfile *tf);
uint64_t tf_block_off(const et_tfile *tf, uint64_t b);
uint32_t tf_block_rows(const et_tfile *tf, uint64_t b);
int tf_block_check(const et_tfile *tf, uint64_t b, const unsigned char *buf);
void tf_block_seal(const et_tfile *tf, uint64_t b, unsigned char *buf);
/* ET_EROWRANGE unless every one of the n rows is in the table. */
int tf_check_rows(const et_tfile *tf, const uint64_t *rows, size_t n);

#endif
