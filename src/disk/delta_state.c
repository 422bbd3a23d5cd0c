/*
 * delta_state.c - reads and writes DIR/DELTA (delta_state.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "delta_state.h"
#include "embtier.h"
#include "error.h"
#include "fileio.h"
#include "hash.h"
#include "le.h"

#define DS_MAGIC "ETDSTA01"
#define DS_HDR	 24
#define DS_ENT	 72
#define DS_MAX	 65536u /* tables */

static int ds_path(const char *dir, const char *leaf, char *p, size_t cap)
{
	return (size_t)snprintf(p, cap, "%s/%s", dir, leaf) >= cap
		   ? -ENAMETOOLONG
		   : 0;
}

int dstate_read(const char *dir, struct dstate *s)
{
	char p[4096];
	unsigned char *b = NULL;
	struct stat st;
	uint32_t n;
	int fd, ret = ds_path(dir, "DELTA", p, sizeof(p));

	*s = (struct dstate){0};
	if (ret)
		return ret;
	fd = open(p, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st)) {
		ret = -errno;
		goto out;
	}
	if (st.st_size < DS_HDR + 8 ||
	    st.st_size > DS_HDR + 8 + DS_ENT * DS_MAX) {
		ret = err_set(ET_EDELTA, "%s: %lld bytes: not a delta state", p,
			      (long long)st.st_size);
		goto out;
	}
	b = malloc((size_t)st.st_size);
	if (!b) {
		ret = -ENOMEM;
		goto out;
	}
	ret = fio_pread_all(fd, b, (size_t)st.st_size, 0);
	if (ret)
		goto out;
	n = get32(b + 16);
	if (memcmp(b, DS_MAGIC, 8) ||
	    (uint64_t)st.st_size != DS_HDR + 8 + (uint64_t)DS_ENT * n ||
	    get64(b + st.st_size - 8) !=
		XXH3_64bits(b, (size_t)st.st_size - 8)) {
		ret = err_set(ET_EDELTA,
			      "%s: damaged (magic, size or "
			      "checksum)",
			      p);
		goto out;
	}
	s->commit = get64(b + 8);
	s->t = calloc(n ? n : 1, sizeof(*s->t));
	if (!s->t) {
		ret = -ENOMEM;
		goto out;
	}
	for (uint32_t i = 0; i < n; i++) {
		memcpy(s->t[i].name, b + DS_HDR + DS_ENT * i, 64);
		s->t[i].sum = get64(b + DS_HDR + DS_ENT * i + 64);
	}
	s->n = n;
out:
	free(b);
	close(fd);
	return ret;
}

int dstate_write(const char *dir, const struct dstate *s)
{
	size_t len = DS_HDR + 8 + (size_t)DS_ENT * s->n;
	unsigned char *b = calloc(1, len);
	char p[4096], tmp[4096];
	int fd = -1, ret = ds_path(dir, "DELTA", p, sizeof(p));

	if (!ret)
		ret = ds_path(dir, "DELTA.tmp", tmp, sizeof(tmp));
	if (!b)
		ret = -ENOMEM;
	if (ret)
		goto out;
	memcpy(b, DS_MAGIC, 8);
	put64(b + 8, s->commit);
	put32(b + 16, s->n);
	for (uint32_t i = 0; i < s->n; i++) {
		memcpy(b + DS_HDR + DS_ENT * i, s->t[i].name,
		       strnlen(s->t[i].name, 64));
		put64(b + DS_HDR + DS_ENT * i + 64, s->t[i].sum);
	}
	put64(b + len - 8, XXH3_64bits(b, len - 8));
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0) {
		ret = -errno;
		goto out;
	}
	ret = fio_pwrite_all(fd, b, len, 0);
	if (!ret)
		ret = fio_fsync(fd);
	close(fd);
	if (!ret)
		ret = fio_rename(tmp, p);
	if (!ret)
		ret = fio_sync_dir(p, 0);
	if (ret)
		err_set(ret, "%s: %s", p, et_strerror(ret));
out:
	free(b);
	return ret;
}

struct dstate_table *dstate_find(const struct dstate *s, const char *name)
{
	for (uint32_t i = 0; i < s->n; i++)
		if (!strncmp(s->t[i].name, name, 64))
			return &s->t[i];
	return NULL;
}

int dstate_set(struct dstate *s, const char *name, uint64_t sum)
{
	struct dstate_table *t = dstate_find(s, name), *nt;

	if (!t) {
		nt = realloc(s->t, (s->n + 1) * sizeof(*nt));
		if (!nt)
			return -ENOMEM;
		s->t = nt;
		t = &s->t[s->n++];
		memset(t, 0, sizeof(*t));
		snprintf(t->name, sizeof(t->name), "%s", name);
	}
	t->sum = sum;
	return 0;
}

void dstate_free(struct dstate *s)
{
	free(s->t);
	*s = (struct dstate){0};
}
