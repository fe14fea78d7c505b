/*
 * The running configuration: built at start-up from the defaults, the
 * file and the command line's flags, and built again at a reload, when
 * the flags still win over the file.
 */
#include "config.h"

#include <stdio.h>

#include "daemon/conffile.h"
#include "daemon/confrun.h"
#include "daemon/log.h"

struct uffdd_conf conf;

/* What the command line said, kept to override the file again on reload. */
static struct uffdd_conf cli;
static const char *conf_path = CONFFILE_DEFAULT_PATH;
static int conf_path_given;

struct uffdd_conf *
conf_cli(void)
{
	return &cli;
}

void
conf_set_path(const char *path)
{
	conf_path = path;
	conf_path_given = 1;
}

/*
 * Builds the effective configuration: defaults, the file, then the flags.
 * Returns -1 with err filled if the file is unreadable or invalid.
 */
static int
build(struct uffdd_conf *c, int fd, char *err, size_t errlen)
{
	static const char *const tls_keys[] = {"ca", "cert", "key", "pin"};
	struct uffdd_conf file = {.control_gid = (gid_t)-1,
				  .admin_gid = (gid_t)-1};
	int rc;

	conffile_defaults(c);
	rc = fd >= 0 ? conffile_load_fd(fd, conf_path, &file, err, errlen)
		     : conffile_load(conf_path, conf_path_given, &file, err,
				     errlen);
	if (rc < 0) {
		conffile_clear(&file);
		conffile_clear(c);
		return -1;
	}
	/*
	 * Flags win over the file, the choice between TLS and plaintext
	 * too: --insecure sets aside the file's TLS keys, a TLS flag the
	 * file's insecure. Within the file, or among the flags, the two
	 * still exclude each other (below).
	 */
	if (conffile_is_set(&cli, "insecure"))
		for (size_t i = 0; i < sizeof(tls_keys) / sizeof(*tls_keys);
		     i++)
			conffile_forget(&file, tls_keys[i]);
	for (size_t i = 0; i < sizeof(tls_keys) / sizeof(*tls_keys); i++)
		if (conffile_is_set(&cli, tls_keys[i]))
			conffile_forget(&file, "insecure");
	conffile_merge(c, &file);
	conffile_merge(c, &cli);
	conffile_clear(&file);
	c->foreground = cli.foreground;
	if (cli.verbose > c->verbose)
		c->verbose = cli.verbose;
	/* TLS files required unless insecure; never both, to be clear. */
	if (c->insecure && (c->ca || c->cert || c->key || c->pin)) {
		snprintf(err, errlen,
			 "insecure (plaintext) and ca/cert/key/pin (TLS) "
			 "exclude each other");
		conffile_clear(c);
		return -1;
	}
	return 0;
}

int
conf_build(struct uffdd_conf *c, char *err, size_t errlen)
{
	return build(c, -1, err, errlen);
}

int
conf_reload(struct uffdd_conf *next, int fd)
{
	const char *k;
	char err[512];

	if (build(next, fd, err, sizeof(err)) < 0) {
		log_warnx("reload: %s; keeping the running configuration", err);
		return -1;
	}
	if ((k = conffile_restart_key(&conf, next)) != NULL) {
		log_warnx("reload: %s changes only at restart; keeping the "
			  "running configuration",
			  k);
		conffile_clear(next);
		return -1;
	}
	return 0;
}

const char *
conf_file_path(void)
{
	return conf_path;
}
