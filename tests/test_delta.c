/*
 * test_delta.c - deltas (include/embtier.h "deltas": et_delta_export,
 * et_delta_apply), through the public header as a user runs them: train,
 * checkpoint, export, apply to a serving copy, train on, close, reopen.
 *
 *  - the chain: rounds of updates, writes and erases (a row-indexed f16
 *    table with row-wise Adagrad, a keyed f32 table with ids over all of
 *    u64, expiry after one commit), a checkpoint or a clean close each, a
 *    delta per round applied to two copies (with and without optimizer
 *    state) and one every two rounds to a third: every stored row, its
 *    bits and its state equal the source's, erased and expired ids are
 *    gone, the copy's dense state is the source's;
 *  - refusals: a delta that does not start where the copy stands, of
 *    another store, applied twice, from a commit past the last; nothing
 *    changes;
 *  - every byte of a delta file flipped, and the file cut at every length
 *    or padded: ET_EDELTA and the copy unchanged;
 *  - a table whose journal was snapshotted after `since` is taken whole,
 *    and the copy drops the ids erased before the snapshot;
 *  - kill -9 during an apply: the copy is the old version or the new one,
 *    never a mix, and applying again finishes it;
 *  - the copy's own files: DIR/DELTA damaged, cut or deleted refused; the
 *    copy open elsewhere ET_ELOCKED; every metadata write, log write and
 *    sync of an apply failing in turn leaves the old version (or, past
 *    its commit, the new), and applying again lands exactly;
 *  - export beside a live store committing in another thread: each delta
 *    is exactly one commit's tables (or the export says -EAGAIN);
 *  - a delta of several chunks a table (written on the writer's thread
 *    while the next is read) applies exactly; its writes failing in turn
 *    fail the export and leave no file.
 */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
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

#include "embtier.h"
#include "fileio.h"
#include "io.h"
#include "rowlog.h"
#include "util.h"

#define DIM   8
#define DROWS 50000

#define OK(call)                                                               \
	do {                                                                   \
		int rc_ = (call);                                              \
		if (rc_ != 0) {                                                \
			print_error("%s:%d: %s = %d (%s) [%s]\n", __FILE__,    \
				    __LINE__, #call, rc_, et_strerror(rc_),    \
				    et_errdetail());                           \
			fail();                                                \
		}                                                              \
	} while (0)

static const struct et_store_config CFG = {.ddr_bytes = 256 << 10};

/* ------------------------------------------------------------- snapshots */

/* Every stored row of one table of a directory, as of its last commit. */
struct tsnap {
	uint64_t *ids;
	float *vals, *state;
	size_t n;
	uint32_t dim, sf;
};

static void tsnap_take(const char *dir, const char *name, struct tsnap *t)
{
	char p[PATH_MAX];
	struct et_table_info ti;
	et_tfile *tf;
	size_t cap = 1024, got;
	uint64_t from = 0;

	memset(t, 0, sizeof(*t));
	snprintf(p, sizeof(p), "%s/%s.et", dir, name);
	OK(et_tfile_open(p, ET_TFILE_RDONLY, &tf));
	OK(et_tfile_info(tf, &ti));
	t->dim = ti.dim;
	t->sf = ti.state_floats;
	t->ids = malloc(cap * sizeof(*t->ids));
	for (;;) {
		if (t->n + 1024 > cap) {
			cap *= 2;
			t->ids = realloc(t->ids, cap * sizeof(*t->ids));
		}
		OK(et_tfile_rows(tf, from, t->ids + t->n, 1024, &got));
		t->n += got;
		if (got < 1024 || t->ids[t->n - 1] == UINT64_MAX)
			break;
		from = t->ids[t->n - 1] + 1;
	}
	t->vals = malloc((t->n + 1) * t->dim * sizeof(float));
	t->state = malloc((t->n + 1) * (t->sf + 1) * sizeof(float));
	if (t->n)
		OK(et_tfile_read_rows(tf, t->ids, t->n, t->vals,
				      t->sf ? t->state : NULL));
	et_tfile_close(tf);
}

static void tsnap_free(struct tsnap *t)
{
	free(t->ids);
	free(t->vals);
	free(t->state);
}

/* Reads rows ids[0..n) of table name in dir (values, and state if sf). */
static void read_ids(const char *dir, const char *name, const uint64_t *ids,
		     size_t n, float *vals, float *st)
{
	char p[PATH_MAX];
	et_tfile *tf;

	snprintf(p, sizeof(p), "%s/%s.et", dir, name);
	OK(et_tfile_open(p, ET_TFILE_RDONLY, &tf));
	if (n)
		OK(et_tfile_read_rows(tf, ids, n, vals, st));
	et_tfile_close(tf);
}

/* The two tables of a and b read the same bits (and optimizer state, if
 * state) at every row either stores; a keyed table stores the same ids
 * (a row-indexed copy may store rows set back to their initial value). */
static bool same_tables(const char *a, const char *b, bool state)
{
	static const char *names[] = {"dense", "keys"};
	bool same = true;

	for (int i = 0; i < 2; i++) {
		struct tsnap x, y;
		uint64_t *u;
		float *va, *vb, *sa, *sb;
		size_t n = 0, p = 0, q = 0;

		tsnap_take(a, names[i], &x);
		tsnap_take(b, names[i], &y);
		u = malloc((x.n + y.n + 1) * sizeof(*u));
		while (p < x.n || q < y.n) /* the union, ascending */
			if (q == y.n || (p < x.n && x.ids[p] < y.ids[q]))
				u[n++] = x.ids[p++];
			else if (p == x.n || y.ids[q] < x.ids[p])
				u[n++] = y.ids[q++];
			else
				u[n++] = x.ids[p++], q++;
		va = malloc((n + 1) * x.dim * sizeof(float));
		vb = malloc((n + 1) * x.dim * sizeof(float));
		sa = calloc(n + 1, (x.sf + 1) * sizeof(float));
		sb = calloc(n + 1, (x.sf + 1) * sizeof(float));
		read_ids(a, names[i], u, n, va, x.sf ? sa : NULL);
		read_ids(b, names[i], u, n, vb, x.sf ? sb : NULL);
		if ((i == 1 && (x.n != y.n || memcmp(x.ids, y.ids, x.n * 8))) ||
		    memcmp(va, vb, n * x.dim * sizeof(float)) ||
		    (state && memcmp(sa, sb, n * x.sf * sizeof(float)))) {
			print_error("table %s: %zu rows in %s, %zu in %s\n",
				    names[i], x.n, a, y.n, b);
			same = false;
		}
		free(u);
		free(va);
		free(vb);
		free(sa);
		free(sb);
		tsnap_free(&x);
		tsnap_free(&y);
	}
	return same;
}

static char *read_all(const char *path, size_t *n)
{
	int64_t sz = tu_file_size(path);
	char *b;

	assert_true(sz >= 0);
	b = malloc((size_t)sz + 1);
	assert_int_equal(tu_pread(path, 0, b, (size_t)sz), 0);
	*n = (size_t)sz;
	return b;
}

/* path, new, holding buf[0..n). */
static void write_new(const char *path, const void *buf, size_t n)
{
	FILE *f;

	unlink(path);
	f = fopen(path, "wb");
	assert_non_null(f);
	assert_int_equal(fwrite(buf, 1, n, f), n);
	assert_int_equal(fclose(f), 0);
}

/* --------------------------------------------------------------- sources */

struct src {
	char *dir;
	et_store *s;
	int d, k;
	struct tu_rng rng;
	uint64_t *keys; /* keyed ids stored (maybe erased since) */
	size_t nkeys;
	uint64_t commit;
	uint32_t expire;  /* the keyed table's expiry, in commits (0: off) */
	uint64_t expired; /* keys_expired of the sessions closed */
};

/* The keyed table's expiry (kept in memory: set at each open); with it
 * a bound by count too large to evict anything, so that its journal is
 * scored (a stamp and a score beside each entry) and deltas are read
 * from scored batches. */
static void src_open_policy(struct src *x)
{
	struct et_key_policy kp = {.expire_after = x->expire,
				   .max_keys = x->expire ? 1u << 30 : 0,
				   .half_life = x->expire ? 3 : 0};

	OK(et_key_policy_set(x->s, x->k, &kp));
}

static void src_open(struct src *x)
{
	struct et_table_params dp = {.rows = DROWS,
				     .dim = DIM,
				     .dtype = ET_F16,
				     .optim = ET_OPT_ROWWISE_ADAGRAD,
				     .init = ET_INIT_UNIFORM,
				     .init_scale = 0.1f,
				     .seed = 11};
	struct et_table_params kp = {.rows = 0,
				     .dim = DIM,
				     .dtype = ET_F32,
				     .init = ET_INIT_NORMAL,
				     .init_scale = 0.2f,
				     .seed = 12,
				     .flags = ET_TABLE_KEYED};
	struct stat st;

	tu_require_uring();
	tu_require_direct();
	if (stat(x->dir, &st)) {
		OK(et_store_open(x->dir, &CFG, &x->s));
		OK(et_table_create(x->s, "dense", &dp, &x->d));
		OK(et_table_create(x->s, "keys", &kp, &x->k));
	} else {
		OK(et_store_open(x->dir, &CFG, &x->s));
		OK(et_table_open(x->s, "dense", &dp, &x->d));
		OK(et_table_open(x->s, "keys", NULL, &x->k));
	}
	if (x->expire)
		src_open_policy(x);
}

static void src_new(struct src *x, uint64_t seed)
{
	memset(x, 0, sizeof(*x));
	x->dir = strdup(tu_path("delta-src"));
	tu_rng_seed(&x->rng, seed);
	x->keys = malloc(100000 * sizeof(*x->keys));
	src_open(x);
}

static void src_free(struct src *x)
{
	et_store_close(x->s);
	tu_rmtree(x->dir);
	free(x->dir);
	free(x->keys);
}

/* One round of training: updates of dense rows, updates and writes of
 * new and old keys (0 and UINT64_MAX among them), erases of some. */
static void src_round(struct src *x, size_t n)
{
	uint64_t *ids = malloc(n * sizeof(*ids));
	float *g = malloc(n * DIM * sizeof(float));
	struct et_update_params up = {.lr = 0.05f};
	uint64_t erased;
	size_t ne;

	for (size_t i = 0; i < n * DIM; i++)
		g[i] = (float)tu_rng_double(&x->rng, -1, 1);
	for (size_t i = 0; i < n; i++)
		ids[i] = tu_rng_below(&x->rng, DROWS);
	OK(et_update(x->s, x->d, ids, n, g, &up));
	for (size_t i = 0; i < n; i++) {
		bool old = x->nkeys && tu_rng_below(&x->rng, 3) == 0;

		ids[i] = old ? x->keys[tu_rng_below(&x->rng, x->nkeys)]
			     : tu_rng_next(&x->rng);
		if (!old && x->nkeys < 100000)
			x->keys[x->nkeys++] = ids[i];
	}
	if (x->nkeys < 2) {
		ids[0] = 0;
		ids[1] = UINT64_MAX;
		x->keys[x->nkeys++] = 0;
		x->keys[x->nkeys++] = UINT64_MAX;
	}
	OK(et_update(x->s, x->k, ids, n / 2, g, &up));
	OK(et_write_rows(x->s, x->k, ids + n / 2, n - n / 2, g));
	ne = n / 10;
	for (size_t i = 0; i < ne; i++)
		ids[i] = x->keys[tu_rng_below(&x->rng, x->nkeys)];
	OK(et_erase(x->s, x->k, ids, ne, &erased));
	free(ids);
	free(g);
}

/* Checkpoints (dense state "commit k"), or closes and reopens (a clean
 * close's commit); x->commit follows. */
static void src_commit(struct src *x, bool close)
{
	struct et_checkpoint_info ci;
	char dense[32];

	if (close) {
		struct et_stats st;

		OK(et_get_stats(x->s, x->k, &st));
		x->expired += st.keys_expired;
		OK(et_store_close(x->s));
		x->s = NULL;
		src_open(x);
	} else {
		snprintf(dense, sizeof(dense), "commit %llu",
			 (unsigned long long)x->commit + 1);
		OK(et_checkpoint(x->s, dense, strlen(dense)));
	}
	OK(et_checkpoint_info(x->s, &ci));
	assert_int_equal(ci.commit, x->commit + 1);
	x->commit = ci.commit;
}

static char *export_since(struct src *x, uint64_t since, unsigned flags,
			  struct et_delta_info *in)
{
	char *p = strdup(tu_path("delta"));

	OK(et_delta_export(x->dir, since, p, flags, in));
	assert_int_equal(in->from_commit, since);
	assert_int_equal(in->to_commit, x->commit);
	assert_int_equal(in->bytes, (uint64_t)tu_file_size(p));
	return p;
}

/* ------------------------------------------------------------------ tests */

static void test_chain(void **state)
{
	struct src x;
	char *c1 = strdup(tu_path("copy-state")), *c2 = strdup(tu_path("copy"));
	char *c3 = strdup(tu_path("copy-2")); /* a delta every two commits */
	uint64_t last = 0, last3 = 0;

	(void)state;
	src_new(&x, 1);
	x.expire = 1; /* expired ids travel as tombstones too */
	src_open_policy(&x);
	for (int r = 0; r < 6; r++) {
		struct et_delta_info e1, e2, a1, a2;
		struct et_checkpoint_info ci;
		char *d1, *d2;
		void *dense;
		size_t len;

		src_round(&x, 3000);
		src_commit(&x, r % 3 == 2);
		d1 = export_since(&x, last, ET_DELTA_STATE, &e1);
		d2 = export_since(&x, last, 0, &e2);
		assert_int_equal(e1.rows, e2.rows);
		assert_int_equal(e1.tombstones, e2.tombstones);
		assert_true(e2.bytes < e1.bytes); /* the state is 4 B a row */
		if (r)
			assert_true(e1.tombstones > 0);
		OK(et_delta_apply(d1, c1, &a1));
		OK(et_delta_apply(d2, c2, &a2));
		assert_int_equal(a1.rows, e1.rows);
		assert_int_equal(a1.tombstones, e1.tombstones);
		assert_int_equal(a1.to_commit, x.commit);
		assert_true(same_tables(x.dir, c1, true));
		assert_true(same_tables(x.dir, c2, false));
		OK(et_checkpoint_read_dir(c1, &ci, &dense, &len));
		if (r % 3 != 2) {
			char want[32];

			snprintf(want, sizeof(want), "commit %llu",
				 (unsigned long long)x.commit);
			assert_int_equal(len, strlen(want));
			assert_memory_equal(dense, want, len);
		}
		free(dense);
		if (r % 2) { /* two commits' batches in one delta: a key
			      * erased in one and written in the other */
			char *d3 = export_since(&x, last3, 0, &e2);

			OK(et_delta_apply(d3, c3, NULL));
			assert_true(same_tables(x.dir, c3, false));
			last3 = x.commit;
			free(d3);
		}
		last = x.commit;
		free(d1);
		free(d2);
	}
	{
		struct et_stats st;

		OK(et_get_stats(x.s, x.k, &st));
		assert_true(x.expired + st.keys_expired > 0);
	}
	/* the erased ids are gone from the copy: they read as initial */
	{
		et_store *s;
		int k;
		float a[DIM], b[DIM];
		uint64_t erased, id = x.keys[5];

		OK(et_erase(x.s, x.k, &id, 1, &erased));
		src_commit(&x, false);
		{
			struct et_delta_info in;
			char *d = export_since(&x, last, 0, &in);

			OK(et_delta_apply(d, c2, NULL));
			free(d);
		}
		OK(et_gather(x.s, x.k, &id, 1, a));
		OK(et_store_open(c2, &CFG, &s));
		OK(et_table_open(s, "keys", NULL, &k));
		OK(et_gather(s, k, &id, 1, b));
		assert_memory_equal(a, b, sizeof(a));
		OK(et_store_close(s));
	}
	src_free(&x);
	tu_rmtree(c1);
	tu_rmtree(c2);
	tu_rmtree(c3);
	free(c1);
	free(c2);
	free(c3);
}

static void test_refused(void **state)
{
	struct src x, y;
	char *copy = strdup(tu_path("copy")), *d0, *d1, *d2, *dy, *p;
	struct et_delta_info in;
	struct stat st;
	size_t n0, n1;
	char *b0, *b1;

	(void)state;
	src_new(&x, 2);
	src_new(&y, 3);
	src_round(&x, 1000);
	src_commit(&x, false);
	src_round(&y, 1000);
	src_commit(&y, false);
	d0 = export_since(&x, 0, 0, &in);
	src_round(&x, 1000);
	src_commit(&x, false);
	d1 = export_since(&x, 1, 0, &in);
	src_round(&x, 1000);
	src_commit(&x, false);
	d2 = export_since(&x, 2, 0, &in);
	src_round(&y, 1000);
	src_commit(&y, false);
	dy = export_since(&y, 1, 0, &in);

	/* from 1 on a copy that does not exist: refused, nothing made */
	assert_int_equal(et_delta_apply(d1, copy, NULL), ET_EMISMATCH);
	assert_int_not_equal(stat(copy, &st), 0);
	OK(et_delta_apply(d0, copy, NULL));
	{
		char dp[PATH_MAX];

		snprintf(dp, sizeof(dp), "%s/DELTA", copy);
		b0 = read_all(dp, &n0);
		/* a gap (2 -> 3 on a copy at 1), another store's 1 -> 2 */
		assert_int_equal(et_delta_apply(d2, copy, NULL), ET_EMISMATCH);
		assert_int_equal(et_delta_apply(dy, copy, NULL), ET_EMISMATCH);
		assert_non_null(strstr(et_errdetail(), "another history"));
		b1 = read_all(dp, &n1);
		assert_int_equal(n0, n1);
		assert_memory_equal(b0, b1, n0);
		free(b1);
		OK(et_delta_apply(d1, copy, NULL));
		/* applied twice */
		assert_int_equal(et_delta_apply(d1, copy, NULL), ET_EMISMATCH);
		OK(et_delta_apply(d2, copy, NULL));
		free(b0);
	}
	assert_true(same_tables(x.dir, copy, false));
	/* export: past the last commit, onto an existing file, no record */
	p = strdup(tu_path("delta"));
	assert_int_equal(et_delta_export(x.dir, x.commit + 1, p, 0, NULL),
			 -EINVAL);
	assert_int_equal(et_delta_export(x.dir, 0, d0, 0, NULL), -EEXIST);
	assert_int_equal(et_delta_export(x.dir, 0, p, 0x80, NULL), ET_ECONFIG);
	{
		char *empty = strdup(tu_path("empty"));

		assert_int_equal(mkdir(empty, 0755), 0);
		assert_int_equal(et_delta_export(empty, 0, p, 0, NULL),
				 ET_ERECORD);
		tu_rmtree(empty);
		free(empty);
	}
	assert_int_not_equal(stat(p, &st), 0);
	src_free(&x);
	src_free(&y);
	tu_rmtree(copy);
	free(copy);
	free(d0);
	free(d1);
	free(d2);
	free(dy);
	free(p);
}

static void test_damaged(void **state)
{
	struct src x;
	char *copy = strdup(tu_path("copy")), *bad = strdup(tu_path("bad"));
	char *d0, *d1, *orig, dp[PATH_MAX];
	struct et_delta_info in;
	size_t n, nd0, nd1;
	char *st0, *st1;
	uint64_t flips = 0;

	(void)state;
	src_new(&x, 4);
	src_round(&x, 600);
	src_commit(&x, false);
	d0 = export_since(&x, 0, ET_DELTA_STATE, &in);
	src_round(&x, 600);
	src_commit(&x, false);
	d1 = export_since(&x, 1, ET_DELTA_STATE, &in);
	assert_true(in.tombstones > 0);
	OK(et_delta_apply(d0, copy, NULL));
	snprintf(dp, sizeof(dp), "%s/DELTA", copy);
	st0 = read_all(dp, &nd0);
	orig = read_all(d1, &n);
	/* every byte flipped (one bit of it, which bit by its offset) */
	for (size_t i = 0; i < n; i++) {
		orig[i] ^= (char)(1u << (i % 8));
		write_new(bad, orig, n);
		orig[i] ^= (char)(1u << (i % 8));
		assert_int_equal(et_delta_apply(bad, copy, NULL), ET_EDELTA);
		flips++;
	}
	/* cut at every length, and one byte too many */
	for (size_t len = 0; len < n; len += 1 + (len > 256) * 5) {
		write_new(bad, orig, len);
		assert_int_equal(et_delta_apply(bad, copy, NULL), ET_EDELTA);
	}
	orig = realloc(orig, n + 1);
	orig[n] = 0;
	write_new(bad, orig, n + 1);
	assert_int_equal(et_delta_apply(bad, copy, NULL), ET_EDELTA);
	/* nothing changed: the copy still stands at 1, equal to a fresh
	 * copy of delta 0 */
	st1 = read_all(dp, &nd1);
	assert_int_equal(nd0, nd1);
	assert_memory_equal(st0, st1, nd0);
	OK(et_delta_apply(d1, copy, NULL));
	assert_true(same_tables(x.dir, copy, true));
	print_message("%llu single-bit flips and every cut refused\n",
		      (unsigned long long)flips);
	src_free(&x);
	tu_rmtree(copy);
	unlink(bad);
	free(copy);
	free(bad);
	free(d0);
	free(d1);
	free(orig);
	free(st0);
	free(st1);
}

/* Updates the same 500 dense rows and rewrites the same 500 keys (the
 * first stored), erasing 50 others the first time: the journals grow, the
 * indexes do not, so a journal snapshot comes soon. */
static void same_rows(struct src *x, int round)
{
	uint64_t ids[500], erased;
	float g[500 * DIM];
	struct et_update_params up = {.lr = 0.05f};

	for (size_t i = 0; i < 500 * DIM; i++)
		g[i] = (float)tu_rng_double(&x->rng, -1, 1);
	for (size_t i = 0; i < 500; i++)
		ids[i] = i * 97 % DROWS;
	OK(et_update(x->s, x->d, ids, 500, g, &up));
	assert_true(x->nkeys > 600);
	OK(et_write_rows(x->s, x->k, x->keys, 500, g));
	if (round == 0)
		OK(et_erase(x->s, x->k, x->keys + 500, 50, &erased));
}

static void test_whole_after_snapshot(void **state)
{
	struct src x;
	char *copy = strdup(tu_path("copy")), *d;
	struct et_delta_info in, ap = {0};
	uint64_t since;

	(void)state;
	rowlog_set_snapshot_min(16u << 10); /* a snapshot after a few commits */
	src_new(&x, 5);
	src_round(&x, 4000);
	src_commit(&x, false);
	d = export_since(&x, 0, 0, &in);
	OK(et_delta_apply(d, copy, NULL));
	free(d);
	since = x.commit;
	/* the copy stays at `since` while the source erases and rewrites
	 * until its journals start with a snapshot past it */
	for (int r = 0; r < 40; r++) {
		same_rows(&x, r);
		src_commit(&x, false);
		d = export_since(&x, since, 0, &in);
		unlink(d);
		free(d);
		if (in.whole == 2)
			break;
	}
	assert_int_equal(in.whole, 2);
	assert_int_equal(in.tombstones, 0);
	d = export_since(&x, since, 0, &in);
	OK(et_delta_apply(d, copy, &ap));
	assert_true(ap.stale > 0); /* ids erased before the snapshot */
	assert_true(same_tables(x.dir, copy, false));
	rowlog_set_snapshot_min(0);
	src_free(&x);
	tu_rmtree(copy);
	free(copy);
	free(d);
}

/* A delta from 0 applies to any copy: over one at a later commit, with
 * rows of its own between the delta's, it takes the copy back exactly
 * (found by fuzz_delta: the dropped rows' initial values overwrote the
 * chunk's). A refused apply leaves no table it created behind (also). */
static void test_whole_over_newer(void **state)
{
	struct src x;
	char *ref = strdup(tu_path("ref")), *copy = strdup(tu_path("copy"));
	char *other = strdup(tu_path("other")), *d0, *d1, f[PATH_MAX];
	struct et_delta_info in, ap;
	struct et_table_params kp = {.dim = 4, .flags = ET_TABLE_KEYED};
	struct stat st;
	et_store *s;
	int k;

	(void)state;
	src_new(&x, 8);
	src_round(&x, 2000);
	src_commit(&x, false);
	d0 = export_since(&x, 0, ET_DELTA_STATE, &in);
	src_round(&x, 2000);
	src_commit(&x, false);
	d1 = export_since(&x, 1, ET_DELTA_STATE, &in);
	OK(et_delta_apply(d0, ref, NULL));
	OK(et_delta_apply(d0, copy, NULL));
	OK(et_delta_apply(d1, copy, NULL));
	OK(et_delta_apply(d0, copy, &ap));
	assert_true(ap.stale > 0);
	assert_true(same_tables(ref, copy, true));
	OK(et_delta_apply(d1, copy, NULL));
	assert_true(same_tables(x.dir, copy, true));

	/* a copy whose "keys" has another shape: refused at the second
	 * table, and the first, which the apply created, is gone again */
	OK(et_store_open(other, &CFG, &s));
	OK(et_table_create(s, "keys", &kp, &k));
	OK(et_store_close(s));
	assert_int_equal(et_delta_apply(d0, other, NULL), ET_EMISMATCH);
	snprintf(f, sizeof(f), "%s/dense.et", other);
	assert_int_not_equal(stat(f, &st), 0);
	src_free(&x);
	tu_rmtree(ref);
	tu_rmtree(copy);
	tu_rmtree(other);
	free(ref);
	free(copy);
	free(other);
	free(d0);
	free(d1);
}

/* A byte of a journal's entries damaged: the export of the batches past
 * it refuses (ET_EJOURNAL); one of the batches an export only skims (at
 * or below `since`) goes unseen, as their entries are not used. */
static void test_journal_damage(void **state)
{
	struct src x;
	struct et_delta_info in;
	char j[PATH_MAX], *p = strdup(tu_path("delta"));
	unsigned char h[32];
	uint64_t n1, b2;

	(void)state;
	src_new(&x, 9);
	src_round(&x, 1000);
	src_commit(&x, false);
	src_round(&x, 1000);
	src_commit(&x, false);
	OK(et_store_close(x.s));
	x.s = NULL;
	snprintf(j, sizeof(j), "%s/dense.et.idx", x.dir);
	assert_int_equal(tu_pread(j, 0, h, sizeof(h)), 0);
	n1 = h[16] | (uint64_t)h[17] << 8 | (uint64_t)h[18] << 16;
	b2 = 32 + 16 * n1 + 40;
	/* in the second batch (commit 2): refused from 1 and from 0 */
	assert_int_equal(tu_flip_byte(j, (off_t)(b2 + 32 + 5), 0x10), 0);
	assert_int_equal(et_delta_export(x.dir, 1, p, 0, NULL), ET_EJOURNAL);
	assert_int_equal(et_delta_export(x.dir, 0, p, 0, NULL), ET_EJOURNAL);
	assert_int_equal(tu_flip_byte(j, (off_t)(b2 + 32 + 5), 0x10), 0);
	/* in the first (commit 1): skimmed from 1, refused from 0 */
	assert_int_equal(tu_flip_byte(j, 32 + 5, 0x10), 0);
	OK(et_delta_export(x.dir, 1, p, 0, &in));
	assert_true(in.rows > 0);
	unlink(p);
	assert_int_equal(et_delta_export(x.dir, 0, p, 0, NULL), ET_EJOURNAL);
	assert_int_equal(tu_flip_byte(j, 32 + 5, 0x10), 0);
	src_free(&x);
	free(p);
}

/* A table bulk-loaded (written blocks) before a store trained it: a
 * delta from 0 carries its block rows with its logged ones, and the copy
 * reads every row the same. */
static void test_bulk_loaded(void **state)
{
	char *dir = strdup(tu_path("bulk")), *copy = strdup(tu_path("copy"));
	char *d = strdup(tu_path("delta")), f[PATH_MAX];
	struct et_table_params p = {.rows = DROWS, .dim = DIM, .seed = 3};
	struct et_update_params up = {.lr = 0.5f};
	struct et_delta_info in;
	uint64_t ids[300];
	float *v = malloc(5000 * DIM * sizeof(float));
	float a[DROWS / 10 * DIM], b[DROWS / 10 * DIM];
	uint64_t all[DROWS / 10];
	et_tfile *tf;
	et_store *s;
	int t;

	(void)state;
	tu_require_uring();
	tu_require_direct();
	assert_int_equal(mkdir(dir, 0755), 0);
	snprintf(f, sizeof(f), "%s/dense.et", dir);
	for (size_t i = 0; i < 5000 * DIM; i++)
		v[i] = (float)i * 0.25f;
	OK(et_tfile_create(f, &p, &tf));
	OK(et_tfile_write_range(tf, 1000, 5000, v));
	et_tfile_close(tf);
	OK(et_store_open(dir, &CFG, &s));
	OK(et_table_open(s, "dense", NULL, &t));
	for (int i = 0; i < 300; i++)
		ids[i] = (uint64_t)i * 31; /* some in the blocks, some not */
	OK(et_update(s, t, ids, 300, v, &up));
	OK(et_checkpoint(s, NULL, 0));
	OK(et_store_close(s));
	OK(et_delta_export(dir, 0, d, 0, &in));
	assert_int_equal(in.whole, 1);
	/* the 5000 loaded, 161 of the 300 among them, and the rest of the
	 * loaded range's first and last blocks (127 rows a block) */
	assert_true(in.rows >= 5000 + 300 - 161 && in.rows <= 5139 + 2 * 127);
	OK(et_delta_apply(d, copy, NULL));
	for (size_t i = 0; i < DROWS / 10; i++)
		all[i] = i;
	read_ids(dir, "dense", all, DROWS / 10, a, NULL);
	read_ids(copy, "dense", all, DROWS / 10, b, NULL);
	assert_memory_equal(a, b, sizeof(a));
	tu_rmtree(dir);
	tu_rmtree(copy);
	unlink(d);
	free(dir);
	free(copy);
	free(d);
	free(v);
}

/* The copy's own files: DIR/DELTA damaged, cut or deleted is refused
 * with nothing changed; a store open on the copy makes an apply
 * ET_ELOCKED; an apply whose writes fail at any point leaves the copy as
 * it was, and retried, lands exactly. */
static void test_copy_files(void **state)
{
	struct src x;
	char *copy = strdup(tu_path("copy")), *d0, *d1, dp[PATH_MAX];
	char *ref = strdup(tu_path("ref"));
	struct et_delta_info in;
	size_t n, n2;
	char *st0, *st1;
	et_store *s;
	int fails = 0;

	(void)state;
	src_new(&x, 10);
	src_round(&x, 800);
	src_commit(&x, false);
	d0 = export_since(&x, 0, ET_DELTA_STATE, &in);
	src_round(&x, 800);
	src_commit(&x, false);
	d1 = export_since(&x, 1, ET_DELTA_STATE, &in);
	OK(et_delta_apply(d0, copy, NULL));
	snprintf(dp, sizeof(dp), "%s/DELTA", copy);
	st0 = read_all(dp, &n);
	/* damaged, cut, deleted */
	assert_int_equal(tu_flip_byte(dp, 9, 0x01), 0);
	assert_int_equal(et_delta_apply(d1, copy, NULL), ET_EDELTA);
	assert_int_equal(tu_flip_byte(dp, 9, 0x01), 0);
	assert_int_equal(tu_truncate(dp, (off_t)n - 3), 0);
	assert_int_equal(et_delta_apply(d1, copy, NULL), ET_EDELTA);
	unlink(dp);
	assert_int_equal(et_delta_apply(d1, copy, NULL), ET_EMISMATCH);
	write_new(dp, st0, n);
	/* the copy open elsewhere */
	OK(et_store_open(copy, &CFG, &s));
	assert_int_equal(et_delta_apply(d1, copy, NULL), ET_ELOCKED);
	OK(et_store_close(s));
	st1 = read_all(dp, &n2);
	assert_int_equal(n, n2);
	assert_memory_equal(st0, st1, n);
	free(st1);
	/* each write, sync or rename of the apply failing in turn, on a copy
	 * at commit 1 each time: it stays as it was (tables and DELTA), or,
	 * when the fault came after its commit, its tables are the new
	 * version; applying again then finishes it (or finds it done) */
	OK(et_delta_apply(d0, ref, NULL));
	for (uint64_t k = 1, kind = 0; kind < 3; k++) {
		bool fired, old_tables;
		int rc;

		tu_rmtree(copy);
		OK(et_delta_apply(d0, copy, NULL));
		if (kind == 0) /* metadata: journals, records, DELTA */
			fio_fault_set(k, EIO);
		else /* the row log's O_DIRECT writes, its syncs */
			io_fault_set(kind == 1 ? IO_WRITE : IO_FSYNC, k, EIO,
				     0);
		rc = et_delta_apply(d1, copy, NULL);
		fired = kind ? io_fault_fired() : fio_fault_fired();
		fio_fault_clear();
		io_fault_clear();
		if (!fired) {
			OK(rc);
			kind++;
			k = 0;
			continue;
		}
		if (rc == 0)
			continue;
		fails++;
		old_tables = same_tables(ref, copy, true);
		assert_true(old_tables || same_tables(x.dir, copy, true));
		st1 = read_all(dp, &n2);
		if (old_tables) { /* nothing committed: DELTA as it was */
			assert_int_equal(n, n2);
			assert_memory_equal(st0, st1, n);
		}
		free(st1);
		rc = et_delta_apply(d1, copy, NULL);
		assert_true(rc == 0 || (rc == ET_EMISMATCH && !old_tables));
		assert_true(same_tables(x.dir, copy, true));
	}
	assert_true(fails > 0);
	print_message("%d failing applies left the copy as it was\n", fails);
	src_free(&x);
	tu_rmtree(copy);
	tu_rmtree(ref);
	free(copy);
	free(ref);
	free(d0);
	free(d1);
	free(st0);
}

/* The copy's dense table, whole, to compare with two known versions. */
static bool copy_is(const char *copy, const struct tsnap *want)
{
	struct tsnap t;
	bool same;

	tsnap_take(copy, "dense", &t);
	same = t.n == want->n && !memcmp(t.ids, want->ids, t.n * 8) &&
	       !memcmp(t.vals, want->vals, t.n * t.dim * sizeof(float));
	tsnap_free(&t);
	return same;
}

static void test_kill_apply(void **state)
{
	struct src x;
	char *copy = strdup(tu_path("copy")), *d0, *d1;
	struct et_delta_info in;
	struct tsnap before, after;
	double t0, took;
	int olds = 0, news = 0;

	(void)state;
	src_new(&x, 6);
	src_round(&x, 20000);
	src_commit(&x, false);
	d0 = export_since(&x, 0, 0, &in);
	src_round(&x, 20000);
	src_commit(&x, false);
	d1 = export_since(&x, 1, 0, &in);
	OK(et_delta_apply(d0, copy, NULL));
	tsnap_take(copy, "dense", &before);
	tsnap_take(x.dir, "dense", &after);
	{ /* how long an apply takes, on a scratch copy */
		char *c = strdup(tu_path("copy"));
		struct timespec a, b;

		OK(et_delta_apply(d0, c, NULL));
		clock_gettime(CLOCK_MONOTONIC, &a);
		OK(et_delta_apply(d1, c, NULL));
		clock_gettime(CLOCK_MONOTONIC, &b);
		took = (double)(b.tv_sec - a.tv_sec) +
		       (double)(b.tv_nsec - a.tv_nsec) * 1e-9;
		tu_rmtree(c);
		free(c);
	}
	for (int trial = 0; trial < 8; trial++) {
		pid_t pid = fork();
		int ws, rc;

		assert_true(pid >= 0);
		if (pid == 0)
			_exit(et_delta_apply(d1, copy, NULL) ? 1 : 0);
		t0 = 1.6 * took * (trial + 0.5) / 8;
		usleep((useconds_t)(t0 * 1e6));
		kill(pid, SIGKILL);
		assert_int_equal(waitpid(pid, &ws, 0), pid);
		if (copy_is(copy, &before))
			olds++;
		else if (copy_is(copy, &after))
			news++;
		else
			fail_msg("trial %d: the copy is neither version",
				 trial);
		/* back to the old version for the next trial, if it moved */
		if (copy_is(copy, &after)) {
			tu_rmtree(copy);
			OK(et_delta_apply(d0, copy, NULL));
		}
		rc = et_delta_apply(d1, copy, NULL);
		assert_int_equal(rc, 0);
		assert_true(copy_is(copy, &after));
		tu_rmtree(copy);
		OK(et_delta_apply(d0, copy, NULL));
	}
	print_message("kill -9 during apply: %d left the old version, %d the "
		      "new\n",
		      olds, news);
	tsnap_free(&before);
	tsnap_free(&after);
	src_free(&x);
	tu_rmtree(copy);
	free(copy);
	free(d0);
	free(d1);
}

/*
 * A delta of more than one chunk of rows (65,536) a table: the chunks are
 * written by the writer's thread while the next is read. The copy still
 * equals the source; a write failing on that thread fails the export,
 * which leaves no file behind.
 */
static void test_many_chunks(void **state)
{
	struct src x;
	char *copy = strdup(tu_path("copy")), *d0, *d1, tmp[PATH_MAX];
	struct et_delta_info in;
	int fails = 0;

	(void)state;
	src_new(&x, 21);
	src_round(&x, 800);
	src_commit(&x, false);
	d0 = export_since(&x, 0, ET_DELTA_STATE, &in);
	OK(et_delta_apply(d0, copy, NULL));
	src_round(&x, 160000); /* 80,000 new keys written, as many updated */
	src_commit(&x, false);
	d1 = export_since(&x, 1, ET_DELTA_STATE, &in);
	assert_true(in.rows > 2 * 65536);
	assert_int_equal(in.whole, 0);
	OK(et_delta_apply(d1, copy, NULL));
	assert_true(same_tables(x.dir, copy, true));
	/* the nth write of the export failing, n past the header's */
	for (uint64_t k = 2; k <= 40; k += 6) {
		char *p = strdup(tu_path("delta"));
		int rc;

		fio_fault_set(k, EIO);
		rc = et_delta_export(x.dir, 1, p, ET_DELTA_STATE, &in);
		if (fio_fault_fired()) {
			assert_int_equal(rc, -EIO);
			fails++;
		} else {
			OK(rc);
		}
		fio_fault_clear();
		snprintf(tmp, sizeof(tmp), "%s.tmp", p);
		assert_true(rc ? access(p, F_OK) != 0 : access(p, F_OK) == 0);
		assert_true(access(tmp, F_OK) != 0);
		unlink(p);
		free(p);
	}
	assert_true(fails > 0);
	src_free(&x);
	tu_rmtree(copy);
	free(copy);
	free(d0);
	free(d1);
}

/* A live store whose every commit k sets every dense row to k. */
struct live {
	struct src *x;
	volatile int stop;
	int commits;
};

static void *live_run(void *arg)
{
	struct live *l = arg;
	uint64_t *ids = malloc(2000 * sizeof(*ids));
	float *v = malloc(2000 * DIM * sizeof(float));

	for (uint64_t i = 0; i < 2000; i++)
		ids[i] = i * 7;
	while (!__atomic_load_n(&l->stop, __ATOMIC_ACQUIRE) &&
	       l->commits < 400) {
		uint64_t k = l->x->commit + 1;

		for (size_t i = 0; i < 2000 * DIM; i++)
			v[i] = (float)k;
		if (et_write_rows(l->x->s, l->x->d, ids, 2000, v) ||
		    et_checkpoint(l->x->s, NULL, 0))
			break;
		l->x->commit = k;
		l->commits++;
	}
	free(ids);
	free(v);
	return NULL;
}

static void test_live_export(void **state)
{
	struct src x;
	struct live l = {.x = &x};
	pthread_t th;
	int good = 0, again = 0;

	(void)state;
	src_new(&x, 7);
	src_round(&x, 100);
	src_commit(&x, false);
	assert_int_equal(pthread_create(&th, NULL, live_run, &l), 0);
	for (int i = 0; i < 12; i++) {
		char *p = strdup(tu_path("delta")), *c = strdup(tu_path("c"));
		struct et_delta_info in;
		struct tsnap t;
		int rc = et_delta_export(x.dir, 0, p, 0, &in);

		if (rc == -EAGAIN) {
			again++;
		} else {
			OK(rc);
			OK(et_delta_apply(p, c, NULL));
			tsnap_take(c, "dense", &t);
			/* rows 0, 7, ... are the commit's number, all */
			for (size_t r = 0; r < t.n; r++)
				if (t.ids[r] % 7 == 0 && t.ids[r] < 14000 &&
				    in.to_commit > 1)
					assert_true(t.vals[r * DIM] ==
						    (float)in.to_commit);
			tsnap_free(&t);
			good++;
		}
		unlink(p);
		tu_rmtree(c);
		free(p);
		free(c);
	}
	__atomic_store_n(&l.stop, 1, __ATOMIC_RELEASE);
	pthread_join(th, NULL);
	print_message("beside %d live commits: %d exports whole, %d gave "
		      "-EAGAIN\n",
		      l.commits, good, again);
	assert_true(good > 0);
	src_free(&x);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_chain),
	    cmocka_unit_test(test_refused),
	    cmocka_unit_test(test_damaged),
	    cmocka_unit_test(test_whole_after_snapshot),
	    cmocka_unit_test(test_whole_over_newer),
	    cmocka_unit_test(test_journal_damage),
	    cmocka_unit_test(test_bulk_loaded),
	    cmocka_unit_test(test_copy_files),
	    cmocka_unit_test(test_kill_apply),
	    cmocka_unit_test(test_live_export),
	    cmocka_unit_test(test_many_chunks),
	};
	const char *only = getenv("ET_TEST_FILTER");

	if (only && *only)
		cmocka_set_test_filter(only);
	return cmocka_run_group_tests(tests, NULL, NULL);
}
