/*
 * Per-migration state files under the state directory, so that a restarted
 * daemon can take its migrations up again. Each file is replaced atomically
 * (write a temporary, rename), so a crash at any instant leaves either the
 * old or the new file, never half of one.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/log.h"
#include "daemon/uffdd.h"

int
state_write(const struct migration *m,
	    void (*more)(FILE *, const struct migration *))
{
	char *path, *tmp;
	int rc = 0, e;
	FILE *f;

	xasprintf(&path, "%s/%s.state", conf.state_dir, m->id);
	xasprintf(&tmp, "%s.tmp", path);
	if ((f = fopen(tmp, "we")) != NULL) {
		fprintf(f, "role=%s\nid=%s\npid=%d\npeer=%s\nstate=%s\n",
			m->role == ROLE_SOURCE ? "source" : "destination",
			m->id, (int)m->pid, m->peer,
			migration_state_name(m->state));
		if (more)
			more(f, m);
		if (fclose(f) == 0 && rename(tmp, path) == 0)
			goto out;
	}
	e = errno;
	log_warn("state file %s", path);
	unlink(tmp);
	errno = e;
	rc = -1;
out:
	free(tmp);
	free(path);
	return rc;
}

void
state_remove(const struct migration *m)
{
	char *path;

	xasprintf(&path, "%s/%s.state", conf.state_dir, m->id);
	unlink(path);
	free(path);
}

int
state_next(FILE *f, char **key, char **val)
{
	static char line[1024];

	while (fgets(line, sizeof(line), f) != NULL) {
		char *eq = strchr(line, '=');

		line[strcspn(line, "\n")] = '\0';
		if (eq == NULL)
			continue;
		*eq = '\0';
		*key = line;
		*val = eq + 1;
		return 1;
	}
	return 0;
}

void
state_restore_all(void)
{
	DIR *d = opendir(conf.state_dir);
	struct dirent *e;

	if (d == NULL)
		return;
	while ((e = readdir(d)) != NULL) {
		size_t len = strlen(e->d_name);
		char *path, *key, *val;
		int rc = -1;
		FILE *f;

		if (len < 7 || strcmp(e->d_name + len - 6, ".state") != 0)
			continue;
		xasprintf(&path, "%s/%s", conf.state_dir, e->d_name);
		if ((f = fopen(path, "re")) != NULL &&
		    state_next(f, &key, &val) && strcmp(key, "role") == 0) {
			if (strcmp(val, "source") == 0)
				rc = source_restore(path, f);
			else if (strcmp(val, "destination") == 0)
				rc = dest_restore(path, f);
		}
		if (f)
			fclose(f);
		if (rc < 0) {
			log_warnx("state file %s: not restored; removed", path);
			unlink(path);
		}
		free(path);
	}
	closedir(d);
}
