/*
 * table_file.c - the NVMe tier: table files on disk.
 *
 * A table file is a header block followed by fixed-size blocks of packed
 * rows (docs/FORMAT.md has the byte layout):
 *
 *   0          block_size   2*block_size            (1+B)*block_size
 *   | header   | block 0    | block 1    | ...      |
 *              | row row row ... pad | blkno | xxh3 |
 *
 * The file is created sparse at its full logical size, so a block never
 * written is a hole. At open, the holes are read back with SEEK_DATA and
 * SEEK_HOLE into the materialization map, a bitmap of written blocks kept in
 * 4 KiB leaves allocated only where some block is written; a row whose block
 * is not in the map is served from the initializer with no I/O at all.
 *
 * Every block read is checked against its trailer: the XXH3 of everything
 * before the checksum, which covers the block number too, so a block written
 * to the wrong place fails as surely as a flipped bit. A block that reads as
 * all zeros is a hole as far as data is concerned (a filesystem may report
 * an allocated but never-written range as data); any other mismatch is
 * ET_EBLOCKSUM and the data is never used.
 *
 * Writes are read-modify-write of whole blocks: all rows of a batch that
 * fall in one block are applied to one copy of it and written once. The
 * rest of the store sees rows only as records of row_bytes; nothing outside
 * this file knows blocks, slots or offsets.
 *
 * One thread at a time per et_tfile.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dtype.h"
#include "endian.h"
#include "fileio.h"
#include "error.h"
#include "hash.h"
#include "io.h"
#include "mem_host.h"
#include "checkpoint.h"
#include "rowinit.h"
#include "rowlog.h"
#include "table_file.h"

#define TF_MAGIC       "EMBTIERT"
#define TF_VERSION     1
#define TF_HDR_BYTES   256 /* bytes of the header block that mean something */
#define TF_HDR_SUM_OFF 248
#define TF_TRAILER     16	  /* u64 block number, u64 checksum */
#define TF_MAX_BLOCK   (1u << 20) /* fits the largest row: 65536 f32 + state */
#define TF_STAGE_BYTES (4u << 20) /* batch staging per file, at most */
#define MAP_LEAF_BITS  32768u	  /* one 4 KiB leaf */

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
	unsigned char *rraw; /* et_tfile_read_rows: raw rows, kept for the
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

/* ---------------------------------------------------- materialization map */

static int map_init(struct matmap *m, uint64_t blocks)
{
	m->nleaves = (blocks + MAP_LEAF_BITS - 1) / MAP_LEAF_BITS;
	m->count = 0;
	m->leaves = mem_alloc(m->nleaves * sizeof(*m->leaves), 0);
	return m->leaves ? 0 : -ENOMEM;
}

static void map_free(struct matmap *m)
{
	if (!m->leaves)
		return;
	for (uint64_t i = 0; i < m->nleaves; i++)
		mem_free(m->leaves[i], MAP_LEAF_BITS / 8, 0);
	mem_free(m->leaves, m->nleaves * sizeof(*m->leaves), 0);
	m->leaves = NULL;
}

static bool map_test(const struct matmap *m, uint64_t b)
{
	const uint64_t *leaf = m->leaves[b / MAP_LEAF_BITS];
	uint64_t bit = b % MAP_LEAF_BITS;

	return leaf && (leaf[bit / 64] >> (bit % 64) & 1);
}

static int map_set(struct matmap *m, uint64_t b)
{
	uint64_t **leaf = &m->leaves[b / MAP_LEAF_BITS];
	uint64_t bit = b % MAP_LEAF_BITS;

	if (!*leaf) {
		*leaf = mem_alloc(MAP_LEAF_BITS / 8, 0);
		if (!*leaf)
			return -ENOMEM;
	}
	if (!((*leaf)[bit / 64] >> (bit % 64) & 1)) {
		(*leaf)[bit / 64] |= 1ULL << (bit % 64);
		m->count++;
	}
	return 0;
}

/* Next set bit at or after b, or UINT64_MAX. */
static uint64_t map_next(const struct matmap *m, uint64_t b, uint64_t end)
{
	while (b < end) {
		const uint64_t *leaf = m->leaves[b / MAP_LEAF_BITS];
		uint64_t bit = b % MAP_LEAF_BITS;

		if (!leaf) {
			b = (b / MAP_LEAF_BITS + 1) * MAP_LEAF_BITS;
			continue;
		}
		uint64_t w = leaf[bit / 64] >> (bit % 64);
		if (w)
			return b + (uint64_t)__builtin_ctzll(w) < end
				   ? b + (uint64_t)__builtin_ctzll(w)
				   : UINT64_MAX;
		b = (b / 64 + 1) * 64;
	}
	return UINT64_MAX;
}

/* Rebuilds the map from the file's data extents. */
static int map_load(et_tfile *tf)
{
	const struct tf_geom *g = &tf->g;
	off_t end = (off_t)(g->data_off + g->blocks * g->block_size);
	off_t pos = (off_t)g->data_off;
	int ret;

	while (pos < end) {
		off_t data = lseek(tf->fd, pos, SEEK_DATA);
		off_t hole;

		if (data < 0) {
			if (errno == ENXIO)
				break; /* no data past pos */
			return -errno;
		}
		hole = lseek(tf->fd, data, SEEK_HOLE);
		if (hole < 0)
			return -errno;
		if (hole > end)
			hole = end;
		uint64_t b0 =
		    (uint64_t)(data - (off_t)g->data_off) / g->block_size;
		uint64_t b1 = ((uint64_t)(hole - (off_t)g->data_off) +
			       g->block_size - 1) /
			      g->block_size;
		for (uint64_t b = b0; b < b1 && b < g->blocks; b++) {
			ret = map_set(&tf->map, b);
			if (ret)
				return ret;
		}
		pos = hole;
	}
	return 0;
}

/* ---------------------------------------------------------------- header */

static void header_encode(const struct tf_geom *g, unsigned char *h)
{
	memset(h, 0, TF_HDR_BYTES);
	memcpy(h, TF_MAGIC, 8);
	put32(h + 8, TF_VERSION);
	put32(h + 12, TF_HDR_BYTES);
	put64(h + 16, g->rows);
	put32(h + 24, g->dim);
	put32(h + 28, (uint32_t)g->dtype);
	put32(h + 32, (uint32_t)g->optim);
	put32(h + 36, g->state_floats);
	put32(h + 40, (uint32_t)g->init);
	uint32_t sb;
	memcpy(&sb, &g->init_scale, 4);
	put32(h + 44, sb);
	put64(h + 48, g->seed);
	put32(h + 56, g->block_size);
	put32(h + 60, g->rows_per_block);
	put32(h + 64, g->row_bytes);
	put32(h + 68, 0); /* flags */
	put64(h + 72, g->data_off);
	put64(h + 80, g->blocks);
	put64(h + TF_HDR_SUM_OFF, hash_bytes(h, TF_HDR_SUM_OFF));
}

static uint32_t state_floats_of(et_optim o)
{
	return o == ET_OPT_ROWWISE_ADAGRAD ? 1 : 0;
}

/* Fills the derived fields of g from the primary ones; 0 or ET_EHEADER-ish
 * (the caller chooses the code). */
static bool geom_derive(struct tf_geom *g)
{
	size_t es = dtype_size(g->dtype);

	if (!es || g->dim == 0 || g->dim > ET_MAX_DIM || g->rows == 0 ||
	    g->rows > ET_MAX_ROWS || g->optim > ET_OPT_ROWWISE_ADAGRAD ||
	    g->init > ET_INIT_NORMAL || !isfinite(g->init_scale) ||
	    g->init_scale < 0)
		return false;
	g->state_floats = state_floats_of(g->optim);
	g->value_bytes = g->dim * (uint32_t)es;
	g->row_bytes = g->value_bytes + g->state_floats * 4;
	if (g->block_size < g->row_bytes + TF_TRAILER ||
	    g->block_size > TF_MAX_BLOCK || g->block_size % 512)
		return false;
	g->rows_per_block = (g->block_size - TF_TRAILER) / g->row_bytes;
	g->blocks = (g->rows + g->rows_per_block - 1) / g->rows_per_block;
	g->data_off = g->block_size;
	return true;
}

/* The checks of geom_derive on a caller's parameters, before anything is
 * created, each failure with its own message; the device's alignment of
 * block_size is checked once the file is open. */
static int params_check(const struct et_table_params *p)
{
	unsigned dtype = p->dtype ? (unsigned)p->dtype : ET_F32;
	uint64_t rb;

	if (p->rows == 0 || p->rows > ET_MAX_ROWS)
		return err_set(ET_ECONFIG,
			       "et_table_params.rows %llu out of range "
			       "1..2^40",
			       (unsigned long long)p->rows);
	if (p->dim == 0 || p->dim > ET_MAX_DIM)
		return err_set(ET_ECONFIG,
			       "et_table_params.dim %u out of range 1..%d",
			       p->dim, ET_MAX_DIM);
	if (!dtype_size((et_dtype)dtype))
		return err_set(ET_ECONFIG, "et_table_params.dtype %u unknown",
			       dtype);
	if ((unsigned)p->optim > ET_OPT_ROWWISE_ADAGRAD)
		return err_set(ET_ECONFIG, "et_table_params.optim %u unknown",
			       (unsigned)p->optim);
	if ((unsigned)p->init > ET_INIT_NORMAL)
		return err_set(ET_ECONFIG, "et_table_params.init %u unknown",
			       (unsigned)p->init);
	if (!isfinite(p->init_scale) || p->init_scale < 0)
		return err_set(ET_ECONFIG,
			       "et_table_params.init_scale %g not finite and "
			       ">= 0",
			       p->init_scale);
	if (!p->block_size)
		return 0;
	rb = (uint64_t)p->dim * dtype_size((et_dtype)dtype) +
	     4 * state_floats_of(p->optim);
	if (p->block_size > TF_MAX_BLOCK || p->block_size % 512)
		return err_set(ET_ECONFIG,
			       "et_table_params.block_size %u not a multiple "
			       "of 512 up to %u",
			       p->block_size, TF_MAX_BLOCK);
	if (p->block_size < rb + TF_TRAILER)
		return err_set(ET_ECONFIG,
			       "et_table_params.block_size %u too small for "
			       "one row (%llu bytes + %d of trailer)",
			       p->block_size, (unsigned long long)rb,
			       TF_TRAILER);
	return 0;
}

static int header_decode(const unsigned char *h, size_t n, struct tf_geom *g)
{
	uint32_t sb;

	if (n < TF_HDR_BYTES)
		return n >= 8 && memcmp(h, TF_MAGIC, 8) ? ET_EMAGIC : ET_ETRUNC;
	if (memcmp(h, TF_MAGIC, 8))
		return ET_EMAGIC;
	if (get32(h + 8) != TF_VERSION)
		return ET_EVERSION;
	if (get64(h + TF_HDR_SUM_OFF) != hash_bytes(h, TF_HDR_SUM_OFF))
		return ET_EHDRSUM;
	memset(g, 0, sizeof(*g));
	g->rows = get64(h + 16);
	g->dim = get32(h + 24);
	g->dtype = (et_dtype)get32(h + 28);
	g->optim = (et_optim)get32(h + 32);
	g->init = (et_init)get32(h + 40);
	sb = get32(h + 44);
	memcpy(&g->init_scale, &sb, 4);
	g->seed = get64(h + 48);
	g->block_size = get32(h + 56);
	if (get32(h + 12) != TF_HDR_BYTES || !geom_derive(g) ||
	    get32(h + 36) != g->state_floats ||
	    get32(h + 60) != g->rows_per_block ||
	    get32(h + 64) != g->row_bytes || get32(h + 68) != 0 ||
	    get64(h + 72) != g->data_off || get64(h + 80) != g->blocks)
		return ET_EHEADER;
	return 0;
}

/* -------------------------------------------------------------- lifetime */

static void tf_free(et_tfile *tf)
{
	rowlog_close(tf->log);
	free(tf->lrows);
	mem_free(tf->rraw, tf->rraw_bytes, 0);
	if (tf->fd >= 0)
		close(tf->fd);
	if (tf->lock_fd >= 0)
		close(tf->lock_fd);
	for (size_t i = 0; i < tf->ntorn; i++)
		mem_free(tf->torn[i].img, tf->g.block_size, 0);
	mem_free(tf->torn, tf->torn_cap * sizeof(*tf->torn), 0);
	mem_free(tf->path, tf->path_len, 0);
	mem_free(tf->stage_hole, tf->stage_blocks, 0);
	mem_free(tf->stage_blk, tf->stage_blocks * sizeof(uint64_t), 0);
	mem_free(tf->pre, (size_t)tf->stage_blocks * tf->g.block_size, 0);
	io_close(tf->own_io);
	map_free(&tf->map);
	if (tf->stage)
		mem_free(tf->stage, (size_t)tf->stage_blocks * tf->g.block_size,
			 tf->mem_align);
	mem_free(tf->reqs, tf->stage_blocks * sizeof(*tf->reqs), 0);
	if (tf->wr_buf)
		mem_free(tf->wr_buf, tf->wr_bytes, tf->mem_align);
	mem_free(tf, sizeof(*tf), 0);
}

static et_tfile *tf_new(const char *path)
{
	et_tfile *tf = mem_alloc(sizeof(*tf), 0);

	if (!tf)
		return NULL;
	tf->fd = tf->lock_fd = -1;
	tf->path_len = strlen(path) + 1;
	tf->path = mem_alloc(tf->path_len, 0);
	if (!tf->path) {
		mem_free(tf, sizeof(*tf), 0);
		return NULL;
	}
	memcpy(tf->path, path, tf->path_len);
	return tf;
}

static int tf_io(et_tfile *tf, io_ctx **out)
{
	if (!tf->io) {
		int ret = io_open(0, &tf->own_io, NULL);

		if (ret)
			return ret;
		tf->io = tf->own_io;
	}
	*out = tf->io;
	return 0;
}

/* The staging area for batch I/O: as many blocks as the ring is deep. */
static int tf_stage(et_tfile *tf)
{
	io_ctx *io;
	int ret;

	if (tf->stage)
		return 0;
	ret = tf_io(tf, &io);
	if (ret)
		return ret;
	/* Four times as many blocks as the ring is deep, within
	 * TF_STAGE_BYTES: the ring stays full while a chunk is read, and
	 * drains only at the chunk's end. */
	tf->stage_blocks = TF_STAGE_BYTES / tf->g.block_size;
	if (tf->stage_blocks > 4 * io_depth(io))
		tf->stage_blocks = 4 * io_depth(io);
	if (tf->stage_blocks == 0)
		tf->stage_blocks = 1;
	tf->stage = mem_alloc((size_t)tf->stage_blocks * tf->g.block_size,
			      tf->mem_align);
	tf->reqs = mem_alloc(tf->stage_blocks * sizeof(*tf->reqs), 0);
	tf->stage_hole = mem_alloc(tf->stage_blocks, 0);
	tf->stage_blk = mem_alloc(tf->stage_blocks * sizeof(uint64_t), 0);
	if (!tf->stage || !tf->reqs || !tf->stage_hole || !tf->stage_blk) {
		mem_free(tf->stage_hole, tf->stage_blocks, 0);
		mem_free(tf->stage_blk, tf->stage_blocks * sizeof(uint64_t), 0);
		tf->stage_hole = NULL;
		tf->stage_blk = NULL;
		mem_free(tf->stage, (size_t)tf->stage_blocks * tf->g.block_size,
			 tf->mem_align);
		mem_free(tf->reqs, tf->stage_blocks * sizeof(*tf->reqs), 0);
		tf->stage = NULL;
		tf->reqs = NULL;
		return -ENOMEM;
	}
	return 0;
}

void tf_attach_io(et_tfile *tf, io_ctx *io)
{
	tf->io = io ? io : tf->own_io;
}

/* The directory of the file: where its store's commit record is. */
static int dir_of(const char *path, char *dir, size_t cap)
{
	const char *slash = strrchr(path, '/');
	size_t n = slash ? (size_t)(slash - path) : 1;

	if (n >= cap)
		return -ENAMETOOLONG;
	if (!slash)
		memcpy(dir, ".", 1);
	else if (n == 0)
		memcpy(dir, "/", n = 1);
	else
		memcpy(dir, path, n);
	dir[n] = 0;
	return 0;
}

/*
 * A writer that is not a store (a tool, et_tfile_open/create) holds an
 * exclusive lock on the file, and, in a store's directory, a shared one
 * on DIR/LOCK, for its life: a second writer of the file, or a store
 * opening the directory (which takes DIR/LOCK exclusively), is refused,
 * and so is such a writer while a store has the directory. A store's own
 * files need neither: its lock on the directory covers them.
 */
static int lock_file(et_tfile *tf)
{
	char dir[4096], p[4200];
	struct stat st;

	if (flock(tf->fd, LOCK_EX | LOCK_NB))
		return errno != EWOULDBLOCK
			   ? -errno
			   : err_set(ET_ELOCKED,
				     "%s is open for writing elsewhere",
				     tf->path);
	if (dir_of(tf->path, dir, sizeof(dir)) ||
	    (size_t)snprintf(p, sizeof(p), "%s/CHECKPOINT", dir) >= sizeof(p))
		return -ENAMETOOLONG;
	if (stat(p, &st))
		return 0; /* not a store's directory */
	snprintf(p, sizeof(p), "%s/LOCK", dir);
	tf->lock_fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (tf->lock_fd < 0)
		return -errno;
	if (flock(tf->lock_fd, LOCK_SH | LOCK_NB))
		return errno != EWOULDBLOCK
			   ? -errno
			   : err_set(ET_ELOCKED,
				     "%s belongs to a store that is open "
				     "(%s is locked)",
				     tf->path, p);
	return 0;
}

/* A new file's row log: empty, whatever a table of the same name that
 * was deleted left behind. */
static int log_fresh(et_tfile *tf)
{
	static const char *const ext[] = {".log", ".idx", ".idx.new"};
	char p[4096];

	for (size_t i = 0; i < sizeof(ext) / sizeof(ext[0]); i++) {
		if ((size_t)snprintf(p, sizeof(p), "%s%s", tf->path, ext[i]) >=
		    sizeof(p))
			return -ENAMETOOLONG;
		if (unlink(p) && errno != ENOENT)
			return -errno;
	}
	struct jr_expect x = {.mode = JR_UNNAMED};

	return rowlog_open(tf->path, tf->g.row_bytes, tf->g.rows, &x, false,
			   &tf->log);
}

int tf_create(const char *path, const struct et_table_params *p, bool owned,
	      et_tfile **out)
{
	unsigned char *hdr = NULL;
	uint32_t off_align;
	et_tfile *tf;
	int ret;

	err_clear();
	if (!path || !p || !out)
		return err_set(-EINVAL, "%s is NULL",
			       !path ? "path"
			       : !p  ? "p"
				     : "out");
	ret = params_check(p);
	if (ret)
		return ret;
	tf = tf_new(path);
	if (!tf)
		return -ENOMEM;
	tf->g.rows = p->rows;
	tf->g.dim = p->dim;
	tf->g.dtype = p->dtype ? p->dtype : ET_F32;
	tf->g.optim = p->optim;
	tf->g.init = p->init;
	tf->g.init_scale = p->init_scale;
	tf->g.seed = p->seed;
	if (tf->g.init != ET_INIT_ZEROS && tf->g.init_scale == 0 && p->dim)
		tf->g.init_scale = 1.0f / sqrtf((float)p->dim);

	ret = io_open_file(path, O_RDWR | O_CREAT | O_EXCL, 0644, &tf->fd);
	if (ret)
		goto err_free;
	ret = owned ? 0 : lock_file(tf);
	if (ret)
		goto err_unlink;
	ret = io_file_align(tf->fd, &tf->mem_align, &off_align);
	if (ret)
		goto err_unlink;
	/* Block size: as asked, else 4 KiB; at least the device alignment
	 * and big enough for one row. */
	{
		size_t es = dtype_size(tf->g.dtype);
		uint64_t rb = (uint64_t)p->dim * (es ? es : 4) +
			      4 * state_floats_of(p->optim);
		uint32_t bs = p->block_size;

		if (!bs) {
			bs = off_align > 4096 ? off_align : 4096;
			while (bs < rb + TF_TRAILER && bs < TF_MAX_BLOCK)
				bs *= 2;
		}
		if (bs % off_align) {
			ret = err_set(ET_ECONFIG,
				      "et_table_params.block_size %u not a "
				      "multiple of the device's direct-I/O "
				      "alignment, %u",
				      bs, off_align);
			goto err_unlink;
		}
		tf->g.block_size = bs;
	}
	if (!geom_derive(&tf->g)) { /* params_check let nothing through */
		ret = err_set(ET_ECONFIG, "et_table_params inconsistent");
		goto err_unlink;
	}
	hdr = mem_alloc(tf->g.block_size, tf->mem_align);
	if (!hdr) {
		ret = -ENOMEM;
		goto err_unlink;
	}
	header_encode(&tf->g, hdr);
	if (pwrite(tf->fd, hdr, tf->g.block_size, 0) !=
	    (ssize_t)tf->g.block_size) {
		ret = errno ? -errno : ET_ESHORTIO;
		goto err_hdr;
	}
	if (ftruncate(tf->fd, (off_t)(tf->g.data_off +
				      tf->g.blocks * tf->g.block_size))) {
		ret = -errno; /* -EFBIG: too large for this filesystem */
		goto err_hdr;
	}
	if (fdatasync(tf->fd)) {
		ret = -errno;
		goto err_hdr;
	}
	/* its name too: a commit record may name the table from now on */
	ret = fio_sync_dir(path, 0);
	if (ret)
		goto err_hdr;
	ret = map_init(&tf->map, tf->g.blocks);
	if (!ret)
		ret = log_fresh(tf);
	if (ret)
		goto err_hdr;
	mem_free(hdr, tf->g.block_size, tf->mem_align);
	*out = tf;
	return 0;

err_hdr:
	mem_free(hdr, tf->g.block_size, tf->mem_align);
err_unlink:
	unlink(path);
err_free:
	tf_free(tf);
	return ret;
}

/* The identity of a directory's record file (inode, size, change times;
 * a commit renames a new file in): all zero when there is none. */
struct rec_id {
	dev_t dev;
	ino_t ino;
	off_t size;
	struct timespec mtim, ctim;
};

static int rec_identity(const char *dir, struct rec_id *id)
{
	char p[4200];
	struct stat st;

	memset(id, 0, sizeof(*id));
	if ((size_t)snprintf(p, sizeof(p), "%s/CHECKPOINT", dir) >= sizeof(p))
		return -ENAMETOOLONG;
	if (stat(p, &st))
		return errno == ENOENT ? 0 : -errno;
	id->dev = st.st_dev;
	id->ino = st.st_ino;
	id->size = st.st_size;
	id->mtim = st.st_mtim;
	id->ctim = st.st_ctim;
	return 0;
}

static bool rec_same(const struct rec_id *a, const struct rec_id *b)
{
	return a->dev == b->dev && a->ino == b->ino && a->size == b->size &&
	       a->mtim.tv_sec == b->mtim.tv_sec &&
	       a->mtim.tv_nsec == b->mtim.tv_nsec &&
	       a->ctim.tv_sec == b->ctim.tv_sec &&
	       a->ctim.tv_nsec == b->ctim.tv_nsec;
}

/* The table name a store gives the file at path: its base name less
 * ".et" (empty: not a store's name). */
static void table_name(const char *path, char *name, size_t cap)
{
	const char *b = strrchr(path, '/');
	size_t n;

	b = b ? b + 1 : path;
	n = strlen(b);
	name[0] = 0;
	if (n > 3 && n - 3 < cap && !strcmp(b + n - 3, ".et")) {
		memcpy(name, b, n - 3);
		name[n - 3] = 0;
	}
}

/* What the directory's commit record says of the table at path
 * (checkpoint.h, journal.h). */
static int dir_expect(const char *dir, const char *path, struct jr_expect *x)
{
	struct ckpt_rec r;
	const struct ckpt_table *t;
	char name[CKPT_NAME_MAX + 2];
	int ret = ckpt_read(dir, &r, false, NULL, NULL);

	memset(x, 0, sizeof(*x));
	if (ret)
		return ret;
	x->commit = r.commit;
	table_name(path, name, sizeof(name));
	if (!r.version)
		x->mode = JR_NORECORD;
	else if (r.version < 3)
		x->mode = JR_LEGACY;
	else if ((t = ckpt_find(&r, name))) {
		x->mode = JR_NAMED;
		x->jlen = t->jlen;
		x->jsum = t->jsum;
	} else {
		x->mode = JR_UNNAMED;
	}
	ckpt_rec_free(&r);
	return 0;
}

/*
 * The row log, as of what the directory's commit record names. A reader
 * beside a live store looks at the record again once the log's index is
 * loaded: if the store committed in between (its journal may then have
 * moved past, or been replaced by a snapshot), it loads again.
 */
static int log_open(et_tfile *tf)
{
	struct rec_id id, again;
	struct jr_expect x;
	char dir[4096];
	int ret = dir_of(tf->path, dir, sizeof(dir));

	for (int tries = 0; !ret && tries < 16; tries++) {
		ret = rec_identity(dir, &id);
		if (!ret)
			ret = dir_expect(dir, tf->path, &x);
		if (!ret)
			ret = rowlog_open(tf->path, tf->g.row_bytes, tf->g.rows,
					  &x, tf->rdonly, &tf->log);
		if (!tf->rdonly)
			return ret;
		if (rec_identity(dir, &again) || !rec_same(&again, &id)) {
			rowlog_close(tf->log);
			tf->log = NULL;
			err_clear();
			ret = 0;
			continue;
		}
		return ret;
	}
	return ret ? ret : -EAGAIN; /* the store kept committing */
}

int et_tfile_create(const char *path, const struct et_table_params *p,
		    et_tfile **out)
{
	return tf_create(path, p, false, out);
}

int et_tfile_open(const char *path, unsigned flags, et_tfile **out)
{
	return tf_open(path, flags, false, out);
}

int tf_open(const char *path, unsigned flags, bool owned, et_tfile **out)
{
	uint32_t off_align, hbytes;
	unsigned char *hdr;
	struct stat st;
	et_tfile *tf;
	ssize_t n;
	int ret;

	err_clear();
	if (!path || !out)
		return err_set(-EINVAL, "%s is NULL", !path ? "path" : "out");
	if (flags & ~ET_TFILE_RDONLY)
		return err_set(-EINVAL, "flags 0x%x unknown",
			       flags & ~ET_TFILE_RDONLY);
	tf = tf_new(path);
	if (!tf)
		return -ENOMEM;
	tf->rdonly = flags & ET_TFILE_RDONLY;
	ret = io_open_file(path, tf->rdonly ? O_RDONLY : O_RDWR, 0, &tf->fd);
	if (!ret && !tf->rdonly && !owned)
		ret = lock_file(tf);
	if (ret)
		goto err_free;
	ret = io_file_align(tf->fd, &tf->mem_align, &off_align);
	if (ret)
		goto err_free;
	hbytes = off_align > 4096 ? off_align : 4096;
	hdr = mem_alloc(hbytes, tf->mem_align);
	if (!hdr) {
		ret = -ENOMEM;
		goto err_free;
	}
	n = pread(tf->fd, hdr, hbytes, 0);
	if (n < 0) {
		ret = -errno;
		mem_free(hdr, hbytes, tf->mem_align);
		goto err_free;
	}
	ret = header_decode(hdr, (size_t)n, &tf->g);
	mem_free(hdr, hbytes, tf->mem_align);
	if (ret) {
		ret = err_set(ret, "%s: %s", path, et_strerror(ret));
		goto err_free;
	}
	if (tf->g.block_size % off_align) {
		ret = ET_EHEADER; /* not usable with O_DIRECT on this device */
		goto err_free;
	}
	if (fstat(tf->fd, &st)) {
		ret = -errno;
		goto err_free;
	}
	if ((uint64_t)st.st_size <
	    tf->g.data_off + tf->g.blocks * tf->g.block_size) {
		ret = err_set(
		    ET_ETRUNC, "%s is %llu bytes; its header says %llu", path,
		    (unsigned long long)st.st_size,
		    (unsigned long long)(tf->g.data_off +
					 tf->g.blocks * tf->g.block_size));
		goto err_free;
	}
	ret = map_init(&tf->map, tf->g.blocks);
	if (ret)
		goto err_free;
	ret = map_load(tf);
	if (!ret)
		ret = log_open(tf);
	if (ret)
		goto err_free;
	*out = tf;
	return 0;

err_free:
	tf_free(tf);
	return ret;
}

void et_tfile_close(et_tfile *tf)
{
	if (tf)
		tf_free(tf);
}

const struct tf_geom *tf_geom(const et_tfile *tf)
{
	return &tf->g;
}

int et_tfile_info(et_tfile *tf, struct et_table_info *info)
{
	struct stat st;

	err_clear();
	if (!tf || !info)
		return err_set(-EINVAL, "%s is NULL", !tf ? "tf" : "info");
	if (fstat(tf->fd, &st))
		return -errno;
	memset(info, 0, sizeof(*info));
	info->rows = tf->g.rows;
	info->dim = tf->g.dim;
	info->dtype = tf->g.dtype;
	info->optim = tf->g.optim;
	info->init = tf->g.init;
	info->init_scale = tf->g.init_scale;
	info->seed = tf->g.seed;
	info->block_size = tf->g.block_size;
	info->rows_per_block = tf->g.rows_per_block;
	info->row_bytes = tf->g.row_bytes;
	info->state_floats = tf->g.state_floats;
	info->format_version = TF_VERSION;
	info->blocks = tf->g.blocks;
	info->blocks_written = tf->map.count;
	info->logical_bytes = tf->g.data_off + tf->g.blocks * tf->g.block_size;
	info->disk_bytes =
	    (uint64_t)st.st_blocks * 512 + rowlog_disk_bytes(tf->log);
	info->rows_logged = rowlog_count(tf->log);
	return 0;
}

int et_tfile_rows(et_tfile *tf, uint64_t from, uint64_t *rows, size_t max,
		  size_t *n)
{
	const struct tf_geom *g;
	size_t lo, hi, k = 0;
	uint64_t r, b;

	err_clear();
	if (!tf || !n || (!rows && max))
		return err_set(-EINVAL, "%s is NULL",
			       !tf  ? "tf"
			       : !n ? "n"
				    : "rows");
	*n = 0;
	g = &tf->g;
	/* rows are only ever added to the log's index: a new count is a
	 * new set */
	if (tf->nlrows != rowlog_count(tf->log)) {
		free(tf->lrows);
		tf->lrows = NULL;
		tf->nlrows = 0;
		int ret = rowlog_rows_sorted(tf->log, &tf->lrows, &tf->nlrows);

		if (ret)
			return ret;
	}
	lo = 0;
	hi = tf->nlrows;
	while (lo < hi) { /* the first logged row >= from */
		size_t mid = lo + (hi - lo) / 2;

		if (tf->lrows[mid] < from)
			lo = mid + 1;
		else
			hi = mid;
	}
	/* b: the first written block at or after r's (UINT64_MAX: none; a
	 * huge lazy table's map is searched once, not once a row) */
	b = from < g->rows
		? map_next(&tf->map, from / g->rows_per_block, g->blocks)
		: UINT64_MAX;
	for (r = from; k < max && r < g->rows;) {
		uint64_t rb, rl, next;

		if (b != UINT64_MAX && b < r / g->rows_per_block)
			b = map_next(&tf->map, r / g->rows_per_block,
				     g->blocks);
		rb = b == UINT64_MAX		 ? UINT64_MAX
		     : b * g->rows_per_block > r ? b * g->rows_per_block
						 : r;
		rl = lo < tf->nlrows ? tf->lrows[lo] : UINT64_MAX;
		next = rb < rl ? rb : rl;

		if (next >= g->rows)
			break;
		rows[k++] = next;
		if (rl == next)
			lo++;
		r = next + 1;
	}
	*n = k;
	return 0;
}

int et_tfile_sync(et_tfile *tf)
{
	io_ctx *io;
	int ret;

	err_clear();
	if (!tf)
		return err_set(-EINVAL, "tf is NULL");
	if (tf->rdonly)
		return 0;
	ret = tf_io(tf, &io);
	if (!ret && tf->log)
		ret = rowlog_sync(tf->log, io);
	return ret ? ret : io_fsync(io, tf->fd);
}

void tf_get_stats(const et_tfile *tf, struct tf_stats *st)
{
	*st = tf->st;
	rowlog_get_stats(tf->log, &st->log);
}

void tf_log_writes(et_tfile *tf, bool on)
{
	tf->log_writes = on;
}

int tf_commit_prepare(et_tfile *tf, uint64_t commit)
{
	io_ctx *io;
	int ret;

	if (!tf->log || tf->rdonly)
		return 0;
	ret = tf_io(tf, &io);
	return ret ? ret : rowlog_commit_prepare(tf->log, io, commit);
}

void tf_tail(const et_tfile *tf, struct jr_tail *t)
{
	memset(t, 0, sizeof(*t));
	if (tf->log)
		rowlog_tail(tf->log, t);
}

void tf_commit_done(et_tfile *tf, uint64_t commit, bool durable)
{
	if (tf->log && !tf->rdonly)
		rowlog_commit_done(tf->log, commit, durable);
}

bool tf_changed(const et_tfile *tf)
{
	return tf->log && rowlog_changed(tf->log);
}

/* ---------------------------------------------------------------- blocks */

static uint64_t block_off(const et_tfile *tf, uint64_t b)
{
	return tf->g.data_off + b * tf->g.block_size;
}

/* Rows actually present in block b (the last block may be partial). */
static uint32_t block_rows(const et_tfile *tf, uint64_t b)
{
	uint64_t first = b * tf->g.rows_per_block;
	uint64_t left = tf->g.rows - first;

	return left < tf->g.rows_per_block ? (uint32_t)left
					   : tf->g.rows_per_block;
}

static bool all_zero(const unsigned char *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i])
			return false;
	return true;
}

/* Checks block b as read into buf: 0, 1 if it is an unwritten (all-zero)
 * block, or ET_EBLOCKSUM. */
static int block_check(const et_tfile *tf, uint64_t b, const unsigned char *buf)
{
	uint32_t bs = tf->g.block_size;

	if (get64(buf + bs - 16) == b &&
	    get64(buf + bs - 8) == hash_bytes(buf, bs - 8))
		return 0;
	return all_zero(buf, bs) ? 1 : ET_EBLOCKSUM;
}

static void block_seal(const et_tfile *tf, uint64_t b, unsigned char *buf)
{
	uint32_t bs = tf->g.block_size;

	put64(buf + bs - 16, b);
	put64(buf + bs - 8, hash_bytes(buf, bs - 8));
}

/* Fills buf with block b as it is before its first write: every present row
 * at its initial value, zero padding. */
static void block_fill_init(et_tfile *tf, uint64_t b, unsigned char *buf)
{
	uint32_t n = block_rows(tf, b);

	memset(buf, 0, tf->g.block_size);
	for (uint32_t s = 0; s < n; s++)
		tf_init_row_raw(tf, b * tf->g.rows_per_block + s,
				buf + (size_t)s * tf->g.row_bytes);
}

void tf_init_row_raw(const et_tfile *tf, uint64_t row, void *dst)
{
	const struct tf_geom *g = &tf->g;
	size_t es = dtype_size(g->dtype);
	float v[256];

	/* In pieces of 256 columns: no allocation, any dim. */
	for (uint32_t c = 0; c < g->dim; c += 256) {
		uint32_t k = g->dim - c < 256 ? g->dim - c : 256;

		rowinit_fill_cols(g->init, g->init_scale, g->seed, row, c, k,
				  v);
		dtype_encode(g->dtype, v, (char *)dst + c * es, k);
	}
	memset((char *)dst + g->value_bytes, 0, g->state_floats * 4);
}

bool tf_row_materialized(const et_tfile *tf, uint64_t row)
{
	return map_test(&tf->map, row / tf->g.rows_per_block) ||
	       rowlog_has(tf->log, row);
}

static struct torn *torn_find(const et_tfile *tf, uint64_t b)
{
	for (size_t i = 0; i < tf->ntorn; i++)
		if (tf->torn[i].block == b)
			return &tf->torn[i];
	return NULL;
}

static int torn_keep(et_tfile *tf, uint64_t b, const void *img)
{
	struct torn *t = torn_find(tf, b);

	if (!t) {
		if (tf->ntorn == tf->torn_cap) {
			size_t cap = tf->torn_cap ? 2 * tf->torn_cap : 4;
			struct torn *nt = mem_alloc(cap * sizeof(*nt), 0);

			if (!nt)
				return -ENOMEM;
			if (tf->ntorn)
				memcpy(nt, tf->torn, tf->ntorn * sizeof(*nt));
			mem_free(tf->torn, tf->torn_cap * sizeof(*nt), 0);
			tf->torn = nt;
			tf->torn_cap = cap;
		}
		t = &tf->torn[tf->ntorn];
		t->block = b;
		t->img = mem_alloc(tf->g.block_size, 0);
		if (!t->img)
			return -ENOMEM;
		tf->ntorn++;
	}
	memcpy(t->img, img, tf->g.block_size);
	return 0;
}

static void torn_drop(et_tfile *tf, uint64_t b)
{
	struct torn *t = torn_find(tf, b);

	if (!t)
		return;
	mem_free(t->img, tf->g.block_size, 0);
	*t = tf->torn[--tf->ntorn];
}

/* One row of a batch, tagged with where it came from. */
struct ent {
	uint64_t block;
	uint32_t slot;
	uint32_t idx; /* position in the caller's arrays */
};

static int ent_cmp(const void *a, const void *b)
{
	const struct ent *x = a, *y = b;

	if (x->block != y->block)
		return x->block < y->block ? -1 : 1;
	return x->idx < y->idx ? -1 : x->idx > y->idx;
}

static int check_rows(const et_tfile *tf, const uint64_t *rows, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (rows[i] >= tf->g.rows)
			return err_set(
			    ET_EROWRANGE,
			    "rows[%zu] %llu >= the table's %llu rows", i,
			    (unsigned long long)rows[i],
			    (unsigned long long)tf->g.rows);
	if (n > UINT32_MAX)
		return err_set(-E2BIG, "%zu rows: at most %u a call", n,
			       UINT32_MAX);
	return 0;
}

/*
 * One chunk of a batch of ents (sorted by block): from e[i], up to
 * stage_blocks distinct blocks are put in the stage, the reads of those
 * that need one queued on io (consecutive blocks as one larger read). A
 * block not needing a read is filled with its initial contents; a torn
 * block with its kept image. Sets *j to the end of the chunk, *nb to its
 * blocks (tf->stage_blk), *nr to the reads queued (tf->reqs).
 */
typedef bool (*need_fn)(et_tfile *, const struct ent *, size_t, uint64_t);

static void chunk_queue(et_tfile *tf, io_ctx *io, const struct ent *e, size_t i,
			size_t n, need_fn need_read, size_t *jp, uint32_t *nbp,
			uint32_t *nrp)
{
	uint64_t *blocks = tf->stage_blk;
	uint32_t cap = tf->stage_blocks;
	uint32_t nb = 0, nr = 0;
	size_t j = i;

	while (j < n && nb < cap) {
		uint64_t b = e[j].block;
		size_t k = j;

		while (k < n && e[k].block == b)
			k++;
		unsigned char *buf =
		    (unsigned char *)tf->stage + (size_t)nb * tf->g.block_size;
		struct torn *tn = tf->ntorn ? torn_find(tf, b) : NULL;

		if (tn) { /* the disk may hold half of it */
			memcpy(buf, tn->img, tf->g.block_size);
			tf->stage_hole[nb] = 0;
			blocks[nb++] = b;
			j = k;
			continue;
		}
		if (need_read(tf, e + j, k - j, b)) {
			struct io_req *r = nr ? &tf->reqs[nr - 1] : NULL;

			/* Consecutive blocks: one larger read. */
			if (r && (char *)r->buf + r->len == (char *)buf &&
			    r->off + r->len == block_off(tf, b)) {
				r->len += tf->g.block_size;
				tf->stage_hole[nb] = 0;
				blocks[nb++] = b;
				j = k;
				continue;
			}
			r = &tf->reqs[nr++];
			memset(r, 0, sizeof(*r));
			r->op = IO_READ;
			r->fd = tf->fd;
			r->buf = buf;
			r->len = tf->g.block_size;
			r->off = block_off(tf, b);
			r->arg = (void *)(uintptr_t)nb;
		} else {
			block_fill_init(tf, b, buf);
		}
		tf->stage_hole[nb] = !map_test(&tf->map, b);
		blocks[nb++] = b;
		j = k;
	}
	for (uint32_t q = 0; q < nr; q++)
		io_queue(io, &tf->reqs[q]);
	*jp = j;
	*nbp = nb;
	*nrp = nr;
}

/* The nr reads of a chunk have completed: the first failed one's error,
 * else every block read is checked (an all-zero block reads as unwritten).
 * Returns 0 or the first error. */
static int chunk_check(et_tfile *tf, uint32_t nr)
{
	int ret;

	for (uint32_t q = 0; q < nr; q++) {
		ret = io_req_result(&tf->reqs[q]);
		if (ret)
			return ret;
	}
	for (uint32_t q = 0; q < nr; q++) {
		uint32_t s0 = (uint32_t)(uintptr_t)tf->reqs[q].arg;
		uint32_t cnt = tf->reqs[q].len / tf->g.block_size;

		for (uint32_t s = s0; s < s0 + cnt; s++) {
			unsigned char *buf = (unsigned char *)tf->stage +
					     (size_t)s * tf->g.block_size;

			ret = block_check(tf, tf->stage_blk[s], buf);
			if (ret < 0)
				return err_set(
				    ret,
				    "%s: block %llu (byte %llu) fails "
				    "its checksum",
				    tf->path,
				    (unsigned long long)tf->stage_blk[s],
				    (unsigned long long)block_off(
					tf, tf->stage_blk[s]));
			if (ret == 1) {
				block_fill_init(tf, tf->stage_blk[s], buf);
				tf->stage_hole[s] = 1;
			}
		}
		tf->st.blocks_read += cnt;
		tf->st.bytes_read += (uint64_t)cnt * tf->g.block_size;
	}
	return 0;
}

/*
 * Reads the distinct blocks of ents[0..n) (sorted by block) chunk by chunk
 * into the stage and calls fn for each chunk with the stage filled. If
 * need_read says a block needs no read, fn finds it filled with its
 * initial contents. Returns the first error.
 */
typedef int (*chunk_fn)(et_tfile *tf, const struct ent *e, size_t n,
			const uint64_t *blocks, uint32_t nblocks, void *arg);

static int for_each_chunk(et_tfile *tf, const struct ent *e, size_t n,
			  need_fn need_read, chunk_fn fn, void *arg)
{
	size_t i = 0, j;
	io_ctx *io;
	int ret;

	ret = tf_stage(tf);
	if (!ret)
		ret = tf_io(tf, &io);
	if (ret)
		return ret;
	while (i < n) {
		uint32_t nb, nr;

		chunk_queue(tf, io, e, i, n, need_read, &j, &nb, &nr);
		if (nr) {
			ret = io_wait(io, nr);
			if (ret < 0)
				return ret;
			ret = chunk_check(tf, nr);
			if (ret)
				return ret;
		}
		ret = fn(tf, e + i, j - i, tf->stage_blk, nb, arg);
		if (ret)
			return ret;
		i = j;
	}
	return 0;
}

static int make_ents(const et_tfile *tf, const uint64_t *rows, size_t n,
		     struct ent **out)
{
	struct ent *e = mem_alloc(n * sizeof(*e), 0);

	if (!e)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++) {
		e[i].block = rows[i] / tf->g.rows_per_block;
		e[i].slot = (uint32_t)(rows[i] % tf->g.rows_per_block);
		e[i].idx = (uint32_t)i;
	}
	qsort(e, n, sizeof(*e), ent_cmp);
	*out = e;
	return 0;
}

/* ------------------------------------------------------------ read rows */

static bool read_needed(et_tfile *tf, const struct ent *e, size_t n, uint64_t b)
{
	return map_test(&tf->map, b);
}

static int read_copy(et_tfile *tf, const struct ent *e, size_t n,
		     const uint64_t *blocks, uint32_t nb, void *arg)
{
	unsigned char *dst = arg;
	uint32_t s = 0;

	for (size_t i = 0; i < n; i++) {
		while (blocks[s] != e[i].block)
			s++;
		memcpy(dst + (size_t)e[i].idx * tf->g.row_bytes,
		       tf->stage + (size_t)s * tf->g.block_size +
			   (size_t)e[i].slot * tf->g.row_bytes,
		       tf->g.row_bytes);
	}
	return 0;
}

/* The first step of a read: rows of unwritten blocks are filled from the
 * initializer, the others split between the blocks (rd->e[0..m)) and the
 * row log (rd->lidx[0..nl)), and the staging of both made ready. */
static int rd_start(struct tf_read *rd)
{
	et_tfile *tf = rd->tf;
	const uint64_t *rows = rd->rows;
	size_t n = rd->n;
	int ret;

	ret = check_rows(tf, rows, n);
	if (ret || n == 0)
		return ret;
	ret = make_ents(tf, rows, n, &rd->e);
	if (ret)
		return ret;
	if (rowlog_count(tf->log)) {
		rd->lidx = mem_alloc(n * sizeof(*rd->lidx), 0);
		if (!rd->lidx)
			return -ENOMEM;
	}
	/* Rows in the log are read from it; rows of unwritten blocks need no
	 * stage at all. */
	for (size_t i = 0; i < n; i++) {
		const struct ent *e = &rd->e[i];

		if (rd->lidx && rowlog_has(tf->log, rows[e->idx])) {
			rd->lidx[rd->nl++] = e->idx;
			continue;
		}
		if (map_test(&tf->map, e->block) ||
		    (tf->ntorn && torn_find(tf, e->block))) {
			rd->e[rd->m++] = *e;
			continue;
		}
		tf_init_row_raw(tf, rows[e->idx],
				(char *)rd->dst +
				    (size_t)e->idx * tf->g.row_bytes);
		tf->st.rows_lazy++;
	}
	ret = tf_io(tf, &rd->io);
	if (!ret && rd->m)
		ret = tf_stage(tf);
	if (!ret && rd->nl)
		ret = rowlog_read_start(tf->log, rd->io, &rd->lr, rows,
					rd->lidx, rd->nl, rd->dst);
	return ret;
}

static bool rd_done(const struct tf_read *rd)
{
	return rd->i == rd->m && (!rd->nl || rd->lr.b == rd->lr.n);
}

/* Queues the next chunk of blocks and of log records; returns the reads
 * queued on rd->io, or an error. */
static int rd_queue(struct tf_read *rd)
{
	int q = 0;

	if (rd->i < rd->m) {
		chunk_queue(rd->tf, rd->io, rd->e, rd->i, rd->m, read_needed,
			    &rd->j, &rd->nb, &rd->nr);
		q = (int)rd->nr;
	}
	if (rd->nl && rd->lr.b < rd->lr.n) {
		int r = rowlog_read_queue(rd->tf->log, rd->io, &rd->lr);

		if (r < 0)
			return r;
		q += r;
		rd->lq = true;
	}
	return q;
}

/* The reads queued by rd_queue have completed: checks them and copies the
 * rows out. */
static int rd_check(struct tf_read *rd)
{
	int ret = 0;

	if (rd->j > rd->i) {
		ret = chunk_check(rd->tf, rd->nr);
		if (!ret)
			ret = read_copy(rd->tf, rd->e + rd->i, rd->j - rd->i,
					rd->tf->stage_blk, rd->nb, rd->dst);
		rd->nr = 0;
		rd->i = rd->j;
	}
	if (!ret && rd->lq) {
		rd->lq = false;
		ret = rowlog_read_check(rd->tf->log, &rd->lr);
	}
	return ret;
}

static void rd_end(struct tf_read *rd)
{
	mem_free(rd->lidx, rd->n * sizeof(*rd->lidx), 0);
	mem_free(rd->e, rd->n * sizeof(*rd->e), 0);
	rd->lidx = NULL;
	rd->e = NULL;
}

/* Waits for the reads queued on rd[k].io by rd[k..nrd); an error fails
 * every one of them with reads on that ring. */
static void rd_wait(struct tf_read *rd, size_t nrd, size_t k, int *nq)
{
	unsigned want = 0;
	int ret;

	for (size_t i = k; i < nrd; i++)
		if (nq[i] && rd[i].io == rd[k].io)
			want += (unsigned)nq[i];
	ret = io_wait(rd[k].io, want);
	for (size_t i = k; i < nrd; i++)
		if (nq[i] && rd[i].io == rd[k].io) {
			nq[i] = 0; /* waited for */
			if (ret < 0 && !rd[i].result)
				rd[i].result = ret;
		}
}

int tf_read_multi(struct tf_read *rd, size_t nrd)
{
	enum { GROUP = 64 };
	int nq[GROUP];
	bool act[GROUP];
	bool busy = true;
	int ret = 0;

	if (nrd > GROUP) { /* in groups, each one submission */
		for (size_t k = 0; k < nrd; k += GROUP) {
			int r = tf_read_multi(rd + k, nrd - k < GROUP ? nrd - k
								      : GROUP);

			if (r && !ret)
				ret = r;
		}
		return ret;
	}
	for (size_t k = 0; k < nrd; k++) {
		struct tf_read *r = &rd[k];

		r->e = NULL;
		r->lidx = NULL;
		r->m = r->i = r->j = r->nl = 0;
		r->nb = r->nr = 0;
		r->lq = false;
		r->io = NULL;
		r->result = rd_start(r);
	}
	/* Rounds: every file's next chunk of blocks and of log records
	 * queued, all waited for together, then each checked and copied. */
	while (busy) {
		busy = false;
		for (size_t k = 0; k < nrd; k++) {
			nq[k] = 0;
			act[k] = !rd[k].result && !rd_done(&rd[k]);
			if (!act[k])
				continue;
			nq[k] = rd_queue(&rd[k]);
			if (nq[k] < 0) {
				rd[k].result = nq[k];
				nq[k] = 0;
				act[k] = false;
			}
			busy = true;
		}
		for (size_t k = 0; k < nrd; k++)
			if (nq[k])
				rd_wait(rd, nrd, k, nq);
		for (size_t k = 0; k < nrd; k++)
			if (act[k] && !rd[k].result)
				rd[k].result = rd_check(&rd[k]);
	}
	for (size_t k = 0; k < nrd; k++) {
		rd_end(&rd[k]);
		if (rd[k].result && !ret)
			ret = rd[k].result;
	}
	return ret;
}

int tf_read_rows_raw(et_tfile *tf, const uint64_t *rows, size_t n, void *dst)
{
	struct tf_read rd = {.tf = tf, .rows = rows, .n = n, .dst = dst};

	return tf_read_multi(&rd, 1);
}

/* ----------------------------------------------------------- write rows */

/* A block needs reading before its write unless it is unwritten or every
 * row in it is being replaced. */
static bool write_needs_read(et_tfile *tf, const struct ent *e, size_t n,
			     uint64_t b)
{
	uint32_t present = block_rows(tf, b), distinct = 0;
	uint64_t seen[8] = {0};

	if (!map_test(&tf->map, b))
		return false;
	if (n < present)
		return true;
	if (present > 512)
		return true; /* not worth counting */
	for (size_t i = 0; i < n; i++) {
		uint32_t s = e[i].slot;

		if (!(seen[s / 64] >> (s % 64) & 1)) {
			seen[s / 64] |= 1ULL << (s % 64);
			distinct++;
		}
	}
	return distinct < present;
}

static int write_apply(et_tfile *tf, const struct ent *e, size_t n,
		       const uint64_t *blocks, uint32_t nb, void *arg)
{
	const unsigned char *src = arg;
	uint32_t s = 0;
	int ret;

	if (!tf->pre) {
		tf->pre =
		    mem_alloc((size_t)tf->stage_blocks * tf->g.block_size, 0);
		if (!tf->pre)
			return -ENOMEM;
	}
	memcpy(tf->pre, tf->stage, (size_t)nb * tf->g.block_size);
	for (size_t i = 0; i < n; i++) {
		while (blocks[s] != e[i].block)
			s++;
		memcpy(tf->stage + (size_t)s * tf->g.block_size +
			   (size_t)e[i].slot * tf->g.row_bytes,
		       src + (size_t)e[i].idx * tf->g.row_bytes,
		       tf->g.row_bytes);
	}
	for (s = 0; s < nb; s++) {
		struct io_req *r = &tf->reqs[s];
		unsigned char *buf =
		    (unsigned char *)tf->stage + (size_t)s * tf->g.block_size;

		block_seal(tf, blocks[s], buf);
		memset(r, 0, sizeof(*r));
		r->op = IO_WRITE;
		r->fd = tf->fd;
		r->buf = buf;
		r->len = tf->g.block_size;
		r->off = block_off(tf, blocks[s]);
	}
	ret = io_run(tf->io, tf->reqs, nb); /* set by for_each_chunk */
	/* Blocks that made it to disk are written whatever else failed;
	 * the others keep their image for the retry. */
	for (s = 0; s < nb; s++) {
		int r2;

		if (io_req_result(&tf->reqs[s]) == 0) {
			r2 = map_set(&tf->map, blocks[s]);
			if (tf->ntorn)
				torn_drop(tf, blocks[s]);
			tf->st.blocks_written++;
			tf->st.bytes_written += tf->g.block_size;
		} else {
			r2 = torn_keep(tf, blocks[s],
				       tf->pre + (size_t)s * tf->g.block_size);
		}
		if (r2 && !ret)
			ret = r2;
	}
	return ret;
}

static void count_rmw(et_tfile *tf, const struct ent *e, size_t n)
{
	for (size_t i = 0; i < n;) {
		size_t k = i;

		while (k < n && e[k].block == e[i].block)
			k++;
		if (write_needs_read(tf, e + i, k - i, e[i].block))
			tf->st.rmw_reads++;
		i = k;
	}
}

int tf_write_rows_raw(et_tfile *tf, const uint64_t *rows, size_t n,
		      const void *src)
{
	struct ent *e;
	int ret;

	if (tf->rdonly)
		return -EBADF;
	ret = check_rows(tf, rows, n);
	if (ret || n == 0)
		return ret;
	if (tf->log_writes) {
		io_ctx *io;

		ret = tf_io(tf, &io);
		if (!ret)
			ret = rowlog_append(tf->log, io, rows, n, src);
		return ret;
	}
	if (rowlog_count(tf->log))
		return -EBUSY; /* the log would shadow the write */
	ret = make_ents(tf, rows, n, &e);
	if (ret)
		return ret;
	count_rmw(tf, e, n);
	ret = for_each_chunk(tf, e, n, write_needs_read, write_apply,
			     (void *)src);
	mem_free(e, n * sizeof(*e), 0);
	return ret;
}

/* ------------------------------------------------------- public f32 API */

int et_tfile_read_rows(et_tfile *tf, const uint64_t *rows, size_t n, float *out,
		       float *state)
{
	const struct tf_geom *g;
	unsigned char *raw;
	int ret;

	err_clear();
	if (!tf || (n && (!rows || !out)))
		return err_set(-EINVAL, "%s is NULL",
			       !tf     ? "tf"
			       : !rows ? "rows"
				       : "out");
	g = &tf->g;
	if (n * g->row_bytes > tf->rraw_bytes) {
		mem_free(tf->rraw, tf->rraw_bytes, 0);
		tf->rraw_bytes = 0;
		tf->rraw = mem_alloc(n * g->row_bytes, 0);
		if (!tf->rraw)
			return -ENOMEM;
		tf->rraw_bytes = n * g->row_bytes;
	}
	raw = tf->rraw;
	ret = tf_read_rows_raw(tf, rows, n, raw);
	if (!ret) {
		for (size_t i = 0; i < n; i++) {
			const unsigned char *r = raw + i * g->row_bytes;

			dtype_decode(g->dtype, r, out + i * g->dim, g->dim);
			if (state && g->state_floats)
				memcpy(state + i * g->state_floats,
				       r + g->value_bytes, g->state_floats * 4);
		}
	}
	return ret;
}

int et_tfile_write_rows(et_tfile *tf, const uint64_t *rows, size_t n,
			const float *in, const float *state)
{
	const struct tf_geom *g;
	unsigned char *raw;
	int ret = 0;

	err_clear();
	if (!tf || (n && (!rows || !in)))
		return err_set(-EINVAL, "%s is NULL",
			       !tf     ? "tf"
			       : !rows ? "rows"
				       : "in");
	if (tf->rdonly)
		return err_set(-EBADF, "the table file is open read-only");
	g = &tf->g;
	ret = check_rows(tf, rows, n);
	if (ret)
		return ret;
	raw = mem_alloc(n * g->row_bytes, 0);
	if (!raw)
		return -ENOMEM;
	/* Without new state, keep what is stored: read it first. */
	if (g->state_floats && !state)
		ret = tf_read_rows_raw(tf, rows, n, raw);
	if (!ret) {
		for (size_t i = 0; i < n; i++) {
			unsigned char *r = raw + i * g->row_bytes;

			dtype_encode(g->dtype, in + i * g->dim, r, g->dim);
			if (state && g->state_floats)
				memcpy(r + g->value_bytes,
				       state + i * g->state_floats,
				       g->state_floats * 4);
		}
		ret = tf_write_rows_raw(tf, rows, n, raw);
	}
	mem_free(raw, n * g->row_bytes, 0);
	return ret;
}

/*
 * Bulk load: whole blocks packed in a ring of write buffers, each a run of
 * consecutive blocks sent as one large write, several in flight, so the
 * disk streams while the next buffer is packed. Rows of partial blocks at
 * either end go through the read-modify-write path.
 */
#define WR_SLOTS      8
#define WR_SLOT_BYTES (1u << 20)

struct wr_slot {
	struct io_req req;
	uint64_t b0, nb;
	bool busy;
};

static void wr_done(struct io_req *r)
{
	((struct wr_slot *)r->arg)->busy = false;
}

static int wr_retire(et_tfile *tf, struct wr_slot *s, int ret)
{
	int r = io_req_result(&s->req);

	if (r == 0) {
		for (uint64_t b = s->b0; b < s->b0 + s->nb; b++) {
			int r2 = map_set(&tf->map, b);

			if (r2 && !ret)
				ret = r2;
		}
		tf->st.blocks_written += s->nb;
		tf->st.bytes_written += s->req.len;
	} else if (!ret) {
		ret = r;
	}
	return ret;
}

/* et_tfile_write_rows with every row's optimizer state set to zero, as
 * whole blocks of a bulk load get it. */
static int write_rows_zero_state(et_tfile *tf, const uint64_t *ids, uint64_t n,
				 const float *in)
{
	size_t sb = (size_t)n * tf->g.state_floats * sizeof(float);
	float *st = sb ? mem_alloc(sb, 0) : NULL;
	int ret;

	if (sb && !st)
		return -ENOMEM;
	ret = et_tfile_write_rows(tf, ids, n, in, st);
	mem_free(st, sb, 0);
	return ret;
}

int et_tfile_write_range(et_tfile *tf, uint64_t first, uint64_t n,
			 const float *in)
{
	const struct tf_geom *g;
	struct wr_slot slots[WR_SLOTS];
	uint64_t b, bend, row_end;
	uint32_t per_slot;
	char *buf;
	io_ctx *io;
	int ret = 0;

	err_clear();
	if (!tf || (n && !in))
		return err_set(-EINVAL, "%s is NULL", !tf ? "tf" : "in");
	if (tf->rdonly)
		return err_set(-EBADF, "the table file is open read-only");
	if (rowlog_count(tf->log))
		return err_set(-EBUSY,
			       "the table's row log holds rows a "
			       "store wrote: they would shadow the load");
	g = &tf->g;
	if (first >= g->rows || n > g->rows - first) {
		if (n == 0 && first <= g->rows)
			return 0;
		return err_set(ET_EROWRANGE,
			       "rows [%llu, %llu + %llu) past the table's %llu",
			       (unsigned long long)first,
			       (unsigned long long)first, (unsigned long long)n,
			       (unsigned long long)g->rows);
	}
	row_end = first + n;
	b = (first + g->rows_per_block - 1) / g->rows_per_block;
	/* Whole blocks end where the range does, or at the file's end. */
	bend = row_end == g->rows ? g->blocks : row_end / g->rows_per_block;
	if (b >= bend) { /* no whole block: all partial */
		uint64_t *ids = mem_alloc(n * sizeof(*ids), 0);

		if (!ids)
			return -ENOMEM;
		for (uint64_t i = 0; i < n; i++)
			ids[i] = first + i;
		ret = write_rows_zero_state(tf, ids, n, in);
		mem_free(ids, n * sizeof(*ids), 0);
		return ret;
	}
	/* Head and tail rows outside whole blocks. */
	{
		uint64_t head = b * g->rows_per_block - first;
		uint64_t tail_first = bend * g->rows_per_block;
		uint64_t tail = tail_first < row_end ? row_end - tail_first : 0;
		uint64_t m = head > tail ? head : tail;
		uint64_t *ids = m ? mem_alloc(m * sizeof(*ids), 0) : NULL;

		if (m && !ids)
			return -ENOMEM;
		for (uint64_t i = 0; i < head; i++)
			ids[i] = first + i;
		if (head)
			ret = write_rows_zero_state(tf, ids, head, in);
		for (uint64_t i = 0; !ret && i < tail; i++)
			ids[i] = tail_first + i;
		if (!ret && tail)
			ret = write_rows_zero_state(
			    tf, ids, tail, in + (tail_first - first) * g->dim);
		mem_free(ids, m * sizeof(*ids), 0);
		if (ret)
			return ret;
	}
	ret = tf_io(tf, &io);
	if (ret)
		return ret;
	per_slot = WR_SLOT_BYTES / g->block_size;
	if (per_slot == 0)
		per_slot = 1;
	if (!tf->wr_buf) {
		tf->wr_bytes = (size_t)WR_SLOTS * per_slot * g->block_size;
		tf->wr_buf = mem_alloc(tf->wr_bytes, tf->mem_align);
		if (!tf->wr_buf)
			return -ENOMEM;
	}
	buf = tf->wr_buf;
	memset(slots, 0, sizeof(slots));
	for (unsigned k = 0; b < bend; k = (k + 1) % WR_SLOTS) {
		struct wr_slot *s = &slots[k];
		unsigned char *sb =
		    (unsigned char *)buf + (size_t)k * per_slot * g->block_size;

		while (s->busy) {
			int w = io_wait(io, 1);

			if (w < 0) {
				ret = w;
				goto out_drain;
			}
		}
		if (s->nb) {
			ret = wr_retire(tf, s, ret);
			s->nb = 0;
			if (ret)
				goto out_drain;
		}
		s->b0 = b;
		s->nb = bend - b < per_slot ? bend - b : per_slot;
		for (uint64_t i = 0; i < s->nb; i++) {
			unsigned char *blk = sb + i * g->block_size;
			uint64_t r0 = (b + i) * g->rows_per_block;
			uint32_t nr = block_rows(tf, b + i);

			for (uint32_t r = 0; r < nr; r++) {
				unsigned char *row =
				    blk + (size_t)r * g->row_bytes;

				dtype_encode(g->dtype,
					     in + (r0 + r - first) * g->dim,
					     row, g->dim);
				memset(row + g->value_bytes, 0,
				       g->state_floats * 4);
			}
			/* only the padding: the rows were just written */
			memset(blk + (size_t)nr * g->row_bytes, 0,
			       g->block_size - (size_t)nr * g->row_bytes);
			block_seal(tf, b + i, blk);
		}
		memset(&s->req, 0, sizeof(s->req));
		s->req.op = IO_WRITE;
		s->req.fd = tf->fd;
		s->req.buf = sb;
		s->req.len = (uint32_t)(s->nb * g->block_size);
		s->req.off = block_off(tf, b);
		s->req.done = wr_done;
		s->req.arg = s;
		s->busy = true;
		io_queue(io, &s->req);
		ret = io_wait(io, 0); /* send now, don't wait */
		if (ret < 0)
			goto out_drain;
		ret = 0;
		b += s->nb;
	}
out_drain:
	for (unsigned k = 0; k < WR_SLOTS; k++) {
		while (slots[k].busy) {
			int w = io_wait(io, 1);

			if (w < 0) {
				/* the ring itself failed: nothing more will
				 * complete; the buffer must not be freed
				 * under the kernel, so leak it */
				return w;
			}
		}
		if (slots[k].nb)
			ret = wr_retire(tf, &slots[k], ret);
	}
	return ret;
}

/* ---------------------------------------------------------------- verify */

struct verify_tick {
	et_progress_fn fn;
	void *arg;
	uint64_t done, total;
};

static int verify_tick(void *arg, uint64_t n)
{
	struct verify_tick *v = arg;

	v->done += n;
	return v->fn ? v->fn(v->arg, v->done, v->total) : 0;
}

/* The row log's records, after the blocks: a bad record counts as a bad
 * block, and names the block of its row if no block was bad. */
static int verify_log(et_tfile *tf, io_ctx *io, struct verify_tick *vt,
		      uint64_t *bad, uint64_t *fbad)
{
	uint64_t lbad, lfirst;
	int ret = rowlog_verify(tf->log, io, &lbad, &lfirst, verify_tick, vt);

	if (ret)
		return ret;
	*bad += lbad;
	if (lbad && *fbad == UINT64_MAX)
		*fbad = lfirst / tf->g.rows_per_block;
	return 0;
}

int et_tfile_verify(et_tfile *tf, uint64_t *bad_blocks, uint64_t *first_bad,
		    et_progress_fn progress, void *arg)
{
	uint64_t b = 0, done = 0, bad = 0, fbad = UINT64_MAX;
	uint64_t total;
	struct verify_tick vt;
	bool stopped = false;
	io_ctx *io;
	int ret;

	err_clear();
	if (!tf)
		return err_set(-EINVAL, "tf is NULL");
	total = tf->map.count + rowlog_count(tf->log);
	ret = tf_stage(tf);
	if (!ret)
		ret = tf_io(tf, &io);
	if (ret)
		return ret;
	for (;;) {
		uint32_t nr = 0;
		uint64_t *blocks = tf->stage_blk;
		uint32_t cap = tf->stage_blocks;

		while (nr < cap) {
			b = map_next(&tf->map, b, tf->g.blocks);
			if (b == UINT64_MAX)
				break;
			struct io_req *r = &tf->reqs[nr];

			memset(r, 0, sizeof(*r));
			r->op = IO_READ;
			r->fd = tf->fd;
			r->buf = tf->stage + (size_t)nr * tf->g.block_size;
			r->len = tf->g.block_size;
			r->off = block_off(tf, b);
			blocks[nr++] = b++;
		}
		if (!nr)
			break;
		ret = io_run(io, tf->reqs, nr);
		if (ret)
			return ret;
		for (uint32_t i = 0; i < nr; i++) {
			if (block_check(tf, blocks[i],
					(unsigned char *)tf->reqs[i].buf) < 0) {
				bad++;
				if (fbad == UINT64_MAX)
					fbad = blocks[i];
			}
		}
		done += nr;
		if (progress && progress(arg, done, total)) {
			stopped = true;
			break;
		}
		if (b == UINT64_MAX)
			break;
	}
	vt = (struct verify_tick){progress, arg, done, total};
	if (!stopped && tf->log) {
		ret = verify_log(tf, io, &vt, &bad, &fbad);
		if (ret)
			return ret;
	}
	if (bad_blocks)
		*bad_blocks = bad;
	if (first_bad)
		*first_bad = fbad;
	return bad ? ET_EBLOCKSUM : 0;
}
