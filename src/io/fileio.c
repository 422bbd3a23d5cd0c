/*
 * fileio.c - see fileio.h.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "embtier.h"
#include "fileio.h"

/* The most one call moves: below Linux's 0x7ffff000 so a call never comes
 * back short for that reason alone. */
#define FIO_CHUNK (1u << 30)

static _Atomic uint64_t fault_left; /* 0: disarmed */
static _Atomic int fault_err;
static _Atomic bool fault_fired;

void fio_fault_set(uint64_t nth, int err)
{
	fault_err = err;
	fault_fired = false;
	fault_left = nth;
}

void fio_fault_clear(void)
{
	fault_left = 0;
}

bool fio_fault_fired(void)
{
	return fault_fired;
}

/* Whether this operation is the one to fail. */
static int faulted(void)
{
	uint64_t n = fault_left;

	while (n && !atomic_compare_exchange_weak(&fault_left, &n, n - 1))
		;
	if (n == 1) {
		fault_fired = true;
		return -fault_err;
	}
	return 0;
}

int fio_fsync(int fd)
{
	int ret = faulted();

	if (ret)
		return ret;
	return fsync(fd) ? -errno : 0;
}

int fio_rename(const char *from, const char *to)
{
	int ret = faulted();

	if (ret)
		return ret;
	return rename(from, to) ? -errno : 0;
}

int fio_pread_all(int fd, void *buf, size_t n, uint64_t off)
{
	char *p = buf;

	while (n) {
		size_t k = n < FIO_CHUNK ? n : FIO_CHUNK;
		ssize_t r = pread(fd, p, k, (off_t)off);

		if (r < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (r == 0)
			return ET_ETRUNC;
		p += r;
		off += (uint64_t)r;
		n -= (size_t)r;
	}
	return 0;
}

int fio_pwrite_all(int fd, const void *buf, size_t n, uint64_t off)
{
	const char *p = buf;
	int ret = faulted();

	if (ret)
		return ret;
	while (n) {
		size_t k = n < FIO_CHUNK ? n : FIO_CHUNK;
		ssize_t w = pwrite(fd, p, k, (off_t)off);

		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		if (w == 0)
			return -ENOSPC;
		p += w;
		off += (uint64_t)w;
		n -= (size_t)w;
	}
	return 0;
}

int fio_sync_dir(const char *path, int dir)
{
	char d[4096];
	const char *slash;
	size_t n;
	int fd, ret = faulted();

	if (ret)
		return ret;
	if (dir) {
		n = strlen(path);
		if (n >= sizeof(d))
			return -ENAMETOOLONG;
		memcpy(d, path, n + 1);
	} else {
		slash = strrchr(path, '/');
		n = slash ? (size_t)(slash - path) : 0;
		if (n >= sizeof(d))
			return -ENAMETOOLONG;
		if (!slash)
			memcpy(d, ".", 2);
		else if (!n)
			memcpy(d, "/", 2);
		else {
			memcpy(d, path, n);
			d[n] = 0;
		}
	}
	fd = open(d, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	ret = fsync(fd) ? -errno : 0;
	close(fd);
	return ret;
}
