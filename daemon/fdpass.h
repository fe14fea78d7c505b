/*
 * A file handed over the control socket (SCM_RIGHTS): the daemon never
 * opens a path on a client's behalf (docs/image-format.md, "Who writes the
 * file"). The client opens it with its own credentials, in its own mount
 * namespace, and sends one byte with the descriptor attached.
 */
#ifndef UFFDD_FDPASS_H
#define UFFDD_FDPASS_H

#include <stdint.h>
#include <sys/types.h>

/*
 * The answer to fdpass_ask(): the descriptor (the callee owns it), or -1
 * with why (the client went away, sent none, was too slow, the daemon
 * stops). The control client is reading frames again by then.
 */
typedef void (*fdpass_cb)(void *arg, int fd, const char *why);

/*
 * Tells control client serial FILE_READY and waits (its frames paused) for
 * its byte and descriptor (control_ask()); cb is called exactly once,
 * later (at exit too, with -1).
 */
void fdpass_ask(uint64_t serial, fdpass_cb cb, void *arg);
/*
 * What every file handed over is checked for first: its mode and open
 * flags are read into *st and *fl, and a file on FUSE is refused (its
 * server, any user, could hold the daemon's reads or writes, and its
 * loop, for ever). what names the file in err. 0, or -1 with err set.
 */
struct stat;
int fdpass_file(int fd, const char *what, struct stat *st, int *fl, char *err,
		size_t errlen);

#endif
