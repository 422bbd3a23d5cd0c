/*
 * mem_hbm_cuda.cu - the HBM tier in real accelerator memory (CUDA builds
 * only: make cuda).
 *
 * The HBM cache's row data is allocated as CUDA managed memory with the
 * device as its preferred location, so it lives in HBM, and with read-mostly
 * host access allowed: the store's set-associative lookup and the copies of
 * promotion and demotion run on the host (as FBGEMM's UVM cache does for
 * its host side), while device kernels of a trainer can use the rows in
 * place. Metadata (keys, policy words, pins) stays in host memory.
 *
 * What this does not do yet: run lookups and gathers as device kernels over
 * device-resident metadata; see README "CUDA".
 */
#include <cuda_runtime.h>

extern "C" {
#include "cache.h"
}

static void *cuda_alloc(size_t n)
{
	cudaMemLocation dev_loc = {};
	void *p = NULL;
	int dev = 0;

	if (cudaGetDevice(&dev) != cudaSuccess)
		return NULL;
	if (cudaMallocManaged(&p, n, cudaMemAttachGlobal) != cudaSuccess)
		return NULL;
	dev_loc.type = cudaMemLocationTypeDevice;
	dev_loc.id = dev;
	/* Advice is a hint: a device without it still works. */
	(void)cudaMemAdvise(p, n, cudaMemAdviseSetPreferredLocation, dev_loc);
	if (cudaMemset(p, 0, n) != cudaSuccess ||
	    cudaDeviceSynchronize() != cudaSuccess) {
		cudaFree(p);
		return NULL;
	}
	return p;
}

static void cuda_free(void *p, size_t n)
{
	(void)n;
	cudaFree(p);
}

static const struct mem_tier tier_cuda = {
	"hbm-cuda",
	cuda_alloc,
	cuda_free,
};

extern "C" const struct mem_tier *mem_tier_hbm_cuda(void)
{
	int n = 0;

	if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0)
		return NULL;
	return &tier_cuda;
}
