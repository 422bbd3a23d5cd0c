/*
 * tf_verify.c - et_tfile_verify: every written block of a table file read
 * and checked against its trailer, then every record of its row log, with
 * progress reported as it goes. Nothing is changed or repaired; bad blocks
 * and records are counted, and the first bad block named.
 */
#include <errno.h>
#include <string.h>

#include "error.h"
#include "io.h"
#include "rowlog.h"
#include "table_file_impl.h"

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
			b = tf_map_next(&tf->map, b, tf->g.blocks);
			if (b == UINT64_MAX)
				break;
			struct io_req *r = &tf->reqs[nr];

			memset(r, 0, sizeof(*r));
			r->op = IO_READ;
			r->fd = tf->fd;
			r->buf = tf->stage + (size_t)nr * tf->g.block_size;
			r->len = tf->g.block_size;
			r->off = tf_block_off(tf, b);
			blocks[nr++] = b++;
		}
		if (!nr)
			break;
		ret = io_run(io, tf->reqs, nr);
		if (ret)
			return ret;
		for (uint32_t i = 0; i < nr; i++) {
			if (tf_block_check(tf, blocks[i],
					   (unsigned char *)tf->reqs[i].buf) <
			    0) {
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
