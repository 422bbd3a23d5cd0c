/*
 * gradsum.c - fixed-tree sums of slice gradients (see gradsum.h).
 */
#include "gradsum.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int gradsum_init(struct gradsum *g, const struct model *m, int slices)
{
	int nw = model_state_count(m, 1);

	memset(g, 0, sizeof(*g));
	for (int i = 0; i < nw; i++) {
		size_t len;

		model_grad_array((struct model *)m, i, &len);
		g->n += len;
	}
	/* a binary counter over S leaves holds at most log2(S) + 1 sums */
	g->cap = 2;
	while ((1 << (g->cap - 1)) < slices)
		g->cap++;
	g->leaves = calloc(g->cap, sizeof(*g->leaves));
	g->buf = malloc(g->cap * g->n * sizeof(float));
	return g->leaves && g->buf ? 0 : -ENOMEM;
}

void gradsum_free(struct gradsum *g)
{
	free(g->leaves);
	free(g->buf);
	memset(g, 0, sizeof(*g));
}

/* Adds partial sum depth - 1 into depth - 2 and drops it. */
static void fold_top(struct gradsum *g)
{
	float *a = g->buf + (size_t)(g->depth - 2) * g->n;
	const float *b = a + g->n;

	for (size_t i = 0; i < g->n; i++)
		a[i] += b[i];
	g->leaves[g->depth - 2] += g->leaves[g->depth - 1];
	g->depth--;
}

void gradsum_push(struct gradsum *g, struct model *m)
{
	int nw = model_state_count(m, 1);
	float *dst = g->buf + (size_t)g->depth * g->n;

	for (int i = 0; i < nw; i++) {
		size_t len;
		const float *src = model_grad_array(m, i, &len);

		memcpy(dst, src, len * sizeof(float));
		dst += len;
	}
	g->leaves[g->depth++] = 1;
	while (g->depth >= 2 &&
	       g->leaves[g->depth - 1] == g->leaves[g->depth - 2])
		fold_top(g);
}

float *gradsum_result(struct gradsum *g)
{
	while (g->depth > 1)
		fold_top(g);
	g->depth = 0;
	return g->buf;
}

void gradsum_store(const struct gradsum *g, struct model *m, const float *src)
{
	int nw = model_state_count(m, 1);

	for (int i = 0; i < nw; i++) {
		size_t len;
		float *dst = model_grad_array(m, i, &len);

		memcpy(dst, src, len * sizeof(float));
		src += len;
	}
}
