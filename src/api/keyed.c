/*
 * keyed.c - what only keyed tables have: et_erase, et_key_policy_set, and
 * the expiry each checkpoint runs (keyed_expire). The admission filter
 * itself is applied by the updates (ops.c) through admit.h.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "keyed.h"
#include "prefetch.h"
#include "state.h"
#include "error.h"

/* The saved filter of table t that the last commit's record names. */
static struct adm_ref adm_named(const et_store *s, const struct table *t)
{
	const struct ckpt_table *e = ckpt_find(&s->cm.rec, t->name);

	return e ? (struct adm_ref){.sum = e->asum, .ref = e->aref}
		 : (struct adm_ref){0};
}

/* A keyed table of s, or an error. */
static int keyed_table(et_store *s, int table, const char *call,
		       struct table **out)
{
	struct table *t;

	if (!s)
		return err_set(-EINVAL, "s is NULL");
	t = table_get(s, table);
	if (!t)
		return no_table(s, table);
	if (!t->g->keyed)
		return err_set(-EINVAL,
			       "%s: table %d is row-indexed, not keyed "
			       "(ET_TABLE_KEYED)",
			       call, table);
	*out = t;
	return 0;
}

/* Drops ids[0..n) of table t from every cache (dirty copies too). */
static void uncache(et_store *s, uint32_t tid, const uint64_t *ids, size_t n)
{
	struct table *t = &s->reg.tables[tid];
	struct sclass *cl = &s->reg.cls[t->cls];

	if (!s->reg.caches_ready)
		return;
	s->reg.gen++; /* memos may name slots emptied here */
	for (size_t i = 0; i < n; i++) {
		uint64_t slot;

		if (s->reg.has_hbm) {
			slot = cache_lookup(&cl->hbm, tid, ids[i]);
			if (slot != CACHE_NONE)
				cache_remove(&cl->hbm, slot, t->g->row_bytes);
		}
		slot = cache_lookup(&cl->ddr, tid, ids[i]);
		if (slot != CACHE_NONE)
			cache_remove(&cl->ddr, slot, t->g->row_bytes);
	}
}

/* Nothing of the store's in flight or queued: every row written back so
 * far is in its log, so the log can forget rows. */
static int settle(et_store *s)
{
	int ret = drain(s);

	if (!ret && s->lost)
		ret = err_set(ET_EFAILED, "rows were lost to a failed "
					  "allocation; close the store");
	if (!ret)
		ret = wb_run(s);
	return ret;
}

/* Whether table tid's id is dirty in a cache. */
static bool cached_dirty(et_store *s, uint32_t tid, uint64_t id)
{
	struct sclass *cl = &s->reg.cls[s->reg.tables[tid].cls];
	uint64_t slot;

	if (!s->reg.caches_ready)
		return false;
	if (s->reg.has_hbm) {
		slot = cache_lookup(&cl->hbm, tid, id);
		if (slot != CACHE_NONE && cache_dirty(&cl->hbm, slot))
			return true;
	}
	slot = cache_lookup(&cl->ddr, tid, id);
	return slot != CACHE_NONE && cache_dirty(&cl->ddr, slot);
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Erases ids (distinct) from t's log and caches; *k: how many were stored
 * (in the log, or only in a cache, dirty). The log first: its only
 * failure is memory, before it changes anything. */
static int erase_rows(et_store *s, uint32_t tid, const uint64_t *ids, size_t n,
		      uint64_t *k)
{
	et_tfile *tf = s->reg.tables[tid].tf;
	uint64_t only_cached = 0;
	int ret;

	for (size_t i = 0; i < n; i++)
		if (!tf_row_logged(tf, ids[i]) && cached_dirty(s, tid, ids[i]))
			only_cached++;
	ret = tf_erase_rows(tf, ids, n, k);
	if (ret)
		return ret;
	uncache(s, tid, ids, n);
	*k += only_cached;
	return 0;
}

int et_erase(et_store *s, int table, const uint64_t *ids, size_t n,
	     uint64_t *erased)
{
	struct table *t;
	uint64_t k = 0, *uniq;
	size_t m = 1;
	int ret;

	api_enter(s);
	if (erased)
		*erased = 0;
	ret = keyed_table(s, table, "et_erase", &t);
	if (ret)
		return ret;
	if (n && !ids)
		return err_set(-EINVAL, "ids is NULL");
	if (!n)
		return 0;
	ret = settle(s);
	if (ret)
		return ret;
	/* the distinct ids, sorted */
	uniq = malloc(n * sizeof(*uniq));
	if (!uniq)
		return err_set(-ENOMEM, "a copy of %zu ids", n);
	memcpy(uniq, ids, n * sizeof(*uniq));
	qsort(uniq, n, sizeof(*uniq), cmp_u64);
	for (size_t i = 1; i < n; i++)
		if (uniq[i] != uniq[m - 1])
			uniq[m++] = uniq[i];
	ret = erase_rows(s, (uint32_t)table, uniq, m, &k);
	free(uniq);
	if (ret)
		return ret;
	t->st.keys_erased += k;
	if (erased)
		*erased = k;
	return 0;
}

/* DIR/NAME.et of table t. */
static int table_path_of(const et_store *s, const struct table *t, char *buf,
			 size_t cap)
{
	if ((size_t)snprintf(buf, cap, "%s/%s.et", s->dir, t->name) >= cap)
		return -ENAMETOOLONG;
	return 0;
}

int et_key_policy_set(et_store *s, int table, const struct et_key_policy *kp)
{
	struct adm_ref named;
	char path[4200];
	struct table *t;
	int ret;

	api_enter(s);
	ret = keyed_table(s, table, "et_key_policy_set", &t);
	if (ret)
		return ret;
	if (!kp)
		return err_set(-EINVAL, "kp is NULL");
	ret = keypol_check(kp);
	if (ret)
		return ret;
	/* ids written before admission was on are stored: in the log, so
	 * that the filter need not know them */
	if (kp->admit_after > 1 && t->kp.admit_after <= 1) {
		ret = settle(s);
		for (uint32_t i = 0;
		     !ret && s->reg.caches_ready && i < s->reg.ncls; i++) {
			if (s->reg.has_hbm)
				ret = wb_write_dirty(s, &s->reg.cls[i].hbm);
			if (!ret)
				ret = wb_write_dirty(s, &s->reg.cls[i].ddr);
		}
		if (ret)
			return ret;
	}
	/* ages count in commits, from the one to come (expiry, and the
	 * bound's order); scores too, for a bound by count */
	if (kp->half_life) {
		ret =
		    tf_scores(t->tf, (uint32_t)(s->cm.ckpt + 1), kp->half_life);
		if (ret)
			return err_set(ret, "the scores of table %d's ids",
				       table);
	} else if (kp->expire_after || kp->max_keys) {
		ret = tf_stamps(t->tf, (uint32_t)(s->cm.ckpt + 1));
		if (ret)
			return err_set(ret, "the stamps of table %d's ids",
				       table);
	}
	named = adm_named(s, t);
	ret = table_path_of(s, t, path, sizeof(path));
	return ret ? ret : keypol_apply(&t->kp, kp, path, &named);
}

int keyed_save(et_store *s, uint64_t commit)
{
	char path[4200];

	for (uint32_t i = 0; i < s->reg.ntables; i++) {
		struct table *t = &s->reg.tables[i];
		struct adm_ref named;
		int ret;

		t->kp.saved = (struct adm_ref){0};
		if (!t->g->keyed || t->kp.admit_after <= 1)
			continue;
		named = adm_named(s, t);
		ret = table_path_of(s, t, path, sizeof(path));
		if (!ret)
			ret = keypol_save(&t->kp, path, commit, &named);
		if (ret)
			return ret;
	}
	return 0;
}

void keyed_saved(et_store *s)
{
	for (uint32_t i = 0; i < s->reg.ntables; i++)
		s->reg.tables[i].kp.counted = false;
}

bool keyed_counted(const et_store *s)
{
	for (uint32_t i = 0; i < s->reg.ntables; i++)
		if (s->reg.tables[i].kp.counted)
			return true;
	return false;
}

/* Erases the rows of table i that a listing (ret, rows[0..n), freed
 * here) gave, adding to *count how many were stored. */
static int erase_listed(et_store *s, uint32_t i, int ret, uint64_t *rows,
			size_t n, uint64_t *count)
{
	uint64_t k = 0;

	if (!ret && n)
		ret = erase_rows(s, i, rows, n, &k);
	free(rows);
	if (!ret)
		*count += k;
	return ret;
}

int keyed_expire(et_store *s, uint64_t commit)
{
	for (uint32_t i = 0; i < s->reg.ntables; i++) {
		struct table *t = &s->reg.tables[i];
		uint64_t *rows;
		size_t n;
		int ret = 0;

		if (t->g->keyed && t->kp.expire_after) {
			ret = tf_expired(t->tf, (uint32_t)commit,
					 t->kp.expire_after, &rows, &n);
			ret = erase_listed(s, i, ret, rows, n,
					   &t->st.keys_expired);
		}
		if (!ret && t->g->keyed && t->kp.max_keys) {
			/* oldest first, or lowest scores */
			ret = tf_over(t->tf, t->kp.max_keys, (uint32_t)commit,
				      t->kp.half_life, &rows, &n);
			ret = erase_listed(s, i, ret, rows, n,
					   &t->st.keys_evicted);
		}
		if (ret)
			return ret;
	}
	return 0;
}

void keyed_next(et_store *s)
{
	for (uint32_t i = 0; i < s->reg.ntables; i++) {
		struct table *t = &s->reg.tables[i];

		if (t->g->keyed && (t->kp.expire_after || t->kp.max_keys))
			(void)tf_stamps(t->tf, (uint32_t)(s->cm.ckpt + 1));
	}
}
