/*
 * delta_apply.c - et_delta_apply (include/embtier.h, "deltas"; delta.c
 * has the overview, docs/DELTA.md the design).
 *
 * Two passes over the file. The first checks every record and what the
 * records say together, and collects each table's header; only then is
 * the copy's DIR/DELTA compared with where the delta starts, and the copy
 * opened as a store. The second writes: rows with et_write_rows_state,
 * tombstones with et_erase, and for a table taken whole, the copy's rows
 * the delta lacks are dropped (listed from the copy's file as of its last
 * commit: a keyed table's are erased, a row-indexed table's set back to
 * their initial value, read from a scratch table file of the same
 * parameters). One et_checkpoint commits it all, with the dense state.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "delta_file.h"
#include "delta_state.h"
#include "delta_write.h"
#include "dtype.h"
#include "embtier.h"
#include "error.h"
#include "le.h"
#include "state.h"

struct ap_table {
	struct df_table t;
	uint64_t rows, tombs;
};

/* ------------------------------------------------------------ checking */

struct vstate {
	struct df_reader *r;
	const struct df_header *h;
	struct ap_table *tabs;
	uint32_t nt;
	bool in_table, in_tombs, any_row, any_tomb;
	uint64_t last_row, last_tomb, rows, tombs;
	bool dense_seen;
};

static int vbad(struct vstate *v, const char *what)
{
	return err_set(ET_EDELTA, "%s: %s (record %llu)", v->r->path, what,
		       (unsigned long long)v->r->seq);
}

static int check_table(struct vstate *v, const struct df_table *t)
{
	size_t ds = dtype_size((et_dtype)t->dtype);
	uint32_t want;

	if (table_name_check(t->name))
		return vbad(v, "a table name not allowed");
	if (t->flags & ET_TABLE_KEYED ? t->rows != 0
				      : t->rows == 0 || t->rows > 1ull << 40)
		return vbad(v, "a table's rows out of range");
	if (!ds || t->dim == 0 || t->dim > 65536 || t->state_floats > 1 ||
	    t->optim > 1 || t->init > 2)
		return vbad(v, "a table's parameters out of range");
	want = (uint32_t)(t->dim * ds) +
	       (v->h->flags & ET_DELTA_STATE ? 4 * t->state_floats : 0);
	if (t->rec != want)
		return vbad(v, "a table's row size disagrees with its shape");
	for (uint32_t i = 0; i < v->nt; i++)
		if (!strcmp(v->tabs[i].t.name, t->name))
			return vbad(v, "a table named twice");
	return 0;
}

static int check_ids(struct vstate *v, const struct df_table *t,
		     const unsigned char *p, uint32_t n, size_t stride,
		     bool tomb)
{
	uint64_t *last = tomb ? &v->last_tomb : &v->last_row;
	bool *any = tomb ? &v->any_tomb : &v->any_row;

	for (uint32_t i = 0; i < n; i++, p += stride) {
		uint64_t id = get64(p);

		/* rows come in the source's log order; tombstones ascend */
		if (*any && id <= *last && tomb)
			return vbad(v, "ids out of order");
		if (!(t->flags & ET_TABLE_KEYED) && id >= t->rows)
			return vbad(v, "a row id past the table's rows");
		*last = id;
		*any = true;
	}
	return 0;
}

static int check_rec(struct vstate *v, const struct df_rec *rec)
{
	struct ap_table *a = v->nt ? &v->tabs[v->nt - 1] : NULL;
	int ret;

	if (rec->kind == DF_DENSE) {
		if (v->r->seq != 1 || rec->bytes != v->h->dense_len)
			return vbad(v, "a misplaced dense state");
		v->dense_seen = true;
		return 0;
	}
	if (v->h->dense_len && !v->dense_seen)
		return vbad(v, "the dense state is missing");
	switch (rec->kind) {
	case DF_TABLE_HDR: {
		struct df_table t;
		struct ap_table *nt;

		if (v->in_table || v->nt == v->h->tables)
			return vbad(v, "a misplaced table header");
		if ((ret = df_table_parse(v->r, rec, &t)) ||
		    (ret = check_table(v, &t)))
			return ret;
		nt = realloc(v->tabs, (v->nt + 1) * sizeof(*nt));
		if (!nt)
			return -ENOMEM;
		v->tabs = nt;
		v->tabs[v->nt++] = (struct ap_table){.t = t};
		v->in_table = true;
		v->in_tombs = v->any_row = v->any_tomb = false;
		return 0;
	}
	case DF_ROWS:
		if (!v->in_table || v->in_tombs || !rec->n ||
		    rec->n > DF_CHUNK_ROWS ||
		    rec->bytes != (uint64_t)rec->n * (8 + a->t.rec))
			return vbad(v, "a misplaced or misshapen rows record");
		a->rows += rec->n;
		return check_ids(v, &a->t, rec->p, rec->n, 8 + a->t.rec, false);
	case DF_TOMBS:
		if (!v->in_table || !(a->t.flags & ET_TABLE_KEYED) ||
		    a->t.whole || !rec->n || rec->n > DF_CHUNK_ROWS ||
		    rec->bytes != 8 * (uint64_t)rec->n)
			return vbad(v, "a misplaced or misshapen tombstones "
				       "record");
		v->in_tombs = true;
		a->tombs += rec->n;
		return check_ids(v, &a->t, rec->p, rec->n, 8, true);
	case DF_TABLE_END:
		if (!v->in_table || rec->bytes != 16 ||
		    get64(rec->p) != a->rows || get64(rec->p + 8) != a->tombs)
			return vbad(v, "a table's end does not count its rows");
		v->in_table = false;
		v->rows += a->rows;
		v->tombs += a->tombs;
		return 0;
	case DF_END:
		if (v->in_table || v->nt != v->h->tables ||
		    get64(rec->p) != v->rows || get64(rec->p + 8) != v->tombs)
			return vbad(v, "the END record does not count the "
				       "tables, rows or tombstones");
		return 0;
	}
	return vbad(v, "a record of unknown kind");
}

/* The whole file, checked; the tables' headers in *tabs. */
static int check_file(struct df_reader *r, const struct df_header *h,
		      struct ap_table **tabs, uint32_t *nt)
{
	struct vstate v = {.r = r, .h = h};
	struct df_rec rec;
	int ret;

	do {
		ret = df_next(r, &rec);
		if (!ret)
			ret = check_rec(&v, &rec);
	} while (!ret && rec.kind != DF_END);
	if (ret) {
		free(v.tabs);
		return ret;
	}
	*tabs = v.tabs;
	*nt = v.nt;
	return 0;
}

/* Whether the delta starts where the copy at dir stands. */
static int check_chain(const char *dir, const struct df_header *h,
		       const struct ap_table *tabs, uint32_t nt,
		       struct dstate *ds)
{
	int ret = dstate_read(dir, ds);
	bool need = false;

	if (ret && ret != -ENOENT)
		return ret;
	for (uint32_t i = 0; i < nt; i++)
		need |= !tabs[i].t.whole;
	if (!need)
		return 0;
	if (ret == -ENOENT)
		return err_set(ET_EMISMATCH,
			       "%s: the delta starts at commit %llu, and the "
			       "copy was never brought to a commit by a delta "
			       "(no DELTA file): apply a delta from 0 first",
			       dir, (unsigned long long)h->from_commit);
	if (ds->commit != h->from_commit)
		return err_set(ET_EMISMATCH,
			       "%s: the delta starts at commit %llu, the copy "
			       "stands at commit %llu",
			       dir, (unsigned long long)h->from_commit,
			       (unsigned long long)ds->commit);
	for (uint32_t i = 0; i < nt; i++) {
		const struct dstate_table *e = dstate_find(ds, tabs[i].t.name);

		if (!tabs[i].t.whole && (e ? e->sum : 0) != tabs[i].t.from_sum)
			return err_set(ET_EMISMATCH,
				       "%s: table %s: the delta continues "
				       "another history than the copy's "
				       "(journal chain %016llx, the copy's "
				       "%016llx)",
				       dir, tabs[i].t.name,
				       (unsigned long long)tabs[i].t.from_sum,
				       (unsigned long long)(e ? e->sum : 0));
	}
	return 0;
}

int delta_apply_lent(const char *path, const char *dir, int lock_fd,
		     struct et_delta_info *info)
{
	struct df_reader r = {.fd = -1};
	struct df_header h;
	struct ap_table *tabs = NULL;
	struct dstate ds = {0};
	struct et_delta_info tmp;
	uint32_t nt = 0;
	int ret;

	if (!path || !dir)
		return err_set(-EINVAL, "et_delta_apply: NULL %s",
			       path ? "dir" : "path");
	if (!info)
		info = &tmp;
	*info = (struct et_delta_info){0};
	ret = df_open(&r, path, &h);
	if (ret)
		return ret;
	ret = check_file(&r, &h, &tabs, &nt);
	if (!ret)
		ret = check_chain(dir, &h, tabs, nt, &ds);
	if (!ret) {
		info->from_commit = h.from_commit;
		info->to_commit = h.to_commit;
		info->checkpoint_id = h.checkpoint_id;
		info->tables = nt;
		info->flags = h.flags;
		info->bytes = r.size;
		for (uint32_t i = 0; i < nt; i++)
			info->whole += tabs[i].t.whole;
		df_rewind(&r);
		ret = delta_write(&r, &h, dir, lock_fd, &ds, info);
	}
	free(tabs);
	dstate_free(&ds);
	df_close(&r);
	return ret;
}

int et_delta_apply(const char *path, const char *dir,
		   struct et_delta_info *info)
{
	return delta_apply_lent(path, dir, -1, info);
}
