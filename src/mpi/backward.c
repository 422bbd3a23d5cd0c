/*
 * backward.c - etm_backward: the gradients of every sub-bag go to their
 * owners (all-to-all), which apply them with et_update_pooled, each row's
 * in global sample order. The routing and the message layout are
 * exchange.c's (see its top).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "etm_impl.h"

/* Backward message sizes: the gradients this rank sends each owner, and
 * those each source sends this owner. */
static void backward_counts(etm *m, struct etm_route *r)
{
	for (int d = 0; d < m->nranks; d++) {
		size_t f = 0;

		for (int t = 0; t < m->ntables; t++) {
			const uint32_t *ds = etm_sub_prefix(&r->t[t].dst);

			if (etm_serves(m, t, d))
				f +=
				    (size_t)(ds[d + 1] - ds[d]) * m->tbl[t].dim;
		}
		m->scount[d] = (int)(f * sizeof(float));
		f = 0;
		for (int t = 0; t < m->ntables; t++) {
			const uint32_t *ss = etm_sub_prefix(&r->t[t].src);

			if (m->tbl[t].local >= 0)
				f +=
				    (size_t)(ss[d + 1] - ss[d]) * m->tbl[t].dim;
		}
		m->rcount[d] = (int)(f * sizeof(float));
	}
}

/* Writes each owner's sub-bag gradients into m->sbuf, counting the
 * traffic. */
static void pack_grads(etm *m, struct etm_route *r, const float *const *grads)
{
	struct etm_traffic *tr = &m->traffic;

	for (int d = 0; d < m->nranks; d++) {
		float *p = (float *)((char *)m->sbuf.p + m->sdispl[d]);

		for (int t = 0; t < m->ntables; t++) {
			struct etm_rt_table *rt = &r->t[t];
			const uint32_t *ds = etm_sub_prefix(&rt->dst);
			const uint32_t *sb = rt->sub_bag.p;
			const uint64_t *off = rt->offsets.p;
			uint32_t dim = m->tbl[t].dim;
			bool mean = m->mode == ET_POOL_MEAN &&
				    m->tbl[t].plan == ETM_ROW_WISE;

			if (!etm_serves(m, t, d))
				continue;
			for (uint32_t k = ds[d]; k < ds[d + 1]; k++) {
				const float *g = grads[t] + (size_t)sb[k] * dim;
				/* as et_update_pooled divides a mean's
				 * gradient by the whole bag's size */
				float div =
				    (float)(off[sb[k] + 1] - off[sb[k]]);

				if (mean)
					for (uint32_t c = 0; c < dim; c++)
						p[c] = g[c] / div;
				else
					memcpy(p, g, dim * sizeof(float));
				p += dim;
			}
			if (d != m->rank) {
				uint64_t b = (uint64_t)(ds[d + 1] - ds[d]) *
					     dim * sizeof(float);

				tr->grads += b;
				tr->min_grads += b;
			}
		}
	}
}

/* Gathers each local table's gradients from m->rbuf, in source order,
 * contiguous in m->grad, and applies them; cur is scratch of nranks
 * entries. Not agreed. */
static int apply_grads(etm *m, struct etm_route *r,
		       const struct et_update_params *up, size_t *cur)
{
	int nr = m->nranks, ret = 0;
	size_t total = 0;

	for (int s = 0; s < nr; s++)
		cur[s] = (size_t)m->rdispl[s];
	for (int t = 0; t < m->ntables && !ret; t++) {
		struct etm_rt_table *rt = &r->t[t];
		const uint32_t *ss = etm_sub_prefix(&rt->src);
		uint32_t dim = m->tbl[t].dim;
		float *g = (float *)((char *)m->grad.p + total);
		et_pool mode =
		    m->tbl[t].plan == ETM_ROW_WISE ? ET_POOL_SUM : m->mode;

		if (m->tbl[t].local < 0)
			continue;
		for (int s = 0; s < nr; s++) {
			size_t b =
			    (size_t)(ss[s + 1] - ss[s]) * dim * sizeof(float);

			memcpy((char *)g + (size_t)ss[s] * dim * sizeof(float),
			       (char *)m->rbuf.p + cur[s], b);
			cur[s] += b;
		}
		total += (size_t)ss[nr] * dim * sizeof(float);
		ret = et_update_pooled(m->store, m->tbl[t].local, rt->oids.p,
				       rt->ooff.p, ss[nr], mode, g, up);
	}
	return ret;
}

int etm_backward(etm *m, const float *const *grads,
		 const struct et_update_params *up)
{
	int nr = m ? m->nranks : 0, ret = 0;
	struct etm_route *r;
	size_t *cur = NULL, rtotal;

	et_error_set(0, NULL);
	if (!m || !grads || !up)
		return et_error_set(-EINVAL, "%s NULL",
				    !m	     ? "m"
				    : !grads ? "grads"
					     : "up");
	if (!m->tbl || !m->route[m->cur].valid)
		return et_error_set(-EINVAL,
				    "no etm_forward to go back through");
	r = &m->route[m->cur];
	backward_counts(m, r);
	ret = etm_size_buffers(m, &rtotal);
	if (!ret)
		ret = etm_vec_reserve(&m->grad, rtotal + 1);
	cur = calloc(nr, sizeof(*cur));
	if (!cur)
		ret = -ENOMEM;
	ret = etm_agree(m, ret);
	if (ret)
		goto out;
	pack_grads(m, r, grads);
	ret = etm_alltoallv(m);
	if (ret)
		goto out;
	ret = etm_agree(m, apply_grads(m, r, up, cur));
	m->traffic.steps++;
out:
	free(cur);
	return ret;
}
