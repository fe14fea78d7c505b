/* Frame header coding, message (un)packing and blocking frame I/O. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>

#include "proto/frame.h"

static const struct frame_type_entry {
	uint16_t type;
	const char *name;
	const ProtobufCMessageDescriptor *desc;
} frame_types[] = {
	{FRAME_HELLO, "HELLO", &uffdd__hello__descriptor},
	{FRAME_REGIONS, "REGIONS", &uffdd__region_table__descriptor},
	{FRAME_PAGE_REQUEST, "PAGE_REQUEST", &uffdd__page_request__descriptor},
	{FRAME_PAGE_DATA, "PAGE_DATA", &uffdd__page_data__descriptor},
	{FRAME_COMPLETE, "COMPLETE", &uffdd__complete__descriptor},
	{FRAME_ERROR, "ERROR", &uffdd__error__descriptor},
	{FRAME_HAVE, "HAVE", &uffdd__page_bitmap__descriptor},
	{FRAME_PING, "PING", &uffdd__ping__descriptor},
	{FRAME_SWITCHOVER, "SWITCHOVER", &uffdd__switchover__descriptor},
	{FRAME_ROUND_SYNC, "ROUND_SYNC", &uffdd__ping__descriptor},
	{FRAME_CTL_EXPORT, "EXPORT", &uffdd__export_request__descriptor},
	{FRAME_CTL_EXPORT_REPLY, "EXPORT_REPLY",
	 &uffdd__export_reply__descriptor},
	{FRAME_CTL_ATTACH, "ATTACH", &uffdd__attach_request__descriptor},
	{FRAME_CTL_ATTACH_REPLY, "ATTACH_REPLY",
	 &uffdd__attach_reply__descriptor},
	{FRAME_CTL_STATUS, "STATUS", &uffdd__status_request__descriptor},
	{FRAME_CTL_STATUS_REPLY, "STATUS_REPLY",
	 &uffdd__status_reply__descriptor},
	{FRAME_CTL_SNAPSHOT, "SNAPSHOT", &uffdd__snapshot_request__descriptor},
	{FRAME_CTL_SNAPSHOT_READY, "SNAPSHOT_READY",
	 &uffdd__snapshot_reply__descriptor},
	{FRAME_CTL_SNAPSHOT_WRITTEN, "SNAPSHOT_WRITTEN",
	 &uffdd__snapshot_reply__descriptor},
	{FRAME_CTL_SNAPSHOT_DONE, "SNAPSHOT_DONE",
	 &uffdd__snapshot_reply__descriptor},
	{FRAME_CTL_FILE_READY, "FILE_READY", &uffdd__file_ready__descriptor},
	{FRAME_CTL_GO, "GO", &uffdd__go_request__descriptor},
	{FRAME_CTL_GO_REPLY, "GO_REPLY", &uffdd__go_reply__descriptor},
	{FRAME_CTL_CANCEL, "CANCEL", &uffdd__go_request__descriptor},
	{FRAME_CTL_CANCEL_REPLY, "CANCEL_REPLY", &uffdd__go_reply__descriptor},
	{FRAME_CTL_RELEASE, "RELEASE", &uffdd__go_request__descriptor},
	{FRAME_BULK_GO, "BULK_GO", &uffdd__ping__descriptor},
	{FRAME_COMMIT, "COMMIT", &uffdd__commit__descriptor},
	{FRAME_COMMIT_ACK, "COMMIT_ACK", &uffdd__commit__descriptor},
	{FRAME_CTL_RELEASE_REPLY, "RELEASE_REPLY",
	 &uffdd__go_reply__descriptor},
	{FRAME_CTL_METRICS, "METRICS", &uffdd__metrics_request__descriptor},
	{FRAME_CTL_METRICS_REPLY, "METRICS_REPLY",
	 &uffdd__metrics_reply__descriptor},
};

/* The table entry of a frame type, NULL for an unknown type. */
static const struct frame_type_entry *
frame_type_find(uint16_t type)
{
	for (size_t i = 0; i < sizeof(frame_types) / sizeof(frame_types[0]);
	     i++)
		if (frame_types[i].type == type)
			return &frame_types[i];
	return NULL;
}

const ProtobufCMessageDescriptor *
frame_descriptor(uint16_t type)
{
	const struct frame_type_entry *e = frame_type_find(type);

	return e ? e->desc : NULL;
}

const char *
frame_type_name(uint16_t type)
{
	const struct frame_type_entry *e = frame_type_find(type);

	return e ? e->name : "UNKNOWN";
}

void
frame_hdr_encode(uint8_t out[FRAME_HDR_LEN], const struct frame_hdr *h)
{
	uint16_t t = htons(h->type), f = htons(h->flags);
	uint32_t m = htonl(h->msg_len), d = htonl(h->data_len);

	memcpy(out, &t, 2);
	memcpy(out + 2, &f, 2);
	memcpy(out + 4, &m, 4);
	memcpy(out + 8, &d, 4);
}

int
frame_hdr_decode(const uint8_t in[FRAME_HDR_LEN], struct frame_hdr *h,
		 const char **why)
{
	uint16_t t, f;
	uint32_t m, d;

	memcpy(&t, in, 2);
	memcpy(&f, in + 2, 2);
	memcpy(&m, in + 4, 4);
	memcpy(&d, in + 8, 4);
	h->type = ntohs(t);
	h->flags = ntohs(f);
	h->msg_len = ntohl(m);
	h->data_len = ntohl(d);
	if (frame_descriptor(h->type) == NULL) {
		*why = "unknown frame type";
		return -1;
	}
	if (h->flags != 0) {
		*why = "reserved header flags set";
		return -1;
	}
	if (h->msg_len > FRAME_MSG_MAX) {
		*why = "message longer than the frame limit";
		return -1;
	}
	if (h->data_len > FRAME_DATA_MAX) {
		*why = "page data longer than the frame limit";
		return -1;
	}
	if (h->data_len != 0 && h->type != FRAME_PAGE_DATA) {
		*why = "raw data after a frame that carries none";
		return -1;
	}
	return 0;
}

uint8_t *
frame_pack(uint16_t type, const ProtobufCMessage *msg, uint32_t data_len,
	   size_t *len)
{
	size_t mlen = protobuf_c_message_get_packed_size(msg);
	struct frame_hdr h = {
		.type = type, .msg_len = (uint32_t)mlen, .data_len = data_len};
	uint8_t *buf;

	if (mlen > FRAME_MSG_MAX || data_len > FRAME_DATA_MAX ||
	    msg->descriptor != frame_descriptor(type)) {
		errno = EINVAL;
		return NULL;
	}
	if ((buf = malloc(FRAME_HDR_LEN + mlen)) == NULL)
		return NULL;
	frame_hdr_encode(buf, &h);
	protobuf_c_message_pack(msg, buf + FRAME_HDR_LEN);
	*len = FRAME_HDR_LEN + mlen;
	return buf;
}

ProtobufCMessage *
frame_unpack(uint16_t type, const uint8_t *buf, size_t len)
{
	const ProtobufCMessageDescriptor *d = frame_descriptor(type);

	if (d == NULL || len > FRAME_MSG_MAX)
		return NULL;
	return protobuf_c_message_unpack(d, NULL, len, buf);
}

void
frame_free(ProtobufCMessage *msg)
{
	if (msg != NULL)
		protobuf_c_message_free_unpacked(msg, NULL);
}

/* Length of the valid UTF-8 sequence at s (RFC 3629), 0 if none. */
static size_t
utf8_len(const unsigned char *s)
{
	size_t n;
	unsigned cp;

	if (s[0] < 0x80)
		return 1;
	if (s[0] >= 0xc2 && s[0] <= 0xdf) {
		n = 2;
		cp = s[0] & 0x1f;
	} else if (s[0] >= 0xe0 && s[0] <= 0xef) {
		n = 3;
		cp = s[0] & 0x0f;
	} else if (s[0] >= 0xf0 && s[0] <= 0xf4) {
		n = 4;
		cp = s[0] & 0x07;
	} else {
		return 0;
	}
	for (size_t i = 1; i < n; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0; /* also stops at the terminating NUL */
		cp = cp << 6 | (s[i] & 0x3f);
	}
	/* Overlong forms, UTF-16 surrogates, past U+10FFFF. */
	if ((n == 3 && cp < 0x800) || (n == 4 && cp < 0x10000) ||
	    (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
		return 0;
	return n;
}

size_t
text_char_len(const char *s)
{
	const unsigned char *p = (const unsigned char *)s;
	size_t n = utf8_len(p);

	if (n == 1 && (*p < 0x20 || *p == 0x7f))
		return 0;
	/* C1 controls: some terminals take U+009B as an escape (CSI). */
	if (n == 2 && p[0] == 0xc2 && p[1] < 0xa0)
		return 0;
	return n;
}

long
text_bad_at(const char *s)
{
	for (const char *p = s; *p;) {
		size_t n = text_char_len(p);

		if (n == 0)
			return (long)(p - s);
		p += n;
	}
	return -1;
}

void
text_clean(char *s)
{
	while (*s) {
		size_t n = text_char_len(s);

		if (n == 0)
			*s++ = '?';
		else
			s += n;
	}
}

/* The i-th string or submessage of field f in msg (n: how many). */
static void **
field_items(ProtobufCMessage *msg, const ProtobufCFieldDescriptor *f, size_t *n)
{
	char *base = (char *)msg;

	if (f->flags & PROTOBUF_C_FIELD_FLAG_ONEOF &&
	    *(uint32_t *)(void *)(base + f->quantifier_offset) != f->id) {
		*n = 0;
		return NULL;
	}
	if (f->label == PROTOBUF_C_LABEL_REPEATED) {
		*n = *(size_t *)(void *)(base + f->quantifier_offset);
		return *(void ***)(void *)(base + f->offset);
	}
	*n = 1;
	return (void **)(void *)(base + f->offset);
}

void
frame_clean_strings(ProtobufCMessage *msg)
{
	if (msg == NULL)
		return;
	for (unsigned i = 0; i < msg->descriptor->n_fields; i++) {
		const ProtobufCFieldDescriptor *f = &msg->descriptor->fields[i];
		void **items;
		size_t n;

		if (f->type != PROTOBUF_C_TYPE_STRING &&
		    f->type != PROTOBUF_C_TYPE_MESSAGE)
			continue;
		items = field_items(msg, f, &n);
		for (size_t k = 0; k < n; k++) {
			if (items[k] == NULL)
				continue;
			if (f->type == PROTOBUF_C_TYPE_STRING)
				text_clean(items[k]);
			else
				frame_clean_strings(items[k]);
		}
	}
}

static int
write_all(int fd, const uint8_t *p, size_t n)
{
	while (n > 0) {
		ssize_t w = write(fd, p, n);

		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -1;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

static int
read_all(int fd, uint8_t *p, size_t n)
{
	while (n > 0) {
		ssize_t r = read(fd, p, n);

		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -1;
		if (r == 0) {
			errno = ECONNRESET;
			return -1;
		}
		p += r;
		n -= (size_t)r;
	}
	return 0;
}

int
frame_send_fd(int fd, uint16_t type, const ProtobufCMessage *msg)
{
	size_t len;
	uint8_t *buf = frame_pack(type, msg, 0, &len);
	int rc;

	if (buf == NULL)
		return -1;
	rc = write_all(fd, buf, len);
	free(buf);
	return rc;
}

int
frame_recv_fd(int fd, uint16_t *type, ProtobufCMessage **msg)
{
	uint8_t hdr[FRAME_HDR_LEN], *buf;
	struct frame_hdr h;
	const char *why;

	if (read_all(fd, hdr, sizeof(hdr)) < 0)
		return -1;
	if (frame_hdr_decode(hdr, &h, &why) < 0 || h.data_len != 0) {
		errno = EPROTO;
		return -1;
	}
	if ((buf = malloc(h.msg_len ? h.msg_len : 1)) == NULL)
		return -1;
	if (read_all(fd, buf, h.msg_len) < 0) {
		free(buf);
		return -1;
	}
	*msg = frame_unpack(h.type, buf, h.msg_len);
	free(buf);
	if (*msg == NULL) {
		errno = EPROTO;
		return -1;
	}
	*type = h.type;
	return 0;
}
