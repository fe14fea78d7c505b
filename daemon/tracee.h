/*
 * Targets that must not outlive the daemon's hold on them. A target that
 * could not make a userfaultfd itself (unprivileged, with
 * vm.unprivileged_userfaultfd=0) gets one made from /dev/userfaultfd, which
 * can also handle faults of the kernel's own accesses: exactly what the
 * sysctl withholds from it. So it keeps no copy: the daemon holds the only
 * one. Should the daemon die, the kernel would unregister the target's
 * ranges and its missing pages would read as zeros; instead its main thread
 * stays seized with PTRACE_O_EXITKILL, and the kernel kills the target with
 * the daemon. While seized, each signal it is sent stops that thread until
 * the daemon passes the signal on (tracee_reap(), on SIGCHLD).
 */
#ifndef UFFDD_TRACEE_H
#define UFFDD_TRACEE_H

#include <sys/types.h>

struct inject;

/*
 * Ends an injection into a target as inject_end() does, but its main thread
 * stays seized (no instant unheld). Returns 0, or -1 with errno set (then
 * every thread is let go).
 */
int tracee_keep(struct inject *);
/* Seizes a running process's main thread the same way (a forked child). */
int tracee_seize(pid_t pid);
/* Lets it go: a daemon that dies from now on leaves it be. */
void tracee_release(pid_t pid);
/* Whether pid is held. */
int tracee_held(pid_t pid);
/* Passes on the signals and stops of held threads; the SIGCHLD handler. */
void tracee_reap(void);
/* How many are held (for a warning at shutdown). */
size_t tracee_count(void);

#endif
