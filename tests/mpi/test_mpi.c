/*
 * test_mpi.c - libembtier_mpi against one plain store, run under mpirun
 * at any rank count (tests/mpi/run.sh runs it at 1, 2 and 4).
 *
 * Every rank keeps a reference store of its own holding whole tables and
 * replays the global batch there; the sharded store must give the same
 * pooled bags (bit for bit) for the rank's share, and the same rows after
 * the updates, for both plans, sum and mean pooling, empty bags and bags
 * spread over owners. The all-reduce must equal the rank-order tree sum.
 * Bad ids must be refused on every rank, changing nothing, with the same
 * et_errdetail() everywhere. A store written at part of the ranks is
 * resharded to all of them and back (etm_reshard), with other plans,
 * against the same reference; refused reshards and resumes give their own
 * codes (ETM_ENRANKS, ETM_ETORN) and say why, on every rank alike.
 *
 * Prints one line per check that fails and ends with "N passed, N failed"
 * (rank 0); exits non-zero on any failure.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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

/* Whether et_errdetail() is the same on every rank of comm (and
 * contains want, if non-NULL). */
static bool same_detail(MPI_Comm comm, const char *want)
{
	char mine[256], first[256];
	int ok;

	snprintf(mine, sizeof(mine), "%s", et_errdetail());
	memcpy(first, mine, sizeof(first));
	MPI_Bcast(first, sizeof(first), MPI_CHAR, 0, comm);
	ok = !strcmp(first, mine) && (!want || strstr(mine, want));
	MPI_Allreduce(MPI_IN_PLACE, &ok, 1, MPI_INT, MPI_MIN, comm);
	return ok;
}

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
		CHECK(
		    same_detail(MPI_COMM_WORLD,
				"bags[0].ids[0] 1000 >= rows 1000 of table 0"),
		    "bad id: detail '%s'", et_errdetail());
		/* bad arguments say which */
		ret = etm_forward(m, bb, (et_pool)9, outs);
		CHECK(ret == -EINVAL && strstr(et_errdetail(), "mode 9"),
		      "bad mode: %d (%s)", ret, et_errdetail());
		ret = etm_owned_ids(m, NT, &(const uint64_t *){NULL},
				    &(size_t){0});
		CHECK(ret == -EINVAL &&
			  strstr(et_errdetail(), "t 3 out of range"),
		      "bad table: %d (%s)", ret, et_errdetail());
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

/* ------------------------------------------------------------ reshard */

static void rs_spec(struct etm_table_spec *spec, bool second)
{
	for (int t = 0; t < NT; t++) {
		memset(&spec[t], 0, sizeof(spec[t]));
		spec[t].name = t == 0 ? "a" : t == 1 ? "b" : "c";
		spec[t].p.rows = rows[t];
		spec[t].p.dim = DIM;
		spec[t].p.dtype = t == 1 ? ET_F16 : ET_F32;
		spec[t].p.optim = t == 2 ? ET_OPT_SGD : ET_OPT_ROWWISE_ADAGRAD;
		spec[t].p.init = ET_INIT_NORMAL;
		spec[t].p.seed = 70 + t;
		/* the plans change across the reshard */
		spec[t].plan =
		    (t < 2) != second ? ETM_ROW_WISE : ETM_TABLE_WISE;
	}
}

/* Row id of table t is written (updated) before the checkpoint; rows
 * updated after it are uncommitted when the reshard reads them. */
static bool rs_written(int t, uint64_t id)
{
	return mix(id ^ ((uint64_t)t << 50)) % 3 == 0;
}

static void rs_grad(int t, uint64_t id, int k, float *g)
{
	for (int c = 0; c < DIM; c++)
		g[c] = (float)((int)(mix(id * 31 + (uint64_t)t * 7 + c +
					 (uint64_t)k * 1000) %
				     2001) -
			       1000) /
		       512.0f;
}

/* Applies update k of the ids of table t that pick(t, id) selects and
 * keep(id) keeps, one row at a time. */
static int rs_update(et_store *s, int lt, int t, int k,
		     bool (*pick)(int, uint64_t), const etm *m, int me)
{
	struct et_update_params up = {.lr = 0.05f};
	int ret = 0;

	for (uint64_t id = 0; id < rows[t] && !ret; id++) {
		float g[DIM];

		if (pick && !pick(t, id))
			continue;
		if (m && etm_owner(m, t, id) != me)
			continue;
		rs_grad(t, id, k, g);
		ret = et_update(s, lt, &id, 1, g, &up);
	}
	return ret;
}

/* A reshard's check that the last rank of comm refuses. */
struct refusal {
	MPI_Comm comm;
	int calls;
};

static int refuse_on_last(void *arg, const struct etm_reshard_info *info)
{
	struct refusal *r = arg;
	int me, n;

	(void)info;
	MPI_Comm_rank(r->comm, &me);
	MPI_Comm_size(r->comm, &n);
	r->calls++;
	if (me != n - 1)
		return 0;
	return et_error_set(-EDOM, "refused by the last rank (%d)", me);
}

static bool rs_later(int t, uint64_t id)
{
	return id % 5 == (uint64_t)(t == 1 ? 2 : 1);
}

/*
 * A sharded store written at one rank count (src_comm), checkpointed,
 * then written on without a commit, is resharded at another (dst_comm)
 * with other plans: every row of every table reads as the checkpoint had
 * it (a reference store replays the same updates), an update after it
 * gives the same bits (the optimizer state came along), every old rank's
 * dense state is handed over, the rows copied are exactly the rows
 * written, and the new store commits and resumes. A second reshard into
 * the same directory is refused.
 */
static void test_reshard(const char *base, MPI_Comm src_comm, MPI_Comm dst_comm)
{
	struct et_store_config cfg = {.ddr_bytes = 1 << 20};
	struct etm_table_spec spec[NT], spec2[NT];
	char src[4200], dst[4200], ref[4200], dense[64];
	struct etm_reshard_info info;
	struct etm_reshard_opts ro = {
	    .src = src, .dir = dst, .spec = spec2, .ntables = NT, .cfg = &cfg};
	int nsrc = 0, ndst = 0, me = -1, ret = 0, rt[NT];
	uint64_t step = 0, expect = 0, copied = 0;
	et_store *rs = NULL;
	etm *m = NULL, *m2 = NULL;

	rs_spec(spec, false);
	rs_spec(spec2, true);
	if (src_comm != MPI_COMM_NULL)
		MPI_Comm_size(src_comm, &nsrc);
	if (dst_comm != MPI_COMM_NULL)
		MPI_Comm_size(dst_comm, &ndst);
	MPI_Allreduce(MPI_IN_PLACE, &nsrc, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
	MPI_Allreduce(MPI_IN_PLACE, &ndst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
	static int calls;

	calls++;
	snprintf(src, sizeof(src), "%s/rs%d-%d-%d-src", base, calls, nsrc,
		 ndst);
	snprintf(dst, sizeof(dst), "%s/rs%d-%d-%d-dst", base, calls, nsrc,
		 ndst);
	snprintf(ref, sizeof(ref), "%s/rs%d-%d-%d-ref-%d", base, calls, nsrc,
		 ndst, rank);

	/* the old store: two updates of the written rows, a checkpoint,
	 * then more updates, flushed but never committed */
	if (src_comm != MPI_COMM_NULL) {
		MPI_Comm_rank(src_comm, &me);
		ret = etm_open(src_comm, src, &cfg, 0, &m);
		if (!ret)
			ret = etm_tables(m, spec, NT, true);
		for (int t = 0; t < NT && !ret; t++) {
			int lt = etm_local_table(m, t);

			for (int k = 0; k < 2 && lt >= 0 && !ret; k++)
				ret = rs_update(etm_store(m), lt, t, k,
						rs_written, m, me);
		}
		snprintf(dense, sizeof(dense), "rank %d of %d", me, nsrc);
		if (!ret)
			ret = etm_checkpoint(m, 7, dense, strlen(dense) + 1);
		for (int t = 0; t < NT && !ret; t++) {
			int lt = etm_local_table(m, t);

			if (lt >= 0)
				ret = rs_update(etm_store(m), lt, t, 5,
						rs_later, m, me);
		}
		if (!ret)
			ret = et_flush(etm_store(m));
		CHECK(!ret, "reshard: the old store: %s", et_strerror(ret));
	}
	MPI_Barrier(MPI_COMM_WORLD);

	/* every rank's reference: whole tables, the committed updates */
	ret = et_store_open(ref, &cfg, &rs);
	for (int t = 0; t < NT && !ret; t++) {
		ret = et_table_create(rs, spec[t].name, &spec[t].p, &rt[t]);
		for (int k = 0; k < 2 && !ret; k++)
			ret = rs_update(rs, rt[t], t, k, rs_written, NULL, 0);
		for (uint64_t id = 0; id < rows[t]; id++)
			expect += rs_written(t, id);
	}
	CHECK(!ret, "reshard: reference store: %s", et_strerror(ret));

	if (dst_comm != MPI_COMM_NULL && !ret) {
		MPI_Comm_rank(dst_comm, &me);
		ret = etm_reshard(dst_comm, &ro, &info, &m2);
		CHECK(!ret, "etm_reshard %d -> %d ranks: %s (%s)", nsrc, ndst,
		      etm_strerror(ret), et_errdetail());
	}
	if (dst_comm != MPI_COMM_NULL && m2) {
		CHECK(info.step == 7 && info.nranks == nsrc,
		      "reshard: step %llu, %d old ranks",
		      (unsigned long long)info.step, info.nranks);
		for (int r = 0; r < info.nranks; r++) {
			snprintf(dense, sizeof(dense), "rank %d of %d", r,
				 nsrc);
			CHECK(info.len[r] == strlen(dense) + 1 &&
				  !memcmp(info.dense[r], dense, info.len[r]),
			      "reshard: old rank %d's dense state", r);
		}
		copied = info.rows;
		MPI_Allreduce(MPI_IN_PLACE, &copied, 1, MPI_UINT64_T, MPI_SUM,
			      dst_comm);
		CHECK(copied == expect, "reshard copied %llu rows, want %llu",
		      (unsigned long long)copied, (unsigned long long)expect);
		etm_reshard_free(&info);
		/* every row owned here, then one more update of each */
		for (int k = 0; k < 2; k++) {
			for (int t = 0; t < NT; t++) {
				int lt = etm_local_table(m2, t), bad = 0;

				for (uint64_t r = 0; r < rows[t] && lt >= 0;
				     r++) {
					float a[DIM], b[DIM];

					if (etm_owner(m2, t, r) != me)
						continue;
					bad += et_gather(etm_store(m2), lt, &r,
							 1, a) != 0;
					bad +=
					    et_gather(rs, rt[t], &r, 1, b) != 0;
					bad += memcmp(a, b, sizeof(a)) != 0;
				}
				CHECK(!bad,
				      "reshard %d -> %d: table %d: %d rows "
				      "differ%s",
				      nsrc, ndst, t, bad,
				      k ? " after an update" : "");
				if (k == 0 && lt >= 0) {
					rs_update(etm_store(m2), lt, t, 9, NULL,
						  m2, me);
					rs_update(rs, rt[t], t, 9, NULL, m2,
						  me);
				}
			}
		}
		ret = etm_checkpoint(m2, 7, "new", 4);
		CHECK(!ret, "reshard: commit: %s", et_strerror(ret));
		etm_close(m2);
		m2 = NULL;
		/* it resumes like any sharded store */
		ret = etm_open(dst_comm, dst, &cfg, ETM_OPEN_RESUME, &m2);
		if (!ret)
			ret = etm_tables(m2, spec2, NT, false);
		if (!ret) {
			void *d = NULL;
			size_t len = 0;

			step = 0;
			ret = etm_checkpoint_read(m2, &step, &d, &len);
			CHECK(!ret && step == 7 && len == 4 &&
				  !memcmp(d, "new", 4),
			      "reshard: the new store's checkpoint");
			free(d);
		}
		CHECK(!ret, "reshard: resume: %s", et_strerror(ret));
		etm_close(m2);
		m2 = NULL;
		/* a second reshard into it is refused, on every rank */
		ret = etm_reshard(dst_comm, &ro, &info, &m2);
		CHECK(ret == -EEXIST && !m2 &&
			  same_detail(dst_comm, "dir is not empty"),
		      "reshard into a used directory: %d (%s)", ret,
		      et_errdetail());
		etm_close(m2);
	}
	/* another initializer (the spec's 0 meant the default scale) */
	if (dst_comm != MPI_COMM_NULL) {
		char dst3[4300];
		struct stat st;

		snprintf(dst3, sizeof(dst3), "%s-3", dst);
		spec2[1].p.init_scale = 0.5f;
		m2 = NULL;
		ro.dir = dst3;
		ret = etm_reshard(dst_comm, &ro, &info, &m2);
		CHECK(ret == ET_EMISMATCH && !m2 &&
			  same_detail(dst_comm, "initializer differ") &&
			  stat(dst3, &st) != 0,
		      "reshard to another initializer: %d (%s)", ret,
		      et_errdetail());
		spec2[1].p.init_scale = 0;
		/* the caller's check refuses on one rank: on every rank,
		 * with its reason, before anything is made */
		struct refusal rf = {dst_comm, 0};

		ro.check = refuse_on_last;
		ro.check_arg = &rf;
		ret = etm_reshard(dst_comm, &ro, &info, &m2);
		CHECK(ret == -EDOM && !m2 && rf.calls == 1 &&
			  same_detail(dst_comm, "refused by the last rank") &&
			  stat(dst3, &st) != 0,
		      "reshard refused by its check: %d (%s)", ret,
		      et_errdetail());
		etm_reshard_free(&info); /* nothing in it: harmless */
		ro.check = NULL;
		ro.dir = dst;
	}
	/* the old store stays as it was until every reshard is done; then
	 * a clean close commits the writes after the checkpoint, and its
	 * tables are past the dense state: refused, nothing made */
	MPI_Barrier(MPI_COMM_WORLD);
	et_store_close(rs);
	etm_close(m);
	MPI_Barrier(MPI_COMM_WORLD);
	if (dst_comm != MPI_COMM_NULL) {
		char dst2[4300];
		struct stat st;

		snprintf(dst2, sizeof(dst2), "%s-2", dst);
		m2 = NULL;
		ro.dir = dst2;
		ret = etm_reshard(dst_comm, &ro, &info, &m2);
		CHECK(ret == ETM_ETORN && !m2 &&
			  same_detail(dst_comm, "closed cleanly") &&
			  stat(dst2, &st) != 0,
		      "reshard of a store closed past its checkpoint: %d (%s)",
		      ret, et_errdetail());
		ro.dir = dst;
	}
	MPI_Barrier(MPI_COMM_WORLD);
	/* a resume at another rank count: refused before anything is
	 * opened, on every rank */
	if (nsrc != nranks) {
		char want[64];

		snprintf(want, sizeof(want),
			 "names %d ranks, the communicator "
			 "has %d",
			 nsrc, nranks);
		m2 = NULL;
		ret = etm_open(MPI_COMM_WORLD, src, &cfg, ETM_OPEN_RESUME, &m2);
		CHECK(ret == ETM_ENRANKS && !m2 &&
			  same_detail(MPI_COMM_WORLD, want),
		      "resume of %d ranks' store at %d: %d (%s)", nsrc, nranks,
		      ret, et_errdetail());
		etm_close(m2);
	}
	MPI_Barrier(MPI_COMM_WORLD);
}

/* Copies file a to b (rank 0 only). */
static int copy_file(const char *a, const char *b)
{
	char buf[4096];
	size_t n;
	FILE *f = fopen(a, "rb"), *g = f ? fopen(b, "wb") : NULL;
	int ret = f && g ? 0 : -1;

	while (!ret && (n = fread(buf, 1, sizeof(buf), f)) > 0)
		ret = fwrite(buf, 1, n, g) == n ? 0 : -1;
	if (f)
		fclose(f);
	if (g && fclose(g))
		ret = -1;
	return ret;
}

/*
 * A crash between the ranks' commits and the global record, made by hand:
 * every store commits step 2 while the record still names step 1, or
 * names nothing. etm_checkpoint_read refuses both on every rank with
 * ETM_ETORN and the same detail; the intact store reads back.
 */
static void test_torn(const char *dir)
{
	struct et_store_config cfg = {.ddr_bytes = 1 << 20};
	struct etm_table_spec spec = {
	    .name = "t", .p = {.rows = 100, .dim = DIM}, .plan = ETM_ROW_WISE};
	char rec[4300], keep[4300];
	uint64_t step = 0;
	void *d = NULL;
	size_t len = 0;
	etm *m = NULL;
	int ret;

	snprintf(rec, sizeof(rec), "%s/etm-checkpoint", dir);
	snprintf(keep, sizeof(keep), "%s/kept", dir);
	ret = etm_open(MPI_COMM_WORLD, dir, &cfg, 0, &m);
	if (!ret)
		ret = etm_tables(m, &spec, 1, true);
	if (!ret)
		ret = etm_checkpoint(m, 1, "one", 4);
	if (!ret)
		ret = etm_checkpoint_read(m, &step, &d, &len);
	CHECK(!ret && step == 1 && len == 4 && !memcmp(d, "one", 4),
	      "torn: setup: %s (%s)", etm_strerror(ret), et_errdetail());
	free(d);
	d = NULL;
	if (ret)
		goto out;
	if (rank == 0)
		ret = copy_file(rec, keep);
	MPI_Bcast(&ret, 1, MPI_INT, 0, MPI_COMM_WORLD);
	if (!ret)
		ret = etm_checkpoint(m, 2, "two", 4);
	if (!ret && rank == 0)
		ret = rename(keep, rec);
	MPI_Bcast(&ret, 1, MPI_INT, 0, MPI_COMM_WORLD);
	CHECK(!ret, "torn: setting up the crash");
	if (ret)
		goto out;
	ret = etm_checkpoint_read(m, &step, &d, &len);
	CHECK(ret == ETM_ETORN && !d &&
		  same_detail(MPI_COMM_WORLD, "rank 0's store committed step "
					      "2 but the last global "
					      "checkpoint is step 1"),
	      "torn: %d (%s)", ret, et_errdetail());
	MPI_Barrier(MPI_COMM_WORLD);
	if (rank == 0)
		unlink(rec);
	MPI_Barrier(MPI_COMM_WORLD);
	ret = etm_checkpoint_read(m, &step, &d, &len);
	CHECK(
	    ret == ETM_ETORN &&
		same_detail(MPI_COMM_WORLD, "first checkpoint never completed"),
	    "torn, no record: %d (%s)", ret, et_errdetail());
	CHECK(strcmp(etm_strerror(ETM_ETORN), "unknown error") &&
		  strcmp(etm_strerror(ETM_ENRANKS), "unknown error") &&
		  !strcmp(etm_strerror(ET_EMISMATCH),
			  et_strerror(ET_EMISMATCH)) &&
		  (int)ETM_ERR_LAST < (int)ET_ERR_LAST,
	      "etm_strerror");
out:
	etm_close(m);
}

/* et_error_set: what a library layered on embtier says through
 * et_errdetail(). Bad arguments say which. */
static void test_errors(void)
{
	struct etm_reshard_info info;
	etm *m = (etm *)&info;
	int ret;

	ret = et_error_set(-EDOM, "x %d", 42);
	CHECK(ret == -EDOM && !strcmp(et_errdetail(), "x 42"),
	      "et_error_set: %d '%s'", ret, et_errdetail());
	ret = et_error_set(0, NULL);
	CHECK(ret == 0 && !strcmp(et_errdetail(), ""), "et_error_set(NULL)");
	ret = etm_reshard(MPI_COMM_WORLD, NULL, &info, &m);
	CHECK(ret == -EINVAL && !m && !strcmp(et_errdetail(), "opts NULL"),
	      "etm_reshard(NULL opts): %d (%s)", ret, et_errdetail());
	etm_reshard_free(&info);
	ret = etm_reshard(MPI_COMM_WORLD,
			  &(struct etm_reshard_opts){.src = "a", .dir = "b"},
			  &info, &m);
	CHECK(ret == -EINVAL && !strcmp(et_errdetail(), "opts->spec NULL"),
	      "etm_reshard without spec: %d (%s)", ret, et_errdetail());
	ret = etm_open(MPI_COMM_WORLD, "/nonexistent", NULL, 0x10, &m);
	CHECK(ret == -EINVAL && strstr(et_errdetail(), "flags 0x10"),
	      "etm_open flags: %d (%s)", ret, et_errdetail());
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
	snprintf(dir, sizeof(dir), "%s/test_mpi_torn.%d", base, nranks);
	test_torn(dir);
	test_errors();
	{
		/* fewer ranks to all of them, and back */
		int k = nranks > 1 ? nranks / 2 : 1;
		MPI_Comm part;

		MPI_Comm_split(MPI_COMM_WORLD, rank < k ? 0 : MPI_UNDEFINED,
			       rank, &part);
		test_reshard(base, part, MPI_COMM_WORLD);
		test_reshard(base, MPI_COMM_WORLD, part);
		if (part != MPI_COMM_NULL)
			MPI_Comm_free(&part);
	}
	all = failures;
	MPI_Allreduce(MPI_IN_PLACE, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
	if (rank == 0)
		printf("test_mpi at %d ranks: %d passed, %d failed\n", nranks,
		       checks - failures, all);
	MPI_Finalize();
	return all ? 1 : 0;
}
