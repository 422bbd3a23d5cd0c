/*
 * delta_write.c - the writing pass of et_delta_apply (delta_write.h).
 *
 * A table taken whole replaces the copy's: the copy's rows (listed from
 * its file as of its last commit, ascending, like the delta's) that the
 * delta lacks are stale, and go: a keyed table's are erased, a
 * row-indexed table's get their initial value back (read from a scratch
 * table file of the same parameters, created empty in $TMPDIR).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "delta_write.h"
#include "dtype.h"
#include "error.h"
#include "le.h"
#include "state.h"

#define APPLY_DDR (64ull << 20) /* the copy's store: its DDR tier */

/* The copy's rows of a whole table, walked in order beside the delta's. */
struct cursor {
	et_tfile *tf;
	uint64_t *buf, from;
	size_t n, i;
	bool done;
};

struct wtable {
	struct df_table t;
	int id;
	bool keyed, with_state;
	uint32_t vbytes;
	struct cursor cur;
	uint64_t *all; /* a whole table's ids so far (the copy had it) */
	size_t nall, capall;
	uint64_t *stale;
	float *svals, *sstate; /* the stale rows' initial values and state:
				* apart from the chunk's, which they would
				* overwrite */
	size_t nstale;
	char scratch[4096]; /* the scratch file's directory, or "" */
	et_tfile *init;
};

struct wctx {
	et_store *s;
	const char *dir;
	char (*made)[65]; /* tables this apply created */
	size_t nmade;
	uint64_t *ids;
	float *vals, *state;
	size_t cap_vals, cap_state;
	struct et_delta_info *info;
};

static int cur_peek(struct cursor *c, uint64_t *id)
{
	int ret;

	if (!c->tf)
		return 1;
	if (c->i == c->n) {
		if (c->done)
			return 1;
		ret =
		    et_tfile_rows(c->tf, c->from, c->buf, DF_CHUNK_ROWS, &c->n);
		if (ret)
			return ret;
		c->i = 0;
		if (c->n < DF_CHUNK_ROWS ||
		    (c->n && c->buf[c->n - 1] == UINT64_MAX))
			c->done = true;
		if (c->n)
			c->from = c->buf[c->n - 1] + 1;
		if (!c->n)
			return 1;
	}
	*id = c->buf[c->i];
	return 0;
}

static struct et_table_params params_of(const struct df_table *t)
{
	struct et_table_params p = {.rows = t->rows,
				    .dim = t->dim,
				    .dtype = (et_dtype)t->dtype,
				    .optim = (et_optim)t->optim,
				    .init = (et_init)t->init,
				    .init_scale = t->init_scale,
				    .seed = t->seed,
				    .flags = t->flags};

	return p;
}

/* Initial values (and zero state) of the n rows at ids, into w->svals and
 * w->sstate. */
static int init_rows(struct wtable *w, const uint64_t *ids, size_t n)
{
	struct et_table_params p = params_of(&w->t);
	char f[4200];
	int ret;

	if (!w->init) {
		const char *tmp = getenv("TMPDIR");

		snprintf(w->scratch, sizeof(w->scratch),
			 "%s/embtier-delta-XXXXXX", tmp && *tmp ? tmp : "/tmp");
		if (!mkdtemp(w->scratch)) {
			ret = -errno;
			w->scratch[0] = 0;
			return err_set(ret, "a scratch directory: %s",
				       et_strerror(ret));
		}
		snprintf(f, sizeof(f), "%s/init.et", w->scratch);
		ret = et_tfile_create(f, &p, &w->init);
		if (ret)
			return ret;
	}
	return et_tfile_read_rows(w->init, ids, n, w->svals, w->sstate);
}

/* Drops the stale rows listed so far. */
static int drop_stale(struct wctx *x, struct wtable *w)
{
	int ret;

	if (!w->nstale)
		return 0;
	if (w->keyed)
		ret = et_erase(x->s, w->id, w->stale, w->nstale, NULL);
	else {
		ret = init_rows(w, w->stale, w->nstale);
		if (!ret)
			ret = et_write_rows_state(
			    x->s, w->id, w->stale, w->nstale, w->svals,
			    w->t.state_floats ? w->sstate : NULL);
	}
	if (!ret)
		x->info->stale += w->nstale;
	w->nstale = 0;
	return ret;
}

static int by_id(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* The end of a whole table: the copy's rows (its listing, ascending) that
 * the delta's (w->all, sorted now) lack are stale, dropped in chunks. */
static int drop_missing(struct wctx *x, struct wtable *w)
{
	uint64_t c;
	size_t j = 0;
	int ret;

	if (w->nall)
		qsort(w->all, w->nall, sizeof(*w->all), by_id);
	while (!(ret = cur_peek(&w->cur, &c))) {
		w->cur.i++;
		while (j < w->nall && w->all[j] < c)
			j++;
		if (j < w->nall && w->all[j] == c)
			continue;
		w->stale[w->nstale++] = c;
		if (w->nstale == DF_CHUNK_ROWS && (ret = drop_stale(x, w)))
			return ret;
	}
	return ret == 1 ? drop_stale(x, w) : ret;
}

static int grow(struct wctx *x, const struct df_table *t)
{
	size_t nv = (size_t)DF_CHUNK_ROWS * t->dim;
	size_t ns = (size_t)DF_CHUNK_ROWS * (t->state_floats + 1);

	if (nv > x->cap_vals) {
		float *v = realloc(x->vals, nv * sizeof(float));

		if (!v)
			return -ENOMEM;
		x->vals = v;
		x->cap_vals = nv;
	}
	if (ns > x->cap_state) {
		float *v = realloc(x->state, ns * sizeof(float));

		if (!v)
			return -ENOMEM;
		x->state = v;
		x->cap_state = ns;
	}
	return 0;
}

static int table_begin(struct wctx *x, struct wtable *w,
		       const struct df_rec *rec, struct df_reader *r,
		       const struct df_header *h)
{
	struct et_table_info ti;
	struct et_table_params p;
	char f[4200];
	bool existed = true;
	int ret = df_table_parse(r, rec, &w->t);

	if (ret)
		return ret;
	p = params_of(&w->t);
	w->keyed = w->t.flags & ET_TABLE_KEYED;
	w->with_state = (h->flags & ET_DELTA_STATE) && w->t.state_floats;
	w->vbytes = (uint32_t)(w->t.dim * dtype_size((et_dtype)w->t.dtype));
	snprintf(f, sizeof(f), "%s/%s.et", x->dir, w->t.name);
	if (access(f, F_OK) && errno == ENOENT) {
		char(*m)[65] = realloc(x->made, (x->nmade + 1) * sizeof(*m));

		if (!m)
			return -ENOMEM;
		x->made = m;
		existed = false;
		ret = et_table_create(x->s, w->t.name, &p, &w->id);
		if (!ret)
			snprintf(x->made[x->nmade++], 65, "%s", w->t.name);
	} else {
		ret = et_table_open(x->s, w->t.name, NULL, &w->id);
	}
	if (!ret)
		ret = et_table_info(x->s, w->id, &ti);
	if (ret)
		return ret;
	if (ti.rows != p.rows || ti.dim != p.dim || ti.dtype != p.dtype ||
	    ti.optim != p.optim || ti.init != p.init ||
	    ti.init_scale != p.init_scale || ti.seed != p.seed ||
	    ti.flags != p.flags)
		return err_set(ET_EMISMATCH,
			       "%s: table %s differs from the delta's (shape, "
			       "optimizer or initializer)",
			       x->dir, w->t.name);
	if ((ret = grow(x, &w->t)))
		return ret;
	if (w->t.whole && existed) {
		w->cur.buf = malloc(DF_CHUNK_ROWS * sizeof(uint64_t));
		w->stale = malloc(DF_CHUNK_ROWS * sizeof(uint64_t));
		w->svals = malloc((size_t)DF_CHUNK_ROWS * w->t.dim * 4);
		w->sstate =
		    malloc((size_t)DF_CHUNK_ROWS * (w->t.state_floats + 1) * 4);
		if (!w->cur.buf || !w->stale || !w->svals || !w->sstate)
			return -ENOMEM;
		ret = et_tfile_open(f, ET_TFILE_RDONLY, &w->cur.tf);
	}
	return ret;
}

static void table_end(struct wtable *w)
{
	char f[4200];

	et_tfile_close(w->cur.tf);
	free(w->cur.buf);
	free(w->all);
	free(w->stale);
	free(w->svals);
	free(w->sstate);
	if (w->init) {
		et_tfile_close(w->init);
		snprintf(f, sizeof(f), "%s/init.et", w->scratch);
		unlink(f);
	}
	if (w->scratch[0])
		rmdir(w->scratch);
	*w = (struct wtable){0};
}

static int put_rows(struct wctx *x, struct wtable *w, const struct df_rec *rec)
{
	const unsigned char *p = rec->p;
	uint32_t n = rec->n, sf = w->t.state_floats;
	int ret = 0;

	if (!x->ids && !(x->ids = malloc(DF_CHUNK_ROWS * sizeof(uint64_t))))
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++, p += 8 + w->t.rec) {
		x->ids[i] = get64(p);
		dtype_decode((et_dtype)w->t.dtype, p + 8,
			     x->vals + (size_t)i * w->t.dim, w->t.dim);
		if (w->with_state)
			memcpy(x->state + (size_t)i * sf, p + 8 + w->vbytes,
			       4 * (size_t)sf);
	}
	if (w->cur.tf) { /* a whole table: its ids, for drop_missing */
		if (w->nall + n > w->capall) {
			size_t cap = w->capall ? 2 * w->capall : 1 << 16;
			uint64_t *a;

			while (cap < w->nall + n)
				cap *= 2;
			a = realloc(w->all, cap * sizeof(*a));
			if (!a)
				return -ENOMEM;
			w->all = a;
			w->capall = cap;
		}
		memcpy(w->all + w->nall, x->ids, n * sizeof(*x->ids));
		w->nall += n;
	}
	if (!ret)
		ret = et_write_rows_state(x->s, w->id, x->ids, n, x->vals,
					  w->with_state ? x->state : NULL);
	if (!ret)
		x->info->rows += n;
	return ret;
}

static int put_tombs(struct wctx *x, struct wtable *w, const struct df_rec *rec)
{
	int ret;

	if (!x->ids && !(x->ids = malloc(DF_CHUNK_ROWS * sizeof(uint64_t))))
		return -ENOMEM;
	for (uint32_t i = 0; i < rec->n; i++)
		x->ids[i] = get64(rec->p + 8 * (size_t)i);
	ret = et_erase(x->s, w->id, x->ids, rec->n, NULL);
	if (!ret)
		x->info->tombstones += rec->n;
	return ret;
}

static int write_all(struct wctx *x, struct df_reader *r,
		     const struct df_header *h, struct dstate *ds, void **dense)
{
	struct wtable w = {0};
	struct df_rec rec;
	int ret;

	do {
		ret = df_next(r, &rec);
		if (ret)
			break;
		switch (rec.kind) {
		case DF_DENSE:
			*dense = malloc(rec.bytes ? rec.bytes : 1);
			if (!*dense)
				ret = -ENOMEM;
			else
				memcpy(*dense, rec.p, rec.bytes);
			break;
		case DF_TABLE_HDR:
			ret = table_begin(x, &w, &rec, r, h);
			break;
		case DF_ROWS:
			ret = put_rows(x, &w, &rec);
			break;
		case DF_TOMBS:
			ret = put_tombs(x, &w, &rec);
			break;
		case DF_TABLE_END:
			if (w.cur.tf)
				ret = drop_missing(x, &w);
			if (!ret)
				ret = dstate_set(ds, w.t.name, w.t.to_sum);
			table_end(&w);
			break;
		}
	} while (!ret && rec.kind != DF_END);
	table_end(&w);
	return ret;
}

/* After a failure before the commit: the files of the tables this apply
 * created (no record names them), and the directory if it made it. */
static void unmake(struct wctx *x, bool made_dir)
{
	static const char *const ext[] = {".et", ".et.log", ".et.idx",
					  ".et.idx.new"};
	static const char *const leaf[] = {"LOCK", "CHECKPOINT",
					   "CHECKPOINT.tmp"};
	char f[4200];

	for (size_t i = 0; i < x->nmade; i++)
		for (size_t e = 0; e < sizeof(ext) / sizeof(ext[0]); e++) {
			snprintf(f, sizeof(f), "%s/%s%s", x->dir, x->made[i],
				 ext[e]);
			unlink(f);
		}
	for (size_t i = 0; made_dir && i < sizeof(leaf) / sizeof(leaf[0]);
	     i++) {
		snprintf(f, sizeof(f), "%s/%s", x->dir, leaf[i]);
		unlink(f);
	}
	if (made_dir)
		rmdir(x->dir);
}

int delta_write(struct df_reader *r, const struct df_header *h, const char *dir,
		int lock_fd, struct dstate *ds, struct et_delta_info *info)
{
	struct et_store_config cfg = {.ddr_bytes = APPLY_DDR};
	struct wctx x = {.dir = dir, .info = info};
	void *dense = NULL;
	int ret;

	bool made_dir = !mkdir(dir, 0755);

	if (!made_dir && errno != EEXIST)
		return err_set(-errno, "%s: %s", dir, strerror(errno));
	ret = lock_fd >= 0 ? store_open_lent(dir, &cfg, lock_fd, &x.s)
			   : et_store_open(dir, &cfg, &x.s);
	if (ret) {
		unmake(&x, made_dir);
		return ret;
	}
	ret = write_all(&x, r, h, ds, &dense);
	if (ret) {
		/* nothing committed: the copy goes back to as it was */
		store_discard(x.s);
		unmake(&x, made_dir);
		goto out;
	}
	ret = et_checkpoint(x.s, dense, h->dense_len);
	if (ret) { /* the record may be in place: keep what it names */
		store_discard(x.s);
		goto out;
	}
	ret = et_store_close(x.s);
	ds->commit = h->to_commit;
	if (!ret)
		ret = dstate_write(dir, ds);
out:
	free(x.made);
	free(dense);
	free(x.ids);
	free(x.vals);
	free(x.state);
	return ret;
}
