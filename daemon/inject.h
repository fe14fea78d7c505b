/*
 * Running system calls inside another process with ptrace (docs/design.md):
 * the way to make a target create a userfaultfd bound to its own memory.
 */
#ifndef UFFDD_INJECT_H
#define UFFDD_INJECT_H

#include <stddef.h>
#include <sys/types.h>
#include <sys/user.h>

struct inject {
	pid_t pid;
	pid_t *tids; /* every thread seized, tids[0] == pid runs the calls */
	size_t ntids;
	struct user_regs_struct saved;
	unsigned long syscall_ip; /* a `syscall` instruction in the vdso */
	int have_regs;
	int all_threads; /* every thread seized (inject_begin(..., 1)) */
	char err[256];
	pid_t stuck; /* the thread that did not stop in time, or 0 */
	/* While a thread is awaited: see inject_begin_draining(). */
	int drain_fd;
	void (*drain)(void *);
	void *drain_arg;
};

/*
 * Seizes and stops the target: all its threads when all_threads is set (so
 * none touches memory between a discard and the registration), or only the
 * main thread. Returns 0, or -1 with inj->err and errno set.
 */
int inject_begin(struct inject *inj, pid_t pid, int all_threads);
/*
 * The same for a target that holds a userfaultfd, drain_fd: whenever it is
 * readable while a thread is awaited, drain(drain_arg) must read it. A
 * thread blocked until an event of it is read (madvise, munmap, mremap,
 * fork in registered memory) stops only then; waiting for it without
 * reading would wait for ever.
 */
int inject_begin_draining(struct inject *inj, pid_t pid, int all_threads,
			  int drain_fd, void (*drain)(void *), void *drain_arg);
/* Runs one system call in the target; returns its result (-errno on error). */
long inject_syscall(struct inject *inj, long nr, unsigned long a1,
		    unsigned long a2, unsigned long a3, unsigned long a4,
		    unsigned long a5, unsigned long a6);
/*
 * Gives the target a copy of our descriptor fd over a socket pair made in
 * the target, never through its file system. Only to a target whose every
 * thread is seized and whose file table and memory no other task shares;
 * it is not dumpable while the descriptor crosses. Returns its number in
 * the target, or -1 with inj->err set.
 */
int inject_pass_fd(struct inject *inj, int fd);
/*
 * Restores the registers and keeps every thread stopped, each in an event
 * stop: should the tracer die now, the target goes on where it was, not in
 * an injected call nor with a SIGTRAP. Returns 0, or -1 with errno set.
 */
int inject_restore(struct inject *inj);
/*
 * Restores the registers and lets every seized thread go. A thread that
 * did not stop in time (inject_begin() failed on it) is let go by
 * inject_reap() once it stops.
 */
void inject_end(struct inject *inj);
/* Lets go of such threads that have stopped since; returns how many wait. */
size_t inject_reap(void);

#endif
