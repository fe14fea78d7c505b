/*
 * Pages out to the destination: demand answers at once on the demand lane,
 * the bulk stream behind them on the bulk lane, each run of pages read
 * from the frozen process straight into the frame that carries it.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/uio.h>

#include "daemon/compat.h"
#include "daemon/conffile.h"
#include "daemon/conn.h"
#include "daemon/log.h"
#include "daemon/loop.h"
#include "daemon/metrics.h"
#include "daemon/migration.h"
#include "daemon/pagemap.h"
#include "daemon/procref.h"
#include "daemon/region.h"
#include "daemon/source/internal.h"

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
/*
 * After a fault the bulk lane sends this many pages past it first; after
 * faults in order, up to LOCALITY_MAX_BYTES (locality_after()).
 */
#define LOCALITY_PAGES 256
#define LOCALITY_MAX_BYTES (64u << 20)
/* The --bulk-rate budget is counted over windows this long. */
#define RATE_WINDOW_NS 100000000ULL

/*
 * Reads len bytes of a region's backing file, fd: a shared hugetlb
 * region's page cache (cache_fd) or another shared region's (file_fd).
 */
static ssize_t
read_file(const struct src_region *sr, int fd, uint64_t page, uint8_t *dst,
	  uint64_t len)
{
	uint64_t done = 0;
	off_t off = (off_t)(sr->r.file_off + page * sr->r.page_size);

	while (done < len) {
		ssize_t r =
			pread(fd, dst + done, len - done, off + (off_t)done);

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
 * The backing file of shared memory region sr to read its bytes from, or
 * -1. Only once the process is frozen for good (not a deferred export
 * before its go, not a pre-copy, whose rounds read a running process),
 * its maps checked at that freeze: the file is then the one the region
 * maps, and stays so. Opened at the first read, once.
 */
static int
shared_file(struct source *s, struct src_region *sr)
{
	if (sr->file_fd == -1 && !region_kind_shmem(sr->r.kind))
		sr->file_fd = -2;
	if (sr->file_fd == -1 && s->pc == NULL && !s->m->ph.deferred) {
		sr->file_fd = source_open_same(s->t.pid, sr);
		if (sr->file_fd < 0)
			sr->file_fd = -2; /* the process's mapping serves */
	}
	return sr->file_fd >= 0 ? sr->file_fd : -1;
}

/*
 * Reads len bytes of the frozen process from page on into dst, which has
 * room for that many. The engine holds every process by grant, and reads
 * it through the /proc/PID/mem the privileged part opened for it:
 * process_vm_readv() checks the right to ptrace at every call, which the
 * engine does not have (docs/privsep.md, "The bulk read": about 0.07
 * CPU-s more a GiB), and its system call filter kills it for one. The
 * file is bound to the address space the process had when it was
 * checked; a read counts only if the process is still itself afterwards
 * (procref.h).
 */
static int
read_pages(struct source *s, struct src_region *sr, uint64_t page, uint8_t *dst,
	   uint64_t len, uint64_t room)
{
	uint64_t addr = sr->r.start + page * sr->r.page_size;
	ssize_t got;

	if (!room_for(s, len, room))
		return -1;
	if (s->img)
		return source_image_read(s, sr, page, dst, len, 0);
	/* Counted before: a COMMIT covers only reads a check came after. */
	s->cm.reads++;
	if (sr->cache_fd >= 0)
		got = read_file(sr, sr->cache_fd, page, dst, len);
	else if (shared_file(s, sr) >= 0)
		got = read_file(sr, sr->file_fd, page, dst, len);
	else
		got = pread(s->t.memfd, dst, len, (off_t)addr);
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
			    (unsigned long long)addr,
			    got < 0 ? strerror(errno) : "short read");
	return -1;
}

/*
 * Demand answers read through /proc/PID/mem: for one 4 KiB page a pread
 * costs about 1 us here against 1.6-2.3 us for process_vm_readv (which
 * pins the pages); the rest (an image, shared hugetlb's page cache, a
 * failed read) goes through read_pages().
 */
static int
read_demand(struct source *s, struct src_region *sr, uint64_t page,
	    uint8_t *dst, uint64_t len, uint64_t room)
{
	uint64_t addr = sr->r.start + page * sr->r.page_size;

	if (!room_for(s, len, room))
		return -1;
	if (s->img)
		return source_image_read(s, sr, page, dst, len, 1);
	s->cm.reads++;
	if (sr->cache_fd < 0 &&
	    pread(s->t.memfd, dst, len, (off_t)addr) == (ssize_t)len)
		return 0;
	return read_pages(s, sr, page, dst, len, room);
}

/*
 * Counts the pages of a run sent, each the first time: a ZERO marker is a
 * hole where the page was never populated (its data bit clear), a zero
 * page where it was and held only zeros.
 */
static void
counted(struct source *s, const struct src_region *sr, uint64_t page,
	uint64_t n, int zero, int demand)
{
	for (uint64_t i = 0; i < n; i++) {
		enum metrics_kind kind = METRICS_DATA;

		if (bit_test(sr->sent, page + i))
			continue;
		bit_set(sr->sent, page + i);
		s->m->cnt.pages_present++;
		s->m->cnt.zero_pages += (uint64_t)zero;
		s->m->cnt.prefetched_pages += (uint64_t)!demand;
		if (zero)
			kind = bit_test(sr->data, page + i) ? METRICS_ZERO
							    : METRICS_HOLE;
		metrics_pages(ROLE_SOURCE, demand, kind, 1,
			      zero ? 0 : sr->r.page_size);
	}
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
	counted(s, sr, page, n, zero, demand);
	s->m->cnt.bytes += len;
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

/* Whether len bytes are all zero: such a page goes as a ZERO marker. */
static int
page_is_zero(const uint8_t *p, uint64_t len)
{
	return p[0] == 0 && memcmp(p, p + 1, len - 1) == 0;
}

/*
 * Spatial locality: after a fault the bulk lane goes on from just past it,
 * LOCALITY_PAGES first. A fault in the window the one before opened (or
 * just past it) is a target that reads in order and outran the stream:
 * the window doubles, up to LOCALITY_MAX_BYTES, so that the stream gets
 * ahead of the reader and its next pages are there when it comes (as
 * CRIU's lazy pages stream on from a fault in growing chunks). Any other
 * fault starts small again.
 */
static void
locality_after(struct source *s, uint32_t ri, uint64_t page, uint64_t end)
{
	uint64_t win = LOCALITY_PAGES,
		 max = LOCALITY_MAX_BYTES / s->regs[ri].r.page_size;

	if (s->hint_win && ri == s->hint_reg && page >= s->hint_from &&
	    page < s->hint_from + s->hint_win + LOCALITY_PAGES)
		win = s->hint_win * 2;
	if (win > max)
		win = max > LOCALITY_PAGES ? max : LOCALITY_PAGES;
	s->hint_reg = ri;
	s->hint_from = end;
	s->hint_win = win;
	s->hint_page = end;
	s->hint_left = win;
}

/*
 * A destination's page request, answered at once on the demand lane; the
 * bulk lane then goes on from just past it. A request out of bounds drops
 * the lane.
 */
void
source_demand_request(struct source *s, const Uffdd__PageRequest *pr)
{
	struct src_region *sr = NULL;
	uint64_t page = pr->page, end, t0 = now_ns();

	for (size_t i = 0; i < s->nregs; i++)
		if (s->regs[i].r.index == pr->region && s->regs[i].accepted)
			sr = &s->regs[i];
	if (sr == NULL || pr->npages == 0 ||
	    pr->npages > (uint32_t)conf.lim.max_request_pages ||
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
	s->m->cnt.demand_faults++;
	metrics_fault(ROLE_SOURCE, now_ns() - t0);
	s->m->cnt.demand_pages += pr->npages;
	locality_after(s, (uint32_t)(sr - s->regs), pr->page, end);
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
			s->m->cnt.zero_content_pages++;
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

/*
 * An image's working set goes first: its next page not sent yet, one
 * frame (pages recorded in fault order are rarely adjacent). The bytes
 * sent, -1 on failure, -2 when the working set is all sent.
 */
static int64_t
send_ws_page(struct source *s)
{
	const uint8_t *b;
	uint32_t ri;
	uint64_t page;
	int r;

	if (s->img == NULL || s->img->ws_next >= s->img->img.nws)
		return -2;
	if ((r = source_image_ws_next(s, &ri, &page, &b)) <= 0)
		return r < 0 ? -1 : -2;
	return send_run(s, s->bulk, ri, page, 1, 0, 0, b);
}

/*
 * A round while demand traffic is recent: one small frame. The working
 * set goes in frames of one page: there, a small frame's worth of them,
 * not one, or a target faulting on pages behind it would hold it at a
 * page a pass and outrun it for good.
 */
static uint64_t
small_round(const struct source *s)
{
	return s->img && s->img->ws_next < s->img->img.nws ? DEMAND_STEP_BYTES
							   : 1;
}

/*
 * Whether the bulk stream waits: before go, and its release (defer.c,
 * bulk_held), the destination's BULK_GO (lanes.c, peer_held) and the
 * classification after go (defer.c, unclassified); and for good after
 * COMPLETE (commit.c): no COMMIT would cover a read after its check.
 */
static int
bulk_holds(const struct source *s)
{
	return s->m->ph.deferred || s->df.bulk_held || s->peer_held ||
	       s->df.unclassified || s->cm.completing;
}

/*
 * With --bulk-rate, whether this window's share is spent: then the bulk
 * stream waits for the next window (rate_ev) rather than spin.
 */
static int
rate_spent(struct source *s)
{
	uint64_t now;

	if (!conf.bulk_rate)
		return 0;
	now = now_ns();
	if (now - s->win_start >= RATE_WINDOW_NS) {
		s->win_start = now;
		s->win_bytes = 0;
	}
	if (s->win_bytes < conf.bulk_rate / 10)
		return 0;
	struct timeval tv = {
		0, (suseconds_t)((s->win_start + RATE_WINDOW_NS - now) / 1000)};

	evtimer_add(s->rate_ev, &tv);
	return 1;
}

/*
 * Sends the bulk stream's next run of at most frame pages (a recorded
 * working set's pages first): the bytes sent, or -1 when the stream
 * stops, failed or with every page sent (the end of a pre-copy round).
 */
static int64_t
bulk_send_next(struct source *s, uint64_t frame)
{
	uint32_t ri;
	uint64_t page, max, n;
	int64_t got;
	int zero;

	if ((got = send_ws_page(s)) != -2)
		return got;
	if (!next_unsent(s, &ri, &page, &max)) {
		/* Everything sent; a pre-copy round is over. */
		if (s->pc != NULL)
			s->pc->sent_all(s);
		return -1;
	}
	zero = !bit_test(s->regs[ri].data, page);
	if (max > (zero ? BULK_ZERO_PAGES : frame))
		max = zero ? BULK_ZERO_PAGES : frame;
	/*
	 * Huge pages: as many as one frame holds, whole ones. None (pages
	 * over FRAME_DATA_MAX) is refused at export; were it not,
	 * class_run() would still make a run of one.
	 */
	max = frame_pages_fit(s->regs[ri].r.page_size, max);
	if (max == 0) {
		source_fail(s,
			    "region at 0x%llx: pages of %u bytes do "
			    "not fit in a frame",
			    (unsigned long long)s->regs[ri].r.start,
			    s->regs[ri].r.page_size);
		return -1;
	}
	n = class_run(&s->regs[ri], page, max, 1);
	if (!zero && zero_checked(&s->regs[ri]))
		got = send_zero_detected(s, ri, page, &n);
	else
		got = send_run(s, s->bulk, ri, page, n, zero, 0, NULL);
	if (got >= 0 && s->hint_left) {
		s->hint_page += n;
		s->hint_left = s->hint_left > n ? s->hint_left - n : 0;
	}
	return got;
}

/*
 * Produces one round of the bulk stream, then yields to the loop so that
 * demand requests (higher priority) go first.
 */
void
source_bulk_produce(struct source *s)
{
	uint64_t bytes = 0, round = BULK_ROUND_BYTES, frame = BULK_DATA_PAGES;
	int64_t got;

	if (bulk_holds(s))
		return;
	/*
	 * While demand traffic is recent, one small frame a loop pass, and
	 * small writes: a request that comes meanwhile waits for at most
	 * one of each (tens of microseconds for the large ones).
	 */
	if (s->bulk) {
		int small = loop_demand_recent();

		if (small) {
			round = small_round(s);
			frame = BULK_SMALL_PAGES;
		}
		conn_set_io_max(s->bulk, small ? DEMAND_STEP_BYTES : 0);
	}
	while (s->bulk && bytes < round &&
	       conn_output_len(s->bulk) < BULK_HIGH) {
		if (rate_spent(s))
			return;
		if ((got = bulk_send_next(s, frame)) < 0)
			return;
		bytes += (uint64_t)got + 4096;
		s->win_bytes += (uint64_t)got + 64;
		loop_bulk();
	}
	if (s->bulk && conn_output_len(s->bulk) < BULK_HIGH)
		event_active(s->bulk_ev, EV_TIMEOUT, 0);
}

/* The bulk event (bulk_ev, rate_ev): the next round, when it is due. */
static void
bulk_cb(evutil_socket_t fd, short ev, void *arg)
{
	source_bulk_produce(arg);
}

/* The bulk lane drained below BULK_LOW: fill it again. */
static void
bulk_drain(struct conn *c, void *arg)
{
	source_bulk_produce(arg);
}

/*
 * Pre-copy: the bulk lane's next drain callback comes once its output is
 * empty (empty set), or below BULK_LOW again.
 */
void
source_bulk_drain_at(struct source *s, int empty)
{
	if (s->bulk)
		conn_set_drain(s->bulk, bulk_drain, empty ? 0 : BULK_LOW);
}

/*
 * The events and buffers of the bulk stream and of demand answers, for a
 * live export.
 */
void
source_serve_start(struct source *s)
{
	s->bulk_ev = event_new(base, -1, 0, bulk_cb, s);
	event_priority_set(s->bulk_ev, PRIO_BULK);
	s->rate_ev = evtimer_new(base, bulk_cb, s);
	event_priority_set(s->rate_ev, PRIO_BULK);
	/* One demand answer at most: a frame's worth of page bytes. */
	s->scratch = xmalloc(SCRATCH_LEN);
}

/*
 * A bulk lane just opened: it goes behind demand answers, and is filled
 * again each time it drains to BULK_LOW.
 */
void
source_bulk_lane(struct source *s, struct conn *c)
{
	conn_set_priority(c, PRIO_BULK);
	conn_set_drain(c, bulk_drain, BULK_LOW);
	conn_batch_writes(c);
	if (conn_tls_sealed(c))
		log_info("migration %s: bulk lane's TLS records sealed by "
			 "uffdd",
			 log_id(s->m->id));
}
