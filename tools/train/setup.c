/*
 * setup.c - everything before embtier-train's first step, and after its
 * last: the model, the training and held-out data, the run directory, the
 * store and its tables (this rank's shards under MPI), and the dense state
 * of a resumed run; then teardown. Also the error helpers every file uses.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "trainer.h"

int fail(const char *what, int err)
{
	cli_error_code(what, err);
	return err ? err : -EINVAL;
}

/* A data source's error: the file and, for a file without one good
 * line, what was wrong with it. */
int data_fail(const char *path, const struct data_src *d, int err)
{
	if (err == -ENODATA) {
		cli_error("%s: no valid Criteo line in a whole pass (%" PRIu64
			  " malformed)",
			  path, d->c.malformed);
		return err;
	}
	return fail(path, err);
}

/* Rows of table t: --rows, or log-spaced between the preset's bounds. */
static uint64_t table_rows(const struct opts *o, int t)
{
	double a, b, f;

	if (o->rows)
		return o->rows;
	if (o->ntables == 1)
		return o->rows_lo;
	a = log((double)o->rows_lo);
	b = log((double)o->rows_hi);
	f = (double)t / (o->ntables - 1);
	return (uint64_t)llround(exp(a + f * (b - a)));
}

static int make_dir(struct trainer *tr)
{
	if (tr->o.dir) {
		if (strlen(tr->o.dir) >= sizeof(tr->dir) - 32)
			return fail(tr->o.dir, -ENAMETOOLONG);
		snprintf(tr->dir, sizeof(tr->dir), "%s", tr->o.dir);
		return 0;
	}
#ifdef ET_WITH_MPI
	{
		int ret = dist_make_dir(tr->dir, sizeof(tr->dir));

		if (ret)
			return fail("/var/tmp", ret);
		tr->dir_made = true;
		return 0;
	}
#endif
	snprintf(tr->dir, sizeof(tr->dir), "/var/tmp/embtier-train.XXXXXX");
	if (!mkdtemp(tr->dir))
		return fail("/var/tmp", -errno);
	tr->dir_made = true;
	return 0;
}

/* --export-delta: its directory, and any missing above it (mkdir -p). */
static int make_delta_dir(const char *dir)
{
	char path[PATH_MAX];
	size_t len = strlen(dir);

	if (len >= sizeof(path))
		return fail(dir, -ENAMETOOLONG);
	memcpy(path, dir, len + 1);
	for (char *p = path + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(path, 0755) && errno != EEXIST)
			return fail(path, -errno);
		*p = '/';
	}
	if (mkdir(path, 0755) && errno != EEXIST)
		return fail(path, -errno);
	return 0;
}

/* --export-delta: what is exported and where to (made). Under MPI each
 * rank exports its own shard, a store of its own, dir/rank-N, into
 * EXPORT/rank-N. */
static int delta_dirs(struct trainer *tr)
{
	const char *out = tr->o.export_delta;
	size_t n = sizeof(tr->delta_src), m = sizeof(tr->delta_out);
	int a, b;

#ifdef ET_WITH_MPI
	a = snprintf(tr->delta_src, n, "%s/rank-%d", tr->dir, tr->o.rank);
	b = snprintf(tr->delta_out, m, "%s/rank-%d", out, tr->o.rank);
#else
	a = snprintf(tr->delta_src, n, "%s", tr->dir);
	b = snprintf(tr->delta_out, m, "%s", out);
#endif
	if (a < 0 || (size_t)a >= n || b < 0 || (size_t)b >= m)
		return fail(out, -ENAMETOOLONG);
	return make_delta_dir(tr->delta_out);
}

/* Removes the directory we made and the files in it. */
void remove_dir(struct trainer *tr)
{
	DIR *d = opendir(tr->dir);
	struct dirent *e;

	if (!d) {
		cli_error("%s: cannot remove: %s", tr->dir, strerror(errno));
		return;
	}
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		if (unlinkat(dirfd(d), e->d_name, 0))
			cli_error("%s/%s: cannot remove: %s", tr->dir,
				  e->d_name, strerror(errno));
	}
	closedir(d);
	if (rmdir(tr->dir))
		cli_error("%s: cannot remove: %s", tr->dir, strerror(errno));
}

static void table_params(const struct opts *o, const uint64_t *rows, int t,
			 struct et_table_params *p)
{
	memset(p, 0, sizeof(*p));
	/* a keyed table's ids are any u64: rows[t] is then only the space
	 * the synthetic generator draws rows from */
	p->rows = o->keyed ? 0 : rows[t];
	p->flags = o->keyed ? ET_TABLE_KEYED : 0;
	p->dim = (uint32_t)o->dim;
	p->dtype = o->dtype;
	p->optim = ET_OPT_ROWWISE_ADAGRAD;
	p->init = ET_INIT_UNIFORM;
	p->init_scale = o->init_scale;
	p->seed = data_mix64(o->seed ^ (0x7461626cULL << 32)) + (uint64_t)t;
}

#ifdef ET_WITH_MPI
/* The MPI build: this rank's shard of every table (dist.h). */
static int key_policy(struct trainer *tr, int t, const char *name);

static int open_dist(struct trainer *tr, const struct et_store_config *cfg,
		     double t0)
{
	const struct opts *o = &tr->o;
	struct dist_table *dt = calloc(o->ntables, sizeof(*dt));
	char msg[256];
	int ret;

	if (!dt)
		return fail("setup", -ENOMEM);
	for (int t = 0; t < o->ntables; t++) {
		snprintf(dt[t].name, sizeof(dt[t].name), "t%02d", t);
		table_params(o, tr->rows, t, &dt[t].p);
	}
	ret = dist_open(&tr->dist, tr->dir, o->reshard_from, reshard_check, tr,
			cfg, o->resume, o->row_wise, dt, o->ntables, o->batch,
			tr->tid, msg, sizeof(msg));
	free(dt);
	if (ret) {
		if (o->rank == 0 && o->reshard_from) /* every rank has it */
			cli_error("reshard from %s: %s", o->reshard_from, msg);
		else if (o->rank == 0)
			cli_error("%s: %s", tr->dir, msg);
		return ret;
	}
	tr->store = dist_store(tr->dist);
	tr->open_s = cli_now() - t0;
	for (int t = 0; t < o->ntables && !ret; t++) {
		char name[32];

		snprintf(name, sizeof(name), "%d", t);
		if (tr->tid[t] >= 0)
			ret = key_policy(tr, t, name);
	}
	return ret;
}
#endif

/* --admit, --expire-after, --max-keys, --half-life: table t's policy, set
 * again on every open (the filter, the ages and the scores come back as
 * last committed). */
static int key_policy(struct trainer *tr, int t, const char *name)
{
	const struct opts *o = &tr->o;
	struct et_key_policy kp = {
	    .admit_after = (uint32_t)o->admit,
	    .expire_after = (uint32_t)o->expire_after,
	    .max_keys = o->max_keys,
	    .half_life = (uint32_t)o->half_life,
	};
	char what[96];
	int ret;

	if (!o->keyed || (o->admit <= 1 && !o->expire_after && !o->max_keys))
		return 0;
	ret = et_key_policy_set(tr->store, tr->tid[t], &kp);
	if (ret) {
		snprintf(what, sizeof(what), "key policy of table %s", name);
		return fail(what, ret);
	}
	return 0;
}

static int open_store(struct trainer *tr)
{
	const struct opts *o = &tr->o;
	struct et_store_config cfg = {
	    .hbm_bytes = (uint64_t)(o->hbm_mb * 1048576.0),
	    .ddr_bytes = (uint64_t)(o->ddr_mb * 1048576.0),
	    .hbm_policy = o->policy,
	    .ddr_policy = o->policy,
	    .threads = (uint32_t)o->store_threads,
	    .prefetch_thread = (uint32_t)o->pf_thread,
	};
	double t0 = cli_now();
	char what[96];
	int ret;

	if (!cfg.ddr_bytes) {
		cli_usage_error("--ddr-mb: the DDR tier cannot be empty");
		return -EINVAL;
	}
#ifdef ET_WITH_MPI
	return open_dist(tr, &cfg, t0);
#endif
	ret = et_store_open(tr->dir, &cfg, &tr->store);
	if (ret)
		return fail(tr->dir, ret);
	for (int t = 0; t < o->ntables; t++) {
		struct et_table_params p;
		char name[32];

		table_params(o, tr->rows, t, &p);
		snprintf(name, sizeof(name), "t%02d", t);
		if (o->resume) {
			ret = et_table_open(tr->store, name, &p, &tr->tid[t]);
		} else {
			ret = et_table_create(tr->store, name, &p, &tr->tid[t]);
			if (ret == -EEXIST) {
				cli_error("%s: table %s exists (use --resume, "
					  "or a fresh --dir)",
					  tr->dir, name);
				return ret;
			}
		}
		if (ret) {
			snprintf(what, sizeof(what), "%s table %s",
				 o->resume ? "open" : "create", name);
			return fail(what, ret);
		}
		ret = key_policy(tr, t, name);
		if (ret)
			return ret;
	}
	tr->open_s = cli_now() - t0;
	return 0;
}

/* How well the hidden teacher itself scores the held-out set: the
 * ceiling a model of these samples can reach. */
static void teacher_score(struct trainer *tr)
{
	double loss = 0;
	size_t k = 0;

	for (int i = 0; i < tr->neval; i++) {
		const struct batch *b = &tr->eval[i];

		for (int j = 0; j < b->n; j++, k++) {
			tr->scores[k] = b->truth[j];
			tr->labels[k] = b->label[j];
			loss += model_logloss(b->truth[j], b->label[j]);
		}
	}
	tr->teacher_logloss = loss / (double)k;
	tr->teacher_auc = auc_exact(tr->scores, tr->labels, k);
}

/* The held-out set's batches, and the training batches: the current one
 * and those read ahead. */
static int alloc_batches(struct trainer *tr)
{
	const struct opts *o = &tr->o;
	uint64_t left = o->eval_samples;
	int ret;

	tr->neval = (int)((o->eval_samples + o->batch - 1) / o->batch);
	tr->eval = calloc(tr->neval, sizeof(*tr->eval));
	tr->scores = calloc(o->eval_samples, sizeof(float));
	tr->labels = calloc(o->eval_samples, sizeof(float));
	if (!tr->eval || !tr->scores || !tr->labels)
		return fail("eval set", -ENOMEM);
	for (int i = 0; i < tr->neval; i++) {
		int cap = left < (uint64_t)o->batch ? (int)left : o->batch;

		ret = batch_alloc(&tr->eval[i], cap, o->ntables,
				  o->data ? 1 : o->bag);
		if (ret)
			return fail("eval set", ret);
		left -= (uint64_t)cap;
	}
	for (int i = 0; i < 2 + (o->lookahead > 1 ? o->lookahead - 1 : 0);
	     i++) {
		/* this rank's share of the global batch */
		ret = batch_alloc(&tr->bat[i], o->batch / o->nranks, o->ntables,
				  o->data ? 1 : o->bag);
		if (ret)
			return fail("batch", ret);
	}
	return 0;
}

/* Synthetic data: the held-out set is stream 1, training stream 0. */
static int open_synth(struct trainer *tr)
{
	const struct opts *o = &tr->o;
	struct synth_params sp = {
	    .seed = o->seed,
	    .ntables = o->ntables,
	    .rows = tr->rows,
	    .hot = o->hot,
	    .zipf = o->zipf,
	    .bag = o->bag,
	    .dense_weight = o->dense_weight,
	    .keyed = o->keyed,
	};
	struct data_src ev;
	int ret;

	for (int t = 0; t < o->ntables; t++)
		if (sp.hot > tr->rows[t])
			sp.hot = tr->rows[t];
	ret = data_synth_init(&ev, &sp, 1);
	if (ret)
		return fail("synthetic data", ret);
	for (int i = 0; i < tr->neval; i++)
		data_next(&ev, &tr->eval[i]);
	data_close(&ev);
	teacher_score(tr);
	ret = data_synth_init(&tr->train, &sp, 0);
	if (ret)
		return fail("synthetic data", ret);
	return 0;
}

/* Criteo: the held-out set is the head of --eval-data or --data */
static int open_criteo(struct trainer *tr)
{
	const struct opts *o = &tr->o;
	const char *ef = o->eval_data ? o->eval_data : o->data;
	uint64_t salt = data_mix64(o->seed ^ 0x637269ULL);
	/* keyed: a category's id is a 64-bit hash of (feature, value) */
	const uint64_t *rows = o->keyed ? NULL : tr->rows;
	struct data_src ev;
	int ret;

	ret = data_criteo_open(&ev, ef, o->ntables, rows, salt);
	if (ret)
		return fail(ef, ret);
	for (int i = 0; i < tr->neval && !ret; i++) {
		ret = data_next(&ev, &tr->eval[i]);
		if (!ret && ev.c.wraps) {
			cli_error("%s: fewer than %" PRIu64
				  " valid lines for the held-out set",
				  ef, o->eval_samples);
			data_close(&ev);
			return -ENODATA;
		}
	}
	if (ret) {
		data_fail(ef, &ev, ret);
		data_close(&ev);
		return ret;
	}
	tr->eval_malformed = ev.c.malformed;
	ret = data_criteo_open(&tr->train, o->data, o->ntables, rows, salt);
	if (ret) {
		data_close(&ev);
		return fail(o->data, ret);
	}
	if (!o->eval_data) {
		/* training passes start after the held-out lines */
		ret = data_seek(&tr->train, data_tell(&ev));
		data_set_start(&tr->train);
	}
	data_close(&ev);
	if (ret)
		return fail(o->data, ret);
	return 0;
}

static int open_data(struct trainer *tr)
{
	int ret = alloc_batches(tr);

	if (ret)
		return ret;
	return tr->o.data ? open_criteo(tr) : open_synth(tr);
}

int setup(struct trainer *tr)
{
	const struct opts *o = &tr->o;
	struct model_config mc = {
	    .ndense = DATA_NDENSE,
	    .ntables = o->ntables,
	    .dim = o->dim,
	    .nbot = o->nbot,
	    .ntop = o->ntop,
	    .max_batch = o->batch,
	    .optim = o->mlp_optim,
	    .lr = o->lr,
	    .eps = 1e-8f,
	    .seed = o->seed,
	};
	size_t nemb = (size_t)o->ntables * o->batch * o->dim;
	int ret;

	memcpy(mc.bot, o->bot, sizeof(mc.bot));
	memcpy(mc.top, o->top, sizeof(mc.top));
	tr->rows = calloc(o->ntables, sizeof(*tr->rows));
	tr->tid = calloc(o->ntables, sizeof(*tr->tid));
	tr->touched = calloc(o->ntables, sizeof(*tr->touched));
	tr->pf = calloc(o->ntables, sizeof(*tr->pf));
	tr->tb = calloc(o->ntables, sizeof(*tr->tb));
	if (o->lookahead) {
		tr->la = calloc((size_t)o->lookahead, sizeof(*tr->la));
		tr->la_ids = calloc((size_t)o->lookahead * (size_t)o->ntables,
				    sizeof(*tr->la_ids));
		if (!tr->la || !tr->la_ids)
			return fail("lookahead", -ENOMEM);
	}
	tr->emb = calloc(nemb, sizeof(float));
	tr->grad = calloc(nemb, sizeof(float));
	if (!tr->rows || !tr->tid || !tr->touched || !tr->pf || !tr->tb ||
	    !tr->emb || !tr->grad)
		return fail("setup", -ENOMEM);
	for (int t = 0; t < o->ntables; t++)
		tr->rows[t] = table_rows(o, t);
	tr->fingerprint = config_fingerprint(tr, o->row_wise);
	ret = model_init(&tr->m, &mc);
	if (!ret)
		ret = gradsum_init(&tr->gs, &tr->m, o->slices);
	if (ret)
		return fail("model", ret);
	ret = open_data(tr);
	if (ret)
		return ret;
	ret = make_dir(tr);
	if (!ret && o->export_delta)
		ret = delta_dirs(tr);
	if (ret)
		return ret;
	ret = open_store(tr);
	if (ret)
		return ret;
	if (!o->resume)
		return 0;
	ret = checkpoint_load(tr);
	/* a resharded store is committed at once: from now on it resumes
	 * like any other */
	if (!ret && o->reshard_from)
		ret = checkpoint_write(tr);
	return ret;
}

void teardown(struct trainer *tr)
{
	model_free(&tr->m);
	gradsum_free(&tr->gs);
	data_close(&tr->train);
	for (int i = 0; i <= ET_MAX_LOOKAHEAD; i++)
		batch_free(&tr->bat[i]);
	free(tr->la);
	free(tr->la_ids);
	for (int i = 0; tr->eval && i < tr->neval; i++)
		batch_free(&tr->eval[i]);
	free(tr->eval);
	for (int t = 0; tr->touched && t < tr->o.ntables; t++)
		idset_free(&tr->touched[t]);
	free(tr->touched);
	free(tr->rows);
	free(tr->tid);
	free(tr->pf);
	free(tr->tb);
	free(tr->emb);
	free(tr->grad);
	free(tr->scores);
	free(tr->labels);
	free(tr->rowvals);
	if (tr->log && tr->log != stdout && tr->log != stderr)
		fclose(tr->log);
}
