/*
 * test_commit.c - a store's commits as a user meets them, through
 * include/embtier.h (plus the library's fault seams, to make a commit fail
 * where a full disk or a broken device would):
 *
 *   - a checkpoint that fails at any step of the commit (each write, sync,
 *     rename and directory sync, counted and failed one at a time, with
 *     journals that snapshot) is retried, training goes on, and the next
 *     checkpoint reads back exactly; a crash right after the failure returns the
 *     store to a commit, the old one or (when the record was already in
 *     place) the new one, never to anything else;
 *   - one writer per directory: a second et_store_open, here or in
 *     another process, and a tool writing a table file of an open store
 *     are refused with ET_ELOCKED, and the first store goes on intact;
 *   - the cleaner meeting a damaged live record (its checksum, or its row
 *     id field) leaves it in place: flushes and checkpoints go on, the
 *     row's reads fail with ET_EBLOCKSUM naming it, every other row reads
 *     right, et_tfile_verify counts it, and writing the row whole heals
 *     it;
 *   - no 2 GiB limit: a dense state above 2 GiB checkpoints and reads
 *     back (skipped when the scratch disk has not the room).
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "commit.h"
#include "embtier.h"
#include "fileio.h"
#include "io.h"
#include "rowlog.h"
#include "util.h"

#define ROWS  4096
#define DIM   8
#define DENSE (64u << 10)

static const struct et_table_params tp = {
    .rows = ROWS, .dim = DIM, .init = ET_INIT_UNIFORM, .seed = 11};

/* The values every row should read: model[row * DIM ...]. */
struct model {
	float v[ROWS * DIM];
};

static void rm_dir(const char *dir)
{
	tu_rmtree(dir);
}

static et_store *store_open(const char *dir, int *t, bool create)
{
	struct et_store_config c = {.ddr_bytes = 64u << 10, .ways = 4};
	et_store *s = NULL;
	int ret = et_store_open(dir, &c, &s);

	if (ret)
		fail_msg("et_store_open(%s): %s (%s)", dir, et_strerror(ret),
			 et_errdetail());
	ret = create ? et_table_create(s, "t", &tp, t)
		     : et_table_open(s, "t", &tp, t);
	if (ret)
		fail_msg("table t: %s (%s)", et_strerror(ret), et_errdetail());
	return s;
}

static void model_init(et_store *s, int t, struct model *m)
{
	uint64_t ids[ROWS];

	for (uint64_t i = 0; i < ROWS; i++)
		ids[i] = i;
	assert_int_equal(et_gather(s, t, ids, ROWS, m->v), 0);
}

/* Writes n rows drawn from rng, values from the round number. */
static void write_round(et_store *s, int t, struct model *m, struct tu_rng *rng,
			unsigned round, size_t n)
{
	uint64_t ids[1024];
	float vals[1024 * DIM];

	for (size_t k = 0; k < n;) {
		size_t b = n - k < 1024 ? n - k : 1024;

		for (size_t i = 0; i < b; i++) {
			ids[i] = tu_rng_below(rng, ROWS);
			for (int c = 0; c < DIM; c++)
				vals[i * DIM + c] =
				    (float)(round * 1000 + ids[i] % 997) +
				    (float)c / 8;
		}
		assert_int_equal(et_write_rows(s, t, ids, b, vals), 0);
		for (size_t i = 0; i < b; i++)
			memcpy(&m->v[ids[i] * DIM], &vals[i * DIM],
			       DIM * sizeof(float));
		k += b;
	}
}

/* Whether the store's rows are exactly m. */
static bool reads_as(et_store *s, int t, const struct model *m)
{
	static float got[ROWS * DIM];
	uint64_t ids[ROWS];

	for (uint64_t i = 0; i < ROWS; i++)
		ids[i] = i;
	if (et_gather(s, t, ids, ROWS, got))
		return false;
	return !memcmp(got, m->v, sizeof(got));
}

/* ------------------------------------------------- a commit that fails */

enum seam { SEAM_IO_WRITE, SEAM_IO_FSYNC, SEAM_FILE, NSEAMS };

static const char *const seam_name[] = {"log/journal write",
					"log/journal fsync",
					"record write/fsync/rename/dir sync"};

static void arm(enum seam k, uint64_t nth)
{
	if (k == SEAM_FILE)
		fio_fault_set(nth, ENOSPC);
	else
		io_fault_set(k == SEAM_IO_WRITE ? IO_WRITE : IO_FSYNC, nth,
			     ENOSPC, 0);
}

static bool fired(enum seam k)
{
	return k == SEAM_FILE ? fio_fault_fired() : io_fault_fired();
}

static void disarm(void)
{
	fio_fault_clear();
	io_fault_clear();
}

/*
 * One trial: four good commits (the journal snapshots along the way), a
 * fifth whose nth operation of kind k fails; then either more training
 * and a retry (retry true) or a crash. Returns whether the fault fired
 * (false: nth is past the commit's operations).
 */
static bool trial(enum seam k, uint64_t nth, bool retry, unsigned *failed)
{
	static struct model m, mc, mprev;
	static char dense[DENSE];
	const char *dir = tu_path("commit");
	struct tu_rng rng;
	et_store *s;
	uint64_t id = 0;
	bool f;
	int t, rc;

	tu_rng_seed(&rng, 1000 * k + nth);
	s = store_open(dir, &t, true);
	model_init(s, t, &m);
	for (unsigned r = 1; r <= 4; r++) {
		write_round(s, t, &m, &rng, r, 3000);
		memset(dense, r, sizeof(dense));
		assert_int_equal(et_checkpoint(s, dense, sizeof(dense)), 0);
	}
	mprev = m;
	write_round(s, t, &m, &rng, 5, 3000);
	mc = m;
	memset(dense, 5, sizeof(dense));
	arm(k, nth);
	rc = et_checkpoint(s, dense, sizeof(dense));
	f = fired(k);
	disarm();
	if (rc) {
		(*failed)++;
		if (retry && (rc = et_checkpoint(s, dense, sizeof(dense))))
			fail_msg("%s fault %llu: the retry failed: %s (%s)",
				 seam_name[k], (unsigned long long)nth,
				 et_strerror(rc), et_errdetail());
	}
	if (!retry) {
		/* a crash now: the old commit, or the new one if its record
		 * got into place */
		et_store *c;
		int tc;

		commit_drop_lock(s);
		c = store_open(dir, &tc, false);
		if (!reads_as(c, tc, &mprev) && !reads_as(c, tc, &mc))
			fail_msg("%s fault %llu, then a crash: the tables are "
				 "at neither commit",
				 seam_name[k], (unsigned long long)nth);
		assert_int_equal(et_checkpoint_read(c, &id, NULL, NULL), 0);
		assert_true(id == 4 || id == 5);
		assert_int_equal(et_store_close(c), 0);
		et_store_close(s); /* its files are gone with the dir */
	} else {
		/* the retry took; go on training, checkpoint again */
		write_round(s, t, &m, &rng, 6, 500);
		memset(dense, 6, sizeof(dense));
		rc = et_checkpoint(s, dense, sizeof(dense));
		if (rc)
			fail_msg("%s fault %llu: the retry failed: %s (%s)",
				 seam_name[k], (unsigned long long)nth,
				 et_strerror(rc), et_errdetail());
		assert_int_equal(et_store_close(s), 0);
		s = store_open(dir, &t, false);
		if (!reads_as(s, t, &m))
			fail_msg("%s fault %llu, retried: rows differ from "
				 "the retry's commit",
				 seam_name[k], (unsigned long long)nth);
		{
			void *d = NULL;
			size_t len = 0;

			assert_int_equal(et_checkpoint_read(s, &id, &d, &len),
					 0);
			assert_int_equal(len, sizeof(dense));
			assert_int_equal(((char *)d)[0], 6);
			free(d);
		}
		assert_int_equal(et_store_close(s), 0);
	}
	rm_dir(dir);
	return f;
}

static void test_commit_fails_at_every_step(void **state)
{
	(void)state;
	tu_require_uring();
	/* small journals snapshot: the fifth commit of 3000 rows writes
	 * one, so its failure leaves one prepared */
	rowlog_set_snapshot_min(64u << 10);
	for (int k = 0; k < NSEAMS; k++) {
		for (int retry = 0; retry < 2; retry++) {
			unsigned failed = 0;
			uint64_t nth = 1;

			while (trial((enum seam)k, nth, retry, &failed))
				nth++;
			print_message("%s, then %s: %llu steps, %u failed "
				      "commits\n",
				      seam_name[k],
				      retry ? "a retry" : "a crash",
				      (unsigned long long)nth - 1, failed);
			assert_true(failed > 0);
		}
	}
	rowlog_set_snapshot_min(0);
}

/* ----------------------------------------------------- one writer only */

/*
 * The commit that first journals a keyed table's expiry stamps (expiry
 * set on ids already committed: the whole index, once, as a stamped
 * snapshot) fails at each of its operations in turn and is retried. The
 * ids' ages are then on disk as if it had never failed: A and B,
 * committed before expiry was set (commit 1), stamped with commit 2, are
 * kept at commit 3 (if the retry made it, a failure after the record was
 * in place having made commit 2) and gone at commit 4, after a reopen.
 * Scored: the policy also bounds the table by count (too large a bound to
 * evict), so the snapshot is a scored one (a score beside each stamp).
 */
static bool stamp_trial(enum seam k, uint64_t nth, bool scored,
			unsigned *failed)
{
	const char *dir = tu_path("stamps");
	const uint64_t ids[2] = {UINT64_MAX, 12345};
	const struct et_key_policy kp = {.expire_after = 2,
					 .max_keys = scored ? 1u << 30 : 0,
					 .half_life = scored ? 2 : 0};
	struct et_table_params kt = {.dim = DIM,
				     .init = ET_INIT_UNIFORM,
				     .seed = 7,
				     .flags = ET_TABLE_KEYED};
	struct et_store_config c = {.ddr_bytes = 64u << 10, .ways = 4};
	float ini[2 * DIM], v[2 * DIM], got[2 * DIM];
	et_store *s;
	bool f;
	int t, rc;

	for (int i = 0; i < 2 * DIM; i++)
		v[i] = (float)i + 0.5f;
	assert_int_equal(et_store_open(dir, &c, &s), 0);
	assert_int_equal(et_table_create(s, "k", &kt, &t), 0);
	assert_int_equal(et_gather(s, t, ids, 2, ini), 0);
	assert_int_equal(et_write_rows(s, t, ids, 2, v), 0);
	assert_int_equal(et_checkpoint(s, NULL, 0), 0); /* 1 */
	assert_int_equal(et_key_policy_set(s, t, &kp), 0);
	arm(k, nth);
	rc = et_checkpoint(s, NULL, 0); /* 2 */
	f = fired(k);
	disarm();
	if (rc) {
		(*failed)++;
		rc = et_checkpoint(s, NULL, 0);
		if (rc)
			fail_msg("%s fault %llu: the retry failed: %s (%s)",
				 seam_name[k], (unsigned long long)nth,
				 et_strerror(rc), et_errdetail());
	}
	assert_int_equal(et_store_close(s), 0);
	assert_int_equal(et_store_open(dir, &c, &s), 0);
	assert_int_equal(et_table_open(s, "k", &kt, &t), 0);
	assert_int_equal(et_key_policy_set(s, t, &kp), 0);
	/* stamped 2 either way: a failure after the record was in place
	 * made commit 2 and its retry commit 3 */
	for (;;) {
		struct et_checkpoint_info ci;
		bool kept;

		assert_int_equal(et_checkpoint(s, NULL, 0), 0);
		assert_int_equal(et_checkpoint_info(s, &ci), 0);
		assert_int_equal(et_gather(s, t, ids, 2, got), 0);
		kept = !memcmp(got, v, sizeof(got));
		if (kept != (ci.commit < 4) ||
		    (!kept && memcmp(got, ini, sizeof(got))))
			fail_msg("%s fault %llu: at commit %llu the ids are %s",
				 seam_name[k], (unsigned long long)nth,
				 (unsigned long long)ci.commit,
				 kept ? "kept" : "gone");
		if (ci.commit >= 4)
			break;
	}
	assert_int_equal(et_store_close(s), 0);
	rm_dir(dir);
	return f;
}

static void test_stamp_snapshot_retried(void **state)
{
	(void)state;
	tu_require_uring();
	tu_require_direct();
	for (int sc = 0; sc < 2; sc++)
		for (int k = 0; k < NSEAMS; k++) {
			unsigned failed = 0, steps = 0;

			for (uint64_t nth = 1; stamp_trial(k, nth, sc, &failed);
			     nth++)
				steps++;
			print_message("%s snapshot, %s, then a retry: %u "
				      "steps, %u failed commits\n",
				      sc ? "scored" : "stamped", seam_name[k],
				      steps, failed);
			assert_true(steps > 0);
			assert_true(failed > 0);
		}
}

static void test_one_writer(void **state)
{
	static struct model m;
	const char *dir = tu_path("lock");
	char path[4200];
	struct tu_rng rng;
	et_store *s, *s2 = NULL;
	et_tfile *tf = NULL;
	int t, st;
	pid_t pid;

	(void)state;
	tu_require_uring();
	tu_rng_seed(&rng, 5);
	s = store_open(dir, &t, true);
	model_init(s, t, &m);
	write_round(s, t, &m, &rng, 1, 2000);
	assert_int_equal(et_checkpoint(s, NULL, 0), 0);

	/* a second store here */
	assert_int_equal(et_store_open(dir, NULL, &s2), ET_ELOCKED);
	assert_non_null(strstr(et_errdetail(), dir));
	assert_null(s2);
	/* and in another process */
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		et_store *c = NULL;

		_exit(et_store_open(dir, NULL, &c) == ET_ELOCKED ? 0 : 1);
	}
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	/* a tool writing the table; a reader is welcome */
	snprintf(path, sizeof(path), "%s/t.et", dir);
	assert_int_equal(et_tfile_open(path, 0, &tf), ET_ELOCKED);
	assert_int_equal(et_tfile_open(path, ET_TFILE_RDONLY, &tf), 0);
	et_tfile_close(tf);

	/* the first store goes on; a child forked meanwhile (a data
	 * loader, say) and still alive does not keep the directory locked
	 * once the store is closed */
	write_round(s, t, &m, &rng, 2, 2000);
	assert_int_equal(et_checkpoint(s, NULL, 0), 0);
	write_round(s, t, &m, &rng, 3, 500);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		sleep(30);
		_exit(0);
	}
	assert_int_equal(et_store_close(s), 0);
	s = store_open(dir, &t, false);
	kill(pid, SIGKILL);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(reads_as(s, t, &m));
	/* a tool may not open the directory while the store has it */
	assert_int_equal(et_tfile_open(path, 0, &tf), ET_ELOCKED);
	assert_int_equal(et_store_close(s), 0);
	/* and may once it is closed; a store then waits for the tool */
	assert_int_equal(et_tfile_open(path, 0, &tf), 0);
	assert_int_equal(et_store_open(dir, NULL, &s2), ET_ELOCKED);
	et_tfile_close(tf);
	rm_dir(dir);
}

/* ---------------------------------------------- the cleaner meets damage */

#define SEG   16384u
#define RECB  48u /* 16 + DIM * 4, a multiple of 8 */
#define RPS   (SEG / RECB)
#define BAD_R 5 /* its checksum is damaged */
#define BAD_Q 9 /* its row id field is damaged */

/* The byte offset of the one record of row in the log (each row was
 * written once, so one record names it). */
static off_t find_record(const char *log, uint64_t row)
{
	int64_t size = tu_file_size(log);
	unsigned char h[8];

	for (off_t seg = 0; seg < size; seg += SEG)
		for (unsigned i = 0; i < RPS; i++) {
			off_t at = seg + (off_t)i * RECB;
			uint64_t r = 0;

			if (tu_pread(log, at, h, 8))
				return -1;
			for (int b = 7; b >= 0; b--)
				r = r << 8 | h[b];
			if (r == row)
				return at;
		}
	return -1;
}

/* Marks the rows whose records lie in the segment at byte at. */
static void mark_segment(const char *log, off_t at, bool *in)
{
	off_t seg = at / SEG * SEG;
	unsigned char h[8];

	for (unsigned i = 0; i < RPS; i++) {
		uint64_t r = 0;

		if (tu_pread(log, seg + (off_t)i * RECB, h, 8))
			return;
		for (int b = 7; b >= 0; b--)
			r = r << 8 | h[b];
		if (r < ROWS)
			in[r] = true;
	}
}

static void test_cleaner_meets_damage(void **state)
{
	static bool near[ROWS];
	static struct model m;
	static float got[DIM];
	const char *dir = tu_path("clean");
	char log[4200], path[4200];
	uint64_t ids[ROWS], bad = 0, first = 0;
	struct et_stats st;
	et_store *s;
	et_tfile *tf;
	off_t r_at, q_at;
	int t;

	(void)state;
	tu_require_uring();
	rowlog_set_tuning(1.1, SEG);
	s = store_open(dir, &t, true);
	model_init(s, t, &m);
	for (uint64_t i = 0; i < ROWS; i++) {
		ids[i] = i;
		for (int c = 0; c < DIM; c++)
			m.v[i * DIM + c] = (float)i + (float)c / 16;
	}
	assert_int_equal(et_write_rows(s, t, ids, ROWS, m.v), 0);
	assert_int_equal(et_store_close(s), 0);

	snprintf(log, sizeof(log), "%s/t.et.log", dir);
	r_at = find_record(log, BAD_R);
	q_at = find_record(log, BAD_Q);
	assert_true(r_at >= 0 && q_at >= 0);
	mark_segment(log, r_at, near);
	mark_segment(log, q_at, near);
	assert_int_equal(tu_flip_byte(log, r_at + 16 + 3, 0x40), 0);
	assert_int_equal(tu_flip_byte(log, q_at + 2, 0x01), 0);

	/* Rewrite the other rows of their segment, and every other row of
	 * the rest, a few times: the cleaner must come for that segment. */
	s = store_open(dir, &t, false);
	for (int round = 0; round < 6; round++) {
		size_t n = 0;

		for (uint64_t i = 0; i < ROWS; i++) {
			if (i == BAD_R || i == BAD_Q || (!near[i] && i % 2))
				continue;
			ids[n] = i;
			for (int c = 0; c < DIM; c++)
				m.v[i * DIM + c] += 1;
			n++;
		}
		for (size_t j = 0; j < n; j++) {
			assert_int_equal(
			    et_write_rows(s, t, &ids[j], 1, &m.v[ids[j] * DIM]),
			    0);
		}
		assert_int_equal(et_checkpoint(s, NULL, 0), 0);
	}
	assert_int_equal(et_get_stats(s, t, &st), 0);
	print_message("cleaner: %llu segments cleaned, %llu records left "
		      "damaged\n",
		      (unsigned long long)st.log_segments_cleaned,
		      (unsigned long long)st.log_records_damaged);
	assert_true(st.log_segments_cleaned > 0);
	assert_int_equal(st.log_records_damaged, 2);
	/* the damaged rows fail, naming themselves; the rest read right */
	ids[0] = BAD_R;
	assert_int_equal(et_gather(s, t, ids, 1, got), ET_EBLOCKSUM);
	assert_non_null(strstr(et_errdetail(), "row 5 "));
	assert_non_null(strstr(et_errdetail(), "t.et.log"));
	ids[0] = BAD_Q;
	assert_int_equal(et_gather(s, t, ids, 1, got), ET_EBLOCKSUM);
	for (uint64_t i = 0; i < ROWS; i++) {
		if (i == BAD_R || i == BAD_Q)
			continue;
		ids[0] = i;
		assert_int_equal(et_gather(s, t, ids, 1, got), 0);
		if (memcmp(got, &m.v[i * DIM], sizeof(got)))
			fail_msg("row %llu reads wrong after cleaning",
				 (unsigned long long)i);
	}
	assert_int_equal(et_store_close(s), 0);
	snprintf(path, sizeof(path), "%s/t.et", dir);
	assert_int_equal(et_tfile_open(path, ET_TFILE_RDONLY, &tf), 0);
	assert_int_equal(et_tfile_verify(tf, &bad, &first, NULL, NULL),
			 ET_EBLOCKSUM);
	assert_int_equal(bad, 2);
	et_tfile_close(tf);
	/* writing the damaged rows whole heals the table: a write of whole
	 * rows does not read them first */
	s = store_open(dir, &t, false);
	ids[0] = BAD_R;
	ids[1] = BAD_Q;
	memcpy(&m.v[0], &m.v[BAD_R * DIM], sizeof(got));
	memcpy(&m.v[DIM], &m.v[BAD_Q * DIM], sizeof(got));
	assert_int_equal(et_write_rows(s, t, ids, 2, m.v), 0);
	assert_int_equal(et_gather(s, t, ids, 1, got), 0);
	assert_memory_equal(got, m.v, sizeof(got));
	assert_int_equal(et_store_close(s), 0);
	assert_int_equal(et_tfile_open(path, ET_TFILE_RDONLY, &tf), 0);
	if (et_tfile_verify(tf, &bad, &first, NULL, NULL))
		fail_msg("after the rewrite: %llu bad, first %llu",
			 (unsigned long long)bad, (unsigned long long)first);
	et_tfile_close(tf);
	rowlog_set_tuning(0, 0);
	rm_dir(dir);
}

/* ----------------------------------------------------------- no 2 GiB */

static void test_dense_over_2gib(void **state)
{
	const size_t n = (2ull << 30) + 4096 + 3;
	const char *dir = tu_path("big");
	struct statvfs vfs;
	struct et_checkpoint_info ci;
	char *dense, *back = NULL;
	size_t len = 0;
	uint64_t id;
	et_store *s;
	int t;

	(void)state;
	tu_require_uring();
	if (statvfs(tu_dir(), &vfs) ||
	    (uint64_t)vfs.f_bavail * vfs.f_frsize < (6ull << 30)) {
		print_message(
		    "skipped: under 6 GiB free on the scratch disk\n");
		skip();
	}
	dense = calloc(1, n); /* untouched pages: zero, and cheap */
	assert_non_null(dense);
	dense[0] = 1;
	dense[(1ull << 31) - 1] = 2;
	dense[1ull << 31] = 3;
	dense[n - 1] = 4;
	s = store_open(dir, &t, true);
	assert_int_equal(et_checkpoint(s, dense, n), 0);
	assert_int_equal(et_store_close(s), 0);
	s = store_open(dir, &t, false);
	assert_int_equal(et_checkpoint_read(s, &id, (void **)&back, &len), 0);
	assert_int_equal(id, 1);
	assert_int_equal(len, n);
	assert_true(back[0] == 1 && back[(1ull << 31) - 1] == 2 &&
		    back[1ull << 31] == 3 && back[n - 1] == 4);
	assert_int_equal(et_checkpoint_info(s, &ci), 0);
	assert_int_equal(ci.dense_len, n);
	assert_int_equal(et_store_close(s), 0);
	free(back);
	free(dense);
	rm_dir(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_commit_fails_at_every_step),
	    cmocka_unit_test(test_stamp_snapshot_retried),
	    cmocka_unit_test(test_one_writer),
	    cmocka_unit_test(test_cleaner_meets_damage),
	    cmocka_unit_test(test_dense_over_2gib),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
