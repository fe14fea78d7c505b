/* Daemon-wide settings and the roles' entry points. */
#ifndef UFFDD_UFFDD_H
#define UFFDD_UFFDD_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/types.h>

#include <event2/event.h>

#include "daemon/conn.h"
#include "daemon/migration.h"
#include "proto/range.h"

/*
 * After demand traffic: the loop polls for --poll-us instead of sleeping
 * (uffdd.c). loop_bulk() says bulk data moved, which stops it.
 */
void loop_poll(void);
void loop_poll_now(void);
void loop_yield_woken(void);
/*
 * Demand traffic within the last 5 ms: bulk work then goes in steps of
 * DEMAND_STEP_BYTES (frames sent, installed, read and written), so that a
 * request waits for at most one of them.
 */
int loop_demand_recent(void);
#define DEMAND_STEP_BYTES (64u << 10)
void loop_bulk(void);
/* Runs the event loop until it is told to exit. */
void run_loop(void);

/* Event priorities: faults first, bulk work last (STYLE.md point 3). */
enum { PRIO_FAULT = 0, PRIO_CONTROL = 1, PRIO_BULK = 2, PRIO_COUNT = 3 };

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
};

/* The effective configuration (conffile.c): strings are owned. */
struct uffdd_conf {
	char *listen;
	char *control;
	mode_t control_mode; /* of the control socket; 0600 by default */
	gid_t control_gid;   /* its group; (gid_t)-1: leave it */
	char *state_dir;
	int foreground;
	int verbose;
	int insecure;
	int pause_deadline; /* seconds a destination waits for its source */
	uint64_t bulk_rate; /* bytes a second on a source's bulk lane, 0: any */
	int pagemap_scan;   /* use PAGEMAP_SCAN where the kernel has it */
	/*
	 * Input limits on what peers may make this daemon hold or do;
	 * defaults and bounds in conffile.c, all applied at reload.
	 */
	int max_regions;	  /* regions per migration, both roles */
	int max_request_pages;	  /* pages one demand request may ask */
	int max_pending;	  /* peer connections before HELLO, in all */
	int max_pending_per_addr; /* the same, from one address */
	int hello_timeout;	  /* seconds from accept to HELLO */
	uint64_t max_output;	  /* unsent bytes before a conn stops reading */
	int poll_us;		  /* busy polling after demand traffic, us */
	int zero_detect;	  /* source: all-zero data pages go as ZERO */
	/* TLS: CA that signs every peer, our certificate and key. */
	char *ca;
	char *cert;
	char *key;
	/* SHA-256 fingerprint a source must show instead of the --from name */
	char *pin;
	unsigned set; /* which keys were given (conffile.c) */
};

extern struct uffdd_conf conf;
extern struct event_base *base;

/* peer.c */
/* Listens on each HOST:PORT of a comma-separated list. */
int peer_listen(const char *list);
void peer_close_listeners(void);
/*
 * Starts a connection to hostport, whose certificate must have the SHA-256
 * pin if one is given (tls.h); frames and errors (including a refused
 * connect) arrive through the callbacks. NULL with err filled on bad input.
 */
struct conn *peer_connect(const char *hostport, const char *pin,
			  const char *name, conn_frame_cb, conn_close_cb,
			  void *arg, char *err, size_t errlen);
/* The demand lane: TCP_NODELAY, and frames written in the call (conn.h). */
void peer_set_nodelay(struct conn *);

/* control.c */
int control_listen(const char *path);
/* Applies conf.control_mode and conf.control_gid to the socket. */
int control_apply_mode(void);
void control_close(void);
/* Sends a reply to control client `serial` if it is still connected. */
void control_reply(uint64_t serial, uint16_t type, const ProtobufCMessage *);
void control_reply_error(uint64_t serial, uint32_t code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

struct authz_caller;
struct procref;

/* source.c */
/*
 * Exports process t for the caller who (both checked by control.c); takes
 * t over, and checks the caller's right again once the process is frozen.
 */
void source_export(uint64_t serial, const struct authz_caller *who,
		   struct procref *t, const Uffdd__ExportRequest *);
/*
 * A peer connection's first frame was a Hello for the source role. Returns
 * 0 when the connection is now a lane of a migration, -1 when it was
 * refused: an ERROR is queued and the connection is finishing.
 */
int source_hello(struct conn *, const Uffdd__Hello *);

struct state_out;
struct state_tbl;

/*
 * The roles' restores from a state file's table (statefmt.h), after a
 * daemon restart: 0, or -1 when not taken up. A file that says what this
 * daemon never writes sets the table's error (FILE:LINE: what) first.
 * The _check forms read and validate the table only, touching nothing
 * (tests/fuzz/fuzz_state).
 */
/* dest.c */
/* The same for an attach: checked again once the target is stopped. */
void dest_attach(uint64_t serial, const struct authz_caller *who,
		 struct procref *t, const Uffdd__AttachRequest *);
int dest_restore(struct state_tbl *);
int dest_restore_check(struct state_tbl *);
/*
 * Fails a running or paused destination now, as its pause deadline would
 * (tests/fuzz/fuzz_dest ends each input with it).
 */
void dest_cancel(struct migration *, const char *why);
/* source.c */
int source_restore(struct state_tbl *);
int source_restore_check(struct state_tbl *);

/* state.c: one file per migration under --state-dir */
/*
 * Creates the state directory (0700) if missing, or checks it: a real
 * directory (no link), of our uid, that no one else may write. Kept open
 * for every later file operation. -1 with err filled.
 */
int state_dir_open(const char *dir, char *err, size_t errlen);
void state_dir_close(void);
/*
 * Writes the common keys and calls `more` for the role's own (-1 with
 * errno set: no file written), then replaces the file. 0, or -1 with
 * errno set and a warning logged.
 */
int state_write(const struct migration *,
		int (*more)(struct state_out *, const struct migration *));
void state_remove(const struct migration *);
/* Restores every migration found in the state directory. */
void state_restore_all(void);
/*
 * Restores one migration from the bytes of its file ID.state, shown in
 * messages as name: 0 restored; -1 not taken up (the role said why);
 * -2 refused: why says FILE:LINE and what is wrong, *role is the role the
 * file names (-1 if it names none).
 */
int state_restore_buf(const char *name, const char *id, const char *buf,
		      size_t len, char *why, size_t whylen, int *role);

#endif
