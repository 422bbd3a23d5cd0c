/*
 * allreduce.c - a sum over ranks whose bits do not depend on timing.
 *
 * MPI_Allreduce may add the ranks' contributions in any order (and Open
 * MPI picks its algorithm by message size and rank count), so floats can
 * come out different from run to run. Here the buffer is cut into one
 * chunk per rank; an MPI_Alltoallv hands chunk c of every rank to rank c
 * (a reduce-scatter), which sums the N copies along a balanced binary
 * tree in rank order:
 *
 *   sum(lo, hi) = sum(lo, mid) + sum(mid, hi),  mid = lo + (hi - lo) / 2
 *
 * and an MPI_Allgatherv hands every rank every summed chunk. Each rank
 * sends 2 (N - 1) / N of the buffer, what a ring all-reduce sends.
 *
 * With N a power of two, this tree is the top of the same tree over any
 * finer split (slices of a batch, say, split 2N, 4N... ways): a caller
 * that sums its own slices along the same rule gets the same bits as one
 * rank summing every slice.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "etm_impl.h"

/* part[i] = part i (n floats each); leaves the sum of [lo, hi) in part lo. */
static void tree_sum(float *part, size_t n, int lo, int hi)
{
	int mid = lo + (hi - lo) / 2;
	float *a = part + (size_t)lo * n, *b = part + (size_t)mid * n;

	if (hi - lo < 2)
		return;
	tree_sum(part, n, lo, mid);
	tree_sum(part, n, mid, hi);
	for (size_t i = 0; i < n; i++)
		a[i] += b[i];
}

static size_t chunk_start(size_t n, int c, int nranks)
{
	return n * (size_t)c / (size_t)nranks;
}

int etm_allreduce(etm *m, float *buf, size_t n)
{
	int nr, me, ret = 0;
	size_t mine;
	float *part;

	et_error_set(0, NULL);
	if (!m || (!buf && n))
		return et_error_set(-EINVAL, "%s NULL",
				    m ? "buf (with n > 0)" : "m");
	nr = m->nranks;
	me = m->rank;
	if (n > INT32_MAX / 2)
		return et_error_set(-E2BIG, "n %zu > %d", n, INT32_MAX / 2);
	if (nr == 1 || !n)
		return 0;
	mine = chunk_start(n, me + 1, nr) - chunk_start(n, me, nr);
	ret = etm_vec_reserve(&m->rbuf, (mine * nr + 1) * sizeof(float));
	ret = etm_agree(m, ret);
	if (ret)
		return ret;
	part = m->rbuf.p;
	for (int c = 0; c < nr; c++) {
		m->scount[c] =
		    (int)(chunk_start(n, c + 1, nr) - chunk_start(n, c, nr));
		m->sdispl[c] = (int)chunk_start(n, c, nr);
		m->rcount[c] = (int)mine;
		m->rdispl[c] = (int)(mine * (size_t)c);
	}
	if (MPI_Alltoallv(buf, m->scount, m->sdispl, MPI_FLOAT, part, m->rcount,
			  m->rdispl, MPI_FLOAT, m->comm) != MPI_SUCCESS)
		return et_error_set(-EIO, "MPI_Alltoallv failed");
	tree_sum(part, mine, 0, nr);
	memcpy(buf + chunk_start(n, me, nr), part, mine * sizeof(float));
	if (MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, m->scount,
			   m->sdispl, MPI_FLOAT, m->comm) != MPI_SUCCESS)
		return et_error_set(-EIO, "MPI_Allgatherv failed");
	m->traffic.reduce +=
	    (uint64_t)(n - mine + (size_t)(nr - 1) * mine) * sizeof(float);
	m->traffic.min_reduce +=
	    (uint64_t)(2.0 * (nr - 1) / nr * (double)n * sizeof(float));
	return 0;
}
