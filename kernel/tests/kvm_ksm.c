/*
 * Patch 3, KVM side: count KVM's page faults (debugfs kvm/pf_fixed) while
 * KSM merges guest memory that the guest keeps reading.  Without the
 * patch, write_protect_page() and replace_page() zap the guest mapping in
 * invalidate_range_start() and the guest faults it back in (twice per
 * merged page); with it, change_pte() updates the mapping in place.
 *
 * The guest is 16-bit real-mode code at GPA 0x1000 that reads one byte of
 * each of 16 identical pages at GPA 0x10000-0x1ffff and exits with OUT.
 * Needs /dev/kvm inside the test VM (QEMU TCG with SVM + NPT); SKIP if not.
 */
#include "ktest.h"
#include <linux/kvm.h>
#include <signal.h>

#define MEM (128 * 1024)

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

	if (fd < 0 || read(fd, buf, sizeof(buf) - 1) < 0) {
		if (fd >= 0)
			close(fd);
		return -1;
	}
	close(fd);
	return strtol(buf, NULL, 10);
}

static const unsigned char guest[] = {
	0xb8, 0x00, 0x10,	/* mov ax, 0x1000 */
	0x8e, 0xd8,		/* mov ds, ax */
	0x31, 0xdb,		/* loop: xor bx, bx */
	0x8a, 0x07,		/* inner: mov al, [bx] */
	0x81, 0xc3, 0x00, 0x10, /* add bx, 0x1000 */
	0x75, 0xf8,		/* jnz inner */
	0xe6, 0x10,		/* out 0x10, al */
	0xeb, 0xf2,		/* jmp loop */
};

/* the same loop, writing: breaks the KSM sharing (COW) */
static const unsigned char guest_write[] = {
	0xb8, 0x00, 0x10,	/* mov ax, 0x1000 */
	0x8e, 0xd8,		/* mov ds, ax */
	0x31, 0xdb,		/* loop: xor bx, bx */
	0x88, 0x07,		/* inner: mov [bx], al */
	0x81, 0xc3, 0x00, 0x10, /* add bx, 0x1000 */
	0x75, 0xf8,		/* jnz inner */
	0xe6, 0x10,		/* out 0x10, al */
	0xeb, 0xf2,		/* jmp loop */
};

static int kvm_fd, vcpu;
static struct kvm_run *run;
static volatile long rounds_done;
static const char *phase = "setup";

/* A stuck guest must not stall the whole VM test run. */
static void
on_alarm(int sig)
{
	char buf[160];
	int n = snprintf(buf, sizeof(buf),
			 "ERROR kvm_ksm: timed out in %s after "
			 "%ld guest rounds\n",
			 phase, rounds_done);

	write(1, buf, n);
	/* what KVM was doing: faulting, exiting, or nothing */
	static const char *const st[] = {
		"exits",	  "pf_taken",	"pf_fixed",
		"pf_spurious",	  "pf_emulate", "io_exits",
		"halt_exits",	  "irq_exits",	"mmu_invalidate_retry",
		"nx_lpage_splits"};
	for (unsigned i = 0; i < sizeof(st) / sizeof(st[0]); i++) {
		char path[96];
		snprintf(path, sizeof(path), "/sys/kernel/debug/kvm/%s", st[i]);
		printf("INFO kvm_ksm: at timeout %s=%ld\n", st[i], get(path));
	}
	fflush(stdout);
	_exit(2);
}

static void
guest_rounds(int n)
{
	for (int i = 0; i < n; i++) {
		if (ioctl(vcpu, KVM_RUN, 0) < 0)
			kt_error("KVM_RUN: %s", strerror(errno));
		rounds_done++;
		if (run->exit_reason != KVM_EXIT_IO)
			kt_error("unexpected exit %u", run->exit_reason);
	}
}

int
main(void)
{
	long psz = sysconf(_SC_PAGESIZE), pf0, pf1, pf2, pf3, sharing = 0;
	struct kvm_userspace_memory_region reg;
	struct kvm_sregs sregs;
	struct kvm_regs regs;
	int vm, rounds_merge = 0;
	char *mem;

	kt_name = "kvm_ksm";
	signal(SIGALRM, on_alarm);
	alarm(getenv("KVM_KSM_TIMEOUT") ? atoi(getenv("KVM_KSM_TIMEOUT"))
					: 120);
	kvm_fd = open("/dev/kvm", O_RDWR);
	if (kvm_fd < 0) {
		printf("SKIP %s: /dev/kvm: %s (no SVM/VMX in this VM)\n",
		       kt_name, strerror(errno));
		return 0;
	}
	vm = ioctl(kvm_fd, KVM_CREATE_VM, 0);
	if (vm < 0) {
		printf("SKIP %s: KVM_CREATE_VM: %s\n", kt_name,
		       strerror(errno));
		return 0;
	}
	mem = mmap(NULL, MEM, PROT_READ | PROT_WRITE,
		   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	madvise(mem, MEM, MADV_NOHUGEPAGE);
	memset(mem, 0x42, MEM);
	for (int i = 0; i < MEM / psz; i++)
		mem[i * psz] = (char)i; /* only the data pages are identical */
	for (int i = 0x10; i < 0x20; i++)
		mem[i * psz] = 0x42;
	memcpy(mem + 0x1000, guest, sizeof(guest));
	memcpy(mem + 0x1100, guest_write, sizeof(guest_write));
	reg = (struct kvm_userspace_memory_region){
		.slot = 0,
		.guest_phys_addr = 0,
		.memory_size = MEM,
		.userspace_addr = (unsigned long)mem,
	};
	if (ioctl(vm, KVM_SET_USER_MEMORY_REGION, &reg) < 0)
		kt_error("KVM_SET_USER_MEMORY_REGION: %s", strerror(errno));
	vcpu = ioctl(vm, KVM_CREATE_VCPU, 0);
	if (vcpu < 0)
		kt_error("KVM_CREATE_VCPU: %s", strerror(errno));
	run = mmap(NULL, ioctl(kvm_fd, KVM_GET_VCPU_MMAP_SIZE, 0),
		   PROT_READ | PROT_WRITE, MAP_SHARED, vcpu, 0);
	ioctl(vcpu, KVM_GET_SREGS, &sregs);
	sregs.cs.base = 0;
	sregs.cs.selector = 0;
	ioctl(vcpu, KVM_SET_SREGS, &sregs);
	memset(&regs, 0, sizeof(regs));
	regs.rip = 0x1000;
	regs.rflags = 2;
	ioctl(vcpu, KVM_SET_REGS, &regs);

	phase = "mapping";
	guest_rounds(10); /* map everything */
	pf0 = get("/sys/kernel/debug/kvm/pf_fixed");
	if (pf0 < 0)
		printf("SKIP %s: no /sys/kernel/debug/kvm/pf_fixed\n", kt_name),
			exit(0);
	guest_rounds(100);
	pf1 = get("/sys/kernel/debug/kvm/pf_fixed"); /* steady state */

	phase = "KSM merge";
	madvise(mem, MEM, MADV_MERGEABLE);
	put("/sys/kernel/mm/ksm/pages_to_scan", "1000");
	put("/sys/kernel/mm/ksm/sleep_millisecs", "10");
	put("/sys/kernel/mm/ksm/run", "1");
	while (rounds_merge < 20000 && sharing < 16) {
		guest_rounds(10);
		rounds_merge += 10;
		/* this process's merged pages: the global counters can be stale */
		sharing = get("/proc/self/ksm_merging_pages");
	}
	put("/sys/kernel/mm/ksm/run", "0");
	guest_rounds(100);
	pf2 = get("/sys/kernel/debug/kvm/pf_fixed");
	/* guest writes to the merged pages: COW through KVM's fault path */
	phase = "guest writes";
	ioctl(vcpu, KVM_GET_REGS, &regs);
	regs.rip = 0x1100;
	ioctl(vcpu, KVM_SET_REGS, &regs);
	guest_rounds(10);
	pf3 = get("/sys/kernel/debug/kvm/pf_fixed");
	for (int i = 0x10; i < 0x20; i++)
		if (mem[i * psz] != 0x42 && mem[i * psz] != mem[0x10 * psz])
			kt_exit("FAIL", "guest write lost on page %#x", i);
	kt_info("pf_fixed: %ld to map the guest, %ld in 100 steady rounds; %ld "
		"during "
		"KSM merge of %ld pages (%d guest rounds) and 100 rounds "
		"after; "
		"%ld for guest writes to them",
		pf0, pf1 - pf0, pf2 - pf1, sharing, rounds_merge, pf3 - pf2);
	printf("BENCH kvm_ksm_faults %ld\n", pf3 - pf1);
	if (sharing < 16)
		kt_error("KSM merged only %ld pages", sharing);
	if (pf2 - pf1 < sharing)
		kt_exit("PASS",
			"%ld KVM page faults while KSM merged %ld guest pages, "
			"%ld more for guest writes",
			pf2 - pf1, sharing, pf3 - pf2);
	kt_exit("FAIL",
		"%ld KVM page faults while KSM merged %ld guest pages, "
		"%ld more for guest writes",
		pf2 - pf1, sharing, pf3 - pf2);
}
