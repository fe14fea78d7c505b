/* Process identity: pid and start time (proc.h). */
#include "config.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <sys/syscall.h>

#include "daemon/proc.h"

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
