/*
 * exchange.c - the all-to-all steps of a sharded store: ids to their
 * owners, pooled bags (or rows) back, gradients to the owners.
 *
 * Routing. A table's local bags are cut into sub-bags, one for each
 * (bag, owner) pair that has ids: a table-wise table has one owner, so its
 * sub-bags are its non-empty bags; a row-wise bag spread over k ranks
 * gives k sub-bags (a keyed table's ids are keys, owned by their buckets'
 * ranks: etm_owner). Sub-bags for one owner keep bag order, ids keep their
 * order within a bag.
 *
 * Messages, for each (source, destination) pair, list the tables the
 * destination serves in increasing index:
 *
 *   ids       per table: u32 nsub (bit 31: every sub-bag has one id, no
 *             lengths follow), u32 nids, u32 length x nsub, u64 id x nids
 *   forward   per table: f32 dim-vectors, one per sub-bag (table-wise,
 *             pooled by the owner) or per id (row-wise, rows)
 *   backward  per table: f32 dim-vectors, one per sub-bag
 *
 * Only the ids message needs its sizes sent ahead (an MPI_Alltoall of one
 * int per pair); both sides of the other two know them from the routing.
 * An owner sees the sub-bags of all sources concatenated in rank order,
 * which is global sample order: its et_update_pooled sums each row's
 * gradients in the same order as one store given the whole batch would.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "etm_impl.h"

#define ALL_ONES 0x80000000u

static uint32_t *id_prefix(const etm *m, struct etm_vec *v)
{
	return (uint32_t *)v->p + m->nranks + 1;
}

/* Cuts table t's local bags into sub-bags per owner (see the top). */
static int route_table(etm *m, int t, struct etm_rt_table *rt,
		       const struct etm_bags *b)
{
	int nr = m->nranks;
	size_t n;
	uint32_t *ds, *di, *cs, *ci, *last, *sb, *sl, *loc;
	uint64_t *gids;
	int ret;

	if (!b->offsets)
		return et_error_set(-EINVAL, "bags[%d].offsets NULL", t);
	if (b->nbags >= UINT32_MAX)
		return et_error_set(-E2BIG, "bags[%d].nbags %zu >= 2^32", t,
				    b->nbags);
	if (b->offsets[0] != 0)
		return et_error_set(-EINVAL,
				    "bags[%d].offsets[0] %llu is not 0", t,
				    (unsigned long long)b->offsets[0]);
	for (size_t k = 0; k < b->nbags; k++)
		if (b->offsets[k + 1] < b->offsets[k])
			return et_error_set(
			    -EINVAL,
			    "bags[%d].offsets[%zu] %llu < offsets[%zu] %llu", t,
			    k + 1, (unsigned long long)b->offsets[k + 1], k,
			    (unsigned long long)b->offsets[k]);
	n = b->offsets[b->nbags];
	if (n >= UINT32_MAX)
		return et_error_set(-E2BIG, "bags[%d]: %zu ids >= 2^32", t, n);
	if (n && !b->ids)
		return et_error_set(-EINVAL, "bags[%d].ids NULL with %zu ids",
				    t, n);
	for (size_t i = 0; i < n && !m->tbl[t].keyed; i++) /* keys: any */
		if (b->ids[i] >= m->tbl[t].rows)
			return et_error_set(
			    ET_EROWRANGE,
			    "bags[%d].ids[%zu] %llu >= rows %llu of table %d",
			    t, i, (unsigned long long)b->ids[i],
			    (unsigned long long)m->tbl[t].rows, t);
	ret = etm_vec_reserve(&rt->offsets, (b->nbags + 1) * sizeof(uint64_t));
	if (!ret)
		ret = etm_vec_reserve(&rt->sub_bag, (n + 1) * sizeof(uint32_t));
	if (!ret)
		ret = etm_vec_reserve(&rt->sub_len, (n + 1) * sizeof(uint32_t));
	if (!ret)
		ret = etm_vec_reserve(&rt->gids, (n + 1) * sizeof(uint64_t));
	if (!ret)
		ret = etm_vec_reserve(&rt->id_loc, (n + 1) * sizeof(uint32_t));
	/* prefixes, then cursors and each owner's last bag + 1 */
	if (!ret)
		ret = etm_vec_reserve(&rt->dst, (2 * (nr + 1) + 3 * nr) *
						    sizeof(uint32_t));
	if (ret)
		return ret;
	rt->nbags = b->nbags;
	memcpy(rt->offsets.p, b->offsets, (b->nbags + 1) * sizeof(uint64_t));
	ds = etm_sub_prefix(&rt->dst);
	di = id_prefix(m, &rt->dst);
	cs = di + nr + 1;
	ci = cs + nr;
	last = ci + nr;
	memset(ds, 0, (2 * (nr + 1) + 3 * nr) * sizeof(uint32_t));
	for (size_t k = 0; k < b->nbags; k++)
		for (uint64_t i = b->offsets[k]; i < b->offsets[k + 1]; i++) {
			int d = etm_owner(m, t, b->ids[i]);

			ds[d + 1] += last[d] != k + 1;
			di[d + 1]++;
			last[d] = (uint32_t)k + 1;
		}
	for (int d = 0; d < nr; d++) {
		ds[d + 1] += ds[d];
		di[d + 1] += di[d];
		cs[d] = ds[d];
		ci[d] = di[d];
		last[d] = 0;
	}
	sb = rt->sub_bag.p;
	sl = rt->sub_len.p;
	gids = rt->gids.p;
	loc = rt->id_loc.p;
	for (size_t k = 0; k < b->nbags; k++)
		for (uint64_t i = b->offsets[k]; i < b->offsets[k + 1]; i++) {
			int d = etm_owner(m, t, b->ids[i]);

			if (last[d] != k + 1) {
				sb[cs[d]] = (uint32_t)k;
				sl[cs[d]] = 0;
				cs[d]++;
				last[d] = (uint32_t)k + 1;
			}
			sl[cs[d] - 1]++;
			gids[ci[d]] = b->ids[i];
			loc[i] = ci[d]++;
		}
	return 0;
}

static bool all_ones(const uint32_t *len, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		if (len[i] != 1)
			return false;
	return true;
}

static void put(unsigned char **p, const void *src, size_t n)
{
	if (n)
		memcpy(*p, src, n);
	*p += n;
}

/* Displacements from counts; fails if the total exceeds an int. */
static int displs(const int *count, int *displ, int n, size_t *total)
{
	size_t s = 0;

	*total = 0;
	for (int i = 0; i < n; i++) {
		displ[i] = (int)s;
		s += (size_t)count[i];
		if (s > INT32_MAX)
			return et_error_set(-E2BIG, "a step's messages exceed "
						    "2^31 bytes: smaller "
						    "batches");
	}
	*total = s;
	return 0;
}

int etm_alltoallv(etm *m)
{
	return MPI_Alltoallv(m->sbuf.p, m->scount, m->sdispl, MPI_BYTE,
			     m->rbuf.p, m->rcount, m->rdispl, MPI_BYTE,
			     m->comm) == MPI_SUCCESS
		   ? 0
		   : et_error_set(-EIO, "MPI_Alltoallv failed");
}

/* Size of table t's ids section for owner d. */
static size_t ids_bytes(const etm *m, struct etm_rt_table *rt, int d)
{
	uint32_t *ds = etm_sub_prefix(&rt->dst), *di = id_prefix(m, &rt->dst);
	uint32_t ns = ds[d + 1] - ds[d], ni = di[d + 1] - di[d];
	bool ones = all_ones((uint32_t *)rt->sub_len.p + ds[d], ns);

	return 8 + (ones ? 0 : 4 * (size_t)ns) + 8 * (size_t)ni;
}

/* Reads what one source sent for table t into the owner side. */
static int take_ids(const etm *m, struct etm_rt_table *rt, int s,
		    const unsigned char **p, const unsigned char *end)
{
	uint32_t hdr[2], ns, ni, *ss = etm_sub_prefix(&rt->src);
	uint32_t *si = id_prefix(m, &rt->src);
	uint64_t *off;
	bool ones;
	int ret;

	if (end - *p < 8)
		return -EPROTO;
	memcpy(hdr, *p, 8);
	*p += 8;
	ones = hdr[0] & ALL_ONES;
	ns = hdr[0] & ~ALL_ONES;
	ni = hdr[1];
	if ((size_t)(end - *p) < (ones ? 0 : 4 * (size_t)ns) + 8 * (size_t)ni ||
	    (ones && ns != ni))
		return -EPROTO;
	ret = etm_vec_reserve(&rt->oids, (si[s] + (size_t)ni) * 8);
	if (!ret)
		ret = etm_vec_reserve(&rt->ooff, (ss[s] + (size_t)ns + 1) * 8);
	if (ret)
		return ret;
	off = rt->ooff.p;
	for (uint32_t k = 0; k < ns; k++) {
		uint32_t len = 1;

		if (!ones) {
			memcpy(&len, *p, 4);
			*p += 4;
		}
		off[ss[s] + k + 1] = off[ss[s] + k] + len;
	}
	if (off[ss[s] + ns] != si[s] + (uint64_t)ni)
		return -EPROTO;
	memcpy((uint64_t *)rt->oids.p + si[s], *p, 8 * (size_t)ni);
	*p += 8 * (size_t)ni;
	ss[s + 1] = ss[s] + ns;
	si[s + 1] = si[s] + ni;
	return 0;
}

/* Displacements from m's counts, and send and receive buffers that hold
 * them; *rtotal (if not NULL) receives the bytes to receive. */
int etm_size_buffers(etm *m, size_t *rtotal)
{
	size_t stotal, rt = 0;
	int ret;

	ret = displs(m->scount, m->sdispl, m->nranks, &stotal);
	if (!ret)
		ret = displs(m->rcount, m->rdispl, m->nranks, &rt);
	if (!ret)
		ret = etm_vec_reserve(&m->sbuf, stotal + 1);
	if (!ret)
		ret = etm_vec_reserve(&m->rbuf, rt + 1);
	if (rtotal)
		*rtotal = rt;
	return ret;
}

/* Writes every owner's ids message into m->sbuf (see the top). */
static void pack_ids(etm *m, struct etm_route *r)
{
	struct etm_traffic *tr = &m->traffic;

	for (int d = 0; d < m->nranks; d++) {
		unsigned char *p = (unsigned char *)m->sbuf.p + m->sdispl[d];

		for (int t = 0; t < m->ntables; t++) {
			struct etm_rt_table *rt = &r->t[t];
			uint32_t *ds = etm_sub_prefix(&rt->dst);
			uint32_t *di = id_prefix(m, &rt->dst);
			uint32_t hdr[2] = {ds[d + 1] - ds[d],
					   di[d + 1] - di[d]};
			const uint32_t *len = (uint32_t *)rt->sub_len.p + ds[d];
			bool ones = all_ones(len, hdr[0]);

			if (!etm_serves(m, t, d))
				continue;
			if (ones)
				hdr[0] |= ALL_ONES;
			put(&p, hdr, 8);
			if (!ones)
				put(&p, len, 4 * (size_t)(ds[d + 1] - ds[d]));
			put(&p, (uint64_t *)rt->gids.p + di[d],
			    8 * (size_t)hdr[1]);
			if (d != m->rank) {
				tr->ids += 8 * (uint64_t)hdr[1];
				tr->min_ids += 8 * (uint64_t)hdr[1];
				tr->meta +=
				    8 +
				    (ones ? 0
					  : 4 * (uint64_t)(ds[d + 1] - ds[d]));
			}
		}
	}
}

/* Reads the ids messages received into the owner side of r; not agreed. */
static int unpack_ids(etm *m, struct etm_route *r)
{
	int nr = m->nranks, ret = 0;

	for (int t = 0; t < m->ntables; t++) {
		struct etm_rt_table *rt = &r->t[t];

		memset(rt->src.p, 0, 2 * (nr + 1) * sizeof(uint32_t));
		if (m->tbl[t].local >= 0)
			ret = etm_vec_reserve(&rt->ooff, 8);
		if (ret)
			break;
		if (m->tbl[t].local >= 0)
			((uint64_t *)rt->ooff.p)[0] = 0;
	}
	for (int s = 0; s < nr && !ret; s++) {
		const unsigned char *p =
		    (const unsigned char *)m->rbuf.p + m->rdispl[s];
		const unsigned char *end = p + m->rcount[s];

		for (int t = 0; t < m->ntables && !ret; t++)
			if (m->tbl[t].local >= 0)
				ret = take_ids(m, &r->t[t], s, &p, end);
		if (!ret && p != end)
			ret = -EPROTO;
		if (ret == -EPROTO)
			et_error_set(ret,
				     "rank %d's ids message to rank %d is "
				     "malformed",
				     s, m->rank);
	}
	return ret;
}

/* Routes bags, sends every owner its ids, and fills the owner side of r. */
static int exchange_ids(etm *m, struct etm_route *r,
			const struct etm_bags *bags)
{
	int nr = m->nranks, ret = 0;

	r->valid = false;
	for (int t = 0; t < m->ntables && !ret; t++)
		ret = route_table(m, t, &r->t[t], &bags[t]);
	for (int t = 0; t < m->ntables && !ret; t++)
		ret = etm_vec_reserve(&r->t[t].src,
				      2 * (nr + 1) * sizeof(uint32_t));
	ret = etm_agree(m, ret);
	if (ret)
		return ret;
	for (int d = 0; d < nr; d++) {
		size_t s = 0;

		for (int t = 0; t < m->ntables; t++)
			if (etm_serves(m, t, d))
				s += ids_bytes(m, &r->t[t], d);
		if (s > INT32_MAX)
			ret = et_error_set(-E2BIG,
					   "the ids for rank %d exceed 2^31 "
					   "bytes: smaller batches",
					   d);
		m->scount[d] = (int)s;
	}
	ret = etm_agree(m, ret);
	if (ret)
		return ret;
	if (MPI_Alltoall(m->scount, 1, MPI_INT, m->rcount, 1, MPI_INT,
			 m->comm) != MPI_SUCCESS)
		return et_error_set(-EIO, "MPI_Alltoall failed");
	m->traffic.meta += 4 * (uint64_t)(nr - 1);
	ret = etm_agree(m, etm_size_buffers(m, NULL));
	if (ret)
		return ret;
	pack_ids(m, r);
	ret = etm_alltoallv(m);
	if (ret)
		return ret;
	ret = etm_agree(m, unpack_ids(m, r));
	if (!ret)
		r->valid = true;
	return ret;
}

int etm_send_ids(etm *m, const struct etm_bags *bags, bool prefetch)
{
	struct etm_route *r;
	struct et_batch_ids *pf;
	size_t npf = 0;
	int ret;

	et_error_set(0, NULL);
	if (!m || !bags)
		return et_error_set(-EINVAL, "%s NULL", m ? "bags" : "m");
	if (!m->tbl)
		return et_error_set(-EINVAL,
				    "no tables: call etm_tables first");
	r = &m->route[m->next];
	ret = exchange_ids(m, r, bags);
	if (ret || !prefetch)
		return ret;
	pf = calloc(m->ntables, sizeof(*pf));
	if (!pf)
		ret = -ENOMEM;
	for (int t = 0; t < m->ntables && pf; t++) {
		struct etm_rt_table *rt = &r->t[t];

		if (m->tbl[t].local < 0)
			continue;
		pf[npf].table = m->tbl[t].local;
		pf[npf].ids = rt->oids.p;
		pf[npf].n = id_prefix(m, &rt->src)[m->nranks];
		npf++;
	}
	if (!ret && npf)
		ret = et_prefetch(m->store, pf, npf);
	free(pf);
	return etm_agree(m, ret);
}

/* Floats of table t's answer from owner d to this rank (forward). */
static size_t answer_floats(const etm *m, struct etm_rt_table *rt, int t, int d)
{
	const uint32_t *p = m->tbl[t].plan == ETM_ROW_WISE
				? id_prefix(m, &rt->dst)
				: etm_sub_prefix(&rt->dst);

	return (size_t)(p[d + 1] - p[d]) * m->tbl[t].dim;
}

/* Floats of table t's answer from this owner to source s. */
static size_t served_floats(const etm *m, struct etm_rt_table *rt, int t, int s)
{
	const uint32_t *p = m->tbl[t].plan == ETM_ROW_WISE
				? id_prefix(m, &rt->src)
				: etm_sub_prefix(&rt->src);

	return (size_t)(p[s + 1] - p[s]) * m->tbl[t].dim;
}

/* Owners gather what the route asks of them into m->out, table after
 * table; *at receives each local table's offset there (floats). */
static int owner_gather(etm *m, struct etm_route *r, et_pool mode, size_t *at)
{
	size_t total = 0;
	int ret;

	for (int t = 0; t < m->ntables; t++) {
		struct etm_rt_table *rt = &r->t[t];
		const uint32_t *p;

		at[t] = total;
		if (m->tbl[t].local < 0)
			continue;
		p = m->tbl[t].plan == ETM_ROW_WISE ? id_prefix(m, &rt->src)
						   : etm_sub_prefix(&rt->src);
		total += (size_t)p[m->nranks] * m->tbl[t].dim;
	}
	ret = etm_vec_reserve(&m->out, total * sizeof(float) + 1);
	for (int t = 0; t < m->ntables && !ret; t++) {
		struct etm_rt_table *rt = &r->t[t];
		float *o = (float *)m->out.p + at[t];
		const uint32_t *ss = etm_sub_prefix(&rt->src);

		if (m->tbl[t].local < 0)
			continue;
		if (m->tbl[t].plan == ETM_ROW_WISE)
			ret = et_gather(m->store, m->tbl[t].local, rt->oids.p,
					id_prefix(m, &rt->src)[m->nranks], o);
		else
			ret = et_gather_pooled(m->store, m->tbl[t].local,
					       rt->oids.p, rt->ooff.p,
					       ss[m->nranks], mode, o);
	}
	return ret;
}

/* Pools row-wise bag rows in id order, as et_gather_pooled does. */
static void pool_rows(etm *m, int t, struct etm_rt_table *rt,
		      float *const *base, et_pool mode, float *out)
{
	const uint64_t *off = rt->offsets.p, *gids = rt->gids.p;
	const uint32_t *loc = rt->id_loc.p, *di = id_prefix(m, &rt->dst);
	uint32_t dim = m->tbl[t].dim;

	for (size_t b = 0; b < rt->nbags; b++) {
		float *o = out + b * dim;
		uint64_t len = off[b + 1] - off[b];

		memset(o, 0, dim * sizeof(*o));
		for (uint64_t i = off[b]; i < off[b + 1]; i++) {
			int d = etm_owner(m, t, gids[loc[i]]);
			const float *row =
			    base[d] + (size_t)(loc[i] - di[d]) * dim;

			for (uint32_t c = 0; c < dim; c++)
				o[c] += row[c];
		}
		if (mode == ET_POOL_MEAN && len)
			for (uint32_t c = 0; c < dim; c++)
				o[c] /= (float)len;
	}
}

/* Makes m->cur the route of this forward: bags' own, exchanged now, or
 * the one etm_send_ids sent ahead. */
static int take_route(etm *m, const struct etm_bags *bags)
{
	int tmp, ret;

	if (bags) {
		ret = exchange_ids(m, &m->route[m->spare], bags);
		if (ret)
			return ret;
		tmp = m->cur;
		m->cur = m->spare;
		m->spare = tmp;
	} else {
		if (!m->route[m->next].valid) /* the same on every rank */
			return et_error_set(-EINVAL,
					    "bags NULL, but no etm_send_ids "
					    "since the last etm_forward");
		tmp = m->cur;
		m->cur = m->next;
		m->next = tmp;
		m->route[m->next].valid = false;
	}
	return 0;
}

/* Forward message sizes: the answers this owner sends each source, and
 * those each owner sends this rank. */
static void forward_counts(etm *m, struct etm_route *r)
{
	for (int s = 0; s < m->nranks; s++) {
		size_t f = 0;

		for (int t = 0; t < m->ntables; t++)
			if (m->tbl[t].local >= 0)
				f += served_floats(m, &r->t[t], t, s);
		m->scount[s] = (int)(f * sizeof(float));
		f = 0;
		for (int t = 0; t < m->ntables; t++)
			if (etm_serves(m, t, s))
				f += answer_floats(m, &r->t[t], t, s);
		m->rcount[s] = (int)(f * sizeof(float));
	}
}

/* Copies each source's part of m->out (local table t's at at[t]) into
 * m->sbuf, counting the traffic. */
static void pack_answers(etm *m, struct etm_route *r, const size_t *at)
{
	struct etm_traffic *tr = &m->traffic;

	for (int s = 0; s < m->nranks; s++) {
		unsigned char *p = (unsigned char *)m->sbuf.p + m->sdispl[s];

		for (int t = 0; t < m->ntables; t++) {
			struct etm_rt_table *rt = &r->t[t];
			const uint32_t *pre;
			size_t f;

			if (m->tbl[t].local < 0)
				continue;
			pre = m->tbl[t].plan == ETM_ROW_WISE
				  ? id_prefix(m, &rt->src)
				  : etm_sub_prefix(&rt->src);
			f = served_floats(m, rt, t, s);
			put(&p,
			    (float *)m->out.p + at[t] +
				(size_t)pre[s] * m->tbl[t].dim,
			    f * sizeof(float));
			if (s != m->rank) {
				const uint32_t *ss = etm_sub_prefix(&rt->src);

				tr->vectors += f * sizeof(float);
				tr->min_vectors +=
				    (uint64_t)(ss[s + 1] - ss[s]) *
				    m->tbl[t].dim * sizeof(float);
			}
		}
	}
}

/* Puts table-wise table t's pooled bags, from its owner's answer at base,
 * in their places in out; bags with no ids are zeros. */
static void place_pooled(etm *m, int t, struct etm_rt_table *rt,
			 const float *base, float *out)
{
	int d = m->tbl[t].owner;
	uint32_t dim = m->tbl[t].dim;
	const uint32_t *ds = etm_sub_prefix(&rt->dst);
	const uint32_t *sb = rt->sub_bag.p;

	memset(out, 0, rt->nbags * dim * sizeof(float));
	for (uint32_t k = ds[d]; k < ds[d + 1]; k++)
		memcpy(out + (size_t)sb[k] * dim,
		       base + (size_t)(k - ds[d]) * dim, dim * sizeof(float));
}

/* Makes each table's bags in out[t] from the answers in m->rbuf; cur and
 * base are scratch of nranks entries. */
static void unpack_answers(etm *m, struct etm_route *r, et_pool mode,
			   float *const *out, size_t *cur, float **base)
{
	int nr = m->nranks;

	for (int d = 0; d < nr; d++)
		cur[d] = (size_t)m->rdispl[d];
	for (int t = 0; t < m->ntables; t++) {
		struct etm_rt_table *rt = &r->t[t];

		for (int d = 0; d < nr; d++) {
			base[d] = NULL;
			if (!etm_serves(m, t, d))
				continue;
			base[d] = (float *)((char *)m->rbuf.p + cur[d]);
			cur[d] += answer_floats(m, rt, t, d) * sizeof(float);
		}
		if (m->tbl[t].plan == ETM_ROW_WISE)
			pool_rows(m, t, rt, base, mode, out[t]);
		else
			place_pooled(m, t, rt, base[m->tbl[t].owner], out[t]);
	}
}

int etm_forward(etm *m, const struct etm_bags *bags, et_pool mode,
		float *const *out)
{
	int nr = m ? m->nranks : 0, ret = 0;
	struct etm_route *r;
	size_t *at, *cur;
	float **base;

	et_error_set(0, NULL);
	if (!m || !out)
		return et_error_set(-EINVAL, "%s NULL", m ? "out" : "m");
	if (!m->tbl)
		return et_error_set(-EINVAL,
				    "no tables: call etm_tables first");
	if (mode != ET_POOL_SUM && mode != ET_POOL_MEAN)
		return et_error_set(-EINVAL,
				    "mode %d is neither ET_POOL_SUM nor "
				    "ET_POOL_MEAN",
				    (int)mode);
	ret = take_route(m, bags);
	if (ret)
		return ret;
	r = &m->route[m->cur];
	m->mode = mode;
	at = calloc(m->ntables, sizeof(*at));
	cur = calloc(nr, sizeof(*cur));
	base = calloc((size_t)nr, sizeof(*base));
	if (!at || !cur || !base)
		ret = -ENOMEM;
	if (!ret)
		ret = owner_gather(m, r, mode, at);
	ret = etm_agree(m, ret);
	if (ret)
		goto out;
	forward_counts(m, r);
	ret = etm_agree(m, etm_size_buffers(m, NULL));
	if (ret)
		goto out;
	pack_answers(m, r, at);
	ret = etm_alltoallv(m);
	if (ret)
		goto out;
	unpack_answers(m, r, mode, out, cur, base);
out:
	free(at);
	free(cur);
	free(base);
	return ret;
}

int etm_owned_ids(const etm *m, int t, const uint64_t **ids, size_t *n)
{
	const struct etm_route *r;

	et_error_set(0, NULL);
	if (!m || !ids || !n)
		return et_error_set(-EINVAL, "%s NULL",
				    !m	   ? "m"
				    : !ids ? "ids"
					   : "n");
	if (t < 0 || t >= m->ntables)
		return et_error_set(-EINVAL, "t %d out of range 0..%d", t,
				    m->ntables - 1);
	r = &m->route[m->cur];
	if (!r->valid || m->tbl[t].local < 0) {
		*ids = NULL;
		*n = 0;
		return 0;
	}
	*ids = r->t[t].oids.p;
	*n = ((const uint32_t *)r->t[t].src.p)[2 * m->nranks + 1];
	return 0;
}
