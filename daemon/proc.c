/* Process identity and the state of a process's threads (proc.h). */
#include "config.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/syscall.h>

#include "daemon/imsg.h"
#include "daemon/privop.h"
#include "daemon/proc.h"
#include "daemon/procfile.h"

unsigned long long
proc_start(pid_t pid)
{
	char path[64], buf[1024], *p;
	unsigned long long start = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	if ((f = fopen(path, "re")) == NULL)
		return 0;
	/* Field 22; the name (field 2) may hold blanks: count after it. */
	if (fgets(buf, sizeof(buf), f) && (p = strrchr(buf, ')')) &&
	    sscanf(p + 2,
		   "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %*u %*u "
		   "%*d %*d %*d %*d %*d %*d %llu",
		   &start) != 1)
		start = 0;
	fclose(f);
	return start;
}

/*
 * Reading a stopped thread's /proc/PID/task/TID/syscall makes the kernel
 * wait until the thread is off the CPU (wait_task_inactive()): a thread
 * shows as stopped (T) a moment before it switches out, and that switch
 * is counted only then.
 */
void
proc_off_cpu_here(pid_t pid)
{
	char path[320], buf[256];
	struct dirent *e;
	DIR *d;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	if ((d = opendir(path)) == NULL)
		return;
	while ((e = readdir(d)) != NULL) {
		int fd;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%s/syscall",
			 (int)pid, e->d_name);
		if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
			continue;
		if (read(fd, buf, sizeof(buf)) < 0)
			buf[0] = '\0';
		close(fd);
	}
	closedir(d);
}

/*
 * The syscall file opens only with the right to ptrace the process: in
 * the engine the privileged part reads it, for the grant of pid.
 */
void
proc_off_cpu(pid_t pid)
{
	uint64_t grant = procfile_grant(pid);
	struct imsg rep;
	int route = privop_route(grant);

	if (route <= 0) {
		if (route == 0)
			proc_off_cpu_here(pid);
		return; /* the engine without a grant: no wait, no read */
	}
	privop_call(PRIVOP_OFF_CPU, grant, NULL, 0, NULL, 0, &rep, NULL);
	imsg_clear(&rep);
}

pid_t
proc_ppid(pid_t pid)
{
	char path[64], buf[1024], *p;
	int ppid = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	if ((f = fopen(path, "re")) == NULL)
		return 0;
	/* After the command name, which may hold blanks and parentheses. */
	if (fgets(buf, sizeof(buf), f) && (p = strrchr(buf, ')')) != NULL &&
	    sscanf(p + 1, " %*c %d", &ppid) != 1)
		ppid = 0;
	fclose(f);
	return (pid_t)ppid;
}

int
proc_uffd_mapped(pid_t pid, unsigned long long addr)
{
	char path[64], line[512];
	unsigned long long s, e;
	int in = 0, yes = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/smaps", (int)pid);
	if ((f = fopen(path, "re")) == NULL)
		return 0;
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "%llx-%llx ", &s, &e) == 2) {
			in = addr >= s && addr < e;
		} else if (in && strncmp(line, "VmFlags:", 8) == 0) {
			yes = strstr(line, " um") != NULL;
			break;
		}
	}
	fclose(f);
	return yes;
}

void
proc_faults(pid_t pid, long long *minflt, long long *majflt)
{
	char path[64], buf[1024], *p;
	FILE *f;

	*minflt = *majflt = -1;
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	if ((f = fopen(path, "re")) == NULL)
		return;
	/* After the name: state ppid pgrp session tty tpgid flags minflt
	 * cminflt majflt. */
	if (fgets(buf, sizeof(buf), f) && (p = strrchr(buf, ')')) &&
	    sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %lld %*u %lld", minflt,
		   majflt) != 2)
		*minflt = *majflt = -1;
	fclose(f);
}
