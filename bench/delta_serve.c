/*
 * delta_serve.c - embtier-bench delta's serving round: lookups through a
 * serving handle (et_serve_*) of the copy, from a reader thread, before
 * and while a delta is applied through the same handle.
 *
 * The handle has the default row cache (256 MiB). The reader looks up
 * 4096 rows a call, drawn from a Zipf distribution (s = 1.05, the ranks
 * scattered over the table by a keyed bijection), again and again:
 * DS_IDLE_S seconds to warm the cache (untimed), DS_IDLE_S seconds with
 * nothing else running (idle), then while et_serve_apply runs on the
 * calling thread. Figures: rows a second in each phase, the longest lookup in
 * each (the pause an apply's switch of versions costs a reader shows
 * here), the apply's seconds. Checked: the handle stands at the delta's
 * commit after the apply (the rows themselves are checked by delta.c).
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "bench.h"
#include "cli.h"

#define DS_BATCH  4096u
#define DS_IDLE_S 1.0
#define DS_ZIPF_S 1.05 /* serving traffic's skew: ranks scattered */

struct ds_reader {
	et_serve *sv;
	int table;
	uint64_t rows, seed;
	uint32_t dim;
	int phase; /* atomic: 0 warming, 1 idle, 2 applying, 3 stop */
	int err;
	uint64_t lookups[3];
	double longest[3];
	uint64_t commit_last; /* of the last lookup */
};

static void *ds_main(void *arg)
{
	struct ds_reader *r = arg;
	uint64_t *ids = malloc(DS_BATCH * sizeof(*ids));
	float *out = malloc((size_t)DS_BATCH * r->dim * sizeof(float));
	struct wl_zipf z;
	struct wl_perm perm;
	struct wl_rng rng;
	int ph;

	wl_zipf_init(&z, r->rows, DS_ZIPF_S);
	wl_perm_init(&perm, r->rows, r->seed ^ 0x7365727665ULL);
	wl_rng_seed(&rng, r->seed);
	if (!ids || !out)
		r->err = -ENOMEM;
	while (!r->err &&
	       (ph = __atomic_load_n(&r->phase, __ATOMIC_ACQUIRE)) < 3) {
		double t0, dt;
		uint64_t c;
		int rc;

		for (uint32_t i = 0; i < DS_BATCH; i++)
			ids[i] = wl_perm_apply(&perm, wl_zipf_sample(&z, &rng));
		t0 = now_s();
		rc = et_serve_lookup(r->sv, r->table, ids, DS_BATCH, out, &c);
		dt = now_s() - t0;
		if (rc) {
			r->err = rc;
			break;
		}
		/* counted in the phase it started in */
		r->lookups[ph]++;
		if (dt > r->longest[ph])
			r->longest[ph] = dt;
		r->commit_last = c;
	}
	free(ids);
	free(out);
	return NULL;
}

int delta_serve(const char *copy, const char *delta, uint64_t rows,
		uint32_t dim, uint64_t seed, struct serve_fig *f)
{
	struct ds_reader r = {.rows = rows, .dim = dim, .seed = seed};
	struct et_serve_info si;
	pthread_t th;
	double t0, t1;
	int ret;

	*f = (struct serve_fig){.batch = DS_BATCH};
	ret = et_serve_open(copy, NULL, &r.sv);
	if (ret)
		return ret;
	ret = et_serve_table(r.sv, "t", &r.table, NULL);
	if (!ret)
		ret = -pthread_create(&th, NULL, ds_main, &r);
	if (ret) {
		et_serve_close(r.sv);
		return ret;
	}
	for (int ph = 1; ph <= 2; ph++) { /* warming, then idle */
		t0 = now_s();
		while (now_s() - t0 < DS_IDLE_S && !bench_stop)
			nanosleep(&(struct timespec){0, 10000000}, NULL);
		__atomic_store_n(&r.phase, ph, __ATOMIC_RELEASE);
	}
	t1 = now_s();
	f->idle_s = t1 - t0;
	ret = et_serve_apply(r.sv, delta, &f->ap);
	f->apply_s = now_s() - t1;
	__atomic_store_n(&r.phase, 3, __ATOMIC_RELEASE);
	pthread_join(th, NULL);
	if (!ret)
		ret = r.err;
	if (!ret)
		ret = et_serve_info(r.sv, &si);
	et_serve_close(r.sv);
	if (ret)
		return ret;
	f->idle_rows_s = (double)(r.lookups[1] * DS_BATCH) / f->idle_s;
	f->apply_rows_s = (double)(r.lookups[2] * DS_BATCH) / f->apply_s;
	f->lookups_idle = r.lookups[1];
	f->lookups_apply = r.lookups[2];
	f->longest_idle_s = r.longest[1];
	f->longest_apply_s = r.longest[2];
	f->index_bytes = si.index_bytes;
	f->cache_bytes = si.cache_bytes;
	f->cache_hits = si.cache_hits;
	f->cache_misses = si.cache_misses;
	if (si.commit != f->ap.to_commit) {
		cli_error("the serving copy stands at commit %llu after the "
			  "apply to %llu",
			  (unsigned long long)si.commit,
			  (unsigned long long)f->ap.to_commit);
		return 1;
	}
	return 0;
}
