/*
 * Patch 1: UFFD_FEATURE_ACCESS_HINTS.  With the feature negotiated,
 * UFFDIO_COPY and UFFDIO_CONTINUE without the ACCESS_LIKELY mode bit map
 * old PTEs and with it young ones.  The access bit is read back through
 * /proc/self/smaps "Referenced:", which counts a page whose PTE is young
 * (the pages are fresh, so no PG_referenced or idle-tracking flag
 * interferes) without touching the pages and without a debug module.
 *
 * On an unpatched kernel the feature is refused (EINVAL) and UFFDIO_COPY
 * maps every page young: that is the old behaviour, reported as FAIL.
 */
#include "ktest.h"

#define NPAGES 64

static long psz;

/* Fill a fresh anonymous VMA with UFFDIO_COPY; return Referenced: in kB. */
static long
copy_referenced(int fd, __u64 mode, const char *src)
{
	char *p = mmap(NULL, NPAGES * psz, PROT_READ | PROT_WRITE,
		       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	long ref;

	if (p == MAP_FAILED)
		kt_error("mmap: %s", strerror(errno));
	madvise(p, NPAGES * psz, MADV_NOHUGEPAGE);
	kt_register(fd, p, NPAGES * psz, UFFDIO_REGISTER_MODE_MISSING);
	for (int i = 0; i < NPAGES; i++) {
		struct uffdio_copy c = {
			.dst = (unsigned long)p + i * psz,
			.src = (unsigned long)src,
			.len = psz,
			.mode = mode,
		};
		if (ioctl(fd, UFFDIO_COPY, &c) < 0)
			kt_error("UFFDIO_COPY mode %llx: %s",
				 (unsigned long long)mode, strerror(errno));
	}
	ref = kt_smaps_field(p, "Referenced:");
	/* touching the pages must make them referenced in any case */
	for (int i = 0; i < NPAGES; i++)
		(void)*(volatile char *)(p + i * psz);
	if (kt_smaps_field(p, "Referenced:") != NPAGES * psz / 1024)
		kt_error("pages not referenced after access: smaps broken?");
	munmap(p, NPAGES * psz);
	return ref;
}

/* Map a memfd page-cache page with UFFDIO_CONTINUE; return Referenced: kB. */
static long
continue_referenced(int fd, __u64 mode)
{
	int mfd = memfd_create("hints", 0);
	char *w, *p;
	long ref;

	if (mfd < 0 || ftruncate(mfd, NPAGES * psz) < 0)
		kt_error("memfd: %s", strerror(errno));
	w = mmap(NULL, NPAGES * psz, PROT_READ | PROT_WRITE, MAP_SHARED, mfd,
		 0);
	p = mmap(NULL, NPAGES * psz, PROT_READ | PROT_WRITE, MAP_SHARED, mfd,
		 0);
	if (w == MAP_FAILED || p == MAP_FAILED)
		kt_error("mmap memfd: %s", strerror(errno));
	memset(w, 0x5a, NPAGES * psz); /* populate the page cache */
	kt_register(fd, p, NPAGES * psz, UFFDIO_REGISTER_MODE_MINOR);
	struct uffdio_continue c = {
		.range = {.start = (unsigned long)p, .len = NPAGES * psz},
		.mode = mode,
	};
	if (ioctl(fd, UFFDIO_CONTINUE, &c) < 0)
		kt_error("UFFDIO_CONTINUE mode %llx: %s",
			 (unsigned long long)mode, strerror(errno));
	ref = kt_smaps_field(p, "Referenced:");
	munmap(p, NPAGES * psz);
	munmap(w, NPAGES * psz);
	close(mfd);
	return ref;
}

int
main(void)
{
	__u64 feat = 0;
	long full, unhinted, hinted, c_unhinted, c_hinted;
	char *src;
	int fd;

	kt_name = "access_hints";
	psz = sysconf(_SC_PAGESIZE);
	full = NPAGES * psz / 1024;
	src = aligned_alloc(psz, psz);
	memset(src, 0xa5, psz);

	fd = kt_uffd(UFFD_FEATURE_ACCESS_HINTS | UFFD_FEATURE_MINOR_SHMEM,
		     &feat);
	if (fd < 0) {
		/* old kernel: no feature; show that COPY maps young PTEs */
		fd = kt_uffd(0, NULL);
		if (fd < 0)
			kt_error("UFFDIO_API: %s", strerror(errno));
		unhinted = copy_referenced(fd, 0, src);
		kt_exit("FAIL",
			"UFFD_FEATURE_ACCESS_HINTS refused; plain UFFDIO_COPY "
			"maps %ld of %ld kB referenced (every PTE young)",
			unhinted, full);
	}
	kt_info("features 0x%llx", (unsigned long long)feat);
	unhinted = copy_referenced(fd, 0, src);
	hinted = copy_referenced(fd, UFFDIO_COPY_MODE_ACCESS_LIKELY, src);
	c_unhinted = continue_referenced(fd, 0);
	c_hinted = continue_referenced(fd, UFFDIO_CONTINUE_MODE_ACCESS_LIKELY);
	kt_info("COPY: unhinted %ld kB referenced, hinted %ld kB (of %ld)",
		unhinted, hinted, full);
	kt_info("CONTINUE: unhinted %ld kB referenced, hinted %ld kB (of %ld)",
		c_unhinted, c_hinted, full);

	/* ZEROPAGE maps the zero page, which smaps does not count: check the mode is accepted. */
	char *z =
		mmap(NULL, psz, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	kt_register(fd, z, psz, UFFDIO_REGISTER_MODE_MISSING);
	struct uffdio_zeropage zp = {
		.range = {.start = (unsigned long)z, .len = psz},
		.mode = UFFDIO_ZEROPAGE_MODE_ACCESS_LIKELY,
	};
	if (ioctl(fd, UFFDIO_ZEROPAGE, &zp) < 0 || z[0] != 0)
		kt_exit("FAIL", "UFFDIO_ZEROPAGE with ACCESS_LIKELY: %s",
			strerror(errno));

	if (unhinted == 0 && hinted == full && c_unhinted == 0 &&
	    c_hinted == full)
		kt_exit("PASS",
			"unhinted COPY/CONTINUE PTEs old (0 kB referenced), "
			"hinted young (%ld kB)",
			full);
	kt_exit("FAIL",
		"COPY %ld/%ld kB, CONTINUE %ld/%ld kB referenced "
		"(unhinted/hinted)",
		unhinted, hinted, c_unhinted, c_hinted);
}
