/*
 * Telling processes apart across time: a pid is reused once its process is
 * reaped, so a pid saved for later (a state file) is kept with the
 * process's start time, and a restart checks both.
 */
#ifndef UFFDD_PROC_H
#define UFFDD_PROC_H

#include <sys/types.h>

/*
 * The start time of process pid (field 22 of /proc/PID/stat: clock ticks
 * after boot), 0 when it is gone or unreadable.
 */
unsigned long long proc_start(pid_t pid);

#endif
