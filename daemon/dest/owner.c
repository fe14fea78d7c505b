/*
 * The calls the fault reader (fault.c) makes up to the parts that drive
 * it: the target forked (children.c follows the child), the target is
 * gone (lifecycle.c ends or goes on for the children), and a fault broke
 * the migration (lifecycle.c fails it). A part below
 * reports up only by what it returns or through these callbacks, which
 * the role's top (attach.c, at registration) installs: the fault reader
 * neither links to nor knows the code above it (docs/design.md, "The
 * code's layers").
 */
#include "config.h"

#include "daemon/dest/internal.h"
#include "daemon/log.h"

static const struct dest_owner *owner;

/* The role's top, once, before any destination is made. */
void
dest_owner_set(const struct dest_owner *o)
{
	owner = o;
}

static const struct dest_owner *
get(void)
{
	if (owner == NULL)
		fatalx("destination role: a target before the role was "
		       "registered");
	return owner;
}

void
dest_forked(struct dest *parent, int ufd)
{
	get()->forked(parent, ufd);
}

void
dest_exited(struct dest *d)
{
	get()->exited(d);
}

void
dest_broken(struct dest *d, const char *why)
{
	get()->broken(d, why);
}
