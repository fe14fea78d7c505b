/* Messages between the privileged part and the engine (imsg.h). */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "daemon/imsg.h"

union fds_cmsg {
	struct cmsghdr h;
	char buf[CMSG_SPACE(sizeof(int) * IMSG_FDS)];
};

/* A sealed memfd holding data: the payload of a message too large to go inline. */
static int
big_payload(const void *data, size_t len)
{
	int fd = memfd_create("uffdd-imsg", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	size_t done = 0;

	if (fd < 0)
		return -1;
	while (done < len) {
		ssize_t n = write(fd, (const uint8_t *)data + done, len - done);

		if (n <= 0) {
			close(fd);
			return -1;
		}
		done += (size_t)n;
	}
	/* Sealed: the sender cannot change it under the reader. */
	if (fcntl(fd, F_ADD_SEALS,
		  F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) <
	    0) {
		close(fd);
		return -1;
	}
	return fd;
}

int
imsg_send(int sock, uint32_t type, uint64_t id, int32_t err, const void *data,
	  size_t len, const int *fds, size_t nfds)
{
	struct imsg_hdr h = {.type = type, .id = id, .err = err};
	int all[IMSG_FDS], big = -1, rc;
	struct iovec iov[2];
	struct msghdr mh = {0};
	union fds_cmsg cm;

	if (len > IMSG_MAX || nfds + (len > IMSG_INLINE) > IMSG_FDS) {
		errno = EMSGSIZE;
		return -1;
	}
	h.len = (uint32_t)len;
	if (nfds > 0)
		memcpy(all, fds, nfds * sizeof(int));
	if (len > IMSG_INLINE) {
		if ((big = big_payload(data, len)) < 0)
			return -1;
		all[nfds++] = big;
		h.big = 1;
	}
	h.nfd = (uint16_t)nfds;
	iov[0] = (struct iovec){&h, sizeof(h)};
	iov[1] = (struct iovec){(void *)data, h.big ? 0 : len};
	mh.msg_iov = iov;
	mh.msg_iovlen = 2;
	if (nfds > 0) {
		memset(&cm, 0, sizeof(cm));
		mh.msg_control = cm.buf;
		mh.msg_controllen = CMSG_SPACE(nfds * sizeof(int));
		CMSG_FIRSTHDR(&mh)->cmsg_level = SOL_SOCKET;
		CMSG_FIRSTHDR(&mh)->cmsg_type = SCM_RIGHTS;
		CMSG_FIRSTHDR(&mh)->cmsg_len = CMSG_LEN(nfds * sizeof(int));
		memcpy(CMSG_DATA(CMSG_FIRSTHDR(&mh)), all, nfds * sizeof(int));
	}
	do
		rc = (int)sendmsg(sock, &mh, MSG_NOSIGNAL);
	while (rc < 0 && errno == EINTR);
	if (big >= 0)
		close(big);
	return rc < 0 ? -1 : 0;
}

/* Reads the memfd payload of m (its last descriptor) into m->data. */
static int
read_big(struct imsg *m)
{
	int fd = m->fd[--m->nfd];
	struct stat st;
	int ok;

	m->fd[m->nfd] = -1;
	ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
	     (uint64_t)st.st_size == m->h.len &&
	     (fcntl(fd, F_GET_SEALS) & F_SEAL_WRITE) &&
	     pread(fd, m->data, m->h.len, 0) == (ssize_t)m->h.len;
	close(fd);
	return ok ? 0 : -1;
}

int
imsg_recv(int sock, struct imsg *m)
{
	uint8_t *buf = malloc(sizeof(struct imsg_hdr) + IMSG_INLINE);
	struct iovec iov = {buf, sizeof(struct imsg_hdr) + IMSG_INLINE};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
	union fds_cmsg cm;
	struct cmsghdr *c;
	ssize_t n;

	memset(m, 0, sizeof(*m));
	for (int i = 0; i < IMSG_FDS; i++)
		m->fd[i] = -1;
	if (buf == NULL)
		return -1;
	mh.msg_control = cm.buf;
	mh.msg_controllen = sizeof(cm.buf);
	do
		n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
	while (n < 0 && errno == EINTR);
	if (n <= 0) {
		free(buf);
		return n == 0 ? 0 : -1;
	}
	for (c = CMSG_FIRSTHDR(&mh); c != NULL; c = CMSG_NXTHDR(&mh, c)) {
		size_t k;

		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < k; i++) {
			int fd;

			memcpy(&fd, CMSG_DATA(c) + i * sizeof(int),
			       sizeof(int));
			if (m->nfd < IMSG_FDS)
				m->fd[m->nfd++] = fd;
			else
				close(fd);
		}
	}
	if ((size_t)n < sizeof(m->h) ||
	    (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)))
		goto bad;
	memcpy(&m->h, buf, sizeof(m->h));
	if (m->h.nfd != m->nfd || m->h.len > IMSG_MAX || m->h.big > 1 ||
	    (m->h.big && (m->nfd == 0 || m->h.len <= IMSG_INLINE)) ||
	    (!m->h.big && (size_t)n != sizeof(m->h) + m->h.len))
		goto bad;
	if (m->h.len > 0 && (m->data = malloc(m->h.len)) == NULL)
		goto bad;
	if (m->h.big && read_big(m) < 0)
		goto bad;
	if (!m->h.big && m->h.len > 0)
		memcpy(m->data, buf + sizeof(m->h), m->h.len);
	free(buf);
	return 1;
bad:
	free(buf);
	imsg_clear(m);
	errno = EBADMSG;
	return -1;
}

int
imsg_take_fd(struct imsg *m, int i)
{
	int fd;

	if (i < 0 || i >= m->nfd)
		return -1;
	fd = m->fd[i];
	m->fd[i] = -1;
	return fd;
}

void
imsg_clear(struct imsg *m)
{
	for (int i = 0; i < m->nfd; i++)
		if (m->fd[i] >= 0)
			close(m->fd[i]);
	m->nfd = 0;
	free(m->data);
	m->data = NULL;
}

const void *
imsg_payload(const struct imsg *m, size_t len)
{
	return m->h.len == len && len > 0 ? m->data : NULL;
}
