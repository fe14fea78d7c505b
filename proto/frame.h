/*
 * Framing shared by the peer lanes and the control socket.
 *
 * A frame is a 12-byte header (big-endian: u16 type, u16 flags, u32 msg_len,
 * u32 data_len), msg_len bytes of one protobuf-c message, then data_len raw
 * bytes (page contents after PAGE_DATA, zero everywhere else). Page bytes stay
 * outside protobuf so the receiver can read them straight into an aligned
 * buffer for UFFDIO_COPY.
 */
#ifndef UFFDD_FRAME_H
#define UFFDD_FRAME_H

#include <stddef.h>
#include <stdint.h>

#include <protobuf-c/protobuf-c.h>

#include "proto/uffdd.pb-c.h"

#define FRAME_HDR_LEN 12
#define FRAME_MSG_MAX (1u << 20)  /* region tables of a few thousand regions */
#define FRAME_DATA_MAX (4u << 20) /* two 2 MiB huge pages at most */
/*
 * A PAGE_DATA frame covers at most FRAME_DATA_MAX bytes of whole pages, a
 * ZERO frame too (hugetlb zeros are copied from a zero source that size).
 * How many pages of page_size one frame covers, at most max: 0 when not
 * even one does (regions of such pages are refused at export).
 */
static inline uint64_t
frame_pages_fit(uint64_t page_size, uint64_t max)
{
	uint64_t fit = FRAME_DATA_MAX / page_size;

	return fit < max ? fit : max;
}

/*
 * Pages a destination asks for in one request at most (runs of a private
 * file mapping's written pages); a source serves at least this many.
 */
#define REQUEST_PAGES_MIN 256
/*
 * Peers speak one version, checked at HELLO. 2: completion is a commit
 * (COMPLETE, COMMIT, COMMIT_ACK; ERR_SOURCE_RAN). A peer of another
 * version is refused with a text that says what to do.
 */
#define UFFDD_PROTO_VERSION 2
#define UFFDD_PROTO_UPGRADE "upgrade uffdd on both hosts"

/*
 * Hello feature of a peer that knows pre-copy (FRAME_SWITCHOVER): a
 * destination says it on its demand lane, a source that pre-copies says it
 * back. A pre-copy export refuses a destination that does not say it.
 */
#define FEATURE_PRECOPY "precopy"
/* export --precopy --track PID (ExportRequest.track_pid). */
#define FEATURE_PRECOPY_TRACK "precopy-track"
/*
 * Hello feature: a destination attached with hold_bulk says it on its
 * demand lane while its target has not run yet; a source that knows it
 * says it back and streams nothing on the bulk lane until the
 * destination's BULK_GO (demand answers go on). Said again, or not, on
 * every reconnect.
 */
#define FEATURE_BULK_HOLD "bulk_hold"
/*
 * Hello feature: a destination that echoes a pre-copy's SWITCHOVER on
 * its demand lane once it has taken it (every page of the freeze in, its
 * target free to run), says it on its demand lane; a source that waits
 * for the echo (a deferred pre-copy answers its go then) says it back,
 * and only then does the destination echo.
 */
#define FEATURE_SWITCHOVER_ACK "switchover_ack"
/*
 * Control feature (StatusReply.features) of a daemon that knows export
 * --deferred and --id, and GO and CANCEL.
 */
#define FEATURE_DEFERRED "deferred"
/*
 * Control feature of a daemon whose kernel tracks writes to shared
 * memory while a process runs (the async tracker, Linux 6.7+): a
 * pre-copy of shared memory, as a guest's RAM files, can be exported.
 * migrate-qemu --precopy moves the guest post-copy where it is missing.
 */
#define FEATURE_PRECOPY_SHARED "precopy-shared"

enum frame_type {
	FRAME_HELLO = 1,
	FRAME_REGIONS = 2,
	FRAME_PAGE_REQUEST = 3,
	FRAME_PAGE_DATA = 4,
	FRAME_COMPLETE = 5,
	FRAME_ERROR = 6,
	FRAME_HAVE = 7,
	FRAME_PING = 8,
	FRAME_SWITCHOVER = 9,
	FRAME_ROUND_SYNC = 10,
	FRAME_BULK_GO = 11,    /* Ping; destination to source, demand lane */
	FRAME_COMMIT = 12,     /* Commit; source to destination, demand lane */
	FRAME_COMMIT_ACK = 13, /* Commit; both ways, demand lane */
	FRAME_CTL_EXPORT = 100,
	FRAME_CTL_EXPORT_REPLY = 101,
	FRAME_CTL_ATTACH = 102,
	FRAME_CTL_ATTACH_REPLY = 103,
	FRAME_CTL_STATUS = 104,
	FRAME_CTL_STATUS_REPLY = 105,
	/*
	 * snapshot (docs/image-format.md): the request; READY, the client
	 * may hand its image file over; WRITTEN, the image is on disk; DONE,
	 * the client put it in place and the process was dealt with.
	 */
	FRAME_CTL_SNAPSHOT = 120,
	FRAME_CTL_SNAPSHOT_READY = 121,
	FRAME_CTL_SNAPSHOT_WRITTEN = 122,
	FRAME_CTL_SNAPSHOT_DONE = 123,
	/* export/attach --image: the daemon waits for the image file. */
	FRAME_CTL_FILE_READY = 124,
	/* A deferred export: go, or cancel it (GoRequest, GoReply). */
	FRAME_CTL_GO = 125,
	FRAME_CTL_GO_REPLY = 126,
	FRAME_CTL_CANCEL = 127,
	FRAME_CTL_CANCEL_REPLY = 128,
	/* An attach's bulk lane, held (AttachRequest.hold_bulk), is read. */
	FRAME_CTL_RELEASE = 129,
	FRAME_CTL_RELEASE_REPLY = 130,
	/* The daemon's metrics, as uffdd --metrics serves them. */
	FRAME_CTL_METRICS = 131,
	FRAME_CTL_METRICS_REPLY = 132,
};

/* Error codes carried in Error frames and control replies. */
enum {
	ERR_UNKNOWN_ID = 1,
	ERR_BUSY = 2,
	ERR_PROTOCOL = 3,
	ERR_NO_MATCH = 4,
	ERR_SOURCE = 5,
	ERR_INVALID = 6,
	ERR_NO_PROCESS = 7,
	ERR_PERMISSION = 8,
	ERR_UNREACHABLE = 9,
	ERR_KERNEL = 10,
	ERR_TARGET_GONE = 11, /* destination process exited */
	ERR_DEST_FAILED = 12, /* destination gave up: pages were poisoned */
	/*
	 * The source process ran after pages were read from it: the
	 * destination may hold pages of two moments, and stops its target.
	 */
	ERR_SOURCE_RAN = 13,
};

struct frame_hdr {
	uint16_t type;
	uint16_t flags;
	uint32_t msg_len;
	uint32_t data_len;
};

/* The message descriptor for a frame type, NULL for an unknown type. */
const ProtobufCMessageDescriptor *frame_descriptor(uint16_t type);
const char *frame_type_name(uint16_t type);

void frame_hdr_encode(uint8_t out[FRAME_HDR_LEN], const struct frame_hdr *h);
/*
 * Decodes and checks a header against the hard limits. Returns 0, or -1 with
 * *why set to a static reason.
 */
int frame_hdr_decode(const uint8_t in[FRAME_HDR_LEN], struct frame_hdr *h,
		     const char **why);
/* Packs header and message into a malloc'd buffer; data follows separately. */
uint8_t *frame_pack(uint16_t type, const ProtobufCMessage *msg,
		    uint32_t data_len, size_t *len);
/*
 * Unpacks a message whose header was decoded; checks it is the message type
 * the frame type says. NULL when malformed.
 */
ProtobufCMessage *frame_unpack(uint16_t type, const uint8_t *buf, size_t len);
void frame_free(ProtobufCMessage *msg);
/*
 * Text from elsewhere (a peer's error message or region name, a log line)
 * is printed only as printable UTF-8: no control character (C0, DEL or
 * C1, U+0080 to U+009F: a forged line, a terminal escape) and no byte that
 * is not part of valid UTF-8.
 *
 * text_char_len(): the length of the printable character that starts at
 * s (not at its end), 0 when none does.
 */
size_t text_char_len(const char *s);
/* The offset of the first byte that is not printable text, -1 if none. */
long text_bad_at(const char *s);
/* In place, every byte that is not printable text becomes '?'. */
void text_clean(char *s);
/*
 * text_clean()s every string of msg, in nested messages and repeated
 * fields too: for a reply whose text goes to a terminal.
 */
void frame_clean_strings(ProtobufCMessage *msg);

/* Blocking helpers for the client (and tests): whole frames over a socket. */
int frame_send_fd(int fd, uint16_t type, const ProtobufCMessage *msg);
/*
 * Receives one frame with no data part. Returns 0 with *type and *msg set,
 * -1 with errno set (ECONNRESET on EOF, EPROTO on a malformed frame).
 */
int frame_recv_fd(int fd, uint16_t *type, ProtobufCMessage **msg);

#endif
