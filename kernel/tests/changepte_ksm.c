/*
 * Patch 3: change_pte for secondary MMUs.  Loads changepte_test.ko, which
 * registers an mmu_notifier on this process and counts
 * invalidate_range_start() calls, those flagged MMU_NOTIFIER_RANGE_CHANGE_PTE,
 * and change_pte() calls.  KSM merges 128 identical pages (write_protect_page
 * + replace_page), then writes break the sharing again (wp_page_copy).  Both
 * phases must deliver change_pte with the flag set; on an unpatched kernel
 * change_pte arrives but no range carries the flag, so a secondary MMU (KVM)
 * has already zapped its mapping and change_pte has nothing to update.
 */
#include "ktest.h"

#define NPAGES 128
#define CT "/sys/kernel/debug/changepte_test"

static void
put(const char *path, const char *val)
{
	int fd = open(path, O_WRONLY);

	if (fd < 0 || write(fd, val, strlen(val)) < 0)
		kt_error("%s: %s", path, strerror(errno));
	close(fd);
}

static long
get(const char *path)
{
	char buf[64] = "";
	int fd = open(path, O_RDONLY);

	if (fd < 0 || read(fd, buf, sizeof(buf) - 1) < 0)
		kt_error("%s: %s", path, strerror(errno));
	close(fd);
	return strtol(buf, NULL, 10);
}

static void
counts(long *s, long *f, long *c)
{
	char buf[128] = "";
	int fd = open(CT, O_RDONLY);

	if (fd < 0 || read(fd, buf, sizeof(buf) - 1) < 0 ||
	    sscanf(buf, "starts %ld flagged %ld change_pte %ld", s, f, c) != 3)
		kt_error("%s: %s", CT, strerror(errno));
	close(fd);
}

int
main(int argc, char **argv)
{
	const char *ko = argc > 1 ? argv[1] : "/modules/changepte_test.ko";
	long psz = sysconf(_SC_PAGESIZE);
	long ms, mf, mc, cs, cf, cc, sharing = 0;
	char *p;
	int fd;

	kt_name = "changepte_ksm";
	fd = open(ko, O_RDONLY);
	if (fd < 0)
		kt_error("%s: %s", ko, strerror(errno));
	if (syscall(__NR_finit_module, fd, "", 0) < 0 && errno != EEXIST)
		kt_error("finit_module %s: %s", ko, strerror(errno));
	close(fd);

	p = mmap(NULL, NPAGES * psz, PROT_READ | PROT_WRITE,
		 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		kt_error("mmap: %s", strerror(errno));
	madvise(p, NPAGES * psz, MADV_NOHUGEPAGE);
	memset(p, 0x42, NPAGES * psz);
	put(CT, "reg");
	if (madvise(p, NPAGES * psz, MADV_MERGEABLE) < 0)
		kt_error("MADV_MERGEABLE: %s", strerror(errno));
	put("/sys/kernel/mm/ksm/pages_to_scan", "1000");
	put("/sys/kernel/mm/ksm/sleep_millisecs", "10");
	put("/sys/kernel/mm/ksm/run", "1");
	for (int i = 0; i < 600 && sharing < NPAGES; i++) {
		usleep(100000);
		/* this process's merged pages: the global counters can be stale */
		sharing = get("/proc/self/ksm_merging_pages");
	}
	put("/sys/kernel/mm/ksm/run", "0");
	counts(&ms, &mf, &mc);
	kt_info("KSM merge: %ld pages merged; range_start %ld (flagged %ld), "
		"change_pte %ld",
		sharing, ms, mf, mc);
	if (sharing < NPAGES / 2)
		kt_error("KSM merged only %ld of %d pages", sharing, NPAGES);

	put(CT, "zero");
	for (int i = 0; i < NPAGES; i++)
		p[i * psz] = (char)i;
	counts(&cs, &cf, &cc);
	kt_info("COW break: range_start %ld (flagged %ld), change_pte %ld", cs,
		cf, cc);
	for (int i = 0; i < NPAGES; i++)
		if (p[i * psz] != (char)i || p[i * psz + 1] != 0x42)
			kt_exit("FAIL", "page %d has wrong content after COW",
				i);
	put(CT, "unreg");

	if (mf > 0 && mc > 0 && cf > 0 && cc > 0)
		kt_exit("PASS",
			"merge: %ld of %ld range_start flagged, %ld "
			"change_pte; "
			"COW: %ld of %ld flagged, %ld change_pte",
			mf, ms, mc, cf, cs, cc);
	kt_exit("FAIL",
		"merge: %ld of %ld range_start flagged, %ld change_pte; "
		"COW: %ld of %ld flagged, %ld change_pte",
		mf, ms, mc, cf, cs, cc);
}
