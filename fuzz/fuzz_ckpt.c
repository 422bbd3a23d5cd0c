/*
 * fuzz_ckpt.c - libFuzzer target: a store's commit record (DIR/CHECKPOINT)
 * of arbitrary bytes, beside good table files, row logs and journals. The
 * oracle is "refused, or exactly what the record says", not only memory
 * safety.
 *
 * Once per process a store with two tables (f32 SGD, f16 row-wise
 * Adagrad) is written through commits: rows A of both, et_checkpoint with
 * a dense state of 300 bytes (commit 1); rows B, et_checkpoint with 333
 * bytes (commit 2); rows C, a clean close (commit 3: the checkpoint's id
 * and dense state kept, the tables moved). The record after each commit
 * (commit 0: the one a new store writes), every row of both tables at
 * each commit and the directory's files are kept in memory.
 *
 * Each input becomes DIR/CHECKPOINT; then
 *   1. et_checkpoint_read_dir;
 *   2. et_tfile_open(ET_TFILE_RDONLY) of each table, every row read;
 *   3. et_store_open, et_table_open of each table, every row gathered,
 *      et_checkpoint_read, et_store_close;
 *   4. the good record put back, the store opened again, every row
 *      gathered.
 * A call that fails must return a negative code (the library's range or
 * a negated errno). One that succeeds must have been given a whole
 * record: the target parses the input itself as src/disk/checkpoint.h lays it
 * out (lengths; header checksum; table entries, each a name a store
 * allows, no table twice, a journal length and checksum both 0 or
 * neither; the dense state's checksum, which step 2 does not check) -
 * else it took a damaged record. It must report what the record holds
 * (id, commit, moved, the dense state byte for byte), and every row must
 * read bit for bit its value at the commit the record names for its
 * table: an entry names commit k's journal length and last batch checksum
 * (k = 1, 2, 3), or nothing (commit 0: none of the journal committed).
 * Must be refused: an entry naming anything else; a table at commit k
 * under a record of a commit below k (its batches are past the record),
 * or above it (the journal's batch of commit k + 1, past the named bytes,
 * is of a commit the record says happened); a version 3 record two or
 * more commits behind its journals (commit 0 or 1 here: no crash leaves
 * that, the record is stale; one commit behind is a crash between the
 * journals' sync and the record's, taken, the next commit's batches cut).
 * A version 1 or 2 record has no table list: the tables are at
 * min(commit, 3). A read may fail with ET_EBLOCKSUM (a failing batch is
 * split to find the rows alone). In step 4 every row must read exactly
 * as at commit 3; the store may be refused only if step 3 took the
 * input's record (it may then have cut the journals past what that
 * record named): a refused open changes nothing. Anything else is
 * abort()ed with a message saying which. After each input every file of
 * the directory is put back as it was.
 *
 * An input whose first byte is 1 has that byte dropped, and then if it is
 * a version 3 record at least as long as its header and table list, its
 * dense state checksum (offset 40) and header checksum (offset 48) are set
 * right (versions 1 and 2: their one checksum), so that the semantic
 * checks are reached. An input whose first byte is 2 describes a record
 * by its fields, every byte of it meaningful (see shape() below):
 * commits, tables named twice or not at all, entries of any commit, its
 * checksums set right. Such records are whole: the library cannot know
 * that their fields were not written by a commit, so only the rules above
 * judge them; it is why the dense state is compared with the record's
 * bytes and not with the original's (a record of the original id with
 * another dense state is damaged only if its checksums say so).
 *
 * Seeds: fuzz/corpus/ckpt/ (the records of commits 0-3 as written by the
 * setup below, raw and with the leading 1; version 1 and 2 records of
 * commit 3; the shapes of the records of commits 1-3 and of a version 2
 * one); ET_FUZZ_SEEDS=DIR makes the setup write them there. ET_FUZZ_DIR
 * chooses the scratch directory (default /var/tmp); it is removed at exit
 * and at an oracle abort (ET_FUZZ_KEEP=1 keeps it then, for a look).
 * ET_FUZZ_STATS=1 prints at exit how many inputs each call took or
 * refused, by code.
 */
#include <errno.h>

#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t */
#include <xxhash.h>

#include "embtier.h"
#include "fuzz_store.h"

#define NT	  2
#define MAXROW	  1000
#define MAXDIM	  16
#define NC	  4 /* commits 0..3 */
#define SHAPE_HDR 6 /* mode, version, commit, id, flags, tables */
#define SHAPE_MAX 8 /* tables, at most */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char *const tnames[NT] = {"t0", "t1"};
static const struct et_table_params tparams[NT] = {
    {.rows = 1000,
     .dim = 8,
     .dtype = ET_F32,
     .init = ET_INIT_UNIFORM,
     .seed = 11},
    {.rows = 500,
     .dim = 16,
     .dtype = ET_F16,
     .optim = ET_OPT_ROWWISE_ADAGRAD,
     .init = ET_INIT_NORMAL,
     .seed = 12},
};

/* Small caches: rows go to the logs during the sessions, and an open per
 * input stays cheap. */
static const struct et_store_config cfg = {
    .ddr_bytes = 64 << 10, .ways = 4, .io_depth = 16};

static char ckpt[4096], tpath[NT][4096];
static uint64_t all_ids[MAXROW];
static float got[MAXROW * MAXDIM];
static float state[NC][NT][MAXROW * MAXDIM]; /* every row at each commit */

/* The record after each commit, and what it names of each table. */
static unsigned char *rec[NC];
static size_t rec_len[NC];
static uint64_t tail_len[NC][NT], tail_sum[NC][NT];
static unsigned char dense1[300], dense2[333];

static uint64_t hash2(const void *a, size_t na, const void *b, size_t nb)
{
	XXH3_state_t st;

	XXH3_64bits_reset(&st);
	XXH3_64bits_update(&st, a, na);
	XXH3_64bits_update(&st, b, nb);
	return XXH3_64bits_digest(&st);
}

/* ------------------------------------------------------------ a record */

/* A record as src/disk/checkpoint.h lays it out, parsed here on its own. */
struct parsed {
	int version;	/* 1, 2, 3; 0: not a record */
	bool whole;	/* every length and checksum right */
	bool whole_hdr; /* the same but the dense state's checksum */
	uint64_t commit, id;
	uint32_t flags, ntables;
	const uint8_t *list; /* version 3: ntables entries of 96 bytes */
	const uint8_t *dense;
	uint64_t dense_len;
};

/* A table name as a store allows it: 1..64 of [A-Za-z0-9_.-], not
 * starting with '.' (the name ends at its first zero byte). */
static bool name_ok(const uint8_t *e, size_t len)
{
	if (!len || e[0] == '.')
		return false;
	for (size_t i = 0; i < len; i++)
		if (!((e[i] >= 'a' && e[i] <= 'z') ||
		      (e[i] >= 'A' && e[i] <= 'Z') ||
		      (e[i] >= '0' && e[i] <= '9') || e[i] == '_' ||
		      e[i] == '-' || e[i] == '.'))
			return false;
	return true;
}

static void parse(const uint8_t *b, size_t n, struct parsed *p)
{
	memset(p, 0, sizeof(*p));
	if (n < 8)
		return;
	if (!memcmp(b, "ETCKPT01", 8) || !memcmp(b, "ETCKPT02", 8)) {
		bool v2 = b[7] == '2';
		size_t hl = v2 ? 48 : 32;

		p->version = v2 ? 2 : 1;
		if (n < hl || le64(b + (v2 ? 32 : 16)) != n - hl)
			return;
		p->commit = le64(b + 8);
		p->id = v2 ? le64(b + 16) : p->commit;
		p->flags = v2 ? le32(b + 24) : 0;
		p->dense = b + hl;
		p->dense_len = n - hl;
		p->whole = p->whole_hdr =
		    hash2(b, v2 ? 40 : 24, b + hl, n - hl) ==
		    le64(b + (v2 ? 40 : 24));
		return;
	}
	if (memcmp(b, "ETCKPT03", 8))
		return;
	p->version = 3;
	if (n < 56)
		return;
	p->ntables = le32(b + 28);
	p->dense_len = le64(b + 32);
	{
		uint64_t hl = 56 + (uint64_t)p->ntables * 96;

		if (hl > n || p->dense_len != n - hl)
			return;
		p->list = b + 56;
		p->dense = b + hl;
		if (hash2(b, 48, p->list, hl - 56) != le64(b + 48))
			return;
	}
	for (uint32_t i = 0; i < p->ntables; i++) {
		const uint8_t *e = p->list + (size_t)i * 96;
		size_t len = strnlen((const char *)e, 64);

		if (!name_ok(e, len) || (!le64(e + 64)) != (!le64(e + 72)))
			return;
		for (uint32_t j = 0; j < i; j++)
			if (strnlen((const char *)p->list + j * 96, 64) ==
				len &&
			    !memcmp(p->list + j * 96, e, len))
				return; /* named twice */
	}
	p->commit = le64(b + 8);
	p->id = le64(b + 16);
	p->flags = le32(b + 24);
	p->whole_hdr = true;
	p->whole = XXH3_64bits(p->dense, p->dense_len) == le64(b + 40);
}

/* The first entry of table name in p's list (names compare as the
 * library's: up to the first zero byte of their 64), or NULL. */
static const uint8_t *entry(const struct parsed *p, const char *name)
{
	for (uint32_t i = 0; i < p->ntables; i++) {
		const uint8_t *e = p->list + (size_t)i * 96;

		if (strnlen((const char *)e, 64) == strlen(name) &&
		    !memcmp(e, name, strlen(name)))
			return e;
	}
	return NULL;
}

/* Sets the checksums of the record b (n bytes), when its lengths allow. */
static void fix_record(uint8_t *b, size_t n)
{
	if (n >= 32 && !memcmp(b, "ETCKPT01", 8)) {
		wr64(b + 24, hash2(b, 24, b + 32, n - 32));
	} else if (n >= 48 && !memcmp(b, "ETCKPT02", 8)) {
		wr64(b + 40, hash2(b, 40, b + 48, n - 48));
	} else if (n >= 56 && !memcmp(b, "ETCKPT03", 8)) {
		uint64_t hl = 56 + (uint64_t)le32(b + 28) * 96;

		if (hl > n)
			return;
		wr64(b + 40, XXH3_64bits(b + hl, n - hl));
		wr64(b + 48, hash2(b, 48, b + 56, hl - 56));
	}
}

/* ---------------------------------------------------------- the oracle */

static struct parsed in; /* the input's record */

/* An oracle abort's line on the input's record. */
static void record_detail(void)
{
	fprintf(stderr,
		"    the record: version %d, %s, commit %llu, id %llu, "
		"flags %u, %u tables, %llu bytes of dense state\n",
		in.version,
		in.whole       ? "whole"
		: in.whole_hdr ? "whole but its dense state's checksum"
			       : "damaged",
		(unsigned long long)in.commit, (unsigned long long)in.id,
		in.flags, in.ntables, (unsigned long long)in.dense_len);
}

/*
 * The commit whose rows table t must read, the record having been taken:
 * k of the entry naming commit k's journal tail (0: none), after checking
 * that the library was right to take it.
 */
static int expected_commit(const char *call, int t)
{
	const uint8_t *e;
	uint64_t jlen, jsum;
	int k;

	if (in.version < 3)
		return in.commit < NC - 1 ? (int)in.commit : NC - 1;
	e = entry(&in, tnames[t]);
	jlen = e ? le64(e + 64) : 0;
	jsum = e ? le64(e + 72) : 0;
	for (k = 0; k < NC; k++)
		if (tail_len[k][t] == jlen && tail_sum[k][t] == jsum)
			break;
	if (k == NC)
		fail("%s took table %s, whose entry names %llu journal bytes "
		     "ending in a batch of checksum %#llx: no commit's",
		     call, tnames[t], (unsigned long long)jlen,
		     (unsigned long long)jsum);
	if (in.commit + 2 <= NC - 1)
		fail("%s took table %s under a record of commit %llu, while "
		     "its journal holds batches up to commit %d: two or more "
		     "commits past the record, which no crash leaves (the "
		     "record is stale)",
		     call, tnames[t], (unsigned long long)in.commit, NC - 1);
	if (in.commit < (uint64_t)k)
		fail("%s took table %s at commit %d under a record of commit "
		     "%llu: its last batch is past the record",
		     call, tnames[t], k, (unsigned long long)in.commit);
	if (k < NC - 1 && in.commit > (uint64_t)k)
		fail("%s took table %s at commit %d under a record of commit "
		     "%llu: the journal's batch of commit %d, past the named "
		     "bytes, is of a commit the record says happened (the "
		     "tables roll back to commit %d)",
		     call, tnames[t], k, (unsigned long long)in.commit, k + 1,
		     k);
	return k;
}

/* A read that fails: ET_EBLOCKSUM, ET_ETRUNC, ET_ESHORTIO (records the
 * files do not hold right), -EIO, -ENOMEM; nothing else. */
static void read_failed(const char *call, size_t lo, size_t n, int ret)
{
	if (ret != ET_EBLOCKSUM && ret != ET_ETRUNC && ret != ET_ESHORTIO &&
	    ret != -EIO && ret != -ENOMEM)
		fail("%s of rows [%zu, %zu) returned %d (%s): neither 0 nor "
		     "ET_EBLOCKSUM",
		     call, lo, lo + n, ret, et_strerror(ret));
}

/* Reads rows [lo, lo + n) of table t (handle id tid) and compares them
 * with commit k's; a batch that fails is split until the rows that fail
 * stand alone. */
static void check_rows(const char *call, read_fn rd, void *h, int t, int tid,
		       int k, size_t lo, size_t n)
{
	uint32_t dim = tparams[t].dim;
	int ret = rd(h, tid, all_ids + lo, n, got + lo * dim);

	tally(call, ret == 0 && n != tparams[t].rows ? 1 : ret);
	if (!ret) {
		for (size_t i = lo; i < lo + n; i++) {
			const float *v = got + i * dim,
				    *w = state[k][t] + i * dim;
			int j;

			if (!memcmp(v, w, dim * sizeof(float)))
				continue;
			for (j = NC - 1; j >= 0; j--)
				if (!memcmp(v, state[j][t] + i * dim,
					    dim * sizeof(float)))
					break;
			fail("%s returned 0 but row %zu of table %s reads %a "
			     "%a ... where commit %d (the one its record "
			     "names) has %a %a ...; the value read is %s%.0d",
			     call, i, tnames[t], (double)v[0], (double)v[1], k,
			     (double)w[0], (double)w[1],
			     j >= 0 ? "the row's at commit "
				    : "none of any "
				      "commit",
			     j >= 0 ? j : 0);
		}
		return;
	}
	read_failed(call, lo, n, ret);
	if (n == 1)
		return;
	check_rows(call, rd, h, t, tid, k, lo, n / 2);
	check_rows(call, rd, h, t, tid, k, lo + n / 2, n - n / 2);
}

/* What the library says of the record must be what it holds (both calls
 * check the dense state: the record must be whole). full: commit and
 * moved are said too. The original's id with another dense state is a
 * damaged record only if its checksums say so: the dense state is
 * compared with the record's bytes. */
static void check_said(const char *call, uint64_t id, uint64_t commit,
		       bool moved, const void *dense, size_t len, bool full)
{
	if (!in.whole)
		fail("%s returned 0 for a record that is not whole", call);
	if (id != in.id)
		fail("%s says id %llu", call, (unsigned long long)id);
	if (full && (commit != in.commit || moved != !!(in.flags & 1)))
		fail("%s says commit %llu, moved %d", call,
		     (unsigned long long)commit, moved);
	if (len != in.dense_len || (len && memcmp(dense, in.dense, len)))
		fail("%s gives %zu bytes of dense state, not the record's %llu "
		     "bytes",
		     call, len, (unsigned long long)in.dense_len);
}

static void check_read_dir(void)
{
	struct et_checkpoint_info ci;
	void *dense = NULL;
	size_t len = 0;
	int ret = et_checkpoint_read_dir(fz_dir, &ci, &dense, &len);

	if (!failed("et_checkpoint_read_dir", ret))
		check_said("et_checkpoint_read_dir", ci.id, ci.commit,
			   ci.tables_moved, dense, len, true);
	free(dense);
}

static void check_tfiles(void)
{
	for (int t = 0; t < NT; t++) {
		et_tfile *tf;
		int ret = et_tfile_open(tpath[t], ET_TFILE_RDONLY, &tf);

		if (failed("et_tfile_open", ret))
			continue;
		/* a tool's open checks all but the dense state */
		if (!in.whole_hdr)
			fail("et_tfile_open of table %s returned 0 under a "
			     "damaged record",
			     tnames[t]);
		check_rows("et_tfile_read_rows", tfile_read, tf, t, 0,
			   expected_commit("et_tfile_open", t), 0,
			   tparams[t].rows);
		et_tfile_close(tf);
	}
}

/* Returns whether the store or a table was refused. */
static bool check_store(void)
{
	void *dense = NULL;
	uint64_t id = 0;
	size_t len = 0;
	bool refused = false;
	et_store *s;
	int ret = et_store_open(fz_dir, &cfg, &s);

	if (failed("et_store_open", ret))
		return true;
	if (!in.whole)
		fail("et_store_open returned 0 under a record that is not "
		     "whole");
	for (int t = 0; t < NT; t++) {
		int tid;

		ret = et_table_open(s, tnames[t], NULL, &tid);
		if (failed("et_table_open", ret)) {
			refused = true;
			continue;
		}
		check_rows("et_gather", store_read, s, t, tid,
			   expected_commit("et_table_open", t), 0,
			   tparams[t].rows);
	}
	ret = et_checkpoint_read(s, &id, &dense, &len);
	if (!failed("et_checkpoint_read", ret))
		check_said("et_checkpoint_read", id, 0, false, dense, len,
			   false);
	free(dense);
	(void)failed("et_store_close", et_store_close(s));
	return refused;
}

/*
 * The good record put back over what the input's open left. An open that
 * took the input's record may have cut journals (what its record did not
 * name): the good record may then be refused, but never taken with other
 * rows. An open that refused the store or a table must have left the
 * journals as they were (the header: on error nothing visible has
 * changed), so the good record must then be taken, every row exact.
 */
static void check_good_again(bool refused)
{
	et_store *s;
	int ret;

	if (write_file(ckpt, rec[NC - 1], rec_len[NC - 1]))
		abort();
	ret = et_store_open(fz_dir, &cfg, &s);
	if (failed("et_store_open", ret)) {
		if (refused)
			fail("the input's record was refused, yet the store "
			     "open under the good record after it fails with "
			     "%d (%s): the refused open changed the journals",
			     ret, et_strerror(ret));
		return;
	}
	for (int t = 0; t < NT; t++) {
		int tid;

		ret = et_table_open(s, tnames[t], NULL, &tid);
		if (!failed("et_table_open", ret))
			check_rows("et_gather", store_read, s, t, tid, NC - 1,
				   0, tparams[t].rows);
		else if (refused)
			fail("the input's record was refused, yet table %s "
			     "under the good record after it fails with %d "
			     "(%s): the refused open changed its journal",
			     tnames[t], ret, et_strerror(ret));
	}
	(void)failed("et_store_close", et_store_close(s));
}

/* ----------------------------------------------------------- the setup */

/* Writes the rows r of table t with mix64(r ^ salt) % every == 0 and
 * updates (through the optimizer) a third of them. */
static int write_set(et_store *s, int tid, int t, uint64_t salt, unsigned every)
{
	static const struct et_update_params up = {.lr = 0.25f};
	static uint64_t ids[MAXROW];
	static float v[MAXROW * MAXDIM];
	uint32_t dim = tparams[t].dim;
	size_t n = 0;
	int ret;

	for (uint64_t r = 0; r < tparams[t].rows; r++) {
		if (mix64(r ^ salt ^ (uint64_t)t << 32) % every)
			continue;
		for (uint32_t c = 0; c < dim; c++)
			v[n * dim + c] = row_value(r, c, salt);
		ids[n++] = r;
	}
	ret = et_write_rows(s, tid, ids, n, v);
	if (!ret)
		ret = et_update(s, tid, ids, n / 3, v, &up);
	return ret;
}

static int read_file(const char *p, unsigned char **b, size_t *n)
{
	struct stat st;
	int fd = open(p, O_RDONLY);
	int ret = -1;

	if (fd < 0)
		return -1;
	if (!fstat(fd, &st) && (*b = malloc((size_t)st.st_size + 1))) {
		*n = (size_t)st.st_size;
		ret = pread_all(fd, *b, *n, 0);
	}
	close(fd);
	return ret;
}

/* Keeps the record of commit k and the states of the tables. */
static int keep(et_store *s, const int *tid, int k)
{
	int ret = read_file(ckpt, &rec[k], &rec_len[k]);

	for (int t = 0; !ret && t < NT; t++)
		ret =
		    et_gather(s, tid[t], all_ids, tparams[t].rows, state[k][t]);
	return ret;
}

static int sessions(void)
{
	et_store *s;
	int tid[NT], ret;

	ret = et_store_open(fz_dir, &cfg, &s);
	if (ret)
		return ret;
	for (int t = 0; !ret && t < NT; t++)
		ret = et_table_create(s, tnames[t], &tparams[t], &tid[t]);
	if (!ret)
		ret = keep(s, tid, 0);
	for (int t = 0; !ret && t < NT; t++)
		ret = write_set(s, tid[t], t, 1, 4); /* A */
	if (!ret)
		ret = et_checkpoint(s, dense1, sizeof(dense1));
	if (!ret)
		ret = keep(s, tid, 1);
	for (int t = 0; !ret && t < NT; t++)
		ret = write_set(s, tid[t], t, 2, 3); /* B */
	if (!ret)
		ret = et_checkpoint(s, dense2, sizeof(dense2));
	if (!ret)
		ret = keep(s, tid, 2);
	for (int t = 0; !ret && t < NT; t++)
		ret = write_set(s, tid[t], t, 3, 5); /* C */
	for (int t = 0; !ret && t < NT; t++)
		ret =
		    et_gather(s, tid[t], all_ids, tparams[t].rows, state[3][t]);
	if (et_store_close(s) && !ret) /* commit 3 */
		ret = -1;
	if (ret)
		return ret;
	/* a plain reopen must give commit 3 exactly: else no point */
	ret = et_store_open(fz_dir, &cfg, &s);
	if (ret)
		return ret;
	for (int t = 0; !ret && t < NT; t++) {
		ret = et_table_open(s, tnames[t], NULL, &tid[t]);
		if (!ret)
			ret =
			    et_gather(s, tid[t], all_ids, tparams[t].rows, got);
		if (!ret &&
		    memcmp(got, state[3][t],
			   tparams[t].rows * tparams[t].dim * sizeof(float)))
			ret = -1;
	}
	if (et_store_close(s) && !ret)
		ret = -1;
	return ret ? ret : read_file(ckpt, &rec[3], &rec_len[3]);
}

static int setup(void)
{
	int ret;

	snprintf(ckpt, sizeof(ckpt), "%s/CHECKPOINT", fz_dir);
	for (int t = 0; t < NT; t++)
		snprintf(tpath[t], sizeof(tpath[t]), "%s/%s.et", fz_dir,
			 tnames[t]);
	for (int i = 0; i < MAXROW; i++)
		all_ids[i] = (uint64_t)i;
	for (size_t i = 0; i < sizeof(dense1); i++)
		dense1[i] = (unsigned char)(mix64(i + 1) >> 56);
	for (size_t i = 0; i < sizeof(dense2); i++)
		dense2[i] = (unsigned char)(mix64(i + 2000) >> 56);
	ret = sessions();
	if (ret)
		return ret;
	/* what each record names of each table */
	for (int k = 0; k < NC; k++) {
		struct parsed p;

		parse(rec[k], rec_len[k], &p);
		if (p.version != 3 || !p.whole || p.commit != (uint64_t)k)
			return -1; /* not the layout this target knows */
		for (int t = 0; t < NT; t++) {
			const uint8_t *e = entry(&p, tnames[t]);

			tail_len[k][t] = e ? le64(e + 64) : 0;
			tail_sum[k][t] = e ? le64(e + 72) : 0;
			if (k && (!e || tail_len[k][t] <= tail_len[k - 1][t]))
				return -1; /* every commit wrote both */
		}
	}
	return snapshot();
}

/* A version 1 or 2 record of the last commit (its dense state, its id in
 * version 2). */
static size_t legacy(int v, unsigned char *b, size_t cap)
{
	struct parsed p;
	size_t hl = v == 2 ? 48 : 32;

	parse(rec[3], rec_len[3], &p);
	if (hl + p.dense_len > cap)
		return 0;
	memset(b, 0, hl);
	memcpy(b, v == 2 ? "ETCKPT02" : "ETCKPT01", 8);
	wr64(b + 8, p.commit);
	if (v == 2) {
		wr64(b + 16, p.id);
		b[24] = (uint8_t)p.flags;
	}
	wr64(b + (v == 2 ? 32 : 16), p.dense_len);
	memcpy(b + hl, p.dense, p.dense_len);
	fix_record(b, hl + p.dense_len);
	return hl + p.dense_len;
}

static size_t shape(const uint8_t *d, size_t n, uint8_t *b, size_t cap);

static void write_seeds(void)
{
	const char *sd = getenv("ET_FUZZ_SEEDS");
	unsigned char b[4096], r[4096];
	char p[4400];
	size_t n;

	if (!sd)
		return;
	for (int k = 0; k < NC; k++) {
		snprintf(p, sizeof(p), "%s/record-commit%d", sd, k);
		write_file(p, rec[k], rec_len[k]);
		if (rec_len[k] >= sizeof(b))
			continue;
		b[0] = 1;
		memcpy(b + 1, rec[k], rec_len[k]);
		snprintf(p, sizeof(p), "%s/fixed-commit%d", sd, k);
		write_file(p, b, rec_len[k] + 1);
	}
	/* the shapes of the records of commits 1-3, and of a version 2
	 * record of commit 3 */
	for (int k = 1; k <= 4; k++) {
		const unsigned char *dn = k == 1 ? dense1 : dense2;
		size_t dl = k == 1 ? sizeof(dense1) : sizeof(dense2);
		uint8_t h[SHAPE_HDR + 4] = {2,
					    k == 4 ? 1 : 2,
					    k == 4 ? 3 : k,
					    k < 2 ? 1 : 2,
					    k == 3 || k == 4,
					    2,
					    0,
					    k == 4 ? 3 : k,
					    1,
					    k == 4 ? 3 : k};

		memcpy(b, h, sizeof(h));
		memcpy(b + sizeof(h), dn, dl);
		if (k == 4)
			snprintf(p, sizeof(p), "%s/shape-v2-commit3", sd);
		else
			snprintf(p, sizeof(p), "%s/shape-commit%d", sd, k);
		write_file(p, b, sizeof(h) + dl);
		n = shape(b, sizeof(h) + dl, r, sizeof(r));
		if (k < 4 && (n != rec_len[k] || memcmp(r, rec[k], n)))
			fprintf(stderr,
				"fuzz_ckpt: %s is not the record of "
				"commit %d\n",
				p, k);
	}
	for (int v = 1; v <= 2; v++) {
		n = legacy(v, b, sizeof(b));
		snprintf(p, sizeof(p), "%s/record-v%d-commit3", sd, v);
		if (n)
			write_file(p, b, n);
	}
}

/* ------------------------------------------------------------ an input */

/*
 * Builds into b (cap bytes) the record an input of the shape mode
 * describes, its checksums right; returns its length (0: none). The input:
 * byte 0 is 2; then the version (1 + byte % 3), commit, id, flags and table
 * count (byte % 9), one byte each; then two bytes a table: its name (t0,
 * t1, t2 that does not exist, "t0" with bytes after its zero, or an empty
 * one), and its journal entry (commit 0-3's tail of that table, or a
 * length one past commit 3's, or commit 3's length with another
 * checksum); the rest is the dense state. Every byte then means something
 * to the semantic checks.
 */
static size_t shape(const uint8_t *d, size_t n, uint8_t *b, size_t cap)
{
	static const char *const names[5] = {"t0", "t1", "t2", "t0\0x", ""};
	int v, nt;
	size_t hl, at;

	if (n < SHAPE_HDR)
		return 0;
	v = 1 + d[1] % 3;
	nt = d[5] % (SHAPE_MAX + 1);
	at = SHAPE_HDR + 2 * (size_t)nt;
	if (n < at)
		return 0;
	hl = v == 1 ? 32 : v == 2 ? 48 : 56 + 96 * (size_t)nt;
	if (hl + n - at > cap)
		return 0;
	memset(b, 0, hl);
	memcpy(b, v == 1 ? "ETCKPT01" : v == 2 ? "ETCKPT02" : "ETCKPT03", 8);
	wr64(b + 8, d[2]);
	if (v == 1) {
		wr64(b + 16, n - at);
	} else {
		wr64(b + 16, d[3]);
		b[24] = d[4];
		if (v == 3)
			b[28] = (uint8_t)nt;
		wr64(b + 32, n - at);
	}
	for (int i = 0; v == 3 && i < nt; i++) {
		uint8_t *e = b + 56 + 96 * (size_t)i;
		int nm = d[SHAPE_HDR + 2 * i] % 5,
		    k = d[SHAPE_HDR + 2 * i + 1] % 6;
		int t = nm == 1 ? 1 : 0;

		memcpy(e, names[nm], nm == 3 ? 4 : strlen(names[nm]));
		wr64(e + 64,
		     k < 4 ? tail_len[k][t] : tail_len[3][t] + (k == 4));
		wr64(e + 72,
		     k < 4 ? tail_sum[k][t] : tail_sum[3][t] + (k == 5));
	}
	memcpy(b + hl, d + at, n - at);
	fix_record(b, hl + n - at);
	return hl + n - at;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const struct fuzz_hooks hooks = {.detail = record_detail};
	static uint8_t *b;
	static size_t cap;
	size_t n = size;
	bool refused;

	fuzz_store_once("ckpt", &hooks, setup, write_seeds);
	if (size + 56 + 96 * SHAPE_MAX > cap) {
		free(b);
		cap = size + 56 + 96 * SHAPE_MAX;
		b = malloc(cap);
		if (!b)
			abort();
	}
	memcpy(b, data, size);
	if (size && data[0] == 1) {
		n = size - 1;
		memmove(b, b + 1, n);
		fix_record(b, n);
	} else if (size && data[0] == 2) {
		n = shape(data, size, b, cap);
		if (!n)
			return 0;
	}
	if (write_file(ckpt, b, n))
		abort();
	parse(b, n, &in);
	fz_what = "et_checkpoint_read_dir";
	check_read_dir();
	fz_what = "read-only table opens";
	check_tfiles();
	fz_what = "store open";
	refused = check_store();
	fz_what = "store open under the good record, after the input's";
	check_good_again(refused);
	restore();
	return 0;
}
