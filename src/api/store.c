/*
 * store.c - the public calls on a store as a whole: opening and closing
 * it, creating and opening its tables (a flush first when the new split
 * of the tiers moves cached rows), et_flush, et_lookahead, checkpoints
 * and the commit of a clean close.
 *
 * The batch operations are in ops.c, prefetch in prefetch.c, stats in
 * stats.c; the layers below are in src/store/ (state.h composes a store's
 * state and gives an overview) and docs/ARCHITECTURE.md maps them.
 *
 * One thread at a time per store.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint.h"
#include "commit.h"
#include "error.h"
#include "io.h"
#include "mem_host.h"
#include "policy.h"
#include "keyed.h"
#include "prefetch.h"
#include "pipeline.h"
#include "state.h"
#include "workers.h"

#define DEFAULT_DDR  (256ULL << 20)
#define DEFAULT_WAYS 16
/* The largest slot that may be asked for: a row of ET_MAX_DIM f32 values and
 * its optimizer state, with room to spare. */
#define MAX_SLOT_BYTES (ET_MAX_DIM * 4u + 64)

static int store_flush(et_store *s);

/* ------------------------------------------------------------- registry */

/* Table names become file names: 1..64 of [A-Za-z0-9_.-], no leading '.'
 * (no hidden files, no "." or ".."). */
int table_name_check(const char *name)
{
	size_t n;

	if (!name)
		return err_set(-EINVAL, "name is NULL");
	n = strlen(name);
	if (n == 0 || n > NAME_MAX_LEN)
		return err_set(ET_ECONFIG,
			       "table name of %zu characters: 1..%d allowed", n,
			       NAME_MAX_LEN);
	if (name[0] == '.')
		return err_set(ET_ECONFIG, "table name \"%s\" starts with '.'",
			       name);
	for (size_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)name[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		      (c >= '0' && c <= '9') || c == '_' || c == '-' ||
		      c == '.'))
			return err_set(ET_ECONFIG,
				       "table name: character 0x%02x at %zu "
				       "not in [A-Za-z0-9_.-]",
				       c, i);
	}
	return 0;
}

static int name_free(const et_store *s, const char *name)
{
	for (uint32_t i = 0; i < s->reg.ntables; i++)
		if (!strcmp(s->reg.tables[i].name, name))
			return err_set(-EEXIST, "table \"%s\" already open",
				       name);
	return 0;
}

static int table_path(const et_store *s, const char *name, char **out)
{
	size_t n = strlen(s->dir) + strlen(name) + 5; /* "/", ".et", NUL */
	char *p = mem_alloc(n, 0);

	if (!p)
		return -ENOMEM;
	snprintf(p, n, "%s/%s.et", s->dir, name);
	*out = p;
	return 0;
}

/*
 * Adds tf as a table named name: enters it in its size class and plans
 * the tiers again. If the caches are allocated and the new plan moves
 * them, every dirty row is written back first and the caches are freed,
 * to be allocated anew by the next operation: the store never holds two
 * generations of caches at once. On error nothing has changed.
 */
static int table_add(et_store *s, et_tfile *tf, const char *name, int *id)
{
	const struct tf_geom *g = tf_geom(tf);
	uint32_t cls, slot;
	bool moves;
	int ret;

	ret = name_free(s, name);
	if (!ret)
		ret = reg_class_plan(s, g, &cls, &moves, &slot);
	if (ret)
		return ret;
	ret = wb_widen(s, slot);
	if (!ret && moves) {
		ret = store_flush(s); /* drains the I/O thread too */
		if (!ret)
			caches_drop(s);
	}
	if (!ret)
		ret = reg_table_add(s, tf, name, cls, id);
	if (ret) {
		reg_class_undo(s, g, cls);
		return ret;
	}
	tf_attach_io(tf, s->io);
	tf_log_writes(tf, true); /* rows go to the log, never in place */
	return 0;
}

int et_table_create(et_store *s, const char *name,
		    const struct et_table_params *p, int *id)
{
	et_tfile *tf;
	char *path;
	int ret;

	api_enter(s);
	if (!s || !p || !id)
		return err_set(-EINVAL, "%s is NULL",
			       !s   ? "s"
			       : !p ? "p"
				    : "id");
	ret = table_name_check(name);
	if (!ret)
		ret = name_free(s, name);
	if (ret)
		return ret;
	ret = table_path(s, name, &path);
	if (ret)
		return ret;
	ret = tf_create(path, p, true, &tf);
	if (!ret) {
		ret = table_add(s, tf, name, id);
		if (ret) {
			et_tfile_close(tf);
			unlink(path);
		}
	}
	mem_free(path, strlen(path) + 1, 0);
	return ret;
}

/* ET_EMISMATCH, naming the first field, unless every non-zero field of e
 * matches the file. */
static int expect_check(const struct tf_geom *g,
			const struct et_table_params *e)
{
#define CHECK(field)                                                           \
	if (e->field && e->field != g->field)                                  \
		return err_set(ET_EMISMATCH,                                   \
			       "expect->" #field " %llu, the file has %llu",   \
			       (unsigned long long)e->field,                   \
			       (unsigned long long)g->field);
	CHECK(rows)
	CHECK(dim)
	CHECK(dtype)
	CHECK(optim)
	CHECK(init)
	if (e->init_scale && e->init_scale != g->init_scale)
		return err_set(ET_EMISMATCH,
			       "expect->init_scale %.9g, the file has %.9g",
			       e->init_scale, g->init_scale);
	CHECK(seed)
	CHECK(block_size)
#undef CHECK
	if ((e->flags & ET_TABLE_KEYED) && !g->keyed)
		return err_set(ET_EMISMATCH, "expect->flags: keyed, the file "
					     "is a row-indexed table");
	if (e->rows && g->keyed)
		return err_set(ET_EMISMATCH,
			       "expect->rows %llu, the file is a keyed table",
			       (unsigned long long)e->rows);
	return 0;
}

int et_table_open(et_store *s, const char *name,
		  const struct et_table_params *expect, int *id)
{
	et_tfile *tf;
	char *path;
	int ret;

	api_enter(s);
	if (!s || !id)
		return err_set(-EINVAL, "%s is NULL", !s ? "s" : "id");
	ret = table_name_check(name);
	if (!ret)
		ret = name_free(s, name);
	if (ret)
		return ret;
	ret = table_path(s, name, &path);
	if (ret)
		return ret;
	ret = tf_open(path, 0, true, &tf);
	mem_free(path, strlen(path) + 1, 0);
	if (ret)
		return ret;
	ret = expect ? expect_check(tf_geom(tf), expect) : 0;
	if (!ret)
		ret = table_add(s, tf, name, id);
	if (ret)
		et_tfile_close(tf);
	return ret;
}

int et_table_info(et_store *s, int table, struct et_table_info *info)
{
	struct table *t = table_get(s, table);
	int ret;

	api_enter(s);
	if (!t)
		return no_table(s, table);
	ret = drain(s); /* the file's map is the I/O thread's meanwhile */
	return ret ? ret : et_tfile_info(t->tf, info);
}

/* ------------------------------------------------------------- lifetime */

static int config_check(struct et_store_config *c)
{
	int ret;

	if (!c->ddr_bytes)
		c->ddr_bytes = DEFAULT_DDR;
	if (!c->hbm_policy)
		c->hbm_policy = ET_POLICY_LRU;
	if (!c->ddr_policy)
		c->ddr_policy = ET_POLICY_LRU;
	if (!c->ways)
		c->ways = DEFAULT_WAYS;
	if (!c->io_depth)
		c->io_depth = IO_DEFAULT_DEPTH;
	if (!policy_get(c->hbm_policy))
		return err_set(ET_ECONFIG,
			       "et_store_config.hbm_policy %d unknown",
			       (int)c->hbm_policy);
	if (!policy_get(c->ddr_policy))
		return err_set(ET_ECONFIG,
			       "et_store_config.ddr_policy %d unknown",
			       (int)c->ddr_policy);
	if (c->ways > 64)
		return err_set(ET_ECONFIG,
			       "et_store_config.ways %u out of range 1..64",
			       c->ways);
	if (c->io_depth > IO_MAX_DEPTH)
		return err_set(ET_ECONFIG,
			       "et_store_config.io_depth %u out of range 1..%d",
			       c->io_depth, IO_MAX_DEPTH);
	if (c->hbm_backend != ET_HBM_SIM && c->hbm_backend != ET_HBM_CUDA)
		return err_set(ET_ECONFIG,
			       "et_store_config.hbm_backend %d unknown",
			       (int)c->hbm_backend);
	if (c->hbm_bytes && c->hbm_backend == ET_HBM_CUDA &&
	    !mem_tier_hbm_cuda())
		return err_set(ET_ECONFIG,
			       "et_store_config.hbm_backend ET_HBM_CUDA: no "
			       "CUDA device, or a build without CUDA");
	if (c->prefetch_thread > 1)
		return err_set(ET_ECONFIG,
			       "et_store_config.prefetch_thread %u: 0 or 1",
			       c->prefetch_thread);
	if (c->threads > WORKERS_MAX)
		return err_set(ET_ECONFIG,
			       "et_store_config.threads %u out of range 0..%d",
			       c->threads, WORKERS_MAX);
	if (c->slot_bytes > MAX_SLOT_BYTES)
		return err_set(ET_ECONFIG,
			       "et_store_config.slot_bytes %u out of range "
			       "0..%u",
			       c->slot_bytes, MAX_SLOT_BYTES);
	/* Capacities must hold one set of the smallest slot (or of the
	 * slots asked for). */
	{
		uint32_t slot = c->slot_bytes ? (c->slot_bytes + 3) & ~3u : 4;

		ret = tier_fits("ddr_bytes", c->ddr_bytes, c->ways, slot,
				c->ddr_policy);
		if (!ret && c->hbm_bytes)
			ret = tier_fits("hbm_bytes", c->hbm_bytes, c->ways,
					slot, c->hbm_policy);
	}
	return ret;
}

static int store_open(const char *dir, const struct et_store_config *cfg,
		      int lent_lock, et_store **out)
{
	struct et_store_config c = {0};
	struct stat st;
	et_store *s;
	int ret, why = 0;

	err_clear();
	if (!dir || !*dir || !out)
		return err_set(-EINVAL, "%s",
			       !out   ? "out is NULL"
			       : !dir ? "dir is NULL"
				      : "dir is empty");
	if (cfg)
		c = *cfg;
	ret = config_check(&c);
	if (ret)
		return ret;
	if (stat(dir, &st)) {
		if (errno != ENOENT)
			return -errno;
		if (mkdir(dir, 0755))
			return -errno;
	} else if (!S_ISDIR(st.st_mode)) {
		return err_set(-ENOTDIR, "dir exists and is not a directory");
	}
	s = mem_alloc(sizeof(*s), 0);
	if (!s)
		return -ENOMEM;
	s->cfg = c;
	s->reg.has_hbm = c.hbm_bytes > 0;
	s->reg.count_draws =
	    (s->reg.has_hbm && policy_get(c.hbm_policy)->on_hits) ||
	    policy_get(c.ddr_policy)->on_hits;
	s->pins.epoch = 1;
	s->cm.lock_fd = lent_lock;
	s->cm.lock_lent = lent_lock >= 0;
	scratch_use(s, &s->sc.one);
	s->dir = mem_alloc(strlen(dir) + 1, 0);
	if (!s->dir) {
		ret = -ENOMEM;
		goto err_free;
	}
	memcpy(s->dir, dir, strlen(dir) + 1);
	ret = io_open(c.io_depth, &s->io, &why);
	if (ret)
		goto err_free;
	ret = pl_start(&s->pf.pl);
	if (!ret && c.threads > 1)
		ret = workers_start(c.threads, &s->wk);
	if (ret)
		goto err_free;
	ret = commit_open(s);
	if (ret)
		goto err_free;
	*out = s;
	return 0;

err_free:
	commit_close(s);
	workers_stop(s->wk);
	sbuf_free(&s->sc.trow);
	pl_stop(s->pf.pl);
	io_close(s->io);
	if (s->dir)
		mem_free(s->dir, strlen(s->dir) + 1, 0);
	mem_free(s, sizeof(*s), 0);
	return ret;
}

int et_direct_bytes(const struct et_store_config *cfg,
		    const struct et_table_params *p, size_t n, int tier,
		    uint64_t *bytes)
{
	struct et_store_config c = cfg ? *cfg : (struct et_store_config){0};
	uint32_t *rb = NULL;
	uint64_t *rows = NULL;
	int ret;

	err_clear();
	if ((!p && n) || !bytes)
		return err_set(-EINVAL, "p or bytes is NULL");
	if (tier != 0 && tier != 1)
		return err_set(ET_ECONFIG, "tier %d: 0 (HBM) or 1 (DDR)", tier);
	/* its capacities are what is asked for */
	c.hbm_bytes = 0;
	c.ddr_bytes = (uint64_t)1 << 62;
	ret = config_check(&c);
	if (ret)
		return ret;
	rb = malloc((n ? n : 1) * sizeof(*rb));
	rows = malloc((n ? n : 1) * sizeof(*rows));
	if (!rb || !rows)
		ret = -ENOMEM;
	for (size_t i = 0; !ret && i < n; i++) {
		ret = tf_params_check(&p[i]);
		if (!ret && (p[i].flags & ET_TABLE_KEYED))
			ret = err_set(ET_ECONFIG,
				      "table %zu is keyed: it has no number "
				      "of rows to give slots to",
				      i);
		rb[i] = tf_params_row_bytes(&p[i]);
		rows[i] = p[i].rows;
	}
	if (!ret)
		ret = reg_direct_bytes(&c, rb, rows, n, tier, bytes);
	free(rb);
	free(rows);
	return ret;
}

int et_store_open(const char *dir, const struct et_store_config *cfg,
		  et_store **out)
{
	return store_open(dir, cfg, -1, out);
}

int store_open_lent(const char *dir, const struct et_store_config *cfg,
		    int lock_fd, et_store **out)
{
	return store_open(dir, cfg, lock_fd, out);
}

static void store_free(et_store *s)
{
	pf_stop(s);
	pl_stop(s->pf.pl); /* before the files and the ring it uses go */
	workers_stop(s->wk);
	reg_free(s);
	la_free(&s->la);
	io_close(s->io);
	pins_free(&s->pins);
	wb_free(&s->wb);
	scratch_free(&s->sc);
	for (uint32_t i = 0; i < s->pf.nscr; i++)
		opscr_free(&s->pf.scr[i]);
	mem_free(s->pf.scr, s->pf.nscr * sizeof(*s->pf.scr), 0);
	for (uint32_t i = 0; i < s->pf.nprev; i++)
		opscr_free(&s->pf.prev[i]);
	mem_free(s->pf.prev, s->pf.nprev * sizeof(*s->pf.prev), 0);
	commit_close(s);
	mem_free(s->dir, strlen(s->dir) + 1, 0);
	mem_free(s, sizeof(*s), 0);
}

void store_discard(et_store *s)
{
	if (s)
		store_free(s);
}

/* Whether any table's row log changed since the last commit. */
static bool changed_since_commit(const et_store *s)
{
	for (uint32_t i = 0; i < s->reg.ntables; i++)
		if (tf_changed(s->reg.tables[i].tf))
			return true;
	return keyed_counted(s); /* an admission filter counted ids */
}

/*
 * A clean close commits what was written since the last commit: a new
 * record with the same checkpoint id and dense state and, if there was a
 * checkpoint, the flag that the tables moved on past it.
 */
static int close_commit(et_store *s)
{
	struct ckpt_rec r;
	void *dense = NULL;
	size_t len = 0;
	int ret;

	ret = ckpt_read(s->dir, &r, true, &dense, &len);
	ckpt_rec_free(&r);
	if (ret)
		return ret;
	if (r.commit != s->cm.ckpt) {
		free(dense);
		return err_set(-ESTALE,
			       "%s/CHECKPOINT was replaced behind the "
			       "store's back",
			       s->dir);
	}
	r.commit = s->cm.ckpt + 1;
	if (r.id)
		r.flags |= CKPT_MOVED;
	ret = keyed_save(s, r.commit);
	if (!ret)
		ret = commit_run(s, &r, dense, len);
	else
		ckpt_rec_free(&r);
	free(dense);
	return ret;
}

int et_store_close(et_store *s)
{
	int ret;

	if (!s)
		return 0;
	pf_stop(s); /* its thread, after the prefetch it runs */
	err_clear();
	ret = store_flush(s);
	if (!ret && changed_since_commit(s))
		ret = close_commit(s);
	store_free(s);
	return ret;
}

/* ----------------------------------------------------------- checkpoint */

int et_checkpoint(et_store *s, const void *dense, size_t len)
{
	struct ckpt_rec r;
	int ret;

	api_enter(s);
	if (!s || (len && !dense))
		return err_set(-EINVAL, "%s",
			       !s ? "s is NULL"
				  : "dense is NULL, len is not 0");
	ret = store_flush(s); /* drains, writes back, syncs every file */
	if (!ret) /* keyed tables' ids not written lately, or too many, leave */
		ret = keyed_expire(s, s->cm.ckpt + 1);
	if (ret)
		return ret;
	memset(&r, 0, sizeof(r));
	r.commit = s->cm.ckpt + 1;
	r.id = s->cm.ckpt_id + 1;
	ret = keyed_save(s, r.commit); /* before the record names it */
	if (ret)
		return ret;
	ret = commit_run(s, &r, dense, len);
	if (!ret)
		keyed_saved(s);
	keyed_next(s);
	return ret;
}

int et_checkpoint_read(et_store *s, uint64_t *id, void **dense, size_t *len)
{
	struct ckpt_rec r;
	int ret;

	api_enter(s);
	if (!s || !id)
		return err_set(-EINVAL, "%s is NULL", !s ? "s" : "id");
	ret = ckpt_read(s->dir, &r, true, dense, len);
	*id = r.id;
	ckpt_rec_free(&r);
	return ret;
}

int et_checkpoint_info(et_store *s, struct et_checkpoint_info *ci)
{
	api_enter(s);
	if (!s || !ci)
		return err_set(-EINVAL, "%s is NULL", !s ? "s" : "ci");
	return et_checkpoint_read_dir(s->dir, ci, NULL, NULL);
}

int et_checkpoint_read_dir(const char *dir, struct et_checkpoint_info *ci,
			   void **dense, size_t *len)
{
	struct ckpt_rec r;
	struct stat st;
	size_t n = 0;
	void *d = NULL;
	int ret;

	err_clear();
	if (!dir || !ci || (dense && !len))
		return err_set(-EINVAL, "%s is NULL",
			       !dir  ? "dir"
			       : !ci ? "ci"
				     : "len");
	memset(ci, 0, sizeof(*ci));
	if (dense) {
		*dense = NULL;
		*len = 0;
	}
	if (stat(dir, &st))
		return -errno;
	if (!S_ISDIR(st.st_mode))
		return -ENOTDIR;
	ret = ckpt_read(dir, &r, true, dense ? &d : NULL, &n);
	ckpt_rec_free(&r);
	if (ret)
		return ret;
	n = r.dense_len;
	ci->id = r.id;
	ci->commit = r.commit;
	ci->dense_len = n;
	ci->tables_moved = (r.flags & CKPT_MOVED) != 0;
	if (dense) {
		*dense = d;
		*len = n;
	} else {
		free(d);
	}
	return 0;
}

/* ---------------------------------------------------------------- stats */

int et_flush(et_store *s)
{
	api_enter(s);
	if (!s)
		return err_set(-EINVAL, "s is NULL");
	return store_flush(s);
}

static int store_flush(et_store *s)
{
	int ret;

	ret = drain(s);
	if (ret)
		return ret;
	if (s->lost)
		return err_set(ET_EFAILED, "rows were lost to a failed "
					   "allocation; close the store");
	/* Rows left over from a failed write-back first. */
	ret = wb_run(s);
	if (ret)
		return ret;
	s->failed = 0;
	for (uint32_t i = 0; s->reg.caches_ready && i < s->reg.ncls && !ret;
	     i++) {
		if (s->reg.has_hbm)
			ret = wb_write_dirty(s, &s->reg.cls[i].hbm);
		if (!ret)
			ret = wb_write_dirty(s, &s->reg.cls[i].ddr);
	}
	if (ret)
		return ret;
	for (uint32_t i = 0; i < s->reg.ntables; i++) {
		ret = et_tfile_sync(s->reg.tables[i].tf);
		if (ret) {
			s->failed = s->failed ? s->failed : ret;
			return ret;
		}
	}
	return 0;
}

int et_lookahead(et_store *s, const struct et_batch *batches, size_t nbatches)
{
	int ret;

	api_enter(s);
	if (!s || (nbatches && !batches))
		return err_set(-EINVAL, "%s is NULL", !s ? "s" : "batches");
	if (nbatches > ET_MAX_LOOKAHEAD)
		return err_set(-EINVAL, "nbatches %zu out of range 0..%d",
			       nbatches, ET_MAX_LOOKAHEAD);
	for (size_t b = 0; b < nbatches; b++) {
		const struct et_batch *bt = &batches[b];

		if (bt->ntables && !bt->tables)
			return err_set(-EINVAL, "batches[%zu].tables is NULL",
				       b);
		for (size_t k = 0; k < bt->ntables; k++) {
			struct table *t = table_get(s, bt->tables[k].table);
			char what[48];

			if (!t)
				return err_set(ET_ENOTABLE,
					       "batches[%zu].tables[%zu].table "
					       "%d unknown: the store has %u",
					       b, k, bt->tables[k].table,
					       s->reg.ntables);
			snprintf(what, sizeof(what),
				 "batches[%zu].tables[%zu].ids", b, k);
			ret =
			    ids_check(t, bt->tables[k].table, bt->tables[k].ids,
				      bt->tables[k].n, what);
			if (ret)
				return ret;
		}
	}
	return la_set(&s->la, batches, nbatches, s->reg.ntables);
}
