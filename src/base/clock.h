/*
 * clock.h - monotonic time in ns, for the time split of et_stats and the
 * pipeline's waits. A leaf: includes nothing of the library.
 */
#ifndef ET_CLOCK_H
#define ET_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

#endif
