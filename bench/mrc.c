/*
 * mrc.c - `embtier-bench mrc`: miss-ratio curves of one trace.
 *
 * The batches (--batches of a generator, default 20, or a whole trace)
 * are held in memory and run through the store itself, once per DDR size
 * and policy, with no HBM tier and tables left unwritten (a miss then
 * costs the initializer, not the disk: these runs measure ratios, not
 * speed). The miss ratio of a point is the DDR tier's misses over its
 * lookups (distinct ids per call) from et_get_stats, cold start included.
 *
 * Belady's MIN runs on the same lookups in the same order (each call's
 * distinct ids, first appearance first, tables in batch order) with the
 * capacity the store actually got (its slots, after rounding to whole
 * sets). It is fully associative and ignores the pinning of a call's
 * rows, so it is a lower bound, not a policy the store could run. The
 * compulsory floor (distinct keys / lookups) bounds every curve.
 *
 * On the zipf and shift generators a second reference, the oracle
 * (oracle.h), runs A0 on the same lookups: it knows the generator's
 * distribution (not its draws) and evicts the least probable row. It is
 * what an online policy can expect at best; its ratio to Belady's is
 * printed beside the best online policy's and the best with the largest
 * window. A third, the learner (learner.h), knows no ranks: it counts
 * every row's draws exactly, with unbounded memory, and keeps the most
 * drawn rows: what a policy that learns popularity from its lookups can
 * reach at best on those generators (on traces, a perfect LFU).
 *
 * Sizes: --sizes A,B,... (DDR bytes), or --points N (default 8) capacities
 * spaced by powers of two down from the trace's distinct rows.
 *
 * Series: each policy of --policies run with each window of --lookahead
 * (K batches: before batch i runs, et_lookahead hands the store batches
 * i .. i+K-1, as a trainer would before each step; 0 runs without a
 * window).
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "belady.h"
#include "learner.h"
#include "oracle.h"
#include "bench.h"
#include "cli.h"
#include "progress.h"

#define MAX_SERIES (4 * BENCH_MAX_LA)

/* A curve: a policy with a lookahead window. */
struct series {
	et_policy pol;
	uint32_t la; /* batches; 0: no window */
	char name[24];
};

struct point {
	uint64_t ddr_bytes, cap_rows;
	double miss[MAX_SERIES]; /* miss ratio of each series; < 0: not run */
	double opt;		 /* Belady's; < 0: not run */
	double oracle;		 /* the distribution oracle's; < 0: none */
	double learner;		 /* the counting learner's; < 0: not run */
};

/* The series asked for, in the order of the policies' values. */
static size_t series_list(const struct bench_opts *o, struct series *out)
{
	static const et_policy pols[] = {ET_POLICY_LRU, ET_POLICY_LFU,
					 ET_POLICY_TINYLFU, ET_POLICY_WTINYLFU};
	size_t n = 0;

	for (size_t p = 0; p < sizeof(pols) / sizeof(pols[0]); p++) {
		if (!(o->mrc_policies >> pols[p] & 1))
			continue;
		for (uint32_t k = 0; k < o->n_mrc_la; k++) {
			struct series *s = &out[n++];

			s->pol = pols[p];
			s->la = o->mrc_la[k];
			if (s->la)
				snprintf(s->name, sizeof(s->name), "%s+K%u",
					 cli_policy_name(s->pol), s->la);
			else
				snprintf(s->name, sizeof(s->name), "%s",
					 cli_policy_name(s->pol));
		}
	}
	return n;
}

/* Hands the store batches i .. i+k-1 of bs as its window. */
static int window(et_store *s, const struct tables *tb,
		  const struct wl_batch *bs, uint64_t nb, uint64_t i,
		  uint32_t k)
{
	struct et_batch w[ET_MAX_LOOKAHEAD];
	struct et_batch_ids *ids;
	size_t n = 0, total = 0, at = 0;
	int ret;

	for (uint64_t b = i; b < nb && b < i + k; b++)
		total += bs[b].count;
	ids = malloc((total ? total : 1) * sizeof(*ids));
	if (!ids)
		return -ENOMEM;
	for (uint64_t b = i; b < nb && n < k; b++, n++) {
		w[n].tables = ids + at;
		w[n].ntables = bs[b].count;
		for (uint32_t j = 0; j < bs[b].count; j++, at++) {
			ids[at].table = tb->sid[bs[b].t[j].table];
			ids[at].ids = bs[b].t[j].ids;
			ids[at].n = bs[b].t[j].n;
		}
	}
	ret = et_lookahead(s, w, n);
	free(ids);
	return ret;
}

static int keycmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Each call's distinct ids in first-appearance order, as keys; batch b's
 * are (*out)[bstart[b] .. bstart[b + 1]) (bstart: nb + 1 entries), and
 * (*draws)[i] how many times key i is in its call. */
static int lookups(const struct wl_batch *bs, uint64_t nb, uint64_t **out,
		   uint32_t **draws, size_t *n, size_t *bstart)
{
	size_t total = 0, k = 0, hcap = 16;
	uint64_t *keys, *h;
	uint32_t *d;
	size_t *at;

	for (uint64_t i = 0; i < nb; i++)
		total += wl_batch_ids(&bs[i]);
	keys = malloc((total ? total : 1) * sizeof(*keys));
	for (uint64_t i = 0; i < nb; i++)
		for (uint32_t j = 0; j < bs[i].count; j++)
			while (hcap < 2 * (size_t)bs[i].t[j].n)
				hcap *= 2;
	h = malloc(hcap * sizeof(*h));
	at = malloc(hcap * sizeof(*at));
	d = malloc((total ? total : 1) * sizeof(*d));
	if (!keys || !h || !at || !d) {
		free(keys);
		free(h);
		free(at);
		free(d);
		return -ENOMEM;
	}
	for (uint64_t i = 0; i < nb; i++) {
		bstart[i] = k;
		for (uint32_t j = 0; j < bs[i].count; j++) {
			const struct wl_table_ids *t = &bs[i].t[j];
			size_t cap = 16;

			while (cap < 2 * (size_t)t->n)
				cap *= 2;
			memset(h, 0, cap * sizeof(*h));
			for (uint32_t q = 0; q < t->n; q++) {
				uint64_t key =
				    ((uint64_t)(t->table + 1) << 40) |
				    t->ids[q];
				size_t s = wl_mix(key) & (cap - 1);

				while (h[s] && h[s] != key)
					s = (s + 1) & (cap - 1);
				if (!h[s]) {
					h[s] = key;
					at[s] = k;
					d[k] = 0;
					keys[k++] = key;
				}
				d[at[s]]++;
			}
		}
	}
	bstart[nb] = k;
	free(h);
	free(at);
	*out = keys;
	*draws = d;
	*n = k;
	return 0;
}

/* A fresh store of the tables for a point of series se: no HBM, a DDR tier
 * of ddr bytes under the series' policy. */
static int series_store(const struct bench_opts *o, struct tables *tb,
			uint64_t ddr, const struct series *se, et_store **s)
{
	struct et_store_config cfg;

	store_config(o, &cfg);
	cfg.hbm_bytes = 0;
	cfg.ddr_bytes = ddr;
	cfg.ddr_policy = se->pol;
	return tables_store(tb, &cfg, s);
}

/* Runs every batch through a fresh store; the DDR miss ratio. */
static int store_point(const struct bench_opts *o, struct tables *tb,
		       const struct wl_batch *bs, uint64_t nb, uint64_t ddr,
		       const struct series *se, double *ratio, uint64_t *cap,
		       struct progress *pg, uint64_t *done)
{
	struct et_stats st;
	et_store *s;
	float *out = NULL;
	size_t out_cap = 0;
	int ret;

	ret = series_store(o, tb, ddr, se, &s);
	if (ret)
		return ret;
	for (uint64_t i = 0; i < nb && !ret && !bench_stop; i++) {
		if (se->la)
			ret = window(s, tb, bs, nb, i, se->la);
		for (uint32_t j = 0; j < bs[i].count && !ret; j++) {
			const struct wl_table_ids *t = &bs[i].t[j];
			size_t need = (size_t)t->nbags * o->dim;

			if (need > out_cap) {
				free(out);
				out = malloc(need * sizeof(*out));
				out_cap = out ? need : 0;
				if (!out) {
					ret = -ENOMEM;
					break;
				}
			}
			ret = et_gather_pooled(s, tb->sid[t->table], t->ids,
					       t->offsets, t->nbags,
					       ET_POOL_SUM, out);
		}
		progress_update(pg, ++*done);
	}
	if (!ret)
		ret = et_get_stats(s, -1, &st);
	if (!ret) {
		*ratio = st.ddr.hits + st.ddr.misses
			     ? (double)st.ddr.misses /
				   (double)(st.ddr.hits + st.ddr.misses)
			     : 0;
		*cap = st.ddr.capacity_rows;
	}
	{
		int r2 = et_store_close(s);

		if (!ret)
			ret = r2;
	}
	free(out);
	if (ret)
		cli_error_code("mrc store run", ret);
	return bench_stop ? -EINTR : ret;
}

/*
 * --hits N: the cost of the policies on the hit path. One store per
 * series, DDR big enough for every distinct row, all warmed by one pass
 * over the batches; then N rounds, each timing one pass of every series in
 * turn (et_gather of each table's ids, and the series' et_lookahead), so
 * that load from elsewhere falls on all alike. The best round of each.
 */
static int hit_pass(et_store *s, const struct bench_opts *o,
		    const struct tables *tb, const struct wl_batch *bs,
		    uint64_t nb, const struct series *se, float **out,
		    size_t *out_cap, uint64_t *ids_done)
{
	int ret = 0;

	for (uint64_t i = 0; i < nb && !ret && !bench_stop; i++) {
		if (se->la)
			ret = window(s, tb, bs, nb, i, se->la);
		for (uint32_t j = 0; j < bs[i].count && !ret; j++) {
			const struct wl_table_ids *t = &bs[i].t[j];
			size_t need = (size_t)t->n * o->dim;

			if (need > *out_cap) {
				free(*out);
				*out = malloc(need * sizeof(**out));
				*out_cap = *out ? need : 0;
				if (!*out)
					return -ENOMEM;
			}
			ret =
			    et_gather(s, tb->sid[t->table], t->ids, t->n, *out);
			*ids_done += t->n;
		}
	}
	return ret;
}

/* One round of one series: a fresh store, a pass to fill it, a timed pass
 * (every lookup a hit). */
static int hit_round(const struct bench_opts *o, struct tables *tb,
		     const struct wl_batch *bs, uint64_t nb, uint64_t ddr,
		     const struct series *se, double *rate, double *hit_ratio)
{
	struct et_stats es;
	et_store *s;
	float *out = NULL;
	size_t out_cap = 0;
	uint64_t n = 0;
	double t0;
	int ret, r2;

	ret = series_store(o, tb, ddr, se, &s);
	if (ret)
		return ret;
	ret = hit_pass(s, o, tb, bs, nb, se, &out, &out_cap, &n);
	n = 0;
	if (!ret)
		ret = et_get_stats(s, -1, &es);
	t0 = now_s();
	if (!ret)
		ret = hit_pass(s, o, tb, bs, nb, se, &out, &out_cap, &n);
	*rate = (double)n / (now_s() - t0);
	if (!ret) {
		uint64_t h = es.ddr.hits, m = es.ddr.misses;

		ret = et_get_stats(s, -1, &es);
		h = es.ddr.hits - h;
		m = es.ddr.misses - m;
		*hit_ratio = h + m ? (double)h / (double)(h + m) : 0;
	}
	r2 = et_store_close(s);
	free(out);
	return ret ? ret : r2;
}

/*
 * --hits N: the cost of the policies on the hit path. N rounds; in each,
 * every series in turn gets a fresh store with a DDR big enough for every
 * distinct row, warmed by one pass over the batches, and a timed pass
 * (et_gather of each table's ids, and the series' et_lookahead calls), so
 * that load from elsewhere falls on all alike. The best round of each.
 */
static int hits(const struct bench_opts *o, struct tables *tb,
		const struct wl_batch *bs, uint64_t nb, uint64_t distinct,
		uint32_t slot, const struct series *se, size_t ns)
{
	double best[MAX_SERIES] = {0}, hr[MAX_SERIES] = {0};
	uint64_t ddr = 2 * distinct * (slot + ET_SLOT_META_BYTES);
	int ret = 0;

	for (uint32_t r = 0; r < o->hit_rounds && !ret && !bench_stop; r++)
		for (size_t k = 0; k < ns && !ret; k++) {
			double rate;

			ret = hit_round(o, tb, bs, nb, ddr, &se[k], &rate,
					&hr[k]);
			if (!ret && rate > best[k])
				best[k] = rate;
		}
	if (ret) {
		cli_error_code("mrc --hits", ret);
		return ret;
	}
	if (o->format != FMT_TABLE)
		return 0;
	printf("\nDDR-hit gather (et_gather, every row cached), best of %u "
	       "rounds, series alternating:\n",
	       o->hit_rounds);
	for (size_t k = 0; k < ns; k++) {
		char b[32];

		printf("  %-12s %9s ids/s  %.3fx %s  (hit ratio %.4f)\n",
		       se[k].name, cli_human_count(best[k], b, sizeof(b)),
		       best[k] / best[0], se[0].name, hr[k]);
	}
	return 0;
}

static bool has_oracle(const struct point *p, size_t np);

static bool find_gnuplot(void)
{
	const char *path = getenv("PATH");
	char buf[4096];

	if (!path)
		path = "/usr/bin:/bin";
	while (*path) {
		size_t n = strcspn(path, ":");

		snprintf(buf, sizeof(buf), "%.*s/gnuplot", (int)n, path);
		if (n && access(buf, X_OK) == 0)
			return true;
		path += n;
		if (*path == ':')
			path++;
	}
	return false;
}

static void plot(const struct bench_opts *o, const struct series *se, size_t ns,
		 const struct point *p, size_t np, double floor_ratio,
		 const char *title)
{
	char data[] = "/var/tmp/embtier-mrc.XXXXXX";
	FILE *f, *gp;
	int fd, st;

	if (!find_gnuplot()) {
		cli_note("--plot: gnuplot not found in PATH, no plot drawn "
			 "(install gnuplot-nox)");
		return;
	}
	fd = mkstemp(data);
	if (fd < 0 || !(f = fdopen(fd, "w"))) {
		cli_error("%s: %s", data, strerror(errno));
		return;
	}
	for (size_t i = 0; i < np; i++) {
		fprintf(f, "%" PRIu64 " %.6f", p[i].cap_rows, p[i].opt);
		for (size_t k = 0; k < ns; k++)
			fprintf(f, " %.6f", p[i].miss[k]);
		fprintf(f, " %.6f %.6f\n", p[i].oracle, p[i].learner);
	}
	fclose(f);
	gp = popen("gnuplot", "w");
	if (!gp) {
		cli_error("gnuplot: %s", strerror(errno));
		unlink(data);
		return;
	}
	fprintf(gp,
		"set terminal pngcairo size 960,600 noenhanced\n"
		"set output '%s'\n"
		"set title '%s' noenhanced\n"
		"set xlabel 'cache capacity (rows)'\n"
		"set ylabel 'miss ratio (distinct ids per call)'\n"
		"set logscale x 2\n"
		"set format x '%%.0s%%c'\n"
		"set yrange [0:1.05]\n"
		"set key bottom left\n"
		"set grid\n",
		o->plot, title);
	fprintf(gp, "plot ");
	for (size_t k = 0; k < ns; k++)
		fprintf(gp,
			"'%s' using 1:($%zu < 0 ? NaN : $%zu) with "
			"linespoints title '%s', ",
			data, k + 3, k + 3, se[k].name);
	if (o->belady)
		fprintf(gp,
			"'%s' using 1:($2 < 0 ? NaN : $2) with "
			"linespoints lw 2 title 'Belady MIN (fully assoc.)', ",
			data);
	if (has_oracle(p, np))
		fprintf(gp,
			"'%s' using 1:($%zu < 0 ? NaN : $%zu) with "
			"linespoints lw 2 title 'oracle (A0, knows the "
			"distribution)', ",
			data, ns + 3, ns + 3);
	if (o->belady)
		fprintf(gp,
			"'%s' using 1:($%zu < 0 ? NaN : $%zu) with "
			"linespoints lw 2 title 'learner (exact counts)', ",
			data, ns + 4, ns + 4);
	fprintf(gp, "%.6f with lines dashtype 2 title 'compulsory'\n",
		floor_ratio);
	st = pclose(gp);
	unlink(data);
	if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
		cli_error("gnuplot failed (status %d); no plot in %s", st,
			  o->plot);
	else if (!o->quiet)
		cli_note("plot written to %s", o->plot);
}

static int parse_sizes(const char *s, uint64_t **out, size_t *n)
{
	char *copy = strdup(s), *save = NULL, *tok;
	uint64_t *v = NULL;
	size_t k = 0;

	if (!copy)
		return -ENOMEM;
	for (tok = strtok_r(copy, ",", &save); tok;
	     tok = strtok_r(NULL, ",", &save)) {
		uint64_t *nv = realloc(v, (k + 1) * sizeof(*nv));

		if (!nv || parse_size(tok, &nv[k])) {
			free(nv ? nv : v);
			free(copy);
			return -EINVAL;
		}
		v = nv;
		k++;
	}
	free(copy);
	*out = v;
	*n = k;
	return k ? 0 : -EINVAL;
}

static bool has_oracle(const struct point *p, size_t np)
{
	for (size_t i = 0; i < np; i++)
		if (p[i].oracle >= 0)
			return true;
	return false;
}

/* The best series of lookahead la at point i (the least misses); -1 if
 * none ran. */
static int best_series(const struct series *se, size_t ns,
		       const struct point *pt, uint32_t la)
{
	int best = -1;

	for (size_t k = 0; k < ns; k++)
		if (se[k].la == la && pt->miss[k] >= 0 &&
		    (best < 0 || pt->miss[k] < pt->miss[best]))
			best = (int)k;
	return best;
}

/* Misses as ratios to Belady's: the best online policy (no window), the
 * oracle, and the best policy with the largest window. */
static void print_ratios(const struct series *se, size_t ns,
			 const struct point *p, size_t np, uint64_t distinct)
{
	uint32_t kmax = 0;

	for (size_t k = 0; k < ns; k++)
		if (se[k].la > kmax)
			kmax = se[k].la;
	if (!np || p[0].opt <= 0)
		return;
	printf("\nmisses / Belady's:\n  %7s %-22s %7s %7s", "of all",
	       "best online (no window)", "learner", "oracle");
	if (kmax)
		printf("  best +K%u", kmax);
	printf("\n");
	for (size_t i = 0; i < np; i++) {
		int b = best_series(se, ns, &p[i], 0);
		int bk = kmax ? best_series(se, ns, &p[i], kmax) : -1;
		char name[40] = "-";

		if (p[i].opt <= 0)
			continue;
		if (b >= 0)
			snprintf(name, sizeof(name), "%.3fx %s",
				 p[i].miss[b] / p[i].opt, se[b].name);
		printf("  %6.1f%% %-22s",
		       100.0 * (double)p[i].cap_rows / (double)distinct, name);
		if (p[i].learner >= 0)
			printf(" %6.3fx", p[i].learner / p[i].opt);
		else
			printf(" %7s", "-");
		if (p[i].oracle >= 0)
			printf(" %6.3fx", p[i].oracle / p[i].opt);
		else
			printf(" %7s", "-");
		if (bk >= 0)
			printf("  %.3fx %s", p[i].miss[bk] / p[i].opt,
			       se[bk].name);
		printf("\n");
	}
}

static void print_points(const struct bench_opts *o, const struct series *se,
			 size_t ns, const struct point *p, size_t np,
			 uint64_t distinct, uint64_t lookups_n, uint64_t nb,
			 const char *desc)
{
	double floor_ratio = (double)distinct / (double)lookups_n;
	char b1[32], b2[32];

	if (o->format == FMT_JSON) {
		printf("{\"workload\":");
		json_str(desc);
		printf(",\"batches\":%" PRIu64 ",\"lookups\":%" PRIu64
		       ",\"distinct\":%" PRIu64 ",\"compulsory\":%.6f,"
		       "\"belady\":\"fully associative, demand fill\","
		       "\"points\":[",
		       nb, lookups_n, distinct, floor_ratio);
		for (size_t i = 0; i < np; i++) {
			printf("%s{\"ddr_bytes\":%" PRIu64
			       ",\"capacity_rows\":%" PRIu64,
			       i ? "," : "", p[i].ddr_bytes, p[i].cap_rows);
			for (size_t k = 0; k < ns; k++)
				printf(",\"%s\":%.6f", se[k].name,
				       p[i].miss[k]);
			if (p[i].learner >= 0)
				printf(",\"learner\":%.6f", p[i].learner);
			if (p[i].oracle >= 0)
				printf(",\"oracle\":%.6f", p[i].oracle);
			printf(",\"belady\":%.6f}", p[i].opt);
		}
		printf("]}\n");
		return;
	}
	if (o->format == FMT_CSV) {
		printf("ddr_bytes,capacity_rows,capacity_frac");
		for (size_t k = 0; k < ns; k++)
			printf(",%s", se[k].name);
		printf(",learner,oracle,belady,compulsory\n");
		for (size_t i = 0; i < np; i++) {
			printf("%" PRIu64 ",%" PRIu64 ",%.6f", p[i].ddr_bytes,
			       p[i].cap_rows,
			       (double)p[i].cap_rows / (double)distinct);
			for (size_t k = 0; k < ns; k++)
				printf(",%.6f", p[i].miss[k]);
			if (p[i].learner >= 0) /* else an empty field */
				printf(",%.6f", p[i].learner);
			else
				printf(",");
			if (p[i].oracle >= 0) /* else an empty field */
				printf(",%.6f", p[i].oracle);
			else
				printf(",");
			printf(",%.6f,%.6f\n", p[i].opt, floor_ratio);
		}
		return;
	}
	printf("workload: %s\n", desc);
	printf("trace:    %" PRIu64 " batches, %s lookups (distinct ids per "
	       "call), %s distinct rows; compulsory miss ratio %.4f\n",
	       nb, cli_human_count((double)lookups_n, b1, sizeof(b1)),
	       cli_human_count((double)distinct, b2, sizeof(b2)), floor_ratio);
	printf("store:    no HBM, DDR of each size below, %u ways; cold "
	       "start; +K = lookahead window of K batches; Belady = MIN, "
	       "fully associative, same capacity\n",
	       o->ways ? o->ways : 16);
	if (has_oracle(p, np))
		printf("oracle:   A0, evicting the row least probable under "
		       "the generator's distribution (of the current phase): "
		       "it knows the distribution, not the draws, so no "
		       "online policy can expect fewer misses\n");
	if (o->belady)
		printf("learner:  exact draw counts of every row (in the "
		       "phase), unbounded, keeps the most drawn, fully "
		       "associative: what learning from the lookups reaches\n");
	printf("\n");
	printf("  %10s %9s %7s", "DDR", "rows", "of all");
	for (size_t k = 0; k < ns; k++)
		printf(" %*s", se[k].la ? 11 : 7, se[k].name);
	if (o->belady)
		printf(" %7s", "learner");
	if (has_oracle(p, np))
		printf(" %7s", "oracle");
	printf(" %7s\n", "Belady");
	for (size_t i = 0; i < np; i++) {
		printf("  %10s %9" PRIu64 " %6.1f%%",
		       cli_human_bytes((double)p[i].ddr_bytes, b1, sizeof(b1)),
		       p[i].cap_rows,
		       100.0 * (double)p[i].cap_rows / (double)distinct);
		for (size_t k = 0; k < ns; k++) {
			int w = se[k].la ? 11 : 7;

			if (p[i].miss[k] < 0)
				printf(" %*s", w, "-");
			else
				printf(" %*.4f", w, p[i].miss[k]);
		}
		if (p[i].learner >= 0)
			printf(" %7.4f", p[i].learner);
		else if (o->belady)
			printf(" %7s", "-");
		if (p[i].oracle >= 0)
			printf(" %7.4f", p[i].oracle);
		else if (has_oracle(p, np))
			printf(" %7s", "-");
		if (p[i].opt < 0)
			printf(" %7s\n", "-");
		else
			printf(" %7.4f\n", p[i].opt);
	}
	print_ratios(se, ns, p, np, distinct);
}

/* One `mrc` command. */
struct mrc {
	const struct bench_opts *o;
	struct bench_opts oo; /* for the stores: no HBM, nothing written */
	struct wl_gen g;
	struct tables tb;
	struct wl_batch *bs; /* the batches, held */
	uint64_t nb;
	uint64_t *keys; /* each call's distinct ids (lookups()) */
	uint32_t *draws;
	size_t *bstart;
	size_t nkeys;
	uint64_t distinct; /* distinct keys */
	struct series se[MAX_SERIES];
	size_t ns;
	uint64_t *sizes; /* the DDR bytes of each point */
	struct point *pts;
	size_t np;
};

/* Reads the batches into m->bs: --batches of a generator (default 20),
 * or a whole trace. 0, -ENOMEM, or -EIO (reported). */
static int mrc_hold(struct mrc *m)
{
	const struct bench_opts *o = m->o;
	uint64_t want = o->wl.kind == WL_TRACE ? UINT64_MAX
			: o->batches	       ? o->batches
					       : 20;
	size_t cap_b = 0;
	int ret;

	while (m->nb != want && !bench_stop) {
		if (m->nb == cap_b) {
			size_t c = cap_b ? 2 * cap_b : 64;
			struct wl_batch *n = realloc(m->bs, c * sizeof(*n));

			if (!n)
				return -ENOMEM;
			m->bs = n;
			cap_b = c;
		}
		wl_batch_init(&m->bs[m->nb]);
		ret = wl_next(&m->g, &m->bs[m->nb]);
		if (ret <= 0) {
			wl_batch_free(&m->bs[m->nb]);
			if (ret == 0)
				break;
			cli_error("workload: %s", m->g.err);
			return -EIO;
		}
		m->nb++;
	}
	return 0;
}

/* The lookups of the batches, and how many distinct keys they hold. 0,
 * -ENOMEM, or -EIO (reported). */
static int mrc_keys(struct mrc *m)
{
	uint64_t *sorted;

	m->bstart = malloc((m->nb + 1) * sizeof(*m->bstart));
	if (!m->bstart ||
	    lookups(m->bs, m->nb, &m->keys, &m->draws, &m->nkeys, m->bstart))
		return -ENOMEM;
	if (!m->nkeys) {
		cli_error("the trace has no ids");
		return -EIO;
	}
	sorted = malloc(m->nkeys * sizeof(*sorted));
	if (!sorted)
		return -ENOMEM;
	memcpy(sorted, m->keys, m->nkeys * sizeof(*sorted));
	qsort(sorted, m->nkeys, sizeof(*sorted), keycmp);
	for (size_t i = 0; i < m->nkeys; i++)
		m->distinct += !i || sorted[i] != sorted[i - 1];
	free(sorted);
	return 0;
}

/* The DDR size of each point: --sizes, or --points capacities halving
 * down from the distinct rows, in slots of slot bytes. 0, -ENOMEM, or
 * -EINVAL (a usage error, reported). */
static int mrc_sizes(struct mrc *m, uint32_t slot)
{
	const struct bench_opts *o = m->o;

	if (o->sizes) {
		if (parse_sizes(o->sizes, &m->sizes, &m->np)) {
			cli_usage_error("--sizes: expected sizes like 64M,1G");
			return -EINVAL;
		}
		return 0;
	}
	m->np = o->points ? o->points : 8;
	m->sizes = malloc(m->np * sizeof(*m->sizes));
	if (!m->sizes)
		return -ENOMEM;
	for (size_t i = 0; i < m->np; i++) {
		uint64_t rows = m->distinct >> (m->np - 1 - i);
		uint64_t min = (uint64_t)(o->ways ? o->ways : 16);

		m->sizes[i] =
		    (rows > min ? rows : min) * (slot + ET_SLOT_META_BYTES);
	}
	return 0;
}

/* The references at a point of cap rows: Belady's and the learner's
 * (unless --no-belady), and the oracle's (zipf and shift). */
static int mrc_refs(struct mrc *m, struct point *pt, uint64_t cap)
{
	const struct bench_opts *o = m->o;
	uint64_t mi;
	int ret;

	if (o->belady) {
		ret = belady_misses(m->keys, m->nkeys, cap, &mi);
		if (ret) {
			cli_error("belady: %s", strerror(-ret));
			return ret;
		}
		pt->opt = (double)mi / (double)m->nkeys;
	}
	if (o->wl.kind == WL_ZIPF || o->wl.kind == WL_SHIFT) {
		ret = oracle_misses(&m->g, m->keys, m->bstart, m->nb, cap, &mi);
		if (ret) {
			cli_error("oracle: %s", strerror(-ret));
			return ret;
		}
		pt->oracle = (double)mi / (double)m->nkeys;
	}
	if (o->belady) {
		ret = learner_misses(
		    m->keys, m->draws, m->bstart, m->nb,
		    o->wl.kind == WL_SHIFT ? m->g.p.shift_every : 0, cap, &mi);
		if (ret) {
			cli_error("learner: %s", strerror(-ret));
			return ret;
		}
		pt->learner = (double)mi / (double)m->nkeys;
	}
	return 0;
}

/* Point i: every series through the store, then the references. */
static int mrc_point(struct mrc *m, size_t i, struct progress *pg,
		     uint64_t *done)
{
	struct point *pt = &m->pts[i];
	uint64_t cap = 0;
	int ret = 0;

	pt->ddr_bytes = m->sizes[i];
	pt->opt = -1;
	pt->oracle = -1;
	pt->learner = -1;
	for (size_t k = 0; k < MAX_SERIES; k++)
		pt->miss[k] = -1;
	for (size_t k = 0; k < m->ns && !ret; k++)
		ret = store_point(&m->oo, &m->tb, m->bs, m->nb, m->sizes[i],
				  &m->se[k], &pt->miss[k], &cap, pg, done);
	if (ret)
		return ret;
	if (!cap) {
		/* Belady alone: ask a store what the size holds. */
		const struct series lru = {ET_POLICY_LRU, 0, "lru"};
		double r;
		uint64_t d2 = 0;

		ret = store_point(&m->oo, &m->tb, m->bs, 0, m->sizes[i], &lru,
				  &r, &cap, pg, &d2);
		if (ret)
			return ret;
	}
	pt->cap_rows = cap;
	return mrc_refs(m, pt, cap);
}

static void mrc_free(struct mrc *m)
{
	tables_free(&m->tb);
	for (uint64_t i = 0; i < m->nb; i++)
		wl_batch_free(&m->bs[i]);
	free(m->bs);
	free(m->keys);
	free(m->draws);
	free(m->bstart);
	free(m->sizes);
	free(m->pts);
	wl_close(&m->g);
}

int cmd_mrc(const struct bench_opts *o)
{
	struct mrc m;
	struct progress pg;
	uint64_t done = 0;
	uint32_t slot;
	char desc[256];
	int ret, rc = CLI_EXIT_FAIL;

	if (opt_mixed_dims(o)) {
		cli_usage_error("mrc takes one --dim (its capacities and "
				"Belady's count rows of one size)");
		return CLI_EXIT_USAGE;
	}
	memset(&m, 0, sizeof(m));
	m.o = o;
	m.oo = *o;
	m.oo.materialize = MAT_NONE;
	m.oo.hbm_bytes = 0;
	m.ns = series_list(o, m.se);
	if (wl_open(&m.g, &o->wl)) {
		cli_error("workload: %s", m.g.err);
		return CLI_EXIT_FAIL;
	}
	slot = (uint32_t)((o->dim * dtype_bytes(o->dtype) + 3) & ~3u);
	ret = mrc_hold(&m);
	if (!ret)
		ret = mrc_keys(&m);
	if (!ret)
		ret = mrc_sizes(&m, slot);
	if (!ret) {
		m.pts = calloc(m.np, sizeof(*m.pts));
		ret = m.pts ? 0 : -ENOMEM;
	}
	if (ret == -ENOMEM)
		cli_error("out of memory");
	if (ret == -EINVAL)
		rc = CLI_EXIT_USAGE;
	if (!ret)
		ret = tables_setup(&m.tb, &m.oo, &m.g, 0);
	if (ret)
		goto out;
	progress_start(&pg, "mrc", "batches", m.nb * m.np * m.ns, o->quiet);
	for (size_t i = 0; i < m.np && !bench_stop && !ret; i++)
		ret = mrc_point(&m, i, &pg, &done);
	progress_end(&pg);
	if (ret || bench_stop)
		goto out;
	workload_desc(o, &m.g, desc, sizeof(desc));
	print_points(o, m.se, m.ns, m.pts, m.np, m.distinct, m.nkeys, m.nb,
		     desc);
	if (o->plot)
		plot(o, m.se, m.ns, m.pts, m.np,
		     (double)m.distinct / (double)m.nkeys, desc);
	if (o->hit_rounds &&
	    hits(&m.oo, &m.tb, m.bs, m.nb, m.distinct, slot, m.se, m.ns))
		goto out;
	rc = CLI_EXIT_OK;
out:
	mrc_free(&m);
	return rc;
}
