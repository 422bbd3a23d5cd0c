/*
 * rowinit.h - deterministic initial values of rows never written.
 *
 * The value of (seed, row, column) is a pure function computed with a
 * counter-based hash, so a row gets the same initial value whenever and
 * wherever it is first needed, in any order, on any tier. Any thread.
 */
#ifndef ET_ROWINIT_H
#define ET_ROWINIT_H

#include <stdint.h>

#include "embtier.h"

/* Fills out[0..dim) with the f32 initial values of row. */
void rowinit_fill(et_init init, float scale, uint64_t seed, uint64_t row,
		  uint32_t dim, float *out);
/* The same for columns [col0, col0 + n) only: a column's value does not
 * depend on the row's dimension. */
void rowinit_fill_cols(et_init init, float scale, uint64_t seed, uint64_t row,
		       uint32_t col0, uint32_t n, float *out);

#endif
