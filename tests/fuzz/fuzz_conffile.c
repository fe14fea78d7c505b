/*
 * libFuzzer target: the configuration grammar (daemon/conffile.c). The file
 * is read as root at start-up and at every reload; a bad one must give an
 * error, never a crash, and a good one must print and read back the same.
 */
#define _GNU_SOURCE
#include "config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "daemon/conffile.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* conffile.c's users need these; the parser does not touch them. */
struct uffdd_conf conf;
struct event_base *base;

/* The text in a memfd, returned as a path conffile_load can open. */
static void
as_file(const void *p, size_t n, char *path, size_t len, int *fd)
{
	*fd = memfd_create("fuzz", MFD_CLOEXEC);
	if (*fd < 0 || write(*fd, p, n) != (ssize_t)n)
		abort();
	snprintf(path, len, "/proc/self/fd/%d", *fd);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct uffdd_conf a = {0}, b = {0};
	char path[64], err[512], *out1 = NULL;
	size_t l1 = 0;
	FILE *m;
	int fd, fd2;

	as_file(data, size, path, sizeof(path), &fd);
	if (conffile_load(path, 1, &a, err, sizeof(err)) == 0) {
		struct uffdd_conf eff;

		/*
		 * The effective configuration, as the daemon builds it (the
		 * file over the defaults), must print in a form that loads.
		 */
		conffile_defaults(&eff);
		conffile_merge(&eff, &a);
		m = open_memstream(&out1, &l1);
		conffile_print(m, &eff);
		fclose(m);
		conffile_clear(&eff);
		as_file(out1, l1, path, sizeof(path), &fd2);
		b.control_gid = (gid_t)-1;
		conffile_defaults(&b);
		if (conffile_load(path, 1, &b, err, sizeof(err)) != 0)
			abort();
		close(fd2);
		conffile_clear(&b);
	}
	free(out1);
	conffile_clear(&a);
	close(fd);
	return 0;
}
