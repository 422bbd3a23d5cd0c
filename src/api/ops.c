/*
 * ops.c - the batch operations of the public API: gather and pooled gather,
 * update and pooled update, et_write_rows, and their multi-table forms:
 * each one checks its arguments, resolves its rows (resolve.c) and runs
 * its kernel (kernels.c), on the store's threads for a multi-table call.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "prefetch.h"
#include "resolve.h"
#include "state.h"
#include "dtype.h"
#include "kernels.h"
#include "mem_host.h"
#include "workers.h"

/* ------------------------------------------------------------ operations */

/* The start of a single-table call with a buffer named what: op_begin, the
 * buffer checked, op_prepare. An empty batch stops after op_begin. */
/* op_begin, then op_prepare; write: the call replaces each row's values
 * (with_state: and its optimizer state), so a row replaced whole is not
 * read first. */
static int op_open(et_store *s, int table, const uint64_t *ids, size_t n,
		   const void *buf, const char *what, struct table **t,
		   size_t *m, bool write, bool with_state)
{
	int ret = op_begin(s, table, ids, n, t);

	if (ret || n == 0)
		return ret;
	if (!buf)
		return err_set(-EINVAL, "%s is NULL", what);
	return op_prepare(s, *t, ids, n, m, false,
			  write && (with_state || !(*t)->g->state_floats));
}

/*
 * A single-table call of at least op_par_min inputs (4096), on a store
 * with threads, runs its row kernel on them in items of about PAR_ROWS
 * inputs (gather), bags (pooled gather) or unique rows (update), as a
 * multi-table call does. Each item computes its values exactly as the whole call would, so
 * the results are the same bits for any number of threads.
 *
 * An update large enough to have its misses placed in set order keeps the
 * threads busy while its own thread resolves, too: the gradients'
 * grouping (kern_group) runs on a worker during the lookup, and the rows
 * found in the top tier are updated beside the placement's parts
 * (place_sorted's side work) once nothing of the call can fail; the
 * misses are updated after it. Each row is updated once, from its own
 * gradients, whichever way.
 */
size_t op_par_min = 4096;
#define PAR_ROWS 4096

struct par {
	const struct tf_geom *g;
	struct opscr *o;
	size_t n, m; /* inputs, unique rows */
	float *out;
	const uint64_t *offsets;
	et_pool mode;
	const float *grads;
	const struct et_update_params *up;
	const uint32_t
	    *sel; /* update: unique rows sel[j0 .. j1), or j0 .. j1 */
	size_t j0, j1;
	size_t per;  /* pooled gather: bags an item */
	float *trow; /* each thread's scratch rows, trow_dim floats apart */
	size_t trow_dim;
	struct side_work w;
};

/* The threads for a call of n inputs (NULL: its own alone). */
static struct workers *par_workers(const et_store *s, size_t n)
{
	return n >= op_par_min ? s->wk : NULL;
}

/* The threads a store's calls use, its own counted. */
static size_t par_threads(const et_store *s)
{
	return s->cfg.threads > 1 ? s->cfg.threads : 1;
}

/* Items of per elements each for n elements, and item i's [a, b) of
 * lo .. hi. */
static size_t par_items(size_t n, size_t per)
{
	return (n + per - 1) / per;
}

static void par_range(size_t i, size_t lo, size_t hi, size_t per, size_t *a,
		      size_t *b)
{
	*a = lo + i * per;
	*b = *a + per < hi ? *a + per : hi;
}

static void par_gather(void *arg, size_t i, unsigned thread)
{
	const struct par *p = arg;
	size_t i0, i1;

	(void)thread;
	par_range(i, 0, p->n, PAR_ROWS, &i0, &i1);
	kern_gather(p->g, p->o->ptrs.p, p->o->inv.p, i0, i1,
		    p->out + i0 * p->g->dim);
}

static void par_pool(void *arg, size_t i, unsigned thread)
{
	const struct par *p = arg;
	size_t b0, b1;

	par_range(i, 0, p->j1, p->per, &b0, &b1); /* j1: the bags */
	kern_pool(p->g, p->o->ptrs.p, p->o->inv.p, p->offsets, b0, b1, p->mode,
		  p->out + b0 * p->g->dim, p->trow + thread * p->trow_dim);
}

static void par_update(void *arg, size_t i, unsigned thread)
{
	const struct par *p = arg;
	const struct opscr *o = p->o;
	size_t j0, j1;

	par_range(i, p->j0, p->j1, PAR_ROWS, &j0, &j1);
	kern_update_sel(p->g, o->ptrs.p, p->sel, j0, j1, o->acc.p,
			(uint32_t *)o->acc.p + p->n, p->grads, p->offsets,
			p->mode, p->up, p->trow + thread * p->trow_dim);
}

static void par_group(void *arg, size_t i, unsigned thread)
{
	const struct par *p = arg;
	const struct opscr *o = p->o;

	(void)i;
	(void)thread;
	kern_group(o->inv.p, p->n, p->m, p->offsets, o->acc.p,
		   (uint32_t *)o->acc.p + p->n);
}

int et_gather(et_store *s, int table, const uint64_t *ids, size_t n, float *out)
{
	struct table *t;
	size_t m;
	int ret;

	api_enter(s);
	ret = op_open(s, table, ids, n, out, "out", &t, &m, false, false);
	if (ret || n == 0)
		return ret;
	{
		struct par p = {.g = t->g, .o = s->sc.o, .n = n, .out = out};

		workers_run(par_workers(s, n), par_items(n, PAR_ROWS),
			    par_gather, &p);
	}
	return op_end(s, (uint32_t)table, false);
}

static int check_pool(et_pool mode)
{
	if (mode != ET_POOL_SUM && mode != ET_POOL_MEAN)
		return err_set(-EINVAL, "pool mode %d unknown", (int)mode);
	return 0;
}

static int check_offsets(const uint64_t *offsets, size_t nbags, size_t *n)
{
	if (!offsets)
		return err_set(-EINVAL, "offsets is NULL");
	if (offsets[0] != 0)
		return err_set(-EINVAL, "offsets[0] %llu, not 0",
			       (unsigned long long)offsets[0]);
	for (size_t b = 0; b < nbags; b++)
		if (offsets[b + 1] < offsets[b])
			return err_set(
			    -EINVAL, "offsets[%zu] %llu < offsets[%zu] %llu",
			    b + 1, (unsigned long long)offsets[b + 1], b,
			    (unsigned long long)offsets[b]);
	*n = offsets[nbags];
	return 0;
}

int et_gather_pooled(et_store *s, int table, const uint64_t *ids,
		     const uint64_t *offsets, size_t nbags, et_pool mode,
		     float *out)
{
	struct table *t;
	size_t n, m;
	int ret;

	api_enter(s);
	if (!s || !out)
		return err_set(-EINVAL, "%s is NULL", !s ? "s" : "out");
	ret = check_pool(mode);
	if (!ret)
		ret = check_offsets(offsets, nbags, &n);
	if (ret)
		return ret;
	ret = op_begin(s, table, ids, n, &t);
	if (ret)
		return ret;
	if (n) {
		ret = op_prepare(s, t, ids, n, &m, false, false);
		if (ret)
			return ret;
		ret = sbuf_reserve(&s->sc.trow,
				   par_threads(s) * t->g->dim * sizeof(float));
		if (ret) {
			op_end(s, (uint32_t)table, false);
			return ret;
		}
	}
	{
		struct par p = {.g = t->g,
				.o = s->sc.o,
				.n = n,
				.out = out,
				.offsets = offsets,
				.mode = mode,
				.j1 = nbags,
				.trow = s->sc.trow.p,
				.trow_dim = t->g->dim};

		/* bags of about PAR_ROWS inputs an item; an empty batch's
		 * bags (all empty) are zeroed */
		p.per = n > PAR_ROWS ? (size_t)((double)nbags * PAR_ROWS / n)
				     : nbags;
		if (!p.per)
			p.per = 1;
		workers_run(par_workers(s, n), par_items(nbags, p.per),
			    par_pool, &p);
	}
	return n ? op_end(s, (uint32_t)table, false) : 0;
}

/*
 * Admission (admit.h) of an update's unique rows, resolved into o for
 * table t: each one counts a sighting; those it drops give the kernel a
 * zeroed row of o->djunk to work on instead of their own (admit_undo puts
 * their own back), and are neither marked dirty nor queued, so the update
 * leaves no trace of them.
 */
static int admit_rows(struct table *t, struct opscr *o)
{
	const uint64_t *uniq = o->uniq.p;
	uint32_t rb = t->g->row_bytes, *by;
	void **ptrs = o->ptrs.p, **save;
	size_t nd = 0, k = 0;
	uint8_t *drop;
	int ret;

	o->ndrop = 0;
	if (t->kp.admit_after <= 1 || !o->m)
		return 0;
	ret = sbuf_reserve(&o->drop, o->m);
	if (ret)
		return ret;
	drop = o->drop.p;
	for (size_t i = 0; i < o->m; i++) {
		drop[i] = !keypol_admit(&t->kp, uniq[i],
					tf_row_logged(t->tf, uniq[i]));
		nd += drop[i];
	}
	if (!nd)
		return 0;
	ret = sbuf_reserve(&o->dsave, nd * sizeof(void *));
	if (!ret)
		ret = sbuf_reserve(&o->djunk, nd * (size_t)rb);
	if (ret)
		return ret;
	memset(o->djunk.p, 0, nd * (size_t)rb);
	save = o->dsave.p;
	for (size_t i = 0, j = 0; i < o->m; i++)
		if (drop[i]) {
			save[j] = ptrs[i];
			ptrs[i] = (char *)o->djunk.p + j++ * (size_t)rb;
		}
	by = o->bypass.p;
	for (size_t i = 0; i < o->nbypass; i++)
		if (!drop[by[i]])
			by[k++] = by[i];
	o->nbypass = k;
	o->ndrop = nd;
	t->st.keys_dropped += nd;
	return 0;
}

static void admit_undo(struct opscr *o)
{
	const uint8_t *drop = o->drop.p;
	void **ptrs = o->ptrs.p, **save = o->dsave.p;

	for (size_t i = 0, j = 0; o->ndrop && i < o->m; i++)
		if (drop[i])
			ptrs[i] = save[j++];
}

/* Marks the resolved rows of t dirty in whichever tier holds them (but
 * those admission dropped). With the memo of a prefetch on a direct top
 * tier and no dirty bit cleared in it since, the rows it found dirty are
 * left alone: their tag words are not read again. */
#define DIRTY_AHEAD 16
static void mark_dirty(et_store *s, const struct table *t, size_t m)
{
	const struct opscr *o = s->sc.o;
	const uint8_t *kind = o->kind.p;
	const uint64_t *slots = o->slots.p;
	const uint8_t *drop = o->ndrop ? o->drop.p : NULL;
	struct sclass *cl = &s->reg.cls[t->cls];
	const struct cache *top = top_of(&s->reg, cl);
	const uint8_t *was =
	    o->memo && o->memo_dirty && top->cleans == o->dirty_cleans
		? o->wasdirty.p
		: NULL;

	for (size_t i = 0; i < m; i++) {
		/* the tag words, asked for ahead: the rows' lines are long
		 * out of the cache when the tags of many are set */
		if (i + DIRTY_AHEAD < m && !(was && was[i + DIRTY_AHEAD])) {
			uint8_t k = kind[i + DIRTY_AHEAD] & ~K_CONFLICT;

			if (k == K_HBM || k == K_DDR)
				__builtin_prefetch(
				    &(k == K_HBM ? &cl->hbm : &cl->ddr)
					 ->tags[slots[i + DIRTY_AHEAD]],
				    1);
		}
		if ((drop && drop[i]) || (was && was[i]))
			continue;
		switch (kind[i] & ~K_CONFLICT) {
		case K_HBM:
			cache_set_dirty(&cl->hbm, slots[i]);
			break;
		case K_DDR:
			cache_set_dirty(&cl->ddr, slots[i]);
			break;
		}
	}
}

static int check_update_params(const struct et_update_params *up)
{
	if (!up)
		return err_set(-EINVAL, "up is NULL");
	if (!isfinite(up->lr))
		return err_set(-EINVAL, "up->lr %g not finite", up->lr);
	if (!isfinite(up->eps) || up->eps < 0)
		return err_set(-EINVAL, "up->eps %g not finite and >= 0",
			       up->eps);
	return 0;
}

/* Lists o's unique rows found in the top tier (sel[0 .. nh)), then its
 * misses (sel[nh .. m)), each in batch order, and hands the hits'
 * update to the placement as side work (none if there is no room). */
static void side_ready(struct par *p, size_t *nh_out)
{
	struct opscr *o = p->o;
	const uint8_t *kind = o->kind.p;
	uint32_t *sel;
	size_t nh = 0, k;

	if (sbuf_reserve(&o->sel, o->m * sizeof(uint32_t)))
		return;
	sel = o->sel.p;
	k = o->m - o->nm;
	for (size_t i = 0; i < o->m; i++) {
		if (kind[i] == K_DDR) /* a sorted placement's top tier */
			sel[nh++] = (uint32_t)i;
		else
			sel[k++] = (uint32_t)i;
	}
	p->sel = sel;
	p->j0 = 0;
	p->j1 = nh;
	p->w = (struct side_work){
	    .fn = par_update, .arg = p, .n = par_items(nh, PAR_ROWS)};
	o->side = &p->w;
	*nh_out = nh;
}

static int update_common(et_store *s, int table, const uint64_t *ids, size_t n,
			 const float *grads, const uint64_t *offsets,
			 et_pool mode, const struct et_update_params *up)
{
	struct workers *wk;
	struct opscr *o;
	struct table *t;
	struct par p;
	size_t m, nh = 0;
	int ret;

	ret = check_update_params(up);
	if (!ret)
		ret = op_begin(s, table, ids, n, &t);
	if (ret || n == 0)
		return ret;
	if (!grads)
		return err_set(-EINVAL, "%s is NULL",
			       offsets ? "bag_grads" : "grads");
	ret = dedup(s, ids, n, &m);
	if (ret)
		return ret;
	o = s->sc.o;
	wk = par_workers(s, m);
	p = (struct par){.g = t->g,
			 .o = o,
			 .n = n,
			 .m = m,
			 .offsets = offsets,
			 .mode = mode,
			 .grads = grads,
			 .up = up,
			 .trow_dim = KERN_UPD_ROWS * t->g->dim};
	ret = sbuf_reserve(&o->acc, (n + m + 1) * sizeof(uint32_t));
	if (!ret)
		ret = sbuf_reserve(&s->sc.trow,
				   par_threads(s) * p.trow_dim * sizeof(float));
	if (ret)
		return ret;
	p.trow = s->sc.trow.p;
	workers_begin(wk, 1, par_group, &p); /* meanwhile, the lookup */
	ret = op_lookup(s, t, ids, n, &m, true);
	workers_wait(wk);
	if (ret)
		return ret;
	/* admission drops rows after the placement: no side work then */
	if (wk && o->sorted && o->nm < m && t->kp.admit_after <= 1)
		side_ready(&p, &nh);
	ret = resolve_fetch(s, o, 1);
	if (ret)
		op_end(s, (uint32_t)table, false);
	else
		ret = op_place(s, t, n);
	o->side = NULL;
	if (ret)
		return ret;
	ret = admit_rows(t, o);
	if (ret) {
		op_end(s, (uint32_t)table, false);
		return ret;
	}
	if (p.w.ran) { /* the hits are done: the misses */
		p.j0 = nh;
		p.j1 = m;
	} else {
		p.sel = NULL;
		p.j0 = 0;
		p.j1 = m;
	}
	workers_run(wk, par_items(p.j1 - p.j0, PAR_ROWS), par_update, &p);
	admit_undo(o);
	mark_dirty(s, t, m);
	ret = op_end(s, (uint32_t)table, true);
	o->ndrop = 0;
	return ret;
}

int et_update(et_store *s, int table, const uint64_t *ids, size_t n,
	      const float *grads, const struct et_update_params *up)
{
	api_enter(s);
	return update_common(s, table, ids, n, grads, NULL, ET_POOL_SUM, up);
}

int et_update_pooled(et_store *s, int table, const uint64_t *ids,
		     const uint64_t *offsets, size_t nbags, et_pool mode,
		     const float *bag_grads, const struct et_update_params *up)
{
	size_t n;
	int ret;

	api_enter(s);
	ret = check_pool(mode);
	if (!ret)
		ret = check_offsets(offsets, nbags, &n);
	if (ret)
		return ret;
	return update_common(s, table, ids, n, bag_grads, offsets, mode, up);
}

int et_write_rows_state(et_store *s, int table, const uint64_t *ids, size_t n,
			const float *vals, const float *state)
{
	struct table *t;
	size_t m;
	int ret;

	api_enter(s);
	ret = op_open(s, table, ids, n, vals, "vals", &t, &m, true,
		      state != NULL);
	if (ret || n == 0)
		return ret;
	{
		void *const *ptrs = s->sc.o->ptrs.p;
		const uint32_t *last = s->sc.o->last.p;
		uint32_t dim = t->g->dim, sf = t->g->state_floats;

		for (size_t i = 0; i < m; i++) {
			dtype_encode(t->g->dtype, vals + (size_t)last[i] * dim,
				     ptrs[i], dim);
			if (state && sf)
				memcpy((char *)ptrs[i] + t->g->value_bytes,
				       state + (size_t)last[i] * sf,
				       sf * sizeof(float));
		}
		for (size_t i = 0; i < m && t->kp.admit_after > 1; i++)
			keypol_written(&t->kp,
				       ((const uint64_t *)s->sc.o->uniq.p)[i]);
	}
	mark_dirty(s, t, m);
	return op_end(s, (uint32_t)table, true);
}

int et_write_rows(et_store *s, int table, const uint64_t *ids, size_t n,
		  const float *vals)
{
	return et_write_rows_state(s, table, ids, n, vals, NULL);
}

/* ---------------------------------------------------------- multi-table */

/*
 * A multi-table call runs in two phases. On the store's thread, table by
 * table in batch order, exactly what a single call does before its
 * kernel: dedup, then resolve, each into the table's own scratch
 * (s->sc.multi[k]); the rows of every table stay pinned with the call's
 * epoch, so no later table's placement moves an earlier table's rows.
 * Then the row kernels run as items over the threads (workers.c): bags of
 * one table for a gather; a range of one table's unique rows, summed and
 * applied, for an update. Items write disjoint outputs and each computes
 * its values exactly as the single call does, so the results are the
 * same bits for any number of threads. Last, on the store's thread again,
 * rows are marked dirty and the call ends as one operation.
 */

/* Bags or unique rows an item takes at least. */
#define ITEM_BAGS 32
#define ITEM_ROWS 64

struct multi {
	et_store *s;
	const struct et_table_batch *b;
	size_t nt;
	et_pool mode;
	const struct et_update_params *up;
	const size_t *first; /* item of each table's first piece; [nt]: all */
	size_t trow_dim;     /* floats of each thread's scratch rows */
};

/* Checks every descriptor and the tables' uniqueness; nothing changes. */
static int multi_check(et_store *s, const struct et_table_batch *b, size_t nt,
		       et_pool mode, bool update)
{
	uint8_t *seen;
	int ret;

	if (!s)
		return err_set(-EINVAL, "s is NULL");
	if (nt && !b)
		return err_set(-EINVAL, "batch is NULL, with %zu tables", nt);
	ret = check_pool(mode);
	if (!ret)
		ret = sbuf_reserve(&s->sc.map,
				   s->reg.ntables ? s->reg.ntables : 1);
	if (ret)
		return ret;
	seen = s->sc.map.p;
	memset(seen, 0, s->reg.ntables);
	for (size_t k = 0; k < nt; k++) {
		struct table *t = table_get(s, b[k].table);
		char what[48];
		size_t n;

		if (!t)
			return err_set(ET_ENOTABLE,
				       "batch[%zu].table %d unknown: the store "
				       "has %u",
				       k, b[k].table, s->reg.ntables);
		if (seen[b[k].table])
			return err_set(-EINVAL,
				       "batch[%zu].table %d appears twice", k,
				       b[k].table);
		seen[b[k].table] = 1;
		if (!b[k].offsets)
			return err_set(-EINVAL, "batch[%zu].offsets is NULL",
				       k);
		ret = check_offsets(b[k].offsets, b[k].nbags, &n);
		if (ret) {
			char why[200];

			snprintf(why, sizeof(why), "%s", et_errdetail());
			return err_set(ret, "batch[%zu].%s", k, why);
		}
		if (update ? !b[k].grads && b[k].nbags
			   : !b[k].out && b[k].nbags)
			return err_set(-EINVAL, "batch[%zu].%s is NULL", k,
				       update ? "grads" : "out");
		snprintf(what, sizeof(what), "batch[%zu].ids", k);
		ret = ids_check(t, b[k].table, b[k].ids, n, what);
		if (ret)
			return ret;
	}
	return 0;
}

/* Swaps o with the scratch the last two prefetches kept at place k of
 * their batch if it holds these n ids; whether it did. */
static bool pf_scratch_take(et_store *s, size_t k, const uint64_t *ids,
			    size_t n, struct opscr *o)
{
	struct opscr *sets[2] = {s->pf.scr, s->pf.prev};
	uint32_t counts[2] = {s->pf.nscr, s->pf.nprev};

	for (int i = 0; i < 2; i++) {
		if (k < counts[i] && scratch_holds(&sets[i][k], ids, n)) {
			struct opscr x = *o;

			*o = sets[i][k];
			sets[i][k] = x;
			return true;
		}
	}
	return false;
}

/* Phase one: every table's batch deduplicated and looked up, the misses
 * of all of them read at once (the tables placed meanwhile, as far as
 * resolve_fetch can), then placed table by table, and (for an update)
 * room for the summed gradients. On failure the call has ended. */
static int multi_prepare(et_store *s, const struct et_table_batch *b, size_t nt,
			 bool update, size_t *trow_dim)
{
	int ret = 0;

	*trow_dim = 0;
	for (size_t k = 0; k < nt; k++) {
		struct table *t = &s->reg.tables[b[k].table];
		struct opscr *o = &s->sc.multi[k];
		size_t n = b[k].offsets[b[k].nbags];

		bool held = n && scratch_holds(o, b[k].ids, n);

		/* the batch prefetched at this place, by the last prefetch
		 * or the one before: its dedup (and memo) stands */
		if (n && !held)
			held = pf_scratch_take(s, k, b[k].ids, n, o);
		o->m = held ? o->dm : 0;
		o->nm = 0;
		o->sorted = false;
		o->init_later = false;
		o->nbypass = 0;
		o->t = (uint32_t)b[k].table;
		if (t->g->dim > *trow_dim)
			*trow_dim = t->g->dim;
		if (!n)
			continue;
		scratch_use(s, o);
		ret = op_lookup(s, t, b[k].ids, n, &o->m, held);
		if (ret) /* it has ended the call, or not begun it */
			goto out;
	}
	ret = resolve_fetch(s, s->sc.multi, nt);
	if (ret) {
		op_finish(s, 0);
		goto out;
	}
	/* every table placed before anything else can fail: no table is
	 * left with slots waiting for their bytes (resolve_fetch stops
	 * placing at a table whose placement fails) */
	for (size_t k = 0; k < nt; k++) {
		struct table *t = &s->reg.tables[b[k].table];
		struct opscr *o = &s->sc.multi[k];
		size_t n = b[k].offsets[b[k].nbags];

		if (!n)
			continue;
		scratch_use(s, o);
		ret = op_place(s, t, n);
		if (ret) /* it has ended the call */
			goto out;
	}
	for (size_t k = 0; k < nt && update; k++) {
		struct table *t = &s->reg.tables[b[k].table];
		struct opscr *o = &s->sc.multi[k];
		size_t n = b[k].offsets[b[k].nbags];

		if (!n)
			continue;
		scratch_use(s, o);
		/* the inputs of each unique row */
		ret = sbuf_reserve(&o->acc, (n + o->m + 1) * sizeof(uint32_t));
		if (ret) {
			op_finish(s, 0);
			goto out;
		}
		kern_group(o->inv.p, n, o->m, b[k].offsets, o->acc.p,
			   (uint32_t *)o->acc.p + n);
		ret = admit_rows(t, o);
		if (ret) { /* the rows of the tables before are theirs */
			for (size_t j = 0; j < k; j++) {
				admit_undo(&s->sc.multi[j]);
				s->sc.multi[j].ndrop = 0;
			}
			op_finish(s, 0);
			goto out;
		}
	}
	*trow_dim *= KERN_UPD_ROWS; /* an update's rows taken together */
	ret = sbuf_reserve(&s->sc.trow,
			   par_threads(s) * *trow_dim * sizeof(float));
	if (ret)
		op_finish(s, 0);
out:
	scratch_use(s, &s->sc.one);
	return ret;
}

/* Pieces of table k: bags (gather) or unique rows (update), in items. */
static size_t multi_pieces(const struct multi *mu, size_t k, bool update)
{
	size_t n = update ? mu->s->sc.multi[k].m : mu->b[k].nbags;
	size_t per = update ? ITEM_ROWS : ITEM_BAGS;

	return (n + per - 1) / per;
}

/* The table of item i and the piece [lo, hi) of its bags or rows. */
static size_t multi_item(const struct multi *mu, size_t i, bool update,
			 size_t *lo, size_t *hi)
{
	size_t k = 0, n, pieces, j;

	while (mu->first[k + 1] <= i)
		k++;
	n = update ? mu->s->sc.multi[k].m : mu->b[k].nbags;
	pieces = mu->first[k + 1] - mu->first[k];
	j = i - mu->first[k];
	/* pieces of equal size but for the remainder, which the first
	 * ones take */
	*lo = j * (n / pieces) + (j < n % pieces ? j : n % pieces);
	*hi = *lo + n / pieces + (j < n % pieces);
	return k;
}

static void gather_item(void *arg, size_t i, unsigned thread)
{
	const struct multi *mu = arg;
	size_t lo, hi, k = multi_item(mu, i, false, &lo, &hi);
	const struct table *t = &mu->s->reg.tables[mu->b[k].table];
	const struct opscr *o = &mu->s->sc.multi[k];

	kern_pool(t->g, o->ptrs.p, o->inv.p, mu->b[k].offsets, lo, hi, mu->mode,
		  mu->b[k].out + lo * t->g->dim,
		  (float *)mu->s->sc.trow.p + thread * mu->trow_dim);
}

static void update_item(void *arg, size_t i, unsigned thread)
{
	const struct multi *mu = arg;
	size_t lo, hi, k = multi_item(mu, i, true, &lo, &hi);
	const struct table *t = &mu->s->reg.tables[mu->b[k].table];
	const struct opscr *o = &mu->s->sc.multi[k];
	size_t n = mu->b[k].offsets[mu->b[k].nbags];

	kern_update(t->g, o->ptrs.p, lo, hi, o->acc.p, (uint32_t *)o->acc.p + n,
		    mu->b[k].grads, mu->b[k].offsets, mu->mode, mu->up,
		    (float *)mu->s->sc.trow.p + thread * mu->trow_dim);
}

static int multi_run(et_store *s, const struct et_table_batch *b, size_t nt,
		     et_pool mode, const struct et_update_params *up)
{
	bool update = up != NULL;
	struct multi mu = {s, b, nt, mode, up, NULL, 0};
	size_t *first;
	int ret;

	s->tm.t0 = now_ns();
	ret = op_start(s);
	if (!ret)
		ret = scratch_grow(&s->sc.multi, &s->sc.nmulti, nt);
	if (ret)
		return ret;
	ret = multi_prepare(s, b, nt, update, &mu.trow_dim);
	if (ret)
		return ret;
	/* the item index of each table's first piece, in s->sc.map */
	ret = sbuf_reserve(&s->sc.map, (nt + 1) * sizeof(*first));
	if (ret) {
		op_finish(s, 0);
		return ret;
	}
	first = s->sc.map.p;
	first[0] = 0;
	for (size_t k = 0; k < nt; k++)
		first[k + 1] = first[k] + multi_pieces(&mu, k, update);
	mu.first = first;
	workers_run(s->wk, first[nt], update ? update_item : gather_item, &mu);
	for (size_t k = 0; k < nt && update; k++) {
		scratch_use(s, &s->sc.multi[k]);
		admit_undo(s->sc.o);
		mark_dirty(s, &s->reg.tables[b[k].table], s->sc.o->m);
		if (!ret)
			ret = op_bypass_done(s, (uint32_t)b[k].table, true);
	}
	for (size_t k = 0; k < nt; k++) { /* pins end with the call */
		s->sc.multi[k].nbypass = 0;
		s->sc.multi[k].ndrop = 0;
	}
	scratch_use(s, &s->sc.one);
	return op_finish(s, ret);
}

int et_gather_pooled_multi(et_store *s, const struct et_table_batch *batch,
			   size_t ntables, et_pool mode)
{
	int ret;

	api_enter(s);
	ret = multi_check(s, batch, ntables, mode, false);
	return ret ? ret : multi_run(s, batch, ntables, mode, NULL);
}

int et_update_pooled_multi(et_store *s, const struct et_table_batch *batch,
			   size_t ntables, et_pool mode,
			   const struct et_update_params *up)
{
	int ret;

	api_enter(s);
	ret = check_update_params(up);
	if (!ret)
		ret = multi_check(s, batch, ntables, mode, true);
	return ret ? ret : multi_run(s, batch, ntables, mode, up);
}
