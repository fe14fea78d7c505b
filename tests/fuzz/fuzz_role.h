/*
 * Shared by fuzz_source and fuzz_dest, which drive the daemon's real role
 * code (daemon/source/, daemon/dest/) against a real target process: the
 * target's layout, the daemon's globals, and the loop that feeds a peer
 * lane while reading and checking what the daemon answers.
 *
 * The layout is also what tests/fuzz/mkseeds.c writes seeds for. It sits
 * above ASan's shadow and allocator (0x10007fff8000 to 0x640000000000).
 */
#ifndef UFFDD_FUZZ_ROLE_H
#define UFFDD_FUZZ_ROLE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "proto/frame.h"

#define FZ_PAGE 4096u
/* Region 0: private anonymous. Region 1: shared anonymous (shmem). */
#define FZ_ANON_START 0x700000000000ULL
#define FZ_ANON_PAGES 64u
#define FZ_SHM_START (FZ_ANON_START + 0x100000ULL)
#define FZ_SHM_PAGES 16u
#define FZ_END (FZ_SHM_START + FZ_SHM_PAGES * FZ_PAGE)
/* The migration ID fuzz_dest attaches with. */
#define FZ_ID "0123456789abcdef0123456789abcdef"
/* In a fuzz_dest input, what follows this goes on the bulk lane. */
#define FZ_BULK_MARK "UFFDBULK"

/* Whether page p of region r holds data in a filled target. */
static inline int
fz_has_data(uint32_t r, uint64_t p)
{
	return r == 0 ? p % 4 != 3 : p % 2 == 0;
}

/* The bytes of such a page (mkseeds.c writes them too). */
static inline void
fz_fill(uint32_t r, uint64_t p, uint8_t *page)
{
	for (uint64_t i = 0; i < FZ_PAGE / 8; i++) {
		uint64_t v =
			0x5a00000000000000ULL | (uint64_t)r << 48 | p << 16 | i;

		__builtin_memcpy(page + i * 8, &v, 8);
	}
}
/*
 * Forks a target that maps both regions (filled with fz_fill() if fill,
 * else with other bytes), then waits in pause(). Aborts on failure.
 */
pid_t fz_spawn_target(int fill);
/* Whether pid still runs and holds a userfaultfd; -1 if it is gone. */
int fz_target_has_uffd(pid_t pid);
/*
 * Where the targets' own reports go: the fuzzer's stderr as it was before
 * -close_fd_mask=2 sent descriptor 2 to /dev/null.
 */
extern int fz_err;
/* Logging off, configuration defaults, the event base, the kernel probe. */
void fz_setup(void);

/*
 * Export and attach as control.c hands them to the roles: the process
 * opened and the caller root.
 */
void fz_export(const Uffdd__ExportRequest *);
void fz_attach(const Uffdd__AttachRequest *);

/* The last control reply of the roles (export and attach replies). */
extern char fz_reply_id[64];
extern char fz_reply_err[512];

/* One peer lane as the fuzzer holds it: what to send, what came back. */
struct fz_lane {
	int fd; /* -1: not (yet) open */
	const uint8_t *out;
	size_t n, off;
	uint8_t *in; /* received, not yet a whole frame */
	size_t len, cap;
	int eof;
	/* Called for each whole frame the daemon sent; data follows it. */
	void (*on_frame)(const struct frame_hdr *, ProtobufCMessage *,
			 const uint8_t *data);
};

/* Closes the lane's descriptor and drops what it held. */
void fz_lane_close(struct fz_lane *);
/*
 * Turns the loop while writing each lane's output and reading its input,
 * until nothing moves for a few turns. more(), if given, may open lanes;
 * it returns whether it did something. Aborts if the daemon sends a frame
 * that does not decode: its own output must always be well formed.
 */
void fz_pump(struct fz_lane *lanes, int n, int (*more)(void *), void *arg);

#endif
