/*
 * c_baseline.c - the C side of python/bench_overhead.py: the store calls
 * the Python package makes, made directly from C in loops, on a store the
 * benchmark opened through the package. Built by `make python` into
 * build-python/python/libc_baseline.so, loaded with ctypes: the C and the
 * Python passes then alternate in one process over one store, so they see
 * the same cache contents, memory and machine load.
 *
 * Each function runs `steps` steps and returns 0 or the first error, the
 * elapsed time in *ns (measured here: the one ctypes call that starts the
 * loop is not counted).
 */
#include <stdint.h>
#include <time.h>

#include <embtier.h>

int cb_steps(et_store *s, const int *tid, size_t ntables, const uint64_t *ids,
	     size_t batch, size_t dim, size_t steps, size_t first, size_t count,
	     const uint64_t *offsets, const float *grad, float lr, float *out,
	     uint64_t *ns);
int cb_gather(et_store *s, int table, const uint64_t *ids, size_t batch,
	      size_t steps, float *out, uint64_t *ns);
void cb_set_clock(int which);

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
 * Steps first .. first + count - 1 of a training step's store work, step
 * k: et_prefetch of step k + 1's ids (of step 0 after the last),
 * et_gather_pooled_multi of every table into out (ntables x batch x dim),
 * et_update_pooled_multi of every table with grad (the same shape), as
 * embtier-train does. ids is
 * steps x ntables x batch; offsets has batch + 1 entries.
 */
int cb_steps(et_store *s, const int *tid, size_t ntables, const uint64_t *ids,
	     size_t batch, size_t dim, size_t steps, size_t first, size_t count,
	     const uint64_t *offsets, const float *grad, float lr, float *out,
	     uint64_t *ns)
{
	struct et_update_params up = {.lr = lr};
	struct et_batch_ids pf[ntables];
	struct et_table_batch tb[ntables];
	uint64_t t0 = now_ns();
	int ret = 0;

	for (size_t k = first; !ret && k < first + count && k < steps; k++) {
		const uint64_t *cur = ids + k * ntables * batch;
		const uint64_t *next = ids + (k + 1) % steps * ntables * batch;

		for (size_t t = 0; t < ntables; t++) {
			pf[t].table = tid[t];
			pf[t].ids = next + t * batch;
			pf[t].n = batch;
		}
		ret = et_prefetch(s, pf, ntables);
		for (size_t t = 0; t < ntables; t++)
			tb[t] = (struct et_table_batch){
			    .table = tid[t],
			    .ids = cur + t * batch,
			    .offsets = offsets,
			    .nbags = batch,
			    .out = out + t * batch * dim,
			    .grads = grad + t * batch * dim};
		if (!ret)
			ret =
			    et_gather_pooled_multi(s, tb, ntables, ET_POOL_SUM);
		if (!ret)
			ret = et_update_pooled_multi(s, tb, ntables,
						     ET_POOL_SUM, &up);
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
