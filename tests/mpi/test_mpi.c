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
 * Keyed tables (ET_TABLE_KEYED: ids any u64, row-wise placed by bucket):
 * keys go to the owner of their bucket as embtier_mpi.h documents it
 * (the hash written out here), keyed tables weigh ET_MAX_ROWS rows in the
 * table-wise placement; one global batch cut over the ranks trains them
 * against a plain store, and their checksum, printed as "keyed-checksum:",
 * is the same at any rank count (run.sh compares 1, 2 and 4 ranks). A
 * keyed run resharded N/2 -> N -> 1 ranks (2 -> 4 -> 1 at 4) keeps every
 * key on its bucket's owner and ends on the straight run's checksum; a
 * shard listed in two rounds, the second ending on key UINT64_MAX, is
 * copied whole.
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

/* ------------------------------------------------------------- keyed */

/*
 * Keyed tables (ET_TABLE_KEYED): ids are any u64 key, placed row-wise by
 * bucket. The global batch is the same at any rank count (KBAGS bags, rank
 * r of N taking bags [r KBAGS / N, (r + 1) KBAGS / N)), so the tables'
 * checksum is too: main prints it ("keyed-checksum:") and run.sh compares
 * the 1-, 2- and 4-rank runs.
 */
#define KT                                                                     \
	4	  /* 0 keyed row-wise, 1 keyed table-wise, 2 keyed row-wise
		  * (F16, SGD), 3 row-indexed row-wise */
#define KBAGS  32 /* global bags per step */
#define KSTEPS 6

static const char *const kname[KT] = {"ka", "kb", "kc", "kr"};

/* The bucket of a key as embtier_mpi.h documents it, written out here:
 * a change of the library's hash (which would strand every keyed store's
 * keys on the wrong ranks) fails the test. */
static uint32_t doc_bucket(uint64_t h)
{
	h ^= h >> 32;
	h *= 0xd6e8feb86659fd93ULL;
	h ^= h >> 32;
	h *= 0xd6e8feb86659fd93ULL;
	h ^= h >> 32;
	return (uint32_t)(h >> 52);
}

/* plans: 0 the straight run's, 1 and 2 changed across the reshards */
static void k_spec(struct etm_table_spec *spec, int plans)
{
	for (int t = 0; t < KT; t++) {
		memset(&spec[t], 0, sizeof(spec[t]));
		spec[t].name = kname[t];
		spec[t].p.dim = DIM;
		spec[t].p.optim = t == 2 ? ET_OPT_SGD : ET_OPT_ROWWISE_ADAGRAD;
		spec[t].p.dtype = t == 2 ? ET_F16 : ET_F32;
		spec[t].p.init = t == 2 ? ET_INIT_NORMAL : ET_INIT_UNIFORM;
		spec[t].p.seed = 90 + t;
		if (t < 3)
			spec[t].p.flags = ET_TABLE_KEYED;
		else
			spec[t].p.rows = 500;
		spec[t].plan = t == 1 ? ETM_TABLE_WISE : ETM_ROW_WISE;
		if (plans == 1 && (t == 1 || t == 2)) /* swapped */
			spec[t].plan = t == 1 ? ETM_ROW_WISE : ETM_TABLE_WISE;
		if (plans == 2 && t == 0)
			spec[t].plan = ETM_TABLE_WISE;
	}
}

/* A key of draw h: the edges, 32 hot keys, or a fresh one (most seen
 * once). */
static uint64_t k_key(uint64_t h)
{
	static const uint64_t edge[] = {
	    0, 1, 2, 4095, 1ULL << 40, 1ULL << 63, UINT64_MAX - 1, UINT64_MAX};
	uint64_t i = h % 64;

	if (i < 8)
		return edge[i];
	if (i < 40)
		return mix(i * 1000003);
	return mix(h);
}

static void k_batch(int s, int t, struct gbatch *g)
{
	g->off[0] = 0;
	for (int b = 0; b < KBAGS; b++) {
		uint64_t h = mix(((uint64_t)s << 40) ^ ((uint64_t)t << 32) ^
				 (uint64_t)b ^ 0x6b6579ULL << 48);
		int len = (int)(h % (MAXB + 1));

		for (int k = 0; k < len; k++) {
			uint64_t key = k_key(mix(h + k));

			g->ids[g->off[b] + k] = t == 3 ? key % 500 : key;
		}
		g->off[b + 1] = g->off[b] + len;
		for (int c = 0; c < DIM; c++)
			g->grad[b * DIM + c] =
			    (float)((int)(mix(h ^ (c + 77)) % 2001) - 1000) /
			    997.0f;
	}
}

/* Every rank's reference: one plain store given every global batch. */
struct kref {
	et_store *s;
	int rt[KT];
	char dir[4200];
};

static int kref_open(struct kref *r, const char *dir)
{
	struct et_store_config cfg = {.ddr_bytes = 1 << 20};
	struct etm_table_spec spec[KT];
	int ret;

	k_spec(spec, 0);
	snprintf(r->dir, sizeof(r->dir), "%s", dir);
	ret = et_store_open(dir, &cfg, &r->s);
	for (int t = 0; t < KT && !ret; t++)
		ret =
		    et_table_create(r->s, spec[t].name, &spec[t].p, &r->rt[t]);
	CHECK(!ret, "keyed: reference store: %s (%s)", et_strerror(ret),
	      et_errdetail());
	return ret;
}

/*
 * Step s: the sharded store m (NULL on a rank outside its communicator,
 * of n ranks, this one me) trains on its share of the global batch, whose
 * pooled bags must be the reference's; the reference takes all of it.
 */
static void k_step(etm *m, int me, int n, struct kref *r, int s)
{
	static struct gbatch g[KT];
	static float ref[KT][KBAGS * DIM];
	float out[KT][KBAGS * DIM], *outs[KT];
	uint64_t off[KT][KBAGS + 1];
	struct et_update_params up = {.lr = 0.1f};
	struct etm_bags bags[KT];
	const float *grads[KT];
	et_pool mode = s % 3 == 2 ? ET_POOL_MEAN : ET_POOL_SUM;
	int lo = me * KBAGS / (n ? n : 1), hi = (me + 1) * KBAGS / (n ? n : 1);
	int ret;

	for (int t = 0; t < KT; t++) {
		k_batch(s, t, &g[t]);
		et_gather_pooled(r->s, r->rt[t], g[t].ids, g[t].off, KBAGS,
				 mode, ref[t]);
		for (int b = lo; b <= hi && m; b++)
			off[t][b - lo] = g[t].off[b] - g[t].off[lo];
		bags[t].ids = g[t].ids + g[t].off[lo];
		bags[t].offsets = off[t];
		bags[t].nbags = (size_t)(hi - lo);
		grads[t] = g[t].grad + (size_t)lo * DIM;
		outs[t] = out[t];
	}
	if (m) {
		if (s % 2) {
			ret = etm_send_ids(m, bags, true);
			if (!ret)
				ret = etm_forward(m, NULL, mode, outs);
		} else {
			ret = etm_forward(m, bags, mode, outs);
		}
		CHECK(!ret, "keyed step %d: forward: %s (%s)", s,
		      etm_strerror(ret), et_errdetail());
		for (int t = 0; t < KT && !ret; t++)
			CHECK(!memcmp(out[t], ref[t] + (size_t)lo * DIM,
				      (size_t)(hi - lo) * DIM * sizeof(float)),
			      "keyed step %d table %d: pooled bags differ at "
			      "%d ranks",
			      s, t, n);
		ret = etm_backward(m, grads, &up);
		CHECK(!ret, "keyed step %d: backward: %s", s,
		      etm_strerror(ret));
	}
	for (int t = 0; t < KT; t++)
		et_update_pooled(r->s, r->rt[t], g[t].ids, g[t].off, KBAGS,
				 mode, g[t].grad, &up);
}

/* The stored rows of the table file at path, as of its store's last
 * commit: *n ids ascending, their values (malloc()ed). */
static int file_rows(const char *path, uint64_t **ids, float **vals, size_t *n)
{
	et_tfile *tf = NULL;
	size_t cap = 0, k;
	uint64_t from = 0;
	int ret = et_tfile_open(path, ET_TFILE_RDONLY, &tf);

	*ids = NULL;
	*vals = NULL;
	*n = 0;
	while (!ret) {
		uint64_t *p;

		if (cap - *n < 256) {
			cap = cap * 2 + 256;
			p = realloc(*ids, cap * sizeof(*p));
			if (!p) {
				ret = -ENOMEM;
				break;
			}
			*ids = p;
		}
		ret = et_tfile_rows(tf, from, *ids + *n, 256, &k);
		if (ret)
			break;
		*n += k;
		if (k < 256 || (*ids)[*n - 1] == UINT64_MAX)
			break;
		from = (*ids)[*n - 1] + 1;
	}
	if (!ret) {
		*vals = malloc((*n + 1) * DIM * sizeof(float));
		ret = *vals ? et_tfile_read_rows(tf, *ids, *n, *vals, NULL)
			    : -ENOMEM;
	}
	et_tfile_close(tf);
	return ret;
}

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
	const unsigned char *c = p;

	for (size_t i = 0; i < n; i++)
		h = (h ^ c[i]) * 0x100000001b3ULL;
	return h;
}

struct krow {
	uint64_t id;
	float v[DIM];
};

static int cmp_krow(const void *a, const void *b)
{
	const struct krow *x = a, *y = b;

	return x->id < y->id ? -1 : x->id > y->id;
}

/* FNV-1a of rows (sorted here), table t's part of a checksum; 1 in *dup
 * if a key is there twice. */
static uint64_t k_hash(uint64_t h, int t, struct krow *kr, size_t n, int *dup)
{
	uint64_t nn = n, tt = (uint64_t)t;

	qsort(kr, n, sizeof(*kr), cmp_krow);
	h = fnv(h, &tt, 8);
	h = fnv(h, &nn, 8);
	for (size_t i = 0; i < n; i++) {
		*dup |= i && kr[i].id == kr[i - 1].id;
		h = fnv(h, &kr[i].id, 8);
		h = fnv(h, kr[i].v, sizeof(kr[i].v));
	}
	return h;
}

/* The reference's checksum, after a commit. */
static uint64_t kref_sum(struct kref *r)
{
	uint64_t h = 0xcbf29ce484222325ULL;
	int ret = et_checkpoint(r->s, "ref", 4), dup = 0;

	for (int t = 0; t < KT && !ret; t++) {
		char path[4300];
		uint64_t *ids;
		float *vals;
		struct krow *kr;
		size_t n;

		snprintf(path, sizeof(path), "%s/%s.et", r->dir, kname[t]);
		ret = file_rows(path, &ids, &vals, &n);
		kr = malloc((n + 1) * sizeof(*kr));
		for (size_t i = 0; i < n && kr && !ret; i++) {
			kr[i].id = ids[i];
			memcpy(kr[i].v, vals + i * DIM, sizeof(kr[i].v));
		}
		if (!ret && kr)
			h = k_hash(h, t, kr, n, &dup);
		free(ids);
		free(vals);
		free(kr);
	}
	CHECK(!ret && !dup, "keyed: reference checksum: %s", et_strerror(ret));
	return h;
}

/*
 * The checksum of the sharded store m over comm (dir its directory, spec
 * its tables), on every rank of comm, from its shards' files as of their
 * last commit. Checks every stored key is on the rank that owns it: a
 * row-wise keyed table's on the owner of its bucket as documented
 * (doc_bucket), a table-wise table's on its one holder; and no key on two
 * ranks.
 */
static uint64_t k_sum(etm *m, MPI_Comm comm, const char *dir,
		      const struct etm_table_spec *spec)
{
	uint64_t h = 0xcbf29ce484222325ULL;
	int me, n, ret = 0, dup = 0, misplaced = 0;

	MPI_Comm_rank(comm, &me);
	MPI_Comm_size(comm, &n);
	for (int t = 0; t < KT; t++) {
		int lt = etm_local_table(m, t), *cnt = NULL, *dsp = NULL;
		bool keyed = spec[t].p.flags & ET_TABLE_KEYED;
		uint64_t *ids = NULL;
		float *vals = NULL;
		struct krow *mine = NULL, *all = NULL;
		size_t k = 0;
		int nk, total = 0;

		if (lt >= 0) {
			char path[4300];

			snprintf(path, sizeof(path), "%s/rank-%d/%s.et", dir,
				 me, kname[t]);
			ret |= file_rows(path, &ids, &vals, &k);
		}
		mine = malloc((k + 1) * sizeof(*mine));
		for (size_t i = 0; i < k && mine; i++) {
			uint64_t key = ids[i];
			int want = etm_owner(m, t, key);

			if (keyed && spec[t].plan == ETM_ROW_WISE)
				want = (int)((uint64_t)doc_bucket(key) *
					     (unsigned)n / 4096);
			misplaced += want != me || etm_owner(m, t, key) != me ||
				     etm_key_bucket(key) != doc_bucket(key);
			mine[i].id = key;
			memcpy(mine[i].v, vals + i * DIM, sizeof(mine[i].v));
		}
		nk = (int)k * (int)sizeof(*mine);
		if (me == 0) {
			cnt = calloc(n, sizeof(*cnt));
			dsp = calloc(n, sizeof(*dsp));
		}
		MPI_Gather(&nk, 1, MPI_INT, cnt, 1, MPI_INT, 0, comm);
		for (int r = 0; me == 0 && r < n; r++) {
			dsp[r] = total;
			total += cnt[r];
		}
		if (me == 0)
			all = malloc((size_t)total + 1);
		MPI_Gatherv(mine, nk, MPI_BYTE, all, cnt, dsp, MPI_BYTE, 0,
			    comm);
		if (me == 0)
			h = k_hash(h, t, all, (size_t)total / sizeof(*all),
				   &dup);
		free(ids);
		free(vals);
		free(mine);
		free(all);
		free(cnt);
		free(dsp);
	}
	MPI_Bcast(&h, 1, MPI_UINT64_T, 0, comm);
	MPI_Bcast(&dup, 1, MPI_INT, 0, comm);
	CHECK(!ret && !dup && !misplaced,
	      "keyed at %d ranks: reading the shards: %s, a key on two "
	      "ranks: %d, %d keys off their owner",
	      n, et_strerror(ret), dup, misplaced);
	return h;
}

/* Rows of a row-indexed table of R rows rank r of N owns. */
static uint64_t range_rows(uint64_t R, int r, int n)
{
	uint64_t a = ((uint64_t)r * R + n - 1) / n;
	uint64_t b = ((uint64_t)(r + 1) * R + n - 1) / n;

	return b - a;
}

/* Where keys go, before any is stored: etm_owner by the documented
 * bucket, contiguous bucket ranges, every rank some. */
static void test_key_owners(const char *dir)
{
	struct et_store_config cfg = {.ddr_bytes = 1 << 20};
	struct etm_table_spec spec[KT];
	int seen[64] = {0}, bad = 0, last = 0, ret;
	etm *m = NULL;

	k_spec(spec, 0);
	ret = etm_open(MPI_COMM_WORLD, dir, &cfg, 0, &m);
	if (!ret)
		ret = etm_tables(m, spec, KT, true);
	CHECK(!ret, "keyed owners: %s (%s)", etm_strerror(ret), et_errdetail());
	if (ret)
		goto out;
	for (uint64_t i = 0; i < 100000; i++) {
		uint64_t key = i < 50000 ? i : mix(i);
		uint32_t b = doc_bucket(key);
		int own = etm_owner(m, 0, key);

		bad += etm_key_bucket(key) != b ||
		       own != (int)((uint64_t)b * nranks / ETM_KEY_BUCKETS) ||
		       etm_owner(m, 2, key) != own ||
		       etm_owner(m, 1, key) != etm_owner(m, 1, 0);
		seen[own] = 1;
	}
	bad += doc_bucket(0) != 0 || etm_key_bucket(UINT64_MAX) != 1096;
	/* buckets in rank order: a rank's are one contiguous range */
	for (uint32_t b = 0; b < ETM_KEY_BUCKETS; b++) {
		int own = (int)((uint64_t)b * nranks / ETM_KEY_BUCKETS);

		bad += own < last;
		last = own;
	}
	for (int r = 0; r < nranks; r++)
		bad += !seen[r];
	CHECK(!bad, "keyed owners: %d keys or buckets misplaced", bad);
	CHECK(etm_owned_rows(m, 0) == 0 && etm_owned_rows(m, 1) == 0 &&
		  etm_owned_rows(m, 3) == range_rows(500, rank, nranks),
	      "etm_owned_rows of keyed tables");
	etm_close(m);
	m = NULL;
	/* table-wise, a keyed table weighs ET_MAX_ROWS rows: two keyed
	 * tables go to two ranks, the row-indexed one beside them */
	{
		char d2[4300];

		k_spec(spec, 2);
		spec[3].plan = ETM_TABLE_WISE;
		snprintf(d2, sizeof(d2), "%s-2", dir);
		ret = etm_open(MPI_COMM_WORLD, d2, &cfg, 0, &m);
		if (!ret)
			ret = etm_tables(m, spec, KT, true);
		CHECK(!ret, "keyed placement: %s", etm_strerror(ret));
		if (!ret && nranks > 1)
			CHECK(etm_owner(m, 0, 0) != etm_owner(m, 1, 0) &&
				  (nranks < 3 ||
				   (etm_owner(m, 3, 0) != etm_owner(m, 0, 0) &&
				    etm_owner(m, 3, 0) != etm_owner(m, 1, 0))),
			      "keyed tables placed on ranks %d and %d, the "
			      "row-indexed one on %d",
			      etm_owner(m, 0, 0), etm_owner(m, 1, 0),
			      etm_owner(m, 3, 0));
	}
out:
	etm_close(m);
}

static int k_open(MPI_Comm comm, const char *dir, int plans, etm **m)
{
	struct et_store_config cfg = {.ddr_bytes = 64 << 10};
	struct etm_table_spec spec[KT];
	int ret;

	k_spec(spec, plans);
	ret = etm_open(comm, dir, &cfg, 0, m);
	if (!ret) {
		ret = etm_tables(*m, spec, KT, true);
		if (ret) {
			etm_close(*m);
			*m = NULL;
		}
	}
	CHECK(!ret, "keyed: opening %s: %s (%s)", dir, etm_strerror(ret),
	      et_errdetail());
	return ret;
}

/* The straight run at every rank: its checksum, the reference's. */
static uint64_t test_keyed_train(const char *base)
{
	struct etm_table_spec spec[KT];
	char dir[4200], ref[4300];
	struct kref r = {0};
	uint64_t h = 0, want;
	etm *m = NULL;

	k_spec(spec, 0);
	snprintf(dir, sizeof(dir), "%s/keyed.%d", base, nranks);
	snprintf(ref, sizeof(ref), "%s-ref-%d", dir, rank);
	if (kref_open(&r, ref) || k_open(MPI_COMM_WORLD, dir, 0, &m)) {
		et_store_close(r.s);
		return 0;
	}
	for (int s = 0; s < KSTEPS; s++)
		k_step(m, rank, nranks, &r, s);
	if (!etm_checkpoint(m, KSTEPS, "k", 2))
		h = k_sum(m, MPI_COMM_WORLD, dir, spec);
	want = kref_sum(&r);
	CHECK(h == want,
	      "keyed at %d ranks: checksum 0x%016llx, the reference's "
	      "0x%016llx",
	      nranks, (unsigned long long)h, (unsigned long long)want);
	etm_close(m);
	et_store_close(r.s);
	return h;
}

/* A reshard of keyed tables from src to dir over comm, to plans, and its
 * commit; the checksum after it must be want (nothing lost or doubled,
 * every key on its owner). */
static etm *k_reshard(MPI_Comm comm, const char *src, const char *dir,
		      int plans, uint64_t want)
{
	struct et_store_config cfg = {.ddr_bytes = 64 << 10};
	struct etm_table_spec spec[KT];
	struct etm_reshard_opts ro = {
	    .src = src, .dir = dir, .spec = spec, .ntables = KT, .cfg = &cfg};
	struct etm_reshard_info info;
	uint64_t h = 0;
	etm *m = NULL;
	int ret, n;

	MPI_Comm_size(comm, &n);
	k_spec(spec, plans);
	ret = etm_reshard(comm, &ro, &info, &m);
	CHECK(!ret, "keyed reshard to %d ranks: %s (%s)", n, etm_strerror(ret),
	      et_errdetail());
	if (ret)
		return NULL;
	ret = etm_checkpoint(m, info.step, "k", 2);
	etm_reshard_free(&info);
	if (!ret)
		h = k_sum(m, comm, dir, spec);
	CHECK(!ret && h == want,
	      "keyed reshard to %d ranks: %s, checksum 0x%016llx, before "
	      "0x%016llx",
	      n, etm_strerror(ret), (unsigned long long)h,
	      (unsigned long long)want);
	return m;
}

/*
 * A keyed run at N/2 ranks (1 at 1), resharded to N with plans changed,
 * then to 1 with plans changed again, trained between: the checksum of
 * the straight run (want). Each reshard keeps the checksum and puts every
 * key on the owner of its bucket (k_sum); a keyed table resharded into a
 * row-indexed one is refused.
 */
static void test_keyed_reshard(const char *base, uint64_t want)
{
	int a = nranks > 1 ? nranks / 2 : 1, ra = -1, ret;
	char da[4200], db[4200], dc[4200], dx[4200], ref[4300];
	struct etm_table_spec spec[KT];
	MPI_Comm ca, cc;
	struct kref r = {0};
	uint64_t h = 0, hb = 0;
	etm *m = NULL;

	snprintf(da, sizeof(da), "%s/keyed-rs.%d-a", base, nranks);
	snprintf(db, sizeof(db), "%s/keyed-rs.%d-b", base, nranks);
	snprintf(dc, sizeof(dc), "%s/keyed-rs.%d-c", base, nranks);
	snprintf(dx, sizeof(dx), "%s/keyed-rs.%d-x", base, nranks);
	snprintf(ref, sizeof(ref), "%s/keyed-rs.%d-ref-%d", base, nranks, rank);
	MPI_Comm_split(MPI_COMM_WORLD, rank < a ? 0 : MPI_UNDEFINED, rank, &ca);
	MPI_Comm_split(MPI_COMM_WORLD, rank < 1 ? 0 : MPI_UNDEFINED, rank, &cc);
	ret = kref_open(&r, ref);
	if (!ret && ca != MPI_COMM_NULL) {
		MPI_Comm_rank(ca, &ra);
		ret = k_open(ca, da, 0, &m);
	}
	MPI_Allreduce(MPI_IN_PLACE, &ret, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
	if (ret)
		goto out;
	for (int s = 0; s < 2; s++)
		k_step(m, ra, a, &r, s);
	if (m) {
		k_spec(spec, 0);
		ret = etm_checkpoint(m, 2, "k", 2);
		CHECK(!ret, "keyed at %d ranks: checkpoint: %s", a,
		      etm_strerror(ret));
		h = k_sum(m, ca, da, spec);
		etm_close(m);
		m = NULL;
	}
	MPI_Bcast(&h, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);

	/* a keyed table is not a row-indexed one */
	{
		struct et_store_config cfg = {.ddr_bytes = 64 << 10};
		struct etm_reshard_opts ro = {.src = da,
					      .dir = dx,
					      .spec = spec,
					      .ntables = KT,
					      .cfg = &cfg};
		struct etm_reshard_info info;
		struct stat st;

		k_spec(spec, 0);
		spec[0].p.flags = 0;
		spec[0].p.rows = 1000;
		ret = etm_reshard(MPI_COMM_WORLD, &ro, &info, &m);
		CHECK(ret == ET_EMISMATCH && !m &&
			  same_detail(MPI_COMM_WORLD,
				      "table ka: the table is keyed, "
				      "spec[0]'s row-indexed") &&
			  stat(dx, &st) != 0,
		      "keyed reshard into a row-indexed table: %d (%s)", ret,
		      et_errdetail());
	}

	/* N/2 -> N ranks, plans swapped; trained on */
	m = k_reshard(MPI_COMM_WORLD, da, db, 1, h);
	for (int s = 2; s < 4; s++)
		k_step(m, rank, nranks, &r, s);
	if (m) {
		k_spec(spec, 1);
		ret = etm_checkpoint(m, 4, "k", 2);
		CHECK(!ret, "keyed after a reshard: checkpoint: %s",
		      etm_strerror(ret));
		hb = k_sum(m, MPI_COMM_WORLD, db, spec);
		etm_close(m);
		m = NULL;
	}
	MPI_Barrier(MPI_COMM_WORLD);

	/* N -> 1 rank */
	if (cc != MPI_COMM_NULL)
		m = k_reshard(cc, db, dc, 2, hb);
	for (int s = 4; s < KSTEPS; s++)
		k_step(m, 0, 1, &r, s);
	if (m) {
		k_spec(spec, 2);
		ret = etm_checkpoint(m, KSTEPS, "k", 2);
		h = ret ? 0 : k_sum(m, cc, dc, spec);
		CHECK(h == want,
		      "keyed %d -> %d -> 1 ranks: checksum 0x%016llx, the "
		      "straight run's 0x%016llx",
		      a, nranks, (unsigned long long)h,
		      (unsigned long long)want);
		if (h == want)
			printf("keyed-reshard-checksum: %d -> %d -> 1 ranks "
			       "0x%016llx\n",
			       a, nranks, (unsigned long long)h);
		etm_close(m);
		m = NULL;
	}
	h = kref_sum(&r);
	CHECK(h == want, "keyed reshard: the reference's checksum");
out:
	et_store_close(r.s);
	if (ca != MPI_COMM_NULL)
		MPI_Comm_free(&ca);
	if (cc != MPI_COMM_NULL)
		MPI_Comm_free(&cc);
	MPI_Barrier(MPI_COMM_WORLD);
}

/*
 * A keyed shard listed in several rounds: reshard.c lists and copies at
 * most 8 MiB of rows a round, 512 rows of dim 4096 (SGD, no state), and
 * this one shard holds 1024 keys, the last UINT64_MAX: the second round
 * ends full on the largest key, where the listing must stop (not wrap to
 * key 0). Resharded from one rank to all, every key reads back on its
 * owner, copied once.
 */
#define KCDIM  4096
#define KCKEYS 1024

static float kc_val(uint64_t key, int c)
{
	return (float)(int)(mix(key * 131 + (uint64_t)c) % 2001) / 1000.0f;
}

static uint64_t kc_key(int i)
{
	return i == KCKEYS - 1 ? UINT64_MAX : i < 8 ? (uint64_t)i : mix(i) >> 1;
}

static void test_keyed_chunks(const char *base)
{
	struct et_store_config cfg = {.ddr_bytes = 4 << 20};
	struct etm_table_spec spec = {
	    .name = "wide",
	    .p = {.dim = KCDIM, .flags = ET_TABLE_KEYED, .seed = 5},
	    .plan = ETM_ROW_WISE};
	char src[4200], dst[4200];
	struct etm_reshard_opts ro = {
	    .src = src, .dir = dst, .spec = &spec, .ntables = 1, .cfg = &cfg};
	struct etm_reshard_info info;
	float *v = malloc((size_t)KCDIM * sizeof(float) * 64);
	uint64_t copied = 0;
	MPI_Comm one;
	etm *m = NULL;
	int ret = v ? 0 : -ENOMEM, bad = 0;

	snprintf(src, sizeof(src), "%s/keyed-chunks.%d-src", base, nranks);
	snprintf(dst, sizeof(dst), "%s/keyed-chunks.%d-dst", base, nranks);
	MPI_Comm_split(MPI_COMM_WORLD, rank == 0 ? 0 : MPI_UNDEFINED, 0, &one);
	if (one != MPI_COMM_NULL && !ret) {
		ret = etm_open(one, src, &cfg, 0, &m);
		if (!ret)
			ret = etm_tables(m, &spec, 1, true);
		for (int i = 0; i < KCKEYS && !ret; i += 64) {
			uint64_t keys[64];

			for (int k = 0; k < 64; k++) {
				keys[k] = kc_key(i + k);
				for (int c = 0; c < KCDIM; c++)
					v[(size_t)k * KCDIM + c] =
					    kc_val(keys[k], c);
			}
			ret = et_write_rows(etm_store(m), etm_local_table(m, 0),
					    keys, 64, v);
		}
		if (!ret)
			ret = etm_checkpoint(m, 1, "w", 2);
		etm_close(m);
		m = NULL;
		MPI_Comm_free(&one);
	}
	MPI_Allreduce(MPI_IN_PLACE, &ret, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
	CHECK(!ret, "keyed chunks: the source: %s", etm_strerror(ret));
	if (ret)
		goto out;
	ret = etm_reshard(MPI_COMM_WORLD, &ro, &info, &m);
	CHECK(!ret, "keyed chunks: reshard: %s (%s)", etm_strerror(ret),
	      et_errdetail());
	if (ret)
		goto out;
	copied = info.rows;
	etm_reshard_free(&info);
	MPI_Allreduce(MPI_IN_PLACE, &copied, 1, MPI_UINT64_T, MPI_SUM,
		      MPI_COMM_WORLD);
	for (int i = 0; i < KCKEYS; i++) {
		uint64_t key = kc_key(i);

		if (etm_owner(m, 0, key) != rank)
			continue;
		bad += et_gather(etm_store(m), etm_local_table(m, 0), &key, 1,
				 v) != 0;
		for (int c = 0; c < KCDIM; c++)
			bad += v[c] != kc_val(key, c);
	}
	CHECK(copied == KCKEYS && !bad,
	      "keyed chunks: %llu keys copied, want %d; %d values differ",
	      (unsigned long long)copied, KCKEYS, bad);
	etm_close(m);
out:
	free(v);
	MPI_Barrier(MPI_COMM_WORLD);
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
	snprintf(dir, sizeof(dir), "%s/test_mpi_keys.%d", base, nranks);
	test_key_owners(dir);
	{
		uint64_t h = test_keyed_train(base);

		test_keyed_reshard(base, h);
		test_keyed_chunks(base);
		if (rank == 0)
			printf("keyed-checksum: 0x%016llx\n",
			       (unsigned long long)h);
	}
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
