/*
 * What the engine asks of the privileged part (docs/privsep.md): every
 * operation that needs privilege, on a process named by its grant (the
 * procref's grant), never by a pid. A request is answered before the
 * engine goes on.
 *
 * On the rpc socket pair (imsg.h): PRIVOP_REQUEST carries a privop_hdr
 * and the operation's struct, exactly; PRIVOP_REPLY an errno value (0:
 * done) and the operation's answer, with descriptors where it makes them.
 */
#ifndef UFFDD_PRIVOP_H
#define UFFDD_PRIVOP_H

#include <stddef.h>
#include <stdint.h>

struct imsg;

enum {
	PRIVOP_REQUEST = 1, /* engine -> privileged part */
	PRIVOP_REPLY = 2,   /* privileged part -> engine */
};

/* The operations. */
enum privop_type {
	PRIVOP_SIGNAL = 1, /* privop_signal: SIGSTOP, SIGCONT, SIGKILL */
};

struct privop_hdr {
	uint64_t grant;
	uint32_t type; /* enum privop_type */
	uint32_t pad;
};

/* The most a request's struct may hold. */
#define PRIVOP_REQ_MAX 4096

struct privop_signal {
	int32_t sig;
	int32_t pad;
};

/* The engine's end of the rpc socket pair. */
void privop_init(int sock);
void privop_close(void);
/* Whether there is a privileged part to ask (the engine runs). */
int privop_available(void);

/*
 * While a request is answered: drain(arg) whenever fd is readable (a
 * userfaultfd whose events a thread waits on).
 */
struct privop_drain {
	int fd;
	void (*drain)(void *);
	void *arg;
};

/*
 * Asks for operation type on grant with the request struct req (len
 * bytes) and descriptors fds; the answer in rep (imsg_clear() it). 0, or
 * -1 with errno set (the privileged part's errno, or EPIPE: it is gone).
 */
int privop_call(uint32_t type, uint64_t grant, const void *req, size_t len,
		const int *fds, size_t nfds, struct imsg *rep,
		const struct privop_drain *dr);

#endif
