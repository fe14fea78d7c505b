/*
 * libFuzzer target: the daemon's frame reader (daemon/conn.c) on a byte
 * stream from a peer or control client, through a libevent bufferevent
 * pair. Frames that arrive are handed to a handler that takes part of their
 * page data, as the roles do; the connection must close on bad input and
 * never read past what it was given.
 */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <event2/bufferevent.h>
#include <event2/event.h>

#include "daemon/conn.h"
#include "daemon/log.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int closed;

static void
on_frame(struct conn *c, const struct frame_hdr *h, ProtobufCMessage *msg,
	 void *arg)
{
	static uint8_t page[8192];
	size_t n = h->data_len < sizeof(page) ? h->data_len : sizeof(page);

	/* Take half of what fits, like a handler that stops early. */
	if (conn_take_data(c, page, n / 2) < 0)
		abort();
	if (conn_take_data(c, page, h->data_len + 1) == 0)
		abort(); /* more than the frame holds must be refused */
	if (h->type == FRAME_ERROR)
		conn_send_error(c, 3, "%s", "echo");
}

static void
on_close(struct conn *c, const char *why, void *arg)
{
	closed = 1;
	conn_free(c);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct event_base *b;
	struct bufferevent *pair[2];
	struct conn *c;

	if (b == NULL) {
		log_init(1, -1);
		b = event_base_new();
	}
	if (bufferevent_pair_new(b, BEV_OPT_CLOSE_ON_FREE, pair) < 0)
		abort();
	closed = 0;
	c = conn_new(b, pair[1], "fuzz", on_frame, on_close, NULL);
	bufferevent_write(pair[0], data, size);
	/* Pairs deliver through deferred callbacks: a few turns of the loop. */
	for (int i = 0; i < 8; i++)
		event_base_loop(b, EVLOOP_NONBLOCK);
	if (!closed)
		conn_free(c);
	for (int i = 0; i < 2; i++)
		event_base_loop(b, EVLOOP_NONBLOCK);
	bufferevent_free(pair[0]);
	return 0;
}
