/*
 * Telling processes apart across time: a pid is reused once its process is
 * reaped, so a pid saved for later (a state file) is kept with the
 * process's start time, and a restart checks both. And when a stopped
 * process's threads are really off the CPU.
 */
#ifndef UFFDD_PROC_H
#define UFFDD_PROC_H

#include <sys/types.h>

/*
 * The start time of process pid (field 22 of /proc/PID/stat: clock ticks
 * after boot), 0 when it is gone or unreadable.
 */
unsigned long long proc_start(pid_t pid);

/*
 * Returns once every stopped thread of pid is off the CPU (its context
 * switch counted): asked of the privileged part for a granted process.
 */
void proc_off_cpu(pid_t pid);
/* The same, done here. */
void proc_off_cpu_here(pid_t pid);
/* The parent of process pid (field 4 of /proc/PID/stat), 0 when unknown. */
pid_t proc_ppid(pid_t pid);
/*
 * Whether process pid's mapping at addr is registered with a userfaultfd
 * (its VmFlags in /proc/PID/smaps say "um"): read by the privileged part,
 * as smaps is another user's to read only with the right to ptrace.
 */
int proc_uffd_mapped(pid_t pid, unsigned long long addr);
/*
 * The minor and major faults of process pid so far (fields 10 and 12 of
 * /proc/PID/stat), -1 when unknown.
 */
void proc_faults(pid_t pid, long long *minflt, long long *majflt);

#endif
