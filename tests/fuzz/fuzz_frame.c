/*
 * libFuzzer target: frame decoding, the first thing any peer or control
 * client reaches. A header, then a message of the type it names; what
 * decodes must pack again to the size protobuf-c computes. (Not decode
 * again: protobuf-c keeps unknown fields as they came, and repacks some
 * oddly encoded ones, e.g. overlong tags, into bytes it then refuses. The
 * daemon never repacks what it received.) Region tables also go through
 * the destination's check of them.
 */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/region.h"
#include "proto/frame.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	ProtobufCMessage *msg;
	struct frame_hdr h;
	const char *why;
	uint8_t *buf;
	size_t len;

	if (size < FRAME_HDR_LEN)
		return 0;
	if (frame_hdr_decode(data, &h, &why) < 0)
		return 0;
	data += FRAME_HDR_LEN;
	size -= FRAME_HDR_LEN;
	if (h.msg_len > size)
		return 0;
	if ((msg = frame_unpack(h.type, data, h.msg_len)) == NULL)
		return 0;
	(void)frame_type_name(h.type);
	/* A source's region table goes through this check first. */
	if (h.type == FRAME_REGIONS) {
		const Uffdd__RegionTable *t = (const Uffdd__RegionTable *)msg;
		char err[256];

		(void)region_table_check(t->regions, t->n_regions, err,
					 sizeof(err));
	}
	buf = frame_pack(h.type, msg, h.data_len, &len);
	if (buf == NULL)
		abort(); /* a message we decoded must pack */
	if (len != FRAME_HDR_LEN + protobuf_c_message_get_packed_size(msg))
		abort();
	free(buf);
	frame_free(msg);
	return 0;
}
