/*
 * Files of other processes (/proc/PID/maps, pagemap, map_files, mem) as
 * the engine gets them: the privileged part opens them for the grant that
 * covers the process (docs/privsep.md), the engine only reads (or writes)
 * through the descriptor. A process the engine holds no grant for is
 * refused (EPERM): a pid alone may name another process by now. With no
 * engine (the privileged part's own steps, tools) and for the calling
 * process itself, the file is opened here, by path.
 */
#ifndef UFFDD_PROCFILE_H
#define UFFDD_PROCFILE_H

#include <stdint.h>
#include <sys/types.h>

/* The engine holds process pid under grant (0 drops every one of pid). */
void procfile_bind(pid_t pid, uint64_t grant);
/* The engine holds nothing of grant any more. */
void procfile_unbind(uint64_t grant);
/* The newest grant that covers process pid, or 0 (none). */
uint64_t procfile_grant(pid_t pid);

/* Each returns a descriptor (close-on-exec), or -1 with errno set. */
int procfile_maps(pid_t pid);
int procfile_pagemap(pid_t pid);
int procfile_map_file(pid_t pid, uint64_t start, uint64_t end);
/* /proc/PID/mem read-write: a destination's, whose pages arrive. */
int procfile_mem_rw(pid_t pid);
/*
 * Changes to the file behind pid's mapping [start, end): an inotify
 * descriptor (non-blocking) watching it for IN_MODIFY, which a hole
 * punched (fallocate, MADV_REMOVE through any mapping), a write() or a
 * truncate make, and a store through a mapping does not. Where the kernel
 * reports them (kfeat.punch_notify).
 */
int procfile_map_watch(pid_t pid, uint64_t start, uint64_t end);
/* The same for an open file fd (its watch made through /proc/self/fd). */
int procfile_watch(int fd);
/*
 * Whether watch w saw a change since the last call (its events read): 1,
 * or 0; 1 also when it cannot be told (an error, a queue overflow).
 */
int procfile_watch_changed(int w);
/*
 * The device and inode of the file watch w watches, as the kernel reports
 * them for the watch itself (/proc/self/fdinfo): what a caller decides
 * about the file is decided about the one watched, not about another open
 * of a path the target can remap in between. 0, or -1 with errno set.
 */
int procfile_watch_file(int w, dev_t *dev, ino_t *ino);

#endif
