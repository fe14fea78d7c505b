/* uffd-client: a thin command line over uffdd's control socket. */
#include "config.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client/client.h"
#include "version.h"

#define DEFAULT_CONTROL "/run/uffdd/control.sock"

/* The commands, in the order the help lists them. */
static const struct cmd_entry cmds[] = {
	{"export",
	 "export PID [--range START-END[=NAME]]... [--keep-source] [--id ID] "
	 "[--deferred] [--precopy [--max-rounds N] "
	 "[--precopy-threshold BYTES] [--track[-unstopped] PID]] | "
	 "export --image FILE",
	 cmd_export},
	{"go", "go [--prepare] ID", cmd_go},
	{"cancel", "cancel ID", cmd_cancel},
	{"attach",
	 "attach PID (--from HOST:PORT --id ID [--pin SHA256] "
	 "[--wait-export SEC] [--hold-bulk] [--precopy-no-hold] | "
	 "--image FILE "
	 "[--record-working-set [--ws-faults N] [--ws-secs S]]) "
	 "[--range START-END]... [--map SRC:DST|NAME=DST]... [--wait]",
	 cmd_attach},
	{"release", "release ID", cmd_release},
	{"status", "status [ID] [--json]", cmd_status},
	{"wait", "wait ID [--timeout SEC]", cmd_wait},
	{"metrics", "metrics", cmd_metrics},
	{"migrate-qemu",
	 "migrate-qemu --src-qmp SOCK --dst-qmp SOCK "
	 "--src-control PATH --dst-control PATH --src-peer HOST:PORT "
	 "[--precopy] [--no-resume] [--timeout SEC] "
	 "| migrate-qemu send --qmp SOCK --to HOST:PORT [--id ID] "
	 "[--precopy] [--timeout SEC] "
	 "| migrate-qemu receive --qmp SOCK --id ID --from HOST:PORT "
	 "--incoming ADDR:PORT [--no-resume] [--timeout SEC]",
	 cmd_migrate_qemu},
	{"qmp", "qmp SOCK COMMAND [ARGUMENTS-JSON]", cmd_qmp},
	{"snapshot",
	 "snapshot PID --to FILE [--range START-END]... [--keep-source]",
	 cmd_snapshot},
	{"image", "image info|check FILE | image dump FILE START-END",
	 cmd_image},
};

/* The help: every command's usage line, and where the socket is. */
static void
usage(FILE *f)
{
	fprintf(f, "usage: uffd-client [--control PATH] COMMAND [ARGS]\n"
		   "       uffd-client COMMAND --help | --help | --version\n\n"
		   "commands:\n");
	for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
		fprintf(f, "  %s\n", cmds[i].usage);
	fprintf(f,
		"\nThe control socket is --control, else $UFFDD_CONTROL, "
		"else %s.\n"
		"export --precopy needs the source's kernel to track writes: "
		"Linux 6.7 or later\n(UFFD_FEATURE_WP_ASYNC, PAGEMAP_SCAN), or "
		"6.1 to 6.6 for private anonymous\nmemory only (synchronous "
		"uffd-wp).\n",
		DEFAULT_CONTROL);
}

/*
 * COMMAND --help (or -h) anywhere before a "--" asks for that command's
 * usage: the commands' own parsers would call it an unknown option.
 */
static int
wants_help(int argc, char **argv)
{
	for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; i++)
		if (strcmp(argv[i], "--help") == 0 ||
		    strcmp(argv[i], "-h") == 0)
			return 1;
	return 0;
}

/* Global options, then the command named, with the rest of the line. */
int
main(int argc, char **argv)
{
	int i = 1;

	/* A daemon that goes away is an error to report, not a signal. */
	signal(SIGPIPE, SIG_IGN);
	control_path = getenv("UFFDD_CONTROL");
	if (control_path == NULL || *control_path == '\0')
		control_path = DEFAULT_CONTROL;
	while (i < argc && argv[i][0] == '-') {
		if (strcmp(argv[i], "--control") == 0 && i + 1 < argc) {
			control_path = argv[i + 1];
			i += 2;
		} else if (strncmp(argv[i], "--control=", 10) == 0) {
			control_path = argv[i] + 10;
			i++;
		} else if (strcmp(argv[i], "--help") == 0 ||
			   strcmp(argv[i], "-h") == 0) {
			usage(stdout);
			return 0;
		} else if (strcmp(argv[i], "--version") == 0) {
			printf("uffd-client %s\n", UFFDD_VERSION);
			return 0;
		} else {
			usage(stderr);
			return 2;
		}
	}
	if (i >= argc) {
		usage(stderr);
		return 2;
	}
	for (size_t k = 0; k < sizeof(cmds) / sizeof(cmds[0]); k++) {
		if (strcmp(argv[i], cmds[k].name) == 0) {
			if (wants_help(argc - i, argv + i)) {
				printf("usage: uffd-client %s\n",
				       cmds[k].usage);
				return 0;
			}
			optind = 1;
			return cmds[k].exec(&cmds[k], argc - i, argv + i);
		}
	}
	fprintf(stderr, "uffd-client: unknown command %s\n", argv[i]);
	usage(stderr);
	return 2;
}
