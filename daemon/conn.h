/*
 * A framed connection over a libevent bufferevent: peer lanes and control
 * clients alike. Frames are handed to the owner whole; page bytes stay at
 * the head of the input buffer until the owner takes them.
 */
#ifndef UFFDD_CONN_H
#define UFFDD_CONN_H

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <sys/uio.h>

#include "proto/frame.h"

struct conn;

/*
 * Unsent output past which a connection stops handling frames (max-output):
 * this bounds the requests in flight on every connection.
 */
extern size_t conn_out_max;

/*
 * A whole frame has arrived. The owner may take up to hdr->data_len bytes
 * with conn_take_data(); what it leaves is dropped. It may free the conn.
 */
typedef void (*conn_frame_cb)(struct conn *, const struct frame_hdr *,
			      ProtobufCMessage *, void *arg);
/* The connection broke or the peer misbehaved; the owner frees it. */
typedef void (*conn_close_cb)(struct conn *, const char *why, void *arg);
/* The output buffer drained below the mark set with conn_set_drain(). */
typedef void (*conn_drain_cb)(struct conn *, void *arg);
/* The connection's socket is closed (see conn_on_closed()). */
typedef void (*conn_closed_cb)(void *arg);

struct conn *conn_new(struct event_base *base, struct bufferevent *bev,
		      const char *name, conn_frame_cb, conn_close_cb,
		      void *arg);
/* Frees now, or once the current callback returns. */
void conn_free(struct conn *);
/* Sends what is queued, then frees itself; the owner hears nothing more. */
void conn_finish(struct conn *);
/* At exit: frees the connections conn_finish() left sending (no owner). */
void conn_free_finishing(void);
void conn_set_owner(struct conn *, conn_frame_cb, conn_close_cb, void *arg);
/*
 * Calls cb(arg) once, when the socket is closed, whoever closes it: also
 * after conn_finish(), when the owner hears nothing else (cb NULL: none).
 * Whoever counts connections counts them until then.
 */
void conn_on_closed(struct conn *, conn_closed_cb cb, void *arg);
void conn_set_priority(struct conn *, int prio);
/* At most n frames a callback, the rest after other events (0: no limit). */
void conn_set_budget(struct conn *, int n);
/* Stops handing frames to the owner (on: 1) or starts again (on: 0). */
void conn_pause(struct conn *, int on);
/*
 * The owner goes on with the frame it was just handed after other events
 * (on: 1): no frame after it is handed over until conn_stall(c, 0). The
 * socket is still read meanwhile; conn_pause() holds either way.
 */
void conn_stall(struct conn *, int on);
/* Bytes one write or one read round may take (0: the default, 256 KiB). */
void conn_set_io_max(struct conn *, size_t n);
/*
 * A TLS lane that mostly sends: its records go to the socket a write
 * round's bytes at a time, not one by one. Nothing for plaintext.
 */
void conn_batch_writes(struct conn *);
/* Whether our BIO seals c's TLS records (tls_batch_sealed()). */
int conn_tls_sealed(struct conn *);
/* Whether the daemon opens c's TLS records (tls_opens()). */
int conn_tls_opened(struct conn *);
void conn_set_drain(struct conn *, conn_drain_cb, size_t lowmark);
/* Read timeout in seconds (0: none): a silent peer is a broken one. */
void conn_set_timeout(struct conn *, int secs);
const char *conn_name(const struct conn *);
/* A TLS connection whose handshake is not done yet: 1, else 0. */
int conn_tls_pending(const struct conn *);
int conn_fd(const struct conn *);

int conn_send(struct conn *, uint16_t type, const ProtobufCMessage *msg);
/* The same with the message already packed (len bytes), not read here. */
int conn_send_packed(struct conn *, uint16_t type, const uint8_t *msg,
		     size_t len);
/* Queues a PAGE_DATA header; the caller appends data_len bytes itself. */
int conn_send_data_hdr(struct conn *, const ProtobufCMessage *msg,
		       uint32_t data_len);
int conn_send_error(struct conn *, uint32_t code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
struct evbuffer *conn_output(struct conn *);
size_t conn_output_len(struct conn *);
/* Writes queued output now rather than on the next loop iteration. */
void conn_flush(struct conn *);
/*
 * Latency-sensitive lanes: frames go to the socket in the call that sends
 * them when nothing is queued before them (see conn_writev()).
 */
void conn_set_direct(struct conn *);
/* Reads the socket itself, not through the bufferevent (see conn.c). */
void conn_read_direct(struct conn *);
/*
 * A direct reader takes the data of a frame of `type` (at most cap bytes)
 * from the socket straight into buf, while the owner has not stalled the
 * conn: buf is the owner's until conn_stall(c, 0) once it stalled, and
 * conn_take_data() into buf then copies nothing. NULL: none. A new buf is
 * for the frames after the one in hand: that one's data stays where it
 * began (a NULL sink drops it).
 */
void conn_set_sink(struct conn *, uint16_t type, uint8_t *buf, size_t cap);
/* Sends iov[0..n) as one piece of output, directly if the conn allows. */
int conn_writev(struct conn *, const struct iovec *iov, int n);
/* Takes n bytes of the current frame's data into dst. */
int conn_take_data(struct conn *, void *dst, size_t n);
#endif
