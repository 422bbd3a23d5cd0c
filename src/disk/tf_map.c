/*
 * tf_map.c - the materialization map of a table file: which of its blocks
 * have ever been written.
 *
 * The file is sparse, so a block never written is a hole. At open, the
 * holes are read back with SEEK_DATA and SEEK_HOLE into the map, a bitmap
 * of written blocks kept in 4 KiB leaves allocated only where some block is
 * written; a row whose block is not in the map is served from the
 * initializer with no I/O at all. A successful block write sets its bit.
 */
#include <errno.h>
#include <unistd.h>

#include "mem_host.h"
#include "table_file_impl.h"

#define MAP_LEAF_BITS 32768u /* one 4 KiB leaf */

int tf_map_init(struct matmap *m, uint64_t blocks)
{
	m->nleaves = (blocks + MAP_LEAF_BITS - 1) / MAP_LEAF_BITS;
	m->count = 0;
	m->leaves = mem_alloc(m->nleaves * sizeof(*m->leaves), 0);
	return m->leaves ? 0 : -ENOMEM;
}

void tf_map_free(struct matmap *m)
{
	if (!m->leaves)
		return;
	for (uint64_t i = 0; i < m->nleaves; i++)
		mem_free(m->leaves[i], MAP_LEAF_BITS / 8, 0);
	mem_free(m->leaves, m->nleaves * sizeof(*m->leaves), 0);
	m->leaves = NULL;
}

bool tf_map_test(const struct matmap *m, uint64_t b)
{
	const uint64_t *leaf;
	uint64_t bit = b % MAP_LEAF_BITS;

	if (b / MAP_LEAF_BITS >= m->nleaves)
		return false; /* a keyed table's: it has no blocks */
	leaf = m->leaves[b / MAP_LEAF_BITS];
	return leaf && (leaf[bit / 64] >> (bit % 64) & 1);
}

int tf_map_set(struct matmap *m, uint64_t b)
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
uint64_t tf_map_next(const struct matmap *m, uint64_t b, uint64_t end)
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
int tf_map_load(et_tfile *tf)
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
			ret = tf_map_set(&tf->map, b);
			if (ret)
				return ret;
		}
		pos = hole;
	}
	return 0;
}
