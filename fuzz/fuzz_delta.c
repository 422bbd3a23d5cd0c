/*
 * fuzz_delta.c - libFuzzer target: a delta file (et_delta_apply) of
 * arbitrary bytes, applied to a serving copy in a known state. The oracle
 * is "refused, or applied exactly", not only memory safety.
 *
 * Once per process a source store is written: a row-indexed table "emb"
 * (40 rows, dim 4, f16, row-wise Adagrad) and a keyed table "kv" (dim 3,
 * f32, SGD, ids over all of u64), rows written and updated, a checkpoint
 * (commit 1); more writes and updates, keyed ids erased (one written
 * again), a checkpoint (commit 2). Five good deltas are exported: 0 -> 1
 * with and without the optimizer state (ET_DELTA_STATE), 1 -> 2 with and
 * without, 0 -> 2 with (every table whole). Four serving copies are made,
 * each in a directory of its own, and their files kept in memory:
 *   0. an empty directory;
 *   1. 0 -> 1 applied to it;
 *   2. then 1 -> 2;
 *   3. copy 1 with writes of its own: row 1 of emb, and a keyed table
 *      "extra" the deltas never name (its rows must survive every apply).
 * Building copies 1 and 2 runs the oracle below on the good deltas.
 *
 * An input is a mode byte, then the bytes of a delta file. The mode:
 *   bits 0-1  the copy it is applied to (put back as the setup left it);
 *   bit 2     every record's checksum (seeded with its number) and the
 *             header's set right, so that the checks past them are reached;
 *   bit 3     that, and the counts too: the rows and tombstones of each
 *             TABLE_END and of END, END's count of records, the header's
 *             count of tables;
 *   bit 4     after a refusal, the copy's next good delta (0 -> 1 to copy
 *             0, 1 -> 2 to copies 1 and 3, 0 -> 2 to copy 2) must apply,
 *             exactly: the refusal left nothing behind that matters;
 *   bit 5     after a success, the same file applied again: refused with
 *             nothing changed, or taken with nothing changed.
 *
 * The target decodes the file itself as docs/FORMAT.md ("Delta files")
 * lays it out: the header and its checksum, every record's checksum
 * seeded with its number, DENSE first when there is a dense state, a
 * table's TABLE, ROWS, TOMBS, TABLE_END in that order, ROWS and TOMBS of
 * at most 65536 ids (tombstones ascending; rows in any order, the last of
 * an id applied; row ids below a row-indexed
 * table's rows), tombstones only in a keyed table not taken whole, the
 * row size what the table's shape and the file's flags make it, each
 * TABLE_END and END counting what came before, as many tables as the
 * header says, nothing after END. A file that breaks one of these rules
 * must be refused with ET_EDELTA.
 *
 * A refusal (any code the header allows) must leave the copy exactly as
 * it was: the same table files, each with the same parameters, the same
 * listed rows (et_tfile_rows) with the same values and optimizer state,
 * bit for bit; the same DIR/DELTA bytes (or none); the same commit record
 * (et_checkpoint_read_dir: id, commit, dense state).
 *
 * A success must be what the file says: it must be a whole delta as
 * above; a delta with a table not taken whole must start where the copy
 * stands (DIR/DELTA's commit is the delta's `from`, each such table's
 * chain checksum its from_sum); et_delta_info says what the file holds
 * (stale: the rows the copy listed of a whole table that the delta does
 * not carry). Every table the delta names is there with its parameters;
 * in each, the delta's rows read as carried (f16 and bf16 NaNs made quiet,
 * as every conversion of the library does), with the carried state when
 * the file has ET_DELTA_STATE and both the file's table and the copy's
 * keep one, else with the copy's state before (zero for a row it lacked);
 * tombstoned ids are not listed and read as the initializer's (a scratch
 * table file of the same parameters says what that is); a whole table
 * drops the rows the delta lacks (keyed: erased; row-indexed: back to
 * their initial value); every other row is as before. A row-indexed
 * table lists what it listed before and the delta's rows; a keyed table
 * exactly the ids expected. Tables the delta does not name are as before.
 * The commit record holds the delta's dense state, and DIR/DELTA is the
 * copy's before with the delta's `to` and each table's to_sum (a new
 * table's entry appended), byte for byte.
 *
 * Seeds: fuzz/corpus/delta/ (the good deltas on the copies they apply to,
 * and refused, raw and with the fixing bits; ET_FUZZ_SEEDS=DIR makes the
 * setup write them there), and d01s-copy0-badname-fixed: 0 -> 1 with the
 * second table's name one the library refuses, after it made the first. ET_FUZZ_DIR chooses the scratch directory
 * (default /var/tmp); it is removed at exit and at an oracle abort
 * (ET_FUZZ_KEEP=1 keeps it then). ET_FUZZ_STATS=1 prints at exit how many
 * inputs were whole deltas or not, taken or refused, by code.
 */
#include <errno.h>
#include <math.h>

#include <xxhash.h>

#include "embtier.h"
#include "fuzz_store.h"

#define NSRC  2	    /* tables of the source */
#define NS    4	    /* copies */
#define NGOOD 5	    /* good deltas */
#define CHUNK 65536 /* ids a ROWS or TOMBS record holds, at most */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* fuzz_store.h's readers, which this target does not use */
static const read_fn unused_readers[]
    __attribute__((unused)) = {store_read, tfile_read};

static const char *const tnames[NSRC] = {"emb", "kv"};
static const struct et_table_params tparams[NSRC] = {
    {.rows = 40,
     .dim = 4,
     .dtype = ET_F16,
     .optim = ET_OPT_ROWWISE_ADAGRAD,
     .init = ET_INIT_UNIFORM,
     .seed = 5},
    {.dim = 3,
     .dtype = ET_F32,
     .init = ET_INIT_NORMAL,
     .seed = 7,
     .flags = ET_TABLE_KEYED},
};

static const struct et_store_config cfg = {
    .ddr_bytes = 256 << 10, .ways = 4, .io_depth = 16};

/* The keyed table's ids: over all of u64, negative int64 ones too. */
static const uint64_t kv_ids[] = {0,
				  1,
				  2,
				  5,
				  77,
				  1000,
				  1ull << 40,
				  0x8000000000000000ull,
				  UINT64_MAX - 1,
				  UINT64_MAX,
				  (uint64_t)-5,
				  123456789012345ull};

/* ------------------------------------------------------------ helpers */

static void wr32(uint8_t *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static size_t dt_size(uint32_t dt)
{
	return dt == ET_F32 ? 4 : dt == ET_F16 || dt == ET_BF16 ? 2 : 0;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* The index of id in the n ascending ids, or -1. */
static long find_id(const uint64_t *ids, size_t n, uint64_t id)
{
	size_t lo = 0, hi = n;

	while (lo < hi) {
		size_t m = lo + (hi - lo) / 2;

		if (ids[m] == id)
			return (long)m;
		if (ids[m] < id)
			lo = m + 1;
		else
			hi = m;
	}
	return -1;
}

static void *xmalloc(size_t n)
{
	void *p = malloc(n ? n : 1);

	if (!p)
		abort();
	return p;
}

static void *xrealloc(void *p, size_t n)
{
	p = realloc(p, n ? n : 1);
	if (!p)
		abort();
	return p;
}

static int read_whole(const char *p, uint8_t **b, size_t *n)
{
	struct stat st;
	int fd = open(p, O_RDONLY);
	int ret = -1;

	*b = NULL;
	*n = 0;
	if (fd < 0)
		return -errno;
	if (!fstat(fd, &st)) {
		*n = (size_t)st.st_size;
		*b = xmalloc(*n);
		ret = pread_all(fd, *b, *n, 0);
	}
	close(fd);
	return ret;
}

/* ------------------------------------------------------ the delta file */

/* One table of a delta as the file says it. */
struct ptable {
	char name[65];
	uint64_t rows, seed, from_sum, to_sum;
	uint32_t dim, dtype, optim, sf, init, scale, flags, whole, rec;
	size_t nrows, ntombs;
	const uint8_t **row; /* each row: u64 id, values, state */
	uint64_t *rid, *tomb;
};

struct pdelta {
	const char *bad; /* NULL: a whole delta file */
	size_t size;
	uint32_t flags, tables;
	uint64_t from, to, id, dense_len, rows, tombs;
	const uint8_t *dense;
	struct ptable *t;
	uint32_t nt;
};

static uint64_t rec_sum(uint64_t seq, const uint8_t *hdr, uint64_t bytes)
{
	/* the record's 16 bytes and its payload lie together */
	return XXH3_64bits_withSeed(hdr, 16 + (size_t)bytes, seq);
}

static void pdelta_free(struct pdelta *d)
{
	for (uint32_t i = 0; i < d->nt; i++) {
		free(d->t[i].row);
		free(d->t[i].rid);
		free(d->t[i].tomb);
	}
	free(d->t);
	memset(d, 0, sizeof(*d));
}

/* The ids of a ROWS or TOMBS record, checked and added to table t. */
static const char *add_ids(struct ptable *t, const uint8_t *p, uint32_t n,
			   size_t stride, bool tomb)
{
	size_t *cnt = tomb ? &t->ntombs : &t->nrows;
	uint64_t **ids = tomb ? &t->tomb : &t->rid;

	*ids = xrealloc(*ids, (*cnt + n) * sizeof(uint64_t));
	if (!tomb)
		t->row = xrealloc(t->row, (*cnt + n) * sizeof(*t->row));
	for (uint32_t i = 0; i < n; i++, p += stride) {
		uint64_t id = le64(p);

		/* tombstones ascend; rows come in any order */
		if (*cnt && id <= (*ids)[*cnt - 1] && tomb)
			return "ids out of order";
		if (!(t->flags & ET_TABLE_KEYED) && id >= t->rows)
			return "a row id past the table's rows";
		if (!tomb)
			t->row[*cnt] = p;
		(*ids)[(*cnt)++] = id;
	}
	return NULL;
}

static int cmp_pair(const void *a, const void *b)
{
	const uint64_t *x = a, *y = b;

	if (x[0] != y[0])
		return x[0] < y[0] ? -1 : 1;
	return x[1] < y[1] ? -1 : x[1] > y[1];
}

/* A table's rows by id, ascending, for find_id: they come in the source's
 * log order, and should an id repeat, its last row is the one applied. */
static void by_id(struct ptable *t)
{
	uint64_t *p = xmalloc((2 * t->nrows + 1) * sizeof(uint64_t));
	const uint8_t **row = xmalloc((t->nrows + 1) * sizeof(*row));
	size_t m = 0;

	for (size_t i = 0; i < t->nrows; i++) {
		p[2 * i] = t->rid[i];
		p[2 * i + 1] = i;
	}
	qsort(p, t->nrows, 2 * sizeof(uint64_t), cmp_pair);
	for (size_t i = 0; i < t->nrows; i++) {
		if (i + 1 < t->nrows && p[2 * i + 2] == p[2 * i])
			continue;
		row[m] = t->row[p[2 * i + 1]];
		t->rid[m++] = p[2 * i];
	}
	memcpy(t->row, row, m * sizeof(*row));
	t->nrows = m;
	free(row);
	free(p);
}

/* Decodes the n bytes at b as docs/FORMAT.md lays a delta file out; d->bad
 * says which rule it breaks (NULL: none). d points into b. */
static void parse(const uint8_t *b, size_t n, struct pdelta *d)
{
	struct ptable *cur = NULL;
	bool in_tombs = false;
	uint64_t off = 64, seq = 0;

	memset(d, 0, sizeof(*d));
	d->size = n;
	if (n < 64 || memcmp(b, "ETDELTA1", 8)) {
		d->bad = "not a delta file (size, magic)";
		return;
	}
	if (le64(b + 56) != XXH3_64bits(b, 56)) {
		d->bad = "header checksum";
		return;
	}
	if (le32(b + 8) != 1 || (le32(b + 12) & ~1u)) {
		d->bad = "version or flags unknown";
		return;
	}
	d->flags = le32(b + 12);
	d->from = le64(b + 16);
	d->to = le64(b + 24);
	d->id = le64(b + 32);
	d->tables = le32(b + 40);
	d->dense_len = le64(b + 48);
	for (;;) {
		const uint8_t *h = b + off, *p = h + 16;
		uint32_t kind, cnt;
		uint64_t bytes;

		if (n - off < 24) {
			d->bad = "the file ends before END";
			return;
		}
		kind = le32(h);
		cnt = le32(h + 4);
		bytes = le64(h + 8);
		if (bytes > n - off - 24) {
			d->bad = "a record runs past the end";
			return;
		}
		seq++;
		if (le64(p + bytes) != rec_sum(seq, h, bytes)) {
			d->bad = "a record checksum";
			return;
		}
		off += 24 + bytes;
		if (d->dense_len && seq == 1 && kind != 1) {
			d->bad = "the dense state is not the first record";
			return;
		}
		switch (kind) {
		case 1: /* DENSE */
			if (seq != 1 || bytes != d->dense_len) {
				d->bad = "a misplaced dense state";
				return;
			}
			d->dense = p;
			break;
		case 2: { /* TABLE */
			size_t ds;

			if (cur || bytes != 136 || d->nt == d->tables) {
				d->bad = "a misplaced table header, or more "
					 "tables than the header says";
				return;
			}
			d->t = xrealloc(d->t, (d->nt + 1) * sizeof(*d->t));
			cur = &d->t[d->nt++];
			memset(cur, 0, sizeof(*cur));
			memcpy(cur->name, p, 64);
			cur->rows = le64(p + 64);
			cur->dim = le32(p + 72);
			cur->dtype = le32(p + 76);
			cur->optim = le32(p + 80);
			cur->sf = le32(p + 84);
			cur->init = le32(p + 88);
			cur->scale = le32(p + 92);
			cur->seed = le64(p + 96);
			cur->flags = le32(p + 104);
			cur->whole = le32(p + 108);
			cur->rec = le32(p + 112);
			cur->from_sum = le64(p + 120);
			cur->to_sum = le64(p + 128);
			ds = dt_size(cur->dtype);
			if (!ds ||
			    cur->rec !=
				(uint64_t)cur->dim * ds +
				    (d->flags & 1 ? 4ull * cur->sf : 0)) {
				d->bad = "a row size that disagrees with the "
					 "table's shape";
				return;
			}
			in_tombs = false;
			break;
		}
		case 3: /* ROWS */
			if (!cur || in_tombs || cnt > CHUNK ||
			    bytes != (uint64_t)cnt * (8 + cur->rec)) {
				d->bad = "a misplaced or misshapen ROWS record";
				return;
			}
			d->bad = add_ids(cur, p, cnt, 8 + cur->rec, false);
			if (d->bad)
				return;
			break;
		case 4: /* TOMBS */
			if (!cur || !(cur->flags & ET_TABLE_KEYED) ||
			    cur->whole || cnt > CHUNK || bytes != 8ull * cnt) {
				d->bad = "a misplaced or misshapen TOMBS "
					 "record";
				return;
			}
			in_tombs = true;
			d->bad = add_ids(cur, p, cnt, 8, true);
			if (d->bad)
				return;
			break;
		case 5: /* TABLE_END */
			if (!cur || bytes != 16 || le64(p) != cur->nrows ||
			    le64(p + 8) != cur->ntombs) {
				d->bad = "a TABLE_END out of place or "
					 "miscounting";
				return;
			}
			d->rows += cur->nrows;
			d->tombs += cur->ntombs;
			by_id(cur);
			cur = NULL;
			break;
		case 6: /* END */
			if (cur || bytes != 24 || le64(p) != d->rows ||
			    le64(p + 8) != d->tombs ||
			    le64(p + 16) != seq - 1 || d->nt != d->tables) {
				d->bad = "an END out of place or miscounting";
				return;
			}
			if (off != n)
				d->bad = "bytes after END";
			return;
		default:
			d->bad = "a record of unknown kind";
			return;
		}
	}
}

/* Sets every record's checksum and the header's right; with counts, the
 * counts of TABLE_END and END and the header's tables too. */
static void fix(uint8_t *b, size_t n, bool counts)
{
	uint64_t off = 64, seq = 0, rows = 0, tombs = 0, trows = 0, ttombs = 0;
	uint32_t tables = 0;

	if (n < 64)
		return;
	while (n - off >= 24) {
		uint8_t *h = b + off;
		uint32_t kind = le32(h), cnt = le32(h + 4);
		uint64_t bytes = le64(h + 8);

		if (bytes > n - off - 24)
			break;
		seq++;
		if (counts && kind == 2) {
			tables++;
			trows = ttombs = 0;
		} else if (counts && kind == 3) {
			trows += cnt;
			rows += cnt;
		} else if (counts && kind == 4) {
			ttombs += cnt;
			tombs += cnt;
		} else if (counts && kind == 5 && bytes == 16) {
			wr64(h + 16, trows);
			wr64(h + 24, ttombs);
		} else if (counts && kind == 6 && bytes == 24) {
			wr64(h + 16, rows);
			wr64(h + 24, tombs);
			wr64(h + 32, seq - 1);
		}
		wr64(h + 16 + bytes, rec_sum(seq, h, bytes));
		off += 24 + bytes;
	}
	if (counts)
		wr32(b + 40, tables);
	wr64(b + 56, XXH3_64bits(b, 56));
}

/* ------------------------------------------------------------ a copy */

/* A table of a copy as of its last commit: every listed row. */
struct tcontent {
	char name[256];
	int open_ret;
	struct et_table_info ti;
	size_t n;
	uint64_t *ids;
	float *vals, *state;
};

/* What a copy holds. */
struct content {
	struct tcontent *t;
	int nt;
	int delta_ret; /* of reading DIR/DELTA: 0, or -ENOENT */
	uint8_t *delta;
	size_t delta_len;
	int ck_ret;
	struct et_checkpoint_info ci;
	void *dense;
	size_t dense_len;
};

static void content_free(struct content *c)
{
	for (int i = 0; i < c->nt; i++) {
		free(c->t[i].ids);
		free(c->t[i].vals);
		free(c->t[i].state);
	}
	free(c->t);
	free(c->delta);
	free(c->dense);
	memset(c, 0, sizeof(*c));
}

static int cmp_tc(const void *a, const void *b)
{
	return strcmp(((const struct tcontent *)a)->name,
		      ((const struct tcontent *)b)->name);
}

/* Reads n rows at ids of the table file tf (a NULL state when it keeps
 * none). */
static int read_ids(et_tfile *tf, const struct et_table_info *ti,
		    const uint64_t *ids, size_t n, float *vals, float *state)
{
	int ret = 0;

	for (size_t i = 0; !ret && i < n; i += 4096) {
		size_t k = n - i < 4096 ? n - i : 4096;

		ret = et_tfile_read_rows(
		    tf, ids + i, k, vals + i * ti->dim,
		    ti->state_floats ? state + i * ti->state_floats : NULL);
	}
	return ret;
}

static void read_table(const char *dir, struct tcontent *t)
{
	char p[4400];
	et_tfile *tf;
	size_t cap = 0, got;
	uint64_t from = 0;

	snprintf(p, sizeof(p), "%s/%s.et", dir, t->name);
	t->open_ret = et_tfile_open(p, ET_TFILE_RDONLY, &tf);
	if (t->open_ret)
		return;
	if (et_tfile_info(tf, &t->ti))
		fail("et_tfile_info of table %s failed", t->name);
	for (;;) {
		if (t->n + 1024 > cap) {
			cap = 2 * cap + 1024;
			t->ids = xrealloc(t->ids, cap * sizeof(uint64_t));
		}
		if (et_tfile_rows(tf, from, t->ids + t->n, 1024, &got))
			fail("et_tfile_rows of table %s failed", t->name);
		t->n += got;
		if (got < 1024 || t->ids[t->n - 1] == UINT64_MAX)
			break;
		from = t->ids[t->n - 1] + 1;
	}
	t->vals = xmalloc(t->n * t->ti.dim * sizeof(float));
	t->state = xmalloc(t->n * (t->ti.state_floats + 1) * sizeof(float));
	if (read_ids(tf, &t->ti, t->ids, t->n, t->vals, t->state))
		fail("reading the listed rows of table %s failed", t->name);
	et_tfile_close(tf);
}

/* Every table file (NAME.et) of dir, DIR/DELTA and the commit record. */
static void read_content(const char *dir, struct content *c)
{
	struct dirent *de;
	char p[4400];
	DIR *d = opendir(dir);

	memset(c, 0, sizeof(*c));
	if (!d)
		fail("the copy %s is gone", dir);
	while ((de = readdir(d))) {
		size_t l = strlen(de->d_name);

		if (l < 4 || strcmp(de->d_name + l - 3, ".et") ||
		    l - 3 >= sizeof(c->t->name))
			continue;
		c->t = xrealloc(c->t, (c->nt + 1) * sizeof(*c->t));
		memset(&c->t[c->nt], 0, sizeof(*c->t));
		memcpy(c->t[c->nt].name, de->d_name, l - 3);
		c->nt++;
	}
	closedir(d);
	if (c->nt)
		qsort(c->t, c->nt, sizeof(*c->t), cmp_tc);
	for (int i = 0; i < c->nt; i++)
		read_table(dir, &c->t[i]);
	snprintf(p, sizeof(p), "%s/DELTA", dir);
	c->delta_ret = read_whole(p, &c->delta, &c->delta_len);
	if (c->delta_ret && c->delta_ret != -ENOENT)
		fail("reading %s: %d", p, c->delta_ret);
	c->ck_ret =
	    et_checkpoint_read_dir(dir, &c->ci, &c->dense, &c->dense_len);
}

static struct tcontent *find_table(const struct content *c, const char *name)
{
	for (int i = 0; i < c->nt; i++)
		if (!strcmp(c->t[i].name, name))
			return &c->t[i];
	return NULL;
}

static bool same_params(const struct et_table_info *a,
			const struct et_table_info *b)
{
	return a->rows == b->rows && a->dim == b->dim && a->dtype == b->dtype &&
	       a->optim == b->optim && a->init == b->init &&
	       !memcmp(&a->init_scale, &b->init_scale, 4) &&
	       a->seed == b->seed && a->flags == b->flags &&
	       a->state_floats == b->state_floats;
}

/* Whether table a is as b, row for row; why not in *why. */
static bool same_table(const struct tcontent *a, const struct tcontent *b,
		       const char **why)
{
	if (a->open_ret != b->open_ret) {
		*why = "it opens, or not, otherwise";
		return false;
	}
	if (a->open_ret)
		return true;
	if (!same_params(&a->ti, &b->ti)) {
		*why = "its parameters differ";
		return false;
	}
	if (a->n != b->n || memcmp(a->ids, b->ids, a->n * sizeof(uint64_t))) {
		*why = "it lists other rows";
		return false;
	}
	if (memcmp(a->vals, b->vals, a->n * a->ti.dim * sizeof(float)) ||
	    memcmp(a->state, b->state,
		   a->n * a->ti.state_floats * sizeof(float))) {
		*why = "a row's values or state differ";
		return false;
	}
	return true;
}

/* The copy unchanged: b before, a after; commit: its commit record too
 * (else its dense state alone). */
static void check_same(const struct content *b, const struct content *a,
		       const char *what, bool commit)
{
	const char *why = "";

	for (int i = 0; i < a->nt; i++)
		if (!find_table(b, a->t[i].name))
			fail("%s, yet table %s appeared", what, a->t[i].name);
	for (int i = 0; i < b->nt; i++) {
		const struct tcontent *t = find_table(a, b->t[i].name);

		if (!t)
			fail("%s, yet table %s is gone", what, b->t[i].name);
		if (!same_table(&b->t[i], t, &why))
			fail("%s, yet table %s changed: %s", what, t->name,
			     why);
	}
	if (a->delta_ret != b->delta_ret || a->delta_len != b->delta_len ||
	    (a->delta_len && memcmp(a->delta, b->delta, a->delta_len)))
		fail("%s, yet DIR/DELTA changed", what);
	if (a->ck_ret != b->ck_ret ||
	    (commit && (a->ci.id != b->ci.id || a->ci.commit != b->ci.commit ||
			a->ci.tables_moved != b->ci.tables_moved)) ||
	    a->dense_len != b->dense_len ||
	    (a->dense_len && memcmp(a->dense, b->dense, a->dense_len)))
		fail("%s, yet the commit record changed (commit %llu -> %llu)",
		     what, (unsigned long long)b->ci.commit,
		     (unsigned long long)a->ci.commit);
}

/* --------------------------------------------- what an apply must give */

/* Scratch table files, the initializer's values of given parameters. */
static struct {
	struct et_table_info ti;
	et_tfile *tf;
} inits[8];
static int ninit;

static et_tfile *init_file(const struct et_table_info *ti)
{
	struct et_table_params p = {.rows = ti->rows,
				    .dim = ti->dim,
				    .dtype = ti->dtype,
				    .optim = ti->optim,
				    .init = ti->init,
				    .init_scale = ti->init_scale,
				    .seed = ti->seed,
				    .flags = ti->flags};
	char f[4400];
	int k;

	for (k = 0; k < 8 && inits[k].tf; k++)
		if (same_params(&inits[k].ti, ti))
			return inits[k].tf;
	k = ninit++ % 8;
	et_tfile_close(inits[k].tf);
	inits[k].tf = NULL;
	snprintf(f, sizeof(f), "%s/init%d.et", top, k);
	unlink(f);
	if (et_tfile_create(f, &p, &inits[k].tf))
		fail("a scratch table of the parameters of a table the copy "
		     "has cannot be created");
	inits[k].ti = *ti;
	return inits[k].tf;
}

/* Where a DIR/DELTA stands. */
struct dsta {
	uint64_t commit;
	uint32_t n;
	char (*name)[65];
	uint64_t *sum;
};

/* DIR/DELTA's bytes as FORMAT.md lays them out; false if they are not. */
static bool dsta_parse(const uint8_t *b, size_t n, struct dsta *s)
{
	memset(s, 0, sizeof(*s));
	if (n < 32 || memcmp(b, "ETDSTA01", 8))
		return false;
	s->commit = le64(b + 8);
	s->n = le32(b + 16);
	if (n != 32 + 72ull * s->n || le64(b + n - 8) != XXH3_64bits(b, n - 8))
		return false;
	s->name = xmalloc(s->n * sizeof(*s->name));
	s->sum = xmalloc(s->n * sizeof(uint64_t));
	for (uint32_t i = 0; i < s->n; i++) {
		memcpy(s->name[i], b + 24 + 72 * i, 64);
		s->name[i][64] = 0;
		s->sum[i] = le64(b + 24 + 72 * i + 64);
	}
	return true;
}

static long dsta_find(const struct dsta *s, const char *name)
{
	for (uint32_t i = 0; i < s->n; i++)
		if (!strncmp(s->name[i], name, 64))
			return i;
	return -1;
}

static void dsta_free(struct dsta *s)
{
	free(s->name);
	free(s->sum);
}

/* The value the copy must read for a value the delta carries as stored:
 * an f16 or bf16 NaN made quiet (the library's conversions keep NaNs NaN,
 * quiet), else exact. */
static void decode_vals(uint32_t dt, const uint8_t *p, uint32_t dim, float *out)
{
	for (uint32_t c = 0; c < dim; c++) {
		uint16_t h = (uint16_t)(p[2 * c] | p[2 * c + 1] << 8);

		if (dt == ET_F32)
			memcpy(out + c, p + 4 * c, 4);
		else if (dt == ET_F16)
			out[c] = et_f16_to_f32(
			    (h & 0x7c00) == 0x7c00 && (h & 0x3ff) ? h | 0x200
								  : h);
		else
			out[c] = et_bf16_to_f32(
			    (h & 0x7f80) == 0x7f80 && (h & 0x7f) ? h | 0x40
								 : h);
	}
}

/*
 * Table t of the delta applied to a copy: bt before (NULL: none), at
 * after. Checks every row the apply may have touched; adds to *stale the
 * rows a whole table dropped.
 */
static void check_table(const char *dir, const struct pdelta *d,
			const struct ptable *t, const struct tcontent *bt,
			const struct tcontent *at, uint64_t *stale)
{
	const struct et_table_info *ti = &at->ti;
	uint32_t dim = ti->dim, sf = ti->state_floats;
	bool keyed = t->flags & ET_TABLE_KEYED;
	bool with_state = (d->flags & 1) && t->sf && sf;
	size_t nb = bt ? bt->n : 0, nu = 0, nl = 0, vb;
	uint64_t *u, *listed;
	float *want, *wstate, *got, *gstate, *iv, *is, scale;
	bool *init;
	char p[4400];
	et_tfile *tf;

	if (at->open_ret)
		fail("table %s does not open after the apply: %d (%s)", t->name,
		     at->open_ret, et_strerror(at->open_ret));
	memcpy(&scale, &t->scale, 4);
	if (t->init != ET_INIT_ZEROS && scale == 0)
		scale = 1.0f / sqrtf((float)t->dim); /* the default */
	if (ti->rows != t->rows || ti->dim != t->dim || ti->dtype != t->dtype ||
	    ti->optim != t->optim || ti->init != t->init ||
	    memcmp(&ti->init_scale, &scale, 4) || ti->seed != t->seed ||
	    ti->flags != t->flags)
		fail("table %s's parameters are not the delta's", t->name);
	if (bt && !bt->open_ret && !same_params(&bt->ti, ti))
		fail("table %s's parameters changed", t->name);
	/* every id that may have changed, or was there */
	u = xmalloc((nb + t->nrows + t->ntombs + 1) * sizeof(uint64_t));
	for (size_t i = 0; i < nb; i++)
		u[nu++] = bt->ids[i];
	for (size_t i = 0; i < t->nrows; i++)
		u[nu++] = t->rid[i];
	for (size_t i = 0; i < t->ntombs; i++)
		u[nu++] = t->tomb[i];
	qsort(u, nu, sizeof(uint64_t), cmp_u64);
	for (size_t i = 0; i < nu; i++)
		if (!nl || u[i] != u[nl - 1])
			u[nl++] = u[i];
	nu = nl;
	nl = 0;
	vb = (size_t)dim * dt_size(t->dtype);
	listed = xmalloc((nu + 1) * sizeof(uint64_t));
	want = xmalloc((nu * dim + 1) * sizeof(float));
	wstate = xmalloc((nu * sf + 1) * sizeof(float));
	got = xmalloc((nu * dim + 1) * sizeof(float));
	gstate = xmalloc((nu * sf + 1) * sizeof(float));
	iv = xmalloc((nu * dim + 1) * sizeof(float));
	is = xmalloc((nu * sf + 1) * sizeof(float));
	init = xmalloc((nu + 1) * sizeof(bool));
	for (size_t i = 0; i < nu; i++) {
		long b = bt ? find_id(bt->ids, nb, u[i]) : -1;
		long r = find_id(t->rid, t->nrows, u[i]);
		bool tomb = find_id(t->tomb, t->ntombs, u[i]) >= 0;

		init[i] = false;
		if (b >= 0 && r < 0 && t->whole)
			++*stale;
		if (tomb || (b >= 0 && r < 0 && t->whole && keyed)) {
			init[i] = true; /* erased: not listed */
			continue;
		}
		listed[nl++] = u[i];
		if (r >= 0) {
			decode_vals(t->dtype, t->row[r] + 8, dim,
				    want + i * dim);
			if (with_state)
				memcpy(wstate + i * sf, t->row[r] + 8 + vb,
				       4 * (size_t)sf);
			else if (b >= 0)
				memcpy(wstate + i * sf, bt->state + b * sf,
				       4 * (size_t)sf);
			else
				memset(wstate + i * sf, 0, 4 * (size_t)sf);
		} else if (t->whole) {
			init[i] = true; /* row-indexed: its initial value */
		} else {
			memcpy(want + i * dim, bt->vals + b * dim,
			       dim * sizeof(float));
			memcpy(wstate + i * sf, bt->state + b * sf,
			       4 * (size_t)sf);
		}
	}
	/* the listing */
	if (at->n != nl || memcmp(at->ids, listed, nl * sizeof(uint64_t))) {
		size_t i = 0;

		while (i < nl && i < at->n && at->ids[i] == listed[i])
			i++;
		fail("table %s lists %zu rows, not the %zu expected; the first "
		     "difference at position %zu: %llu where %llu was "
		     "expected",
		     t->name, at->n, nl, i,
		     i < at->n ? (unsigned long long)at->ids[i] : 0ull,
		     i < nl ? (unsigned long long)listed[i] : 0ull);
	}
	/* the values */
	snprintf(p, sizeof(p), "%s/%s.et", dir, t->name);
	if (et_tfile_open(p, ET_TFILE_RDONLY, &tf))
		fail("table %s does not open again", t->name);
	if (read_ids(tf, ti, u, nu, got, gstate))
		fail("table %s: reading its rows fails", t->name);
	et_tfile_close(tf);
	if (read_ids(init_file(ti), ti, u, nu, iv, is))
		fail("table %s: reading the initializer's rows fails", t->name);
	for (size_t i = 0; i < nu; i++) {
		const float *w = init[i] ? iv + i * dim : want + i * dim;
		const float *ws = init[i] ? is + i * sf : wstate + i * sf;

		if (memcmp(got + i * dim, w, dim * sizeof(float)))
			fail("table %s: row %llu reads %a %a ... where %a %a "
			     "... was expected (%s)",
			     t->name, (unsigned long long)u[i],
			     (double)got[i * dim],
			     (double)got[i * dim + (dim > 1)], (double)w[0],
			     (double)w[dim > 1],
			     init[i] ? "the initial value"
			     : find_id(t->rid, t->nrows, u[i]) >= 0
				 ? "the delta's"
				 : "as before");
		if (memcmp(gstate + i * sf, ws, sf * sizeof(float)))
			fail("table %s: row %llu's optimizer state is %a, not "
			     "%a",
			     t->name, (unsigned long long)u[i],
			     (double)gstate[i * sf], (double)ws[0]);
	}
	free(u);
	free(listed);
	free(want);
	free(wstate);
	free(got);
	free(gstate);
	free(iv);
	free(is);
	free(init);
}

/* The copy after a successful apply of d: b before, a after. */
static void check_applied(const char *dir, const struct pdelta *d,
			  const struct content *b, const struct content *a,
			  const struct et_delta_info *info)
{
	struct dsta ds = {0};
	bool need = false;
	uint64_t stale = 0;
	uint32_t whole = 0;
	uint8_t *want;
	size_t wlen;

	if (d->bad)
		fail("et_delta_apply returned 0 for a file that is not a "
		     "whole delta: %s",
		     d->bad);
	for (uint32_t i = 0; i < d->nt; i++) {
		need |= !d->t[i].whole;
		whole += d->t[i].whole;
		for (uint32_t k = 0; k < i; k++)
			if (!strcmp(d->t[i].name, d->t[k].name))
				fail("et_delta_apply took a delta naming table "
				     "%s twice",
				     d->t[i].name);
	}
	/* where the copy stood */
	if (!b->delta_ret && !dsta_parse(b->delta, b->delta_len, &ds))
		fail("DIR/DELTA before the apply is not as FORMAT.md says");
	if (need && (b->delta_ret || ds.commit != d->from))
		fail("a delta from commit %llu with a table not whole was "
		     "applied to a copy at %s %llu",
		     (unsigned long long)d->from,
		     b->delta_ret ? "no commit:" : "commit",
		     (unsigned long long)ds.commit);
	for (uint32_t i = 0; i < d->nt; i++) {
		long e = dsta_find(&ds, d->t[i].name);

		if (!d->t[i].whole &&
		    (e >= 0 ? ds.sum[e] : 0) != d->t[i].from_sum)
			fail("table %s continues another history than the "
			     "copy's, yet the delta was applied",
			     d->t[i].name);
	}
	/* the tables */
	for (int i = 0; i < a->nt; i++) {
		bool named = false;

		for (uint32_t k = 0; k < d->nt; k++)
			named |= !strcmp(a->t[i].name, d->t[k].name);
		if (!named && !find_table(b, a->t[i].name))
			fail("table %s appeared, which the delta does not name",
			     a->t[i].name);
	}
	for (int i = 0; i < b->nt; i++) {
		const struct tcontent *t = find_table(a, b->t[i].name);
		const char *why = "";
		bool named = false;

		for (uint32_t k = 0; k < d->nt; k++)
			named |= !strcmp(b->t[i].name, d->t[k].name);
		if (!t)
			fail("table %s is gone", b->t[i].name);
		if (!named && !same_table(&b->t[i], t, &why))
			fail("table %s, which the delta does not name, "
			     "changed: %s",
			     t->name, why);
	}
	for (uint32_t i = 0; i < d->nt; i++) {
		const struct tcontent *at = find_table(a, d->t[i].name);

		if (!at)
			fail("table %s of the delta is not in the copy",
			     d->t[i].name);
		check_table(dir, d, &d->t[i], find_table(b, d->t[i].name), at,
			    &stale);
	}
	/* what the call says */
	if (info->from_commit != d->from || info->to_commit != d->to ||
	    info->checkpoint_id != d->id || info->rows != d->rows ||
	    info->tombstones != d->tombs || info->bytes != d->size ||
	    info->tables != d->nt || info->whole != whole ||
	    info->flags != d->flags || info->stale != stale)
		fail("et_delta_info says from %llu to %llu id %llu, %llu rows, "
		     "%llu tombstones, %llu stale, %llu bytes, %u tables (%u "
		     "whole), flags %u; the file: from %llu to %llu id %llu, "
		     "%llu rows, %llu tombstones, %llu stale, %zu bytes, %u "
		     "tables (%u whole), flags %u",
		     (unsigned long long)info->from_commit,
		     (unsigned long long)info->to_commit,
		     (unsigned long long)info->checkpoint_id,
		     (unsigned long long)info->rows,
		     (unsigned long long)info->tombstones,
		     (unsigned long long)info->stale,
		     (unsigned long long)info->bytes, info->tables, info->whole,
		     info->flags, (unsigned long long)d->from,
		     (unsigned long long)d->to, (unsigned long long)d->id,
		     (unsigned long long)d->rows, (unsigned long long)d->tombs,
		     (unsigned long long)stale, d->size, d->nt, whole,
		     d->flags);
	/* the dense state */
	if (a->ck_ret || a->dense_len != d->dense_len ||
	    (a->dense_len && memcmp(a->dense, d->dense, a->dense_len)))
		fail("the copy's dense state (%zu bytes) is not the delta's "
		     "(%llu bytes)",
		     a->dense_len, (unsigned long long)d->dense_len);
	/* DIR/DELTA: the one before, moved on */
	for (uint32_t i = 0; i < d->nt; i++) {
		long e = dsta_find(&ds, d->t[i].name);

		if (e < 0) {
			ds.name =
			    xrealloc(ds.name, (ds.n + 1) * sizeof(*ds.name));
			ds.sum =
			    xrealloc(ds.sum, (ds.n + 1) * sizeof(uint64_t));
			e = ds.n++;
			memset(ds.name[e], 0, sizeof(ds.name[e]));
			memcpy(ds.name[e], d->t[i].name, 64);
		}
		ds.sum[e] = d->t[i].to_sum;
	}
	wlen = 32 + 72 * (size_t)ds.n;
	want = calloc(1, wlen);
	if (!want)
		abort();
	memcpy(want, "ETDSTA01", 8);
	wr64(want + 8, d->to);
	wr32(want + 16, ds.n);
	for (uint32_t i = 0; i < ds.n; i++) {
		memcpy(want + 24 + 72 * i, ds.name[i], strnlen(ds.name[i], 64));
		wr64(want + 24 + 72 * i + 64, ds.sum[i]);
	}
	wr64(want + wlen - 8, XXH3_64bits(want, wlen - 8));
	if (a->delta_ret || a->delta_len != wlen ||
	    memcmp(a->delta, want, wlen))
		fail("DIR/DELTA after the apply is not the one before moved "
		     "to commit %llu with the delta's tables",
		     (unsigned long long)d->to);
	free(want);
	dsta_free(&ds);
}

/* ----------------------------------------------------------- the setup */

static char src[4096], sdir[NS][4096], inpath[4096];
static uint8_t *good[NGOOD];
static size_t good_len[NGOOD];
static struct pdelta good_p[NGOOD];
static struct content before[NS];
static struct pfile sfiles[NS][MAXF];
static int snfiles[NS];
/* the good delta each copy takes next */
static const int next_good[NS] = {0, 1, 3, 2};

/* The current input, for the messages. */
static struct {
	int mode;
	const struct pdelta *d;
	int ret;
	char detail[256];
} cur;

static void input_detail(void)
{
	const struct pdelta *d = cur.d;

	fprintf(stderr,
		"    the input: mode 0x%02x (copy %d), a delta of %zu bytes: "
		"%s; from %llu to %llu, flags %u, %u tables\n",
		cur.mode, cur.mode & 3, d ? d->size : 0,
		!d	 ? "-"
		: d->bad ? d->bad
			 : "whole",
		d ? (unsigned long long)d->from : 0ull,
		d ? (unsigned long long)d->to : 0ull, d ? d->flags : 0,
		d ? d->nt : 0);
	for (uint32_t i = 0; d && i < d->nt; i++)
		fprintf(stderr,
			"    table %.64s: rows %llu dim %u dtype %u optim %u "
			"sf %u flags %u whole %u: %zu rows, %zu tombstones\n",
			d->t[i].name, (unsigned long long)d->t[i].rows,
			d->t[i].dim, d->t[i].dtype, d->t[i].optim, d->t[i].sf,
			d->t[i].flags, d->t[i].whole, d->t[i].nrows,
			d->t[i].ntombs);
	fprintf(stderr, "    et_delta_apply returned %d (%s): %s\n", cur.ret,
		et_strerror(cur.ret), cur.detail);
}

static unsigned long n_in[2][2]; /* [whole][taken] */

static void input_stats(void)
{
	fprintf(stderr,
		"fuzz_delta: whole deltas taken %lu, refused %lu; damaged "
		"ones refused %lu, taken %lu\n",
		n_in[1][1], n_in[1][0], n_in[0][0], n_in[0][1]);
}

/* Applies path (decoded as d) to copy dir, standing as b: 0 and the
 * oracle's checks passed, or the code of a refusal that changed nothing.
 * The copy's contents after in *a. */
static int apply(const char *path, const struct pdelta *d, const char *dir,
		 const struct content *b, struct content *a)
{
	struct et_delta_info info;
	int ret = et_delta_apply(path, dir, &info);

	cur.d = d;
	cur.ret = ret;
	snprintf(cur.detail, sizeof(cur.detail), "%s", et_errdetail());
	n_in[!d->bad][!ret]++;
	(void)failed("et_delta_apply", ret); /* a code the header allows */
	if (ret && d->bad && ret != ET_EDELTA && ret != -ENOMEM)
		fail("et_delta_apply refused a damaged file (%s) with %d "
		     "(%s), not ET_EDELTA",
		     d->bad, ret, et_strerror(ret));
	read_content(dir, a);
	if (ret)
		check_same(b, a, "et_delta_apply refused the delta", true);
	else
		check_applied(dir, d, b, a, &info);
	return ret;
}

static int write_rows(et_store *s, int tid, int t, const uint64_t *ids,
		      size_t n, uint64_t salt)
{
	static const struct et_update_params up = {.lr = 0.25f};
	float v[16 * 4];
	uint32_t dim = tparams[t].dim;
	int ret;

	for (size_t i = 0; i < n; i++)
		for (uint32_t c = 0; c < dim; c++)
			v[i * dim + c] = row_value(ids[i], c, salt);
	ret = et_write_rows(s, tid, ids, n, v);
	if (!ret) /* then a gradient step on the first half */
		ret = et_update(s, tid, ids, n / 2, v, &up);
	return ret;
}

static int export_good(int k, uint64_t since, unsigned flags)
{
	struct et_delta_info info;
	char p[4400];
	int ret;

	snprintf(p, sizeof(p), "%s/good%d.delta", top, k);
	ret = et_delta_export(src, since, p, flags, &info);
	if (!ret)
		ret = read_whole(p, &good[k], &good_len[k]);
	if (ret)
		return ret;
	parse(good[k], good_len[k], &good_p[k]);
	if (good_p[k].bad || !info.rows) {
		fprintf(stderr, "fuzz_delta: good delta %d: %s\n", k,
			good_p[k].bad ? good_p[k].bad : "no rows");
		return -1;
	}
	return 0;
}

static int source(void)
{
	static const uint64_t emb1[] = {0, 3, 7, 8, 20, 39},
			      emb2[] = {3, 10, 11, 0, 25},
			      kv2[] = {2, 5, 0xfffffffffffffff0ull, 42};
	static const uint64_t kv_erase[] = {1, 5, 77, UINT64_MAX};
	static const char dense1[] = "dense state of commit 1",
			  dense2[] = "the dense state of commit 2";
	et_store *s;
	int tid[NSRC], ret;

	ret = et_store_open(src, &cfg, &s);
	for (int t = 0; !ret && t < NSRC; t++)
		ret = et_table_create(s, tnames[t], &tparams[t], &tid[t]);
	if (!ret)
		ret = write_rows(s, tid[0], 0, emb1, 6, 1);
	if (!ret)
		ret = write_rows(s, tid[1], 1, kv_ids, 12, 1);
	if (!ret)
		ret = et_checkpoint(s, dense1, sizeof(dense1));
	if (!ret)
		ret = export_good(0, 0, ET_DELTA_STATE);
	if (!ret)
		ret = export_good(4, 0, 0);
	if (!ret)
		ret = write_rows(s, tid[0], 0, emb2, 5, 2);
	if (!ret)
		ret = et_erase(s, tid[1], kv_erase, 4, NULL);
	if (!ret) /* 5 again, after its erase */
		ret = write_rows(s, tid[1], 1, kv2, 4, 2);
	if (!ret)
		ret = et_checkpoint(s, dense2, sizeof(dense2));
	if (!ret)
		ret = export_good(1, 1, ET_DELTA_STATE);
	if (!ret)
		ret = export_good(2, 1, 0);
	if (!ret)
		ret = export_good(3, 0, ET_DELTA_STATE);
	if (et_store_close(s) && !ret)
		ret = -1;
	return ret;
}

/* Copy 3's own writes: row 1 of emb, and a table of its own. */
static int local_writes(void)
{
	static const struct et_table_params xp = {
	    .dim = 2, .seed = 9, .flags = ET_TABLE_KEYED};
	static const uint64_t xid[] = {4, UINT64_MAX, 1ull << 63};
	static const uint64_t one = 1;
	static const float xv[6] = {1, 2, 3, 4, 5, 6}, ev[4] = {9, 8, 7, 6};
	et_store *s;
	int e, x, ret = et_store_open(sdir[3], &cfg, &s);

	if (!ret)
		ret = et_table_open(s, "emb", NULL, &e);
	if (!ret)
		ret = et_table_create(s, "extra", &xp, &x);
	if (!ret)
		ret = et_write_rows(s, x, xid, 3, xv);
	if (!ret)
		ret = et_write_rows(s, e, &one, 1, ev);
	if (!ret)
		ret = et_checkpoint(s, "local", 5);
	if (et_store_close(s) && !ret)
		ret = -1;
	return ret;
}

/* Directory to made as from is, file for file, holes where they are. */
static int copy_dir(const char *from, const char *to)
{
	snprintf(fz_dir, sizeof(fz_dir), "%s", from);
	nfiles = 0;
	free(scratch); /* snapshot() makes one again */
	if (snapshot())
		return -1;
	snprintf(fz_dir, sizeof(fz_dir), "%s", to);
	restore();
	for (int i = 0; i < nfiles; i++)
		free(files[i].data);
	nfiles = 0;
	return 0;
}

static int setup(void)
{
	struct content a;
	int ret;

	snprintf(src, sizeof(src), "%s/src", top);
	snprintf(inpath, sizeof(inpath), "%s/input.delta", top);
	for (int s = 0; s < NS; s++) {
		snprintf(sdir[s], sizeof(sdir[s]), "%s/copy%d", top, s);
		if (mkdir(sdir[s], 0755))
			return -1;
	}
	ret = source();
	if (ret)
		return ret;
	/* copy 1: copy 0 and 0 -> 1; copy 2: copy 1 and 1 -> 2 (the
	 * oracle run on the good deltas); copy 3: copy 1, its writes */
	fz_what = "setup";
	read_content(sdir[0], &before[0]);
	snprintf(inpath, sizeof(inpath), "%s/good0.delta", top);
	if (copy_dir(sdir[0], sdir[1]) ||
	    apply(inpath, &good_p[0], sdir[1], &before[0], &a))
		return -1;
	content_free(&a);
	read_content(sdir[1], &before[1]);
	snprintf(inpath, sizeof(inpath), "%s/good1.delta", top);
	if (copy_dir(sdir[1], sdir[2]) ||
	    apply(inpath, &good_p[1], sdir[2], &before[1], &a))
		return -1;
	content_free(&a);
	read_content(sdir[2], &before[2]);
	if (copy_dir(sdir[1], sdir[3]) || local_writes())
		return -1;
	read_content(sdir[3], &before[3]);
	snprintf(inpath, sizeof(inpath), "%s/input.delta", top);
	/* each copy's files, to be put back after each input */
	for (int s = 0; s < NS; s++) {
		snprintf(fz_dir, sizeof(fz_dir), "%s", sdir[s]);
		nfiles = 0;
		free(scratch); /* snapshot() makes one again */
		if (snapshot())
			return -1;
		memcpy(sfiles[s], files, sizeof(files));
		snfiles[s] = nfiles;
	}
	memset(n_in, 0, sizeof(n_in));
	memset(tallies, 0, sizeof(tallies));
	return 0;
}

/* Puts copy s back as the setup left it. */
static void put_back(int s)
{
	snprintf(fz_dir, sizeof(fz_dir), "%s", sdir[s]);
	memcpy(files, sfiles[s], sizeof(files));
	nfiles = snfiles[s];
	restore();
}

static void write_seeds(void)
{
	static const struct {
		const char *name;
		int mode, k;
	} seeds[] = {
	    {"d01s-copy0", 0, 0},
	    {"d01s-copy0-fixed", 0 | 12, 0},
	    {"d01-copy0", 0, 4},
	    {"d12s-copy1", 1, 1},
	    {"d12s-copy1-fixed", 1 | 12, 1},
	    {"d12-copy3", 3, 2},
	    {"d12-copy3-fixed", 3 | 12, 2},
	    {"d02s-copy1", 1, 3},
	    {"d02s-copy3-fixed", 3 | 12, 3},
	    {"d02s-copy2-twice", 2 | 32, 3},
	    {"d01-copy2-twice", 2 | 32, 4},
	    {"d12s-copy0-then", 0 | 16, 1},
	    {"d12s-copy2-then", 2 | 16, 1},
	    {"d01s-copy1-twice", 1 | 32, 0},
	};
	const char *sd = getenv("ET_FUZZ_SEEDS");
	char p[4400];

	if (!sd)
		return;
	for (size_t i = 0; i < sizeof(seeds) / sizeof(seeds[0]); i++) {
		size_t n = good_len[seeds[i].k];
		uint8_t *b = xmalloc(n + 1);

		b[0] = (uint8_t)seeds[i].mode;
		memcpy(b + 1, good[seeds[i].k], n);
		snprintf(p, sizeof(p), "%s/%s", sd, seeds[i].name);
		if (write_file(p, b, n + 1))
			fprintf(stderr, "fuzz_delta: cannot write %s\n", p);
		free(b);
	}
}

/* ------------------------------------------------------------ an input */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const struct fuzz_hooks hooks = {.detail = input_detail,
						.stats = input_stats};
	static const char *const what[NS] = {"the empty copy", "copy at 1",
					     "copy at 2", "copy at 1, its own"};
	static uint8_t *b;
	static size_t cap;
	struct content bc, a, a2;
	struct pdelta d;
	int st, ret;

	fuzz_store_once("delta", &hooks, setup, write_seeds);
	if (!size)
		return 0;
	if (size > cap) {
		free(b);
		cap = size;
		b = xmalloc(cap);
	}
	memcpy(b, data + 1, size - 1);
	cur.mode = data[0];
	if (data[0] & 12)
		fix(b, size - 1, data[0] & 8);
	if (write_file(inpath, b, size - 1))
		abort();
	st = data[0] & 3;
	put_back(st);
	parse(b, size - 1, &d);
	fz_what = what[st];
	ret = apply(inpath, &d, sdir[st], &before[st], &a);
	if (ret && (data[0] & 16)) {
		/* a refusal leaves nothing that matters behind */
		char p[4400];
		int k = next_good[st];

		fz_what = "the copy's next good delta, after a refusal";
		content_free(&a);
		snprintf(p, sizeof(p), "%s/good%d.delta", top, k);
		if (apply(p, &good_p[k], sdir[st], &before[st], &a))
			fail("the good delta is refused after a refusal");
	} else if (!ret && (data[0] & 32)) {
		/* applying the same delta again is harmless */
		fz_what = "the same delta again";
		bc = a;
		if (!apply(inpath, &d, sdir[st], &bc, &a2))
			check_same(&bc, &a2, "the same delta applied again",
				   false);
		content_free(&a2);
	}
	content_free(&a);
	pdelta_free(&d);
	cur.d = NULL;
	return 0;
}
