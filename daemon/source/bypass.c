/*
 * A pre-copy of shared memory (memfd, tmpfs, shared anonymous, shared
 * hugetlb) learns of writes from the tracked mappings' page-table entries
 * alone. Two kinds of writes never pass through them: those made through
 * the file itself (write(), fallocate(), truncate, by the process or by
 * anyone holding a descriptor of it), and those made through another
 * mapping of the same file. A page sent in a round and changed either way
 * since would never go again: the destination would complete on stale
 * bytes.
 *
 * The first kind changes the file's modification and change times, which
 * a write through a mapping of shared memory never does (there is no
 * page_mkwrite to update them): each region's times are read before the
 * first round reads its pages, and again at each round's end and at the
 * freeze; a change sends every page of the region again. The second kind
 * leaves no trace on the file, so at the same moments a mapping of an
 * exported part of the file that no tracker covers fails the pre-copy
 * (docs/design.md, "Writes that bypass the tracker").
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/stat.h>

#include "daemon/log.h"
#include "daemon/migration.h"
#include "daemon/pagemap.h"
#include "daemon/region.h"
#include "daemon/source/internal.h"

static int
ts_cmp(const struct timespec *a, const struct timespec *b)
{
	if (a->tv_sec != b->tv_sec)
		return a->tv_sec < b->tv_sec ? -1 : 1;
	return a->tv_nsec < b->tv_nsec ? -1 : a->tv_nsec > b->tv_nsec;
}

/* The regions whose backing file can be written other than through us. */
static int
file_backed(const struct src_region *sr)
{
	return sr->r.shared &&
	       (region_kind_shmem(sr->r.kind) || sr->r.kind == REGION_HUGETLB);
}

/*
 * Whether region sr's file changed since the last look (1, 0; -1 with
 * errno set, ESTALE: the address maps another file now), the times kept
 * for the next. Without fine-grained timestamps the kernel stamps a
 * change with the time of the last tick: a change in the same tick as a
 * look, after it, would keep the times the look saw. So a file changed
 * in the tick of a look (recent) counts as changed at the next one too.
 */
static int
file_changed(pid_t pid, struct src_region *sr)
{
	int fd = region_open_backing(pid, sr->r.vma_start, sr->r.vma_end);
	struct timespec now;
	struct stat st;
	int changed;

	/* The clock first: a tick between the two only makes it recent. */
	clock_gettime(CLOCK_REALTIME_COARSE, &now);
	if (fd < 0)
		return -1;
	if (fstat(fd, &st) < 0 ||
	    !region_same_file(&sr->r, st.st_dev, st.st_ino)) {
		int e = errno;

		close(fd);
		errno = e;
		return -1;
	}
	close(fd);
	changed = sr->bp_recent || ts_cmp(&st.st_mtim, &sr->bp_mtime) != 0 ||
		  ts_cmp(&st.st_ctim, &sr->bp_ctime) != 0;
	sr->bp_mtime = st.st_mtim;
	sr->bp_ctime = st.st_ctim;
	sr->bp_recent = ts_cmp(&st.st_mtim, &now) >= 0 ||
			ts_cmp(&st.st_ctim, &now) >= 0;
	return changed;
}

void
source_bypass_start(struct source *s)
{
	for (size_t i = 0; i < s->nregs; i++) {
		struct src_region *sr = &s->regs[i];

		/* Unread: the first look then counts as a change. */
		if (file_backed(sr) && file_changed(s->t.pid, sr) < 0)
			sr->bp_recent = 1;
	}
}

/*
 * Every page of sr that holds data now goes again (through mark, the
 * pre-copy's marking); the pages that no longer do are left to the search
 * for dropped pages, which recheck makes search sr. Returns the pages
 * marked, or -1 with errno set.
 */
static int64_t
mark_region(struct source *s, struct src_region *sr,
	    void (*mark)(void *, uint64_t, uint64_t))
{
	uint64_t ps = sr->r.page_size, first = UINT64_MAX;
	struct src_region now = *sr;
	int64_t n = 0;

	sr->recheck = 1;
	/* Shared hugetlb counts every page as data (its page cache). */
	if (sr->cache_fd >= 0) {
		mark(s, sr->r.start, sr->r.start + sr->r.length);
		return (int64_t)sr->npages;
	}
	now.data = xcalloc(bit_words(sr->npages), sizeof(uint64_t));
	if (source_classify(s->t.pid, &now) < 0) {
		free(now.data);
		return -1;
	}
	/* In runs: a run of data pages is one call. */
	for (uint64_t p = 0; p <= sr->npages; p++) {
		int data = p < sr->npages && bit_test(now.data, p);

		if (data && first == UINT64_MAX)
			first = p;
		if (!data && first != UINT64_MAX) {
			mark(s, sr->r.start + first * ps, sr->r.start + p * ps);
			first = UINT64_MAX;
		}
		n += data;
	}
	free(now.data);
	return n;
}

/* Whether [a, b) of process pid's space is tracked: at[] or the regions. */
static int
tracked(const struct source *s, const uint64_t *at, uint64_t a, uint64_t b)
{
	for (size_t j = 0; j < s->nregs; j++) {
		uint64_t start = at ? at[j] : s->regs[j].r.start;

		if (start <= a && b <= start + s->regs[j].r.length)
			return 1;
	}
	return 0;
}

/*
 * Whether process pid maps a part of a file that an exported region
 * takes (compared by device and inode, as its maps show them) where no
 * tracker covers it: at[i] is where pid maps region i's part (tracked;
 * NULL: at the region's own address). 1 with why saying where, 0, or -1
 * with errno set (its maps unreadable).
 */
static int
untracked_mapping(const struct source *s, pid_t pid, const uint64_t *at,
		  char *why, size_t len)
{
	struct vma *v = NULL;
	size_t nv = 0;
	int found = 0;

	if (region_read_maps(pid, &v, &nv) < 0)
		return -1;
	for (size_t k = 0; k < nv && !found; k++) {
		for (size_t i = 0; i < s->nregs && !found; i++) {
			const struct region *r = &s->regs[i].r;
			uint64_t vend = v[k].offset + (v[k].end - v[k].start);
			uint64_t lo = v[k].offset > r->file_off ? v[k].offset
								: r->file_off;
			uint64_t hi = vend < r->file_off + r->length
					      ? vend
					      : r->file_off + r->length;
			uint64_t a = v[k].start + (lo - v[k].offset);

			if (v[k].perms[3] != 's' || r->ino == 0 ||
			    v[k].dev != r->dev || v[k].ino != r->ino ||
			    lo >= hi || tracked(s, at, a, a + (hi - lo)))
				continue;
			found = 1;
			snprintf(why, len,
				 "process %d maps the file behind 0x%llx "
				 "(%.100s) again at 0x%llx-0x%llx, where "
				 "no tracker sees its writes: export that "
				 "mapping too (--range), or unmap it",
				 (int)pid, (unsigned long long)r->start,
				 r->name, (unsigned long long)v[k].start,
				 (unsigned long long)v[k].end);
		}
	}
	free(v);
	return found;
}

/* Another mapping of an exported file, by the process or a tracked one. */
static int
refuse_mappings(struct source *s)
{
	const struct precopy *pc = s->pc;
	char why[384];
	int r = untracked_mapping(s, s->t.pid, NULL, why, sizeof(why));

	if (r == 0 && pc->track.pid > 0)
		r = untracked_mapping(s, pc->track.pid, pc->track_at, why,
				      sizeof(why));
	if (r < 0)
		snprintf(why, sizeof(why), "reading the maps: %s",
			 strerror(errno));
	if (r != 0)
		source_fail(s, "pre-copy: %s", why);
	return r != 0 ? -1 : 0;
}

int64_t
source_bypass_collect(struct source *s,
		      void (*mark)(void *, uint64_t, uint64_t))
{
	int64_t n = 0, m = 0, bytes = 0;
	size_t files = 0;

	for (size_t i = 0; i < s->nregs && m >= 0; i++) {
		struct src_region *sr = &s->regs[i];
		int c;

		if (!file_backed(sr) || !sr->accepted)
			continue;
		if ((c = file_changed(s->t.pid, sr)) < 0) {
			source_fail(s,
				    "pre-copy: the file behind 0x%llx "
				    "(%.100s): %s%s",
				    (unsigned long long)sr->r.start, sr->r.name,
				    strerror(errno),
				    errno == ESTALE ? SRC_REMAPPED : "");
			return -1;
		}
		if (c && (m = mark_region(s, sr, mark)) >= 0) {
			n += m;
			bytes += m * (int64_t)sr->r.page_size;
			files++;
		}
	}
	if (m < 0) {
		source_fail(s, "pre-copy: classifying again: %s",
			    strerror(errno));
		return -1;
	}
	if (refuse_mappings(s) < 0)
		return -1;
	if (files > 0)
		log_info("migration %s: the files of %zu shared regions were "
			 "changed other than through the tracked mappings "
			 "(write(), fallocate(), truncate): their %lld pages "
			 "that hold data go again",
			 log_id(s->m->id), files, (long long)n);
	return bytes;
}
