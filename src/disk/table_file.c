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
 * written is a hole and costs nothing; the materialization map says which
 * blocks are not. Rows a store writes go to the table's row log
 * (rowlog.h) instead, opened as of the directory's commit record.
 *
 * The module, by file (their shared state is in table_file_impl.h):
 *
 *   table_file.c  create, open, close; the locks, and the row log as of
 *                 the commit record; info, the rows listing, sync, stats,
 *                 and the commit steps
 *   tf_map.c      the materialization map: which blocks were ever written
 *   tf_header.c   the header block and the geometry it implies
 *   tf_block.c    block I/O: checksums, the stage, torn blocks, batch reads
 *                 and read-modify-write of rows (raw and f32)
 *   tf_bulk.c     the bulk load (et_tfile_write_range)
 *   tf_verify.c   et_tfile_verify
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
#include "fileio.h"
#include "error.h"
#include "io.h"
#include "mem_host.h"
#include "checkpoint.h"
#include "rowlog.h"
#include "table_file_impl.h"

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
	tf_map_free(&tf->map);
	if (tf->stage)
		mem_free_io(tf->stage,
			    (size_t)tf->stage_blocks * tf->g.block_size,
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

/* The ring for tf's I/O: the one attached, else its own, made on first
 * use. */
int tf_io(et_tfile *tf, io_ctx **out)
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
	ret = tf_params_check(p);
	if (ret)
		return ret;
	tf = tf_new(path);
	if (!tf)
		return -ENOMEM;
	tf->g.rows = p->rows;
	tf->g.keyed = (p->flags & ET_TABLE_KEYED) != 0;
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
			      4 * tf_state_floats_of(p->optim);
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
	if (!tf_geom_derive(&tf->g)) { /* tf_params_check let nothing through */
		ret = err_set(ET_ECONFIG, "et_table_params inconsistent");
		goto err_unlink;
	}
	hdr = mem_alloc(tf->g.block_size, tf->mem_align);
	if (!hdr) {
		ret = -ENOMEM;
		goto err_unlink;
	}
	tf_header_encode(&tf->g, hdr);
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
	ret = tf_map_init(&tf->map, tf->g.blocks);
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
	ret = tf_header_decode(hdr, (size_t)n, &tf->g);
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
	ret = tf_map_init(&tf->map, tf->g.blocks);
	if (ret)
		goto err_free;
	ret = tf_map_load(tf);
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
	info->flags = tf->g.keyed ? ET_TABLE_KEYED : 0;
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
	/* the sorted copy is made again when the log's set of rows may
	 * have changed */
	if (!tf->lrows || tf->lrows_epoch != rowlog_epoch(tf->log)) {
		free(tf->lrows);
		tf->lrows = NULL;
		tf->nlrows = 0;
		int ret = rowlog_rows_sorted(tf->log, &tf->lrows, &tf->nlrows);

		if (ret)
			return ret;
		tf->lrows_epoch = rowlog_epoch(tf->log);
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
	if (g->keyed) { /* its ids are the logged rows alone */
		while (k < max && lo < tf->nlrows)
			rows[k++] = tf->lrows[lo++];
		*n = k;
		return 0;
	}
	/* b: the first written block at or after r's (UINT64_MAX: none; a
	 * huge lazy table's map is searched once, not once a row) */
	b = from < g->rows
		? tf_map_next(&tf->map, from / g->rows_per_block, g->blocks)
		: UINT64_MAX;
	for (r = from; k < max && r < g->rows;) {
		uint64_t rb, rl, next;

		if (b != UINT64_MAX && b < r / g->rows_per_block)
			b = tf_map_next(&tf->map, r / g->rows_per_block,
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

int tf_erase_rows(et_tfile *tf, const uint64_t *rows, size_t n,
		  uint64_t *erased)
{
	*erased = 0;
	if (!tf->g.keyed)
		return -EINVAL;
	return tf->log ? rowlog_erase(tf->log, rows, n, erased) : 0;
}

int tf_stamps(et_tfile *tf, uint32_t tick)
{
	return tf->log ? rowlog_stamps(tf->log, tick) : 0;
}

int tf_scores(et_tfile *tf, uint32_t tick, uint32_t half)
{
	return tf->log ? rowlog_scores(tf->log, tick, half) : 0;
}

int tf_expired(const et_tfile *tf, uint32_t tick, uint32_t after,
	       uint64_t **rows, size_t *n)
{
	*rows = NULL;
	*n = 0;
	return tf->log ? rowlog_expired(tf->log, tick, after, rows, n) : 0;
}

int tf_over(const et_tfile *tf, uint64_t keep, uint32_t tick, uint32_t half,
	    uint64_t **rows, size_t *n)
{
	*rows = NULL;
	*n = 0;
	return tf->log ? rowlog_over(tf->log, keep, tick, half, rows, n) : 0;
}

bool tf_row_logged(const et_tfile *tf, uint64_t row)
{
	return rowlog_has(tf->log, row);
}

int tf_log_entries(const et_tfile *tf, struct rl_changes *c)
{
	if (!tf->log) {
		*c = (struct rl_changes){.complete = true};
		return 0;
	}
	return rowlog_entries(tf->log, c);
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

void tf_expect_rows(et_tfile *tf, uint64_t n)
{
	if (tf->log && tf->log_writes && !tf->rdonly)
		(void)rowlog_expect(tf->log, n); /* a hint */
}

bool tf_changed(const et_tfile *tf)
{
	return tf->log && rowlog_changed(tf->log);
}
