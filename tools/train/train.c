/*
 * train.c - embtier-train: a complete DLRM training loop over an embtier
 * store, the store's reference user.
 *
 * Each step i of the loop is
 *
 *   gather(i)      et_gather_pooled, every table: the batch's bags, summed
 *   prefetch(i+1)  et_prefetch of the next batch's ids, every table
 *   forward(i)     bottom MLP, interaction, top MLP, loss (model.c)
 *   backward(i)
 *   update(i)      et_update_pooled, every table (row-wise Adagrad)
 *   MLP step       SGD or Adagrad on the dense weights
 *
 * so the store reads batch i+1's rows while batch i computes. Time spent
 * inside gather, prefetch and update is the "stall": what a step loses to
 * the store. The store's own clocks (et_stats.miss_wait_ns, writeback_ns)
 * split it into miss wait (reading missed rows, waiting for the I/O
 * thread), write-back, and the rest, hit work: the memory work of the
 * lookups, copies, pooling and optimizer. Every --eval-every steps, and at the end, the model is scored
 * on a held-out set (log loss, exact AUC).
 *
 * Checkpoints. Every --checkpoint-every steps (and at the end of a run that
 * checkpoints at all) et_checkpoint flushes the store and saves the dense
 * state beside the table files, atomically: MLP weights and optimizer
 * state, the step, the data position, and the ids each table has had
 * updated (what the weights checksum reads back). --resume opens the
 * tables - which rolls them back to the last checkpoint if a run was
 * killed after it - reads the state back, and continues: it ends with the
 * same bits as a run never stopped, however the earlier one ended. If the
 * tables moved on after the last checkpoint (a run without
 * --checkpoint-every closed the store cleanly after training on from it),
 * --resume refuses: the embeddings are newer than the dense state.
 * --export-delta DIR exports, right after each checkpoint, the delta from
 * the last commit this process exported (0 at its first: every table
 * whole) to the checkpoint's, as DIR/delta-FROM-TO.etd (state.c); applied
 * in order with embtier-build --apply-delta, they bring a serving copy to
 * each checkpoint.
 *
 * Keyed tables (--keyed). Every id is a u64 key with a row of its own: a
 * Criteo value's key is a hash of its feature and value (data.h), a
 * synthetic row drawn is mixed over u64 by a bijection, so the model
 * learns what it would from row-indexed tables. --admit and
 * --expire-after set each table's et_key_policy, which the store keeps in
 * memory only: a resumed run sets it again, and its admission counts and
 * ages start over at the open, so a run with either resumes to other bits
 * than one never stopped (without them it resumes to the same bits).
 *
 * Determinism. Synthetic samples are pure functions of (seed, index),
 * Criteo ones of a byte offset; the model's sums are taken in a fixed order,
 * and the store's results do not depend on its tiers or on prefetch; with the
 * same BLAS thread count, the same flags give the same weights checksum, bit
 * for bit.
 *
 * Output: log lines and a summary on stdout (or one JSON object with
 * --json, the log lines then going to stderr); a progress bar and errors
 * on stderr.
 *
 * This file holds main and the run's loop; trainer.h lists the others.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <cblas.h>

#include "cli.h"
#include "trainer.h"

/* This process's rank and the rank count (0 and 1 without MPI). */
static int g_rank, g_nranks = 1;

/* Before the first step: where the log lines go, the first batch, the
 * progress bar, and the store's counters the figures start from; *t0 is
 * when the run began. */
static int run_start(struct trainer *tr, double *t0)
{
	const struct opts *o = &tr->o;
	int ret;

	tr->log = o->json ? stderr : stdout;
	if (o->rank != 0) {
		/* rank 0 speaks for the run */
		tr->log = fopen("/dev/null", "w");
		if (!tr->log)
			return fail("/dev/null", -errno);
	}
	if (!o->resume)
		tr->next_pos = data_tell(&tr->train);
#ifdef ET_WITH_MPI
	if (o->reshard_from) {
		uint64_t rows, bytes;
		double sec;

		dist_reshard_figures(tr->dist, &rows, &bytes, &sec);
		fprintf(tr->log,
			"resharded %s to %d ranks at step %" PRIu64 ": %" PRIu64
			" rows (%.1f MiB) copied in %.2f s, committed in "
			"%.2f s\n",
			o->reshard_from, o->nranks, tr->step, rows,
			bytes / 1048576.0, sec, tr->ckpt_s);
	}
#endif
	if (tr->step < o->steps) {
		ret = next_batch(tr, &tr->bat[0]);
#ifdef ET_WITH_MPI
		/* the first batch's ids go now, later ones a step ahead */
		if (!ret)
			ret = dist_send_ids(tr->dist, &tr->bat[0], false);
		if (ret)
			return fail("send ids", ret);
#endif
		if (ret)
			return ret;
	}
	snprintf(tr->prog_label, sizeof(tr->prog_label), "training");
	progress_start(&tr->prog, tr->prog_label, "samples",
		       (o->steps > tr->step ? o->steps - tr->step : 0) *
			   (uint64_t)o->batch,
		       o->quiet);
	tr->iv.t0 = *t0 = cli_now();
	ret = et_get_stats(tr->store, -1, &tr->iv.st);
	if (ret)
		return fail("stats", ret);
	tr->st0 = tr->iv.st;
	return 0;
}

/* The steps, with their log lines, evaluations and checkpoints. */
static int train_loop(struct trainer *tr)
{
	const struct opts *o = &tr->o;
	int ret;

	while (tr->step < o->steps) {
		ret = train_step(tr);
		if (ret)
			return ret;
		snprintf(tr->prog_label, sizeof(tr->prog_label),
			 "training loss %.4f", tr->loss_avg);
		progress_update(&tr->prog,
				(tr->step - tr->step0) * (uint64_t)o->batch);
		if (o->log_every && tr->step % o->log_every == 0) {
			ret = log_line(tr);
			if (ret)
				return ret;
		}
		if (o->eval_every && tr->step % o->eval_every == 0 &&
		    tr->step < o->steps) {
			ret = evaluate(tr);
			if (ret)
				return ret;
			eval_line(tr);
		}
		if (o->ckpt_every && tr->step % o->ckpt_every == 0) {
			ret = checkpoint_write(tr);
			if (ret)
				return ret;
		}
	}
	return 0;
}

/* After the last step: the closing checkpoint, the held-out score, the
 * checksum, the store's flush and the summary. */
static int run_end(struct trainer *tr, double t0)
{
	const struct opts *o = &tr->o;
	struct results r = {0};
	int ret;

	progress_end(&tr->prog);
	ret = et_get_stats(tr->store, -1, &tr->st_end);
	if (ret)
		return fail("stats", ret);
	tr->eval_tm_end = tr->eval_tm;
	/* a run that checkpoints ends on one, so that it can be resumed */
	if (o->ckpt_every && (!tr->ckpt_any || tr->ckpt_step != tr->step)) {
		ret = checkpoint_write(tr);
		if (ret)
			return ret;
	}
	tr->run_s = cli_now() - t0;
	ret = evaluate(tr);
	if (!ret)
		ret = weights_checksum(tr, &r.checksum);
	if (ret)
		return ret;
	t0 = cli_now();
	ret = et_flush(tr->store);
	if (ret)
		return fail("flush", ret);
	tr->flush_s = cli_now() - t0;
	ret = delta_join(tr); /* the last checkpoint's, beside the above */
	if (!ret)
		ret = collect(tr, &r);
	if (ret)
		return ret;
	if (o->rank == 0)
		report(tr, &r);
#ifdef ET_WITH_MPI
	dist_report(tr->dist, &r.mine, tr->log);
#endif
	return 0;
}

static int run(struct trainer *tr)
{
	double t0 = 0;
	int ret = run_start(tr, &t0);

	if (!ret)
		ret = train_loop(tr);
	if (!ret)
		ret = run_end(tr, t0);
	return ret;
}

int main(int argc, char **argv)
{
	struct trainer *tr;
	int ret, status;

	cli_init("embtier-train");
#ifdef ET_WITH_MPI
	if (dist_init(&argc, &argv, &g_rank, &g_nranks)) {
		cli_error("MPI could not start");
		return CLI_EXIT_FAIL;
	}
#endif
	tr = calloc(1, sizeof(*tr));
	if (!tr) {
		cli_error("out of memory");
		return CLI_EXIT_FAIL;
	}
	tr->teacher_logloss = tr->teacher_auc = NAN;
	if (parse_args(argc, argv, g_rank, g_nranks, &tr->o)) {
		free(tr);
#ifdef ET_WITH_MPI
		dist_end(false); /* every rank parsed the same flags */
#endif
		return CLI_EXIT_USAGE;
	}
	openblas_set_num_threads(tr->o.threads);
	ret = setup(tr);
	if (!ret)
		ret = run(tr);
	progress_end(&tr->prog);
	status = ret ? CLI_EXIT_FAIL : CLI_EXIT_OK;
	if (delta_join(tr)) /* a failed run's export in flight, before the */
		status = CLI_EXIT_FAIL; /* store's close commits */
#ifdef ET_WITH_MPI
	if (ret && !dist_agreed(ret)) {
		/* a failure of this rank alone: the others may wait for it
		 * in a collective */
		dist_end(true);
	}
	if (tr->dist) {
		ret = dist_close(tr->dist);
		tr->store = NULL;
		if (ret) {
			cli_error_code("close store", ret);
			status = CLI_EXIT_FAIL;
		}
	}
#endif
	if (tr->store) {
		ret = et_store_close(tr->store);
		if (ret) {
			cli_error_code("close store", ret);
			status = CLI_EXIT_FAIL;
		}
	}
#ifdef ET_WITH_MPI
	if (tr->dir_made && !tr->o.keep) {
		dist_remove_dirs(tr->dir);
		tr->dir_made = false;
	}
#endif
	if (tr->dir_made && !tr->o.keep)
		remove_dir(tr);
	else if (tr->dir_made && !tr->o.json && tr->o.rank == 0)
		cli_note("store kept in %s", tr->dir);
	teardown(tr);
	free(tr);
#ifdef ET_WITH_MPI
	dist_end(false);
#endif
	return status;
}
