/*
 * test_rowlog.c - the row log on its own (src/disk/rowlog.h): its index holds
 * every row appended, through many growths, and no other; every row reads
 * back as last appended; all of it survives a commit, a close and a reopen
 * from the journal, and a reopen at the earlier commit forgets what came
 * after it. The store-level contract (crashes, cleaning, faults) is tested
 * in test_crash, test_model and test_faults. Skips with a reason without
 * io_uring or O_DIRECT.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <math.h>
#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cmocka.h>

#include "embtier.h"
#include "hash.h"
#include "le.h"
#include "io.h"
#include "journal.h"
#include "rowlog.h"
#include "util.h"

#define ROWS   (1ULL << 36)
#define N      70000 /* rows appended: the index grows many times */
#define RB     16    /* row bytes */
#define STRIDE 1000003ULL

/* The i-th row appended: distinct for i < 2^36 (STRIDE is odd). */
static uint64_t row_of(uint64_t i)
{
	return (i * STRIDE) & (ROWS - 1);
}

/* A row not among the first n appended: row_of(i) + 1 for an odd stride
 * is even where row_of(i) is odd, and odd where it is even, so it equals
 * some row_of(j) only for j = i + (1 / STRIDE mod 2^36), far past n. */
static uint64_t absent_of(uint64_t i)
{
	return (row_of(i) + 1) & (ROWS - 1);
}

static void fill(uint64_t row, uint32_t round, unsigned char *p)
{
	uint64_t a = row, b = row ^ ((uint64_t)round << 40);

	memcpy(p, &a, 8);
	memcpy(p + 8, &b, 8);
}

static void append_range(struct rowlog *l, io_ctx *io, uint64_t i0, uint64_t i1,
			 uint64_t step, uint32_t round)
{
	uint64_t ids[512];
	unsigned char buf[512 * RB];
	size_t k = 0;

	for (uint64_t i = i0; i < i1; i += step) {
		ids[k] = row_of(i);
		fill(ids[k], round, buf + k * RB);
		if (++k == 512 || i + step >= i1) {
			assert_int_equal(rowlog_append(l, io, ids, k, buf), 0);
			k = 0;
		}
	}
}

/* Every row i < n is in the log with round (i % 3 == 0 ? r3 : 1); rows
 * past n and absent rows are not. */
static void check(struct rowlog *l, io_ctx *io, uint64_t n, uint32_t r3)
{
	static uint64_t ids[N];
	static unsigned char got[N * RB];
	uint32_t idx[256];

	assert_int_equal(rowlog_count(l), n);
	for (uint64_t i = 0; i < N; i++) {
		ids[i] = row_of(i);
		if (rowlog_has(l, ids[i]) != (i < n))
			fail_msg(
			    "row %llu (%llu): has %d", (unsigned long long)i,
			    (unsigned long long)ids[i], rowlog_has(l, ids[i]));
		if (rowlog_has(l, absent_of(i)))
			fail_msg("absent row %llu is in the index",
				 (unsigned long long)absent_of(i));
	}
	for (uint64_t i = 0; i < n; i += 256) {
		size_t k = n - i < 256 ? n - i : 256;

		for (size_t j = 0; j < k; j++)
			idx[j] = (uint32_t)(i + j);
		assert_int_equal(rowlog_read(l, io, ids, idx, k, got), 0);
	}
	for (uint64_t i = 0; i < n; i++) {
		unsigned char want[RB];

		fill(ids[i], i % 3 == 0 ? r3 : 1, want);
		if (memcmp(want, got + i * RB, RB))
			fail_msg("row %llu reads back wrong",
				 (unsigned long long)i);
	}
}

/* A new log at path (none before it, no record) and a ring for it; skips
 * the test where io_uring or the file system cannot. */
static void open_new(const char *path, struct rowlog **l, io_ctx **io)
{
	struct jr_expect x = {.mode = JR_UNNAMED};
	int why;

	if (io_open(64, io, &why))
		skip();
	if (rowlog_open(path, RB, ROWS, &x, false, l)) {
		io_close(*io);
		skip();
	}
}

static void test_index_and_reopen(void **state)
{
	const char *path = tu_path("rowlog");
	struct jr_expect x;
	struct jr_tail t1, t2;
	struct rowlog *l;
	io_ctx *io;

	(void)state;
	open_new(path, &l, &io);
	/* commit 1: the first half; commit 2: the rest, and every third row
	 * of all of it again */
	append_range(l, io, 0, N / 2, 1, 1);
	check(l, io, N / 2, 1);
	assert_int_equal(rowlog_commit_prepare(l, io, 1), 0);
	rowlog_tail(l, &t1);
	rowlog_commit_done(l, 1, true);
	append_range(l, io, N / 2, N, 1, 1);
	append_range(l, io, 0, N, 3, 2);
	check(l, io, N, 2);
	assert_int_equal(rowlog_commit_prepare(l, io, 2), 0);
	rowlog_tail(l, &t2);
	rowlog_commit_done(l, 2, true);
	rowlog_close(l);

	x = (struct jr_expect){
	    .mode = JR_NAMED, .commit = 2, .jlen = t2.len, .jsum = t2.sum};
	assert_int_equal(rowlog_open(path, RB, ROWS, &x, true, &l), 0);
	check(l, io, N, 2);
	rowlog_close(l);
	/* a reader of commit 1 sees only the first half, as it was */
	x = (struct jr_expect){
	    .mode = JR_NAMED, .commit = 1, .jlen = t1.len, .jsum = t1.sum};
	assert_int_equal(rowlog_open(path, RB, ROWS, &x, true, &l), 0);
	check(l, io, N / 2, 1);
	rowlog_close(l);
	io_close(io);
}

/* ------------------------------------------- a batch past 2^27 entries */

#define BIG_N ((1ULL << 27) + 5) /* 16 bytes each: over 2 GiB */

static void fill_big(void *arg, unsigned char *p, uint64_t first, size_t n)
{
	(void)arg;
	for (size_t i = 0; i < n; i++, p += JR_ENT) {
		uint64_t k = first + i;

		put64(p, k * 3 + 1);
		put32(p + 8, (uint32_t)(k & 0x7fffffff));
		put32(p + 12, 1);
	}
}

struct big_sink {
	uint64_t seen, bad;
	uint64_t batches;
};

static int big_begin(void *arg, const struct jr_batch *b)
{
	((struct big_sink *)arg)->batches++;
	return b->n == BIG_N ? 0 : -EINVAL;
}

static int big_entries(void *arg, const struct jr_batch *b,
		       const unsigned char *e, size_t n)
{
	struct big_sink *k = arg;

	(void)b;
	for (size_t i = 0; i < n; i++, e += JR_ENT, k->seen++)
		if (get64(e) != k->seen * 3 + 1 ||
		    get32(e + 8) != (uint32_t)(k->seen & 0x7fffffff))
			k->bad++;
	return 0;
}

/* A commit of 2^27 changed rows or more (one batch over 2 GiB) is written
 * whole and replayed whole: no length is cut to 31 or 32 bits. */
/* A commit whose batch was written but whose record never was (the store
 * retries such a commit under the same number): rows appended after it,
 * some of them already in that batch, some not, are all in the retried
 * batch, and a reopen at the retried commit reads every row's last
 * values. */
static void test_prepare_retried(void **state)
{
	const char *path = tu_path("rowlog");
	struct jr_expect x;
	struct jr_tail t;
	struct rowlog *l;
	io_ctx *io;

	(void)state;
	open_new(path, &l, &io);
	append_range(l, io, 0, N / 2, 1, 1);
	assert_int_equal(rowlog_commit_prepare(l, io, 1), 0);
	rowlog_commit_done(l, 1, true);
	append_range(l, io, N / 2, N, 1, 1);
	assert_int_equal(rowlog_commit_prepare(l, io, 2), 0);
	/* no record: commit 2 did not happen; every third row changes */
	append_range(l, io, 0, N, 3, 2);
	assert_int_equal(rowlog_commit_prepare(l, io, 2), 0);
	rowlog_tail(l, &t);
	rowlog_commit_done(l, 2, true);
	check(l, io, N, 2);
	rowlog_close(l);
	x = (struct jr_expect){
	    .mode = JR_NAMED, .commit = 2, .jlen = t.len, .jsum = t.sum};
	assert_int_equal(rowlog_open(path, RB, ROWS, &x, true, &l), 0);
	check(l, io, N, 2);
	rowlog_close(l);
	io_close(io);
}

static void test_journal_batch_over_2gib(void **state)
{
	const char *path = tu_path("bigidx"), *pnew = tu_path("bigidx.new");
	struct jr_batch b = {.ver = 2,
			     .commit = 1,
			     .n = BIG_N,
			     .hseg = JR_NONE,
			     .rec_bytes = 32,
			     .seg_bytes = 1u << 20};
	struct jr_tail t = {0}, t2;
	struct big_sink k = {0};
	struct jr_sink sink = {
	    .begin = big_begin, .entries = big_entries, .arg = &k};
	struct jr_expect x = {.mode = JR_NAMED, .commit = 1};
	struct statvfs vfs;
	io_ctx *io;
	int fd, why;

	(void)state;
	if (statvfs(tu_dir(), &vfs) ||
	    (uint64_t)vfs.f_bavail * vfs.f_frsize < (5ull << 30)) {
		print_message(
		    "skipped: under 5 GiB free on the scratch disk\n");
		skip();
	}
	if (io_open(8, &io, &why))
		skip();
	fd = open(path, O_RDWR | O_CREAT, 0644);
	assert_true(fd >= 0);
	assert_int_equal(jr_append(io, fd, &b, fill_big, NULL, &t), 0);
	close(fd);
	io_close(io);
	assert_int_equal(t.len, JR_HDR + BIG_N * JR_ENT + JR_TRL);
	x.jlen = t.len;
	x.jsum = t.sum;
	assert_int_equal(jr_open(path, pnew, 32, &x, true, &sink, &fd, &t2), 0);
	assert_int_equal(k.batches, 1);
	assert_int_equal(k.seen, BIG_N);
	assert_int_equal(k.bad, 0);
	assert_int_equal(t2.len, t.len);
	/* and one byte short of it is refused, not cut */
	x.jlen = t.len + 1;
	assert_int_equal(jr_open(path, pnew, 32, &x, true, NULL, &fd, &t2),
			 ET_EJOURNAL);
	tu_unlink(path);
}

/* ----------------------------------------------------- a keyed table's log */

/* Keys from the whole u64 range, the edges among them. */
static uint64_t key_of(uint64_t i)
{
	static const uint64_t edge[] = {
	    0, 1, UINT64_MAX, UINT64_MAX - 1, 1ULL << 63, (1ULL << 40) - 1};

	if (i < sizeof(edge) / sizeof(edge[0]))
		return edge[i];
	return i * 0x9E3779B97F4A7C15ULL + 0x1234567;
}

#define KN 20000

/* The log holds exactly the keys i < KN with live[i], each with round
 * live[i], and reads them back so. */
static void check_keyed(struct rowlog *l, io_ctx *io, const uint8_t *live)
{
	static uint64_t ids[KN];
	static unsigned char got[KN * RB];
	static uint32_t idx[KN];
	uint64_t *sorted;
	size_t k = 0, ns;

	for (uint64_t i = 0; i < KN; i++) {
		if (rowlog_has(l, key_of(i)) != (live[i] != 0))
			fail_msg("key %llu (#%llu): has %d, live %d",
				 (unsigned long long)key_of(i),
				 (unsigned long long)i,
				 rowlog_has(l, key_of(i)), live[i]);
		if (live[i]) {
			ids[k] = key_of(i);
			idx[k] = (uint32_t)k;
			k++;
		}
	}
	assert_int_equal(rowlog_count(l), k);
	for (size_t i = 0; i < k; i += 256)
		assert_int_equal(rowlog_read(l, io, ids, idx + i,
					     k - i < 256 ? k - i : 256, got),
				 0);
	for (uint64_t i = 0, j = 0; i < KN; i++) {
		unsigned char want[RB];

		if (!live[i])
			continue;
		fill(key_of(i), live[i], want);
		if (memcmp(want, got + j * RB, RB))
			fail_msg("key #%llu reads back wrong",
				 (unsigned long long)i);
		j++;
	}
	assert_int_equal(rowlog_rows_sorted(l, &sorted, &ns), 0);
	assert_int_equal(ns, k);
	for (size_t i = 1; i < ns; i++)
		assert_true(sorted[i - 1] < sorted[i]);
	free(sorted);
}

static void append_keys(struct rowlog *l, io_ctx *io, uint8_t *live,
			uint64_t i0, uint64_t i1, uint64_t step, uint8_t round)
{
	for (uint64_t i = i0; i < i1; i += step) {
		uint64_t id = key_of(i);
		unsigned char buf[RB];

		fill(id, round, buf);
		assert_int_equal(rowlog_append(l, io, &id, 1, buf), 0);
		live[i] = round;
	}
}

static void erase_keys(struct rowlog *l, uint8_t *live, uint64_t i0,
		       uint64_t i1, uint64_t step)
{
	for (uint64_t i = i0; i < i1; i += step) {
		uint64_t id = key_of(i), n;

		assert_int_equal(rowlog_erase(l, &id, 1, &n), 0);
		assert_int_equal(n, live[i] != 0);
		live[i] = 0;
	}
}

static void commit(struct rowlog *l, io_ctx *io, uint64_t c,
		   struct jr_expect *x)
{
	struct jr_tail t;

	assert_int_equal(rowlog_commit_prepare(l, io, c), 0);
	rowlog_tail(l, &t);
	rowlog_commit_done(l, c, true);
	*x = (struct jr_expect){
	    .mode = JR_NAMED, .commit = c, .jlen = t.len, .jsum = t.sum};
}

/* Keys anywhere in u64 (0 and UINT64_MAX too) are distinct entries;
 * erased keys leave the index and, through the journal's tombstones, stay
 * gone after a reopen, while a key erased and appended again in one
 * commit comes back with its new value. The index's deletions keep every
 * other key findable (checked against a reference after each step). */
static void test_keyed_erase_reopen(void **state)
{
	const char *path = tu_path("keyed");
	static uint8_t live[KN], live1[KN];
	struct jr_expect x = {.mode = JR_UNNAMED}, x1;
	struct rowlog *l;
	uint64_t n;
	io_ctx *io;
	int why;

	(void)state;
	if (io_open(64, &io, &why))
		skip();
	if (rowlog_open(path, RB, 0, &x, false, &l)) {
		io_close(io);
		skip();
	}
	append_keys(l, io, live, 0, KN, 1, 1);
	check_keyed(l, io, live);
	commit(l, io, 1, &x);
	/* commit 2: erase every third key and the edges; rewrite every
	 * fifth; erase then re-append every seventh */
	erase_keys(l, live, 0, KN, 3);
	erase_keys(l, live, 0, 6, 1);
	append_keys(l, io, live, 0, KN, 5, 2);
	erase_keys(l, live, 0, KN, 7);
	append_keys(l, io, live, 0, KN, 7, 3);
	check_keyed(l, io, live);
	memcpy(live1, live, sizeof(live));
	commit(l, io, 2, &x1);
	/* erasing a key the log does not hold erases nothing */
	{
		uint64_t id = key_of(3);

		assert_int_equal(rowlog_erase(l, &id, 1, &n), 0);
		assert_int_equal(n, 0);
	}
	rowlog_close(l);
	assert_int_equal(rowlog_open(path, RB, 0, &x1, true, &l), 0);
	check_keyed(l, io, live1);
	rowlog_close(l);
	/* a reader of commit 1 still sees every key */
	memset(live, 1, sizeof(live));
	assert_int_equal(rowlog_open(path, RB, 0, &x, true, &l), 0);
	check_keyed(l, io, live);
	/* a read-only log erases nothing */
	{
		uint64_t id = key_of(0);

		assert_int_equal(rowlog_erase(l, &id, 1, &n), -EBADF);
	}
	rowlog_close(l);
	/* a row-indexed log does not take tombstones or erase */
	assert_int_equal(rowlog_open(path, RB, ROWS, &x1, true, &l),
			 ET_EJOURNAL);
	io_close(io);
}

/* Stamps: a row's stamp is the tick of its newest append; rows not
 * appended for `after` ticks are listed as expired, others not. */
static int u64_order(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* rowlog_over(l, keep) of a log of keys 0 .. 999 is the smallest keys
 * of the odd i in [i0, i1). */
static void over_check(struct rowlog *l, uint64_t keep, uint64_t i0,
		       uint64_t i1)
{
	uint64_t want[1000], *rows;
	size_t n, k = 0;

	for (uint64_t i = i0; i < i1; i += 2)
		want[k++] = key_of(i);
	qsort(want, k, sizeof(*want), u64_order);
	assert_int_equal(rowlog_over(l, keep, 0, 0, &rows, &n), 0);
	assert_int_equal(n, 1000 - keep);
	assert_true(n <= k);
	qsort(rows, n, sizeof(*rows), u64_order);
	assert_memory_equal(rows, want, n * sizeof(*rows));
	free(rows);
}

static void test_keyed_stamps(void **state)
{
	const char *path = tu_path("stamps");
	static uint8_t live[KN];
	struct jr_expect x = {.mode = JR_UNNAMED};
	struct rowlog *l;
	uint64_t *rows;
	size_t n;
	io_ctx *io;
	int why;

	(void)state;
	if (io_open(64, &io, &why))
		skip();
	if (rowlog_open(path, RB, 0, &x, false, &l)) {
		io_close(io);
		skip();
	}
	assert_int_equal(rowlog_stamps(l, 10), 0);
	append_keys(l, io, live, 0, 1000, 1, 1);
	assert_int_equal(rowlog_stamps(l, 11), 0);
	append_keys(l, io, live, 0, 1000, 2, 2); /* the even ones again */
	assert_int_equal(rowlog_expired(l, 12, 2, &rows, &n), 0);
	assert_int_equal(n, 500);
	for (size_t i = 0; i < n; i++) {
		uint64_t j;

		for (j = 0; j < 1000 && key_of(j) != rows[i]; j++)
			;
		assert_true(j < 1000 && j % 2 == 1);
	}
	free(rows);
	assert_int_equal(rowlog_expired(l, 12, 3, &rows, &n), 0);
	assert_int_equal(n, 0);
	assert_int_equal(rowlog_expired(l, 13, 2, &rows, &n), 0);
	assert_int_equal(n, 1000);
	free(rows);
	/* the bound: 400 over 600, all of stamp 10 (the odd ones), the
	 * smallest; then with stamps 2^30 apart (sorted, not counted) */
	over_check(l, 600, 1, 1000);
	assert_int_equal(rowlog_stamps(l, 1u << 30), 0);
	append_keys(l, io, live, 0, 10, 1, 3);
	over_check(l, 995, 11, 1000);
	assert_int_equal(rowlog_over(l, 1000, 0, 0, &rows, &n), 0);
	assert_int_equal(n, 0);
	rowlog_close(l);
	io_close(io);
}

/* Scores: the model keeps, per key, the ticks it was appended in, and
 * scores it from scratch as the sum over them of 2^(epoch(c) - epoch(N))
 * (epoch = tick / half): no incremental update shared with the log. */
#define SN    600
#define SHALF 3

struct skey {
	uint32_t ticks[32], nt; /* since it was last stored */
	bool live;
};

static double model_score(const struct skey *k, uint32_t now)
{
	double v = 0;

	for (uint32_t i = 0; i < k->nt; i++)
		v +=
		    ldexp(1.0, (int)(k->ticks[i] / SHALF) - (int)(now / SHALF));
	return v;
}

static struct skey *model_keys;
static uint32_t model_now;

static int model_order(const void *a, const void *b)
{
	const struct skey *x = &model_keys[*(const uint32_t *)a];
	const struct skey *y = &model_keys[*(const uint32_t *)b];
	double sx = model_score(x, model_now), sy = model_score(y, model_now);
	uint32_t tx = x->ticks[x->nt - 1], ty = y->ticks[y->nt - 1];
	uint64_t kx = key_of(*(const uint32_t *)a),
		 ky = key_of(*(const uint32_t *)b);

	if (sx != sy)
		return sx < sy ? -1 : 1;
	if (tx != ty)
		return tx < ty ? -1 : 1;
	return kx < ky ? -1 : kx > ky;
}

/* rowlog_over(l, keep) by score at tick now is the model's order's
 * first rows. */
static void score_check(struct rowlog *l, struct skey *keys, uint64_t keep,
			uint32_t now)
{
	uint32_t ord[SN], nl = 0;
	uint64_t want[SN], *rows;
	size_t n;

	for (uint32_t i = 0; i < SN; i++)
		if (keys[i].live)
			ord[nl++] = i;
	model_keys = keys;
	model_now = now;
	qsort(ord, nl, sizeof(*ord), model_order);
	assert_true(keep < nl);
	for (uint32_t i = 0; i < nl - keep; i++)
		want[i] = key_of(ord[i]);
	assert_int_equal(rowlog_over(l, keep, now, SHALF, &rows, &n), 0);
	assert_int_equal(n, nl - keep);
	qsort(rows, n, sizeof(*rows), u64_order);
	qsort(want, n, sizeof(*want), u64_order);
	assert_memory_equal(rows, want, n * sizeof(*rows));
	free(rows);
}

/* Over commits 1 .. 12, keys appended each with odds of their own
 * (some once, some at every commit, some twice in one commit), some
 * erased and stored again; the bound by score matches the model at every
 * commit, before and after a reopen (the scores come back from scored
 * batches and snapshots, not restarted), and a log with stamps only
 * that turns scores on counts its rows as 1 each from then on. */
static void test_keyed_scores(void **state)
{
	const char *path = tu_path("scores");
	static struct skey keys[SN];
	static uint8_t live[KN];
	struct jr_expect x = {.mode = JR_UNNAMED};
	struct rowlog *l;
	io_ctx *io;
	int why;

	(void)state;
	memset(keys, 0, sizeof(keys));
	if (io_open(64, &io, &why))
		skip();
	if (rowlog_open(path, RB, 0, &x, false, &l)) {
		io_close(io);
		skip();
	}
	/* commits 1, 2 with stamps only: scores start at 1 at commit 3 */
	assert_int_equal(rowlog_stamps(l, 1), 0);
	append_keys(l, io, live, 0, SN, 1, 1);
	commit(l, io, 1, &x);
	append_keys(l, io, live, 0, SN, 3, 2);
	commit(l, io, 2, &x);
	assert_int_equal(rowlog_scores(l, 3, SHALF), 0);
	for (uint32_t i = 0; i < SN; i++) {
		keys[i].live = true;
		keys[i].ticks[keys[i].nt++] = i % 3 ? 1 : 2;
	}
	for (uint32_t c = 3; c <= 12; c++) {
		for (uint32_t i = 0; i < SN; i++) {
			uint64_t h = hash_mix(i * 131 + c);
			uint32_t odds = i % 7; /* in 7: 0 never, 6 mostly */
			struct skey *k = &keys[i];

			if (c % 4 == 0 && h % 50 == 0 && k->live) {
				erase_keys(l, live, i, i + 1, 1);
				k->live = false;
				k->nt = 0;
				continue;
			}
			if (h % 7 >= 7 - odds) {
				for (uint64_t twice = 0; twice <= (h >> 20) % 2;
				     twice++)
					append_keys(l, io, live, i, i + 1, 1,
						    (uint8_t)(c + 2));
				if (k->nt == 32)
					memmove(k->ticks, k->ticks + 1,
						--k->nt * sizeof(*k->ticks));
				if (!k->live)
					k->nt = 0;
				k->ticks[k->nt++] = c;
				k->live = true;
			}
		}
		score_check(l, keys, SN / 2, c);
		commit(l, io, c, &x);
		if (c % 4 == 2) { /* reopen, as a store does */
			rowlog_close(l);
			assert_int_equal(
			    rowlog_open(path, RB, 0, &x, false, &l), 0);
			assert_int_equal(rowlog_scores(l, c + 1, SHALF), 0);
		}
		score_check(l, keys, SN / 3, c + 1);
	}
	rowlog_close(l);
	io_close(io);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_index_and_reopen),
	    cmocka_unit_test(test_prepare_retried),
	    cmocka_unit_test(test_journal_batch_over_2gib),
	    cmocka_unit_test(test_keyed_erase_reopen),
	    cmocka_unit_test(test_keyed_stamps),
	    cmocka_unit_test(test_keyed_scores),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
