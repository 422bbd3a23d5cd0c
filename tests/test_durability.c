/*
 * test_durability.c - the durability contract of include/embtier.h, tried
 * the way a library user meets it, through the public header only:
 *
 *   - what a call returned 0 for survives et_store_close returning 0, also
 *     after a checkpoint (write, checkpoint, write, close, reopen, compare),
 *     with or without et_flush before the close, for every tier shape;
 *   - a crash returns the tables to exactly the last commit: the last
 *     checkpoint, or a clean close after it;
 *   - a table not opened in the session after a crash is still rolled back
 *     to the checkpoint, even when a clean close commits meanwhile;
 *   - et_checkpoint_info says whether the tables moved on past the
 *     checkpoint's dense state.
 *
 * The crash trials fork a child that runs, on a prepared store whose
 * tables are at their initial values (state S0, checkpointed):
 *
 *     phase A; et_checkpoint            -> S_A   markers 'C' before, 'c' after
 *     phase B; maybe et_flush; close    -> S_B   markers 'X' before, 'x' after
 *     reopen; phase C (never committed)          marker 'D' after
 *
 * and kills it with SIGKILL after a random delay or right after a marker.
 * The parent reopens the store and gathers every row any phase touched:
 * they must equal, bit for bit, the one state the markers allow (S0 before
 * 'C'; S0 or S_A between 'C' and 'c'; S_A before 'X'; S_A or S_B between
 * 'X' and 'x'; S_B after 'x', whatever phase C did). The reference states
 * come from the same phases run on a store that holds everything in DDR.
 *
 *     ET_DURA_TRIALS=200 build/tests/test_durability
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
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

#include "embtier.h"
#include "util.h"

#define NT	       2
#define ROWS	       20000
#define DIM	       16
#define MAXB	       64
#define BATCHES	       40 /* per phase */
#define DEFAULT_TRIALS 24

static const struct et_table_params tparams[NT] = {
    {.rows = ROWS,
     .dim = DIM,
     .dtype = ET_F32,
     .optim = ET_OPT_SGD,
     .init = ET_INIT_UNIFORM,
     .seed = 3},
    {.rows = ROWS,
     .dim = DIM,
     .dtype = ET_F16,
     .optim = ET_OPT_ROWWISE_ADAGRAD,
     .init = ET_INIT_NORMAL,
     .seed = 4},
};
static const char *const tnames[NT] = {"f32sgd", "f16adagrad"};

/* Tier shapes: tiny HBM over tiny DDR, tiny DDR alone, everything in DDR
 * (so nothing is written before the flush of close). */
enum { SH_TINY_HBM, SH_TINY_DDR, SH_BIG, SH_N };
static const char *const shape_names[SH_N] = {"tiny-hbm+ddr", "tiny-ddr",
					      "big-ddr"};

static struct et_store_config shape_config(int sh)
{
	struct et_store_config c = {.ways = 4};

	switch (sh) {
	case SH_TINY_HBM:
		c.hbm_bytes = 64 * (64 + ET_SLOT_META_BYTES);
		c.ddr_bytes = 256 * (64 + ET_SLOT_META_BYTES);
		break;
	case SH_TINY_DDR:
		c.ddr_bytes = 256 * (64 + ET_SLOT_META_BYTES);
		break;
	default:
		c.ddr_bytes = 64 << 20;
		break;
	}
	return c;
}

/* ---------------------------------------------------------- the phases */

static uint64_t mix64(uint64_t z)
{
	z += 0x9e3779b97f4a7c15ULL;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* Batch b of phase ph: table, ids (a hot set and uniform ones), what to
 * do with them. */
struct batch {
	int t;
	size_t n;
	int op; /* 0 update, 1 write_rows, 2 gather */
	uint64_t ids[MAXB];
	float vals[MAXB * DIM];
};

static void gen_batch(uint64_t seed, int ph, int b, struct batch *bt)
{
	uint64_t x = mix64(seed ^ mix64((uint64_t)ph << 32 | (uint64_t)b));

	bt->t = (int)(x & 1);
	bt->n = 1 + (size_t)((x >> 8) % MAXB);
	bt->op = (int)((x >> 16) % 5);
	bt->op = bt->op < 3 ? 0 : bt->op - 2;
	for (size_t i = 0; i < bt->n; i++) {
		uint64_t y = mix64(x + i);

		bt->ids[i] = (y & 3) ? (y >> 8) % 500 : (y >> 8) % ROWS;
	}
	for (size_t i = 0; i < bt->n * DIM; i++)
		bt->vals[i] =
		    (float)((int64_t)(mix64(x ^ (i + 77)) % 2001) - 1000) /
		    1024.0f;
}

static int run_phase(et_store *s, const int *tid, uint64_t seed, int ph)
{
	static const struct et_update_params up[NT] = {{.lr = 0.05f},
						       {.lr = 0.1f}};
	struct batch bt;
	float out[MAXB * DIM];
	int ret = 0;

	for (int b = 0; b < BATCHES && !ret; b++) {
		gen_batch(seed, ph, b, &bt);
		if (bt.op == 0)
			ret = et_update(s, tid[bt.t], bt.ids, bt.n, bt.vals,
					&up[bt.t]);
		else if (bt.op == 1)
			ret =
			    et_write_rows(s, tid[bt.t], bt.ids, bt.n, bt.vals);
		else
			ret = et_gather(s, tid[bt.t], bt.ids, bt.n, out);
	}
	return ret;
}

/* Every row a trial may touch: the union of all phases' ids, per table,
 * sorted and distinct. */
struct rowset {
	uint64_t *ids[NT];
	size_t n[NT];
};

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static void rowset_make(uint64_t seed, struct rowset *rs)
{
	struct batch bt;

	for (int t = 0; t < NT; t++) {
		rs->ids[t] = tu_calloc(3 * BATCHES * MAXB, sizeof(uint64_t));
		rs->n[t] = 0;
	}
	for (int ph = 0; ph < 3; ph++)
		for (int b = 0; b < BATCHES; b++) {
			gen_batch(seed, ph, b, &bt);
			for (size_t i = 0; i < bt.n; i++)
				rs->ids[bt.t][rs->n[bt.t]++] = bt.ids[i];
		}
	for (int t = 0; t < NT; t++) {
		size_t m = 0;

		qsort(rs->ids[t], rs->n[t], sizeof(uint64_t), cmp_u64);
		for (size_t i = 0; i < rs->n[t]; i++)
			if (!m || rs->ids[t][m - 1] != rs->ids[t][i])
				rs->ids[t][m++] = rs->ids[t][i];
		rs->n[t] = m;
	}
}

static void rowset_free(struct rowset *rs)
{
	for (int t = 0; t < NT; t++)
		free(rs->ids[t]);
}

/* The values of every row of rs, table after table. */
static float *snap(et_store *s, const int *tid, const struct rowset *rs)
{
	size_t tot = rs->n[0] + rs->n[1], off = 0;
	float *v = tu_calloc(tot * DIM, sizeof(float));

	for (int t = 0; t < NT; t++) {
		assert_int_equal(
		    et_gather(s, tid[t], rs->ids[t], rs->n[t], v + off * DIM),
		    0);
		off += rs->n[t];
	}
	return v;
}

static size_t snap_floats(const struct rowset *rs)
{
	return (rs->n[0] + rs->n[1]) * DIM;
}

/* ------------------------------------------------------------- helpers */

static void rm_dir(const char *dir)
{
	tu_rmtree(dir);
}

static et_store *store_open(const char *dir, int sh, int *tid, bool create)
{
	struct et_store_config c = shape_config(sh);
	et_store *s = NULL;

	assert_int_equal(et_store_open(dir, &c, &s), 0);
	for (int t = 0; t < NT; t++) {
		if (create)
			assert_int_equal(
			    et_table_create(s, tnames[t], &tparams[t], &tid[t]),
			    0);
		else
			assert_int_equal(
			    et_table_open(s, tnames[t], &tparams[t], &tid[t]),
			    0);
	}
	return s;
}

static void marker(int fd, char c)
{
	if (fd >= 0 && write(fd, &c, 1) != 1)
		_exit(5);
}

/* --------------------------------------------- in-process, every shape */

/* write, checkpoint, write, [flush], close, reopen: the last writes are
 * there, the checkpoint's dense state is kept, and the tables moved on. */
static void closes_keep_writes(int sh, bool flush)
{
	const char *dir = tu_path("dura");
	uint64_t seed = 0xd0 + (uint64_t)sh * 2 + flush, id;
	struct et_checkpoint_info ci;
	struct rowset rs;
	et_store *s;
	int tid[NT];
	float *before, *after;
	const char dense[] = "dense state";
	void *d = NULL;
	size_t len = 0;

	rowset_make(seed, &rs);
	s = store_open(dir, sh, tid, true);
	assert_int_equal(run_phase(s, tid, seed, 0), 0);
	assert_int_equal(et_checkpoint(s, dense, sizeof(dense)), 0);
	assert_int_equal(et_checkpoint_info(s, &ci), 0);
	assert_false(ci.tables_moved);
	assert_int_equal(run_phase(s, tid, seed, 1), 0);
	if (flush)
		assert_int_equal(et_flush(s), 0);
	before = snap(s, tid, &rs);
	assert_int_equal(et_store_close(s), 0);

	s = store_open(dir, sh, tid, false);
	after = snap(s, tid, &rs);
	assert_memory_equal(before, after, snap_floats(&rs) * sizeof(float));
	assert_int_equal(et_checkpoint_info(s, &ci), 0);
	assert_true(ci.tables_moved);
	assert_int_equal(ci.id, 1);
	assert_int_equal(et_checkpoint_read(s, &id, &d, &len), 0);
	assert_int_equal(id, 1);
	assert_int_equal(len, sizeof(dense));
	assert_memory_equal(d, dense, sizeof(dense));
	free(d);
	free(after);
	/* A second session on top: write, close, reopen. */
	assert_int_equal(run_phase(s, tid, seed, 2), 0);
	free(before);
	before = snap(s, tid, &rs);
	assert_int_equal(et_store_close(s), 0);
	s = store_open(dir, sh, tid, false);
	after = snap(s, tid, &rs);
	assert_memory_equal(before, after, snap_floats(&rs) * sizeof(float));
	/* A checkpoint clears the flag; a close with no write since keeps
	 * it clear. */
	assert_int_equal(et_checkpoint(s, dense, sizeof(dense)), 0);
	free(after);
	after = snap(s, tid, &rs);
	assert_int_equal(et_store_close(s), 0);
	s = store_open(dir, sh, tid, false);
	assert_int_equal(et_checkpoint_info(s, &ci), 0);
	assert_false(ci.tables_moved);
	assert_int_equal(ci.id, 2);
	assert_int_equal(et_store_close(s), 0);
	free(before);
	free(after);
	rowset_free(&rs);
	rm_dir(dir);
}

static void test_close_after_checkpoint(void **state)
{
	tu_require_uring();
	tu_require_direct();
	for (int sh = 0; sh < SH_N; sh++) {
		print_message("shape %s\n", shape_names[sh]);
		closes_keep_writes(sh, false);
		closes_keep_writes(sh, true);
	}
}

/* ------------------------------------------------------- crash trials */

/* Runs the child's script; never returns. */
static void child(const char *dir, int sh, uint64_t seed, bool flush, int mfd)
{
	struct et_store_config c = shape_config(sh);
	et_store *s = NULL;
	int tid[NT], ret;

	ret = et_store_open(dir, &c, &s);
	for (int t = 0; !ret && t < NT; t++)
		ret = et_table_open(s, tnames[t], &tparams[t], &tid[t]);
	if (!ret)
		ret = run_phase(s, tid, seed, 0);
	marker(mfd, 'C');
	if (!ret)
		ret = et_checkpoint(s, "A", 1);
	marker(mfd, 'c');
	if (!ret)
		ret = run_phase(s, tid, seed, 1);
	if (!ret && flush)
		ret = et_flush(s);
	marker(mfd, 'X');
	if (!ret)
		ret = et_store_close(s);
	s = NULL;
	marker(mfd, 'x');
	if (!ret)
		ret = et_store_open(dir, &c, &s);
	for (int t = 0; !ret && t < NT; t++)
		ret = et_table_open(s, tnames[t], &tparams[t], &tid[t]);
	if (!ret)
		ret = run_phase(s, tid, seed, 2);
	if (!ret)
		ret = et_flush(s); /* on disk, never committed */
	marker(mfd, ret ? 'E' : 'D');
	for (;;)
		pause();
}

struct totals {
	unsigned trials, at[6]; /* by the last marker seen */
};

static const char *const stage_names[6] = {
    "before checkpoint", "in checkpoint", "before close",
    "in close",		 "after close",	  "after phase C"};

static int stage_of(const char *m, size_t n)
{
	char last = n ? m[n - 1] : 0;

	switch (last) {
	case 'C':
		return 1;
	case 'c':
		return 2;
	case 'X':
		return 3;
	case 'x':
		return 4;
	case 'D':
		return 5;
	default:
		return 0;
	}
}

static void one_trial(unsigned no, uint64_t seed, struct totals *tot)
{
	const char *dir = tu_path("crash"), *ref = tu_path("ref");
	int sh = (int)(seed % SH_N), tid[NT], pfd[2], status, st;
	bool flush = (seed >> 4) & 1;
	struct et_checkpoint_info ci;
	struct rowset rs;
	float *s0, *sa, *sb, *got;
	char m[64];
	size_t nm = 0;
	ssize_t r;
	et_store *s;
	pid_t pid;
	struct tu_rng rng;
	uint64_t delay;
	size_t bytes;

	tu_rng_seed(&rng, seed);
	rowset_make(seed, &rs);
	bytes = snap_floats(&rs) * sizeof(float);
	/* The reference: everything in DDR, no crash. */
	s = store_open(ref, SH_BIG, tid, true);
	s0 = snap(s, tid, &rs);
	assert_int_equal(run_phase(s, tid, seed, 0), 0);
	sa = snap(s, tid, &rs);
	assert_int_equal(run_phase(s, tid, seed, 1), 0);
	sb = snap(s, tid, &rs);
	assert_int_equal(et_store_close(s), 0);
	rm_dir(ref);
	/* The store under test, created and checkpointed at S0. */
	s = store_open(dir, sh, tid, true);
	assert_int_equal(et_checkpoint(s, "0", 1), 0);
	assert_int_equal(et_store_close(s), 0);

	assert_int_equal(pipe(pfd), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		close(pfd[0]);
		child(dir, sh, seed, flush, pfd[1]);
	}
	close(pfd[1]);
	if (tu_rng_below(&rng, 2)) { /* log-uniform in [0.2, 400] ms */
		delay = (uint64_t)(200.0 *
				   exp(tu_rng_double(&rng, 0, log(2000.0))));
	} else { /* right after a marker, or a little later */
		char want = "cXxD"[tu_rng_below(&rng, 4)], c = 0;

		while (c != want && c != 'E' && read(pfd[0], &c, 1) == 1)
			m[nm++] = c;
		delay = tu_rng_below(&rng, 2) ? tu_rng_below(&rng, 2000) : 0;
	}
	usleep((useconds_t)delay);
	kill(pid, SIGKILL);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	while (nm < sizeof(m) && (r = read(pfd[0], m + nm, 1)) == 1)
		nm++;
	close(pfd[0]);
	if (memchr(m, 'E', nm))
		fail_msg("trial %u seed %#llx: the child failed", no,
			 (unsigned long long)seed);
	st = stage_of(m, nm);
	tot->at[st]++;
	tot->trials++;

	s = store_open(dir, sh, tid, false);
	got = snap(s, tid, &rs);
	assert_int_equal(et_checkpoint_info(s, &ci), 0);
	{
		bool is0 = !memcmp(got, s0, bytes),
		     isa = !memcmp(got, sa, bytes),
		     isb = !memcmp(got, sb, bytes), ok;

		switch (st) {
		case 0:
			ok = is0 && ci.id == 1;
			break;
		case 1:
			ok = (is0 && ci.id == 1) || (isa && ci.id == 2);
			break;
		case 2:
			ok = isa && ci.id == 2 && !ci.tables_moved;
			break;
		case 3:
			ok = (isa && !ci.tables_moved) ||
			     (isb && ci.tables_moved);
			break;
		default:
			ok = isb && ci.id == 2 && ci.tables_moved;
			break;
		}
		if (!ok)
			fail_msg("trial %u seed %#llx shape %s flush %d delay "
				 "%llu us: killed %s: tables at S0 %d S_A %d "
				 "S_B %d, checkpoint %llu moved %d",
				 no, (unsigned long long)seed, shape_names[sh],
				 flush, (unsigned long long)delay,
				 stage_names[st], is0, isa, isb,
				 (unsigned long long)ci.id, ci.tables_moved);
	}
	assert_int_equal(et_store_close(s), 0);
	free(s0);
	free(sa);
	free(sb);
	free(got);
	rowset_free(&rs);
	rm_dir(dir);
}

static void test_kill9(void **state)
{
	const char *e = getenv("ET_DURA_TRIALS");
	unsigned n = e && *e ? (unsigned)strtoul(e, NULL, 0) : DEFAULT_TRIALS;
	struct totals tot = {0};

	tu_require_uring();
	tu_require_direct();
	for (unsigned i = 0; i < n; i++)
		one_trial(i, mix64(0xd00dULL + i), &tot);
	print_message("%u kills:", tot.trials);
	for (int i = 0; i < 6; i++)
		print_message(" %s %u%s", stage_names[i], tot.at[i],
			      i < 5 ? "," : "\n");
}

/* A crash leaves both tables past the checkpoint. The next session opens
 * only one of them, writes and closes cleanly (a commit). The other must
 * still come back at the checkpoint when it is opened later. */
static void test_unopened_table_rolls_back(void **state)
{
	const char *dir = tu_path("unopened");
	uint64_t seed = 0xabc;
	struct rowset rs;
	int tid[NT], status;
	float *sa, *got;
	et_store *s;
	pid_t pid;
	size_t n0;

	tu_require_uring();
	tu_require_direct();
	rowset_make(seed, &rs);
	n0 = rs.n[0] * DIM;
	s = store_open(dir, SH_TINY_DDR, tid, true);
	assert_int_equal(run_phase(s, tid, seed, 0), 0);
	assert_int_equal(et_checkpoint(s, NULL, 0), 0);
	sa = snap(s, tid, &rs);
	assert_int_equal(et_store_close(s), 0);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		struct et_store_config c = shape_config(SH_TINY_DDR);
		int ret = et_store_open(dir, &c, &s);

		for (int t = 0; !ret && t < NT; t++)
			ret = et_table_open(s, tnames[t], &tparams[t], &tid[t]);
		if (!ret)
			ret = run_phase(s, tid, seed, 1);
		if (!ret)
			ret = et_flush(s);
		if (ret)
			_exit(3);
		raise(SIGKILL);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFSIGNALED(status));
	/* Session 2: table 1 only, written and closed cleanly. */
	{
		struct et_store_config c = shape_config(SH_TINY_DDR);

		assert_int_equal(et_store_open(dir, &c, &s), 0);
		assert_int_equal(
		    et_table_open(s, tnames[1], &tparams[1], &tid[1]), 0);
		tid[0] = -1;
		assert_int_equal(run_phase(s, (int[]){tid[1], tid[1]}, seed, 2),
				 0);
		assert_int_equal(et_store_close(s), 0);
	}
	/* Session 3: table 0 is at the checkpoint. */
	s = store_open(dir, SH_TINY_DDR, tid, false);
	got = snap(s, tid, &rs);
	assert_memory_equal(got, sa, n0 * sizeof(float));
	assert_int_equal(et_store_close(s), 0);
	free(sa);
	free(got);
	rowset_free(&rs);
	rm_dir(dir);
}

/* ------------------------------- the offline view: listing, records */

/* Every materialized row of the file at path, listed max at a time. */
static size_t list_rows(const char *path, size_t max, uint64_t *out, size_t cap)
{
	uint64_t *buf = tu_calloc(max, sizeof(*buf)), from = 0;
	et_tfile *tf;
	size_t n, total = 0;

	assert_int_equal(et_tfile_open(path, ET_TFILE_RDONLY, &tf), 0);
	do {
		assert_int_equal(et_tfile_rows(tf, from, buf, max, &n), 0);
		assert_true(n <= max);
		for (size_t i = 0; i < n; i++) {
			assert_true(i || !total || buf[0] > out[total - 1]);
			assert_true(!i || buf[i] > buf[i - 1]);
			assert_true(buf[i] >= from && buf[i] < ROWS);
			assert_true(total < cap);
			out[total++] = buf[i];
		}
		if (n)
			from = buf[n - 1] + 1;
	} while (n == max);
	assert_int_equal(et_tfile_rows(tf, ROWS, buf, max, &n), 0);
	assert_int_equal(n, 0);
	assert_int_equal(et_tfile_rows(NULL, 0, buf, max, &n), -EINVAL);
	et_tfile_close(tf);
	free(buf);
	return total;
}

static int cmp_id(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* The sorted set of ids: sorts a (n) in place, drops repeats. */
static size_t uniq(uint64_t *a, size_t n)
{
	size_t k = 0;

	qsort(a, n, sizeof(*a), cmp_id);
	for (size_t i = 0; i < n; i++)
		if (!k || a[i] != a[k - 1])
			a[k++] = a[i];
	return k;
}

/*
 * A store's tables and commit record read offline, as a tool or another
 * process sees them: et_tfile_rows lists exactly the rows written, as of
 * the last commit (a flush alone shows nothing new; a checkpoint or a
 * clean close does), bulk-loaded blocks included; et_tfile_read_rows
 * gives their committed values and optimizer state; and
 * et_checkpoint_read_dir reads the record without opening the store.
 */
static void test_offline_view(void **state)
{
	const char *dir = tu_path("offline");
	char path[4200];
	struct et_store_config cfg = shape_config(SH_TINY_DDR);
	struct et_checkpoint_info ci;
	const char dense[] = "step 1";
	uint64_t a[64], b[64], want[256], got[256], bulk0 = 120;
	float vals[64 * DIM], g[64 * DIM], st[64], v2[64 * DIM];
	size_t na = 0, nb = 0, nw, ng, len;
	void *d;
	et_tfile *tf;
	et_store *s;
	int tid;
	uint32_t rpb;

	(void)state;
	assert_int_equal(mkdir(dir, 0755), 0);
	assert_int_equal(et_checkpoint_read_dir(dir, &ci, &d, &len), 0);
	assert_int_equal(ci.id, 0);
	assert_int_equal(ci.commit, 0);
	free(d);
	snprintf(path, sizeof(path), "%s/t.et", dir);
	/* a bulk load first: its blocks are materialized rows too */
	{
		struct et_table_info in;

		assert_int_equal(et_tfile_create(path, &tparams[1], &tf), 0);
		assert_int_equal(et_tfile_info(tf, &in), 0);
		rpb = in.rows_per_block;
		for (size_t i = 0; i < 3 * DIM; i++)
			vals[i] = (float)i / 64.0f;
		assert_int_equal(et_tfile_write_range(tf, bulk0, 3, vals), 0);
		assert_int_equal(et_tfile_sync(tf), 0);
		et_tfile_close(tf);
	}
	assert_int_equal(et_store_open(dir, &cfg, &s), 0);
	assert_int_equal(et_table_open(s, "t", NULL, &tid), 0);
	for (size_t i = 0; i < 40; i++) {
		a[na++] = mix64(i) % ROWS;
		b[nb++] = i < 10 ? a[i] : mix64(i + 1000) % ROWS;
	}
	for (size_t i = 0; i < 64 * DIM; i++)
		g[i] = (float)((int)(mix64(i) % 201) - 100) / 256.0f;
	struct et_update_params up = {.lr = 0.1f, .eps = 1e-8f};

	assert_int_equal(et_update(s, tid, a, na, g, &up), 0);
	assert_int_equal(et_checkpoint(s, dense, sizeof(dense)), 0);
	assert_int_equal(et_gather(s, tid, a, na, v2), 0);
	assert_int_equal(et_update(s, tid, b, nb, g, &up), 0);
	assert_int_equal(et_flush(s), 0);

	/* the store is open and flushed: offline, the checkpoint shows */
	nw = 0;
	for (uint64_t r = bulk0 / rpb * rpb;
	     r < (bulk0 + 3 + rpb - 1) / rpb * rpb; r++)
		want[nw++] = r;
	memcpy(want + nw, a, na * sizeof(*a));
	nw = uniq(want, nw + na);
	ng = list_rows(path, 7, got, 256);
	assert_int_equal(ng, nw);
	assert_memory_equal(got, want, nw * sizeof(*want));
	assert_int_equal(et_checkpoint_read_dir(dir, &ci, &d, &len), 0);
	assert_int_equal(ci.id, 1);
	assert_false(ci.tables_moved);
	assert_int_equal(len, sizeof(dense));
	assert_memory_equal(d, dense, sizeof(dense));
	free(d);
	assert_int_equal(et_tfile_open(path, ET_TFILE_RDONLY, &tf), 0);
	assert_int_equal(et_tfile_read_rows(tf, a, na, vals, st), 0);
	assert_memory_equal(vals, v2, na * DIM * sizeof(float));
	for (size_t i = 0; i < na; i++)
		assert_true(st[i] > 0); /* Adagrad's running mean of g^2 */
	et_tfile_close(tf);

	/* a clean close commits the later writes: now they show */
	assert_int_equal(et_gather(s, tid, b, nb, v2), 0);
	assert_int_equal(et_store_close(s), 0);
	memcpy(want + nw, b, nb * sizeof(*b));
	nw = uniq(want, nw + nb);
	ng = list_rows(path, 1000, got, 256);
	assert_int_equal(ng, nw);
	assert_memory_equal(got, want, nw * sizeof(*want));
	assert_int_equal(et_checkpoint_read_dir(dir, &ci, NULL, NULL), 0);
	assert_int_equal(ci.id, 1);
	assert_true(ci.tables_moved);
	assert_int_equal(et_tfile_open(path, ET_TFILE_RDONLY, &tf), 0);
	assert_int_equal(et_tfile_read_rows(tf, b, nb, vals, NULL), 0);
	assert_memory_equal(vals, v2, nb * DIM * sizeof(float));
	et_tfile_close(tf);

	/* restored whole into another store: values and optimizer state */
	{
		char dir2[4096], path2[4200];
		float *sv = tu_calloc(nw, sizeof(float));
		float *vv = tu_calloc(nw * DIM, sizeof(float));
		float *st2 = tu_calloc(nw, sizeof(float));
		float *v3 = tu_calloc(nw * DIM, sizeof(float));
		int t2;

		assert_true(nw > 40);
		assert_int_equal(et_tfile_open(path, ET_TFILE_RDONLY, &tf), 0);
		assert_int_equal(et_tfile_read_rows(tf, want, nw, vv, sv), 0);
		et_tfile_close(tf);
		snprintf(dir2, sizeof(dir2), "%s2", dir);
		snprintf(path2, sizeof(path2), "%s/t.et", dir2);
		assert_int_equal(mkdir(dir2, 0755), 0);
		assert_int_equal(et_store_open(dir2, &cfg, &s), 0);
		assert_int_equal(et_table_create(s, "t", &tparams[1], &t2), 0);
		assert_int_equal(et_write_rows_state(s, t2, want, 40, vv, sv),
				 0);
		/* NULL state: values written, state kept (zero, new rows) */
		assert_int_equal(et_write_rows_state(s, t2, want + 40, nw - 40,
						     vv + 40 * DIM, NULL),
				 0);
		assert_int_equal(et_checkpoint(s, NULL, 0), 0);
		assert_int_equal(et_store_close(s), 0);
		assert_int_equal(et_tfile_open(path2, ET_TFILE_RDONLY, &tf), 0);
		assert_int_equal(et_tfile_read_rows(tf, want, nw, v3, st2), 0);
		et_tfile_close(tf);
		assert_memory_equal(v3, vv, nw * DIM * sizeof(float));
		assert_memory_equal(st2, sv, 40 * sizeof(float));
		for (size_t i = 40; i < nw; i++)
			assert_true(st2[i] == 0.0f);
		free(sv);
		free(vv);
		free(st2);
		free(v3);
	}

	assert_int_equal(et_checkpoint_read_dir(path, &ci, NULL, NULL),
			 -ENOTDIR);
	snprintf(path, sizeof(path), "%s/none", dir);
	assert_int_equal(et_checkpoint_read_dir(path, &ci, NULL, NULL),
			 -ENOENT);
	assert_int_equal(et_checkpoint_read_dir(NULL, &ci, NULL, NULL),
			 -EINVAL);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_offline_view),
	    cmocka_unit_test(test_close_after_checkpoint),
	    cmocka_unit_test(test_unopened_table_rolls_back),
	    cmocka_unit_test(test_kill9),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
