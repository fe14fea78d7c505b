/*
 * Writing to the journal by its native protocol (journal.h): what
 * sd_journal_send() does, in the few lines a daemon needs.
 */
#include "config.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <unistd.h>

#include "daemon/journal.h"

/* An entry's fields at most: what log.c sends is far fewer. */
#define JOURNAL_FIELDS_MAX 16

int
journal_is_stderr(void)
{
	const char *e = getenv("JOURNAL_STREAM");
	unsigned long long dev, ino;
	struct stat st;
	char end;

	if (e == NULL || sscanf(e, "%llu:%llu%c", &dev, &ino, &end) != 2)
		return 0;
	if (fstat(STDERR_FILENO, &st) < 0)
		return 0;
	return (unsigned long long)st.st_dev == dev &&
	       (unsigned long long)st.st_ino == ino;
}

int
journal_open(const char *path)
{
	struct sockaddr_un sun = {.sun_family = AF_UNIX};
	int fd, saved;

	if (strlen(path) >= sizeof(sun.sun_path)) {
		errno = ENAMETOOLONG;
		return -1;
	}
	memcpy(sun.sun_path, path, strlen(path) + 1);
	fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return -1;
	if (connect(fd, (struct sockaddr *)&sun, sizeof(sun)) < 0) {
		saved = errno;
		close(fd);
		errno = saved;
		return -1;
	}
	return fd;
}

/*
 * KEY=value\n, or, for a value with a newline, KEY\n then its length as
 * 64 bits little endian, the value and \n: five pieces a field at most.
 */
int
journal_send(int fd, const struct journal_field *f, size_t n)
{
	struct iovec iov[JOURNAL_FIELDS_MAX * 5];
	uint8_t lens[JOURNAL_FIELDS_MAX][8];
	size_t k = 0;
	struct msghdr mh = {0};

	if (n > JOURNAL_FIELDS_MAX) {
		errno = E2BIG;
		return -1;
	}
	for (size_t i = 0; i < n; i++) {
		size_t vl = strlen(f[i].value);

		iov[k++] = (struct iovec){(void *)f[i].key, strlen(f[i].key)};
		if (memchr(f[i].value, '\n', vl) == NULL) {
			iov[k++] = (struct iovec){"=", 1};
		} else {
			iov[k++] = (struct iovec){"\n", 1};
			for (int b = 0; b < 8; b++)
				lens[i][b] = (uint8_t)((uint64_t)vl >> (8 * b));
			iov[k++] = (struct iovec){lens[i], 8};
		}
		iov[k++] = (struct iovec){(void *)f[i].value, vl};
		iov[k++] = (struct iovec){"\n", 1};
	}
	mh.msg_iov = iov;
	mh.msg_iovlen = k;
	return sendmsg(fd, &mh, MSG_NOSIGNAL) < 0 ? -1 : 0;
}
