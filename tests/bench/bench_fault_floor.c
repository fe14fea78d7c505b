/*
 * The demand-fault floor: what one fault costs with no daemon at all.
 *
 * Three processes, the same shape as a migration through uffdd (a toucher
 * in the target, a handler in the destination daemon, a server in the
 * source daemon), so that the same wakeups between processes sit on each
 * path (with --threads: three threads of one process instead, which the
 * scheduler keeps on one vCPU and which is therefore much faster):
 *   - the toucher reads one byte of each of N pages, in a random order, one
 *     at a time, and times each read (each read is one MISSING fault);
 *   - the handler reads the uffd event (blocking read), sends a 16-byte
 *     request over loopback TCP (TCP_NODELAY), receives 4 KiB and installs
 *     it with UFFDIO_COPY, which wakes the toucher;
 *   - the server answers each 16-byte request with 4 KiB.
 * The program pins nothing itself. tests/bench/run.sh runs it, as it runs
 * uffdd's idle case, once under taskset on one CPU and once unpinned: a
 * wakeup across vCPUs costs 20-70 us here (measured here), so pinning
 * one side and not the other would make the comparison meaningless.
 *
 * With --remote the server reads each page from another process through
 * /proc/PID/mem, as a source daemon must (its pages are the frozen
 * process's, not its own): the floor with that one cost added.
 *
 * Prints one line: "fault_floor n=N p50_us=X p99_us=Y".
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/userfaultfd.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <sys/ioctl.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>

#define PS 4096UL

static uint8_t *region;
static uint64_t npages = 4096;
static int uffd;

static void
die(const char *what)
{
	fprintf(stderr, "bench_fault_floor: %s: %s\n", what, strerror(errno));
	exit(1);
}

static int use_epoll, use_remote;

/*
 * With --epoll, every blocking read is preceded by an epoll_wait on that
 * one descriptor, as an event loop does: the difference to the plain floor
 * is what the event-loop structure costs (one more system call and the
 * epoll wakeup path per wakeup).
 */
static void
wait_readable(int fd)
{
	/* One epoll instance per descriptor, created once: no epoll_ctl in
	 * the loop, as in uffdd's. */
	static __thread int eps[2] = {-1, -1}, fds[2] = {-1, -1};
	struct epoll_event ev = {.events = EPOLLIN};
	int i;

	if (!use_epoll)
		return;
	for (i = 0; i < 2 && fds[i] != fd && fds[i] >= 0; i++)
		;
	if (i == 2)
		die("wait_readable: more than two descriptors");
	if (fds[i] < 0) {
		eps[i] = epoll_create1(EPOLL_CLOEXEC);
		ev.data.fd = fd;
		if (eps[i] < 0 || epoll_ctl(eps[i], EPOLL_CTL_ADD, fd, &ev) < 0)
			die("epoll");
		fds[i] = fd;
	}
	while (epoll_wait(eps[i], &ev, 1, -1) < 0 && errno == EINTR)
		;
}

static uint64_t
now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static int
full_io(int fd, void *buf, size_t len, int out)
{
	size_t off = 0;

	while (off < len) {
		ssize_t r = out ? send(fd, (uint8_t *)buf + off, len - off,
				       MSG_NOSIGNAL)
				: recv(fd, (uint8_t *)buf + off, len - off, 0);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		off += (size_t)r;
	}
	return 0;
}

/* Page p's bytes: recognisable, and checked by the toucher. */
static void
fill_page(uint8_t *page, uint64_t p)
{
	memset(page, (int)(p & 0xff), PS);
	memcpy(page, &p, 8);
}

/*
 * --remote: a child holds every page, filled, and sleeps (as a frozen
 * source process does); returns /proc/CHILD/mem, and the pages' address.
 */
static int
remote_pages(uint64_t *at)
{
	uint8_t *mem = mmap(NULL, npages * PS, PROT_READ | PROT_WRITE,
			    MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	char path[64];
	pid_t pid;
	int fd;

	if (mem == MAP_FAILED)
		die("mmap remote");
	if ((pid = fork()) == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		for (uint64_t p = 0; p < npages; p++)
			fill_page(mem + p * PS, p);
		for (;;)
			pause();
	}
	if (pid < 0)
		die("fork");
	munmap(mem, npages * PS);
	snprintf(path, sizeof(path), "/proc/%d/mem", (int)pid);
	/* The child is ready once its last page reads back filled. */
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		die("open /proc/PID/mem");
	for (;;) {
		uint64_t v = 0;

		if (pread(fd, &v, 8,
			  (off_t)(uintptr_t)mem + (off_t)((npages - 1) * PS)) ==
			    8 &&
		    v == npages - 1)
			break;
		usleep(1000);
	}
	*at = (uint64_t)(uintptr_t)mem;
	return fd;
}

/* The source: 4 KiB of recognisable bytes for every 16-byte request. */
static void *
server(void *arg)
{
	int fd = (int)(intptr_t)arg, mem = -1;
	uint8_t req[16], page[PS];
	uint64_t at = 0;

	if (use_remote)
		mem = remote_pages(&at);
	for (;;) {
		uint64_t p;

		wait_readable(fd);
		if (full_io(fd, req, sizeof(req), 0) < 0)
			break;
		memcpy(&p, req, 8);
		if (mem < 0)
			fill_page(page, p);
		else if (pread(mem, page, PS, (off_t)(at + p * PS)) != PS)
			die("pread /proc/PID/mem");
		if (full_io(fd, page, sizeof(page), 1) < 0)
			break;
	}
	close(fd);
	return NULL;
}

/* The destination: one uffd event, one request, one reply, one copy. */
static void *
handler(void *arg)
{
	int fd = (int)(intptr_t)arg;
	static uint8_t page[PS] __attribute__((aligned(4096)));

	for (;;) {
		struct uffd_msg msg;
		uint8_t req[16] = {0};
		struct uffdio_copy c;
		uint64_t addr, p;
		ssize_t r;

		wait_readable(uffd);
		r = read(uffd, &msg, sizeof(msg));

		if (r < 0 && errno == EINTR)
			continue;
		if (r != sizeof(msg))
			die("read uffd");
		if (msg.event != UFFD_EVENT_PAGEFAULT)
			continue;
		addr = msg.arg.pagefault.address & ~(PS - 1);
		p = (addr - (uint64_t)(uintptr_t)region) / PS;
		memcpy(req, &p, 8);
		if (full_io(fd, req, sizeof(req), 1) < 0)
			die("request");
		wait_readable(fd);
		if (full_io(fd, page, sizeof(page), 0) < 0)
			die("request");
		c = (struct uffdio_copy){.dst = addr,
					 .src = (uint64_t)(uintptr_t)page,
					 .len = PS};
		if (ioctl(uffd, UFFDIO_COPY, &c) < 0 && errno != EEXIST)
			die("UFFDIO_COPY");
	}
	return NULL;
}

/* user+sys CPU seconds of a process (main thread's view: whole process). */
static double
proc_cpu(pid_t pid)
{
	char path[64], buf[1024], *p;
	unsigned long ut = 0, st = 0;
	FILE *f;

	if (pid <= 0)
		return 0;
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	if ((f = fopen(path, "re")) == NULL)
		return 0;
	if (fgets(buf, sizeof(buf), f) && (p = strrchr(buf, ')')) != NULL)
		sscanf(p + 2,
		       "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu",
		       &ut, &st);
	fclose(f);
	return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static int
cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Loopback pair with TCP_NODELAY on both ends, as on the demand lane. */
static void
tcp_pair(int *a, int *b)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	socklen_t sl = sizeof(sa);
	int one = 1, l = socket(AF_INET, SOCK_STREAM, 0);

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (l < 0 || bind(l, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    listen(l, 1) < 0 || getsockname(l, (struct sockaddr *)&sa, &sl))
		die("listen");
	*a = socket(AF_INET, SOCK_STREAM, 0);
	if (*a < 0 || connect(*a, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		die("connect");
	if ((*b = accept(l, NULL, NULL)) < 0)
		die("accept");
	close(l);
	setsockopt(*a, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(*b, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

int
main(int argc, char **argv)
{
	struct uffdio_api api = {.api = UFFD_API};
	struct uffdio_register reg;
	uint64_t *lat, *order, bad = 0;
	pthread_t t;
	int a, b, threads = 0;
	pid_t kids[2] = {-1, -1};
	double k0[2], k1[2], s0, s1;

	for (int i = 1; i < argc; i++) {
		if (strcmp(argv[i], "--threads") == 0)
			threads = 1;
		else if (strcmp(argv[i], "--epoll") == 0)
			use_epoll = 1;
		else if (strcmp(argv[i], "--remote") == 0)
			use_remote = 1;
		else
			npages = strtoull(argv[i], NULL, 0);
	}
	if (npages == 0)
		npages = 1;
	region = mmap(NULL, npages * PS, PROT_READ | PROT_WRITE,
		      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (region == MAP_FAILED)
		die("mmap");
	uffd = (int)syscall(SYS_userfaultfd, O_CLOEXEC);
	if (uffd < 0)
		die("userfaultfd (root, or vm.unprivileged_userfaultfd=1)");
	if (ioctl(uffd, UFFDIO_API, &api) < 0)
		die("UFFDIO_API");
	reg = (struct uffdio_register){
		.range = {(uint64_t)(uintptr_t)region, npages * PS},
		.mode = UFFDIO_REGISTER_MODE_MISSING};
	if (ioctl(uffd, UFFDIO_REGISTER, &reg) < 0)
		die("UFFDIO_REGISTER");
	tcp_pair(&a, &b);
	if (threads) {
		pthread_create(&t, NULL, server, (void *)(intptr_t)b);
		pthread_create(&t, NULL, handler, (void *)(intptr_t)a);
	} else {
		/*
		 * The children keep the uffd and die with the parent's end of
		 * it: the handler's read fails once the parent has exited.
		 */
		if ((kids[0] = fork()) == 0) {
			close(a);
			server((void *)(intptr_t)b);
			_exit(0);
		}
		if ((kids[1] = fork()) == 0) {
			close(b);
			prctl(PR_SET_PDEATHSIG, SIGKILL);
			handler((void *)(intptr_t)a);
			_exit(0);
		}
		close(a);
		close(b);
	}

	/* A random order, as the uffdd run uses, so no prefetch helps. */
	lat = calloc(npages, sizeof(*lat));
	order = calloc(npages, sizeof(*order));
	if (lat == NULL || order == NULL)
		die("calloc");
	for (uint64_t i = 0; i < npages; i++)
		order[i] = i;
	srandom(1);
	for (uint64_t i = npages - 1; i > 0; i--) {
		uint64_t j = (uint64_t)random() % (i + 1), x = order[i];

		order[i] = order[j];
		order[j] = x;
	}
	for (int k = 0; k < 2; k++)
		k0[k] = proc_cpu(kids[k]);
	s0 = proc_cpu(getpid());
	for (uint64_t i = 0; i < npages; i++) {
		volatile uint64_t *p =
			(volatile uint64_t *)(region + order[i] * PS);
		uint64_t t0 = now_ns(), v = *p;

		lat[i] = now_ns() - t0;
		if (v != order[i])
			bad++;
	}
	s1 = proc_cpu(getpid());
	for (int k = 0; k < 2; k++)
		k1[k] = proc_cpu(kids[k]);
	qsort(lat, npages, sizeof(*lat), cmp_u64);
	printf("fault_floor n=%" PRIu64 " p50_us=%.1f p99_us=%.1f bad=%" PRIu64
	       " cpu_us_per_fault toucher=%.1f handler=%.1f server=%.1f\n",
	       npages, (double)lat[npages / 2] / 1e3,
	       (double)lat[npages * 99 / 100] / 1e3, bad,
	       (s1 - s0) * 1e6 / (double)npages,
	       (k1[1] - k0[1]) * 1e6 / (double)npages,
	       (k1[0] - k0[0]) * 1e6 / (double)npages);
	return bad ? 1 : 0;
}
