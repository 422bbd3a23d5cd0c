/*
 * test_mpi.c - libembtier_mpi against one plain store, run under mpirun
 * at any rank count (tests/mpi/run.sh runs it at 1, 2 and 4).
 *
 * Every rank keeps a reference store of its own holding whole tables and
 * replays the global batch there; the sharded store must give the same
 * pooled bags (bit for bit) for the rank's share, and the same rows after
 * the updates, for both plans, sum and mean pooling, empty bags and bags
 * spread over owners. The all-reduce must equal the rank-order tree sum.
 * Bad ids must be refused on every rank, changing nothing.
 *
 * Prints one line per check that fails and ends with "N passed, N failed"
 * (rank 0); exits non-zero on any failure.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "embtier_mpi.h"

#define NT    3 /* tables: 0 and 1 row-wise, 2 table-wise */
#define DIM   8
#define BAGS  8 /* per rank */
#define MAXB  3 /* ids per bag: 0..MAXB */
#define STEPS 4

static int rank, nranks, failures, checks;

#define CHECK(cond, ...)                                                       \
	do {                                                                   \
		checks++;                                                      \
		if (!(cond)) {                                                 \
			failures++;                                            \
			fprintf(stderr, "rank %d: %s:%d: ", rank, __FILE__,    \
				__LINE__);                                     \
			fprintf(stderr, __VA_ARGS__);                          \
			fputc('\n', stderr);                                   \
		}                                                              \
	} while (0)

static uint64_t mix(uint64_t z)
{
	z += 0x9e3779b97f4a7c15ULL;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static const uint64_t rows[NT] = {1000, 37, 500};

struct gbatch { /* one table's global batch: every rank's bags */
	uint64_t ids[BAGS * MAXB * 8];
	uint64_t off[BAGS * 8 + 1];
	float grad[BAGS * 8 * DIM];
};

/* The global batch of step s (all ranks' bags, rank order). */
static void make_batch(int s, int t, struct gbatch *g)
{
	int nb = BAGS * nranks;

	g->off[0] = 0;
	for (int b = 0; b < nb; b++) {
		uint64_t h = mix(((uint64_t)s << 40) ^ ((uint64_t)t << 32) ^
				 (uint64_t)b);
		int len = (int)(h % (MAXB + 1));

		for (int k = 0; k < len; k++)
			g->ids[g->off[b] + k] = mix(h + k) % rows[t];
		g->off[b + 1] = g->off[b] + len;
		for (int c = 0; c < DIM; c++)
			g->grad[b * DIM + c] =
			    (float)((int)(mix(h ^ (c + 99)) % 2001) - 1000) /
			    997.0f;
	}
}

static void test_steps(const char *dir, etm_plan plan_of_0, et_pool mode,
		       bool ahead)
{
	char path[4400];
	struct et_store_config cfg = {.ddr_bytes = 1 << 20};
	struct etm_table_spec spec[NT];
	struct et_update_params up = {.lr = 0.1f};
	static struct gbatch g[NT];
	struct etm_bags bags[NT];
	uint64_t loc_off[NT][BAGS + 1];
	float out[NT][BAGS * DIM], ref[BAGS * 8 * DIM];
	const float *grads[NT];
	float *outs[NT];
	et_store *rs;
	etm *m;
	int rt[NT], ret;

	for (int t = 0; t < NT; t++) {
		memset(&spec[t], 0, sizeof(spec[t]));
		spec[t].name = t == 0 ? "a" : t == 1 ? "b" : "c";
		spec[t].p.rows = rows[t];
		spec[t].p.dim = DIM;
		spec[t].p.optim = ET_OPT_ROWWISE_ADAGRAD;
		spec[t].p.init = ET_INIT_UNIFORM;
		spec[t].p.seed = 7 + t;
		spec[t].plan = t < 2 ? plan_of_0 : ETM_TABLE_WISE;
		outs[t] = out[t];
	}
	ret = etm_open(MPI_COMM_WORLD, dir, &cfg, 0, &m);
	CHECK(!ret, "etm_open: %s", et_strerror(ret));
	if (ret)
		return;
	ret = etm_tables(m, spec, NT, true);
	CHECK(!ret, "etm_tables: %s", et_strerror(ret));
	snprintf(path, sizeof(path), "%s-ref-%d", dir, rank);
	ret = et_store_open(path, &cfg, &rs);
	CHECK(!ret, "reference store: %s", et_strerror(ret));
	for (int t = 0; t < NT && !ret; t++)
		ret = et_table_create(rs, spec[t].name, &spec[t].p, &rt[t]);
	if (ret)
		goto out;
	{
		/* each table-wise table on exactly one rank */
		int held = etm_local_table(m, 2) >= 0;

		MPI_Allreduce(MPI_IN_PLACE, &held, 1, MPI_INT, MPI_SUM,
			      MPI_COMM_WORLD);
		CHECK(held == 1, "table-wise table held by %d ranks", held);
	}

	for (int s = 0; s < STEPS; s++) {
		for (int t = 0; t < NT; t++) {
			uint64_t o0;

			make_batch(s, t, &g[t]);
			o0 = g[t].off[rank * BAGS];
			for (int b = 0; b <= BAGS; b++)
				loc_off[t][b] = g[t].off[rank * BAGS + b] - o0;
			bags[t].ids = g[t].ids + o0;
			bags[t].offsets = loc_off[t];
			bags[t].nbags = BAGS;
			grads[t] = g[t].grad + rank * BAGS * DIM;
		}
		if (ahead) {
			ret = etm_send_ids(m, bags, true);
			CHECK(!ret, "send_ids: %s", et_strerror(ret));
			ret = etm_forward(m, NULL, mode, outs);
		} else {
			ret = etm_forward(m, bags, mode, outs);
		}
		CHECK(!ret, "forward: %s", et_strerror(ret));
		for (int t = 0; t < NT; t++) {
			et_gather_pooled(rs, rt[t], g[t].ids, g[t].off,
					 BAGS * nranks, mode, ref);
			CHECK(!memcmp(out[t], ref + rank * BAGS * DIM,
				      sizeof(out[t])),
			      "step %d table %d: pooled bags differ", s, t);
			et_update_pooled(rs, rt[t], g[t].ids, g[t].off,
					 BAGS * nranks, mode, g[t].grad, &up);
		}
		ret = etm_backward(m, grads, &up);
		CHECK(!ret, "backward: %s", et_strerror(ret));
	}
	/* every row this rank owns, as the reference has it */
	for (int t = 0; t < NT; t++) {
		int lt = etm_local_table(m, t);

		for (uint64_t r = 0; r < rows[t] && lt >= 0; r++) {
			float a[DIM], b[DIM];

			if (etm_owner(m, t, r) != rank)
				continue;
			et_gather(etm_store(m), lt, &r, 1, a);
			et_gather(rs, rt[t], &r, 1, b);
			CHECK(!memcmp(a, b, sizeof(a)),
			      "table %d row %llu differs after updates", t,
			      (unsigned long long)r);
		}
	}
	/* an id out of range: refused on every rank, nothing sent */
	{
		uint64_t bad_ids[1] = {rows[0]}, off1[2] = {0, rank == 0};
		struct etm_bags bb[NT];

		for (int t = 0; t < NT; t++) {
			bb[t].ids = t == 0 ? bad_ids : NULL;
			bb[t].offsets = t == 0 ? off1 : (uint64_t[2]){0, 0};
			bb[t].nbags = 1;
		}
		ret = etm_forward(m, bb, mode, outs);
		CHECK(ret == ET_EROWRANGE, "bad id: %d, want ET_EROWRANGE",
		      ret);
	}
out:
	et_store_close(rs);
	etm_close(m);
}

/* Rank r's buffer: values of very different sizes, so order matters. */
static float value(int r, size_t i)
{
	uint64_t h = mix(((uint64_t)r << 32) ^ i);

	return (float)((int64_t)(h % 2000001) - 1000000) *
	       (h & 1 ? 1e-6f : 1e3f);
}

static void tree(float *v, int lo, int hi)
{
	int mid = lo + (hi - lo) / 2;

	if (hi - lo < 2)
		return;
	tree(v, lo, mid);
	tree(v, mid, hi);
	v[lo] += v[mid];
}

static void test_allreduce(const char *dir)
{
	struct et_store_config cfg = {.ddr_bytes = 1 << 20};
	const size_t n = 1001;
	float *buf = malloc(n * sizeof(float)), *v = malloc(nranks * 4);
	etm *m;
	int ret = etm_open(MPI_COMM_WORLD, dir, &cfg, 0, &m);
	int bad = 0;

	CHECK(!ret && buf && v, "allreduce setup");
	if (ret || !buf || !v)
		goto out;
	for (size_t i = 0; i < n; i++)
		buf[i] = value(rank, i);
	ret = etm_allreduce(m, buf, n);
	CHECK(!ret, "allreduce: %s", et_strerror(ret));
	for (size_t i = 0; i < n; i++) {
		for (int r = 0; r < nranks; r++)
			v[r] = value(r, i);
		tree(v, 0, nranks);
		bad += memcmp(&v[0], &buf[i], sizeof(float)) != 0;
	}
	CHECK(!bad, "%d sums differ from the rank-order tree", bad);
	etm_close(m);
out:
	free(buf);
	free(v);
}

int main(int argc, char **argv)
{
	const char *base = getenv("ET_TEST_DIR");
	char dir[4096];
	int all;

	MPI_Init(&argc, &argv);
	MPI_Comm_rank(MPI_COMM_WORLD, &rank);
	MPI_Comm_size(MPI_COMM_WORLD, &nranks);
	if (!base)
		base = "/var/tmp";
	snprintf(dir, sizeof(dir), "%s/test_mpi.%d", base, nranks);
	for (int i = 0; i < 6; i++) {
		char d[4200];

		snprintf(d, sizeof(d), "%s-%d", dir, i);
		test_steps(d, i % 2 ? ETM_ROW_WISE : ETM_TABLE_WISE,
			   i / 2 == 1 ? ET_POOL_MEAN : ET_POOL_SUM, i / 2 != 2);
	}
	snprintf(dir, sizeof(dir), "%s/test_mpi_ar.%d", base, nranks);
	test_allreduce(dir);
	all = failures;
	MPI_Allreduce(MPI_IN_PLACE, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	if (rank == 0)
		printf("test_mpi at %d ranks: %d passed, %d failed\n", nranks,
		       checks - failures, all);
	MPI_Finalize();
	return all ? 1 : 0;
}
