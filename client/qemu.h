/*
 * A QEMU as migrate-qemu sees it (qemu.c): its file-backed RAM blocks, and
 * the QMP commands of its migration, on qmp.h.
 */
#ifndef UFFDD_CLIENT_QEMU_H
#define UFFDD_CLIENT_QEMU_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "client/qmp.h"
#include "proto/frame.h"

#define MAX_BLOCKS 16

struct ramblock {
	char id[128];
	char path[PATH_MAX];
	uint64_t size;
	uint64_t addr;	 /* where this QEMU maps it */
	uint64_t holder; /* where the holder maps it (source only) */
	size_t match;	 /* the source block of a destination block */
	dev_t dev;	 /* the file, whatever its name */
	ino_t ino;
};

/*
 * The QEMU's file-backed RAM blocks: every memory-backend-file object under
 * /objects, with its mem-path, size and the mapping in the QEMU process.
 */
int ramblocks(struct qmp *q, struct ramblock *b, size_t *n);
/*
 * 0 when no source block's file is a destination block's, under any name
 * (the attach would punch it); else -1, said which.
 */
int ramfiles_apart(const struct ramblock *sb, size_t ns,
		   const struct ramblock *db, size_t nd);
/* Sets one migration capability of QEMU (x-ignore-shared, ...). */
int set_capability(struct qmp *q, const char *cap, int on);
/* The value of a string member of a command's return, or "". */
int query_str(struct qmp *q, const char *cmd, const char *member, char *out,
	      size_t len);
/* Runs a command whose one argument is a migration URI. */
int exec_uri(struct qmp *q, const char *cmd, const char *uri);
/* migrate-incoming on a port QEMU picks: the port, or -1. */
int incoming_port(struct qmp *q);
/* The port a QEMU in migrate-incoming listens on, or -1 said why. */
int listen_port(struct qmp *q);
/* Whether PID still runs: a zombie waiting for its parent does not. */
int process_alive(pid_t pid);
/* Whether PID is stopped (uffdd stops a destination it cannot vouch for). */
int process_stopped(pid_t pid);

/* qemu-flow.c: what the one-host flow and its two halves share. */
/* How long QEMU may take to move the device state (it takes ms). */
#define DEVSTATE_SECS 120
/* Seconds on the monotonic clock. */
double flow_now(void);
/* Progress of the flow, one line a step, on stderr. */
void flow_say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/*
 * Starts the holder of the source's RAM files (b[i].holder: where it maps
 * each), or -1 (said why). Until holder_keep(), a fatal signal to us
 * (SIGINT, SIGTERM, SIGHUP) kills it: the source guest is still the
 * guest; after, it is the destination guest's RAM until completion.
 */
pid_t holder_start(struct ramblock *b, size_t n);
void holder_keep(void);
/*
 * Waits at most secs for the source daemon to end the holder once the
 * destination acknowledged its COMMIT: 0, or -1 (said what to look at).
 */
int holder_reap(pid_t holder, int secs, const char *ctl, const char *id);
#define HOLDER_REAP_SECS 30
/*
 * Whether uffdd stopped the destination QEMU qemu (its RAM may hold pages
 * of two moments), said with what to do. A stopped QEMU answers no QMP
 * command: the caller asks it nothing more.
 */
int flow_dest_stopped(pid_t qemu);
/*
 * Before holder_start(): until holder_keep(), a fatal signal is only
 * noted (flow_stop_signal() says which), for the caller to undo what it
 * did and then end by it (flow_end_by_signal()); a second one ends us at
 * once. The waits of the flow give up when one is noted.
 */
void flow_defer_signals(void);
int flow_stop_signal(void);
void flow_end_by_signal(void);
/* Every page is the destination's: the source QEMU quits (0), or -1. */
int source_quit(struct qmp *q);
/* Stops the vCPUs of a QEMU whose status is `status`, if running. */
int qemu_stop(struct qmp *q, const char *status);
/*
 * Waits until the migration QEMU started at t0 sends only device state
 * (x-ignore-shared) has completed; st its last status, *bytes what QEMU
 * says it moved. 0, or -1 (said why) when it failed or took too long.
 */
int devstate_wait(struct qmp *q, double t0, char *st, size_t stlen,
		  uint64_t *bytes);
/*
 * Waits, by QEMU's MIGRATION events (the "events" capability on), until
 * the migration QEMU started at t0 has status want; st its last status.
 * 0, or -1 (said why) when it failed, was cancelled, QMP closed, or it
 * took longer than DEVSTATE_SECS.
 */
int migration_reach(struct qmp *q, const char *want, double t0, char *st,
		    size_t stlen);
/* cmd-qemu-send.c, cmd-qemu-receive.c: the two halves, on two hosts. */
struct cmd_entry;
int qemu_send(const struct cmd_entry *, int argc, char **argv);
int qemu_receive(const struct cmd_entry *, int argc, char **argv);
/*
 * qemu-local.c: migrate-qemu --precopy on one host, both halves
 * interleaved; its options as migrate-qemu's. 0 when the guest moved.
 */
int qemu_local(const char *src_qmp, const char *dst_qmp, const char *src_ctl,
	       const char *dst_ctl, const char *peer, int resume,
	       double timeout);
/*
 * Whether the daemon at control socket ctl says feature name in its
 * status (proto/frame.h, control features): 1, 0, or -1 (said why).
 */
int daemon_feature(const char *ctl, const char *name);
/* One request to the daemon at path, on a connection of its own. */
ProtobufCMessage *flow_request(const char *path, uint16_t type,
			       const ProtobufCMessage *req, uint16_t want);

#endif
