/*
 * mem_host.h - host memory: the only user of jemalloc.
 *
 * Every allocation of the library goes through here so that the bytes in use
 * are counted (et_stats.mem_bytes) and the bounded-memory promise can be checked.
 * Sizes are passed back at free so that the count is exact and jemalloc can
 * use sized deallocation. Built with ET_NO_JEMALLOC (sanitizer builds), it
 * falls back to libc. Thread-safe.
 */
#ifndef ET_MEM_HOST_H
#define ET_MEM_HOST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Zeroed memory of n bytes aligned to align (a power of two, or 0 for the
 * default), or NULL. */
void *mem_alloc(size_t n, size_t align);
/* Frees p, which was allocated with (n, align). NULL is harmless. */
void mem_free(void *p, size_t n, size_t align);

/* Zeroed memory of n bytes for a large array read at random (a cache
 * tier): mapped afresh, 2 MiB aligned, and asked to be backed by huge
 * pages before anything touches it, so that where transparent huge pages
 * are on (madvise or always) a random row costs no page walk. Counted,
 * and failed by the fault seam, as mem_alloc. */
void *mem_alloc_huge(size_t n);
void mem_free_huge(void *p, size_t n);

/* Fault seam for tests: the nth mem_alloc from now (any thread) returns
 * NULL, once; mem_fault_fired() says whether it has. */
void mem_fault_set(uint64_t nth);
void mem_fault_clear(void);
bool mem_fault_fired(void);

size_t mem_in_use(void);
size_t mem_peak(void);

#endif
