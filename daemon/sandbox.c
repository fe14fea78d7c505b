/*
 * The engine's confinement (sandbox.h). The order matters: the user is
 * looked up and the Landlock rules made while root may still read what
 * it needs; the capability bounding set is emptied while CAP_SETPCAP is
 * held; then the uid changes (which clears every capability), then
 * NoNewPrivs (which Landlock and seccomp need), then Landlock, then the
 * seccomp filter last, which allows nothing of what came before.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <pwd.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/landlock.h>
#include <linux/sched.h>
#include <linux/seccomp.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>

#include "daemon/compat.h"
#include "daemon/sandbox.h"

/* AddressSanitizer's LeakSanitizer needs more of the kernel at exit. */
#if defined(__SANITIZE_ADDRESS__)
#define SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SANITIZED 1
#endif
#endif

int
sandbox_user(const char *user, uid_t *uid, gid_t *gid, char *err, size_t errlen)
{
	struct passwd *pw = getpwnam(user);

	if (pw == NULL) {
		snprintf(err, errlen,
			 "user %s does not exist: create it (systemd-sysusers "
			 "with uffdd's sysusers.d file, or useradd --system "
			 "%s), or name another with engine-user",
			 user, user);
		return -1;
	}
	if (pw->pw_uid == 0) {
		snprintf(err, errlen,
			 "engine-user %s is uid 0: the engine must not run as "
			 "root",
			 user);
		return -1;
	}
	*uid = pw->pw_uid;
	*gid = pw->pw_gid;
	return 0;
}

/* The file system rights Landlock knows at ABI version abi. */
static uint64_t
landlock_fs_rights(int abi)
{
	uint64_t all = (1ULL << 13) - 1; /* ABI 1: EXECUTE .. MAKE_SYM */

	if (abi >= 2)
		all |= 1ULL << 13; /* REFER */
	if (abi >= 3)
		all |= 1ULL << 14; /* TRUNCATE */
	return all;
}

/* One directory's rule: everything (write), or reading it. */
static int
landlock_add(int ruleset, const struct sandbox_dir *d, uint64_t all)
{
	struct landlock_path_beneath_attr pb = {0};
	int fd = open(d->path, O_PATH | O_CLOEXEC), rc;

	if (fd < 0)
		return errno == ENOENT ? 0 : -1; /* absent: nothing to allow */
	pb.parent_fd = fd;
	pb.allowed_access = d->write ? all
				     : all & (LANDLOCK_ACCESS_FS_EXECUTE |
					      LANDLOCK_ACCESS_FS_READ_FILE |
					      LANDLOCK_ACCESS_FS_READ_DIR);
	rc = (int)syscall(SYS_landlock_add_rule, ruleset,
			  LANDLOCK_RULE_PATH_BENEATH, &pb, 0);
	close(fd);
	return rc;
}

/*
 * A Landlock ruleset allowing dirs and nothing else, to be enforced after
 * NoNewPrivs; -2 when the kernel has no Landlock (the caller goes on
 * without), -1 on error.
 */
static int
landlock_ruleset(const struct sandbox_dir *dirs, size_t n)
{
	struct landlock_ruleset_attr attr = {0};
	int abi, fd;

	abi = (int)syscall(SYS_landlock_create_ruleset, NULL, 0,
			   LANDLOCK_CREATE_RULESET_VERSION);
	if (abi < 1)
		return -2;
	attr.handled_access_fs = landlock_fs_rights(abi);
	fd = (int)syscall(SYS_landlock_create_ruleset, &attr, sizeof(attr), 0);
	if (fd < 0)
		return -1;
	for (size_t i = 0; i < n; i++)
		if (landlock_add(fd, &dirs[i], attr.handled_access_fs) < 0) {
			close(fd);
			return -1;
		}
	return fd;
}

/* Every capability out of the bounding set (before the uid changes). */
static int
drop_bounding(void)
{
	for (int cap = 0; cap <= 63; cap++)
		if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 && errno != EINVAL)
			return -1;
	return prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 &&
			       errno != EINVAL
		       ? -1
		       : 0;
}

static int
become(uid_t uid, gid_t gid)
{
	if (setgroups(0, NULL) < 0 || setresgid(gid, gid, gid) < 0 ||
	    setresuid(uid, uid, uid) < 0)
		return -1;
	/* All of them, or none: never half. */
	if (getuid() != uid || geteuid() != uid || getgid() != gid ||
	    getegid() != gid || setuid(0) == 0) {
		errno = EPERM;
		return -1;
	}
	return 0;
}

static int sandbox_seccomp(void);

int
sandbox_enter(const char *user, const struct sandbox_dir *dirs, size_t ndirs,
	      int *landlocked, char *err, size_t errlen)
{
	pid_t parent = getppid();
	uid_t uid;
	gid_t gid;
	int ll;

	if (sandbox_user(user, &uid, &gid, err, errlen) < 0)
		return -1;
	if ((ll = landlock_ruleset(dirs, ndirs)) == -1) {
		snprintf(err, errlen, "landlock rules: %s", strerror(errno));
		return -1;
	}
	if (drop_bounding() < 0 || become(uid, gid) < 0) {
		snprintf(err, errlen, "becoming %s (uid %u): %s", user,
			 (unsigned)uid, strerror(errno));
		goto fail;
	}
	/* Cleared by the change of uid: again, and the race with the parent. */
	if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent) {
		snprintf(err, errlen, "the privileged part is gone");
		goto fail;
	}
#ifdef SANITIZED
	/* LeakSanitizer stops the threads with ptrace at exit. */
	prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
#endif
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) {
		snprintf(err, errlen, "PR_SET_NO_NEW_PRIVS: %s",
			 strerror(errno));
		goto fail;
	}
	if (ll >= 0 && syscall(SYS_landlock_restrict_self, ll, 0) < 0) {
		snprintf(err, errlen, "landlock_restrict_self: %s",
			 strerror(errno));
		goto fail;
	}
	if (ll >= 0)
		close(ll);
	*landlocked = ll >= 0;
	if (sandbox_seccomp() < 0) {
		snprintf(err, errlen, "seccomp filter: %s", strerror(errno));
		return -1;
	}
	return 0;
fail:
	if (ll >= 0)
		close(ll);
	return -1;
}

/*
 * The engine's system calls. What is not here kills it (SIGSYS), and the
 * privileged part says so: ptrace, process_vm_*, pidfd_getfd,
 * pidfd_send_signal, mount, setns, bpf, keyctl, module loading, and any
 * signal to a process not its own among them.
 */
static const int allowed[] = {
	/* files it holds, and its state directory's */
	SYS_read,
	SYS_write,
	SYS_readv,
	SYS_writev,
	SYS_pread64,
	SYS_pwrite64,
	SYS_preadv,
	SYS_pwritev,
	SYS_lseek,
	SYS_close,
	SYS_fstat,
	SYS_newfstatat,
	SYS_statx,
	SYS_fstatfs,
	SYS_fcntl,
	SYS_dup,
	SYS_dup3,
	SYS_ioctl,
	SYS_openat,
	SYS_unlinkat,
	SYS_renameat,
	SYS_renameat2,
	SYS_fsync,
	SYS_fdatasync,
	SYS_ftruncate,
	SYS_sync_file_range,
	SYS_getdents64,
	SYS_fchmod,
	SYS_memfd_create,
	SYS_readlink,
	SYS_readlinkat,
	SYS_access,
	SYS_faccessat,
	SYS_faccessat2,
	/* memory */
	SYS_mmap,
	SYS_munmap,
	SYS_mremap,
	SYS_mprotect,
	SYS_madvise,
	SYS_brk,
	SYS_mincore,
	/* the event loop, pipes, timers */
	SYS_epoll_create1,
	SYS_epoll_ctl,
	SYS_epoll_wait,
	SYS_epoll_pwait,
	SYS_poll,
	SYS_ppoll,
	SYS_select,
	SYS_pselect6,
	SYS_eventfd2,
	SYS_pipe2,
	SYS_timerfd_create,
	SYS_timerfd_settime,
	SYS_timerfd_gettime,
	SYS_clock_gettime,
	SYS_clock_getres,
	SYS_gettimeofday,
	SYS_nanosleep,
	SYS_clock_nanosleep,
	/* sockets: peers, the parts' socket pairs, name lookups */
	SYS_connect,
	SYS_accept,
	SYS_accept4,
	SYS_getsockname,
	SYS_getpeername,
	SYS_setsockopt,
	SYS_getsockopt,
	SYS_shutdown,
	SYS_sendto,
	SYS_recvfrom,
	SYS_sendmsg,
	SYS_recvmsg,
	SYS_sendmmsg,
	SYS_recvmmsg,
	SYS_socketpair,
	SYS_bind,
	SYS_listen,
	/* itself */
	SYS_getpid,
	SYS_gettid,
	SYS_getppid,
	SYS_getuid,
	SYS_geteuid,
	SYS_getgid,
	SYS_getegid,
	SYS_getrusage,
	SYS_sched_getaffinity,
	SYS_sched_yield,
	SYS_getrandom,
	SYS_uname,
	SYS_sysinfo,
	SYS_prlimit64,
	SYS_getrlimit,
	SYS_rt_sigaction,
	SYS_rt_sigprocmask,
	SYS_rt_sigreturn,
	SYS_sigaltstack,
	SYS_futex,
	SYS_set_robust_list,
	SYS_rseq,
	SYS_restart_syscall,
	SYS_exit,
	SYS_exit_group,
	SYS_set_tid_address,
	SYS_madvise,
	SYS_sched_setscheduler,
	SYS_sched_getscheduler,
	SYS_getpriority,
	/* images: io_uring reads */
	SYS_io_uring_setup,
	SYS_io_uring_enter,
	SYS_io_uring_register,
#ifdef SANITIZED
	/* LeakSanitizer: its tracer stops the threads, reads their regs */
	SYS_ptrace,
	SYS_wait4,
	SYS_prctl,
	SYS_clone,
	SYS_getpgid,
	SYS_sched_getparam,
	SYS_pipe,
	SYS_open,
	SYS_stat,
	SYS_lstat,
	SYS_arch_prctl,
	SYS_getdents,
	SYS_sched_setaffinity,
#endif
};

#define ALLOW SECCOMP_RET_ALLOW
/*
 * A call outside the filter traps (SIGSYS, refused_call() says which and
 * the process dies of it); a foreign architecture's numbers kill at once.
 */
#define DENY SECCOMP_RET_TRAP
#define ALIEN SECCOMP_RET_KILL_PROCESS
#define STMT(c, k) ((struct sock_filter)BPF_STMT(c, k))
#define JUMP(c, k, t, f) ((struct sock_filter)BPF_JUMP(c, k, t, f))
#define ARG_LO(n) (offsetof(struct seccomp_data, args) + 8 * (n))

/*
 * The calls whose arguments matter: sockets of the three families only,
 * signals to itself only, clone for a thread only (clone3, whose flags
 * sit in memory a filter cannot read, says ENOSYS: glibc then uses clone),
 * setpriority for the calling thread only.
 */
static size_t
special(struct sock_filter *f, pid_t self)
{
	size_t n = 0;

	f[n++] = JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_socket, 0, 5);
	f[n++] = STMT(BPF_LD | BPF_W | BPF_ABS, ARG_LO(0));
	f[n++] = JUMP(BPF_JMP | BPF_JEQ | BPF_K, AF_UNIX, 2, 0);
	f[n++] = JUMP(BPF_JMP | BPF_JEQ | BPF_K, AF_INET, 1, 0);
	f[n++] = JUMP(BPF_JMP | BPF_JEQ | BPF_K, AF_INET6, 0, 1);
	f[n++] = STMT(BPF_RET | BPF_K, ALLOW);
	for (int i = 0; i < 3; i++) {
		static const int sig_calls[3] = {SYS_kill, SYS_tgkill,
						 SYS_tkill};

		f[n++] = STMT(BPF_LD | BPF_W | BPF_ABS,
			      offsetof(struct seccomp_data, nr));
		f[n++] = JUMP(BPF_JMP | BPF_JEQ | BPF_K, sig_calls[i], 0, 3);
		f[n++] = STMT(BPF_LD | BPF_W | BPF_ABS, ARG_LO(0));
		f[n++] = JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)self, 0, 1);
		f[n++] = STMT(BPF_RET | BPF_K, ALLOW);
	}
	f[n++] = STMT(BPF_LD | BPF_W | BPF_ABS,
		      offsetof(struct seccomp_data, nr));
	f[n++] = JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_clone3, 0, 1);
	f[n++] = STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ENOSYS);
#ifndef SANITIZED
	f[n++] = JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_clone, 0, 4);
	f[n++] = STMT(BPF_LD | BPF_W | BPF_ABS, ARG_LO(0));
	f[n++] = JUMP(BPF_JMP | BPF_JSET | BPF_K, CLONE_THREAD, 0, 1);
	f[n++] = STMT(BPF_RET | BPF_K, ALLOW);
	f[n++] = STMT(BPF_RET | BPF_K, DENY);
	f[n++] = STMT(BPF_LD | BPF_W | BPF_ABS,
		      offsetof(struct seccomp_data, nr));
#endif
	/* A thread's own nice value only (the bulk installer lowers it). */
	f[n++] = JUMP(BPF_JMP | BPF_JEQ | BPF_K, SYS_setpriority, 0, 6);
	f[n++] = STMT(BPF_LD | BPF_W | BPF_ABS, ARG_LO(0));
	f[n++] = JUMP(BPF_JMP | BPF_JEQ | BPF_K, PRIO_PROCESS, 0, 2);
	f[n++] = STMT(BPF_LD | BPF_W | BPF_ABS, ARG_LO(1));
	f[n++] = JUMP(BPF_JMP | BPF_JEQ | BPF_K, 0, 1, 0);
	f[n++] = STMT(BPF_RET | BPF_K, DENY);
	f[n++] = STMT(BPF_RET | BPF_K, ALLOW);
	return n;
}

/*
 * A refused call: said on stderr (the daemon's log) with its number
 * (ausyscall NUMBER names it), then the process dies of SIGSYS, the
 * handler reset (SA_RESETHAND) and the signal not blocked (SA_NODEFER).
 * Only write(2) and tgkill(2) of itself, which the filter allows.
 */
static void
refused_call(int sig, siginfo_t *si, void *uc)
{
	static const char head[] = "uffdd: engine: system call ";
	static const char tail[] = " refused by its seccomp filter: killed\n";
	char num[16], *p = num + sizeof(num);
	unsigned nr = (unsigned)si->si_syscall;

	(void)uc;
	do
		*--p = (char)('0' + nr % 10);
	while ((nr /= 10) != 0);
	/* What the writes return is of no use: the process dies anyway. */
	ssize_t w = write(STDERR_FILENO, head, sizeof(head) - 1);

	w += write(STDERR_FILENO, p, (size_t)(num + sizeof(num) - p));
	w += write(STDERR_FILENO, tail, sizeof(tail) - 1);
	(void)w;
	raise(sig);
}

static int
sandbox_seccomp(void)
{
	size_t na = sizeof(allowed) / sizeof(allowed[0]), n = 0;
	struct sock_filter *f = calloc(2 * na + 64, sizeof(*f));
	struct sock_fprog prog;
	int rc;

	if (f == NULL)
		return -1;
	f[n++] = STMT(BPF_LD | BPF_W | BPF_ABS,
		      offsetof(struct seccomp_data, arch));
	f[n++] = JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_X86_64, 1, 0);
	f[n++] = STMT(BPF_RET | BPF_K, ALIEN);
	f[n++] = STMT(BPF_LD | BPF_W | BPF_ABS,
		      offsetof(struct seccomp_data, nr));
	/* The x32 numbers are not ours. */
	f[n++] = JUMP(BPF_JMP | BPF_JGE | BPF_K, 0x40000000, 0, 1);
	f[n++] = STMT(BPF_RET | BPF_K, ALIEN);
	n += special(f + n, getpid());
	for (size_t i = 0; i < na; i++) {
		f[n++] = JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)allowed[i],
			      0, 1);
		f[n++] = STMT(BPF_RET | BPF_K, ALLOW);
	}
	f[n++] = STMT(BPF_RET | BPF_K, DENY);
	prog.len = (unsigned short)n;
	prog.filter = f;
	struct sigaction sa = {.sa_sigaction = refused_call,
			       .sa_flags =
				       SA_SIGINFO | SA_RESETHAND | SA_NODEFER};

	if (sigaction(SIGSYS, &sa, NULL) < 0) {
		free(f);
		return -1;
	}
	rc = prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0);
	free(f);
	return rc;
}
