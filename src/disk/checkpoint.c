/*
 * checkpoint.c - the commit record (see checkpoint.h for its layout).
 *
 * Every table's row log and its journal batch for the commit are synced
 * before the record is written, and the record names each journal's
 * length and last batch. So at every moment the record names bytes each
 * journal holds; bytes past them (a crash between the journals and the
 * record) are cut at the next open, and anything short of them is damage,
 * refused.
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
#include "le.h"
#include "error.h"
#include "fileio.h"
#include "hash.h"

#define CK_HDR1	 32 /* version 1 */
#define CK_HDR2	 48 /* version 2 */
#define CK_HDR3	 56 /* version 3, then the table list */
#define CK_TABLE 96
#define CK_CHUNK (16u << 20) /* the dense state is checked this at a time */

void ckpt_rec_free(struct ckpt_rec *r)
{
	free(r->tables);
	r->tables = NULL;
	r->ntables = 0;
}

const struct ckpt_table *ckpt_find(const struct ckpt_rec *r, const char *name)
{
	for (uint32_t i = 0; i < r->ntables; i++)
		if (!strcmp(r->tables[i].name, name))
			return &r->tables[i];
	return NULL;
}

int ckpt_write(const char *dir, const struct ckpt_rec *r, const void *dense,
	       size_t len, bool *placed)
{
	size_t hl = CK_HDR3 + (size_t)r->ntables * CK_TABLE;
	unsigned char *h;
	char tmp[4096], fin[4096];
	int fd, ret;

	*placed = false;
	if ((size_t)snprintf(tmp, sizeof(tmp), "%s/CHECKPOINT.tmp", dir) >=
		sizeof(tmp) ||
	    (size_t)snprintf(fin, sizeof(fin), "%s/CHECKPOINT", dir) >=
		sizeof(fin))
		return -ENAMETOOLONG;
	h = calloc(1, hl);
	if (!h)
		return -ENOMEM;
	memcpy(h, "ETCKPT03", 8);
	put64(h + 8, r->commit);
	put64(h + 16, r->id);
	put32(h + 24, r->flags);
	put32(h + 28, r->ntables);
	put64(h + 32, len);
	put64(h + 40, hash_bytes(dense, len));
	for (uint32_t i = 0; i < r->ntables; i++) {
		unsigned char *e = h + CK_HDR3 + (size_t)i * CK_TABLE;

		memcpy(e, r->tables[i].name, strnlen(r->tables[i].name, 64));
		put64(e + 64, r->tables[i].jlen);
		put64(e + 72, r->tables[i].jsum);
		put64(e + 80, r->tables[i].asum);
		put64(e + 88, r->tables[i].aref);
	}
	put64(h + 48, hash_bytes2(h, 48, h + CK_HDR3, hl - CK_HDR3));
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	ret = fd < 0 ? -errno : 0;
	if (!ret)
		ret = fio_pwrite_all(fd, h, hl, 0);
	if (!ret && len)
		ret = fio_pwrite_all(fd, dense, len, hl);
	if (!ret)
		ret = fio_fsync(fd);
	if (fd >= 0 && close(fd) && !ret)
		ret = -errno;
	free(h);
	if (!ret)
		ret = fio_rename(tmp, fin);
	if (ret) {
		unlink(tmp);
		return ret;
	}
	*placed = true;
	return fio_sync_dir(dir, 1);
}

/* A table name as a store allows it (1..64 of [A-Za-z0-9_.-], no leading
 * '.'): a record naming anything else is damaged. */
static bool name_ok(const char *n)
{
	if (!n[0] || n[0] == '.')
		return false;
	for (const char *c = n; *c; c++)
		if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') ||
		      (*c >= '0' && *c <= '9') || *c == '_' || *c == '-' ||
		      *c == '.'))
			return false;
	return true;
}

static int bad(const char *fin, const char *why, uint64_t off)
{
	return err_set(ET_ERECORD, "%s: %s (at byte %llu)", fin, why,
		       (unsigned long long)off);
}

/* Checks the dense state's checksum, reading it a chunk at a time (into
 * buf when it is given: the whole state is wanted). */
static int dense_check(int fd, const char *fin, uint64_t off, uint64_t n,
		       uint64_t want, char *buf)
{
	XXH3_state_t st;
	char *chunk = NULL;
	int ret = 0;

	XXH3_64bits_reset(&st);
	if (!buf && n) {
		chunk = malloc(n < CK_CHUNK ? n : CK_CHUNK);
		if (!chunk)
			return -ENOMEM;
	}
	for (uint64_t at = 0; at < n && !ret;) {
		size_t k = n - at < CK_CHUNK ? (size_t)(n - at) : CK_CHUNK;
		char *p = buf ? buf + at : chunk;

		ret = fio_pread_all(fd, p, k, off + at);
		if (ret == ET_ETRUNC)
			ret = bad(fin, "dense state cut short", off + at);
		if (!ret)
			XXH3_64bits_update(&st, p, k);
		at += k;
	}
	free(chunk);
	if (!ret && XXH3_64bits_digest(&st) != want)
		ret = bad(fin, "dense state checksum mismatch", off);
	return ret;
}

/* Versions 1 and 2: one checksum over the header and the state. */
static int read_old(int fd, const char *fin, bool v2, uint64_t size,
		    struct ckpt_rec *r, void **dense, size_t *len)
{
	unsigned char h[CK_HDR2];
	size_t hl = v2 ? CK_HDR2 : CK_HDR1;
	uint64_t n;
	char *buf;
	int ret;

	if (size < hl || fio_pread_all(fd, h, hl, 0))
		return bad(fin, "header cut short", 0);
	n = get64(h + (v2 ? 32 : 16));
	if (n != size - hl)
		return bad(fin, "dense state length disagrees with the file",
			   v2 ? 32 : 16);
	buf = malloc(n ? n : 1);
	if (!buf)
		return -ENOMEM;
	ret = fio_pread_all(fd, buf, n, hl);
	if (!ret &&
	    hash_bytes2(h, v2 ? 40 : 24, buf, n) != get64(h + (v2 ? 40 : 24)))
		ret = bad(fin, "checksum mismatch", 0);
	if (ret) {
		free(buf);
		return ret;
	}
	r->version = v2 ? 2 : 1;
	r->commit = get64(h + 8);
	r->id = v2 ? get64(h + 16) : r->commit;
	r->flags = v2 ? get32(h + 24) : 0;
	r->dense_len = n;
	if (dense) {
		*dense = buf;
		*len = n;
	} else {
		free(buf);
	}
	return 0;
}

int ckpt_read(const char *dir, struct ckpt_rec *r, bool check_dense,
	      void **dense, size_t *len)
{
	unsigned char h[CK_HDR3], *list = NULL;
	char fin[4096];
	struct stat st;
	uint64_t n, nt, hl;
	char *buf = NULL;
	int fd, ret = 0;

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
	if (st.st_size < 8 || fio_pread_all(fd, h, 8, 0)) {
		ret = bad(fin, "shorter than its magic", 0);
		goto out;
	}
	if (!memcmp(h, "ETCKPT01", 8) || !memcmp(h, "ETCKPT02", 8)) {
		ret = read_old(fd, fin, h[7] == '2', (uint64_t)st.st_size, r,
			       dense, len);
		goto out;
	}
	if (memcmp(h, "ETCKPT03", 8)) {
		ret = bad(fin, "not a commit record (magic)", 0);
		goto out;
	}
	if ((uint64_t)st.st_size < CK_HDR3 ||
	    fio_pread_all(fd, h, CK_HDR3, 0)) {
		ret = bad(fin, "header cut short", 0);
		goto out;
	}
	nt = get32(h + 28);
	n = get64(h + 32);
	hl = CK_HDR3 + nt * CK_TABLE;
	if (hl > (uint64_t)st.st_size || n != (uint64_t)st.st_size - hl) {
		ret = bad(fin,
			  "length disagrees with the tables and dense "
			  "state it names",
			  28);
		goto out;
	}
	list = malloc(nt * CK_TABLE + 1);
	r->tables = calloc(nt + 1, sizeof(*r->tables));
	if (!list || !r->tables) {
		ret = -ENOMEM;
		goto out;
	}
	ret = fio_pread_all(fd, list, nt * CK_TABLE, CK_HDR3);
	if (!ret && hash_bytes2(h, 48, list, nt * CK_TABLE) != get64(h + 48))
		ret = bad(fin, "header checksum mismatch", 0);
	if (ret)
		goto out;
	for (uint64_t i = 0; i < nt; i++) {
		const unsigned char *e = list + i * CK_TABLE;
		struct ckpt_table *t = &r->tables[i];

		memcpy(t->name, e, 64);
		t->name[64] = 0;
		t->jlen = get64(e + 64);
		t->jsum = get64(e + 72);
		t->asum = get64(e + 80);
		t->aref = get64(e + 88);
		r->ntables = (uint32_t)i; /* those before: no name twice */
		if (!name_ok(t->name) || (!t->jlen) != (!t->jsum) ||
		    (!t->asum) != (!t->aref) || (t->aref && t->aref < 2) ||
		    ckpt_find(r, t->name)) {
			ret = bad(fin, "table entry out of range",
				  CK_HDR3 + i * CK_TABLE);
			goto out;
		}
	}
	if (dense || check_dense) {
		if (dense) {
			buf = malloc(n ? n : 1);
			if (!buf) {
				ret = -ENOMEM;
				goto out;
			}
		}
		ret = dense_check(fd, fin, hl, n, get64(h + 40), buf);
		if (ret)
			goto out;
	}
	r->version = 3;
	r->commit = get64(h + 8);
	r->id = get64(h + 16);
	r->flags = get32(h + 24);
	r->ntables = (uint32_t)nt;
	r->dense_len = n;
	if (dense) {
		*dense = buf;
		*len = n;
		buf = NULL;
	}
out:
	free(buf);
	free(list);
	if (ret)
		ckpt_rec_free(r);
	close(fd);
	return ret;
}
