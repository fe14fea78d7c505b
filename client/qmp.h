/* qmp: a small client for QEMU's machine protocol, on json-c. */
#ifndef UFFDD_QMP_H
#define UFFDD_QMP_H

#include <sys/types.h>

#include <json-c/json.h>

struct qmp;

struct qmp *qmp_open(const char *path);
void qmp_close(struct qmp *);
pid_t qmp_pid(const struct qmp *);
const char *qmp_path(const struct qmp *);
int qmp_execute(struct qmp *, const char *cmd, json_object *args,
		json_object **result);
int qmp_wait_event(struct qmp *, const char *name, int timeout_ms,
		   json_object **data);

#endif
