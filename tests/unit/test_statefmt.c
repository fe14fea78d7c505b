/*
 * Unit tests for the state-file format (daemon/statefmt.c): what the
 * writer makes, what the reader refuses and where it says so.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>

#include "daemon/statefmt.h"
#include "tests/unit/unit.h"

/* body with its checksum line, as the writer would end it. */
static char *
summed(const char *body, size_t *len)
{
	unsigned char md[EVP_MAX_MD_SIZE];
	unsigned mdlen;
	size_t n = strlen(body);
	char *b = malloc(n + 80);

	EVP_Digest(body, n, md, &mdlen, EVP_sha256(), NULL);
	memcpy(b, body, n);
	memcpy(b + n, "sha256 ", 7);
	n += 7;
	for (unsigned i = 0; i < mdlen; i++, n += 2)
		snprintf(b + n, 3, "%02x", md[i]);
	b[n++] = '\n';
	b[n] = '\0';
	*len = n;
	return b;
}

/* Whether the body, summed, is refused with an error that has want. */
static int
refused(const char *body, const char *want)
{
	size_t len;
	char *b = summed(body, &len);
	struct state_tbl *t = state_parse("f", b, len);
	int ok = strstr(state_error(t), want) != NULL;

	if (!ok)
		fprintf(stderr, "want \"%s\", got \"%s\"\n", want,
			state_error(t));
	state_free(t);
	free(b);
	return ok;
}

static void
round_trip(void)
{
	struct state_out o;
	struct state_tbl *t;
	char key[STATE_KEY_MAX], s[64];
	uint64_t v, w[3];
	const char *name = "x\npid=1\n%=\x7f\x80 y";
	const char *want =
		"uffdd-state 1\nfrom=x%0Apid%3D1%0A%25%3D%7F%80%20y\n";

	state_out_begin(&o);
	state_put_str(&o, "from", name);
	state_put_u64(&o, "pid", 4194304);
	state_put_u64s(&o, state_key(key, "range", 0), (uint64_t[]){1, 2, 3},
		       3);
	state_put_u64s(&o, state_key(key, "range", 1),
		       (uint64_t[]){0, UINT64_MAX, 7}, 3);
	state_out_end(&o);
	CHECK(strncmp(o.buf, want, strlen(want)) == 0);
	t = state_parse("f", o.buf, o.len);
	CHECK(state_error(t)[0] == '\0');
	CHECK(state_str(t, "from", s, sizeof(s)) == 0 && strcmp(s, name) == 0);
	CHECK(state_u64(t, "pid", 2, 4194304, &v) == 0 && v == 4194304);
	CHECK(state_count(t, "range") == 2);
	CHECK(state_u64s(t, "range.1", w, 3) == 0 && w[1] == UINT64_MAX);
	CHECK(state_all_read(t) < 0); /* range.0 unread */
	CHECK(strstr(state_error(t), "f:4: unknown record range.0") != NULL);
	state_free(t);
	state_out_free(&o);
}

static void
accessors(void)
{
	size_t len;
	char *b = summed("uffdd-state 1\npid=1\nn=01\nm=1 2\ns=a b\n", &len);
	struct state_tbl *t = state_parse("f", b, len);
	char s[8];
	uint64_t v, w[2];

	CHECK(state_u64(t, "pid", 2, 10, &v) < 0);
	CHECK(strcmp(state_error(t), "f:2: pid: 1 is out of range (2 to 10)") ==
	      0);
	state_free(t);
	t = state_parse("f", b, len);
	CHECK(state_u64(t, "n", 0, 10, &v) < 0); /* a leading zero */
	state_free(t);
	t = state_parse("f", b, len);
	CHECK(state_u64(t, "m", 0, 10, &v) < 0);
	CHECK(strstr(state_error(t), "f:4: m: more than 1 number") != NULL);
	state_free(t);
	t = state_parse("f", b, len);
	CHECK(state_u64s(t, "m", w, 2) == 0 && w[0] == 1 && w[1] == 2);
	CHECK(state_str(t, "s", s, sizeof(s)) < 0); /* a raw blank */
	state_free(t);
	t = state_parse("f", b, len);
	CHECK(state_u64(t, "none", 0, 1, &v) < 0);
	CHECK(strcmp(state_error(t), "f: no none record") == 0);
	state_free(t);
	free(b);
}

int
main(void)
{
	round_trip();
	accessors();
	CHECK(refused("uffdd-state 1\na=1\na=2\n",
		      "f:3: key a repeated (first at line 2)"));
	CHECK(refused("uffdd-state 2\n", "f:1: format version 2"));
	CHECK(refused("state 1\n", "f:1: not a uffdd state file"));
	CHECK(refused("uffdd-state 1\nA=1\n", "f:2: malformed key"));
	CHECK(refused("uffdd-state 1\nr.01=1\n", "f:2: malformed key"));
	CHECK(refused("uffdd-state 1\nr\n", "f:2: not a key=value record"));
	CHECK(refused("uffdd-state 1\nr=a=b\n", "f:2: an '=' in the value"));
	CHECK(refused("uffdd-state 1\nr=%4\n", "f:2: a '%' not followed"));
	CHECK(refused("uffdd-state 1\nr=a\tb\n", "f:2: a control or"));
	CHECK(refused("uffdd-state 1\nr=a  b\n", "f:2: a blank at the start"));
	CHECK(refused("uffdd-state 1\nr=1\n\n", "f:3: not a key=value record"));
	{
		size_t len;
		char *b = summed("uffdd-state 1\nr=1\n", &len);
		struct state_tbl *t;

		b[len - 2] ^= 1; /* the checksum's last digit */
		t = state_parse("f", b, len);
		CHECK(strstr(state_error(t), "f:3: checksum mismatch") != NULL);
		state_free(t);
		t = state_parse("f", b, len - 1); /* no last newline */
		CHECK(strstr(state_error(t), "f:3: the file does not end") !=
		      NULL);
		state_free(t);
		b[len - 2] ^= 1;
		b[14] = 's'; /* r=1 -> s=1: the sum no longer fits */
		t = state_parse("f", b, len);
		CHECK(strstr(state_error(t), "checksum mismatch") != NULL);
		state_free(t);
		free(b);
	}
	return UNIT_DONE();
}
