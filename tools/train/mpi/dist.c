/*
 * dist.c - embtier-train over MPI ranks (see dist.h): the trainer's hooks,
 * on top of the sharded store of embtier_mpi.h. Only embtier-train-mpi is
 * built with this file.
 *
 * Traffic. The figures printed per step are the training steps' bytes:
 * the all-to-alls of the evaluation passes (each rank scores the whole
 * held-out set) are taken out.
 *
 * Test seam. ET_MPI_TEST_KILL="R:S" makes rank R kill itself (SIGKILL)
 * as its S-th step of this run begins its update; "R:S:ckpt" kills it at
 * the S-th checkpoint of this run instead, before its store commits, so
 * the other ranks commit a step it never does.
 */
#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <mpi.h>

#include "dist.h"
#include "embtier_mpi.h"

struct dist {
	etm *m;
	int rank, nranks, ntables, batch;
	struct etm_bags *bags;	 /* ntables */
	float **out;		 /* ntables */
	const float **grads;	 /* ntables */
	struct etm_traffic eval; /* traffic of evaluation passes */
	uint64_t steps, ckpts;	 /* of this run, for the test seam */
	int kill_rank;		 /* ET_MPI_TEST_KILL, or -1 */
	uint64_t kill_at;
	bool kill_ckpt;
	struct etm_reshard_info rs; /* when opened by a reshard */
};

static void test_kill(struct dist *d, bool ckpt, uint64_t n)
{
	if (d->rank == d->kill_rank && ckpt == d->kill_ckpt && n == d->kill_at)
		raise(SIGKILL);
}

/* The last error a collective hook returned on every rank. */
static int g_agreed;

static int agreed(int ret)
{
	if (ret)
		g_agreed = ret;
	return ret;
}

bool dist_agreed(int err)
{
	return err && err == g_agreed;
}

int dist_init(int *argc, char ***argv, int *rank, int *nranks)
{
	if (MPI_Init(argc, argv) != MPI_SUCCESS)
		return -EIO;
	MPI_Comm_rank(MPI_COMM_WORLD, rank);
	MPI_Comm_size(MPI_COMM_WORLD, nranks);
	return 0;
}

void dist_end(bool abort_all)
{
	if (abort_all)
		MPI_Abort(MPI_COMM_WORLD, 1);
	MPI_Finalize();
}

int dist_make_dir(char *dir, size_t len)
{
	int rank, ret = 0;

	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	if (rank == 0) {
		snprintf(dir, len, "/var/tmp/embtier-train.XXXXXX");
		if (!mkdtemp(dir))
			ret = -errno;
	}
	MPI_Bcast(&ret, 1, MPI_INT, 0, MPI_COMM_WORLD);
	MPI_Bcast(dir, (int)len, MPI_CHAR, 0, MPI_COMM_WORLD);
	return agreed(ret);
}

/* What the library said of the failure ret (et_errdetail(), else its
 * code's message), into msg. */
static void lib_msg(int ret, char *msg, size_t msglen)
{
	const char *d = et_errdetail();

	snprintf(msg, msglen, "%s", *d ? d : etm_strerror(ret));
}

static void open_msg(int ret, bool resume, int nranks, char *msg, size_t msglen)
{
	if (resume && ret == ETM_ENRANKS)
		snprintf(msg, msglen,
			 "the checkpoint was written by another rank count "
			 "than this run's %d: resume with the same mpirun -np, "
			 "or continue in a new --dir with --reshard-from",
			 nranks);
	else if (resume && ret == -ENOENT)
		snprintf(msg, msglen,
			 "no checkpoint to resume from (no "
			 "global checkpoint record, or a rank's "
			 "directory is missing)");
	else if (ret == -EEXIST)
		snprintf(msg, msglen,
			 "a table exists (use --resume, or a "
			 "fresh --dir)");
	else
		lib_msg(ret, msg, msglen);
}

struct check_ctx {
	dist_reshard_check fn;
	void *arg;
};

/* The trainer's check, its reason handed to the library as the detail. */
static int reshard_check(void *arg, const struct etm_reshard_info *info)
{
	struct check_ctx *c = arg;
	char msg[256] = "";
	int ret;

	ret = c->fn(c->arg, info->dense, info->len, info->nranks, msg,
		    sizeof(msg));
	return ret ? et_error_set(ret, "%s", msg) : 0;
}

int dist_open(struct dist **out, const char *dir, const char *reshard_from,
	      dist_reshard_check check, void *check_arg,
	      const struct et_store_config *cfg, bool resume, bool row_wise,
	      const struct dist_table *tables, int ntables, int global_batch,
	      int *tid, char *msg, size_t msglen)
{
	struct etm_table_spec *spec = calloc(ntables, sizeof(*spec));
	struct dist *d = calloc(1, sizeof(*d));
	int ret = 0;

	*out = NULL;
	if (d) {
		d->bags = calloc(ntables, sizeof(*d->bags));
		d->out = calloc(ntables, sizeof(*d->out));
		d->grads = calloc(ntables, sizeof(*d->grads));
	}
	if (!spec || !d || !d->bags || !d->out || !d->grads)
		ret = -ENOMEM;
	MPI_Allreduce(MPI_IN_PLACE, &ret, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
	if (!ret) {
		MPI_Comm_rank(MPI_COMM_WORLD, &d->rank);
		MPI_Comm_size(MPI_COMM_WORLD, &d->nranks);
		d->ntables = ntables;
		d->batch = global_batch;
		for (int t = 0; t < ntables; t++) {
			spec[t].name = tables[t].name;
			spec[t].p = tables[t].p;
			spec[t].plan = row_wise ? ETM_ROW_WISE : ETM_TABLE_WISE;
		}
		if (reshard_from) {
			struct check_ctx c = {check, check_arg};
			struct etm_reshard_opts ro = {
			    .src = reshard_from,
			    .dir = dir,
			    .spec = spec,
			    .ntables = ntables,
			    .cfg = cfg,
			    .check = check ? reshard_check : NULL,
			    .check_arg = &c,
			};

			ret = etm_reshard(MPI_COMM_WORLD, &ro, &d->rs, &d->m);
			free(spec);
			if (ret) {
				lib_msg(ret, msg, msglen);
				dist_close(d);
				return agreed(ret);
			}
			spec = NULL;
		} else {
			ret = etm_open(MPI_COMM_WORLD, dir, cfg,
				       resume ? ETM_OPEN_RESUME : 0, &d->m);
		}
	}
	if (!ret && !reshard_from)
		ret = etm_tables(d->m, spec, ntables, !resume);
	free(spec);
	if (ret) {
		open_msg(ret, resume, d ? d->nranks : 0, msg, msglen);
		dist_close(d);
		return agreed(ret);
	}
	for (int t = 0; t < ntables; t++)
		tid[t] = etm_local_table(d->m, t);
	d->kill_rank = -1;
	{
		const char *k = getenv("ET_MPI_TEST_KILL");
		unsigned long long at;
		int r, used = 0;

		if (k && sscanf(k, "%d:%llu%n", &r, &at, &used) == 2) {
			d->kill_rank = r;
			d->kill_at = at;
			d->kill_ckpt = !strcmp(k + used, ":ckpt");
		}
	}
	*out = d;
	return 0;
}

et_store *dist_store(struct dist *d)
{
	return etm_store(d->m);
}

uint64_t dist_owned_rows(struct dist *d, int t)
{
	return etm_owned_rows(d->m, t);
}

int dist_close(struct dist *d)
{
	int ret;

	if (!d)
		return 0;
	ret = etm_close(d->m);
	etm_reshard_free(&d->rs);
	free(d->bags);
	free(d->out);
	free(d->grads);
	free(d);
	return ret;
}

/* Removes the files of dir, then dir. */
static void remove_tree(const char *dir)
{
	DIR *dh = opendir(dir);
	struct dirent *e;

	if (!dh)
		return;
	while ((e = readdir(dh)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
			unlinkat(dirfd(dh), e->d_name, 0);
	closedir(dh);
	if (rmdir(dir))
		fprintf(stderr, "embtier-train: %s: cannot remove: %s\n", dir,
			strerror(errno));
}

void dist_remove_dirs(const char *dir)
{
	char sub[4200];
	int rank;

	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	snprintf(sub, sizeof(sub), "%s/rank-%d", dir, rank);
	remove_tree(sub);
	MPI_Barrier(MPI_COMM_WORLD);
	if (rank == 0)
		remove_tree(dir);
}

int dist_next_batch(struct dist *d, struct data_src *src, struct batch *b)
{
	uint64_t before = (uint64_t)d->rank * (uint64_t)b->cap;

	/* every rank reads the whole global batch's span and keeps its share */
	return data_next_share(src, b, before,
			       (uint64_t)d->batch - before - (uint64_t)b->cap);
}

static void set_bags(struct dist *d, const struct batch *b)
{
	for (int t = 0; t < d->ntables; t++) {
		d->bags[t].ids = b->ids[t];
		d->bags[t].offsets = b->offsets[t];
		d->bags[t].nbags = (size_t)b->n;
	}
}

int dist_send_ids(struct dist *d, const struct batch *b, bool prefetch)
{
	set_bags(d, b);
	return agreed(etm_send_ids(d->m, d->bags, prefetch));
}

static void traffic_add(struct etm_traffic *acc, const struct etm_traffic *a,
			const struct etm_traffic *b)
{
	acc->ids += b->ids - a->ids;
	acc->meta += b->meta - a->meta;
	acc->vectors += b->vectors - a->vectors;
	acc->grads += b->grads - a->grads;
	acc->reduce += b->reduce - a->reduce;
	acc->min_ids += b->min_ids - a->min_ids;
	acc->min_vectors += b->min_vectors - a->min_vectors;
	acc->min_grads += b->min_grads - a->min_grads;
	acc->min_reduce += b->min_reduce - a->min_reduce;
}

int dist_forward(struct dist *d, const struct batch *b, float *emb,
		 size_t stride)
{
	struct etm_traffic t0, t1;
	int ret;

	for (int t = 0; t < d->ntables; t++)
		d->out[t] = emb + (size_t)t * stride;
	if (!b)
		return agreed(etm_forward(d->m, NULL, ET_POOL_SUM, d->out));
	/* an evaluation batch, not part of a training step's traffic */
	etm_get_traffic(d->m, &t0);
	set_bags(d, b);
	ret = etm_forward(d->m, d->bags, ET_POOL_SUM, d->out);
	etm_get_traffic(d->m, &t1);
	traffic_add(&d->eval, &t0, &t1);
	return agreed(ret);
}

int dist_backward(struct dist *d, const float *grad, size_t stride, float lr)
{
	struct et_update_params up = {.lr = lr};

	test_kill(d, false, ++d->steps);
	for (int t = 0; t < d->ntables; t++)
		d->grads[t] = grad + (size_t)t * stride;
	return agreed(etm_backward(d->m, d->grads, &up));
}

int dist_allreduce(struct dist *d, float *buf, size_t n)
{
	return agreed(etm_allreduce(d->m, buf, n));
}

double dist_sum(double v)
{
	MPI_Allreduce(MPI_IN_PLACE, &v, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
	return v;
}

void dist_sum_u64(uint64_t *v, int n)
{
	MPI_Allreduce(MPI_IN_PLACE, v, n, MPI_UINT64_T, MPI_SUM,
		      MPI_COMM_WORLD);
}

int dist_owned_ids(struct dist *d, int t, const uint64_t **ids, size_t *n)
{
	return etm_owned_ids(d->m, t, ids, n);
}

int dist_checkpoint(struct dist *d, uint64_t step, const void *buf, size_t len)
{
	test_kill(d, true, ++d->ckpts);
	return agreed(etm_checkpoint(d->m, step, buf, len));
}

int dist_checkpoint_read(struct dist *d, uint64_t *step, void **dense,
			 size_t *len, char *msg, size_t msglen)
{
	int ret = etm_checkpoint_read(d->m, step, dense, len);

	if (ret)
		lib_msg(ret, msg, msglen);
	return agreed(ret);
}

int dist_resharded(struct dist *d, uint64_t *step, int *nranks,
		   void *const **dense, const size_t **len)
{
	if (!d->rs.dense)
		return -ENOENT;
	*step = d->rs.step;
	*nranks = d->rs.nranks;
	*dense = d->rs.dense;
	*len = d->rs.len;
	return 0;
}

void dist_reshard_figures(struct dist *d, uint64_t *rows, uint64_t *bytes,
			  double *seconds)
{
	uint64_t v[2] = {d->rs.rows, d->rs.bytes};
	double s = d->rs.seconds;

	MPI_Allreduce(MPI_IN_PLACE, v, 2, MPI_UINT64_T, MPI_SUM,
		      MPI_COMM_WORLD);
	MPI_Allreduce(MPI_IN_PLACE, &s, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
	*rows = v[0];
	*bytes = v[1];
	*seconds = s;
}

bool dist_owns(struct dist *d, int t, uint64_t id)
{
	return etm_owner(d->m, t, id) == d->rank;
}

struct id_at {
	uint64_t id;
	size_t at;
};

static int cmp_id_at(const void *a, const void *b)
{
	const struct id_at *x = a, *y = b;

	return x->id < y->id ? -1 : x->id > y->id;
}

/* Puts n rows (ids, and dim floats each in vals) in increasing id order:
 * the ranks' runs, each sorted, follow one another in id order for a
 * row-indexed table, but a keyed table's keys are spread over the ranks
 * by bucket, in no key order. */
static int sort_rows(uint64_t *ids, float **vals, size_t n, int dim)
{
	struct id_at *ix;
	float *v;
	size_t row = (size_t)dim * sizeof(float);

	for (size_t i = 1; i < n; i++)
		if (ids[i - 1] > ids[i])
			goto unsorted;
	return 0;
unsorted:
	ix = malloc(n * sizeof(*ix));
	v = malloc(n * row + 1);
	if (!ix || !v) {
		free(ix);
		free(v);
		return -ENOMEM;
	}
	for (size_t i = 0; i < n; i++)
		ix[i] = (struct id_at){ids[i], i};
	qsort(ix, n, sizeof(*ix), cmp_id_at);
	for (size_t i = 0; i < n; i++) {
		ids[i] = ix[i].id;
		memcpy((char *)v + i * row, (char *)*vals + ix[i].at * row,
		       row);
	}
	free(ix);
	free(*vals);
	*vals = v;
	return 0;
}

int dist_table_rows(struct dist *d, const uint64_t *ids, const float *vals,
		    size_t n, int dim, uint64_t **all_ids, float **all_vals,
		    size_t *all_n)
{
	int nr = d->nranks, *cnt = NULL, *dsp = NULL, ret = 0;
	uint64_t mine = n, *counts = calloc(nr, sizeof(*counts));
	size_t total = 0;

	*all_ids = NULL;
	*all_vals = NULL;
	*all_n = 0;
	cnt = calloc(nr, sizeof(*cnt));
	dsp = calloc(nr, sizeof(*dsp));
	if (!counts || !cnt || !dsp)
		ret = -ENOMEM;
	MPI_Allreduce(MPI_IN_PLACE, &ret, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
	if (ret)
		goto out;
	MPI_Gather(&mine, 1, MPI_UINT64_T, counts, 1, MPI_UINT64_T, 0,
		   MPI_COMM_WORLD);
	if (d->rank == 0) {
		for (int r = 0; r < nr; r++)
			total += counts[r];
		*all_ids = malloc((total + 1) * sizeof(uint64_t));
		*all_vals = malloc((total + 1) * (size_t)dim * sizeof(float));
		if (!*all_ids || !*all_vals || total * dim > INT32_MAX)
			ret = -ENOMEM;
	}
	MPI_Bcast(&ret, 1, MPI_INT, 0, MPI_COMM_WORLD);
	if (ret)
		goto out;
	for (int r = 0, off = 0; r < nr; r++) {
		cnt[r] = (int)counts[r];
		dsp[r] = off;
		off += cnt[r];
	}
	MPI_Gatherv(ids, (int)n, MPI_UINT64_T, *all_ids, cnt, dsp, MPI_UINT64_T,
		    0, MPI_COMM_WORLD);
	for (int r = 0; r < nr; r++) {
		cnt[r] *= dim;
		dsp[r] *= dim;
	}
	MPI_Gatherv(vals, (int)(n * dim), MPI_FLOAT, *all_vals, cnt, dsp,
		    MPI_FLOAT, 0, MPI_COMM_WORLD);
	if (d->rank == 0)
		ret = sort_rows(*all_ids, all_vals, total, dim);
	MPI_Bcast(&ret, 1, MPI_INT, 0, MPI_COMM_WORLD);
	if (ret)
		goto out;
	*all_n = total;
out:
	if (ret && d->rank == 0) {
		free(*all_ids);
		free(*all_vals);
		*all_ids = NULL;
		*all_vals = NULL;
	}
	free(counts);
	free(cnt);
	free(dsp);
	return agreed(ret);
}

void dist_report(struct dist *d, const struct dist_figures *f, FILE *out)
{
	struct dist_figures *all = NULL;
	struct etm_traffic tr, *tall = NULL;
	int nr = d->nranks;

	etm_get_traffic(d->m, &tr);
	tr.ids -= d->eval.ids;
	tr.meta -= d->eval.meta;
	tr.vectors -= d->eval.vectors;
	tr.min_ids -= d->eval.min_ids;
	tr.min_vectors -= d->eval.min_vectors;
	if (d->rank == 0) {
		all = calloc(nr, sizeof(*all));
		tall = calloc(nr, sizeof(*tall));
	}
	MPI_Gather(f, sizeof(*f), MPI_BYTE, all, sizeof(*f), MPI_BYTE, 0,
		   MPI_COMM_WORLD);
	MPI_Gather(&tr, sizeof(tr), MPI_BYTE, tall, sizeof(tr), MPI_BYTE, 0,
		   MPI_COMM_WORLD);
	if (d->rank == 0 && all && tall) {
		struct etm_traffic s = {0};
		double steps = (double)tall[0].steps, sent, min;

		for (int r = 0; r < nr; r++) {
			const struct dist_figures *g = &all[r];

			fprintf(out,
				"rank %d: samples-per-second %.0f stall %.3f "
				"hit-ratio hbm %.4f ddr %.4f owned-parameters "
				"%" PRIu64 " rows-touched %" PRIu64
				" disk-bytes %" PRIu64 " peak-memory %.1f MiB "
				"max-rss %.1f MiB\n",
				r, g->step_s > 0 ? g->samples / g->step_s : 0,
				g->step_s > 0 ? g->stall_s / g->step_s : 0,
				g->hbm_hit, g->ddr_hit, g->owned_params,
				g->rows_touched, g->disk_bytes,
				(double)g->mem_peak / 1048576.0,
				(double)g->maxrss / 1048576.0);
			traffic_add(&s, &(struct etm_traffic){0}, &tall[r]);
		}
		if (steps < 1)
			steps = 1;
		sent =
		    (double)(s.ids + s.meta + s.vectors + s.grads + s.reduce);
		min = (double)(s.min_ids + s.min_vectors + s.min_grads +
			       s.min_reduce);
		fprintf(out, "ranks: %d\n", nr);
		fprintf(out,
			"alltoall-bytes-per-step: %.0f (ids %.0f, counts and "
			"lengths %.0f, pooled vectors %.0f, gradients %.0f, "
			"mlp all-reduce %.0f)\n",
			sent / steps, s.ids / steps, s.meta / steps,
			s.vectors / steps, s.grads / steps, s.reduce / steps);
		fprintf(out,
			"analytic-minimum-bytes-per-step: %.0f (ids %.0f, "
			"pooled vectors %.0f, gradients %.0f, mlp all-reduce "
			"%.0f); ratio %.3f\n",
			min / steps, s.min_ids / steps, s.min_vectors / steps,
			s.min_grads / steps, s.min_reduce / steps,
			min > 0 ? sent / min : NAN);
		fflush(out);
	}
	free(all);
	free(tall);
}
