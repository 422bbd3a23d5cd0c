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
			uint32_t nr = tf_block_rows(tf, b + i);

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
			tf_block_seal(tf, b + i, blk);
		}
		memset(&s->req, 0, sizeof(s->req));
		s->req.op = IO_WRITE;
		s->req.fd = tf->fd;
		s->req.buf = sb;
		s->req.len = (uint32_t)(s->nb * g->block_size);
		s->req.off = tf_block_off(tf, b);
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
