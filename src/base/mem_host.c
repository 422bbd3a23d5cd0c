/*
 * mem_host.c - host memory, the only user of jemalloc; and, for the
 * caches' large arrays, fresh mappings asked for huge pages
 * (mem_alloc_huge).
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

void *mem_alloc_huge(size_t n)
{
	size_t len;
	char *p, *a;

	if (fault_now())
		return NULL;
	if (n == 0)
		n = 1;
	len = (n + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
	/* mapped with a huge page to spare, trimmed to a 2 MiB boundary */
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
