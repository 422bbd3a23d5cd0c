/*
 * journal.c - the journal of a row log's index (see journal.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "embtier.h"
#include "le.h"
#include "error.h"
#include "fileio.h"
#include "hash.h"
#include "journal.h"
#include "mem_host.h"

/* The scratch of a read or write: a chunk of the widest entries. A
 * batch goes a chunk of its own entries (jr_ent_chunk) at a time. */
#define JR_CHUNK_BYTES ((size_t)JR_ENT_CHUNK * JR_ENT_ST)

static size_t jr_ent_chunk(size_t ent)
{
	return (size_t)JR_ENT_CHUNK * ent;
}

/* A journal being read. */
struct scan {
	int fd;
	const char *path;
	uint64_t size;
	uint32_t rec_bytes; /* 0 until the first batch says */
	int ver;	    /* 0 until the first batch says */
	unsigned char *buf; /* JR_CHUNK_BYTES */
	uint64_t prev;	    /* the checksum of the batch before (0: none):
			     * a version 2 batch names it, so the last
			     * batch's checksum covers the whole chain */
	uint64_t buf_from;  /* the batch offset whose entries buf holds
			     * whole (UINT64_MAX: none) */
	bool skip;	    /* version 2 batches of a commit <= skip_upto are */
	uint64_t skip_upto; /* taken on their trailer's word (jr_sink) */
};

/* Why a batch did not check, for the error detail. */
struct bad {
	const char *why;
	uint64_t at;
};

/* The entry kinds of version 2 batches: 0 plain, 1 stamped, 2 scored. */
static const char *const hdr_magic[3] = {"ETIDXH02", "ETIDXH03", "ETIDXH04"};
static const char *const trl_magic[3] = {"ETIDXT02", "ETIDXT03", "ETIDXT04"};
static const size_t kind_ent[3] = {JR_ENT, JR_ENT_ST, JR_ENT_SC};

static void decode(const unsigned char *h, const unsigned char *t, int ver,
		   int kind, struct jr_batch *b)
{
	b->ver = ver;
	b->stamped = kind >= 1;
	b->scored = kind == 2;
	b->commit = get64(h + 8);
	b->n = get64(h + 16);
	b->hseg = get32(t + 8);
	b->hslot = get32(t + 12);
	b->flags = get32(t + 16);
	b->rec_bytes = get32(t + 20);
	b->seg_bytes = get32(t + 24);
	b->hgen = ver >= 2 ? get32(t + 28) : 0;
	b->prev = ver >= 2 ? get64(h + 24) : 0;
	b->skimmed = false;
}

/*
 * batch_check for a batch the sink does not need (a commit at or below
 * jr_sink.skip_upto): its header and trailer only, its checksum taken as
 * the trailer says, not computed, its entries not read. The chain still
 * holds for the batches after it: the first of them names that checksum
 * inside its own, which is computed, and so on to the tail the record
 * names; a skimmed batch whose entries are damaged goes unseen, and is not
 * used.
 */
static int batch_skim(struct scan *s, uint64_t off, uint64_t limit,
		      const unsigned char *h, int kind, struct jr_batch *b,
		      uint64_t *sum, uint64_t *next, struct bad *why)
{
	size_t ent = kind_ent[kind];
	unsigned char t[JR_TRL];
	uint64_t n = get64(h + 16);
	int ret;

	if (n > (limit - off - JR_HDR - JR_TRL) / ent) {
		why->why = "names more entries than the bytes hold";
		return 1;
	}
	ret = fio_pread_all(s->fd, t, JR_TRL, off + JR_HDR + n * ent);
	if (ret)
		return ret == ET_ETRUNC ? (why->why = "cut short", 1) : ret;
	if (memcmp(t, trl_magic[kind], 8)) {
		why->at = off + JR_HDR + n * ent;
		why->why = "has no batch trailer";
		return 1;
	}
	decode(h, t, 2, kind, b);
	b->skimmed = true;
	if (!b->rec_bytes || b->seg_bytes < b->rec_bytes ||
	    (s->rec_bytes && b->rec_bytes != s->rec_bytes) ||
	    (s->ver && s->ver != 2)) {
		why->why = "disagrees with the journal's other batches "
			   "(record size or version)";
		return 1;
	}
	*sum = get64(t + 32);
	*next = off + JR_HDR + n * ent + JR_TRL;
	return 0;
}

/*
 * Reads and checks the batch at off, which must end by limit: 0 with *b,
 * its checksum and where it ends; 1 if there is no complete, intact batch
 * there (*why says what); or an I/O error.
 */
static int batch_check(struct scan *s, uint64_t off, uint64_t limit,
		       struct jr_batch *b, uint64_t *sum, uint64_t *next,
		       struct bad *why)
{
	unsigned char h[JR_HDR], t[JR_TRL];
	int kind = 0; /* version 2: hdr_magic's */
	XXH3_state_t st;
	uint64_t n, eb;
	size_t ent, chunk;
	int ver, ret;

	why->at = off;
	if (limit < off || limit - off < JR_HDR + JR_TRL) {
		why->why = "cut short";
		return 1;
	}
	ret = fio_pread_all(s->fd, h, JR_HDR, off);
	if (ret)
		return ret == ET_ETRUNC ? (why->why = "cut short", 1) : ret;
	if (!memcmp(h, hdr_magic[0], 8))
		ver = 2;
	else if (!memcmp(h, hdr_magic[1], 8))
		ver = 2, kind = 1;
	else if (!memcmp(h, hdr_magic[2], 8))
		ver = 2, kind = 2;
	else if (!memcmp(h, "ETIDXH01", 8))
		ver = 1;
	else {
		why->why = "has no batch header";
		return 1;
	}
	if (ver == 2 && get64(h + 24) != s->prev) {
		why->why = "does not follow the batch before it";
		return 1;
	}
	if (ver == 2 && s->skip && get64(h + 8) <= s->skip_upto)
		return batch_skim(s, off, limit, h, kind, b, sum, next, why);
	ent = kind_ent[kind];
	chunk = jr_ent_chunk(ent);
	n = get64(h + 16);
	if (n > (limit - off - JR_HDR - JR_TRL) / ent) {
		why->why = "names more entries than the bytes hold";
		return 1;
	}
	eb = n * ent;
	ret = fio_pread_all(s->fd, t, JR_TRL, off + JR_HDR + eb);
	if (ret)
		return ret == ET_ETRUNC ? (why->why = "cut short", 1) : ret;
	if (memcmp(t, ver == 2 ? trl_magic[kind] : "ETIDXT01", 8)) {
		why->at = off + JR_HDR + eb;
		why->why = "has no batch trailer";
		return 1;
	}
	XXH3_64bits_reset(&st);
	XXH3_64bits_update(&st, h, JR_HDR);
	s->buf_from = UINT64_MAX;
	for (uint64_t at = 0; at < eb;) {
		size_t k = eb - at < chunk ? (size_t)(eb - at) : chunk;

		ret = fio_pread_all(s->fd, s->buf, k, off + JR_HDR + at);
		if (ret)
			return ret == ET_ETRUNC ? (why->why = "cut short", 1)
						: ret;
		XXH3_64bits_update(&st, s->buf, k);
		at += k;
	}
	if (eb <= chunk)
		s->buf_from = off;
	XXH3_64bits_update(&st, t, 32);
	*sum = XXH3_64bits_digest(&st);
	if (*sum != get64(t + 32)) {
		why->why = "fails its checksum";
		return 1;
	}
	decode(h, t, ver, kind, b);
	if (!b->rec_bytes || b->seg_bytes < b->rec_bytes ||
	    (s->rec_bytes && b->rec_bytes != s->rec_bytes) ||
	    (s->ver && ver != s->ver)) {
		why->why = "disagrees with the journal's other batches "
			   "(record size or version)";
		return 1;
	}
	*next = off + JR_HDR + eb + JR_TRL;
	return 0;
}

/* Hands a checked batch to the sink: its entries from buf when they are
 * still there, else read again. */
static int batch_apply(struct scan *s, uint64_t off, const struct jr_batch *b,
		       const struct jr_sink *k)
{
	size_t ent = jr_ent_bytes(b), chunk = jr_ent_chunk(ent);
	uint64_t eb = b->skimmed ? 0 : b->n * ent;
	int ret = k->begin ? k->begin(k->arg, b) : 0;

	for (uint64_t at = 0; !ret && at < eb;) {
		size_t n = eb - at < chunk ? (size_t)(eb - at) : chunk;

		if (s->buf_from != off)
			ret =
			    fio_pread_all(s->fd, s->buf, n, off + JR_HDR + at);
		if (!ret)
			ret = k->entries(k->arg, b, s->buf, n / ent);
		at += n;
	}
	if (!ret && k->end)
		ret = k->end(k->arg, b);
	return ret;
}

static int journal_bad(const struct scan *s, const struct jr_expect *x,
		       const struct bad *why)
{
	return err_set(ET_EJOURNAL,
		       "%s: the batch at byte %llu %s (the commit record "
		       "names %llu bytes, commit %llu)",
		       s->path, (unsigned long long)why->at, why->why,
		       (unsigned long long)x->jlen,
		       (unsigned long long)x->commit);
}

/*
 * What lies past the committed bytes, from off on: only a commit whose
 * record never came, the one after the record's (a commit that fails is
 * retried under the same number; one that succeeds moves the record on).
 * A complete batch of the record's commit or before is a record that
 * does not name what was committed (ET_EJOURNAL); one two or more commits
 * past it, a record older than its journals, put back (ET_ERECORD). With
 * no record at all, any complete batch means the record is lost.
 */
static int scan_uncommitted(struct scan *s, uint64_t off, const char *dir_hint,
			    const struct jr_expect *x)
{
	uint64_t sum, next;
	struct jr_batch b;
	struct bad why;
	int ret;

	for (;;) {
		ret = batch_check(s, off, s->size, &b, &sum, &next, &why);
		if (ret)
			return ret < 0 ? ret : 0;
		if (x->mode == JR_NORECORD)
			return err_set(ET_EMISSING,
				       "%s/CHECKPOINT missing, but %s holds a "
				       "complete batch of commit %llu",
				       dir_hint, s->path,
				       (unsigned long long)b.commit);
		if (b.commit <= x->commit)
			return err_set(
			    ET_EJOURNAL,
			    "%s holds a batch of commit %llu at byte "
			    "%llu that the commit record (commit "
			    "%llu) does not name",
			    s->path, (unsigned long long)b.commit,
			    (unsigned long long)off,
			    (unsigned long long)x->commit);
		if (b.commit > x->commit + 1)
			return err_set(
			    ET_ERECORD,
			    "the commit record (commit %llu) is "
			    "older than %s, which holds commit %llu: "
			    "a stale CHECKPOINT",
			    (unsigned long long)x->commit, s->path,
			    (unsigned long long)b.commit);
		s->prev = sum;
		off = next;
	}
}

/* A checked batch at off is committed: the journal's record size, version
 * and chain follow it, and the sink (if any) gets it. */
static int batch_take(struct scan *s, uint64_t off, const struct jr_batch *b,
		      uint64_t sum, const struct jr_sink *k)
{
	s->rec_bytes = b->rec_bytes;
	s->ver = b->ver;
	s->prev = sum;
	return k ? batch_apply(s, off, b, k) : 0;
}

/* The record names the table: exactly [0, jlen), ending in jsum. */
static int scan_named(struct scan *s, const struct jr_expect *x,
		      const struct jr_sink *k, struct jr_tail *t)
{
	uint64_t off = 0, sum = 0, next;
	struct jr_batch b;
	struct bad why;
	int ret;

	if (s->size < x->jlen)
		return err_set(ET_EJOURNAL,
			       "%s is %llu bytes; the commit record (commit "
			       "%llu) names %llu",
			       s->path, (unsigned long long)s->size,
			       (unsigned long long)x->commit,
			       (unsigned long long)x->jlen);
	while (off < x->jlen) {
		ret = batch_check(s, off, x->jlen, &b, &sum, &next, &why);
		if (ret < 0)
			return ret;
		if (ret)
			return journal_bad(s, x, &why);
		if (b.commit > x->commit) {
			why.why = "is of a commit past the record's";
			return journal_bad(s, x, &why);
		}
		ret = batch_take(s, off, &b, sum, k);
		if (ret)
			return ret;
		off = next;
	}
	if (x->jlen && sum != x->jsum)
		return err_set(ET_EJOURNAL,
			       "%s: its last committed batch is not the one "
			       "the commit record (commit %llu) names",
			       s->path, (unsigned long long)x->commit);
	t->len = x->jlen;
	t->sum = x->jsum;
	return scan_uncommitted(s, x->jlen, "", x);
}

/* A version 1 or 2 record: the batches up to its commit; the first bad
 * one, or one past it, ends the journal. */
static int scan_legacy(struct scan *s, const struct jr_expect *x,
		       const struct jr_sink *k, struct jr_tail *t)
{
	uint64_t off = 0, sum = 0, next;
	struct jr_batch b;
	struct bad why;
	int ret;

	for (;;) {
		ret = batch_check(s, off, s->size, &b, &sum, &next, &why);
		if (ret < 0)
			return ret;
		if (ret || b.commit > x->commit)
			break;
		ret = batch_take(s, off, &b, sum, k);
		if (ret)
			return ret;
		t->len = off = next;
		t->sum = sum;
	}
	return 0;
}

/* The directory of path, for messages. */
static void dir_hint(const char *path, char *d, size_t cap)
{
	const char *sl = strrchr(path, '/');
	size_t n = sl ? (size_t)(sl - path) : 1;

	if (n >= cap)
		n = cap - 1;
	memcpy(d, sl ? path : ".", n);
	d[n] = 0;
}

static int scan_file(int fd, const char *path, uint32_t rec_bytes,
		     const struct jr_expect *x, const struct jr_sink *k,
		     struct jr_tail *t)
{
	struct scan s = {.fd = fd,
			 .path = path,
			 .rec_bytes = rec_bytes,
			 .buf_from = UINT64_MAX,
			 .skip = k && k->skip,
			 .skip_upto = k ? k->skip_upto : 0};
	struct stat st;
	char d[4096];
	int ret;

	memset(t, 0, sizeof(*t));
	if (fstat(fd, &st))
		return -errno;
	s.size = (uint64_t)st.st_size;
	s.buf = mem_alloc(JR_CHUNK_BYTES, 0);
	if (!s.buf)
		return -ENOMEM;
	switch (x->mode) {
	case JR_NAMED:
		ret = scan_named(&s, x, k, t);
		break;
	case JR_LEGACY:
		ret = scan_legacy(&s, x, k, t);
		break;
	default:
		dir_hint(path, d, sizeof(d));
		ret = scan_uncommitted(&s, 0, d, x);
		break;
	}
	mem_free(s.buf, JR_CHUNK_BYTES, 0);
	t->ver = s.ver;
	t->rec_bytes = s.rec_bytes;
	return ret;
}

/* Whether pnew is the journal the record names (a snapshot whose rename
 * a crash interrupted). Errors other than "not it" are returned. */
static int is_committed(const char *pnew, uint32_t rec_bytes,
			const struct jr_expect *x, bool *yes)
{
	struct jr_tail t;
	int fd, ret;

	*yes = false;
	if (x->mode == JR_NAMED && !x->jlen)
		return 0;
	if (x->mode != JR_NAMED && x->mode != JR_LEGACY)
		return 0;
	fd = open(pnew, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? 0 : -errno;
	ret = scan_file(fd, pnew, rec_bytes, x, NULL, &t);
	close(fd);
	if (ret == ET_EJOURNAL || ret == ET_EMISSING) {
		err_clear();
		return 0;
	}
	if (!ret && x->mode == JR_LEGACY) {
		struct stat st;

		/* legacy: complete, and all of it within the commit */
		*yes =
		    t.len && !stat(pnew, &st) && t.len == (uint64_t)st.st_size;
		return 0;
	}
	*yes = !ret;
	return ret;
}

int jr_open(const char *pidx, const char *pnew, uint32_t rec_bytes,
	    const struct jr_expect *x, bool rdonly, const struct jr_sink *sink,
	    int *fd, struct jr_tail *t)
{
	const char *path = pidx;
	struct stat st;
	bool committed;
	int ret, f;

	*fd = -1;
	memset(t, 0, sizeof(*t));
	ret = is_committed(pnew, rec_bytes, x, &committed);
	if (ret)
		return ret;
	if (committed && rdonly)
		path = pnew;
	else if (committed)
		ret = jr_install(pnew, pidx);
	else if (!rdonly && unlink(pnew) && errno != ENOENT)
		ret = -errno;
	if (ret)
		return ret;
	f = open(path, (rdonly ? O_RDONLY : O_RDWR) | O_CLOEXEC);
	if (f < 0) {
		if (errno != ENOENT)
			return -errno;
		if (x->mode == JR_NAMED && x->jlen)
			return err_set(ET_EMISSING,
				       "%s missing; the commit record (commit "
				       "%llu) names %llu bytes of it",
				       pidx, (unsigned long long)x->commit,
				       (unsigned long long)x->jlen);
		return 0;
	}
	ret = scan_file(f, path, rec_bytes, x, sink, t);
	t->in_new = path == pnew;
	if (!ret && !rdonly) { /* cut what the record does not name */
		if (fstat(f, &st))
			ret = -errno;
		else if ((uint64_t)st.st_size != t->len &&
			 (ftruncate(f, (off_t)t->len) || fdatasync(f)))
			ret = -errno;
	}
	if (ret || rdonly)
		close(f);
	else
		*fd = f;
	return ret;
}

/* ---------------------------------------------------------------- writes */

/* Writes len bytes at off through the ring (its fault seam included); a
 * short transfer goes on from where it stopped. */
static int ring_write(io_ctx *io, int fd, const void *buf, size_t len,
		      uint64_t off)
{
	const char *p = buf;

	while (len) {
		struct io_req r = {.op = IO_WRITE,
				   .fd = fd,
				   .buf = (void *)p,
				   .len = (uint32_t)len,
				   .off = off};
		int ret;

		io_queue(io, &r);
		ret = io_wait(io, 1);
		if (ret < 0)
			return ret;
		if (r.res < 0)
			return r.res;
		if (r.res == 0)
			return -ENOSPC;
		p += r.res;
		off += (uint64_t)r.res;
		len -= (size_t)r.res;
	}
	return 0;
}

static int batch_kind(const struct jr_batch *b)
{
	return b->scored ? 2 : b->stamped;
}

static void encode_hdr(const struct jr_batch *b, unsigned char *h)
{
	memset(h, 0, JR_HDR);
	memcpy(h, b->ver < 2 ? "ETIDXH01" : hdr_magic[batch_kind(b)], 8);
	put64(h + 8, b->commit);
	put64(h + 16, b->n);
	put64(h + 24, b->ver >= 2 ? b->prev : 0);
}

static void encode_trl(const struct jr_batch *b, unsigned char *t)
{
	memset(t, 0, JR_TRL);
	memcpy(t, b->ver < 2 ? "ETIDXT01" : trl_magic[batch_kind(b)], 8);
	put32(t + 8, b->hseg);
	put32(t + 12, b->hslot);
	put32(t + 16, b->flags);
	put32(t + 20, b->rec_bytes);
	put32(t + 24, b->seg_bytes);
	put32(t + 28, b->ver >= 2 ? b->hgen : 0);
}

/* Streams batch b to fd at off: header, entries a chunk at a time, then
 * trailer; synced. *end, *sum: where it ends and its checksum. */
static int batch_write(io_ctx *io, int fd, uint64_t off,
		       const struct jr_batch *b, jr_fill_fn fill, void *arg,
		       uint64_t *end, uint64_t *sum)
{
	unsigned char h[JR_HDR], *buf;
	size_t cap = JR_CHUNK_BYTES + JR_HDR + JR_TRL, ent = jr_ent_bytes(b);
	XXH3_state_t st;
	uint64_t at = off;
	int ret = 0;

	buf = mem_alloc(cap, 0);
	if (!buf)
		return -ENOMEM;
	encode_hdr(b, h);
	XXH3_64bits_reset(&st);
	XXH3_64bits_update(&st, h, JR_HDR);
	memcpy(buf, h, JR_HDR);
	{
		size_t used = JR_HDR;

		for (uint64_t i = 0; !ret && i <= b->n;) {
			size_t n = b->n - i < JR_ENT_CHUNK ? (size_t)(b->n - i)
							   : JR_ENT_CHUNK;

			if (n) {
				fill(arg, buf + used, i, n);
				XXH3_64bits_update(&st, buf + used, n * ent);
				used += n * ent;
				i += n;
			}
			if (i == b->n) { /* the trailer goes with the last */
				encode_trl(b, buf + used);
				XXH3_64bits_update(&st, buf + used, 32);
				*sum = XXH3_64bits_digest(&st);
				put64(buf + used + 32, *sum);
				used += JR_TRL;
				i++; /* done */
			}
			ret = ring_write(io, fd, buf, used, at);
			at += used;
			used = 0;
		}
	}
	mem_free(buf, cap, 0);
	if (!ret)
		ret = io_fsync(io, fd);
	*end = at;
	return ret;
}

int jr_append(io_ctx *io, int fd, const struct jr_batch *b, jr_fill_fn fill,
	      void *arg, struct jr_tail *t)
{
	struct jr_batch c = *b;
	uint64_t end, sum;
	int ret;

	c.prev = t->len ? t->sum : 0; /* the chain */
	ret = batch_write(io, fd, t->len, &c, fill, arg, &end, &sum);

	if (ret)
		return ret;
	t->len = end;
	t->sum = sum;
	t->ver = b->ver;
	t->rec_bytes = b->rec_bytes;
	return 0;
}

int jr_write_new(io_ctx *io, const char *pnew, const struct jr_batch *b,
		 jr_fill_fn fill, void *arg, struct jr_tail *t)
{
	uint64_t end = 0, sum = 0;
	int fd, ret;

	fd = open(pnew, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	{
		struct jr_batch c = *b;

		c.prev = 0; /* a snapshot begins a chain */
		ret = batch_write(io, fd, 0, &c, fill, arg, &end, &sum);
	}
	close(fd);
	if (ret) {
		unlink(pnew);
		return ret;
	}
	t->len = end;
	t->sum = sum;
	t->ver = b->ver;
	t->rec_bytes = b->rec_bytes;
	return 0;
}

int jr_settle(const char *pidx, const char *pnew, const struct jr_tail *t)
{
	struct stat st;
	int fd, ret = 0;

	if (t->in_new)
		ret = jr_install(pnew, pidx);
	else if (unlink(pnew) && errno != ENOENT)
		ret = -errno;
	if (ret)
		return ret;
	fd = open(pidx, O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT && !t->len ? 0 : -errno;
	if (fstat(fd, &st))
		ret = -errno;
	else if ((uint64_t)st.st_size != t->len &&
		 (ftruncate(fd, (off_t)t->len) || fdatasync(fd)))
		ret = -errno;
	close(fd);
	return ret;
}

int jr_install(const char *pnew, const char *pidx)
{
	int ret = fio_rename(pnew, pidx);

	return ret ? ret : fio_sync_dir(pidx, 0);
}
