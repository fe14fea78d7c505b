/* Unit tests for framing: header coding, limits, truncation, round trips. */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/socket.h>

#include "proto/frame.h"
#include "proto/range.h"
#include "tests/unit/unit.h"

static int
decode(uint16_t type, uint16_t flags, uint32_t mlen, uint32_t dlen)
{
	struct frame_hdr h = {type, flags, mlen, dlen}, out;
	uint8_t raw[FRAME_HDR_LEN];
	const char *why;

	frame_hdr_encode(raw, &h);
	return frame_hdr_decode(raw, &out, &why);
}

static void
test_header(void)
{
	struct frame_hdr h = {FRAME_PAGE_DATA, 0, 1234, 65536}, out;
	uint8_t raw[FRAME_HDR_LEN];
	const char *why = NULL;

	frame_hdr_encode(raw, &h);
	/* Big-endian on the wire. */
	CHECK(raw[0] == 0 && raw[1] == FRAME_PAGE_DATA);
	CHECK(raw[4] == 0 && raw[5] == 0 && raw[6] == 0x04 && raw[7] == 0xd2);
	CHECK(frame_hdr_decode(raw, &out, &why) == 0);
	CHECK(out.type == h.type && out.msg_len == 1234 &&
	      out.data_len == 65536);

	CHECK(decode(FRAME_HELLO, 0, 10, 0) == 0);
	CHECK(decode(999, 0, 10, 0) < 0); /* unknown type */
	CHECK(decode(0, 0, 10, 0) < 0);
	CHECK(decode(FRAME_HELLO, 1, 10, 0) < 0);		 /* flags */
	CHECK(decode(FRAME_HELLO, 0, FRAME_MSG_MAX, 0) == 0);	 /* at limit */
	CHECK(decode(FRAME_HELLO, 0, FRAME_MSG_MAX + 1, 0) < 0); /* oversized */
	CHECK(decode(FRAME_HELLO, 0, 0xffffffff, 0) < 0);
	CHECK(decode(FRAME_PAGE_DATA, 0, 10, FRAME_DATA_MAX) == 0);
	CHECK(decode(FRAME_PAGE_DATA, 0, 10, FRAME_DATA_MAX + 1) < 0);
	CHECK(decode(FRAME_HELLO, 0, 10, 4096) <
	      0); /* data on a non-data frame */
}

/*
 * COMMIT and COMMIT_ACK (version 2): known types carrying a Commit, no
 * page data; a Commit packed as COMMIT reads back whole, and is not a
 * HELLO.
 */
static void
test_commit(void)
{
	Uffdd__Commit c = UFFDD__COMMIT__INIT, *back;
	struct frame_hdr h;
	const char *why;
	uint8_t *buf;
	size_t len;

	CHECK(UFFDD_PROTO_VERSION == 2);
	CHECK(decode(FRAME_COMMIT, 0, 10, 0) == 0);
	CHECK(decode(FRAME_COMMIT_ACK, 0, 10, 0) == 0);
	CHECK(decode(FRAME_COMMIT, 0, 10, 4096) < 0);
	CHECK(frame_descriptor(FRAME_COMMIT) == &uffdd__commit__descriptor);
	CHECK(frame_descriptor(FRAME_COMMIT_ACK) == &uffdd__commit__descriptor);
	CHECK(strcmp(frame_type_name(FRAME_COMMIT_ACK), "COMMIT_ACK") == 0);
	c.seq = 3;
	c.pages = 1u << 20;
	c.checked_by = "writes+switches";
	buf = frame_pack(FRAME_COMMIT, &c.base, 0, &len);
	CHECK(buf != NULL);
	CHECK(frame_hdr_decode(buf, &h, &why) == 0 && h.type == FRAME_COMMIT);
	back = (Uffdd__Commit *)frame_unpack(h.type, buf + FRAME_HDR_LEN,
					     h.msg_len);
	CHECK(back != NULL && back->seq == 3 && back->pages == 1u << 20 &&
	      strcmp(back->checked_by, "writes+switches") == 0);
	frame_free(&back->base);
	CHECK(frame_pack(FRAME_HELLO, &c.base, 0, &len) == NULL);
	free(buf);
}

static void
test_roundtrip(void)
{
	Uffdd__PageData pd = UFFDD__PAGE_DATA__INIT, *back;
	struct frame_hdr h;
	const char *why;
	uint8_t *buf;
	size_t len;

	pd.region = 3;
	pd.page = 123456789;
	pd.npages = 16;
	pd.demand = 1;
	buf = frame_pack(FRAME_PAGE_DATA, &pd.base, 16 * 4096, &len);
	CHECK(buf != NULL);
	CHECK(frame_hdr_decode(buf, &h, &why) == 0);
	CHECK(h.data_len == 16 * 4096);
	CHECK(h.msg_len == len - FRAME_HDR_LEN);
	back = (Uffdd__PageData *)frame_unpack(h.type, buf + FRAME_HDR_LEN,
					       h.msg_len);
	CHECK(back != NULL);
	if (back) {
		CHECK(back->region == 3 && back->page == 123456789 &&
		      back->npages == 16 && back->demand && !back->zero);
		frame_free(&back->base);
	}
	/* Truncated messages: every strict prefix that fails must fail cleanly. */
	for (size_t cut = 1; cut < h.msg_len; cut++) {
		ProtobufCMessage *m =
			frame_unpack(h.type, buf + FRAME_HDR_LEN, cut);

		frame_free(
			m); /* NULL or a valid partial message, never a crash */
	}
	/* A message of the wrong type for the frame is refused when packing. */
	CHECK(frame_pack(FRAME_HELLO, &pd.base, 0, &len) == NULL);
	free(buf);

	/* Garbage is not a message. */
	{
		uint8_t junk[8] = {0xff, 0xff, 0xff, 0xff,
				   0xff, 0xff, 0xff, 0xff};

		CHECK(frame_unpack(FRAME_PAGE_DATA, junk, sizeof(junk)) ==
		      NULL);
	}
}

static void
test_fd_io(void)
{
	Uffdd__Hello h = UFFDD__HELLO__INIT;
	ProtobufCMessage *msg;
	uint16_t type;
	int sv[2];

	CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
	h.version = 7;
	h.migration_id = "abc";
	CHECK(frame_send_fd(sv[0], FRAME_HELLO, &h.base) == 0);
	CHECK(frame_recv_fd(sv[1], &type, &msg) == 0);
	CHECK(type == FRAME_HELLO);
	CHECK(((Uffdd__Hello *)msg)->version == 7);
	CHECK(strcmp(((Uffdd__Hello *)msg)->migration_id, "abc") == 0);
	frame_free(msg);

	/* A header cut short by EOF. */
	CHECK(write(sv[0], "\0\1\0", 3) == 3);
	close(sv[0]);
	errno = 0;
	CHECK(frame_recv_fd(sv[1], &type, &msg) < 0 && errno == ECONNRESET);
	close(sv[1]);

	/* An oversized frame is refused before reading its body. */
	CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
	{
		struct frame_hdr big = {FRAME_HELLO, 0, FRAME_MSG_MAX + 1, 0};
		uint8_t raw[FRAME_HDR_LEN];

		frame_hdr_encode(raw, &big);
		CHECK(write(sv[0], raw, sizeof(raw)) == sizeof(raw));
		errno = 0;
		CHECK(frame_recv_fd(sv[1], &type, &msg) < 0 && errno == EPROTO);
	}
	close(sv[0]);
	close(sv[1]);
}

static void
test_range(void)
{
	struct range r;

	CHECK(range_parse("0x1000-0x3000", &r) == 0);
	CHECK(r.start == 0x1000 && r.end == 0x3000);
	CHECK(range_parse("600000000000-600040000000", &r) == 0);
	CHECK(r.end - r.start == 1ULL << 30);
	CHECK(range_parse("0x3000-0x1000", &r) < 0);
	CHECK(range_parse("0x1000-0x1000", &r) < 0);
	CHECK(range_parse("0x1001-0x3000", &r) < 0);
	CHECK(range_parse("0x1000", &r) < 0);
	CHECK(range_parse("0x1000-", &r) < 0);
	CHECK(range_parse("zz-0x1000", &r) < 0);
	CHECK(range_parse("0x1000-0x3000x", &r) < 0);
}

static void
clean(const char *in, const char *want)
{
	char buf[64];

	snprintf(buf, sizeof(buf), "%s", in);
	text_clean(buf);
	CHECK(strcmp(buf, want) == 0);
}

static void
test_text_clean(void)
{
	clean("plain text: 0x1000 (ok)", "plain text: 0x1000 (ok)");
	/* Valid UTF-8 of 2, 3 and 4 bytes stays. */
	clean("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80",
	      "caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80");
	/* Controls: a forged log line, a terminal escape, DEL. */
	clean("a\nuffdd: b\r\t\x1b[31m\x7f", "a?uffdd: b???[31m?");
	/* Stray, truncated, overlong, surrogate, past U+10FFFF. */
	clean("\xff\xfe\x80", "???");
	clean("x\xc3", "x?");
	clean("\xe2\x82x", "??x");
	clean("\xc0\xaf \xe0\x80\xaf", "?? ???");
	clean("\xed\xa0\x80", "???");
	clean("\xf4\x90\x80\x80", "????");
	/* C1 controls (U+009B is CSI to some terminals); U+00A0 is text. */
	clean("a\xc2\x9b"
	      "31m\xc2\x80 \xc2\xa0",
	      "a??31m?? \xc2\xa0");
	CHECK(text_bad_at("caf\xc3\xa9") == -1);
	CHECK(text_bad_at("") == -1);
	CHECK(text_bad_at("x\npid=1") == 1);
	CHECK(text_bad_at("caf\xc3\xa9\x1b[31m") == 5);
	CHECK(text_bad_at("ab\xc3") == 2);
}

/* Every string of a reply, nested and repeated ones too, is cleaned. */
static void
test_clean_strings(void)
{
	Uffdd__AttachReply rep = UFFDD__ATTACH_REPLY__INIT;
	Uffdd__Region r[2], *rp[2] = {&r[0], &r[1]};
	char id[] = "id\x1b]0;x\x07", n0[] = "/a\nb", n1[] = "ok \xc3\xa9";

	uffdd__region__init(&r[0]);
	uffdd__region__init(&r[1]);
	r[0].name = n0;
	r[1].name = n1;
	rep.id = id;
	rep.n_unmatched = 2;
	rep.unmatched = rp;
	frame_clean_strings(&rep.base);
	CHECK(strcmp(id, "id?]0;x?") == 0);
	CHECK(strcmp(n0, "/a?b") == 0);
	CHECK(strcmp(n1, "ok \xc3\xa9") == 0);
	/* Empty strings (protobuf-c's shared "") and no message at all. */
	frame_clean_strings(&r[0].base);
	uffdd__region__init(&r[0]);
	frame_clean_strings(&r[0].base);
	frame_clean_strings(NULL);
}

/*
 * How many pages one frame covers, the bulk lane's sizing: a page larger
 * than a frame (1 GiB, with default_hugepagesz=1G) gives none, never one
 * that would not fit the frame and the buffers sized for it.
 */
static void
test_frame_pages(void)
{
	CHECK(frame_pages_fit(4096, 64) == 64);
	CHECK(frame_pages_fit(4096, 512) == 512);
	CHECK(frame_pages_fit(4096, 1 << 20) == FRAME_DATA_MAX / 4096);
	CHECK(frame_pages_fit(2u << 20, 512) == 2);
	CHECK(frame_pages_fit(2u << 20, 1) == 1);
	CHECK(frame_pages_fit(FRAME_DATA_MAX, 64) == 1);
	CHECK(frame_pages_fit(2 * (uint64_t)FRAME_DATA_MAX, 64) == 0);
	CHECK(frame_pages_fit(1u << 30, 512) == 0);
	CHECK(frame_pages_fit(16ULL << 30, 512) == 0);
	for (uint64_t ps = 4096; ps <= (16ULL << 30); ps *= 2)
		CHECK(frame_pages_fit(ps, 512) * ps <= FRAME_DATA_MAX);
}

int
main(void)
{
	test_frame_pages();
	test_text_clean();
	test_clean_strings();
	test_header();
	test_roundtrip();
	test_commit();
	test_fd_io();
	test_range();
	return UNIT_DONE();
}
