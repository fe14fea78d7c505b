/*
 * snapshot PID --to FILE [--range START-END]... [--keep-source]: the
 * process's memory to an image file. The file is made here, with the
 * caller's own rights: new and nameless (O_TMPFILE) in FILE's directory,
 * handed to the daemon over the control socket, checked once written, and
 * only then named FILE (linkat, which never replaces a file). The daemon
 * kills the process (or, kept, lets it go) once FILE is in place; if
 * anything fails first, no file is left and the process runs on.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "client/client.h"
#include "proto/frame.h"
#include "proto/image.h"

/*
 * The new nameless file in the directory of path, readable by the caller
 * alone (it holds the process's memory). Exits when it cannot be made.
 */
static int
make_file(const char *path, int *dirfd)
{
	char *copy = strdup(path);
	const char *dir;
	int fd;

	if (copy == NULL)
		exit(1);
	dir = dirname(copy);
	*dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	fd = *dirfd < 0 ? -1
			: openat(*dirfd, ".", O_TMPFILE | O_RDWR | O_CLOEXEC,
				 0600);
	if (fd < 0) {
		fprintf(stderr,
			"uffd-client: %s: cannot make an image file "
			"there: %s%s\n",
			dir, strerror(errno),
			errno == EOPNOTSUPP || errno == EISDIR
				? " (the file system has no O_TMPFILE)"
				: "");
		exit(1);
	}
	free(copy);
	return fd;
}

/* Checks the image as written: every table and checksum (image.h). */
static int
check_written(int fd, const char *path)
{
	struct image im;
	char err[256];
	int copy = dup(fd);

	if (copy < 0 || image_open(&im, copy, err, sizeof(err)) < 0 ||
	    image_verify(&im, err, sizeof(err)) < 0) {
		fprintf(stderr,
			"uffd-client: %s: the image written does not "
			"check: %s\n",
			path, copy < 0 ? strerror(errno) : err);
		if (copy >= 0)
			image_close(&im);
		return -1;
	}
	image_close(&im);
	return 0;
}

/* Names the file path; never replaces one. Then its directory to disk. */
static int
name_file(int fd, int dirfd, const char *path)
{
	char proc[64];

	snprintf(proc, sizeof(proc), "/proc/self/fd/%d", fd);
	if (linkat(AT_FDCWD, proc, AT_FDCWD, path, AT_SYMLINK_FOLLOW) < 0) {
		fprintf(stderr, "uffd-client: %s: %s%s\n", path,
			strerror(errno),
			errno == EEXIST ? " (an image never replaces a file: "
					  "remove it first)"
					: "");
		return -1;
	}
	if (fsync(dirfd) < 0) {
		fprintf(stderr, "uffd-client: %s: fsync of its directory: %s\n",
			path, strerror(errno));
		unlink(path);
		return -1;
	}
	return 0;
}

/* Waits for the daemon's next step; NULL (said) on an error. */
static Uffdd__SnapshotReply *
step(int sock, uint16_t want)
{
	ProtobufCMessage *m;
	uint16_t got;

	if (frame_recv_fd(sock, &got, &m) < 0) {
		fprintf(stderr, "uffd-client: uffdd at %s: %s\n", control_path,
			errno == ECONNRESET ? "closed the connection"
					    : strerror(errno));
		return NULL;
	}
	frame_clean_strings(m);
	if (got == FRAME_ERROR)
		fprintf(stderr, "uffd-client: %s\n",
			((Uffdd__Error *)m)->message);
	else if (got != want)
		fprintf(stderr, "uffd-client: unexpected %s reply\n",
			frame_type_name(got));
	else
		return (Uffdd__SnapshotReply *)m;
	frame_free(m);
	return NULL;
}

/* The exchange with the daemon (see daemon/source/snapshot.c). */
static int
run(int sock, const Uffdd__SnapshotRequest *req, const char *path)
{
	Uffdd__SnapshotReply *rep;
	char b1[32], b2[32];
	int fd, dirfd, named;
	double mib;

	if (frame_send_fd(sock, FRAME_CTL_SNAPSHOT, &req->base) < 0 ||
	    (rep = step(sock, FRAME_CTL_SNAPSHOT_READY)) == NULL)
		return 1;
	frame_free(&rep->base);
	fd = make_file(path, &dirfd);
	if (send_byte_fd(sock, 'F', fd) < 0 ||
	    (rep = step(sock, FRAME_CTL_SNAPSHOT_WRITTEN)) == NULL)
		return 1;
	mib = (double)rep->bytes / (1 << 20);
	printf("snapshot of process %d: %u regions, %" PRIu64 " data, %" PRIu64
	       " zero, %" PRIu64 " hole pages; %s "
	       "written in %.2f s (%.0f MiB/s)\n",
	       (int)req->pid, rep->regions, rep->data_pages, rep->zero_pages,
	       rep->hole_pages, human_bytes((double)rep->bytes, b1, sizeof(b1)),
	       rep->elapsed_s, rep->elapsed_s > 0 ? mib / rep->elapsed_s : 0);
	frame_free(&rep->base);
	named = check_written(fd, path) == 0 && name_file(fd, dirfd, path) == 0;
	close(fd);
	close(dirfd);
	/* Anything but 'C' and the daemon lets the process go on. */
	if (send_byte_fd(sock, named ? 'C' : 'A', -1) < 0 || !named ||
	    (rep = step(sock, FRAME_CTL_SNAPSHOT_DONE)) == NULL) {
		if (named)
			fprintf(stderr,
				"uffd-client: %s is in place, but the "
				"snapshot did not end: process %d was not "
				"killed (it is still stopped if the daemon "
				"died)\n",
				path, (int)req->pid);
		return 1;
	}
	printf("%s: image ok (%s); process %d %s\n", path,
	       human_bytes(mib * (1 << 20), b2, sizeof(b2)), (int)req->pid,
	       rep->killed ? "killed" : "left running");
	frame_free(&rep->base);
	return 0;
}

/* snapshot PID --to FILE [--range START-END]... [--keep-source] */
int
cmd_snapshot(const struct cmd_entry *self, int argc, char **argv)
{
	const char *u = self->usage, *to = NULL;
	static const struct option o[] = {
		{"to", required_argument, NULL, 't'},
		{"range", required_argument, NULL, 'r'},
		{"keep-source", no_argument, NULL, 'k'},
		{NULL, 0, NULL, 0}};
	Uffdd__SnapshotRequest req = UFFDD__SNAPSHOT_REQUEST__INIT;
	int ch, sock, rc;

	while ((ch = getopt_long(argc, argv, "t:r:k", o, NULL)) != -1) {
		if (ch == 't')
			to = optarg;
		else if (ch == 'r')
			req.ranges =
				add_range(req.ranges, &req.n_ranges, optarg, u);
		else if (ch == 'k')
			req.keep_source = 1;
		else
			die_usage(u);
	}
	if (argc - optind != 1 || to == NULL || *to == '\0')
		die_usage(u);
	req.pid = parse_pid(argv[optind], u);
	/* Said before the process is frozen; linkat() is what holds to it. */
	if (faccessat(AT_FDCWD, to, F_OK, AT_SYMLINK_NOFOLLOW) == 0) {
		fprintf(stderr,
			"uffd-client: %s exists (an image never "
			"replaces a file: remove it first)\n",
			to);
		free_ranges(req.ranges, req.n_ranges);
		return 1;
	}
	sock = connect_daemon();
	rc = run(sock, &req, to);
	free_ranges(req.ranges, req.n_ranges);
	close(sock);
	return rc;
}
