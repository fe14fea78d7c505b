/*
 * The control socket (control.c): uffd-client's requests, checked
 * (authz.h) and handed to the role that serves them (role.h).
 */
#ifndef UFFDD_CONTROL_H
#define UFFDD_CONTROL_H

#include <stdint.h>

#include "proto/frame.h"

struct conn;

int control_listen(const char *path);
/* Applies conf.control_mode and conf.control_gid to the socket. */
int control_apply_mode(void);
void control_close(void);
/* Sends a reply to control client `serial` if it is still connected. */
void control_reply(uint64_t serial, uint16_t type, const ProtobufCMessage *);
/*
 * The connection of control client `serial`, NULL once it is gone: for a
 * request that reads the socket itself a while (a snapshot takes a file
 * descriptor over it), with the connection paused (conn_pause()).
 */
struct conn *control_conn(uint64_t serial);
void control_reply_error(uint64_t serial, uint32_t code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

#endif
