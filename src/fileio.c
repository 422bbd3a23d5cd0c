/*
 * fileio.c - see fileio.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "embtier.h"
#include "fileio.h"

/* The most one call moves: below Linux's 0x7ffff000 so a call never comes
 * back short for that reason alone. */
#define FIO_CHUNK (1u << 30)

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
	int fd, ret;

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
