/*
 * c_baseline.c - the C side of python/bench_overhead.py: the same store
 * calls as the Python package makes, made directly, on the same ids.
 *
 *   c_baseline step DIR IDS TABLES BATCH DIM ROWS STEPS REPEATS
 *   c_baseline gather DIR IDS TABLES BATCH DIM ROWS STEPS REPEATS
 *
 * IDS holds STEPS x TABLES x BATCH uint64 ids (native byte order), one id
 * per bag. The store in DIR (created) has TABLES tables t0, t1... of ROWS x
 * DIM f32 rows, row-wise Adagrad, uniform init with seed t, and a DDR tier
 * that holds every row (no HBM tier), as the Python side makes it.
 *
 * step: a training step's store work: et_prefetch of the next step's ids,
 * et_gather_pooled of every table into one output, et_update_pooled of
 * every table with a fixed gradient. gather: et_gather of table 0's ids.
 * Every row is read once first, so all lookups hit DDR; then the STEPS are
 * run REPEATS times and the fastest pass is printed as "ns_per_step N".
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <embtier.h>

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int fail(const char *what, int ret)
{
	fprintf(stderr, "c_baseline: %s: %s\n", what, et_strerror(ret));
	return 1;
}

static uint64_t *load_ids(const char *path, size_t n)
{
	uint64_t *ids = malloc(n * sizeof(*ids));
	FILE *f = fopen(path, "rb");

	if (!ids || !f || fread(ids, sizeof(*ids), n, f) != n) {
		fprintf(stderr, "c_baseline: cannot read %zu ids from %s\n", n,
			path);
		exit(1);
	}
	fclose(f);
	return ids;
}

int main(int argc, char **argv)
{
	struct et_store_config cfg = {0};
	struct et_update_params up = {.lr = 0.01f};
	uint64_t *ids, *offsets, *all, best = UINT64_MAX;
	size_t ntables, batch, dim, rows, steps, repeats;
	struct et_batch_ids *pf;
	float *out, *grad;
	int *tid, ret;
	bool step;
	et_store *s;

	if (argc != 10) {
		fprintf(stderr, "usage: c_baseline step|gather DIR IDS TABLES "
				"BATCH DIM ROWS STEPS REPEATS\n");
		return 2;
	}
	step = !strcmp(argv[1], "step");
	ntables = strtoull(argv[4], NULL, 0);
	batch = strtoull(argv[5], NULL, 0);
	dim = strtoull(argv[6], NULL, 0);
	rows = strtoull(argv[7], NULL, 0);
	steps = strtoull(argv[8], NULL, 0);
	repeats = strtoull(argv[9], NULL, 0);
	if (!ntables || !batch || !dim || !rows || !steps || !repeats)
		return 2;
	ids = load_ids(argv[3], steps * ntables * batch);
	/* row data + state + slot metadata, with room to spare */
	cfg.ddr_bytes = (uint64_t)ntables * rows * ((dim + 1) * 4 + 64) * 5 / 4;
	ret = et_store_open(argv[2], &cfg, &s);
	if (ret)
		return fail("et_store_open", ret);
	tid = calloc(ntables, sizeof(*tid));
	offsets = malloc((batch + 1) * sizeof(*offsets));
	out = malloc(ntables * batch * dim * sizeof(*out));
	grad = malloc(ntables * batch * dim * sizeof(*grad));
	all = malloc(rows * sizeof(*all));
	pf = calloc(ntables, sizeof(*pf));
	if (!tid || !offsets || !out || !grad || !all || !pf)
		return fail("malloc", -ENOMEM);
	for (size_t b = 0; b <= batch; b++)
		offsets[b] = b;
	for (size_t i = 0; i < ntables * batch * dim; i++)
		grad[i] = 1e-3f * (float)(i % 7);
	for (size_t r = 0; r < rows; r++)
		all[r] = r;
	for (size_t t = 0; t < ntables; t++) {
		struct et_table_params p = {
		    .rows = rows,
		    .dim = (uint32_t)dim,
		    .optim = ET_OPT_ROWWISE_ADAGRAD,
		    .init = ET_INIT_UNIFORM,
		    .seed = t,
		};
		char name[32];
		float *tmp = malloc(rows * dim * sizeof(*tmp));

		snprintf(name, sizeof(name), "t%zu", t);
		ret = et_table_create(s, name, &p, &tid[t]);
		if (!ret && tmp)
			ret = et_gather(s, tid[t], all, rows, tmp);
		free(tmp);
		if (ret)
			return fail("et_table_create", ret);
	}
	for (size_t r = 0; r < repeats; r++) {
		uint64_t t0 = now_ns(), dt;

		for (size_t k = 0; k < steps; k++) {
			const uint64_t *sid = ids + k * ntables * batch;

			if (!step) {
				ret = et_gather(s, tid[0], sid, batch, out);
				if (ret)
					return fail("et_gather", ret);
				continue;
			}
			for (size_t t = 0; t < ntables; t++) {
				pf[t].table = tid[t];
				pf[t].ids =
				    ids + ((k + 1) % steps) * ntables * batch +
				    t * batch;
				pf[t].n = batch;
			}
			ret = et_prefetch(s, pf, ntables);
			for (size_t t = 0; !ret && t < ntables; t++)
				ret = et_gather_pooled(
				    s, tid[t], sid + t * batch, offsets, batch,
				    ET_POOL_SUM, out + t * batch * dim);
			for (size_t t = 0; !ret && t < ntables; t++)
				ret = et_update_pooled(
				    s, tid[t], sid + t * batch, offsets, batch,
				    ET_POOL_SUM, grad + t * batch * dim, &up);
			if (ret)
				return fail("step", ret);
		}
		dt = now_ns() - t0;
		if (dt < best)
			best = dt;
	}
	printf("ns_per_step %.1f\n", (double)best / (double)steps);
	ret = et_store_close(s);
	free(ids);
	free(tid);
	free(offsets);
	free(out);
	free(grad);
	free(all);
	free(pf);
	return ret ? fail("et_store_close", ret) : 0;
}
