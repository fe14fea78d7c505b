/*
 * The bulk-transfer floor: SIZE bytes (default 1 GiB) over one raw loopback
 * TCP connection into a buffer, each 64 KiB received installed with one
 * UFFDIO_COPY into a MISSING-registered private anonymous region. No
 * framing, no page state, no event loop: what the bulk lane would cost if it
 * were nothing but the pipe and the install.
 *
 * The sender is a child process, the receiver is the parent. The memory
 * sent belongs to a third process, as a source daemon's does to the frozen
 * process it exports: the sender reads 256 KiB of it at a time with
 * process_vm_readv() into one buffer it reuses, and writes that. With
 * BENCH_FLOOR_SENDER=own it writes from its own populated memory instead,
 * a copy less; on this VM that costs 1.7-2.4 CPU-s/GiB against 0.4-0.6 for
 * a read into a small buffer and its write (docs/benchmarks.md, "A floor
 * that reads the source process"), so it is no floor here.
 * BENCH_FLOOR_WRITE=BYTES (at most 256 KiB) cuts each write to that size:
 * what writing one TLS record at a time costs the stack. For shared
 * memory, BENCH_FLOOR_SENDER=pread reads a memfd into the buffer and
 * writes it, and =sendfile hands the memfd's pages to the socket with
 * sendfile(): what a plaintext source could do from a shared region's
 * backing file (docs/benchmarks.md, "sendfile from the backing file").
 * The clock runs from the first byte sent to the last page installed.
 *
 * A second argument picks the destination memory and the install:
 *   anon            private anonymous memory, UFFDIO_COPY (the default);
 *   shmem-copy      a memfd mapped shared, MISSING mode, UFFDIO_COPY;
 *   shmem-continue  the same memfd mapping in MINOR mode: each 64 KiB is
 *                   received straight into a second shared mapping of the
 *                   memfd (the page cache) and mapped with UFFDIO_CONTINUE,
 *                   the zero-copy install docs/design.md describes.
 *
 * With BENCH_WARM=BYTES in the environment, the receiver touches and frees
 * that much anonymous memory once the sender is ready, just before the
 * clock starts (run.sh does the same before each uffdd migration): this VM's
 * host discards free memory that the guest reports, and the first write
 * to such a page costs it 5-10 us, so fresh memory would otherwise be fast
 * or slow by chance (docs/benchmarks.md, "Warm memory").
 *
 * Prints: "bulk_floor bytes=N secs=S gib_s=R cpu_s_per_gib=C bad=0
 * send_cpu=X recv_cpu=Y mode=M sender=HOW": C is user+sys CPU
 * seconds of sender and receiver together per GiB, X and Y the same for
 * each side.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/userfaultfd.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>

#include "tests/bench/bench.h"

#define RUN (64UL << 10)
/* The sender's read and write: a source daemon's write round. */
#define SEND_RUN (256UL << 10)

static void
die(const char *what)
{
	fprintf(stderr, "bench_bulk_floor: %s: %s\n", what, strerror(errno));
	exit(1);
}

/*
 * The memory sent, at src in a process of its own (a fork of the sender
 * that writes every page, then waits for `hold` to close): the sender's
 * own mapping stays unpopulated. Returns that process.
 */
static pid_t
holder(uint8_t *src, uint64_t size, int *hold)
{
	int ready[2], h[2];
	pid_t pid;
	char c;

	if (pipe(ready) < 0 || pipe(h) < 0)
		die("pipe");
	if ((pid = fork()) < 0)
		die("fork");
	if (pid == 0) {
		close(ready[0]);
		close(h[1]);
		for (uint64_t i = 0; i < size; i += 4096)
			memcpy(src + i, &i, sizeof(i));
		if (write(ready[1], "r", 1) != 1)
			_exit(1);
		while (read(h[0], &c, 1) > 0)
			;
		_exit(0);
	}
	close(ready[1]);
	close(h[0]);
	if (read(ready[0], &c, 1) != 1)
		die("holder not ready");
	close(ready[0]);
	*hold = h[1];
	return pid;
}

/* How the sender gets the bytes it sends (BENCH_FLOOR_SENDER). */
enum how { REMOTE, OWN, PREAD, SENDFILE };

static enum how
sender_how(void)
{
	const char *h = getenv("BENCH_FLOOR_SENDER");

	if (h == NULL || strcmp(h, "remote") == 0)
		return REMOTE;
	if (strcmp(h, "own") == 0)
		return OWN;
	if (strcmp(h, "pread") == 0)
		return PREAD;
	if (strcmp(h, "sendfile") == 0)
		return SENDFILE;
	fprintf(stderr,
		"bench_bulk_floor: BENCH_FLOOR_SENDER=%s: want remote, own, "
		"pread or sendfile\n",
		h);
	exit(2);
}

/* Writes n bytes from p, chunk bytes a write at most. */
static void
write_all(int fd, const uint8_t *p, size_t n, size_t chunk)
{
	for (size_t done = 0; done < n;) {
		size_t step = n - done < chunk ? n - done : chunk;
		ssize_t w = write(fd, p + done, step);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			die("send");
		done += (size_t)w;
	}
}

/*
 * One run of n bytes at off, read as `how` says (into buf when it reads),
 * and written to fd.
 */
static void
send_one(enum how how, int fd, uint8_t *src, int mfd, pid_t hpid, uint8_t *buf,
	 uint64_t off, size_t n, size_t chunk)
{
	struct iovec l = {buf, n}, r = {src + off, n};
	off_t o = (off_t)off;

	switch (how) {
	case OWN:
		write_all(fd, src + off, n, chunk);
		break;
	case REMOTE:
		if (process_vm_readv(hpid, &l, 1, &r, 1, 0) != (ssize_t)n)
			die("process_vm_readv");
		write_all(fd, buf, n, chunk);
		break;
	case PREAD:
		if (pread(mfd, buf, n, o) != (ssize_t)n)
			die("pread");
		write_all(fd, buf, n, chunk);
		break;
	case SENDFILE:
		while (o < (off_t)(off + n))
			if (sendfile(fd, mfd, &o, off + n - (uint64_t)o) <= 0 &&
			    errno != EINTR)
				die("sendfile");
		break;
	}
}

/*
 * The source: wait for the go byte, stream everything, and report the CPU
 * time of the stream alone (not of populating) on `report`. The memory
 * sent is a third process's (REMOTE), the sender's own (OWN), or a
 * memfd's page cache (PREAD, SENDFILE: shared memory, whose backing file
 * a source could send from).
 */
static void
sender(int fd, uint64_t size, int report)
{
	enum how how = sender_how();
	int mfd = -1, hold = -1, shared = how == PREAD || how == SENDFILE;
	uint8_t *src, *buf = malloc(SEND_RUN);
	const char *wr = getenv("BENCH_FLOOR_WRITE");
	size_t chunk = wr != NULL ? strtoul(wr, NULL, 0) : SEND_RUN;
	uint64_t off = 0;
	pid_t hpid = 0;
	double c0;
	char go;

	if (shared && ((mfd = memfd_create("bench_bulk_floor_src", 0)) < 0 ||
		       ftruncate(mfd, (off_t)size) < 0))
		die("memfd");
	src = mmap(NULL, size, PROT_READ | PROT_WRITE,
		   shared ? MAP_SHARED : MAP_PRIVATE | MAP_ANONYMOUS, mfd, 0);
	if (src == MAP_FAILED || buf == NULL)
		die("mmap source");
	if (chunk == 0 || chunk > SEND_RUN)
		chunk = SEND_RUN;
	if (how == REMOTE)
		hpid = holder(src, size, &hold);
	else
		for (uint64_t i = 0; i < size; i += 4096)
			memcpy(src + i, &i, sizeof(i));
	if (write(fd, "r", 1) != 1 || read(fd, &go, 1) != 1)
		die("handshake");
	c0 = cpu_s(RUSAGE_SELF);
	for (; off < size; off += SEND_RUN)
		send_one(how, fd, src, mfd, hpid, buf, off,
			 size - off < SEND_RUN ? size - off : SEND_RUN, chunk);
	close(fd);
	c0 = cpu_s(RUSAGE_SELF) - c0;
	if (hpid > 0) {
		close(hold);
		waitpid(hpid, NULL, 0);
	}
	if (write(report, &c0, sizeof(c0)) != sizeof(c0))
		die("report");
}

int
main(int argc, char **argv)
{
	struct uffdio_api api = {.api = UFFD_API};
	struct uffdio_register reg;
	struct sockaddr_in sa = {.sin_family = AF_INET};
	socklen_t sl = sizeof(sa);
	uint64_t size = 1ULL << 30, off = 0, bad = 0;
	const char *mode = argc > 2 ? argv[2] : "anon";
	int shmem = strncmp(mode, "shmem-", 6) == 0;
	int cont = strcmp(mode, "shmem-continue") == 0;
	uint8_t *dst, *buf, *cache = NULL;
	int mfd = -1;
	double t0, t1, c0, c1;
	int l, fd, uffd, st, rep[2];
	double sender_cpu = 0;
	pid_t pid;
	char rdy;

	if (!shmem && strcmp(mode, "anon") != 0) {
		fprintf(stderr,
			"bench_bulk_floor: unknown mode '%s' (anon, "
			"shmem-copy, shmem-continue)\n",
			mode);
		return 2;
	}
	(void)sender_how(); /* a wrong BENCH_FLOOR_SENDER stops here */
	if (argc > 1)
		size = strtoull(argv[1], NULL, 0) & ~(RUN - 1);
	if (size == 0)
		size = RUN;
	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	l = socket(AF_INET, SOCK_STREAM, 0);
	if (l < 0 || bind(l, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    listen(l, 1) < 0 || getsockname(l, (struct sockaddr *)&sa, &sl))
		die("listen");
	if (pipe(rep) < 0)
		die("pipe");
	if ((pid = fork()) == 0) {
		close(l);
		fd = socket(AF_INET, SOCK_STREAM, 0);
		if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
			die("connect");
		sender(fd, size, rep[1]);
		_exit(0);
	}
	if ((fd = accept(l, NULL, NULL)) < 0)
		die("accept");
	close(l);

	if (shmem) {
		mfd = memfd_create("bench_bulk_floor", MFD_CLOEXEC);
		if (mfd < 0 || ftruncate(mfd, (off_t)size) < 0)
			die("memfd");
		dst = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, mfd,
			   0);
		cache = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED,
			     mfd, 0);
		if (cache == MAP_FAILED)
			die("mmap memfd");
	} else {
		dst = mmap(NULL, size, PROT_READ | PROT_WRITE,
			   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	}
	if (dst == MAP_FAILED || posix_memalign((void **)&buf, 4096, RUN) != 0)
		die("mmap");
	uffd = (int)syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK);
	if (uffd < 0)
		die("userfaultfd (root, or vm.unprivileged_userfaultfd=1)");
	if (cont)
		api.features = UFFD_FEATURE_MINOR_SHMEM;
	reg = (struct uffdio_register){
		.range = {(uint64_t)(uintptr_t)dst, size},
		.mode = cont ? UFFDIO_REGISTER_MODE_MINOR
			     : UFFDIO_REGISTER_MODE_MISSING};
	if (ioctl(uffd, UFFDIO_API, &api) < 0 ||
	    ioctl(uffd, UFFDIO_REGISTER, &reg) < 0)
		die("userfaultfd setup");
	if (read(fd, &rdy, 1) != 1)
		die("sender not ready");
	if (getenv("BENCH_WARM")) {
		uint64_t w = strtoull(getenv("BENCH_WARM"), NULL, 0);
		void *p =
			mmap(NULL, w, PROT_READ | PROT_WRITE,
			     MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);

		if (p == MAP_FAILED)
			die("warm");
		munmap(p, w);
	}

	c0 = cpu_s(RUSAGE_SELF);
	t0 = now_s();
	if (write(fd, "g", 1) != 1)
		die("go");
	while (off < size) {
		struct uffdio_copy c;
		uint8_t *into = cont ? cache + off : buf;
		size_t got = 0;

		/* Page-cache pages for the run in one call, not 16 faults. */
		if (cont && madvise(into, RUN, MADV_POPULATE_WRITE) < 0)
			die("MADV_POPULATE_WRITE");

		while (got < RUN) {
			ssize_t r = read(fd, into + got, RUN - got);

			if (r < 0 && errno == EINTR)
				continue;
			if (r <= 0)
				die("recv");
			got += (size_t)r;
		}
		if (cont) {
			struct uffdio_continue k = {
				.range = {(uint64_t)(uintptr_t)dst + off, RUN}};

			if (ioctl(uffd, UFFDIO_CONTINUE, &k) < 0)
				die("UFFDIO_CONTINUE");
			off += RUN;
			continue;
		}
		c = (struct uffdio_copy){.dst = (uint64_t)(uintptr_t)dst + off,
					 .src = (uint64_t)(uintptr_t)buf,
					 .len = RUN};
		if (ioctl(uffd, UFFDIO_COPY, &c) < 0)
			die("UFFDIO_COPY");
		off += RUN;
	}
	t1 = now_s();
	c1 = cpu_s(RUSAGE_SELF);
	if (waitpid(pid, &st, 0) < 0)
		die("waitpid");
	if (read(rep[0], &sender_cpu, sizeof(sender_cpu)) != sizeof(sender_cpu))
		die("sender's CPU report");
	c1 += sender_cpu;
	for (uint64_t i = 0; i < size; i += 4096)
		if (memcmp(dst + i, &i, sizeof(i)) != 0)
			bad++;
	printf("bulk_floor bytes=%" PRIu64 " secs=%.3f gib_s=%.2f "
	       "cpu_s_per_gib=%.3f bad=%" PRIu64 " send_cpu=%.3f "
	       "recv_cpu=%.3f mode=%s sender=%s\n",
	       size, t1 - t0, (double)size / (1 << 30) / (t1 - t0),
	       (c1 - c0) / ((double)size / (1 << 30)), bad,
	       sender_cpu / ((double)size / (1 << 30)),
	       (c1 - c0 - sender_cpu) / ((double)size / (1 << 30)), mode,
	       getenv("BENCH_FLOOR_SENDER") ? getenv("BENCH_FLOOR_SENDER")
					    : "remote");
	return bad ? 1 : 0;
}
