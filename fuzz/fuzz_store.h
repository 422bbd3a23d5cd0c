/*
 * fuzz_store.h - what the fuzz targets of a store directory share
 * (fuzz_ckpt.c, fuzz_rowlog.c): the scratch directory and its store, the
 * store's files kept in memory and put back after each input, what the
 * calls returned (tallies), the oracle's abort, and small helpers.
 *
 * Static functions only: each target is built from its one .c file. A
 * target calls fuzz_store_once(NAME, hooks, setup, seeds) at each input:
 * at the first, its scratch directory ET_FUZZ_DIR/embtier-fuzz-NAME-PID
 * (default /var/tmp) is made afresh, the store to be made in it at
 * dir = .../store; it is removed at exit and at an oracle abort
 * (ET_FUZZ_KEEP=1 keeps it then). ET_FUZZ_STATS=1 prints at exit how many
 * inputs each call took or refused, by code.
 */
#ifndef ET_FUZZ_STORE_H
#define ET_FUZZ_STORE_H

#include <dirent.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "embtier.h"

#define MAXF 16 /* files of the store, at most */

/* What a target adds to the shared code; any may be NULL. */
struct fuzz_hooks {
	/* at exit under ET_FUZZ_STATS=1, before the tallies */
	void (*stats)(void);
	/* an oracle abort: lines ("    ...\n") before et_errdetail's */
	void (*detail)(void);
	/* failed(): a call refused with a code the header allows */
	void (*refused)(const char *call, int ret);
};

static const char *fz_name; /* fuzz_NAME */
static struct fuzz_hooks fz_hooks;
static char top[4096], fz_dir[4096]; /* the scratch directory, the store */

static uint64_t le64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 7; i >= 0; i--)
		v = v << 8 | p[i];
	return v;
}

static uint32_t le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
	       (uint32_t)p[3] << 24;
}

static void wr64(uint8_t *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t mix64(uint64_t z)
{
	z += 0x9e3779b97f4a7c15ULL;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* The value a session of salt writes in column c of row r. */
static float row_value(uint64_t r, uint64_t c, uint64_t salt)
{
	return (float)((int64_t)(mix64(r * 31 + c + salt) % 2001) - 1000) /
	       256.0f;
}

/* ------------------------------------------------------------ the files */

/* A file of the directory as the setup left it: its bytes (holes read as
 * zeros) and where its data lies. */
struct pfile {
	char name[256];
	unsigned char *data;
	size_t size;
	off_t ext[64][2]; /* data extents: [start, end) */
	int next;	  /* -1: more extents than that (then all data) */
};

static struct pfile files[MAXF];
static int nfiles;
static unsigned char *scratch;
static size_t scratch_cap;

/* Reads (wr false) or writes all n bytes at off: 0, or -1. */
static int pio_all(int fd, unsigned char *p, size_t n, off_t off, bool wr)
{
	while (n) {
		ssize_t k = wr ? pwrite(fd, p, n, off) : pread(fd, p, n, off);

		if (k <= 0)
			return -1;
		p += k;
		n -= (size_t)k;
		off += k;
	}
	return 0;
}

static int pread_all(int fd, unsigned char *p, size_t n, off_t off)
{
	return pio_all(fd, p, n, off, false);
}

static int pwrite_all(int fd, const unsigned char *p, size_t n, off_t off)
{
	return pio_all(fd, (unsigned char *)p, n, off, true);
}

/* The data extents of fd (SEEK_DATA / SEEK_HOLE); -1 in *next when there
 * are more than fit. */
static void extents(int fd, off_t size, off_t ext[64][2], int *next)
{
	off_t at = 0;

	*next = 0;
	while (at < size) {
		off_t d = lseek(fd, at, SEEK_DATA), h;

		if (d < 0 || d >= size)
			break;
		h = lseek(fd, d, SEEK_HOLE);
		if (h < 0 || h > size)
			h = size;
		if (*next == 64) {
			*next = -1;
			return;
		}
		ext[*next][0] = d;
		ext[*next][1] = h;
		(*next)++;
		at = h;
	}
}

static void path_of(char *p, size_t cap, const char *name)
{
	snprintf(p, cap, "%s/%s", fz_dir, name);
}

/* Keeps every regular file of dir in memory. */
static int snapshot(void)
{
	struct dirent *de;
	DIR *d = opendir(fz_dir);

	if (!d)
		return -1;
	while ((de = readdir(d))) {
		struct pfile *f;
		struct stat st;
		char p[4400];
		int fd;

		path_of(p, sizeof(p), de->d_name);
		if (stat(p, &st) || !S_ISREG(st.st_mode))
			continue;
		if (nfiles == MAXF) {
			closedir(d);
			return -1;
		}
		f = &files[nfiles++];
		snprintf(f->name, sizeof(f->name), "%s", de->d_name);
		f->size = (size_t)st.st_size;
		f->data = malloc(f->size + 1);
		fd = open(p, O_RDONLY);
		if (!f->data || fd < 0 || pread_all(fd, f->data, f->size, 0)) {
			closedir(d);
			return -1;
		}
		extents(fd, st.st_size, f->ext, &f->next);
		close(fd);
		if (f->size > scratch_cap)
			scratch_cap = f->size;
	}
	closedir(d);
	scratch = malloc(scratch_cap + 1);
	return scratch ? 0 : -1;
}

static bool same_file(int fd, const struct pfile *f)
{
	off_t ext[64][2];
	struct stat st;
	int next;

	if (fstat(fd, &st) || (size_t)st.st_size != f->size)
		return false;
	extents(fd, st.st_size, ext, &next);
	if (next != f->next ||
	    (next > 0 && memcmp(ext, f->ext, sizeof(ext[0]) * next)))
		return false;
	if (next < 0)
		return !pread_all(fd, scratch, f->size, 0) &&
		       !memcmp(scratch, f->data, f->size);
	/* the same holes: the bytes of the extents decide */
	for (int k = 0; k < next; k++) {
		size_t n = (size_t)(ext[k][1] - ext[k][0]);

		if (pread_all(fd, scratch, n, ext[k][0]) ||
		    memcmp(scratch, f->data + ext[k][0], n))
			return false;
	}
	return true;
}

/* Puts every file back as the setup left it, holes where they were, and
 * removes any other. */
static void restore(void)
{
	struct dirent *de;
	DIR *d = opendir(fz_dir);

	if (!d)
		abort();
	while ((de = readdir(d))) {
		char p[4400];
		bool known = false;

		for (int i = 0; i < nfiles; i++)
			known |= !strcmp(files[i].name, de->d_name);
		path_of(p, sizeof(p), de->d_name);
		if (!known && strcmp(de->d_name, ".") &&
		    strcmp(de->d_name, ".."))
			unlink(p);
	}
	closedir(d);
	for (int i = 0; i < nfiles; i++) {
		const struct pfile *f = &files[i];
		char p[4400];
		bool whole;
		int fd, ok = 0;

		path_of(p, sizeof(p), f->name);
		fd = open(p, O_RDWR | O_CREAT, 0644);
		if (fd < 0)
			abort();
		if (same_file(fd, f)) {
			close(fd);
			continue;
		}
		/* a file without holes is written over (cheaper than a
		 * truncation to nothing, which waits for its I/O); else
		 * emptied and its extents written */
		whole = f->next < 0 || (f->next == 1 && f->ext[0][0] == 0 &&
					(size_t)f->ext[0][1] == f->size);
		if (whole)
			ok = pwrite_all(fd, f->data, f->size, 0);
		else if (ftruncate(fd, 0))
			ok = -1;
		if (ftruncate(fd, (off_t)f->size))
			ok = -1;
		for (int k = 0; !whole && k < f->next; k++)
			ok |= pwrite_all(fd, f->data + f->ext[k][0],
					 (size_t)(f->ext[k][1] - f->ext[k][0]),
					 f->ext[k][0]);
		if (ok || !same_file(fd, f))
			abort(); /* the next input would see another store */
		close(fd);
	}
}

static int write_file(const char *p, const void *b, size_t n)
{
	int fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	int ret;

	if (fd < 0)
		return -1;
	ret = pwrite_all(fd, b, n, 0);
	return close(fd) || ret ? -1 : 0;
}

static void rm_top(void)
{
	char cmd[4200];

	if (!top[0])
		return;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", top);
	if (system(cmd))
		return;
}

/* ---------------------------------------------------------- the oracle */

/* A code the header allows: a negated errno or one of the library's. */
static bool code_ok(int c)
{
	return (c >= -4095 && c <= -1) || (c >= ET_ERR_LAST && c < ET_ERR_BASE);
}

static const char *fz_what; /* the step, for the messages */

/* What the calls returned, printed at exit when ET_FUZZ_STATS=1: how
 * many inputs each call took, and refused with which code. */
static struct {
	const char *call, *step;
	int code;
	unsigned long n;
} tallies[256];

static void tally(const char *call, int ret)
{
	int i;

	for (i = 0; i < 256 && tallies[i].call; i++)
		if (tallies[i].call == call && tallies[i].step == fz_what &&
		    tallies[i].code == ret)
			break;
	if (i == 256)
		return;
	tallies[i].call = call;
	tallies[i].step = fz_what;
	tallies[i].code = ret;
	tallies[i].n++;
}

static void print_tallies(void)
{
	if (fz_hooks.stats)
		fz_hooks.stats();
	for (int i = 0; i < 256 && tallies[i].call; i++)
		fprintf(stderr, "%s: %s: %d %s: %lu\n", tallies[i].step,
			tallies[i].call, tallies[i].code,
			tallies[i].code == 0   ? "(taken, all rows right)"
			: tallies[i].code == 1 ? "(rows of a split batch right)"
					       : et_strerror(tallies[i].code),
			tallies[i].n);
}

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void fail(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "\n*** fuzz_%s oracle (%s): ", fz_name, fz_what);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n");
	if (fz_hooks.detail)
		fz_hooks.detail();
	fprintf(stderr, "    et_errdetail: %s\n", et_errdetail());
	if (!getenv("ET_FUZZ_KEEP") || !atoi(getenv("ET_FUZZ_KEEP")))
		rm_top();
	else
		fprintf(stderr, "    the store: %s\n", fz_dir);
	abort();
}

/* Whether a call failed; a code the header does not allow is an abort. */
static bool failed(const char *call, int ret)
{
	tally(call, ret);
	if (!ret)
		return false;
	if (ret > 0 || !code_ok(ret))
		fail("%s returned %d, neither 0 nor an error code", call, ret);
	if (fz_hooks.refused)
		fz_hooks.refused(call, ret);
	return true;
}

/* A batch read of table t's rows ids through handle h (of a store or a
 * table file). */
typedef int (*read_fn)(void *h, int t, const uint64_t *ids, size_t n,
		       float *out);

static int store_read(void *h, int t, const uint64_t *ids, size_t n, float *out)
{
	return et_gather(h, t, ids, n, out);
}

static int tfile_read(void *h, int t, const uint64_t *ids, size_t n, float *out)
{
	(void)t;
	return et_tfile_read_rows(h, ids, n, out, NULL);
}

/* ----------------------------------------------------------- the setup */

/* Makes the scratch directory of target fuzz_NAME afresh (the store, fz_dir,
 * is to be made in it) and has it removed at exit; hooks may be NULL. */
static int fuzz_store_init(const char *name, const struct fuzz_hooks *hooks)
{
	const char *d = getenv("ET_FUZZ_DIR");

	fz_name = name;
	if (hooks)
		fz_hooks = *hooks;
	snprintf(top, sizeof(top), "%s/embtier-fuzz-%s-%d", d ? d : "/var/tmp",
		 name, (int)getpid());
	snprintf(fz_dir, sizeof(fz_dir), "%s/store", top);
	rm_top();
	if (mkdir(top, 0755))
		return -1;
	atexit(rm_top);
	if (getenv("ET_FUZZ_STATS") && atoi(getenv("ET_FUZZ_STATS")))
		atexit(print_tallies);
	return 0;
}

/* At the first input of target fuzz_NAME: its scratch directory made
 * (fuzz_store_init), then setup() - an abort if either fails - and
 * seeds(). Returns whether this call did it. */
static bool fuzz_store_once(const char *name, const struct fuzz_hooks *hooks,
			    int (*fz_setup)(void), void (*seeds)(void))
{
	static bool ready;

	if (ready)
		return false;
	if (fuzz_store_init(name, hooks) || fz_setup()) {
		fprintf(stderr, "fuzz_%s: setup failed: %s\n", name,
			et_errdetail());
		abort(); /* the machine cannot run the target */
	}
	seeds();
	ready = true;
	return true;
}

#endif /* ET_FUZZ_STORE_H */
