/*
 * tf_bulk.c - the bulk load of a table file (et_tfile_write_range), as
 * embtier-build makes a file from given values.
 *
 * Whole blocks are packed in a ring of write buffers, each a run of
 * consecutive blocks sent as one large write, several in flight, so the
 * disk streams while the next buffer is packed. Rows of partial blocks at
 * either end go through the read-modify-write path (tf_block.c). A file
 * whose row log holds rows is refused: the log would shadow the load.
 */
#include <errno.h>
#include <string.h>

#include "dtype.h"
#include "error.h"
#include "io.h"
#include "mem_host.h"
#include "rowlog.h"
#include "table_file_impl.h"

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
			int r2 = tf_map_set(&tf->map, b);

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

/* Rows [first, first + n) given by in, row by row, through the
 * read-modify-write path. */
static int write_span(et_tfile *tf, uint64_t first, uint64_t n, const float *in)
{
	uint64_t *ids = n ? mem_alloc(n * sizeof(*ids), 0) : NULL;
	int ret;

	if (n && !ids)
		return -ENOMEM;
	for (uint64_t i = 0; i < n; i++)
		ids[i] = first + i;
	ret = n ? write_rows_zero_state(tf, ids, n, in) : 0;
	mem_free(ids, n * sizeof(*ids), 0);
	return ret;
}

/* The checks of et_tfile_write_range; 1 if there is nothing to do. */
static int range_check(et_tfile *tf, uint64_t first, uint64_t n,
		       const float *in)
{
	if (!tf || (n && !in))
		return err_set(-EINVAL, "%s is NULL", !tf ? "tf" : "in");
	if (tf->rdonly)
		return err_set(-EBADF, "the table file is open read-only");
	if (tf->g.keyed)
		return err_set(-EINVAL, "a keyed table has no row ranges: "
					"write its ids through a store");
	if (rowlog_count(tf->log))
		return err_set(-EBUSY,
			       "the table's row log holds rows a "
			       "store wrote: they would shadow the load");
	if (first >= tf->g.rows || n > tf->g.rows - first) {
		if (n == 0 && first <= tf->g.rows)
			return 1;
		return err_set(ET_EROWRANGE,
			       "rows [%llu, %llu + %llu) past the table's %llu",
			       (unsigned long long)first,
			       (unsigned long long)first, (unsigned long long)n,
			       (unsigned long long)tf->g.rows);
	}
	return 0;
}

/* Encodes the nb blocks from b of the load (rows from first at in) into
 * sb, sealed. */
static void wr_pack(et_tfile *tf, unsigned char *sb, uint64_t b, uint64_t nb,
		    uint64_t first, const float *in)
{
	const struct tf_geom *g = &tf->g;

	for (uint64_t i = 0; i < nb; i++) {
		unsigned char *blk = sb + i * g->block_size;
		uint64_t r0 = (b + i) * g->rows_per_block;
		uint32_t nr = tf_block_rows(tf, b + i);

		for (uint32_t r = 0; r < nr; r++) {
			unsigned char *row = blk + (size_t)r * g->row_bytes;

			dtype_encode(g->dtype, in + (r0 + r - first) * g->dim,
				     row, g->dim);
			memset(row + g->value_bytes, 0, g->state_floats * 4);
		}
		/* only the padding: the rows were just written */
		memset(blk + (size_t)nr * g->row_bytes, 0,
		       g->block_size - (size_t)nr * g->row_bytes);
		tf_block_seal(tf, b + i, blk);
	}
}

/* Sends slot s's blocks (packed at sb) as one write, without waiting. */
static int wr_send(et_tfile *tf, io_ctx *io, struct wr_slot *s,
		   unsigned char *sb)
{
	int ret;

	memset(&s->req, 0, sizeof(s->req));
	s->req.op = IO_WRITE;
	s->req.fd = tf->fd;
	s->req.buf = sb;
	s->req.len = (uint32_t)(s->nb * tf->g.block_size);
	s->req.off = tf_block_off(tf, s->b0);
	s->req.done = wr_done;
	s->req.arg = s;
	s->busy = true;
	io_queue(io, &s->req);
	ret = io_wait(io, 0); /* send now, don't wait */
	return ret < 0 ? ret : 0;
}

/* Waits for slot s and retires its write. */
static int wr_settle(et_tfile *tf, io_ctx *io, struct wr_slot *s, int ret)
{
	while (s->busy) {
		int w = io_wait(io, 1);

		if (w < 0)
			return w;
	}
	if (s->nb)
		ret = wr_retire(tf, s, ret);
	s->nb = 0;
	return ret;
}

/* Whole blocks [b, bend) of the load, WR_SLOTS writes in flight. */
static int write_blocks(et_tfile *tf, uint64_t b, uint64_t bend, uint64_t first,
			const float *in)
{
	const struct tf_geom *g = &tf->g;
	struct wr_slot slots[WR_SLOTS];
	uint32_t per_slot = WR_SLOT_BYTES / g->block_size;
	io_ctx *io;
	int ret;

	ret = tf_io(tf, &io);
	if (ret)
		return ret;
	if (per_slot == 0)
		per_slot = 1;
	if (!tf->wr_buf) {
		tf->wr_bytes = (size_t)WR_SLOTS * per_slot * g->block_size;
		tf->wr_buf = mem_alloc(tf->wr_bytes, tf->mem_align);
		if (!tf->wr_buf)
			return -ENOMEM;
	}
	memset(slots, 0, sizeof(slots));
	for (unsigned k = 0; b < bend && !ret; k = (k + 1) % WR_SLOTS) {
		struct wr_slot *s = &slots[k];
		unsigned char *sb = (unsigned char *)tf->wr_buf +
				    (size_t)k * per_slot * g->block_size;

		ret = wr_settle(tf, io, s, 0);
		if (ret)
			break;
		s->b0 = b;
		s->nb = bend - b < per_slot ? bend - b : per_slot;
		wr_pack(tf, sb, b, s->nb, first, in);
		ret = wr_send(tf, io, s, sb);
		b += s->nb;
	}
	for (unsigned k = 0; k < WR_SLOTS; k++) {
		int r = wr_settle(tf, io, &slots[k], ret);

		if (r < 0 && slots[k].busy)
			return r; /* the ring failed: the buffer must not be
				   * freed under the kernel, so leak it */
		ret = r;
	}
	return ret;
}

int et_tfile_write_range(et_tfile *tf, uint64_t first, uint64_t n,
			 const float *in)
{
	const struct tf_geom *g;
	uint64_t b, bend, row_end, head, tail_first, tail;
	int ret;

	err_clear();
	ret = range_check(tf, first, n, in);
	if (ret)
		return ret > 0 ? 0 : ret;
	g = &tf->g;
	row_end = first + n;
	b = (first + g->rows_per_block - 1) / g->rows_per_block;
	/* Whole blocks end where the range does, or at the file's end. */
	bend = row_end == g->rows ? g->blocks : row_end / g->rows_per_block;
	if (b >= bend) /* no whole block: all partial */
		return write_span(tf, first, n, in);
	/* Head and tail rows outside whole blocks. */
	head = b * g->rows_per_block - first;
	tail_first = bend * g->rows_per_block;
	tail = tail_first < row_end ? row_end - tail_first : 0;
	ret = write_span(tf, first, head, in);
	if (!ret)
		ret = write_span(tf, tail_first, tail,
				 in + (tail_first - first) * g->dim);
	if (ret)
		return ret;
	return write_blocks(tf, b, bend, first, in);
}
