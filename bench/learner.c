/*
 * learner.c - the counting learner (see learner.h).
 *
 * Every distinct key gets a slot in one open-addressing table with its
 * count and last access. The resident keys are a min-heap by (count, last
 * access), each slot knowing its place in the heap, so that a hit, which
 * raises a count, moves its key down in O(log n). A new phase clears every
 * count and rebuilds the heap (by access time alone then).
 */
#include "learner.h"

#include <errno.h>
#include <stdlib.h>

#include "workload.h"

#define NOT_RESIDENT UINT64_MAX

struct lmap {
	uint64_t *key;	 /* 0: empty */
	uint64_t *count; /* draws in the phase */
	uint64_t *last;	 /* access time */
	uint64_t *pos;	 /* place in the heap, or NOT_RESIDENT */
	uint64_t mask;
};

/* Whether slot a goes before slot b: fewer draws, then older. */
static int before(const struct lmap *m, uint64_t a, uint64_t b)
{
	if (m->count[a] != m->count[b])
		return m->count[a] < m->count[b];
	return m->last[a] < m->last[b];
}

static void put(struct lmap *m, uint64_t *h, size_t i, uint64_t s)
{
	h[i] = s;
	m->pos[s] = i;
}

static void sift_down(struct lmap *m, uint64_t *h, size_t n, size_t i)
{
	uint64_t v = h[i];

	for (;;) {
		size_t c = 2 * i + 1;

		if (c >= n)
			break;
		if (c + 1 < n && before(m, h[c + 1], h[c]))
			c++;
		if (!before(m, h[c], v))
			break;
		put(m, h, i, h[c]);
		i = c;
	}
	put(m, h, i, v);
}

static void sift_up(struct lmap *m, uint64_t *h, size_t i)
{
	uint64_t v = h[i];

	while (i && before(m, v, h[(i - 1) / 2])) {
		put(m, h, i, h[(i - 1) / 2]);
		i = (i - 1) / 2;
	}
	put(m, h, i, v);
}

int learner_misses(const uint64_t *keys, const uint32_t *draws,
		   const size_t *bstart, uint64_t nb, uint64_t phase,
		   uint64_t cap, uint64_t *misses)
{
	struct lmap m = {0};
	uint64_t *h = NULL, size = 16, now = 0, miss = 0;
	size_t n = 0;
	int ret = 0;

	if (!cap)
		return -EINVAL;
	while (size < 2 * (uint64_t)bstart[nb])
		size *= 2;
	if (cap > bstart[nb])
		cap = bstart[nb] ? bstart[nb] : 1;
	m.key = calloc(size, sizeof(*m.key));
	m.count = calloc(size, sizeof(*m.count));
	m.last = calloc(size, sizeof(*m.last));
	m.pos = malloc(size * sizeof(*m.pos));
	m.mask = size - 1;
	h = malloc(cap * sizeof(*h));
	if (!m.key || !m.count || !m.last || !m.pos || !h) {
		ret = -ENOMEM;
		goto out;
	}
	for (uint64_t i = 0; i < size; i++)
		m.pos[i] = NOT_RESIDENT;
	for (uint64_t b = 0; b < nb; b++) {
		if (phase && b && b % phase == 0) { /* counts start over */
			for (uint64_t i = 0; i < size; i++)
				m.count[i] = 0;
			for (size_t i = n / 2; i-- > 0;)
				sift_down(&m, h, n, i);
		}
		for (size_t i = bstart[b]; i < bstart[b + 1]; i++) {
			uint64_t s = wl_probe(m.key, m.mask, keys[i]);

			m.key[s] = keys[i];
			m.count[s] += draws[i];
			m.last[s] = ++now;
			if (m.pos[s] != NOT_RESIDENT) { /* a hit */
				sift_down(&m, h, n, m.pos[s]);
				continue;
			}
			miss++;
			if (n == cap) {
				uint64_t v = h[0];

				if (m.count[s] <= m.count[v])
					continue; /* not admitted */
				if (--n) {
					put(&m, h, 0, h[n]);
					sift_down(&m, h, n, 0);
				}
				m.pos[v] = NOT_RESIDENT;
			}
			put(&m, h, n, s);
			sift_up(&m, h, n++);
		}
	}
	*misses = miss;
out:
	free(m.key);
	free(m.count);
	free(m.last);
	free(m.pos);
	free(h);
	return ret;
}
