/* Shared helpers for the kernel patch tests run inside the test VM. */
#ifndef KTEST_H
#define KTEST_H

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* uAPI of the uffdd 6.1 series; absent from every system header. */
#ifndef UFFD_FEATURE_ACCESS_HINTS
#define UFFD_FEATURE_ACCESS_HINTS ((__u64)1 << 30)
#endif
#ifndef UFFDIO_COPY_MODE_ACCESS_LIKELY
#define UFFDIO_COPY_MODE_ACCESS_LIKELY ((__u64)1 << 2)
#endif
#ifndef UFFDIO_ZEROPAGE_MODE_ACCESS_LIKELY
#define UFFDIO_ZEROPAGE_MODE_ACCESS_LIKELY ((__u64)1 << 2)
#endif
#ifndef UFFDIO_CONTINUE_MODE_ACCESS_LIKELY
#define UFFDIO_CONTINUE_MODE_ACCESS_LIKELY ((__u64)1 << 2)
#endif
#ifndef MADV_PAGEOUT
#define MADV_PAGEOUT 21
#endif

#define PM_PFN_MASK ((1ULL << 55) - 1)
#define PM_SOFT_DIRTY (1ULL << 55)
#define PM_MMAP_EXCLUSIVE (1ULL << 56)
#define PM_FILE (1ULL << 61)
#define PM_SWAP (1ULL << 62)
#define PM_PRESENT (1ULL << 63)

static const char *kt_name = "?";

/*
 * Outcomes: PASS (new behaviour), FAIL (old behaviour or wrong result),
 * ERROR (the test could not set itself up; never counts as old behaviour).
 */
static void __attribute__((noreturn, format(printf, 2, 3)))
kt_exit(const char *verdict, const char *fmt, ...)
{
	va_list ap;

	printf("%s %s: ", verdict, kt_name);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	exit(strcmp(verdict, "PASS") == 0   ? 0
	     : strcmp(verdict, "FAIL") == 0 ? 1
					    : 2);
}

#define kt_error(...) kt_exit("ERROR", __VA_ARGS__)

static void __attribute__((format(printf, 1, 2))) kt_info(const char *fmt, ...)
{
	va_list ap;

	printf("INFO %s: ", kt_name);
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
}

static inline double
kt_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static inline long
kt_minflt(void)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	return ru.ru_minflt;
}

static inline int
kt_uffd(__u64 features, __u64 *got)
{
	struct uffdio_api api = {.api = UFFD_API, .features = features};
	int fd = syscall(__NR_userfaultfd, O_CLOEXEC | O_NONBLOCK);

	if (fd < 0)
		kt_error("userfaultfd: %s", strerror(errno));
	if (ioctl(fd, UFFDIO_API, &api) < 0) {
		close(fd);
		return -1;
	}
	if (got)
		*got = api.features;
	return fd;
}

static inline void
kt_register(int fd, void *p, size_t len, __u64 mode)
{
	struct uffdio_register r = {
		.range = {.start = (unsigned long)p, .len = len},
		.mode = mode,
	};

	if (ioctl(fd, UFFDIO_REGISTER, &r) < 0)
		kt_error("UFFDIO_REGISTER mode %llx: %s",
			 (unsigned long long)mode, strerror(errno));
}

/* Sum of one smaps field ("Referenced:", "Swap:") for the VMA at addr, kB. */
static inline long
kt_smaps_field(void *addr, const char *field)
{
	FILE *f = fopen("/proc/self/smaps", "r");
	char line[256];
	int in = 0;
	long val = -1;

	if (!f)
		kt_error("smaps: %s", strerror(errno));
	while (fgets(line, sizeof(line), f)) {
		unsigned long lo, hi;

		if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2 &&
		    strchr(line, '-') < strchr(line, ' ')) {
			in = (unsigned long)addr >= lo &&
			     (unsigned long)addr < hi;
			continue;
		}
		if (in && strncmp(line, field, strlen(field)) == 0) {
			val = strtol(line + strlen(field), NULL, 10);
			break;
		}
	}
	fclose(f);
	return val;
}

#endif
