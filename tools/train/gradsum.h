/*
 * gradsum.h - sums the dense gradients of a batch's slices along a fixed
 * balanced binary tree, so that the bits depend on the slicing alone and
 * not on which process computed which slice.
 *
 * The trainer cuts each batch into S slices of equal size and runs the
 * model once per slice. Slice gradients are pushed in slice order; like a
 * binary counter, two partial sums covering the same number of slices are
 * added (left + right) as soon as both exist. For S a power of two that is
 * exactly the tree sum(lo, hi) = sum(lo, mid) + sum(mid, hi) with
 * mid = lo + (hi - lo) / 2, and a process holding an aligned power-of-two
 * run of slices ends with one node of it: the rest of the tree is the
 * fixed-order all-reduce of embtier_mpi.h (etm_allreduce). Other S give a
 * fixed tree too (the leftover sums are folded right to left).
 */
#ifndef ET_TRAIN_GRADSUM_H
#define ET_TRAIN_GRADSUM_H

#include <stddef.h>

#include "model.h"

struct gradsum {
	size_t n;    /* floats in one gradient */
	int depth;   /* partial sums held */
	int cap;     /* room for this many */
	int *leaves; /* slices each partial sum covers */
	float *buf;  /* cap x n */
};

int gradsum_init(struct gradsum *g, const struct model *m, int slices);
void gradsum_free(struct gradsum *g);

/* Adds the model's current weight gradients as the next slice's. */
void gradsum_push(struct gradsum *g, struct model *m);

/* The sum of everything pushed since the last call (left in the returned
 * buffer of g->n floats); the next push starts a new batch. */
float *gradsum_result(struct gradsum *g);

/* Writes a gradient buffer back into the model, for model_step(). */
void gradsum_store(const struct gradsum *g, struct model *m, const float *src);

#endif
