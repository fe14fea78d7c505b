/*
 * The bottom of the source role: an export's record and its regions made,
 * the process's pages classified (which hold data), and the regions a
 * snapshot would take. It calls nothing of the role above it but through
 * the owner's callbacks (owner.c).
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>

#include "daemon/compat.h"
#include "daemon/conffile.h"
#include "daemon/log.h"
#include "daemon/migration.h"
#include "daemon/pagemap.h"
#include "daemon/probe.h"
#include "daemon/procfile.h"
#include "daemon/procref.h"
#include "daemon/region.h"
#include "daemon/source/internal.h"
#include "daemon/wptrack.h"
int
source_open_same(pid_t pid, const struct src_region *sr)
{
	int fd = region_open_backing(pid, sr->r.vma_start, sr->r.vma_end);
	struct stat st;

	if (fd < 0 || (fstat(fd, &st) == 0 &&
		       region_same_file(&sr->r, st.st_dev, st.st_ino)))
		return fd;
	close(fd);
	errno = ESTALE;
	return -1;
}

/*
 * Which pages of region sr hold data, by its kind (docs/design.md):
 * anonymous memory from pagemap, shared memory from its backing file (a
 * swapped-out shmem page looks untouched in pagemap), shared hugetlb all
 * data (struct src_region). Shared memory that another process maps at
 * pm_at, its pagemap pm_fd (-1: none), is classified through that mapping
 * first, and only the pages care marks (the others are left as holes).
 * Returns the data pages, or -1.
 */
static int64_t
classify(pid_t pid, struct src_region *sr, int pm_fd, uint64_t pm_at,
	 const uint64_t *care)
{
	int64_t data;
	int fd;

	if (sr->r.kind == REGION_HUGETLB && sr->r.shared) {
		if ((sr->cache_fd = source_open_same(pid, sr)) < 0)
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
	if ((fd = source_open_same(pid, sr)) < 0)
		return -1;
	if (pm_fd >= 0 && sr->r.page_size == (uint64_t)sysconf(_SC_PAGESIZE))
		data = pagemap_classify_mapped(pm_fd, pm_at, fd, sr->r.file_off,
					       sr->npages, sr->r.page_size,
					       sr->data, care);
	else if (kfeat.shmem_pm_swap &&
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
 * A watch of the file behind pid's region sr, if a hole punched in a file
 * of its kind shows (kfeat.punch_notify), else -1. The kind and the file
 * are told from the watch itself: a target that remapped the range after
 * another look could otherwise have a file watched whose punches do not
 * show where one whose punches do was looked at, or another file than the
 * one exported (then it is searched at the freeze, as an unwatched one).
 */
static int
punch_watch(pid_t pid, const struct src_region *sr)
{
	int w = procfile_map_watch(pid, sr->r.vma_start, sr->r.vma_end);
	dev_t dev;
	ino_t ino;

	if (w >= 0 && procfile_watch_file(w, &dev, &ino) == 0 &&
	    region_same_file(&sr->r, dev, ino) &&
	    (dev == kfeat.shm_dev ? kfeat.punch_notify_shm
				  : kfeat.punch_notify))
		return w;
	if (w >= 0)
		close(w);
	return -1;
}

void
source_watch_files(struct source *s)
{
	size_t shm = 0, watched = 0;

	for (size_t i = 0; i < s->nregs; i++) {
		struct src_region *sr = &s->regs[i];

		if (!region_kind_shmem(sr->r.kind) || sr->cache_fd >= 0)
			continue;
		shm++;
		sr->watch_fd = punch_watch(s->t.pid, sr);
		sr->watched = sr->watch_fd >= 0;
		watched += (size_t)sr->watched;
	}
	if (shm > 0)
		log_info("migration %s: %zu of %zu shared-memory regions "
			 "watched for holes punched (the freeze searches the "
			 "others, and these after a change)",
			 log_id(s->m->id), watched, shm);
}

/*
 * Whether to search region sr for pages dropped since the last search:
 * at the freeze (freeze) always, unless its file is watched (read first:
 * a change after the read shows next time) and quiet after a first
 * search; at a round's end only a watched one that changed, or was never
 * searched.
 */
static int
maybe_dropped(struct src_region *sr, int freeze)
{
	int changed;

	if (!sr->watched)
		return freeze;
	changed = procfile_watch_changed(sr->watch_fd);
	if (sr->primed && !changed)
		return 0;
	sr->primed = 1;
	return 1;
}

/*
 * Pre-copy: pages sent as data that hold nothing now (the process dropped
 * them: MADV_DONTNEED, a hole punched) go again, as ZERO markers, or the
 * destination would keep the bytes it had. Linux 6.18 reports a dropped
 * anonymous page as written (it keeps no protection marker, and a page
 * without one counts as written); this search does not depend on that.
 * At the freeze (freeze) every region not ruled out by its watch, at a
 * round's end only watched ones that changed (maybe_dropped()). Returns
 * the pages marked, or -1 with errno set.
 */
int64_t
source_mark_dropped(struct source *s, int freeze)
{
	const struct precopy *pc = s->pc;
	/*
	 * The tracked writer (QEMU) maps the files and has touched most of
	 * their data: its page tables say which pages hold data far faster
	 * than a walk of the files (docs/design.md, "The freeze of a
	 * guest's pre-copy").
	 */
	int pm = pc != NULL && pc->track.pid > 0 ? pc->track_wp.pagemap : -1;
	int64_t n = 0;

	for (size_t i = 0; i < s->nregs && n >= 0; i++) {
		struct src_region *sr = &s->regs[i], now = *sr;

		/* Shared hugetlb counts every page as data (its page cache). */
		if (sr->cache_fd >= 0 || !sr->accepted ||
		    !maybe_dropped(sr, freeze))
			continue;
		now.data = xcalloc(bit_words(sr->npages), sizeof(uint64_t));
		/* Only a page sent as data can have been dropped. */
		if (classify(s->t.pid, &now, pm, pm >= 0 ? pc->track_at[i] : 0,
			     sr->data) < 0)
			n = -1;
		for (uint64_t p = 0; n >= 0 && p < sr->npages; p++) {
			if (!bit_test(sr->data, p) || bit_test(now.data, p))
				continue;
			bit_clear(sr->data, p);
			if (bit_test(sr->sent, p)) {
				bit_clear(sr->sent, p);
				s->m->cnt.pages_present--;
				s->m->cnt.prefetched_pages--;
			}
			n++;
		}
		free(now.data);
	}
	return n;
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

/* A source's record, with no process and no regions yet. */
struct source *
source_new_bare(const char *id)
{
	struct migration *m = migration_new(ROLE_SOURCE, id);
	struct source *s = xcalloc(1, sizeof(*s));

	m->impl = s;
	m->impl_free = source_free;
	s->m = m;
	s->t = (struct procref)PROCREF_NONE;
	s->switches = -1; /* source_watch_freeze() */
	s->wp = (struct wptrack)WPTRACK_NONE;
	return s;
}

/* The export's record and its regions (internal.h). */
struct source *
source_new(struct procref *t, const struct region *regs, size_t nregs,
	   const struct range *ranges, size_t nranges, const char *id,
	   int deferred, uint32_t *code, char *err, size_t errlen)
{
	struct source *s = source_new_bare(id);
	struct migration *m = s->m;

	m->pid = t->pid;
	m->start = t->start;
	m->ph.deferred = deferred;
	procref_move(&s->t, t);
	s->ps.nranges = nranges;
	s->ps.ranges = xcalloc(nranges, sizeof(*s->ps.ranges));
	memcpy(s->ps.ranges, ranges, nranges * sizeof(*ranges));
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
		sr->file_fd = -1;
		m->cnt.pages_total += sr->npages;
		/*
		 * Deferred: the process runs on until go, so what it holds
		 * is not known yet. The table says every page may hold
		 * data: a destination then takes nothing for granted (a
		 * private file mapping with no written page would be
		 * marked present there).
		 */
		if (deferred) {
			sr->r.data_pages = sr->npages;
			sr->r.zero_pages = 0;
			continue;
		}
		if ((data = classify(s->t.pid, sr, -1, 0, NULL)) < 0) {
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
	}
	return s;
}

/*
 * Freezes process t (for the caller who; NULL on a restore), builds and
 * classifies its regions and registers the export under id (a fresh one
 * when NULL). Takes t over. Returns NULL with *code and err set; a process
 * that ran before is running again then.
 */
struct source *
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
	if (source_freeze_checked(t, who, NULL, &was_stopped, code, err,
				  errlen) < 0)
		goto out;
	n = build_regions(t->pid, ranges, nranges, &regs, code, err, errlen);
	if (n > 0)
		s = source_new(t, regs, (size_t)n, ranges, nranges, id, 0, code,
			       err, errlen);
	if (s == NULL) {
		source_thaw(t, was_stopped);
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

/*
 * For a snapshot (snapshot.c): the regions an export would take, checked
 * the same way, and each region's pages classified as an export does.
 */
int
source_build_regions(pid_t pid, const struct range *ranges, size_t nranges,
		     struct region **regs, uint32_t *code, char *err,
		     size_t errlen)
{
	return build_regions(pid, ranges, nranges, regs, code, err, errlen);
}

int64_t
source_classify(pid_t pid, struct src_region *sr)
{
	return classify(pid, sr, -1, 0, NULL);
}
