/*
 * Destination role: take a userfaultfd inside the target process, register
 * the migrated regions, fetch faulted pages on the demand lane and install
 * the bulk stream behind them, each page exactly once.
 */
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/mman.h>

#include "daemon/compat.h"
#include "daemon/inject.h"
#include "daemon/log.h"
#include "daemon/pagestate.h"
#include "daemon/probe.h"
#include "daemon/region.h"
#include "daemon/uffd.h"
#include "daemon/uffdd.h"

/* Frames of the bulk lane handled before the loop looks at faults again. */
#define BULK_BUDGET 2
#define HANDSHAKE_TIMEOUT 15
#define INFLIGHT_MAX 4096
/* EAGAIN retries of one install before the migration is declared broken. */
#define RETRY_MAX 10000

struct dst_region {
	struct region r; /* r.index: the source's index */
	uint64_t npages;
	struct pagestate ps;
};

struct inflight {
	uint32_t reg;
	uint64_t page;
	uint64_t t0;
};

struct dest {
	struct migration *m;
	uint64_t serial; /* control client awaiting the attach reply */
	char from[256];
	struct range *ranges;
	size_t nranges;
	struct dst_region *regs;
	size_t nregs;
	struct conn *demand, *bulk;
	int uffd, target_fd, pidfd;
	struct event *uffd_ev, *exit_ev;
	uint8_t *buf;
	struct inflight *inflight;
	size_t ninflight;
};

static void dest_free(struct migration *);
static void fault_cb(evutil_socket_t, short, void *);

/* Attach failed before the target was touched: answer and forget. */
static void attach_fail(struct dest *d, uint32_t code, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void
attach_fail(struct dest *d, uint32_t code, const char *fmt, ...)
{
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	log_warnx("attach %d: %s", (int)d->m->pid, msg);
	control_reply_error(d->serial, code, "attach: %s", msg);
	if (d->demand) {
		conn_finish(d->demand); /* what it queued still goes out */
		d->demand = NULL;
	}
	migration_free(d->m);
}

static void
dest_free(struct migration *m)
{
	struct dest *d = m->impl;

	if (d == NULL)
		return;
	conn_free(d->demand);
	conn_free(d->bulk);
	if (d->uffd_ev)
		event_free(d->uffd_ev);
	if (d->exit_ev)
		event_free(d->exit_ev);
	if (d->uffd >= 0)
		close(d->uffd);
	if (d->pidfd >= 0)
		close(d->pidfd);
	for (size_t i = 0; i < d->nregs; i++)
		pagestate_free(&d->regs[i].ps);
	free(d->regs);
	free(d->ranges);
	free(d->buf);
	free(d->inflight);
	free(d);
	m->impl = NULL;
}

static uint64_t
present_total(const struct dest *d)
{
	uint64_t n = 0;

	for (size_t i = 0; i < d->nregs; i++)
		n += d->regs[i].ps.present;
	return n;
}

/* Closes the target's own copy of the uffd, by injection. */
static void
close_target_fd(struct dest *d)
{
	struct inject inj;
	long rc;

	if (d->target_fd < 0)
		return;
	if (inject_begin(&inj, d->m->pid, 0) < 0) {
		log_warnx("migration %s: %s (target's uffd fd %d stays open)",
			  log_id(d->m->id), inj.err, d->target_fd);
		return;
	}
	rc = inject_syscall(&inj, SYS_close, (unsigned long)d->target_fd, 0, 0,
			    0, 0, 0);
	inject_end(&inj);
	if (rc < 0)
		log_warnx("migration %s: close(%d) in process %d: %s",
			  log_id(d->m->id), d->target_fd, (int)d->m->pid,
			  strerror((int)-rc));
	d->target_fd = -1;
}

/*
 * Every page is in: tell the source, unregister, and close both copies of
 * the uffd. Only now may the target's copy go (DESIGN section 5).
 */
static void
dest_complete(struct dest *d)
{
	Uffdd__Complete c = UFFDD__COMPLETE__INIT;

	c.pages = present_total(d);
	if (d->demand) {
		conn_send(d->demand, FRAME_COMPLETE, &c.base);
		conn_finish(d->demand);
	}
	if (d->bulk)
		conn_finish(d->bulk);
	d->demand = d->bulk = NULL;
	for (size_t i = 0; i < d->nregs; i++)
		if (uffd_unregister(d->uffd, d->regs[i].r.start,
				    d->regs[i].r.length) < 0 &&
		    errno != ESRCH)
			log_warn("migration %s: unregister 0x%llx",
				 log_id(d->m->id),
				 (unsigned long long)d->regs[i].r.start);
	close_target_fd(d);
	event_del(d->uffd_ev);
	event_del(d->exit_ev);
	close(d->uffd);
	d->uffd = -1;
	migration_set_state(d->m, MIG_COMPLETE);
	state_write(d->m);
}

static void
lanes_down(struct dest *d, const char *why)
{
	conn_free(d->demand);
	conn_free(d->bulk);
	d->demand = d->bulk = NULL;
	if (d->m->state == MIG_RUNNING) {
		log_warnx("migration %s: source lost (%s); faulting threads "
			  "wait",
			  log_id(d->m->id), why);
		migration_set_state(d->m, MIG_PAUSED);
	}
}

static void
target_exited(struct dest *d)
{
	if (d->m->state == MIG_COMPLETE || d->m->state == MIG_FAILED)
		return;
	migration_fail(d->m, "target process %d exited", (int)d->m->pid);
	if (d->demand)
		conn_send_error(d->demand, ERR_SOURCE, "%s", d->m->reason);
	lanes_down(d, "target exited");
	event_del(d->uffd_ev);
	event_del(d->exit_ev);
	d->target_fd = -1;
}

static void
exit_cb(evutil_socket_t fd, short ev, void *arg)
{
	target_exited(arg);
}

static struct dst_region *
region_by_addr(struct dest *d, uint64_t addr)
{
	for (size_t i = 0; i < d->nregs; i++)
		if (addr >= d->regs[i].r.start &&
		    addr - d->regs[i].r.start < d->regs[i].r.length)
			return &d->regs[i];
	return NULL;
}

static struct dst_region *
region_by_index(struct dest *d, uint32_t idx)
{
	for (size_t i = 0; i < d->nregs; i++)
		if (d->regs[i].r.index == idx)
			return &d->regs[i];
	return NULL;
}

static void
request_page(struct dest *d, struct dst_region *dr, uint64_t page)
{
	Uffdd__PageRequest pr = UFFDD__PAGE_REQUEST__INIT;

	pagestate_set(&dr->ps, page, PAGE_REQUESTED);
	if (d->ninflight < INFLIGHT_MAX) {
		d->inflight[d->ninflight].reg = dr->r.index;
		d->inflight[d->ninflight].page = page;
		d->inflight[d->ninflight].t0 = now_ns();
		d->ninflight++;
	}
	if (d->demand == NULL)
		return; /* paused: the request goes out on reconnect */
	pr.region = dr->r.index;
	pr.page = page;
	pr.npages = 1;
	conn_send(d->demand, FRAME_PAGE_REQUEST, &pr.base);
}

/* Reads every pending uffd message; page faults become requests. */
static void
read_faults(struct dest *d)
{
	struct uffd_msg msgs[64];

	for (;;) {
		ssize_t r = read(d->uffd, msgs, sizeof(msgs));

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			break;
		for (size_t i = 0; i < (size_t)r / sizeof(msgs[0]); i++) {
			const struct uffd_msg *msg = &msgs[i];
			struct dst_region *dr;
			uint64_t addr, page;

			if (msg->event != UFFD_EVENT_PAGEFAULT) {
				log_debug("uffd event %u ignored", msg->event);
				continue;
			}
			addr = msg->arg.pagefault.address;
			if ((dr = region_by_addr(d, addr)) == NULL) {
				log_warnx("migration %s: fault at 0x%llx "
					  "outside every region",
					  log_id(d->m->id),
					  (unsigned long long)addr);
				continue;
			}
			page = (addr - dr->r.start) / dr->r.page_size;
			d->m->demand_faults++;
			switch (pagestate_get(&dr->ps, page)) {
			case PAGE_MISSING:
				request_page(d, dr, page);
				break;
			case PAGE_REQUESTED:
				break; /* merged with the request in flight */
			case PAGE_PRESENT:
				/* Installed after the fault was queued. */
				uffd_wake(d->uffd,
					  dr->r.start + page * dr->r.page_size,
					  dr->r.page_size);
				break;
			}
		}
	}
}

static void
fault_cb(evutil_socket_t fd, short ev, void *arg)
{
	read_faults(arg);
}

/* Latency samples for the requests that [page, page+n) answers. */
static void
settle_requests(struct dest *d, uint32_t idx, uint64_t page, uint64_t n)
{
	uint64_t t = now_ns();

	for (size_t i = 0; i < d->ninflight;) {
		struct inflight *f = &d->inflight[i];

		if (f->reg == idx && f->page >= page && f->page < page + n) {
			hist_add(&d->m->latency, t - f->t0);
			*f = d->inflight[--d->ninflight];
			continue;
		}
		i++;
	}
}

/*
 * Installs a run of missing pages, handling each outcome the way DESIGN
 * section 4 says. Returns the pages this call installed, or -1 when the
 * migration can no longer go on (failed).
 */
static int64_t
install_run(struct dest *d, struct dst_region *dr, uint64_t page, uint64_t n,
	    const uint8_t *src, int zero)
{
	uint64_t ps = dr->r.page_size, len = n * ps, off = 0, done;
	uint64_t addr = dr->r.start + page * ps;
	int64_t installed = 0;
	int retries = 0;

	while (off < len) {
		enum uffd_res res =
			zero ? uffd_zeropage(d->uffd, addr + off, len - off, 0,
					     &done)
			     : uffd_copy(d->uffd, addr + off, src + off,
					 len - off, 0, &done);

		done -= done % ps;
		pagestate_set_present(&dr->ps, page + off / ps, done / ps);
		installed += (int64_t)(done / ps);
		off += done;
		switch (res) {
		case UFFD_OK:
			break;
		case UFFD_EXISTS:
			/* Present already: keep it, wake whoever waits. */
			pagestate_set_present(&dr->ps, page + off / ps, 1);
			uffd_wake(d->uffd, addr + off, ps);
			off += ps;
			break;
		case UFFD_RETRY:
			/* A partial install, or an event to read first. */
			if (done == 0) {
				read_faults(d);
				if (++retries > RETRY_MAX) {
					migration_fail(
						d->m,
						"install at 0x%llx "
						"keeps failing with "
						"EAGAIN",
						(unsigned long long)(addr +
								     off));
					return -1;
				}
			}
			break;
		case UFFD_GONE:
			target_exited(d);
			return -1;
		case UFFD_FAIL:
			migration_fail(d->m, "%s at 0x%llx: %s",
				       zero ? "UFFDIO_ZEROPAGE" : "UFFDIO_COPY",
				       (unsigned long long)(addr + off),
				       strerror(errno));
			return -1;
		}
	}
	return installed;
}

static void
page_data(struct dest *d, struct conn *c, const struct frame_hdr *h,
	  const Uffdd__PageData *pd)
{
	struct dst_region *dr = region_by_index(d, pd->region);
	uint64_t p, end;

	if (dr == NULL || pd->npages == 0 || pd->page >= dr->npages ||
	    pd->npages > dr->npages - pd->page ||
	    h->data_len !=
		    (pd->zero ? 0 : (uint64_t)pd->npages * dr->r.page_size)) {
		log_warnx("%s: PAGE_DATA out of bounds (region %u page "
			  "%llu+%u, %u bytes)",
			  conn_name(c), pd->region,
			  (unsigned long long)pd->page, pd->npages,
			  h->data_len);
		lanes_down(d, "malformed PAGE_DATA");
		return;
	}
	if (h->data_len && conn_take_data(c, d->buf, h->data_len) < 0) {
		lanes_down(d, "short PAGE_DATA");
		return;
	}
	d->m->bytes += h->data_len;
	p = pd->page;
	end = pd->page + pd->npages;
	while (p < end) {
		uint64_t n = pagestate_present_run(&dr->ps, p, end - p);
		int64_t got;

		p += n;
		if (p >= end)
			break;
		n = pagestate_missing_run(&dr->ps, p, end - p);
		got = install_run(d, dr, p, n,
				  d->buf + (p - pd->page) * dr->r.page_size,
				  pd->zero);
		if (got < 0)
			return;
		if (pd->zero)
			d->m->zero_pages += (uint64_t)got;
		if (pd->demand)
			d->m->demand_pages += (uint64_t)got;
		else
			d->m->prefetched_pages += (uint64_t)got;
		p += n;
	}
	if (pd->demand || d->ninflight)
		settle_requests(d, pd->region, pd->page, pd->npages);
	d->m->pages_present = present_total(d);
	if (d->m->pages_present == d->m->pages_total)
		dest_complete(d);
}

static void
bulk_frame(struct conn *c, const struct frame_hdr *h, ProtobufCMessage *msg,
	   void *arg)
{
	struct dest *d = arg;

	if (h->type == FRAME_PAGE_DATA && d->m->state == MIG_RUNNING)
		page_data(d, c, h, (const Uffdd__PageData *)msg);
	else if (h->type == FRAME_ERROR)
		lanes_down(d, ((const Uffdd__Error *)msg)->message);
	else if (h->type != FRAME_HELLO)
		lanes_down(d, "unexpected frame on the bulk lane");
}

static void
bulk_close(struct conn *c, const char *why, void *arg)
{
	lanes_down(arg, why);
}

static void match_and_attach(struct dest *, const Uffdd__RegionTable *);

static void
demand_frame(struct conn *c, const struct frame_hdr *h, ProtobufCMessage *msg,
	     void *arg)
{
	struct dest *d = arg;

	switch (h->type) {
	case FRAME_HELLO:
		if (((const Uffdd__Hello *)msg)->version != UFFDD_PROTO_VERSION)
			attach_fail(d, ERR_PROTOCOL,
				    "source %s speaks "
				    "protocol version %u, we speak %u",
				    d->from,
				    ((const Uffdd__Hello *)msg)->version,
				    UFFDD_PROTO_VERSION);
		break;
	case FRAME_REGIONS:
		if (d->m->state == MIG_CONNECTING)
			match_and_attach(d, (const Uffdd__RegionTable *)msg);
		else
			lanes_down(d, "second region table");
		break;
	case FRAME_PAGE_DATA:
		if (d->m->state == MIG_RUNNING)
			page_data(d, c, h, (const Uffdd__PageData *)msg);
		break;
	case FRAME_ERROR: {
		const Uffdd__Error *e = (const Uffdd__Error *)msg;

		if (d->m->state == MIG_CONNECTING)
			attach_fail(d,
				    e->code == ERR_UNKNOWN_ID ? ERR_UNKNOWN_ID
							      : ERR_SOURCE,
				    "source %s: %s", d->from, e->message);
		else if (e->code == ERR_SOURCE)
			migration_fail(d->m, "source: %s", e->message);
		else
			lanes_down(d, e->message);
		break;
	}
	default:
		lanes_down(d, "unexpected frame on the demand lane");
		break;
	}
}

static void
demand_close(struct conn *c, const char *why, void *arg)
{
	struct dest *d = arg;

	if (d->m->state == MIG_CONNECTING)
		attach_fail(d, ERR_UNREACHABLE, "source %s unreachable: %s",
			    d->from, why);
	else
		lanes_down(d, why);
}

static int
open_bulk(struct dest *d)
{
	Uffdd__Hello h = UFFDD__HELLO__INIT;
	char err[256], name[300];

	snprintf(name, sizeof(name), "source %s bulk", d->from);
	d->bulk = peer_connect(d->from, name, bulk_frame, bulk_close, d, err,
			       sizeof(err));
	if (d->bulk == NULL) {
		log_warnx("migration %s: bulk lane: %s", log_id(d->m->id), err);
		return -1;
	}
	conn_set_priority(d->bulk, PRIO_BULK);
	conn_set_budget(d->bulk, BULK_BUDGET);
	h.version = UFFDD_PROTO_VERSION;
	h.lane = UFFDD__LANE__LANE_BULK;
	h.migration_id = d->m->id;
	return conn_send(d->bulk, FRAME_HELLO, &h.base);
}

/*
 * Makes the target create a userfaultfd, copies it out, discards what is
 * resident in the matched regions and registers them, all while every thread
 * of the target is stopped, so no thread can touch a page in between.
 */
static int
setup_target(struct dest *d, char *err, size_t errlen, uint32_t *code)
{
	struct inject inj;
	size_t reg = 0;
	long rc;

	*code = ERR_KERNEL;
	if (inject_begin(&inj, d->m->pid, 1) < 0) {
		*code = errno == EPERM ? ERR_PERMISSION : ERR_NO_PROCESS;
		snprintf(err, errlen, "%s", inj.err);
		return -1;
	}
	rc = inject_syscall(&inj, SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK, 0, 0,
			    0, 0, 0);
	if (rc < 0) {
		if (rc == -EPERM)
			snprintf(err, errlen,
				 "userfaultfd in process %d: EPERM: set "
				 "vm.unprivileged_userfaultfd=1 or give the "
				 "process access to /dev/userfaultfd",
				 (int)d->m->pid);
		else
			snprintf(err, errlen, "userfaultfd in process %d: %s",
				 (int)d->m->pid, strerror((int)-rc));
		*code = rc == -EPERM ? ERR_PERMISSION : ERR_KERNEL;
		inject_end(&inj);
		return -1;
	}
	d->target_fd = (int)rc;
	d->uffd = (int)syscall(SYS_pidfd_getfd, d->pidfd, d->target_fd, 0);
	if (d->uffd < 0) {
		snprintf(err, errlen, "pidfd_getfd: %s", strerror(errno));
		goto undo;
	}
	if (uffd_api(d->uffd, 0, NULL) < 0) {
		snprintf(err, errlen, "UFFDIO_API: %s", strerror(errno));
		goto undo;
	}
	for (reg = 0; reg < d->nregs; reg++) {
		struct region *r = &d->regs[reg].r;
		uint64_t ioctls;

		rc = inject_syscall(&inj, SYS_madvise, r->start, r->length,
				    MADV_DONTNEED, 0, 0, 0);
		if (rc < 0) {
			snprintf(err, errlen,
				 "madvise(DONTNEED) 0x%llx in "
				 "process %d: %s",
				 (unsigned long long)r->start, (int)d->m->pid,
				 strerror((int)-rc));
			goto undo;
		}
		if (uffd_register(d->uffd, r->start, r->length,
				  UFFDIO_REGISTER_MODE_MISSING, &ioctls) < 0) {
			snprintf(err, errlen,
				 "UFFDIO_REGISTER 0x%llx+0x%llx: "
				 "%s",
				 (unsigned long long)r->start,
				 (unsigned long long)r->length,
				 strerror(errno));
			goto undo;
		}
		if (!(ioctls & (1ULL << _UFFDIO_COPY)) ||
		    !(ioctls & (1ULL << _UFFDIO_ZEROPAGE))) {
			snprintf(err, errlen,
				 "region 0x%llx: kernel offers "
				 "no UFFDIO_COPY/ZEROPAGE there",
				 (unsigned long long)r->start);
			reg++;
			goto undo;
		}
	}
	inject_end(&inj);
	return 0;
undo:
	while (reg-- > 0)
		uffd_unregister(d->uffd, d->regs[reg].r.start,
				d->regs[reg].r.length);
	inject_syscall(&inj, SYS_close, (unsigned long)d->target_fd, 0, 0, 0, 0,
		       0);
	inject_end(&inj);
	d->target_fd = -1;
	if (d->uffd >= 0)
		close(d->uffd);
	d->uffd = -1;
	return -1;
}

static Uffdd__Region *
pb_region(Uffdd__Region *out, const Uffdd__Region *in)
{
	*out = *in;
	return out;
}

static void
match_and_attach(struct dest *d, const Uffdd__RegionTable *t)
{
	Uffdd__AttachReply rep = UFFDD__ATTACH_REPLY__INIT;
	Uffdd__RegionTable acc = UFFDD__REGION_TABLE__INIT;
	Uffdd__Region *mbuf, *ubuf, **mp, **up;
	uint32_t ps = (uint32_t)sysconf(_SC_PAGESIZE), code;
	struct vma *v;
	size_t nv;
	char err[512];

	/* Untrusted input: checked before anything is sized from it. */
	if (region_table_check(t->regions, t->n_regions, err, sizeof(err)) <
	    0) {
		attach_fail(d, ERR_PROTOCOL, "source %s: bad region table: %s",
			    d->from, err);
		return;
	}
	if (region_read_maps(d->m->pid, &v, &nv) < 0) {
		attach_fail(d, ERR_NO_PROCESS, "process %d: %s", (int)d->m->pid,
			    strerror(errno));
		return;
	}
	mbuf = xcalloc(t->n_regions, sizeof(*mbuf));
	ubuf = xcalloc(t->n_regions, sizeof(*ubuf));
	mp = xcalloc(t->n_regions, sizeof(*mp));
	up = xcalloc(t->n_regions, sizeof(*up));
	d->regs = xcalloc(t->n_regions, sizeof(*d->regs));
	for (size_t i = 0; i < t->n_regions; i++) {
		const Uffdd__Region *r = t->regions[i];
		uint64_t end = r->start + r->length;
		int ok = r->page_size == ps && r->length > 0 &&
			 r->length % ps == 0 && r->start % ps == 0 &&
			 end > r->start &&
			 region_in_ranges(d->ranges, d->nranges, r->start,
					  end) &&
			 region_covered(v, nv, r->start, end,
					(enum region_kind)r->kind);

		if (!ok) {
			up[rep.n_unmatched++] = pb_region(&ubuf[i], r);
			continue;
		}
		mp[rep.n_matched++] = pb_region(&mbuf[i], r);
		struct dst_region *dr = &d->regs[d->nregs++];

		dr->r.index = r->index;
		snprintf(dr->r.name, sizeof(dr->r.name), "%s", r->name);
		dr->r.start = r->start;
		dr->r.length = r->length;
		dr->r.page_size = r->page_size;
		dr->r.kind = (enum region_kind)r->kind;
		dr->npages = r->length / r->page_size;
		if (pagestate_init(&dr->ps, dr->npages) < 0)
			fatal("page state of %llu pages",
			      (unsigned long long)dr->npages);
		d->m->pages_total += dr->npages;
	}
	free(v);
	if (rep.n_matched == 0) {
		conn_send_error(d->demand, ERR_NO_MATCH, "no matching region");
		attach_fail(
			d, ERR_NO_MATCH,
			"no region of process %d matches the %zu region(s) "
			"of the source (first: 0x%llx-0x%llx %s); regions "
			"match by start, length and kind",
			(int)d->m->pid, t->n_regions,
			t->n_regions ? (unsigned long long)t->regions[0]->start
				     : 0,
			t->n_regions
				? (unsigned long long)(t->regions[0]->start +
						       t->regions[0]->length)
				: 0,
			t->n_regions
				? region_kind_name(
					  (enum region_kind)t->regions[0]->kind)
				: "");
		goto out;
	}
	if (setup_target(d, err, sizeof(err), &code) < 0) {
		conn_send_error(d->demand, ERR_NO_MATCH, "attach failed");
		attach_fail(d, code, "%s", err);
		goto out;
	}
	d->uffd_ev =
		event_new(base, d->uffd, EV_READ | EV_PERSIST, fault_cb, d);
	event_priority_set(d->uffd_ev, PRIO_FAULT);
	event_add(d->uffd_ev, NULL);
	d->exit_ev =
		event_new(base, d->pidfd, EV_READ | EV_PERSIST, exit_cb, d);
	event_priority_set(d->exit_ev, PRIO_CONTROL);
	event_add(d->exit_ev, NULL);
	conn_set_timeout(d->demand, 0);

	acc.n_regions = rep.n_matched;
	acc.regions = mp;
	conn_send(d->demand, FRAME_REGIONS, &acc.base);
	migration_set_state(d->m, MIG_RUNNING);
	log_info("attached to process %d for %s: %zu regions, %llu pages from "
		 "%s",
		 (int)d->m->pid, log_id(d->m->id), d->nregs,
		 (unsigned long long)d->m->pages_total, d->from);
	rep.id = d->m->id;
	rep.matched = mp;
	rep.unmatched = up;
	control_reply(d->serial, FRAME_CTL_ATTACH_REPLY, &rep.base);
	d->serial = 0;
	state_write(d->m);
	if (open_bulk(d) < 0)
		lanes_down(d, "bulk lane unreachable");
out:
	free(mbuf);
	free(ubuf);
	free(mp);
	free(up);
}

void
dest_attach(uint64_t serial, const Uffdd__AttachRequest *req)
{
	Uffdd__Hello h = UFFDD__HELLO__INIT;
	struct migration *m;
	struct dest *d;
	char err[256], name[300];
	pid_t pid = req->pid;

	if (pid <= 1 || pid == getpid()) {
		control_reply_error(serial, ERR_INVALID,
				    "attach: %d is not a "
				    "process uffdd can attach to",
				    (int)pid);
		return;
	}
	if (kill(pid, 0) < 0) {
		control_reply_error(
			serial,
			errno == ESRCH ? ERR_NO_PROCESS : ERR_PERMISSION,
			"attach: process %d: %s", (int)pid,
			errno == ESRCH ? "no such process" : strerror(errno));
		return;
	}
	if (strlen(req->id) != MIG_ID_LEN ||
	    strspn(req->id, "0123456789abcdef") != MIG_ID_LEN) {
		control_reply_error(serial, ERR_UNKNOWN_ID,
				    "attach: malformed "
				    "migration ID (want the %d hex digits that "
				    "export printed)",
				    MIG_ID_LEN);
		return;
	}
	TAILQ_FOREACH (m, &migrations, link) {
		if (m->role == ROLE_DEST && m->pid == pid &&
		    m->state != MIG_COMPLETE && m->state != MIG_FAILED) {
			control_reply_error(serial, ERR_BUSY,
					    "attach: process "
					    "%d is already a migration target",
					    (int)pid);
			return;
		}
	}
	m = migration_new(ROLE_DEST, req->id);
	d = xcalloc(1, sizeof(*d));
	m->impl = d;
	m->impl_free = dest_free;
	m->pid = pid;
	d->m = m;
	d->serial = serial;
	d->uffd = d->target_fd = -1;
	snprintf(d->from, sizeof(d->from), "%s", req->from);
	snprintf(m->peer, sizeof(m->peer), "%s", req->from);
	d->nranges = req->n_ranges;
	d->ranges = xcalloc(req->n_ranges, sizeof(*d->ranges));
	for (size_t i = 0; i < req->n_ranges; i++) {
		d->ranges[i].start = req->ranges[i]->start;
		d->ranges[i].end = req->ranges[i]->end;
	}
	d->inflight = xcalloc(INFLIGHT_MAX, sizeof(*d->inflight));
	if (posix_memalign((void **)&d->buf, 4096, FRAME_DATA_MAX) != 0)
		fatal("page buffer");
	d->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (d->pidfd < 0) {
		attach_fail(d, ERR_NO_PROCESS, "pidfd_open(%d): %s", (int)pid,
			    strerror(errno));
		return;
	}
	snprintf(name, sizeof(name), "source %s demand", d->from);
	d->demand = peer_connect(d->from, name, demand_frame, demand_close, d,
				 err, sizeof(err));
	if (d->demand == NULL) {
		attach_fail(d, ERR_UNREACHABLE, "%s", err);
		return;
	}
	conn_set_priority(d->demand, PRIO_FAULT);
	conn_set_timeout(d->demand, HANDSHAKE_TIMEOUT);
	peer_set_nodelay(d->demand);
	h.version = UFFDD_PROTO_VERSION;
	h.lane = UFFDD__LANE__LANE_DEMAND;
	h.migration_id = m->id;
	conn_send(d->demand, FRAME_HELLO, &h.base);
}
