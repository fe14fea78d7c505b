/*
 * Regions: the parts of a process's address space that migrate, read from
 * /proc/PID/maps, and the matching of a source's table against a target.
 */
#ifndef UFFDD_REGION_H
#define UFFDD_REGION_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "proto/frame.h"
#include "proto/range.h"

/* At most this many regions in a table from a source: the hard ceiling. */
#define REGION_TABLE_MAX 4096
/* The operator's limit (max-regions), at most REGION_TABLE_MAX. */
extern unsigned region_table_max;

/* Values shared with the wire (RegionKind in proto/uffdd.proto). */
enum region_kind {
	REGION_UNKNOWN = 0,
	REGION_ANON_PRIVATE = 1, /* private anonymous, heap */
	REGION_ANON_SHARED = 2,	 /* MAP_SHARED|MAP_ANONYMOUS (shmem) */
	REGION_MEMFD = 3,	 /* memfd mapped shared */
	REGION_SHMEM_FILE = 4,	 /* a tmpfs file mapped shared */
	REGION_HUGETLB = 5,	 /* MAP_HUGETLB, default huge page size */
	REGION_FILE_PRIVATE = 6, /* a regular file mapped MAP_PRIVATE */
};

/* The default huge page size (/proc/meminfo), 0 when there is none. */
uint64_t region_huge_page_size(void);

/* Shared memory lives in a file (shmem): pages are allocated or holes. */
static inline int
region_kind_shmem(enum region_kind k)
{
	return k == REGION_ANON_SHARED || k == REGION_MEMFD ||
	       k == REGION_SHMEM_FILE;
}

/*
 * Paths longer than this are cut, and a cut path never matches. A name
 * on the wire is at most REGION_NAME_MAX - 1 bytes of printable UTF-8
 * (text_char_len()); one of exactly that length may have been cut.
 */
#define REGION_NAME_MAX 256

struct vma {
	uint64_t start, end;
	uint64_t offset; /* in the backing file */
	char perms[5];
	/* path or [heap]-style name, "" for anonymous */
	char name[REGION_NAME_MAX];
	int name_cut;	   /* the path did not fit in name */
	uint64_t dev, ino; /* the backing file's, as maps shows them; 0: none */
	/* errno when its backing file would not open: its kind is unknown */
	int denied;
	enum region_kind kind;
};

/* What opening /proc/PID/map_files takes, for messages. */
#define REGION_BACKING_CAPS                                   \
	"no CAP_CHECKPOINT_RESTORE or CAP_SYS_ADMIN to open " \
	"/proc/PID/map_files"

struct region {
	uint32_t index; /* in the source's table */
	char name[REGION_NAME_MAX];
	uint64_t start, length;
	uint32_t page_size;
	enum region_kind kind;
	int shared; /* mapped MAP_SHARED */
	uint64_t data_pages, zero_pages;
	/*
	 * Shared kinds and private files: the VMA (for /proc/PID/map_files)
	 * and the offset of start in the file.
	 */
	uint64_t vma_start, vma_end, file_off;
	/*
	 * The backing file's device and inode when the region was read (0:
	 * anonymous private, or not known: a restored export). A process
	 * can map another file of the same name, size and offset at the same
	 * address; only these tell the two apart (region_same_file()).
	 */
	uint64_t dev, ino;
};

const char *region_kind_name(enum region_kind);
/* Opens the file behind a VMA of pid through /proc/PID/map_files. */
int region_open_backing(pid_t pid, uint64_t vma_start, uint64_t vma_end);
/*
 * Whether dev and ino are region r's backing file, the one read at the
 * export (or r's is not known). 0 with errno ESTALE when not.
 */
int region_same_file(const struct region *r, uint64_t dev, uint64_t ino);
/*
 * Writes a mapping's name as /proc/PID/maps shows it into dst as a name
 * that may travel: every byte that is not printable text becomes \ooo,
 * as the kernel writes a newline in a path. Returns 1 when it did not
 * fit: then dst holds REGION_NAME_MAX - 1 bytes, a character cut in two
 * padded with '?'.
 */
int region_name_escape(char dst[REGION_NAME_MAX], const char *src);
/*
 * Reads /proc/PID/maps, names escaped (region_name_escape()). Returns 0,
 * or -1 with errno set.
 */
int region_read_maps(pid_t pid, struct vma **out, size_t *n);
/*
 * The same without the kinds (REGION_UNKNOWN, denied 0): no backing file
 * is opened, so a process's hundreds of mappings read in about a
 * millisecond, where their kinds took tens.
 */
int region_read_maps_plain(pid_t pid, struct vma **out, size_t *n);
/*
 * The migratable regions of pid, clipped to ranges when nranges > 0.
 * Returns the count (0: none), or -1 with errno set and err filled; EPERM
 * when a mapping in the ranges could not be told (region_denied()),
 * EINVAL when one holds huge pages larger than a frame (FRAME_DATA_MAX).
 */
int region_build(pid_t pid, const struct range *ranges, size_t nranges,
		 struct region **out, char *err, size_t errlen);
/*
 * Whether a mapping that overlaps [start, end) was denied its backing file:
 * then err says which and why, and the caller refuses.
 */
int region_denied(const struct vma *v, size_t n, uint64_t start, uint64_t end,
		  char *err, size_t errlen);
/* Whether [start, end) is covered, without gaps, by vmas of `kind`. */
int region_covered(const struct vma *v, size_t n, uint64_t start, uint64_t end,
		   enum region_kind kind);
/* The vma that holds addr, or NULL. */
const struct vma *region_vma_at(const struct vma *v, size_t n, uint64_t addr);
/* Whether [start, end) lies inside one of the ranges (or nranges is 0). */
int region_in_ranges(const struct range *r, size_t n, uint64_t start,
		     uint64_t end);

/*
 * Checks a region table from a source before anything is sized or
 * registered from it: count, lengths without overflow, page sizes (at
 * most FRAME_DATA_MAX: frame_pages_fit()), names (printable UTF-8 of at
 * most REGION_NAME_MAX - 1 bytes: they reach logs, status, the state
 * file), unique indices, no overlaps. Returns 0, or -1 with err filled.
 */
int region_table_check(Uffdd__Region *const *r, size_t n, char *err,
		       size_t errlen);

#endif
