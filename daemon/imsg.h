/*
 * Messages between the daemon's two parts (docs/privsep.md): the
 * privileged part and the engine. One message a datagram on a
 * SOCK_SEQPACKET socket pair: a fixed header, up to IMSG_INLINE bytes of
 * payload and up to IMSG_FDS descriptors (SCM_RIGHTS). A larger payload
 * travels in a sealed memfd, transparently.
 *
 * Every message is checked whole where it is read: its size against the
 * header, the descriptors it carries against the header's count; the
 * payload's meaning is checked by whoever takes it (imsg_payload()).
 */
#ifndef UFFDD_IMSG_H
#define UFFDD_IMSG_H

#include <stddef.h>
#include <stdint.h>

#define IMSG_INLINE (32u << 10)
#define IMSG_MAX (64u << 20) /* any payload, memfd included */
#define IMSG_FDS 8

struct imsg_hdr {
	uint32_t type;
	uint32_t len; /* payload bytes */
	uint64_t id;  /* a serial, a grant: the type says */
	int32_t err;  /* replies: 0, or an errno value */
	uint16_t nfd; /* descriptors that came with it */
	uint16_t big; /* the payload is in the last descriptor (a memfd) */
};

struct imsg {
	struct imsg_hdr h;
	uint8_t *data; /* h.len bytes (owned), NULL when none */
	int fd[IMSG_FDS];
	int nfd; /* descriptors still held: imsg_take_fd() takes them */
};

/*
 * Sends one message: 0, or -1 with errno set. fds are not closed (the
 * receiver gets copies).
 */
int imsg_send(int sock, uint32_t type, uint64_t id, int32_t err,
	      const void *data, size_t len, const int *fds, size_t nfds);
/*
 * Reads one message (blocking as the socket is): 1, 0 at EOF (the other
 * part is gone), -1 with errno set (EAGAIN: none yet; EBADMSG: a message
 * that does not hold together, dropped). m is cleared first.
 */
int imsg_recv(int sock, struct imsg *m);
/* Descriptor i of m, taken (the caller owns it), or -1 when there is none. */
int imsg_take_fd(struct imsg *m, int i);
/* Frees the payload and closes the descriptors not taken. */
void imsg_clear(struct imsg *m);
/*
 * The payload as a struct of exactly len bytes, or NULL: what a receiver
 * calls before it reads one of fixed size.
 */
const void *imsg_payload(const struct imsg *m, size_t len);

#endif
