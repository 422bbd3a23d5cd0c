/*
 * rl_index.c - the row log's index (see rl_index.h).
 */
#include <errno.h>
#include <string.h>

#include "mem_host.h"
#include "rl_index.h"

#define RLI_MIN	 1024
#define RLI_LOAD 0.9

/* How far the entry in slot i sits from its home. */
static uint64_t rli_dist(const struct rl_index *x, uint64_t i)
{
	uint64_t h = rli_home(x->cap, x->keys[i] - 1);

	return i >= h ? i - h : i + x->cap - h;
}

int64_t rli_find(const struct rl_index *x, uint64_t row)
{
	if (!x->cap)
		return -1;
	for (uint64_t i = rli_home(x->cap, row), d = 0;; d++) {
		if (x->keys[i] == row + 1)
			return (int64_t)i;
		if (!x->keys[i] || rli_dist(x, i) < d)
			return -1;
		if (++i == x->cap)
			i = 0;
	}
}

/* Places key (row + 1, absent) with val, starting at slot i, d slots from
 * its home, where the probe for it stopped; entries nearer their home move
 * along. Returns the slot where key went. There is a free slot. */
static uint64_t rli_put_at(uint64_t *keys, uint32_t *vals, uint64_t cap,
			   uint64_t i, uint64_t d, uint64_t key, uint32_t val)
{
	uint64_t at = UINT64_MAX;

	for (;; d++) {
		uint64_t h, di;

		if (!keys[i]) {
			keys[i] = key;
			vals[i] = val;
			return at == UINT64_MAX ? i : at;
		}
		h = rli_home(cap, keys[i] - 1);
		di = i >= h ? i - h : i + cap - h;
		if (di < d) {
			uint64_t k = keys[i];
			uint32_t v = vals[i];

			keys[i] = key;
			vals[i] = val;
			if (at == UINT64_MAX)
				at = i;
			key = k;
			val = v;
			d = di;
		}
		if (++i == cap)
			i = 0;
	}
}

static uint64_t rli_put(uint64_t *keys, uint32_t *vals, uint64_t cap,
			uint64_t key, uint32_t val)
{
	return rli_put_at(keys, vals, cap, rli_home(cap, key - 1), 0, key, val);
}

static int rli_resize(struct rl_index *x, uint64_t ncap)
{
	uint64_t ocap = x->cap;
	uint64_t *ok = x->keys, *nk;
	uint32_t *ov = x->vals, *nv;

	nk = mem_alloc(ncap * sizeof(*nk), 0);
	nv = mem_alloc(ncap * sizeof(*nv), 0);
	if (!nk || !nv) {
		mem_free(nk, ncap * sizeof(*nk), 0);
		mem_free(nv, ncap * sizeof(*nv), 0);
		return -ENOMEM;
	}
	for (uint64_t i = 0; i < ocap; i++)
		if (ok[i])
			rli_put(nk, nv, ncap, ok[i], ov[i]);
	x->keys = nk;
	x->vals = nv;
	x->cap = ncap;
	mem_free(ok, ocap * sizeof(*ok), 0);
	mem_free(ov, ocap * sizeof(*ov), 0);
	return 0;
}

static int rli_grow(struct rl_index *x)
{
	return rli_resize(x, x->cap ? x->cap + x->cap / 2 : RLI_MIN);
}

/* Room for want rows at a load of 3/4, made at once: a replay that knows
 * how many rows a batch brings sizes the index for them first, so that it
 * never inserts into a table too small for what is coming (a snapshot
 * arrives in hash order, which would pile every row into one cluster of a
 * small table). */
int rli_reserve(struct rl_index *x, uint64_t want)
{
	uint64_t ncap = want + want / 3 + 1;

	if ((double)want <= RLI_LOAD * (double)x->cap)
		return 0;
	return rli_resize(x, ncap > RLI_MIN ? ncap : RLI_MIN);
}

/* The slot of row, inserted (value 0, not counted live) if new. An insert
 * may move other entries: slots found before it are stale after it. */
int rli_slot(struct rl_index *x, uint64_t row, uint64_t *slot, bool *isnew)
{
	uint64_t i, d;

	if ((double)(x->count + 1) > RLI_LOAD * (double)x->cap) {
		int64_t k = rli_find(x, row);

		if (k >= 0) {
			*isnew = false;
			*slot = (uint64_t)k;
			return 0;
		}
		k = rli_grow(x);
		if (k)
			return (int)k;
	}
	/* one probe: the row, or where it goes */
	for (i = rli_home(x->cap, row), d = 0;; d++) {
		if (x->keys[i] == row + 1) {
			*isnew = false;
			*slot = i;
			return 0;
		}
		if (!x->keys[i] || rli_dist(x, i) < d)
			break;
		if (++i == x->cap)
			i = 0;
	}
	*isnew = true;
	*slot = rli_put_at(x->keys, x->vals, x->cap, i, d, row + 1, 0);
	x->count++;
	return 0;
}

void rli_clear(struct rl_index *x)
{
	if (x->cap) {
		memset(x->keys, 0, x->cap * sizeof(*x->keys));
		memset(x->vals, 0, x->cap * sizeof(*x->vals));
	}
	x->count = 0;
}

void rli_free(struct rl_index *x)
{
	mem_free(x->keys, x->cap * sizeof(*x->keys), 0);
	mem_free(x->vals, x->cap * sizeof(*x->vals), 0);
	x->keys = NULL;
	x->vals = NULL;
	x->cap = x->count = 0;
}
