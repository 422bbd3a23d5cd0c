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
	if (row == UINT64_MAX)
		return x->has_max ? (int64_t)x->cap : -1;
	for (uint64_t i = rli_home(x->cap, row), d = 0;; d++) {
		if (x->keys[i] == row + 1)
			return (int64_t)i;
		if (!x->keys[i] || rli_dist(x, i) < d)
			return -1;
		if (++i == x->cap)
			i = 0;
	}
}

/* Places key (row + 1, absent) with val (and aux word a, if aux), starting
 * at slot i, d slots from its home, where the probe for it stopped;
 * entries nearer their home move along. Returns the slot where key went.
 * There is a free slot. */
static uint64_t rli_put_at(uint64_t *keys, uint32_t *vals, uint32_t *aux,
			   uint64_t cap, uint64_t i, uint64_t d, uint64_t key,
			   uint32_t val, uint32_t a)
{
	uint64_t at = UINT64_MAX;

	for (;; d++) {
		uint64_t h, di;

		if (!keys[i]) {
			keys[i] = key;
			vals[i] = val;
			if (aux)
				aux[i] = a;
			return at == UINT64_MAX ? i : at;
		}
		h = rli_home(cap, keys[i] - 1);
		di = i >= h ? i - h : i + cap - h;
		if (di < d) {
			uint64_t k = keys[i];
			uint32_t v = vals[i];

			keys[i] = key;
			vals[i] = val;
			key = k;
			val = v;
			if (aux) {
				uint32_t t = aux[i];

				aux[i] = a;
				a = t;
			}
			if (at == UINT64_MAX)
				at = i;
			d = di;
		}
		if (++i == cap)
			i = 0;
	}
}

static uint64_t rli_put(uint64_t *keys, uint32_t *vals, uint32_t *aux,
			uint64_t cap, uint64_t key, uint32_t val, uint32_t a)
{
	return rli_put_at(keys, vals, aux, cap, rli_home(cap, key - 1), 0, key,
			  val, a);
}

static int rli_resize(struct rl_index *x, uint64_t ncap)
{
	uint64_t ocap = x->cap;
	uint64_t *ok = x->keys, *nk;
	uint32_t *ov = x->vals, *oa = x->aux, *nv, *na = NULL;
	size_t n8 = (ncap + 1) * sizeof(*nk), n4 = (ncap + 1) * sizeof(*nv);

	nk = mem_alloc(n8, 0);
	nv = mem_alloc(n4, 0);
	if (x->keep_aux)
		na = mem_alloc(n4, 0);
	if (!nk || !nv || (x->keep_aux && !na)) {
		mem_free(nk, n8, 0);
		mem_free(nv, n4, 0);
		mem_free(na, n4, 0);
		return -ENOMEM;
	}
	for (uint64_t i = 0; i < ocap; i++)
		if (ok[i])
			rli_put(nk, nv, na, ncap, ok[i], ov[i], oa ? oa[i] : 0);
	if (ocap) {
		nv[ncap] = ov[ocap];
		if (na && oa)
			na[ncap] = oa[ocap];
	}
	x->keys = nk;
	x->vals = nv;
	x->aux = na;
	x->cap = ncap;
	if (ocap) {
		mem_free(ok, (ocap + 1) * sizeof(*ok), 0);
		mem_free(ov, (ocap + 1) * sizeof(*ov), 0);
		mem_free(oa, (ocap + 1) * sizeof(*oa), 0);
	}
	return 0;
}

int rli_keep_aux(struct rl_index *x)
{
	if (x->keep_aux)
		return 0;
	x->keep_aux = true;
	if (!x->cap)
		return 0;
	x->aux = mem_alloc((x->cap + 1) * sizeof(*x->aux), 0);
	if (!x->aux) {
		x->keep_aux = false;
		return -ENOMEM;
	}
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

	if (row == UINT64_MAX && x->cap) {
		*isnew = !x->has_max;
		*slot = x->cap;
		if (*isnew) {
			x->has_max = true;
			x->vals[x->cap] = 0;
			if (x->aux)
				x->aux[x->cap] = 0;
			x->count++;
		}
		return 0;
	}
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
		if (row == UINT64_MAX)
			return rli_slot(x, row, slot, isnew);
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
	*slot =
	    rli_put_at(x->keys, x->vals, x->aux, x->cap, i, d, row + 1, 0, 0);
	x->count++;
	return 0;
}

/* Backward-shift deletion: the entries after the slot that are not at
 * their home move back one, so no probe ever meets a hole it should have
 * passed (Robin Hood order is kept). */
void rli_del(struct rl_index *x, uint64_t slot)
{
	uint64_t i = slot, j;

	x->count--;
	if (slot == x->cap) {
		x->has_max = false;
		x->vals[slot] = 0;
		return;
	}
	for (;;) {
		j = i + 1 == x->cap ? 0 : i + 1;
		if (!x->keys[j] || rli_dist(x, j) == 0)
			break;
		x->keys[i] = x->keys[j];
		x->vals[i] = x->vals[j];
		if (x->aux)
			x->aux[i] = x->aux[j];
		i = j;
	}
	x->keys[i] = 0;
	x->vals[i] = 0;
}

void rli_clear(struct rl_index *x)
{
	if (x->cap) {
		memset(x->keys, 0, (x->cap + 1) * sizeof(*x->keys));
		memset(x->vals, 0, (x->cap + 1) * sizeof(*x->vals));
		if (x->aux)
			memset(x->aux, 0, (x->cap + 1) * sizeof(*x->aux));
	}
	x->count = 0;
	x->has_max = false;
}

void rli_free(struct rl_index *x)
{
	if (x->cap) {
		mem_free(x->keys, (x->cap + 1) * sizeof(*x->keys), 0);
		mem_free(x->vals, (x->cap + 1) * sizeof(*x->vals), 0);
		mem_free(x->aux, (x->cap + 1) * sizeof(*x->aux), 0);
	}
	x->keys = NULL;
	x->vals = NULL;
	x->aux = NULL;
	x->keep_aux = false;
	x->cap = x->count = 0;
	x->has_max = false;
}
