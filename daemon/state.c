/*
 * Per-migration state files under the state directory, so that a restarted
 * daemon can take its migrations up again (format: statefmt.h). The
 * directory is checked and opened once at start-up and every file is
 * reached through that descriptor: a path swapped later changes nothing.
 * Each file is replaced atomically (a fresh temporary, renamed), so a crash
 * of the daemon at any instant leaves either the old or the new file.
 *
 * A live migration's file is not synced to disk: it is for a daemon that
 * restarts, which finds the renamed file in the page cache, and a crash
 * of the host ends the processes it names (a source's process, a
 * destination's target) with it: no file, old or new, takes them up after
 * a reboot. Syncing was a disk flush (1-2 ms here, more on a busy disk)
 * in the event loop, one of them between a pre-copy's SWITCHOVER and its
 * departure. An ended record, which an operator reads after a reboot, is
 * synced.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/conffile.h"
#include "daemon/log.h"
#include "daemon/migration.h"
#include "daemon/role.h"
#include "daemon/state.h"
#include "daemon/state_dir.h"
#include "daemon/statedir.h"
#include "daemon/statefmt.h"
#include "daemon/stats.h"

#define SUFFIX ".state"
#define TMP_SUFFIX ".state.tmp"
/* An ended migration's outcome (state_end()). */
#define ENDED_SUFFIX ".ended"
#define ENDED_TMP_SUFFIX ".ended.tmp"

/*
 * A migration's file: ID.source.state or ID.destination.state, so that one
 * daemon may hold both ends of a migration (on one host). A role of -1
 * gives the name daemons before this one wrote, ID.state, still read.
 */
void
state_file_name(char *buf, size_t len, const char *id, int role,
		const char *suffix)
{
	snprintf(buf, len, "%s%s%s%s", id, role < 0 ? "" : ".",
		 role < 0	       ? ""
		 : role == ROLE_SOURCE ? "source"
				       : "destination",
		 suffix);
}

/* How logs name a file: the directory, and the ID in it cut short. */
void
state_shown(char *buf, size_t len, const char *file)
{
	snprintf(buf, len, "%s/%s%s", conf.state_dir, log_id(file),
		 strlen(file) > MIG_ID_LEN ? file + MIG_ID_LEN : "");
}

int
state_write_all(int fd, const char *p, size_t n)
{
	while (n > 0) {
		ssize_t w = write(fd, p, n);

		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return -1;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

int
state_create(const char *name, int flags)
{
	if (unlinkat(state_dirfd, name, 0) < 0 && errno != ENOENT)
		return -1;
	return openat(state_dirfd, name,
		      flags | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
}

/* tmp (state_create()) gets buf, then takes name's place; synced if sync. */
static int
replace(const char *tmp, const char *name, const struct state_out *o, int sync)
{
	int fd, e;

	if ((fd = state_create(tmp, O_WRONLY)) < 0)
		return -1;
	if (state_write_all(fd, o->buf, o->len) < 0 ||
	    (sync && fsync(fd) < 0)) {
		e = errno;
		close(fd);
		errno = e;
		return -1;
	}
	if (close(fd) < 0 || renameat(state_dirfd, tmp, state_dirfd, name) < 0)
		return -1;
	if (sync)
		fsync(state_dirfd); /* the rename itself, for a host's crash */
	return 0;
}

/* What every file of a migration starts with: whose, and its state. */
static void
put_head(struct state_out *o, const struct migration *m)
{
	state_put_str(o, "role",
		      m->role == ROLE_SOURCE ? "source" : "destination");
	state_put_str(o, "id", m->id);
	state_put_u64(o, "pid", (uint64_t)m->pid);
	state_put_str(o, "state", migration_state_name(m->state));
}

/* The migration's file of this suffix goes, if there is one. */
static void
remove_file(const struct migration *m, const char *suffix)
{
	char name[MIG_ID_LEN + 32];

	state_file_name(name, sizeof(name), m->id, (int)m->role, suffix);
	if (state_dirfd >= 0)
		unlinkat(state_dirfd, name, 0);
}

int
state_write(const struct migration *m,
	    int (*more)(struct state_out *, const struct migration *))
{
	char name[MIG_ID_LEN + 32], tmp[MIG_ID_LEN + 32], what[256];
	struct state_out o;
	int rc = -1, e;

	state_file_name(name, sizeof(name), m->id, (int)m->role, SUFFIX);
	state_file_name(tmp, sizeof(tmp), m->id, (int)m->role, TMP_SUFFIX);
	state_out_begin(&o);
	put_head(&o, m);
	if (state_dirfd < 0)
		errno = EBADF; /* state_dir_open() first */
	else if (more == NULL || more(&o, m) == 0) {
		state_out_end(&o);
		rc = replace(tmp, name, &o, 0);
	}
	if (rc < 0) {
		e = errno;
		state_shown(what, sizeof(what), name);
		log_warnx("state file %s: cannot write it: %s", what,
			  strerror(e));
		unlinkat(state_dirfd, tmp, 0);
		errno = e;
	}
	state_out_free(&o);
	return rc;
}

void
state_remove(const struct migration *m)
{
	remove_file(m, SUFFIX);
}

/* The ended record goes with the migration's entry in the table. */
static void
forget_ended(const struct migration *m)
{
	remove_file(m, ENDED_SUFFIX);
}

/*
 * The state file goes first: a crash between the two leaves neither, as
 * before ended records were kept, never a live file beside an outcome.
 */
void
state_end(struct migration *m)
{
	char name[MIG_ID_LEN + 32], tmp[MIG_ID_LEN + 32], what[256];
	uint64_t end = m->t.end ? m->t.end : now_ns();
	struct state_out o;

	state_remove(m);
	if (state_dirfd < 0 ||
	    (m->state != MIG_COMPLETE && m->state != MIG_FAILED))
		return;
	state_file_name(name, sizeof(name), m->id, (int)m->role, ENDED_SUFFIX);
	state_file_name(tmp, sizeof(tmp), m->id, (int)m->role,
			ENDED_TMP_SUFFIX);
	state_out_begin(&o);
	put_head(&o, m);
	state_put_str(&o, "reason", m->reason);
	state_put_str(&o, "peer", m->peer);
	state_put_u64(&o, "pages_total", m->cnt.pages_total);
	state_put_u64(&o, "pages_present", m->cnt.pages_present);
	state_put_u64(&o, "pages_lost", m->loss.pages);
	state_put_u64(&o, "bytes", m->cnt.bytes);
	state_put_u64(&o, "elapsed_ns", end - m->t.start);
	state_out_end(&o);
	if (replace(tmp, name, &o, 1) == 0) {
		m->forget = forget_ended;
	} else {
		state_shown(what, sizeof(what), name);
		log_warn("ended record %s: cannot write it (a restart will "
			 "not know migration %s)",
			 what, log_id(m->id));
		unlinkat(state_dirfd, tmp, 0);
	}
	state_out_free(&o);
}

/* A migration ID: what export makes, and what an attach must give. */
static int
is_id(const char *s, size_t n)
{
	return n == MIG_ID_LEN && strspn(s, "0123456789abcdef") >= n;
}

/*
 * A state file that is not what this daemon wrote: it is kept, renamed so
 * that no restart reads it again, and the migration is listed as failed
 * with the reason (as the role the file says, if it says one).
 */
static void
refuse(const char *name, const char *id, int role, const char *why)
{
	char aside[MIG_ID_LEN + 48], what[256];
	struct migration *m;

	snprintf(aside, sizeof(aside), "%s.refused", name);
	if (renameat(state_dirfd, name, state_dirfd, aside) == 0) {
		state_shown(what, sizeof(what), aside);
		log_warnx("%s; state file refused and kept as %s, migration "
			  "%s reported failed",
			  why, what, log_id(id));
	} else {
		log_warn("%s; state file refused, and removed as it cannot be "
			 "moved aside; migration %s reported failed",
			 why, log_id(id));
		unlinkat(state_dirfd, name, 0);
	}
	m = migration_new(role == ROLE_SOURCE ? ROLE_SOURCE : ROLE_DEST, id);
	migration_fail(m, "state file refused at restart: %s", why);
}

int
state_restore_buf(const char *name, const char *id, const char *buf, size_t len,
		  char *why, size_t whylen, int *role)
{
	struct state_tbl *t = state_parse(name, buf, len);
	char r[16], fid[MIG_ID_LEN + 2];
	const struct role_ops *ro;
	int rc = -2, named = *role;

	*role = -1;
	if (state_str(t, "role", r, sizeof(r)) < 0)
		goto out;
	if ((ro = role_by_name(r)) == NULL) {
		state_bad(t, "role", "role %s: want source or destination", r);
		goto out;
	}
	*role = (int)ro->role;
	if (named >= 0 && named != *role) {
		state_bad(t, "role",
			  "role: not the one the file is named after");
		goto out;
	}
	if (state_str(t, "id", fid, sizeof(fid)) < 0)
		goto out;
	if (strcmp(fid, id) != 0) {
		state_bad(t, "id", "id: not the one the file is named after");
		goto out;
	}
	rc = ro->restore(t);
	/* The role refused what it read: the file is not ours. */
	if (rc < 0 && state_error(t)[0])
		rc = -2;
out:
	snprintf(why, whylen, "%s", state_error(t));
	state_free(t);
	return rc;
}

/*
 * Refused unread: a link, not a regular file, or others could write it.
 * The descriptor, and its size in *size; or -1 with why filled.
 */
int
state_open_checked(const char *file, const char *what, int mode, size_t *size,
		   char *why, size_t whylen)
{
	int fd = openat(state_dirfd, file,
			mode | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	struct stat st;

	if (fd < 0) {
		snprintf(why, whylen, "%s: %s", what,
			 errno == ELOOP ? "a symbolic link" : strerror(errno));
		return -1;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) ||
	    st.st_uid != geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH)) ||
	    st.st_size > STATE_FILE_MAX) {
		snprintf(why, whylen,
			 "%s: not a regular file of uid %u that only it may "
			 "write, of at most %u bytes (type and mode %06o, "
			 "uid %u, %lld bytes)",
			 what, (unsigned)geteuid(), STATE_FILE_MAX,
			 (unsigned)st.st_mode, (unsigned)st.st_uid,
			 (long long)st.st_size);
		close(fd);
		return -1;
	}
	*size = (size_t)st.st_size;
	return fd;
}

/* The whole file, which fstat found size bytes long, into *buf. */
static ssize_t
read_whole(int fd, size_t size, char **buf)
{
	size_t len = 0;
	ssize_t n;

	/* One byte more: a file that grew since fails its checksum. */
	*buf = xmalloc(size + 1);
	while (len <= size && (n = read(fd, *buf + len, size + 1 - len)) != 0) {
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -1;
		len += (size_t)n;
	}
	return (ssize_t)len;
}

/*
 * A file of the old name (ID.state) restored: it takes its role's name,
 * unless the restore already wrote one, which is newer.
 */
static void
rename_old(const char *file, const char *id, int role)
{
	char name[MIG_ID_LEN + 32];

	state_file_name(name, sizeof(name), id, role, SUFFIX);
	if (renameat2(state_dirfd, file, state_dirfd, name, RENAME_NOREPLACE) <
	    0)
		unlinkat(state_dirfd, file, 0);
}

/*
 * A state directory's file read whole, once state_open_checked() passed it: its
 * length, or -1 with why said.
 */
static ssize_t
read_checked(const char *file, const char *what, char **buf, char *why,
	     size_t whylen)
{
	ssize_t len = -1;
	size_t size;
	int fd;

	if ((fd = state_open_checked(file, what, O_RDONLY, &size, why,
				     whylen)) >= 0) {
		if ((len = read_whole(fd, size, buf)) < 0)
			snprintf(why, whylen, "%s: %s", what, strerror(errno));
		close(fd);
	}
	return len;
}

/*
 * One state file of migration id, named for role (-1: the old name):
 * restored, refused (moved aside), or not taken up.
 */
static void
restore_file(const char *file, const char *id, int named)
{
	char what[256], why[640], *buf = NULL;
	int rc = -2, role = named;
	ssize_t len = -1;

	state_shown(what, sizeof(what), file);
	len = read_checked(file, what, &buf, why, sizeof(why));
	if (len >= 0)
		rc = state_restore_buf(what, id, buf, (size_t)len, why,
				       sizeof(why), &role);
	free(buf);
	if (rc == -2) {
		refuse(file, id, role, why);
	} else if (rc < 0) {
		log_warnx("state file %s: migration %s not taken up; file "
			  "removed",
			  what, log_id(id));
		unlinkat(state_dirfd, file, 0);
	} else if (named < 0) {
		rename_old(file, id, role);
	}
}

/* What an ended record keeps (state_end()). */
struct ended {
	char role[16], id[MIG_ID_LEN + 2], state[16];
	char reason[sizeof(((struct migration *)0)->reason)];
	char peer[sizeof(((struct migration *)0)->peer)];
	uint64_t pid, total, present, lost, bytes, elapsed;
};

/* An ended record's keys, checked as a state file's are: 0, or -1. */
static int
ended_read(struct state_tbl *t, const char *id, int role, struct ended *e)
{
	if (state_str(t, "role", e->role, sizeof(e->role)) < 0 ||
	    state_str(t, "id", e->id, sizeof(e->id)) < 0 ||
	    state_str(t, "state", e->state, sizeof(e->state)) < 0 ||
	    state_str(t, "reason", e->reason, sizeof(e->reason)) < 0 ||
	    state_str(t, "peer", e->peer, sizeof(e->peer)) < 0 ||
	    state_u64(t, "pid", 0, INT32_MAX, &e->pid) < 0 ||
	    state_u64(t, "pages_total", 0, UINT64_MAX, &e->total) < 0 ||
	    state_u64(t, "pages_present", 0, e->total, &e->present) < 0 ||
	    state_u64(t, "pages_lost", 0, e->total, &e->lost) < 0 ||
	    state_u64(t, "bytes", 0, UINT64_MAX, &e->bytes) < 0 ||
	    state_u64(t, "elapsed_ns", 0, UINT64_MAX / 2, &e->elapsed) < 0)
		return -1;
	if (strcmp(e->role, role == ROLE_SOURCE ? "source" : "destination"))
		return state_bad(t, "role",
				 "role: not the one the file is named after");
	if (strcmp(e->id, id) != 0)
		return state_bad(t, "id",
				 "id: not the one the file is named after");
	if (strcmp(e->state, "complete") && strcmp(e->state, "failed"))
		return state_bad(t, "state",
				 "state %s: want complete or failed", e->state);
	return state_all_read(t);
}

/*
 * One ended record: the migration is listed again as it ended. A record
 * that is not what this daemon wrote is refused as a state file is.
 */
static void
restore_ended(const char *file, const char *id, int role)
{
	char what[256], why[640], *buf = NULL;
	struct state_tbl *t = NULL;
	struct migration *m;
	struct ended e;
	ssize_t len = -1;

	if (migration_find(id, (enum mig_role)role)) {
		/* A live file of the same migration was restored: newer. */
		unlinkat(state_dirfd, file, 0);
		return;
	}
	state_shown(what, sizeof(what), file);
	len = read_checked(file, what, &buf, why, sizeof(why));
	if (len >= 0) {
		t = state_parse(what, buf, (size_t)len);
		if (ended_read(t, id, role, &e) < 0)
			len = -1;
		snprintf(why, sizeof(why), "%s", state_error(t));
		state_free(t);
	}
	free(buf);
	if (len < 0) {
		refuse(file, id, role, why);
		return;
	}
	m = migration_new((enum mig_role)role, id);
	m->pid = (pid_t)e.pid;
	migration_set_peer(m, e.peer);
	snprintf(m->reason, sizeof(m->reason), "%s", e.reason);
	m->cnt.pages_total = e.total;
	m->cnt.pages_present = e.present;
	m->loss.pages = e.lost;
	m->cnt.bytes = e.bytes;
	/* Not through migration_set_state(): it ended before, counted then. */
	m->state = strcmp(e.state, "failed") == 0 ? MIG_FAILED : MIG_COMPLETE;
	m->t.end = now_ns();
	m->t.start = m->t.created =
		e.elapsed < m->t.end ? m->t.end - e.elapsed : 0;
	m->forget = forget_ended;
	log_info("migration %s is listed as %s, as it ended before the "
		 "restart",
		 log_id(id), e.state);
}

/* The names first: restoring writes files into the directory read. */
static char **
list_dir(size_t *n)
{
	int fd = dup(state_dirfd);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	char **names = NULL;
	struct dirent *e;

	*n = 0;
	if (d == NULL) {
		log_warn("state directory %s: cannot list it", conf.state_dir);
		if (fd >= 0)
			close(fd);
		return NULL;
	}
	rewinddir(d);
	while ((e = readdir(d)) != NULL) {
		if ((names = realloc(names, (*n + 1) * sizeof(*names))) == NULL)
			fatal("state directory listing");
		names[(*n)++] = xstrdup(e->d_name);
	}
	closedir(d);
	return names;
}

/*
 * Whether f is a state file name ending in suffix: ID, then .source,
 * .destination (*role set) or nothing (the old name, *role -1).
 */
static int
file_named(const char *f, const char *suffix, int *role)
{
	size_t n = strlen(f), k = strlen(suffix);
	static const struct {
		const char *tag;
		int role;
	} tags[] = {{"", -1},
		    {".source", ROLE_SOURCE},
		    {".destination", ROLE_DEST}};

	if (n < MIG_ID_LEN + k || !is_id(f, MIG_ID_LEN) ||
	    strcmp(f + n - k, suffix) != 0)
		return 0;
	for (size_t i = 0; i < sizeof(tags) / sizeof(tags[0]); i++) {
		if (n - k - MIG_ID_LEN == strlen(tags[i].tag) &&
		    strncmp(f + MIG_ID_LEN, tags[i].tag, n - k - MIG_ID_LEN) ==
			    0) {
			*role = tags[i].role;
			return 1;
		}
	}
	return 0;
}

/*
 * Whether f is a file of migration id (ID.role.suffix) with one of these
 * suffixes: the temporary is removed, the file restored by restore.
 */
static void
restore_named(const char *f, const char *tmp, const char *suffix,
	      void (*restore)(const char *, const char *, int))
{
	char id[MIG_ID_LEN + 1];
	int role;

	snprintf(id, sizeof(id), "%.*s", MIG_ID_LEN, f);
	/* A crash between create and rename left it: never read. */
	if (file_named(f, tmp, &role))
		unlinkat(state_dirfd, f, 0);
	else if (file_named(f, suffix, &role))
		restore(f, id, role);
}

/* An ended record never had the old name: one without a role is not ours. */
static void
restore_ended_named(const char *file, const char *id, int role)
{
	if (role >= 0)
		restore_ended(file, id, role);
}

/*
 * A destination's record of installed pages whose state file is gone
 * (its migration ended, or was not taken up) goes. One beside a state
 * file refused is kept with it, for a look (and a state file put back
 * finds it).
 */
static void
drop_unused_record(const char *file, const char *id, int role)
{
	char name[MIG_ID_LEN + 48];
	struct stat st;

	if (role != ROLE_DEST)
		return; /* not a name this daemon writes */
	state_file_name(name, sizeof(name), id, role, SUFFIX);
	if (fstatat(state_dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0)
		return;
	state_file_name(name, sizeof(name), id, role, SUFFIX ".refused");
	if (fstatat(state_dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0)
		return;
	unlinkat(state_dirfd, file, 0);
}

void
state_restore_all(void)
{
	size_t n;
	char **names = state_dirfd >= 0 ? list_dir(&n) : NULL;

	for (size_t i = 0; names && i < n; i++)
		restore_named(names[i], TMP_SUFFIX, SUFFIX, restore_file);
	/* After the state files: a live one of the same ID is newer. */
	for (size_t i = 0; names && i < n; i++)
		restore_named(names[i], ENDED_TMP_SUFFIX, ENDED_SUFFIX,
			      restore_ended_named);
	/* Last: the state files that use one have mapped it. */
	for (size_t i = 0; names && i < n; i++) {
		restore_named(names[i], STATE_INSTALLED_SUFFIX ".tmp",
			      STATE_INSTALLED_SUFFIX, drop_unused_record);
		free(names[i]);
	}
	free(names);
}
