/*
 * The calls a part of the source role makes up to the part that drives
 * it: start an export's events, fail or end the migration, free the
 * export. A part below reports up only by what it returns or through
 * these callbacks, which the role's top (export.c, at registration)
 * installs: the part neither links to nor knows the code above it
 * (docs/design.md, "The code's layers").
 */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>

#include "daemon/log.h"
#include "daemon/migration.h"
#include "daemon/source/internal.h"

static const struct source_owner *owner;

/* The role's top, once, before any export is made. */
void
source_owner_set(const struct source_owner *o)
{
	owner = o;
}

static const struct source_owner *
get(void)
{
	if (owner == NULL)
		fatalx("source role: an export before the role was registered");
	return owner;
}

void
source_start(struct source *s)
{
	get()->start(s);
}

/* The migration's record's impl_free (migration.h). */
void
source_free(struct migration *m)
{
	get()->free(m);
}

void
source_fail(struct source *s, const char *fmt, ...)
{
	va_list ap;
	char why[512];

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	get()->fail(s, why);
}

void
source_fail_ran(struct source *s, const char *fmt, ...)
{
	va_list ap;
	char why[400];

	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	get()->fail_ran(s, why);
}

void
source_teardown(struct source *s)
{
	get()->teardown(s);
}
