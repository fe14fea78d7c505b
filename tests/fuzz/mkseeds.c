/*
 * Writes the seed corpus: one well-formed frame of every type (the shapes a
 * real peer and uffd-client send), a stream of several frames for the conn
 * reader, configuration files, state files (fuzz_state) and snapshot
 * images (fuzz_image). Run from
 * tests/fuzz/run.sh --seeds; the output is committed in tests/fuzz/corpus/.
 */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "proto/frame.h"
#include "proto/image.h"
#include "proto/image_fmt.h"
#include "tests/fuzz/fuzz_role.h"

static const char *dir;

static void
put(const char *sub, const char *name, const void *p, size_t n)
{
	char path[512];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", dir, sub);
	mkdir(path, 0755);
	snprintf(path, sizeof(path), "%s/%s/%s", dir, sub, name);
	if ((f = fopen(path, "wb")) == NULL || fwrite(p, 1, n, f) != n ||
	    fclose(f) != 0) {
		perror(path);
		exit(1);
	}
}

/* A frame, to the frame corpus and appended to the stream for conn. */
static void
frame(const char *name, uint16_t type, const ProtobufCMessage *m,
      uint32_t data_len, uint8_t *stream, size_t *slen)
{
	uint8_t *buf, *full;
	size_t len;

	buf = frame_pack(type, m, data_len, &len);
	full = calloc(1, len + data_len);
	memcpy(full, buf, len);
	memset(full + len, 0xa5, data_len);
	put("frame", name, full, len + data_len);
	put("conn", name, full, len + data_len);
	if (type >= FRAME_CTL_EXPORT)
		put("control", name, full, len + data_len);
	if (*slen + len + data_len < 65536) {
		memcpy(stream + *slen, full, len + data_len);
		*slen += len + data_len;
	}
	free(full);
	free(buf);
}

/* A lane's worth of frames for fuzz_source and fuzz_dest. */
struct lane {
	uint8_t p[1 << 20];
	size_t n;
};

/* Appends a frame; PAGE_DATA data is the target's own bytes (fz_fill). */
static void
add(struct lane *l, uint16_t type, const ProtobufCMessage *m)
{
	const Uffdd__PageData *pd = (const Uffdd__PageData *)m;
	uint32_t dl = 0;
	uint8_t *buf;
	size_t len;

	if (type == FRAME_PAGE_DATA && !pd->zero)
		dl = pd->npages * FZ_PAGE;
	buf = frame_pack(type, m, dl, &len);
	if (l->n + len + dl > sizeof(l->p))
		exit(1);
	memcpy(l->p + l->n, buf, len);
	l->n += len;
	for (uint32_t i = 0; i < dl / FZ_PAGE; i++, l->n += FZ_PAGE)
		fz_fill(pd->region, pd->page + i, l->p + l->n);
	free(buf);
}

static void
add_bytes(struct lane *l, const void *p, size_t n)
{
	memcpy(l->p + l->n, p, n);
	l->n += n;
}

/* The fuzz targets' region table (fuzz_role.h). */
static void
role_table(Uffdd__RegionTable *t)
{
	static Uffdd__Region r[2], *rp[2] = {&r[0], &r[1]};

	for (int i = 0; i < 2; i++) {
		uffdd__region__init(&r[i]);
		r[i].index = (uint32_t)i;
		r[i].page_size = FZ_PAGE;
	}
	r[0].name = "";
	r[0].start = FZ_ANON_START;
	r[0].length = FZ_ANON_PAGES * FZ_PAGE;
	r[0].kind = UFFDD__REGION_KIND__KIND_ANON_PRIVATE;
	r[1].name = "/dev/zero (deleted)";
	r[1].start = FZ_SHM_START;
	r[1].length = FZ_SHM_PAGES * FZ_PAGE;
	r[1].kind = UFFDD__REGION_KIND__KIND_ANON_SHARED;
	uffdd__region_table__init(t);
	t->n_regions = 2;
	t->regions = rp;
}

static void precopy_seeds(Uffdd__RegionTable *t);

/*
 * Seeds for the roles: what a destination says to fuzz_source (a flag
 * byte first, see there) and what a source says to fuzz_dest.
 */
static void
role_seeds(void)
{
	static struct lane l;
	Uffdd__RegionTable t;
	Uffdd__Hello h = UFFDD__HELLO__INIT;
	Uffdd__PageRequest pr = UFFDD__PAGE_REQUEST__INIT;
	Uffdd__PageData pd = UFFDD__PAGE_DATA__INIT;
	Uffdd__PageBitmap b = UFFDD__PAGE_BITMAP__INIT;
	Uffdd__Complete c = UFFDD__COMPLETE__INIT;
	Uffdd__Error e = UFFDD__ERROR__INIT;
	Uffdd__Ping ping = UFFDD__PING__INIT;
	Uffdd__Commit cm = UFFDD__COMMIT__INIT;
	uint8_t bits[2] = {0xff, 0x0f};

	role_table(&t);
	/* fuzz_source: demand requests, in and out of bounds. */
	l.n = 0;
	add_bytes(&l, "\0", 1);
	add(&l, FRAME_REGIONS, &t.base);
	pr.region = 0, pr.page = 5, pr.npages = 1;
	add(&l, FRAME_PAGE_REQUEST, &pr.base);
	pr.region = 1, pr.page = 0, pr.npages = 4;
	add(&l, FRAME_PAGE_REQUEST, &pr.base);
	pr.region = 0, pr.page = 0, pr.npages = FZ_ANON_PAGES;
	add(&l, FRAME_PAGE_REQUEST, &pr.base);
	add(&l, FRAME_PING, &ping.base);
	put("source", "requests", l.p, l.n);
	pr.region = 0, pr.page = FZ_ANON_PAGES - 1, pr.npages = 2;
	add(&l, FRAME_PAGE_REQUEST, &pr.base);
	put("source", "request_past_end", l.p, l.n);
	/* A resume: HAVE bitmaps, then the bulk lane sends the rest. */
	l.n = 0;
	add_bytes(&l, "\6", 1);
	add(&l, FRAME_REGIONS, &t.base);
	b.region = 0, b.first_page = 8, b.npages = 12;
	b.bits.len = sizeof(bits), b.bits.data = bits;
	add(&l, FRAME_HAVE, &b.base);
	put("source", "resume_bulk", l.p, l.n);
	l.n = 0;
	add_bytes(&l, "\0", 1);
	add(&l, FRAME_REGIONS, &t.base);
	c.pages = FZ_ANON_PAGES + FZ_SHM_PAGES;
	add(&l, FRAME_COMPLETE, &c.base);
	put("source", "complete", l.p, l.n);
	/* Completion is a commit: the ACK of its COMMIT, and a stale one. */
	cm.seq = 1;
	add(&l, FRAME_COMMIT_ACK, &cm.base);
	put("source", "commit_ack", l.p, l.n);
	l.n = 0;
	add_bytes(&l, "\0", 1);
	add(&l, FRAME_REGIONS, &t.base);
	cm.seq = 7;
	add(&l, FRAME_COMMIT_ACK, &cm.base);
	put("source", "commit_ack_stale", l.p, l.n);
	l.n = 0;
	add_bytes(&l, "\0", 1);
	add(&l, FRAME_REGIONS, &t.base);
	e.code = 11, e.message = "target process exited";
	add(&l, FRAME_ERROR, &e.base);
	put("source", "target_gone", l.p, l.n);
	l.n = 0;
	add_bytes(&l, "\1", 1);
	h.version = UFFDD_PROTO_VERSION;
	h.lane = UFFDD__LANE__LANE_DEMAND;
	h.migration_id = FZ_ID;
	add(&l, FRAME_HELLO, &h.base);
	put("source", "own_hello", l.p, l.n);
	/* A destination that acted on a COMMIT resumes to deliver its ACK. */
	l.n = 0;
	add_bytes(&l, "\1", 1);
	h.resume = 1;
	h.committed = 1;
	h.commit_seq = 1;
	add(&l, FRAME_HELLO, &h.base);
	put("source", "committed_resume", l.p, l.n);
	h.resume = h.committed = 0;
	h.commit_seq = 0;

	/* fuzz_dest: the whole migration, then pieces of it. */
	h.migration_id = "";
	l.n = 0;
	add(&l, FRAME_HELLO, &h.base);
	add(&l, FRAME_REGIONS, &t.base);
	pd.region = 0, pd.page = 0, pd.npages = 3, pd.demand = 0;
	add(&l, FRAME_PAGE_DATA, &pd.base);
	pd.page = 3, pd.npages = FZ_ANON_PAGES - 3, pd.zero = 1;
	add(&l, FRAME_PAGE_DATA, &pd.base);
	pd.region = 1, pd.page = 0, pd.npages = FZ_SHM_PAGES;
	add(&l, FRAME_PAGE_DATA, &pd.base);
	put("dest", "complete", l.p, l.n);
	/* The source's COMMIT after the destination's COMPLETE, the echo. */
	cm.seq = 1;
	cm.pages = FZ_ANON_PAGES + FZ_SHM_PAGES;
	cm.checked_by = "writes+switches";
	add(&l, FRAME_COMMIT, &cm.base);
	add(&l, FRAME_COMMIT_ACK, &cm.base);
	put("dest", "commit", l.p, l.n);
	l.n = 0;
	add(&l, FRAME_HELLO, &h.base);
	add(&l, FRAME_REGIONS, &t.base);
	add(&l, FRAME_COMMIT, &cm.base);
	put("dest", "commit_early", l.p, l.n);
	l.n = 0;
	add(&l, FRAME_HELLO, &h.base);
	add(&l, FRAME_REGIONS, &t.base);
	e.code = 13;
	e.message = "source process 1 ran after the export";
	add(&l, FRAME_ERROR, &e.base);
	put("dest", "source_ran", l.p, l.n);
	l.n = 0;
	add(&l, FRAME_HELLO, &h.base);
	add(&l, FRAME_REGIONS, &t.base);
	pd.region = 0, pd.page = 3, pd.npages = 2, pd.zero = 0, pd.demand = 1;
	add(&l, FRAME_PAGE_DATA, &pd.base);
	add(&l, FRAME_PING, &ping.base);
	add_bytes(&l, FZ_BULK_MARK, strlen(FZ_BULK_MARK));
	h.lane = UFFDD__LANE__LANE_BULK;
	add(&l, FRAME_HELLO, &h.base);
	pd.region = 0, pd.page = 0, pd.npages = 2, pd.demand = 0;
	add(&l, FRAME_PAGE_DATA, &pd.base);
	pd.region = 1, pd.page = 4, pd.npages = 12, pd.zero = 1;
	add(&l, FRAME_PAGE_DATA, &pd.base);
	put("dest", "bulk", l.p, l.n);
	l.n = 0;
	h.lane = UFFDD__LANE__LANE_DEMAND;
	add(&l, FRAME_HELLO, &h.base);
	add(&l, FRAME_REGIONS, &t.base);
	pd.region = 1, pd.page = 15, pd.npages = 2, pd.zero = 0;
	add(&l, FRAME_PAGE_DATA, &pd.base);
	put("dest", "past_end", l.p, l.n);
	l.n = 0;
	add(&l, FRAME_HELLO, &h.base);
	add(&l, FRAME_REGIONS, &t.base);
	e.code = 5, e.message = "source process exited";
	add(&l, FRAME_ERROR, &e.base);
	put("dest", "source_error", l.p, l.n);
	l.n = 0;
	add(&l, FRAME_HELLO, &h.base);
	e.code = 1, e.message = "unknown migration ID";
	add(&l, FRAME_ERROR, &e.base);
	put("dest", "unknown_id", l.p, l.n);
	precopy_seeds(&t);
}

/*
 * fuzz_dest: a pre-copy (the source's HELLO says so): rounds on the bulk
 * lane, a page sent twice, ROUND_SYNC, SWITCHOVER; and SWITCHOVER and
 * ROUND_SYNC where no pre-copy runs. fuzz_source: a ROUND_SYNC echo no
 * pre-copy asked for.
 */
static void
precopy_seeds(Uffdd__RegionTable *t)
{
	static struct lane l;
	static char *feat[] = {FEATURE_PRECOPY};
	Uffdd__Hello h = UFFDD__HELLO__INIT;
	Uffdd__PageData pd = UFFDD__PAGE_DATA__INIT;
	Uffdd__Ping sync = UFFDD__PING__INIT;
	Uffdd__Switchover sw = UFFDD__SWITCHOVER__INIT;

	h.version = UFFDD_PROTO_VERSION;
	h.lane = UFFDD__LANE__LANE_DEMAND;
	h.migration_id = "";
	h.n_features = 1;
	h.features = feat;
	l.n = 0;
	add(&l, FRAME_HELLO, &h.base);
	add(&l, FRAME_REGIONS, &t->base);
	add_bytes(&l, FZ_BULK_MARK, strlen(FZ_BULK_MARK));
	h.lane = UFFDD__LANE__LANE_BULK;
	h.n_features = 0;
	add(&l, FRAME_HELLO, &h.base);
	pd.region = 0, pd.page = 0, pd.npages = 4;
	add(&l, FRAME_PAGE_DATA, &pd.base);
	pd.page = 4, pd.npages = FZ_ANON_PAGES - 4, pd.zero = 1;
	add(&l, FRAME_PAGE_DATA, &pd.base);
	pd.page = 2, pd.npages = 4, pd.zero = 0;
	add(&l, FRAME_PAGE_DATA, &pd.base);
	pd.page = 0, pd.npages = 1, pd.zero = 1;
	add(&l, FRAME_PAGE_DATA, &pd.base);
	sync.seq = 2;
	add(&l, FRAME_ROUND_SYNC, &sync.base);
	sw.rounds = 3, sw.bytes = 8 * 4096, sw.frozen_us = 1500;
	sw.final_pages = 1;
	sw.n_round_bytes = 3;
	sw.round_bytes = (uint64_t[]){4 * 4096, 4 * 4096, 4096};
	add(&l, FRAME_SWITCHOVER, &sw.base);
	pd.region = 1, pd.page = 0, pd.npages = FZ_SHM_PAGES, pd.zero = 1;
	add(&l, FRAME_PAGE_DATA, &pd.base);
	put("dest", "precopy", l.p, l.n);
	l.n = 0;
	h.lane = UFFDD__LANE__LANE_DEMAND;
	add(&l, FRAME_HELLO, &h.base);
	add(&l, FRAME_REGIONS, &t->base);
	add_bytes(&l, FZ_BULK_MARK, strlen(FZ_BULK_MARK));
	h.lane = UFFDD__LANE__LANE_BULK;
	add(&l, FRAME_HELLO, &h.base);
	add(&l, FRAME_ROUND_SYNC, &sync.base);
	add(&l, FRAME_SWITCHOVER, &sw.base);
	put("dest", "switchover_unasked", l.p, l.n);
	l.n = 0;
	add_bytes(&l, "\0", 1);
	add(&l, FRAME_REGIONS, &t->base);
	add(&l, FRAME_ROUND_SYNC, &sync.base);
	put("source", "round_sync_unasked", l.p, l.n);
}

/*
 * Seeds for fuzz_state: a flag byte, then a state file without its
 * checksum line; @PID@ and @START@ stand for fuzz_state's child process.
 */
static void
state_seed(const char *name, char flag, const char *fmt, ...)
{
	char body[4096];
	va_list ap;

	body[0] = flag;
	va_start(ap, fmt);
	vsnprintf(body + 1, sizeof(body) - 1, fmt, ap);
	va_end(ap);
	put("state", name, body, 1 + strlen(body + 1));
}

static void
state_seeds(void)
{
	unsigned long long a = FZ_ANON_START, sh = FZ_SHM_START, end = FZ_END;
	const char *head = "uffdd-state 1\nrole=%s\nid=" FZ_ID
			   "\npid=@PID@\nstate=%s\nstart=@START@\n";
	char h[512], regions[1024];

	snprintf(h, sizeof(h), head, "source", "paused");
	state_seed("source_paused", 1, "%skeep_source=1\nrange.0=%llu %llu\n",
		   h, a, end);
	state_seed("source_running", 0,
		   "%skeep_source=0\nswitches=0\nrange.0=%llu %llu\n"
		   "range.1=%llu %llu\n",
		   h, a, sh, sh, end);
	snprintf(regions, sizeof(regions),
		 "range.0=%llu %llu\nregion.0=0 %llu %u 4096 1 %llu\n"
		 "region_name.0=\nregion.1=1 %llu %u 4096 2 %llu\n"
		 "region_name.1=/dev/zero%%20(deleted)\n",
		 a, end, a, FZ_ANON_PAGES * FZ_PAGE, a, sh,
		 FZ_SHM_PAGES * FZ_PAGE, sh);
	snprintf(h, sizeof(h), head, "destination", "paused");
	state_seed("dest_paused", 0,
		   "%sfrom=127.0.0.1:1\ntarget_fd=3\n%smove.0=0 0 4 %llu\n"
		   "discarded.0=0 4 8\n",
		   h, regions, end + 0x100000);
	state_seed("dest_pin_held", 0,
		   "%sfrom=127.0.0.1:1\ntarget_fd=3\nheld=1\npin=%s\n%s", h,
		   "00112233445566778899aabbccddeeff"
		   "00112233445566778899aabbccddeeff",
		   regions);
	state_seed("dest_gone", 0,
		   "%sfrom=127.0.0.1:1\ngone=1\nchild.0=99999 1 4\n"
		   "%schild_discarded.0=99999 0 1 3\n",
		   h, regions);
	snprintf(h, sizeof(h), head, "destination", "complete");
	state_seed("dest_committed", 0,
		   "%sfrom=127.0.0.1:1\ntarget_fd=3\ncommitted=2\n"
		   "released=1\n%s",
		   h, regions);
	snprintf(h, sizeof(h), head, "source", "failed");
	state_seed("source_tombstone", 1,
		   "%skeep_source=0\nswitches=0\nrange.0=%llu %llu\n"
		   "fail_code=13\nreason=source%%20process%%20ran\n"
		   "failed_at=4102444800\n",
		   h, a, end);
	snprintf(h, sizeof(h), head, "source", "paused");
	state_seed("source_committing", 1,
		   "%skeep_source=1\nswitches=0\ncommit_seq=3\n"
		   "range.0=%llu %llu\n",
		   h, a, end);
	snprintf(h, sizeof(h), head, "destination", "paused");
	state_seed("dest_name_escaped", 0,
		   "%sfrom=[::1]:7401\ntarget_fd=4\nrange.0=%llu %llu\n"
		   "region.0=0 %llu %u 4096 1 %llu\n"
		   "region_name.0=x%%0Apid%%3D1%%0Atarget_fd%%3D3\n",
		   h, a, end, a, FZ_ANON_PAGES * FZ_PAGE, a);
}

/*
 * One image seed for fuzz_image: flags 3 (its checksums made right, which
 * they are), then an image of nregions 4 KiB-page regions of 6 pages:
 * data, zero, hole, data, data, hole (the data pages each a byte).
 */
/*
 * The image at fd with a working set of its data pages (and some that
 * are not, which image_ws_store() leaves out), as a new memfd.
 */
static int
with_ws(int fd)
{
	static const uint64_t keys[] = {IMAGE_WS_KEY(0, 3), IMAGE_WS_KEY(0, 1),
					IMAGE_WS_KEY(1, 4), IMAGE_WS_KEY(0, 0),
					IMAGE_WS_KEY(0, 3), IMAGE_WS_KEY(7, 0)};
	struct image im;
	char err[256];
	int out = memfd_create("seed-ws", 0);

	if (out < 0 || image_open(&im, fd, err, sizeof(err)) < 0 ||
	    image_ws_store(&im, out, keys, sizeof(keys) / sizeof(keys[0]), err,
			   sizeof(err)) < 0) {
		fprintf(stderr, "mkseeds: working set: %s\n", err);
		exit(1);
	}
	image_close(&im);
	return out;
}

static void
image_seed(const char *name, uint32_t nregions, uint32_t kind, int ws)
{
	struct image_region r[2] = {{0}};
	struct image_writer w;
	static uint8_t page[2 * 4096];
	uint8_t *b;
	off_t n;
	int fd = memfd_create("seed", 0);

	for (uint32_t i = 0; i < nregions; i++) {
		r[i].start = 0x500000000000 + i * 0x100000;
		r[i].length = 6 * 4096;
		r[i].page_size = 4096;
		r[i].kind = kind;
		snprintf(r[i].name, sizeof(r[i].name), i ? "/memfd:x" : "");
	}
	if (fd < 0 || image_writer_begin(&w, fd, r, nregions, 4242) < 0)
		exit(1);
	for (uint32_t i = 0; i < nregions; i++) {
		memset(page, 0x11 * (int)(i + 1), sizeof(page));
		if (image_write_data(&w, i, 0, 1, page) < 0 ||
		    image_write_marker(&w, i, 1, 1, IMAGE_ZERO) < 0 ||
		    image_write_marker(&w, i, 2, 1, IMAGE_HOLE) < 0 ||
		    image_write_data(&w, i, 3, 2, page) < 0 ||
		    image_write_marker(&w, i, 5, 1, IMAGE_HOLE) < 0)
			exit(1);
	}
	if (image_writer_end(&w) < 0)
		exit(1);
	image_writer_free(&w);
	if (ws)
		fd = with_ws(fd);
	if ((n = lseek(fd, 0, SEEK_END)) < 0)
		exit(1);
	if ((b = malloc((size_t)n + 1)) == NULL ||
	    pread(fd, b + 1, (size_t)n, 0) != n)
		exit(1);
	b[0] = ws ? 7 : 3;
	put("image", name, b, (size_t)n + 1);
	free(b);
	close(fd);
}

/*
 * An image seed made by hand, as a hostile client would (the writer
 * refuses it): one region at start, length bytes of 4 KiB pages, all one
 * hole run, every checksum right. Security review finding 4's shapes: a
 * hole of 2^62 bytes, a region past 2^47.
 */
static void
crafted_seed(const char *name, uint64_t start, uint64_t length)
{
	static uint8_t b[1 + IMAGE_HDR_LEN + IMAGE_REGION_LEN + IMAGE_RUN_LEN];
	uint8_t *tables = b + 1 + IMAGE_HDR_LEN;
	struct image_region r = {0};
	struct image_run u = {0};
	struct image_fmt_hdr h = {0};

	r.start = start;
	r.length = length;
	r.page_size = 4096;
	r.kind = 1;
	r.nruns = 1;
	r.hole_pages = length / 4096;
	u.cls = IMAGE_HOLE;
	u.npages = length / 4096;
	image_fmt_put_region(tables, &r);
	image_fmt_put_run(tables + IMAGE_REGION_LEN, &u);
	h.nregions = 1;
	h.nruns = 1;
	h.data_off = h.regions_off = IMAGE_HDR_LEN;
	h.runs_off = IMAGE_HDR_LEN + IMAGE_REGION_LEN;
	h.file_len = sizeof(b) - 1;
	EVP_Digest(tables, IMAGE_REGION_LEN + IMAGE_RUN_LEN, h.tables_sha, NULL,
		   EVP_sha256(), NULL);
	if (image_fmt_put_hdr(b + 1, &h) < 0)
		exit(1);
	b[0] = 3;
	put("image", name, b, sizeof(b));
}

int
main(int argc, char **argv)
{
	static uint8_t stream[65536];
	size_t slen = 0;
	Uffdd__Hello h = UFFDD__HELLO__INIT;
	Uffdd__Region r = UFFDD__REGION__INIT, *rp = &r;
	Uffdd__RegionTable t = UFFDD__REGION_TABLE__INIT;
	Uffdd__PageRequest pr = UFFDD__PAGE_REQUEST__INIT;
	Uffdd__PageData pd = UFFDD__PAGE_DATA__INIT;
	Uffdd__Complete c = UFFDD__COMPLETE__INIT;
	Uffdd__Commit cm = UFFDD__COMMIT__INIT;
	Uffdd__Error e = UFFDD__ERROR__INIT;
	Uffdd__Range rg = UFFDD__RANGE__INIT, *rgp = &rg;
	Uffdd__ExportRequest ex = UFFDD__EXPORT_REQUEST__INIT;
	Uffdd__AttachRequest at = UFFDD__ATTACH_REQUEST__INIT;
	Uffdd__StatusRequest st = UFFDD__STATUS_REQUEST__INIT;
	Uffdd__SnapshotRequest sn = UFFDD__SNAPSHOT_REQUEST__INIT;
	static const char *confs[][2] = {
		{"full", "# example\nlisten 127.0.0.1:7401\ncontrol "
			 "\"/run/uffdd/c s\"\ncontrol-mode 0660\ncontrol-group "
			 "0\nstate-dir /run/uffdd\nca /etc/uffdd/ca.crt\ncert "
			 "/etc/uffdd/node.crt\nkey /etc/uffdd/node.key\npin "
			 "00:11\nlog-level debug\n"},
		{"insecure", "insecure yes # plaintext\n\n  \t\n"},
		{"escapes", "control \"/a\\\"b\\\\c\"\n"},
		{"bad", "bogus 1\ncontrol\n\"x\n"},
	};

	if (argc != 2) {
		fprintf(stderr, "usage: mkseeds DIR\n");
		return 2;
	}
	dir = argv[1];
	mkdir(dir, 0755);
	h.version = UFFDD_PROTO_VERSION;
	h.lane = UFFDD__LANE__LANE_DEMAND;
	h.migration_id = "0123456789abcdef0123456789abcdef";
	frame("hello", FRAME_HELLO, &h.base, 0, stream, &slen);
	r.index = 0;
	r.name = "[heap]";
	r.start = 0x500000000000;
	r.length = 1 << 20;
	r.page_size = 4096;
	r.kind = UFFDD__REGION_KIND__KIND_ANON_PRIVATE;
	r.data_pages = 200;
	r.zero_pages = 56;
	t.n_regions = 1;
	t.regions = &rp;
	frame("regions", FRAME_REGIONS, &t.base, 0, stream, &slen);
	pr.region = 0;
	pr.page = 17;
	pr.npages = 1;
	frame("page_request", FRAME_PAGE_REQUEST, &pr.base, 0, stream, &slen);
	pd.region = 0;
	pd.page = 17;
	pd.npages = 1;
	pd.demand = 1;
	frame("page_data", FRAME_PAGE_DATA, &pd.base, 4096, stream, &slen);
	pd.zero = 1;
	pd.npages = 8;
	frame("page_zero", FRAME_PAGE_DATA, &pd.base, 0, stream, &slen);
	c.pages = 256;
	frame("complete", FRAME_COMPLETE, &c.base, 0, stream, &slen);
	cm.seq = 1;
	cm.pages = 256;
	cm.checked_by = "switches";
	frame("commit", FRAME_COMMIT, &cm.base, 0, stream, &slen);
	frame("commit_ack", FRAME_COMMIT_ACK, &cm.base, 0, stream, &slen);
	e.code = 1;
	e.message = "unknown migration ID";
	frame("error", FRAME_ERROR, &e.base, 0, stream, &slen);
	rg.start = 0x500000000000;
	rg.end = 0x500000100000;
	ex.pid = 4242;
	ex.n_ranges = 1;
	ex.ranges = &rgp;
	frame("ctl_export", FRAME_CTL_EXPORT, &ex.base, 0, stream, &slen);
	at.pid = 5151;
	at.from = "127.0.0.1:7401";
	at.id = "0123456789abcdef0123456789abcdef";
	at.n_ranges = 1;
	at.ranges = &rgp;
	frame("ctl_attach", FRAME_CTL_ATTACH, &at.base, 0, stream, &slen);
	st.id = "";
	frame("ctl_status", FRAME_CTL_STATUS, &st.base, 0, stream, &slen);
	sn.pid = 4242;
	sn.n_ranges = 1;
	sn.ranges = &rgp;
	frame("ctl_snapshot", FRAME_CTL_SNAPSHOT, &sn.base, 0, stream, &slen);
	put("conn", "stream", stream, slen);
	for (size_t i = 0; i < sizeof(confs) / sizeof(confs[0]); i++)
		put("conffile", confs[i][0], confs[i][1], strlen(confs[i][1]));
	role_seeds();
	state_seeds();
	image_seed("one_region", 1, 1, 0);
	image_seed("working_set", 1, 1, 1);
	image_seed("two_regions", 2, 3, 0);
	image_seed("two_regions_working_set", 2, 3, 1);
	crafted_seed("hole_2_62", 0x500000000000, 1ull << 62);
	crafted_seed("past_2_47", 0x7ffffff00000, 2 << 20);
	return 0;
}
