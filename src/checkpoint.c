/*
 * checkpoint.c - the commit record (see checkpoint.h).
 *
 *   0   8  "ETCKPT02"
 *   8   8  commit (1, 2, ...): journal batches up to it are replayed
 *  16   8  checkpoint id: et_checkpoint calls so far
 *  24   4  flags: bit 0, the tables moved on since the checkpoint
 *  28   4  zero
 *  32   8  dense state length
 *  40   8  XXH3 of bytes [0, 40) and the dense state
 *  48      dense state
 *
 * Version 1 ("ETCKPT01": id, length, XXH3 of [0, 24) and the state, then
 * the state at 32) is still read, as commit = id and no flags.
 *
 * Every table's row log and its journal batch for the commit are synced
 * before the record is written. So at every moment the record names a
 * commit each journal holds, and batches after it (a crash between the
 * journals and the record) are cut off at the next open.
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

#define CK_HDR1 32
#define CK_HDR	48

static uint64_t ck_sum(const unsigned char *h, size_t hl, const void *dense,
		       size_t len)
{
	return hash_bytes2(h, hl, dense, len);
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

int ckpt_write(const char *dir, const struct ckpt_rec *r, const void *dense,
	       size_t len)
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
	memcpy(h, "ETCKPT02", 8);
	put64(h + 8, r->commit);
	put64(h + 16, r->id);
	put32(h + 24, r->flags);
	put64(h + 32, len);
	put64(h + 40, ck_sum(h, 40, dense, len));
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

int ckpt_read(const char *dir, struct ckpt_rec *r, void **dense, size_t *len)
{
	unsigned char h[CK_HDR];
	char fin[4096];
	struct stat st;
	void *buf = NULL;
	size_t hl = CK_HDR;
	uint64_t n;
	int fd, ret = 0, v2;

	memset(r, 0, sizeof(*r));
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
	if (st.st_size < 8 || pread(fd, h, 8, 0) != 8) {
		ret = ET_ETRUNC;
		goto out;
	}
	v2 = !memcmp(h, "ETCKPT02", 8);
	if (!v2 && memcmp(h, "ETCKPT01", 8)) {
		ret = ET_EMAGIC;
		goto out;
	}
	if (!v2)
		hl = CK_HDR1;
	if ((uint64_t)st.st_size < hl || pread(fd, h, hl, 0) != (ssize_t)hl) {
		ret = ET_ETRUNC;
		goto out;
	}
	n = get64(h + (v2 ? 32 : 16));
	if (n != (uint64_t)st.st_size - hl) {
		ret = ET_ETRUNC;
		goto out;
	}
	buf = malloc(n ? n : 1);
	if (!buf) {
		ret = -ENOMEM;
		goto out;
	}
	if (n && pread(fd, buf, n, (off_t)hl) != (ssize_t)n) {
		ret = ET_ETRUNC;
		goto out;
	}
	if (ck_sum(h, v2 ? 40 : 24, buf, n) != get64(h + (v2 ? 40 : 24))) {
		ret = ET_EHDRSUM;
		goto out;
	}
	r->commit = get64(h + 8);
	r->id = v2 ? get64(h + 16) : r->commit;
	r->flags = v2 ? get32(h + 24) : 0;
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
