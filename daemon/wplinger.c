/*
 * Released write trackers, closed once their process has exited or
 * WPLINGER_S seconds on (wplinger.h says why).
 */
#include "config.h"

#include <fcntl.h>
#include <stdlib.h>
#include <unistd.h>

#include <event2/event.h>

#include "daemon/log.h"
#include "daemon/loop.h"
#include "daemon/procref.h"
#include "daemon/wplinger.h"

struct held {
	struct wptrack w;
	pid_t pid;
	int pidfd; /* our copy; -1: the timer alone */
	struct event *ev;
	struct held *next;
};

static struct held *lingering;

static void
linger_end(struct held *l)
{
	struct held **p = &lingering;

	while (*p != l)
		p = &(*p)->next;
	*p = l->next;
	event_free(l->ev);
	wptrack_stop(&l->w);
	if (l->pidfd >= 0)
		close(l->pidfd);
	free(l);
}

/* The process exited (its pidfd turned readable), or the time is up. */
static void
linger_cb(evutil_socket_t fd, short ev, void *arg)
{
	(void)fd;
	(void)ev;
	linger_end(arg);
}

void
wptrack_release(struct wptrack *w, const struct procref *t)
{
	struct timeval tv = {WPLINGER_S, 0};
	struct held *l;

	if (w->uffd < 0 || w->sync || (l = calloc(1, sizeof(*l))) == NULL) {
		wptrack_stop(w);
		return;
	}
	l->w = *w;
	*w = (struct wptrack)WPTRACK_NONE;
	l->pid = t->pid;
	l->pidfd = t->pidfd >= 0 ? fcntl(t->pidfd, F_DUPFD_CLOEXEC, 0) : -1;
	l->ev = event_new(base, l->pidfd, l->pidfd >= 0 ? EV_READ : 0,
			  linger_cb, l);
	if (l->ev == NULL)
		fatalx("event_new");
	event_add(l->ev, &tv);
	l->next = lingering;
	lingering = l;
}

int
wptrack_start_over(struct wptrack *w, const struct procref *t,
		   const struct range *rs, size_t n, enum wptrack_mode mode,
		   char *why, size_t len)
{
	struct held *l = lingering, *next;

	for (; l; l = next) {
		next = l->next;
		if (l->pid == t->pid)
			linger_end(l);
	}
	return wptrack_start(w, t, rs, n, mode, why, len);
}

void
wptrack_release_all(void)
{
	while (lingering)
		linger_end(lingering);
}
