/*
 * Frames out on a conn: a message, the header of a data frame, an error
 * (see conn.h); through conn_writev() and the output buffer alone.
 */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/uio.h>

#include <event2/buffer.h>

#include "daemon/conn.h"

int
conn_send(struct conn *c, uint16_t type, const ProtobufCMessage *msg)
{
	size_t len;
	uint8_t *buf = frame_pack(type, msg, 0, &len);
	struct iovec iov;
	int rc;

	if (buf == NULL)
		return -1;
	iov.iov_base = buf;
	iov.iov_len = len;
	rc = conn_writev(c, &iov, 1);
	free(buf);
	return rc;
}

int
conn_send_packed(struct conn *c, uint16_t type, const uint8_t *msg, size_t len)
{
	struct frame_hdr h = {.type = type, .msg_len = (uint32_t)len};
	uint8_t hdr[FRAME_HDR_LEN];
	struct iovec iov[2] = {{hdr, sizeof(hdr)}, {(void *)msg, len}};

	if (len > FRAME_MSG_MAX)
		return -1;
	frame_hdr_encode(hdr, &h);
	return conn_writev(c, iov, 2);
}

int
conn_send_data_hdr(struct conn *c, const ProtobufCMessage *msg,
		   uint32_t data_len)
{
	size_t len;
	uint8_t *buf = frame_pack(FRAME_PAGE_DATA, msg, data_len, &len);
	int rc;

	if (buf == NULL)
		return -1;
	rc = evbuffer_add(conn_output(c), buf, len);
	free(buf);
	return rc;
}

int
conn_send_error(struct conn *c, uint32_t code, const char *fmt, ...)
{
	Uffdd__Error e = UFFDD__ERROR__INIT;
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	e.code = code;
	e.message = msg;
	return conn_send(c, FRAME_ERROR, &e.base);
}
