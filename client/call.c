/*
 * uffd-client's line to a daemon: its control socket, found at
 * control_path, and one request and its reply at a time over it.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "client/client.h"
#include "proto/frame.h"

const char *control_path;
int quiet_connect;

/* A wrong command line: its usage, and exit status 2. */
void
die_usage(const char *u)
{
	fprintf(stderr, "usage: uffd-client [--control PATH] %s\n", u);
	exit(2);
}

/* Connects to the daemon at control_path; -1 (reported) when it cannot. */
int
connect_daemon_try(void)
{
	struct sockaddr_un sun = {.sun_family = AF_UNIX};
	int fd;

	if (strlen(control_path) >= sizeof(sun.sun_path)) {
		fprintf(stderr, "uffd-client: control socket path too long\n");
		return -1;
	}
	strcpy(sun.sun_path, control_path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sun, sizeof(sun)) < 0) {
		if (quiet_connect)
			;
		else if (errno == ENOENT || errno == ECONNREFUSED)
			fprintf(stderr,
				"uffd-client: uffdd is not running (no "
				"daemon at %s): start it (systemctl start "
				"uffdd) or point --control/UFFDD_CONTROL at "
				"its socket\n",
				control_path);
		else if (errno == EACCES || errno == EPERM)
			fprintf(stderr,
				"uffd-client: %s: permission denied: "
				"the control socket is for root\n",
				control_path);
		else
			fprintf(stderr, "uffd-client: %s: %s\n", control_path,
				strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	return fd;
}

/* Connects to the daemon at control_path; exits when it cannot. */
int
connect_daemon(void)
{
	int fd = connect_daemon_try();

	if (fd < 0)
		exit(1);
	return fd;
}

/*
 * Sends a request and waits for its reply. An Error reply is printed and
 * returns NULL (*answered 1, or 2 for ERR_BUSY: the daemon's engine is
 * being restarted); so does a broken connection (*answered 0). Every string of the reply
 * (reasons, region names, peers: some a peer's words) is made printable
 * UTF-8 first, control characters and invalid bytes '?' (text_clean()),
 * as the daemon's log has them: nothing reaches the terminal raw.
 */
ProtobufCMessage *
call_try(int fd, uint16_t type, const ProtobufCMessage *req, uint16_t want,
	 int *answered)
{
	ProtobufCMessage *rep;
	uint16_t got;

	if (answered)
		*answered = 0;
	if (frame_send_fd(fd, type, req) < 0 ||
	    frame_recv_fd(fd, &got, &rep) < 0) {
		fprintf(stderr, "uffd-client: uffdd at %s: %s\n", control_path,
			errno == ECONNRESET ? "closed the connection"
					    : strerror(errno));
		return NULL;
	}
	frame_clean_strings(rep);
	if (got == FRAME_ERROR) {
		fprintf(stderr, "uffd-client: %s\n",
			((Uffdd__Error *)rep)->message);
		if (answered)
			*answered =
				((Uffdd__Error *)rep)->code == ERR_BUSY ? 2 : 1;
		frame_free(rep);
		return NULL;
	}
	if (got != want) {
		fprintf(stderr, "uffd-client: unexpected %s reply\n",
			frame_type_name(got));
		frame_free(rep);
		return NULL;
	}
	return rep;
}

/* call_try() for commands that end at the first error. */
ProtobufCMessage *
call(int fd, uint16_t type, const ProtobufCMessage *req, uint16_t want)
{
	ProtobufCMessage *rep = call_try(fd, type, req, want, NULL);

	if (rep == NULL)
		exit(1);
	return rep;
}

int
send_byte_fd(int sock, char b, int fd)
{
	union {
		char buf[CMSG_SPACE(sizeof(int))];
		struct cmsghdr align;
	} u;
	struct iovec iov = {&b, 1};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};

	if (fd >= 0) {
		memset(&u, 0, sizeof(u));
		mh.msg_control = u.buf;
		mh.msg_controllen = sizeof(u.buf);
		CMSG_FIRSTHDR(&mh)->cmsg_level = SOL_SOCKET;
		CMSG_FIRSTHDR(&mh)->cmsg_type = SCM_RIGHTS;
		CMSG_FIRSTHDR(&mh)->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(CMSG_FIRSTHDR(&mh)), &fd, sizeof(int));
	}
	return sendmsg(sock, &mh, MSG_NOSIGNAL) == 1 ? 0 : -1;
}

/*
 * call() for a request that takes an image (export and attach --image):
 * the file is opened here, read-only with the caller's own rights (the
 * daemon never opens a path for a client), and handed over when the
 * daemon says FILE_READY. Exits on any error.
 */
ProtobufCMessage *
call_with_file(int sock, uint16_t type, const ProtobufCMessage *req,
	       uint16_t want, const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	ProtobufCMessage *rep;
	uint16_t got;

	if (fd < 0) {
		fprintf(stderr, "uffd-client: %s: %s\n", path, strerror(errno));
		exit(1);
	}
	rep = call(sock, type, req, FRAME_CTL_FILE_READY);
	frame_free(rep);
	if (send_byte_fd(sock, 'F', fd) < 0 ||
	    frame_recv_fd(sock, &got, &rep) < 0) {
		fprintf(stderr, "uffd-client: uffdd at %s: %s\n", control_path,
			errno == ECONNRESET ? "closed the connection"
					    : strerror(errno));
		exit(1);
	}
	close(fd);
	frame_clean_strings(rep);
	if (got == FRAME_ERROR) {
		fprintf(stderr, "uffd-client: %s\n",
			((Uffdd__Error *)rep)->message);
		exit(1);
	}
	if (got != want) {
		fprintf(stderr, "uffd-client: unexpected %s reply\n",
			frame_type_name(got));
		exit(1);
	}
	return rep;
}
