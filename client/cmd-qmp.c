/* qmp SOCK COMMAND [ARGS]: one QMP command, its return printed as JSON. */
#include "config.h"

#include <stdio.h>

#include "client/client.h"
#include "client/qmp.h"

/* One QMP command on SOCK; its return on stdout, plain JSON. */
int
cmd_qmp(const struct cmd_entry *self, int argc, char **argv)
{
	const char *u = self->usage;
	json_object *args = NULL, *r = NULL;
	struct qmp *q;
	int rc = 1;

	if (argc < 3 || argc > 4)
		die_usage(u);
	if (argc == 4 && (args = json_tokener_parse(argv[3])) == NULL) {
		fprintf(stderr, "uffd-client: %s: not JSON\n", argv[3]);
		die_usage(u);
	}
	q = qmp_open(argv[1]);
	if (q == NULL) {
		json_object_put(args);
		return 1;
	}
	if (qmp_execute(q, argv[2], args, &r) == 0) {
		printf("%s\n", json_object_to_json_string_ext(
				       r, JSON_C_TO_STRING_PLAIN));
		rc = 0;
	}
	json_object_put(r);
	qmp_close(q);
	return rc;
}
