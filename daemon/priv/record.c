/*
 * Grant records, written and read by the privileged part alone (record.h).
 * One small text file a grant, named for the first migration bound to it:
 *
 *	uffdd-grant 1
 *	request FRAME_TYPE
 *	caller UID GID PID PRIVILEGED
 *	process PID START
 *	bind ROLE ID		(one to GRANT_BINDS lines)
 *
 * Written to a temporary name and renamed over, so that a daemon killed
 * mid-write leaves the old record or the new one.
 */
#include "config.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "proto/frame.h"

#include "daemon/authz.h"
#include "daemon/log.h"
#include "daemon/priv/grant.h"
#include "daemon/priv/record.h"

#define RECORD_DIR "grants"
#define SUFFIX ".grant"
#define TMP_SUFFIX ".grant.tmp"
#define RECORD_MAX 4096

static int dirfd_rec = -1;
static int keeping; /* the daemon stops: drops keep their records */

/* Ours alone: owned by our uid, nothing for group or others. */
static int
ours(const struct stat *st)
{
	return st->st_uid == geteuid() && (st->st_mode & 077) == 0;
}

int
record_dir_open(const char *state_dir)
{
	struct stat st;
	int dfd, fd = -1;

	/*
	 * Through the state directory, if it is ours and no one else may
	 * write it (the engine refuses any other, and the daemon with it):
	 * nothing is made in a directory someone else controls.
	 */
	if (mkdir(state_dir, 0700) < 0 && errno != EEXIST)
		goto fail;
	dfd = open(state_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0)
		goto fail;
	errno = 0;
	if (fstat(dfd, &st) == 0 && st.st_uid == geteuid() &&
	    !(st.st_mode & 022) &&
	    (mkdirat(dfd, RECORD_DIR, 0700) == 0 || errno == EEXIST))
		fd = openat(dfd, RECORD_DIR,
			    O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	close(dfd);
	if (fd < 0)
		goto fail;
	if (fstat(fd, &st) < 0 || !ours(&st)) {
		log_warnx("grant records: %s/%s is not this daemon's alone "
			  "(owner uid %u, mode %04o): not used; no migration "
			  "survives a restart of the daemon",
			  state_dir, RECORD_DIR, (unsigned)st.st_uid,
			  (unsigned)(st.st_mode & 07777));
		close(fd);
		return -1;
	}
	record_dir_close();
	dirfd_rec = fd;
	keeping = 0;
	return 0;
fail:
	log_warnx("grant records: %s/%s cannot be used (%s); no migration "
		  "survives a restart of the daemon",
		  state_dir, RECORD_DIR,
		  errno ? strerror(errno) : "the state directory is not ours");
	return -1;
}

void
record_dir_close(void)
{
	if (dirfd_rec >= 0)
		close(dirfd_rec);
	dirfd_rec = -1;
}

void
record_keep_all(void)
{
	keeping = 1;
}

/* The record's text, or -1 when it does not fit. */
static int
format(const struct grant *g, char *buf, size_t len)
{
	size_t off;
	int n;

	n = snprintf(buf, len,
		     "uffdd-grant 1\nrequest %u\ncaller %u %u %d %d\n"
		     "process %d %llu\n",
		     (unsigned)g->frame_type, (unsigned)g->who.uid,
		     (unsigned)g->who.gid, (int)g->who.pid,
		     g->who.privileged != 0, (int)g->t.pid, g->t.start);
	if (n < 0 || (size_t)n >= len)
		return -1;
	off = (size_t)n;
	for (size_t i = 0; i < g->nbinds; i++) {
		n = snprintf(buf + off, len - off, "bind %u %s\n",
			     (unsigned)g->binds[i].role, g->binds[i].id);
		if (n < 0 || (size_t)n >= len - off)
			return -1;
		off += (size_t)n;
	}
	return (int)off;
}

/* Writes text (n bytes) to name, through its temporary. */
static int
replace(const char *name, const char *text, int n)
{
	char tmp[sizeof(((struct grant *)0)->record) + 8];
	int fd, ok;

	snprintf(tmp, sizeof(tmp), "%.*s%s",
		 (int)(strlen(name) - strlen(SUFFIX)), name, TMP_SUFFIX);
	fd = openat(dirfd_rec, tmp,
		    O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC,
		    0600);
	if (fd < 0)
		return -1;
	ok = write(fd, text, (size_t)n) == n && fsync(fd) == 0;
	close(fd);
	if (ok && renameat(dirfd_rec, tmp, dirfd_rec, name) == 0)
		return 0;
	unlinkat(dirfd_rec, tmp, 0);
	return -1;
}

void
record_write(struct grant *g)
{
	char text[RECORD_MAX];
	int n;

	/*
	 * Only a live grant of a process, and not a forked child's (it is
	 * opened again by its parent's).
	 */
	if (dirfd_rec < 0 || g->nbinds == 0 || g->t.pid <= 0 || g->parent ||
	    g->dropped)
		return;
	if (g->record[0] == '\0')
		snprintf(g->record, sizeof(g->record), "%s.%s%s",
			 g->binds[0].id,
			 g->binds[0].role == ROLE_SOURCE ? "source"
							 : "destination",
			 SUFFIX);
	if ((n = format(g, text, sizeof(text))) < 0 ||
	    replace(g->record, text, n) < 0)
		log_warn("grant record %s: cannot write it; migration %s does "
			 "not survive a restart of the daemon",
			 g->record, log_id(g->binds[0].id));
}

void
record_remove(struct grant *g)
{
	if (dirfd_rec < 0 || g->record[0] == '\0' || keeping)
		return;
	if (unlinkat(dirfd_rec, g->record, 0) < 0 && errno != ENOENT)
		log_warn("grant record %s: cannot remove it", g->record);
	g->record[0] = '\0';
}

/* A record as read. */
struct rec {
	uint16_t frame_type;
	struct authz_caller who;
	pid_t pid;
	unsigned long long start;
	struct ctl_bind binds[GRANT_BINDS];
	size_t nbinds;
};

static int
is_id(const char *s)
{
	return strlen(s) == MIG_ID_LEN &&
	       strspn(s, "0123456789abcdef") == MIG_ID_LEN;
}

/* One line of a record into r; seen says which came. 0, or -1. */
static int
parse_line(const char *line, struct rec *r, unsigned *seen)
{
	unsigned a, b;
	int c, d;
	char id[MIG_ID_LEN + 2], extra;

	if (strcmp(line, "uffdd-grant 1") == 0 && !(*seen & 1))
		*seen |= 1;
	else if (sscanf(line, "request %u%c", &a, &extra) == 1 &&
		 !(*seen & 2) && a <= 0xffff) {
		r->frame_type = (uint16_t)a;
		*seen |= 2;
	} else if (sscanf(line, "caller %u %u %d %d%c", &a, &b, &c, &d,
			  &extra) == 4 &&
		   !(*seen & 4) && (d == 0 || d == 1)) {
		r->who = (struct authz_caller){
			.pid = c, .uid = a, .gid = b, .privileged = d};
		*seen |= 4;
	} else if (sscanf(line, "process %d %llu%c", &c, &r->start, &extra) ==
			   2 &&
		   !(*seen & 8) && c > 1 && r->start > 0) {
		r->pid = c;
		*seen |= 8;
	} else if (sscanf(line, "bind %u %33s%c", &a, id, &extra) == 2 &&
		   a <= ROLE_DEST && is_id(id) && r->nbinds < GRANT_BINDS) {
		r->binds[r->nbinds].role = a;
		snprintf(r->binds[r->nbinds].id, sizeof(r->binds[0].id), "%s",
			 id);
		r->nbinds++;
	} else {
		return -1;
	}
	return 0;
}

/* The record's text parsed whole: 0, or -1 with why. */
static int
parse(char *text, struct rec *r, const char **why)
{
	char *save = NULL;
	unsigned seen = 0;

	memset(r, 0, sizeof(*r));
	for (char *l = strtok_r(text, "\n", &save); l != NULL;
	     l = strtok_r(NULL, "\n", &save))
		if (parse_line(l, r, &seen) < 0) {
			*why = "a line that does not parse";
			return -1;
		}
	if (seen != 15 || r->nbinds == 0) {
		*why = "incomplete";
		return -1;
	}
	if (r->frame_type != FRAME_CTL_EXPORT &&
	    r->frame_type != FRAME_CTL_ATTACH) {
		*why = "not an export's nor an attach's";
		return -1;
	}
	return 0;
}

/*
 * Reads record name, if it is ours: a regular file, one link, owned by
 * us and by nobody else's group or others, small. 0, or -1 (said).
 */
static int
read_record(const char *name, struct rec *r)
{
	char text[RECORD_MAX + 1];
	const char *why = "cannot read it";
	struct stat st;
	ssize_t n = -1;
	int fd;

	fd = openat(dirfd_rec, name,
		    O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st) < 0) {
		log_warn("grant record %s: ignored", name);
		if (fd >= 0)
			close(fd);
		return -1;
	}
	if (!S_ISREG(st.st_mode) || st.st_nlink != 1 || !ours(&st) ||
	    st.st_size > RECORD_MAX) {
		log_warnx("grant record %s is not this daemon's (a file of "
			  "uid %u, mode %04o, %lld bytes, %u links): ignored",
			  name, (unsigned)st.st_uid,
			  (unsigned)(st.st_mode & 07777), (long long)st.st_size,
			  (unsigned)st.st_nlink);
		close(fd);
		return -1;
	}
	n = read(fd, text, RECORD_MAX);
	close(fd);
	if (n >= 0) {
		text[n] = '\0';
		if (memchr(text, '\0', (size_t)n) != NULL)
			why = "a nul byte";
		else if (parse(text, r, &why) == 0)
			return 0;
	}
	log_warnx("grant record %s: %s: ignored", name, why);
	return -1;
}

/* Record name's grant opened again, or the record removed (said). */
static int
restore_one(const char *name)
{
	struct procref t;
	struct grant *g;
	struct rec r;
	char err[256];

	if (read_record(name, &r) < 0)
		return 0;
	if (procref_open(&t, r.pid, err, sizeof(err)) < 0 ||
	    t.start != r.start) {
		/*
		 * A destination's target that exited may have left processes
		 * it forked migrating: the grant, with no process, is what
		 * takes them up (PRIVOP_ORPHAN). Unclaimed, it goes once the
		 * engine is ready.
		 */
		log_info("grant record %s: process %d is gone (%s)%s", name,
			 (int)r.pid,
			 t.pidfd >= 0 ? "its pid names another process now"
				      : err,
			 r.frame_type == FRAME_CTL_ATTACH
				 ? "; kept for the processes it forked"
				 : ": removed");
		procref_close(&t);
		if (r.frame_type != FRAME_CTL_ATTACH) {
			unlinkat(dirfd_rec, name, 0);
			return 0;
		}
		t.pid = r.pid;
		t.start = r.start;
	} else if (!authz_allows(&r.who, &t)) {
		log_warnx("grant record %s: uid %u may not ptrace process %d "
			  "any more (it changed credentials or program): "
			  "removed",
			  name, (unsigned)r.who.uid, (int)r.pid);
		procref_close(&t);
		unlinkat(dirfd_rec, name, 0);
		return 0;
	}
	g = grant_new(r.frame_type, &r.who, &t);
	memcpy(g->binds, r.binds, sizeof(r.binds));
	g->nbinds = r.nbinds;
	g->unclaimed = 1;
	snprintf(g->record, sizeof(g->record), "%s", name);
	log_info("grant record %s: process %d granted again to uid %u for "
		 "migration %s",
		 name, (int)r.pid, (unsigned)r.who.uid, log_id(r.binds[0].id));
	return 1;
}

int
record_restore_all(void)
{
	DIR *d;
	struct dirent *e;
	int fd, n = 0;
	size_t len;

	if (dirfd_rec < 0 || (fd = dup(dirfd_rec)) < 0)
		return 0;
	if ((d = fdopendir(fd)) == NULL) {
		close(fd);
		return 0;
	}
	while ((e = readdir(d)) != NULL) {
		len = strlen(e->d_name);
		if (len > strlen(TMP_SUFFIX) &&
		    strcmp(e->d_name + len - strlen(TMP_SUFFIX), TMP_SUFFIX) ==
			    0)
			unlinkat(dirfd_rec, e->d_name, 0); /* a write cut */
		else if (len > strlen(SUFFIX) &&
			 strcmp(e->d_name + len - strlen(SUFFIX), SUFFIX) == 0)
			n += restore_one(e->d_name);
	}
	closedir(d);
	return n;
}
