/*
 * A migration's files in the state directory that are mapped rather than
 * replaced whole (state.h, state_map()): a store into one is in the page
 * cache at once and outlives the daemon, with no system call. Checked as
 * every state file is (state_dir.h) before it is mapped.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "daemon/migration.h"
#include "daemon/state.h"
#include "daemon/state_dir.h"
#include "daemon/statefmt.h"

/*
 * A fresh file of size bytes, its blocks written (zeros): a mapping of a
 * sparse file would take its blocks at the first store into each page,
 * and a full file system would kill the daemon there (SIGBUS) instead of
 * refusing here. The descriptor, or -1 with errno set.
 */
static int
make_filled(const char *name, size_t size)
{
	static const char zeros[65536];
	int fd, e;

	if ((fd = state_create(name, O_RDWR)) < 0)
		return -1;
	for (size_t at = 0; at < size; at += sizeof(zeros)) {
		size_t n =
			size - at < sizeof(zeros) ? size - at : sizeof(zeros);

		if (state_write_all(fd, zeros, n) < 0) {
			e = errno;
			close(fd);
			unlinkat(state_dirfd, name, 0);
			errno = e;
			return -1;
		}
	}
	/* Not synced, as a live migration's state file is not (state.c). */
	return fd;
}

void *
state_map(const struct migration *m, const char *suffix, size_t size,
	  int create, char *why, size_t whylen)
{
	char name[MIG_ID_LEN + 32], what[256];
	size_t have = size;
	void *p = MAP_FAILED;
	int fd = -1;

	state_file_name(name, sizeof(name), m->id, (int)m->role, suffix);
	state_shown(what, sizeof(what), name);
	if (state_dirfd < 0 || size == 0 || size > STATE_FILE_MAX) {
		snprintf(why, whylen, "%s: %zu bytes: %s", what, size,
			 state_dirfd < 0 ? "no state directory"
					 : "not a size it may have");
		return NULL;
	}
	if (create && (fd = make_filled(name, size)) < 0)
		snprintf(why, whylen, "%s: %s", what, strerror(errno));
	else if (!create &&
		 (fd = state_open_checked(name, what, O_RDWR, &have, why,
					  whylen)) >= 0 &&
		 have != size)
		snprintf(why, whylen,
			 "%s: %zu bytes, where the migration's regions make "
			 "it %zu",
			 what, have, size);
	if (fd >= 0 && have == size &&
	    (p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)) ==
		    MAP_FAILED)
		snprintf(why, whylen, "%s: mmap: %s", what, strerror(errno));
	if (fd >= 0)
		close(fd);
	return p == MAP_FAILED ? NULL : p;
}

void
state_map_remove(const struct migration *m, const char *suffix)
{
	char name[MIG_ID_LEN + 32];

	state_file_name(name, sizeof(name), m->id, (int)m->role, suffix);
	if (state_dirfd >= 0)
		unlinkat(state_dirfd, name, 0);
}
