/*
 * The engine (docs/privsep.md): the event loop, both roles and the data
 * path, in a process of its own that the privileged part starts. Control
 * requests and privileged operations go through its two socket pairs
 * with the privileged part (control.h, privop.h).
 */
#ifndef UFFDD_ENGINE_H
#define UFFDD_ENGINE_H

struct uffdd_conf;

/* Runs the engine on its socket pairs' ends; returns the exit status. */
int engine_main(int ctl, int rpc);

/*
 * uffdd.c: the configuration as built at start-up (defaults, file, flags)
 * and again at a reload (-1: invalid, or a key that needs a restart
 * changed: said, and the running one kept); the file's path.
 */
int conf_build(struct uffdd_conf *, char *err, size_t errlen);
int conf_reload(struct uffdd_conf *next);
const char *conf_file_path(void);

#endif
