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
#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cmocka.h>

#include "embtier.h"
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

static void test_index_and_reopen(void **state)
{
	const char *path = tu_path("rowlog");
	struct jr_expect x = {.mode = JR_UNNAMED};
	struct jr_tail t1, t2;
	struct rowlog *l;
	io_ctx *io;
	int why;

	(void)state;
	if (io_open(64, &io, &why))
		skip();
	if (rowlog_open(path, RB, ROWS, &x, false, &l)) {
		io_close(io);
		skip();
	}
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

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_index_and_reopen),
	    cmocka_unit_test(test_journal_batch_over_2gib),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
