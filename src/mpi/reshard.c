/*
 * reshard.c - a sharded store made again at another rank count (or with
 * other plans) from the last global checkpoint of an old one.
 *
 * The old store is only read: its global record and each shard's commit
 * record (et_checkpoint_read_dir), and its table files, opened read-only
 * (et_tfile_open lists and reads a store's file as of the store's last
 * commit). Every new rank copies the rows it will own: for each table, it
 * opens the old shards whose rows meet its own range, lists their
 * materialized rows (et_tfile_rows) in that range, reads them with their
 * optimizer state and writes them into its new store (et_write_rows_state:
 * through the caches to the row log, in large sequential writes). Rows never
 * written stay lazy in both: the initializer is a function of the global
 * row, so they read the same. Nothing is made before every check has
 * passed on every rank (the caller's check of the old dense states
 * included), but one: that no old shard committed while it was read,
 * checked after the copy. Nothing is committed at all: the caller commits
 * the new store with etm_checkpoint once it has made its dense state.
 *
 * A plain store (et_store_open on src itself: no global record, a commit
 * record of its own) is read as a sharded store of one rank whose dense
 * state has no shard header.
 *
 * Which old shard holds a row: a table whose file is in one shard only
 * (table-wise, or one rank) has all its rows there; a table in several
 * shards was row-wise, and shard r holds the rows of its range at the old
 * rank count (rows outside a shard's range are never written there).
 *
 * Keyed tables. Ranges are of virtual buckets (ETM_KEY_BUCKETS, the same
 * at any rank count) rather than rows: old shard r of a row-wise keyed
 * table holds the keys of its bucket range, and a new rank reads each old
 * shard whose range meets its own, lists all its stored keys
 * (et_tfile_rows: ascending keys, in no bucket order) and keeps those of
 * its buckets. A bucket is owned whole at either count, so whole buckets
 * move.
 */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "etm_impl.h"

#define MAX_TABLES  4096
#define CHUNK_BYTES (8u << 20) /* rows copied per round, at most */

struct rs {
	MPI_Comm comm;
	int rank, nranks; /* new */
	int old;	  /* old rank count */
	bool plain;	  /* src is one plain store, not sharded */
	const char *src, *dir;
	const struct etm_table_spec *spec;
	int n;
	int *owner;	  /* new table-wise owners */
	uint64_t *commit; /* [old]: each shard's commit, where checked */
	/* copy buffers, grown as tables need and kept (fresh pages cost a
	 * fault each) */
	uint64_t *ids;
	float *vals, *state;
	size_t ids_cap, vals_cap, state_cap; /* elements */
	uint8_t *holds; /* [n x old]: shard r has table t's file */
};

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/*
 * The same verdict on every rank: the most negative ret, with the
 * et_errdetail() of the lowest rank that has it. Details name src, dir
 * and the shards by those words, never by path (as et_errdetail's do).
 */
static int agree(struct rs *x, int ret)
{
	return etm_agree_comm(x->comm, ret);
}

/* ret, with what the failed call said (its detail, else its message) led
 * by what was being done. */
static int failed(int ret, const char *what)
{
	struct etm_detail d;

	etm_detail_save(&d);
	return et_error_set(ret, "%s: %s", what,
			    d.s[0] ? d.s : etm_strerror(ret));
}

/* Old shard r's directory, or its file of table name; a plain store is
 * its own one shard. */
static int shard_path(const struct rs *x, char *buf, size_t cap, int r,
		      const char *name)
{
	int k;

	if (x->plain)
		k = name ? snprintf(buf, cap, "%s/%s.et", x->src, name)
			 : snprintf(buf, cap, "%s", x->src);
	else
		k = name ? snprintf(buf, cap, "%s/rank-%d/%s.et", x->src, r,
				    name)
			 : snprintf(buf, cap, "%s/rank-%d", x->src, r);
	return k < 0 || (size_t)k >= cap ? -ENAMETOOLONG : 0;
}

/* 0 if dir does not exist or is an empty directory. */
static int check_fresh(struct rs *x)
{
	struct dirent *e;
	struct stat st;
	DIR *d;
	int ret = 0;

	if (stat(x->dir, &st))
		return errno == ENOENT
			   ? 0
			   : et_error_set(-errno, "dir: %s", strerror(errno));
	d = opendir(x->dir);
	if (!d)
		return et_error_set(-errno, "dir: %s", strerror(errno));
	while ((e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			ret = -EEXIST;
	closedir(d);
	if (ret)
		et_error_set(ret, "dir is not empty: a reshard makes a new "
				  "sharded store (remove what a failed one "
				  "left)");
	return ret;
}

/* Whether old shard r committed again since check_shard read it: a run
 * still using the old store. */
static int check_still(struct rs *x, int r)
{
	struct et_checkpoint_info ci;
	char sub[4200];
	int ret = shard_path(x, sub, sizeof(sub), r, NULL);

	if (!ret)
		ret = et_checkpoint_read_dir(sub, &ci, NULL, NULL);
	if (!ret && ci.commit != x->commit[r])
		ret = ET_EMISMATCH;
	if (ret)
		et_error_set(ret,
			     "rank %d's store of src changed while it was "
			     "being read: is a run still using it?",
			     r);
	return ret;
}

/* Old shard r's commit record: it must hold exactly the global step. */
static int check_shard(struct rs *x, int r, uint64_t step, void **dense,
		       size_t *len)
{
	struct et_checkpoint_info ci;
	struct shard_hdr h;
	char sub[4200];
	void *blob = NULL;
	size_t blen = 0;
	int ret = shard_path(x, sub, sizeof(sub), r, NULL);

	if (!ret)
		ret = et_checkpoint_read_dir(sub, &ci, &blob, &blen);
	if (ret) {
		char what[64];

		snprintf(what, sizeof(what), "src's rank %d", r);
		return failed(ret, what);
	}
	memset(&h, 0, sizeof(h));
	if (blen >= sizeof(h))
		memcpy(&h, blob, sizeof(h));
	if (x->plain) { /* no shard header: all of it is the caller's */
		memcpy(h.magic, SHARD_MAGIC, 8);
		h.rank = 0;
		h.nranks = 1;
		h.step = step;
	}
	if (!ci.id) {
		ret = et_error_set(ETM_ETORN,
				   "src's rank %d has no checkpoint but the "
				   "global record says step %llu",
				   r, (unsigned long long)step);
	} else if (memcmp(h.magic, SHARD_MAGIC, 8) || h.rank != (uint32_t)r ||
		   h.nranks != (uint32_t)x->old) {
		ret = et_error_set(ET_EHEADER,
				   "src's rank %d: its checkpoint is not rank "
				   "%d of %d of a sharded store",
				   r, r, x->old);
	} else if (h.step != step) {
		ret = et_error_set(ETM_ETORN,
				   "src's rank %d committed step %llu but the "
				   "last global checkpoint is step %llu: a "
				   "crash came between the ranks' commits",
				   r, (unsigned long long)h.step,
				   (unsigned long long)step);
	} else if (ci.tables_moved) {
		ret = et_error_set(ETM_ETORN,
				   "src's rank %d was closed cleanly after "
				   "step %llu without a checkpoint: its tables "
				   "are newer than its dense state",
				   r, (unsigned long long)step);
	}
	if (ret) {
		free(blob);
		return ret;
	}
	x->commit[r] = ci.commit;
	*len = blen - (x->plain ? 0 : sizeof(h));
	*dense = malloc(*len ? *len : 1);
	if (!*dense) {
		free(blob);
		return -ENOMEM;
	}
	memcpy(*dense, (char *)blob + (blen - *len), *len);
	free(blob);
	return 0;
}

/* Every rank gets every old rank's dense state, from rank r % N. */
static int share_dense(struct rs *x, struct etm_reshard_info *info)
{
	int ret = 0;

	for (int r = 0; r < x->old; r++) {
		int root = r % x->nranks;
		uint64_t len = info->len[r];

		MPI_Bcast(&len, 1, MPI_UINT64_T, root, x->comm);
		if (x->rank != root) {
			info->len[r] = len;
			info->dense[r] = malloc(len ? len : 1);
			if (!info->dense[r])
				ret = -ENOMEM;
		}
		if ((ret = agree(x, ret)))
			return ret;
		for (uint64_t off = 0; off < len;) {
			int k =
			    len - off > (1u << 30) ? 1 << 30 : (int)(len - off);

			MPI_Bcast((char *)info->dense[r] + off, k, MPI_BYTE,
				  root, x->comm);
			off += (uint64_t)k;
		}
	}
	return 0;
}

static bool keyed(const struct rs *x, int t)
{
	return (x->spec[t].p.flags & ET_TABLE_KEYED) != 0;
}

/* What table t's ranges cut: its rows, or a keyed table's buckets. */
static uint64_t units(const struct rs *x, int t)
{
	return keyed(x, t) ? ETM_KEY_BUCKETS : x->spec[t].p.rows;
}

/* The rows (keyed: buckets) of table t old shard r holds: [*lo, *hi). */
static void old_range(const struct rs *x, int t, int r, uint64_t *lo,
		      uint64_t *hi)
{
	uint64_t rows = units(x, t);
	int k = 0;

	for (int i = 0; i < x->old; i++)
		k += x->holds[(size_t)t * x->old + i];
	if (k == 1) {
		*lo = 0;
		*hi = rows;
	} else {
		*lo = etm_range_start(rows, r, x->old);
		*hi = etm_range_start(rows, r + 1, x->old);
	}
}

/* The rows (keyed: buckets) of table t this rank will own: [*lo, *hi),
 * empty if none. */
static void new_range(const struct rs *x, int t, uint64_t *lo, uint64_t *hi)
{
	uint64_t rows = units(x, t);

	if (x->spec[t].plan == ETM_TABLE_WISE) {
		*lo = 0;
		*hi = x->owner[t] == x->rank ? rows : 0;
	} else {
		*lo = etm_range_start(rows, x->rank, x->nranks);
		*hi = etm_range_start(rows, x->rank + 1, x->nranks);
	}
}

/* Which old shards have a file of each table; every table needs one. */
static int find_tables(struct rs *x)
{
	char path[4200];
	struct stat st;
	int ret = 0;

	for (int t = 0; t < x->n && !ret; t++) {
		int k = 0;

		for (int r = 0; r < x->old && !ret; r++) {
			ret = shard_path(x, path, sizeof(path), r,
					 x->spec[t].name);
			if (!ret && !stat(path, &st)) {
				x->holds[(size_t)t * x->old + r] = 1;
				k++;
			}
		}
		if (!ret && !k) {
			ret = et_error_set(ET_EMISMATCH,
					   "spec[%d]: table %s is in no shard "
					   "of src",
					   t, x->spec[t].name);
		} else if (!ret && k > 1 && k != x->old) {
			ret = et_error_set(ET_EMISMATCH,
					   "spec[%d]: table %s is in %d of the "
					   "%d shards of src: neither whole on "
					   "one rank nor cut over all",
					   t, x->spec[t].name, k, x->old);
		}
	}
	return ret;
}

/* Opens old shard r's file of table t, checking its shape against spec. */
static int open_old(struct rs *x, int t, int r, et_tfile **tf)
{
	const struct et_table_params *p = &x->spec[t].p;
	struct et_table_info in;
	char path[4200];
	et_dtype dt;
	float scale;
	int ret = shard_path(x, path, sizeof(path), r, x->spec[t].name);

	if (!ret)
		ret = et_tfile_open(path, ET_TFILE_RDONLY, tf);
	if (!ret)
		ret = et_tfile_info(*tf, &in);
	if (ret) {
		char what[128];

		snprintf(what, sizeof(what), "src's rank %d, table %s", r,
			 x->spec[t].name);
		ret = failed(ret, what);
		et_tfile_close(*tf);
		*tf = NULL;
		return ret;
	}
	/* The new table is made from spec, its zeros taking the defaults of
	 * et_table_params: the old file must hold exactly that, or rows never
	 * written (and the storage type) would change. */
	dt = p->dtype ? p->dtype : ET_F32;
	scale = p->init_scale ? p->init_scale
		: p->init != ET_INIT_ZEROS && p->dim
		    ? 1.0f / sqrtf((float)p->dim)
		    : 0.0f;
	if (in.flags != p->flags) {
		et_tfile_close(*tf);
		*tf = NULL;
		return et_error_set(
		    ET_EMISMATCH,
		    "src's rank %d, table %s: the table is "
		    "%s, spec[%d]'s %s",
		    r, x->spec[t].name,
		    in.flags & ET_TABLE_KEYED ? "keyed" : "row-indexed", t,
		    p->flags & ~ET_TABLE_KEYED ? "has unknown flags"
		    : p->flags		       ? "keyed"
					       : "row-indexed");
	}
	if (in.rows != p->rows || in.dim != p->dim || in.dtype != dt ||
	    in.optim != p->optim || in.init != p->init ||
	    in.init_scale != scale || in.seed != p->seed) {
		et_tfile_close(*tf);
		*tf = NULL;
		return et_error_set(ET_EMISMATCH,
				    "src's rank %d, table %s: the table's "
				    "shape, storage type, optimizer or "
				    "initializer differ from spec[%d]'s",
				    r, x->spec[t].name, t);
	}
	return 0;
}

/* Each rank opens (and closes) every old file it will read: all shapes
 * are checked before anything is made. */
static int check_tables(struct rs *x)
{
	int ret = 0;

	for (int t = 0; t < x->n && !ret; t++) {
		uint64_t lo, hi, a, b;

		new_range(x, t, &lo, &hi);
		for (int r = 0; r < x->old && !ret; r++) {
			et_tfile *tf;

			if (!x->holds[(size_t)t * x->old + r])
				continue;
			old_range(x, t, r, &a, &b);
			if ((a > lo ? a : lo) >= (b < hi ? b : hi))
				continue;
			ret = open_old(x, t, r, &tf);
			et_tfile_close(tf);
		}
	}
	return ret;
}

/* Makes *p hold n elements of size sz at least. */
static int grow(void **p, size_t *cap, size_t n, size_t sz)
{
	void *q;

	if (n <= *cap)
		return 0;
	q = realloc(*p, n * sz);
	if (!q)
		return -ENOMEM;
	*p = q;
	*cap = n;
	return 0;
}

/* Of the k keys in ids (ascending), keeps in place, in order, those whose
 * bucket is in [lo, hi); returns their number. */
static size_t keep_buckets(uint64_t *ids, size_t k, uint64_t lo, uint64_t hi)
{
	size_t m = 0;

	for (size_t i = 0; i < k; i++) {
		uint32_t b = etm_bucket_of(ids[i]);

		if (b >= lo && b < hi)
			ids[m++] = ids[i];
	}
	return m;
}

/* Copies the rows of table t that old shard r holds and this rank will
 * own into table lt of store s (keyed: the keys of its buckets). */
static int copy_from(struct rs *x, int t, int r, et_store *s, int lt,
		     struct etm_reshard_info *info)
{
	uint64_t lo, hi, a, b, from;
	struct et_table_info in;
	et_tfile *tf = NULL;
	uint64_t *ids;
	float *vals, *state;
	size_t chunk, k;
	int ret;

	new_range(x, t, &lo, &hi);
	old_range(x, t, r, &a, &b);
	from = a > lo ? a : lo;
	hi = b < hi ? b : hi;
	if (from >= hi)
		return 0;
	ret = open_old(x, t, r, &tf);
	if (ret)
		return ret; /* it said why */
	ret = et_tfile_info(tf, &in);
	if (ret)
		goto out;
	chunk = CHUNK_BYTES / ((size_t)in.dim * 4 + in.state_floats * 4);
	chunk = chunk < 1 ? 1 : chunk > 65536 ? 65536 : chunk;
	if (grow((void **)&x->ids, &x->ids_cap, chunk, sizeof(*x->ids)) ||
	    grow((void **)&x->vals, &x->vals_cap, chunk * in.dim,
		 sizeof(*x->vals)) ||
	    grow((void **)&x->state, &x->state_cap,
		 chunk * (in.state_floats ? in.state_floats : 1),
		 sizeof(*x->state))) {
		ret = -ENOMEM;
		goto out;
	}
	ids = x->ids;
	vals = x->vals;
	state = x->state;
	if (keyed(x, t)) { /* buckets [from, hi) of every stored key */
		lo = from;
		from = 0;
	}
	for (;;) {
		uint64_t last;
		bool more;
		size_t m = 0;

		ret = et_tfile_rows(tf, from, ids, chunk, &k);
		if (ret)
			break;
		last = k ? ids[k - 1] : 0;
		if (keyed(x, t)) {
			m = keep_buckets(ids, k, lo, hi);
			more = k == chunk && last != UINT64_MAX;
		} else {
			while (m < k && ids[m] < hi)
				m++;
			more = m == chunk;
		}
		if (m) {
			ret = et_tfile_read_rows(
			    tf, ids, m, vals, in.state_floats ? state : NULL);
			if (!ret)
				ret = et_write_rows_state(
				    s, lt, ids, m, vals,
				    in.state_floats ? state : NULL);
			if (ret)
				break;
			info->rows += m;
			info->bytes +=
			    m * ((uint64_t)in.dim * 4 + in.state_floats * 4);
		}
		if (!more)
			break;
		from = last + 1;
	}
out:
	if (ret) {
		char what[128];

		snprintf(what, sizeof(what),
			 "copying table %s from src's rank %d", x->spec[t].name,
			 r);
		ret = failed(ret, what);
	}
	et_tfile_close(tf);
	return ret;
}

/* Fills this rank's new tables, through its store: rows go to the
 * caches, and from them to the row logs in large sequential writes. */
static int fill_tables(struct rs *x, etm *m, struct etm_reshard_info *info)
{
	int ret = 0;

	for (int t = 0; t < x->n && !ret; t++) {
		int lt = etm_local_table(m, t);

		for (int r = 0; r < x->old && lt >= 0 && !ret; r++)
			if (x->holds[(size_t)t * x->old + r])
				ret =
				    copy_from(x, t, r, etm_store(m), lt, info);
	}
	return ret;
}

void etm_reshard_free(struct etm_reshard_info *info)
{
	if (!info)
		return;
	for (int r = 0; info->dense && r < info->nranks; r++)
		free(info->dense[r]);
	free(info->dense);
	free(info->len);
	info->dense = NULL;
	info->len = NULL;
}

/* opts' checks that need no other rank: the same on every rank. */
static int check_opts(const struct etm_reshard_opts *opts)
{
	const struct etm_table_spec *spec = opts->spec;
	int n = opts->ntables;

	if (!opts->src || !opts->dir || !opts->spec)
		return et_error_set(-EINVAL, "opts->%s NULL",
				    !opts->src	 ? "src"
				    : !opts->dir ? "dir"
						 : "spec");
	if (strlen(opts->src) > 4000 || strlen(opts->dir) > 4000)
		return et_error_set(-ENAMETOOLONG,
				    "opts->%s longer than 4000 bytes",
				    strlen(opts->src) > 4000 ? "src" : "dir");
	if (n < 1 || n > MAX_TABLES)
		return et_error_set(-EINVAL,
				    "opts->ntables %d out of range 1..%d", n,
				    MAX_TABLES);
	for (int t = 0; t < n; t++) {
		if (spec[t].plan != ETM_TABLE_WISE &&
		    spec[t].plan != ETM_ROW_WISE)
			return et_error_set(-EINVAL,
					    "opts->spec[%d].plan %d is neither "
					    "ETM_TABLE_WISE nor ETM_ROW_WISE",
					    t, (int)spec[t].plan);
		if (!spec[t].name)
			return et_error_set(-EINVAL, "opts->spec[%d].name NULL",
					    t);
	}
	return 0;
}

/* Rank 0's part of read_global: src's global record (or src as one plain
 * store) into meta (old rank count, step, plain), and dir checked fresh. */
static int read_global_root(struct rs *x, uint64_t meta[3])
{
	uint32_t old = 0;
	uint64_t step = 0;
	int ret;

	ret = etm_global_read(x->src, &old, &step);
	if (ret == -ENOENT) {
		/* one plain store (et_store_open on src itself) is a
		 * sharded store of one rank */
		struct et_checkpoint_info ci;

		if (!et_checkpoint_read_dir(x->src, &ci, NULL, NULL) && ci.id) {
			x->plain = true;
			old = 1;
			step = ci.id;
			ret = 0;
		}
	}
	if (ret == -ENOENT)
		et_error_set(ret, "src has no global checkpoint record "
				  "to reshard from");
	else if (ret == ET_EHDRSUM)
		et_error_set(ret, "src: the global checkpoint record "
				  "is damaged");
	else if (ret)
		et_error_set(ret,
			     "src: the global checkpoint record cannot "
			     "be read: %s",
			     etm_strerror(ret));
	if (!ret && (old < 1 || old > (uint32_t)INT_MAX))
		ret = et_error_set(ET_EHEADER,
				   "src: the global record names %u "
				   "ranks",
				   old);
	if (!ret)
		ret = check_fresh(x);
	meta[0] = old;
	meta[1] = step;
	meta[2] = x->plain;
	return ret;
}

/* The old store's global record, read by rank 0 and sent to all, and a
 * fresh place for the new: x's old and plain, and *step. Agreed. */
static int read_global(struct rs *x, uint64_t *step)
{
	uint64_t meta[3];
	int ret = 0;

	if (x->rank == 0)
		ret = read_global_root(x, meta);
	MPI_Bcast(meta, 3, MPI_UINT64_T, 0, x->comm);
	if ((ret = agree(x, ret)))
		return ret;
	x->old = (int)meta[0];
	*step = meta[1];
	x->plain = meta[2] != 0;
	return 0;
}

/* Fills info's header and allocates its and x's arrays for x->old old
 * ranks. Not agreed. */
static int alloc_arrays(struct rs *x, uint64_t step,
			struct etm_reshard_info *info)
{
	info->plain = x->plain;
	info->step = step;
	info->nranks = x->old;
	info->dense = calloc(x->old, sizeof(*info->dense));
	info->len = calloc(x->old, sizeof(*info->len));
	x->owner = malloc(x->n * sizeof(*x->owner));
	x->holds = calloc((size_t)x->n * x->old, 1);
	x->commit = calloc(x->old, sizeof(*x->commit));
	if (!info->dense || !info->len || !x->owner || !x->holds || !x->commit)
		return -ENOMEM;
	return 0;
}

/* Every old shard at exactly the step; their dense states to every rank,
 * then the caller's check of them. Agreed. */
static int read_dense(struct rs *x, const struct etm_reshard_opts *opts,
		      uint64_t step, struct etm_reshard_info *info)
{
	int ret = 0;

	for (int r = x->rank; r < x->old && !ret; r += x->nranks)
		ret = check_shard(x, r, step, &info->dense[r], &info->len[r]);
	if ((ret = agree(x, ret)))
		return ret;
	if ((ret = share_dense(x, info)))
		return ret;
	if (opts->check) {
		et_error_set(0, NULL);
		ret = opts->check(opts->check_arg, info);
	}
	return agree(x, ret);
}

/* Makes the new sharded store in dir with its tables (etm_open and
 * etm_tables agree); *out stays NULL on failure. */
static int make_new(struct rs *x, const struct etm_reshard_opts *opts,
		    etm **out)
{
	struct etm_detail keep;
	int ret = etm_open(x->comm, x->dir, opts->cfg, 0, out);

	if (!ret) {
		ret = etm_tables(*out, x->spec, x->n, true);
		if (ret) {
			etm_detail_save(&keep);
			etm_close(*out);
			*out = NULL;
			etm_detail_restore(&keep, ret);
		}
	}
	if (ret)
		ret = failed(ret, "making the new shards in dir");
	return ret;
}

/* Copies the rows into the new store *out, then checks no old shard
 * committed meanwhile; closes *out (to NULL) on failure. Agreed. */
static int copy_rows(struct rs *x, etm **out, struct etm_reshard_info *info,
		     double t0)
{
	struct etm_detail keep;
	int ret = fill_tables(x, *out, info);

	info->seconds = now() - t0;
	if (!(ret = agree(x, ret))) {
		for (int r = x->rank; r < x->old && !ret; r += x->nranks)
			ret = check_still(x, r);
		ret = agree(x, ret);
	}
	if (ret) {
		etm_detail_save(&keep);
		etm_close(*out);
		*out = NULL;
		etm_detail_restore(&keep, ret);
	}
	return ret;
}

int etm_reshard(MPI_Comm comm, const struct etm_reshard_opts *opts,
		struct etm_reshard_info *info, etm **out)
{
	struct rs x = {.comm = comm};
	uint64_t step = 0;
	double t0 = now();
	int ret = 0;

	et_error_set(0, NULL);
	if (info)
		memset(info, 0, sizeof(*info));
	if (out)
		*out = NULL;
	if (!opts || !info || !out)
		return et_error_set(-EINVAL, "%s NULL",
				    !opts   ? "opts"
				    : !info ? "info"
					    : "out");
	if ((ret = check_opts(opts)))
		return ret;
	x.src = opts->src;
	x.dir = opts->dir;
	x.spec = opts->spec;
	x.n = opts->ntables;
	MPI_Comm_rank(comm, &x.rank);
	MPI_Comm_size(comm, &x.nranks);

	if ((ret = read_global(&x, &step)))
		goto out;
	if ((ret = agree(&x, alloc_arrays(&x, step, info))))
		goto out;
	if ((ret = read_dense(&x, opts, step, info)))
		goto out;

	/* the tables: where they are, and their shapes */
	ret = etm_place(x.spec, x.n, x.nranks, x.owner);
	if (!ret)
		ret = find_tables(&x);
	if (!ret)
		ret = check_tables(&x);
	if ((ret = agree(&x, ret)))
		goto out;

	/* only now is anything made */
	if ((ret = make_new(&x, opts, out)))
		goto out;
	ret = copy_rows(&x, out, info, t0);
out:
	if (ret)
		etm_reshard_free(info);
	free(x.owner);
	free(x.holds);
	free(x.commit);
	free(x.ids);
	free(x.vals);
	free(x.state);
	return ret;
}
