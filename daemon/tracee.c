/* Targets held with PTRACE_O_EXITKILL (see tracee.h). */
#include "config.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ptrace.h>
#include <sys/wait.h>

#include "daemon/inject.h"
#include "daemon/log.h"
#include "daemon/tracee.h"

struct held {
	pid_t pid;
	int releasing; /* detach at its next stop */
};

static struct held *held;
static size_t nheld;

static struct held *
find(pid_t pid)
{
	for (size_t i = 0; i < nheld; i++)
		if (held[i].pid == pid)
			return &held[i];
	return NULL;
}

static void
add(pid_t pid)
{
	struct held *h = realloc(held, (nheld + 1) * sizeof(*held));

	if (h == NULL)
		fatal("tracee");
	held = h;
	held[nheld].pid = pid;
	held[nheld++].releasing = 0;
}

static void
drop(struct held *h)
{
	*h = held[--nheld];
}

int
tracee_keep(struct inject *inj)
{
	pid_t pid = inj->pid;
	int ok = 0;

	/* The others go as inject_end() lets them; the main thread stays. */
	for (size_t i = 0; i < inj->ntids; i++)
		if (inj->tids[i] == pid) {
			inj->tids[i] = inj->tids[--inj->ntids];
			ok = 1;
			break;
		}
	if (ok && inj->have_regs &&
	    ptrace(PTRACE_SETREGS, pid, 0, &inj->saved) < 0)
		ok = 0;
	inj->have_regs = 0;
	inject_end(inj);
	/*
	 * It sits in a stop of the injection (an event stop, or the SIGTRAP
	 * of the last single step, which PTRACE_CONT with no signal drops).
	 */
	if (ok && ptrace(PTRACE_SETOPTIONS, pid, 0, PTRACE_O_EXITKILL) == 0 &&
	    ptrace(PTRACE_CONT, pid, 0, 0) == 0) {
		add(pid);
		return 0;
	}
	ptrace(PTRACE_DETACH, pid, 0, 0);
	return -1;
}

int
tracee_seize(pid_t pid)
{
	if (ptrace(PTRACE_SEIZE, pid, 0, PTRACE_O_EXITKILL) < 0)
		return -1;
	add(pid);
	return 0;
}

int
tracee_held(pid_t pid)
{
	return find(pid) != NULL;
}

size_t
tracee_count(void)
{
	return nheld;
}

void
tracee_release(pid_t pid)
{
	struct held *h = find(pid);

	if (h == NULL)
		return;
	/*
	 * Detached at its next stop; this one makes it stop soon. One that
	 * cannot be interrupted is dying or dead: it stays listed until
	 * tracee_reap() collects its exit, as its tracer must, or its own
	 * parent could never reap it (a zombie for as long as we run).
	 */
	h->releasing = 1;
	ptrace(PTRACE_INTERRUPT, pid, 0, 0);
	tracee_reap();
}

/* A group stop (SIGSTOP and kin) stays one: PTRACE_LISTEN, not CONT. */
static int
stop_signal(int sig)
{
	return sig == SIGSTOP || sig == SIGTSTP || sig == SIGTTIN ||
	       sig == SIGTTOU;
}

/* Handles what pid reported; 0 when it is no longer held. */
static int
one(struct held *h, int st)
{
	int event = st >> 16, sig = WSTOPSIG(st);

	if (!WIFSTOPPED(st))
		return 0; /* exited or killed */
	if (h->releasing) {
		/* A signal it stopped to take goes with it. */
		ptrace(PTRACE_DETACH, h->pid, 0, event == 0 ? sig : 0);
		return 0;
	}
	if (event == 0)
		ptrace(PTRACE_CONT, h->pid, 0, sig);
	else if (event == PTRACE_EVENT_STOP && stop_signal(sig))
		ptrace(PTRACE_LISTEN, h->pid, 0, 0);
	else
		ptrace(PTRACE_CONT, h->pid, 0, 0);
	return 1;
}

void
tracee_reap(void)
{
	for (size_t i = 0; i < nheld;) {
		int st;
		pid_t r = waitpid(held[i].pid, &st, __WALL | WNOHANG);

		if (r == 0) {
			i++;
		} else if (r < 0 && errno == EINTR) {
			continue;
		} else if (r < 0 || !one(&held[i], st)) {
			drop(&held[i]);
		}
	}
}
