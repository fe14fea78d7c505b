/*
 * qmp: a small client for QEMU's machine protocol. One connection per QEMU
 * on its QMP unix socket; every message is one JSON object a line, parsed
 * with json-c. Events that arrive while a command waits for its return are
 * kept, in order, for qmp_wait_event().
 */
#include "config.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "client/qmp.h"

#define QMP_MAX_LINE (16 << 20)

struct qmp {
	char *path;
	int fd;
	pid_t pid;
	char *buf; /* received bytes not yet split into lines */
	size_t len, cap;
	json_object **events; /* events not yet asked for */
	size_t nevents;
	unsigned long next_id; /* of the next command */
};

/* Milliseconds on the monotonic clock, for timeouts. */
static long
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000L + ts.tv_nsec / 1000000L;
}

/*
 * Reads the next message, waiting at most timeout_ms (-1: forever).
 * Returns NULL on timeout (errno ETIMEDOUT) or error (reported).
 */
static json_object *
qmp_read(struct qmp *q, int timeout_ms)
{
	long deadline = timeout_ms < 0 ? -1 : now_ms() + timeout_ms;

	for (;;) {
		char *nl = memchr(q->buf, '\n', q->len);
		struct pollfd pfd = {.fd = q->fd, .events = POLLIN};
		ssize_t n;
		int left;

		if (nl != NULL) {
			json_object *o;

			*nl = '\0';
			o = json_tokener_parse(q->buf);
			q->len -= (size_t)(nl + 1 - q->buf);
			memmove(q->buf, nl + 1, q->len);
			if (o == NULL ||
			    !json_object_is_type(o, json_type_object)) {
				fprintf(stderr,
					"uffd-client: %s: not a QMP "
					"message\n",
					q->path);
				json_object_put(o);
				errno = EPROTO;
				return NULL;
			}
			return o;
		}
		left = deadline < 0 ? -1 : (int)(deadline - now_ms());
		if (deadline >= 0 && left <= 0) {
			errno = ETIMEDOUT;
			return NULL;
		}
		if (poll(&pfd, 1, left) < 0) {
			if (errno == EINTR)
				continue;
			return NULL;
		}
		if (!(pfd.revents & (POLLIN | POLLHUP | POLLERR)))
			continue;
		if (q->cap - q->len < 4096) {
			char *nb;

			if (q->cap >= QMP_MAX_LINE) {
				fprintf(stderr,
					"uffd-client: %s: QMP line "
					"too long\n",
					q->path);
				errno = EPROTO;
				return NULL;
			}
			nb = realloc(q->buf, q->cap * 2);
			if (nb == NULL)
				return NULL;
			q->buf = nb;
			q->cap *= 2;
		}
		n = read(q->fd, q->buf + q->len, q->cap - q->len - 1);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			fprintf(stderr, "uffd-client: %s: QEMU closed QMP\n",
				q->path);
			errno = ECONNRESET;
			return NULL;
		}
		q->len += (size_t)n;
	}
}

/*
 * Sends one message and its newline in one write, without SIGPIPE: QEMU
 * acts on a command as soon as its JSON closes, and after "quit" it may
 * hang up before a separate newline arrives.
 */
static int
qmp_send(struct qmp *q, json_object *msg)
{
	const char *s =
		json_object_to_json_string_ext(msg, JSON_C_TO_STRING_PLAIN);
	size_t len = strlen(s), off = 0;
	char *line = malloc(len + 2);

	if (line == NULL) {
		fprintf(stderr, "uffd-client: out of memory\n");
		exit(1);
	}
	memcpy(line, s, len);
	line[len++] = '\n';
	while (off < len) {
		ssize_t n = send(q->fd, line + off, len - off, MSG_NOSIGNAL);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			fprintf(stderr, "uffd-client: QMP %s: %s\n", q->path,
				strerror(errno));
			free(line);
			return -1;
		}
		off += (size_t)n;
	}
	free(line);
	return 0;
}

/* Connects, reads the greeting and leaves capabilities negotiation mode. */
struct qmp *
qmp_open(const char *path)
{
	struct sockaddr_un sun = {.sun_family = AF_UNIX};
	struct ucred cred;
	socklen_t clen = sizeof(cred);
	struct qmp *q;
	json_object *o;

	if (strlen(path) >= sizeof(sun.sun_path)) {
		fprintf(stderr, "uffd-client: %s: path too long\n", path);
		return NULL;
	}
	strcpy(sun.sun_path, path);
	q = calloc(1, sizeof(*q));
	if (q == NULL || (q->path = strdup(path)) == NULL ||
	    (q->buf = malloc(65536)) == NULL) {
		fprintf(stderr, "uffd-client: out of memory\n");
		exit(1);
	}
	q->cap = 65536;
	q->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (q->fd < 0 ||
	    connect(q->fd, (struct sockaddr *)&sun, sizeof(sun)) < 0) {
		fprintf(stderr,
			"uffd-client: QMP %s: %s: is QEMU running with "
			"-qmp unix:%s,server=on,wait=off?\n",
			path, strerror(errno), path);
		goto fail;
	}
	/* QEMU's pid: the peer of its own QMP socket. */
	if (getsockopt(q->fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) < 0) {
		fprintf(stderr, "uffd-client: QMP %s: SO_PEERCRED: %s\n", path,
			strerror(errno));
		goto fail;
	}
	q->pid = cred.pid;
	o = qmp_read(q, 10000);
	if (o == NULL || !json_object_object_get_ex(o, "QMP", NULL)) {
		fprintf(stderr, "uffd-client: QMP %s: no greeting\n", path);
		json_object_put(o);
		goto fail;
	}
	json_object_put(o);
	if (qmp_execute(q, "qmp_capabilities", NULL, NULL) < 0)
		goto fail;
	return q;
fail:
	qmp_close(q);
	return NULL;
}

/* Hangs up on QEMU, and drops the events nobody asked for. */
void
qmp_close(struct qmp *q)
{
	if (q == NULL)
		return;
	if (q->fd >= 0)
		close(q->fd);
	for (size_t i = 0; i < q->nevents; i++)
		json_object_put(q->events[i]);
	free(q->events);
	free(q->buf);
	free(q->path);
	free(q);
}

/* The QEMU process behind the socket (SO_PEERCRED at qmp_open()). */
pid_t
qmp_pid(const struct qmp *q)
{
	return q->pid;
}

/* The socket's path, to name this QEMU in messages. */
const char *
qmp_path(const struct qmp *q)
{
	return q->path;
}

/* An event that came while a command waited: kept for qmp_wait_event(). */
static void
keep_event(struct qmp *q, json_object *o)
{
	json_object **ne = realloc(q->events, (q->nevents + 1) * sizeof(*ne));

	if (ne == NULL) {
		fprintf(stderr, "uffd-client: out of memory\n");
		exit(1);
	}
	q->events = ne;
	q->events[q->nevents++] = o;
}

/*
 * Runs one command (args may be NULL; its reference is taken). On success
 * returns 0 and, when result is not NULL, a reference to the "return"
 * value; a QMP error is printed with the command's name and returns -1.
 */
int
qmp_execute(struct qmp *q, const char *cmd, json_object *args,
	    json_object **result)
{
	json_object *msg = json_object_new_object(), *o, *v;
	char id[32];

	/*
	 * Tagged, and a reply tagged otherwise is not ours: the late answer
	 * to a command given up on (no answer within 60 s) must not be
	 * taken for the answer to the next one.
	 */
	snprintf(id, sizeof(id), "uffd-client-%lu", ++q->next_id);
	json_object_object_add(msg, "execute", json_object_new_string(cmd));
	if (args != NULL)
		json_object_object_add(msg, "arguments", args);
	json_object_object_add(msg, "id", json_object_new_string(id));
	if (qmp_send(q, msg) < 0) {
		json_object_put(msg);
		return -1;
	}
	json_object_put(msg);
	for (;;) {
		o = qmp_read(q, 60000);
		if (o == NULL) {
			fprintf(stderr,
				"uffd-client: QMP %s: no answer to %s\n",
				q->path, cmd);
			return -1;
		}
		if (json_object_object_get_ex(o, "event", NULL)) {
			keep_event(q, o);
			continue;
		}
		if (json_object_object_get_ex(o, "id", &v) &&
		    strcmp(json_object_get_string(v), id) != 0) {
			json_object_put(o); /* an earlier command's */
			continue;
		}
		if (json_object_object_get_ex(o, "error", &v)) {
			json_object *d;

			fprintf(stderr, "uffd-client: QMP %s: %s: %s\n",
				q->path, cmd,
				json_object_object_get_ex(v, "desc", &d)
					? json_object_get_string(d)
					: json_object_to_json_string(v));
			json_object_put(o);
			return -1;
		}
		if (json_object_object_get_ex(o, "return", &v)) {
			if (result != NULL)
				*result = json_object_get(v);
			json_object_put(o);
			return 0;
		}
		json_object_put(o); /* neither: ignore */
	}
}

/*
 * Waits for the event NAME (kept or new), at most timeout_ms (-1 forever).
 * Returns 0 with a reference to its "data" when data is not NULL, -1 on
 * timeout (errno ETIMEDOUT) or a lost connection.
 */
int
qmp_wait_event(struct qmp *q, const char *name, int timeout_ms,
	       json_object **data)
{
	long deadline = timeout_ms < 0 ? -1 : now_ms() + timeout_ms;
	json_object *o, *e;
	size_t i = 0;

	for (;;) {
		if (i < q->nevents) {
			o = q->events[i];
		} else {
			int left =
				deadline < 0 ? -1 : (int)(deadline - now_ms());

			if (deadline >= 0 && left <= 0) {
				errno = ETIMEDOUT;
				return -1;
			}
			o = qmp_read(q, left);
			if (o == NULL)
				return -1;
			if (!json_object_object_get_ex(o, "event", NULL)) {
				json_object_put(o); /* a stray return */
				continue;
			}
			keep_event(q, o);
		}
		if (json_object_object_get_ex(o, "event", &e) &&
		    strcmp(json_object_get_string(e), name) == 0) {
			if (data != NULL) {
				json_object *d = NULL;

				json_object_object_get_ex(o, "data", &d);
				*data = d ? json_object_get(d) : NULL;
			}
			json_object_put(o);
			q->nevents--;
			memmove(&q->events[i], &q->events[i + 1],
				(q->nevents - i) * sizeof(*q->events));
			return 0;
		}
		i++;
	}
}
