/*
 * The engine's side of privileged operations (privop.h): a request to the
 * privileged part over the rpc socket pair, answered before the engine
 * goes on. While it waits, a descriptor the caller names may be drained
 * (a target's userfaultfd: a thread the privileged part waits for may
 * itself wait for one of its events to be read).
 */
#include "config.h"

#include <errno.h>
#include <poll.h>
#include <string.h>
#include <unistd.h>

#include "daemon/imsg.h"
#include "daemon/log.h"
#include "daemon/privop.h"

static int sock = -1;
static uint64_t next_seq = 1;

void
privop_init(int fd)
{
	sock = fd;
}

void
privop_close(void)
{
	if (sock >= 0)
		close(sock);
	sock = -1;
}

int
privop_available(void)
{
	return sock >= 0;
}

int
privop_route(uint64_t grant)
{
	if (sock < 0)
		return 0;
	if (grant != 0)
		return 1;
	errno = EPERM;
	return -1;
}

/* Waits for the answer to request seq, draining meanwhile. */
static int
await(uint64_t seq, struct imsg *rep, const struct privop_drain *dr)
{
	for (;;) {
		struct pollfd p[2] = {
			{.fd = sock, .events = POLLIN},
			{.fd = dr ? dr->fd : -1, .events = POLLIN}};
		int r;

		if (poll(p, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			return -1;
		}
		if (p[1].revents & POLLIN)
			dr->drain(dr->arg);
		if (!(p[0].revents & (POLLIN | POLLHUP | POLLERR)))
			continue;
		if ((r = imsg_recv(sock, rep)) <= 0) {
			if (r < 0 && (errno == EAGAIN || errno == EBADMSG))
				continue;
			errno = EPIPE; /* the privileged part is gone */
			return -1;
		}
		if (rep->h.type == PRIVOP_REPLY && rep->h.id == seq)
			return 0;
		log_warnx("privop: an answer to no request (%u): dropped",
			  (unsigned)rep->h.type);
		imsg_clear(rep);
	}
}

int
privop_call(uint32_t type, uint64_t grant, const void *req, size_t len,
	    const int *fds, size_t nfds, struct imsg *rep,
	    const struct privop_drain *dr)
{
	struct privop_hdr h = {.grant = grant, .type = type};
	uint8_t buf[sizeof(h) + PRIVOP_REQ_MAX];
	uint64_t seq = next_seq++;

	memset(rep, 0, sizeof(*rep));
	for (int i = 0; i < IMSG_FDS; i++)
		rep->fd[i] = -1;
	if (sock < 0 || len > PRIVOP_REQ_MAX) {
		errno = sock < 0 ? ENOSYS : EMSGSIZE;
		return -1;
	}
	memcpy(buf, &h, sizeof(h));
	if (len > 0)
		memcpy(buf + sizeof(h), req, len);
	if (imsg_send(sock, PRIVOP_REQUEST, seq, 0, buf, sizeof(h) + len, fds,
		      nfds) < 0 ||
	    await(seq, rep, dr) < 0)
		return -1;
	if (rep->h.err != 0) {
		errno = rep->h.err;
		return -1;
	}
	return 0;
}
