/*
 * mem_hbm_sim.c - simulated accelerator memory.
 *
 * Host memory standing in for HBM, allocated apart from the DDR tier and
 * counted on its own (the cache counts the bytes copied in and out), so a
 * run without a GPU shows the same tier behaviour and traffic a real one
 * would. Builds with CUDA replace it with mem_hbm_cuda.cu.
 */
#include "cache.h"
#include "mem_host.h"

static void *sim_alloc(size_t n)
{
	return mem_alloc(n, 64);
}

static void sim_free(void *p, size_t n)
{
	mem_free(p, n, 64);
}

const struct mem_tier mem_tier_hbm_sim = {
    .name = "hbm-sim",
    .alloc = sim_alloc,
    .free = sim_free,
};

#ifndef ET_HAVE_CUDA
const struct mem_tier *mem_tier_hbm_cuda(void)
{
	return NULL;
}
#endif
