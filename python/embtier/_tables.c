/*
 * _tables.c - the table-batched calls of the Python package: one call from
 * Python runs a step's pooled gathers (or updates) over every table of an
 * EmbeddingBagCollection, as FBGEMM's table-batched embedding does. Only
 * loops over the public API: results are exactly those of the per-table
 * calls (et_gather_pooled_multi and et_update_pooled_multi: one call for
 * every table, its pooling spread over the store's threads). `make python`
 * builds it into build-python/libembtier_tables.so,
 * which the package loads beside libembtier.so; without it, the package
 * makes the same calls one by one from Python.
 *
 * Why in C: from Python, each of the 2 x 26 calls of a step costs its
 * ctypes conversion and, worse, runs after the interpreter has pushed the
 * store's hot metadata out of the CPU's caches; that, not the library,
 * made a Python step 20% slower than the same calls from a C loop.
 *
 * Table k of ntables: table tid[k], dims[k] values a row, ids ids[k] (or,
 * if ids is NULL, ids_base + k * ids_stride: a [T, B] array), offsets
 * offsets[k] (nbags + 1 entries; if offsets is NULL, offsets_base for every
 * table); its nbags x dims[k] block of out (or grads) follows table k -
 * 1's. On an error, et_errdetail() names the table (*failed is SIZE_MAX);
 * a bad descriptor changes nothing.
 */
#include <stdbool.h>
#include <stdint.h>

#include <embtier.h>

#define TABLE_ARGS                                                             \
	et_store *s, size_t ntables, const int *tid, const uint32_t *dims,     \
	    const uint64_t *const *ids, const uint64_t *ids_base,              \
	    size_t ids_stride, const uint64_t *const *offsets,                 \
	    const uint64_t *offsets_base, size_t nbags, et_pool mode

int etpy_gather_pooled(TABLE_ARGS, float *out, size_t *failed);
int etpy_update_pooled(TABLE_ARGS, const float *grads,
		       const struct et_update_params *up, size_t *failed);
int etpy_prefetch(et_store *s, size_t ntables, const int *tid,
		  const uint64_t *ids_base, size_t n);

static const uint64_t *ids_of(const uint64_t *const *ids,
			      const uint64_t *ids_base, size_t ids_stride,
			      size_t k)
{
	return ids ? ids[k] : ids_base + k * ids_stride;
}

/* The descriptors of a multi-table call, table k's block of data (out or
 * grads) after table k - 1's. */
static void describe(struct et_table_batch *b, size_t ntables, const int *tid,
		     const uint32_t *dims, const uint64_t *const *ids,
		     const uint64_t *ids_base, size_t ids_stride,
		     const uint64_t *const *offsets,
		     const uint64_t *offsets_base, size_t nbags, float *out,
		     const float *grads)
{
	size_t at = 0;

	for (size_t k = 0; k < ntables; k++) {
		b[k] = (struct et_table_batch){
		    .table = tid[k],
		    .ids = ids_of(ids, ids_base, ids_stride, k),
		    .offsets = offsets ? offsets[k] : offsets_base,
		    .nbags = nbags,
		    .out = out ? out + at : NULL,
		    .grads = grads ? grads + at : NULL};
		at += nbags * dims[k];
	}
}

/* Whether a table appears twice (features sharing a table): the
 * multi-table calls take each table once, so such a step goes table by
 * table, in order, which gives the same bits. */
static bool repeats(const int *tid, size_t ntables)
{
	for (size_t i = 1; i < ntables; i++)
		for (size_t j = 0; j < i; j++)
			if (tid[i] == tid[j])
				return true;
	return false;
}

int etpy_gather_pooled(TABLE_ARGS, float *out, size_t *failed)
{
	struct et_table_batch b[ntables ? ntables : 1];

	describe(b, ntables, tid, dims, ids, ids_base, ids_stride, offsets,
		 offsets_base, nbags, out, NULL);
	*failed = SIZE_MAX; /* et_errdetail() names batch[k] */
	if (!repeats(tid, ntables))
		return et_gather_pooled_multi(s, b, ntables, mode);
	for (size_t k = 0; k < ntables; k++) {
		int ret = et_gather_pooled(s, b[k].table, b[k].ids,
					   b[k].offsets, nbags, mode, b[k].out);

		if (ret) {
			*failed = k;
			return ret;
		}
	}
	return 0;
}

int etpy_update_pooled(TABLE_ARGS, const float *grads,
		       const struct et_update_params *up, size_t *failed)
{
	struct et_table_batch b[ntables ? ntables : 1];

	describe(b, ntables, tid, dims, ids, ids_base, ids_stride, offsets,
		 offsets_base, nbags, NULL, grads);
	*failed = SIZE_MAX;
	if (!repeats(tid, ntables))
		return et_update_pooled_multi(s, b, ntables, mode, up);
	for (size_t k = 0; k < ntables; k++) {
		int ret =
		    et_update_pooled(s, b[k].table, b[k].ids, b[k].offsets,
				     nbags, mode, b[k].grads, up);

		if (ret) {
			*failed = k;
			return ret;
		}
	}
	return 0;
}

/* et_prefetch of a [T, n] array of ids: row k for table tid[k]. */
int etpy_prefetch(et_store *s, size_t ntables, const int *tid,
		  const uint64_t *ids_base, size_t n)
{
	struct et_batch_ids b[ntables ? ntables : 1];

	for (size_t k = 0; k < ntables; k++) {
		b[k].table = tid[k];
		b[k].ids = ids_base + k * n;
		b[k].n = n;
	}
	return et_prefetch(s, b, ntables);
}
