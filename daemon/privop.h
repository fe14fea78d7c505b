/*
 * What the engine asks of the privileged part (docs/privsep.md): every
 * operation that needs privilege, on a process named by its grant (the
 * procref's grant), never by a pid. A request is answered before the
 * engine goes on.
 *
 * On the rpc socket pair (imsg.h): PRIVOP_REQUEST carries a privop_hdr
 * and the operation's struct, exactly; PRIVOP_REPLY an errno value (0:
 * done) and the operation's answer, with descriptors where it makes them.
 */
#ifndef UFFDD_PRIVOP_H
#define UFFDD_PRIVOP_H

#include <stddef.h>
#include <stdint.h>

struct imsg;

enum {
	PRIVOP_REQUEST = 1, /* engine -> privileged part */
	PRIVOP_REPLY = 2,   /* privileged part -> engine */
};

/* The operations. */
enum privop_type {
	PRIVOP_SIGNAL = 1,  /* privop_signal: SIGSTOP, SIGCONT, SIGKILL */
	PRIVOP_OPEN = 2,    /* privop_open: a file of /proc/PID; one fd back */
	PRIVOP_SHARERS = 3, /* privop_sharers: privop_sharers_reply back */
	PRIVOP_OFF_CPU = 4, /* nothing: the stopped threads are off the CPU */
	PRIVOP_WP_UFFD = 5, /* privop_wp_uffd: a write-tracking uffd back */
	PRIVOP_CHILD = 6,   /* privop_child: a child's grant, pidfd, mem */
	PRIVOP_DEST_UFFD = 7,	 /* privop_dest_uffd: the target's uffd */
	PRIVOP_DEST_DISCARD = 8, /* privop_dest_discard: madvise in it */
	PRIVOP_DEST_END = 9,	 /* privop_dest_end: let go, held, released */
	PRIVOP_DEST_CLOSE = 10,	 /* nothing: the target's copy closed */
	PRIVOP_CHILD_UFFD = 11,	 /* nothing and the child's uffd: a copy */
	PRIVOP_CHILD_HOLD = 12,	 /* nothing: a sole child kept (tracee.h) */
				 /*
	 * The last two are the destination's; the target's copy of its uffd
	 * is closed only as the setup made it, while held or by injection.
	 */
	PRIVOP_CLAIM = 13,	 /* privop_claim, grant 0: a kept grant back */
	PRIVOP_DEST_RETAKE = 14, /* privop_dest_retake: the target's uffd */
	PRIVOP_ORPHAN = 15,	 /* privop_orphan: an orphan's grant (kin.c) */
};

struct privop_hdr {
	uint64_t grant;
	uint32_t type; /* enum privop_type */
	uint32_t pad;
};

/* The most a request's struct may hold. */
#define PRIVOP_REQ_MAX 4096

struct privop_signal {
	int32_t sig;
	int32_t pad;
};

/*
 * The files of a grant's process the engine reads (and, for a destination,
 * writes) through descriptors: the privileged part opens them, as only it
 * may, and checks the process is still the grant's after the open.
 */
enum privop_file {
	PRIVOP_FILE_MAPS = 1,	  /* /proc/PID/maps, read-only */
	PRIVOP_FILE_PAGEMAP = 2,  /* /proc/PID/pagemap, read-only */
	PRIVOP_FILE_MAP_FILE = 3, /* /proc/PID/map_files/START-END, read-only */
	PRIVOP_FILE_MEM_RW = 4,	  /* /proc/PID/mem read-write: destinations */
	/* An inotify watch (IN_MODIFY) of the file a mapping maps */
	PRIVOP_FILE_MAP_WATCH = 5,
};

struct privop_open {
	uint32_t file; /* enum privop_file */
	uint32_t pad;
	uint64_t start, end; /* PRIVOP_FILE_MAP_FILE, _WATCH: the mapping */
};

/*
 * Which other processes share the grant's process's memory or file table
 * (proc_sharers(), procref.h): kcmp(2) answers only with the right to
 * ptrace both, every process on the host.
 */
struct privop_sharers {
	uint32_t want; /* PROC_SHARE_VM | PROC_SHARE_FILES */
	uint32_t pad;
};

struct privop_sharers_reply {
	int32_t n; /* how many; -1: the kernel cannot tell (errno ENOSYS) */
	uint32_t pad;
	char list[512]; /* nul-terminated */
};

/*
 * A source's process (stopped) makes a userfaultfd for write tracking, by
 * injection; the privileged part copies it out and hands it over. A
 * failure may carry why, a nul-terminated message.
 */
struct privop_wp_uffd {
	uint32_t sync; /* 1: a full one (sync tracking), 0: user-mode-only */
	uint32_t pad;
};

/*
 * A destination target forked: its child becomes a grant of its own only
 * if it is the grant's process's child (its parent now, read after the
 * child was opened) and the grant's caller could ptrace it. The answer:
 * privop_child_reply, the child's pidfd and /proc/PID/mem (read-only).
 */
struct privop_child {
	int32_t pid;
	int32_t pad;
};

struct privop_child_reply {
	uint64_t grant;
	uint64_t start, probe; /* as struct procref */
	int32_t pid;
	uint32_t pad;
};

/*
 * A destination's forked process that no parent vouches for: one whose
 * parent exited before the engine found it (init or a subreaper is its
 * parent now), or one the engine restores that is not its root target's
 * own child. By the grant of the migration's target (alive or not), the
 * privileged part looks for it itself, as root: a process started at tick
 * not_before or later, of no grant yet, whose mapping at addr is
 * registered with a userfaultfd, and that the grant's caller could
 * ptrace. pid 0 asks for the earliest such; a pid asks whether that one,
 * started at start, is one. A target that exited has no grant the engine
 * holds (its claim is refused): grant 0 and the migration's ID name the
 * one kept for it. The answer: privop_child_reply, with the pidfd and
 * /proc/PID/mem; ESRCH: there is none.
 */
#define PRIVOP_ID_LEN 32 /* MIG_ID_LEN */

struct privop_orphan {
	int32_t pid;
	uint32_t pad;
	uint64_t start;
	uint64_t not_before;
	uint64_t addr;
	char id[PRIVOP_ID_LEN + 1]; /* grant 0: the migration's */
	char pad2[7];
};

/*
 * A destination grant's setup (an attach), once: every thread of the
 * target is stopped and stays so from PRIVOP_DEST_UFFD to PRIVOP_DEST_END,
 * so that no thread touches a page between its discard and the engine's
 * registration. PRIVOP_DEST_UFFD: the privileged part checks the grant's
 * caller may still ptrace the target and that nothing else shares its
 * memory or files, has it make a userfaultfd (from /dev/userfaultfd if it
 * may not call userfaultfd(): then it keeps no copy, "sole"), copies it
 * out and negotiates features (UFFD_FEATURE_EVENT_FORK needs
 * CAP_SYS_PTRACE). The answer: privop_dest_uffd_reply and the uffd; a
 * failure may carry why, a nul-terminated message.
 */
struct privop_dest_uffd {
	uint64_t features; /* UFFDIO_API: those an attach uses, no other */
};

struct privop_dest_uffd_reply {
	int32_t target_fd; /* the target's copy, or -1 (sole) */
	uint32_t sole;	   /* 1: the target keeps no copy of its own */
};

/* One region emptied (MADV_DONTNEED, or MADV_REMOVE for shared memory). */
struct privop_dest_discard {
	uint64_t start, length; /* page-aligned */
	uint32_t remove;	/* 1: MADV_REMOVE */
	uint32_t pad;
};

/* How the setup, or the hold, ends (privop_dest_end.how). */
enum privop_dest_how {
	PRIVOP_DEST_GO = 1,	 /* let go; a sole target's main thread kept */
	PRIVOP_DEST_HOLD = 2,	 /* every thread stays stopped (hold.c) */
	PRIVOP_DEST_UNDO = 3,	 /* failed: the target's copy closed, let go */
	PRIVOP_DEST_RELEASE = 4, /* a kept sole target let go (tracee.h) */
};

struct privop_dest_end {
	uint32_t how;	  /* enum privop_dest_how */
	uint32_t precopy; /* PRIVOP_DEST_HOLD: it dies with the holder */
};

/*
 * A destination's forked child, by its own grant (PRIVOP_CHILD), once:
 * PRIVOP_CHILD_UFFD hands it a copy of its uffd (the one the fork event
 * gave the engine, sent with the request; it must be a userfaultfd) by
 * injection, if the grant's caller may still ptrace it; the answer is a
 * privop_dest_uffd_reply (sole 0). PRIVOP_CHILD_HOLD keeps the main
 * thread of a child whose parent held no copy seized instead, until
 * PRIVOP_DEST_END's PRIVOP_DEST_RELEASE. PRIVOP_DEST_CLOSE closes the
 * copy given, as a target's.
 */

/*
 * A new engine takes up a migration from its state file (docs/privsep.md,
 * "An engine restarted"): it asks for the grant the privileged part kept
 * for it, named by the migration it is bound to (the header's grant is
 * 0). The grant's process must be the pid and start time the file says,
 * still one the grant's caller could ptrace, and the grant one of the
 * role's (a source's is an export's, a destination's an attach's). The
 * answer: privop_child_reply, the process's pidfd and /proc/PID/mem
 * (read-only), as a control request brings them. ENOENT: no grant is
 * bound to that migration (none kept: the whole daemon restarted), or
 * the one kept has no process (its target exited: PRIVOP_ORPHAN's).
 */
struct privop_claim {
	uint32_t role; /* enum mig_role */
	int32_t pid;
	uint64_t start; /* the process's start time, clock ticks */
	char id[PRIVOP_ID_LEN + 1];
	char pad[7];
};

/*
 * A destination's target (or forked child) taken up again: its copy of
 * its userfaultfd, at target_fd (the engine's state file says where),
 * copied out by the privileged part, which checks it is a userfaultfd and
 * that the grant's caller may still ptrace the process, and from then on
 * closes it as a setup's (PRIVOP_DEST_CLOSE). The answer: the uffd.
 */
struct privop_dest_retake {
	int32_t target_fd;
	uint32_t pad;
};

/* The engine's end of the rpc socket pair. */
void privop_init(int sock);
void privop_close(void);
/* Whether there is a privileged part to ask (the engine runs). */
int privop_available(void);
/*
 * How a step on another process is taken, by the grant the engine holds
 * for it (0: none): 1, the privileged part takes it for the grant; 0, it
 * is taken here (no engine runs: the privileged part itself, a tool);
 * -1 with errno EPERM, refused: the engine holds no grant for it, and it
 * never acts on a process by pid, which could name another process by
 * now (docs/privsep.md). One rule for every such step, so that no step
 * falls back to the pid on its own.
 */
int privop_route(uint64_t grant);

/*
 * While a request is answered: drain(arg) whenever fd is readable (a
 * userfaultfd whose events a thread waits on).
 */
struct privop_drain {
	int fd;
	void (*drain)(void *);
	void *arg;
};

/*
 * Asks for operation type on grant with the request struct req (len
 * bytes) and descriptors fds; the answer in rep (imsg_clear() it). 0, or
 * -1 with errno set (the privileged part's errno, or EPIPE: it is gone).
 */
int privop_call(uint32_t type, uint64_t grant, const void *req, size_t len,
		const int *fds, size_t nfds, struct imsg *rep,
		const struct privop_drain *dr);

#endif
