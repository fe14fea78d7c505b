/*
 * The state directory itself (statedir.h): checked and opened once at
 * start-up, by root, and kept open; state.c reaches every file through
 * the descriptor, so a path swapped later changes nothing.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/log.h"
#include "daemon/statedir.h"

int state_dirfd = -1;

/* The directory's mode bits that let others plant or replace files. */
#define DIR_UNSAFE (S_IWGRP | S_IWOTH)
/* Those that let others list it: the file names are migration IDs. */
#define DIR_LISTABLE (S_IRGRP | S_IROTH)

/* Owner and mode as a directory that holds credentials must have them. */
static int
dir_check(int fd, const char *dir, uid_t owner, char *err, size_t errlen)
{
	struct stat st;

	if (fstat(fd, &st) < 0) {
		snprintf(err, errlen, "state directory %s: %s", dir,
			 strerror(errno));
		return -1;
	}
	if (st.st_uid != owner) {
		snprintf(err, errlen,
			 "state directory %s is owned by uid %u, not by this "
			 "daemon's uid %u: refused (chown it, or remove it and "
			 "let uffdd create it)",
			 dir, (unsigned)st.st_uid, (unsigned)owner);
		return -1;
	}
	if (st.st_mode & DIR_UNSAFE) {
		snprintf(err, errlen,
			 "state directory %s is writable by group or others "
			 "(mode %04o): refused (chmod go-w %s)",
			 dir, (unsigned)(st.st_mode & 07777), dir);
		return -1;
	}
	if ((st.st_mode & DIR_LISTABLE) &&
	    fchmod(fd, st.st_mode & 07777 & ~DIR_LISTABLE) == 0)
		log_warnx("state directory %s was readable by group or others "
			  "(mode %04o), who could list the migration IDs in "
			  "it: made %04o",
			  dir, (unsigned)(st.st_mode & 07777),
			  (unsigned)(st.st_mode & 07777 & ~DIR_LISTABLE));
	return 0;
}

int
state_dir_open(const char *dir, uid_t owner, char *err, size_t errlen)
{
	struct stat st;
	int fd;

	if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
		snprintf(err, errlen, "state directory %s: cannot create: %s",
			 dir, strerror(errno));
		return -1;
	}
	if (lstat(dir, &st) == 0 && S_ISLNK(st.st_mode)) {
		snprintf(err, errlen,
			 "state directory %s is a symbolic link: refused (name "
			 "the directory itself)",
			 dir);
		return -1;
	}
	fd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		snprintf(err, errlen, "state directory %s: %s", dir,
			 errno == ELOOP ? "a symbolic link: refused"
					: strerror(errno));
		return -1;
	}
	if (dir_check(fd, dir, owner, err, errlen) < 0) {
		close(fd);
		return -1;
	}
	if (state_dirfd >= 0)
		close(state_dirfd);
	state_dirfd = fd;
	return 0;
}

/*
 * A confined engine's directory: dir/sub, made by root in dir (which must
 * pass the checks as root's) and handed to uid and gid, then kept open as
 * the state directory. Only descriptors are used below dir: dir is root's
 * alone, so no name on the way belongs to anyone else. Called as root,
 * before the engine drops it.
 */
int
state_dir_open_for(const char *dir, const char *sub, uid_t uid, gid_t gid,
		   char *err, size_t errlen)
{
	char path[PATH_MAX];
	struct stat st;
	int fd;

	if (state_dir_open(dir, 0, err, errlen) < 0)
		return -1;
	snprintf(path, sizeof(path), "%s/%s", dir, sub);
	if (mkdirat(state_dirfd, sub, 0700) < 0 && errno != EEXIST) {
		snprintf(err, errlen, "state directory %s: cannot create: %s",
			 path, strerror(errno));
		return -1;
	}
	fd = openat(state_dirfd, sub,
		    O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st) < 0) {
		snprintf(err, errlen, "state directory %s: %s", path,
			 errno == ELOOP ? "a symbolic link: refused"
					: strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	/* Root's (made now, or by an engine that ran as root): handed over. */
	if (st.st_uid == 0 && uid != 0 && fchown(fd, uid, gid) < 0) {
		snprintf(err, errlen, "state directory %s: chown: %s", path,
			 strerror(errno));
		close(fd);
		return -1;
	}
	if (dir_check(fd, path, uid, err, errlen) < 0) {
		close(fd);
		return -1;
	}
	close(state_dirfd);
	state_dirfd = fd;
	return 0;
}

void
state_dir_close(void)
{
	if (state_dirfd >= 0)
		close(state_dirfd);
	state_dirfd = -1;
}
