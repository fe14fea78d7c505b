/*
 * Source role: freeze a process, classify its pages, and serve them to one
 * destination on two lanes (demand answers at once, the bulk stream behind).
 */
#include "config.h"

#include <dirent.h>
#include <stdarg.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/uio.h>

#include "daemon/authz.h"
#include "daemon/compat.h"
#include "daemon/conffile.h"
#include "daemon/conn.h"
#include "daemon/control.h"
#include "daemon/log.h"
#include "daemon/loop.h"
#include "daemon/pagemap.h"
#include "daemon/peer.h"
#include "daemon/probe.h"
#include "daemon/proc.h"
#include "daemon/procref.h"
#include "daemon/region.h"
#include "daemon/role.h"
#include "daemon/source.h"
#include "daemon/state.h"
#include "daemon/statefmt.h"
#include "daemon/wptrack.h"

/*
 * Bulk sizing. One data frame is at most 64 pages (256 KiB): a demand answer
 * never waits behind more than that on our side. Zero runs cost no bytes and
 * go in runs of up to 2 MiB. The bulk socket is kept 1-4 MiB full.
 */
#define BULK_DATA_PAGES 64
#define BULK_SMALL_PAGES (DEMAND_STEP_BYTES / 4096)
#define BULK_ZERO_PAGES 512
#define BULK_ROUND_BYTES (256u << 10)
#define BULK_HIGH (4u << 20)
#define BULK_LOW (1u << 20)
/* After a fault the bulk lane sends this many pages around it first. */
#define LOCALITY_PAGES 256
/* An idle lane is pinged this often so the destination sees it alive. */
#define PING_SECS 1
/* The --bulk-rate budget is counted over windows this long. */
#define RATE_WINDOW_NS 100000000ULL
/* s->scratch: one frame's page bytes (a demand answer, a zero-check). */
#define SCRATCH_LEN FRAME_DATA_MAX

struct src_region {
	struct region r;
	uint64_t npages;
	uint64_t *data; /* page holds data (else: ZERO marker) */
	uint64_t *sent;
	int accepted;
	/*
	 * Shared hugetlb: its page cache, read with pread. A page this
	 * process does not map (dropped with MADV_DONTNEED, or touched only
	 * by a process it shares the mapping with) still holds bytes there
	 * that pagemap cannot show, and hugetlbfs reports no holes; a read
	 * through the mapping would allocate a huge page for every hole.
	 * Every page counts as data and all-zero ones go as ZERO markers.
	 */
	int cache_fd;
};

struct source {
	struct migration *m;
	struct src_region *regs;
	size_t nregs;
	struct conn *demand, *bulk;
	struct event *bulk_ev, *exit_ev, *ping_ev, *rate_ev;
	/*
	 * The process, as checked (procref.h): signals go through its pidfd,
	 * demand reads through its memory file (read_demand()).
	 */
	struct procref t;
	int keep_source;
	int was_stopped;      /* before the export froze it */
	long long switches;   /* switch_count() once frozen; -1: unknown */
	struct wptrack wp;    /* writes since the export, where tracked */
	struct range *ranges; /* as exported, for a restart */
	size_t nranges;
	int resume_pending; /* the demand lane is a destination's resume */
	uint64_t win_start, win_bytes; /* --bulk-rate accounting */
	uint32_t cur_reg;
	uint64_t cur_page;
	uint32_t hint_reg;
	uint64_t hint_page, hint_left;
	uint8_t *scratch; /* SCRATCH_LEN bytes */
};

static void source_free(struct migration *);
static void teardown(struct source *);

/*
 * Whether every thread of pid is in a stopped state (T or t), or dead
 * (Z, X: it runs no more, and its exit is reported on its own).
 */
static int
all_stopped(pid_t pid)
{
	char path[320], buf[512];
	struct dirent *e;
	int stopped = 1;
	DIR *d;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	if ((d = opendir(path)) == NULL)
		return -1;
	while (stopped && (e = readdir(d)) != NULL) {
		char *p;
		FILE *f;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%s/stat", (int)pid,
			 e->d_name);
		if ((f = fopen(path, "re")) == NULL)
			continue;
		if (fgets(buf, sizeof(buf), f) && (p = strrchr(buf, ')')) &&
		    p[1] == ' ' && strchr("TtZX", p[2]) == NULL)
			stopped = 0;
		fclose(f);
	}
	closedir(d);
	return stopped;
}

/*
 * How many times the threads of pid have been switched out, in all. A
 * stopped thread never is, so a count that moves after the freeze means
 * the process ran, if only for a moment: a SIGCONT and a SIGSTOP between
 * two looks at the threads' states leave nothing else behind. -1 when unknown,
 * or when a thread is dying (its exit is reported on its own). *running
 * (when not NULL) is set when a thread it read is not stopped.
 */
static long long
switch_count(pid_t pid, int *running)
{
	char path[320], line[256];
	struct dirent *e;
	long long n = 0;
	DIR *d;

	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	if ((d = opendir(path)) == NULL)
		return -1;
	while (n >= 0 && (e = readdir(d)) != NULL) {
		long long v;
		char st;
		FILE *f;

		if (e->d_name[0] == '.')
			continue;
		snprintf(path, sizeof(path), "/proc/%d/task/%s/status",
			 (int)pid, e->d_name);
		if ((f = fopen(path, "re")) == NULL) {
			n = -1;
			break;
		}
		while (n >= 0 && fgets(line, sizeof(line), f) != NULL) {
			if (sscanf(line, "State: %c", &st) == 1) {
				if (strchr("ZX", st) != NULL)
					n = -1;
				else if (strchr("Tt", st) == NULL && running)
					*running = 1;
			} else if (sscanf(line, "voluntary_ctxt_switches: %lld",
					  &v) == 1 ||
				   sscanf(line,
					  "nonvoluntary_ctxt_switches: %lld",
					  &v) == 1)
				n += v;
		}
		fclose(f);
	}
	closedir(d);
	return n;
}

/*
 * SIGSTOP and wait until every thread has stopped, so that no page changes
 * after it was classified. The wait is short (one scheduling round), bounded
 * to 2 s, and is the one place the source blocks the loop.
 */
static int
freeze(const struct procref *t)
{
	struct timespec ts = {0, 200000};

	if (procref_signal(t, SIGSTOP) < 0)
		return -1;
	for (int i = 0; i < 10000; i++) {
		int st = all_stopped(t->pid);

		if (st != 0)
			return st < 0 ? -1 : 0;
		nanosleep(&ts, NULL);
	}
	procref_signal(t, SIGCONT);
	errno = ETIMEDOUT;
	return -1;
}

/* Lets a process we froze go again, unless it was stopped before. */
static void
thaw(const struct procref *t, int was_stopped)
{
	if (!was_stopped)
		procref_signal(t, SIGCONT);
}

/*
 * Freezes t and checks again, now that it can change no more, that it is
 * the process that was checked and that the caller who (NULL: a restore)
 * may still export it: between the first check and the freeze it could
 * have run a setuid program, or exited and left its pid to another.
 */
static int
freeze_checked(const struct procref *t, const struct authz_caller *who,
	       int *was_stopped, uint32_t *code, char *err, size_t errlen)
{
	char sharers[192];

	/* Stopping it would not stop these from writing its memory. */
	if (proc_sharers(t->pid, PROC_SHARE_VM, sharers, sizeof(sharers)) > 0) {
		*code = ERR_INVALID;
		snprintf(err, errlen,
			 "process %d shares its memory with %.120s, "
			 "which stopping it does not stop: export refused",
			 (int)t->pid, sharers);
		return -1;
	}
	*was_stopped = all_stopped(t->pid) == 1;
	if (freeze(t) < 0) {
		*code = ERR_NO_PROCESS;
		snprintf(err, errlen, "cannot stop process %d: %s", (int)t->pid,
			 strerror(errno));
		return -1;
	}
	if (who != NULL ? authz_may_ptrace(who, t, code, err, errlen) == 0
			: procref_same(t))
		return 0;
	if (who == NULL) {
		*code = ERR_NO_PROCESS;
		snprintf(err, errlen, "process %d: no longer the process named",
			 (int)t->pid);
	}
	thaw(t, *was_stopped);
	return -1;
}

/*
 * The source's pages can no longer be had: fail, and tell the destination,
 * which poisons what it lacks. A destination that comes back later is told
 * the same when it says hello.
 */
static void source_fail(struct source *s, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void
source_fail(struct source *s, const char *fmt, ...)
{
	va_list ap;
	char why[256];

	if (s->m->state == MIG_COMPLETE || s->m->state == MIG_FAILED)
		return;
	va_start(ap, fmt);
	vsnprintf(why, sizeof(why), fmt, ap);
	va_end(ap);
	migration_fail(s->m, "%s", why);
	if (s->demand)
		conn_send_error(s->demand, ERR_SOURCE, "%s", s->m->reason);
	teardown(s);
}

static void
exit_cb(evutil_socket_t fd, short ev, void *arg)
{
	struct source *s = arg;

	event_del(s->exit_ev);
	source_fail(s, "source process %d exited", (int)s->m->pid);
}

static int
save_more(struct state_out *o, const struct migration *m)
{
	const struct source *s = m->impl;
	char key[STATE_KEY_MAX];

	state_put_u64(o, "start", s->m->start);
	state_put_u64(o, "keep_source", s->keep_source != 0);
	if (s->switches >= 0)
		state_put_u64(o, "switches", (uint64_t)s->switches);
	for (size_t i = 0; i < s->nranges; i++)
		state_put_u64s(o, state_key(key, "range", i),
			       (const uint64_t[]){s->ranges[i].start,
						  s->ranges[i].end},
			       2);
	return 0;
}

static int
save(struct source *s)
{
	return state_write(s->m, save_more);
}

/*
 * The process must stay as it was frozen: its pages were classified then,
 * and a page it writes after it went is lost to the destination. Nothing
 * tells us of a SIGCONT from elsewhere; look each ping, and at the end:
 * for a page written since the export (wptrack.h), where the kernel can
 * tell, and for a context switch of its threads, which a stopped thread
 * never makes. *why says which.
 */
static int
continued(const struct source *s, char *why, size_t len)
{
	int running = 0;
	long long n = switch_count(s->m->pid, &running);
	uint64_t addr;

	if (wptrack_written(&s->wp, &addr) == 1) {
		snprintf(why, len,
			 "source process %d ran after the export (continued "
			 "from elsewhere) and wrote to its memory at 0x%llx: "
			 "the destination may hold older bytes",
			 (int)s->m->pid, (unsigned long long)addr);
		return 1;
	}
	/* Gone or dying (exit_cb() says so), or no count taken. */
	if (!running && (n < 0 || s->switches < 0 || n == s->switches))
		return 0;
	snprintf(why, len,
		 "source process %d was continued (SIGCONT from elsewhere) "
		 "during the migration: what it wrote since may not reach "
		 "the destination",
		 (int)s->m->pid);
	return 1;
}

/*
 * The threads' context switches once they have all gone off the CPU: a
 * thread shows as stopped a moment before its last switch is counted (and
 * an injection switches them too). -1 when unknown.
 */
static long long
settled_switches(pid_t pid)
{
	struct timespec ts = {0, 1000000};
	long long n = switch_count(pid, NULL), was;

	for (int i = 0; i < 50 && n >= 0; i++) {
		nanosleep(&ts, NULL);
		was = n;
		if ((n = switch_count(pid, NULL)) == was)
			break;
	}
	return n;
}

/*
 * From now on any run of the frozen process is noticed (continued()): its
 * exported ranges are write-protected where the kernel can track writes,
 * and its threads' context switches are counted from here.
 */
static void
watch_freeze(struct source *s)
{
	struct range *rs = xcalloc(s->nregs, sizeof(*rs));
	char why[256];

	for (size_t i = 0; i < s->nregs; i++) {
		rs[i].start = s->regs[i].r.start;
		rs[i].end = s->regs[i].r.start + s->regs[i].r.length;
	}
	if (!wptrack_usable())
		log_debug("migration %s: this kernel cannot track writes "
			  "(UFFD_FEATURE_WP_ASYNC, PAGEMAP_SCAN): a run of "
			  "process %d is found by its context switches, at the "
			  "next ping",
			  log_id(s->m->id), (int)s->m->pid);
	else if (wptrack_start(&s->wp, &s->t, rs, s->nregs, why, sizeof(why)) <
		 0)
		log_info("migration %s: writes of process %d are not tracked "
			 "(%s): a run of it is found by its context switches, "
			 "at the next ping",
			 log_id(s->m->id), (int)s->m->pid, why);
	free(rs);
	s->switches = settled_switches(s->m->pid);
}

static void
ping_cb(evutil_socket_t fd, short ev, void *arg)
{
	struct source *s = arg;
	Uffdd__Ping p = UFFDD__PING__INIT;
	char why[256];

	if (continued(s, why, sizeof(why))) {
		source_fail(s, "%s", why);
		return;
	}
	if (s->demand)
		conn_send(s->demand, FRAME_PING, &p.base);
	if (s->bulk && conn_output_len(s->bulk) == 0)
		conn_send(s->bulk, FRAME_PING, &p.base);
}

static void bulk_cb(evutil_socket_t, short, void *);

/*
 * Which pages of region sr hold data, by its kind (DESIGN section 4):
 * anonymous memory from pagemap, shared memory from its backing file (a
 * swapped-out shmem page looks untouched in pagemap), shared hugetlb all
 * data (struct src_region). Returns the data pages, or -1.
 */
static int64_t
classify(pid_t pid, struct src_region *sr)
{
	int64_t data;
	int fd;

	if (sr->r.kind == REGION_HUGETLB && sr->r.shared) {
		sr->cache_fd = region_open_backing(pid, sr->r.vma_start,
						   sr->r.vma_end);
		if (sr->cache_fd < 0)
			return -1;
		for (uint64_t p = 0; p < sr->npages; p++)
			bit_set(sr->data, p);
		return (int64_t)sr->npages;
	}
	if (sr->r.kind == REGION_FILE_PRIVATE)
		return pagemap_classify_cow(pid, sr->r.start, sr->npages,
					    sr->data, pagemap_method());
	if (!region_kind_shmem(sr->r.kind))
		return pagemap_classify(pid, sr->r.start, sr->npages,
					sr->r.page_size, sr->data,
					pagemap_method());
	if ((fd = region_open_backing(pid, sr->r.vma_start, sr->r.vma_end)) < 0)
		return -1;
	if (kfeat.shmem_pm_swap &&
	    sr->r.page_size == (uint64_t)sysconf(_SC_PAGESIZE))
		data = pagemap_classify_shmem(pid, sr->r.start, fd,
					      sr->r.file_off, sr->npages,
					      sr->r.page_size, sr->data);
	else
		data = pagemap_classify_file(fd, sr->r.file_off, sr->npages,
					     sr->r.page_size, sr->data);
	close(fd);
	return data;
}

/*
 * The regions of process pid in the ranges asked for, checked against what
 * a destination accepts. Returns their number (> 0), or 0 with *code and
 * err set.
 */
static int
build_regions(pid_t pid, const struct range *ranges, size_t nranges,
	      struct region **regs, uint32_t *code, char *err, size_t errlen)
{
	char why[512];
	int n = region_build(pid, ranges, nranges, regs, why, sizeof(why));

	if (n <= 0) {
		*code = n == 0		  ? ERR_NO_MATCH
			: errno == EPERM  ? ERR_PERMISSION
			: errno == EINVAL ? ERR_INVALID
					  : ERR_NO_PROCESS;
		snprintf(err, errlen, "process %d: %.200s", (int)pid,
			 n < 0 ? why
			       : "no memory uffdd migrates in the ranges "
				 "given");
		free(*regs);
		*regs = NULL;
		return 0;
	}
	/* A destination would refuse the table: say so before serving. */
	if ((unsigned)n > region_table_max) {
		*code = ERR_INVALID;
		snprintf(err, errlen,
			 "process %d has %d regions, more than max-regions "
			 "%u: narrow it with --range, or raise max-regions",
			 (int)pid, n, region_table_max);
		free(*regs);
		*regs = NULL;
		return 0;
	}
	return n;
}

/* The export's record and its regions, classified; NULL on failure. */
static struct source *
source_new(struct procref *t, const struct region *regs, size_t nregs,
	   const struct range *ranges, size_t nranges, const char *id,
	   uint32_t *code, char *err, size_t errlen)
{
	struct migration *m = migration_new(ROLE_SOURCE, id);
	struct source *s = xcalloc(1, sizeof(*s));

	m->impl = s;
	m->impl_free = source_free;
	m->pid = t->pid;
	m->start = t->start;
	s->m = m;
	procref_move(&s->t, t);
	s->switches = -1; /* watch_freeze() */
	s->wp = (struct wptrack)WPTRACK_NONE;
	s->nranges = nranges;
	s->ranges = xcalloc(nranges, sizeof(*s->ranges));
	memcpy(s->ranges, ranges, nranges * sizeof(*ranges));
	s->nregs = nregs;
	s->regs = xcalloc(s->nregs, sizeof(*s->regs));
	for (size_t i = 0; i < s->nregs; i++) {
		struct src_region *sr = &s->regs[i];
		int64_t data;

		sr->r = regs[i];
		sr->npages = sr->r.length / sr->r.page_size;
		sr->data = xcalloc(bit_words(sr->npages), sizeof(uint64_t));
		sr->sent = xcalloc(bit_words(sr->npages), sizeof(uint64_t));
		sr->cache_fd = -1;
		if ((data = classify(s->t.pid, sr)) < 0) {
			*code = ERR_KERNEL;
			snprintf(err, errlen, "classifying 0x%llx of %d: %s",
				 (unsigned long long)sr->r.start, (int)s->t.pid,
				 strerror(errno));
			procref_move(t, &s->t);
			migration_free(m);
			return NULL;
		}
		sr->r.data_pages = (uint64_t)data;
		sr->r.zero_pages = sr->npages - (uint64_t)data;
		m->pages_total += sr->npages;
	}
	return s;
}

/* The events of a live export: its process's exit, the pings, bulk work. */
static void
source_start(struct source *s)
{
	struct timeval tv = {PING_SECS, 0};

	s->bulk_ev = event_new(base, -1, 0, bulk_cb, s);
	event_priority_set(s->bulk_ev, PRIO_BULK);
	s->rate_ev = evtimer_new(base, bulk_cb, s);
	event_priority_set(s->rate_ev, PRIO_BULK);
	/* One demand answer at most: a frame's worth of page bytes. */
	s->scratch = xmalloc(SCRATCH_LEN);
	s->exit_ev =
		event_new(base, s->t.pidfd, EV_READ | EV_PERSIST, exit_cb, s);
	event_priority_set(s->exit_ev, PRIO_CONTROL);
	event_add(s->exit_ev, NULL);
	s->ping_ev = event_new(base, -1, EV_PERSIST, ping_cb, s);
	event_add(s->ping_ev, &tv);
}

/*
 * Freezes process t (for the caller who; NULL on a restore), builds and
 * classifies its regions and registers the export under id (a fresh one
 * when NULL). Takes t over. Returns NULL with *code and err set; a process
 * that ran before is running again then.
 */
static struct source *
source_create(struct procref *t, const struct authz_caller *who,
	      const struct range *ranges, size_t nranges, int keep,
	      const char *id, uint32_t *code, char *err, size_t errlen)
{
	struct region *regs = NULL;
	struct source *s = NULL;
	int n, was_stopped;

	/* Check before freezing: a bad request must leave the process be. */
	if (build_regions(t->pid, ranges, nranges, &regs, code, err, errlen) ==
	    0)
		goto out;
	free(regs);
	regs = NULL;
	if (freeze_checked(t, who, &was_stopped, code, err, errlen) < 0)
		goto out;
	n = build_regions(t->pid, ranges, nranges, &regs, code, err, errlen);
	if (n > 0)
		s = source_new(t, regs, (size_t)n, ranges, nranges, id, code,
			       err, errlen);
	if (s == NULL) {
		thaw(t, was_stopped);
		goto out;
	}
	s->was_stopped = was_stopped;
	s->keep_source = keep;
	source_start(s);
out:
	free(regs);
	procref_close(t);
	return s;
}

void
source_export(uint64_t serial, const struct authz_caller *who,
	      struct procref *t, const Uffdd__ExportRequest *req)
{
	Uffdd__ExportReply rep = UFFDD__EXPORT_REPLY__INIT;
	struct range *ranges = xcalloc(req->n_ranges, sizeof(*ranges));
	struct source *s;
	char err[256];
	uint32_t code;

	for (size_t i = 0; i < req->n_ranges; i++) {
		ranges[i].start = req->ranges[i]->start;
		ranges[i].end = req->ranges[i]->end;
		if (ranges[i].end <= ranges[i].start) {
			control_reply_error(serial, ERR_INVALID,
					    "export: empty range");
			free(ranges);
			procref_close(t);
			return;
		}
	}
	s = source_create(t, who, ranges, req->n_ranges, req->keep_source, NULL,
			  &code, err, sizeof(err));
	free(ranges);
	if (s == NULL) {
		control_reply_error(serial, code, "export: %s", err);
		return;
	}
	watch_freeze(s);
	/*
	 * Without its state file a restart would forget the export and
	 * leave the process frozen for good: refuse it instead.
	 */
	if (save(s) < 0) {
		int e = errno;

		thaw(&s->t, s->was_stopped);
		migration_free(s->m);
		control_reply_error(serial, ERR_INVALID,
				    "export: cannot save its state in %s: %s; "
				    "process %d left as it was",
				    conf.state_dir, strerror(e), (int)req->pid);
		return;
	}
	log_info("exported process %d as %s: %zu regions, %llu pages",
		 (int)req->pid, log_id(s->m->id), s->nregs,
		 (unsigned long long)s->m->pages_total);
	rep.id = s->m->id;
	control_reply(serial, FRAME_CTL_EXPORT_REPLY, &rep.base);
}

/* What a source's state file says (save_more()). */
struct saved {
	char id[MIG_ID_LEN + 1];
	pid_t pid;
	unsigned long long start;
	int keep, waiting, live;
	long long switches; /* -1: none saved */
	struct range *ranges;
	size_t nranges;
};

static int
saved_ranges(struct state_tbl *t, struct saved *sv)
{
	uint64_t ps = (uint64_t)sysconf(_SC_PAGESIZE), r[2];
	char key[STATE_KEY_MAX];

	sv->nranges = state_count(t, "range");
	sv->ranges = xcalloc(sv->nranges + 1, sizeof(*sv->ranges));
	for (size_t i = 0; i < sv->nranges; i++) {
		if (state_u64s(t, state_key(key, "range", i), r, 2) < 0)
			return -1;
		if (r[0] >= r[1] || r[0] % ps || r[1] % ps)
			return state_bad(t, key,
					 "%s: not a page-aligned START END "
					 "with START < END",
					 key);
		sv->ranges[i] = (struct range){r[0], r[1]};
	}
	return 0;
}

/*
 * Reads and checks every record; touches nothing. sv->live: the state is
 * one an export is taken up from (else it had ended).
 */
static int
saved_read(struct state_tbl *t, struct saved *sv)
{
	char st[16];
	uint64_t v;

	memset(sv, 0, sizeof(*sv));
	sv->switches = -1;
	if (state_str(t, "role", st, sizeof(st)) < 0)
		return -1;
	if (strcmp(st, "source") != 0)
		return state_bad(t, "role", "role %s: not a source's file", st);
	if (state_str(t, "id", sv->id, sizeof(sv->id)) < 0 ||
	    state_u64(t, "pid", 2, INT32_MAX, &v) < 0)
		return -1;
	sv->pid = (pid_t)v;
	if (state_u64(t, "start", 1, UINT64_MAX, &v) < 0)
		return -1;
	sv->start = v;
	if (state_u64(t, "keep_source", 0, 1, &v) < 0)
		return -1;
	sv->keep = (int)v;
	if (state_has(t, "switches")) {
		if (state_u64(t, "switches", 0, INT64_MAX, &v) < 0)
			return -1;
		sv->switches = (long long)v;
	}
	if (state_str(t, "state", st, sizeof(st)) < 0)
		return -1;
	sv->waiting = strcmp(st, "waiting") == 0;
	sv->live = sv->waiting || strcmp(st, "running") == 0 ||
		   strcmp(st, "paused") == 0;
	if (!sv->live && strcmp(st, "complete") && strcmp(st, "failed"))
		return state_bad(t, "state", "state %s: not a source's", st);
	if (saved_ranges(t, sv) < 0)
		return -1;
	return state_all_read(t);
}

int
source_restore_check(struct state_tbl *t)
{
	struct saved sv;
	int rc = saved_read(t, &sv);

	free(sv.ranges);
	return rc;
}

/*
 * The pid must still name the process exported: else it exited while no
 * daemon ran, and the kernel gave its pid to another, never to be frozen.
 */
static int
same_process(const char *file, const struct saved *sv)
{
	unsigned long long now = proc_start(sv->pid);

	if (now == sv->start)
		return 1;
	if (now == 0)
		log_warnx("%s: source process %d is gone; export %s not taken "
			  "up",
			  file, (int)sv->pid, log_id(sv->id));
	else
		log_warnx("%s: pid %d now names another process (started at "
			  "tick %llu, the exported one at %llu): the exported "
			  "process is gone; export %s not taken up, process "
			  "%d not touched",
			  file, (int)sv->pid, now, sv->start, log_id(sv->id),
			  (int)sv->pid);
	return 0;
}

/*
 * It ran while no daemon watched (found running, or switched since the
 * count saved): pages already sent may have changed since, and taken up,
 * the migration would end with the old ones. The process holds the newest
 * bytes: it is left as it was found.
 */
static int
ran_meanwhile(const char *file, struct source *s, const struct saved *sv,
	      long long now)
{
	if (s->was_stopped &&
	    (sv->switches < 0 || now < 0 || now == sv->switches))
		return 0;
	log_warnx("%s: source process %d ran while no daemon watched it "
		  "(continued from elsewhere): export %s not taken up; the "
		  "process is left %s",
		  file, (int)sv->pid, log_id(sv->id),
		  s->was_stopped ? "stopped" : "running");
	return 1;
}

/*
 * After a daemon restart: the exported process is still frozen; classify it
 * again under the same ID and wait for the destination to resume.
 */
int
source_restore(struct state_tbl *t)
{
	const char *file = state_name(t);
	struct source *s = NULL;
	struct procref p;
	struct saved sv;
	char err[256];
	uint32_t code;
	long long now;
	int rc = -1;

	if (saved_read(t, &sv) < 0)
		goto out;
	if (!sv.live) {
		log_warnx("%s: export %s had ended", file, log_id(sv.id));
		goto out;
	}
	if (!same_process(file, &sv))
		goto out;
	/* Opened now, and still the process that started then. */
	if (procref_open(&p, sv.pid, err, sizeof(err)) < 0 ||
	    p.start != sv.start) {
		log_warnx("%s: source process %d is gone; export %s not taken "
			  "up",
			  file, (int)sv.pid, log_id(sv.id));
		procref_close(&p);
		goto out;
	}
	s = source_create(&p, NULL, sv.ranges, sv.nranges, sv.keep, sv.id,
			  &code, err, sizeof(err));
	if (s == NULL) {
		log_warnx("%s: %s", file, err);
		goto out;
	}
	now = switch_count(sv.pid, NULL);
	if (ran_meanwhile(file, s, &sv, now)) {
		thaw(&s->t, s->was_stopped);
		migration_free(s->m);
		goto out;
	}
	watch_freeze(s);
	if (!sv.waiting)
		migration_set_state(s->m, MIG_PAUSED);
	log_info("restored export %s of process %d (%s)", log_id(sv.id),
		 (int)sv.pid, migration_state_name(s->m->state));
	save(s);
	rc = 0;
out:
	free(sv.ranges);
	return rc;
}

static void
source_free(struct migration *m)
{
	struct source *s = m->impl;

	if (s == NULL)
		return;
	conn_free(s->demand);
	conn_free(s->bulk);
	if (s->bulk_ev)
		event_free(s->bulk_ev);
	if (s->exit_ev)
		event_free(s->exit_ev);
	if (s->ping_ev)
		event_free(s->ping_ev);
	if (s->rate_ev)
		event_free(s->rate_ev);
	wptrack_stop(&s->wp);
	procref_close(&s->t);
	free(s->ranges);
	for (size_t i = 0; i < s->nregs; i++) {
		free(s->regs[i].data);
		free(s->regs[i].sent);
		if (s->regs[i].cache_fd >= 0)
			close(s->regs[i].cache_fd);
	}
	free(s->regs);
	free(s->scratch);
	free(s);
	m->impl = NULL;
}

/* Reads len bytes of a shared hugetlb region's page cache (cache_fd). */
static ssize_t
read_cache(const struct src_region *sr, uint64_t page, uint8_t *dst,
	   uint64_t len)
{
	uint64_t done = 0;
	off_t off = (off_t)(sr->r.file_off + page * sr->r.page_size);

	while (done < len) {
		ssize_t r = pread(sr->cache_fd, dst + done, len - done,
				  off + (off_t)done);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return done ? (ssize_t)done : r;
		done += (uint64_t)r;
	}
	return (ssize_t)done;
}

/*
 * Whether len bytes fit the room at a buffer of ours. The bytes come from
 * the exported process, whose owner chooses them: a read past the end
 * would write them over the daemon's heap. A larger read is a bug in the
 * sizing before it, and the migration fails instead.
 */
static int
room_for(struct source *s, uint64_t len, uint64_t room)
{
	if (len <= room)
		return 1;
	source_fail(s,
		    "refused to read %llu bytes of process %d into a buffer "
		    "of %llu (a bug in uffdd: please report it)",
		    (unsigned long long)len, (int)s->m->pid,
		    (unsigned long long)room);
	return 0;
}

/*
 * Reads len bytes of the frozen process from page on into dst, which has
 * room for that many. The read names the process by pid: it read the
 * process checked only if that is still itself afterwards (procref.h).
 */
static int
read_pages(struct source *s, struct src_region *sr, uint64_t page, uint8_t *dst,
	   uint64_t len, uint64_t room)
{
	struct iovec l = {dst, len};
	struct iovec r = {(void *)(sr->r.start + page * sr->r.page_size), len};
	ssize_t got;

	if (!room_for(s, len, room))
		return -1;
	got = sr->cache_fd >= 0 ? read_cache(sr, page, dst, len)
				: process_vm_readv(s->m->pid, &l, 1, &r, 1, 0);
	if (got == (ssize_t)len && procref_same(&s->t))
		return 0;
	if ((got < 0 && errno == ESRCH) || !procref_same(&s->t))
		source_fail(s,
			    "source process %d exited, or runs another "
			    "program",
			    (int)s->m->pid);
	else
		source_fail(s, "reading %llu bytes of process %d at 0x%llx: %s",
			    (unsigned long long)len, (int)s->m->pid,
			    (unsigned long long)r.iov_base,
			    got < 0 ? strerror(errno) : "short read");
	return -1;
}

/*
 * Demand answers read through /proc/PID/mem when it could be opened: for
 * one 4 KiB page a pread costs about 1 us here against 1.6-2.3 us for
 * process_vm_readv (which pins the pages); the bulk lane's large reads stay
 * with process_vm_readv, as /proc/PID/mem copies through a bounce page.
 */
static int
read_demand(struct source *s, struct src_region *sr, uint64_t page,
	    uint8_t *dst, uint64_t len, uint64_t room)
{
	uint64_t addr = sr->r.start + page * sr->r.page_size;

	if (!room_for(s, len, room))
		return -1;
	if (sr->cache_fd < 0 &&
	    pread(s->t.memfd, dst, len, (off_t)addr) == (ssize_t)len)
		return 0;
	return read_pages(s, sr, page, dst, len, room);
}

/*
 * Queues one frame for pages [page, page+n) of a region, all of one class
 * (data or zero). Data is read from the frozen process straight into the
 * output buffer, header and bytes in one reserved extent, so a failed read
 * queues nothing; or copied from `have` when the caller read it already.
 * Returns the data bytes queued, or -1.
 */
static int64_t
send_run(struct source *s, struct conn *c, uint32_t ri, uint64_t page,
	 uint64_t n, int zero, int demand, const uint8_t *have)
{
	struct src_region *sr = &s->regs[ri];
	Uffdd__PageData pd = UFFDD__PAGE_DATA__INIT;
	uint64_t len = zero ? 0 : n * sr->r.page_size;
	struct evbuffer_iovec v;
	uint8_t *hdr;
	size_t hlen;

	/* What a destination refuses, and more than our buffers hold. */
	if (frame_pages_fit(sr->r.page_size, n) != n) {
		source_fail(s,
			    "a frame of %llu pages of %u bytes, more than one "
			    "frame covers (%u bytes; a bug in uffdd: please "
			    "report it)",
			    (unsigned long long)n, sr->r.page_size,
			    FRAME_DATA_MAX);
		return -1;
	}
	pd.region = sr->r.index;
	pd.page = page;
	pd.npages = (uint32_t)n;
	pd.zero = zero;
	pd.demand = demand;
	if ((hdr = frame_pack(FRAME_PAGE_DATA, &pd.base, (uint32_t)len,
			      &hlen)) == NULL)
		return -1;
	if (demand) {
		/*
		 * Demand answers bypass the output buffer when it is empty
		 * (conn_writev()): read into scratch memory, write at once.
		 */
		struct iovec out[2] = {{hdr, hlen},
				       {have ? (void *)have : s->scratch, len}};

		if (len && have == NULL &&
		    read_demand(s, sr, page, s->scratch, len, SCRATCH_LEN) <
			    0) {
			free(hdr);
			return -1;
		}
		if (conn_writev(c, out, len ? 2 : 1) < 0) {
			free(hdr);
			return -1;
		}
		free(hdr);
		goto sent;
	}
	if (evbuffer_reserve_space(conn_output(c), (ev_ssize_t)(hlen + len), &v,
				   1) < 1) {
		free(hdr);
		return -1;
	}
	memcpy(v.iov_base, hdr, hlen);
	free(hdr);
	if (len && have)
		memcpy((uint8_t *)v.iov_base + hlen, have, len);
	else if (len && read_pages(s, sr, page, (uint8_t *)v.iov_base + hlen,
				   len, v.iov_len - hlen) < 0)
		return -1;
	v.iov_len = hlen + len;
	evbuffer_commit_space(conn_output(c), &v, 1);
sent:
	for (uint64_t i = 0; i < n; i++) {
		if (!bit_test(sr->sent, page + i)) {
			bit_set(sr->sent, page + i);
			s->m->pages_present++;
			s->m->zero_pages += (uint64_t)zero;
			s->m->prefetched_pages += (uint64_t)!demand;
		}
	}
	s->m->bytes += len;
	return (int64_t)len;
}

/* Length of the run from `page` of one class, at most max pages. */
static uint64_t
class_run(const struct src_region *sr, uint64_t page, uint64_t max,
	  int only_unsent)
{
	int cls = bit_test(sr->data, page);
	uint64_t n = 1;

	while (n < max && page + n < sr->npages &&
	       bit_test(sr->data, page + n) == cls &&
	       (!only_unsent || !bit_test(sr->sent, page + n)))
		n++;
	return n;
}

static int page_is_zero(const uint8_t *, uint64_t);

static void
demand_request(struct source *s, const Uffdd__PageRequest *pr)
{
	struct src_region *sr = NULL;
	uint64_t page = pr->page, end;

	for (size_t i = 0; i < s->nregs; i++)
		if (s->regs[i].r.index == pr->region && s->regs[i].accepted)
			sr = &s->regs[i];
	if (sr == NULL || pr->npages == 0 ||
	    pr->npages > (uint32_t)conf.max_request_pages ||
	    (uint64_t)pr->npages * sr->r.page_size > FRAME_DATA_MAX ||
	    page >= sr->npages || pr->npages > sr->npages - page) {
		log_warnx("%s: page request out of bounds (region %u page "
			  "%llu+%u)",
			  conn_name(s->demand), pr->region,
			  (unsigned long long)page, pr->npages);
		conn_send_error(s->demand, ERR_PROTOCOL,
				"page request out of bounds");
		conn_free(s->demand);
		s->demand = NULL;
		migration_set_state(s->m, MIG_PAUSED);
		return;
	}
	end = page + pr->npages;
	while (page < end) {
		uint64_t n = class_run(sr, page, end - page, 0);
		int zero = !bit_test(sr->data, page);
		const uint8_t *have = NULL;

		/*
		 * Shared hugetlb counts every page as data, its holes too
		 * (struct src_region): an all-zero one is answered with a
		 * ZERO marker, as the bulk lane does, not 2 MiB of zeros.
		 */
		if (!zero && sr->cache_fd >= 0) {
			n = 1;
			if (read_pages(s, sr, page, s->scratch, sr->r.page_size,
				       SCRATCH_LEN) < 0)
				return;
			zero = page_is_zero(s->scratch, sr->r.page_size);
			have = s->scratch;
		}
		if (send_run(s, s->demand, (uint32_t)(sr - s->regs), page, n,
			     zero, 1, have) < 0)
			return;
		page += n;
	}
	conn_flush(s->demand);
	loop_poll(); /* the next request may follow */
	s->m->demand_faults++;
	s->m->demand_pages += pr->npages;
	/* Spatial locality: the bulk lane goes on from just past the fault. */
	s->hint_reg = (uint32_t)(sr - s->regs);
	s->hint_page = end;
	s->hint_left = LOCALITY_PAGES;
}

/* The next unsent page: first around the last fault, then the sweep. */
static int
next_unsent(struct source *s, uint32_t *ri, uint64_t *page, uint64_t *max)
{
	while (s->hint_left > 0) {
		struct src_region *sr = &s->regs[s->hint_reg];
		uint64_t lim = s->hint_page + s->hint_left;
		uint64_t p;

		if (lim > sr->npages)
			lim = sr->npages;
		p = bit_next_clear(sr->sent, s->hint_page, lim);
		if (p >= lim) {
			s->hint_left = 0;
			break;
		}
		s->hint_left -= p - s->hint_page;
		s->hint_page = p;
		*ri = s->hint_reg;
		*page = p;
		*max = lim - p;
		return 1;
	}
	for (; s->cur_reg < s->nregs; s->cur_reg++, s->cur_page = 0) {
		struct src_region *sr = &s->regs[s->cur_reg];
		uint64_t p;

		if (!sr->accepted)
			continue;
		p = bit_next_clear(sr->sent, s->cur_page, sr->npages);
		if (p < sr->npages) {
			s->cur_page = p;
			*ri = s->cur_reg;
			*page = p;
			*max = sr->npages - p;
			return 1;
		}
	}
	return 0;
}

/*
 * Produces one round of the bulk stream, then yields to the loop so that
 * demand requests (higher priority) go first.
 */
static int
page_is_zero(const uint8_t *p, uint64_t len)
{
	return p[0] == 0 && memcmp(p, p + 1, len - 1) == 0;
}

/*
 * zero-detect: reads the data run [page, page+*n) and sends its leading
 * pages of one kind: all-zero ones as a ZERO marker (no bytes on the wire,
 * the destination maps a zero page), others as data. *n becomes the pages
 * sent; the rest of the run is looked at again on the next turn.
 */
static int64_t
send_zero_detected(struct source *s, uint32_t ri, uint64_t page, uint64_t *n)
{
	struct src_region *sr = &s->regs[ri];
	uint64_t ps = sr->r.page_size, k = 1;
	int zero;

	if (read_pages(s, sr, page, s->scratch, *n * ps, SCRATCH_LEN) < 0)
		return -1;
	zero = page_is_zero(s->scratch, ps);
	while (k < *n && page_is_zero(s->scratch + k * ps, ps) == zero)
		k++;
	*n = k;
	if (!zero)
		return send_run(s, s->bulk, ri, page, k, 0, 0, s->scratch);
	for (uint64_t i = 0; i < k; i++)
		if (!bit_test(sr->sent, page + i))
			s->m->zero_content_pages++;
	return send_run(s, s->bulk, ri, page, k, 1, 0, NULL);
}

/*
 * Data runs the bulk lane reads first and sends all-zero pages of as ZERO
 * markers: with zero-detect on (not in private file mappings, where ZERO
 * means the file's page), and always for shared hugetlb (its holes).
 */
static int
zero_checked(const struct src_region *sr)
{
	return (conf.zero_detect && sr->r.kind != REGION_FILE_PRIVATE) ||
	       sr->cache_fd >= 0;
}

static void
bulk_produce(struct source *s)
{
	uint64_t bytes = 0, round = BULK_ROUND_BYTES, frame = BULK_DATA_PAGES;

	/*
	 * While demand traffic is recent, one small frame a loop pass, and
	 * small writes: a request that comes meanwhile waits for at most
	 * one of each (tens of microseconds for the large ones).
	 */
	if (s->bulk) {
		int small = loop_demand_recent();

		if (small) {
			round = 1;
			frame = BULK_SMALL_PAGES;
		}
		conn_set_io_max(s->bulk, small ? DEMAND_STEP_BYTES : 0);
	}
	while (s->bulk && bytes < round &&
	       conn_output_len(s->bulk) < BULK_HIGH) {
		if (conf.bulk_rate) {
			uint64_t now = now_ns();

			if (now - s->win_start >= RATE_WINDOW_NS) {
				s->win_start = now;
				s->win_bytes = 0;
			}
			if (s->win_bytes >= conf.bulk_rate / 10) {
				struct timeval tv = {
					0,
					(suseconds_t)((s->win_start +
						       RATE_WINDOW_NS - now) /
						      1000)};

				evtimer_add(s->rate_ev, &tv);
				return;
			}
		}
		uint32_t ri;
		uint64_t page, max, n;
		int64_t got;
		int zero;

		if (!next_unsent(s, &ri, &page, &max))
			return; /* everything sent */
		zero = !bit_test(s->regs[ri].data, page);
		if (max > (zero ? BULK_ZERO_PAGES : frame))
			max = zero ? BULK_ZERO_PAGES : frame;
		/*
		 * Huge pages: as many as one frame holds, whole ones. None
		 * (pages over FRAME_DATA_MAX) is refused at export; were it
		 * not, class_run() would still make a run of one.
		 */
		max = frame_pages_fit(s->regs[ri].r.page_size, max);
		if (max == 0) {
			source_fail(s,
				    "region at 0x%llx: pages of %u bytes do "
				    "not fit in a frame",
				    (unsigned long long)s->regs[ri].r.start,
				    s->regs[ri].r.page_size);
			return;
		}
		n = class_run(&s->regs[ri], page, max, 1);
		if (!zero && zero_checked(&s->regs[ri])) {
			if ((got = send_zero_detected(s, ri, page, &n)) < 0)
				return;
		} else if ((got = send_run(s, s->bulk, ri, page, n, zero, 0,
					   NULL)) < 0)
			return;
		bytes += (uint64_t)got + 4096;
		s->win_bytes += (uint64_t)got + 64;
		loop_bulk();
		if (s->hint_left) {
			s->hint_page += n;
			s->hint_left = s->hint_left > n ? s->hint_left - n : 0;
		}
	}
	if (s->bulk && conn_output_len(s->bulk) < BULK_HIGH)
		event_active(s->bulk_ev, EV_TIMEOUT, 0);
}

static void
bulk_cb(evutil_socket_t fd, short ev, void *arg)
{
	bulk_produce(arg);
}

static void
bulk_drain(struct conn *c, void *arg)
{
	bulk_produce(arg);
}

static void
lanes_down(struct source *s, const char *why)
{
	conn_free(s->demand);
	conn_free(s->bulk);
	s->demand = s->bulk = NULL;
	event_del(s->bulk_ev);
	if (s->m->state == MIG_RUNNING) {
		log_warnx("migration %s: destination lost (%s); the process "
			  "stays frozen",
			  log_id(s->m->id), why);
		migration_set_state(s->m, MIG_PAUSED);
		save(s);
	} else if (s->m->state == MIG_WAITING) {
		for (size_t i = 0; i < s->nregs; i++)
			s->regs[i].accepted = 0;
	}
}

/* The end, either way: lanes, events, state file, then the role's memory. */
static void
teardown(struct source *s)
{
	if (s->demand)
		conn_finish(s->demand);
	if (s->bulk)
		conn_finish(s->bulk);
	s->demand = s->bulk = NULL;
	event_del(s->bulk_ev);
	event_del(s->ping_ev);
	event_del(s->rate_ev);
	if (s->exit_ev)
		event_del(s->exit_ev);
	state_remove(s->m);
	migration_release(s->m);
}

static void
complete(struct source *s)
{
	char why[256];

	/*
	 * The destination has every page it was sent. If the process ran
	 * meanwhile, that may not be all it holds: it is not killed, and the
	 * migration is not called complete here.
	 */
	if (continued(s, why, sizeof(why))) {
		migration_fail(s->m, "%s", why);
		log_warnx("migration %s: process %d left running",
			  log_id(s->m->id), (int)s->m->pid);
		teardown(s);
		return;
	}
	migration_set_state(s->m, MIG_COMPLETE);
	if (s->keep_source) {
		log_info("migration %s complete; process %d left stopped",
			 log_id(s->m->id), (int)s->m->pid);
	} else {
		log_info("migration %s complete; killing source process %d",
			 log_id(s->m->id), (int)s->m->pid);
		procref_signal(&s->t, SIGKILL);
	}
	teardown(s);
}

/*
 * The destination names the regions it takes. Whatever was sent before is
 * forgotten: on a resume, or after the destination lost its bulk lane, the
 * HAVE bitmaps that follow say exactly what it holds, and everything else
 * goes again. A bulk lane still open here is the one the destination gave
 * up: whatever goes into it from now on would be lost, so it goes too.
 */
static void
accept_regions(struct source *s, const Uffdd__RegionTable *t)
{
	if (s->m->state == MIG_COMPLETE || s->m->state == MIG_FAILED)
		return;
	if (s->bulk) {
		log_info("migration %s: destination lost its bulk lane; "
			 "sending again what it lacks",
			 log_id(s->m->id));
		conn_free(s->bulk);
		s->bulk = NULL;
		event_del(s->bulk_ev);
	}
	for (size_t i = 0; i < s->nregs; i++) {
		s->regs[i].accepted = 0;
		memset(s->regs[i].sent, 0,
		       bit_words(s->regs[i].npages) * sizeof(uint64_t));
	}
	for (size_t i = 0; i < t->n_regions; i++) {
		uint32_t idx = t->regions[i]->index;

		if (idx >= s->nregs) {
			conn_send_error(s->demand, ERR_PROTOCOL, "no region %u",
					idx);
			lanes_down(s, "bad region index");
			return;
		}
		s->regs[idx].accepted = 1;
	}
	s->m->pages_total = s->m->pages_present = 0;
	for (size_t i = 0; i < s->nregs; i++)
		if (s->regs[i].accepted)
			s->m->pages_total += s->regs[i].npages;
	s->cur_reg = 0;
	s->cur_page = 0;
	s->hint_left = 0;
	if (s->resume_pending)
		s->m->reconnects++;
	s->resume_pending = 0;
	migration_set_state(s->m, MIG_RUNNING);
	save(s);
}

/* A resuming destination's HAVE bitmap: these pages need not go again. */
static int
have_pages(struct source *s, const Uffdd__PageBitmap *b)
{
	struct src_region *sr =
		b->region < s->nregs ? &s->regs[b->region] : NULL;

	if (sr == NULL || !sr->accepted || b->first_page >= sr->npages ||
	    b->npages > sr->npages - b->first_page ||
	    b->bits.len != (b->npages + 7) / 8)
		return -1;
	for (uint64_t i = 0; i < b->npages; i++) {
		uint64_t p = b->first_page + i;

		if ((b->bits.data[i / 8] >> (i % 8) & 1) &&
		    !bit_test(sr->sent, p)) {
			bit_set(sr->sent, p);
			s->m->pages_present++;
		}
	}
	return 0;
}

static void
demand_frame(struct conn *c, const struct frame_hdr *h, ProtobufCMessage *msg,
	     void *arg)
{
	struct source *s = arg;

	switch (h->type) {
	case FRAME_REGIONS:
		accept_regions(s, (const Uffdd__RegionTable *)msg);
		break;
	case FRAME_PAGE_REQUEST:
		if (s->m->state == MIG_RUNNING)
			demand_request(s, (const Uffdd__PageRequest *)msg);
		break;
	case FRAME_COMPLETE:
		if (s->m->state == MIG_RUNNING || s->m->state == MIG_PAUSED)
			complete(s);
		break;
	case FRAME_HAVE:
		if (have_pages(s, (const Uffdd__PageBitmap *)msg) < 0) {
			log_warnx("%s: HAVE out of bounds", conn_name(c));
			lanes_down(s, "bad HAVE bitmap");
		}
		break;
	case FRAME_PING:
		break;
	case FRAME_ERROR: {
		const Uffdd__Error *e = (const Uffdd__Error *)msg;

		log_warnx("migration %s: destination says: %s",
			  log_id(s->m->id), e->message);
		if (e->code == ERR_TARGET_GONE || e->code == ERR_DEST_FAILED) {
			migration_fail(s->m,
				       "destination: %s; source process %d "
				       "left stopped",
				       e->message, (int)s->m->pid);
			teardown(s);
		} else {
			lanes_down(s, e->message);
		}
		break;
	}
	default:
		log_warnx("%s: unexpected %s", conn_name(c),
			  frame_type_name(h->type));
		lanes_down(s, "protocol error");
		break;
	}
}

static void
lane_close(struct conn *c, const char *why, void *arg)
{
	lanes_down(arg, why);
}

/*
 * The bulk lane alone going down leaves the demand lane serving: the
 * destination closes bulk first at completion, and the two sockets' closes
 * may arrive in either order.
 */
static void
bulk_close(struct conn *c, const char *why, void *arg)
{
	struct source *s = arg;

	conn_free(s->bulk);
	s->bulk = NULL;
	event_del(s->bulk_ev);
	if (s->demand == NULL)
		lanes_down(s, why);
}

static void
bulk_frame(struct conn *c, const struct frame_hdr *h, ProtobufCMessage *msg,
	   void *arg)
{
	log_warnx("%s: unexpected %s on the bulk lane", conn_name(c),
		  frame_type_name(h->type));
	lanes_down(arg, "protocol error");
}

int
source_hello(struct conn *c, const Uffdd__Hello *hello)
{
	Uffdd__Hello me = UFFDD__HELLO__INIT;
	Uffdd__RegionTable t = UFFDD__REGION_TABLE__INIT;
	Uffdd__Region *rp, **pp;
	struct migration *m;
	struct source *s;

	if (hello->version != UFFDD_PROTO_VERSION) {
		conn_send_error(c, ERR_PROTOCOL,
				"protocol version %u, this source speaks %u",
				hello->version, UFFDD_PROTO_VERSION);
		conn_finish(c);
		return -1;
	}
	m = migration_find(hello->migration_id, ROLE_SOURCE);
	if (m == NULL) {
		log_warnx("%s: unknown migration ID %s", conn_name(c),
			  log_id(hello->migration_id));
		conn_send_error(c, ERR_UNKNOWN_ID, "unknown migration ID");
		conn_finish(c);
		return -1;
	}
	s = m->impl;
	if (m->state == MIG_COMPLETE || m->state == MIG_FAILED) {
		conn_send_error(c, ERR_SOURCE, "migration is %s%s%s",
				migration_state_name(m->state),
				m->reason[0] ? ": " : "", m->reason);
		conn_finish(c);
		return -1;
	}
	if (hello->lane == UFFDD__LANE__LANE_BULK) {
		if (s->demand == NULL || m->state != MIG_RUNNING || s->bulk) {
			conn_send_error(c, ERR_BUSY,
					s->bulk ? "bulk lane already open"
						: "bulk lane before the demand "
						  "lane");
			conn_finish(c);
			return -1;
		}
		s->bulk = c;
		conn_set_owner(c, bulk_frame, bulk_close, s);
		conn_set_priority(c, PRIO_BULK);
		conn_set_drain(c, bulk_drain, BULK_LOW);
		conn_send(c, FRAME_HELLO, &me.base);
		bulk_produce(s);
		return 0;
	}
	if (hello->lane == UFFDD__LANE__LANE_DEMAND && hello->resume &&
	    s->demand) {
		/* The destination saw the old lanes die; we have not yet. */
		log_info("migration %s: destination resumes; dropping its old "
			 "lanes",
			 log_id(m->id));
		conn_free(s->demand);
		conn_free(s->bulk);
		s->demand = s->bulk = NULL;
		event_del(s->bulk_ev);
	}
	if (hello->lane != UFFDD__LANE__LANE_DEMAND || s->demand) {
		conn_send_error(c, ERR_BUSY,
				s->demand
					? "migration already has a destination"
					: "unknown lane");
		conn_finish(c);
		return -1;
	}
	s->demand = c;
	s->resume_pending = hello->resume;
	migration_set_peer(m, conn_name(c));
	conn_set_owner(c, demand_frame, lane_close, s);
	conn_set_priority(c, PRIO_FAULT);
	peer_set_nodelay(c);
	conn_read_direct(c);
	me.version = UFFDD_PROTO_VERSION;
	me.lane = UFFDD__LANE__LANE_DEMAND;
	conn_send(c, FRAME_HELLO, &me.base);
	rp = xcalloc(s->nregs, sizeof(*rp));
	pp = xcalloc(s->nregs, sizeof(*pp));
	for (size_t i = 0; i < s->nregs; i++) {
		const struct region *r = &s->regs[i].r;

		uffdd__region__init(&rp[i]);
		rp[i].index = r->index;
		rp[i].name = (char *)r->name;
		rp[i].start = r->start;
		rp[i].length = r->length;
		rp[i].page_size = r->page_size;
		rp[i].kind = (Uffdd__RegionKind)r->kind;
		rp[i].data_pages = r->data_pages;
		rp[i].zero_pages = r->zero_pages;
		if (r->kind == REGION_FILE_PRIVATE)
			rp[i].file_offset = r->file_off;
		pp[i] = &rp[i];
	}
	t.n_regions = s->nregs;
	t.regions = pp;
	conn_send(c, FRAME_REGIONS, &t.base);
	free(pp);
	free(rp);
	return 0;
}

static void
export_request(uint64_t serial, const struct authz_caller *who,
	       struct procref *t, const ProtobufCMessage *req)
{
	source_export(serial, who, t, (const Uffdd__ExportRequest *)req);
}

static int
export_pid(const ProtobufCMessage *req)
{
	return ((const Uffdd__ExportRequest *)req)->pid;
}

static const struct role_ops source_ops = {
	.role = ROLE_SOURCE,
	.name = "source",
	.request_type = FRAME_CTL_EXPORT,
	.verb = "export",
	.request_pid = export_pid,
	.request = export_request,
	.restore = source_restore,
	.restore_check = source_restore_check,
	.hello = source_hello,
};

void
source_register(void)
{
	role_register(&source_ops);
}
