/*
 * mem_host.c - host memory, the only user of jemalloc; and, for the
 * caches' large arrays and the files' wide I/O staging, fresh mappings
 * asked for huge pages (mem_alloc_huge, mem_alloc_io).
 *
 * Allocations are zeroed, optionally aligned, and counted: mem_in_use() is
 * what the library holds right now, mem_peak() the most it ever held. The
 * store's bounded-memory promise is checked against these counters. With
 * ET_NO_JEMALLOC (sanitizer builds, where jemalloc would hide errors from
 * ASan) the same interface sits on libc. Thread-safe: the counters are
 * atomics.
 */
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#ifndef ET_NO_JEMALLOC
#include <jemalloc/jemalloc.h>
#endif

#include "mem_host.h"

static _Atomic size_t in_use;
static _Atomic size_t peak;

static void count(size_t n)
{
	size_t now = atomic_fetch_add(&in_use, n) + n;
	size_t p = atomic_load(&peak);

	while (now > p && !atomic_compare_exchange_weak(&peak, &p, now))
		;
}

/* The allocation fault seam (tests): the fault_at-th allocation from when
 * it was set fails, once. */
static _Atomic uint64_t fault_at;
static _Atomic int fault_fired;

void mem_fault_set(uint64_t nth)
{
	atomic_store(&fault_fired, 0);
	atomic_store(&fault_at, nth);
}

void mem_fault_clear(void)
{
	atomic_store(&fault_at, 0);
}

bool mem_fault_fired(void)
{
	return atomic_load(&fault_fired);
}

static bool fault_now(void)
{
	uint64_t a = atomic_load(&fault_at);

	while (a && !atomic_compare_exchange_weak(&fault_at, &a, a - 1))
		;
	if (a != 1)
		return false;
	atomic_store(&fault_fired, 1);
	return true;
}

void *mem_alloc(size_t n, size_t align)
{
	void *p;

	if (fault_now())
		return NULL;
	if (n == 0)
		n = 1;
#ifndef ET_NO_JEMALLOC
	p = mallocx(n, MALLOCX_ZERO | (align > 16 ? MALLOCX_ALIGN(align) : 0));
#else
	if (align > 16) {
		if (posix_memalign(&p, align, n))
			p = NULL;
		else
			memset(p, 0, n);
	} else {
		p = calloc(1, n);
	}
#endif
	if (p)
		count(n);
	return p;
}

void mem_free(void *p, size_t n, size_t align)
{
	if (!p)
		return;
	if (n == 0)
		n = 1;
	atomic_fetch_sub(&in_use, n);
#ifndef ET_NO_JEMALLOC
	sdallocx(p, n, align > 16 ? MALLOCX_ALIGN(align) : 0);
#else
	(void)align;
	free(p);
#endif
}

size_t mem_in_use(void)
{
	return atomic_load(&in_use);
}

size_t mem_peak(void)
{
	return atomic_load(&peak);
}

#define HUGE_PAGE ((size_t)2 << 20)

/* A fresh zeroed mapping of len bytes (a multiple of 4 KiB) at a 2 MiB
 * boundary, asked for huge pages, or NULL: mapped with a huge page to
 * spare, trimmed in front to the boundary and behind to len. */
static char *map_huge(size_t len)
{
	char *p, *a;

	p = mmap(NULL, len + HUGE_PAGE, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return NULL;
	a = (char *)(((uintptr_t)p + HUGE_PAGE - 1) &
		     ~(uintptr_t)(HUGE_PAGE - 1));
	if (a > p)
		munmap(p, (size_t)(a - p));
	if (a + len < p + len + HUGE_PAGE)
		munmap(a + len, (size_t)(p + len + HUGE_PAGE - (a + len)));
	(void)madvise(a, len, MADV_HUGEPAGE); /* a hint */
	return a;
}

void *mem_alloc_huge(size_t n)
{
	char *a;

	if (fault_now())
		return NULL;
	if (n == 0)
		n = 1;
	a = map_huge((n + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE);
	if (a)
		count(n);
	return a;
}

void mem_free_huge(void *p, size_t n)
{
	if (!p)
		return;
	if (n == 0)
		n = 1;
	atomic_fetch_sub(&in_use, n);
	munmap(p, (n + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE);
}

/* AddressSanitizer builds keep the staging on the heap, where ASan
 * watches its edges. */
#if defined(__SANITIZE_ADDRESS__)
#define IO_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define IO_ASAN 1
#endif
#endif

bool mem_io_mapped(size_t n, size_t align)
{
#ifndef IO_ASAN
	return n >= MEM_IO_HUGE && align <= HUGE_PAGE;
#else
	(void)n;
	(void)align;
	return false;
#endif
}

#define SMALL_PAGE ((size_t)4096)

void *mem_alloc_io(size_t n, size_t align)
{
	size_t len = (n + SMALL_PAGE - 1) / SMALL_PAGE * SMALL_PAGE;
	char *a;

	if (!mem_io_mapped(n, align))
		return mem_alloc(n, align);
	if (fault_now())
		return NULL;
	/* whole small pages behind its last whole huge one */
	a = map_huge(len);
	if (a)
		count(len);
	return a;
}

void mem_free_io(void *p, size_t n, size_t align)
{
	size_t len = (n + SMALL_PAGE - 1) / SMALL_PAGE * SMALL_PAGE;

	if (!mem_io_mapped(n, align)) {
		mem_free(p, n, align);
		return;
	}
	if (!p)
		return;
	atomic_fetch_sub(&in_use, len);
	munmap(p, len);
}
