/*
 * A process named by what the kernel vouches for, not by a pid number: a
 * pid may be given to another process once its owner exits, and an exec may
 * change who the process is (a setuid program). A procref is opened when a
 * process is checked; every later step on it is bracketed by procref_same():
 * if the process is still the same after a step that named it by pid, that
 * step acted on it and on nothing else.
 */
#ifndef UFFDD_PROCREF_H
#define UFFDD_PROCREF_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct procref {
	pid_t pid;
	int pidfd; /* -1: none (closed, or never opened) */
	/*
	 * /proc/PID/mem, bound to the address space the process had when it
	 * was opened: after an exec (or exit) that address space is gone,
	 * and a read through it returns nothing.
	 */
	int memfd;
	uint64_t probe;		  /* an address mapped then (its stack) */
	unsigned long long start; /* start time, clock ticks after boot */
	/*
	 * In the engine: the grant the privileged part opened for it
	 * (docs/privsep.md); 0 in the privileged part, or none.
	 */
	uint64_t grant;
};

#define PROCREF_NONE                                           \
	{                                                      \
		.pid = 0, .pidfd = -1, .memfd = -1, .grant = 0 \
	}

/*
 * Called with its grant when an engine's procref that holds one is closed
 * (the engine tells the privileged part: nothing of it is kept); NULL in
 * the privileged part.
 */
extern void (*procref_drop_hook)(uint64_t grant);

/*
 * Opens a reference to process pid. Returns 0, or -1 with errno set
 * (ESRCH: no such process; EPERM/EACCES: not ours to open) and err filled.
 * Only the privileged part opens processes: in the engine it refuses
 * (EPERM), which fails what asked before the engine's system call filter
 * would have killed it; the engine takes processes by grant (below).
 */
int procref_open(struct procref *, pid_t pid, char *err, size_t errlen);
/*
 * 1 while the process is the one opened: alive and running the program it
 * ran then.
 */
int procref_same(const struct procref *);
/* 1 while the process opened has not exited (exec or not). */
int procref_alive(const struct procref *);
/* Sends sig through the pidfd: never to a process that took the pid. */
int procref_signal(const struct procref *, int sig);
/*
 * In the engine: a reference to process pid, a forked child of the process
 * of grant parent, as the privileged part opens it, with a grant of its
 * own (or not at all: it is not that process's child, or not one its
 * caller could ptrace). 0, or -1 with errno set.
 */
int procref_child(struct procref *, uint64_t parent, pid_t pid);
/*
 * In the engine: a forked process of the target of grant root (0: of
 * migration id's target, gone) that no parent vouches for (privop.h,
 * PRIVOP_ORPHAN), looked for by the
 * privileged part: pid 0 for the earliest one started at or after tick
 * not_before with its mapping at addr registered, or that pid, started at
 * start. 0 (r->pid says which), or -1 with errno set (ESRCH: none).
 */
int procref_orphan(struct procref *, uint64_t root, const char *id, pid_t pid,
		   unsigned long long start, unsigned long long not_before,
		   uint64_t addr);
/*
 * In a new engine: process pid (started at start) of migration (role, id)
 * restored from its state file, by the grant the privileged part kept for
 * that migration (privop.h, PRIVOP_CLAIM). 0, or -1 with errno set
 * (ENOENT: no grant is kept for it).
 */
int procref_claim(struct procref *, int role, const char *id, pid_t pid,
		  unsigned long long start);
/*
 * The same, with err filled when it fails: -1 with errno EPERM (the
 * grant's caller may not ptrace the process any more) or ESRCH (no grant
 * kept, or its process is gone or not the one checked).
 */
int procref_restore(struct procref *, int role, const char *id, pid_t pid,
		    unsigned long long start, char *err, size_t errlen);
/* Moves the reference out of src (which is left closed). */
void procref_move(struct procref *dst, struct procref *src);
void procref_close(struct procref *);
/*
 * Other processes that share pid's memory (CLONE_VM, want PROC_SHARE_VM)
 * or file table (CLONE_FILES, PROC_SHARE_FILES) without being threads of
 * it: stopping pid's threads does not stop them. Fills list with them
 * ("1234 (memory), 5678 (files)") and returns how many; -1 with errno set
 * when the kernel cannot tell (no kcmp(2)).
 */
#define PROC_SHARE_VM 1
#define PROC_SHARE_FILES 2
int proc_sharers(pid_t pid, int want, char *list, size_t len);
/*
 * The same, looked at here (the privileged part, or a daemon without one):
 * proc_sharers() asks the privileged part for a process of a grant.
 */
int proc_sharers_scan(pid_t pid, int want, char *list, size_t len);

#endif
