/*
 * dtype.h - storage types of row values and their conversion to and from
 * f32. Conversion happens only at gather and update (docs/ARCHITECTURE.md, invariant 2);
 * every tier holds the storage bytes. Pure functions, any thread.
 */
#ifndef ET_DTYPE_H
#define ET_DTYPE_H

#include <stddef.h>
#include <stdint.h>

#include "embtier.h"

/* Bytes of one value of dtype t, or 0 if t is not a dtype. */
size_t dtype_size(et_dtype t);

/* n values from f32 into storage type t, and back. */
void dtype_encode(et_dtype t, const float *src, void *dst, size_t n);
void dtype_decode(et_dtype t, const void *src, float *dst, size_t n);

#endif
