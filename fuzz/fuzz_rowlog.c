/*
 * fuzz_rowlog.c - libFuzzer target: a table's journal (NAME.et.idx) of
 * arbitrary bytes, under a good commit record. The oracle is "refused, or
 * exactly the last commit", not only memory safety.
 *
 * Once per process a store with one table is written through three
 * commits (rows A, et_checkpoint; rows B, et_checkpoint; rows C, a clean
 * close), so that its directory holds a good table file, row log, journal
 * (three batches, version 2) and commit record (version 3, naming the
 * journal's length and last batch). The value of every row of the table
 * (written or not) at the last commit is read back after a reopen, and
 * the directory's files are kept in memory.
 *
 * Each input replaces the journal; then
 *   1. et_tfile_open(ET_TFILE_RDONLY) of the table file, every row read;
 *   2. et_store_open + et_table_open (a writable open: it cuts the journal
 *      past what the record names), every row gathered, et_store_close;
 *   3. et_tfile_open(ET_TFILE_RDONLY) again, of what step 2 left.
 * Each open must fail with a negative code (the library's range, or a
 * negated errno), or succeed and then every row must read bit for bit its
 * value at the last commit; a read may fail with ET_EBLOCKSUM (a failing
 * batch read is split until the rows that fail are found alone, and every
 * other row must still read right; ET_ETRUNC, ET_ESHORTIO for a record
 * past the log's end, -EIO and -ENOMEM are noted once and allowed too).
 * Anything else - an open that succeeds with a row of another value, a
 * code outside those ranges or a positive one - is abort()ed with a
 * message saying which. Then
 *   4. the good journal and record are put back (the rest left as step
 *      2 left it) and the store opened again: every row must read
 *      exactly, every call returning 0 - unless step 2 took a rewritten
 *      journal (below), which may have let the store change its log:
 *      then refusals are allowed, still never another value.
 * After each input every file of the directory is put back as it was.
 *
 * An input whose first byte is 1 has that byte dropped; each whole batch
 * then gets its chain link (a version 2 batch names the checksum of the
 * one before) and its checksum set right, and the commit record is
 * rewritten to name the journal's whole batches (their length, the last
 * one's checksum; its header checksum set right), so that the replay
 * itself (rows, record numbers, generations, heads, segment sizes,
 * snapshots, commits) is reached. Such a journal is committed as far as
 * the library can tell: if its bytes are not the good journal's, a row
 * may read any value it held (its initializer's, one written, one of a
 * commit: the records are all in the log, each bound to its row and
 * place), never one it did not, nor another row's. Raw inputs leave the
 * record alone: with the batches chained, the record's checksum of the
 * last covers them all, and the oracle is the last commit exactly. Batch
 * layout: src/disk/journal.h (version 2 "ETIDXH02"/"ETIDXT02", stamped
 * "ETIDXH03" and scored "ETIDXH04" batches of it, version 1 read
 * too); both versions have the same framing. Seeds:
 * fuzz/corpus/rowlog/ (the good journal as written by the setup below, raw
 * and with the leading 1, and a torn one); ET_FUZZ_SEEDS=DIR makes the
 * setup write them there. ET_FUZZ_DIR chooses the scratch directory
 * (default /var/tmp); it is removed at exit and at an oracle abort
 * (ET_FUZZ_KEEP=1 keeps it then, for a look). ET_FUZZ_STATS=1 prints at
 * exit how many inputs each call took or refused, by code.
 *
 * Built with FUZZ_KEYED (fuzz_rowlog_keyed.c), the table is keyed: its
 * ROWS ids are spread over all of u64 (0 and UINT64_MAX among them), and
 * each session also erases some of them, so that the journal holds
 * tombstones (recno 0xffffffff) and an erased id's value at a commit is
 * its initializer's again; and its expiry is on (expire_after 1000: no
 * id expires) and its bound by count (max_keys 2^30, half_life 4: no id
 * leaves), so the batches are scored (a stamp and a score after each
 * entry). Seeds: fuzz/corpus/rowlog_keyed/ (scored-*: this setup's;
 * stamped-* and the others: those of earlier setups, stamped and
 * plain).
 */
#include <errno.h>

#include <xxhash.h>

#include "embtier.h"
#include "fuzz_store.h"

#define ROWS 1000
#define DIM  8

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char table[4096], idx[4096];
static uint64_t all_ids[ROWS];
static float got[ROWS * DIM];

/* Every value each row held: its initializer's, then for each session
 * (A, B, C) the value written and the value at the commit that ended it
 * (after its updates). hist[H_LAST] is the last commit. */
enum { H_INIT, H_WA, H_C1, H_WB, H_C2, H_WC, H_C3, NHIST, H_LAST = H_C3 };
static float hist[NHIST][ROWS * DIM];
static const char *const hname[NHIST] = {
    "its initializer's",    "the one written in session A",
    "commit 1's",	    "the one written in session B",
    "commit 2's",	    "the one written in session C",
    "commit 3's (the last)"};
static const float *const want = hist[H_LAST];

/* The good journal and commit record (version 3, one table: its entry
 * at byte 56, jlen at 56 + 64, jsum at 56 + 72), and the record named
 * ckpt. */
static const unsigned char *good_idx, *good_rec;
static size_t good_idx_len, good_rec_len;
static char ckpt[4096];

/* The input is a rewritten journal that the record was made to name (the
 * leading 1): a row may read any value it held. */
static bool forged;
static unsigned long forged_inputs, forged_rows;

/* Small caches: rows go to the log during the sessions, and an open per
 * input stays cheap. */
static const struct et_store_config cfg = {
    .ddr_bytes = 64 << 10, .ways = 4, .io_depth = 16};
#ifdef FUZZ_KEYED
#define TARGET "rowlog_keyed"
static const struct et_table_params tparams = {
    .dim = DIM, .init = ET_INIT_UNIFORM, .seed = 7, .flags = ET_TABLE_KEYED};

/* Id i of the table: 0, UINT64_MAX, then ids over all of u64 (mix64 is
 * a bijection, so they are distinct). */
static uint64_t id_of(uint64_t i)
{
	return i == 0 ? 0 : i == 1 ? UINT64_MAX : mix64(i);
}
#else
#define TARGET "rowlog"
static const struct et_table_params tparams = {
    .rows = ROWS, .dim = DIM, .init = ET_INIT_UNIFORM, .seed = 7};

static uint64_t id_of(uint64_t i)
{
	return i;
}
#endif

/* ---------------------------------------------------------- the oracle */

/* At exit under ET_FUZZ_STATS=1, before the tallies. */
static void print_forged(void)
{
	fprintf(stderr,
		"forged journals: %lu inputs; rows read at an earlier value "
		"(over all reads): %lu\n",
		forged_inputs, forged_rows);
}

/* Step 4 after a journal that was not forged, or refused: every call must
 * succeed. */
static bool must_take;

/* failed() of a call refused with a code the header allows. */
static void refused_call(const char *call, int ret)
{
	if (must_take)
		fail("%s returned %d (%s) under the good journal, after the "
		     "input's open (which refused it, or took a journal "
		     "whose committed bytes were the good ones): that open "
		     "changed the store",
		     call, ret, et_strerror(ret));
}

/* Which value of row i's history v is (NHIST: none). */
static int which(const float *v, size_t i)
{
	for (int h = NHIST - 1; h >= 0; h--)
		if (!memcmp(v, hist[h] + i * DIM, DIM * sizeof(float)))
			return h;
	return NHIST;
}

/* Compares rows [lo, lo + n) read into got with the last commit. */
static void compare(const char *call, size_t lo, size_t n)
{
	for (size_t i = lo; i < lo + n; i++) {
		const float *v = got + i * DIM;
		int h;

		if (!memcmp(v, want + i * DIM, DIM * sizeof(float)))
			continue;
		h = which(v, i);
		if (forged && h < NHIST) {
			forged_rows++;
			continue;
		}
		fail("%s returned 0 but row %zu reads %a %a ... where the "
		     "last commit has %a %a ...; that value is %s%s%s",
		     call, i, (double)v[0], (double)v[1], (double)want[i * DIM],
		     (double)want[i * DIM + 1],
		     h < NHIST ? "one the row held earlier, " : "",
		     h < NHIST ? hname[h] : "none the row ever held",
		     forged ? " (a rewritten journal, which the record was "
			      "made to name)"
			    : " (the record is the good one)");
	}
}

/* A read that fails: ET_EBLOCKSUM is the code for a bad record; a record
 * the file does not reach (ET_ETRUNC, ET_ESHORTIO) or the machine (-EIO,
 * -ENOMEM) are refusals too, noted once each; anything else is not. */
static void read_failed(const char *call, size_t lo, size_t n, int ret)
{
	static const int other[] = {ET_ETRUNC, ET_ESHORTIO, -EIO, -ENOMEM};
	static bool noted[4];

	tally(call, ret);
	if (ret == ET_EBLOCKSUM)
		return;
	for (int k = 0; k < 4; k++) {
		if (ret != other[k])
			continue;
		if (!noted[k])
			fprintf(stderr,
				"\nfuzz_" TARGET " note (%s): %s of rows [%zu, "
				"%zu) refused with %d (%s), not "
				"ET_EBLOCKSUM (first such input)\n",
				fz_what, call, lo, lo + n, ret,
				et_strerror(ret));
		noted[k] = true;
		return;
	}
	fail("%s of rows [%zu, %zu) returned %d (%s): neither 0 nor a code "
	     "for a damaged record",
	     call, lo, lo + n, ret, et_strerror(ret));
}

/* Reads rows [lo, lo + n); a batch failing with ET_EBLOCKSUM is split
 * until the rows that fail stand alone. */
static void check_rows(const char *call, read_fn rd, void *h, int t, size_t lo,
		       size_t n)
{
	int ret = rd(h, t, all_ids + lo, n, got + lo * DIM);

	if (!ret) {
		tally(call, n == ROWS ? 0 : 1); /* 1: after a split */
		compare(call, lo, n);
		return;
	}
	if (must_take)
		fail("%s of rows [%zu, %zu) returned %d (%s) under the good "
		     "journal, after the input's open (which refused it, or "
		     "took a journal whose committed bytes were the good "
		     "ones): that open changed the log",
		     call, lo, lo + n, ret, et_strerror(ret));
	read_failed(call, lo, n, ret);
	if (n == 1)
		return; /* this row is refused alone: allowed */
	check_rows(call, rd, h, t, lo, n / 2);
	check_rows(call, rd, h, t, lo + n / 2, n - n / 2);
}

static void check_tfile(void)
{
	et_tfile *tf;
	int ret = et_tfile_open(table, ET_TFILE_RDONLY, &tf);

	if (failed("et_tfile_open", ret))
		return;
	check_rows("et_tfile_read_rows", tfile_read, tf, 0, 0, ROWS);
	et_tfile_close(tf);
}

/* Returns whether the store or the table was refused. */
static bool check_store(void)
{
	et_store *s;
	bool refused;
	int t, ret = et_store_open(fz_dir, &cfg, &s);

	if (failed("et_store_open", ret))
		return true;
	ret = et_table_open(s, "t", NULL, &t);
	refused = failed("et_table_open", ret);
	if (!refused)
		check_rows("et_gather", store_read, s, t, 0, ROWS);
	(void)failed("et_store_close", et_store_close(s));
	return refused;
}

/* Step 4: the good journal over what step 2 left. */
static void check_good_again(bool may_refuse)
{
	et_store *s;
	int t, ret;

	if (write_file(idx, good_idx, good_idx_len) ||
	    write_file(ckpt, good_rec, good_rec_len))
		abort();
	forged = false;
	must_take = !may_refuse;
	ret = et_store_open(fz_dir, &cfg, &s);
	if (failed("et_store_open", ret))
		return;
	ret = et_table_open(s, "t", NULL, &t);
	if (!failed("et_table_open", ret))
		check_rows("et_gather", store_read, s, t, 0, ROWS);
	(void)failed("et_store_close", et_store_close(s));
	must_take = false;
}

/* ----------------------------------------------------------- the setup */

/* Writes rows r with mix64(r ^ salt) % every == 0, values from salt;
 * updates (through the optimizer) every third of them. w: the history
 * entry of the values written (the rows not written keep the one
 * before). */
static int write_set(et_store *s, int t, uint64_t salt, unsigned every, int w)
{
	static const struct et_update_params up = {.lr = 0.25f};
	uint64_t ids[ROWS];
	float v[ROWS * DIM];
	size_t n = 0;
	int ret;

	memcpy(hist[w], hist[w - 1], sizeof(hist[w]));
	for (uint64_t r = 0; r < ROWS; r++) {
		if (mix64(r ^ salt) % every)
			continue;
		for (int c = 0; c < DIM; c++)
			v[n * DIM + c] = row_value(r, (uint64_t)c, salt);
		memcpy(hist[w] + r * DIM, v + n * DIM, DIM * sizeof(float));
		ids[n++] = id_of(r);
	}
	ret = et_write_rows(s, t, ids, n, v);
	if (!ret)
		ret = et_update(s, t, ids, n / 3, v, &up);
#ifdef FUZZ_KEYED
	/* erase some ids, written in this session or before: tombstones */
	n = 0;
	for (uint64_t r = 0; r < ROWS; r++)
		if (mix64(r ^ salt ^ 0x65726173ULL) % 6 == 0)
			ids[n++] = id_of(r);
	if (!ret)
		ret = et_erase(s, t, ids, n, NULL);
#endif
	/* the commit's values, as the store has them */
	if (!ret)
		ret = et_gather(s, t, all_ids, ROWS, hist[w + 1]);
	return ret;
}

static int setup(void)
{
	et_store *s;
	int t, ret;

	snprintf(table, sizeof(table), "%s/t.et", fz_dir);
	snprintf(idx, sizeof(idx), "%s/t.et.idx", fz_dir);
	snprintf(ckpt, sizeof(ckpt), "%s/CHECKPOINT", fz_dir);
	for (int i = 0; i < ROWS; i++)
		all_ids[i] = id_of((uint64_t)i);
	ret = et_store_open(fz_dir, &cfg, &s);
	if (ret)
		return ret;
	ret = et_table_create(s, "t", &tparams, &t);
#ifdef FUZZ_KEYED
	/* expiry on, too long to expire anything, and a bound by count too
	 * large to evict: the journal's batches are scored (a stamp and a
	 * score after each entry), its first a snapshot */
	if (!ret)
		ret = et_key_policy_set(
		    s, t,
		    &(struct et_key_policy){.expire_after = 1000,
					    .max_keys = 1u << 30,
					    .half_life = 4});
#endif
	if (!ret)
		ret = et_gather(s, t, all_ids, ROWS, hist[H_INIT]);
	if (!ret)
		ret = write_set(s, t, 1, 4, H_WA);
	if (!ret)
		ret = et_checkpoint(s, "one", 3);
	if (!ret)
		ret = write_set(s, t, 2, 3, H_WB);
	if (!ret)
		ret = et_checkpoint(s, "two", 3);
	if (!ret)
		ret = write_set(s, t, 3, 5, H_WC);
	if (et_store_close(s) && !ret) /* the third commit */
		ret = -1;
	if (ret)
		return ret;
	/* what the last commit holds, read back */
	ret = et_store_open(fz_dir, &cfg, &s);
	if (ret)
		return ret;
	ret = et_table_open(s, "t", NULL, &t);
	if (!ret)
		ret = et_gather(s, t, all_ids, ROWS, got);
	if (et_store_close(s) && !ret)
		ret = -1;
	if (ret || memcmp(got, want, sizeof(got)))
		return -1; /* a plain reopen is not exact: no point fuzzing */
	ret = snapshot();
	for (int i = 0; !ret && i < nfiles; i++) {
		if (!strcmp(files[i].name, "t.et.idx")) {
			good_idx = files[i].data;
			good_idx_len = files[i].size;
		}
		/* version 3: the table list from byte 56, one table */
		if (!strcmp(files[i].name, "CHECKPOINT") &&
		    files[i].size >= 56 + 96 &&
		    !memcmp(files[i].data, "ETCKPT03", 8) &&
		    le32(files[i].data + 28) == 1 &&
		    !strcmp((const char *)files[i].data + 56, "t")) {
			good_rec = files[i].data;
			good_rec_len = files[i].size;
		}
	}
	if (!ret && (!good_idx || !good_rec ||
		     le64(good_rec + 56 + 64) != good_idx_len))
		ret = -1; /* not the layout this target knows */
	return ret;
}

static void write_seeds(void)
{
	const char *sd = getenv("ET_FUZZ_SEEDS");
	const struct pfile *f = NULL;
	unsigned char *b;
	char p[4400];

	if (!sd)
		return;
	for (int i = 0; i < nfiles; i++)
		if (!strcmp(files[i].name, "t.et.idx"))
			f = &files[i];
	if (!f || !(b = malloc(f->size + 1)))
		return;
	snprintf(p, sizeof(p), "%s/journal-three-commits", sd);
	write_file(p, f->data, f->size);
	b[0] = 1;
	memcpy(b + 1, f->data, f->size);
	snprintf(p, sizeof(p), "%s/fixed-three-commits", sd);
	write_file(p, b, f->size + 1);
	snprintf(p, sizeof(p), "%s/journal-torn", sd);
	write_file(p, f->data, f->size - 100);
	free(b);
}

/* ------------------------------------------------------------ an input */

/*
 * Sets the chain link and checksum of every whole batch of the journal
 * buf (journal.h: header 32, its u64 at 24 the checksum of the batch
 * before in version 2; entries 16 each; trailer 40 ending in the XXH3-64
 * of the header, the entries and the trailer's first 32 bytes). *len gets
 * where the whole batches end, *sum the last one's checksum (0: none).
 */
static void fix_checksums(uint8_t *buf, size_t size, uint64_t *len,
			  uint64_t *sum)
{
	size_t off = 0;

	*sum = 0;
	while (off + 32 + 40 <= size) {
		uint64_t n = le64(buf + off + 16);
		/* a stamped batch's entries are 20 bytes, a scored one's 24 */
		size_t ent = !memcmp(buf + off, "ETIDXH04", 8)	 ? 24
			     : !memcmp(buf + off, "ETIDXH03", 8) ? 20
								 : 16,
		       t;

		if (n > (size - off - 72) / ent)
			break;
		t = off + 32 + (size_t)n * ent;
		if (!memcmp(buf + off, "ETIDXH02", 8) ||
		    !memcmp(buf + off, "ETIDXH03", 8) ||
		    !memcmp(buf + off, "ETIDXH04", 8))
			wr64(buf + off + 24, *sum);
		*sum = XXH3_64bits(buf + off, t + 32 - off);
		wr64(buf + t + 32, *sum);
		off = t + 40;
	}
	*len = off;
}

/* Writes the good record, made to name len bytes of journal ending in a
 * batch of checksum sum (its header checksum set right: the XXH3-64 of
 * bytes [0, 48) and of the table list, [56, 152)). */
static int name_journal(uint64_t len, uint64_t sum)
{
	static unsigned char r[4096];
	unsigned char h[48 + 96];

	if (good_rec_len > sizeof(r))
		return -1;
	memcpy(r, good_rec, good_rec_len);
	wr64(r + 56 + 64, len);
	wr64(r + 56 + 72, sum);
	memcpy(h, r, 48);
	memcpy(h + 48, r + 56, 96);
	wr64(r + 48, XXH3_64bits(h, sizeof(h)));
	return write_file(ckpt, r, good_rec_len);
}

/* Whether the fixup of the good journal gives it back, and the record
 * made to name it is the good one. */
static bool fixup_self_check(void)
{
	uint8_t *b = malloc(good_idx_len + 1);
	uint64_t len, sum;
	bool ok;

	if (!b)
		return false;
	memcpy(b, good_idx, good_idx_len);
	fix_checksums(b, good_idx_len, &len, &sum);
	ok = len == good_idx_len && !memcmp(b, good_idx, len) &&
	     !name_journal(len, sum);
	free(b);
	if (ok) {
		int fd = open(ckpt, O_RDONLY);

		ok = fd >= 0 && !pread_all(fd, scratch, good_rec_len, 0) &&
		     !memcmp(scratch, good_rec, good_rec_len);
		if (fd >= 0)
			close(fd);
	}
	return ok;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const struct fuzz_hooks hooks = {.stats = print_forged,
						.refused = refused_call};
	uint64_t len, sum;
	bool refused;
	int ret;

	if (fuzz_store_once(TARGET, &hooks, setup, write_seeds) &&
	    !fixup_self_check()) {
		fprintf(stderr,
			"fuzz_" TARGET ": the leading 1 does not give back "
			"the good journal and record: their layout "
			"changed?\n");
		abort();
	}
	if (size && data[0] == 1) {
		uint8_t *b = malloc(size);

		if (!b)
			return 0;
		memcpy(b, data + 1, size - 1);
		fix_checksums(b, size - 1, &len, &sum);
		forged = len != good_idx_len || memcmp(b, good_idx, len);
		ret = write_file(idx, b, size - 1);
		if (!ret)
			ret = name_journal(len, sum);
		free(b);
	} else {
		forged = false;
		ret = write_file(idx, data, size);
	}
	forged_inputs += forged;
	if (ret)
		abort();
	fz_what = "read-only open of the input";
	check_tfile();
	fz_what = "store open of the input";
	refused = check_store();
	fz_what = "read-only open after the store's open";
	check_tfile();
	fz_what = "store open under the good journal, after the input's";
	check_good_again(forged && !refused);
	restore();
	return 0;
}
