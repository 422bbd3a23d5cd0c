/*
 * test_crash.c - crash consistency under kill -9 (issue #7, item 2).
 *
 * A deterministic driver runs training steps on a store of two tables of
 * 10^5 rows (f32 SGD, and f16 with row-wise Adagrad) and a keyed table
 * (ET_TABLE_KEYED: bf16, row-wise Adagrad) through tiny caches (a few
 * hundred slots, with or without an HBM tier), so dirty rows are written
 * back to the table files all the time. Step i is a pure function of
 * (seed, i): a gather, an update or an et_write_rows of one batch of 8 to
 * 128 ids (70% from a hot set of 2000 rows per table, the rest uniform), or
 * on the keyed table also an et_erase, and for half the steps an
 * et_prefetch of step i + 1's batch. The keyed table's ids span the whole
 * u64 range: a hot set of KHOT ids (0, 1, 2^63, UINT64_MAX - 1, UINT64_MAX,
 * then random u64 ids in pairs differing in one high bit), the rest
 * uniform u64 draws; its et_key_policy, set again at every open of either
 * store, admits an id after 2 or 3 update calls and expires ids not
 * updated or written in the last 1 to 3 commits (by trial), and in a
 * third of the trials keeps at most 60 ids (et_key_policy.max_keys; in
 * half of those by score, half_life 2, in the others the latest), so
 * admission drops, erases, expiry and the bound at every checkpoint are
 * in the mix. After every
 * K steps (K = 4, 8 or 16) the driver calls et_checkpoint with the dense
 * state "so many steps done": the count, the seed, and bytes derived from
 * the count, of a length that varies with it. Run from step 0, its first
 * act is a checkpoint of 0 steps.
 *
 * A trial forks a child that runs the driver forever on a fresh store and
 * kills it with SIGKILL: after a random sleep (2 to 200 ms, log-uniform: in
 * write-back, in et_checkpoint, under a prefetch's I/O), or right after
 * the child announced its n-th checkpoint or its n-th prefetch. The child
 * writes a marker byte to a pipe before ('C') and after ('c') each
 * et_checkpoint and after each et_prefetch ('P'), so the parent knows
 * which checkpoints had certainly completed and whether it killed one
 * half-way. The parent then
 *
 *  1. opens the store and its tables (the undo logs are rolled back) and
 *     reads et_checkpoint_read: the dense state gives the step count c,
 *     which must be the last checkpoint the child saw complete, or the one
 *     it was killed in; the checkpoint id must count the checkpoints taken
 *     (0 and no dense state: the child died before its first one, and the
 *     tables must be as created);
 *  2. brings a reference store to exactly c steps of the same driver (its
 *     DDR holds everything: no write-back, no crash; another directory)
 *     and compares the closed files, bit for bit, values and optimizer
 *     state, read with et_tfile_read_rows: every row of every block that
 *     holds a row the first c steps named (recomputed from the id stream;
 *     no other block is ever read or written), the count of blocks written
 *     in each file, and every block's checksum (et_tfile_verify); of the
 *     keyed table, every id the first c steps named, the listing of its
 *     stored ids (et_tfile_rows, rows_logged: the same ids in both, each
 *     one named), and every named id not stored, erased or expired or
 *     never admitted, reads as the initializer's value with state 0;
 *     since expiry ages count commits (the filter and the ages come back
 *     with a commit, and a clean close that wrote anything is one), the
 *     reference goes through the same sessions as the killed store: it
 *     is opened, its policy set, and closed where the child and the
 *     parent open and close the other (the parent's open and close of 1.,
 *     which write nothing, aside), and checkpoints on the same K grid (and
 *     at step 0, and at the end of 3. below), so that its commits are the
 *     same;
 *  3. goes on: reopens the recovered store, runs K/2 to K more steps from
 *     step c side by side with the reference (every gather compared bit for
 *     bit, and every erase's count), checkpoints, and compares the files
 *     and the dense state again.
 *
 * Then a second round on the same store: a child runs the driver from that
 * last checkpoint, is killed, and 1 to 3 are done again, so a store that
 * was recovered once is recovered again.
 *
 * Trials: $ET_CRASH_TRIALS (default 20, for CI), base seed $ET_CRASH_SEED;
 * $ET_CRASH_KEEP keeps a failing trial's directories. A failure names the
 * trial, round, seed, kill mode and delay, and the step recovered. The
 * report line gives the trials and kills, the kills inside et_checkpoint
 * (and how many of those had committed), before the first checkpoint and
 * right after a prefetch, the rows the recovered stores' row logs hold
 * (et_get_stats log_index_rows), the steps recovered and the rows
 * compared; then the keyed table's: ids compared, ids stored at the
 * recoveries, ids found erased or never admitted (initial values
 * checked), and what the continued sessions of 3. dropped, erased and
 * expired.
 *     ET_CRASH_TRIALS=200 build/tests/test_crash
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <math.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "dtype.h"
#include "embtier.h"
#include "rowinit.h"
#include "rowlog.h"
#include "util.h"

#define NT	       3      /* tables: the last one keyed */
#define KEYED	       2      /* the keyed table */
#define KHOT	       256    /* hot ids of the keyed table */
#define ROWS	       100000 /* rows per table */
#define HOT	       2000   /* hot rows per table */
#define MAXB	       128    /* ids per batch at most */
#define MAXDIM	       16
#define SLOT	       64 /* cached row bytes: the f32 table's row */
#define DEFAULT_TRIALS 20
#define DEFAULT_SEED   0x5eedc0ffeeULL
#define DENSE_MAX      128

static const struct et_table_params tparams[NT] = {
    {
	.rows = ROWS,
	.dim = 16,
	.dtype = ET_F32,
	.optim = ET_OPT_SGD,
	.init = ET_INIT_UNIFORM,
	.init_scale = 0.5f,
	.seed = 11,
    },
    {
	.rows = ROWS,
	.dim = 16,
	.dtype = ET_F16,
	.optim = ET_OPT_ROWWISE_ADAGRAD,
	.init = ET_INIT_NORMAL,
	.init_scale = 0.25f,
	.seed = 12,
    },
    {
	.dim = 12,
	.dtype = ET_BF16,
	.optim = ET_OPT_ROWWISE_ADAGRAD,
	.init = ET_INIT_UNIFORM,
	.init_scale = 0.3f,
	.seed = 13,
	.flags = ET_TABLE_KEYED,
    },
};

static const char *const tnames[NT] = {"sgd", "adagrad", "keyed"};

static const struct et_update_params uparams[NT] = {
    {.lr = 0.05f},
    {.lr = 0.1f, .eps = 1e-6f},
    {.lr = 0.2f, .eps = 1e-5f},
};

/* The keyed table's policy, by trial (set by one_trial before anything
 * opens a store; a child inherits it): admission after 2 or 3 update
 * calls, expiry after 1, 2 or 3 commits, in a third of the trials a bound
 * of 60 ids, a filter of 4 x 2^16 counters
 * (whose collisions, if any, are the same in both stores: the filter is a
 * pure function of the calls since the open). */
static struct et_key_policy kpolicy;

static void kpolicy_for(unsigned no)
{
	memset(&kpolicy, 0, sizeof(kpolicy));
	kpolicy.admit_after = 2 + no % 2;
	kpolicy.expire_after = 1 + no / 2 % 3;
	kpolicy.max_keys = no % 3 == 2 ? 60 : 0;
	kpolicy.half_life = no % 6 == 5 ? 2 : 0;
	kpolicy.filter_log2 = 16;
}

/* --------------------------------------------------------------- driver */

enum { S_GATHER, S_UPDATE, S_WRITE, S_ERASE };

struct step {
	int kind;
	int table;
	size_t n;
	bool prefetch; /* prefetch step i + 1's batch after this one */
	uint64_t ids[MAXB];
	float vals[MAXB * MAXDIM]; /* gradients or new values */
};

static uint64_t mix64(uint64_t z)
{
	z += 0x9e3779b97f4a7c15ULL;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* Hot id h of the keyed table: the edges of the u64 range first, then
 * random ids in pairs that differ in one bit from 32 up. */
static uint64_t key_hot(uint64_t h)
{
	static const uint64_t edges[] = {0, 1, 1ULL << 63, UINT64_MAX - 1,
					 UINT64_MAX};
	uint64_t x;

	if (h < sizeof(edges) / sizeof(edges[0]))
		return edges[h];
	x = mix64(h / 2 * 977 + 0xfeed);
	return h % 2 ? x ^ (1ULL << (32 + mix64(h) % 32)) : x;
}

/* Step i of the driver with seed: ids first, then values (so a caller that
 * only wants the ids, with_vals false, sees the same ids). */
static void gen_step(uint64_t seed, uint64_t i, struct step *st, bool with_vals)
{
	struct tu_rng r;
	uint32_t dim;
	uint64_t k;

	tu_rng_seed(&r, mix64(seed) ^ mix64(i + 0x1234));
	k = tu_rng_below(&r, 100);
	st->table = (int)tu_rng_below(&r, NT);
	if (st->table == KEYED)
		st->kind = k < 35   ? S_UPDATE
			   : k < 70 ? S_GATHER
			   : k < 85 ? S_WRITE
				    : S_ERASE;
	else
		st->kind = k < 40 ? S_UPDATE : k < 85 ? S_GATHER : S_WRITE;
	st->n = 8 + tu_rng_below(&r, MAXB - 8 + 1);
	st->prefetch = tu_rng_below(&r, 2);
	for (size_t j = 0; j < st->n; j++) {
		bool hot = tu_rng_below(&r, 10) < 7;

		if (st->table == KEYED)
			st->ids[j] = hot ? key_hot(tu_rng_below(&r, KHOT))
					 : tu_rng_next(&r);
		else if (hot)
			st->ids[j] = mix64(tu_rng_below(&r, HOT) * 131 +
					   (uint64_t)st->table) %
				     ROWS;
		else
			st->ids[j] = tu_rng_below(&r, ROWS);
	}
	if (!with_vals || st->kind == S_ERASE)
		return;
	dim = tparams[st->table].dim;
	for (size_t j = 0; j < st->n * dim; j++) {
		int64_t v = (int64_t)tu_rng_below(&r, 4001) - 2000;

		/* gradients within +-2, new values within +-4; exact */
		st->vals[j] = st->kind == S_WRITE ? (float)v / 512.0f
						  : (float)v / 1024.0f;
	}
}

/* The dense state saved with the checkpoint taken after ops steps. */
static size_t dense_make(uint64_t seed, uint64_t ops, unsigned char *buf)
{
	size_t len = 24 + (size_t)(ops % 41);

	memcpy(buf, "ETCRASH1", 8);
	memcpy(buf + 8, &ops, 8);
	memcpy(buf + 16, &seed, 8);
	for (size_t j = 24; j < len; j++)
		buf[j] = (unsigned char)mix64(ops * 977 + j);
	return len;
}

static void marker(int mfd, char c)
{
	ssize_t w;

	if (mfd < 0)
		return;
	do {
		w = write(mfd, &c, 1);
	} while (w < 0 && errno == EINTR);
}

static int checkpoint_at(et_store *s, uint64_t seed, uint64_t ops, int mfd)
{
	unsigned char d[DENSE_MAX];
	size_t len = dense_make(seed, ops, d);
	int ret;

	marker(mfd, 'C');
	ret = et_checkpoint(s, d, len);
	if (!ret)
		marker(mfd, 'c');
	return ret;
}

/* Runs step i on s; a gather's rows land in out (MAXB * MAXDIM floats),
 * an erase's count in *erased (if not NULL). */
static int run_step(et_store *s, const int *tid, uint64_t seed, uint64_t i,
		    struct step *st, struct step *nx, float *out,
		    uint64_t *erased, int mfd)
{
	int t, ret;

	gen_step(seed, i, st, true);
	t = tid[st->table];
	switch (st->kind) {
	case S_ERASE:
		ret = et_erase(s, t, st->ids, st->n, erased);
		break;
	case S_GATHER:
		ret = et_gather(s, t, st->ids, st->n, out);
		break;
	case S_UPDATE:
		ret = et_update(s, t, st->ids, st->n, st->vals,
				&uparams[st->table]);
		break;
	default:
		ret = et_write_rows(s, t, st->ids, st->n, st->vals);
		break;
	}
	if (ret || !st->prefetch)
		return ret;
	gen_step(seed, i + 1, nx, false);
	{
		struct et_batch_ids b = {
		    .table = tid[nx->table],
		    .ids = nx->ids,
		    .n = nx->n,
		};

		ret = et_prefetch(s, &b, 1);
	}
	if (!ret)
		marker(mfd, 'P');
	return ret;
}

/*
 * Runs steps [from, to) on s; with ckpt, checkpoints after every step
 * count that is a multiple of k (and first, if from is 0). Returns 0 or the
 * first error; *at says which step failed.
 */
static int drive(et_store *s, const int *tid, uint64_t seed, uint32_t k,
		 uint64_t from, uint64_t to, bool ckpt, int mfd, uint64_t *at)
{
	struct step *st = malloc(sizeof(*st)), *nx = malloc(sizeof(*nx));
	float *out = malloc(MAXB * MAXDIM * sizeof(float));
	int ret = 0;

	*at = from;
	if (!st || !nx || !out) {
		ret = -ENOMEM;
		goto out;
	}
	if (ckpt && from == 0) {
		ret = checkpoint_at(s, seed, 0, mfd);
		if (ret)
			goto out;
	}
	for (uint64_t i = from; i < to; i++) {
		*at = i;
		ret = run_step(s, tid, seed, i, st, nx, out, NULL, mfd);
		if (!ret && ckpt && (i + 1) % k == 0)
			ret = checkpoint_at(s, seed, i + 1, mfd);
		if (ret)
			break;
	}
out:
	free(st);
	free(nx);
	free(out);
	return ret;
}

/* ---------------------------------------------------------------- stores */

/* Tiny caches: a few hundred slots, so almost every step writes back. */
static struct et_store_config tiny_config(bool hbm)
{
	struct et_store_config c = {
	    .ways = 8,
	    .slot_bytes = SLOT,
	    .ddr_bytes =
		(uint64_t)(hbm ? 512 : 384) * (SLOT + ET_SLOT_META_BYTES),
	    .hbm_bytes = hbm ? 256ULL * (SLOT + ET_SLOT_META_BYTES) : 0,
	};

	return c;
}

/* Everything fits in DDR: nothing is written back before a flush. */
static struct et_store_config big_config(void)
{
	struct et_store_config c = {
	    .slot_bytes = SLOT,
	    .ddr_bytes = 64ULL << 20,
	};

	return c;
}

static void rm_dir(const char *dir)
{
	tu_rmtree(dir);
}

/* Opens (or creates) the tables of s and sets the keyed table's policy,
 * which is not kept in the table: every open of a store sets it again. */
static int tables_open(et_store *s, int *tid, bool create)
{
	int ret = 0;

	for (int t = 0; !ret && t < NT; t++)
		ret = create
			  ? et_table_create(s, tnames[t], &tparams[t], &tid[t])
			  : et_table_open(s, tnames[t], &tparams[t], &tid[t]);
	if (!ret)
		ret = et_key_policy_set(s, tid[KEYED], &kpolicy);
	return ret;
}

static void open_tables(et_store *s, int *tid)
{
	assert_int_equal(tables_open(s, tid, false), 0);
}

static et_store *store_new(const char *dir, const struct et_store_config *c,
			   int *tid)
{
	et_store *s = NULL;

	assert_int_equal(et_store_open(dir, c, &s), 0);
	assert_int_equal(tables_open(s, tid, true), 0);
	return s;
}

static et_tfile *tfile_ro(const char *dir, int t)
{
	char path[PATH_MAX];
	et_tfile *tf = NULL;

	snprintf(path, sizeof(path), "%s/%s.et", dir, tnames[t]);
	assert_int_equal(et_tfile_open(path, ET_TFILE_RDONLY, &tf), 0);
	return tf;
}

/* Rows of each table that steps [0, c) name. */
struct touched {
	uint8_t *bit[NT];
};

static void touched_compute(uint64_t seed, uint64_t c, struct touched *tc)
{
	struct step *st = tu_calloc(1, sizeof(*st));

	for (int t = 0; t < NT; t++)
		tc->bit[t] = t == KEYED ? NULL : tu_calloc(ROWS, 1);
	for (uint64_t i = 0; i < c; i++) {
		gen_step(seed, i, st, false);
		for (size_t j = 0; j < st->n && st->table != KEYED; j++)
			tc->bit[st->table][st->ids[j]] = 1;
	}
	free(st);
}

static void touched_free(struct touched *tc)
{
	for (int t = 0; t < NT; t++)
		free(tc->bit[t]);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static bool has_id(const uint64_t *ids, size_t n, uint64_t id)
{
	return bsearch(&id, ids, n, sizeof(*ids), cmp_u64) != NULL;
}

/* The distinct ids of the keyed table that steps [0, c) name, ascending,
 * in a tu_calloc()ed array of *n. */
static uint64_t *keyed_named(uint64_t seed, uint64_t c, size_t *n)
{
	struct step *st = tu_calloc(1, sizeof(*st));
	size_t cap = 4096, k = 0, m = 0;
	uint64_t *ids = tu_calloc(cap, sizeof(*ids));

	for (uint64_t i = 0; i < c; i++) {
		gen_step(seed, i, st, false);
		if (st->table != KEYED)
			continue;
		if (k + st->n > cap) {
			cap *= 2;
			ids = realloc(ids, cap * sizeof(*ids));
			assert_non_null(ids);
		}
		memcpy(ids + k, st->ids, st->n * sizeof(*ids));
		k += st->n;
	}
	qsort(ids, k, sizeof(*ids), cmp_u64);
	for (size_t i = 0; i < k; i++)
		if (!m || ids[i] != ids[m - 1])
			ids[m++] = ids[i];
	free(st);
	*n = m;
	return ids;
}

/* Every id a keyed table file stores (et_tfile_rows), ascending, in a
 * tu_calloc()ed array of *n. */
static uint64_t *keyed_listed(et_tfile *tf, size_t *n)
{
	size_t cap = 1024, k = 0;
	uint64_t *ids = tu_calloc(cap, sizeof(*ids)), from = 0;

	for (;;) {
		size_t m = 0;

		if (k + 256 > cap) {
			cap *= 2;
			ids = realloc(ids, cap * sizeof(*ids));
			assert_non_null(ids);
		}
		assert_int_equal(et_tfile_rows(tf, from, ids + k, 256, &m), 0);
		k += m;
		if (m < 256 || ids[k - 1] == UINT64_MAX)
			break;
		from = ids[k - 1] + 1;
	}
	*n = k;
	return ids;
}

/* What the keyed table's comparisons saw, over the whole run. */
struct ktotals {
	uint64_t compared; /* ids compared with the reference */
	uint64_t stored;   /* of which stored at the recoveries */
	uint64_t init;	   /* named, not stored: initial values checked */
	uint64_t dropped;  /* by admission, in the continued sessions */
	uint64_t erased;   /* by et_erase, in the continued sessions */
	uint64_t expired;  /* by expiry, in the continued sessions */
	uint64_t evicted;  /* by the bound, in the continued sessions */
};

static struct ktotals ktot;

/*
 * The keyed table of the closed stores dir and ref after steps [0, c):
 * the same stored ids (each one named by the steps), and every named id
 * the same values and optimizer state, bit for bit; those not stored (never
 * admitted, erased, expired) the initializer's values and state 0.
 */
static void compare_keyed(const char *dir, const char *ref, uint64_t seed,
			  uint64_t c, const char *what)
{
	const struct et_table_params *p = &tparams[KEYED];
	const size_t chunk = 1024;
	et_tfile *ta = tfile_ro(dir, KEYED), *tb = tfile_ro(ref, KEYED);
	struct et_table_info ia, ib;
	uint64_t bad = 0, first = 0;
	size_t nn, na, nb;
	uint64_t *named = keyed_named(seed, c, &nn);
	uint64_t *la = keyed_listed(ta, &na), *lb = keyed_listed(tb, &nb);
	float *va = tu_calloc(chunk * MAXDIM, sizeof(float));
	float *vb = tu_calloc(chunk * MAXDIM, sizeof(float));
	float sa[1024], sb[1024], init[MAXDIM];
	uint8_t raw[MAXDIM * 4];

	assert_int_equal(et_tfile_info(ta, &ia), 0);
	assert_int_equal(et_tfile_info(tb, &ib), 0);
	assert_int_equal(et_tfile_verify(ta, &bad, &first, NULL, NULL), 0);
	if (na != nb || memcmp(la, lb, na * sizeof(*la))) {
		size_t i = 0;

		while (i < na && i < nb && la[i] == lb[i])
			i++;
		fail_msg("%s: keyed table stores %zu ids, the reference %zu; "
			 "first difference at [%zu]: %#llx vs %#llx",
			 what, na, nb, i,
			 i < na ? (unsigned long long)la[i] : 0ULL,
			 i < nb ? (unsigned long long)lb[i] : 0ULL);
	}
	if (ia.rows_logged != na || ib.rows_logged != nb)
		fail_msg("%s: keyed table rows_logged %llu and %llu, listings "
			 "of %zu and %zu ids",
			 what, (unsigned long long)ia.rows_logged,
			 (unsigned long long)ib.rows_logged, na, nb);
	for (size_t i = 0; i < na; i++)
		if (!has_id(named, nn, la[i]))
			fail_msg("%s: keyed table stores %#llx, which steps "
				 "[0,%llu) never named",
				 what, (unsigned long long)la[i],
				 (unsigned long long)c);
	for (size_t at = 0; at < nn; at += chunk) {
		size_t n = nn - at < chunk ? nn - at : chunk;

		assert_int_equal(et_tfile_read_rows(ta, named + at, n, va, sa),
				 0);
		assert_int_equal(et_tfile_read_rows(tb, named + at, n, vb, sb),
				 0);
		for (size_t j = 0; j < n; j++) {
			uint64_t id = named[at + j];
			const float *a = va + j * p->dim;
			bool stored = has_id(la, na, id);

			if (memcmp(a, vb + j * p->dim,
				   p->dim * sizeof(float)) ||
			    memcmp(&sa[j], &sb[j], sizeof(float)))
				fail_msg("%s: keyed id %#llx (%s) differs from "
					 "the reference: %a vs %a, state %a "
					 "vs %a",
					 what, (unsigned long long)id,
					 stored ? "stored" : "not stored",
					 (double)a[0], (double)vb[j * p->dim],
					 (double)sa[j], (double)sb[j]);
			if (stored)
				continue;
			rowinit_fill(p->init, p->init_scale, p->seed, id,
				     p->dim, init);
			dtype_encode(p->dtype, init, raw, p->dim);
			dtype_decode(p->dtype, raw, init, p->dim);
			if (memcmp(a, init, p->dim * sizeof(float)) ||
			    sa[j] != 0.0f)
				fail_msg("%s: keyed id %#llx, not stored, "
					 "reads %a (state %a), not its initial "
					 "%a",
					 what, (unsigned long long)id,
					 (double)a[0], (double)sa[j],
					 (double)init[0]);
		}
	}
	ktot.compared += nn;
	ktot.stored += na;
	ktot.init += nn - na;
	et_tfile_close(ta);
	et_tfile_close(tb);
	free(named);
	free(la);
	free(lb);
	free(va);
	free(vb);
}

/*
 * The closed files of dir against those of ref after steps [0, c): every
 * row of every block holding a row the steps named, values and optimizer
 * state, bit for bit; the same blocks written in both; every block's
 * checksum good. Rows of other blocks were never in a batch and are
 * neither read nor written by anybody. Returns the rows compared.
 */
static uint64_t compare_dirs(const char *dir, const char *ref, uint64_t seed,
			     uint64_t c, const char *what)
{
	const size_t chunk = 4096;
	uint64_t *ids = tu_calloc(chunk, sizeof(*ids));
	float *va = tu_calloc(chunk * MAXDIM, sizeof(float));
	float *vb = tu_calloc(chunk * MAXDIM, sizeof(float));
	float *sa = tu_calloc(chunk, sizeof(float));
	float *sb = tu_calloc(chunk, sizeof(float));
	struct touched tc;
	uint64_t compared = 0;

	touched_compute(seed, c, &tc);
	compare_keyed(dir, ref, seed, c, what);
	for (int t = 0; t < NT; t++) {
		et_tfile *ta, *tb;
		struct et_table_info ia, ib;
		uint32_t dim = tparams[t].dim;
		bool sf = tparams[t].optim == ET_OPT_ROWWISE_ADAGRAD;
		uint64_t bad = 0, first = 0, r = 0;

		if (t == KEYED)
			continue;
		ta = tfile_ro(dir, t);
		tb = tfile_ro(ref, t);
		assert_int_equal(et_tfile_info(ta, &ia), 0);
		assert_int_equal(et_tfile_info(tb, &ib), 0);
		assert_int_equal(et_tfile_verify(ta, &bad, &first, NULL, NULL),
				 0);
		if (ia.blocks_written != ib.blocks_written)
			fail_msg("%s: table %s has %llu blocks written, the "
				 "reference %llu",
				 what, tnames[t],
				 (unsigned long long)ia.blocks_written,
				 (unsigned long long)ib.blocks_written);
		while (r < ROWS) {
			size_t n = 0;

			/* rows of touched blocks, a chunk at a time */
			for (; r < ROWS && n < chunk; r++) {
				uint64_t b0 =
				    r / ia.rows_per_block * ia.rows_per_block;
				bool hit = false;

				for (uint64_t q = b0;
				     q < b0 + ia.rows_per_block && q < ROWS;
				     q++)
					hit |= tc.bit[t][q];
				if (!hit) {
					r = b0 + ia.rows_per_block - 1;
					continue;
				}
				ids[n++] = r;
			}
			if (!n)
				break;
			assert_int_equal(
			    et_tfile_read_rows(ta, ids, n, va, sf ? sa : NULL),
			    0);
			assert_int_equal(
			    et_tfile_read_rows(tb, ids, n, vb, sf ? sb : NULL),
			    0);
			for (size_t j = 0; j < n; j++) {
				if (!memcmp(va + j * dim, vb + j * dim,
					    dim * sizeof(float)) &&
				    (!sf ||
				     !memcmp(&sa[j], &sb[j], sizeof(float))))
					continue;
				fail_msg(
				    "%s: table %s row %llu (%s by steps "
				    "[0,%llu)) differs from the "
				    "reference: %a vs %a, state %a vs %a",
				    what, tnames[t], (unsigned long long)ids[j],
				    tc.bit[t][ids[j]] ? "touched"
						      : "not touched",
				    (unsigned long long)c, (double)va[j * dim],
				    (double)vb[j * dim],
				    sf ? (double)sa[j] : 0.0,
				    sf ? (double)sb[j] : 0.0);
			}
			compared += n;
		}
		et_tfile_close(ta);
		et_tfile_close(tb);
	}
	touched_free(&tc);
	free(ids);
	free(va);
	free(vb);
	free(sa);
	free(sb);
	return compared;
}

/* Checks the dense state of the last checkpoint of s: *ops receives its
 * step count, or 0 if there is no checkpoint (*id 0). */
static void dense_check(et_store *s, uint64_t seed, uint64_t *id, uint64_t *ops)
{
	unsigned char want[DENSE_MAX];
	void *d = NULL;
	size_t len = 0, wl;

	assert_int_equal(et_checkpoint_read(s, id, &d, &len), 0);
	*ops = 0;
	if (*id == 0) {
		assert_true(len == 0);
		free(d);
		return;
	}
	assert_non_null(d);
	assert_true(len >= 24);
	memcpy(ops, (char *)d + 8, 8);
	wl = dense_make(seed, *ops, want);
	assert_int_equal(len, wl);
	assert_memory_equal(d, want, wl);
	free(d);
}

/* ---------------------------------------------------------------- trials */

struct totals {
	unsigned trials, kills, exact, mid_ckpt, mid_committed, before_first;
	unsigned after_prefetch;
	uint64_t logged, ops_sum, ops_max, compared;
};

enum { M_SLEEP, M_AT_CKPT, M_AT_PREFETCH, M_MODES };

static const char *const mode_names[M_MODES] = {"sleep", "at-checkpoint",
						"at-prefetch"};

#define ROUNDS 2 /* kills a trial: the second one of a recovered store */

static uint64_t env_u64(const char *name, uint64_t def)
{
	const char *e = getenv(name);

	return e && *e ? strtoull(e, NULL, 0) : def;
}

static void sleep_us(uint64_t us)
{
	struct timespec ts = {.tv_sec = (time_t)(us / 1000000),
			      .tv_nsec = (long)(us % 1000000) * 1000};

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

/* The child: runs the driver forever on dir from step from (a step count
 * the last checkpoint holds). Never returns. */
static void child_run(const char *dir, bool hbm, uint64_t seed, uint32_t k,
		      uint64_t from, int mfd)
{
	struct et_store_config c = tiny_config(hbm);
	et_store *s = NULL;
	uint64_t at = 0;
	int tid[NT], ret;
	char msg[160];

	ret = et_store_open(dir, &c, &s);
	if (!ret)
		ret = tables_open(s, tid, false);
	if (!ret)
		ret = drive(s, tid, seed, k, from, UINT64_MAX, true, mfd, &at);
	/* Only an error gets here. */
	snprintf(msg, sizeof(msg), "E child: step %llu: %s (%d)\n",
		 (unsigned long long)at, et_strerror(ret), ret);
	marker(mfd, 'E');
	if (write(mfd, msg, strlen(msg)) < 0)
		_exit(4);
	_exit(3);
}

/* What the child said before it died. */
struct seen {
	unsigned started, done, prefetches;
	char last_ck; /* 'C', 'c' or 0 */
	bool in_err;
	size_t errlen;
	char err[200];
};

static void feed(struct seen *sn, char c)
{
	if (sn->in_err) {
		if (sn->errlen + 1 < sizeof(sn->err))
			sn->err[sn->errlen++] = c;
		return;
	}
	switch (c) {
	case 'C':
		sn->started++;
		sn->last_ck = 'C';
		break;
	case 'c':
		sn->done++;
		sn->last_ck = 'c';
		break;
	case 'P':
		sn->prefetches++;
		break;
	case 'E':
		sn->in_err = true;
		break;
	}
}

/* Reads markers until the n-th want (n > 0), or all of them until the
 * child's end (n == 0). */
static void read_markers(int fd, struct seen *sn, char want, unsigned n)
{
	char buf[4096];
	ssize_t r;

	if (n) {
		while (n && !sn->in_err && read(fd, buf, 1) == 1) {
			feed(sn, buf[0]);
			n -= buf[0] == want;
		}
		return;
	}
	while ((r = read(fd, buf, sizeof(buf))) > 0)
		for (ssize_t j = 0; j < r; j++)
			feed(sn, buf[j]);
}

/*
 * The step count of the checkpoint a child that started at step from had
 * completed after done checkpoints of its own (none: *none, from 0 only).
 */
static uint64_t ckpt_steps(uint64_t from, uint32_t k, unsigned done, bool *none)
{
	*none = false;
	if (from == 0) {
		*none = done == 0;
		return done ? (uint64_t)(done - 1) * k : 0;
	}
	return done ? (from / k + done) * k : from;
}

struct trial {
	unsigned no;
	uint64_t seed;
	uint32_t k;
	bool hbm;
	const char *dir, *ref;
	et_store *rs; /* the reference, open throughout */
	int rid[NT];
	uint64_t from; /* steps the last checkpoint holds */
	uint64_t id;   /* and its id */
	struct tu_rng r;
	char what[200];
};

/* Forks a child that runs the driver on the trial's store from its last
 * checkpoint and kills it as mode says; *sn gets what it said. */
static void kill_child(struct trial *tr, int mode, struct seen *sn,
		       uint64_t *delay_us)
{
	int pfd[2], status;
	pid_t pid;

	memset(sn, 0, sizeof(*sn));
	assert_int_equal(pipe(pfd), 0);
	fcntl(pfd[1], F_SETPIPE_SZ, 1 << 20); /* best effort */
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(pfd[0]);
		child_run(tr->dir, tr->hbm, tr->seed, tr->k, tr->from, pfd[1]);
	}
	close(pfd[1]);
	switch (mode) {
	case M_SLEEP: /* log-uniform in [2, 200] ms */
		*delay_us = (uint64_t)(2000.0 * exp(tu_rng_double(&tr->r, 0,
								  log(100.0))));
		break;
	case M_AT_CKPT: /* inside (mostly) the n-th checkpoint */
		read_markers(pfd[0], sn, 'C',
			     1 + (unsigned)tu_rng_below(&tr->r, 32 / tr->k));
		*delay_us =
		    tu_rng_below(&tr->r, 4) ? tu_rng_below(&tr->r, 1500) : 0;
		break;
	default: /* under the I/O of the n-th prefetch */
		read_markers(pfd[0], sn, 'P',
			     1 + (unsigned)tu_rng_below(&tr->r, 30));
		*delay_us = tu_rng_below(&tr->r, 300);
		break;
	}
	sleep_us(*delay_us);
	kill(pid, SIGKILL);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	read_markers(pfd[0], sn, 0, 0);
	close(pfd[0]);
	if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGKILL)
		fail_msg("%s: the child died on its own (status %#x): %s",
			 tr->what, status, sn->err);
}

/*
 * Opens the killed store (recovery), checks its checkpoint against what
 * the child saw, and returns the step count c it holds.
 */
static uint64_t recover(struct trial *tr, const struct seen *sn,
			struct totals *tot)
{
	struct et_store_config tc = tiny_config(tr->hbm);
	struct et_stats st;
	uint64_t c, id, lo, hi;
	bool none_lo, none_hi;
	et_store *s = NULL;
	int tid[NT];

	assert_int_equal(et_store_open(tr->dir, &tc, &s), 0);
	open_tables(s, tid);
	assert_int_equal(et_get_stats(s, -1, &st), 0);
	dense_check(s, tr->seed, &id, &c);
	lo = ckpt_steps(tr->from, tr->k, sn->done, &none_lo);
	hi = ckpt_steps(tr->from, tr->k, sn->done + 1, &none_hi);
	if (sn->last_ck == 'C') {
		/* killed inside et_checkpoint: the old one or the new one,
		 * nothing else */
		tot->mid_ckpt++;
		if (none_lo)
			assert_true(id == 0 || c == hi);
		else
			assert_true(c == lo || c == hi);
		if (id && c == hi)
			tot->mid_committed++;
	} else if (none_lo) {
		assert_int_equal(id, 0);
	} else {
		/* nothing checkpointed is lost, nothing else is kept */
		if (c != lo)
			fail_msg("%s: recovered step %llu, the child had "
				 "completed the checkpoint of step %llu",
				 tr->what, (unsigned long long)c,
				 (unsigned long long)lo);
	}
	if (id == 0) {
		tot->before_first++;
	} else {
		assert_true(c >= tr->from);
		assert_int_equal(c % tr->k == 0 || c == tr->from, true);
		/* one id per checkpoint, the child's on the K grid */
		if (tr->from == 0)
			assert_int_equal(id, c / tr->k + 1);
		else
			assert_int_equal(id,
					 tr->id + c / tr->k - tr->from / tr->k);
	}
	tot->logged += st.log_index_rows;
	assert_int_equal(et_store_close(s), 0);
	tr->id = id;
	return c;
}

/* A session of the reference begins: as the other store's does, with the
 * keyed table's policy set anew (admission counts and ages restart). */
static void ref_open(struct trial *tr)
{
	struct et_store_config bc = big_config();

	assert_int_equal(et_store_open(tr->ref, &bc, &tr->rs), 0);
	open_tables(tr->rs, tr->rid);
}

static void ref_close(struct trial *tr)
{
	et_store *rs = tr->rs;

	tr->rs = NULL;
	assert_int_equal(et_store_close(rs), 0);
}

/*
 * Steps [from, to) on the reference, which is at from, in a session of
 * its own as the child's was, with the child's checkpoints (at step 0 if
 * from is 0, then on the K grid), so that expiry sees the same commits:
 * to is the child's last checkpoint (or from), and the close after it
 * commits nothing more.
 */
static void ref_advance(struct trial *tr, uint64_t from, uint64_t to)
{
	uint64_t at;

	ref_open(tr);
	assert_int_equal(
	    drive(tr->rs, tr->rid, tr->seed, tr->k, from, to, true, -1, &at),
	    0);
	ref_close(tr);
}

/*
 * Steps [c, c + more) on the recovered store and on the reference side by
 * side (gathers and erase counts compared), in one session each, both
 * checkpointed on the K grid and at the end, and the files compared again.
 */
static void go_on(struct trial *tr, uint64_t c, uint64_t more,
		  struct totals *tot)
{
	struct et_store_config tc = tiny_config(tr->hbm);
	struct step *a = tu_calloc(1, sizeof(*a));
	struct step *b = tu_calloc(1, sizeof(*b));
	float *oa = tu_calloc(MAXB * MAXDIM, sizeof(float));
	float *ob = tu_calloc(MAXB * MAXDIM, sizeof(float));
	uint64_t id, c2, ea, eb;
	struct et_stats st, rst;
	et_store *s = NULL;
	int tid[NT];

	assert_int_equal(et_store_open(tr->dir, &tc, &s), 0);
	open_tables(s, tid);
	ref_open(tr);
	for (uint64_t i = c; i < c + more; i++) {
		ea = eb = ~0ULL;
		assert_int_equal(
		    run_step(s, tid, tr->seed, i, a, b, oa, &ea, -1), 0);
		assert_int_equal(
		    run_step(tr->rs, tr->rid, tr->seed, i, a, b, ob, &eb, -1),
		    0);
		if (a->kind == S_GATHER)
			assert_memory_equal(oa, ob,
					    a->n * tparams[a->table].dim *
						sizeof(float));
		if (a->kind == S_ERASE && ea != eb)
			fail_msg("%s: step %llu erased %llu ids, the "
				 "reference %llu",
				 tr->what, (unsigned long long)i,
				 (unsigned long long)ea,
				 (unsigned long long)eb);
		if ((i + 1) % tr->k == 0) {
			assert_int_equal(checkpoint_at(s, tr->seed, i + 1, -1),
					 0);
			assert_int_equal(
			    checkpoint_at(tr->rs, tr->seed, i + 1, -1), 0);
		}
	}
	assert_int_equal(checkpoint_at(s, tr->seed, c + more, -1), 0);
	assert_int_equal(checkpoint_at(tr->rs, tr->seed, c + more, -1), 0);
	dense_check(s, tr->seed, &id, &c2);
	assert_int_equal(c2, c + more);
	assert_true(id > tr->id);
	/* the keyed table's policy did the same in both */
	assert_int_equal(et_get_stats(s, tid[KEYED], &st), 0);
	assert_int_equal(et_get_stats(tr->rs, tr->rid[KEYED], &rst), 0);
	if (st.keys_dropped != rst.keys_dropped ||
	    st.keys_erased != rst.keys_erased ||
	    st.keys_expired != rst.keys_expired ||
	    st.keys_evicted != rst.keys_evicted)
		fail_msg("%s: keyed table dropped/erased/expired/evicted "
			 "%llu/%llu/%llu/%llu, the reference "
			 "%llu/%llu/%llu/%llu",
			 tr->what, (unsigned long long)st.keys_dropped,
			 (unsigned long long)st.keys_erased,
			 (unsigned long long)st.keys_expired,
			 (unsigned long long)st.keys_evicted,
			 (unsigned long long)rst.keys_dropped,
			 (unsigned long long)rst.keys_erased,
			 (unsigned long long)rst.keys_expired,
			 (unsigned long long)rst.keys_evicted);
	ktot.dropped += st.keys_dropped;
	ktot.erased += st.keys_erased;
	ktot.expired += st.keys_expired;
	ktot.evicted += st.keys_evicted;
	assert_int_equal(et_store_close(s), 0);
	ref_close(tr);
	snprintf(tr->what + strlen(tr->what),
		 sizeof(tr->what) - strlen(tr->what), ", %llu more",
		 (unsigned long long)more);
	tot->compared +=
	    compare_dirs(tr->dir, tr->ref, tr->seed, c + more, tr->what);
	tr->from = c + more;
	tr->id = id;
	free(a);
	free(b);
	free(oa);
	free(ob);
}

/* The trial in progress, for the teardown when it fails. */
static struct trial *cur;

static int teardown(void **state)
{
	if (!cur)
		return 0;
	et_store_close(cur->rs);
	if (getenv("ET_CRASH_KEEP")) {
		print_message("kept %s and %s\n", cur->dir, cur->ref);
	} else {
		rm_dir(cur->dir);
		rm_dir(cur->ref);
	}
	cur = NULL;
	return 0;
}

static void one_trial(unsigned no, uint64_t base, struct totals *tot)
{
	/* static: the teardown may need it after a failed assertion */
	static struct trial tr;
	struct et_store_config tc, bc = big_config();
	et_store *s;
	int tid[NT];

	kpolicy_for(no);
	memset(&tr, 0, sizeof(tr));
	tr.no = no;
	tr.seed = mix64(base + no);
	tr.k = 4u << (no % 3); /* 4, 8, 16 steps a checkpoint */
	tr.hbm = no % 2;
	tr.dir = tu_path("crash");
	tr.ref = tu_path("crashref");
	tc = tiny_config(tr.hbm);
	cur = &tr;
	tu_rng_seed(&tr.r, tr.seed ^ 0xc0ffee);
	/* The store as the trainer's setup leaves it: empty tables; the
	 * reference likewise (it is open only in its sessions). */
	s = store_new(tr.dir, &tc, tid);
	assert_int_equal(et_store_close(s), 0);
	s = store_new(tr.ref, &bc, tr.rid);
	assert_int_equal(et_store_close(s), 0);

	for (int round = 0; round < ROUNDS; round++) {
		int mode = round ? (int)tu_rng_below(&tr.r, M_MODES)
				 : (int)(no / 2 % M_MODES);
		uint64_t delay_us = 0, c;
		struct seen sn;

		snprintf(tr.what, sizeof(tr.what),
			 "trial %u round %d (seed %#llx, %s, K %u, %s, admit "
			 "%u, expire %u, max %llu, half %u, from %llu)",
			 no, round, (unsigned long long)tr.seed,
			 mode_names[mode], tr.k, tr.hbm ? "hbm+ddr" : "ddr",
			 kpolicy.admit_after, kpolicy.expire_after,
			 (unsigned long long)kpolicy.max_keys,
			 kpolicy.half_life, (unsigned long long)tr.from);
		kill_child(&tr, mode, &sn, &delay_us);
		tot->kills++;
		if (mode == M_AT_PREFETCH && sn.last_ck != 'C')
			tot->after_prefetch++;
		c = recover(&tr, &sn, tot);
		snprintf(tr.what + strlen(tr.what),
			 sizeof(tr.what) - strlen(tr.what),
			 ": killed after %llu us, recovered step %llu",
			 (unsigned long long)delay_us, (unsigned long long)c);
		/* the reference: exactly c steps, no crash, no write-back */
		ref_advance(&tr, tr.from, c);
		tot->compared +=
		    compare_dirs(tr.dir, tr.ref, tr.seed, c, tr.what);
		tot->exact++;
		tot->ops_sum += c;
		if (c > tot->ops_max)
			tot->ops_max = c;
		/* and the recovered store keeps working */
		go_on(&tr, c, tr.k / 2 + tu_rng_below(&tr.r, tr.k / 2 + 1),
		      tot);
	}
	rm_dir(tr.dir);
	rm_dir(tr.ref);
	cur = NULL;
	tot->trials++;
}

static void test_kill9(void **state)
{
	uint64_t trials = env_u64("ET_CRASH_TRIALS", DEFAULT_TRIALS);
	uint64_t base = env_u64("ET_CRASH_SEED", DEFAULT_SEED);
	struct totals tot = {0};

	tu_require_uring();
	tu_require_direct();
	for (unsigned t = 0; t < trials; t++)
		one_trial(t, base, &tot);
	print_message(
	    "crash: %u trials (seed %#llx), %u kills, %u recovered "
	    "bit-exactly; %u kills inside et_checkpoint (%u of "
	    "them committed), %u before the first checkpoint, %u "
	    "right after a prefetch; %llu rows in the recovered row logs; "
	    "steps "
	    "recovered: mean %.1f, max %llu; rows compared: "
	    "%llu\n",
	    tot.trials, (unsigned long long)base, tot.kills, tot.exact,
	    tot.mid_ckpt, tot.mid_committed, tot.before_first,
	    tot.after_prefetch, (unsigned long long)tot.logged,
	    tot.kills ? (double)tot.ops_sum / tot.kills : 0.0,
	    (unsigned long long)tot.ops_max, (unsigned long long)tot.compared);
	print_message(
	    "crash: keyed table: %llu ids compared, %llu stored, "
	    "%llu not stored (initial values checked); the "
	    "continued sessions dropped %llu, erased %llu, expired "
	    "%llu, evicted %llu\n",
	    (unsigned long long)ktot.compared, (unsigned long long)ktot.stored,
	    (unsigned long long)ktot.init, (unsigned long long)ktot.dropped,
	    (unsigned long long)ktot.erased, (unsigned long long)ktot.expired,
	    (unsigned long long)ktot.evicted);
	assert_int_equal(tot.trials, trials);
	assert_int_equal(tot.exact, tot.kills);
}

int main(void)
{
	/* Small segments and a tight space bound: the row log's cleaner
	 * runs all the time, so kills land inside it too. */
	rowlog_set_tuning(1.2, 16u << 10);
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test_teardown(test_kill9, teardown),
	};

	signal(SIGPIPE, SIG_IGN);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
