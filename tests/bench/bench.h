/* Clocks the benchmark programs share. */
#ifndef UFFDD_BENCH_H
#define UFFDD_BENCH_H

#include <sys/resource.h>
#include <time.h>

/* Monotonic wall time in seconds. */
static inline double
now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* User+system CPU seconds of `who` (RUSAGE_SELF, RUSAGE_CHILDREN). */
static inline double
cpu_s(int who)
{
	struct rusage ru;

	getrusage(who, &ru);
	return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
	       (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

#endif
