/* /proc/PID/maps parsing, region selection and matching. */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/vfs.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/log.h"
#include "daemon/procfile.h"
#include "daemon/region.h"

const char *
region_kind_name(enum region_kind k)
{
	switch (k) {
	case REGION_ANON_PRIVATE:
		return "anon-private";
	case REGION_ANON_SHARED:
		return "anon-shared";
	case REGION_MEMFD:
		return "memfd";
	case REGION_SHMEM_FILE:
		return "shmem-file";
	case REGION_HUGETLB:
		return "hugetlb";
	case REGION_FILE_PRIVATE:
		return "file-private";
	default:
		return "other";
	}
}

uint64_t
region_huge_page_size(void)
{
	static uint64_t size = 1; /* 1: not read yet */
	char line[128];
	FILE *f;

	if (size != 1)
		return size;
	size = 0;
	if ((f = fopen("/proc/meminfo", "re")) == NULL)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "Hugepagesize: %" SCNu64, &size) == 1) {
			size *= 1024;
			break;
		}
	fclose(f);
	return size;
}

int
region_open_backing(pid_t pid, uint64_t vma_start, uint64_t vma_end)
{
	return procfile_map_file(pid, vma_start, vma_end);
}

int
region_same_file(const struct region *r, uint64_t dev, uint64_t ino)
{
	if (r->ino == 0 || (r->dev == dev && r->ino == ino))
		return 1;
	errno = ESTALE;
	return 0;
}

/*
 * A backing file that would not open, for want of a capability or of a
 * descriptor, or a file system error (but not one that went away with its
 * mapping): what the mapping is cannot be told, and guessing "not ours"
 * would leave its pages behind unnoticed.
 */
static void
denied_if(struct vma *v)
{
	if (errno != ENOENT && errno != ESRCH)
		v->denied = errno ? errno : EIO;
}

/*
 * Shared memory is read through its backing file: kind, when it opens,
 * else unknown and denied (gone: unknown).
 */
static enum region_kind
backed(pid_t pid, struct vma *v, enum region_kind kind)
{
	int fd = region_open_backing(pid, v->start, v->end);

	if (fd >= 0) {
		close(fd);
		return kind;
	}
	denied_if(v);
	return v->denied ? REGION_UNKNOWN : kind;
}

/*
 * A readable private mapping of a regular file (a program's .data, a
 * library's RELRO, a file the program maps copy-on-write): the pages it
 * wrote are anonymous copies and migrate; the rest is the file's. Read-only
 * ones count too: relocations are written before RELRO is made read-only,
 * and /proc/PID/mem writes through any protection on the destination.
 * Without read permission (PROT_NONE, write-only) the source cannot read
 * the pages: not taken.
 */
static int
file_private(pid_t pid, struct vma *v)
{
	struct statfs sf;
	struct stat st;
	int fd, ok;

	if (v->perms[0] != 'r' || v->perms[3] != 'p' || v->name[0] != '/' ||
	    strncmp(v->name, "/anon_hugepage", 14) == 0)
		return 0;
	if ((fd = region_open_backing(pid, v->start, v->end)) < 0) {
		denied_if(v);
		return 0;
	}
	/* A hugetlbfs file is huge pages, not 4 KiB ones: not this kind. */
	ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
	     fstatfs(fd, &sf) == 0 && sf.f_type != HUGETLBFS_MAGIC;
	close(fd);
	return ok;
}

/*
 * What migrates: memory the process can write. Private: anonymous, the
 * heap, prctl-named anonymous areas, and the written pages of private file
 * mappings. Shared: shmem in all its forms (anonymous shared, memfd, files
 * on tmpfs), which the kernel backs with a file whose holes are the
 * never-touched pages. The stack and the kernel's special mappings stay
 * with the destination process.
 */
static enum region_kind
vma_kind(pid_t pid, struct vma *v)
{
	struct statfs sf;
	int fd;

	if (file_private(pid, v))
		return REGION_FILE_PRIVATE;
	if (v->denied || v->perms[0] != 'r' || v->perms[1] != 'w')
		return REGION_UNKNOWN;
	/* Anonymous huge pages, private or shared (MAP_HUGETLB). */
	if (strncmp(v->name, "/anon_hugepage", 14) == 0) {
		if (region_huge_page_size() == 0)
			return REGION_UNKNOWN;
		return v->perms[3] == 's' ? backed(pid, v, REGION_HUGETLB)
					  : REGION_HUGETLB;
	}
	if (v->perms[3] == 'p')
		return v->name[0] == '\0' || strcmp(v->name, "[heap]") == 0 ||
				       strncmp(v->name, "[anon:", 6) == 0
			       ? REGION_ANON_PRIVATE
			       : REGION_UNKNOWN;
	if (v->perms[3] != 's')
		return REGION_UNKNOWN;
	if (strncmp(v->name, "/dev/zero", 9) == 0 ||
	    strncmp(v->name, "/SYSV", 5) == 0 ||
	    strncmp(v->name, "[anon_shmem", 11) == 0)
		return backed(pid, v, REGION_ANON_SHARED);
	if (strncmp(v->name, "/memfd:", 7) == 0)
		return backed(pid, v, REGION_MEMFD);
	/* Any other shared file: only tmpfs is ours (page cache elsewhere). */
	if ((fd = region_open_backing(pid, v->start, v->end)) < 0) {
		denied_if(v);
		return REGION_UNKNOWN;
	}
	if (fstatfs(fd, &sf) < 0 || sf.f_type != TMPFS_MAGIC) {
		close(fd);
		return REGION_UNKNOWN;
	}
	close(fd);
	return REGION_SHMEM_FILE;
}

/*
 * /proc/PID/maps shows a path as its bytes but for a newline, which the
 * kernel writes as \012 (a file named with those four characters looks the
 * same). A name travels to the destination, which refuses one that is not
 * printable text (region_table_check()), and reaches logs, status and
 * state files: every other control character and byte that is not valid
 * UTF-8 is written the kernel's way too. The destination reads its own
 * maps the same way, so both sides name one file alike.
 */
int
region_name_escape(char dst[REGION_NAME_MAX], const char *src)
{
	size_t o = 0, max = REGION_NAME_MAX - 1;

	while (*src) {
		size_t n = text_char_len(src), len = n;
		char esc[8];
		const char *piece = src;

		if (n == 0) {
			len = (size_t)snprintf(esc, sizeof(esc), "\\%03o",
					       (unsigned char)*src);
			piece = esc;
			n = 1;
		}
		if (o + len > max) {
			memset(dst + o, '?', max - o);
			dst[max] = '\0';
			return 1;
		}
		memcpy(dst + o, piece, len);
		o += len;
		src += n;
	}
	dst[o] = '\0';
	return 0;
}

/* The maps of pid; each mapping's kind looked at too (kinds) or not. */
static int
read_maps(pid_t pid, struct vma **out, size_t *n, int kinds)
{
	char line[4096];
	struct vma *v = NULL;
	size_t cap = 0, cnt = 0;
	int fd = procfile_maps(pid);
	FILE *f;

	if (fd < 0)
		return -1;
	if ((f = fdopen(fd, "re")) == NULL) {
		close(fd);
		return -1;
	}
	while (fgets(line, sizeof(line), f) != NULL) {
		struct vma e = {0};
		char perms[8] = "", name[4096] = "";
		unsigned long long s, en, off, ino;
		unsigned maj, min;
		int pos = 0;

		if (sscanf(line, "%llx-%llx %7s %llx %x:%x %llu%n", &s, &en,
			   perms, &off, &maj, &min, &ino, &pos) < 7)
			continue;
		sscanf(line + pos, " %4095[^\n]", name);
		e.start = s;
		e.end = en;
		e.offset = off;
		e.dev = ino ? (uint64_t)makedev(maj, min) : 0;
		e.ino = ino;
		memcpy(e.perms, perms, 4);
		e.name_cut = region_name_escape(e.name, name);
		e.kind = kinds ? vma_kind(pid, &e) : REGION_UNKNOWN;
		if (cnt == cap) {
			struct vma *nv;

			cap = cap ? cap * 2 : 64;
			if ((nv = realloc(v, cap * sizeof(*v))) == NULL) {
				free(v);
				fclose(f);
				return -1;
			}
			v = nv;
		}
		v[cnt++] = e;
	}
	fclose(f);
	*out = v;
	*n = cnt;
	return 0;
}

int
region_read_maps(pid_t pid, struct vma **out, size_t *n)
{
	return read_maps(pid, out, n, 1);
}

int
region_read_maps_plain(pid_t pid, struct vma **out, size_t *n)
{
	return read_maps(pid, out, n, 0);
}

int
region_in_ranges(const struct range *r, size_t n, uint64_t start, uint64_t end)
{
	if (n == 0)
		return 1;
	for (size_t i = 0; i < n; i++)
		if (start >= r[i].start && end <= r[i].end)
			return 1;
	return 0;
}

/* Whether [start, end) overlaps one of the ranges (or nranges is 0). */
static int
region_overlaps(const struct range *r, size_t n, uint64_t start, uint64_t end)
{
	if (n == 0)
		return 1;
	for (size_t i = 0; i < n; i++)
		if (start < r[i].end && end > r[i].start)
			return 1;
	return 0;
}

static int
add_region(struct region **out, size_t *cnt, const struct vma *v,
	   uint64_t start, uint64_t end)
{
	struct region *nr = realloc(*out, (*cnt + 1) * sizeof(**out));

	if (nr == NULL)
		return -1;
	*out = nr;
	memset(&nr[*cnt], 0, sizeof(nr[0]));
	nr[*cnt].index = (uint32_t)*cnt;
	snprintf(nr[*cnt].name, sizeof(nr[0].name), "%s",
		 v->name[0] ? v->name : "[anon]");
	nr[*cnt].start = start;
	nr[*cnt].length = end - start;
	nr[*cnt].page_size = v->kind == REGION_HUGETLB
				     ? (uint32_t)region_huge_page_size()
				     : (uint32_t)sysconf(_SC_PAGESIZE);
	nr[*cnt].kind = v->kind;
	nr[*cnt].shared = v->perms[3] == 's';
	nr[*cnt].vma_start = v->start;
	nr[*cnt].vma_end = v->end;
	nr[*cnt].file_off = v->offset + (start - v->start);
	nr[*cnt].dev = v->dev;
	nr[*cnt].ino = v->ino;
	(*cnt)++;
	return 0;
}

int
region_denied(const struct vma *v, size_t n, uint64_t start, uint64_t end,
	      char *err, size_t errlen)
{
	for (size_t i = 0; i < n; i++)
		if (v[i].denied && v[i].start < end && v[i].end > start) {
			int cap = v[i].denied == EPERM || v[i].denied == EACCES;

			snprintf(err, errlen,
				 "%s%s, which its mapping at 0x%llx-0x%llx "
				 "(%s) is read through",
				 cap ? REGION_BACKING_CAPS
				     : "cannot open /proc/PID/map_files: ",
				 cap ? "" : strerror(v[i].denied),
				 (unsigned long long)v[i].start,
				 (unsigned long long)v[i].end, v[i].name);
			return 1;
		}
	return 0;
}

/* A size in bytes as people write it: "1 GiB", "2 MiB", "4 KiB". */
static const char *
size_text(uint64_t n, char *buf, size_t len)
{
	static const char *unit[] = {"bytes", "KiB", "MiB", "GiB", "TiB"};
	size_t u = 0;

	while (u + 1 < sizeof(unit) / sizeof(unit[0]) && n >= 1024 &&
	       n % 1024 == 0) {
		n /= 1024;
		u++;
	}
	snprintf(buf, len, "%llu %s", (unsigned long long)n, unit[u]);
	return buf;
}

/*
 * A frame carries whole pages, at most FRAME_DATA_MAX bytes of them: a
 * hugetlb mapping of larger pages (default_hugepagesz=1G) cannot migrate,
 * and is refused rather than left behind. Returns 1 with err filled.
 */
static int
page_too_big(const struct vma *v, char *err, size_t errlen)
{
	uint64_t hp = region_huge_page_size();
	char have[32], most[32];

	if (v->kind != REGION_HUGETLB || frame_pages_fit(hp, 1) == 1)
		return 0;
	snprintf(err, errlen,
		 "%s huge pages at 0x%llx-0x%llx (%s): uffdd migrates pages "
		 "of at most %s; boot with default_hugepagesz=2M, or leave "
		 "the mapping out with --range",
		 size_text(hp, have, sizeof(have)),
		 (unsigned long long)v->start, (unsigned long long)v->end,
		 v->name, size_text(FRAME_DATA_MAX, most, sizeof(most)));
	return 1;
}

int
region_build(pid_t pid, const struct range *ranges, size_t nranges,
	     struct region **out, char *err, size_t errlen)
{
	struct vma *v;
	size_t n, cnt = 0;

	*out = NULL;
	if (region_read_maps(pid, &v, &n) < 0) {
		snprintf(err, errlen, "%s", strerror(errno));
		return -1;
	}
	for (size_t j = 0; j < (nranges ? nranges : 1); j++)
		if (region_denied(v, n, nranges ? ranges[j].start : 0,
				  nranges ? ranges[j].end : UINT64_MAX, err,
				  errlen)) {
			int e = EPERM;

			/* The first denied mapping's own error: EMFILE, EIO. */
			for (size_t i = 0; i < n; i++)
				if (v[i].denied) {
					e = v[i].denied;
					break;
				}
			free(v);
			errno = e;
			return -1;
		}
	for (size_t i = 0; i < n; i++) {
		if (v[i].kind == REGION_UNKNOWN)
			continue;
		if (region_overlaps(ranges, nranges, v[i].start, v[i].end) &&
		    page_too_big(&v[i], err, errlen)) {
			free(v);
			free(*out);
			*out = NULL;
			errno = EINVAL;
			return -1;
		}
		if (nranges == 0) {
			if (add_region(out, &cnt, &v[i], v[i].start, v[i].end) <
			    0)
				goto fail;
			continue;
		}
		for (size_t j = 0; j < nranges; j++) {
			uint64_t s = v[i].start > ranges[j].start
					     ? v[i].start
					     : ranges[j].start;
			uint64_t e = v[i].end < ranges[j].end ? v[i].end
							      : ranges[j].end;

			if (v[i].kind == REGION_HUGETLB) {
				uint64_t hp = region_huge_page_size();

				s = (s + hp - 1) / hp * hp;
				e = e / hp * hp;
			}
			if (s < e && add_region(out, &cnt, &v[i], s, e) < 0)
				goto fail;
		}
	}
	free(v);
	return (int)cnt;
fail:
	free(v);
	free(*out);
	*out = NULL;
	errno = ENOMEM;
	snprintf(err, errlen, "%s", strerror(errno));
	return -1;
}

const struct vma *
region_vma_at(const struct vma *v, size_t n, uint64_t addr)
{
	for (size_t i = 0; i < n; i++)
		if (addr >= v[i].start && addr < v[i].end)
			return &v[i];
	return NULL;
}

int
region_covered(const struct vma *v, size_t n, uint64_t start, uint64_t end,
	       enum region_kind kind)
{
	uint64_t at = start;

	/* maps is sorted by address: walk forward, demanding no gap. */
	for (size_t i = 0; i < n && at < end; i++) {
		if (v[i].end <= at)
			continue;
		if (v[i].start > at || v[i].kind != kind)
			return 0;
		at = v[i].end;
	}
	return at >= end;
}

/* qsort helpers over an array of pointers to regions. */
static int
by_start(const void *a, const void *b)
{
	const Uffdd__Region *x = *(Uffdd__Region *const *)a;
	const Uffdd__Region *y = *(Uffdd__Region *const *)b;

	return x->start < y->start ? -1 : x->start > y->start;
}

static int
by_index(const void *a, const void *b)
{
	const Uffdd__Region *x = *(Uffdd__Region *const *)a;
	const Uffdd__Region *y = *(Uffdd__Region *const *)b;

	return x->index < y->index ? -1 : x->index > y->index;
}

unsigned region_table_max = REGION_TABLE_MAX;

/* A name as region_name_escape() makes them. 0, or -1 with err filled. */
static int
name_check(const Uffdd__Region *r, char *err, size_t errlen)
{
	const char *name = r->name ? r->name : "";
	size_t len = strlen(name);
	long bad = text_bad_at(name);

	if (len >= REGION_NAME_MAX) {
		snprintf(err, errlen,
			 "region %u: name of %zu bytes, at most %d", r->index,
			 len, REGION_NAME_MAX - 1);
		return -1;
	}
	if (bad >= 0) {
		snprintf(err, errlen,
			 "region %u: name holds a control character or a byte "
			 "that is not UTF-8 (0x%02x at byte %ld)",
			 r->index, (unsigned char)name[bad], bad);
		return -1;
	}
	return 0;
}

int
region_table_check(Uffdd__Region *const *r, size_t n, char *err, size_t errlen)
{
	Uffdd__Region **s;
	int rc = -1;

	if (n > region_table_max || n > REGION_TABLE_MAX) {
		snprintf(
			err, errlen, "%zu regions, at most %u (max-regions)", n,
			region_table_max < REGION_TABLE_MAX ? region_table_max
							    : REGION_TABLE_MAX);
		return -1;
	}
	for (size_t i = 0; i < n; i++) {
		uint32_t ps = r[i]->page_size;

		if (r[i]->length == 0 ||
		    r[i]->start + r[i]->length < r[i]->start) {
			snprintf(err, errlen, "region %u: bad length",
				 r[i]->index);
			return -1;
		}
		/*
		 * A power of two the kernel has, from 4 KiB; and no larger
		 * than one frame covers, or the frames that bring its pages
		 * would not fit where they are read and installed from.
		 */
		if (ps < 4096 || (ps & (ps - 1)) != 0) {
			snprintf(err, errlen, "region %u: page size %u",
				 r[i]->index, ps);
			return -1;
		}
		if (frame_pages_fit(ps, 1) == 0) {
			snprintf(err, errlen,
				 "region %u: page size %u, larger than one "
				 "frame covers (%u bytes)",
				 r[i]->index, ps, FRAME_DATA_MAX);
			return -1;
		}
		if (name_check(r[i], err, errlen) < 0)
			return -1;
	}
	if (n < 2)
		return 0;
	s = xcalloc(n, sizeof(*s));
	memcpy(s, r, n * sizeof(*s));
	qsort(s, n, sizeof(*s), by_index);
	for (size_t i = 1; i < n; i++)
		if (s[i]->index == s[i - 1]->index) {
			snprintf(err, errlen, "region index %u twice",
				 s[i]->index);
			goto out;
		}
	qsort(s, n, sizeof(*s), by_start);
	for (size_t i = 1; i < n; i++)
		if (s[i]->start < s[i - 1]->start + s[i - 1]->length) {
			snprintf(err, errlen, "regions %u and %u overlap",
				 s[i - 1]->index, s[i]->index);
			goto out;
		}
	rc = 0;
out:
	free(s);
	return rc;
}
