/*
 * Control requests in the engine (control.c): they arrive from the
 * privileged part, checked, with the grant of the process they name
 * (docs/privsep.md), and go to the role that serves them (role.h); their
 * replies go back to the client the same way.
 */
#ifndef UFFDD_CONTROL_H
#define UFFDD_CONTROL_H

#include <stdint.h>

#include "daemon/ctlmsg.h"
#include "daemon/migration.h"
#include "proto/frame.h"

/*
 * Serves the requests that come on socket fd (the ctl socket pair's end);
 * stop and reload are called when the privileged part says so.
 */
/*
 * The privileged part's messages on fd: stop at CTL_STOP; reload at
 * CTL_RELOAD, with the descriptors of the files it opened (ctlmsg.h,
 * RELOAD_*; -1: none), which reload closes.
 */
void control_init(int fd, void (*stop)(void), void (*reload)(int *fds));
void control_close(void);
/* Tells the privileged part CTL_READY or CTL_STATUS with line. */
void control_say(int type, const char *line);
/* Sends a reply to control client `serial` if it is still connected. */
void control_reply(uint64_t serial, uint16_t type, const ProtobufCMessage *);
void control_reply_error(uint64_t serial, uint32_t code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/*
 * The migration (role, id) was made by client serial's request: its
 * caller may follow it (status, go, cancel, release).
 */
void control_bind(uint64_t serial, enum mig_role role, const char *id);
/*
 * While a request is served: whether its caller may see m (it made it, or
 * could ptrace its process, as the privileged part judged).
 */
int control_may_see(const struct migration *m);
/*
 * While a request is served: the second process it names (export
 * --track), checked and granted as the first (role.h), or NULL. The role
 * takes it over by moving it out (*t, then PROCREF_NONE in its place);
 * left there, its grant is let go after the request.
 */
struct procref *control_second(void);
/*
 * Sends control client serial the reply msg of type (NULL: none), then
 * waits for one byte of it (with a file descriptor when want_fd: the
 * client opened the file with its own rights, fdpass.h): the client's next
 * frames wait meanwhile. cb gets the descriptor (or -1), the byte,
 * and status 0, or a CONTROL_ASK_* status and why, exactly once, later.
 */
typedef void (*control_byte_cb)(void *arg, int fd, uint8_t byte, int status,
				const char *why);
void control_ask(uint64_t serial, uint16_t type, const ProtobufCMessage *msg,
		 int want_fd, unsigned secs, control_byte_cb cb, void *arg);
/* Whether control client serial is still connected (as far as we know). */
int control_client_here(uint64_t serial);
/* The ask's answer is not wanted any more (its requester is freed). */
void control_ask_cancel(uint64_t serial);
/*
 * STATUS and METRICS (control_status.c), served as the roles' requests
 * are: their handlers registered with role_register_request() by the
 * engine. METRICS: any caller; counts, no migration's own.
 */
void control_status_register(void);

#endif
