/*
 * checkpoint.c - the checkpoint record (see checkpoint.h).
 *
 *   0   8  "ETCKPT01"
 *   8   8  checkpoint id (1, 2, ...)
 *  16   8  dense state length
 *  24   8  XXH3 of bytes [0, 24) and the dense state
 *  32      dense state
 *
 * The table files are flushed and synced before the record is written;
 * their undo logs are emptied for the new id after it is durable. So at
 * every moment the record names a checkpoint the files either are at, or
 * can be rolled back to with the undo logs of that id.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint.h"
#include "embtier.h"
#include "endian.h"
#include "hash.h"

#define CK_HDR 32

static uint64_t ck_sum(const unsigned char *h, const void *dense, size_t len)
{
	return hash_bytes2(h, 24, dense, len);
}

static int write_all(int fd, const void *p, size_t n)
{
	const char *c = p;

	while (n) {
		ssize_t w = write(fd, c, n);

		if (w < 0) {
			if (errno == EINTR)
				continue;
			return -errno;
		}
		c += w;
		n -= (size_t)w;
	}
	return 0;
}

int ckpt_write(const char *dir, uint64_t id, const void *dense, size_t len)
{
	unsigned char h[CK_HDR];
	char tmp[4096], fin[4096];
	int fd, dfd, ret;

	if ((size_t)snprintf(tmp, sizeof(tmp), "%s/CHECKPOINT.tmp", dir) >=
		sizeof(tmp) ||
	    (size_t)snprintf(fin, sizeof(fin), "%s/CHECKPOINT", dir) >=
		sizeof(fin))
		return -ENAMETOOLONG;
	memset(h, 0, sizeof(h));
	memcpy(h, "ETCKPT01", 8);
	put64(h + 8, id);
	put64(h + 16, len);
	put64(h + 24, ck_sum(h, dense, len));
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	ret = write_all(fd, h, sizeof(h));
	if (!ret && len)
		ret = write_all(fd, dense, len);
	if (!ret && fsync(fd))
		ret = -errno;
	if (close(fd) && !ret)
		ret = -errno;
	if (!ret && rename(tmp, fin))
		ret = -errno;
	if (ret) {
		unlink(tmp);
		return ret;
	}
	dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return -errno;
	ret = fsync(dfd) ? -errno : 0;
	close(dfd);
	return ret;
}

int ckpt_read(const char *dir, uint64_t *id, void **dense, size_t *len)
{
	unsigned char h[CK_HDR];
	char fin[4096];
	struct stat st;
	void *buf = NULL;
	uint64_t n;
	int fd, ret = 0;

	*id = 0;
	if (dense)
		*dense = NULL;
	if (len)
		*len = 0;
	if ((size_t)snprintf(fin, sizeof(fin), "%s/CHECKPOINT", dir) >=
	    sizeof(fin))
		return -ENAMETOOLONG;
	fd = open(fin, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? 0 : -errno;
	if (fstat(fd, &st)) {
		ret = -errno;
		goto out;
	}
	if (st.st_size < CK_HDR || pread(fd, h, CK_HDR, 0) != CK_HDR) {
		ret = ET_ETRUNC;
		goto out;
	}
	if (memcmp(h, "ETCKPT01", 8)) {
		ret = ET_EMAGIC;
		goto out;
	}
	n = get64(h + 16);
	if (n != (uint64_t)st.st_size - CK_HDR) {
		ret = ET_ETRUNC;
		goto out;
	}
	buf = malloc(n ? n : 1);
	if (!buf) {
		ret = -ENOMEM;
		goto out;
	}
	if (n && pread(fd, buf, n, CK_HDR) != (ssize_t)n) {
		ret = ET_ETRUNC;
		goto out;
	}
	if (ck_sum(h, buf, n) != get64(h + 24)) {
		ret = ET_EHDRSUM;
		goto out;
	}
	*id = get64(h + 8);
	if (dense) {
		*dense = buf;
		buf = NULL;
	}
	if (len)
		*len = n;
out:
	free(buf);
	close(fd);
	return ret;
}
