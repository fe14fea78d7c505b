/*
 * The privileged part's process (docs/privsep.md): it owns the control
 * socket and the grants, starts the engine (this program again, with
 * --engine) and starts it again should it die, and serves its requests.
 */
#ifndef UFFDD_PRIV_PARENT_H
#define UFFDD_PRIV_PARENT_H

#include <sys/types.h>

/*
 * Runs the privileged part until SIGTERM; argv is the daemon's own, from
 * which the engine's is made. Returns the exit status.
 */
int parent_main(int argc, char **argv);

#endif
