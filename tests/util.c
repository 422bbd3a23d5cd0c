/*
 * util.c - scratch files, raw file edits, a seeded random generator and
 * feature skips for the test programs (see util.h). Every path handed out
 * by tu_path() is remembered and unlinked by an atexit handler, so a test
 * that fails half-way (cmocka jumps out of it) still leaves nothing behind;
 * a scratch directory made here (no $ET_TEST_DIR) is removed as well.
 */
#include <errno.h>
#include <ftw.h>
#include <fcntl.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "embtier.h"
#include "io.h"
#include "util.h"

static char scratch_dir[PATH_MAX];
static int scratch_made; /* we created scratch_dir: remove it at exit */
static char **paths;	 /* every path handed out, for the exit sweep */
static size_t npaths, cap_paths;
static unsigned path_seq;

static void tu_cleanup(void)
{
	size_t i;

	for (i = 0; i < npaths; i++) {
		unlink(paths[i]);
		free(paths[i]);
	}
	free(paths);
	paths = NULL;
	npaths = cap_paths = 0;
	if (scratch_made)
		rmdir(scratch_dir);
}

const char *tu_dir(void)
{
	const char *env;

	if (scratch_dir[0])
		return scratch_dir;
	env = getenv("ET_TEST_DIR");
	if (env && env[0]) {
		snprintf(scratch_dir, sizeof(scratch_dir), "%s", env);
		mkdir(scratch_dir, 0700); /* EEXIST is the usual case */
	} else {
		snprintf(scratch_dir, sizeof(scratch_dir),
			 "/var/tmp/embtier-test.XXXXXX");
		if (!mkdtemp(scratch_dir)) {
			/* Last resort; O_DIRECT may then be refused and the
			 * tests that need it skip. */
			snprintf(scratch_dir, sizeof(scratch_dir),
				 "/tmp/embtier-test.XXXXXX");
			if (!mkdtemp(scratch_dir)) {
				fprintf(stderr, "util: no scratch dir: %s\n",
					strerror(errno));
				exit(1);
			}
		}
		scratch_made = 1;
	}
	atexit(tu_cleanup);
	return scratch_dir;
}

const char *tu_path(const char *tag)
{
	const char *dir = tu_dir();
	char buf[PATH_MAX];
	char *p;

	do {
		snprintf(buf, sizeof(buf), "%s/%s.%d.%u", dir, tag,
			 (int)getpid(), path_seq++);
	} while (access(buf, F_OK) == 0);
	p = strdup(buf);
	assert_non_null(p);
	if (npaths == cap_paths) {
		size_t ncap = cap_paths ? 2 * cap_paths : 32;
		char **np = realloc(paths, ncap * sizeof(*np));

		assert_non_null(np);
		paths = np;
		cap_paths = ncap;
	}
	paths[npaths++] = p;
	return p;
}

void tu_unlink(const char *path)
{
	if (unlink(path) != 0 && errno != ENOENT)
		fprintf(stderr, "util: unlink %s: %s\n", path, strerror(errno));
}

int tu_pread(const char *path, off_t off, void *buf, size_t n)
{
	int fd = open(path, O_RDONLY);
	ssize_t r;

	if (fd < 0)
		return -errno;
	r = pread(fd, buf, n, off);
	if (r < 0)
		r = -errno;
	close(fd);
	if (r < 0)
		return (int)r;
	return (size_t)r == n ? 0 : -EIO;
}

int tu_pwrite(const char *path, off_t off, const void *buf, size_t n)
{
	int fd = open(path, O_WRONLY);
	ssize_t r;
	int err = 0;

	if (fd < 0)
		return -errno;
	r = pwrite(fd, buf, n, off);
	if (r < 0)
		err = -errno;
	else if ((size_t)r != n)
		err = -EIO;
	if (!err && fsync(fd) != 0)
		err = -errno;
	close(fd);
	return err;
}

int tu_flip_byte(const char *path, off_t off, uint8_t mask)
{
	uint8_t b;
	int err = tu_pread(path, off, &b, 1);

	if (err)
		return err;
	b ^= mask;
	return tu_pwrite(path, off, &b, 1);
}

int tu_truncate(const char *path, off_t len)
{
	return truncate(path, len) == 0 ? 0 : -errno;
}

int64_t tu_file_size(const char *path)
{
	struct stat st;

	if (stat(path, &st) != 0)
		return -errno;
	return (int64_t)st.st_size;
}

int64_t tu_disk_bytes(const char *path)
{
	struct stat st;

	if (stat(path, &st) != 0)
		return -errno;
	return (int64_t)st.st_blocks * 512;
}

void tu_require_uring(void)
{
	static int state; /* 0 unknown, 1 usable, -1 not */
	static int why;
	io_ctx *io = NULL;
	int err;

	if (state == 0) {
		err = io_open(4, &io, &why);
		if (err == 0) {
			io_close(io);
			state = 1;
		} else {
			state = -1;
			if (!why)
				why = err;
		}
	}
	if (state < 0) {
		print_message("SKIP: io_uring unavailable: %s\n",
			      strerror(why < 0 ? -why : why));
		skip();
	}
}

void tu_require_direct(void)
{
	static int state;
	static int why;

	if (state == 0) {
		const char *p = tu_path("odirect-probe");
		int fd = open(p, O_RDWR | O_CREAT | O_EXCL | O_DIRECT, 0600);

		if (fd >= 0) {
			close(fd);
			state = 1;
		} else {
			why = errno;
			state = -1;
		}
		unlink(p);
	}
	if (state < 0) {
		print_message("SKIP: O_DIRECT refused in %s: %s\n", tu_dir(),
			      strerror(why));
		skip();
	}
}

void tu_rng_seed(struct tu_rng *r, uint64_t seed)
{
	/* splitmix64 of the seed, so that small seeds give unrelated streams
	 * and the state is never zero. */
	uint64_t z = seed + 0x9e3779b97f4a7c15ULL;

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	z ^= z >> 31;
	r->s = z ? z : 1;
}

uint64_t tu_rng_next(struct tu_rng *r)
{
	uint64_t x = r->s;

	x ^= x >> 12;
	x ^= x << 25;
	x ^= x >> 27;
	r->s = x;
	return x * 0x2545f4914f6cdd1dULL;
}

uint64_t tu_rng_below(struct tu_rng *r, uint64_t n)
{
	/* Modulo bias is irrelevant at the sizes tests use. */
	return tu_rng_next(r) % n;
}

double tu_rng_double(struct tu_rng *r, double lo, double hi)
{
	double u = (double)(tu_rng_next(r) >> 11) * 0x1.0p-53;

	return lo + (hi - lo) * u;
}

void tu_shuffle_u64(struct tu_rng *r, uint64_t *a, size_t n)
{
	size_t i;

	for (i = n; i > 1; i--) {
		size_t j = tu_rng_below(r, i);
		uint64_t t = a[i - 1];

		a[i - 1] = a[j];
		a[j] = t;
	}
}

void *tu_calloc(size_t n, size_t size)
{
	void *p = calloc(n ? n : 1, size ? size : 1);

	assert_non_null(p);
	return p;
}

static int rm_entry(const char *path, const struct stat *sb, int flag,
		    struct FTW *ftw)
{
	(void)sb;
	(void)flag;
	(void)ftw;
	return remove(path);
}

void tu_rmtree(const char *dir)
{
	nftw(dir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}
