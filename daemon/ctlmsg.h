/*
 * What the privileged part and the engine say to each other about control
 * clients (docs/privsep.md), over the ctl socket pair (imsg.h). The
 * privileged part owns the control socket: it reads every request,
 * decides who may ask what, opens a grant for a process it allows, and
 * forwards the request; the engine serves it and its replies go back the
 * same way, to be written to the client.
 *
 * Payloads are these structs, exactly; a request's protobuf message
 * follows its struct, packed, as the client sent it.
 */
#ifndef UFFDD_CTLMSG_H
#define UFFDD_CTLMSG_H

#include <stdint.h>
#include <sys/types.h>

#include "daemon/migration.h"

enum ctlmsg_type {
	/* privileged part -> engine */
	CTL_REQUEST = 1, /* id: client serial; ctl_request + message */
	CTL_CLIENT_GONE, /* id: client serial */
	CTL_BYTE,	 /* id: serial; ctl_byte; the descriptor, if one came */
	CTL_STOP,	 /* shut down as at SIGTERM */
	CTL_RELOAD,	 /* SIGHUP: reload; ctl_reload and the files */
	CTL_REFUSED,	 /* err: a request refused here, its code (metrics) */
	/* engine -> privileged part */
	CTL_REPLY = 100, /* id: serial; ctl_reply + the packed message */
	CTL_ASK,	 /* id: serial; ctl_ask: read one byte of the client */
	CTL_BIND,	 /* id: grant; ctl_bind: the migration it serves */
	CTL_DROP,	 /* id: grant: nothing of it is kept (refused) */
	CTL_READY,	 /* the engine serves: ctl_status */
	CTL_STATUS,	 /* ctl_status: a line for systemd's STATUS= */
};

/* A control caller as the kernel recorded it at connect (authz.h). */
struct ctl_caller {
	uint32_t uid, gid;
	int32_t pid; /* for logs only */
	int32_t privileged;
};

/* One migration a caller may see: by role and ID. */
struct ctl_seen {
	uint32_t role; /* enum mig_role */
	char id[MIG_ID_LEN + 1];
	char pad[3];
};

#define CTL_SEEN_MAX 4096

/*
 * A request. With a process granted (grant != 0, pid > 0) its pidfd and
 * /proc/PID/mem come as descriptors 0 and 1; with a second one (grant2:
 * export --track's), its pair as 2 and 3. nseen migrations the caller
 * may see follow (GO, CANCEL, RELEASE, STATUS act only on those), then
 * the message.
 */
struct ctl_request {
	uint16_t frame_type;
	uint16_t pad;
	uint32_t msg_len;
	struct ctl_caller who;
	uint64_t grant;
	int32_t pid;
	uint32_t nseen;
	uint64_t start, probe; /* procref.h: the process as it was checked */
	uint32_t seen_all;     /* the caller may see every migration */
	int32_t pid2;	       /* the second process, or 0 */
	uint64_t grant2;
	uint64_t start2, probe2;
};

struct ctl_reply {
	uint16_t frame_type;
	uint16_t pad;
	uint32_t msg_len;
};

/*
 * Read one byte of the client (with a descriptor when want_fd). A reply
 * may follow (ctl_reply and its message): written to the client once its
 * frames are paused, so that the byte it sends in answer is never read
 * as a frame.
 */
struct ctl_ask {
	uint32_t want_fd;
	uint32_t secs; /* how long the client has */
};

/* ctl_byte.status: why no byte came. */
enum {
	CONTROL_ASK_GONE = 1,	 /* the client went away */
	CONTROL_ASK_TIMEOUT = 2, /* it sent nothing in time */
	CONTROL_ASK_NOFD = 3,	 /* a byte, but no descriptor with it */
};

/* The byte a client sent, or why none came (status != 0, why says). */
struct ctl_byte {
	int32_t status;
	uint8_t byte;
	char why[123];
};

/*
 * CTL_RELOAD: the files the engine reads again, opened by the privileged
 * part (the engine may not read a root-only key): each the index of its
 * descriptor in the message, or -1 (none: a file that does not exist, or
 * plaintext).
 */
enum { RELOAD_CONF, RELOAD_CA, RELOAD_CERT, RELOAD_KEY, RELOAD_FILES };
struct ctl_reload {
	int32_t at[RELOAD_FILES];
};

struct ctl_bind {
	uint32_t role;
	char id[MIG_ID_LEN + 1];
	char pad[3];
};

struct ctl_status {
	char line[256];
};

#endif
