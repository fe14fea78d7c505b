/* The roles' operations, as registered (role.h). */
#include "config.h"

#include <string.h>

#include "daemon/role.h"

#define ROLES 2

static const struct role_ops *roles[ROLES];
/* Few: the snapshot. */
#define REQUESTS 8
static const struct role_request *requests[REQUESTS];

void
role_register(const struct role_ops *ops)
{
	roles[ops->role] = ops;
}

const struct role_ops *
role_get(enum mig_role r)
{
	return (unsigned)r < ROLES ? roles[r] : NULL;
}

const struct role_ops *
role_by_name(const char *name)
{
	for (int i = 0; i < ROLES; i++)
		if (roles[i] && strcmp(roles[i]->name, name) == 0)
			return roles[i];
	return NULL;
}

const struct role_ops *
role_by_request(uint16_t type)
{
	for (int i = 0; i < ROLES; i++)
		if (roles[i] && roles[i]->request_type == type)
			return roles[i];
	return NULL;
}

void
role_register_request(const struct role_request *q)
{
	for (int i = 0; i < REQUESTS; i++)
		if (requests[i] == NULL || requests[i]->type == q->type) {
			requests[i] = q;
			return;
		}
}

const struct role_request *
role_request_by_type(uint16_t type)
{
	for (int i = 0; i < REQUESTS && requests[i] != NULL; i++)
		if (requests[i]->type == type)
			return requests[i];
	return NULL;
}
