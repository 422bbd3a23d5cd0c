/*
 * shard.c - a sharded store's life: opening each rank's store in its own
 * directory, the sharding plans (which rank owns which rows), and
 * checkpoints that every rank commits or none does.
 *
 * Two-phase checkpoint. Phase one: each rank et_checkpoint()s its store
 * with a small header (rank, rank count, step) before the caller's dense
 * state; the ranks agree that all succeeded. Phase two: rank 0 writes the
 * global record dir/etm-checkpoint (magic, rank count, step, FNV-1a of
 * those) to a temporary file, fsyncs it, renames it over the old one and
 * fsyncs the directory. The global record is the commit point: at resume
 * every rank's store must hold exactly its step. A crash inside phase one
 * leaves ranks that committed the new step beside ranks that did not;
 * since a store keeps only its last checkpoint, that is detected and
 * refused rather than repaired.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "etm_impl.h"

#define GLOBAL_NAME  "etm-checkpoint"
#define GLOBAL_MAGIC "ETMGLOB1"
#define MAX_TABLES   4096

/* The two libraries' codes never meet (embtier_mpi.h). */
_Static_assert((int)ET_ERR_LAST > (int)ETM_ERR_BASE,
	       "libembtier's error codes reach into libembtier_mpi's");

int etm_vec_reserve(struct etm_vec *v, size_t bytes)
{
	size_t cap = v->cap ? v->cap : 64;
	void *p;

	if (bytes <= v->cap)
		return 0;
	while (cap < bytes)
		cap *= 2;
	p = realloc(v->p, cap);
	if (!p)
		return -ENOMEM;
	v->p = p;
	v->cap = cap;
	return 0;
}

void etm_vec_free(struct etm_vec *v)
{
	free(v->p);
	v->p = NULL;
	v->cap = 0;
}

/* ---------------------------------------------------------------- errors */

const char *etm_strerror(int err)
{
	switch (err) {
	case ETM_ENRANKS:
		return "the global checkpoint was written by another rank "
		       "count";
	case ETM_ETORN:
		return "the ranks' stores do not all hold the step of the "
		       "global checkpoint";
	}
	return et_strerror(err);
}

void etm_detail_save(struct etm_detail *d)
{
	snprintf(d->s, sizeof(d->s), "%s", et_errdetail());
}

int etm_detail_restore(const struct etm_detail *d, int ret)
{
	return et_error_set(ret, "%s", d->s);
}

int etm_agree_comm(MPI_Comm comm, int ret)
{
	struct etm_detail d;
	int all = ret, who, rank, nranks;

	if (MPI_Allreduce(&ret, &all, 1, MPI_INT, MPI_MIN, comm) != MPI_SUCCESS)
		return et_error_set(-EIO, "MPI_Allreduce failed");
	if (!all)
		return 0;
	MPI_Comm_rank(comm, &rank);
	MPI_Comm_size(comm, &nranks);
	if (nranks == 1)
		return all; /* ret, with its own detail */
	who = ret == all ? rank : INT_MAX;
	if (MPI_Allreduce(MPI_IN_PLACE, &who, 1, MPI_INT, MPI_MIN, comm) !=
	    MPI_SUCCESS)
		return et_error_set(all, "MPI_Allreduce failed");
	if (rank == who) {
		etm_detail_save(&d);
		if (!d.s[0])
			snprintf(d.s, sizeof(d.s), "rank %d: %s", rank,
				 etm_strerror(all));
	}
	if (MPI_Bcast(d.s, sizeof(d.s), MPI_CHAR, who, comm) != MPI_SUCCESS)
		return et_error_set(all, "MPI_Bcast failed");
	d.s[sizeof(d.s) - 1] = '\0';
	return etm_detail_restore(&d, all);
}

int etm_agree(etm *m, int ret)
{
	return etm_agree_comm(m->comm, ret);
}

/* ------------------------------------------------------- global record */

struct global_rec {
	char magic[8];
	uint32_t nranks;
	uint32_t pad;
	uint64_t step;
	uint64_t sum; /* FNV-1a of the fields above */
};

static uint64_t fnv1a(const void *p, size_t n)
{
	const unsigned char *c = p;
	uint64_t h = 0xcbf29ce484222325ULL;

	for (size_t i = 0; i < n; i++) {
		h ^= c[i];
		h *= 0x100000001b3ULL;
	}
	return h;
}

static int fsync_path(const char *path, int flags)
{
	int fd = open(path, flags | O_CLOEXEC);
	int ret = 0;

	if (fd < 0)
		return -errno;
	if (fsync(fd))
		ret = -errno;
	close(fd);
	return ret;
}

static int global_write(const char *dir, uint32_t nranks, uint64_t step)
{
	struct global_rec g = {0};
	char tmp[4200], path[4200];
	int fd, ret = 0;

	memcpy(g.magic, GLOBAL_MAGIC, 8);
	g.nranks = nranks;
	g.step = step;
	g.sum = fnv1a(&g, offsetof(struct global_rec, sum));
	snprintf(tmp, sizeof(tmp), "%s/%s.tmp", dir, GLOBAL_NAME);
	snprintf(path, sizeof(path), "%s/%s", dir, GLOBAL_NAME);
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	if (write(fd, &g, sizeof(g)) != (ssize_t)sizeof(g))
		ret = errno ? -errno : -EIO;
	if (!ret && fsync(fd))
		ret = -errno;
	close(fd);
	if (!ret && rename(tmp, path))
		ret = -errno;
	if (!ret)
		ret = fsync_path(dir, O_RDONLY | O_DIRECTORY);
	if (ret)
		unlink(tmp);
	return ret;
}

/* 0 and the record, -ENOENT, or ET_EHDRSUM for a damaged one. */
static int global_read(const char *dir, struct global_rec *g);

int etm_global_read(const char *dir, uint32_t *nranks, uint64_t *step)
{
	struct global_rec g;
	int ret = global_read(dir, &g);

	*nranks = ret ? 0 : g.nranks;
	*step = ret ? 0 : g.step;
	return ret;
}

static int global_read(const char *dir, struct global_rec *g)
{
	char path[4200];
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "%s/%s", dir, GLOBAL_NAME);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = read(fd, g, sizeof(*g));
	close(fd);
	if (n != (ssize_t)sizeof(*g) || memcmp(g->magic, GLOBAL_MAGIC, 8) ||
	    g->sum != fnv1a(g, offsetof(struct global_rec, sum)))
		return ET_EHDRSUM;
	return 0;
}

/* ---------------------------------------------------------------- open */

static int mkdir_p(const char *dir)
{
	if (mkdir(dir, 0755) && errno != EEXIST)
		return -errno;
	return 0;
}

/* A handle's routing scratch (exchange.c fills it). */
void etm_route_free(struct etm_route *r, int ntables)
{
	for (int t = 0; r->t && t < ntables; t++) {
		struct etm_rt_table *rt = &r->t[t];

		etm_vec_free(&rt->offsets);
		etm_vec_free(&rt->sub_bag);
		etm_vec_free(&rt->sub_len);
		etm_vec_free(&rt->gids);
		etm_vec_free(&rt->id_loc);
		etm_vec_free(&rt->dst);
		etm_vec_free(&rt->oids);
		etm_vec_free(&rt->ooff);
		etm_vec_free(&rt->src);
	}
	free(r->t);
	r->t = NULL;
}

static void etm_free(etm *m)
{
	if (!m)
		return;
	for (int i = 0; i < 3; i++)
		etm_route_free(&m->route[i], m->ntables);
	etm_vec_free(&m->sbuf);
	etm_vec_free(&m->rbuf);
	etm_vec_free(&m->out);
	etm_vec_free(&m->grad);
	free(m->scount);
	free(m->sdispl);
	free(m->rcount);
	free(m->rdispl);
	free(m->tbl);
	if (m->comm != MPI_COMM_NULL)
		MPI_Comm_free(&m->comm);
	free(m);
}

int etm_open(MPI_Comm comm, const char *dir, const struct et_store_config *cfg,
	     unsigned flags, etm **out)
{
	char sub[4200];
	struct etm_detail keep;
	struct stat st;
	etm *m;
	int ret = 0;

	et_error_set(0, NULL);
	if (!out)
		return et_error_set(-EINVAL, "out NULL");
	*out = NULL;
	if (!dir)
		return et_error_set(-EINVAL, "dir NULL");
	if (strlen(dir) > sizeof(m->dir) - 32)
		return et_error_set(-ENAMETOOLONG, "dir longer than %zu bytes",
				    sizeof(m->dir) - 32);
	if (flags & ~ETM_OPEN_RESUME)
		return et_error_set(-EINVAL, "flags 0x%x: unknown bits 0x%x",
				    flags, flags & ~ETM_OPEN_RESUME);
	m = calloc(1, sizeof(*m));
	if (!m)
		return -ENOMEM;
	m->comm = MPI_COMM_NULL;
	if (MPI_Comm_dup(comm, &m->comm) != MPI_SUCCESS) {
		free(m);
		return et_error_set(-EIO, "MPI_Comm_dup failed");
	}
	MPI_Comm_rank(m->comm, &m->rank);
	MPI_Comm_size(m->comm, &m->nranks);
	snprintf(m->dir, sizeof(m->dir), "%s", dir);
	m->next = 0;
	m->cur = 1;
	m->spare = 2;
	m->scount = calloc(m->nranks, sizeof(int));
	m->sdispl = calloc(m->nranks, sizeof(int));
	m->rcount = calloc(m->nranks, sizeof(int));
	m->rdispl = calloc(m->nranks, sizeof(int));
	if (!m->scount || !m->sdispl || !m->rcount || !m->rdispl)
		ret = -ENOMEM;
	ret = etm_agree(m, ret);
	if (ret)
		goto err;

	if (flags & ETM_OPEN_RESUME) {
		/* rank 0 checks the global record before anything is made */
		struct global_rec g = {0};
		int v[2] = {0, 0}; /* ret, its rank count */

		if (m->rank == 0) {
			v[0] = global_read(dir, &g);
			v[1] = v[0] ? 0 : (int)g.nranks;
			if (!v[0] && g.nranks != (uint32_t)m->nranks)
				v[0] = ETM_ENRANKS;
		}
		MPI_Bcast(v, 2, MPI_INT, 0, m->comm);
		ret = v[0];
		if (ret == ETM_ENRANKS)
			et_error_set(ret,
				     "the global checkpoint record names %d "
				     "ranks, the communicator has %d (continue "
				     "it in a new directory with etm_reshard)",
				     v[1], m->nranks);
		else if (ret == -ENOENT)
			et_error_set(ret, "dir holds no global checkpoint "
					  "record to resume from");
		else if (ret == ET_EHDRSUM)
			et_error_set(ret, "dir's global checkpoint record is "
					  "damaged");
		else if (ret)
			et_error_set(ret,
				     "reading dir's global checkpoint "
				     "record: %s",
				     etm_strerror(ret));
		if (ret)
			goto err;
	} else if (m->rank == 0) {
		ret = mkdir_p(dir);
	}
	ret = etm_agree(m, ret);
	if (ret)
		goto err;
	snprintf(sub, sizeof(sub), "%s/rank-%d", dir, m->rank);
	if (flags & ETM_OPEN_RESUME) {
		if (stat(sub, &st))
			ret = et_error_set(
			    -errno, "rank %d's directory dir/rank-%d: %s",
			    m->rank, m->rank, strerror(errno));
		else if (!S_ISDIR(st.st_mode))
			ret = et_error_set(-ENOTDIR,
					   "dir/rank-%d is not a directory",
					   m->rank);
	} else {
		ret = mkdir_p(sub);
	}
	if (!ret)
		ret = et_store_open(sub, cfg, &m->store);
	ret = etm_agree(m, ret);
	if (ret)
		goto err;
	*out = m;
	return 0;
err:
	etm_detail_save(&keep);
	if (m->store)
		et_store_close(m->store);
	etm_free(m);
	return etm_detail_restore(&keep, ret);
}

int etm_close(etm *m)
{
	int ret;

	if (!m)
		return 0;
	ret = et_store_close(m->store);
	etm_free(m);
	return ret;
}

/* --------------------------------------------------------------- plans */

/* A table's weight in the placement: rows x dim; a keyed table, whose
 * size is not known ahead, counts as ET_MAX_ROWS rows (the most a
 * row-indexed table can have), so keyed tables are placed first. */
static unsigned __int128 table_load(const struct etm_table_spec *s)
{
	uint64_t rows = s->p.flags & ET_TABLE_KEYED ? ET_MAX_ROWS : s->p.rows;

	return (unsigned __int128)rows * s->p.dim;
}

/* Table-wise placement: largest first, each on the least loaded rank. */
int etm_place(const struct etm_table_spec *spec, int n, int nranks, int *owner)
{
	unsigned __int128 *load = calloc(nranks, sizeof(*load));
	int *order = malloc(n * sizeof(*order));

	if (!load || !order) {
		free(load);
		free(order);
		return -ENOMEM;
	}
	for (int i = 0; i < n; i++)
		order[i] = i;
	/* insertion sort: stable, n is small */
	for (int i = 1; i < n; i++) {
		int k = order[i], j = i;

		while (j > 0 &&
		       table_load(&spec[order[j - 1]]) < table_load(&spec[k])) {
			order[j] = order[j - 1];
			j--;
		}
		order[j] = k;
	}
	for (int i = 0; i < n; i++) {
		int t = order[i], best = 0;

		owner[t] = -1;
		if (spec[t].plan != ETM_TABLE_WISE)
			continue;
		for (int r = 1; r < nranks; r++)
			if (load[r] < load[best])
				best = r;
		owner[t] = best;
		load[best] += table_load(&spec[t]);
	}
	free(load);
	free(order);
	return 0;
}

static int place_tables(etm *m, const struct etm_table_spec *spec, int n)
{
	int *owner = malloc(n * sizeof(*owner));
	int ret = owner ? etm_place(spec, n, m->nranks, owner) : -ENOMEM;

	for (int t = 0; t < n && !ret; t++)
		m->tbl[t].owner = owner[t];
	free(owner);
	return ret;
}

int etm_tables(etm *m, const struct etm_table_spec *spec, int n, bool create)
{
	int ret = 0;

	et_error_set(0, NULL);
	if (!m || !spec)
		return et_error_set(-EINVAL, "%s NULL", m ? "spec" : "m");
	if (n < 1 || n > MAX_TABLES)
		return et_error_set(-EINVAL, "n %d out of range 1..%d", n,
				    MAX_TABLES);
	if (m->tbl)
		return et_error_set(-EINVAL, "etm_tables was called before "
					     "on this handle");
	for (int t = 0; t < n; t++)
		if (spec[t].plan != ETM_TABLE_WISE &&
		    spec[t].plan != ETM_ROW_WISE)
			return et_error_set(-EINVAL,
					    "spec[%d].plan %d is neither "
					    "ETM_TABLE_WISE nor ETM_ROW_WISE",
					    t, (int)spec[t].plan);
	m->tbl = calloc(n, sizeof(*m->tbl));
	for (int i = 0; i < 3 && m->tbl; i++) {
		m->route[i].t = calloc(n, sizeof(*m->route[i].t));
		if (!m->route[i].t)
			ret = -ENOMEM;
	}
	if (!m->tbl)
		ret = -ENOMEM;
	if (!ret) {
		m->ntables = n;
		ret = place_tables(m, spec, n);
	}
	for (int t = 0; t < n && !ret; t++) {
		struct etm_tbl *tb = &m->tbl[t];

		tb->rows = spec[t].p.rows;
		tb->dim = spec[t].p.dim;
		tb->keyed = (spec[t].p.flags & ET_TABLE_KEYED) != 0;
		tb->plan = spec[t].plan;
		tb->local = -1;
		if (tb->plan == ETM_TABLE_WISE && tb->owner != m->rank)
			continue;
		if (create)
			ret = et_table_create(m->store, spec[t].name,
					      &spec[t].p, &tb->local);
		else
			ret = et_table_open(m->store, spec[t].name, &spec[t].p,
					    &tb->local);
	}
	return etm_agree(m, ret);
}

int etm_rank(const etm *m)
{
	return m->rank;
}

int etm_nranks(const etm *m)
{
	return m->nranks;
}

et_store *etm_store(etm *m)
{
	return m->store;
}

int etm_local_table(const etm *m, int t)
{
	return t >= 0 && t < m->ntables ? m->tbl[t].local : -1;
}

uint32_t etm_key_bucket(uint64_t key)
{
	return etm_bucket_of(key);
}

int etm_owner(const etm *m, int t, uint64_t id)
{
	const struct etm_tbl *tb = &m->tbl[t];

	if (tb->plan == ETM_TABLE_WISE)
		return tb->owner;
	if (tb->keyed)
		return etm_bucket_owner(etm_bucket_of(id), m->nranks);
	return (int)((unsigned __int128)id * (unsigned)m->nranks / tb->rows);
}

uint64_t etm_range_start(uint64_t rows, int r, int nranks)
{
	unsigned __int128 x = (unsigned __int128)r * rows;

	return (uint64_t)((x + (unsigned)nranks - 1) / (unsigned)nranks);
}

/* First row of rank r's range: ceil(r * rows / N). */
static uint64_t range_start(const struct etm_tbl *tb, int r, int nranks)
{
	return etm_range_start(tb->rows, r, nranks);
}

uint64_t etm_owned_rows(const etm *m, int t)
{
	const struct etm_tbl *tb = &m->tbl[t];

	if (tb->keyed) /* no count ahead: the shard's stored keys are
			* et_table_info's rows_logged */
		return 0;
	if (tb->plan == ETM_TABLE_WISE)
		return tb->owner == m->rank ? tb->rows : 0;
	return range_start(tb, m->rank + 1, m->nranks) -
	       range_start(tb, m->rank, m->nranks);
}

void etm_get_traffic(const etm *m, struct etm_traffic *t)
{
	*t = m->traffic;
}

/* ---------------------------------------------------------- checkpoint */

int etm_checkpoint(etm *m, uint64_t step, const void *dense, size_t len)
{
	struct shard_hdr h = {0};
	unsigned char *blob;
	int ret = 0;

	et_error_set(0, NULL);
	if (!m)
		return et_error_set(-EINVAL, "m NULL");
	if (len && !dense) /* the same on every rank, or a caller's bug */
		return et_error_set(-EINVAL, "dense NULL with len %zu", len);
	memcpy(h.magic, SHARD_MAGIC, 8);
	h.rank = (uint32_t)m->rank;
	h.nranks = (uint32_t)m->nranks;
	h.step = step;
	blob = malloc(sizeof(h) + len);
	if (!blob)
		ret = -ENOMEM;
	if (!ret) {
		memcpy(blob, &h, sizeof(h));
		if (len)
			memcpy(blob + sizeof(h), dense, len);
		ret = et_checkpoint(m->store, blob, sizeof(h) + len);
	}
	free(blob);
	/* phase one done everywhere, or nobody writes the record */
	ret = etm_agree(m, ret);
	if (ret)
		return ret;
	if (m->rank == 0)
		ret = global_write(m->dir, (uint32_t)m->nranks, step);
	MPI_Bcast(&ret, 1, MPI_INT, 0, m->comm);
	if (ret)
		et_error_set(ret,
			     "rank 0 could not write the global checkpoint "
			     "record of step %llu: %s",
			     (unsigned long long)step, etm_strerror(ret));
	return ret;
}

int etm_checkpoint_read(etm *m, uint64_t *step, void **dense, size_t *len)
{
	struct global_rec g = {0};
	struct shard_hdr h = {0};
	uint64_t mine[2] = {0, 0}, *all = NULL; /* has one, step */
	size_t blen = 0;
	void *blob = NULL;
	uint64_t id = 0;
	int ret, gret = 0;

	et_error_set(0, NULL);
	if (!m || !step || !dense || !len)
		return et_error_set(-EINVAL, "%s NULL",
				    !m	     ? "m"
				    : !step  ? "step"
				    : !dense ? "dense"
					     : "len");
	*dense = NULL;
	if (m->rank == 0)
		gret = global_read(m->dir, &g);
	MPI_Bcast(&gret, 1, MPI_INT, 0, m->comm);
	MPI_Bcast(&g, sizeof(g), MPI_BYTE, 0, m->comm);

	ret = et_checkpoint_read(m->store, &id, &blob, &blen);
	if (!ret && id) {
		if (blen >= sizeof(h))
			memcpy(&h, blob, sizeof(h));
		if (blen < sizeof(h) || memcmp(h.magic, SHARD_MAGIC, 8) ||
		    h.rank != (uint32_t)m->rank)
			ret = et_error_set(ET_EHEADER,
					   "rank %d's store checkpoint is not "
					   "its shard of a sharded store",
					   m->rank);
		mine[0] = 1;
		mine[1] = h.step;
	} else if (ret) {
		ret = et_error_set(ret,
				   "rank %d's store checkpoint cannot be "
				   "read: %s",
				   m->rank, etm_strerror(ret));
	}
	all = malloc(2 * sizeof(*all) * m->nranks);
	if (!all && !ret)
		ret = -ENOMEM;
	ret = etm_agree(m, ret);
	if (ret)
		goto out;
	MPI_Allgather(mine, 2, MPI_UINT64_T, all, 2, MPI_UINT64_T, m->comm);
	/* every rank reaches the same verdict, and says it the same way */
	if (gret == -ENOENT) {
		int any = 0;

		for (int r = 0; r < m->nranks; r++)
			any |= all[2 * r] != 0;
		ret =
		    any ? et_error_set(ETM_ETORN,
				       "no global checkpoint record, though "
				       "some ranks committed a checkpoint: "
				       "the first checkpoint never completed")
			: et_error_set(-ENOENT, "no checkpoint to resume from");
	} else if (gret == ET_EHDRSUM) {
		ret = et_error_set(gret,
				   "the global checkpoint record is damaged");
	} else if (gret) {
		ret = et_error_set(gret,
				   "the global checkpoint record cannot be "
				   "read: %s",
				   etm_strerror(gret));
	} else if (g.nranks != (uint32_t)m->nranks) {
		ret = et_error_set(ETM_ENRANKS,
				   "the checkpoint was written by %u ranks; "
				   "this run has %d (to go on at another rank "
				   "count, make a new store from it with "
				   "etm_reshard)",
				   g.nranks, m->nranks);
	} else {
		for (int r = 0; r < m->nranks && !ret; r++) {
			if (all[2 * r] && all[2 * r + 1] == g.step)
				continue;
			if (all[2 * r])
				ret = et_error_set(
				    ETM_ETORN,
				    "rank %d's store committed step %llu but "
				    "the last global checkpoint is step %llu: "
				    "a crash came between the ranks' commits, "
				    "and a store cannot roll back past its "
				    "last checkpoint",
				    r, (unsigned long long)all[2 * r + 1],
				    (unsigned long long)g.step);
			else
				ret = et_error_set(
				    ETM_ETORN,
				    "rank %d's store has no checkpoint but the "
				    "global record says step %llu",
				    r, (unsigned long long)g.step);
		}
	}
	if (!ret) {
		*len = blen - sizeof(h);
		*dense = malloc(*len ? *len : 1);
		if (!*dense)
			ret = -ENOMEM;
		else
			memcpy(*dense, (char *)blob + sizeof(h), *len);
		ret = etm_agree(m, ret);
		if (ret) {
			free(*dense);
			*dense = NULL;
		} else {
			*step = g.step;
		}
	}
out:
	free(all);
	free(blob);
	return ret;
}
