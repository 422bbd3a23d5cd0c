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
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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

struct etpy_plan;
struct etpy_plan *etpy_plan_new(size_t ntables, const int *tid,
				const uint32_t *dims, et_pool mode);
void etpy_plan_free(struct etpy_plan *p);
int etpy_plan_prefetch(et_store *s, struct etpy_plan *p, const uint64_t *ids,
		       size_t n);
int etpy_plan_gather(et_store *s, struct etpy_plan *p, const uint64_t *ids,
		     size_t nbags, uint64_t *ids_copy, float *out,
		     size_t *failed);
int etpy_plan_update(et_store *s, struct etpy_plan *p, const uint64_t *ids,
		     size_t nbags, const float *grads, float lr, float eps,
		     size_t *failed);

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

/*
 * A plan: what every step of one EmbeddingBagCollection shares (its
 * tables, their dims, the pooling mode, whether a table repeats, the
 * offsets of one id per bag), built once, so that a step's three calls
 * from Python carry only what changes: the [T, nbags] ids, the output or
 * gradients, lr and eps. Each call takes the store anew (a closed store's
 * NULL handle is the library's error, as for the calls above).
 *
 * Why: a step's Python code runs after the library's work has evicted it
 * from the CPU's caches, and there every ctypes argument, torch operation
 * and Python line costs several times what it costs warm; see the README's
 * "What Python costs".
 */
struct etpy_plan {
	size_t ntables;
	int *tid;
	uint32_t *dims;
	et_pool mode;
	uint64_t *offsets; /* 0, 1, .. noffsets - 1 */
	size_t noffsets;
	struct et_table_batch *b;
	struct et_batch_ids *pf;
};

void etpy_plan_free(struct etpy_plan *p)
{
	if (!p)
		return;
	free(p->tid);
	free(p->dims);
	free(p->offsets);
	free(p->b);
	free(p->pf);
	free(p);
}

struct etpy_plan *etpy_plan_new(size_t ntables, const int *tid,
				const uint32_t *dims, et_pool mode)
{
	struct etpy_plan *p = calloc(1, sizeof(*p));
	size_t n = ntables ? ntables : 1;

	if (!p)
		return NULL;
	p->ntables = ntables;
	p->mode = mode;
	p->tid = malloc(n * sizeof(*p->tid));
	p->dims = malloc(n * sizeof(*p->dims));
	p->b = calloc(n, sizeof(*p->b));
	p->pf = calloc(n, sizeof(*p->pf));
	if (!p->tid || !p->dims || !p->b || !p->pf) {
		etpy_plan_free(p);
		return NULL;
	}
	if (ntables) {
		memcpy(p->tid, tid, ntables * sizeof(*tid));
		memcpy(p->dims, dims, ntables * sizeof(*dims));
	}
	return p;
}

/* 0, 1, .., nbags: one id per bag. */
static const uint64_t *one_per_bag(struct etpy_plan *p, size_t nbags)
{
	if (p->noffsets < nbags + 1) {
		size_t n =
		    nbags + 1 > 2 * p->noffsets ? nbags + 1 : 2 * p->noffsets;
		uint64_t *o = realloc(p->offsets, n * sizeof(*o));

		if (!o)
			return NULL;
		for (size_t i = 0; i < n; i++)
			o[i] = i;
		p->offsets = o;
		p->noffsets = n;
	}
	return p->offsets;
}

/* et_prefetch of a [T, n] array of ids: row k for the plan's table k. */
int etpy_plan_prefetch(et_store *s, struct etpy_plan *p, const uint64_t *ids,
		       size_t n)
{
	for (size_t k = 0; k < p->ntables; k++) {
		p->pf[k].table = p->tid[k];
		p->pf[k].ids = ids + k * n;
		p->pf[k].n = n;
	}
	return et_prefetch(s, p->pf, p->ntables);
}

/* Pooled gathers of a [T, nbags] array of ids, one id per bag, into out
 * (T blocks of nbags x dims[k]). With ids_copy (T x nbags entries), the
 * ids are first copied there and looked up from the copy, which the
 * update of the same step then reads: the caller may change its ids in
 * between. */
int etpy_plan_gather(et_store *s, struct etpy_plan *p, const uint64_t *ids,
		     size_t nbags, uint64_t *ids_copy, float *out,
		     size_t *failed)
{
	const uint64_t *o = one_per_bag(p, nbags);

	*failed = SIZE_MAX;
	if (!o)
		return -ENOMEM;
	if (ids_copy && p->ntables && nbags) {
		memcpy(ids_copy, ids, p->ntables * nbags * sizeof(*ids));
		ids = ids_copy;
	}
	return etpy_gather_pooled(s, p->ntables, p->tid, p->dims, NULL, ids,
				  nbags, NULL, o, nbags, p->mode, out, failed);
}

/* The fused updates of the same ids (the copy etpy_plan_gather made) with
 * grads, laid out as that call's out. */
int etpy_plan_update(et_store *s, struct etpy_plan *p, const uint64_t *ids,
		     size_t nbags, const float *grads, float lr, float eps,
		     size_t *failed)
{
	const uint64_t *o = one_per_bag(p, nbags);
	struct et_update_params up = {.lr = lr, .eps = eps};

	*failed = SIZE_MAX;
	if (!o)
		return -ENOMEM;
	return etpy_update_pooled(s, p->ntables, p->tid, p->dims, NULL, ids,
				  nbags, NULL, o, nbags, p->mode, grads, &up,
				  failed);
}
