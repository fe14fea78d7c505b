/*
 * Whose writes a pre-copy tracks: the exported process's, armed at the
 * export (source_precopy_arm()), and with export --precopy --track PID
 * another process's. A guest's RAM files are mapped by a holder (the
 * process exported) and by QEMU, which writes them through its own
 * mapping; a write-protect bit lives in one mapping's page-table entry,
 * so a tracker on the holder sees none of QEMU's writes. The tracked
 * process gets a tracker of its own over its mappings of the exported
 * files (matched by file and offset, not by address), and is stopped with
 * the exported process at the freeze.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "daemon/compat.h"
#include "daemon/log.h"
#include "daemon/migration.h"
#include "daemon/proc.h"
#include "daemon/procref.h"
#include "daemon/region.h"
#include "daemon/source/internal.h"
#include "daemon/wplinger.h"

/*
 * Checks that process t can be pre-copied in regions [regs, regs + n) and
 * write-protects them (async: the process runs on and nothing handles its
 * writes). Before anything is done to it: a refusal leaves it as it was.
 */
int
source_precopy_arm(const struct procref *t, const struct region *regs, size_t n,
		   struct wptrack *wp, uint32_t *code, char *err, size_t errlen)
{
	struct range *rs;
	char why[256];
	int r;

	enum wptrack_mode mode = wptrack_mode();

	if (mode == WPTRACK_OFF) {
		*code = ERR_KERNEL;
		snprintf(err, errlen,
			 "--precopy needs write tracking of a running process "
			 "(UFFD_FEATURE_WP_ASYNC and the PAGEMAP_SCAN ioctl, "
			 "Linux 6.7 and later; or, for private anonymous "
			 "memory, synchronous uffd-wp with pagemap's uffd-wp "
			 "bit, Linux 6.1 and later), which this kernel does "
			 "not offer; process %d left running: export it "
			 "without --precopy",
			 (int)t->pid);
		return -1;
	}
	for (size_t i = 0; i < n; i++) {
		if (regs[i].kind != REGION_FILE_PRIVATE &&
		    (mode != WPTRACK_SYNC ||
		     regs[i].kind == REGION_ANON_PRIVATE))
			continue;
		*code = regs[i].kind == REGION_FILE_PRIVATE ? ERR_INVALID
							    : ERR_KERNEL;
		snprintf(err, errlen,
			 regs[i].kind == REGION_FILE_PRIVATE
				 ? "--precopy: 0x%llx-0x%llx (%.100s) is a "
				   "private file mapping, which userfaultfd "
				   "cannot write-protect: leave it out with "
				   "--range"
				 : "--precopy: 0x%llx-0x%llx (%.100s) is not "
				   "private anonymous memory, and this kernel "
				   "tracks writes to that only (synchronous "
				   "uffd-wp; shared memory and huge pages need "
				   "UFFD_FEATURE_WP_ASYNC and PAGEMAP_SCAN, "
				   "Linux 6.7 and later): leave it out with "
				   "--range",
			 (unsigned long long)regs[i].start,
			 (unsigned long long)(regs[i].start + regs[i].length),
			 regs[i].name);
		return -1;
	}
	/* Their writes would be tracked, but the freeze would not stop them. */
	if (source_refuse_sharers(t, code, err, errlen) < 0)
		return -1;
	rs = xcalloc(n, sizeof(*rs));
	for (size_t i = 0; i < n; i++) {
		rs[i].start = regs[i].start;
		rs[i].end = regs[i].start + regs[i].length;
	}
	r = wptrack_start_over(wp, t, rs, n, mode, why, sizeof(why));
	free(rs);
	if (r < 0) {
		*code = ERR_KERNEL;
		snprintf(err, errlen,
			 "--precopy: tracking the writes of process %d: %s; "
			 "process left running",
			 (int)t->pid, why);
	}
	return r;
}

/* The file behind pid's mapping [start, end): 0 with *st filled, or -1. */
static int
backing_stat(pid_t pid, uint64_t start, uint64_t end, struct stat *st)
{
	int fd = region_open_backing(pid, start, end), rc;

	if (fd < 0)
		return -1;
	rc = fstat(fd, st);
	close(fd);
	return rc;
}

/*
 * Where process tp maps the file part region r (of process pid) maps: its
 * address in *at. Exactly one of tp's mappings may reach that part of the
 * file, and it must cover all of it: writes through a second one (or the
 * part of the file another one maps) would go unseen. 0, or -1 with err.
 */
static int
match_one(pid_t pid, pid_t tp, const struct vma *v, size_t nv,
	  const struct region *r, uint64_t *at, char *err, size_t errlen)
{
	uint64_t lo = r->file_off, hi = r->file_off + r->length;
	struct stat want, st;
	size_t found = 0;

	if (backing_stat(pid, r->vma_start, r->vma_end, &want) < 0) {
		snprintf(err, errlen, "the file behind 0x%llx (%.100s): %s",
			 (unsigned long long)r->start, r->name,
			 strerror(errno));
		return -1;
	}
	for (size_t i = 0; i < nv; i++) {
		uint64_t vlo = v[i].offset,
			 vhi = v[i].offset + v[i].end - v[i].start;

		if (v[i].perms[3] != 's' || vhi <= lo || vlo >= hi ||
		    backing_stat(tp, v[i].start, v[i].end, &st) < 0 ||
		    st.st_dev != want.st_dev || st.st_ino != want.st_ino)
			continue;
		if (vlo > lo || vhi < hi || ++found > 1) {
			snprintf(err, errlen,
				 "process %d maps the file behind 0x%llx "
				 "(%.100s) %s: its writes there would go "
				 "unseen",
				 (int)tp, (unsigned long long)r->start, r->name,
				 found > 1 ? "more than once" : "in part only");
			return -1;
		}
		*at = v[i].start + (lo - vlo);
	}
	if (found == 0)
		snprintf(err, errlen,
			 "process %d does not map the file behind 0x%llx "
			 "(%.100s)",
			 (int)tp, (unsigned long long)r->start, r->name);
	return found == 1 ? 0 : -1;
}

int
source_track_match(pid_t pid, pid_t tp, const struct region *regs, size_t n,
		   uint64_t *at, uint32_t *code, char *err, size_t errlen)
{
	struct vma *v = NULL;
	size_t nv = 0;
	char why[384];
	int rc = 0;

	*code = ERR_INVALID;
	for (size_t i = 0; i < n; i++)
		if (!region_kind_shmem(regs[i].kind) &&
		    !(regs[i].kind == REGION_HUGETLB && regs[i].shared)) {
			snprintf(err, errlen,
				 "--track: 0x%llx-0x%llx (%.100s) is private "
				 "memory of process %d, which no other "
				 "process writes: leave it out with --range",
				 (unsigned long long)regs[i].start,
				 (unsigned long long)(regs[i].start +
						      regs[i].length),
				 regs[i].name, (int)pid);
			return -1;
		}
	if (region_read_maps(tp, &v, &nv) < 0) {
		*code = errno == EPERM ? ERR_PERMISSION : ERR_NO_PROCESS;
		snprintf(err, errlen, "--track: the maps of process %d: %s",
			 (int)tp, strerror(errno));
		return -1;
	}
	for (size_t i = 0; i < n && rc == 0; i++)
		if ((rc = match_one(pid, tp, v, nv, &regs[i], &at[i], why,
				    sizeof(why))) < 0)
			snprintf(err, errlen, "--track: %s", why);
	free(v);
	return rc;
}

/*
 * Arms the tracked process's tracker (the holder's is armed already):
 * the same checks and tracker as a pre-copied process's, over the
 * tracked one's addresses of the exported regions. Takes tp over (into
 * the pre-copy's, or closed). 0, or -1 with err.
 */
int
source_track_arm(struct source *s, struct procref *tp, uint32_t *code,
		 char *err, size_t errlen)
{
	struct precopy *pc = s->pc;
	struct region *regs = xcalloc(s->nregs, sizeof(*regs));
	int rc = -1;

	pc->track_at = xcalloc(s->nregs, sizeof(*pc->track_at));
	for (size_t i = 0; i < s->nregs; i++)
		regs[i] = s->regs[i].r;
	if (source_track_match(s->m->pid, tp->pid, regs, s->nregs, pc->track_at,
			       code, err, errlen) == 0) {
		for (size_t i = 0; i < s->nregs; i++)
			regs[i].start = pc->track_at[i];
		rc = source_precopy_arm(tp, regs, s->nregs, &pc->track_wp, code,
					err, errlen);
	}
	free(regs);
	if (rc == 0) {
		pc->track = *tp;
		*tp = (struct procref)PROCREF_NONE;
		log_info(
			"migration %s: writes of process %d to its memory "
			"tracked too (%s)",
			log_id(s->m->id), (int)pc->track.pid,
			pc->track_unstopped
				? "--track-unstopped: not stopped at the "
				  "freeze, a write after it fails the migration"
				: "--track: stopped with it at the freeze");
	}
	procref_close(tp);
	return rc;
}

/* What a collect passes on: the export, and what marks its pages. */
struct translate {
	struct source *s;
	void (*mark)(void *s, uint64_t start, uint64_t end);
};

/* Pages [start, end) of the tracked process's mappings were written. */
static void
mark_tracked(void *arg, uint64_t start, uint64_t end)
{
	const struct translate *t = arg;
	struct source *s = t->s;

	for (size_t i = 0; i < s->nregs; i++) {
		uint64_t at = s->pc->track_at[i], len = s->regs[i].r.length;
		uint64_t a = start > at ? start : at;
		uint64_t b = end < at + len ? end : at + len;

		if (a < b)
			t->mark(s, s->regs[i].r.start + (a - at),
				s->regs[i].r.start + (b - at));
	}
}

int64_t
source_track_collect(struct source *s,
		     void (*mark)(void *s, uint64_t start, uint64_t end))
{
	struct translate t = {s, mark};

	if (s->pc == NULL || s->pc->track.pid <= 0)
		return 0;
	return wptrack_collect(&s->pc->track_wp, mark_tracked, &t);
}

int
source_track_freeze(struct source *s, char *err, size_t errlen)
{
	struct precopy *pc = s->pc;
	uint32_t code;

	if (pc == NULL || pc->track.pid <= 0)
		return 0;
	/* It stopped writing on its own: only still itself, read after. */
	if (pc->track_unstopped) {
		if (procref_same(&pc->track))
			return 0;
		snprintf(err, errlen,
			 "tracked process %d exited, or runs another program",
			 (int)pc->track.pid);
		return -1;
	}
	if (source_freeze_checked(&pc->track, NULL, NULL,
				  &pc->track_was_stopped, &code, err,
				  errlen) < 0)
		return -1;
	pc->track_switches = source_settled_switches(pc->track.pid);
	return 0;
}

void
source_track_thaw(struct source *s)
{
	if (s->pc != NULL && s->pc->track.pid > 0 && !s->pc->track_unstopped)
		source_thaw(&s->pc->track, s->pc->track_was_stopped);
}

void
source_track_free(struct precopy *pc)
{
	wptrack_stop(&pc->track_wp);
	procref_close(&pc->track);
	free(pc->track_at);
	pc->track_at = NULL;
}

/* The exported process and a tracked one go on (a failed pre-copy). */
void
source_precopy_thaw(struct source *s)
{
	source_thaw(&s->t, s->was_stopped);
	source_track_thaw(s);
}
