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
/* Sets the x-ignore-shared migration capability. */
int set_ignore_shared(struct qmp *q, int on);
/* The value of a string member of a command's return, or "". */
int query_str(struct qmp *q, const char *cmd, const char *member, char *out,
	      size_t len);
/* Runs a command whose one argument is a migration URI. */
int exec_uri(struct qmp *q, const char *cmd, const char *uri);
/* migrate-incoming on a port QEMU picks: the port, or -1. */
int incoming_port(struct qmp *q);
/* Whether PID still runs: a zombie waiting for its parent does not. */
int process_alive(pid_t pid);

#endif
