/*
 * test_tools.c - embtier-build and embtier-inspect, run as subprocesses.
 *
 * Each test builds small table files under $ET_TEST_DIR with the tools in
 * $ET_BUILD and checks values, exit statuses and stderr line counts: round
 * trips from raw f32 and from .npy (f32 and f16) are bit-exact, a lazy
 * table of 2^33 rows costs almost no disk, and every kind of corrupt input
 * (bad magic, version, header checksum, truncation, a flipped data byte,
 * malformed raw and .npy input) fails with exactly one line on stderr and
 * leaves no output behind. The library itself is linked too, to cross-check
 * what the tools print against et_tfile_read_rows(). Deltas: a store made
 * through the library is exported (embtier-inspect --delta-since) and
 * applied to a serving copy (embtier-build --apply-delta) commit by
 * commit, the copy compared with the store bit for bit.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <spawn.h>
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
#include <xxhash.h>

#include "embtier.h"

extern char **environ;

static char build_tool[PATH_MAX];
static char inspect_tool[PATH_MAX];
static char test_dir[1024];

/* ------------------------------------------------------------ helpers */

/* What a tool run left: its exit status (128 + signal if killed) and its
 * stdout and stderr, NUL-terminated. */
struct run {
	int status;
	char *out, *err;
	size_t out_len, err_len;
};

static void buf_append(char **buf, size_t *len, const char *src, size_t n)
{
	*buf = realloc(*buf, *len + n + 1);
	assert_non_null(*buf);
	memcpy(*buf + *len, src, n);
	*len += n;
	(*buf)[*len] = '\0';
}

/* Runs argv[0] with stdin from /dev/null, capturing stdout and stderr. */
static void run_argv(struct run *r, char *const argv[])
{
	posix_spawn_file_actions_t fa;
	int po[2], pe[2], status;
	struct pollfd pfd[2];
	char buf[65536];
	pid_t pid;
	int open_fds = 2;

	memset(r, 0, sizeof(*r));
	buf_append(&r->out, &r->out_len, "", 0);
	buf_append(&r->err, &r->err_len, "", 0);
	assert_int_equal(pipe(po), 0);
	assert_int_equal(pipe(pe), 0);
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
	posix_spawn_file_actions_adddup2(&fa, po[1], 1);
	posix_spawn_file_actions_adddup2(&fa, pe[1], 2);
	posix_spawn_file_actions_addclose(&fa, po[0]);
	posix_spawn_file_actions_addclose(&fa, pe[0]);
	posix_spawn_file_actions_addclose(&fa, po[1]);
	posix_spawn_file_actions_addclose(&fa, pe[1]);
	assert_int_equal(posix_spawn(&pid, argv[0], &fa, NULL, argv, environ),
			 0);
	posix_spawn_file_actions_destroy(&fa);
	close(po[1]);
	close(pe[1]);

	pfd[0] = (struct pollfd){.fd = po[0], .events = POLLIN};
	pfd[1] = (struct pollfd){.fd = pe[0], .events = POLLIN};
	while (open_fds) {
		if (poll(pfd, 2, -1) < 0) {
			assert_int_equal(errno, EINTR);
			continue;
		}
		for (int i = 0; i < 2; i++) {
			ssize_t n;

			if (pfd[i].fd < 0 || !pfd[i].revents)
				continue;
			n = read(pfd[i].fd, buf, sizeof(buf));
			if (n <= 0) {
				close(pfd[i].fd);
				pfd[i].fd = -1;
				open_fds--;
				continue;
			}
			if (i == 0)
				buf_append(&r->out, &r->out_len, buf,
					   (size_t)n);
			else
				buf_append(&r->err, &r->err_len, buf,
					   (size_t)n);
		}
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	if (WIFEXITED(status))
		r->status = WEXITSTATUS(status);
	else
		r->status = 128 + WTERMSIG(status);
}

/* run(r, tool, arg, ..., NULL) */
static void run(struct run *r, const char *tool, ...)
{
	char *argv[40];
	int argc = 0;
	va_list ap;

	argv[argc++] = (char *)tool;
	va_start(ap, tool);
	while ((argv[argc] = va_arg(ap, char *)) != NULL) {
		argc++;
		assert_true(argc < 39);
	}
	va_end(ap);
	run_argv(r, argv);
}

static void run_free(struct run *r)
{
	free(r->out);
	free(r->err);
	memset(r, 0, sizeof(*r));
}

static unsigned count_lines(const char *s)
{
	unsigned n = 0;

	for (; *s; s++)
		n += *s == '\n';
	return n;
}

/* Asserts a success with nothing on stderr. */
static void expect_ok(struct run *r)
{
	if (r->status != 0)
		fprintf(stderr, "unexpected failure (%d): %s", r->status,
			r->err);
	assert_int_equal(r->status, 0);
}

/*
 * Asserts the failure a tool reports for bad input: exit status 1, exactly
 * one line on stderr, starting with the tool's name and containing msg,
 * and nothing on stdout.
 */
static void expect_fail(struct run *r, const char *prog, const char *msg)
{
	if (r->status != 1 || count_lines(r->err) != 1 ||
	    (msg && !strstr(r->err, msg)))
		fprintf(stderr, "status %d, stderr: [%s], expected [%s]\n",
			r->status, r->err, msg ? msg : "");
	assert_int_equal(r->status, 1);
	assert_int_equal(count_lines(r->err), 1);
	assert_true(r->err[r->err_len - 1] == '\n');
	assert_int_equal(strncmp(r->err, prog, strlen(prog)), 0);
	assert_int_equal(r->err[strlen(prog)], ':');
	if (msg)
		assert_non_null(strstr(r->err, msg));
	assert_int_equal(r->out_len, 0);
}

static void tpath(char *buf, const char *name)
{
	snprintf(buf, PATH_MAX, "%s/%s", test_dir, name);
}

static bool exists(const char *path)
{
	struct stat st;

	return stat(path, &st) == 0;
}

/* No file of the test directory has ".partial" in its name. */
static void expect_no_partials(void)
{
	DIR *d = opendir(test_dir);
	struct dirent *e;

	assert_non_null(d);
	while ((e = readdir(d)) != NULL)
		assert_null(strstr(e->d_name, ".partial"));
	closedir(d);
}

static void write_file(const char *path, const void *data, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);

	assert_true(fd >= 0);
	assert_int_equal(write(fd, data, len), (ssize_t)len);
	assert_int_equal(close(fd), 0);
}

static void *read_file(const char *path, size_t *len)
{
	struct stat st;
	void *p;
	int fd = open(path, O_RDONLY);

	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &st), 0);
	p = malloc((size_t)st.st_size + 1);
	assert_non_null(p);
	assert_int_equal(read(fd, p, (size_t)st.st_size), st.st_size);
	close(fd);
	*len = (size_t)st.st_size;
	return p;
}

static void copy_file(const char *from, const char *to)
{
	size_t len;
	void *p = read_file(from, &len);

	write_file(to, p, len);
	free(p);
}

static void patch(const char *path, uint64_t off, const void *src, size_t n)
{
	int fd = open(path, O_WRONLY);

	assert_true(fd >= 0);
	assert_int_equal(pwrite(fd, src, n, (off_t)off), (ssize_t)n);
	close(fd);
}

static uint8_t peek(const char *path, uint64_t off)
{
	uint8_t b;
	int fd = open(path, O_RDONLY);

	assert_true(fd >= 0);
	assert_int_equal(pread(fd, &b, 1, (off_t)off), 1);
	close(fd);
	return b;
}

static void flip_byte(const char *path, uint64_t off)
{
	uint8_t b = peek(path, off) ^ 0x5a;

	patch(path, off, &b, 1);
}

static void cut(const char *path, uint64_t len)
{
	assert_int_equal(truncate(path, (off_t)len), 0);
}

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;

static uint64_t rng(void)
{
	uint64_t x = rng_state;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return rng_state = x;
}

/* A random finite f32, over the whole exponent range and both signs,
 * sometimes one of the awkward ones. */
static float rand_f32(void)
{
	uint32_t bits;
	float f;

	switch (rng() % 16) {
	case 0:
		return -0.0f;
	case 1:
		bits = (uint32_t)(rng() & 0x807fffff); /* denormal */
		memcpy(&f, &bits, 4);
		return f;
	default:
		do
			bits = (uint32_t)rng();
		while ((bits & 0x7f800000) == 0x7f800000);
		memcpy(&f, &bits, 4);
		return f;
	}
}

/* Writes a .npy file with the given version and dict text, padded as
 * NumPy pads it, then len bytes of data. */
static void write_npy(const char *path, int version, const char *dict,
		      const void *data, size_t len)
{
	size_t pre = version == 1 ? 10 : 12;
	size_t dlen = strlen(dict);
	size_t total = (pre + dlen + 1 + 63) / 64 * 64;
	size_t hlen = total - pre;
	char *buf = malloc(total + len);

	assert_non_null(buf);
	memcpy(buf, "\x93NUMPY", 6);
	buf[6] = (char)version;
	buf[7] = 0;
	buf[8] = (char)(hlen & 0xff);
	buf[9] = (char)(hlen >> 8);
	if (version != 1) {
		buf[10] = (char)(hlen >> 16);
		buf[11] = (char)(hlen >> 24);
	}
	memset(buf + pre, ' ', hlen);
	memcpy(buf + pre, dict, dlen);
	buf[total - 1] = '\n';
	if (len)
		memcpy(buf + total, data, len);
	write_file(path, buf, total + len);
	free(buf);
}

/* Checks that path is a v1 '<f4' C-order .npy of shape (rows, cols) and
 * returns its data (rows * cols floats). */
static float *read_npy_f32(const char *path, uint64_t rows, uint64_t cols)
{
	char want[128];
	size_t len, hlen, total;
	uint8_t *p = read_file(path, &len);
	float *data;

	assert_true(len >= 10);
	assert_memory_equal(p, "\x93NUMPY\x01\x00", 8);
	hlen = (size_t)p[8] | (size_t)p[9] << 8;
	total = 10 + hlen;
	assert_int_equal(total % 64, 0);
	assert_int_equal(p[total - 1], '\n');
	snprintf(want, sizeof(want),
		 "{'descr': '<f4', 'fortran_order': False, 'shape': (%" PRIu64
		 ", %" PRIu64 "), }",
		 rows, cols);
	assert_int_equal(memcmp(p + 10, want, strlen(want)), 0);
	assert_int_equal(len, total + rows * cols * 4);
	data = malloc(rows * cols * 4 + 1);
	assert_non_null(data);
	memcpy(data, p + total, rows * cols * 4);
	free(p);
	return data;
}

static struct et_table_info table_info(const char *path)
{
	struct et_table_info ti;
	et_tfile *tf;

	assert_int_equal(et_tfile_open(path, ET_TFILE_RDONLY, &tf), 0);
	assert_int_equal(et_tfile_info(tf, &ti), 0);
	et_tfile_close(tf);
	return ti;
}

/* Builds a small fully written f32 table from random rows; returns them. */
static float *make_table(const char *path, uint64_t rows, uint32_t dim)
{
	char raw[PATH_MAX + 8], dims[16];
	float *v = malloc(rows * dim * 4);
	struct run r;

	assert_non_null(v);
	for (uint64_t i = 0; i < rows * dim; i++)
		v[i] = rand_f32();
	snprintf(raw, sizeof(raw), "%s.raw", path);
	write_file(raw, v, rows * dim * 4);
	snprintf(dims, sizeof(dims), "%u", dim);
	unlink(path);
	run(&r, build_tool, "-q", "--from-raw", raw, "--dim", dims, path, NULL);
	expect_ok(&r);
	run_free(&r);
	unlink(raw);
	return v;
}

/* Parses a --dump line "row v0 v1 ..." into *row and vals[0..n). */
static const char *parse_dump_line(const char *s, uint64_t *row, float *vals,
				   uint32_t n)
{
	char *end;

	*row = strtoull(s, &end, 10);
	assert_true(end != s);
	s = end;
	for (uint32_t c = 0; c < n; c++) {
		vals[c] = strtof(s, &end);
		assert_true(end != s);
		s = end;
	}
	assert_int_equal(*s, '\n');
	return s + 1;
}

/* ------------------------------------------------------------ tests */

static void test_help_and_usage(void **state)
{
	const char *tools[] = {build_tool, inspect_tool};
	const char *names[] = {"embtier-build", "embtier-inspect"};
	struct run r;

	for (int i = 0; i < 2; i++) {
		run(&r, tools[i], "--help", NULL);
		assert_int_equal(r.status, 0);
		assert_non_null(strstr(r.out, "usage: "));
		assert_int_equal(r.err_len, 0);
		run_free(&r);

		run(&r, tools[i], "--no-such-option", NULL);
		assert_int_equal(r.status, 2);
		assert_int_equal(count_lines(r.err), 1);
		assert_int_equal(strncmp(r.err, names[i], strlen(names[i])), 0);
		assert_int_equal(r.out_len, 0);
		run_free(&r);

		run(&r, tools[i], NULL);
		assert_int_equal(r.status, 2);
		assert_int_equal(count_lines(r.err), 1);
		run_free(&r);
	}
	run(&r, build_tool, "--rows", "12x", "--dim", "4", "x", NULL);
	assert_int_equal(r.status, 2);
	assert_int_equal(count_lines(r.err), 1);
	run_free(&r);
}

/* Raw f32 in, raw f32 out: identical bytes, over several chunks. */
static void test_raw_roundtrip(void **state)
{
	const uint64_t rows = 1000;
	const uint32_t dim = 64;
	char raw[PATH_MAX], tab[PATH_MAX], out[PATH_MAX], out2[PATH_MAX];
	float *v = malloc(rows * dim * 4), *got, vals[64], lib[64];
	struct et_table_info ti;
	const char *line;
	uint64_t row, id;
	size_t len;
	struct run r;
	et_tfile *tf;

	tpath(raw, "rt.raw");
	tpath(tab, "rt.et");
	tpath(out, "rt.out");
	tpath(out2, "rt.out2");
	for (uint64_t i = 0; i < rows * dim; i++)
		v[i] = rand_f32();
	write_file(raw, v, rows * dim * 4);

	/* 64 KiB chunks: 256 rows, four write_range calls, the last short. */
	run(&r, build_tool, "--from-raw", raw, "--dim", "64", "--chunk-size",
	    "65536", tab, NULL);
	expect_ok(&r);
	assert_int_equal(r.out_len, 0);
	run_free(&r);

	ti = table_info(tab);
	assert_int_equal(ti.rows, rows);
	assert_int_equal(ti.dim, dim);
	assert_int_equal(ti.dtype, ET_F32);
	assert_int_equal(ti.blocks_written, ti.blocks);
	assert_int_equal(ti.blocks,
			 (rows + ti.rows_per_block - 1) / ti.rows_per_block);

	run(&r, inspect_tool, "--export-raw", out, tab, NULL);
	expect_ok(&r);
	assert_int_equal(r.out_len, 0);
	run_free(&r);
	got = read_file(out, &len);
	assert_int_equal(len, rows * dim * 4);
	assert_memory_equal(got, v, len);
	free(got);

	/* A range, and refusal to overwrite without --force. */
	run(&r, inspect_tool, "--export-raw", out, "--range", "10:20", tab,
	    NULL);
	expect_fail(&r, "embtier-inspect", "exists");
	run_free(&r);
	run(&r, inspect_tool, "-f", "--export-raw", out, "--range", "990:", tab,
	    NULL);
	expect_ok(&r);
	run_free(&r);
	got = read_file(out, &len);
	assert_int_equal(len, 10 * dim * 4);
	assert_memory_equal(got, v + 990 * dim, len);
	free(got);

	/* --dump prints %.9g: exact for f32; and agrees with the library. */
	run(&r, inspect_tool, "--dump", "998:1000", tab, NULL);
	expect_ok(&r);
	assert_int_equal(count_lines(r.out), 2);
	line = r.out;
	assert_int_equal(et_tfile_open(tab, ET_TFILE_RDONLY, &tf), 0);
	for (int i = 0; i < 2; i++) {
		line = parse_dump_line(line, &row, vals, dim);
		assert_int_equal(row, 998 + i);
		assert_memory_equal(vals, v + row * dim, dim * 4);
		id = row;
		assert_int_equal(et_tfile_read_rows(tf, &id, 1, lib, NULL), 0);
		assert_memory_equal(vals, lib, dim * 4);
	}
	et_tfile_close(tf);
	run_free(&r);

	/* Past the end is an error, not a short dump. */
	run(&r, inspect_tool, "--dump", "999:1001", tab, NULL);
	expect_fail(&r, "embtier-inspect", et_strerror(ET_EROWRANGE));
	run_free(&r);

	/* More --rows than the input holds: the rest is lazy (zeros). */
	run(&r, build_tool, "-q", "--from-raw", raw, "--dim", "64", "--rows",
	    "5000", out2, NULL);
	expect_ok(&r);
	run_free(&r);
	ti = table_info(out2);
	assert_int_equal(ti.rows, 5000);
	assert_int_equal(ti.blocks_written,
			 (rows + ti.rows_per_block - 1) / ti.rows_per_block);
	run(&r, inspect_tool, "--dump", "4999", out2, NULL);
	expect_ok(&r);
	parse_dump_line(r.out, &row, vals, dim);
	assert_int_equal(row, 4999);
	for (uint32_t c = 0; c < dim; c++)
		assert_true(vals[c] == 0.0f);
	run_free(&r);

	/* An existing output is refused without --force, replaced with it. */
	run(&r, build_tool, "--rows", "10", "--dim", "8", tab, NULL);
	expect_fail(&r, "embtier-build", "exists");
	run_free(&r);
	assert_int_equal(table_info(tab).dim, 64);
	run(&r, build_tool, "-q", "-f", "--rows", "10", "--dim", "8", tab,
	    NULL);
	expect_ok(&r);
	assert_int_equal(r.err_len, 0);
	run_free(&r);
	ti = table_info(tab);
	assert_int_equal(ti.dim, 8);
	assert_int_equal(ti.rows, 10);
	expect_no_partials();

	unlink(raw);
	unlink(tab);
	unlink(out);
	unlink(out2);
	free(v);
}

/* .npy f32, in every header version, round-trips exactly through export. */
static void test_npy_f32(void **state)
{
	const uint64_t rows = 300;
	const uint32_t dim = 24;
	char in[PATH_MAX], tab[PATH_MAX], out[PATH_MAX];
	char dict[] =
	    "{'descr': '<f4', 'fortran_order': False, 'shape': (300, 24), }";
	float *v = malloc(rows * dim * 4), *got;
	struct run r;

	for (uint64_t i = 0; i < rows * dim; i++)
		v[i] = rand_f32();
	tpath(in, "f32.npy");
	tpath(tab, "f32.et");
	tpath(out, "f32.out.npy");
	for (int version = 1; version <= 3; version++) {
		write_npy(in, version, dict, v, rows * dim * 4);
		unlink(tab);
		unlink(out);
		run(&r, build_tool, "-q", "--from-npy", in, "-o", tab, NULL);
		expect_ok(&r);
		run_free(&r);
		assert_int_equal(table_info(tab).dtype, ET_F32);
		assert_int_equal(table_info(tab).dim, dim);

		run(&r, inspect_tool, "--export", out, tab, NULL);
		expect_ok(&r);
		run_free(&r);
		got = read_npy_f32(out, rows, dim);
		assert_memory_equal(got, v, rows * dim * 4);
		free(got);
	}

	/* A range of rows, with the Python 2 spelling of the shape. */
	write_npy(in, 1,
		  "{'descr':'<f4','fortran_order':False,'shape':(300L,24L)}", v,
		  rows * dim * 4);
	unlink(tab);
	run(&r, build_tool, "-q", "--from-npy", in, tab, NULL);
	expect_ok(&r);
	run_free(&r);
	run(&r, inspect_tool, "-f", "--export", out, "--range", "7:107", tab,
	    NULL);
	expect_ok(&r);
	run_free(&r);
	got = read_npy_f32(out, 100, dim);
	assert_memory_equal(got, v + 7 * dim, 100 * dim * 4);
	free(got);

	/* bf16 storage: what comes back is the value rounded to bf16. */
	unlink(tab);
	run(&r, build_tool, "-q", "--dtype", "bf16", "--from-npy", in, tab,
	    NULL);
	expect_ok(&r);
	run_free(&r);
	assert_int_equal(table_info(tab).dtype, ET_BF16);
	run(&r, inspect_tool, "-f", "--export", out, tab, NULL);
	expect_ok(&r);
	run_free(&r);
	got = read_npy_f32(out, rows, dim);
	for (uint64_t i = 0; i < rows * dim; i++) {
		float want = et_bf16_to_f32(et_f32_to_bf16(v[i]));

		assert_memory_equal(&got[i], &want, 4);
	}
	free(got);

	unlink(in);
	unlink(tab);
	unlink(out);
	free(v);
}

/* .npy f16, stored as f16: exported f32 values are exactly the inputs. */
static void test_npy_f16(void **state)
{
	const uint64_t rows = 257;
	const uint32_t dim = 40;
	char in[PATH_MAX], tab[PATH_MAX], out[PATH_MAX], dict[128];
	uint16_t *h = malloc(rows * dim * 2);
	struct run r;
	float *got;

	for (uint64_t i = 0; i < rows * dim; i++) {
		do
			h[i] = (uint16_t)rng();
		while ((h[i] & 0x7c00) == 0x7c00 && (h[i] & 0x3ff)); /* NaN */
	}
	snprintf(dict, sizeof(dict),
		 "{'descr': '<f2', 'fortran_order': False, 'shape': (%" PRIu64
		 ", %u), }",
		 rows, dim);
	tpath(in, "f16.npy");
	tpath(tab, "f16.et");
	tpath(out, "f16.out.npy");
	write_npy(in, 1, dict, h, rows * dim * 2);

	/* A '<f2' input is stored as f16 unless told otherwise. */
	run(&r, build_tool, "-q", "--from-npy", in, tab, NULL);
	expect_ok(&r);
	run_free(&r);
	assert_int_equal(table_info(tab).dtype, ET_F16);
	run(&r, inspect_tool, "--json", tab, NULL);
	expect_ok(&r);
	assert_non_null(strstr(r.out, "\"dtype\": \"f16\""));
	assert_non_null(strstr(r.out, "\"rows\": 257,"));
	assert_non_null(strstr(r.out, "\"dim\": 40,"));
	assert_int_equal(count_lines(r.out), 1);
	run_free(&r);

	run(&r, inspect_tool, "--export", out, tab, NULL);
	expect_ok(&r);
	run_free(&r);
	got = read_npy_f32(out, rows, dim);
	for (uint64_t i = 0; i < rows * dim; i++) {
		float want = et_f16_to_f32(h[i]);

		assert_memory_equal(&got[i], &want, 4);
		assert_int_equal(et_f32_to_f16(got[i]), h[i]);
	}
	free(got);

	/* Stored as f32 instead: the same values. */
	unlink(tab);
	run(&r, build_tool, "-q", "--dtype", "f32", "--from-npy", in, tab,
	    NULL);
	expect_ok(&r);
	run_free(&r);
	assert_int_equal(table_info(tab).dtype, ET_F32);
	run(&r, inspect_tool, "-f", "--export", out, tab, NULL);
	expect_ok(&r);
	run_free(&r);
	got = read_npy_f32(out, rows, dim);
	for (uint64_t i = 0; i < rows * dim; i++) {
		float want = et_f16_to_f32(h[i]);

		assert_memory_equal(&got[i], &want, 4);
	}
	free(got);

	unlink(in);
	unlink(tab);
	unlink(out);
	free(h);
}

/* 2^33 rows x 128: 4 TiB logical, built at once, a few KiB on disk. */
static void test_lazy_huge(void **state)
{
	const uint64_t rows = 1ULL << 33;
	char tab[PATH_MAX], json[64];
	float vals[128], lib[128];
	struct et_table_info ti;
	struct timespec t0, t1;
	struct stat st;
	uint64_t row, id;
	struct run r;
	et_tfile *tf;
	double secs;

	tpath(tab, "huge.et");
	clock_gettime(CLOCK_MONOTONIC, &t0);
	run(&r, build_tool, "--rows", "2^33", "--dim", "128", "--init",
	    "uniform", "--seed", "7", tab, NULL);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	expect_ok(&r);
	assert_int_equal(r.out_len, 0);
	run_free(&r);
	secs = (double)(t1.tv_sec - t0.tv_sec) +
	       (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
	assert_true(secs < 5.0);

	assert_int_equal(stat(tab, &st), 0);
	assert_true((uint64_t)st.st_blocks * 512 <= 1 << 20);

	run(&r, inspect_tool, "--json", tab, NULL);
	expect_ok(&r);
	assert_non_null(strstr(r.out, "\"rows\": 8589934592,"));
	assert_non_null(strstr(r.out, "\"dim\": 128,"));
	assert_non_null(strstr(r.out, "\"init\": \"uniform\""));
	assert_non_null(strstr(r.out, "\"seed\": 7,"));
	assert_non_null(strstr(r.out, "\"blocks_written\": 0,"));
	ti = table_info(tab);
	assert_true(ti.logical_bytes >= rows * 128 * 4);
	assert_true(ti.disk_bytes <= 1 << 20);
	snprintf(json, sizeof(json), "\"disk_bytes\": %" PRIu64 ",",
		 ti.disk_bytes);
	assert_non_null(strstr(r.out, json));
	run_free(&r);

	/* The text form says the same. */
	run(&r, inspect_tool, tab, NULL);
	expect_ok(&r);
	assert_non_null(strstr(r.out, "rows            8589934592\n"));
	assert_non_null(strstr(r.out, "blocks written  0\n"));
	snprintf(json, sizeof(json), "logical size    %" PRIu64 " (",
		 ti.logical_bytes);
	assert_non_null(strstr(r.out, json));
	run_free(&r);

	/* The last row comes from the initializer, as the library says. */
	run(&r, inspect_tool, "--dump", "8589934591", tab, NULL);
	expect_ok(&r);
	parse_dump_line(r.out, &row, vals, 128);
	assert_int_equal(row, rows - 1);
	run_free(&r);
	assert_int_equal(et_tfile_open(tab, ET_TFILE_RDONLY, &tf), 0);
	id = rows - 1;
	assert_int_equal(et_tfile_read_rows(tf, &id, 1, lib, NULL), 0);
	et_tfile_close(tf);
	assert_memory_equal(vals, lib, sizeof(vals));
	for (int c = 0; c < 128; c++)
		assert_true(fabsf(vals[c]) <= 1.0f / sqrtf(128.0f) * 1.0001f);

	run(&r, inspect_tool, "--dump", "2^33", tab, NULL);
	expect_fail(&r, "embtier-inspect", et_strerror(ET_EROWRANGE));
	run_free(&r);

	/* Verifying nothing written is quick and good. */
	run(&r, inspect_tool, "--verify", tab, NULL);
	expect_ok(&r);
	assert_int_equal(count_lines(r.out), 1);
	run_free(&r);
	unlink(tab);
}

/*
 * --written: of a 2^33-row lazy table that a store trained four rows of,
 * a dump shows those four rows in order (values as the library reads
 * them) and an export writes them with their ids (--ids); a range
 * narrows them (its end excluded); the options' misuse is a usage error.
 */
static void test_written(void **state)
{
	const uint64_t want[4] = {5, 1000, (1ULL << 32) + 7, (1ULL << 33) - 1};
	const uint64_t in[4] = {(1ULL << 33) - 1, 5, (1ULL << 32) + 7, 1000};
	struct et_update_params up = {.lr = 0.5f};
	char dir[PATH_MAX], tab[PATH_MAX], out[PATH_MAX], ids[PATH_MAX];
	float g[4 * 8], lib[4 * 8], st[4], vals[9];
	const char *s;
	size_t len;
	uint64_t row;
	unsigned char *f;
	struct run r;
	et_store *store;
	et_tfile *tf;
	int t;

	(void)state;
	tpath(dir, "wstore");
	assert_int_equal(mkdir(dir, 0755), 0);
	tpath(tab, "wstore/t.et");
	run(&r, build_tool, "--rows", "2^33", "--dim", "8", "--init", "uniform",
	    "--optim", "adagrad", tab, NULL);
	expect_ok(&r);
	run_free(&r);
	for (int i = 0; i < 4 * 8; i++)
		g[i] = (float)(i % 7) - 3.0f;
	assert_int_equal(et_store_open(dir, NULL, &store), 0);
	assert_int_equal(et_table_open(store, "t", NULL, &t), 0);
	assert_int_equal(et_update(store, t, in, 4, g, &up), 0);
	assert_int_equal(et_checkpoint(store, NULL, 0), 0);
	assert_int_equal(et_store_close(store), 0);
	assert_int_equal(et_tfile_open(tab, ET_TFILE_RDONLY, &tf), 0);
	assert_int_equal(et_tfile_read_rows(tf, want, 4, lib, st), 0);
	et_tfile_close(tf);

	run(&r, inspect_tool, "--dump", "0:", "--written", "--state", "-q", tab,
	    NULL);
	expect_ok(&r);
	assert_int_equal(count_lines(r.out), 4);
	s = r.out;
	for (int i = 0; i < 4; i++) {
		s = parse_dump_line(s, &row, vals, 9);
		assert_int_equal(row, want[i]);
		assert_memory_equal(vals, lib + i * 8, 8 * sizeof(float));
		assert_true(vals[8] == st[i] && st[i] > 0);
	}
	run_free(&r);

	tpath(out, "w.npy");
	tpath(ids, "w.ids.npy");
	run(&r, inspect_tool, "--export", out, "--written", "--ids", ids,
	    "--range", "5:4294967303", "-q", tab, NULL);
	expect_ok(&r);
	run_free(&r);
	f = read_file(out, &len);
	assert_non_null(strstr((char *)f + 10, "'shape': (2, 8)"));
	assert_int_equal(len, 128 + 2 * 8 * sizeof(float));
	assert_memory_equal(f + 128, lib, 2 * 8 * sizeof(float));
	free(f);
	f = read_file(ids, &len);
	assert_non_null(strstr((char *)f + 10, "'descr': '<u8'"));
	assert_non_null(strstr((char *)f + 10, "'shape': (2,)"));
	assert_int_equal(len, 128 + 2 * sizeof(uint64_t));
	assert_memory_equal(f + 128, want, 2 * sizeof(uint64_t));
	free(f);

	/* misuse: a usage error (status 2), nothing written */
	unlink(out);
	unlink(ids);
	{
		const char *bad[][6] = {
		    {"--written", tab},
		    {"--export", out, "--written", tab},
		    {"--export", out, "--ids", ids, tab},
		    {"--dump", "0", "--written", "--ids", ids, tab},
		};

		for (int i = 0; i < 4; i++) {
			run(&r, inspect_tool, bad[i][0], bad[i][1], bad[i][2],
			    bad[i][3], bad[i][4], bad[i][5], NULL);
			assert_int_equal(r.status, 2);
			assert_int_equal(count_lines(r.err), 1);
			run_free(&r);
			assert_int_equal(access(out, F_OK), -1);
			assert_int_equal(access(ids, F_OK), -1);
		}
	}
}

/*
 * A keyed table (created through the public API) storing ids 0, 1, 2^63
 * and UINT64_MAX (and 42, written, then erased): inspect shows it keyed
 * with 4 stored ids, --list lists exactly those ids ascending (a range
 * narrows them; UINT64_MAX alone too), a --written dump and export give
 * them with the values the library reads, --verify checks their records;
 * walking every id of the table (a dump or export of "A:" without
 * --written) is refused rather than run for 2^64 rows. An alarm turns a
 * walk that never ends (stepping past UINT64_MAX) into a failure.
 */
static void test_keyed(void **state)
{
	const uint64_t want[4] = {0, 1, 1ULL << 63, UINT64_MAX};
	const uint64_t in[5] = {UINT64_MAX, 42, 1ULL << 63, 0, 1};
	const uint64_t erase = 42;
	const struct et_table_params tp = {.dim = 4,
					   .dtype = ET_F32,
					   .init = ET_INIT_UNIFORM,
					   .seed = 9,
					   .flags = ET_TABLE_KEYED};
	struct et_store_config c = {.ddr_bytes = 1 << 20};
	char dir[PATH_MAX], tab[PATH_MAX], out[PATH_MAX], ids[PATH_MAX];
	float v[5 * 4], lib[4 * 4], vals[4];
	const char *sp;
	unsigned char *f;
	uint64_t row, erased = 0;
	size_t len;
	struct run r;
	et_store *s;
	et_tfile *tf;
	int t;

	(void)state;
	alarm(60);
	tpath(dir, "kstore");
	assert_int_equal(mkdir(dir, 0755), 0);
	for (int i = 0; i < 5 * 4; i++)
		v[i] = (float)i * 0.5f - 3.0f;
	assert_int_equal(et_store_open(dir, &c, &s), 0);
	assert_int_equal(et_table_create(s, "k", &tp, &t), 0);
	assert_int_equal(et_write_rows(s, t, in, 5, v), 0);
	assert_int_equal(et_erase(s, t, &erase, 1, &erased), 0);
	assert_int_equal(erased, 1);
	assert_int_equal(et_checkpoint(s, NULL, 0), 0);
	assert_int_equal(et_store_close(s), 0);
	tpath(tab, "kstore/k.et");
	assert_int_equal(et_tfile_open(tab, ET_TFILE_RDONLY, &tf), 0);
	assert_int_equal(et_tfile_read_rows(tf, want, 4, lib, NULL), 0);
	et_tfile_close(tf);
	assert_memory_equal(lib + 3 * 4, v, 4 * sizeof(float)); /* max */

	run(&r, inspect_tool, "--list", ":", tab, NULL);
	expect_ok(&r);
	assert_string_equal(r.out, "0\n1\n9223372036854775808\n"
				   "18446744073709551615\n");
	assert_int_equal(r.err_len, 0);
	run_free(&r);
	run(&r, inspect_tool, "--list", "1:", tab, NULL);
	expect_ok(&r);
	assert_string_equal(r.out,
			    "1\n9223372036854775808\n18446744073709551615\n");
	run_free(&r);
	run(&r, inspect_tool, "--list", "2:2^63", tab, NULL);
	expect_ok(&r);
	assert_int_equal(r.out_len, 0);
	run_free(&r);
	run(&r, inspect_tool, "--list", "18446744073709551615", tab, NULL);
	expect_ok(&r);
	assert_string_equal(r.out, "18446744073709551615\n");
	run_free(&r);

	run(&r, inspect_tool, tab, NULL);
	expect_ok(&r);
	assert_non_null(strstr(r.out, "rows            keyed"));
	assert_non_null(strstr(r.out, "stored ids      4\n"));
	run_free(&r);
	run(&r, inspect_tool, "--json", tab, NULL);
	expect_ok(&r);
	assert_non_null(strstr(r.out, "\"keyed\": true"));
	assert_non_null(strstr(r.out, "\"stored_ids\": 4"));
	run_free(&r);

	run(&r, inspect_tool, "--dump", "0:", "--written", "-q", tab, NULL);
	expect_ok(&r);
	assert_int_equal(count_lines(r.out), 4);
	sp = r.out;
	for (int i = 0; i < 4; i++) {
		sp = parse_dump_line(sp, &row, vals, 4);
		assert_true(row == want[i]);
		assert_memory_equal(vals, lib + i * 4, sizeof(vals));
	}
	run_free(&r);

	/* one id, the last one: read, then the walk stops */
	run(&r, inspect_tool, "--dump", "18446744073709551615", tab, NULL);
	expect_ok(&r);
	parse_dump_line(r.out, &row, vals, 4);
	assert_true(row == UINT64_MAX);
	assert_memory_equal(vals, lib + 3 * 4, sizeof(vals));
	assert_int_equal(count_lines(r.out), 1);
	run_free(&r);

	tpath(out, "k.raw");
	tpath(ids, "k.ids");
	run(&r, inspect_tool, "--export-raw", out, "--written", "--ids", ids,
	    "-q", tab, NULL);
	expect_ok(&r);
	run_free(&r);
	f = read_file(ids, &len);
	assert_int_equal(len, sizeof(want));
	assert_memory_equal(f, want, sizeof(want));
	free(f);
	f = read_file(out, &len);
	assert_int_equal(len, sizeof(lib));
	assert_memory_equal(f, lib, sizeof(lib));
	free(f);
	unlink(out);
	unlink(ids);

	run(&r, inspect_tool, "--verify", tab, NULL);
	expect_ok(&r);
	assert_non_null(strstr(r.out, "4 row log records verified"));
	run_free(&r);

	/* every id of the table: refused, not 2^64 rows */
	run(&r, inspect_tool, "--dump", "5:", tab, NULL);
	expect_fail(&r, "embtier-inspect", "keyed");
	run_free(&r);
	run(&r, inspect_tool, "--export-raw", out, tab, NULL);
	expect_fail(&r, "embtier-inspect", "keyed");
	run_free(&r);
	assert_false(exists(out));

	/* A bad record is named by its id (its first 8 bytes), not by a
	 * block a keyed table does not have. */
	{
		char log[PATH_MAX + 8], msg[96];
		uint64_t first = 0;

		snprintf(log, sizeof(log), "%s.log", tab);
		for (int k = 7; k >= 0; k--)
			first = first << 8 | peek(log, (uint64_t)k);
		flip_byte(log, 16 + 2);
		run(&r, inspect_tool, "--verify", tab, NULL);
		expect_fail(&r, "embtier-inspect", et_strerror(ET_EBLOCKSUM));
		snprintf(msg, sizeof(msg),
			 "1 bad of 4 row log records (of the stored ids), id "
			 "%" PRIu64 " among them\n",
			 first);
		assert_non_null(strstr(r.err, msg));
		run_free(&r);
	}
	alarm(0);
}

/* Row-wise Adagrad keeps one f32 of state per row: --state shows it (zero
 * after a bulk load) in dumps and exports, as one more column. */
static void test_state(void **state)
{
	const uint64_t rows = 50;
	const uint32_t dim = 6;
	char raw[PATH_MAX], tab[PATH_MAX], out[PATH_MAX];
	float v[50 * 6], vals[7], *got;
	uint64_t row;
	struct run r;

	for (uint64_t i = 0; i < rows * dim; i++)
		v[i] = rand_f32();
	tpath(raw, "state.raw");
	tpath(tab, "state.et");
	tpath(out, "state.npy");
	write_file(raw, v, sizeof(v));
	run(&r, build_tool, "-q", "--optim", "adagrad", "--from-raw", raw,
	    "--dim", "6", tab, NULL);
	expect_ok(&r);
	run_free(&r);
	assert_int_equal(table_info(tab).state_floats, 1);
	assert_int_equal(table_info(tab).optim, ET_OPT_ROWWISE_ADAGRAD);

	run(&r, inspect_tool, "--dump", "49", "--state", tab, NULL);
	expect_ok(&r);
	parse_dump_line(r.out, &row, vals, dim + 1);
	assert_int_equal(row, 49);
	assert_memory_equal(vals, v + 49 * dim, dim * 4);
	assert_true(vals[dim] == 0.0f);
	run_free(&r);

	run(&r, inspect_tool, "--export", out, "--state", tab, NULL);
	expect_ok(&r);
	run_free(&r);
	got = read_npy_f32(out, rows, dim + 1);
	for (uint64_t i = 0; i < rows; i++) {
		assert_memory_equal(got + i * (dim + 1), v + i * dim, dim * 4);
		assert_true(got[i * (dim + 1) + dim] == 0.0f);
	}
	free(got);
	unlink(raw);
	unlink(tab);
	unlink(out);
}

/* Shared by the corruption tests: a fresh copy of a small written table. */
static char good_table[PATH_MAX];
static float *good_rows;
#define GOOD_ROWS 256
#define GOOD_DIM  32

static void corrupt_copy(char *path, const char *name)
{
	tpath(path, name);
	copy_file(good_table, path);
}

/* Opening fails the same way for every action of inspect. */
static void expect_open_fails(const char *path, const char *msg)
{
	struct run r;

	run(&r, inspect_tool, path, NULL);
	expect_fail(&r, "embtier-inspect", msg);
	run_free(&r);
	run(&r, inspect_tool, "--verify", path, NULL);
	expect_fail(&r, "embtier-inspect", msg);
	run_free(&r);
	run(&r, inspect_tool, "--dump", "0:2", path, NULL);
	expect_fail(&r, "embtier-inspect", msg);
	run_free(&r);
}

/* Recomputes the header checksum after a deliberate change of a field. */
static void reseal_header(const char *path)
{
	uint8_t hdr[256];
	uint64_t sum;
	int fd = open(path, O_RDWR);

	assert_true(fd >= 0);
	assert_int_equal(pread(fd, hdr, sizeof(hdr), 0), (ssize_t)sizeof(hdr));
	sum = XXH3_64bits(hdr, 248);
	for (int i = 0; i < 8; i++)
		hdr[248 + i] = (uint8_t)(sum >> (8 * i));
	assert_int_equal(pwrite(fd, hdr + 248, 8, 248), 8);
	close(fd);
}

static void test_corrupt_header(void **state)
{
	char p[PATH_MAX];
	uint32_t version = 99;
	uint64_t stored;
	uint8_t sum[8];

	/* The layout the test relies on, checked on the good file. */
	assert_int_equal(peek(good_table, 0), 'E');
	assert_int_equal(peek(good_table, 7), 'T');
	stored = 0;
	for (int i = 0; i < 8; i++)
		stored |= (uint64_t)peek(good_table, 16 + i) << (8 * i);
	assert_int_equal(stored, GOOD_ROWS);

	corrupt_copy(p, "magic.et");
	flip_byte(p, 0);
	expect_open_fails(p, et_strerror(ET_EMAGIC));

	corrupt_copy(p, "version.et");
	patch(p, 8, &version, 4);
	reseal_header(p);
	expect_open_fails(p, et_strerror(ET_EVERSION));

	/* A flipped byte in the rows field, then in the checksum itself. */
	corrupt_copy(p, "hdrsum.et");
	flip_byte(p, 16);
	expect_open_fails(p, et_strerror(ET_EHDRSUM));
	corrupt_copy(p, "hdrsum2.et");
	for (int i = 0; i < 8; i++)
		sum[i] = peek(p, 248 + i) ^ 1;
	patch(p, 248, sum, 8);
	expect_open_fails(p, et_strerror(ET_EHDRSUM));

	/* A field out of range, under a valid checksum. */
	corrupt_copy(p, "dim0.et");
	patch(p, 24, &(uint32_t){0}, 4);
	reseal_header(p);
	expect_open_fails(p, et_strerror(ET_EHEADER));

	corrupt_copy(p, "shorthdr.et");
	cut(p, 100);
	expect_open_fails(p, et_strerror(ET_ETRUNC));

	corrupt_copy(p, "empty.et");
	cut(p, 0);
	expect_open_fails(p, NULL);

	unlink(p);
}

static void test_truncated_file(void **state)
{
	struct et_table_info ti = table_info(good_table);
	char p[PATH_MAX];

	/* Header and three blocks left of more. */
	assert_true(ti.blocks > 3);
	corrupt_copy(p, "trunc.et");
	cut(p, ti.block_size + 3ULL * ti.block_size);
	expect_open_fails(p, et_strerror(ET_ETRUNC));

	/* One byte short of the last block. */
	corrupt_copy(p, "trunc2.et");
	cut(p, ti.block_size + ti.blocks * ti.block_size - 1);
	expect_open_fails(p, et_strerror(ET_ETRUNC));
	unlink(p);
}

/* A flipped byte in block 2: verify names it; reads of it fail; the other
 * blocks still read back exactly. */
static void test_corrupt_block(void **state)
{
	struct et_table_info ti = table_info(good_table);
	uint32_t rpb = ti.rows_per_block;
	char p[PATH_MAX], out[PATH_MAX], range[64], want[64];
	float vals[GOOD_DIM];
	uint64_t row;
	struct run r;

	corrupt_copy(p, "block.et");
	tpath(out, "block.out");
	/* The first row's values of block 2 start the block. */
	flip_byte(p, ti.block_size + 2ULL * ti.block_size + 5);

	run(&r, inspect_tool, "--verify", p, NULL);
	expect_fail(&r, "embtier-inspect", et_strerror(ET_EBLOCKSUM));
	snprintf(want, sizeof(want), "1 bad of %" PRIu64 " written blocks",
		 ti.blocks_written);
	assert_non_null(strstr(r.err, want));
	assert_non_null(strstr(r.err, "the first in block 2\n"));
	run_free(&r);

	snprintf(range, sizeof(range), "%u:%u", 2 * rpb, 2 * rpb + 1);
	run(&r, inspect_tool, "--dump", range, p, NULL);
	expect_fail(&r, "embtier-inspect", et_strerror(ET_EBLOCKSUM));
	run_free(&r);
	snprintf(range, sizeof(range), "%u", 3 * rpb - 1);
	run(&r, inspect_tool, "--dump", range, p, NULL);
	expect_fail(&r, "embtier-inspect", et_strerror(ET_EBLOCKSUM));
	run_free(&r);

	run(&r, inspect_tool, "--export-raw", out, p, NULL);
	expect_fail(&r, "embtier-inspect", et_strerror(ET_EBLOCKSUM));
	run_free(&r);
	assert_false(exists(out));

	/* Blocks 1 and 3 are fine. */
	snprintf(range, sizeof(range), "%u", 2 * rpb - 1);
	run(&r, inspect_tool, "--dump", range, p, NULL);
	expect_ok(&r);
	parse_dump_line(r.out, &row, vals, GOOD_DIM);
	assert_int_equal(row, 2 * rpb - 1);
	assert_memory_equal(vals, good_rows + row * GOOD_DIM, sizeof(vals));
	run_free(&r);
	snprintf(range, sizeof(range), "%u", 3 * rpb);
	run(&r, inspect_tool, "--dump", range, p, NULL);
	expect_ok(&r);
	parse_dump_line(r.out, &row, vals, GOOD_DIM);
	assert_memory_equal(vals, good_rows + row * GOOD_DIM, sizeof(vals));
	run_free(&r);

	/* And the untouched original verifies. */
	run(&r, inspect_tool, "--verify", good_table, NULL);
	expect_ok(&r);
	run_free(&r);
	unlink(p);
}

/* A table a store wrote keeps its rows in the row log: verify checks its
 * records too, and names the block of a bad one's row. */
static void test_corrupt_log_record(void **state)
{
	const struct et_table_params tp = {.rows = 1000,
					   .dim = 8,
					   .dtype = ET_F32,
					   .optim = ET_OPT_SGD,
					   .init = ET_INIT_UNIFORM,
					   .seed = 5};
	struct et_store_config c = {.ddr_bytes = 1 << 20};
	char dir[PATH_MAX], tab[PATH_MAX + 16], log[PATH_MAX + 16], want[96];
	uint64_t ids[100], first;
	float rows[100 * 8];
	struct et_table_info ti;
	et_store *s;
	struct run r;
	int t;

	(void)state;
	tpath(dir, "logstore");
	assert_int_equal(mkdir(dir, 0755), 0);
	for (int i = 0; i < 100; i++) {
		ids[i] = (uint64_t)i * 7 + 3;
		for (int j = 0; j < 8; j++)
			rows[i * 8 + j] = (float)(i * 8 + j);
	}
	assert_int_equal(et_store_open(dir, &c, &s), 0);
	assert_int_equal(et_table_create(s, "t", &tp, &t), 0);
	assert_int_equal(et_write_rows(s, t, ids, 100, rows), 0);
	assert_int_equal(et_table_info(s, t, &ti), 0);
	assert_int_equal(et_store_close(s), 0);

	snprintf(tab, sizeof(tab), "%s/t.et", dir);
	snprintf(log, sizeof(log), "%s/t.et.log", dir);
	run(&r, inspect_tool, "--verify", tab, NULL);
	expect_ok(&r);
	assert_non_null(strstr(r.out, "100 row log records verified"));
	run_free(&r);

	/* The first record's row id is its first 8 bytes; a byte of its
	 * values (after the 16-byte header) goes bad. */
	first = 0;
	for (int k = 7; k >= 0; k--)
		first = first << 8 | peek(log, (uint64_t)k);
	flip_byte(log, 16 + 2);
	run(&r, inspect_tool, "--verify", tab, NULL);
	expect_fail(&r, "embtier-inspect", et_strerror(ET_EBLOCKSUM));
	snprintf(want, sizeof(want),
		 "1 bad of 0 written blocks and 100 row log records, the "
		 "first in block %" PRIu64 "\n",
		 first / ti.rows_per_block);
	assert_non_null(strstr(r.err, want));
	run_free(&r);
}

static void test_bad_raw_input(void **state)
{
	char raw[PATH_MAX], tab[PATH_MAX];
	char data[4 * 8 * 3 + 4] = {0};
	struct run r;

	tpath(raw, "bad.raw");
	tpath(tab, "bad-raw.et");
	write_file(raw, data, sizeof(data)); /* 3 rows of dim 8, plus 4 B */
	run(&r, build_tool, "--from-raw", raw, "--dim", "8", tab, NULL);
	expect_fail(&r, "embtier-build",
		    "size 100 is not a multiple of the row size 32");
	run_free(&r);
	assert_false(exists(tab));

	write_file(raw, data, 0);
	run(&r, build_tool, "--from-raw", raw, "--dim", "8", tab, NULL);
	expect_fail(&r, "embtier-build", "empty");
	run_free(&r);
	assert_false(exists(tab));

	tpath(raw, "no-such.raw");
	run(&r, build_tool, "--from-raw", raw, "--dim", "8", tab, NULL);
	expect_fail(&r, "embtier-build", et_strerror(-ENOENT));
	run_free(&r);
	assert_false(exists(tab));
	expect_no_partials();
	tpath(raw, "bad.raw");
	unlink(raw);
}

static void test_bad_npy(void **state)
{
	static const struct {
		int version;
		const char *dict;
		size_t data; /* bytes of data after the header */
		const char *msg;
	} cases[] = {
	    {1, "{'descr': '<f8', 'fortran_order': False, 'shape': (3, 4), }",
	     96, "unsupported .npy dtype '<f8'"},
	    {1, "{'descr': '>f4', 'fortran_order': False, 'shape': (3, 4), }",
	     48, "unsupported .npy dtype '>f4'"},
	    {1, "{'descr': '<f4', 'fortran_order': True, 'shape': (3, 4), }",
	     48, "fortran_order"},
	    {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (12,), }",
	     48, "1-D"},
	    {1,
	     "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3, 2), }",
	     48, "3-D"},
	    {1, "{'descr': '<f4', 'fortran_order': False, }", 48,
	     "missing key"},
	    {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4)", 48,
	     "malformed .npy header"},
	    {2, "{'descr': '<f4', 'fortran_order': Flase, 'shape': (3, 4), }",
	     48, "malformed .npy header"},
	    {1, "['descr', '<f4']", 48, "malformed .npy header"},
	    {1,
	     "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), "
	     "'extra': 1}",
	     48, "malformed .npy header"},
	    {1, "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }",
	     47, "truncated .npy data"},
	    {4, "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }",
	     48, "version"},
	};
	char in[PATH_MAX], tab[PATH_MAX];
	char data[128] = {0};
	uint8_t raw[16];
	struct run r;

	tpath(in, "bad.npy");
	tpath(tab, "bad-npy.et");
	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		write_npy(in, cases[i].version, cases[i].dict, data,
			  cases[i].data);
		run(&r, build_tool, "--from-npy", in, tab, NULL);
		expect_fail(&r, "embtier-build", cases[i].msg);
		run_free(&r);
		assert_false(exists(tab));
	}

	/* Not .npy at all; a header cut short; a length past the end. */
	write_file(in, "just some text\n", 15);
	run(&r, build_tool, "--from-npy", in, tab, NULL);
	expect_fail(&r, "embtier-build", "not a .npy file");
	run_free(&r);
	memcpy(raw, "\x93NUMPY\x01\x00\x40", 9);
	write_file(in, raw, 9);
	run(&r, build_tool, "--from-npy", in, tab, NULL);
	expect_fail(&r, "embtier-build", "truncated .npy header");
	run_free(&r);
	memcpy(raw, "\x93NUMPY\x01\x00\x40\x00{'descr'", 16);
	write_file(in, raw, 16);
	run(&r, build_tool, "--from-npy", in, tab, NULL);
	expect_fail(&r, "embtier-build", "truncated .npy header");
	run_free(&r);
	assert_false(exists(tab));

	/* A good header whose dim disagrees with --dim. */
	write_npy(in, 1,
		  "{'descr': '<f4', 'fortran_order': False, 'shape': (3, 4), }",
		  data, 48);
	run(&r, build_tool, "--from-npy", in, "--dim", "5", tab, NULL);
	expect_fail(&r, "embtier-build", "--dim");
	run_free(&r);
	assert_false(exists(tab));
	expect_no_partials();
	unlink(in);
}

/* ------------------------------------------------------------- deltas */

/* Every stored row of a table file, as of its store's last commit: its ids
 * (et_tfile_rows), values and optimizer state (et_tfile_read_rows); of a
 * row-indexed table, also every row of it, written or not. */
struct table_rows {
	struct et_table_info ti;
	uint64_t n, *ids;
	float *vals, *state;
	float *all; /* row-indexed: rows 0 .. ti.rows - 1 */
};

static void rows_take(const char *path, struct table_rows *t)
{
	uint64_t from = 0, cap = 1024, *all_ids;
	et_tfile *tf;
	size_t k;

	memset(t, 0, sizeof(*t));
	assert_int_equal(et_tfile_open(path, ET_TFILE_RDONLY, &tf), 0);
	assert_int_equal(et_tfile_info(tf, &t->ti), 0);
	t->ids = malloc(cap * sizeof(*t->ids));
	assert_non_null(t->ids);
	do {
		if (t->n + 1024 > cap) {
			cap *= 2;
			t->ids = realloc(t->ids, cap * sizeof(*t->ids));
			assert_non_null(t->ids);
		}
		assert_int_equal(
		    et_tfile_rows(tf, from, t->ids + t->n, 1024, &k), 0);
		t->n += k;
		if (k)
			from = t->ids[t->n - 1] + 1;
	} while (k == 1024 && from);
	t->vals = malloc((t->n + 1) * t->ti.dim * sizeof(float));
	t->state =
	    malloc((t->n + 1) * (t->ti.state_floats + 1) * sizeof(float));
	assert_non_null(t->vals);
	assert_non_null(t->state);
	if (t->n)
		assert_int_equal(
		    et_tfile_read_rows(tf, t->ids, t->n, t->vals, t->state), 0);
	if (!(t->ti.flags & ET_TABLE_KEYED)) {
		all_ids = malloc(t->ti.rows * sizeof(*all_ids));
		t->all = malloc(t->ti.rows * t->ti.dim * sizeof(float));
		assert_non_null(all_ids);
		assert_non_null(t->all);
		for (uint64_t i = 0; i < t->ti.rows; i++)
			all_ids[i] = i;
		assert_int_equal(
		    et_tfile_read_rows(tf, all_ids, t->ti.rows, t->all, NULL),
		    0);
		free(all_ids);
	}
	et_tfile_close(tf);
}

static void rows_free(struct table_rows *t)
{
	free(t->ids);
	free(t->vals);
	free(t->state);
	free(t->all);
	memset(t, 0, sizeof(*t));
}

/* The table at path holds exactly what want does, bit for bit: the same
 * shape, the same stored ids with the same values (and optimizer state,
 * with_state), and of a row-indexed table the same value in every row. */
static void expect_rows(const char *path, const struct table_rows *want,
			bool with_state)
{
	struct table_rows got;

	rows_take(path, &got);
	assert_int_equal(got.ti.flags & ET_TABLE_KEYED,
			 want->ti.flags & ET_TABLE_KEYED);
	assert_int_equal(got.ti.rows, want->ti.rows);
	assert_int_equal(got.ti.dim, want->ti.dim);
	assert_int_equal(got.ti.dtype, want->ti.dtype);
	assert_int_equal(got.ti.state_floats, want->ti.state_floats);
	if (got.n != want->n)
		fprintf(stderr,
			"%s: %" PRIu64 " stored rows, want %" PRIu64 "\n", path,
			got.n, want->n);
	assert_int_equal(got.n, want->n);
	assert_memory_equal(got.ids, want->ids, want->n * sizeof(uint64_t));
	assert_memory_equal(got.vals, want->vals,
			    want->n * want->ti.dim * sizeof(float));
	if (with_state)
		assert_memory_equal(got.state, want->state,
				    want->n * want->ti.state_floats *
					sizeof(float));
	if (want->all)
		assert_memory_equal(got.all, want->all,
				    want->ti.rows * want->ti.dim *
					sizeof(float));
	rows_free(&got);
}

static bool listed(const struct table_rows *t, uint64_t id)
{
	for (uint64_t i = 0; i < t->n; i++)
		if (t->ids[i] == id)
			return true;
	return false;
}

/* The dense state of the last commit of the store at dir is s. */
static void expect_dense(const char *dir, const char *s)
{
	struct et_checkpoint_info ci;
	void *dense = NULL;
	size_t len = 0;

	assert_int_equal(et_checkpoint_read_dir(dir, &ci, &dense, &len), 0);
	assert_int_equal(len, strlen(s));
	assert_memory_equal(dense, s, len);
	free(dense);
}

static uint64_t file_size(const char *path)
{
	struct stat st;

	assert_int_equal(stat(path, &st), 0);
	return (uint64_t)st.st_size;
}

static float small_f32(void)
{
	return (float)((int64_t)(rng() % 20001) - 10000) / 997.0f;
}

/* Writes n rows of ids to table t of s, random values and state. */
static void write_some(et_store *s, int t, const uint64_t *ids, size_t n,
		       uint32_t dim)
{
	float *v = malloc(n * dim * sizeof(float)), *st = malloc(n * 4);

	assert_non_null(v);
	assert_non_null(st);
	for (size_t i = 0; i < n * dim; i++)
		v[i] = small_f32();
	for (size_t i = 0; i < n; i++)
		st[i] = (float)(rng() % 1000) / 8.0f;
	assert_int_equal(et_write_rows_state(s, t, ids, n, v, st), 0);
	free(v);
	free(st);
}

/*
 * A store made through the library, a row-indexed f16 table and a keyed
 * one, each with row-wise Adagrad state. Commit 1: rows written; commit 2:
 * some rewritten, some new, keyed ids erased. embtier-inspect exports the
 * delta since 0 (every table whole) after commit 1, beside the live store,
 * and the one since 1 after commit 2; embtier-build applies them in order
 * to a serving copy, which then holds, after each, what the source did at
 * that commit, bit for bit: every stored row and its optimizer state, every
 * row of the row-indexed table, the erased ids gone, and the commit's dense
 * state. The second delta is refused by a fresh copy (it starts at commit
 * 1), and with one byte flipped, by any: the copy stays as it was.
 */
static void test_delta(void **state)
{
	const struct et_table_params ep = {.rows = 1000,
					   .dim = 8,
					   .dtype = ET_F16,
					   .optim = ET_OPT_ROWWISE_ADAGRAD,
					   .init = ET_INIT_UNIFORM,
					   .seed = 5};
	const struct et_table_params kp = {.dim = 4,
					   .dtype = ET_F32,
					   .optim = ET_OPT_ROWWISE_ADAGRAD,
					   .init = ET_INIT_NORMAL,
					   .seed = 6,
					   .flags = ET_TABLE_KEYED};
	struct et_store_config c = {.ddr_bytes = 1 << 20};
	char src[PATH_MAX], serve[PATH_MAX], plain[PATH_MAX], fresh[PATH_MAX];
	char d1[PATH_MAX], d1p[PATH_MAX], d2[PATH_MAX], bad[PATH_MAX];
	char semb[PATH_MAX + 16], skeys[PATH_MAX + 16], emb[PATH_MAX + 16];
	char keys[PATH_MAX + 16];
	struct table_rows emb1, keys1, emb2, keys2, got;
	uint64_t eids[400], kids[240], erased = 0;
	struct run r;
	et_store *s;
	int te, tk;

	(void)state;
	tpath(src, "dsrc");
	tpath(serve, "dserve");
	tpath(plain, "dplain");
	tpath(fresh, "dfresh");
	tpath(d1, "d1.etd");
	tpath(d1p, "d1plain.etd");
	tpath(d2, "d2.etd");
	tpath(bad, "d2bad.etd");
	snprintf(semb, sizeof(semb), "%s/emb.et", src);
	snprintf(skeys, sizeof(skeys), "%s/keys.et", src);
	snprintf(emb, sizeof(emb), "%s/emb.et", serve);
	snprintf(keys, sizeof(keys), "%s/keys.et", serve);
	for (int i = 0; i < 400; i++) /* 300 at commit 1, 100 more at 2 */
		eids[i] =
		    i < 300 ? (uint64_t)i * 3 : (uint64_t)(i - 300) * 3 + 1;
	for (int i = 0; i < 240; i++) /* 200 at commit 1, 40 more at 2 */
		kids[i] = rng() | 1;

	assert_int_equal(mkdir(src, 0755), 0);
	assert_int_equal(et_store_open(src, &c, &s), 0);
	assert_int_equal(et_table_create(s, "emb", &ep, &te), 0);
	assert_int_equal(et_table_create(s, "keys", &kp, &tk), 0);
	write_some(s, te, eids, 300, 8);
	write_some(s, tk, kids, 200, 4);
	assert_int_equal(et_checkpoint(s, "dense one", 9), 0);
	rows_take(semb, &emb1);
	rows_take(skeys, &keys1);
	assert_int_equal(emb1.n, 300);
	assert_int_equal(keys1.n, 200);

	/* everything written, beside the live store */
	run(&r, inspect_tool, "--delta-since", "0", "--out", d1, "--state", src,
	    NULL);
	expect_ok(&r);
	assert_int_equal(r.err_len, 0);
	assert_non_null(strstr(r.out, "from commit     0"));
	assert_non_null(strstr(r.out, "to commit       1 "));
	assert_non_null(strstr(r.out, "tables          2 (2 taken whole)\n"));
	assert_non_null(
	    strstr(r.out, "rows            500 (with optimizer state)\n"));
	assert_non_null(strstr(r.out, "tombstones      0\n"));
	assert_non_null(strstr(r.out, "MB/s\n"));
	run_free(&r);
	run(&r, inspect_tool, "--delta-since", "0", "--out", d1p, src, NULL);
	expect_ok(&r);
	run_free(&r);
	assert_true(file_size(d1p) < file_size(d1));
	/* a new file only, unless --force */
	run(&r, inspect_tool, "--delta-since", "0", "--out", d1p, src, NULL);
	expect_fail(&r, "embtier-inspect", "--force");
	run_free(&r);
	/* past the last commit */
	run(&r, inspect_tool, "--delta-since", "2", "--out", bad, src, NULL);
	expect_fail(&r, "embtier-inspect", "last commit (1)");
	run_free(&r);
	assert_false(exists(bad));

	/* commit 2: 50 rows and 30 ids rewritten, 100 and 40 new, 20 of the
	 * first ids erased */
	write_some(s, te, eids, 50, 8);
	write_some(s, te, eids + 300, 100, 8);
	write_some(s, tk, kids, 30, 4);
	write_some(s, tk, kids + 200, 40, 4);
	assert_int_equal(et_erase(s, tk, kids + 100, 20, &erased), 0);
	assert_int_equal(erased, 20);
	assert_int_equal(et_checkpoint(s, "dense two", 9), 0);
	assert_int_equal(et_store_close(s), 0);
	rows_take(semb, &emb2);
	rows_take(skeys, &keys2);
	assert_int_equal(emb2.n, 400);
	assert_int_equal(keys2.n, 220);

	run(&r, inspect_tool, "--delta-since", "1", "--out", d2, "--state",
	    "--json", src, NULL);
	expect_ok(&r);
	assert_int_equal(count_lines(r.out), 1);
	assert_non_null(strstr(r.out, "\"from_commit\": 1,"));
	assert_non_null(strstr(r.out, "\"to_commit\": 2,"));
	assert_non_null(strstr(r.out, "\"tables\": 2, \"whole\": 0,"));
	assert_non_null(strstr(r.out, "\"rows\": 220,")); /* 150 + 70 */
	assert_non_null(strstr(r.out, "\"tombstones\": 20,"));
	run_free(&r);

	/* the second delta starts at commit 1: not where a fresh copy is */
	run(&r, build_tool, "--apply-delta", d2, "--dir", fresh, NULL);
	expect_fail(&r, "embtier-build", "commit 1");
	run_free(&r);
	{
		char p[PATH_MAX + 16];

		snprintf(p, sizeof(p), "%s/emb.et", fresh);
		assert_false(exists(p));
	}

	/* the first: the copy is the source at commit 1 */
	run(&r, build_tool, "--apply-delta", d1, "--dir", serve, NULL);
	expect_ok(&r);
	assert_int_equal(count_lines(r.err), 1);
	assert_non_null(strstr(r.err, "commit 0 -> 1"));
	assert_non_null(strstr(r.err, "500 rows with optimizer state"));
	assert_non_null(strstr(r.err, "2 tables (2 whole)"));
	run_free(&r);
	expect_rows(emb, &emb1, true);
	expect_rows(keys, &keys1, true);
	expect_dense(serve, "dense one");

	/* one byte flipped: refused whole, the copy left at commit 1 */
	copy_file(d2, bad);
	flip_byte(bad, (uint64_t)file_size(bad) / 2);
	run(&r, build_tool, "--apply-delta", bad, "--dir", serve, NULL);
	expect_fail(&r, "embtier-build", et_strerror(ET_EDELTA));
	run_free(&r);
	expect_rows(emb, &emb1, true);
	expect_rows(keys, &keys1, true);
	expect_dense(serve, "dense one");

	/* the second: the source at commit 2, the erased ids gone */
	run(&r, build_tool, "--apply-delta", d2, "--dir", serve, NULL);
	expect_ok(&r);
	assert_non_null(strstr(r.err, "commit 1 -> 2"));
	assert_non_null(strstr(r.err, "220 rows with optimizer state, 20 "
				      "tombstones, 0 stale rows dropped"));
	run_free(&r);
	expect_rows(emb, &emb2, true);
	expect_rows(keys, &keys2, true);
	expect_dense(serve, "dense two");
	rows_take(keys, &got);
	for (int i = 100; i < 120; i++)
		assert_false(listed(&got, kids[i]));
	for (int i = 0; i < 100; i++)
		assert_true(listed(&got, kids[i]));
	rows_free(&got);

	/* applied again: it starts at commit 1, the copy stands at 2 */
	run(&r, build_tool, "-q", "--apply-delta", d2, "--dir", serve, NULL);
	expect_fail(&r, "embtier-build", "commit 2");
	run_free(&r);
	expect_rows(emb, &emb2, true);

	/* without --state: the same values */
	run(&r, build_tool, "-q", "--apply-delta", d1p, "--dir", plain, NULL);
	expect_ok(&r);
	assert_int_equal(r.err_len, 0);
	run_free(&r);
	snprintf(emb, sizeof(emb), "%s/emb.et", plain);
	snprintf(keys, sizeof(keys), "%s/keys.et", plain);
	expect_rows(emb, &emb1, false);
	expect_rows(keys, &keys1, false);

	rows_free(&emb1);
	rows_free(&keys1);
	rows_free(&emb2);
	rows_free(&keys2);
}

static void test_delta_usage(void **state)
{
	char dir[PATH_MAX], out[PATH_MAX];
	struct run r;

	(void)state;
	tpath(dir, "nodir");
	tpath(out, "nodir.etd");
	run(&r, inspect_tool, "--delta-since", "0", dir, NULL);
	assert_int_equal(r.status, 2);
	assert_non_null(strstr(r.err, "--out"));
	run_free(&r);
	run(&r, inspect_tool, "--delta-since", "0", "--out", out, "--dump",
	    "0:1", dir, NULL);
	assert_int_equal(r.status, 2);
	run_free(&r);
	run(&r, inspect_tool, "--out", out, dir, NULL);
	assert_int_equal(r.status, 2);
	run_free(&r);
	run(&r, inspect_tool, "--delta-since", "0", "--out", out, dir, NULL);
	expect_fail(&r, "embtier-inspect", "No such file");
	run_free(&r);
	assert_false(exists(out));
	run(&r, build_tool, "--apply-delta", out, NULL);
	assert_int_equal(r.status, 2);
	assert_non_null(strstr(r.err, "--dir"));
	run_free(&r);
	run(&r, build_tool, "--apply-delta", out, "--dir", dir, "--rows", "4",
	    NULL);
	assert_int_equal(r.status, 2);
	run_free(&r);
	run(&r, build_tool, "--apply-delta", out, "--dir", dir, NULL);
	expect_fail(&r, "embtier-build", "No such file");
	run_free(&r);
	assert_false(exists(dir));
}

static int setup(void **state)
{
	const char *b = getenv("ET_BUILD");
	const char *d = getenv("ET_TEST_DIR");

	if (!b)
		b = "build";
	snprintf(build_tool, sizeof(build_tool), "%s/embtier-build", b);
	snprintf(inspect_tool, sizeof(inspect_tool), "%s/embtier-inspect", b);
	if (access(build_tool, X_OK) || access(inspect_tool, X_OK)) {
		fprintf(stderr, "test_tools: %s or %s missing (make tools)\n",
			build_tool, inspect_tool);
		return -1;
	}
	if (d) {
		snprintf(test_dir, sizeof(test_dir), "%s/tools.XXXXXX", d);
	} else {
		snprintf(test_dir, sizeof(test_dir),
			 "/var/tmp/test_tools.XXXXXX");
	}
	if (!mkdtemp(test_dir)) {
		perror(test_dir);
		return -1;
	}
	tpath(good_table, "good.et");
	good_rows = make_table(good_table, GOOD_ROWS, GOOD_DIM);
	return 0;
}

static int teardown(void **state)
{
	char cmd[PATH_MAX + 16];

	free(good_rows);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", test_dir);
	return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_help_and_usage),
	    cmocka_unit_test(test_raw_roundtrip),
	    cmocka_unit_test(test_npy_f32),
	    cmocka_unit_test(test_npy_f16),
	    cmocka_unit_test(test_lazy_huge),
	    cmocka_unit_test(test_state),
	    cmocka_unit_test(test_corrupt_header),
	    cmocka_unit_test(test_written),
	    cmocka_unit_test(test_keyed),
	    cmocka_unit_test(test_truncated_file),
	    cmocka_unit_test(test_corrupt_block),
	    cmocka_unit_test(test_corrupt_log_record),
	    cmocka_unit_test(test_bad_raw_input),
	    cmocka_unit_test(test_bad_npy),
	    cmocka_unit_test(test_delta),
	    cmocka_unit_test(test_delta_usage),
	};

	return cmocka_run_group_tests(tests, setup, teardown);
}
