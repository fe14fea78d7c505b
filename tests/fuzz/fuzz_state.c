/*
 * libFuzzer target: the state-file reader (daemon/statefmt.c) and the
 * roles' restores from it (source_restore(), dest_restore() through
 * state_restore_buf(), as a restarted daemon runs them).
 *
 * Input: one flag byte, then a state file's body: the version line and
 * records, without the checksum line. Each input is
 *   - parsed as it is (the checksum check refuses nearly all: its paths);
 *   - with "@PID@" and "@START@" replaced by the pid and start time of a
 *     real child process (fuzz_role.h) and its checksum appended: parsed,
 *     checked by both roles' validation (the _check forms), and restored
 *     as the daemon would, when every pid it names is that child's (a
 *     restore may freeze or signal the process it names: never another);
 *     bit 0 of the flag byte stops the child first, as an export leaves it;
 *   - the round trip of the writer: its bytes as a string value, written
 *     and read back, must come back the same.
 * Whatever the input, nothing may crash, and a restore must leave the child
 * alive and without a userfaultfd.
 */
#include "config.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/evp.h>

#include "daemon/conffile.h"
#include "daemon/dest.h"
#include "daemon/log.h"
#include "daemon/conn.h"
#include "daemon/migration.h"
#include "daemon/loop.h"
#include "daemon/proc.h"
#include "daemon/source.h"
#include "daemon/state.h"
#include "daemon/statefmt.h"
#include "tests/fuzz/fuzz_role.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static pid_t target;
static char pid_s[24], start_s[24];

/* Appends p[0..n) to a growing buffer. */
static void
add(char **b, size_t *len, const void *p, size_t n)
{
	if ((*b = realloc(*b, *len + n + 1)) == NULL)
		abort();
	memcpy(*b + *len, p, n);
	*len += n;
}

/* The body with the child's pid and start time, and its checksum. */
static char *
instantiate(const uint8_t *p, size_t n, size_t *len)
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned mdlen;
	char *b = NULL, hex[8];

	*len = 0;
	while (n > 0) {
		if (n >= 5 && memcmp(p, "@PID@", 5) == 0) {
			add(&b, len, pid_s, strlen(pid_s));
			p += 5, n -= 5;
		} else if (n >= 7 && memcmp(p, "@START@", 7) == 0) {
			add(&b, len, start_s, strlen(start_s));
			p += 7, n -= 7;
		} else {
			add(&b, len, p++, 1);
			n--;
		}
	}
	add(&b, len, "", 0);
	if (EVP_Digest(b, *len, md, &mdlen, EVP_sha256(), NULL) != 1)
		abort();
	add(&b, len, "sha256 ", 7);
	for (unsigned i = 0; i < mdlen; i++) {
		snprintf(hex, sizeof(hex), "%02x", md[i]);
		add(&b, len, hex, 2);
	}
	add(&b, len, "\n", 1);
	return b;
}

/* Whether every pid the file names is the child's. */
static int
only_target(const char *b, size_t len)
{
	struct state_tbl *t = state_parse("fuzz.state", b, len);
	char key[STATE_KEY_MAX];
	uint64_t v[3];
	int ok = state_u64(t, "pid", 0, UINT64_MAX, v) == 0 &&
		 v[0] == (uint64_t)target;
	size_t n = state_count(t, "child");

	for (size_t i = 0; ok && i < n; i++)
		ok = state_u64s(t, state_key(key, "child", i), v, 3) == 0 &&
		     v[0] == (uint64_t)target;
	state_free(t);
	return ok;
}

/* The validation layers of both roles, each on a table of its own. */
static void
check_roles(const char *b, size_t len)
{
	struct state_tbl *t = state_parse("fuzz.state", b, len);

	source_restore_check(t);
	if (getenv("FUZZ_STATE_LOG") != NULL)
		dprintf(fz_err, "fuzz: as a source: %s\n", state_error(t));
	state_free(t);
	t = state_parse("fuzz.state", b, len);
	dest_restore_check(t);
	if (getenv("FUZZ_STATE_LOG") != NULL)
		dprintf(fz_err, "fuzz: as a destination: %s\n", state_error(t));
	state_free(t);
}

static void
wait_stopped(void)
{
	char path[64], buf[512], *p;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)target);
	for (int i = 0; i < 1000; i++) {
		FILE *f = fopen(path, "re");
		int stopped = 0;

		if (f && fgets(buf, sizeof(buf), f) &&
		    (p = strrchr(buf, ')')) && p[1] == ' ')
			stopped = p[2] == 'T';
		if (f)
			fclose(f);
		if (stopped)
			return;
		usleep(100);
	}
}

/* As a restarted daemon: then everything restored goes again. */
static void
restore(const char *b, size_t len, int stop)
{
	char why[640], path[512];
	int role = -1, held;

	if (stop) {
		kill(target, SIGSTOP);
		wait_stopped();
	}
	state_restore_buf("fuzz.state", FZ_ID, b, len, why, sizeof(why), &role);
	migration_free_all();
	for (int i = 0; i < 2; i++) {
		snprintf(path, sizeof(path), "%s/%s.%s.state", conf.state_dir,
			 FZ_ID, i ? "source" : "destination");
		unlink(path);
	}
	kill(target, SIGCONT);
	held = fz_target_has_uffd(target);
	if (held != 0) {
		dprintf(fz_err, "fuzz: target %d %s after a restore\n",
			(int)target,
			held < 0 ? "is gone" : "holds a userfaultfd");
		abort();
	}
}

/* Any bytes (up to a NUL) as a string value read back as they were. */
static void
round_trip(const uint8_t *p, size_t n)
{
	struct state_out o;
	struct state_tbl *t;
	char *s = strndup((const char *)p, n), *back = malloc(n + 1);

	if (s == NULL || back == NULL)
		abort();
	state_out_begin(&o);
	state_put_str(&o, "from", s);
	state_out_end(&o);
	t = state_parse("round trip", o.buf, o.len);
	if (state_str(t, "from", back, n + 1) < 0 || strcmp(back, s) != 0 ||
	    state_all_read(t) < 0) {
		dprintf(fz_err, "fuzz: a string did not read back: %s\n",
			state_error(t));
		abort();
	}
	state_free(t);
	state_out_free(&o);
	free(s);
	free(back);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct state_tbl *t;
	size_t len;
	char *b;

	if (base == NULL) {
		fz_setup();
		/* To see why a reproducer is refused: the daemon's log. */
		if (getenv("FUZZ_STATE_LOG") != NULL)
			log_init(1, 1);
		target = fz_spawn_target(1);
		snprintf(pid_s, sizeof(pid_s), "%d", (int)target);
		snprintf(start_s, sizeof(start_s), "%llu", proc_start(target));
	}
	if (size < 1)
		return 0;
	t = state_parse("fuzz.state", (const char *)data + 1, size - 1);
	state_free(t);
	b = instantiate(data + 1, size - 1, &len);
	check_roles(b, len);
	if (getenv("FUZZ_STATE_LOG") != NULL)
		dprintf(fz_err, "fuzz: %s to restore\n",
			only_target(b, len) ? "about" : "not");
	if (only_target(b, len))
		restore(b, len, data[0] & 1);
	free(b);
	round_trip(data + 1, size - 1);
	return 0;
}
