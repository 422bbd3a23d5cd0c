/*
 * test_bench.c - the parts of embtier-bench with exact answers.
 *
 * The benchmark's modules with exact answers (workload.c, convert.c,
 * belady.c, learner.c, oracle.c) depend on libc alone and are linked into
 * this program, tested through their headers: trace files round-trip bit
 * for bit (header bytes included), malformed traces and text are refused
 * with the line or batch named and no output left behind, the Zipf sampler
 * stays in range and matches k^-s / H(n, s), the id bijection is one, the
 * shifting hot set moves only at its period, generators are deterministic,
 * and Belady's MIN gives the textbook miss count and the exhaustive-search
 * optimum on random small traces; the distribution oracle (oracle.c)
 * evicts the resident row of the highest rank, ties between tables to the
 * higher table, with the ranks of the current shift phase. The built tool
 * ($ET_BUILD/embtier-bench) is run for --help, a usage error, convert and
 * gen; those tests skip, saying so, if it has not been built (`make
 * bench`).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <setjmp.h>
#include <spawn.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "util.h"

#include "../bench/belady.h"
#include "../bench/learner.h"
#include "../bench/oracle.h"
#include "../bench/workload.h"

extern char **environ;

/* ------------------------------------------------------------ helpers */

/* Little-endian integers of a trace's bytes, decoded here on their own
 * (TRACE.md), not with workload.c's code. */
static uint32_t le32(const unsigned char *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

static uint64_t le64(const unsigned char *p)
{
	return (uint64_t)le32(p) | (uint64_t)le32(p + 4) << 32;
}

static char *slurp(const char *path, size_t *len)
{
	FILE *f = fopen(path, "rb");
	char *buf;
	long n;

	assert_non_null(f);
	assert_int_equal(fseek(f, 0, SEEK_END), 0);
	n = ftell(f);
	rewind(f);
	buf = malloc((size_t)n + 1);
	assert_non_null(buf);
	assert_int_equal(fread(buf, 1, (size_t)n, f), (size_t)n);
	buf[n] = '\0';
	fclose(f);
	if (len)
		*len = (size_t)n;
	return buf;
}

static void spit(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");

	assert_non_null(f);
	assert_int_equal(fputs(text, f) >= 0, 1);
	assert_int_equal(fclose(f), 0);
}

static bool exists(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0;
}

/* A batch of tables (ids given per table, -1 terminated lists). */
static void make_batch(struct wl_batch *b, uint32_t count,
		       const uint32_t *tables, const uint32_t *ns,
		       uint64_t seed, const uint64_t *rows)
{
	struct wl_rng r;

	wl_rng_seed(&r, seed);
	assert_int_equal(wl_batch_reset(b, count), 0);
	for (uint32_t i = 0; i < count; i++) {
		assert_int_equal(wl_batch_table(b, i, tables[i], ns[i], 0), 0);
		for (uint32_t j = 0; j < ns[i]; j++)
			b->t[i].ids[j] = wl_rng_below(&r, rows[tables[i]]);
	}
}

static void assert_same_ids(const struct wl_batch *a, const struct wl_batch *b)
{
	assert_int_equal(a->count, b->count);
	for (uint32_t i = 0; i < a->count; i++) {
		assert_int_equal(a->t[i].table, b->t[i].table);
		assert_int_equal(a->t[i].n, b->t[i].n);
		assert_memory_equal(a->t[i].ids, b->t[i].ids,
				    (size_t)a->t[i].n * 8);
	}
}

/* The tool, or NULL (and the test skipped) if it is not built. */
static const char *tool(void)
{
	static char path[PATH_MAX];
	const char *b = getenv("ET_BUILD");

	snprintf(path, sizeof(path), "%s/embtier-bench", b && *b ? b : "build");
	if (access(path, X_OK)) {
		fprintf(stderr, "skipped: %s not built (make bench)\n", path);
		skip();
	}
	return path;
}

struct run {
	int status;
	char *out, *err;
};

/* Runs argv with stdout and stderr captured through scratch files. */
static void run_tool(struct run *r, const char *const *args)
{
	const char *po = tu_path("out"), *pe = tu_path("err");
	posix_spawn_file_actions_t fa;
	char *argv[32];
	int n = 0, status;
	pid_t pid;

	argv[n++] = (char *)tool();
	for (; *args; args++) {
		assert_true(n < 31);
		argv[n++] = (char *)*args;
	}
	argv[n] = NULL;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 1, po, O_WRONLY | O_CREAT, 0600);
	posix_spawn_file_actions_addopen(&fa, 2, pe, O_WRONLY | O_CREAT, 0600);
	assert_int_equal(posix_spawn(&pid, argv[0], &fa, NULL, argv, environ),
			 0);
	posix_spawn_file_actions_destroy(&fa);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	r->status =
	    WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
	r->out = slurp(po, NULL);
	r->err = slurp(pe, NULL);
}

static void run_free(struct run *r)
{
	free(r->out);
	free(r->err);
}

static unsigned lines(const char *s)
{
	unsigned n = 0;

	for (; *s; s++)
		n += *s == '\n';
	return n;
}

/* ------------------------------------------------------------ traces */

static void test_trace_roundtrip(void **state)
{
	const char *path = tu_path("rt.trace");
	const uint64_t rows[4] = {1000, 0, 1ULL << 40, 7};
	const uint32_t t0[] = {0, 2, 3}, n0[] = {45, 3, 0};
	const uint32_t t1[] = {2}, n1[] = {1};
	struct wl_trace_writer w;
	struct wl_trace_reader r;
	struct wl_batch in[3], out;
	unsigned char *raw;
	size_t len;

	(void)state;
	for (int i = 0; i < 3; i++)
		wl_batch_init(&in[i]);
	wl_batch_init(&out);
	make_batch(&in[0], 3, t0, n0, 1, rows);
	make_batch(&in[1], 1, t1, n1, 2, rows);
	in[1].t[0].ids[0] = (1ULL << 40) - 1;		/* the largest id */
	assert_int_equal(wl_batch_reset(&in[2], 0), 0); /* an empty batch */

	assert_int_equal(wl_trace_create(&w, path, 4, rows, 20, false), 0);
	for (int i = 0; i < 3; i++)
		assert_int_equal(wl_trace_write(&w, &in[i]), 0);
	assert_int_equal(wl_trace_finish(&w), 0);

	/* The bytes: header fields little-endian where TRACE.md says. */
	raw = (unsigned char *)slurp(path, &len);
	assert_memory_equal(raw, "EMBTRACE", 8);
	assert_int_equal(le32(raw + 8), 1);
	assert_int_equal(le32(raw + 12), 4);
	assert_int_equal(le32(raw + 16), 20);
	assert_int_equal(le32(raw + 20), 0);
	assert_int_equal(le64(raw + 24), 3);
	assert_int_equal(le64(raw + 32 + 16), 1ULL << 40);
	assert_int_equal(le32(raw + 64), WL_TRACE_BATCH);
	assert_memory_equal(raw + 64, "BTCH", 4);
	assert_int_equal(le32(raw + 68), 3);
	assert_int_equal(le32(raw + 72), 0);  /* table 0 */
	assert_int_equal(le32(raw + 76), 45); /* n */
	assert_int_equal(le64(raw + 80), in[0].t[0].ids[0]);
	/* header + 3 batch heads + 4 table heads + 49 ids */
	assert_int_equal(len, 64 + 3 * 8 + 4 * 8 + 49 * 8);
	free(raw);

	assert_int_equal(wl_trace_open(&r, path), 0);
	assert_int_equal(r.ntables, 4);
	assert_int_equal(r.pooling, 20);
	assert_int_equal(r.nbatches, 3);
	assert_memory_equal(r.rows, rows, sizeof(rows));
	for (int pass = 0; pass < 2; pass++) {
		for (int i = 0; i < 3; i++) {
			assert_int_equal(wl_trace_read(&r, &out, 0), 1);
			assert_same_ids(&in[i], &out);
		}
		assert_int_equal(wl_trace_read(&r, &out, 0), 0);
		assert_int_equal(wl_trace_rewind(&r), 0);
	}
	/* Bags of the hint (20): 45 ids -> 0, 20, 40, 45. */
	assert_int_equal(wl_trace_read(&r, &out, 0), 1);
	assert_int_equal(out.t[0].nbags, 3);
	assert_int_equal(out.t[0].offsets[1], 20);
	assert_int_equal(out.t[0].offsets[2], 40);
	assert_int_equal(out.t[0].offsets[3], 45);
	assert_int_equal(out.t[1].nbags, 1); /* 3 ids, one short bag */
	assert_int_equal(out.t[2].nbags, 0); /* no ids, no bag */
	assert_int_equal(out.t[2].offsets[0], 0);
	/* An explicit pooling wins over the hint. */
	assert_int_equal(wl_trace_rewind(&r), 0);
	assert_int_equal(wl_trace_read(&r, &out, 7), 1);
	assert_int_equal(out.t[0].nbags, 7);
	assert_int_equal(out.t[0].offsets[6], 42);
	wl_trace_close(&r);

	for (int i = 0; i < 3; i++)
		wl_batch_free(&in[i]);
	wl_batch_free(&out);
}

static void expect_bad(const char *path, const char *msg)
{
	struct wl_trace_reader r;
	struct wl_batch b;
	int ret;

	wl_batch_init(&b);
	ret = wl_trace_open(&r, path);
	if (ret == 0) {
		while ((ret = wl_trace_read(&r, &b, 0)) == 1)
			;
		wl_trace_close(&r);
	}
	if (ret != -EBADMSG || !strstr(r.err, msg))
		fprintf(stderr, "got %d '%s', expected '%s'\n", ret, r.err,
			msg);
	assert_int_equal(ret, -EBADMSG);
	assert_non_null(strstr(r.err, msg));
	wl_batch_free(&b);
}

static void test_trace_rejects(void **state)
{
	const char *path = tu_path("bad.trace");
	const uint64_t rows[2] = {10, 10};
	const uint32_t tt[] = {0, 1}, nn[] = {2, 2};
	struct wl_trace_writer w;
	struct wl_batch b;
	unsigned char one;

	(void)state;
	wl_batch_init(&b);
	make_batch(&b, 2, tt, nn, 3, rows);
	assert_int_equal(wl_trace_create(&w, path, 2, rows, 0, false), 0);
	assert_int_equal(wl_trace_write(&w, &b), 0);
	assert_int_equal(wl_trace_write(&w, &b), 0);
	assert_int_equal(wl_trace_finish(&w), 0);
	/* Not replaced without force. */
	assert_int_equal(wl_trace_create(&w, path, 2, rows, 0, false), -EEXIST);

	/* Layout: header 48 bytes; batch 0 at 48 (marker, k, then table
	 * records at 56 and 80, ids at 64 and 88); batch 1 at 104. */
	/* An id out of range, written over the first id of batch 1. */
	one = 10;
	assert_int_equal(tu_pwrite(path, 104 + 16, &one, 1), 0);
	expect_bad(path, "batch 1: table 0: row 10 >= 10 rows");
	one = 0;
	assert_int_equal(tu_pwrite(path, 104 + 16, &one, 1), 0);
	/* Tables out of order in batch 0. */
	one = 1;
	assert_int_equal(tu_pwrite(path, 48 + 8, &one, 1), 0);
	expect_bad(path, "batch 0: bad table record");
	one = 0;
	assert_int_equal(tu_pwrite(path, 48 + 8, &one, 1), 0);
	/* A bad marker in batch 1. */
	one = 'X';
	assert_int_equal(tu_pwrite(path, 104, &one, 1), 0);
	expect_bad(path, "batch 1: bad batch marker");
	one = 'B';
	assert_int_equal(tu_pwrite(path, 104, &one, 1), 0);
	/* Cut inside batch 1: the count says 2. */
	assert_int_equal(tu_truncate(path, 104 + 20), 0);
	expect_bad(path, "truncated");
	assert_int_equal(tu_truncate(path, 104), 0);
	expect_bad(path, "truncated: 1 of 2 batches");
	/* Bad magic and version. */
	one = 'X';
	assert_int_equal(tu_pwrite(path, 0, &one, 1), 0);
	expect_bad(path, "bad magic");
	one = 'E';
	assert_int_equal(tu_pwrite(path, 0, &one, 1), 0);
	one = 2;
	assert_int_equal(tu_pwrite(path, 8, &one, 1), 0);
	expect_bad(path, "version 2");

	/* The writer checks what it is given, and leaves nothing. */
	assert_int_equal(wl_trace_create(&w, path, 2, rows, 0, true), 0);
	b.t[0].ids[0] = 10;
	assert_int_equal(wl_trace_write(&w, &b), -ERANGE);
	assert_int_equal(wl_trace_finish(&w), -ERANGE);
	assert_false(exists(path));
	assert_int_equal(wl_trace_create(&w, path, 2, rows, 0, true), 0);
	b.t[0].ids[0] = 1;
	b.t[1].table = 0;
	assert_int_equal(wl_trace_write(&w, &b), -EINVAL);
	wl_trace_abort(&w);
	assert_false(exists(path));
	wl_batch_free(&b);
}

static void test_convert(void **state)
{
	const char *in = tu_path("in.txt"), *out = tu_path("out.trace");
	struct wl_trace_reader r;
	struct wl_batch b;
	uint64_t nl = 0, nb = 0;
	char err[256];

	(void)state;
	spit(in, "# batch table row\n"
		 "5 2 9\n"
		 "\n"
		 "5 0 3   # comment\n"
		 "5 2 1\n"
		 "5,0,3\n"
		 "8\t1\t4\r\n"
		 "8 0 0\n");
	assert_int_equal(
	    wl_trace_convert(in, out, 4, false, err, sizeof(err), &nl, &nb), 0);
	assert_int_equal(nl, 6);
	assert_int_equal(nb, 2);
	wl_batch_init(&b);
	assert_int_equal(wl_trace_open(&r, out), 0);
	assert_int_equal(r.ntables, 3);
	assert_int_equal(r.pooling, 4);
	assert_int_equal(r.nbatches, 2);
	assert_int_equal(r.rows[0], 4);
	assert_int_equal(r.rows[1], 5);
	assert_int_equal(r.rows[2], 10);
	/* batch "5": table 0 {3, 3}, table 2 {9, 1}, in line order */
	assert_int_equal(wl_trace_read(&r, &b, 0), 1);
	assert_int_equal(b.count, 2);
	assert_int_equal(b.t[0].table, 0);
	assert_int_equal(b.t[0].n, 2);
	assert_int_equal(b.t[0].ids[0], 3);
	assert_int_equal(b.t[0].ids[1], 3);
	assert_int_equal(b.t[1].table, 2);
	assert_int_equal(b.t[1].ids[0], 9);
	assert_int_equal(b.t[1].ids[1], 1);
	/* batch "8": table 0 {0}, table 1 {4} */
	assert_int_equal(wl_trace_read(&r, &b, 0), 1);
	assert_int_equal(b.count, 2);
	assert_int_equal(b.t[0].table, 0);
	assert_int_equal(b.t[0].ids[0], 0);
	assert_int_equal(b.t[1].table, 1);
	assert_int_equal(b.t[1].ids[0], 4);
	assert_int_equal(wl_trace_read(&r, &b, 0), 0);
	wl_trace_close(&r);
	wl_batch_free(&b);

	/* Existing output is kept without force. */
	assert_int_equal(
	    wl_trace_convert(in, out, 0, false, err, sizeof(err), NULL, NULL),
	    -EEXIST);
	assert_true(exists(out));
	tu_unlink(out);

	/* Malformed lines name their line; nothing is left behind. */
	spit(in, "0 0 1\n0 0\n");
	assert_int_not_equal(
	    wl_trace_convert(in, out, 0, false, err, sizeof(err), NULL, NULL),
	    0);
	assert_non_null(strstr(err, ":2: expected"));
	assert_false(exists(out));
	spit(in, "3 0 1\n2 0 1\n");
	assert_int_not_equal(
	    wl_trace_convert(in, out, 0, false, err, sizeof(err), NULL, NULL),
	    0);
	assert_non_null(strstr(err, ":2: batch 2 after batch 3"));
	assert_false(exists(out));
	spit(in, "0 0 1 7\n");
	assert_int_not_equal(
	    wl_trace_convert(in, out, 0, false, err, sizeof(err), NULL, NULL),
	    0);
	assert_non_null(strstr(err, ":1:"));
	spit(in, "0 0 -1\n");
	assert_int_not_equal(
	    wl_trace_convert(in, out, 0, false, err, sizeof(err), NULL, NULL),
	    0);
	spit(in, "0 70000 1\n");
	assert_int_equal(
	    wl_trace_convert(in, out, 0, false, err, sizeof(err), NULL, NULL),
	    -ERANGE);
	spit(in, "# nothing\n\n");
	assert_int_equal(
	    wl_trace_convert(in, out, 0, false, err, sizeof(err), NULL, NULL),
	    -EINVAL);
	assert_false(exists(out));
}

/* ------------------------------------------------------------ generators */

static double harmonic(uint64_t n, double s)
{
	double h = 0;

	for (uint64_t k = n; k >= 1; k--)
		h += pow((double)k, -s);
	return h;
}

static void test_zipf_range_and_skew(void **state)
{
	const uint64_t n = 1000, draws = 400000;
	const double ss[] = {1.15, 0.6, 1.0, 2.5};
	uint64_t *count = calloc(n + 1, sizeof(*count));
	struct wl_rng r;

	(void)state;
	assert_non_null(count);
	for (size_t si = 0; si < sizeof(ss) / sizeof(ss[0]); si++) {
		struct wl_zipf z;
		double h = harmonic(n, ss[si]);

		memset(count, 0, (n + 1) * sizeof(*count));
		wl_zipf_init(&z, n, ss[si]);
		wl_rng_seed(&r, 42 + si);
		for (uint64_t i = 0; i < draws; i++) {
			uint64_t k = wl_zipf_sample(&z, &r);

			assert_true(k >= 1 && k <= n);
			count[k]++;
		}
		/* Ranks 1, 2, 10 and 100 at k^-s / H within 5 sigma. */
		const uint64_t ks[] = {1, 2, 10, 100};
		for (int i = 0; i < 4; i++) {
			double p = pow((double)ks[i], -ss[si]) / h;
			double mean = p * (double)draws;
			double sd = sqrt((double)draws * p * (1 - p));

			if (fabs((double)count[ks[i]] - mean) > 5 * sd + 1)
				fprintf(stderr,
					"s=%g rank %lu: %lu, expected "
					"%.0f +- %.0f\n",
					ss[si], (unsigned long)ks[i],
					(unsigned long)count[ks[i]], mean, sd);
			assert_true(fabs((double)count[ks[i]] - mean) <=
				    5 * sd + 1);
		}
		/* Skewed: rank 1 beats rank 2 beats rank 100. */
		assert_true(count[1] > count[2]);
		assert_true(count[2] > count[100]);
	}
	/* The top 1% of 1000 ranks carries far more than 1% at s=1.15. */
	{
		struct wl_zipf z;
		uint64_t top = 0;

		wl_zipf_init(&z, n, 1.15);
		for (uint64_t i = 0; i < 100000; i++)
			top += wl_zipf_sample(&z, &r) <= 10;
		assert_true(top > 50000);
	}
	/* Huge n: still in range. */
	{
		struct wl_zipf z;

		wl_zipf_init(&z, 1ULL << 40, 1.15);
		for (int i = 0; i < 100000; i++) {
			uint64_t k = wl_zipf_sample(&z, &r);

			assert_true(k >= 1 && k <= 1ULL << 40);
		}
		wl_zipf_init(&z, 1, 1.15);
		assert_int_equal(wl_zipf_sample(&z, &r), 1);
	}
	free(count);
}

static void test_perm_bijective(void **state)
{
	const uint64_t ns[] = {1, 2, 3, 7, 1000, 4096, 5001, 65536};

	(void)state;
	for (size_t i = 0; i < sizeof(ns) / sizeof(ns[0]); i++) {
		uint8_t *seen = calloc(ns[i], 1);
		struct wl_perm p;
		uint64_t fixed = 0;

		assert_non_null(seen);
		wl_perm_init(&p, ns[i], 99 + i);
		for (uint64_t x = 0; x < ns[i]; x++) {
			uint64_t y = wl_perm_apply(&p, x);

			assert_true(y < ns[i]);
			assert_int_equal(seen[y], 0);
			seen[y] = 1;
			fixed += y == x;
		}
		/* scattered, not the identity */
		if (ns[i] >= 1000)
			assert_true(fixed < ns[i] / 100);
		free(seen);
	}
}

static void test_generators(void **state)
{
	struct wl_params p = {
	    .kind = WL_ZIPF,
	    .tables = 3,
	    .rows = 5000,
	    .batch = 50,
	    .pooling = 8,
	    .zipf_s = 1.15,
	    .seed = 7,
	};
	struct wl_gen g1, g2;
	struct wl_batch a, b;
	uint64_t *count;

	(void)state;
	wl_batch_init(&a);
	wl_batch_init(&b);
	count = calloc(p.rows, sizeof(*count));
	assert_non_null(count);

	/* Deterministic, rewindable, in range, bags of the pooling. */
	assert_int_equal(wl_open(&g1, &p), 0);
	assert_int_equal(wl_open(&g2, &p), 0);
	for (int i = 0; i < 4; i++) {
		assert_int_equal(wl_next(&g1, &a), 1);
		assert_int_equal(wl_next(&g2, &b), 1);
		assert_same_ids(&a, &b);
		assert_int_equal(a.count, 3);
		for (uint32_t t = 0; t < 3; t++) {
			assert_int_equal(a.t[t].table, t);
			assert_int_equal(a.t[t].n, 400);
			assert_int_equal(a.t[t].nbags, 50);
			assert_int_equal(a.t[t].offsets[1], 8);
			assert_int_equal(a.t[t].offsets[50], 400);
			for (uint32_t j = 0; j < a.t[t].n; j++) {
				assert_true(a.t[t].ids[j] < p.rows);
				if (t == 0)
					count[a.t[t].ids[j]]++;
			}
		}
	}
	assert_int_equal(wl_rewind(&g1), 0);
	assert_int_equal(wl_next(&g1, &a), 1);
	assert_int_equal(wl_rewind(&g2), 0);
	assert_int_equal(wl_next(&g2, &b), 1);
	assert_same_ids(&a, &b);
	/* Skewed: the hottest id is rank 1's, with about 1/H of the ids. */
	{
		uint64_t best = 0, arg = 0;
		double h = harmonic(p.rows, 1.15);

		for (uint64_t i = 0; i < p.rows; i++)
			if (count[i] > best) {
				best = count[i];
				arg = i;
			}
		assert_int_equal(arg, wl_rank_to_row(&g1, 0, 1, 0));
		assert_true(fabs((double)best / 1600.0 - 1 / h) < 0.05);
		/* and tables have different hot rows */
		assert_int_not_equal(wl_rank_to_row(&g1, 0, 1, 0),
				     wl_rank_to_row(&g1, 1, 1, 0));
	}
	wl_close(&g1);
	wl_close(&g2);

	/* Shift: the order moves every 2 batches by shift_by ranks. */
	p.kind = WL_SHIFT;
	p.shift_every = 2;
	p.shift_by = 100;
	assert_int_equal(wl_open(&g1, &p), 0);
	assert_int_equal(wl_rank_to_row(&g1, 0, 1, 0),
			 wl_rank_to_row(&g1, 0, 1, 1));
	assert_int_not_equal(wl_rank_to_row(&g1, 0, 1, 1),
			     wl_rank_to_row(&g1, 0, 1, 2));
	assert_int_equal(wl_rank_to_row(&g1, 0, 1, 2),
			 wl_rank_to_row(&g1, 0, 101, 0));
	wl_close(&g1);

	/* Uniform stays in range and is flat. */
	p.kind = WL_UNIFORM;
	memset(count, 0, p.rows * sizeof(*count));
	assert_int_equal(wl_open(&g1, &p), 0);
	for (int i = 0; i < 20; i++) {
		assert_int_equal(wl_next(&g1, &a), 1);
		for (uint32_t j = 0; j < a.t[0].n; j++) {
			assert_true(a.t[0].ids[j] < p.rows);
			count[a.t[0].ids[j]]++;
		}
	}
	for (uint64_t i = 0; i < p.rows; i++)
		assert_true(count[i] < 12); /* mean 1.6 */
	wl_close(&g1);

	/* Nonsense parameters are refused. */
	p.rows = 0;
	assert_int_equal(wl_open(&g1, &p), -EINVAL);
	wl_close(&g1);
	free(count);
	wl_batch_free(&a);
	wl_batch_free(&b);
}

/* ------------------------------------------------------------ oracle */

static uint64_t okey(const struct wl_gen *g, uint32_t t, uint64_t rank,
		     uint64_t batch)
{
	return (uint64_t)(t + 1) << 40 | wl_rank_to_row(g, t, rank, batch);
}

static void test_oracle(void **state)
{
	struct wl_params p = {.kind = WL_ZIPF,
			      .tables = 2,
			      .rows = 1000,
			      .batch = 4,
			      .pooling = 1,
			      .zipf_s = 1.15,
			      .seed = 3};
	struct wl_gen g;
	uint64_t k[8], m;
	size_t b1[2] = {0, 6}, b2[3] = {0, 2, 5};

	(void)state;
	assert_int_equal(wl_open(&g, &p), 0);
	/* ranks 3 1 2 3 1 2 of table 0: with room for 2, the miss of 2
	 * evicts 3 and the miss of 3 evicts 2 (LRU would miss all six) */
	for (int i = 0; i < 6; i++)
		k[i] = okey(&g, 0, (uint64_t)(i % 3 == 0 ? 3 : i % 3), 0);
	assert_int_equal(oracle_misses(&g, k, b1, 1, 2, &m), 0);
	assert_int_equal(m, 5);
	assert_int_equal(oracle_misses(&g, k, b1, 1, 3, &m), 0);
	assert_int_equal(m, 3); /* room for all: the distinct ones */
	assert_int_equal(oracle_misses(&g, k, b1, 1, 1, &m), 0);
	assert_int_equal(m, 6);
	assert_int_equal(oracle_misses(&g, k, b1, 1, 0, &m), -EINVAL);
	/* rank 1 of table 1 comes before rank 2 of table 0: table 0's
	 * rank 2 goes, table 1's rank 1 is hit, then it goes for rank 2 */
	k[0] = okey(&g, 0, 2, 0);
	k[1] = okey(&g, 1, 1, 0);
	k[2] = okey(&g, 0, 1, 0);
	k[3] = okey(&g, 1, 1, 0);
	k[4] = okey(&g, 0, 2, 0);
	b1[1] = 5;
	assert_int_equal(oracle_misses(&g, k, b1, 1, 2, &m), 0);
	assert_int_equal(m, 4);
	wl_close(&g);

	/* Shift, every batch by 100 ranks: in batch 1 the rows of batch 0's
	 * ranks 1 and 2 are improbable; the oracle evicts them first. */
	p.kind = WL_SHIFT;
	p.tables = 1;
	p.shift_every = 1;
	p.shift_by = 100;
	assert_int_equal(wl_open(&g, &p), 0);
	k[0] = okey(&g, 0, 1, 0);
	k[1] = okey(&g, 0, 2, 0);
	k[2] = okey(&g, 0, 1, 1);
	k[3] = okey(&g, 0, 2, 1); /* evicts batch 0's rank 1, not 1's */
	k[4] = okey(&g, 0, 1, 0);
	assert_int_equal(oracle_misses(&g, k, b2, 2, 2, &m), 0);
	assert_int_equal(m, 5);
	wl_close(&g);

	p.kind = WL_UNIFORM;
	assert_int_equal(wl_open(&g, &p), 0);
	assert_int_equal(oracle_misses(&g, k, b2, 2, 2, &m), -ENOTSUP);
	wl_close(&g);
}

/* ------------------------------------------------------------ learner */

static void test_learner(void **state)
{
	enum { A = 1, B, C };
	const uint64_t k1[] = {A, B, B, A};
	const uint32_t d1[] = {3, 1, 1, 1}, ones[] = {1, 1, 1, 1, 1};
	const uint32_t d2[] = {1, 1, 2, 1, 1};
	const uint64_t k2[] = {A, B, C, A, B};
	const size_t b1[] = {0, 2, 4}, b2[] = {0, 2, 5};
	uint64_t m;

	(void)state;
	/* room for 1: A (3 draws) goes in; B (1) is refused; in batch 1 B
	 * (2 draws) is refused again and A is hit */
	assert_int_equal(learner_misses(k1, d1, b1, 2, 0, 1, &m), 0);
	assert_int_equal(m, 3);
	/* counting lookups instead of draws: B (2) beats A (1) in batch 1,
	 * then A (2) is refused against B (2) */
	assert_int_equal(learner_misses(k1, ones, b1, 2, 0, 1, &m), 0);
	assert_int_equal(m, 4);
	/* a phase of one batch: counts restart, B (1) beats A (0) */
	assert_int_equal(learner_misses(k1, d1, b1, 2, 1, 1, &m), 0);
	assert_int_equal(m, 4);
	/* room for 2: C (2 draws) evicts the older of A and B (1 each), A;
	 * A (now 2) evicts B (1); B (2) is refused against C (2, older than
	 * A) */
	assert_int_equal(learner_misses(k2, d2, b2, 2, 0, 2, &m), 0);
	assert_int_equal(m, 5);
	/* room for all: only the first lookup of each misses */
	assert_int_equal(learner_misses(k2, ones, b2, 2, 0, 3, &m), 0);
	assert_int_equal(m, 3);
	assert_int_equal(learner_misses(k2, ones, b2, 2, 0, 0, &m), -EINVAL);
}

/* ------------------------------------------------------------ Belady */

static void test_belady_textbook(void **state)
{
	/* Silberschatz's reference string: OPT with 3 frames faults 9 times. */
	const uint64_t s[] = {7, 0, 1, 2, 0, 3, 0, 4, 2, 3,
			      0, 3, 2, 1, 2, 0, 1, 7, 0, 1};
	const size_t n = sizeof(s) / sizeof(s[0]);
	uint64_t m;

	(void)state;
	assert_int_equal(belady_misses(s, n, 3, &m), 0);
	assert_int_equal(m, 9);
	assert_int_equal(belady_misses(s, n, 4, &m), 0);
	assert_int_equal(m, 8);
	assert_int_equal(belady_misses(s, n, 1, &m), 0);
	assert_int_equal(m, 20); /* no key repeats at once */
	assert_int_equal(belady_misses(s, n, 6, &m), 0);
	assert_int_equal(m, 6); /* compulsory only: 6 distinct */
	assert_int_equal(belady_misses(s, n, 100, &m), 0);
	assert_int_equal(m, 6);
	assert_int_equal(belady_misses(s, 0, 3, &m), 0);
	assert_int_equal(m, 0);
	assert_int_equal(belady_misses(s, n, 0, &m), -EINVAL);
	/* keys 0 and UINT64_MAX are keys like any other */
	{
		const uint64_t e[] = {0, UINT64_MAX, 0, UINT64_MAX, 5, 0};

		assert_int_equal(belady_misses(e, 6, 2, &m), 0);
		assert_int_equal(m, 3);
	}
}

/* The optimum by exhaustive search over every eviction choice. */
static int best[16][64];

static int brute(const uint64_t *s, size_t n, size_t i, unsigned set,
		 unsigned cap)
{
	unsigned k;
	int m = INT_MAX;

	if (i == n)
		return 0;
	k = 1u << s[i];
	if (best[i][set] >= 0)
		return best[i][set];
	if (set & k) {
		m = brute(s, n, i + 1, set, cap);
	} else if ((unsigned)__builtin_popcount(set) < cap) {
		m = 1 + brute(s, n, i + 1, set | k, cap);
	} else {
		for (unsigned v = 0; v < 6; v++) {
			int x;

			if (!(set & (1u << v)))
				continue;
			x = 1 + brute(s, n, i + 1, (set & ~(1u << v)) | k, cap);
			if (x < m)
				m = x;
		}
	}
	return best[i][set] = m;
}

static void test_belady_optimal(void **state)
{
	struct wl_rng r;

	(void)state;
	wl_rng_seed(&r, 5);
	for (int trial = 0; trial < 400; trial++) {
		uint64_t s[15], m;
		size_t n = 1 + wl_rng_below(&r, 15);
		unsigned keys = 2 + (unsigned)wl_rng_below(&r, 5);
		unsigned cap = 1 + (unsigned)wl_rng_below(&r, 4);

		for (size_t i = 0; i < n; i++)
			s[i] = wl_rng_below(&r, keys);
		memset(best, 0xff, sizeof(best));
		assert_int_equal(belady_misses(s, n, cap, &m), 0);
		assert_int_equal(m, brute(s, n, 0, 0, cap));
	}
}

/* A long trace with a small cache forces the heap's compaction. */
static void test_belady_long(void **state)
{
	const size_t n = 200000;
	uint64_t *s = malloc(n * sizeof(*s)), m1, m2, m3;
	struct wl_rng r;

	(void)state;
	assert_non_null(s);
	wl_rng_seed(&r, 8);
	for (size_t i = 0; i < n; i++)
		s[i] = wl_rng_below(&r, 3000);
	assert_int_equal(belady_misses(s, n, 10, &m1), 0);
	assert_int_equal(belady_misses(s, n, 1000, &m2), 0);
	assert_int_equal(belady_misses(s, n, 3000, &m3), 0);
	/* more room, fewer misses; all of it, compulsory only */
	assert_true(m1 > m2);
	assert_true(m2 > m3);
	assert_int_equal(m3, 3000);
	/* MIN never does worse than a cache of the same size that keeps
	 * the lowest keys pinned: a crude but valid upper bound */
	{
		uint64_t pinned = 0;

		for (size_t i = 0; i < n; i++)
			pinned += s[i] >= 999;
		assert_true(m2 <= pinned + 999);
	}
	free(s);
}

/* ------------------------------------------------------------ the tool */

static void test_help(void **state)
{
	const char *args[] = {"--help", NULL};
	struct run r;

	(void)state;
	run_tool(&r, args);
	assert_int_equal(r.status, 0);
	assert_non_null(strstr(r.out, "usage: embtier-bench"));
	assert_non_null(strstr(r.out, "EMBTRACE"));
	assert_non_null(strstr(r.out, "--compute-us"));
	assert_int_equal(r.err[0], '\0');
	run_free(&r);
}

static void test_usage_error(void **state)
{
	const char *a1[] = {"--no-such-option", NULL};
	const char *a2[] = {"frobnicate", NULL};
	const char *a3[] = {"--ddr", "lots", NULL};
	const char *const *all[] = {a1, a2, a3};
	struct run r;

	(void)state;
	for (int i = 0; i < 3; i++) {
		run_tool(&r, all[i]);
		assert_int_equal(r.status, 2);
		assert_int_equal(r.out[0], '\0');
		assert_true(lines(r.err) >= 1);
		run_free(&r);
	}
}

/* --dim takes a list, one dim per table: a short run over tables of dims
 * 4, 64 and 16 reports them and the tiers' capacity efficiency; a zero in
 * the list, or a list for mrc, is a usage error. */
static void test_tool_dims(void **state)
{
	const char *run[] = {"-q",	   "--tables",
			     "3",	   "--rows",
			     "1000",	   "--dim",
			     "4,64,16",	   "--ddr",
			     "1M",	   "--materialize",
			     "none",	   "--no-limits",
			     "--no-pread", "--no-rocksdb",
			     "--batches",  "3",
			     "--warmup",   "1",
			     "--json",	   "--op",
			     "gather",	   NULL};
	const char *bad[] = {"--dim", "16,0", NULL};
	const char *mrc[] = {"mrc", "--dim", "16,32", NULL};
	struct run r;

	(void)state;
	tu_require_uring();
	tu_require_direct();
	run_tool(&r, run);
	if (r.status)
		print_error("%s", r.err);
	assert_int_equal(r.status, 0);
	assert_non_null(strstr(r.out, "\"dims\":[4,64,16]"));
	assert_non_null(strstr(r.out, "\"capacity_efficiency\":{\"hbm\":-1"));
	run_free(&r);
	run_tool(&r, bad);
	assert_int_equal(r.status, 2);
	run_free(&r);
	run_tool(&r, mrc);
	assert_int_equal(r.status, 2);
	assert_non_null(strstr(r.err, "mrc takes one --dim"));
	run_free(&r);
}

/* --update-vs-read measures the same store without, then with, updates:
 * the JSON carries both runs; with --update it is a usage error. */
static void test_tool_update_vs_read(void **state)
{
	const char *run[] = {"-q",	    "--tables",	  "2",
			     "--rows",	    "4096",	  "--dim",
			     "8",	    "--ddr",	  "64K",
			     "--no-limits", "--no-pread", "--no-rocksdb",
			     "--batches",   "3",	  "--warmup",
			     "1",	    "--json",	  "--update-vs-read",
			     NULL};
	const char *both[] = {"--update", "--update-vs-read", NULL};
	struct run r;

	(void)state;
	tu_require_uring();
	tu_require_direct();
	run_tool(&r, run);
	if (r.status)
		print_error("%s", r.err);
	assert_int_equal(r.status, 0);
	assert_non_null(strstr(r.out,
			       "\"update_run\":{\"name\":\"embtier+update\","
			       "\"ran\":true"));
	assert_non_null(strstr(r.out, "\"systems\":[{\"name\":\"embtier\","
				      "\"ran\":true"));
	run_free(&r);
	run_tool(&r, both);
	assert_int_equal(r.status, 2);
	assert_non_null(strstr(r.err, "choose one"));
	run_free(&r);
}

/* The number after "key": in s, from the first anchor on (0 if none). */
static uint64_t json_u64(const char *s, const char *anchor, const char *key)
{
	const char *a = strstr(s, anchor);
	const char *k = a ? strstr(a, key) : NULL;

	return k ? strtoull(k + strlen(key), NULL, 10) : 0;
}

/* The raw io_uring limit in calls runs calls of the store's mean blocks
 * read a call (the store's reads over its calls, one a table and batch),
 * each whole: its reads are that size times its calls. */
static void test_tool_limit_in_calls(void **state)
{
	const char *run[] = {"-q",
			     "--tables",
			     "2",
			     "--rows",
			     "4096",
			     "--dim",
			     "8",
			     "--ddr",
			     "64K",
			     "--no-pread",
			     "--no-rocksdb",
			     "--batches",
			     "3",
			     "--warmup",
			     "1",
			     "--limit-seconds",
			     "0.2",
			     "--json",
			     NULL};
	uint64_t reads, per, calls, limit_reads;
	struct run r;

	(void)state;
	tu_require_uring();
	tu_require_direct();
	run_tool(&r, run);
	if (r.status)
		print_error("%s", r.err);
	assert_int_equal(r.status, 0);
	reads =
	    json_u64(r.out, "\"systems\":[{\"name\":\"embtier\"", "\"reads\":");
	per = json_u64(r.out, "\"limits\"", "\"io_uring_call_reads\":");
	calls = json_u64(r.out, "\"limits\"", "\"io_uring_calls\":");
	limit_reads = json_u64(r.out, "\"io_uring_in_calls\":{", "\"reads\":");
	assert_true(reads > 0);
	assert_int_equal(per, (reads + 3) / 6); /* 6 calls, rounded */
	assert_true(calls > 0);
	assert_int_equal(limit_reads, per * calls);
	assert_non_null(strstr(r.out, "\"miss_path_in_calls\":"));
	run_free(&r);
}

/* mrc runs every policy asked with every window asked, one column each,
 * beside Belady; a window of the whole trace misses no more than none; an
 * unknown policy or a window past 32 is a usage error. */
static void test_tool_mrc_series(void **state)
{
	const char *mrc[] = {"mrc",	   "-q",	  "--tables",	 "2",
			     "--rows",	   "2000",	  "--dim",	 "8",
			     "--batch",	   "64",	  "--batches",	 "6",
			     "--points",   "1",		  "--sizes",	 "64K",
			     "--policies", "lru,tinylfu", "--lookahead", "0,6",
			     "--hits",	   "1",		  "--csv",	 NULL};
	const char *bad1[] = {"mrc", "--policies", "lru,arc", NULL};
	const char *bad2[] = {"mrc", "--lookahead", "0,33", NULL};
	double v[7];
	const char *line;
	struct run r;

	(void)state;
	tu_require_uring();
	tu_require_direct();
	run_tool(&r, mrc);
	if (r.status)
		print_error("%s", r.err);
	assert_int_equal(r.status, 0);
	assert_non_null(strstr(r.out, "ddr_bytes,capacity_rows,capacity_frac,"
				      "lru,lru+K6,tinylfu,tinylfu+K6,learner,"
				      "oracle,"
				      "belady,compulsory\n"));
	line = strchr(r.out, '\n') + 1;
	assert_int_equal(
	    sscanf(line, "%*[^,],%*[^,],%*[^,],%lf,%lf,%lf,%lf,%lf,%lf,%lf",
		   &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6]),
	    7);
	assert_true(v[1] <= v[0]);
	assert_true(v[3] <= v[2]);
	/* Belady is below the oracle, which is below the learner, which is
	 * below LRU here */
	assert_true(v[6] <= v[5] && v[5] <= v[4] && v[4] <= v[0]);
	run_free(&r);
	run_tool(&r, bad1);
	assert_int_equal(r.status, 2);
	run_free(&r);
	run_tool(&r, bad2);
	assert_int_equal(r.status, 2);
	run_free(&r);
}

static void test_tool_convert_and_gen(void **state)
{
	const char *in = tu_path("cli.txt"), *out = tu_path("cli.trace");
	const char *gen = tu_path("gen.trace");
	const char *c1[] = {"convert", "-q", in, out, NULL};
	const char *g1[] = {"gen",	 "-q",	"--tables",  "3",
			    "--rows",	 "100", "--batch",   "4",
			    "--pooling", "5",	"--batches", "3",
			    "--seed",	 "11",	gen,	     NULL};
	struct wl_params p = {
	    .kind = WL_ZIPF,
	    .tables = 3,
	    .rows = 100,
	    .batch = 4,
	    .pooling = 5,
	    .zipf_s = 1.15,
	    .seed = 11,
	};
	struct wl_trace_reader tr;
	struct wl_batch a, b;
	struct wl_gen g;
	struct run r;

	(void)state;
	tool();
	spit(in, "0 1 5\n0 1 6\n1 0 2\n");
	run_tool(&r, c1);
	assert_int_equal(r.status, 0);
	run_free(&r);
	wl_batch_init(&a);
	wl_batch_init(&b);
	assert_int_equal(wl_trace_open(&tr, out), 0);
	assert_int_equal(tr.nbatches, 2);
	assert_int_equal(wl_trace_read(&tr, &a, 0), 1);
	assert_int_equal(a.t[0].table, 1);
	assert_int_equal(a.t[0].ids[1], 6);
	wl_trace_close(&tr);

	/* again: refused without -f, one line on stderr, file kept */
	run_tool(&r, c1);
	assert_int_equal(r.status, 1);
	assert_int_equal(lines(r.err), 1);
	assert_non_null(strstr(r.err, "exists"));
	run_free(&r);
	assert_true(exists(out));

	/* gen writes exactly what the generator gives */
	run_tool(&r, g1);
	assert_int_equal(r.status, 0);
	run_free(&r);
	assert_int_equal(wl_trace_open(&tr, gen), 0);
	assert_int_equal(tr.nbatches, 3);
	assert_int_equal(tr.pooling, 5);
	assert_int_equal(wl_open(&g, &p), 0);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(wl_trace_read(&tr, &a, 0), 1);
		assert_int_equal(wl_next(&g, &b), 1);
		assert_same_ids(&a, &b);
		assert_int_equal(a.t[0].nbags, 4);
	}
	assert_int_equal(wl_trace_read(&tr, &a, 0), 0);
	wl_trace_close(&tr);
	wl_close(&g);
	wl_batch_free(&a);
	wl_batch_free(&b);
}

/*
 * keyed at a tiny size: the text report has its lines, each op's keys/s
 * of both tables at both loads is a figure, find is all DDR hits, and the
 * run's own checks passed (a failed one exits 1: a find that returned
 * other values than written, or stored keys after the checkpoint other
 * than those filled and inserted); the JSON says the same. --keys past
 * half the capacity is a usage error.
 */
static void test_tool_keyed(void **state)
{
	const char *text[] = {"keyed",	   "-q",   "--ddr",  "2M",
			      "--dim",	   "8",	   "--keys", "2048",
			      "--seconds", "0.01", NULL};
	const char *json[] = {
	    "keyed",	   "-q",     "--ddr", "2M",	    "--dim",
	    "8",	   "--keys", "2048",  "--seconds",  "0.01",
	    "--no-limits", "--lr",   "0.5",   "--new-frac", "0.25",
	    "--json",	   NULL};
	const char *big[] = {"keyed", "--ddr", "1M", "--keys", "1000000", NULL};
	const char *ops[] = {"find", "assign", "find_or_insert"};
	unsigned long long cap, stored;
	double kd, ri, hits, ratio;
	const char *p, *load;
	struct run r;

	(void)state;
	tu_require_uring();
	tu_require_direct();
	run_tool(&r, text);
	if (r.status)
		print_error("%s", r.err);
	assert_int_equal(r.status, 0);
	p = strstr(r.out, "capacity:   ");
	assert_non_null(p);
	assert_int_equal(sscanf(p, "capacity:   %llu keys", &cap), 1);
	assert_true(cap >= 2 * 2048);
	for (int l = 0; l < 2; l++) {
		load = strstr(r.out, l ? "\nload 1.0:" : "\nload 0.5:");
		assert_non_null(load);
		for (int k = 0; k < 3; k++) {
			char want[32];

			snprintf(want, sizeof(want), "\n  %-15s ", ops[k]);
			p = strstr(load, want);
			assert_non_null(p);
			assert_int_equal(sscanf(p + strlen(want),
						"%lf M %lf M %lf %*u, %lf%%",
						&kd, &ri, &ratio, &hits),
					 4);
			assert_true(kd > 0 && ri > 0 && ratio > 0);
			if (k == 0)
				assert_true(hits == 100.0);
		}
	}
	assert_non_null(strstr(r.out, "\nlimit:      raw random gather"));
	assert_non_null(strstr(r.out, "keyed find / row-indexed gather: "));
	assert_non_null(strstr(r.out, "find_or_insert at 1.0 / find at 0.5: "));
	p = strstr(r.out, "\nkeyed:      ");
	assert_non_null(p);
	assert_int_equal(sscanf(p, "\nkeyed:      %llu keys stored", &stored),
			 1);
	assert_true(stored > cap); /* past load 1.0: some on NVMe */
	assert_non_null(strstr(p, " B a key ("));
	assert_non_null(strstr(r.out, "\nchecks:     every find returned the "
				      "values written"));
	run_free(&r);

	/* --lr moves the values find_or_insert touches; the run writes them
	 * back and its checks still hold */
	run_tool(&r, json);
	if (r.status)
		print_error("%s", r.err);
	assert_int_equal(r.status, 0);
	assert_non_null(strstr(r.out, "{\"mode\":\"keyed\","));
	assert_non_null(strstr(r.out, "\"new_frac\":0.2500,"));
	assert_non_null(strstr(r.out, "\"find_or_insert\":{\"calls\":1,"
				      "\"keys\":2048,"));
	assert_non_null(strstr(r.out, "\"ddr_hit_frac\":0.750000"));
	assert_null(strstr(r.out, "\"stored_count_ok\":false"));
	assert_non_null(strstr(r.out, "\"limit\":null"));
	assert_int_equal(lines(r.out), 1);
	run_free(&r);

	run_tool(&r, big);
	assert_int_equal(r.status, 2);
	assert_non_null(strstr(r.err, "more than half the capacity"));
	assert_int_equal(r.out[0], '\0');
	run_free(&r);
}

/* The number after prefix in out (a line of the report), or fails. */
static double after(const char *out, const char *prefix)
{
	const char *p = strstr(out, prefix);
	double v;

	if (!p)
		print_error("no '%s' in:\n%s", prefix, out);
	assert_non_null(p);
	assert_int_equal(sscanf(p + strlen(prefix), "%lf", &v), 1);
	return v;
}

/* Whether dir holds no entry but . and .. */
static bool empty_dir(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *de;
	int n = 0;

	assert_non_null(d);
	while ((de = readdir(d)))
		n += strcmp(de->d_name, ".") && strcmp(de->d_name, "..");
	closedir(d);
	return n == 0;
}

/*
 * keyed --train-keys at a tiny size (20,000 keys through a DDR tier of
 * about 5,000 slots, so most rows go to NVMe): every figure of the report
 * is printed, the keys stored after the checkpoint and after a reopen are
 * the 20,000 trained, and every one of them (--check-keys past the count:
 * all) read back exactly its initial value - lr x its gradient, so no
 * two keys share a row; as many never-trained keys read their initial
 * value. The JSON says the same, and the scratch directory is gone
 * after each run. --keys past half the DDR slots, --csv, --train-keys
 * outside keyed, --check-keys without it and more keys than the disk
 * holds are refused.
 */
static void test_tool_keyed_train(void **state)
{
	const char *dir = tu_path("ktrain");
	const char *text[] = {
	    "keyed",  "-q",   "--train-keys", "20000", "--ddr", "256K",
	    "--keys", "1024", "--dir",	      dir,     NULL};
	const char *json[] = {
	    "keyed",	    "-q",   "--train-keys", "20000", "--ddr",  "256K",
	    "--keys",	    "1024", "--dim",	    "12",    "--lr",   "0.25",
	    "--check-keys", "5000", "--dir",	    dir,     "--json", NULL};
	const char *big[] = {
	    "keyed",  "-q",   "--train-keys", "20000", "--ddr", "256K",
	    "--keys", "4096", "--dir",	      dir,     NULL};
	const char *csv[] = {"keyed", "--train-keys", "100", "--csv", NULL};
	const char *run[] = {"run", "--train-keys", "100", NULL};
	const char *alone[] = {"keyed", "--check-keys", "100", NULL};
	const char *disk[] = {"keyed",	    "-q",    "--train-keys",
			      "2000000000", "--dim", "65536",
			      "--dir",	    dir,     NULL};
	unsigned long long stored, logged, reopen, cap, evicted;
	struct run r;
	const char *p;

	(void)state;
	tu_require_uring();
	tu_require_direct();
	assert_int_equal(mkdir(dir, 0700), 0);
	run_tool(&r, text);
	if (r.status)
		print_error("%s", r.err);
	assert_int_equal(r.status, 0);
	assert_non_null(strstr(r.out, "keyed train: 20000 distinct random "
				      "u64 keys trained"));
	p = strstr(r.out, "\nstore:       DDR ");
	assert_non_null(p);
	assert_int_equal(sscanf(strstr(p, " = "), " = %llu keys' slots", &cap),
			 1);
	assert_true(cap > 1024 && cap < 20000 / 2);
	assert_true(after(r.out, "\ntraining:    ") >= 0);
	assert_true(after(strstr(r.out, "\ntraining:    "), " s: ") > 0);
	p = strstr(r.out, " rows evicted to NVMe");
	assert_non_null(p);
	while (p[-1] >= '0' && p[-1] <= '9')
		p--;
	assert_int_equal(sscanf(p, "%llu", &evicted), 1);
	assert_true(evicted >= 20000 - cap);
	assert_true(after(r.out, "\ncheckpoint:  ") >= 0);
	p = strstr(r.out, "\nstored:      ");
	assert_non_null(p);
	assert_int_equal(sscanf(p,
				"\nstored:      %llu keys (et_stats "
				"log_index_rows), %llu (et_table_info "
				"rows_logged)",
				&stored, &logged),
			 2);
	assert_int_equal(stored, 20000);
	assert_int_equal(logged, 20000);
	assert_true(after(r.out, "\nindex:       ") > 0);
	/* a record of 16 + 32 bytes a key at least */
	assert_true(after(r.out, "\ndisk:        ") >= 48);
	p = strstr(r.out, "\nreopen:      ");
	assert_non_null(p);
	p = strstr(p, "(the index replayed): ");
	assert_non_null(p);
	assert_int_equal(
	    sscanf(p, "(the index replayed): %llu keys stored", &reopen), 1);
	assert_int_equal(reopen, 20000);
	assert_non_null(strstr(r.out, "\ncheck:       20000 trained keys drawn "
				      "at random read initial - lr x gradient, "
				      "20000 never-trained keys their initial "
				      "value, bit for bit: ok"));
	assert_true(after(r.out, "\nmemory:      peak RSS ") > 0);
	assert_true(after(r.out, "\ntime:        ") >= 0);
	assert_true(empty_dir(dir));
	run_free(&r);

	run_tool(&r, json);
	if (r.status)
		print_error("%s", r.err);
	assert_int_equal(r.status, 0);
	assert_int_equal(lines(r.out), 1);
	assert_non_null(strstr(r.out, "{\"mode\":\"keyed_train\",\"keys\":"
				      "20000,\"keys_per_call\":1024,\"dim\":12,"
				      "\"dtype\":\"f32\",\"lr\":0.25,"));
	assert_non_null(strstr(r.out, ",\"stored_keys\":20000,\"rows_logged\":"
				      "20000,"));
	assert_non_null(strstr(r.out, ",\"stored_keys_reopen\":20000,"
				      "\"checked_trained\":5000,"
				      "\"checked_fresh\":5000,"));
	assert_non_null(strstr(r.out, ",\"check_ok\":true,"));
	assert_true(empty_dir(dir));
	run_free(&r);

	run_tool(&r, big);
	assert_int_equal(r.status, 2);
	assert_non_null(strstr(r.err, "more than half the capacity"));
	assert_int_equal(r.out[0], '\0');
	assert_true(empty_dir(dir));
	run_free(&r);
	run_tool(&r, csv);
	assert_int_equal(r.status, 2);
	run_free(&r);
	run_tool(&r, run);
	assert_int_equal(r.status, 2);
	run_free(&r);
	run_tool(&r, alone);
	assert_int_equal(r.status, 2);
	assert_non_null(strstr(r.err, "goes with --train-keys"));
	run_free(&r);
	run_tool(&r, disk);
	assert_int_equal(r.status, 1);
	assert_non_null(strstr(r.err, "fewer --train-keys"));
	assert_int_equal(r.out[0], '\0');
	assert_true(empty_dir(dir));
	run_free(&r);
	tu_rmtree(dir);
}

/* The figures of a round of delta's report: "  export    F -> T: R rows,
 * M MB in S s = X MB/s" after the round's heading. */
static void delta_round(const char *out, const char *head,
			unsigned long long from, unsigned long long rows,
			double *mb, double *s)
{
	unsigned long long f, t, r;
	double x;
	const char *p = strstr(out, head);

	if (!p)
		print_error("no '%s' in:\n%s", head, out);
	assert_non_null(p);
	p = strstr(p, "\n  export    ");
	assert_non_null(p);
	assert_int_equal(sscanf(p,
				"\n  export    %llu -> %llu: %llu rows, %lf MB "
				"in %lf s = %lf MB/s",
				&f, &t, &r, mb, s, &x),
			 6);
	assert_int_equal(f, from);
	assert_int_equal(t, from + 1);
	assert_int_equal(r, rows);
	assert_true(*mb > 0 && *s > 0 && x > 0);
	p = strstr(p, "\n  apply     ");
	assert_non_null(p);
	assert_int_equal(sscanf(p, "\n  apply     %llu rows in %lf s", &r, &x),
			 2);
	assert_int_equal(r, rows);
	assert_true(x > 0);
}

/*
 * delta at a tiny size (20,000 rows, 1% and 10% of them rewritten): the
 * full delta carries every row, each incremental one exactly the rows
 * rewritten, in a commit after the one before (0 -> 1, 1 -> 2, 2 -> 3),
 * applied to the copy; 10% is ten times 1%'s bytes (within the fixed
 * parts); the raw sequential read limit and the ratios are printed; the
 * run's own check of the copy passed (a failed one exits 1); the JSON
 * says the same, and the scratch directory is gone after each run. Too
 * few rows, --csv and a list of dims are usage errors; rows the disk
 * cannot hold fail the run before anything is written.
 */
static void test_tool_delta(void **state)
{
	const char *dir = tu_path("delta");
	const char *text[] = {"delta", "-q", "--rows", "20000", "--ddr", "4M",
			      "--dim", "8",  "--dir",  dir,	NULL};
	const char *json[] = {"delta", "-q", "--rows",	"20000",
			      "--ddr", "4M", "--dtype", "bf16",
			      "--dir", dir,  "--json",	NULL};
	const char *few[] = {"delta", "--rows", "99", NULL};
	const char *csv[] = {"delta", "--rows", "1000", "--csv", NULL};
	const char *dims[] = {"delta", "--dim", "8,16", NULL};
	const char *disk[] = {"delta", "-q",	"--rows", "2^40", "--dim",
			      "65536", "--dir", dir,	  NULL};
	double mb[3], s[3], raw, r1, r10, bytes;
	struct run r;
	const char *p;

	(void)state;
	tu_require_uring();
	tu_require_direct();
	assert_int_equal(mkdir(dir, 0700), 0);
	run_tool(&r, text);
	if (r.status)
		print_error("%s", r.err);
	assert_int_equal(r.status, 0);
	assert_non_null(strstr(r.out, "store:      1 row-indexed table of "
				      "20000 rows x dim 8 f32 (32 B a row, "
				      "48 B a log record)"));
	assert_non_null(strstr(r.out, "\nsetup:      20000 rows written and "
				      "committed in "));
	assert_true(after(r.out, "(its whole index loaded: a table-sized "
				 "cost): source ") >= 0);
	assert_true(after(r.out, ", the copy after the full apply ") >= 0);
	delta_round(r.out, "\nfull:       ", 0, 20000, &mb[0], &s[0]);
	assert_non_null(strstr(r.out, "\n1%:         rewrote 200 distinct "
				      "rows drawn at random"));
	delta_round(r.out, "\n1%:         ", 1, 200, &mb[1], &s[1]);
	assert_non_null(strstr(r.out, "\n10%:        rewrote 2000 distinct "
				      "rows drawn at random"));
	delta_round(r.out, "\n10%:        ", 2, 2000, &mb[2], &s[2]);
	/* a row is 8 + 32 bytes in a delta: 1% is 8 KB and a bit */
	assert_true(mb[1] >= 0.008 && mb[1] < 0.1);
	assert_true(mb[2] > 9 * mb[1] && mb[2] < 10.5 * mb[1]);
	assert_true(mb[0] > 9 * mb[2] && mb[0] < 10.5 * mb[2]);
	p = strstr(r.out, "\nraw:        sequential 1 MiB O_DIRECT reads of "
			  "the row log");
	assert_non_null(p);
	assert_non_null(strstr(p, ", QD 1: "));
	assert_non_null(strstr(p, ", QD 8: "));
	raw = after(r.out, "\nratios:     export MB/s / raw ");
	assert_true(raw > 0);
	/* printed (to 3 decimals: a small delta's export under a
	 * sanitizer can print 0.000 against a fast raw read) */
	r1 = after(r.out, " MB/s: 1% ");
	r10 = after(strstr(r.out, "\nratios:     "), ", 10% ");
	assert_true(r1 >= 0 && r10 >= 0);
	bytes = after(r.out, "\n            10% / 1%: bytes ");
	assert_true(bytes > 9 && bytes < 10.5);
	assert_non_null(strstr(r.out, "\ncheck:      after each apply, the "
				      "copy equals the source on 20000 random "
				      "rows, and on 200 and 2000 rewritten "
				      "rows the values written: ok\n"));
	assert_true(after(r.out, "\ntime:       ") > 0);
	assert_true(empty_dir(dir));
	run_free(&r);

	run_tool(&r, json);
	if (r.status)
		print_error("%s", r.err);
	assert_int_equal(r.status, 0);
	assert_int_equal(lines(r.out), 1);
	assert_non_null(strstr(r.out, "{\"mode\":\"delta\",\"rows\":20000,"
				      "\"dim\":32,\"dtype\":\"bf16\","
				      "\"row_bytes\":64,\"record_bytes\":80,"));
	assert_non_null(strstr(r.out, "{\"name\":\"full\",\"frac\":0.0000,"
				      "\"changed\":20000,"));
	assert_non_null(strstr(r.out, ",\"from\":0,\"to\":1,\"rows\":20000,"
				      "\"whole\":1,"));
	assert_non_null(strstr(r.out, "{\"name\":\"1%\",\"frac\":0.0100,"
				      "\"changed\":200,"));
	assert_non_null(strstr(r.out, ",\"from\":1,\"to\":2,\"rows\":200,"
				      "\"whole\":0,"));
	assert_non_null(strstr(r.out, "{\"name\":\"10%\",\"frac\":0.1000,"
				      "\"changed\":2000,"));
	assert_non_null(strstr(r.out, ",\"from\":2,\"to\":3,\"rows\":2000,"
				      "\"whole\":0,"));
	assert_non_null(strstr(r.out, ",\"checked\":20000,\"checked_changed\":"
				      "2000,"));
	assert_non_null(strstr(r.out, ",\"check_ok\":true,"));
	assert_true(after(r.out, "\"raw_mbs\":") > 0);
	assert_true(empty_dir(dir));
	run_free(&r);

	run_tool(&r, few);
	assert_int_equal(r.status, 2);
	assert_non_null(strstr(r.err, "--rows 99 < 100"));
	run_free(&r);
	run_tool(&r, csv);
	assert_int_equal(r.status, 2);
	run_free(&r);
	run_tool(&r, dims);
	assert_int_equal(r.status, 2);
	assert_non_null(strstr(r.err, "delta takes one --dim"));
	run_free(&r);
	run_tool(&r, disk);
	assert_int_equal(r.status, 1);
	assert_non_null(strstr(r.err, "a --dir with room"));
	assert_int_equal(r.out[0], '\0');
	assert_true(empty_dir(dir));
	run_free(&r);
	tu_rmtree(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_trace_roundtrip),
	    cmocka_unit_test(test_trace_rejects),
	    cmocka_unit_test(test_convert),
	    cmocka_unit_test(test_zipf_range_and_skew),
	    cmocka_unit_test(test_perm_bijective),
	    cmocka_unit_test(test_generators),
	    cmocka_unit_test(test_oracle),
	    cmocka_unit_test(test_learner),
	    cmocka_unit_test(test_belady_textbook),
	    cmocka_unit_test(test_belady_optimal),
	    cmocka_unit_test(test_belady_long),
	    cmocka_unit_test(test_help),
	    cmocka_unit_test(test_usage_error),
	    cmocka_unit_test(test_tool_convert_and_gen),
	    cmocka_unit_test(test_tool_dims),
	    cmocka_unit_test(test_tool_mrc_series),
	    cmocka_unit_test(test_tool_update_vs_read),
	    cmocka_unit_test(test_tool_limit_in_calls),
	    cmocka_unit_test(test_tool_keyed),
	    cmocka_unit_test(test_tool_keyed_train),
	    cmocka_unit_test(test_tool_delta),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
