/*
 * c_baseline.c - the C side of python/bench_overhead.py: the store calls
 * the Python package makes, made directly from C in loops, on a store the
 * benchmark opened through the package. Built by `make python` into
 * build-python/python/libc_baseline.so, loaded with ctypes: the C and the
 * Python passes then alternate in one process over one store, so they see
 * the same cache contents, memory and machine load.
 *
 * cb_steps and cb_gather run `steps` steps and return 0 or the first error,
 * the elapsed time in *ns (measured here: the one ctypes call that starts
 * the loop is not counted). cb_prefetch_gather and cb_update are one step's
 * two halves, for the example's whole training step, which the benchmark
 * times from Python around the torch model's forward and backward.
 */
#include <stdint.h>
#include <string.h>
#include <time.h>

#include <embtier.h>

int cb_steps(et_store *s, const int *tid, size_t ntables, const uint64_t *ids,
	     size_t batch, size_t dim, size_t steps, size_t first, size_t count,
	     const uint64_t *offsets, const float *grad, float lr, float *out,
	     uint64_t *ns);
int cb_gather(et_store *s, int table, const uint64_t *ids, size_t batch,
	      size_t steps, float *out, uint64_t *ns);
void cb_set_clock(int which);
int cb_prefetch_gather(et_store *s, const int *tid, size_t ntables,
		       const uint64_t *ids, const uint64_t *next, size_t batch,
		       size_t dim, const uint64_t *offsets, float *out);
int cb_update(et_store *s, const int *tid, size_t ntables, const uint64_t *ids,
	      size_t batch, size_t dim, const uint64_t *offsets,
	      const float *grad, float lr, float eps);

static clockid_t clock_id = CLOCK_THREAD_CPUTIME_ID;

/* Times with the calling thread's CPU time (0), the wall clock (1) or the
 * CPU time of the whole process, the store's threads included (2). */
void cb_set_clock(int which)
{
	clock_id = which == 1	? CLOCK_MONOTONIC
		   : which == 2 ? CLOCK_PROCESS_CPUTIME_ID
				: CLOCK_THREAD_CPUTIME_ID;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(clock_id, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/*
 * One step's store work on ntables tables of batch bags, one id per bag,
 * dim dim: the tables' part of the multi-table calls, and et_prefetch's.
 * ids and next are ntables x batch; out and grad ntables x batch x dim;
 * offsets has batch + 1 entries.
 */
static void fill_batches(struct et_table_batch *tb, const int *tid,
			 size_t ntables, const uint64_t *ids, size_t batch,
			 size_t dim, const uint64_t *offsets, float *out,
			 const float *grad)
{
	for (size_t t = 0; t < ntables; t++)
		tb[t] = (struct et_table_batch){
		    .table = tid[t],
		    .ids = ids + t * batch,
		    .offsets = offsets,
		    .nbags = batch,
		    .out = out ? out + t * batch * dim : NULL,
		    .grads = grad ? grad + t * batch * dim : NULL};
}

/* et_prefetch of next, then et_gather_pooled_multi of ids into out. */
int cb_prefetch_gather(et_store *s, const int *tid, size_t ntables,
		       const uint64_t *ids, const uint64_t *next, size_t batch,
		       size_t dim, const uint64_t *offsets, float *out)
{
	struct et_batch_ids pf[ntables];
	struct et_table_batch tb[ntables];
	int ret;

	/* all of it: gcc cannot see that the loop sets every entry */
	memset(pf, 0, sizeof(pf));
	for (size_t t = 0; t < ntables; t++) {
		pf[t].table = tid[t];
		pf[t].ids = next + t * batch;
		pf[t].n = batch;
	}
	ret = et_prefetch(s, pf, ntables);
	if (ret)
		return ret;
	fill_batches(tb, tid, ntables, ids, batch, dim, offsets, out, NULL);
	return et_gather_pooled_multi(s, tb, ntables, ET_POOL_SUM);
}

/* et_update_pooled_multi of ids with grad, learning rate lr, epsilon eps. */
int cb_update(et_store *s, const int *tid, size_t ntables, const uint64_t *ids,
	      size_t batch, size_t dim, const uint64_t *offsets,
	      const float *grad, float lr, float eps)
{
	struct et_update_params up = {.lr = lr, .eps = eps};
	struct et_table_batch tb[ntables];

	fill_batches(tb, tid, ntables, ids, batch, dim, offsets, NULL, grad);
	return et_update_pooled_multi(s, tb, ntables, ET_POOL_SUM, &up);
}

/*
 * Steps first .. first + count - 1 of a training step's store work, step
 * k: et_prefetch of step k + 1's ids (of step 0 after the last),
 * et_gather_pooled_multi of every table into out (ntables x batch x dim),
 * et_update_pooled_multi of every table with grad (the same shape), as
 * embtier-train does. ids is steps x ntables x batch.
 */
int cb_steps(et_store *s, const int *tid, size_t ntables, const uint64_t *ids,
	     size_t batch, size_t dim, size_t steps, size_t first, size_t count,
	     const uint64_t *offsets, const float *grad, float lr, float *out,
	     uint64_t *ns)
{
	uint64_t t0 = now_ns();
	int ret = 0;

	for (size_t k = first; !ret && k < first + count && k < steps; k++) {
		const uint64_t *cur = ids + k * ntables * batch;
		const uint64_t *next = ids + (k + 1) % steps * ntables * batch;

		ret = cb_prefetch_gather(s, tid, ntables, cur, next, batch, dim,
					 offsets, out);
		if (!ret)
			ret = cb_update(s, tid, ntables, cur, batch, dim,
					offsets, grad, lr, 0);
	}
	*ns = now_ns() - t0;
	return ret;
}

/* et_gather of ids[k * batch ..][0 .. batch) into out, for each step k. */
int cb_gather(et_store *s, int table, const uint64_t *ids, size_t batch,
	      size_t steps, float *out, uint64_t *ns)
{
	uint64_t t0 = now_ns();
	int ret = 0;

	for (size_t k = 0; !ret && k < steps; k++)
		ret = et_gather(s, table, ids + k * batch, batch, out);
	*ns = now_ns() - t0;
	return ret;
}

/*
 * The same signatures as et_gather_pooled, et_update_pooled and
 * et_prefetch, doing nothing: the benchmark puts them in the package's
 * place of the library's to time what the binding alone costs.
 */
int cb_nop_gather_pooled(et_store *s, int table, const uint64_t *ids,
			 const uint64_t *offsets, size_t nbags, et_pool mode,
			 float *out);
int cb_nop_update_pooled(et_store *s, int table, const uint64_t *ids,
			 const uint64_t *offsets, size_t nbags, et_pool mode,
			 const float *bag_grads,
			 const struct et_update_params *up);
int cb_nop_prefetch(et_store *s, const struct et_batch_ids *batch,
		    size_t ntables);

int cb_nop_gather_pooled(et_store *s, int table, const uint64_t *ids,
			 const uint64_t *offsets, size_t nbags, et_pool mode,
			 float *out)
{
	return 0;
}

int cb_nop_update_pooled(et_store *s, int table, const uint64_t *ids,
			 const uint64_t *offsets, size_t nbags, et_pool mode,
			 const float *bag_grads,
			 const struct et_update_params *up)
{
	return 0;
}

int cb_nop_prefetch(et_store *s, const struct et_batch_ids *batch,
		    size_t ntables)
{
	return 0;
}

/* No-ops of python/embtier/_tables.c's calls, for the same purpose. */
#define TABLE_ARGS                                                             \
	et_store *s, size_t ntables, const int *tid, const uint32_t *dims,     \
	    const uint64_t *const *ids, const uint64_t *ids_base,              \
	    size_t ids_stride, const uint64_t *const *offsets,                 \
	    const uint64_t *offsets_base, size_t nbags, et_pool mode

int cb_nop_etpy_gather_pooled(TABLE_ARGS, float *out, size_t *failed);
int cb_nop_etpy_update_pooled(TABLE_ARGS, const float *grads,
			      const struct et_update_params *up,
			      size_t *failed);
int cb_nop_etpy_prefetch(et_store *s, size_t ntables, const int *tid,
			 const uint64_t *ids_base, size_t n);

int cb_nop_etpy_gather_pooled(TABLE_ARGS, float *out, size_t *failed)
{
	return 0;
}

int cb_nop_etpy_update_pooled(TABLE_ARGS, const float *grads,
			      const struct et_update_params *up, size_t *failed)
{
	return 0;
}

int cb_nop_etpy_prefetch(et_store *s, size_t ntables, const int *tid,
			 const uint64_t *ids_base, size_t n)
{
	return 0;
}

/* And of its plan's calls. */
struct etpy_plan;
int cb_nop_etpy_plan_prefetch(et_store *s, struct etpy_plan *p,
			      const uint64_t *ids, size_t n);
int cb_nop_etpy_plan_gather(et_store *s, struct etpy_plan *p,
			    const uint64_t *ids, size_t nbags,
			    uint64_t *ids_copy, float *out, size_t *failed);
int cb_nop_etpy_plan_update(et_store *s, struct etpy_plan *p,
			    const uint64_t *ids, size_t nbags,
			    const float *grads, float lr, float eps,
			    size_t *failed);

int cb_nop_etpy_plan_prefetch(et_store *s, struct etpy_plan *p,
			      const uint64_t *ids, size_t n)
{
	return 0;
}

int cb_nop_etpy_plan_gather(et_store *s, struct etpy_plan *p,
			    const uint64_t *ids, size_t nbags,
			    uint64_t *ids_copy, float *out, size_t *failed)
{
	return 0;
}

int cb_nop_etpy_plan_update(et_store *s, struct etpy_plan *p,
			    const uint64_t *ids, size_t nbags,
			    const float *grads, float lr, float eps,
			    size_t *failed)
{
	return 0;
}
