/*
 * A snapshot (snapshot.c), as its parts share it: the exchange with the
 * client and the freeze check in snapshot.c, the pages read and written
 * to the image in snapshot_write.c. Only those two include it.
 */
#ifndef UFFDD_SOURCE_SNAPSHOT_H
#define UFFDD_SOURCE_SNAPSHOT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/queue.h>
#include <time.h>

#include "daemon/authz.h"
#include "daemon/procref.h"
#include "daemon/source/internal.h"
#include "daemon/wptrack.h"
#include "proto/image.h"

enum snap_phase { SNAP_WAIT_FD, SNAP_WRITING, SNAP_WAIT_COMMIT };

struct snap {
	TAILQ_ENTRY(snap) link;
	uint64_t serial;
	struct authz_caller who;
	struct procref t;
	struct range *ranges;
	size_t nranges;
	int keep, frozen, was_stopped;
	enum snap_phase phase;
	int asking; /* a byte of the client is awaited (control_ask()) */
	int fd;	    /* the image file */
	struct event *round_ev;
	struct src_region *regs;
	size_t nregs;
	uint32_t cur_reg;
	uint64_t cur_page;
	uint8_t *buf; /* IMAGE_RUN_BYTES */
	struct image_writer w;
	/* The freeze check (source_ran()): its tracker, count and timing. */
	struct wptrack wp;
	long long switches;
	uint64_t check_ns, t_check;
	uint64_t pages[4]; /* by enum image_class */
	uint64_t synced;   /* bytes of the file whose writeback started */
	struct timespec t0;
};

/*
 * snapshot_write.c: the next stretch of one class from the current page
 * written. The bytes read, or -1 with *code and err set: the caller fails
 * the snapshot.
 */
int64_t snap_write_next(struct snap *, uint32_t *code, char *err,
			size_t errlen);

#endif
