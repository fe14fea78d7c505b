/*
 * migrate-qemu: the QEMU postcopy flow of DESIGN section 7, one command.
 * Guest RAM lives in shared files (memory-backend-file, share=on); QEMU
 * moves device state only (x-ignore-shared) and uffdd moves the RAM:
 *
 *   1. both QEMUs: x-ignore-shared; RAM blocks found by QOM and matched
 *      by backend id (the RAM block name), never by address;
 *   2. source: stop, wait for STOP (the vCPUs no longer write guest RAM);
 *   3. a holder process maps the source RAM files and is exported: the
 *      source daemon serves the files from it while the source QEMU stays
 *      free to send its device state (export freezes what it exports);
 *   4. destination: attach to QEMU's RAM mappings (--map, the addresses
 *      differ), then migrate-incoming: the device-state load may read
 *      guest RAM already (kvmvapic), and every page it reads faults in;
 *   5. source: migrate; when the destination has loaded, cont;
 *   6. wait until every page is resident, then quit the source QEMU.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <sys/wait.h>

#include "client/client.h"
#include "client/qmp.h"

#define MAX_BLOCKS 16

struct ramblock {
	char id[128];
	char path[PATH_MAX];
	uint64_t size;
	uint64_t addr;	 /* where this QEMU maps it */
	uint64_t holder; /* where the holder maps it (source only) */
	size_t match;	 /* the source block of a destination block */
	dev_t dev;	 /* the file, whatever its name */
	ino_t ino;
};

static double
now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Progress of the flow, one line a step, on stderr. */
static void
say(const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "migrate-qemu: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\n");
}

/* Whether PID still runs: a zombie waiting for its parent does not. */
static int
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
 * The QEMU's file-backed RAM blocks: every memory-backend-file object under
 * /objects, with its mem-path, size and the mapping in the QEMU process.
 */
static int
ramblocks(struct qmp *q, struct ramblock *b, size_t *n)
{
	json_object *list;

	*n = 0;
	if ((list = qom_list(q, "/objects")) == NULL)
		return -1;
	for (size_t i = 0; i < json_object_array_length(list); i++) {
		json_object *e = json_object_array_get_idx(list, i), *t, *nm;
		json_object *mp, *sz, *sh;
		char obj[256], real[PATH_MAX];
		uint64_t off;

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
		snprintf(obj, sizeof(obj), "/objects/%s",
			 json_object_get_string(nm));
		mp = qom_get(q, obj, "mem-path");
		sz = qom_get(q, obj, "size");
		sh = qom_get(q, obj, "share");
		if (mp == NULL || sz == NULL || sh == NULL) {
			json_object_put(mp);
			json_object_put(sz);
			json_object_put(sh);
			goto fail;
		}
		snprintf(b[*n].id, sizeof(b[*n].id), "%s",
			 json_object_get_string(nm));
		if (realpath(json_object_get_string(mp), real) == NULL)
			snprintf(real, sizeof(real), "%s",
				 json_object_get_string(mp));
		snprintf(b[*n].path, sizeof(b[*n].path), "%s", real);
		b[*n].size = (uint64_t)json_object_get_int64(sz);
		if (!json_object_get_boolean(sh)) {
			fprintf(stderr,
				"uffd-client: %s: RAM block %s is not "
				"share=on: uffdd can serve only a shared "
				"file\n",
				qmp_path(q), b[*n].id);
			json_object_put(mp);
			json_object_put(sz);
			json_object_put(sh);
			goto fail;
		}
		json_object_put(mp);
		json_object_put(sz);
		json_object_put(sh);
		/*
		 * The holder maps each file from its start: a block that
		 * starts further in would be served the wrong bytes.
		 */
		if (backend_offset(q, obj, &off) < 0)
			goto fail;
		if (off != 0) {
			fprintf(stderr,
				"uffd-client: %s: RAM block %s maps %s from "
				"offset %" PRIu64 ": uffdd serves only RAM "
				"files mapped from their start (offset=0)\n",
				qmp_path(q), b[*n].id, b[*n].path, off);
			goto fail;
		}
		if (check_ram_file(q, &b[*n]) < 0)
			goto fail;
		b[*n].addr = find_mapping(qmp_pid(q), b[*n].path, b[*n].size);
		if (b[*n].addr == 0) {
			fprintf(stderr,
				"uffd-client: %s: RAM block %s: no mapping "
				"of %s (%" PRIu64 " bytes) in QEMU pid %d "
				"(mem-path must be a file, not a "
				"directory)\n",
				qmp_path(q), b[*n].id, b[*n].path, b[*n].size,
				(int)qmp_pid(q));
			goto fail;
		}
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

static int
set_ignore_shared(struct qmp *q, int on)
{
	json_object *a = json_object_new_object(), *caps, *c;

	caps = json_object_new_array();
	c = json_object_new_object();
	json_object_object_add(c, "capability",
			       json_object_new_string("x-ignore-shared"));
	json_object_object_add(c, "state", json_object_new_boolean(on));
	json_object_array_add(caps, c);
	json_object_object_add(a, "capabilities", caps);
	return qmp_execute(q, "migrate-set-capabilities", a, NULL);
}

/* The value of a string member of a command's return, or "". */
static int
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

static int
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
static int
incoming_port(struct qmp *q)
{
	json_object *r = NULL, *addrs, *port;
	int p = -1;

	if (exec_uri(q, "migrate-incoming", "tcp:127.0.0.1:0") < 0 ||
	    qmp_execute(q, "query-migrate", NULL, &r) < 0)
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

static volatile sig_atomic_t holder_pid, holder_kept;

/* How long QEMU may take to move the device state (it takes ms). */
#define DEVSTATE_SECS 120

/*
 * SIGINT, SIGTERM, SIGHUP: before the destination guest runs, the holder
 * is ours to remove (the source guest is still the guest); after, it is
 * the destination guest's RAM until the migration completes.
 */
static void
on_fatal_signal(int sig)
{
	if (holder_pid > 0 && !holder_kept)
		kill((pid_t)holder_pid, SIGKILL);
	signal(sig, SIG_DFL);
	raise(sig);
}

/*
 * The holder: a child that maps the source RAM files (shared; writable as
 * the source daemon serves only rw mappings, but it never writes)
 * and sleeps; it is what the source daemon exports and, at completion,
 * kills.
 */
static pid_t
start_holder(struct ramblock *b, size_t n)
{
	pid_t pid;

	for (size_t i = 0; i < n; i++) {
		int fd = open(b[i].path, O_RDWR | O_CLOEXEC);
		void *p;

		if (fd < 0) {
			fprintf(stderr, "uffd-client: %s: %s\n", b[i].path,
				strerror(errno));
			return -1;
		}
		p = mmap(NULL, b[i].size, PROT_READ | PROT_WRITE, MAP_SHARED,
			 fd, 0);
		close(fd);
		if (p == MAP_FAILED) {
			fprintf(stderr, "uffd-client: mmap %s: %s\n", b[i].path,
				strerror(errno));
			return -1;
		}
		b[i].holder = (uint64_t)(uintptr_t)p;
	}
	pid = fork();
	if (pid < 0) {
		fprintf(stderr, "uffd-client: fork: %s\n", strerror(errno));
		return -1;
	}
	if (pid == 0) {
		int null = open("/dev/null", O_RDWR);

		/*
		 * Holds no descriptor of ours: a QMP socket kept open here
		 * would keep QEMU's only QMP connection busy, a pipe would
		 * keep a reader of our output waiting.
		 */
		if (null >= 0) {
			dup2(null, 0);
			dup2(null, 1);
			dup2(null, 2);
		}
		close_range(3, ~0U, 0);
		/*
		 * Not killed with us, nor by a Ctrl-C at our terminal: once
		 * the destination guest runs, this serves its RAM until the
		 * source daemon kills it at completion, whatever becomes of
		 * us. Before that, we kill it on every way out (kill_holder).
		 */
		setsid();
		for (;;)
			pause();
	}
	for (size_t i = 0; i < n; i++)
		munmap((void *)(uintptr_t)b[i].holder, b[i].size);
	return pid;
}

int
cmd_migrate_qemu(int argc, char **argv)
{
	static const char *u =
		"migrate-qemu --src-qmp SOCK --dst-qmp SOCK "
		"--src-control PATH --dst-control PATH --src-peer HOST:PORT "
		"[--no-resume] [--timeout SEC]";
	static const struct option o[] = {
		{"src-qmp", required_argument, NULL, 's'},
		{"dst-qmp", required_argument, NULL, 'd'},
		{"src-control", required_argument, NULL, 'S'},
		{"dst-control", required_argument, NULL, 'D'},
		{"src-peer", required_argument, NULL, 'p'},
		{"no-resume", no_argument, NULL, 'n'},
		{"timeout", required_argument, NULL, 't'},
		{NULL, 0, NULL, 0}};
	const char *sq = NULL, *dq = NULL, *sc = NULL, *dc = NULL, *peer = NULL;
	struct ramblock sb[MAX_BLOCKS], db[MAX_BLOCKS];
	size_t ns, nd;
	struct qmp *src = NULL, *dst = NULL;
	Uffdd__ExportRequest ereq = UFFDD__EXPORT_REQUEST__INIT;
	Uffdd__AttachRequest areq = UFFDD__ATTACH_REQUEST__INIT;
	Uffdd__ExportReply *erep;
	Uffdd__AttachReply *arep;
	Uffdd__RegionMap maps[MAX_BLOCKS], *mapp[MAX_BLOCKS];
	Uffdd__Range ranges[MAX_BLOCKS], *rangep[MAX_BLOCKS];
	char st[64], uri[64], id[64], *end;
	double timeout = 0, t_stop, t_run = 0, t_done, t_dev;
	int ch, fd, resume = 1, port, rc = 1;
	pid_t holder = -1;
	uint64_t qemu_bytes = 0;
	int stopped_src = 0, dst_ran = 0, resident = 0, ignoring = 0;

	while ((ch = getopt_long(argc, argv, "", o, NULL)) != -1) {
		switch (ch) {
		case 's':
			sq = optarg;
			break;
		case 'd':
			dq = optarg;
			break;
		case 'S':
			sc = optarg;
			break;
		case 'D':
			dc = optarg;
			break;
		case 'p':
			peer = optarg;
			break;
		case 'n':
			resume = 0;
			break;
		case 't':
			timeout = strtod(optarg, &end);
			if (*end || end == optarg || !(timeout > 0) ||
			    timeout > 1e9)
				die_usage(u);
			break;
		default:
			die_usage(u);
		}
	}
	if (optind != argc || !sq || !dq || !sc || !dc || !peer)
		die_usage(u);

	if ((src = qmp_open(sq)) == NULL || (dst = qmp_open(dq)) == NULL)
		goto out;
	if (ramblocks(src, sb, &ns) < 0 || ramblocks(dst, db, &nd) < 0)
		goto out;
	/* Match by RAM block name: addresses differ between the QEMUs. */
	for (size_t i = 0; i < ns; i++) {
		size_t j;

		for (j = 0; j < nd; j++)
			if (strcmp(sb[i].id, db[j].id) == 0)
				break;
		if (j == nd || db[j].size != sb[i].size) {
			fprintf(stderr,
				"uffd-client: RAM block %s (%" PRIu64
				" bytes) has no match of the same size in "
				"the destination QEMU\n",
				sb[i].id, sb[i].size);
			goto out;
		}
		/* The same file under any name: attach would punch it. */
		for (size_t k = 0; k < nd; k++)
			if (sb[i].dev == db[k].dev && sb[i].ino == db[k].ino) {
				fprintf(stderr,
					"uffd-client: RAM block %s: %s is the "
					"destination's %s too (block %s): the "
					"destination needs files of its own\n",
					sb[i].id, sb[i].path, db[k].path,
					db[k].id);
				goto out;
			}
		sb[i].holder = 0;
		db[j].match = i;
		say("RAM block %s: %" PRIu64 " MiB, source pid %d at 0x%" PRIx64
		    ", destination pid %d at 0x%" PRIx64,
		    sb[i].id, sb[i].size >> 20, (int)qmp_pid(src), sb[i].addr,
		    (int)qmp_pid(dst), db[j].addr);
	}
	if (nd != ns) {
		fprintf(stderr, "uffd-client: the destination QEMU has RAM "
				"blocks the source lacks\n");
		goto out;
	}
	if (query_str(dst, "query-status", "status", st, sizeof(st)) < 0)
		goto out;
	if (strcmp(st, "inmigrate") != 0) {
		fprintf(stderr,
			"uffd-client: destination QEMU is %s: start it "
			"with -incoming defer\n",
			st);
		goto out;
	}
	/*
	 * Before anything stops: the source is a guest to move (running, or
	 * paused by its operator), and both daemons answer.
	 */
	if (query_str(src, "query-status", "status", st, sizeof(st)) < 0)
		goto out;
	if (strcmp(st, "running") != 0 && strcmp(st, "paused") != 0) {
		fprintf(stderr,
			"uffd-client: source QEMU is %s, not running or "
			"paused: nothing to migrate from it\n",
			st);
		goto out;
	}
	control_path = sc;
	if ((fd = connect_daemon_try()) < 0)
		goto out;
	close(fd);
	control_path = dc;
	if ((fd = connect_daemon_try()) < 0)
		goto out;
	close(fd);
	if (set_ignore_shared(src, 1) < 0 || set_ignore_shared(dst, 1) < 0)
		goto out;
	ignoring = 1;

	/* Switchover starts: the source vCPUs stop writing guest RAM. */
	t_stop = now_s();
	if (strcmp(st, "running") == 0) {
		stopped_src = 1;
		if (qmp_execute(src, "stop", NULL, NULL) < 0 ||
		    qmp_wait_event(src, "STOP", 30000, NULL) < 0) {
			fprintf(stderr, "uffd-client: source QEMU did not "
					"stop its vCPUs\n");
			goto out;
		}
	}
	say("source vCPUs stopped");

	signal(SIGINT, on_fatal_signal);
	signal(SIGTERM, on_fatal_signal);
	signal(SIGHUP, on_fatal_signal);
	holder = start_holder(sb, ns);
	if (holder < 0)
		goto out;
	holder_pid = holder;
	for (size_t i = 0; i < ns; i++) {
		uffdd__range__init(&ranges[i]);
		ranges[i].start = sb[i].holder;
		ranges[i].end = sb[i].holder + sb[i].size;
		rangep[i] = &ranges[i];
	}
	ereq.pid = holder;
	ereq.ranges = rangep;
	ereq.n_ranges = ns;
	control_path = sc;
	if ((fd = connect_daemon_try()) < 0)
		goto out;
	erep = (Uffdd__ExportReply *)call_try(fd, FRAME_CTL_EXPORT, &ereq.base,
					      FRAME_CTL_EXPORT_REPLY);
	if (erep == NULL) {
		close(fd);
		goto out;
	}
	snprintf(id, sizeof(id), "%s", erep->id);
	frame_free(&erep->base);
	close(fd);
	say("source RAM exported: migration %s", id);

	for (size_t j = 0; j < nd; j++) {
		uffdd__region_map__init(&maps[j]);
		maps[j].src_start = sb[db[j].match].holder;
		maps[j].dst_start = db[j].addr;
		mapp[j] = &maps[j];
	}
	areq.pid = qmp_pid(dst);
	areq.from = (char *)peer;
	areq.id = id;
	areq.maps = mapp;
	areq.n_maps = nd;
	control_path = dc;
	if ((fd = connect_daemon_try()) < 0)
		goto out;
	arep = (Uffdd__AttachReply *)call_try(fd, FRAME_CTL_ATTACH, &areq.base,
					      FRAME_CTL_ATTACH_REPLY);
	if (arep == NULL) {
		close(fd);
		goto out;
	}
	print_regions("attached", arep->matched, arep->n_matched, stderr);
	if (arep->n_unmatched == 0 && arep->n_matched < ns) {
		frame_free(&arep->base);
		close(fd);
		fprintf(stderr,
			"uffd-client: %zu of %zu RAM blocks were exported "
			"and attached: the rest would not move\n",
			arep->n_matched, ns);
		goto out;
	}
	if (arep->n_unmatched) {
		print_regions("unmatched", arep->unmatched, arep->n_unmatched,
			      stderr);
		frame_free(&arep->base);
		close(fd);
		fprintf(stderr, "uffd-client: some source RAM was not "
				"matched in the destination QEMU\n");
		goto out;
	}
	frame_free(&arep->base);
	close(fd);
	say("destination QEMU attached: guest RAM arrives post-copy");

	if ((port = incoming_port(dst)) < 0)
		goto out;
	snprintf(uri, sizeof(uri), "tcp:127.0.0.1:%d", port);
	if (exec_uri(src, "migrate", uri) < 0)
		goto out;
	/*
	 * Device state only: this takes milliseconds. A source that never
	 * gets there (a pause-before-switchover capability set earlier, a
	 * QEMU wedged) must not keep the guest stopped for good.
	 */
	t_dev = now_s();
	for (;;) {
		json_object *r = NULL, *v, *ram;

		if (now_s() - t_dev > DEVSTATE_SECS) {
			fprintf(stderr,
				"uffd-client: QEMU's device-state migration "
				"is %s after %d s\n",
				st, DEVSTATE_SECS);
			goto out;
		}

		if (qmp_execute(src, "query-migrate", NULL, &r) < 0)
			goto out;
		snprintf(st, sizeof(st), "%s",
			 json_object_object_get_ex(r, "status", &v)
				 ? json_object_get_string(v)
				 : "");
		if (json_object_object_get_ex(r, "ram", &ram) &&
		    json_object_object_get_ex(ram, "transferred", &v))
			qemu_bytes = (uint64_t)json_object_get_int64(v);
		json_object_put(r);
		if (strcmp(st, "completed") == 0)
			break;
		if (strcmp(st, "failed") == 0 || strcmp(st, "cancelled") == 0) {
			fprintf(stderr,
				"uffd-client: QEMU device-state migration "
				"%s (see the QEMUs' stderr)\n",
				st);
			goto out;
		}
		usleep(20000);
	}
	for (;;) {
		if (query_str(dst, "query-status", "status", st, sizeof(st)) <
		    0)
			goto out;
		if (strcmp(st, "inmigrate") != 0)
			break;
		if (now_s() - t_dev > DEVSTATE_SECS) {
			fprintf(stderr,
				"uffd-client: the destination QEMU is still "
				"inmigrate after %d s\n",
				DEVSTATE_SECS);
			goto out;
		}
		usleep(20000);
	}
	if (strcmp(st, "running") == 0)
		dst_ran = holder_kept = 1; /* it started on its own */
	say("device state moved to the destination (%s): %" PRIu64
	    " bytes by QEMU",
	    st, qemu_bytes);
	if (resume && strcmp(st, "running") != 0 &&
	    qmp_execute(dst, "cont", NULL, NULL) < 0)
		goto out;
	if (resume) {
		dst_ran = 1;
		holder_kept = 1;
		t_run = now_s();
		say("destination guest running, %.0f ms after the source "
		    "stopped",
		    (t_run - t_stop) * 1000);
	} else {
		say("destination guest left paused (--no-resume)");
	}

	control_path = dc;
	if (wait_for(id, timeout) != 0)
		goto out;
	t_done = now_s();
	resident = 1;
	say("every page resident %.3f s after switchover",
	    t_done - (resume ? t_run : t_stop));
	/* QEMU may hang up before it answers quit: what counts is its exit. */
	qmp_execute(src, "quit", NULL, NULL);
	for (int i = 0; i < 100 && process_alive(qmp_pid(src)); i++)
		usleep(100000);
	if (process_alive(qmp_pid(src))) {
		fprintf(stderr,
			"uffd-client: source QEMU pid %d did not quit; the "
			"destination holds every page, it may be killed\n",
			(int)qmp_pid(src));
		goto out;
	}
	say("source QEMU has exited");
	rc = 0;
out:
	/*
	 * Until the destination guest has run, the source is still the guest:
	 * a failure before then resumes it rather than leaving it stopped.
	 */
	if (rc != 0 && src != NULL && !dst_ran && !resident && ignoring)
		/* A later migration of it must move its shared RAM again. */
		set_ignore_shared(src, 0);
	if (rc != 0 && src != NULL && stopped_src && !dst_ran && !resident) {
		if (qmp_execute(src, "cont", NULL, NULL) == 0)
			say("failed before switchover: source guest resumed");
	} else if (rc != 0 && resident && !dst_ran) {
		fprintf(stderr,
			"uffd-client: the paused destination holds every page "
			"(--no-resume): the source QEMU is left stopped, not "
			"resumed\n");
	} else if (rc != 0 && dst_ran) {
		fprintf(stderr,
			"uffd-client: the destination guest runs: migration "
			"%s goes on in the daemons (uffd-client --control %s "
			"wait %s); the source QEMU is left stopped, and "
			"process %d serves its RAM files until the migration "
			"completes\n",
			id, dc, id, (int)holder);
	}
	if (holder > 0 && !dst_ran) {
		/* The source guest is still the guest: it goes. */
		kill(holder, SIGKILL);
		waitpid(holder, NULL, 0);
	} else if (holder > 0 && rc == 0) {
		/* The source daemon has killed it at completion. */
		waitpid(holder, NULL, 0);
	}
	qmp_close(src);
	qmp_close(dst);
	return rc;
}

/* qmp SOCK COMMAND [ARGS]: one QMP command, its return printed as JSON. */
int
cmd_qmp(int argc, char **argv)
{
	static const char *u = "qmp SOCK COMMAND [ARGUMENTS-JSON]";
	json_object *args = NULL, *r = NULL;
	struct qmp *q;
	int rc = 1;

	if (argc < 3 || argc > 4)
		die_usage(u);
	if (argc == 4 && (args = json_tokener_parse(argv[3])) == NULL) {
		fprintf(stderr, "uffd-client: %s: not JSON\n", argv[3]);
		die_usage(u);
	}
	q = qmp_open(argv[1]);
	if (q == NULL) {
		json_object_put(args);
		return 1;
	}
	if (qmp_execute(q, argv[2], args, &r) == 0) {
		printf("%s\n", json_object_to_json_string_ext(
				       r, JSON_C_TO_STRING_PLAIN));
		rc = 0;
	}
	json_object_put(r);
	qmp_close(q);
	return rc;
}
