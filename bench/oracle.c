/*
 * oracle.c - the distribution oracle (see oracle.h).
 *
 * Every distinct key of the lookups gets a slot in one open-addressing
 * table, with its priority in the current phase (rank - 1) * tables +
 * table, the lower the more probable, found by walking every rank of
 * every table through the generator's own mapping. The resident keys are
 * a max-heap of priorities; a phase change gives the keys their new
 * priorities and rebuilds the heap.
 */
#include "oracle.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>

struct omap {
	uint64_t *key;	/* 0: empty */
	uint64_t *prio; /* in the current phase */
	uint8_t *res;	/* resident */
	uint64_t mask;
};

/* Priorities of phase `batch`. */
static void omap_phase(struct omap *m, const struct wl_gen *g, uint64_t batch)
{
	uint32_t nt = wl_tables(g);

	for (uint32_t t = 0; t < nt; t++) {
		uint64_t rows = wl_rows(g, t);

		for (uint64_t r = 1; r <= rows; r++) {
			uint64_t key = (uint64_t)(t + 1) << 40 |
				       wl_rank_to_row(g, t, r, batch);
			uint64_t i = wl_probe(m->key, m->mask, key);

			if (m->key[i])
				m->prio[i] = (r - 1) * nt + t;
		}
	}
}

/* The max-heap h[0..n) of slots of m, by priority. */
static void omap_down(const struct omap *m, uint64_t *h, size_t n, size_t i)
{
	uint64_t v = h[i];

	for (;;) {
		size_t c = 2 * i + 1;

		if (c >= n)
			break;
		if (c + 1 < n && m->prio[h[c + 1]] > m->prio[h[c]])
			c++;
		if (m->prio[h[c]] <= m->prio[v])
			break;
		h[i] = h[c];
		i = c;
	}
	h[i] = v;
}

static void omap_up(const struct omap *m, uint64_t *h, size_t i)
{
	uint64_t v = h[i];

	while (i && m->prio[h[(i - 1) / 2]] < m->prio[v]) {
		h[i] = h[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	h[i] = v;
}

int oracle_misses(const struct wl_gen *g, const uint64_t *keys,
		  const size_t *bstart, uint64_t nb, uint64_t cap,
		  uint64_t *misses)
{
	struct omap m = {0};
	uint64_t *h = NULL, size = 16, phase = UINT64_MAX, miss = 0;
	size_t n = 0;
	int ret = 0;

	if (!cap)
		return -EINVAL;
	if (g->p.kind != WL_ZIPF && g->p.kind != WL_SHIFT)
		return -ENOTSUP;
	while (size < 2 * (uint64_t)bstart[nb])
		size *= 2;
	m.key = calloc(size, sizeof(*m.key));
	m.prio = malloc(size * sizeof(*m.prio));
	m.res = calloc(size, 1);
	m.mask = size - 1;
	if (cap > bstart[nb])
		cap = bstart[nb] ? bstart[nb] : 1;
	h = malloc(cap * sizeof(*h));
	if (!m.key || !m.prio || !m.res || !h) {
		ret = -ENOMEM;
		goto out;
	}
	for (size_t i = 0; i < bstart[nb]; i++) {
		uint64_t s = wl_probe(m.key, m.mask, keys[i]);

		m.key[s] = keys[i];
		m.prio[s] = UINT64_MAX;
	}
	for (uint64_t b = 0; b < nb; b++) {
		uint64_t ph = g->p.kind == WL_SHIFT ? b / g->p.shift_every : 0;

		if (ph != phase) {
			omap_phase(&m, g, b);
			for (size_t i = n / 2; i-- > 0;)
				omap_down(&m, h, n, i);
			phase = ph;
		}
		for (size_t i = bstart[b]; i < bstart[b + 1]; i++) {
			uint64_t s = wl_probe(m.key, m.mask, keys[i]);

			if (m.res[s])
				continue;
			miss++;
			if (n == cap) { /* the least probable goes */
				m.res[h[0]] = 0;
				h[0] = h[--n];
				omap_down(&m, h, n, 0);
			}
			m.res[s] = 1;
			h[n] = s;
			omap_up(&m, h, n++);
		}
	}
	*misses = miss;
out:
	free(m.key);
	free(m.prio);
	free(m.res);
	free(h);
	return ret;
}
