/*
 * reopen.c - embtier-bench reopen: how long a store takes to reopen when
 * its table's index journal (NAME.et.idx, docs/FORMAT.md) is one snapshot
 * batch, beside the same index written as ordinary journal batches.
 *
 * Two stores in a scratch directory, each one table of 4 x --rows rows
 * (dim 8, f32, SGD), both holding the same --rows distinct rows (ids
 * spread over the table, written in a random order):
 *
 *   batches   the rows written once, in 3 commits (et_checkpoint after
 *             each third): a journal of 3 ordinary batches;
 *   snapshot  every row rewritten and committed again and again until the
 *             journal outgrows max(64 MiB, twice the index) and a commit
 *             writes a snapshot batch instead: a journal of that one
 *             batch, 32 + 16 x rows + 40 bytes, its trailer's flag 1 set.
 *
 * Then, in the same process, --reps times each (alternating): et_store_open
 * + et_table_open + et_store_close, nothing written (so nothing committed),
 * timed; min and median per store and their ratio. The journal files are
 * read (their size, the last trailer) only to say which kind they are.
 * Everything else goes through embtier.h. The files are in the page cache:
 * the times are the replay's CPU work, not the disk's.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bench.h"
#include "cli.h"

#define RO_DIM	 8
#define RO_CHUNK 4096
#define RO_JHDR	 32 /* journal batch header, entry, trailer bytes */
#define RO_JENT	 16
#define RO_JTRL	 40
/* journal bytes past which a commit may write a snapshot */
#define RO_SNAP_AT (64ULL << 20)

struct ro_store {
	const char *name; /* "batches" or "snapshot" */
	char dir[4096];
	char idx[4200]; /* dir/t.et.idx */
	uint32_t commits;
	double build_s;
	uint64_t jbytes; /* journal bytes after the last commit */
	uint64_t jafter; /* the same after the timed reopens */
	bool snapshot;	 /* the journal is one snapshot batch of every row */
	double *open_s;	 /* per rep: store open + table open + close */
	double *table_s; /* per rep: the table open alone */
	double min_s, med_s, tmin_s, tmed_s;
};

static uint64_t splitmix(uint64_t *x)
{
	uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* n distinct ids of [0, 4n), one in each run of 4, in a random order. */
static uint64_t *make_ids(uint64_t n, uint64_t seed)
{
	uint64_t *ids = malloc(n * sizeof(*ids));
	uint64_t x = seed;

	if (!ids)
		return NULL;
	for (uint64_t i = 0; i < n; i++)
		ids[i] = 4 * i + (splitmix(&x) & 3);
	for (uint64_t i = n - 1; i > 0; i--) {
		uint64_t j = splitmix(&x) % (i + 1), t = ids[i];

		ids[i] = ids[j];
		ids[j] = t;
	}
	return ids;
}

/* et_write_rows of ids[from, to), every value of the round's own. */
static int write_span(et_store *s, int t, const uint64_t *ids, uint64_t from,
		      uint64_t to, uint32_t round, float *v)
{
	int ret = 0;

	for (uint64_t i = from; i < to && !ret && !bench_stop; i += RO_CHUNK) {
		size_t n = to - i < RO_CHUNK ? (size_t)(to - i) : RO_CHUNK;

		for (size_t k = 0; k < n * RO_DIM; k++)
			v[k] = (float)round + (float)((i + k) % 101) * 0.01f;
		ret = et_write_rows(s, t, ids + i, n, v);
	}
	return ret ? ret : bench_stop ? -EINTR : 0;
}

/* The journal's size, and whether it is one snapshot batch of rows
 * entries: its size, and the flags of its trailer ("ETIDXT01" or "02":
 * both put them at byte 16). */
static int journal_kind(const char *path, uint64_t rows, uint64_t *bytes,
			bool *snapshot)
{
	unsigned char t[RO_JTRL];
	struct stat st;
	int fd, ret = 0;

	*bytes = 0;
	*snapshot = false;
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st)) {
		ret = -errno;
	} else {
		*bytes = (uint64_t)st.st_size;
		if (*bytes == RO_JHDR + rows * RO_JENT + RO_JTRL &&
		    pread(fd, t, RO_JTRL, st.st_size - RO_JTRL) == RO_JTRL &&
		    !memcmp(t, "ETIDXT0", 7)) /* version 01 or 02 */
			*snapshot = (t[16] | t[17] << 8 | t[18] << 16 |
				     (uint32_t)t[19] << 24) &
				    1;
	}
	close(fd);
	return ret;
}

/* Creates store st->dir with table "t" and commits the rows: 3 commits of
 * a third each (batches), or full rewrites until a commit writes a
 * snapshot (at most max_rounds). */
static int build(struct ro_store *st, const struct et_store_config *c,
		 const uint64_t *ids, uint64_t n, bool snap,
		 uint32_t max_rounds, bool quiet)
{
	struct et_table_params p = {.rows = 4 * n,
				    .dim = RO_DIM,
				    .dtype = ET_F32,
				    .optim = ET_OPT_SGD,
				    .init = ET_INIT_UNIFORM,
				    .seed = 1};
	float *v = malloc((size_t)RO_CHUNK * RO_DIM * sizeof(float));
	et_store *s = NULL;
	double t0 = now_s();
	int t = -1, ret;

	if (!v)
		return -ENOMEM;
	ret = et_store_open(st->dir, c, &s);
	if (!ret)
		ret = et_table_create(s, "t", &p, &t);
	if (!snap) {
		for (uint32_t k = 0; k < 3 && !ret; k++) {
			ret = write_span(s, t, ids, n * k / 3, n * (k + 1) / 3,
					 0, v);
			if (!ret)
				ret = et_checkpoint(s, NULL, 0);
			st->commits += !ret;
		}
	} else {
		for (uint32_t r = 0; r < max_rounds && !ret; r++) {
			ret = write_span(s, t, ids, 0, n, r, v);
			if (!ret)
				ret = et_checkpoint(s, NULL, 0);
			if (ret)
				break;
			st->commits++;
			ret = journal_kind(st->idx, n, &st->jbytes,
					   &st->snapshot);
			if (!ret && !quiet && (r % 8 == 7 || st->snapshot))
				cli_note("snapshot store: commit %u, journal "
					 "%.1f MB%s",
					 st->commits, (double)st->jbytes / 1e6,
					 st->snapshot ? " (a snapshot)" : "");
			if (st->snapshot)
				break;
		}
	}
	ret = ret ? (et_store_close(s), ret) : et_store_close(s);
	if (!ret)
		ret = journal_kind(st->idx, n, &st->jbytes, &st->snapshot);
	st->build_s = now_s() - t0;
	free(v);
	return ret;
}

/* One timed reopen: store open, table open, close. */
static int reopen_once(struct ro_store *st, const struct et_store_config *c,
		       uint32_t rep)
{
	et_store *s = NULL;
	double t0, t1;
	int t, ret;

	t0 = now_s();
	ret = et_store_open(st->dir, c, &s);
	t1 = now_s();
	if (!ret)
		ret = et_table_open(s, "t", NULL, &t);
	st->table_s[rep] = now_s() - t1;
	ret = ret ? (et_store_close(s), ret) : et_store_close(s);
	st->open_s[rep] = now_s() - t0;
	return ret;
}

static void summarize(struct ro_store *st, uint32_t reps)
{
	double *a = malloc(2 * reps * sizeof(*a));

	if (!a)
		return;
	memcpy(a, st->open_s, reps * sizeof(*a));
	memcpy(a + reps, st->table_s, reps * sizeof(*a));
	st->med_s = percentile(a, reps, 50); /* sorts */
	st->min_s = a[0];
	st->tmed_s = percentile(a + reps, reps, 50);
	st->tmin_s = a[reps];
	free(a);
}

static double ratio(double a, double b)
{
	return b > 0 ? a / b : 0;
}

static void ro_print(const struct bench_opts *o, uint64_t n, uint32_t reps,
		     const struct ro_store *b, const struct ro_store *sn)
{
	const struct ro_store *x[2] = {b, sn};

	if (o->format == FMT_JSON) {
		printf("{\"rows\":%" PRIu64 ",\"table_rows\":%" PRIu64
		       ",\"dim\":%d,\"reps\":%u,\"stores\":[",
		       n, 4 * n, RO_DIM, reps);
		for (int i = 0; i < 2; i++)
			printf("%s{\"store\":\"%s\",\"commits\":%u,"
			       "\"build_s\":%.6f,\"journal_bytes\":%" PRIu64
			       ",\"journal_bytes_after\":%" PRIu64
			       ",\"snapshot\":%s,\"reopen_min_s\":%.6f,"
			       "\"reopen_median_s\":%.6f,"
			       "\"table_open_min_s\":%.6f,"
			       "\"table_open_median_s\":%.6f}",
			       i ? "," : "", x[i]->name, x[i]->commits,
			       x[i]->build_s, x[i]->jbytes, x[i]->jafter,
			       x[i]->snapshot ? "true" : "false", x[i]->min_s,
			       x[i]->med_s, x[i]->tmin_s, x[i]->tmed_s);
		printf("],\"ratio_min\":%.6f,\"ratio_median\":%.6f}\n",
		       ratio(sn->min_s, b->min_s), ratio(sn->med_s, b->med_s));
		return;
	}
	if (o->format == FMT_CSV) {
		printf("store,rows,reps,commits,journal_bytes,snapshot,"
		       "reopen_min_s,reopen_median_s,table_open_min_s,"
		       "table_open_median_s,ratio_min,ratio_median\n");
		for (int i = 0; i < 2; i++)
			printf("%s,%" PRIu64 ",%u,%u,%" PRIu64
			       ",%d,%.6f,%.6f,%.6f,%.6f,%.4f,%.4f\n",
			       x[i]->name, n, reps, x[i]->commits, x[i]->jbytes,
			       x[i]->snapshot, x[i]->min_s, x[i]->med_s,
			       x[i]->tmin_s, x[i]->tmed_s,
			       ratio(x[i]->min_s, b->min_s),
			       ratio(x[i]->med_s, b->med_s));
		return;
	}
	printf("store:      1 table of %" PRIu64 " rows x dim %d f32 (SGD), "
	       "%" PRIu64 " distinct rows written; %u reopens each\n",
	       4 * n, RO_DIM, n, reps);
	for (int i = 0; i < 2; i++)
		printf("%-11s %u commits in %.2f s, journal %" PRIu64
		       " bytes (%s)\n"
		       "            reopen min %.4f s, median %.4f s "
		       "(table open min %.4f s, median %.4f s)\n",
		       i ? "snapshot:" : "batches:", x[i]->commits,
		       x[i]->build_s, x[i]->jbytes,
		       x[i]->snapshot ? "one snapshot batch"
		       : i	      ? "NOT a snapshot"
				      : "ordinary batches",
		       x[i]->min_s, x[i]->med_s, x[i]->tmin_s, x[i]->tmed_s);
	printf("ratio:      snapshot / batches = %.2f (min), %.2f (median) "
	       "(goal: <= 2, snapshot < 1 s)\n",
	       ratio(sn->min_s, b->min_s), ratio(sn->med_s, b->med_s));
}

int cmd_reopen(const struct bench_opts *o)
{
	struct et_store_config c = {.ddr_bytes = o->ddr_bytes,
				    .ways = o->ways,
				    .io_depth = o->io_depth};
	struct ro_store st[2] = {{.name = "batches"}, {.name = "snapshot"}};
	uint64_t n = o->wl.rows, bsize, thresh, *ids = NULL;
	uint32_t reps = o->reps ? o->reps : 3, expect, max_rounds;
	const char *base = o->dir, *td = getenv("TMPDIR");
	char tmpl[4096], *dir = NULL;
	int ret = 0;

	if (n > ET_MAX_ROWS / 4) {
		cli_usage_error("reopen: --rows %" PRIu64 " > %" PRIu64
				" (the table has 4 x rows)",
				n, (uint64_t)(ET_MAX_ROWS / 4));
		return CLI_EXIT_USAGE;
	}
	/* Full rewrites until the journal is past both thresholds, then the
	 * commit that writes the snapshot; a few more in case. */
	bsize = RO_JHDR + n * RO_JENT + RO_JTRL;
	thresh = RO_SNAP_AT > 2 * bsize ? RO_SNAP_AT : 2 * bsize;
	expect = (uint32_t)(thresh / bsize) + 2;
	max_rounds = expect + 3;
	if (!base)
		base = td && *td ? td : "/var/tmp";
	if (mkdir(base, 0755) && errno != EEXIST) {
		cli_error("%s: %s", base, strerror(errno));
		return CLI_EXIT_FAIL;
	}
	snprintf(tmpl, sizeof(tmpl), "%s/embtier-reopen.XXXXXX", base);
	dir = mkdtemp(tmpl);
	if (!dir) {
		cli_error("mkdtemp %s: %s", tmpl, strerror(errno));
		return CLI_EXIT_FAIL;
	}
	for (int i = 0; i < 2; i++) {
		snprintf(st[i].dir, sizeof(st[i].dir), "%s/%s", dir,
			 st[i].name);
		snprintf(st[i].idx, sizeof(st[i].idx), "%s/t.et.idx",
			 st[i].dir);
		st[i].open_s = calloc(reps, sizeof(double));
		st[i].table_s = calloc(reps, sizeof(double));
		if (!st[i].open_s || !st[i].table_s)
			ret = -ENOMEM;
	}
	ids = ret ? NULL : make_ids(n, o->wl.seed);
	if (!ret && !ids)
		ret = -ENOMEM;
	if (!ret) {
		if (!o->quiet)
			cli_note("batches store: %" PRIu64
				 " rows in 3 commits (%s)",
				 n, st[0].dir);
		ret = build(&st[0], &c, ids, n, false, 0, o->quiet);
	}
	if (!ret) {
		if (!o->quiet)
			cli_note("snapshot store: %" PRIu64
				 " rows rewritten per commit until a snapshot "
				 "(about %u commits)",
				 n, expect);
		ret = build(&st[1], &c, ids, n, true, max_rounds, o->quiet);
	}
	if (ret)
		goto fail;
	if (!st[1].snapshot)
		cli_note("warning: the snapshot store's journal is %" PRIu64
			 " bytes after %u commits, not one snapshot batch of "
			 "%" PRIu64 " bytes: no snapshot happened",
			 st[1].jbytes, st[1].commits, bsize);
	if (!o->quiet)
		cli_note("timing %u reopens of each store", reps);
	for (uint32_t r = 0; r < reps && !ret; r++)
		for (int i = 0; i < 2 && !ret; i++) {
			ret = bench_stop ? -EINTR : reopen_once(&st[i], &c, r);
			if (!ret && !o->quiet)
				cli_note("reopen %u of %s: %.4f s", r + 1,
					 st[i].name, st[i].open_s[r]);
		}
	if (ret)
		goto fail;
	for (int i = 0; i < 2; i++) {
		bool snap;

		summarize(&st[i], reps);
		ret = journal_kind(st[i].idx, n, &st[i].jafter, &snap);
		if (ret)
			goto fail;
		if (st[i].jafter != st[i].jbytes)
			cli_note("warning: the %s store's journal changed "
				 "from %" PRIu64 " to %" PRIu64
				 " bytes over the reopens",
				 st[i].name, st[i].jbytes, st[i].jafter);
	}
	ro_print(o, n, reps, &st[0], &st[1]);
	ret = 0;
fail:
	if (ret)
		cli_error("%s: %s", dir,
			  ret == -EINTR ? "interrupted" : et_strerror(ret));
	rm_tree(dir);
	free(ids);
	for (int i = 0; i < 2; i++) {
		free(st[i].open_s);
		free(st[i].table_s);
	}
	return ret ? CLI_EXIT_FAIL : CLI_EXIT_OK;
}
