/*
 * Messages between the daemon's parts (daemon/imsg.c): inline payloads,
 * large ones through a sealed memfd, descriptors, and datagrams that do
 * not hold together (refused, nothing leaked).
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>

#include "daemon/imsg.h"
#include "tests/unit/unit.h"

static int
open_fds(void)
{
	int n = 0;

	for (int fd = 0; fd < 1024; fd++)
		n += fcntl(fd, F_GETFD) >= 0;
	return n;
}

int
main(void)
{
	int sv[2], fds0, pipefd[2];
	struct imsg m;
	uint8_t *big;
	char c;

	CHECK(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) == 0);
	fds0 = open_fds();

	/* Inline, with a descriptor that works on the other side. */
	CHECK(pipe(pipefd) == 0);
	CHECK(imsg_send(sv[0], 7, 42, 3, "hello", 5, &pipefd[1], 1) == 0);
	CHECK(imsg_recv(sv[1], &m) == 1);
	CHECK(m.h.type == 7 && m.h.id == 42 && m.h.err == 3 && m.h.len == 5);
	CHECK(memcmp(m.data, "hello", 5) == 0 && m.nfd == 1);
	CHECK(imsg_payload(&m, 5) != NULL && imsg_payload(&m, 4) == NULL);
	{
		int w = imsg_take_fd(&m, 0);

		CHECK(w >= 0 && write(w, "x", 1) == 1);
		CHECK(read(pipefd[0], &c, 1) == 1 && c == 'x');
		close(w);
	}
	imsg_clear(&m);
	close(pipefd[0]);
	close(pipefd[1]);

	/* Large: through a memfd, read back whole, the memfd closed. */
	big = malloc(3 * IMSG_INLINE);
	for (size_t i = 0; i < 3 * IMSG_INLINE; i++)
		big[i] = (uint8_t)(i * 7);
	CHECK(imsg_send(sv[0], 9, 1, 0, big, 3 * IMSG_INLINE, NULL, 0) == 0);
	CHECK(imsg_recv(sv[1], &m) == 1);
	CHECK(m.h.len == 3 * IMSG_INLINE && m.nfd == 0);
	CHECK(m.data && memcmp(m.data, big, 3 * IMSG_INLINE) == 0);
	imsg_clear(&m);
	free(big);

	/* Too many descriptors, too large: refused before anything is sent. */
	{
		int many[IMSG_FDS + 1];

		for (int i = 0; i <= IMSG_FDS; i++)
			many[i] = 0;
		CHECK(imsg_send(sv[0], 1, 0, 0, NULL, 0, many, IMSG_FDS + 1) <
			      0 &&
		      errno == EMSGSIZE);
	}

	/* A datagram that says more than it holds: EBADMSG, fds closed. */
	{
		struct imsg_hdr h = {.type = 1, .len = 100};

		CHECK(send(sv[0], &h, sizeof(h), 0) == (ssize_t)sizeof(h));
		CHECK(imsg_recv(sv[1], &m) < 0 && errno == EBADMSG);
		CHECK(send(sv[0], "ab", 2, 0) == 2); /* shorter than a header */
		CHECK(imsg_recv(sv[1], &m) < 0 && errno == EBADMSG);
	}
	/* The other end gone: 0. */
	close(sv[0]);
	CHECK(imsg_recv(sv[1], &m) == 0);
	close(sv[1]);
	CHECK(open_fds() == fds0 - 2);
	return UNIT_DONE();
}
