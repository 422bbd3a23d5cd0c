/*
 * rl_index.c - the row log's index (see rl_index.h).
 */
#include <errno.h>
#include <string.h>

#include "mem_host.h"
#include "rl_index.h"

#define RLI_MIN	 1024
#define RLI_LOAD 0.8

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
	if (!rli_maybe(x, row))
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

/* The aux words of an entry move with it: aw of them a slot (0: none). */
struct rli_aux {
	uint32_t *p;
	uint32_t aw;
};

/* Copies the aux words of n slots from slot j to slot i (overlapping). */
static void aux_move(struct rli_aux x, uint64_t i, uint64_t j, uint64_t n)
{
	if (x.aw)
		memmove(&x.p[i * x.aw], &x.p[j * x.aw],
			n * x.aw * sizeof(*x.p));
}

/* Sets slot i's aux words to a's (NULL: zeros). */
static void aux_put(struct rli_aux x, uint64_t i, const uint32_t *a)
{
	for (uint32_t k = 0; k < x.aw; k++)
		x.p[i * x.aw + k] = a ? a[k] : 0;
}

/* Moves slots [i, j) one slot on (j is empty; cyclic, j may lie before
 * i), then puts key with val (and aux words a) in slot i. */
static void rli_shift_in(uint64_t *keys, uint32_t *vals, struct rli_aux aux,
			 uint64_t cap, uint64_t i, uint64_t j, uint64_t key,
			 uint32_t val, const uint32_t *a)
{
	if (j < i) { /* the run wraps: [0, j) on by one, then [i, cap) */
		memmove(&keys[1], &keys[0], j * sizeof(*keys));
		memmove(&vals[1], &vals[0], j * sizeof(*vals));
		aux_move(aux, 1, 0, j);
		keys[0] = keys[cap - 1];
		vals[0] = vals[cap - 1];
		aux_move(aux, 0, cap - 1, 1);
		j = cap - 1;
	}
	memmove(&keys[i + 1], &keys[i], (j - i) * sizeof(*keys));
	memmove(&vals[i + 1], &vals[i], (j - i) * sizeof(*vals));
	aux_move(aux, i + 1, i, j - i);
	keys[i] = key;
	vals[i] = val;
	aux_put(aux, i, a);
}

/* Places key (row + 1, absent) with val (and aux word a, if aux) in slot
 * i, where its probe stopped (an empty slot, or the first entry nearer its
 * home than the probe had gone). A cluster is in the order of its homes,
 * so the insert is a shift: the entries from i to the next empty slot
 * move on by one, each then one slot further from its home (the order
 * that Robin Hood's swaps along the run would give, less the hashing and
 * the swapping per slot). There is a free slot. */
static void rli_put_at(uint64_t *keys, uint32_t *vals, struct rli_aux aux,
		       uint64_t cap, uint64_t i, uint64_t key, uint32_t val,
		       const uint32_t *a)
{
	uint64_t j = i;

	while (keys[j])
		if (++j == cap)
			j = 0;
	rli_shift_in(keys, vals, aux, cap, i, j, key, val, a);
}

/* The probe for key (row + 1) with hash hk = hash_mix(row): the slot
 * that holds key, or where key goes (*found false): the first slot from
 * its home that is empty or holds an entry of a greater hash that is no
 * further from its own home (a cluster is in the order of its hashes,
 * ties of home included, so that a resize can lay entries out in one
 * pass). */
static uint64_t rli_probe(const uint64_t *keys, uint64_t cap, uint64_t key,
			  uint64_t hk, bool *found)
{
	uint64_t i = rli_hhome(cap, hk);

	*found = false;
	for (uint64_t d = 0;; d++) {
		uint64_t hr, h, di;

		if (!keys[i])
			return i;
		if (keys[i] == key) {
			*found = true;
			return i;
		}
		hr = hash_mix(keys[i] - 1);
		h = rli_hhome(cap, hr);
		di = i >= h ? i - h : i + cap - h;
		if (di < d || (di == d && hr > hk))
			return i;
		if (++i == cap)
			i = 0;
	}
}

static void rli_put(uint64_t *keys, uint32_t *vals, struct rli_aux aux,
		    uint64_t cap, uint64_t key, uint32_t val, const uint32_t *a)
{
	bool found;
	uint64_t i = rli_probe(keys, cap, key, hash_mix(key - 1), &found);

	rli_put_at(keys, vals, aux, cap, i, key, val, a);
}

/* Lays the entries of the old slots out in the new ones. The old slots,
 * walked from the first entry that has not wrapped past the end, give the
 * entries in the order of their hashes, and homes keep that order at any
 * slot count: each entry goes to its home or the slot after the previous
 * one, whichever is further, with no probe. Once one would run past the
 * end, the rest are inserted as any row is (they wrap to the start, where
 * the entries there move on). */
static void rli_relay(const uint64_t *ok, const uint32_t *ov, struct rli_aux oa,
		      uint64_t ocap, uint64_t *nk, uint32_t *nv,
		      struct rli_aux na, uint64_t ncap)
{
	uint64_t start = 0, next = 0;
	bool spill = false;

	while (start < ocap &&
	       (!ok[start] || rli_home(ocap, ok[start] - 1) > start))
		start++;
	if (start == ocap)
		start = 0; /* only wrapped entries, or none */
	for (uint64_t k = 0; k < ocap; k++) {
		uint64_t i = start + k < ocap ? start + k : start + k - ocap;
		uint64_t pos;

		if (!ok[i])
			continue;
		pos = rli_hhome(ncap, hash_mix(ok[i] - 1));
		if (pos < next)
			pos = next;
		if (spill || pos >= ncap) {
			spill = true;
			rli_put(nk, nv, na, ncap, ok[i], ov[i],
				oa.aw ? &oa.p[i * oa.aw] : NULL);
			continue;
		}
		nk[pos] = ok[i];
		nv[pos] = ov[i];
		aux_put(na, pos, oa.aw ? &oa.p[i * oa.aw] : NULL);
		next = pos + 1;
	}
}

static void bf_add(struct rl_index *x, uint64_t row)
{
	uint64_t fh = rli_fhash(row);

	x->bf[rli_fword(x, fh)] |= rli_fmask(fh);
}

/* Filter words asked for this many slots ahead while the filter is
 * built: its words are at random, and a build of millions of rows took
 * a memory latency a row otherwise. */
#define BF_AHEAD 16

/* The filter of the entries in the slots, from scratch; each key's hash
 * made once, when its word is asked for, and kept until it is set. */
static void bf_build(struct rl_index *x)
{
	uint64_t fh[BF_AHEAD];

	memset(x->bf, 0, x->bf_words * sizeof(*x->bf));
	for (uint64_t i = 0; i < x->cap + BF_AHEAD; i++) {
		uint64_t *h = &fh[i % BF_AHEAD];

		if (i >= BF_AHEAD && x->keys[i - BF_AHEAD])
			x->bf[rli_fword(x, *h)] |= rli_fmask(*h);
		if (i < x->cap && x->keys[i]) {
			*h = rli_fhash(x->keys[i] - 1);
			__builtin_prefetch(&x->bf[rli_fword(x, *h)], 1);
		}
	}
	x->bf_stale = 0;
}

/* The filter's words for cap slots: a byte a slot. */
static uint64_t bf_words_for(uint64_t cap)
{
	return cap / 8 + 1;
}

static int rli_resize(struct rl_index *x, uint64_t ncap)
{
	uint64_t ocap = x->cap;
	uint64_t *ok = x->keys, *nk;
	uint32_t *ov = x->vals, *nv;
	struct rli_aux oa = {x->aux, x->aux ? x->aw : 0}, na = {NULL, 0};
	size_t n8 = (ncap + 1) * sizeof(*nk), n4 = (ncap + 1) * sizeof(*nv);

	uint64_t nbw = bf_words_for(ncap), *nbf;

	nk = mem_alloc(n8, 0);
	nv = mem_alloc(n4, 0);
	nbf = mem_alloc(nbw * sizeof(*nbf), 0);
	if (x->aw) {
		na.p = mem_alloc(n4 * x->aw, 0);
		na.aw = x->aw;
	}
	if (!nk || !nv || !nbf || (x->aw && !na.p)) {
		mem_free(nk, n8, 0);
		mem_free(nv, n4, 0);
		mem_free(nbf, nbw * sizeof(*nbf), 0);
		mem_free(na.p, n4 * x->aw, 0);
		return -ENOMEM;
	}
	rli_relay(ok, ov, oa, ocap, nk, nv, na, ncap);
	if (ocap) {
		nv[ncap] = ov[ocap];
		aux_put(na, ncap, oa.aw ? &oa.p[ocap * oa.aw] : NULL);
	}
	x->keys = nk;
	x->vals = nv;
	x->aux = na.p;
	x->cap = ncap;
	if (x->bf)
		mem_free(x->bf, x->bf_words * sizeof(*x->bf), 0);
	x->bf = nbf;
	x->bf_words = nbw;
	bf_build(x);
	if (ocap) {
		mem_free(ok, (ocap + 1) * sizeof(*ok), 0);
		mem_free(ov, (ocap + 1) * sizeof(*ov), 0);
		mem_free(oa.p, (ocap + 1) * sizeof(*oa.p) * oa.aw, 0);
	}
	return 0;
}

int rli_keep_aux(struct rl_index *x, uint32_t words)
{
	uint32_t *na;

	if (x->aw >= words)
		return 0;
	if (!x->cap) {
		x->aw = words;
		return 0;
	}
	na = mem_alloc((x->cap + 1) * sizeof(*na) * words, 0);
	if (!na)
		return -ENOMEM;
	for (uint64_t i = 0; i <= x->cap; i++)
		for (uint32_t k = 0; k < words; k++)
			na[i * words + k] =
			    k < x->aw && x->aux ? x->aux[i * x->aw + k] : 0;
	if (x->aux)
		mem_free(x->aux, (x->cap + 1) * sizeof(*x->aux) * x->aw, 0);
	x->aux = na;
	x->aw = words;
	return 0;
}

static int rli_grow(struct rl_index *x)
{
	return rli_resize(x, x->cap ? x->cap + x->cap / 3 : RLI_MIN);
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
	uint64_t i;
	bool found;

	if (row == UINT64_MAX && x->cap) {
		*isnew = !x->has_max;
		*slot = x->cap;
		if (*isnew) {
			x->has_max = true;
			x->vals[x->cap] = 0;
			aux_put((struct rli_aux){x->aux, x->aux ? x->aw : 0},
				x->cap, NULL);
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
	i = rli_probe(x->keys, x->cap, row + 1, hash_mix(row), &found);
	*isnew = !found;
	*slot = i;
	if (found)
		return 0;
	rli_put_at(x->keys, x->vals,
		   (struct rli_aux){x->aux, x->aux ? x->aw : 0}, x->cap, i,
		   row + 1, 0, NULL);
	bf_add(x, row);
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
		aux_move((struct rli_aux){x->aux, x->aux ? x->aw : 0}, i, j, 1);
		i = j;
	}
	x->keys[i] = 0;
	x->vals[i] = 0;
	/* its bits stay: rebuilt once the stale pass half the live */
	if (++x->bf_stale > x->count / 2 + 1024)
		bf_build(x);
}

void rli_clear(struct rl_index *x)
{
	if (x->cap) {
		memset(x->keys, 0, (x->cap + 1) * sizeof(*x->keys));
		memset(x->vals, 0, (x->cap + 1) * sizeof(*x->vals));
		if (x->aux)
			memset(x->aux, 0,
			       (x->cap + 1) * sizeof(*x->aux) * x->aw);
		memset(x->bf, 0, x->bf_words * sizeof(*x->bf));
		x->bf_stale = 0;
	}
	x->count = 0;
	x->has_max = false;
}

void rli_free(struct rl_index *x)
{
	if (x->cap) {
		mem_free(x->keys, (x->cap + 1) * sizeof(*x->keys), 0);
		mem_free(x->vals, (x->cap + 1) * sizeof(*x->vals), 0);
		mem_free(x->aux, (x->cap + 1) * sizeof(*x->aux) * x->aw, 0);
		mem_free(x->bf, x->bf_words * sizeof(*x->bf), 0);
	}
	x->keys = NULL;
	x->vals = NULL;
	x->aux = NULL;
	x->bf = NULL;
	x->bf_words = x->bf_stale = 0;
	x->aw = 0;
	x->cap = x->count = 0;
	x->has_max = false;
}
