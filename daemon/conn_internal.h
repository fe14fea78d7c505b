/*
 * What conn.c, conn_read.c and conn_write.c share: the connection itself
 * and its limits.
 * Not for the rest of the daemon, which has conn.h; included after it (its
 * callback types are used here), never including it back.
 */
#ifndef UFFDD_CONN_INTERNAL_H
#define UFFDD_CONN_INTERNAL_H

#include <stdint.h>
#include <sys/queue.h>
#include <sys/time.h>
#include <sys/types.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>

#include "proto/frame.h"

/*
 * Reading stops at this much unprocessed input, so a fast sender cannot grow
 * our memory; it must exceed the largest frame.
 */
#define CONN_READ_HIGH (FRAME_HDR_LEN + FRAME_MSG_MAX + FRAME_DATA_MAX + 4096)
/*
 * A peer that sends requests but does not read the answers would grow our
 * output without bound: past this much unsent output no further frame is
 * handled until it is all sent. This bounds the requests in flight on every
 * connection (and, with CONN_READ_HIGH, what a peer can make us buffer).
 */
#define CONN_OUT_MAX (32u << 20)
/* How long a finished connection waits for the peer to close its side. */
#define CONN_LINGER_SECS 10
/*
 * How long a finished connection may take to send what it has queued and
 * see the peer close: past that it is closed anyway (a peer that stopped
 * reading, or a TLS handshake that never finished, would keep it forever).
 */
#define CONN_FINISH_SECS (3 * CONN_LINGER_SECS)
/* One read beyond the bufferevent's own (see conn_fill()). */
#define CONN_FILL_MAX (256u << 10)
/*
 * A read into the sink takes at most this much of what follows (the next
 * frame's header and message): the rest waits in the socket for the sink.
 */
#define CONN_SINK_TAIL 4096
/* Frames read into the sink and handled in one read event, at most. */
#define CONN_SINK_ROUNDS 2
/*
 * One write a loop round: libevent's default, 16 KiB, costs the bulk lane
 * an epoll round per 16 KiB; much more keeps the loop (and a demand
 * request) waiting while loopback TCP delivers it inside the write.
 */
#define CONN_WRITE_MAX (256u << 10)

/* The owner's callbacks and their arguments (conn_new(), conn_set_*()). */
struct conn_owner {
	conn_frame_cb on_frame;
	conn_close_cb on_close;
	conn_drain_cb on_drain;
	void *arg;
	conn_closed_cb on_closed; /* conn_on_closed() */
	void *closed_arg;
};

/* How the conn reads: its own read event, and what holds reading. */
struct conn_reading {
	struct event *rd;    /* own read event (conn_read_direct()), or NULL */
	struct timeval idle; /* the direct reader's read timeout (0: none) */
	int full; /* TLS input at CONN_READ_HIGH: reading held (conn_bound) */
	/*
	 * The last TLS read stopped at OpenSSL's "want more" (or an error),
	 * not at the space it had: whatever OpenSSL still holds is at most a
	 * record's beginning, which the socket's next bytes announce.
	 */
	int tls_drained;
	size_t fill_max; /* conn_set_io_max(): bytes a read round takes */
};

/*
 * conn_write.c: bio, a TLS connection writing through our BIO
 * (tls_batch_attach()), which holds what the socket did not take; flush
 * writes it out when the socket takes more. batch: conn_batch_writes(),
 * its records gathered into large writes (tls_batch()).
 */
struct conn_tls_write {
	int bio;
	int full; /* the BIO held too much: the bufferevent writes not */
	int batch;
	uint64_t peer_rekeys; /* the peer's key updates its opener took */
	struct event *flush;
};

/*
 * conn_set_sink(): buf, cap bytes, for frames of type. The input's first
 * frame has len bytes of data (0: none), got of them at data (while len
 * is not 0): the buffer that was the sink when the frame began, which a
 * later conn_set_sink() does not move (only a NULL sink drops it);
 * data_sunk: the frame handed to the owner has its data there;
 * data_left: its data not taken yet.
 */
struct conn_sink {
	size_t data_left;
	uint8_t *buf, *data;
	size_t cap, len, got;
	uint16_t type;
	int data_sunk, done;   /* done: conn_fill() sank a frame */
	struct evbuffer *held; /* a header and message moving aside */
};

/*
 * A connection. Its state is grouped by concern (the owner's callbacks,
 * reading, TLS writing, the sink), each a struct of its own, so that the
 * struct stays small enough to read whole.
 */
struct conn {
	TAILQ_ENTRY(conn) orphan; /* in orphans while finishing */
	struct bufferevent *bev;
	struct event *resume;
	struct event *deadline; /* closes a finishing conn (conn_finish()) */
	struct conn_owner own;
	char name[96];
	int budget;
	int in_cb;
	int dead;
	int finishing;
	int lingering;
	int prio;
	int blocked; /* handling paused until the output drains */
	/* The bufferevent broke: why, reported after the input is handled. */
	int failing;
	char fail_why[128];
	int direct;
	int paused;
	int stalled; /* the owner is not done with the last frame (conn_stall) */
	struct conn_reading rx;
	/*
	 * The socket carries TLS records: nothing may write it but the
	 * bufferevent, and it is read through OpenSSL only (by the
	 * bufferevent, or the direct reader), so the plaintext shortcuts
	 * below stay off.
	 */
	int tls;
	int tls_up; /* its handshake done (metrics) */
	struct conn_tls_write tw;
	struct conn_sink sk;
};

/*
 * conn_read.c: EOF or an error, reported once the input read before is
 * handled.
 */
void conn_set_failing(struct conn *, const char *why);
/*
 * conn_read.c: reads what the socket (and OpenSSL) holds into the input,
 * or a frame's data into the sink, within the round's limits. The bytes
 * taken, or -1 at EOF or an error with nothing taken (errno set; 0: EOF).
 */
ssize_t conn_fill(struct conn *);
/*
 * conn_write.c, for conn.c's write callbacks: a batched TLS sender's
 * records out once the output is empty (1: nothing held), the key updates
 * to log, and the BIO's "full" hook.
 */
int conn_push(struct conn *);
void conn_tls_rekeys(struct conn *);
void conn_wbio_full(void *);

#endif
