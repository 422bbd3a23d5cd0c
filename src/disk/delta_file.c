/*
 * delta_file.c - writes and reads the records of a delta file
 * (delta_file.h has the layout; docs/FORMAT.md the full description).
 *
 * A record's checksum is seeded with its number, so a record moved,
 * repeated or dropped fails as surely as a damaged one; the END record
 * counts the records before it, and nothing may follow it, so a file cut
 * at a record boundary fails too.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "delta_file.h"
#include "embtier.h"
#include "error.h"
#include "fileio.h"
#include "hash.h"
#include "le.h"

#define DF_MAGIC   "ETDELTA1"
#define DF_VERSION 1u
#define DF_BUF	   (4u << 20) /* the writer's buffer */

static uint64_t rec_sum(uint64_t seq, const unsigned char *hdr, const void *p,
			uint64_t bytes)
{
	XXH3_state_t st;

	XXH3_INITSTATE(&st);
	XXH3_64bits_reset_withSeed(&st, seq);
	XXH3_64bits_update(&st, hdr, DF_REC_HDR);
	if (bytes)
		XXH3_64bits_update(&st, p, (size_t)bytes);
	return XXH3_64bits_digest(&st);
}

/* ---------------------------------------------------------------- writer */

static int w_flush(struct df_writer *w)
{
	int ret = fio_pwrite_all(w->fd, w->buf, w->len, w->off);

	if (ret)
		return err_set(ret, "%s: %s", w->tmp, et_strerror(ret));
	w->off += w->len;
	w->len = 0;
	return 0;
}

static int w_put(struct df_writer *w, const void *p, uint64_t bytes)
{
	const unsigned char *s = p;

	if (bytes >= w->cap / 2) { /* a large payload: written from where it
				    * is, not copied into the buffer */
		int ret = w->len ? w_flush(w) : 0;

		if (!ret)
			ret = fio_pwrite_all(w->fd, p, (size_t)bytes, w->off);
		if (ret)
			return err_set(ret, "%s: %s", w->tmp, et_strerror(ret));
		w->off += bytes;
		return 0;
	}

	while (bytes) {
		size_t k = w->cap - w->len;
		int ret;

		if (k > bytes)
			k = (size_t)bytes;
		memcpy(w->buf + w->len, s, k);
		w->len += k;
		s += k;
		bytes -= k;
		if (w->len == w->cap && (ret = w_flush(w)))
			return ret;
	}
	return 0;
}

int df_create(struct df_writer *w, const char *path, const struct df_header *h)
{
	unsigned char b[DF_HDR] = {0};
	size_t n = strlen(path) + 8;

	*w = (struct df_writer){.fd = -1};
	w->path = strdup(path);
	w->tmp = malloc(n);
	w->buf = malloc(DF_BUF);
	w->cap = DF_BUF;
	if (!w->path || !w->tmp || !w->buf) {
		df_abort(w);
		return -ENOMEM;
	}
	snprintf(w->tmp, n, "%s.tmp", path);
	if (!access(path, F_OK)) {
		df_abort(w);
		return err_set(-EEXIST,
			       "%s exists: a delta is written to a "
			       "new file",
			       path);
	}
	w->fd = open(w->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (w->fd < 0) {
		int e = -errno;

		df_abort(w);
		return err_set(e, "%s: %s", path, et_strerror(e));
	}
	memcpy(b, DF_MAGIC, 8);
	put32(b + 8, DF_VERSION);
	put32(b + 12, h->flags);
	put64(b + 16, h->from_commit);
	put64(b + 24, h->to_commit);
	put64(b + 32, h->checkpoint_id);
	put32(b + 40, h->tables);
	put64(b + 48, h->dense_len);
	put64(b + 56, XXH3_64bits(b, 56));
	return w_put(w, b, DF_HDR);
}

static int record_now(struct df_writer *w, uint32_t kind, uint32_t n,
		      const void *p, uint64_t bytes)
{
	unsigned char h[DF_REC_HDR], t[8];
	int ret;

	put32(h, kind);
	put32(h + 4, n);
	put64(h + 8, bytes);
	put64(t, rec_sum(++w->seq, h, p, bytes));
	ret = w_put(w, h, sizeof(h));
	if (!ret)
		ret = w_put(w, p, bytes);
	return ret ? ret : w_put(w, t, sizeof(t));
}

/* ---------------------------------------------------------- async */

struct df_async {
	pthread_t th;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	bool busy, stop; /* a record handed over; the thread to end */
	uint32_t kind, n;
	const void *p;
	uint64_t bytes;
	int err;
	char detail[256];
};

static void *async_main(void *arg)
{
	struct df_writer *w = arg;
	struct df_async *a = w->a;

	pthread_mutex_lock(&a->mu);
	for (;;) {
		int ret;

		while (!a->busy && !a->stop)
			pthread_cond_wait(&a->cv, &a->mu);
		if (!a->busy)
			break;
		pthread_mutex_unlock(&a->mu);
		ret = a->err ? 0 : record_now(w, a->kind, a->n, a->p, a->bytes);
		pthread_mutex_lock(&a->mu);
		if (ret && !a->err) {
			a->err = ret;
			snprintf(a->detail, sizeof(a->detail), "%s",
				 et_errdetail());
		}
		a->busy = false;
		pthread_cond_broadcast(&a->cv);
	}
	pthread_mutex_unlock(&a->mu);
	return NULL;
}

/* Waits for the record handed over (a->mu held); its error, if any. */
static int async_wait(struct df_async *a)
{
	while (a->busy)
		pthread_cond_wait(&a->cv, &a->mu);
	return a->err;
}

int df_async_start(struct df_writer *w)
{
	struct df_async *a = calloc(1, sizeof(*a));

	if (!a)
		return -ENOMEM;
	pthread_mutex_init(&a->mu, NULL);
	pthread_cond_init(&a->cv, NULL);
	w->a = a;
	if (pthread_create(&a->th, NULL, async_main, w)) {
		w->a = NULL;
		pthread_cond_destroy(&a->cv);
		pthread_mutex_destroy(&a->mu);
		free(a);
		return -EAGAIN;
	}
	return 0;
}

int df_async_stop(struct df_writer *w)
{
	struct df_async *a = w->a;
	int ret;

	if (!a)
		return 0;
	pthread_mutex_lock(&a->mu);
	ret = async_wait(a);
	a->stop = true;
	pthread_cond_broadcast(&a->cv);
	pthread_mutex_unlock(&a->mu);
	pthread_join(a->th, NULL);
	if (ret)
		err_set(ret, "%s", a->detail);
	w->a = NULL;
	pthread_cond_destroy(&a->cv);
	pthread_mutex_destroy(&a->mu);
	free(a);
	return ret;
}

int df_record(struct df_writer *w, uint32_t kind, uint32_t n, const void *p,
	      uint64_t bytes)
{
	struct df_async *a = w->a;
	int ret;

	if (!a)
		return record_now(w, kind, n, p, bytes);
	pthread_mutex_lock(&a->mu);
	ret = async_wait(a);
	if (!ret) {
		a->kind = kind;
		a->n = n;
		a->p = p;
		a->bytes = bytes;
		a->busy = true;
		pthread_cond_broadcast(&a->cv);
	}
	pthread_mutex_unlock(&a->mu);
	if (ret)
		err_set(ret, "%s", a->detail);
	return ret;
}

int df_table(struct df_writer *w, const struct df_table *t)
{
	unsigned char b[DF_TABLE] = {0};
	uint32_t sc;

	memcpy(&sc, &t->init_scale, 4);
	memcpy(b, t->name, strnlen(t->name, 64));
	put64(b + 64, t->rows);
	put32(b + 72, t->dim);
	put32(b + 76, t->dtype);
	put32(b + 80, t->optim);
	put32(b + 84, t->state_floats);
	put32(b + 88, t->init);
	put32(b + 92, sc);
	put64(b + 96, t->seed);
	put32(b + 104, t->flags);
	put32(b + 108, t->whole);
	put32(b + 112, t->rec);
	put64(b + 120, t->from_sum);
	put64(b + 128, t->to_sum);
	return df_record(w, DF_TABLE_HDR, 1, b, sizeof(b));
}

int df_finish(struct df_writer *w, uint64_t rows, uint64_t tombs,
	      uint64_t *bytes)
{
	unsigned char e[24];
	uint64_t recs = w->seq;
	int ret;

	put64(e, rows);
	put64(e + 8, tombs);
	put64(e + 16, recs);
	ret = df_record(w, DF_END, 0, e, sizeof(e));
	if (!ret)
		ret = w_flush(w);
	if (!ret && (ret = fio_fsync(w->fd)))
		err_set(ret, "%s: fsync: %s", w->tmp, et_strerror(ret));
	if (!ret && (ret = fio_rename(w->tmp, w->path)))
		err_set(ret, "%s: rename: %s", w->tmp, et_strerror(ret));
	if (!ret) {
		free(w->tmp); /* renamed: nothing to remove */
		w->tmp = NULL;
		ret = fio_sync_dir(w->path, 0);
	}
	if (!ret && bytes)
		*bytes = w->off;
	df_abort(w);
	return ret;
}

void df_abort(struct df_writer *w)
{
	(void)df_async_stop(w);
	if (w->fd >= 0)
		close(w->fd);
	if (w->tmp)
		unlink(w->tmp);
	free(w->tmp);
	free(w->path);
	free(w->buf);
	*w = (struct df_writer){.fd = -1};
}

/* ---------------------------------------------------------------- reader */

static int bad(const struct df_reader *r, uint64_t at, const char *what)
{
	return err_set(ET_EDELTA, "%s: %s at byte %llu", r->path, what,
		       (unsigned long long)at);
}

int df_open(struct df_reader *r, const char *path, struct df_header *h)
{
	unsigned char b[DF_HDR];
	struct stat st;
	int ret;

	*r = (struct df_reader){.fd = -1, .path = path};
	r->fd = open(path, O_RDONLY | O_CLOEXEC);
	if (r->fd < 0 || fstat(r->fd, &st)) {
		ret = -errno;
		df_close(r);
		return err_set(ret, "%s: %s", path, et_strerror(ret));
	}
	r->size = (uint64_t)st.st_size;
	ret = fio_pread_all(r->fd, b, sizeof(b), 0);
	if (ret == ET_ETRUNC || (!ret && memcmp(b, DF_MAGIC, 8)))
		ret = bad(r, 0, "not a delta file (magic)");
	else if (!ret && get64(b + 56) != XXH3_64bits(b, 56))
		ret = bad(r, 56, "header checksum mismatch");
	else if (!ret && get32(b + 8) != DF_VERSION)
		ret = bad(r, 8, "delta format version not supported");
	else if (!ret && (get32(b + 12) & ~(uint32_t)ET_DELTA_STATE))
		ret = bad(r, 12, "unknown flags");
	if (ret) {
		df_close(r);
		return ret;
	}
	h->flags = get32(b + 12);
	h->from_commit = get64(b + 16);
	h->to_commit = get64(b + 24);
	h->checkpoint_id = get64(b + 32);
	h->tables = get32(b + 40);
	h->dense_len = get64(b + 48);
	if (h->from_commit > h->to_commit) {
		df_close(r);
		return bad(r, 16, "commits out of order");
	}
	r->off = DF_HDR;
	return 0;
}

int df_next(struct df_reader *r, struct df_rec *rec)
{
	unsigned char h[DF_REC_HDR], t[8];
	uint64_t at = r->off, bytes;
	int ret;

	if (r->ended)
		return bad(r, at, "a read past the END record");
	if (r->size - at < DF_REC_HDR + 8)
		return bad(r, at, "the file ends before its END record");
	ret = fio_pread_all(r->fd, h, sizeof(h), at);
	if (ret)
		return ret == ET_ETRUNC ? bad(r, at, "cut") : ret;
	bytes = get64(h + 8);
	if (bytes > r->size - at - DF_REC_HDR - 8)
		return bad(r, at, "a record runs past the end of the file");
	if (bytes > r->cap) {
		unsigned char *nb = realloc(r->buf, bytes ? (size_t)bytes : 1);

		if (!nb)
			return -ENOMEM;
		r->buf = nb;
		r->cap = (size_t)bytes;
	}
	ret = fio_pread_all(r->fd, r->buf, (size_t)bytes, at + DF_REC_HDR);
	if (!ret)
		ret = fio_pread_all(r->fd, t, 8, at + DF_REC_HDR + bytes);
	if (ret)
		return ret == ET_ETRUNC ? bad(r, at, "cut") : ret;
	if (get64(t) != rec_sum(r->seq + 1, h, r->buf, bytes))
		return bad(r, at,
			   "record checksum mismatch (damaged, or "
			   "out of place)");
	r->seq++;
	r->off = at + DF_REC_HDR + bytes + 8;
	rec->kind = get32(h);
	rec->n = get32(h + 4);
	rec->bytes = bytes;
	rec->p = r->buf;
	if (rec->kind == DF_END) {
		if (bytes != 24 || get64(r->buf + 16) != r->seq - 1)
			return bad(r, at,
				   "END record does not count the "
				   "records before it");
		if (r->off != r->size)
			return bad(r, r->off, "bytes past the END record");
		r->ended = true;
	}
	return 0;
}

int df_table_parse(struct df_reader *r, const struct df_rec *rec,
		   struct df_table *t)
{
	const unsigned char *b = rec->p;
	uint32_t sc;

	if (rec->bytes != DF_TABLE)
		return bad(r, r->off, "a table record of the wrong size");
	memset(t, 0, sizeof(*t));
	memcpy(t->name, b, 64);
	t->rows = get64(b + 64);
	t->dim = get32(b + 72);
	t->dtype = get32(b + 76);
	t->optim = get32(b + 80);
	t->state_floats = get32(b + 84);
	t->init = get32(b + 88);
	sc = get32(b + 92);
	memcpy(&t->init_scale, &sc, 4);
	t->seed = get64(b + 96);
	t->flags = get32(b + 104);
	t->whole = get32(b + 108);
	t->rec = get32(b + 112);
	t->from_sum = get64(b + 120);
	t->to_sum = get64(b + 128);
	if (!t->name[0] || t->whole > 1 || t->flags & ~(uint32_t)ET_TABLE_KEYED)
		return bad(r, r->off, "a table record out of range");
	return 0;
}

void df_rewind(struct df_reader *r)
{
	r->off = DF_HDR;
	r->seq = 0;
	r->ended = false;
}

void df_close(struct df_reader *r)
{
	if (r->fd >= 0)
		close(r->fd);
	free(r->buf);
	r->fd = -1;
	r->buf = NULL;
	r->cap = 0;
}
