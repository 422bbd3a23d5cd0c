/*
 * step.c - one training step of embtier-train (gather, prefetch of the
 * next batch, the dense forward and backward, update) and the held-out
 * evaluation (log loss and exact AUC).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "trainer.h"

/* ---------------------------------------------------------------- eval */

/* Gathers batch b's bags into the model and runs the forward. */
static int forward_batch(struct trainer *tr, const struct batch *b,
			 double *stall)
{
	const struct opts *o = &tr->o;
	size_t d = (size_t)o->dim;
	double t0 = cli_now();
	int ret;

#ifdef ET_WITH_MPI
	/* the training batch's ids went ahead with the step before */
	ret = dist_forward(tr->dist, stall ? NULL : b, tr->emb,
			   (size_t)o->batch * d);
	if (ret)
		return fail("gather", ret);
	if (stall)
		*stall += cli_now() - t0;
	return 0;
#endif
	for (int t = 0; t < o->ntables; t++)
		tr->tb[t] = (struct et_table_batch){
		    .table = tr->tid[t],
		    .ids = b->ids[t],
		    .offsets = b->offsets[t],
		    .nbags = (size_t)b->n,
		    .out = tr->emb + (size_t)t * o->batch * d};
	ret = et_gather_pooled_multi(tr->store, tr->tb, (size_t)o->ntables,
				     ET_POOL_SUM);
	if (ret)
		return fail("gather", ret);
	if (stall)
		*stall += cli_now() - t0;
	return 0;
}

/* Copies gathered bags lo .. lo + n - 1 into the model's interaction
 * input. */
static void bags_in(struct trainer *tr, int lo, int n)
{
	size_t d = (size_t)tr->o.dim, nv = (size_t)tr->m.nvec;

	for (int t = 0; t < tr->o.ntables; t++)
		for (int b = 0; b < n; b++)
			memcpy(tr->m.vec + ((size_t)b * nv + 1 + t) * d,
			       tr->emb + ((size_t)t * tr->o.batch + lo + b) * d,
			       d * sizeof(float));
}

static int evaluate_batches(struct trainer *tr);

/* The held-out score, with the store's time in it kept apart from the
 * training steps'. */
int evaluate(struct trainer *tr)
{
	struct et_stats a, b;
	int ret;

	ret = et_get_stats(tr->store, -1, &a);
	if (ret)
		return fail("stats", ret);
	ret = evaluate_batches(tr);
	if (ret)
		return ret;
	ret = et_get_stats(tr->store, -1, &b);
	if (ret)
		return fail("stats", ret);
	store_time_add(&tr->eval_tm, &a, &b);
	store_time_add(&tr->iv.eval_tm, &a, &b);
	return 0;
}

static int evaluate_batches(struct trainer *tr)
{
	size_t k = 0;
	double loss = 0;
	int ret;

	for (int i = 0; i < tr->neval; i++) {
		const struct batch *b = &tr->eval[i];

		ret = forward_batch(tr, b, NULL);
		if (ret)
			return ret;
		model_forward(&tr->m, b->dense, b->n);
		bags_in(tr, 0, b->n);
		model_interact(&tr->m, b->n);
		for (int j = 0; j < b->n; j++, k++) {
			tr->scores[k] = tr->m.logit[j];
			tr->labels[k] = b->label[j];
			loss += model_logloss(tr->m.logit[j], b->label[j]);
		}
	}
	tr->eval_n = k;
	tr->eval_logloss = k ? loss / (double)k : NAN;
	tr->eval_auc = auc_exact(tr->scores, tr->labels, k);
	return 0;
}

/* ----------------------------------------------------------- training */

/* The next batch of this process: the whole batch, or a rank's share. */
int next_batch(struct trainer *tr, struct batch *b)
{
	int ret;

#ifdef ET_WITH_MPI
	ret = dist_next_batch(tr->dist, &tr->train, b);
#else
	ret = data_next(&tr->train, b);
#endif
	if (ret)
		return data_fail(tr->o.data ? tr->o.data : "data", &tr->train,
				 ret);
	return 0;
}

/* Starts reading batch b's rows; under MPI its ids go to their owners,
 * which prefetch them. */
static int prefetch_batch(struct trainer *tr, const struct batch *b)
{
	const struct opts *o = &tr->o;
	int ret;

#ifdef ET_WITH_MPI
	ret = dist_send_ids(tr->dist, b, o->prefetch);
	return ret ? fail("prefetch", ret) : 0;
#endif
	if (!o->prefetch)
		return 0;
	for (int t = 0; t < o->ntables; t++) {
		tr->pf[t].table = tr->tid[t];
		tr->pf[t].ids = b->ids[t];
		tr->pf[t].n = b->offsets[t][b->n];
	}
	ret = et_prefetch(tr->store, tr->pf, (size_t)o->ntables);
	return ret ? fail("prefetch", ret) : 0;
}

/*
 * Forward and backward of the dense model over the n samples of cur,
 * slice by slice: the bags' gradients land in tr->grad, the MLP's in the
 * model, summed over slices (and ranks) along the fixed tree of
 * gradsum.h. Returns the global batch's mean loss.
 */
static double dense_step(struct trainer *tr, const struct batch *cur, int n,
			 int *err)
{
	const struct opts *o = &tr->o;
	int per = o->slices / o->nranks, sl = n / per;
	size_t d = (size_t)o->dim, nv = (size_t)tr->m.nvec;
	bool tree = o->slices > 1 || tr->dist;
	double loss = 0;

	*err = 0;
	for (int j = 0; j < per; j++) {
		int lo = j * sl;

		model_forward(&tr->m, cur->dense + (size_t)lo * DATA_NDENSE,
			      sl);
		bags_in(tr, lo, sl);
		model_interact(&tr->m, sl);
		loss += model_loss_part(&tr->m, cur->label + lo, sl, o->batch);
		model_backward(&tr->m, sl);
		for (int t = 0; t < o->ntables; t++)
			for (int b = 0; b < sl; b++)
				memcpy(tr->grad +
					   ((size_t)t * o->batch + lo + b) * d,
				       tr->m.dvec +
					   ((size_t)b * nv + 1 + t) * d,
				       d * sizeof(float));
		if (tree)
			gradsum_push(&tr->gs, &tr->m);
	}
	if (tree) {
		float *g = gradsum_result(&tr->gs);

#ifdef ET_WITH_MPI
		*err = dist_allreduce(tr->dist, g, tr->gs.n);
		if (*err) {
			fail("all-reduce", *err);
			return NAN;
		}
		loss = dist_sum(loss);
#endif
		gradsum_store(&tr->gs, &tr->m, g);
	}
	return loss / o->batch;
}

/* The bags' gradients to the store (under MPI, to the owners). */
static int update_batch(struct trainer *tr, const struct batch *cur, int n)
{
	const struct opts *o = &tr->o;
	struct et_update_params up = {.lr = o->emb_lr};
	size_t d = (size_t)o->dim;
	int ret;

#ifdef ET_WITH_MPI
	ret =
	    dist_backward(tr->dist, tr->grad, (size_t)o->batch * d, o->emb_lr);
	if (ret)
		return fail("update", ret);
	/* the rows this rank owns are the ones its checkpoint and
	 * checksum speak for */
	for (int t = 0; t < o->ntables; t++) {
		const uint64_t *ids;
		size_t k;

		ret = dist_owned_ids(tr->dist, t, &ids, &k);
		if (!ret)
			ret = idset_add(&tr->touched[t], ids, k);
		if (ret)
			return fail("touched ids", ret);
	}
	return 0;
#endif
	for (int t = 0; t < o->ntables; t++)
		tr->tb[t] = (struct et_table_batch){
		    .table = tr->tid[t],
		    .ids = cur->ids[t],
		    .offsets = cur->offsets[t],
		    .nbags = (size_t)n,
		    .grads = tr->grad + (size_t)t * o->batch * d};
	ret = et_update_pooled_multi(tr->store, tr->tb, (size_t)o->ntables,
				     ET_POOL_SUM, &up);
	return ret ? fail("update", ret) : 0;
}

/* The trainer's own record of the rows batch cur changed (for the weights
 * checksum): not the store's time, so outside the stall. Under MPI,
 * update_batch keeps the rows this rank owns. */
static int touched_add(struct trainer *tr, const struct batch *cur, int n)
{
#ifndef ET_WITH_MPI
	for (int t = 0; t < tr->o.ntables; t++) {
		int ret =
		    idset_add(&tr->touched[t], cur->ids[t], cur->offsets[t][n]);

		if (ret)
			return fail("touched ids", ret);
	}
#else
	(void)tr;
	(void)cur;
	(void)n;
#endif
	return 0;
}

/*
 * --lookahead K: reads batches i+1 .. i+K-1 ahead (those the run has) and
 * hands the store the window i .. i+K-1 before batch i's first operation.
 * The window changes which rows stay cached, never a result.
 */
static int lookahead_window(struct trainer *tr, double *stall)
{
	const struct opts *o = &tr->o;
	uint64_t left = o->steps - tr->step - 1; /* batches after this one */
	int want = o->lookahead - 1, ret;
	double t0;

	if ((uint64_t)want > left)
		want = (int)left;
	while (tr->nahead < want) {
		ret = next_batch(tr, &tr->bat[1 + tr->nahead]);
		if (ret)
			return ret;
		tr->nahead++;
	}
	for (int b = 0; b <= want; b++) {
		const struct batch *bt = &tr->bat[b];
		struct et_batch_ids *ids = tr->la_ids + (size_t)b * o->ntables;

		for (int t = 0; t < o->ntables; t++) {
			ids[t].table = tr->tid[t];
			ids[t].ids = bt->ids[t];
			ids[t].n = bt->offsets[t][bt->n];
		}
		tr->la[b].tables = ids;
		tr->la[b].ntables = (size_t)o->ntables;
	}
	t0 = cli_now();
	ret = et_lookahead(tr->store, tr->la, (size_t)want + 1);
	*stall += cli_now() - t0;
	return ret ? fail("lookahead", ret) : 0;
}

int train_step(struct trainer *tr)
{
	const struct opts *o = &tr->o;
	struct batch *cur = &tr->bat[0], *nxt = &tr->bat[1], tmp;
	double t0 = cli_now(), stall = 0, t1, loss;
	int n = cur->n, ret;

	if (o->lookahead) {
		ret = lookahead_window(tr, &stall);
		if (ret)
			return ret;
	}
	ret = forward_batch(tr, cur, &stall);
	if (ret)
		return ret;
	if (tr->step + 1 < o->steps) {
		if (!tr->nahead) {
			ret = next_batch(tr, nxt);
			if (ret)
				return ret;
			tr->nahead = 1;
		}
		t1 = cli_now();
		ret = prefetch_batch(tr, nxt);
		stall += cli_now() - t1;
		if (ret)
			return ret;
	}

	loss = dense_step(tr, cur, n, &ret);
	if (ret)
		return ret;
	t1 = cli_now();
	ret = update_batch(tr, cur, n);
	stall += cli_now() - t1;
	if (!ret)
		ret = touched_add(tr, cur, n);
	if (ret)
		return ret;
	model_step(&tr->m);

	tr->next_pos = cur->end;
	/* the next batch read ahead becomes the current one */
	tmp = tr->bat[0];
	for (int b = 0; b < tr->nahead; b++)
		tr->bat[b] = tr->bat[b + 1];
	tr->bat[tr->nahead] = tmp;
	if (tr->nahead)
		tr->nahead--;
	tr->step++;
	t1 = cli_now() - t0;
	tr->step_s += t1;
	tr->stall_s += stall;
	tr->loss_sum += loss;
	tr->loss_avg = tr->step == tr->step0 + 1
			   ? loss
			   : 0.98 * tr->loss_avg + 0.02 * loss;
	tr->iv.step_s += t1;
	tr->iv.stall_s += stall;
	tr->iv.loss += loss;
	tr->iv.steps++;
	tr->iv.samples += (uint64_t)n * (uint64_t)o->nranks;
	return 0;
}
