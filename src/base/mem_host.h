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

/* Zeroed memory of n bytes that the device reads into or writes from (a
 * file's staging): from 2 MiB (MEM_IO_HUGE) up, a fresh mapping of n
 * rounded up to whole 4 KiB pages, 2 MiB aligned and asked for huge pages
 * (its whole 2 MiB pieces get them where transparent huge pages are on;
 * a tail past the last whole one has small pages), so that the direct
 * I/O of a wide stage spans few pages; smaller, mem_alloc(n, align).
 * align: at most 2 MiB. Counted, and failed by the fault seam, as
 * mem_alloc. AddressSanitizer builds always take mem_alloc, so that ASan
 * watches the buffers' edges. */
#define MEM_IO_HUGE ((size_t)2 << 20)
void *mem_alloc_io(size_t n, size_t align);
/* Frees p, which was allocated with mem_alloc_io(n, align). */
void mem_free_io(void *p, size_t n, size_t align);
/* Whether mem_alloc_io(n, align) maps its bytes itself (else they come
 * from mem_alloc). */
bool mem_io_mapped(size_t n, size_t align);

/* Fault seam for tests: the nth mem_alloc from now (any thread) returns
 * NULL, once; mem_fault_fired() says whether it has. */
void mem_fault_set(uint64_t nth);
void mem_fault_clear(void);
bool mem_fault_fired(void);

size_t mem_in_use(void);
size_t mem_peak(void);

#endif
