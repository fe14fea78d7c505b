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

#endif
