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
};

struct privop_open {
	uint32_t file; /* enum privop_file */
	uint32_t pad;
	uint64_t start, end; /* PRIVOP_FILE_MAP_FILE: the mapping */
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
};

/* The engine's end of the rpc socket pair. */
void privop_init(int sock);
void privop_close(void);
/* Whether there is a privileged part to ask (the engine runs). */
int privop_available(void);

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
