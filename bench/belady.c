/*
 * belady.c - Belady's MIN over an access sequence (see belady.h).
 *
 * A backward pass finds, for every access i, the time next[i] of the next
 * access to the same key (or "never", encoded as n + i so that every
 * priority is distinct). The forward pass then needs no per-key state at
 * all: the resident set is a max-heap of next-use times, one entry per
 * resident key.
 *
 *   access i, key resident   (some earlier access j has next[j] == i and
 *                             was not evicted): a hit; the entry i is now
 *                             stale, push next[i]
 *   access i, not resident:  a miss; if full, pop the largest next-use p
 *                             (skipping stale entries, those with p < i)
 *                             and mark the access at p a miss-to-be
 *                             (evicted[p]); push next[i]
 *
 * Stale entries are the smallest priorities, so they sink rather than
 * surface; the heap is rebuilt without them when it grows past twice the
 * capacity, which keeps it O(cap) and costs O(1) amortized per access.
 */
#include "belady.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

static uint64_t mix(uint64_t x)
{
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	x *= 0xc4ceb9fe1a85ec53ULL;
	return x ^ (x >> 33);
}

static void heap_up(uint32_t *h, size_t i)
{
	uint32_t v = h[i];

	while (i && h[(i - 1) / 2] < v) {
		h[i] = h[(i - 1) / 2];
		i = (i - 1) / 2;
	}
	h[i] = v;
}

static void heap_down(uint32_t *h, size_t n, size_t i)
{
	uint32_t v = h[i];

	for (;;) {
		size_t c = 2 * i + 1;

		if (c >= n)
			break;
		if (c + 1 < n && h[c + 1] > h[c])
			c++;
		if (h[c] <= v)
			break;
		h[i] = h[c];
		i = c;
	}
	h[i] = v;
}

static bool bit(const uint64_t *b, size_t i)
{
	return b[i / 64] >> (i % 64) & 1;
}

static void bit_set(uint64_t *b, size_t i)
{
	b[i / 64] |= 1ULL << (i % 64);
}

/* next[i] for every access, and which accesses have an earlier one. */
static int next_uses(const uint64_t *keys, size_t n, uint32_t *next,
		     uint64_t *has_prev)
{
	size_t cap = 16;
	uint64_t *hk;
	uint32_t *hv;

	while (cap < n + n / 2)
		cap *= 2;
	hk = malloc(cap * sizeof(*hk));
	hv = malloc(cap * sizeof(*hv));
	if (!hk || !hv) {
		free(hk);
		free(hv);
		return -ENOMEM;
	}
	/* key + 1 so that 0 marks an empty slot (keys may be 0). Key
	 * UINT64_MAX would wrap to 0: it is stored as is, with its own
	 * flag slot below. */
	memset(hk, 0, cap * sizeof(*hk));
	uint32_t max_key_pos = UINT32_MAX;

	for (size_t i = n; i-- > 0;) {
		uint64_t k = keys[i] + 1;
		uint32_t last;

		if (k == 0) {
			last = max_key_pos;
			max_key_pos = (uint32_t)i;
		} else {
			size_t h = mix(k) & (cap - 1);

			while (hk[h] && hk[h] != k)
				h = (h + 1) & (cap - 1);
			last = hk[h] ? hv[h] : UINT32_MAX;
			hk[h] = k;
			hv[h] = (uint32_t)i;
		}
		if (last == UINT32_MAX) {
			next[i] = (uint32_t)(n + i); /* never again */
		} else {
			next[i] = last;
			bit_set(has_prev, last);
		}
	}
	free(hk);
	free(hv);
	return 0;
}

int belady_misses(const uint64_t *keys, size_t n, uint64_t cap,
		  uint64_t *misses)
{
	uint32_t *next = NULL, *heap = NULL;
	uint64_t *has_prev = NULL, *evicted = NULL;
	size_t words = n / 64 + 1, hn = 0, hcap;
	uint64_t resident = 0, miss = 0;
	int ret;

	if (cap == 0 || n >= (size_t)UINT32_MAX / 2)
		return -EINVAL;
	if (cap > n)
		cap = n ? n : 1;
	hcap = 2 * cap + 1024;
	next = malloc((n ? n : 1) * sizeof(*next));
	heap = malloc((hcap + 1) * sizeof(*heap));
	has_prev = calloc(words, sizeof(*has_prev));
	evicted = calloc(words, sizeof(*evicted));
	ret = -ENOMEM;
	if (!next || !heap || !has_prev || !evicted)
		goto out;
	ret = next_uses(keys, n, next, has_prev);
	if (ret)
		goto out;

	for (size_t i = 0; i < n; i++) {
		if (bit(has_prev, i) && !bit(evicted, i)) {
			/* hit: entry i goes stale, next[i] replaces it */
		} else {
			miss++;
			if (resident == cap) {
				for (;;) {
					uint32_t p = heap[0];

					heap[0] = heap[--hn];
					heap_down(heap, hn, 0);
					if (p < i)
						continue; /* stale */
					if (p < n)
						bit_set(evicted, p);
					break;
				}
			} else {
				resident++;
			}
		}
		if (hn == hcap) {
			/* Drop the stale entries and heapify again. */
			size_t k = 0;

			for (size_t j = 0; j < hn; j++)
				if (heap[j] > i)
					heap[k++] = heap[j];
			hn = k;
			for (size_t j = hn / 2; j-- > 0;)
				heap_down(heap, hn, j);
		}
		heap[hn] = next[i];
		heap_up(heap, hn++);
	}
	*misses = miss;
	ret = 0;
out:
	free(next);
	free(heap);
	free(has_prev);
	free(evicted);
	return ret;
}
