/*
 * A QEMU as migrate-qemu sees it: its file-backed RAM blocks, found by QOM
 * and checked to be what uffdd can serve, and the QMP commands of its
 * migration.
 */
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/vfs.h>

#include "client/qemu.h"
#include "client/qmp.h"

/* Whether PID still runs: a zombie waiting for its parent does not. */
int
process_alive(pid_t pid)
{
	char path[64], buf[512], *p;
	FILE *f;
	int alive = 0;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "r");
	if (f == NULL)
		return 0;
	if (fgets(buf, sizeof(buf), f) != NULL &&
	    (p = strrchr(buf, ')')) != NULL && p[1] == ' ')
		alive = p[2] != 'Z' && p[2] != 'X';
	fclose(f);
	return alive;
}

/*
 * Whether PID is stopped (T): uffdd stops a destination QEMU whose RAM may
 * hold pages of two moments, and a stopped QEMU answers no QMP command.
 */
int
process_stopped(pid_t pid)
{
	char path[64], buf[512], *p;
	FILE *f;
	int stopped = 0;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "r");
	if (f == NULL)
		return 0;
	if (fgets(buf, sizeof(buf), f) != NULL &&
	    (p = strrchr(buf, ')')) != NULL && p[1] == ' ')
		stopped = p[2] == 'T' || p[2] == 't';
	fclose(f);
	return stopped;
}

/* A QOM property's value; NULL when QEMU refused (qmp.c says why). */
static json_object *
qom_get(struct qmp *q, const char *path, const char *prop)
{
	json_object *a = json_object_new_object(), *r = NULL;

	json_object_object_add(a, "path", json_object_new_string(path));
	json_object_object_add(a, "property", json_object_new_string(prop));
	if (qmp_execute(q, "qom-get", a, &r) < 0)
		return NULL;
	return r;
}

/* The children of a QOM path, an array (json-c asserts on anything else). */
static json_object *
qom_list(struct qmp *q, const char *path)
{
	json_object *a = json_object_new_object(), *r = NULL;

	json_object_object_add(a, "path", json_object_new_string(path));
	if (qmp_execute(q, "qom-list", a, &r) < 0)
		return NULL;
	if (!json_object_is_type(r, json_type_array)) {
		fprintf(stderr, "uffd-client: %s: qom-list %s: not a list\n",
			qmp_path(q), path);
		json_object_put(r);
		return NULL;
	}
	return r;
}

/*
 * The file offset a memory-backend-file maps its mem-path from (QEMU 8.1
 * added the "offset" property; before, always 0). 0 and *off set, or -1.
 */
static int
backend_offset(struct qmp *q, const char *obj, uint64_t *off)
{
	json_object *props, *v;
	int has = 0;

	*off = 0;
	if ((props = qom_list(q, obj)) == NULL)
		return -1;
	for (size_t i = 0; i < json_object_array_length(props); i++)
		if (json_object_object_get_ex(
			    json_object_array_get_idx(props, i), "name", &v) &&
		    strcmp(json_object_get_string(v), "offset") == 0)
			has = 1;
	json_object_put(props);
	if (!has)
		return 0;
	if ((v = qom_get(q, obj, "offset")) == NULL)
		return -1;
	*off = (uint64_t)json_object_get_int64(v);
	json_object_put(v);
	return 0;
}

/*
 * Where PID maps the file PATH from its start with LENGTH bytes; 0 when it
 * does not.
 */
static uint64_t
find_mapping(pid_t pid, const char *path, uint64_t length)
{
	char maps[64], line[PATH_MAX + 256];
	uint64_t found = 0;
	FILE *f;

	snprintf(maps, sizeof(maps), "/proc/%d/maps", (int)pid);
	f = fopen(maps, "r");
	if (f == NULL)
		return 0;
	while (fgets(line, sizeof(line), f) != NULL) {
		unsigned long long s, e, fo;
		char *p;
		int off = 0;

		line[strcspn(line, "\n")] = '\0';
		if (sscanf(line, "%llx-%llx %*s %llx %*s %*s %n", &s, &e, &fo,
			   &off) < 3 ||
		    off == 0)
			continue;
		p = line + off;
		if (strcmp(p, path) == 0 && e - s == length && fo == 0) {
			found = s;
			break;
		}
	}
	fclose(f);
	return found;
}

/*
 * What uffdd serves of a RAM file: a file on tmpfs (/dev/shm), the shmem
 * kind; any other file system's shared pages are left out of an export,
 * and with x-ignore-shared QEMU would not move them either.
 */
static int
check_ram_file(struct qmp *q, struct ramblock *b)
{
	struct statfs sf;
	struct stat st;

	if (statfs(b->path, &sf) < 0 || stat(b->path, &st) < 0) {
		fprintf(stderr, "uffd-client: %s: RAM block %s: %s: %s\n",
			qmp_path(q), b->id, b->path, strerror(errno));
		return -1;
	}
	if (sf.f_type != TMPFS_MAGIC) {
		fprintf(stderr,
			"uffd-client: %s: RAM block %s: %s is not on tmpfs "
			"(file system 0x%lx%s): uffdd serves guest RAM from "
			"shared files on tmpfs, such as /dev/shm\n",
			qmp_path(q), b->id, b->path, (unsigned long)sf.f_type,
			sf.f_type == HUGETLBFS_MAGIC ? ", hugetlbfs" : "");
		return -1;
	}
	b->dev = st.st_dev;
	b->ino = st.st_ino;
	return 0;
}

/*
 * A RAM backend other than a file, shared (memfd, or ram with share=on):
 * x-ignore-shared has QEMU skip it, and nothing here would move it.
 */
static int
other_shared_backend(struct qmp *q, const char *type, const char *name)
{
	json_object *sh;
	char obj[256];
	int shared;

	if (strncmp(type, "child<memory-backend-", 21) != 0)
		return 0;
	snprintf(obj, sizeof(obj), "/objects/%s", name);
	if ((sh = qom_get(q, obj, "share")) == NULL)
		return 0;
	shared = json_object_get_boolean(sh);
	json_object_put(sh);
	if (shared)
		fprintf(stderr,
			"uffd-client: %s: RAM block %s is a shared %.*s: only "
			"memory-backend-file RAM on tmpfs can move this way\n",
			qmp_path(q), name, (int)strlen(type + 6) - 1, type + 6);
	return shared;
}

/*
 * One memory-backend-file object, name: its file, size and mapping in the
 * QEMU process, each checked to be what uffdd can serve.
 */
static int
read_block(struct qmp *q, const char *name, struct ramblock *b)
{
	json_object *mp, *sz, *sh;
	char obj[256], real[PATH_MAX];
	uint64_t off;
	int shared;

	snprintf(obj, sizeof(obj), "/objects/%s", name);
	mp = qom_get(q, obj, "mem-path");
	sz = qom_get(q, obj, "size");
	sh = qom_get(q, obj, "share");
	if (mp == NULL || sz == NULL || sh == NULL) {
		json_object_put(mp);
		json_object_put(sz);
		json_object_put(sh);
		return -1;
	}
	snprintf(b->id, sizeof(b->id), "%s", name);
	if (realpath(json_object_get_string(mp), real) == NULL)
		snprintf(real, sizeof(real), "%s", json_object_get_string(mp));
	snprintf(b->path, sizeof(b->path), "%s", real);
	b->size = (uint64_t)json_object_get_int64(sz);
	shared = json_object_get_boolean(sh);
	json_object_put(mp);
	json_object_put(sz);
	json_object_put(sh);
	if (!shared) {
		fprintf(stderr,
			"uffd-client: %s: RAM block %s is not "
			"share=on: uffdd can serve only a shared "
			"file\n",
			qmp_path(q), b->id);
		return -1;
	}
	/*
	 * The holder maps each file from its start: a block that
	 * starts further in would be served the wrong bytes.
	 */
	if (backend_offset(q, obj, &off) < 0)
		return -1;
	if (off != 0) {
		fprintf(stderr,
			"uffd-client: %s: RAM block %s maps %s from "
			"offset %" PRIu64 ": uffdd serves only RAM "
			"files mapped from their start (offset=0)\n",
			qmp_path(q), b->id, b->path, off);
		return -1;
	}
	if (check_ram_file(q, b) < 0)
		return -1;
	b->addr = find_mapping(qmp_pid(q), b->path, b->size);
	if (b->addr == 0) {
		fprintf(stderr,
			"uffd-client: %s: RAM block %s: no mapping "
			"of %s (%" PRIu64 " bytes) in QEMU pid %d "
			"(mem-path must be a file, not a "
			"directory)\n",
			qmp_path(q), b->id, b->path, b->size, (int)qmp_pid(q));
		return -1;
	}
	return 0;
}

/*
 * The QEMU's file-backed RAM blocks: every memory-backend-file object under
 * /objects, with its mem-path, size and the mapping in the QEMU process.
 */
int
ramblocks(struct qmp *q, struct ramblock *b, size_t *n)
{
	json_object *list;

	*n = 0;
	if ((list = qom_list(q, "/objects")) == NULL)
		return -1;
	for (size_t i = 0; i < json_object_array_length(list); i++) {
		json_object *e = json_object_array_get_idx(list, i), *t, *nm;

		if (!json_object_object_get_ex(e, "type", &t) ||
		    !json_object_object_get_ex(e, "name", &nm))
			continue;
		if (strcmp(json_object_get_string(t),
			   "child<memory-backend-file>") != 0) {
			if (other_shared_backend(q, json_object_get_string(t),
						 json_object_get_string(nm)))
				goto fail;
			continue;
		}
		if (*n == MAX_BLOCKS) {
			fprintf(stderr,
				"uffd-client: %s: more than %d RAM "
				"files\n",
				qmp_path(q), MAX_BLOCKS);
			goto fail;
		}
		if (read_block(q, json_object_get_string(nm), &b[*n]) < 0)
			goto fail;
		(*n)++;
	}
	json_object_put(list);
	if (*n == 0) {
		fprintf(stderr,
			"uffd-client: %s: no memory-backend-file: start QEMU "
			"with -object memory-backend-file,share=on,...\n",
			qmp_path(q));
		return -1;
	}
	return 0;
fail:
	json_object_put(list);
	return -1;
}

/* Sets one migration capability (x-ignore-shared, events, ...). */
int
set_capability(struct qmp *q, const char *cap, int on)
{
	json_object *a = json_object_new_object(), *caps, *c;

	caps = json_object_new_array();
	c = json_object_new_object();
	json_object_object_add(c, "capability", json_object_new_string(cap));
	json_object_object_add(c, "state", json_object_new_boolean(on));
	json_object_array_add(caps, c);
	json_object_object_add(a, "capabilities", caps);
	return qmp_execute(q, "migrate-set-capabilities", a, NULL);
}

/* The value of a string member of a command's return, or "". */
int
query_str(struct qmp *q, const char *cmd, const char *member, char *out,
	  size_t len)
{
	json_object *r = NULL, *v;

	if (qmp_execute(q, cmd, NULL, &r) < 0)
		return -1;
	snprintf(out, len, "%s",
		 json_object_object_get_ex(r, member, &v)
			 ? json_object_get_string(v)
			 : "");
	json_object_put(r);
	return 0;
}

/* Runs a command whose one argument is a migration URI. */
int
exec_uri(struct qmp *q, const char *cmd, const char *uri)
{
	json_object *a = json_object_new_object();

	json_object_object_add(a, "uri", json_object_new_string(uri));
	return qmp_execute(q, cmd, a, NULL);
}

/*
 * The destination QEMU listens for the device state on a port of
 * 127.0.0.1 that it picks itself (port 0), and says which in query-migrate
 * (socket-address, QEMU 4.0 on): no port picked here beforehand that
 * something else could take in between. The port, or -1.
 */
int
incoming_port(struct qmp *q)
{
	if (exec_uri(q, "migrate-incoming", "tcp:127.0.0.1:0") < 0)
		return -1;
	return listen_port(q);
}

/* The port an incoming QEMU listens on (query-migrate), or -1 said why. */
int
listen_port(struct qmp *q)
{
	json_object *r = NULL, *addrs, *port;
	int p = -1;

	if (qmp_execute(q, "query-migrate", NULL, &r) < 0)
		return -1;
	if (json_object_object_get_ex(r, "socket-address", &addrs) &&
	    json_object_is_type(addrs, json_type_array) &&
	    json_object_array_length(addrs) > 0 &&
	    json_object_object_get_ex(json_object_array_get_idx(addrs, 0),
				      "port", &port))
		p = atoi(json_object_get_string(port));
	json_object_put(r);
	if (p <= 0 || p > 65535) {
		fprintf(stderr,
			"uffd-client: %s: the destination QEMU does not say "
			"which port it listens on for the device state "
			"(query-migrate socket-address, QEMU 4.0 or later)\n",
			qmp_path(q));
		return -1;
	}
	return p;
}

int
ramfiles_apart(const struct ramblock *sb, size_t ns, const struct ramblock *db,
	       size_t nd)
{
	for (size_t i = 0; i < ns; i++)
		for (size_t k = 0; k < nd; k++)
			if (sb[i].dev == db[k].dev && sb[i].ino == db[k].ino) {
				fprintf(stderr,
					"uffd-client: RAM block %s: %s is the "
					"destination's %s too (block %s): the "
					"destination needs files of its own\n",
					sb[i].id, sb[i].path, db[k].path,
					db[k].id);
				return -1;
			}
	return 0;
}
