/*
 * An export request checked before anything is done to the process: the
 * options that go together, the ranges, the ID asked for, a process no
 * other export holds; and the names given to regions once they are
 * found. Results only: export.c answers the client and fails or goes on.
 */
#include "config.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "daemon/control.h"
#include "daemon/log.h"
#include "daemon/migration.h"
#include "daemon/source/internal.h"

/*
 * export --range START-END=NAME: the one region in the range goes by NAME
 * in the table sent, so that a destination on another host, whose files
 * have other names, maps it by that name (attach --map NAME=DST). Names
 * are printable UTF-8, fit the table, and differ. 0, or -1 with err set.
 */
int
source_export_name_regions(struct source *s, const Uffdd__ExportRequest *req,
			   char *err, size_t errlen)
{
	for (size_t i = 0; i < req->n_ranges; i++) {
		const Uffdd__Range *q = req->ranges[i];
		struct src_region *hit = NULL;
		size_t n = 0;

		if (q->name == NULL || q->name[0] == '\0')
			continue;
		if (strlen(q->name) >= REGION_NAME_MAX ||
		    text_bad_at(q->name) >= 0) {
			snprintf(err, errlen,
				 "--range ...=NAME: a name is printable UTF-8 "
				 "of at most %d bytes",
				 REGION_NAME_MAX - 1);
			return -1;
		}
		for (size_t k = 0; k < s->nregs; k++)
			if (s->regs[k].r.start >= q->start &&
			    s->regs[k].r.start + s->regs[k].r.length <=
				    q->end &&
			    n++ == 0)
				hit = &s->regs[k];
		if (n != 1) {
			snprintf(err, errlen,
				 "--range %llx-%llx=%s: the range holds %zu "
				 "mappings; a name goes with exactly one",
				 (unsigned long long)q->start,
				 (unsigned long long)q->end, q->name, n);
			return -1;
		}
		for (size_t k = 0; k < i; k++)
			if (req->ranges[k]->name &&
			    strcmp(req->ranges[k]->name, q->name) == 0) {
				snprintf(err, errlen,
					 "--range ...=%s: two ranges by one "
					 "name",
					 q->name);
				return -1;
			}
		snprintf(hit->r.name, sizeof(hit->r.name), "%s", q->name);
		hit->named = 1;
	}
	return 0;
}

/*
 * export --id: the ID asked for, checked (32 hex digits, lower-cased: a
 * destination names it byte for byte) into id; refused when any migration
 * of this daemon has it, either role, finished ones kept for status too,
 * as a lane or a status query could not tell them apart. 0, or -1 with
 * err set.
 */
static int
given_id(const char *want, char id[MIG_ID_LEN + 1], uint32_t *code, char *err,
	 size_t errlen)
{
	size_t n = strspn(want, "0123456789abcdefABCDEF");

	*code = ERR_INVALID;
	if (n != MIG_ID_LEN || want[n] != '\0') {
		snprintf(err, errlen,
			 "--id %.40s%s: not a migration ID (%d hex digits)",
			 want, strlen(want) > 40 ? "..." : "", MIG_ID_LEN);
		return -1;
	}
	for (size_t i = 0; i <= MIG_ID_LEN; i++)
		id[i] = (char)tolower((unsigned char)want[i]);
	if (migration_find(id, ROLE_SOURCE) || migration_find(id, ROLE_DEST)) {
		*code = ERR_BUSY;
		snprintf(err, errlen,
			 "--id %s: a migration of this daemon has that ID "
			 "already; make a new one (32 hex digits from a "
			 "random source)",
			 log_id(id));
		return -1;
	}
	return 0;
}

/*
 * What export --image, --precopy and --track go with, the ranges, and
 * the ID asked for (into id, empty when none). 0, or -1 with err set.
 */
int
source_export_check(const Uffdd__ExportRequest *req, struct range *ranges,
		    char *id, uint32_t *code, char *err, size_t errlen)
{
	*code = ERR_INVALID;
	id[0] = '\0';
	if (req->image && (req->n_ranges || req->precopy || req->keep_source ||
			   req->deferred || req->id[0])) {
		snprintf(err, errlen,
			 "--image takes no range, --precopy, "
			 "--keep-source, --deferred or --id");
		return -1;
	}
	if (req->track_unstopped && req->track_pid == 0) {
		snprintf(err, errlen, "track_unstopped without a track_pid");
		return -1;
	}
	if (req->track_pid != 0 && !req->precopy) {
		snprintf(err, errlen, "--track goes with --precopy only");
		return -1;
	}
	if (req->track_pid != 0 && req->track_pid == req->pid) {
		snprintf(err, errlen,
			 "--track %d: the exported process itself (its own "
			 "writes are tracked without --track)",
			 (int)req->track_pid);
		return -1;
	}
	for (size_t i = 0; i < req->n_ranges; i++) {
		ranges[i].start = req->ranges[i]->start;
		ranges[i].end = req->ranges[i]->end;
		if (ranges[i].end <= ranges[i].start) {
			snprintf(err, errlen, "empty range");
			return -1;
		}
	}
	if (req->id[0] && given_id(req->id, id, code, err, errlen) < 0)
		return -1;
	return 0;
}

/*
 * A process another export holds, frozen or about to be: a second one
 * would serve a second destination from the same process, and the first
 * to end would kill or continue it under the other. -1 with err filled.
 */
int
source_exported_already(pid_t pid, uint32_t *code, char *err, size_t errlen)
{
	struct migration *m = migration_of_pid(pid, ROLE_SOURCE);

	if (m == NULL)
		return 0;
	*code = ERR_BUSY;
	snprintf(err, errlen,
		 "process %d is already exported as %s (cancel that "
		 "migration first)",
		 (int)pid, m->id);
	return -1;
}
