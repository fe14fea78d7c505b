/* What uffd-client's commands share: the control socket and its calls. */
#ifndef UFFDD_CLIENT_H
#define UFFDD_CLIENT_H

#include <stdio.h>
#include <sys/types.h>

#include "proto/frame.h"

extern const char *control_path;

void die_usage(const char *u);
int connect_daemon(void);
int connect_daemon_try(void);
ProtobufCMessage *call_try(int fd, uint16_t type, const ProtobufCMessage *req,
			   uint16_t want);
ProtobufCMessage *call(int fd, uint16_t type, const ProtobufCMessage *req,
		       uint16_t want);
int wait_for(const char *id, double timeout);
void print_regions(const char *what, Uffdd__Region **r, size_t n, FILE *f);

int cmd_migrate_qemu(int argc, char **argv);
int cmd_qmp(int argc, char **argv);

#endif
