/*
 * The running configuration (confrun.c): conf, as the defaults, the file
 * and the flags make it, at start-up and at each reload.
 */
#ifndef UFFDD_CONFRUN_H
#define UFFDD_CONFRUN_H

#include <stddef.h>

struct uffdd_conf;

/* The command line's settings, filled by main's flag parsing. */
struct uffdd_conf *conf_cli(void);
/* --config PATH: the file, which must then exist. */
void conf_set_path(const char *path);

/*
 * The configuration built (defaults, file, flags): -1 with err filled if
 * the file is unreadable or invalid. conf_reload builds next for a reload
 * (-1: invalid, or a key that needs a restart changed: said, and the
 * running one kept), from the file's descriptor fd when it was handed
 * over (the privileged part opened it for the engine), else -1: by its
 * path. conf_file_path: the file's path.
 */
int conf_build(struct uffdd_conf *, char *err, size_t errlen);
int conf_reload(struct uffdd_conf *next, int fd);
const char *conf_file_path(void);

#endif
