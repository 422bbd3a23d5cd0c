/*
 * tf_rows.c - the f32 row API of a table file (et_tfile_read_rows,
 * et_tfile_write_rows): rows converted between f32 and the storage type
 * around the raw block and row-log I/O of tf_block.c.
 */
#include <errno.h>
#include <string.h>

#include "dtype.h"
#include "error.h"
#include "mem_host.h"
#include "table_file_impl.h"

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
	if (tf->g.keyed)
		return err_set(-EINVAL, "a keyed table is written through a "
					"store, which commits its row log");
	g = &tf->g;
	ret = tf_check_rows(tf, rows, n);
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
