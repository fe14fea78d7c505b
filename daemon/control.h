/*
 * The control socket (control.c): uffd-client's requests, checked
 * (authz.h) and handed to the role that serves them (role.h).
 */
#ifndef UFFDD_CONTROL_H
#define UFFDD_CONTROL_H

#include <stdint.h>

#include "proto/frame.h"

int control_listen(const char *path);
/* Applies conf.control_mode and conf.control_gid to the socket. */
int control_apply_mode(void);
void control_close(void);
/* Sends a reply to control client `serial` if it is still connected. */
void control_reply(uint64_t serial, uint16_t type, const ProtobufCMessage *);
void control_reply_error(uint64_t serial, uint32_t code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#endif
