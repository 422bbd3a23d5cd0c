/*
 * util.h - helpers shared by every test program: the scratch directory
 * ($ET_TEST_DIR, else a fresh mktemp directory under /var/tmp), unique
 * scratch paths that are removed at exit whatever the tests did, raw
 * byte-level edits of files (to corrupt table files on purpose), a small
 * deterministic random generator, and skips with a printed reason when the
 * kernel or the filesystem lacks what a test needs (io_uring, O_DIRECT).
 * Single-threaded, like the cmocka programs that use it.
 */
#ifndef ET_TEST_UTIL_H
#define ET_TEST_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* The scratch directory; created on first use when $ET_TEST_DIR is unset
 * (and then removed at exit). */
const char *tu_dir(void);

/* A fresh path "<dir>/<tag>.<pid>.<n>" that does not exist yet. The string
 * is owned by util.c, stays valid until exit, and the file it names is
 * unlinked at exit. */
const char *tu_path(const char *tag);

/* Removes path if it exists (ENOENT is not an error). */
void tu_unlink(const char *path);
/* Removes dir and everything under it (as much as it can). */
void tu_rmtree(const char *dir);

/* Byte-level access through the page cache (each write is followed by an
 * fsync, so later O_DIRECT readers see it). Return 0 or -errno. */
int tu_pread(const char *path, off_t off, void *buf, size_t n);
int tu_pwrite(const char *path, off_t off, const void *buf, size_t n);
/* XORs the byte at off with mask (0xff flips all its bits). */
int tu_flip_byte(const char *path, off_t off, uint8_t mask);
int tu_truncate(const char *path, off_t len);

/* st_size and st_blocks * 512 of path, or -errno. */
int64_t tu_file_size(const char *path);
int64_t tu_disk_bytes(const char *path);

/* cmocka skip() of the current test, with the reason printed, when
 * io_uring cannot be set up or the scratch directory refuses O_DIRECT. */
void tu_require_uring(void);
void tu_require_direct(void);

/* xorshift64*: deterministic, seeded, never zero-state. */
struct tu_rng {
	uint64_t s;
};
void tu_rng_seed(struct tu_rng *r, uint64_t seed);
uint64_t tu_rng_next(struct tu_rng *r);
/* Uniform in [0, n), n > 0. */
uint64_t tu_rng_below(struct tu_rng *r, uint64_t n);
/* Uniform in [lo, hi). */
double tu_rng_double(struct tu_rng *r, double lo, double hi);
/* Fisher-Yates shuffle of n u64s. */
void tu_shuffle_u64(struct tu_rng *r, uint64_t *a, size_t n);

/* Calloc that fails the current test instead of returning NULL. */
void *tu_calloc(size_t n, size_t size);

#endif
