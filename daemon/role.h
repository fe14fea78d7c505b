/*
 * What each role (source, destination) offers the rest of the daemon, as a
 * table of operations it registers at start-up (role.c). The control socket,
 * the peer listener and the state directory reach the roles only through
 * it, so none of them depends on a role's code.
 */
#ifndef UFFDD_ROLE_H
#define UFFDD_ROLE_H

#include <stdint.h>

#include "daemon/migration.h"
#include "proto/frame.h"

struct authz_caller;
struct conn;
struct procref;
struct state_tbl;

/* The answer to serve_image (below): the ID, or NULL with code and err. */
typedef void (*role_image_cb)(void *arg, const char *id, uint32_t code,
			      const char *err);

struct role_ops {
	enum mig_role role;
	const char *name; /* as a state file's "role" record names it */
	/* The control request this role serves (export, attach). */
	uint16_t request_type;
	const char *verb;			      /* "export", "attach" */
	int (*request_pid)(const ProtobufCMessage *); /* its process */
	/*
	 * 1 when the request names no process (export --image): it is served
	 * without the ptrace check, with no process (NULL: always 0).
	 */
	int (*request_no_process)(const ProtobufCMessage *);
	/*
	 * A second process the request names (export --track), checked and
	 * granted as the first; 0 or NULL: none.
	 */
	int (*request_second_pid)(const ProtobufCMessage *);
	/*
	 * Serves that request for the caller who (checked by control.c),
	 * whose process t it takes over; it answers control client serial.
	 */
	void (*request)(uint64_t serial, const struct authz_caller *who,
			struct procref *t, const ProtobufCMessage *req);
	/*
	 * Restores a migration from a state file's table (statefmt.h) after
	 * a restart: 0, or -1 when not taken up. A file that says what this
	 * daemon never writes sets the table's error (FILE:LINE: what)
	 * first. check only reads and validates, touching nothing.
	 */
	int (*restore)(struct state_tbl *);
	int (*restore_check)(struct state_tbl *);
	/*
	 * A peer connection's first frame, a HELLO (NULL: the role takes
	 * none). 0 when the connection is now a lane of a migration, -1
	 * when refused: an ERROR is queued and the connection is finishing.
	 */
	int (*hello)(struct conn *, const Uffdd__Hello *);
	/*
	 * The source's, for attach --image: serves the image at fd (taken
	 * over) to this daemon's own destination under a new ID, owned by
	 * who, once the image is checked, which happens off the loop
	 * (worker.h). done gets the ID, or NULL with code and err; on the
	 * loop, exactly once, maybe before this returns.
	 */
	void (*serve_image)(int fd, const struct authz_caller *who,
			    role_image_cb done, void *arg);
};

/*
 * A control request a role serves besides its own (the source's snapshot),
 * checked by control.c as the role's own is: its process must be one the
 * caller could ptrace. A request that names a migration, not a process
 * (go, cancel), has no request_pid: the role checks the caller against
 * the migration (authz_may_see()), and t is NULL.
 */
struct role_request {
	uint16_t type;
	const char *verb;
	int (*request_pid)(const ProtobufCMessage *);
	void (*request)(uint64_t serial, const struct authz_caller *who,
			struct procref *t, const ProtobufCMessage *req);
};

void role_register(const struct role_ops *);
void role_register_request(const struct role_request *);
/* NULL when no role serves a request of that type. */
const struct role_request *role_request_by_type(uint16_t type);
/* NULL when no such role is registered. */
const struct role_ops *role_get(enum mig_role);
const struct role_ops *role_by_name(const char *name);
const struct role_ops *role_by_request(uint16_t type);

#endif
