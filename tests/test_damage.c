/*
 * test_damage.c - damaged store files, through the public header only.
 *
 * A golden store (two tables, the second keyed with ids over all of u64
 * and some erased, its journal stamped by an expiry too long to expire
 * anything, and scored too past the first variant by a bound too large
 * to evict anything; three commits) is built once per variant:
 * a checkpoint, then flushed writes never committed and a crash; a clean
 * close after writes; a table left out of a later session's commits.
 * For every file it holds (CHECKPOINT, each .et, .et.log, .et.idx) and
 * each damage (a byte flipped at many offsets, truncated, 512 bytes
 * zeroed, deleted, its bytes appended to itself, the other table's file
 * of the kind copied over it), a fresh copy is damaged, then opened and
 * read in a child (et_store_open, et_table_open of each table, et_gather
 * of every row written and some never written). Either a call fails with
 * a code meant for that file's damage and a non-empty et_errdetail()
 * (naming the file for ET_ERECORD, ET_EJOURNAL, ET_EMISSING), or every
 * row reads bit for bit its committed value (rows whose data is damaged,
 * in the .et.log or the .et, may fail alone with ET_EBLOCKSUM); never
 * an open that succeeds and a row that reads anything else.
 * ET_DMG_FULL=1 flips every byte of each file's first and last 64 (and
 * of files up to 512 bytes).
 *
 * Named cases: files deleted; a journal's first committed batch damaged;
 * bytes after its last; two openers; a read-only reader beside a store.
 */
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "embtier.h"
#include "util.h"

#define NT	 2
#define ROWS	 6000
#define MAXDIM	 16
#define CHUNK	 256
#define MAXCASES 1024
#define NMARK	 50 /* rows 97 i of t0, written by the named cases */

static const struct et_table_params tparams[NT] = {
    {.rows = ROWS,
     .dim = 8,
     .dtype = ET_F32,
     .init = ET_INIT_UNIFORM,
     .seed = 11},
    {.dim = MAXDIM,
     .dtype = ET_F16,
     .optim = ET_OPT_ROWWISE_ADAGRAD,
     .init = ET_INIT_NORMAL,
     .seed = 12,
     .flags = ET_TABLE_KEYED},
};
static const char *const tnames[NT] = {"t0", "t1"};
enum { K_CKPT, K_ET, K_LOG, K_IDX, K_N };
static const char *const kinds[K_N] = {"CHECKPOINT", ".et", ".et.log",
				       ".et.idx"};

/* Tiny DDR: rows go to the logs during the sessions too. */
static struct et_store_config cfg(void)
{
	return (struct et_store_config){.ddr_bytes = 64 << 10, .ways = 4};
}

static uint64_t mix64(uint64_t z)
{
	z += 0x9e3779b97f4a7c15ULL;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* The id of row r of table t: t1 is keyed, its ids spread over u64 (a
 * bijection of r). */
static uint64_t id_of(int t, uint64_t r)
{
	return t == 1 ? mix64(r ^ 0x6b657965645f6964ULL) : r;
}

/* Set k of table t: a quarter of the rows; sets overlap. */
static bool in_set(int t, int k, uint64_t r)
{
	return mix64(r ^ mix64((uint64_t)(t * 16 + k + 1))) % 4 == 0;
}

static float val(int t, int k, uint64_t r, uint32_t c)
{
	uint64_t x = mix64((r * 65537 + c) ^ mix64((uint64_t)(t * 16 + k)));

	return (float)((int64_t)(x % 2001) - 1000) / 512.0f;
}

/* Writes set k of table t (odd sets as gradients, through the optimizer). */
static int write_set(et_store *s, int tid, int t, int k)
{
	static const struct et_update_params up = {.lr = 0.05f};
	uint32_t dim = tparams[t].dim;
	uint64_t ids[CHUNK];
	float v[CHUNK * MAXDIM];
	size_t n = 0;
	int ret = 0;

	for (uint64_t r = 0; r <= ROWS && !ret; r++) {
		if (r < ROWS && in_set(t, k, r)) {
			for (uint32_t c = 0; c < dim; c++)
				v[n * dim + c] = val(t, k, r, c);
			ids[n++] = id_of(t, r);
		}
		if (n == CHUNK || (r == ROWS && n)) {
			ret = (k & 1) ? et_update(s, tid, ids, n, v, &up)
				      : et_write_rows(s, tid, ids, n, v);
			n = 0;
		}
	}
	return ret;
}

/* ------------------------------------------------------------- files */

/* Scratch directories, removed by the group's teardown. */
static const char *dirs[32];
static int ndirs;

static const char *scratch(const char *tag)
{
	assert_true(ndirs < 32);
	return dirs[ndirs++] = tu_path(tag);
}

/* Copies src to dst, keeping its holes. */
static void copy_file(const char *src, const char *dst)
{
	static char buf[1 << 20];
	int in = open(src, O_RDONLY), out;
	off_t size, pos = 0, data, end;

	assert_true(in >= 0);
	out = open(dst, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	assert_true(out >= 0);
	size = lseek(in, 0, SEEK_END);
	while (pos < size && (data = lseek(in, pos, SEEK_DATA)) >= 0) {
		end = lseek(in, data, SEEK_HOLE);
		for (pos = data; pos < end;) {
			size_t n = (size_t)(end - pos) < sizeof(buf)
				       ? (size_t)(end - pos)
				       : sizeof(buf);
			ssize_t r = pread(in, buf, n, pos);

			assert_true(r > 0 &&
				    pwrite(out, buf, (size_t)r, pos) == r);
			pos += r;
		}
	}
	assert_int_equal(ftruncate(out, size), 0);
	close(in);
	close(out);
}

/* dst becomes a copy of the flat directory src. */
static void copy_dir(const char *src, const char *dst)
{
	char a[PATH_MAX], b[PATH_MAX];
	struct dirent *de;
	DIR *d;

	tu_rmtree(dst);
	assert_int_equal(mkdir(dst, 0755), 0);
	assert_non_null(d = opendir(src));
	while ((de = readdir(d))) {
		if (de->d_name[0] == '.')
			continue;
		snprintf(a, sizeof(a), "%s/%s", src, de->d_name);
		snprintf(b, sizeof(b), "%s/%s", dst, de->d_name);
		copy_file(a, b);
	}
	closedir(d);
}

static unsigned char *slurp(const char *path, int64_t *size)
{
	unsigned char *p;

	*size = tu_file_size(path);
	assert_true(*size >= 0);
	p = tu_calloc((size_t)*size + 1, 1);
	assert_int_equal(tu_pread(path, 0, p, (size_t)*size), 0);
	return p;
}

/* tu_pwrite without its fsync (the library reads with O_DIRECT, which
 * writes dirty pages back first): a thousand cases are cheaper. */
static void poke(const char *path, int64_t off, const void *p, size_t n)
{
	int fd = open(path, O_WRONLY);

	assert_true(fd >= 0 && pwrite(fd, p, n, off) == (ssize_t)n);
	close(fd);
}

static void append(const char *path, const void *p, size_t n)
{
	poke(path, tu_file_size(path), p, n);
}

/* ---------------------------------------------------------- the golden */

enum { V_CKPT, V_CLOSE, V_LEFT_OUT, V_N };
static const char *const vnames[V_N] = {"checkpoint+crash", "clean-close",
					"table-left-out"};

struct golden {
	const char *dir;
	size_t n[NT];
	uint64_t *ids[NT]; /* ids checked (t0's ascending) */
	float *want[NT];   /* their committed values */
	int64_t *ends;	   /* 8 a table: the sizes of its .et.idx after each
			    * commit that grew it (batch ends), then 0 */
};
static struct golden goldens[V_N];

static void *shmem(size_t n)
{
	void *p = mmap(NULL, n, PROT_READ | PROT_WRITE,
		       MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	assert_true(p != MAP_FAILED);
	return p;
}

#define TRY(x)                                                                 \
	do {                                                                   \
		if (!ret && (ret = (x)))                                       \
			fprintf(stderr, "golden: %s: %s (%s)\n", #x,           \
				et_strerror(ret), et_errdetail());             \
	} while (0)
#define SNAP(t) TRY(et_gather(s, tid[t], g->ids[t], g->n[t], g->want[t]))
#define COMMIT(x)                                                              \
	do {                                                                   \
		TRY(x);                                                        \
		if (!ret)                                                      \
			note_ends(g);                                          \
	} while (0)

/* Notes where each journal ends after a commit: its batches' ends. */
static void note_ends(const struct golden *g)
{
	char path[PATH_MAX];

	for (int t = 0; t < NT; t++) {
		int64_t *e = g->ends + 8 * t, sz;
		int i = 0;

		snprintf(path, sizeof(path), "%s/%s.et.idx", g->dir, tnames[t]);
		sz = tu_file_size(path);
		while (i < 7 && e[i])
			i++;
		if (i < 7 && (!i || sz > e[i - 1])) /* the commit grew it */
			e[i] = sz;
	}
}

/* The sessions of variant v, in a child (V_CKPT ends in a crash). */
static int golden_sessions(int v, const struct golden *g)
{
	struct et_store_config c = cfg();
	et_store *s = NULL;
	int tid[NT], ret = 0;

	TRY(et_store_open(g->dir, &c, &s));
	for (int t = 0; t < NT; t++)
		TRY(et_table_create(s, tnames[t], &tparams[t], &tid[t]));
	/* expiry on the keyed table, too long for any id to expire: its
	 * journal is stamped (a stamp beside each entry; its first commit
	 * a snapshot), and stays so in sessions that do not set it again;
	 * in the variants after V_CKPT its bound is by score too, and its
	 * journal scored (a score beside each stamp) */
	TRY(et_key_policy_set(
	    s, tid[1],
	    &(struct et_key_policy){.expire_after = 1000,
				    .max_keys = 1u << 30,
				    .half_life = v == V_CKPT ? 0 : 4}));
	for (int k = 0; k < 2; k++) {
		for (int t = 0; t < NT; t++)
			TRY(write_set(s, tid[t], t, k));
		COMMIT(et_checkpoint(s, k ? "commit 2" : "commit 1", 8));
	}
	/* the keyed table forgets every fifth row of set 0: tombstones in
	 * the journal of the commits to come */
	for (uint64_t r = 0; r < ROWS; r += 5)
		if (in_set(1, 0, r)) {
			uint64_t id = id_of(1, r);

			TRY(et_erase(s, tid[1], &id, 1, NULL));
		}
	if (v == V_LEFT_OUT) { /* a session and two commits without t0 */
		SNAP(0);
		TRY(et_store_close(s));
		TRY(et_store_open(g->dir, &c, &s));
		TRY(et_table_open(s, tnames[1], &tparams[1], &tid[1]));
		TRY(write_set(s, tid[1], 1, 2));
		COMMIT(et_checkpoint(s, "commit 3", 8));
		TRY(write_set(s, tid[1], 1, 3));
		SNAP(1);
		COMMIT(et_store_close(s));
		return ret;
	}
	for (int t = 0; t < NT; t++) {
		TRY(write_set(s, tid[t], t, 2));
		SNAP(t);
	}
	if (v == V_CLOSE) {
		COMMIT(et_store_close(s));
		return ret;
	}
	COMMIT(et_checkpoint(s, "commit 3", 8));
	for (int t = 0; t < NT; t++) /* on disk, never committed */
		TRY(write_set(s, tid[t], t, 3));
	TRY(et_flush(s));
	return ret; /* and the process dies without closing */
}

static const struct golden *golden_get(int v)
{
	struct golden *g = &goldens[v];
	int status;
	pid_t pid;

	if (g->dir)
		return g;
	g->dir = scratch(vnames[v]);
	for (int t = 0; t < NT; t++) {
		g->ids[t] = tu_calloc(ROWS, sizeof(uint64_t));
		for (uint64_t r = 0; r < ROWS; r++) {
			bool in = r % 97 == 0; /* some never written */

			for (int k = 0; k < 4; k++)
				in = in || in_set(t, k, r);
			if (in)
				g->ids[t][g->n[t]++] = id_of(t, r);
		}
		g->want[t] = shmem(g->n[t] * tparams[t].dim * sizeof(float));
	}
	g->ends = shmem(8 * NT * sizeof(int64_t));
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0)
		_exit(golden_sessions(v, g) ? 1 : 0);
	assert_int_equal(waitpid(pid, &status, 0), pid);
	assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	{ /* the keyed journal begins with a stamped or scored snapshot */
		char path[PATH_MAX], magic[9] = {0};
		FILE *f;

		snprintf(path, sizeof(path), "%s/%s.et.idx", g->dir, tnames[1]);
		f = fopen(path, "rb");
		assert_non_null(f);
		assert_int_equal(fread(magic, 1, 8, f), 8);
		fclose(f);
		assert_string_equal(magic,
				    v == V_CKPT ? "ETIDXH03" : "ETIDXH04");
	}
	return g;
}

/* ------------------------------------------------- open, read, judge */

enum outcome {
	O_REFUSED,
	O_EXACT,
	O_BLOCKSUM_ROWS,
	O_SILENT_WRONG,
	O_BAD_CODE,  /* refused with a code not meant for this damage */
	O_NO_DETAIL, /* refused, et_errdetail() empty */
	O_NO_NAME,   /* ERECORD/EJOURNAL/EMISSING not naming the file */
	O_CRASH,     /* the checking process died or hung */
	O_N
};
static const char *const onames[O_N] = {
    "refused",	"exact",     "blocksum-rows", "SILENT-WRONG",
    "bad-code", "no-detail", "no-name",	      "crash"};
static const char *const calls[] = {"et_store_open", "et_table_open",
				    "et_gather"};

struct result {
	int outcome;
	char msg[400];
};

/* The codes a refusal may give, by the kind of the damaged file: the
 * record's and the journal's own (include/embtier.h); for a table file or
 * a log, any code for damage (a row's data, or a header). */
static bool allowed(int code, int kind)
{
	switch (code) {
	case ET_EMISSING:
		return true;
	case ET_ERECORD:
		return kind == K_CKPT;
	case ET_EJOURNAL:
		return kind != K_CKPT;
	case ET_EBLOCKSUM:
	case ET_EMAGIC:
	case ET_EVERSION:
	case ET_EHDRSUM:
	case ET_EHEADER:
	case ET_ETRUNC:
	case ET_EMISMATCH: /* the other table's .et, against expect */
		return kind == K_ET || kind == K_LOG;
	default:
		return false;
	}
}

/* Judges a call that failed with code, right after it failed. */
static void judge(struct result *r, int code, int call, const char *fname,
		  int kind)
{
	const char *d = et_errdetail();
	bool names =
	    code == ET_ERECORD || code == ET_EJOURNAL || code == ET_EMISSING;

	snprintf(r->msg, sizeof(r->msg), "%s -> %d %s, detail \"%s\"",
		 calls[call], code, et_strerror(code), d);
	r->outcome = !allowed(code, kind)	  ? O_BAD_CODE
		     : !d[0]			  ? O_NO_DETAIL
		     : names && !strstr(d, fname) ? O_NO_NAME
						  : O_REFUSED;
}

/* Gathers rows [lo, hi) of table t, in one call. If split, a range that
 * fails with ET_EBLOCKSUM is halved down to the rows that fail: those
 * are counted in *bad and taken as their committed value. */
static int gather(et_store *s, int tid, int t, const struct golden *g,
		  size_t lo, size_t hi, float *got, bool split, unsigned *bad)
{
	size_t dim = tparams[t].dim, mid = lo + (hi - lo) / 2;
	int ret = et_gather(s, tid, g->ids[t] + lo, hi - lo, got + lo * dim);

	if (ret != ET_EBLOCKSUM || !split)
		return ret;
	if (hi - lo > 1) {
		ret = gather(s, tid, t, g, lo, mid, got, split, bad);
		return ret ? ret
			   : gather(s, tid, t, g, mid, hi, got, split, bad);
	}
	++*bad;
	memcpy(got + lo * dim, g->want[t] + lo * dim, dim * sizeof(float));
	return 0;
}

/* Opens dir and every table and reads every row; fname: the damaged file
 * of kind kind ("", -1: none). Returns the store if it opened, for the
 * caller to close (a child exits instead: no close's syncs). No cmocka
 * here: it runs in a child. */
static et_store *check_store(const struct golden *g, const char *dir,
			     const char *fname, int kind, struct result *r)
{
	struct et_store_config c = cfg();
	unsigned wrong = 0, bad = 0;
	int tid[NT], ret, call = 0, wt = 0;
	uint64_t wrow = 0;
	et_store *s = NULL;

	ret = et_store_open(dir, &c, &s);
	call = ret ? 0 : 1;
	for (int t = 0; !ret && t < NT; t++)
		ret = et_table_open(s, tnames[t], &tparams[t], &tid[t]);
	call = ret ? call : 2;
	for (int t = 0; !ret && t < NT; t++) {
		size_t n = g->n[t], dim = tparams[t].dim;
		float *got = calloc(n * dim, sizeof(float));

		ret = gather(s, tid[t], t, g, 0, n, got,
			     kind == K_ET || kind == K_LOG, &bad);
		for (size_t i = 0; !ret && i < n; i++)
			if (memcmp(got + i * dim, g->want[t] + i * dim,
				   dim * sizeof(float)) &&
			    !wrong++) {
				wt = t;
				wrow = g->ids[t][i];
			}
		free(got);
	}
	if (ret) {
		judge(r, ret, call, fname, kind);
	} else if (wrong) {
		r->outcome = O_SILENT_WRONG;
		snprintf(r->msg, sizeof(r->msg),
			 "opened, %u rows wrong, first %s row %llu", wrong,
			 tnames[wt], (unsigned long long)wrow);
	} else {
		r->outcome = bad ? O_BLOCKSUM_ROWS : O_EXACT;
		snprintf(r->msg, sizeof(r->msg), "opened, %u rows EBLOCKSUM",
			 bad);
	}
	return s;
}

/* ---------------------------------------------------------- damages */

enum { D_NONE, D_FLIP, D_TRUNC, D_ZERO, D_DELETE, D_DUP_SELF, D_DUP_OTHER };

struct damage {
	int kind;
	int64_t off;
	uint8_t mask;
	char name[40];
};

/* Applies d to path; other: the other table's file of the kind. */
static void damage_apply(const char *path, const char *other,
			 const struct damage *d)
{
	static const char zeros[512];
	int64_t size = tu_file_size(path), n = size - d->off;
	unsigned char *p, b;

	if (d->kind == D_FLIP) {
		assert_int_equal(tu_pread(path, d->off, &b, 1), 0);
		b ^= d->mask;
		poke(path, d->off, &b, 1);
	}
	if (d->kind == D_TRUNC)
		assert_int_equal(tu_truncate(path, d->off), 0);
	if (d->kind == D_ZERO)
		poke(path, d->off, zeros, (size_t)(n < 512 ? n : 512));
	if (d->kind == D_DELETE)
		assert_int_equal(unlink(path), 0);
	if (d->kind == D_DUP_SELF) {
		p = slurp(path, &size);
		append(path, p, (size_t)size);
		free(p);
	}
	if (d->kind == D_DUP_OTHER)
		copy_file(other, path);
}

struct plan {
	struct damage d[MAXCASES];
	size_t n;
};

static void plan_add(struct plan *pl, int kind, int64_t off, int64_t size)
{
	static const char *const names[] = {
	    "",	      "flip@%lld^%#x",	  "truncate@%lld",     "zero-512@%lld",
	    "delete", "append-own-bytes", "other-table's-copy"};
	struct damage *d = &pl->d[pl->n];

	if (off < 0 || off >= size || pl->n == MAXCASES)
		return;
	for (size_t i = 0; i < pl->n; i++)
		if (pl->d[i].kind == kind && pl->d[i].off == off)
			return;
	*d = (struct damage){kind, off,
			     (uint8_t[]){0xff, 1, 0x80, 8}[pl->n % 4], ""};
	snprintf(d->name, sizeof(d->name), names[kind], (long long)off,
		 d->mask);
	pl->n++;
}

/* The damages of the golden's file at path: flips of every step-th byte
 * of its first 64, of every other of those of its last 64 and of the 64
 * before its trailing zeros (of all, step 1), of spread bytes between;
 * truncations (0, 1, ..., each batch's end in a journal); zeroed ranges;
 * deleted; appended to itself; the other table's copy. */
static void plan_file(const char *path, int kind, const int64_t *ends, int step,
		      int spread, struct plan *pl)
{
	int64_t size, ce, *e;
	unsigned char *p = slurp(path, &size);

	for (ce = size; ce > 0 && !p[ce - 1]; ce--)
		;
	free(p);
	pl->n = 0;
	for (int64_t o = 0; step == 1 && size <= 512 && o < size; o++)
		plan_add(pl, D_FLIP, o, size);
	for (int64_t i = 0; i < 64; i += step) {
		plan_add(pl, D_FLIP, i, size);
		if (step == 1 || i % (2 * step) == 0) { /* half as dense */
			plan_add(pl, D_FLIP, size - 1 - i, size);
			plan_add(pl, D_FLIP, ce - 1 - i, size);
		}
	}
	for (int i = 0; i < spread; i++)
		plan_add(pl, D_FLIP, ce * i / spread + i % 7, size);
	for (int i = 0; ce < size && i < spread / 4; i++)
		plan_add(pl, D_FLIP, ce + (size - ce) * i / (spread / 4), size);
	e = (int64_t[]){0, 1, 8, ce / 4, ce / 2, ce * 3 / 4, ce - 1, size - 1};
	for (int i = 0; i < 8; i++)
		plan_add(pl, D_TRUNC, e[i], size);
	for (int i = 0; kind == K_IDX && i < 8 && ends[i]; i++)
		plan_add(pl, D_TRUNC, ends[i], size); /* at a batch's end */
	e = (int64_t[]){0, ce / 3, ce / 2, ce - 512, size - 512};
	for (int i = 0; i < 5; i++)
		plan_add(pl, D_ZERO, e[i], size);
	plan_add(pl, D_DELETE, 0, size);
	plan_add(pl, D_DUP_SELF, 0, size);
	if (kind != K_CKPT)
		plan_add(pl, D_DUP_OTHER, 0, size);
}

/* A fresh copy of g in work, d applied to fname, checked in a child. */
static struct result run_case(const struct golden *g, const char *work,
			      const char *fname, int kind, const char *other,
			      const struct damage *d)
{
	static struct result *shres;
	char path[PATH_MAX];
	struct result r;
	int status;
	pid_t pid;

	if (!shres)
		shres = shmem(sizeof(*shres));
	copy_dir(g->dir, work);
	snprintf(path, sizeof(path), "%s/%s", work, fname);
	damage_apply(path, other, d);
	memset(shres, 0, sizeof(*shres));
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) {
		alarm(60);
		check_store(g, work, fname, kind, shres);
		_exit(0);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	r = *shres;
	if (!WIFEXITED(status) || WEXITSTATUS(status)) {
		r.outcome = O_CRASH;
		snprintf(r.msg, sizeof(r.msg), "status %#x", status);
	}
	return r;
}

/* Every damage of every file of a variant's golden store. */
static void test_damage(void **state)
{
	int v = *(int *)*state;
	const struct golden *g = golden_get(v);
	const char *work = scratch("work"), *e = getenv("ET_DMG_FULL");
	bool full = e && *e && *e != '0';
	int step = full ? 1 : v ? 8 : 2, spread = full ? 64 : v ? 16 : 32;
	unsigned st[K_N][O_N] = {{0}}, nbad[O_N] = {0}, bad = 0;
	char first[600] = "", path[PATH_MAX], other[PATH_MAX];
	static struct plan pl;
	struct result r;
	bool first_wrong = false;

	tu_require_uring();
	tu_require_direct();
	r = run_case(g, work, "", -1, NULL, &(struct damage){D_NONE});
	if (r.outcome != O_EXACT) /* the harness itself */
		fail_msg("%s undamaged: %s", vnames[v], r.msg);
	for (int f = 0; f < 1 + 3 * NT; f++) {
		int k = f ? 1 + (f - 1) % 3 : K_CKPT, t = f ? (f - 1) / 3 : 0;
		char fname[64];

		snprintf(fname, sizeof(fname), "%s%s", f ? tnames[t] : "",
			 kinds[k]);
		snprintf(path, sizeof(path), "%s/%s", g->dir, fname);
		snprintf(other, sizeof(other), "%s/%s%s", g->dir, tnames[1 - t],
			 kinds[k]);
		plan_file(path, k, g->ends + 8 * t, step, spread, &pl);
		for (size_t i = 0; i < pl.n; i++) {
			int o;

			r = run_case(g, work, fname, k, other, &pl.d[i]);
			o = r.outcome;
			st[k][o]++;
			if (o < O_SILENT_WRONG)
				continue;
			nbad[o]++;
			bad++;
			/* printed: 12 silent-wrong, 3 others, a file kind */
			if (st[k][o] > (o == O_SILENT_WRONG ? 12u : 3u))
				continue;
			print_message("  %s: %s %s: %s: %s\n", vnames[v], fname,
				      pl.d[i].name, onames[o], r.msg);
			if (!first[0] ||
			    (o == O_SILENT_WRONG && !first_wrong)) {
				snprintf(first, sizeof(first), "%s %s: %s: %s",
					 fname, pl.d[i].name, onames[o], r.msg);
				first_wrong = o == O_SILENT_WRONG;
			}
		}
	}
	for (int k = 0; k < K_N; k++) { /* a line a file kind */
		char line[400];
		unsigned tot = 0;
		size_t len;

		for (int o = 0; o < O_N; o++)
			tot += st[k][o];
		len = (size_t)snprintf(line, sizeof(line),
				       "%-16s %-10s %3u:", vnames[v], kinds[k],
				       tot);
		for (int o = 0; o < O_N; o++)
			len += (size_t)snprintf(line + len, sizeof(line) - len,
						" %s %u", onames[o], st[k][o]);
		print_message("%s\n", line);
	}
	if (bad)
		fail_msg("%s: %u bad cases (silent-wrong %u, bad-code %u, "
			 "no-detail %u, no-name %u, crash %u); %s",
			 vnames[v], bad, nbad[O_SILENT_WRONG], nbad[O_BAD_CODE],
			 nbad[O_NO_DETAIL], nbad[O_NO_NAME], nbad[O_CRASH],
			 first);
}

/* ------------------------------------------------- the named cases */

/* Opens dir and every table; on failure the store is closed, *call says
 * which call failed and detail (512 bytes) holds its et_errdetail(). */
static int open_all(const char *dir, et_store **out, int *tid, int *call,
		    char *detail)
{
	struct et_store_config c = cfg();
	int ret;

	*out = NULL;
	ret = et_store_open(dir, &c, out);
	*call = ret ? 0 : 1;
	for (int t = 0; !ret && t < NT; t++)
		ret = et_table_open(*out, tnames[t], &tparams[t], &tid[t]);
	snprintf(detail, 512, "%s", et_errdetail());
	if (ret) {
		et_store_close(*out);
		*out = NULL;
	}
	return ret;
}

/* Fails unless opening dir is refused with code, by a call up to last,
 * naming fname; returns the detail. */
static const char *expect_refused(const char *dir, int code, int last,
				  const char *fname, const char *what)
{
	static char detail[512];
	et_store *s;
	int tid[NT], call, ret = open_all(dir, &s, tid, &call, detail);

	et_store_close(s);
	if (ret != code || call > last || !strstr(detail, fname))
		fail_msg("%s: %s returned %d (%s), detail \"%s\"; want %s "
			 "to return %d (%s) naming %s",
			 what, calls[call], ret, et_strerror(ret), detail,
			 calls[last], code, et_strerror(code), fname);
	print_message("%s: \"%s\"\n", what, detail);
	return detail;
}

/* Fails unless every row of h reads its committed value from dir. */
static void expect_exact(const struct golden *h, const char *dir,
			 const char *what)
{
	struct result r;

	et_store_close(check_store(h, dir, "", -1, &r));
	if (r.outcome != O_EXACT)
		fail_msg("%s: %s: %s", what, onames[r.outcome], r.msg);
}

/* Rows 97 i of t0, i < NMARK, written with the values of tag k; and h, a
 * copy of g that expects them (free h->want[0]). */
static void marks_write(et_store *s, int tid, int k)
{
	uint64_t ids[NMARK];
	float v[NMARK * 8];

	for (int i = 0; i < NMARK; i++) {
		ids[i] = 97 * (uint64_t)i;
		for (uint32_t c = 0; c < 8; c++)
			v[i * 8 + c] = val(0, 8 + k, ids[i], c);
	}
	assert_int_equal(et_write_rows(s, tid, ids, NMARK, v), 0);
}

static void marks_expect(struct golden *h, const struct golden *g, int k)
{
	*h = *g;
	h->want[0] = tu_calloc(g->n[0] * 8, sizeof(float));
	memcpy(h->want[0], g->want[0], g->n[0] * 8 * sizeof(float));
	for (size_t j = 0; j < g->n[0]; j++)
		for (uint32_t c = 0; c < 8; c++)
			if (g->ids[0][j] % 97 == 0 && g->ids[0][j] < 97 * NMARK)
				h->want[0][j * 8 + c] =
				    val(0, 8 + k, g->ids[0][j], c);
}

/* Sizes of CHECKPOINT and every table's files (-errno if missing). */
static void sizes(const char *dir, int64_t *sz)
{
	char path[PATH_MAX];

	for (int f = 0; f < 1 + 3 * NT; f++) {
		snprintf(path, sizeof(path), "%s/%s%s", dir,
			 f ? tnames[(f - 1) / 3] : "",
			 kinds[f ? 1 + (f - 1) % 3 : K_CKPT]);
		sz[f] = tu_file_size(path);
	}
}

struct deletion {
	int v, last; /* the variant, the last call that may refuse */
	const char *file;
};

/* Each file deleted from a copy: refused with ET_EMISSING naming it, and
 * nothing else changes on disk. */
static void deletions(const struct deletion *cs, size_t n)
{
	int64_t before[1 + 3 * NT], after[1 + 3 * NT];
	const char *work = scratch("deleted");
	char path[PATH_MAX], what[96];

	tu_require_uring();
	tu_require_direct();
	for (size_t i = 0; i < n; i++) {
		copy_dir(golden_get(cs[i].v)->dir, work);
		snprintf(path, sizeof(path), "%s/%s", work, cs[i].file);
		assert_int_equal(unlink(path), 0);
		snprintf(what, sizeof(what), "%s: %s deleted", vnames[cs[i].v],
			 cs[i].file);
		sizes(work, before);
		expect_refused(work, ET_EMISSING, cs[i].last, cs[i].file, what);
		sizes(work, after);
		if (memcmp(before, after, sizeof(before)))
			fail_msg("%s: a refused open changed file sizes", what);
	}
}

/* 1. CHECKPOINT deleted beside journals that hold commits. */
static void test_checkpoint_deleted(void **state)
{
	static const struct deletion cs[] = {{V_CKPT, 0, "CHECKPOINT"},
					     {V_LEFT_OUT, 0, "CHECKPOINT"}};

	(void)state;
	deletions(cs, 2);
}

/* 2. A journal (refused by et_store_open), a log or a table file. */
static void test_table_file_deleted(void **state)
{
	static const struct deletion cs[] = {
	    {V_CKPT, 0, "t0.et.idx"}, {V_LEFT_OUT, 0, "t0.et.idx"},
	    {V_CKPT, 1, "t1.et.log"}, {V_LEFT_OUT, 1, "t0.et.log"},
	    {V_CKPT, 1, "t0.et"},     {V_CLOSE, 1, "t1.et"}};

	(void)state;
	deletions(cs, sizeof(cs) / sizeof(cs[0]));
}

/* Whether s holds a number of its own (not the digit of "t0"). */
static bool has_number(const char *s)
{
	for (size_t i = 0; s[i]; i++)
		if (s[i] >= '0' && s[i] <= '9' &&
		    (!i || !((s[i - 1] | 32) >= 'a' && (s[i - 1] | 32) <= 'z')))
			return true;
	return false;
}

/* 3. A byte of the first of three committed batches of a journal:
 * refused, naming the file and an offset; the journal is not cut. */
static void test_journal_first_batch_damaged(void **state)
{
	const struct golden *g = golden_get(V_CKPT);
	const char *work = scratch("jflip"), *d;
	char path[PATH_MAX], what[96];
	int64_t off, n0, n1;
	unsigned char *a, *b;

	(void)state;
	tu_require_uring();
	tu_require_direct();
	if (!g->ends[2] || g->ends[3])
		fail_msg("t0.et.idx: not three batches");
	for (int sub = 0; sub < 2; sub++) { /* its middle, its end */
		copy_dir(g->dir, work);
		snprintf(path, sizeof(path), "%s/t0.et.idx", work);
		off = sub ? g->ends[0] - 3 : g->ends[0] / 2;
		assert_int_equal(tu_flip_byte(path, off, 0x04), 0);
		a = slurp(path, &n0);
		snprintf(what, sizeof(what), "t0.et.idx flip@%lld",
			 (long long)off);
		d = expect_refused(work, ET_EJOURNAL, 1, "t0.et.idx", what);
		if (!has_number(d))
			fail_msg("%s: detail \"%s\" gives no offset", what, d);
		b = slurp(path, &n1);
		assert_int_equal(n1, n0); /* not cut */
		assert_memory_equal(a, b, (size_t)n0);
		free(a);
		free(b);
	}
}

/* 4. Bytes after a journal's last committed batch (garbage, a copy of an
 * earlier batch) are cut silently, and the next commit goes on. */
static void test_journal_tail_cut(void **state)
{
	char path[PATH_MAX], what[96], detail[512];
	unsigned char *p, junk[100];
	int tid[NT], call;
	struct golden h;
	et_store *s;
	int64_t n;

	(void)state;
	tu_require_uring();
	tu_require_direct();
	for (size_t i = 0; i < sizeof(junk); i++)
		junk[i] = (unsigned char)(mix64(i) | 1);
	for (int v = V_CKPT; v < V_N; v += 2) {
		const struct golden *g = golden_get(v);
		const char *work = scratch("jtail");
		const int64_t *e = g->ends; /* t0's */

		snprintf(path, sizeof(path), "%s/t0.et.idx", g->dir);
		p = slurp(path, &n);
		assert_true(e[1] > 0);
		/* garbage, then batch b - 1 of all but the last */
		for (int b = 0; b == 0 || e[b]; b++) {
			int64_t from = b > 1 ? e[b - 2] : 0;

			copy_dir(g->dir, work);
			snprintf(path, sizeof(path), "%s/t0.et.idx", work);
			if (b)
				append(path, p + from,
				       (size_t)(e[b - 1] - from));
			else
				append(path, junk, sizeof(junk));
			snprintf(what, sizeof(what), "%s: t0.et.idx + %s %d",
				 vnames[v], b ? "a copy of batch" : "garbage",
				 b);
			expect_exact(g, work, what);
			if (open_all(work, &s, tid, &call, detail))
				fail_msg("%s: reopen: %s", what, detail);
			marks_write(s, tid[0], 4);
			assert_int_equal(et_checkpoint(s, "next", 4), 0);
			assert_int_equal(et_store_close(s), 0);
			marks_expect(&h, g, 4);
			expect_exact(&h, work, what);
			free(h.want[0]);
		}
		free(p);
	}
}

/* 5. While a store holds its directory, another et_store_open of it,
 * here or in another process, is refused and changes nothing; the first
 * store goes on, and once it is closed the directory opens again. */
static void test_two_openers(void **state)
{
	static const char *const why[] = {"", "ET_ELOCKED without detail",
					  "opened", "another error"};
	const struct golden *g = golden_get(V_CLOSE);
	const char *work = scratch("twice");
	struct et_store_config c = cfg();
	int64_t before[1 + 3 * NT], after[1 + 3 * NT];
	int tid[NT], call, ret, status;
	et_store *s, *s2 = NULL;
	char detail[512];
	struct golden h;
	pid_t pid;

	(void)state;
	tu_require_uring();
	tu_require_direct();
	copy_dir(g->dir, work);
	assert_int_equal(open_all(work, &s, tid, &call, detail), 0);
	sizes(work, before);
	ret = et_store_open(work, &c, &s2);
	snprintf(detail, sizeof(detail), "%s", et_errdetail());
	if (!ret)
		et_store_close(s2);
	if (ret != ET_ELOCKED || !detail[0])
		fail_msg("second et_store_open in the process: %d (%s), "
			 "detail \"%s\"; want ET_ELOCKED with a detail",
			 ret, et_strerror(ret), detail);
	print_message("second opener: \"%s\"\n", detail);
	pid = fork();
	assert_true(pid >= 0);
	if (pid == 0) { /* no close: it could commit */
		ret = et_store_open(work, &c, &s2);
		_exit(ret == ET_ELOCKED ? !et_errdetail()[0] : ret ? 3 : 2);
	}
	assert_int_equal(waitpid(pid, &status, 0), pid);
	if (!WIFEXITED(status) || WEXITSTATUS(status))
		fail_msg("et_store_open in another process: %s",
			 WIFEXITED(status) ? why[WEXITSTATUS(status) & 3]
					   : "it died");
	sizes(work, after);
	assert_memory_equal(before, after, sizeof(before));
	marks_write(s, tid[0], 5);
	assert_int_equal(et_checkpoint(s, "after", 5), 0);
	assert_int_equal(et_store_close(s), 0);
	marks_expect(&h, g, 5);
	expect_exact(&h, work, "after the second opener");
	free(h.want[0]);
}

/* 6. et_tfile_open(ET_TFILE_RDONLY) of a live store's table sees its last
 * commit; a writable open is refused (ET_ELOCKED, include/embtier.h). */
static void test_reader_beside_store(void **state)
{
	const struct golden *g = golden_get(V_CKPT);
	const char *work = scratch("reader");
	float *got = tu_calloc(g->n[0] * 8, sizeof(float));
	char path[PATH_MAX], detail[512];
	int tid[NT], call, ret;
	struct golden h;
	et_tfile *tf;
	et_store *s;

	(void)state;
	tu_require_uring();
	tu_require_direct();
	copy_dir(g->dir, work);
	snprintf(path, sizeof(path), "%s/t0.et", work);
	assert_int_equal(open_all(work, &s, tid, &call, detail), 0);
	marks_write(s, tid[0], 6);
	assert_int_equal(et_checkpoint(s, "six", 3), 0);
	marks_write(s, tid[0], 7); /* on disk, not committed */
	assert_int_equal(et_flush(s), 0);
	for (int k = 6; k <= 7; k++) { /* beside the store, then after it */
		ret = et_tfile_open(path, ET_TFILE_RDONLY, &tf);
		if (ret)
			fail_msg("et_tfile_open(t0.et, RDONLY), tag %d: %d "
				 "(%s) \"%s\"",
				 k, ret, et_strerror(ret), et_errdetail());
		assert_int_equal(
		    et_tfile_read_rows(tf, g->ids[0], g->n[0], got, NULL), 0);
		et_tfile_close(tf);
		marks_expect(&h, g, k);
		assert_memory_equal(got, h.want[0],
				    g->n[0] * 8 * sizeof(float));
		free(h.want[0]);
		if (k == 7)
			break;
		tf = NULL;
		ret = et_tfile_open(path, 0, &tf);
		et_tfile_close(tf);
		if (ret != ET_ELOCKED)
			fail_msg("et_tfile_open(t0.et, 0) beside a live store: "
				 "%d (%s), want ET_ELOCKED",
				 ret, et_strerror(ret));
		assert_int_equal(et_store_close(s), 0); /* commits tag 7 */
	}
	free(got);
}

static int teardown(void **state)
{
	(void)state;
	for (int i = 0; i < ndirs; i++)
		tu_rmtree(dirs[i]);
	return 0;
}

int main(void)
{
	static int vs[V_N] = {V_CKPT, V_CLOSE, V_LEFT_OUT};
	const struct CMUnitTest tests[] = {
	    cmocka_unit_test(test_checkpoint_deleted),
	    cmocka_unit_test(test_table_file_deleted),
	    cmocka_unit_test(test_journal_first_batch_damaged),
	    cmocka_unit_test(test_journal_tail_cut),
	    cmocka_unit_test(test_two_openers),
	    cmocka_unit_test(test_reader_beside_store),
	    {"test_damage_checkpoint_crash", test_damage, NULL, NULL, &vs[0]},
	    {"test_damage_clean_close", test_damage, NULL, NULL, &vs[1]},
	    {"test_damage_table_left_out", test_damage, NULL, NULL, &vs[2]},
	};

	return cmocka_run_group_tests(tests, NULL, teardown);
}
