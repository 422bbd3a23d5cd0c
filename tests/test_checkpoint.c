/*
 * test_checkpoint.c - the commit record (src/disk/checkpoint.h) as a unit:
 *
 *   - ckpt_write then ckpt_read gives back the commit, id, flags, every
 *     table of the list and the dense state (0, 1 and 100000 bytes); no
 *     record reads as version 0;
 *   - every single-byte flip of a small record is ET_ERECORD with a
 *     detail naming the file: at once in the header and the table list,
 *     in the dense state when the state is asked for or check_dense;
 *   - a record cut at every length, or one byte too long, is ET_ERECORD;
 *   - a record (checksums right) naming a table twice, a bad name, or a
 *     journal length without a checksum or the reverse is ET_ERECORD;
 *   - version 1 and 2 records, built by hand, still read, and refuse
 *     every flip and cut;
 *   - ckpt_find;
 *   - the fio fault seam fails ckpt_write at each step (header, dense
 *     state, fsync, rename, directory sync): *placed is false before the
 *     rename, the old record still reads, and true after it.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "checkpoint.h"
#include "embtier.h"
#include "le.h"
#include "error.h"
#include "fileio.h"
#include "hash.h"
#include "util.h"

/* ------------------------------------------------------------ helpers */

static const char *dirs[64]; /* tu_path()'s strings */
static int ndirs;

static void sweep_dirs(void)
{
	char p[4300];

	for (int i = 0; i < ndirs; i++) {
		snprintf(p, sizeof(p), "%s/CHECKPOINT", dirs[i]);
		unlink(p);
		snprintf(p, sizeof(p), "%s/CHECKPOINT.tmp", dirs[i]);
		unlink(p);
		rmdir(dirs[i]);
	}
}

/* A fresh empty directory, removed at exit (before util.c's sweep). */
static const char *fresh_dir(const char *tag, char *ck)
{
	const char *d = tu_path(tag);

	if (!ndirs)
		atexit(sweep_dirs);
	assert_true(ndirs < 64);
	assert_int_equal(mkdir(d, 0755), 0);
	dirs[ndirs++] = d;
	snprintf(ck, 4200, "%s/CHECKPOINT", d);
	return d;
}

static const struct ckpt_table tabs[3] = {
    {"user_id", 4096, 0x1111222233334444ull, 0x5555666677778888ull,
     7u << 1 | 1},
    {"item.v2-x", 123, 0xdeadbeefcafef00dull, 0, 0},
    {"empty", 0, 0, 0, 0},
};

static struct ckpt_rec rec(uint64_t commit, uint64_t id, uint32_t flags,
			   uint32_t nt)
{
	return (struct ckpt_rec){.commit = commit,
				 .id = id,
				 .flags = flags,
				 .ntables = nt,
				 .tables = (struct ckpt_table *)tabs};
}

static void write_ok(const char *dir, const struct ckpt_rec *r,
		     const void *dense, size_t len)
{
	bool placed = false;

	assert_int_equal(ckpt_write(dir, r, dense, len, &placed), 0);
	assert_true(placed);
}

/* path made anew with the n bytes at b. */
static void put_file(const char *path, const void *b, size_t n)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, b, n), (ssize_t)n);
	assert_int_equal(close(fd), 0);
}

static void fill(unsigned char *p, size_t n, uint64_t seed)
{
	struct tu_rng g;

	tu_rng_seed(&g, seed);
	for (size_t i = 0; i < n; i++)
		p[i] = (unsigned char)tu_rng_next(&g);
}

/* ckpt_read expected to refuse: ET_ERECORD, a detail naming the file, and
 * nothing handed back. */
static void refused(const char *dir, const char *ck, bool check, bool want)
{
	struct ckpt_rec r;
	void *d = (void *)1;
	size_t n = 7;

	err_clear();
	assert_int_equal(ckpt_read(dir, &r, check, want ? &d : NULL, &n),
			 ET_ERECORD);
	assert_non_null(strstr(et_errdetail(), ck));
	assert_null(r.tables);
	assert_int_equal(r.ntables, 0);
	if (want)
		assert_null(d);
}

/* A version 3 record by hand, checksums right: nt raw 64-byte names. */
static void build_v3(const char *ck, const char (*names)[64],
		     const uint64_t *jlen, const uint64_t *jsum, uint32_t nt)
{
	unsigned char b[56 + 8 * 96] = {0};
	size_t hl = 56 + (size_t)nt * 96;

	memcpy(b, "ETCKPT03", 8);
	put64(b + 8, 5);
	put64(b + 16, 2);
	put32(b + 28, nt);
	put64(b + 40, hash_bytes("", 0));
	for (uint32_t i = 0; i < nt; i++) {
		memcpy(b + 56 + i * 96, names[i], 64);
		put64(b + 56 + i * 96 + 64, jlen[i]);
		put64(b + 56 + i * 96 + 72, jsum[i]);
	}
	put64(b + 48, hash_bytes2(b, 48, b + 56, hl - 56));
	put_file(ck, b, hl);
}

/* ------------------------------------------------------------ the tests */

static void test_round_trip(void **state)
{
	static const size_t lens[3] = {0, 1, 100000};
	unsigned char *dense = tu_calloc(100000, 1);
	char ck[4200];
	const char *dir = fresh_dir("ck-rt", ck);
	struct ckpt_rec r;
	void *d;
	size_t n;

	(void)state;
	assert_int_equal(ckpt_read(dir, &r, true, &d, &n), 0);
	assert_int_equal(r.version, 0);
	assert_int_equal(r.ntables, 0);
	assert_null(r.tables);
	assert_null(d);
	assert_int_equal(n, 0);
	fill(dense, 100000, 42);
	for (int k = 0; k < 3; k++) {
		struct ckpt_rec w = rec(10 + k, 3 + k, CKPT_MOVED * (k & 1), 3);

		write_ok(dir, &w, dense, lens[k]);
		assert_int_equal(tu_file_size(ck), 56 + 3 * 96 + lens[k]);
		assert_int_equal(ckpt_read(dir, &r, false, &d, &n), 0);
		assert_int_equal(r.version, 3);
		assert_int_equal(r.commit, 10 + k);
		assert_int_equal(r.id, 3 + k);
		assert_int_equal(r.flags, CKPT_MOVED * (k & 1));
		assert_int_equal(r.ntables, 3);
		assert_int_equal(r.dense_len, lens[k]);
		for (int i = 0; i < 3; i++) {
			assert_string_equal(r.tables[i].name, tabs[i].name);
			assert_int_equal(r.tables[i].jlen, tabs[i].jlen);
			assert_int_equal(r.tables[i].jsum, tabs[i].jsum);
			assert_int_equal(r.tables[i].asum, tabs[i].asum);
			assert_int_equal(r.tables[i].aref, tabs[i].aref);
		}
		assert_non_null(d);
		assert_int_equal(n, lens[k]);
		assert_memory_equal(d, dense, lens[k]);
		free(d);
		ckpt_rec_free(&r);
		assert_null(r.tables);
		/* without the state, checked or not */
		for (int c = 0; c < 2; c++) {
			assert_int_equal(ckpt_read(dir, &r, c, NULL, NULL), 0);
			assert_int_equal(r.commit, 10 + k);
			assert_int_equal(r.dense_len, lens[k]);
			ckpt_rec_free(&r);
		}
	}
	/* no tables at all */
	struct ckpt_rec w = rec(99, 0, 0, 0);
	write_ok(dir, &w, NULL, 0);
	assert_int_equal(ckpt_read(dir, &r, true, NULL, NULL), 0);
	assert_int_equal(r.version, 3);
	assert_int_equal(r.commit, 99);
	assert_int_equal(r.ntables, 0);
	assert_null(ckpt_find(&r, "user_id"));
	ckpt_rec_free(&r);
	free(dense);
}

static void test_every_flip_refused(void **state)
{
	static const uint8_t masks[3] = {0x01, 0x80, 0xff};
	unsigned char dense[16];
	char ck[4200];
	const char *dir = fresh_dir("ck-flip", ck);
	struct ckpt_rec w = rec(7, 4, CKPT_MOVED, 2), r;
	int64_t size, hl = 56 + 2 * 96;

	(void)state;
	fill(dense, sizeof(dense), 7);
	write_ok(dir, &w, dense, sizeof(dense));
	size = tu_file_size(ck);
	assert_int_equal(size, hl + (int64_t)sizeof(dense));
	for (int m = 0; m < 3; m++)
		for (int64_t off = 0; off < size; off++) {
			assert_int_equal(tu_flip_byte(ck, off, masks[m]), 0);
			if (off < hl) {
				refused(dir, ck, false, false);
			} else {
				/* the state is checked only when asked for */
				assert_int_equal(
				    ckpt_read(dir, &r, false, NULL, NULL), 0);
				assert_int_equal(r.commit, 7);
				ckpt_rec_free(&r);
				refused(dir, ck, true, false);
				refused(dir, ck, false, true);
			}
			assert_int_equal(tu_flip_byte(ck, off, masks[m]), 0);
		}
	assert_int_equal(ckpt_read(dir, &r, true, NULL, NULL), 0);
	assert_int_equal(r.commit, 7);
	ckpt_rec_free(&r);
}

static void test_truncation_refused(void **state)
{
	unsigned char dense[24], all[56 + 2 * 96 + 24];
	char ck[4200];
	const char *dir = fresh_dir("ck-cut", ck);
	struct ckpt_rec w = rec(3, 1, 0, 2), r;
	int64_t size;

	(void)state;
	fill(dense, sizeof(dense), 3);
	write_ok(dir, &w, dense, sizeof(dense));
	size = tu_file_size(ck);
	assert_int_equal(size, (int64_t)sizeof(all));
	assert_int_equal(tu_pread(ck, 0, all, sizeof(all)), 0);
	for (int64_t len = 0; len < size; len++) {
		assert_int_equal(tu_truncate(ck, len), 0);
		refused(dir, ck, false, false);
		refused(dir, ck, true, false);
		assert_int_equal(tu_pwrite(ck, len, all + len, size - len), 0);
	}
	/* a byte too many */
	assert_int_equal(tu_pwrite(ck, size, "x", 1), 0);
	refused(dir, ck, false, false);
	assert_int_equal(tu_truncate(ck, size), 0);
	assert_int_equal(ckpt_read(dir, &r, true, NULL, NULL), 0);
	assert_int_equal(r.ntables, 2);
	ckpt_rec_free(&r);
}

static void test_bad_table_list(void **state)
{
	static const char *bad_names[] = {"",	    ".hidden", "a/b",
					  "sp ace", "tab\tx",  "caf\xc3\xa9"};
	char ck[4200], names[3][64];
	const char *dir = fresh_dir("ck-tabs", ck);
	uint64_t jlen[3] = {10, 20, 30}, jsum[3] = {1, 2, 3};
	struct ckpt_rec r;

	(void)state;
	/* the builder is right: three good names, one of all 64 bytes */
	memset(names, 0, sizeof(names));
	strcpy(names[0], "a");
	strcpy(names[1], "b.c-d_E9");
	memset(names[2], 'z', 64);
	build_v3(ck, names, jlen, jsum, 3);
	assert_int_equal(ckpt_read(dir, &r, true, NULL, NULL), 0);
	assert_int_equal(r.ntables, 3);
	assert_int_equal(strlen(r.tables[2].name), 64);
	assert_int_equal(r.tables[1].jlen, 20);
	assert_non_null(ckpt_find(&r, "b.c-d_E9"));
	ckpt_rec_free(&r);
	/* a name twice, first and last */
	strcpy(names[2], "a");
	memset(names[2] + 1, 0, 63);
	build_v3(ck, names, jlen, jsum, 3);
	refused(dir, ck, false, false);
	/* bad names, in the middle entry */
	strcpy(names[2], "c");
	for (size_t i = 0; i < sizeof(bad_names) / sizeof(*bad_names); i++) {
		memset(names[1], 0, 64);
		strcpy(names[1], bad_names[i]);
		build_v3(ck, names, jlen, jsum, 3);
		refused(dir, ck, false, false);
	}
	strcpy(names[1], "b");
	/* a length without a checksum and a checksum without a length */
	jsum[1] = 0;
	build_v3(ck, names, jlen, jsum, 3);
	refused(dir, ck, false, false);
	jsum[1] = 2;
	jlen[1] = 0;
	build_v3(ck, names, jlen, jsum, 3);
	refused(dir, ck, false, false);
	/* ckpt_write does not check: a duplicate it writes is refused */
	struct ckpt_table dup[2] = {{"same", 1, 1, 0, 0}, {"same", 2, 2, 0, 0}};
	struct ckpt_rec w = {.commit = 1, .ntables = 2, .tables = dup};
	write_ok(dir, &w, NULL, 0);
	refused(dir, ck, false, false);
	/* an admission filter's checksum without its file, the file
	 * without a checksum, and a file of commit 0 */
	{
		static const uint64_t bad[3][2] = {{9, 0}, {0, 6}, {9, 1}};

		for (int k = 0; k < 3; k++) {
			struct ckpt_table one[1] = {
			    {"t", 1, 1, bad[k][0], bad[k][1]}};

			w = (struct ckpt_rec){
			    .commit = 1, .ntables = 1, .tables = one};
			write_ok(dir, &w, NULL, 0);
			refused(dir, ck, false, false);
		}
	}
}

/* A version 1 (id, also the commit; length; XXH3 of [0, 24) and the
 * state at 32) or 2 (commit, id, flags, length; XXH3 of [0, 40) and the
 * state at 48) record by hand; returns its size. */
static size_t build_old(const char *ck, int ver, const void *dense, size_t n)
{
	unsigned char b[48 + 64] = {0};
	size_t hl = ver == 1 ? 32 : 48;

	memcpy(b, ver == 1 ? "ETCKPT01" : "ETCKPT02", 8);
	put64(b + 8, ver == 1 ? 6 : 9);
	if (ver == 2) {
		put64(b + 16, 4);
		put32(b + 24, CKPT_MOVED);
	}
	put64(b + hl - 16, n);
	put64(b + hl - 8, hash_bytes2(b, hl - 8, dense, n));
	memcpy(b + hl, dense, n);
	put_file(ck, b, hl + n);
	return hl + n;
}

static void test_old_versions(void **state)
{
	unsigned char dense[40], *d;
	char ck[4200];
	const char *dir = fresh_dir("ck-old", ck);
	struct ckpt_rec r;
	size_t n, size;

	(void)state;
	fill(dense, sizeof(dense), 11);
	for (int ver = 1; ver <= 2; ver++) {
		size = build_old(ck, ver, dense, sizeof(dense));
		assert_int_equal(ckpt_read(dir, &r, false, (void **)&d, &n), 0);
		assert_int_equal(r.version, ver);
		assert_int_equal(r.commit, ver == 1 ? 6 : 9);
		assert_int_equal(r.id, ver == 1 ? 6 : 4);
		assert_int_equal(r.flags, ver == 1 ? 0 : CKPT_MOVED);
		assert_int_equal(r.ntables, 0);
		assert_null(ckpt_find(&r, "user_id"));
		assert_int_equal(r.dense_len, sizeof(dense));
		assert_int_equal(n, sizeof(dense));
		assert_memory_equal(d, dense, sizeof(dense));
		free(d);
		ckpt_rec_free(&r);
		/* one checksum over header and state: checked always */
		for (size_t off = 0; off < size; off++) {
			assert_int_equal(tu_flip_byte(ck, off, 0x10), 0);
			refused(dir, ck, false, false);
			assert_int_equal(tu_flip_byte(ck, off, 0x10), 0);
		}
		for (size_t len = 0; len < size; len++) {
			assert_int_equal(tu_truncate(ck, len), 0);
			refused(dir, ck, false, false);
			build_old(ck, ver, dense, sizeof(dense));
		}
	}
	/* the next write is version 3 */
	struct ckpt_rec w = rec(10, 4, 0, 1);
	write_ok(dir, &w, dense, 3);
	assert_int_equal(ckpt_read(dir, &r, true, NULL, NULL), 0);
	assert_int_equal(r.version, 3);
	assert_int_equal(r.dense_len, 3);
	ckpt_rec_free(&r);
}

static void test_find(void **state)
{
	char ck[4200];
	const char *dir = fresh_dir("ck-find", ck);
	struct ckpt_rec w = rec(1, 1, 0, 3), r, none = {0};
	const struct ckpt_table *t;

	(void)state;
	write_ok(dir, &w, NULL, 0);
	assert_int_equal(ckpt_read(dir, &r, true, NULL, NULL), 0);
	for (int i = 0; i < 3; i++) {
		t = ckpt_find(&r, tabs[i].name);
		assert_ptr_equal(t, &r.tables[i]);
		assert_int_equal(t->jlen, tabs[i].jlen);
		assert_int_equal(t->jsum, tabs[i].jsum);
	}
	assert_null(ckpt_find(&r, "user"));
	assert_null(ckpt_find(&r, "user_id2"));
	assert_null(ckpt_find(&r, "USER_ID"));
	assert_null(ckpt_find(&r, ""));
	assert_null(ckpt_find(&none, "user_id"));
	ckpt_rec_free(&r);
}

/* Fault k of ckpt_write: steps header, dense (if any), fsync, rename,
 * directory sync. */
static void faults_at(const char *dir, const char *ck, size_t len, int steps,
		      bool have_old)
{
	unsigned char dense[100];
	char tmp[4300];
	struct ckpt_rec w = rec(2, 2, 0, 2), r;
	bool placed;
	void *d;
	size_t n;

	fill(dense, sizeof(dense), 5);
	snprintf(tmp, sizeof(tmp), "%s.tmp", ck);
	for (int k = 1; k <= steps + 1; k++) {
		struct ckpt_rec old = rec(1, 1, 0, 1);

		if (have_old)
			write_ok(dir, &old, "old", 3);
		else
			tu_unlink(ck);
		placed = k > steps ? false : k != steps;
		fio_fault_set(k, EIO);
		int ret = ckpt_write(dir, &w, dense, len, &placed);
		bool fired = fio_fault_fired();
		fio_fault_clear();
		if (k > steps) { /* past the last step: no fault */
			assert_int_equal(ret, 0);
			assert_false(fired);
			assert_true(placed);
		} else {
			assert_int_equal(ret, -EIO);
			assert_true(fired);
			assert_int_equal(placed, k == steps);
		}
		assert_int_equal(access(tmp, F_OK), -1);
		assert_int_equal(ckpt_read(dir, &r, true, &d, &n), 0);
		if (placed) {
			assert_int_equal(r.commit, 2);
			assert_int_equal(r.ntables, 2);
			assert_int_equal(n, len);
			assert_memory_equal(d, dense, len);
		} else if (have_old) {
			assert_int_equal(r.commit, 1);
			assert_int_equal(r.ntables, 1);
			assert_int_equal(n, 3);
			assert_memory_equal(d, "old", 3);
		} else {
			assert_int_equal(r.version, 0);
		}
		free(d);
		ckpt_rec_free(&r);
	}
}

static void test_write_faults(void **state)
{
	char ck[4200];
	const char *dir = fresh_dir("ck-fault", ck);

	(void)state;
	faults_at(dir, ck, 100, 5,
		  true);		/* header, dense, fsync, rename, dir */
	faults_at(dir, ck, 0, 4, true); /* no dense write */
	faults_at(dir, ck, 100, 5, false);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_round_trip),
	    cmocka_unit_test(test_every_flip_refused),
	    cmocka_unit_test(test_truncation_refused),
	    cmocka_unit_test(test_bad_table_list),
	    cmocka_unit_test(test_old_versions),
	    cmocka_unit_test(test_find),
	    cmocka_unit_test(test_write_faults),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
