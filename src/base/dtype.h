/*
 * dtype.h - storage types of row values and their conversion to and from
 * f32. Conversion happens only at gather and update (docs/ARCHITECTURE.md, invariant 2);
 * every tier holds the storage bytes. Pure functions, any thread.
 */
#ifndef ET_DTYPE_H
#define ET_DTYPE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "embtier.h"

/* An f32's bits, and back. */
static inline uint32_t f32_bits(float f)
{
	uint32_t u;

	memcpy(&u, &f, sizeof(u));
	return u;
}

static inline float bits_f32(uint32_t u)
{
	float f;

	memcpy(&f, &u, sizeof(f));
	return f;
}

/* Bytes of one value of dtype t, or 0 if t is not a dtype. */
size_t dtype_size(et_dtype t);

/* n values from f32 into storage type t, and back. */
void dtype_encode(et_dtype t, const float *src, void *dst, size_t n);
void dtype_decode(et_dtype t, const void *src, float *dst, size_t n);

#endif
