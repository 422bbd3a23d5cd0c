/*
 * test_journal.c - the journal of a row log's index (src/disk/journal.h) and
 * the index itself (src/disk/rl_index.h), as units:
 *
 *   - batches written with jr_append replay in order, each entry once,
 *     and chain: the tail's checksum is the last batch's;
 *   - JR_NAMED replays exactly the named bytes; a record naming more, a
 *     different last batch, or a batch damaged, cut or rewritten inside
 *     them is ET_EJOURNAL, and the file is left as it was;
 *   - past the named bytes only the next commit may lie (cut by a
 *     writable open); a batch of the record's commit or before there is
 *     ET_EJOURNAL, one two commits past it ET_ERECORD (a stale record);
 *   - JR_UNNAMED and JR_NORECORD: a complete batch is refused
 *     (ET_EJOURNAL, ET_EMISSING) unless it is the next commit's;
 *   - a snapshot in PATH.idx.new is installed when the record names it
 *     and removed when it does not; a read-only open uses it in place
 *     and jr_settle finishes the job;
 *   - stamped batches (20-byte entries) among plain ones: their stamps
 *     replay, and a stamp's byte flipped is ET_EJOURNAL;
 *   - the index: inserts, finds, a reserve before a batch of rows that
 *     arrive in hash order (a snapshot's), clear.
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "embtier.h"
#include "le.h"
#include "io.h"
#include "journal.h"
#include "rl_index.h"
#include "util.h"

#define RB 32 /* record bytes of the batches written here */

struct sink {
	uint64_t batches, entries, sum_rows;
	uint64_t last_commit;
	uint64_t stamped, sum_stamps; /* stamped batches, their stamps */
	uint64_t scored, sum_scores;  /* scored batches, their score bits */
};

static int sk_begin(void *arg, const struct jr_batch *b)
{
	struct sink *k = arg;

	k->batches++;
	k->stamped += b->stamped;
	k->scored += b->scored;
	k->last_commit = b->commit;
	return 0;
}

static int sk_entries(void *arg, const struct jr_batch *b,
		      const unsigned char *e, size_t n)
{
	struct sink *k = arg;

	for (size_t i = 0; i < n; i++, e += jr_ent_bytes(b)) {
		k->entries++;
		k->sum_rows += get64(e);
		if (b->stamped)
			k->sum_stamps += get32(e + 16);
		if (b->scored)
			k->sum_scores += get32(e + 20);
	}
	return 0;
}

/* Entries of batch `commit`: rows commit * 1000 + i; stamped (kind 1 or
 * 2), entry i's stamp is commit * 100 + i; scored (kind 2), its score's
 * bits commit * 10 + i. */
static void fill_kind(uint64_t commit, unsigned char *p, uint64_t first,
		      size_t n, int kind)
{
	const size_t ent[3] = {JR_ENT, JR_ENT_ST, JR_ENT_SC};

	for (size_t i = 0; i < n; i++, p += ent[kind]) {
		put64(p, commit * 1000 + first + i);
		put32(p + 8, (uint32_t)(first + i));
		put32(p + 12, 1);
		if (kind >= 1)
			put32(p + 16, (uint32_t)(commit * 100 + first + i));
		if (kind == 2)
			put32(p + 20, (uint32_t)(commit * 10 + first + i));
	}
}

static void fill_sc(void *arg, unsigned char *p, uint64_t first, size_t n)
{
	fill_kind(*(const uint64_t *)arg, p, first, n, 2);
}

static void fill(void *arg, unsigned char *p, uint64_t first, size_t n)
{
	fill_kind(*(const uint64_t *)arg, p, first, n, 0);
}

static void fill_st(void *arg, unsigned char *p, uint64_t first, size_t n)
{
	fill_kind(*(const uint64_t *)arg, p, first, n, 1);
}

static struct jr_batch batch(uint64_t commit, uint64_t n, uint32_t flags)
{
	return (struct jr_batch){.ver = 2,
				 .commit = commit,
				 .n = n,
				 .flags = flags,
				 .hseg = JR_NONE,
				 .rec_bytes = RB,
				 .seg_bytes = 4096};
}

struct paths {
	const char *idx, *nw;
};

static struct paths fresh(const char *tag)
{
	struct paths p = {tu_path(tag), NULL};
	static char nw[8][4200];
	static int k;

	snprintf(nw[k % 8], sizeof(nw[0]), "%s.new", p.idx);
	p.nw = nw[k++ % 8];
	tu_unlink(p.nw);
	return p;
}

/* Appends batches of commits 1..n (entries 5, 6, ...); *tails[c] is the
 * tail after commit c. */
static void write_batches(const struct paths *p, uint64_t n,
			  struct jr_tail *tails)
{
	struct jr_tail t = {0};
	io_ctx *io;
	int why, fd;

	if (io_open(8, &io, &why))
		skip();
	fd = open(p->idx, O_RDWR | O_CREAT | O_TRUNC, 0644);
	assert_true(fd >= 0);
	tails[0] = t;
	for (uint64_t c = 1; c <= n; c++) {
		struct jr_batch b = batch(c, 4 + c, 0);

		assert_int_equal(jr_append(io, fd, &b, fill, &c, &t), 0);
		tails[c] = t;
	}
	close(fd);
	io_close(io);
}

static int open_as(const struct paths *p, enum jr_mode mode, uint64_t commit,
		   const struct jr_tail *named, bool rdonly, struct sink *k,
		   struct jr_tail *got)
{
	struct jr_expect x = {.mode = mode, .commit = commit};
	struct jr_sink sink = {
	    .begin = sk_begin, .entries = sk_entries, .arg = k};
	int fd = -1, ret;

	if (named) {
		x.jlen = named->len;
		x.jsum = named->sum;
	}
	memset(k, 0, sizeof(*k));
	ret = jr_open(p->idx, p->nw, RB, &x, rdonly, &sink, &fd, got);
	if (fd >= 0)
		close(fd);
	return ret;
}

/* ------------------------------------------------------------ the tests */

static void test_named_replays_exactly(void **state)
{
	struct paths p = fresh("jr-named");
	struct jr_tail tails[6], got;
	struct sink k;

	(void)state;
	write_batches(&p, 5, tails);
	/* a record at commit 3 with commits 4 and 5 past its bytes: 5 is
	 * two past it, so the record is stale */
	assert_int_equal(open_as(&p, JR_NAMED, 3, &tails[3], true, &k, &got),
			 ET_ERECORD);
	/* at commit 4: four batches, the fifth (the next commit) cut */
	assert_int_equal(open_as(&p, JR_NAMED, 4, &tails[4], false, &k, &got),
			 0);
	assert_int_equal(k.batches, 4);
	assert_int_equal(k.entries, 5 + 6 + 7 + 8);
	assert_int_equal(got.len, tails[4].len);
	assert_int_equal(got.sum, tails[4].sum);
	assert_int_equal(tu_file_size(p.idx), (int64_t)tails[4].len);
	/* now exactly commit 4's bytes: a reopen at 4 replays the same */
	assert_int_equal(open_as(&p, JR_NAMED, 4, &tails[4], true, &k, &got),
			 0);
	assert_int_equal(k.batches, 4);
}

static void test_named_refuses_damage(void **state)
{
	struct paths p = fresh("jr-damage");
	struct jr_tail tails[4], got, wrong;
	struct sink k;
	int64_t size;

	(void)state;
	write_batches(&p, 3, tails);
	size = tu_file_size(p.idx);
	/* a record naming more than there is */
	wrong = tails[3];
	wrong.len += 1;
	assert_int_equal(open_as(&p, JR_NAMED, 3, &wrong, false, &k, &got),
			 ET_EJOURNAL);
	assert_non_null(strstr(et_errdetail(), p.idx));
	/* naming another last batch */
	wrong = tails[3];
	wrong.sum ^= 1;
	assert_int_equal(open_as(&p, JR_NAMED, 3, &wrong, false, &k, &got),
			 ET_EJOURNAL);
	/* a byte of the first batch flipped: refused, nothing cut */
	assert_int_equal(tu_flip_byte(p.idx, 40, 0x04), 0);
	assert_int_equal(open_as(&p, JR_NAMED, 3, &tails[3], false, &k, &got),
			 ET_EJOURNAL);
	assert_non_null(strstr(et_errdetail(), "byte 0"));
	assert_int_equal(tu_file_size(p.idx), size);
	assert_int_equal(tu_flip_byte(p.idx, 40, 0x04), 0);
	assert_int_equal(open_as(&p, JR_NAMED, 3, &tails[3], true, &k, &got),
			 0);
	/* the first batch rewritten whole with a right checksum of its own
	 * (another commit number): the chain breaks at the second */
	{
		struct jr_tail t = {0};
		uint64_t c = 1;
		struct jr_batch b = batch(1, 5, 0);
		io_ctx *io;
		int why, fd = open(p.idx, O_RDWR);

		assert_true(fd >= 0);
		if (io_open(8, &io, &why))
			skip();
		b.commit = 0; /* same size, another batch */
		assert_int_equal(jr_append(io, fd, &b, fill, &c, &t), 0);
		close(fd);
		io_close(io);
		assert_int_equal(
		    open_as(&p, JR_NAMED, 3, &tails[3], true, &k, &got),
		    ET_EJOURNAL);
		assert_non_null(strstr(et_errdetail(), "follow"));
	}
	/* cut inside the committed bytes */
	assert_int_equal(tu_truncate(p.idx, (off_t)tails[2].len + 7), 0);
	assert_int_equal(open_as(&p, JR_NAMED, 3, &tails[3], false, &k, &got),
			 ET_EJOURNAL);
	/* missing altogether */
	tu_unlink(p.idx);
	assert_int_equal(open_as(&p, JR_NAMED, 3, &tails[3], false, &k, &got),
			 ET_EMISSING);
	/* and a record naming nothing of a missing journal is fine */
	assert_int_equal(open_as(&p, JR_NAMED, 3, &tails[0], false, &k, &got),
			 0);
}

/* Commits 1 plain, 2 stamped, 3 and 4 scored, 5 plain: all five replay,
 * stamps and scores with them; a score's byte flipped fails its batch. */
static void test_scored_batches(void **state)
{
	struct paths p = fresh("jr-scored");
	static const int kind[6] = {0, 0, 1, 2, 2, 0};
	jr_fill_fn fills[3] = {fill, fill_st, fill_sc};
	struct jr_tail tails[6], got, t = {0};
	uint64_t want_st = 0, want_sc = 0;
	struct sink k;
	io_ctx *io;
	int why, fd;

	(void)state;
	if (io_open(8, &io, &why))
		skip();
	fd = open(p.idx, O_RDWR | O_CREAT | O_TRUNC, 0644);
	assert_true(fd >= 0);
	for (uint64_t c = 1; c <= 5; c++) {
		struct jr_batch b = batch(c, 4 + c, 0);

		b.stamped = kind[c] >= 1;
		b.scored = kind[c] == 2;
		assert_int_equal(jr_append(io, fd, &b, fills[kind[c]], &c, &t),
				 0);
		tails[c] = t;
		for (uint64_t i = 0; i < 4 + c; i++) {
			want_st += kind[c] >= 1 ? c * 100 + i : 0;
			want_sc += kind[c] == 2 ? c * 10 + i : 0;
		}
	}
	close(fd);
	io_close(io);
	assert_int_equal(tails[4].len - tails[3].len,
			 JR_HDR + 8 * JR_ENT_SC + JR_TRL);
	assert_int_equal(open_as(&p, JR_NAMED, 5, &tails[5], true, &k, &got),
			 0);
	assert_int_equal(k.batches, 5);
	assert_int_equal(k.stamped, 3);
	assert_int_equal(k.scored, 2);
	assert_int_equal(k.entries, 5 + 6 + 7 + 8 + 9);
	assert_int_equal(k.sum_stamps, want_st);
	assert_int_equal(k.sum_scores, want_sc);
	assert_int_equal(got.len, tails[5].len);
	/* the score of commit 4's second entry */
	assert_int_equal(
	    tu_flip_byte(p.idx, (off_t)tails[3].len + JR_HDR + JR_ENT_SC + 20,
			 0x01),
	    0);
	assert_int_equal(open_as(&p, JR_NAMED, 5, &tails[5], true, &k, &got),
			 ET_EJOURNAL);
	assert_non_null(strstr(et_errdetail(), "checksum"));
}

static void test_unnamed_and_norecord(void **state)
{
	struct paths p = fresh("jr-unnamed");
	struct jr_tail tails[3], got;
	struct sink k;

	(void)state;
	write_batches(&p, 1, tails);
	/* one batch of commit 1: the next commit after a record at 0 (a
	 * table created since): cut */
	assert_int_equal(open_as(&p, JR_UNNAMED, 0, NULL, false, &k, &got), 0);
	assert_int_equal(k.batches, 0);
	assert_int_equal(tu_file_size(p.idx), 0);
	/* a batch of commit 1 that a record at 1 does not name */
	write_batches(&p, 1, tails);
	assert_int_equal(open_as(&p, JR_UNNAMED, 1, NULL, false, &k, &got),
			 ET_EJOURNAL);
	/* commits 1 and 2 beside a record at 0: the record is stale */
	write_batches(&p, 2, tails);
	assert_int_equal(open_as(&p, JR_UNNAMED, 0, NULL, false, &k, &got),
			 ET_ERECORD);
	/* no record, and a complete batch: the record is lost */
	assert_int_equal(open_as(&p, JR_NORECORD, 0, NULL, false, &k, &got),
			 ET_EMISSING);
	assert_non_null(strstr(et_errdetail(), "CHECKPOINT"));
	/* a torn batch alone is not a commit: cut */
	assert_int_equal(tu_truncate(p.idx, 50), 0);
	assert_int_equal(open_as(&p, JR_NORECORD, 0, NULL, false, &k, &got), 0);
	assert_int_equal(tu_file_size(p.idx), 0);
}

static void test_snapshot_settles(void **state)
{
	struct paths p = fresh("jr-snap");
	struct jr_tail tails[3], snap, got;
	struct jr_batch b = batch(3, 12, JR_SNAPSHOT);
	struct sink k;
	uint64_t c = 3;
	io_ctx *io;
	int why;

	(void)state;
	write_batches(&p, 2, tails);
	if (io_open(8, &io, &why))
		skip();
	assert_int_equal(jr_write_new(io, p.nw, &b, fill, &c, &snap), 0);
	io_close(io);
	/* a record at 2 does not name it: removed, the journal stands */
	assert_int_equal(open_as(&p, JR_NAMED, 2, &tails[2], false, &k, &got),
			 0);
	assert_int_equal(tu_file_size(p.nw), -ENOENT);
	assert_int_equal(k.batches, 2);
	/* written again, and a record at 3 naming it: a read-only open
	 * replays it in place, jr_settle renames it, then it is the journal */
	if (io_open(8, &io, &why))
		skip();
	assert_int_equal(jr_write_new(io, p.nw, &b, fill, &c, &snap), 0);
	io_close(io);
	assert_int_equal(open_as(&p, JR_NAMED, 3, &snap, true, &k, &got), 0);
	assert_true(got.in_new);
	assert_int_equal(k.batches, 1);
	assert_int_equal(k.entries, 12);
	assert_int_equal(jr_settle(p.idx, p.nw, &got), 0);
	assert_int_equal(tu_file_size(p.nw), -ENOENT);
	assert_int_equal(tu_file_size(p.idx), (int64_t)snap.len);
	assert_int_equal(open_as(&p, JR_NAMED, 3, &snap, false, &k, &got), 0);
	assert_false(got.in_new);
	assert_int_equal(k.last_commit, 3);
}

/* ------------------------------------------------------------- the index */

static void test_index(void **state)
{
	enum { N = 200000 };
	struct rl_index x = {0}, y = {0};
	uint64_t slot, *rows = tu_calloc(N, sizeof(*rows));
	bool isnew;

	(void)state;
	for (uint64_t i = 0; i < N; i++) {
		rows[i] = i * 0x9e3779b97f4a7c15ULL;
		assert_int_equal(rli_slot(&x, rows[i], &slot, &isnew), 0);
		assert_true(isnew);
		x.vals[slot] = (uint32_t)i;
	}
	assert_int_equal(x.count, N);
	for (uint64_t i = 0; i < N; i++) {
		int64_t s = rli_find(&x, rows[i]);

		assert_true(s >= 0);
		assert_int_equal(x.vals[s], (uint32_t)i);
	}
	assert_true(rli_find(&x, 12345) < 0);
	/* the rows again, in x's slot order (hash order, as a snapshot
	 * arrives), into an index reserved for them first: all found */
	assert_int_equal(rli_reserve(&y, N), 0);
	{
		uint64_t cap = y.cap;

		for (uint64_t i = 0; i < x.cap; i++) {
			if (!x.keys[i])
				continue;
			assert_int_equal(
			    rli_slot(&y, x.keys[i] - 1, &slot, &isnew), 0);
			y.vals[slot] = x.vals[i];
		}
		assert_int_equal(y.cap, cap); /* no growth on the way */
	}
	for (uint64_t i = 0; i < N; i++)
		assert_int_equal(y.vals[rli_find(&y, rows[i])], (uint32_t)i);
	rli_clear(&y);
	assert_int_equal(y.count, 0);
	assert_true(rli_find(&y, rows[0]) < 0);
	rli_free(&x);
	rli_free(&y);
	free(rows);
}

/* Every entry's probe path from its home is full, and each cluster is in
 * the order of its hashes (ties of home included): what lookups' early
 * stop and a resize's one-pass layout rely on. Every entry passes the
 * filter, which rules out most rows that are absent (rows of the form
 * 2^63 + k, which no test puts in, at most 10% let through). */
static void index_check(const struct rl_index *x)
{
	uint64_t n = 0, through = 0;

	for (uint64_t k = 0; x->cap && k < 4096; k++)
		through += rli_maybe(x, (1ULL << 63) + k * 7919);
	assert_true(through < 410);
	for (uint64_t i = 0; i < x->cap; i++) {
		uint64_t j = i + 1 == x->cap ? 0 : i + 1, h, hj, di, dj;

		if (!x->keys[i])
			continue;
		n++;
		assert_true(rli_maybe(x, x->keys[i] - 1));
		h = rli_home(x->cap, x->keys[i] - 1);
		di = i >= h ? i - h : i + x->cap - h;
		if (di) /* the slot before is full */
			assert_true(x->keys[i ? i - 1 : x->cap - 1] != 0);
		if (!x->keys[j])
			continue;
		hj = rli_home(x->cap, x->keys[j] - 1);
		dj = j >= hj ? j - hj : j + x->cap - hj;
		assert_true(dj <= di + 1);
		if (dj == di + 1)
			assert_true(hash_mix(x->keys[j] - 1) >
				    hash_mix(x->keys[i] - 1));
	}
	assert_int_equal(n + (x->has_max ? 1 : 0), x->count);
}

/* Random inserts, finds and deletes against a plain array, the index
 * growing on the way: ids from a small pool (0 and UINT64_MAX in it), and
 * a third of them hashing into the last slots, so clusters wrap. */
static void test_index_model(void **state)
{
	enum { POOL = 6000, OPS = 300000 };
	struct rl_index x = {0};
	uint64_t *ids = tu_calloc(POOL, sizeof(*ids));
	uint32_t *val = tu_calloc(POOL, sizeof(*val));
	bool *in = tu_calloc(POOL, sizeof(*in));
	uint64_t r = 7, live = 0;

	(void)state;
	ids[0] = 0;
	ids[1] = UINT64_MAX;
	for (uint64_t k = 2; k < POOL; k++) {
		uint64_t id;

		do {
			r = r * 6364136223846793005ULL + 1442695040888963407ULL;
			id = r ^ (r >> 29);
		} while (k % 3 == 0 && hash_mix(id) < (UINT64_MAX / 64) * 63);
		ids[k] = id;
	}
	for (uint64_t op = 0; op < OPS; op++) {
		uint64_t k, slot;
		int64_t f;
		bool isnew;

		r = r * 6364136223846793005ULL + 1442695040888963407ULL;
		k = (r >> 33) % POOL;
		f = rli_find(&x, ids[k]);
		assert_true((f >= 0) == in[k]);
		if (f >= 0)
			assert_int_equal(x.vals[f], val[k]);
		/* more inserts than deletes while it fills */
		if ((r >> 20) % 8 < (live < POOL / 2 ? 6u : 4u)) {
			assert_int_equal(rli_slot(&x, ids[k], &slot, &isnew),
					 0);
			assert_true(isnew == !in[k]);
			if (isnew)
				live++;
			in[k] = true;
			val[k] = (uint32_t)op;
			x.vals[slot] = (uint32_t)op;
		} else if (f >= 0) {
			rli_del(&x, (uint64_t)f);
			in[k] = false;
			live--;
		}
		if (op % 4096 == 0)
			index_check(&x);
	}
	index_check(&x);
	assert_int_equal(x.count, live);
	for (uint64_t k = 0; k < POOL; k++) {
		int64_t f = rli_find(&x, ids[k]);

		assert_true((f >= 0) == in[k]);
		if (f >= 0)
			assert_int_equal(x.vals[f], val[k]);
	}
	rli_free(&x);
	free(ids);
	free(val);
	free(in);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_named_replays_exactly),
	    cmocka_unit_test(test_named_refuses_damage),
	    cmocka_unit_test(test_scored_batches),
	    cmocka_unit_test(test_unnamed_and_norecord),
	    cmocka_unit_test(test_snapshot_settles),
	    cmocka_unit_test(test_index),
	    cmocka_unit_test(test_index_model),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
