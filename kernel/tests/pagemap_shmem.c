/*
 * Patch 2: /proc/PID/pagemap reports swapped-out shmem pages.  A memfd has
 * its first half written and its second half never touched; MADV_PAGEOUT
 * pushes the written half to swap (zram, set up by the VM's init).  The
 * written pages must read PM_SWAP with a swap type and offset, untouched
 * pages 0.  mincore() tells that the pages really left memory, so an
 * unpatched kernel (all entries 0) fails rather than errors.
 */
#include "ktest.h"

#define NPAGES 256

int
main(void)
{
	long psz = sysconf(_SC_PAGESIZE);
	size_t len = NPAGES * psz;
	unsigned char vec[NPAGES];
	uint64_t pm[NPAGES];
	int mfd, pfd, resident = 0, swapped = 0, zero_untouched = 0;
	int swap_ok = 1, offsets_distinct = 1;
	char *p;

	kt_name = "pagemap_shmem";
	mfd = memfd_create("pm", 0);
	if (mfd < 0 || ftruncate(mfd, len) < 0)
		kt_error("memfd: %s", strerror(errno));
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, mfd, 0);
	if (p == MAP_FAILED)
		kt_error("mmap: %s", strerror(errno));
	for (int i = 0; i < NPAGES / 2; i++)
		memset(p + i * psz, i + 1, psz);
	for (int try = 0; try < 5; try++) {
		if (madvise(p, len, MADV_PAGEOUT) < 0)
			kt_error("MADV_PAGEOUT: %s", strerror(errno));
		mincore(p, len, vec);
		resident = 0;
		for (int i = 0; i < NPAGES / 2; i++)
			resident += vec[i] & 1;
		if (!resident)
			break;
		usleep(100000);
	}
	if (resident)
		kt_error("%d of %d written pages still resident after "
			 "MADV_PAGEOUT "
			 "(is swap on?)",
			 resident, NPAGES / 2);

	pfd = open("/proc/self/pagemap", O_RDONLY);
	if (pfd < 0 || pread(pfd, pm, sizeof(pm), (unsigned long)p / psz * 8) !=
			       sizeof(pm))
		kt_error("pagemap: %s", strerror(errno));
	for (int i = 0; i < NPAGES / 2; i++) {
		if (pm[i] & PM_SWAP) {
			swapped++;
			if ((pm[i] & PM_PFN_MASK) == 0)
				swap_ok = 0; /* no swap offset */
			if (i &&
			    (pm[i] & PM_PFN_MASK) == (pm[i - 1] & PM_PFN_MASK))
				offsets_distinct = 0;
		}
	}
	/*
	 * With CONFIG_MEM_SOFT_DIRTY a fresh VMA (VM_SOFTDIRTY) reports
	 * PM_SOFT_DIRTY even for holes: ignore that bit.
	 */
	for (int i = 0; i < NPAGES; i++)
		pm[i] &= ~PM_SOFT_DIRTY;
	for (int i = NPAGES / 2; i < NPAGES; i++)
		zero_untouched += pm[i] == 0;
	kt_info("written+swapped: %d of %d report PM_SWAP (entry[0]=%#llx, "
		"type %llu offset %#llx); untouched: %d of %d report 0",
		swapped, NPAGES / 2, (unsigned long long)pm[0],
		(unsigned long long)(pm[0] & 0x1f),
		(unsigned long long)((pm[0] & PM_PFN_MASK) >> 5),
		zero_untouched, NPAGES / 2);

	/*
	 * A second mapping of the same memfd that was never faulted has no
	 * page table at all: pagemap walks it as a hole (pagemap_pte_hole),
	 * which must report the swapped pages too.
	 */
	{
		char *q = mmap(NULL, len, PROT_READ, MAP_SHARED, mfd, 0);
		uint64_t qm[NPAGES];
		int qswapped = 0;

		if (q == MAP_FAILED ||
		    pread(pfd, qm, sizeof(qm), (unsigned long)q / psz * 8) !=
			    sizeof(qm))
			kt_error("second mapping: %s", strerror(errno));
		for (int i = 0; i < NPAGES / 2; i++)
			qswapped += !!(qm[i] & PM_SWAP);
		kt_info("never-faulted second mapping: %d of %d report PM_SWAP",
			qswapped, NPAGES / 2);
		if (qswapped != swapped)
			swap_ok = 0;
		munmap(q, len);
	}

	/* the data must come back from swap intact */
	for (int i = 0; i < NPAGES / 2; i++)
		if (p[i * psz] != (char)(i + 1) ||
		    p[i * psz + psz - 1] != (char)(i + 1))
			kt_exit("FAIL", "page %d corrupted after swap-in", i);

	if (swapped == NPAGES / 2 && swap_ok && offsets_distinct &&
	    zero_untouched == NPAGES / 2)
		kt_exit("PASS",
			"%d swapped shmem pages report PM_SWAP with swap "
			"offsets, %d untouched pages report 0",
			swapped, zero_untouched);
	kt_exit("FAIL",
		"%d of %d swapped shmem pages report PM_SWAP, "
		"%d of %d untouched report 0",
		swapped, NPAGES / 2, zero_untouched, NPAGES / 2);
}
