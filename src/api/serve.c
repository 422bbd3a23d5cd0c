/*
 * serve.c - a serving handle (et_serve_*): a copy's store directory opened
 * for lookups only, with deltas applied while readers go on.
 *
 * A version is the directory as of one commit: each table's file opened
 * read-only (its row-log index loaded, as et_tfile_open does) and the
 * commit's dense state. Lookups take a reference on the current version
 * and read through it; an apply writes the delta through a store of the
 * directory (the handle lends it its DIR/LOCK), opens the new version
 * beside the old one, makes it current, and waits for the old one's
 * references to go before freeing it.
 *
 * Why the old version stays readable while the apply writes: the apply's
 * store appends records and never writes in place, and its log reuses or
 * punches a segment only once neither its index nor the last commit needs
 * it (rl_clean.c). The last commit is the version readers hold, since no
 * one else can write the directory while the handle holds its lock; and
 * the apply commits once, at its end. The next apply starts only after
 * every reader has left the version before, so what it reuses no reader
 * still reads.
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoint.h"
#include "commit.h"
#include "delta_file.h"
#include "delta_state.h"
#include "delta_write.h"
#include "dtype.h"
#include "embtier.h"
#include "error.h"
#include "le.h"
#include "serve_cache.h"
#include "table_file.h"

#define SERVE_DDR_DEF (256ULL << 20)
#define SERVE_DDR_MIN (64u << 10)

struct sv_table {
	et_tfile *tf; /* NULL: the version has no such table */
	const struct tf_geom *g;
	pthread_mutex_t mu; /* a table file reads one call at a time */
	bool mu_made;
	struct et_table_info info;
};

struct sv_ver {
	uint64_t commit;       /* source commit (DIR/DELTA), 0: none */
	uint64_t store_commit; /* the directory's own record */
	uint32_t n;	       /* entries of t: the handle's numbering */
	struct sv_table *t;
	void *dense;
	size_t dense_len;
	uint64_t index_bytes;
	uint32_t epoch; /* the cache's: versions count up from 1 */
	unsigned refs;	/* lookups reading it (et_serve.mu) */
};

struct et_serve {
	char *dir;
	int lock_fd;
	pthread_mutex_t mu;  /* cur, refs, names */
	pthread_cond_t left; /* a reader left a version no longer current */
	pthread_mutex_t apply_mu;
	struct sv_ver *cur;
	char (*names)[CKPT_NAME_MAX + 1]; /* table numbers, only growing */
	uint32_t nnames, cap;
	uint64_t applies;     /* mu */
	bool stale;	      /* the directory is past cur (apply_mu) */
	uint32_t epochs;      /* versions opened (apply_mu) */
	uint64_t cache_cap;   /* bytes; 0: no cache */
	struct scache *cache; /* made with the first tables; atomic */
};

static void ver_free(struct sv_ver *v)
{
	if (!v)
		return;
	for (uint32_t i = 0; i < v->n; i++) {
		et_tfile_close(v->t[i].tf);
		if (v->t[i].mu_made)
			pthread_mutex_destroy(&v->t[i].mu);
	}
	free(v->t);
	free(v->dense);
	free(v);
}

/* The number of table name; added if new (sv->mu held, or no reader yet). */
static int name_index(et_serve *sv, const char *name, uint32_t *idx)
{
	for (uint32_t i = 0; i < sv->nnames; i++)
		if (!strcmp(sv->names[i], name)) {
			*idx = i;
			return 0;
		}
	if (sv->nnames == sv->cap) {
		uint32_t cap = sv->cap ? 2 * sv->cap : 16;
		void *p = realloc(sv->names, cap * sizeof(*sv->names));

		if (!p)
			return -ENOMEM;
		sv->names = p;
		sv->cap = cap;
	}
	snprintf(sv->names[sv->nnames], sizeof(sv->names[0]), "%s", name);
	*idx = sv->nnames++;
	return 0;
}

/*
 * Opens the directory's last commit as a version. The tables are numbered
 * by the handle's names, new names added (called with sv->mu held, or
 * before any reader; the files are opened first, without it).
 */
static int ver_open(et_serve *sv, struct sv_ver **out)
{
	struct ckpt_rec rec = {0};
	struct dstate ds = {0};
	struct sv_ver *v = calloc(1, sizeof(*v));
	et_tfile **tfs = NULL;
	char path[4200];
	int ret;

	*out = NULL;
	if (!v)
		return -ENOMEM;
	ret = ckpt_read(sv->dir, &rec, false, &v->dense, &v->dense_len);
	if (!ret) {
		ret = dstate_read(sv->dir, &ds);
		if (ret == -ENOENT)
			ret = 0;
	}
	v->commit = ds.commit;
	v->store_commit = rec.commit;
	if (!ret && rec.ntables && !(tfs = calloc(rec.ntables, sizeof(*tfs))))
		ret = -ENOMEM;
	for (uint32_t i = 0; !ret && i < rec.ntables; i++) {
		if ((size_t)snprintf(path, sizeof(path), "%s/%s.et", sv->dir,
				     rec.tables[i].name) >= sizeof(path))
			ret = -ENAMETOOLONG;
		else
			ret = et_tfile_open(path, ET_TFILE_RDONLY, &tfs[i]);
	}
	pthread_mutex_lock(&sv->mu);
	for (uint32_t i = 0; !ret && i < rec.ntables; i++) {
		uint32_t k;

		ret = name_index(sv, rec.tables[i].name, &k);
	}
	v->n = sv->nnames;
	pthread_mutex_unlock(&sv->mu);
	if (!ret && v->n && !(v->t = calloc(v->n, sizeof(*v->t))))
		ret = -ENOMEM;
	for (uint32_t i = 0; !ret && i < rec.ntables; i++) {
		struct sv_table *t;
		struct tf_stats st;
		uint32_t k = 0;

		for (k = 0; k < v->n; k++) /* names only grow: it is there */
			if (!strcmp(sv->names[k], rec.tables[i].name))
				break;
		t = &v->t[k];
		t->tf = tfs[i];
		t->g = tf_geom(t->tf);
		tfs[i] = NULL;
		ret = et_tfile_info(t->tf, &t->info);
		if (!ret)
			ret = -pthread_mutex_init(&t->mu, NULL);
		t->mu_made = !ret;
		tf_get_stats(t->tf, &st);
		v->index_bytes += st.log.index_bytes;
	}
	for (uint32_t i = 0; tfs && i < rec.ntables; i++)
		et_tfile_close(tfs[i]);
	free(tfs);
	ckpt_rec_free(&rec);
	dstate_free(&ds);
	if (ret) {
		ver_free(v);
		return ret;
	}
	v->epoch = ++sv->epochs;
	*out = v;
	return 0;
}

/* The row cache, made once the copy has tables, for rows as large as the
 * largest of theirs (a later table's larger rows are not cached). */
static int cache_make(et_serve *sv, const struct sv_ver *v)
{
	struct scache *c;
	uint32_t slot = 0;
	int ret;

	if (!sv->cache_cap || sv->cache)
		return 0;
	for (uint32_t i = 0; i < v->n; i++)
		if (v->t[i].tf && v->t[i].g->value_bytes > slot)
			slot = v->t[i].g->value_bytes;
	if (!slot)
		return 0;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	ret = sc_init(c, sv->cache_cap, slot);
	if (ret) {
		free(c);
		return ret;
	}
	__atomic_store_n(&sv->cache, c, __ATOMIC_RELEASE);
	return 0;
}

/* The number of table name at this point (apply_mu held: the names do
 * not change), or UINT32_MAX. */
static uint32_t name_number(const et_serve *sv, const char *name)
{
	for (uint32_t i = 0; i < sv->nnames; i++)
		if (!strcmp(sv->names[i], name))
			return i;
	return UINT32_MAX;
}

/* Drops the cached rows of epochs before e that the delta at path
 * changed (all of a table it took whole); every row if path is NULL or
 * cannot be read again. Then readers at e may take the older entries. */
static void cache_forget(et_serve *sv, const char *path, uint32_t e)
{
	struct scache *c = sv->cache;
	struct df_reader r = {.fd = -1};
	struct df_header h;
	struct df_table t = {0};
	struct df_rec rec;
	uint64_t *ids = NULL;
	uint32_t tn = UINT32_MAX, stride = 0;
	int ret;

	if (!c)
		return;
	ret = path ? df_open(&r, path, &h) : -ENOENT;
	while (!ret && !(ret = df_next(&r, &rec)) && rec.kind != DF_END) {
		if (rec.kind == DF_TABLE_HDR) {
			ret = df_table_parse(&r, &rec, &t);
			tn = name_number(sv, t.name);
			stride = 8 + t.rec;
			if (!ret && tn != UINT32_MAX && t.whole)
				sc_forget_table(c, tn, e);
		} else if ((rec.kind == DF_ROWS || rec.kind == DF_TOMBS) &&
			   tn != UINT32_MAX && !t.whole) {
			uint32_t step = rec.kind == DF_ROWS ? stride : 8;
			uint64_t *p = realloc(ids, (rec.n + 1) * sizeof(*ids));

			if (!p) {
				ret = -ENOMEM;
				break;
			}
			ids = p;
			for (uint32_t i = 0; i < rec.n; i++)
				ids[i] = get64(rec.p + (size_t)i * step);
			sc_forget(c, tn, ids, rec.n, e);
		}
	}
	df_close(&r);
	free(ids);
	if (ret)
		sc_forget_all(c, e);
	sc_clean(c, e);
}

/* The current version, held until ver_put; *commit its source commit. */
static struct sv_ver *ver_get(et_serve *sv, uint64_t *commit)
{
	struct sv_ver *v;

	pthread_mutex_lock(&sv->mu);
	v = sv->cur;
	v->refs++;
	if (commit)
		*commit = v->commit;
	pthread_mutex_unlock(&sv->mu);
	return v;
}

static void ver_put(et_serve *sv, struct sv_ver *v)
{
	pthread_mutex_lock(&sv->mu);
	if (!--v->refs && v != sv->cur)
		pthread_cond_broadcast(&sv->left);
	pthread_mutex_unlock(&sv->mu);
}

int et_serve_open(const char *dir, const struct et_serve_config *cfg,
		  et_serve **out)
{
	struct et_serve_config c = {0};
	et_serve *sv;
	int ret;

	err_clear();
	if (!dir || !*dir || !out)
		return err_set(-EINVAL, "et_serve_open: %s",
			       !out ? "out is NULL" : "no dir");
	if (cfg)
		c = *cfg;
	if (c.flags & ~ET_SERVE_NO_CACHE)
		return err_set(ET_ECONFIG,
			       "et_serve_open: flags 0x%x: unknown "
			       "bits",
			       c.flags);
	if (c.ddr_bytes && c.ddr_bytes < SERVE_DDR_MIN &&
	    !(c.flags & ET_SERVE_NO_CACHE))
		return err_set(ET_ECONFIG,
			       "et_serve_open: ddr_bytes %llu: at least %u "
			       "(or 0: 256 MiB, or ET_SERVE_NO_CACHE)",
			       (unsigned long long)c.ddr_bytes, SERVE_DDR_MIN);
	*out = NULL;
	if (mkdir(dir, 0755) && errno != EEXIST)
		return err_set(-errno, "%s: %s", dir, strerror(errno));
	sv = calloc(1, sizeof(*sv));
	if (!sv)
		return -ENOMEM;
	sv->lock_fd = -1;
	sv->cache_cap = c.flags & ET_SERVE_NO_CACHE ? 0
			: c.ddr_bytes		    ? c.ddr_bytes
						    : SERVE_DDR_DEF;
	pthread_mutex_init(&sv->mu, NULL);
	pthread_mutex_init(&sv->apply_mu, NULL);
	pthread_cond_init(&sv->left, NULL);
	sv->dir = strdup(dir);
	ret = sv->dir ? dir_lock(dir, &sv->lock_fd) : -ENOMEM;
	if (!ret)
		ret = ver_open(sv, &sv->cur);
	if (!ret && cache_make(sv, sv->cur)) /* as in catch_up */
		sv->cache_cap = 0;
	if (ret) {
		et_serve_close(sv);
		return ret;
	}
	*out = sv;
	return 0;
}

void et_serve_close(et_serve *sv)
{
	if (!sv)
		return;
	ver_free(sv->cur);
	if (sv->cache) {
		sc_free(sv->cache);
		free(sv->cache);
	}
	dir_unlock(sv->lock_fd);
	free(sv->names);
	free(sv->dir);
	pthread_cond_destroy(&sv->left);
	pthread_mutex_destroy(&sv->apply_mu);
	pthread_mutex_destroy(&sv->mu);
	free(sv);
}

int et_serve_table(et_serve *sv, const char *name, int *table,
		   struct et_table_info *info)
{
	struct sv_ver *v;
	int ret = -ENOENT;

	err_clear();
	if (!sv || !name || !table)
		return err_set(-EINVAL, "et_serve_table: NULL %s",
			       !sv     ? "sv"
			       : !name ? "name"
				       : "table");
	pthread_mutex_lock(&sv->mu);
	v = sv->cur;
	for (uint32_t i = 0; i < v->n; i++)
		if (v->t[i].tf && !strcmp(sv->names[i], name)) {
			*table = (int)i;
			if (info)
				*info = v->t[i].info;
			ret = 0;
			break;
		}
	pthread_mutex_unlock(&sv->mu);
	if (ret)
		err_set(ret, "%s: no table \"%s\" at this version", sv->dir,
			name);
	return ret;
}

/* Table t's rows ids[0..n) of version v into out: from the cache where
 * it has them, the rest read from the files (and cached). */
static int lookup(et_serve *sv, struct sv_ver *v, uint32_t tn,
		  const uint64_t *ids, size_t n, float *out)
{
	struct sv_table *t = &v->t[tn];
	const struct tf_geom *g = t->g;
	struct scache *c = __atomic_load_n(&sv->cache, __ATOMIC_ACQUIRE);
	unsigned char *raw = NULL;
	uint64_t *mids = NULL;
	uint32_t *midx = NULL;
	size_t nm = 0;
	int ret = 0;

	if (c && g->value_bytes > c->slot_bytes)
		c = NULL;
	if (!c) { /* the files alone */
		pthread_mutex_lock(&t->mu);
		ret = et_tfile_read_rows(t->tf, ids, n, out, NULL);
		pthread_mutex_unlock(&t->mu);
		return ret;
	}
	for (size_t i = 0; i < n; i++) {
		if (sc_get(c, tn, ids[i], v->epoch, g->dtype, g->dim,
			   out + i * g->dim))
			continue;
		if (!mids) { /* the first miss: room for the misses */
			mids = malloc(n * sizeof(*mids));
			midx = malloc(n * sizeof(*midx));
			if (!mids || !midx) {
				ret = -ENOMEM;
				goto out;
			}
		}
		mids[nm] = ids[i];
		midx[nm++] = (uint32_t)i;
	}
	if (!nm)
		goto out;
	raw = malloc(nm * g->row_bytes);
	if (!raw) {
		ret = -ENOMEM;
		goto out;
	}
	pthread_mutex_lock(&t->mu);
	ret = tf_read_rows_raw(t->tf, mids, nm, raw);
	pthread_mutex_unlock(&t->mu);
	for (size_t k = 0; !ret && k < nm; k++) {
		const unsigned char *r = raw + k * g->row_bytes;

		dtype_decode(g->dtype, r, out + (size_t)midx[k] * g->dim,
			     g->dim);
		sc_put(c, tn, mids[k], v->epoch, r, g->value_bytes);
	}
out:
	free(raw);
	free(mids);
	free(midx);
	return ret;
}

int et_serve_lookup(et_serve *sv, int table, const uint64_t *ids, size_t n,
		    float *out, uint64_t *commit)
{
	struct sv_ver *v;
	int ret = 0;

	err_clear();
	if (!sv || (n && (!ids || !out)))
		return err_set(-EINVAL, "et_serve_lookup: NULL %s",
			       !sv    ? "sv"
			       : !ids ? "ids"
				      : "out");
	if (n > UINT32_MAX)
		return err_set(-E2BIG, "%zu ids: at most %u a call", n,
			       UINT32_MAX);
	v = ver_get(sv, commit);
	if (table < 0 || (uint32_t)table >= v->n || !v->t[table].tf) {
		ver_put(sv, v);
		return err_set(-ENOENT, "%s: table %d is not in this version",
			       sv->dir, table);
	}
	for (size_t i = 0; i < n && !v->t[table].g->keyed; i++)
		if (ids[i] >= v->t[table].g->rows) {
			ret = err_set(ET_EROWRANGE,
				      "ids[%zu] %llu >= the table's %llu rows",
				      i, (unsigned long long)ids[i],
				      (unsigned long long)v->t[table].g->rows);
			break;
		}
	if (!ret)
		ret = lookup(sv, v, (uint32_t)table, ids, n, out);
	ver_put(sv, v);
	return ret;
}

int et_serve_dense(et_serve *sv, void *buf, size_t cap, size_t *len,
		   uint64_t *commit)
{
	struct sv_ver *v;

	err_clear();
	if (!sv || (cap && !buf))
		return err_set(-EINVAL, "et_serve_dense: NULL %s",
			       !sv ? "sv" : "buf");
	v = ver_get(sv, commit);
	if (len)
		*len = v->dense_len;
	if (v->dense_len && cap)
		memcpy(buf, v->dense, cap < v->dense_len ? cap : v->dense_len);
	ver_put(sv, v);
	return 0;
}

int et_serve_info(et_serve *sv, struct et_serve_info *info)
{
	struct sv_ver *v;
	struct scache *c;
	uint64_t commit;

	err_clear();
	if (!sv || !info)
		return err_set(-EINVAL, "et_serve_info: NULL %s",
			       !sv ? "sv" : "info");
	v = ver_get(sv, &commit);
	*info = (struct et_serve_info){.commit = commit,
				       .store_commit = v->store_commit,
				       .index_bytes = v->index_bytes,
				       .dense_bytes = v->dense_len};
	c = __atomic_load_n(&sv->cache, __ATOMIC_ACQUIRE);
	if (c) {
		info->cache_bytes = c->bytes;
		info->cache_rows = c->nsets * SC_WAYS;
		info->cache_hits = __atomic_load_n(&c->hits, __ATOMIC_RELAXED);
		info->cache_misses =
		    __atomic_load_n(&c->misses, __ATOMIC_RELAXED);
	}
	for (uint32_t i = 0; i < v->n; i++)
		info->tables += v->t[i].tf != NULL;
	pthread_mutex_lock(&sv->mu);
	info->applies = sv->applies;
	pthread_mutex_unlock(&sv->mu);
	ver_put(sv, v);
	return 0;
}

/*
 * Moves readers to the directory's last commit, if the current version is
 * not it (sv->apply_mu held): opens the new version beside the old, makes
 * it current, and frees the old once its last reader has left. If the new
 * version cannot be opened, readers stay where they are and the handle is
 * marked stale: no apply may write before they have moved (its store
 * could reuse what they read).
 */
static int catch_up(et_serve *sv, const char *applied)
{
	struct ckpt_rec rec = {0};
	struct dstate ds = {0};
	struct sv_ver *nv = NULL, *old;
	int ret = ckpt_read(sv->dir, &rec, false, NULL, NULL);

	if (!ret && rec.commit == sv->cur->store_commit) {
		/* the same tables; DIR/DELTA may have moved (a delta applied
		 * again after a crash between the commit and DIR/DELTA) */
		ret = dstate_read(sv->dir, &ds);
		if (ret == -ENOENT)
			ret = 0;
		pthread_mutex_lock(&sv->mu);
		if (!ret)
			sv->cur->commit = ds.commit;
		pthread_mutex_unlock(&sv->mu);
		dstate_free(&ds);
	} else if (!ret) {
		ret = ver_open(sv, &nv);
	}
	ckpt_rec_free(&rec);
	if (ret) {
		sv->stale = true;
		return ret;
	}
	sv->stale = false;
	if (!nv)
		return 0;
	if (cache_make(sv, nv)) /* rows too large for one set of the cache, */
		sv->cache_cap = 0; /* or no memory: lookups read the files */
	pthread_mutex_lock(&sv->mu);
	old = sv->cur;
	sv->cur = nv;
	while (old->refs)
		pthread_cond_wait(&sv->left, &sv->mu);
	pthread_mutex_unlock(&sv->mu);
	ver_free(old);
	/* no reader of an older version is left to cache its rows */
	cache_forget(sv, applied, nv->epoch);
	return 0;
}

int et_serve_apply(et_serve *sv, const char *path, struct et_delta_info *info)
{
	char detail[256];
	int ret, ret2;

	err_clear();
	if (!sv || !path)
		return err_set(-EINVAL, "et_serve_apply: NULL %s",
			       !sv ? "sv" : "path");
	pthread_mutex_lock(&sv->apply_mu);
	if (sv->stale) {
		ret = catch_up(sv, NULL);
		if (ret) {
			pthread_mutex_unlock(&sv->apply_mu);
			return err_set(ret,
				       "%s: readers could not move to the "
				       "copy's last commit; nothing applied",
				       sv->dir);
		}
	}
	ret = delta_apply_lent(path, sv->dir, sv->lock_fd, info);
	snprintf(detail, sizeof(detail), "%s", et_errdetail());
	/* A failed apply may still have committed (a failure after its
	 * commit was in place): readers move to whatever is last. */
	ret2 = catch_up(sv, ret ? NULL : path);
	pthread_mutex_lock(&sv->mu);
	sv->applies += !ret;
	pthread_mutex_unlock(&sv->mu);
	pthread_mutex_unlock(&sv->apply_mu);
	if (ret)
		return err_set(ret, "%s", detail);
	return ret2;
}
