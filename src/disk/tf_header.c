/*
 * tf_header.c - the header block of a table file, and the geometry it
 * implies.
 *
 * The header names the primary parameters (rows, or the keyed flag; dim, dtype, optimizer,
 * initializer, seed, block size) and the fields derived from them, under
 * an XXH3 checksum; tf_geom_derive computes the derived ones, and a header
 * whose stored fields disagree with them is ET_EHEADER. tf_params_check
 * makes the same checks on a caller's et_table_params, each with its own
 * message, before a file is created.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "dtype.h"
#include "le.h"
#include "error.h"
#include "fileio.h"
#include "hash.h"
#include "table_file_impl.h"

#define TF_MAGIC       "EMBTIERT"
#define TF_HDR_BYTES   256 /* bytes of the header block that mean something */
#define TF_HDR_SUM_OFF 248

void tf_header_encode(const struct tf_geom *g, unsigned char *h)
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
	put32(h + 68, g->keyed ? ET_TABLE_KEYED : 0); /* flags */
	put64(h + 72, g->data_off);
	put64(h + 80, g->blocks);
	put64(h + TF_HDR_SUM_OFF, hash_bytes(h, TF_HDR_SUM_OFF));
}

uint32_t tf_state_floats_of(et_optim o)
{
	return o == ET_OPT_ROWWISE_ADAGRAD ? 1 : 0;
}

/* Fills the derived fields of g from the primary ones; 0 or ET_EHEADER-ish
 * (the caller chooses the code). */
bool tf_geom_derive(struct tf_geom *g)
{
	size_t es = dtype_size(g->dtype);

	if (!es || g->dim == 0 || g->dim > ET_MAX_DIM ||
	    (g->keyed ? g->rows != 0 : g->rows == 0 || g->rows > ET_MAX_ROWS) ||
	    g->optim > ET_OPT_ROWWISE_ADAGRAD || g->init > ET_INIT_NORMAL ||
	    !isfinite(g->init_scale) || g->init_scale < 0)
		return false;
	g->state_floats = tf_state_floats_of(g->optim);
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

uint32_t tf_params_row_bytes(const struct et_table_params *p)
{
	et_dtype dt = p->dtype ? p->dtype : ET_F32;

	return p->dim * (uint32_t)dtype_size(dt) +
	       4 * tf_state_floats_of(p->optim);
}

/* The checks of tf_geom_derive on a caller's parameters, before anything is
 * created, each failure with its own message; the device's alignment of
 * block_size is checked once the file is open. */
int tf_params_check(const struct et_table_params *p)
{
	unsigned dtype = p->dtype ? (unsigned)p->dtype : ET_F32;
	uint64_t rb;

	if (p->flags & ~ET_TABLE_KEYED)
		return err_set(ET_ECONFIG, "et_table_params.flags 0x%x unknown",
			       p->flags & ~ET_TABLE_KEYED);
	if ((p->flags & ET_TABLE_KEYED) && p->rows)
		return err_set(ET_ECONFIG,
			       "et_table_params.rows %llu for a keyed table: "
			       "must be 0 (its ids are any u64)",
			       (unsigned long long)p->rows);
	if (!(p->flags & ET_TABLE_KEYED) &&
	    (p->rows == 0 || p->rows > ET_MAX_ROWS))
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
	     4 * tf_state_floats_of(p->optim);
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

int tf_header_decode(const unsigned char *h, size_t n, struct tf_geom *g)
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
	g->keyed = get32(h + 68) == ET_TABLE_KEYED;
	g->dim = get32(h + 24);
	g->dtype = (et_dtype)get32(h + 28);
	g->optim = (et_optim)get32(h + 32);
	g->init = (et_init)get32(h + 40);
	sb = get32(h + 44);
	memcpy(&g->init_scale, &sb, 4);
	g->seed = get64(h + 48);
	g->block_size = get32(h + 56);
	if (get32(h + 12) != TF_HDR_BYTES || !tf_geom_derive(g) ||
	    get32(h + 36) != g->state_floats ||
	    get32(h + 60) != g->rows_per_block ||
	    get32(h + 64) != g->row_bytes ||
	    (get32(h + 68) & ~ET_TABLE_KEYED) || get64(h + 72) != g->data_off ||
	    get64(h + 80) != g->blocks)
		return ET_EHEADER;
	return 0;
}

int tf_read_geom(const char *path, struct tf_geom *g)
{
	unsigned char h[TF_HDR_BYTES];
	int fd = open(path, O_RDONLY | O_CLOEXEC), ret;

	if (fd < 0)
		return err_set(-errno, "%s: %s", path, strerror(errno));
	ret = fio_pread_all(fd, h, sizeof(h), 0);
	close(fd);
	if (!ret)
		ret = tf_header_decode(h, sizeof(h), g);
	else if (ret == ET_ETRUNC)
		ret = tf_header_decode(h, 0, g);
	return ret ? err_set(ret, "%s: header: %s", path, et_strerror(ret)) : 0;
}
