/*
 * What uffd-client's parts share: its commands as data (a table of struct
 * cmd_entry in uffd-client.c, one cmd-*.c file each), the control socket
 * and its calls (call.c), the parsers of their arguments (args.c), and
 * what more than one command prints or waits for.
 */
#ifndef UFFDD_CLIENT_H
#define UFFDD_CLIENT_H

#include <stdio.h>
#include <sys/types.h>

#include "proto/frame.h"

/*
 * A command: its name, its usage line (in the help, and after a wrong
 * argument), and what runs it with its own argv (argv[0] its name).
 */
struct cmd_entry {
	const char *name;
	const char *usage;
	int (*exec)(const struct cmd_entry *, int argc, char **argv);
};

/* The commands (uffd-client.c lists them), one cmd-*.c file each. */
int cmd_export(const struct cmd_entry *, int argc, char **argv);
int cmd_attach(const struct cmd_entry *, int argc, char **argv);
int cmd_status(const struct cmd_entry *, int argc, char **argv);
int cmd_wait(const struct cmd_entry *, int argc, char **argv);
int cmd_migrate_qemu(const struct cmd_entry *, int argc, char **argv);
int cmd_qmp(const struct cmd_entry *, int argc, char **argv);
int cmd_snapshot(const struct cmd_entry *, int argc, char **argv);
int cmd_image(const struct cmd_entry *, int argc, char **argv);
int cmd_go(const struct cmd_entry *, int argc, char **argv);
int cmd_cancel(const struct cmd_entry *, int argc, char **argv);
int cmd_release(const struct cmd_entry *, int argc, char **argv);
int cmd_metrics(const struct cmd_entry *, int argc, char **argv);

/* call.c: the daemon's control socket. */
extern const char *control_path;
extern int quiet_connect; /* wait_for() says it once itself */

void die_usage(const char *u) __attribute__((noreturn));
int connect_daemon(void);
int connect_daemon_try(void);
/*
 * One request and its reply, or NULL with the reason said on stderr; then
 * *answered (when not NULL) tells a daemon that answered with an error
 * (1) from one that could not be reached or broke the protocol (0).
 */
ProtobufCMessage *call_try(int fd, uint16_t type, const ProtobufCMessage *req,
			   uint16_t want, int *answered);
ProtobufCMessage *call(int fd, uint16_t type, const ProtobufCMessage *req,
		       uint16_t want);
/* Sends one byte, with descriptor fd when fd >= 0 (SCM_RIGHTS). */
int send_byte_fd(int sock, char b, int fd);
/*
 * call() for a request that takes a file: path is opened read-only here
 * and handed over at the daemon's FILE_READY. Exits on an error.
 */
ProtobufCMessage *call_with_file(int sock, uint16_t type,
				 const ProtobufCMessage *req, uint16_t want,
				 const char *path);

/* args.c: arguments, checked before anything is asked of a daemon. */
void check_id(const char *s, const char *u);
pid_t parse_pid(const char *s, const char *u);
double parse_timeout(const char *s, const char *u);
Uffdd__Range **add_range(Uffdd__Range **rs, size_t *n, const char *arg,
			 const char *u);
void free_ranges(Uffdd__Range **rs, size_t n);

/* cmd-status.c */
const char *human_bytes(double b, char *buf, size_t len);
void print_status_text(const Uffdd__MigrationStatus *s);

/* cmd-wait.c */
int wait_for(const char *id, double timeout);
/*
 * attach --record-working-set: waits until the recording of migration id
 * is over, then stores it in the image at path. 0, or 1 (said why).
 */
int image_learn(const char *id, const char *path);

/* cmd-attach.c */
void print_regions(const char *what, Uffdd__Region **r, size_t n, FILE *f);

#endif
