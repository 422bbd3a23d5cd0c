/*
 * kernels.h - the row kernels: gather, pooled gather and update over rows
 * already resolved to their bytes (ptrs: each unique row's slot; inv: each
 * input's unique index). They touch nothing else of the store, so disjoint
 * ranges of one call may run on several threads (ops.c). Not installed.
 */
#ifndef ET_KERNELS_H
#define ET_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "embtier.h"
#include "table_file.h"

/* Inputs [i0, i1) decoded into out (one row of dim each, from i0). */
void kern_gather(const struct tf_geom *g, void *const *ptrs,
		 const uint32_t *inv, size_t i0, size_t i1, float *out);

/* Bags [b0, b1) pooled (mode) into out, one row of dim a bag from b0;
 * tmp: one decoded row. */
void kern_pool(const struct tf_geom *g, void *const *ptrs, const uint32_t *inv,
	       const uint64_t *offsets, size_t b0, size_t b1, et_pool mode,
	       float *out, float *tmp);

/* The inputs of each of the m unique rows, for the update: list[start[u]
 * .. start[u + 1]) are unique u's gradient rows in input order (n + m + 1
 * u32 in all). */
void kern_group(const uint32_t *inv, size_t n, size_t m,
		const uint64_t *offsets, uint32_t *list, uint32_t *start);

/* Unique rows [u0, u1) updated in place from their summed gradients (SGD
 * or row-wise Adagrad, see kernels.c); gsum: scratch of KERN_UPD_ROWS rows
 * of dim. */
#define KERN_UPD_ROWS 4
void kern_update(const struct tf_geom *g, void *const *ptrs, size_t u0,
		 size_t u1, const uint32_t *list, const uint32_t *start,
		 const float *grads, const uint64_t *offsets, et_pool mode,
		 const struct et_update_params *up, float *gsum);
/* The same for unique rows sel[j0 .. j1) (each row's result the same
 * bits as kern_update's). */
void kern_update_sel(const struct tf_geom *g, void *const *ptrs,
		     const uint32_t *sel, size_t j0, size_t j1,
		     const uint32_t *list, const uint32_t *start,
		     const float *grads, const uint64_t *offsets, et_pool mode,
		     const struct et_update_params *up, float *gsum);

#endif
