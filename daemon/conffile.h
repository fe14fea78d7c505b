/*
 * The configuration: built-in defaults, then /etc/uffdd/uffdd.conf, then
 * command-line flags, key by key. Flags and file keys share their names.
 */
#ifndef UFFDD_CONFFILE_H
#define UFFDD_CONFFILE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

/*
 * Input limits on what peers may make this daemon hold or do; defaults and
 * bounds in conffile.c, all applied at reload.
 */
struct conf_limits {
	int max_regions;	  /* regions per migration, both roles */
	int max_request_pages;	  /* pages one demand request may ask */
	int max_pending;	  /* peer connections before HELLO, in all */
	int max_pending_per_addr; /* the same, from one address */
	int hello_timeout;	  /* seconds from accept to HELLO */
	uint64_t max_output;	  /* unsent bytes before a conn stops reading */
};

/* The effective configuration (conffile.c): strings are owned. */
struct uffdd_conf {
	char *listen;
	char *control;
	mode_t control_mode; /* of the control socket; 0600 by default */
	gid_t control_gid;   /* its group; (gid_t)-1: leave it */
	/*
	 * Callers in this group when they connected may act on any
	 * process, as uid 0 may; (gid_t)-1: none (authz.h).
	 */
	gid_t admin_gid;
	char *state_dir;
	/* The engine's user (docs/privsep.md); NULL: it stays root. */
	char *engine_user;
	char *metrics; /* [ADDR:]PORT: GET /metrics there, else NULL */
	int foreground;
	int verbose;
	int log_journal; /* 1 yes, 0 auto (when stderr is the journal), -1 no */
	int insecure;
	int pause_deadline; /* seconds a destination waits for its source */
	uint64_t bulk_rate; /* bytes a second on a source's bulk lane, 0: any */
	int pagemap_scan;   /* use PAGEMAP_SCAN where the kernel has it */
	struct conf_limits lim;
	int poll_us;	 /* busy polling after demand traffic, us */
	int zero_detect; /* source: all-zero data pages go as ZERO */
	/* destination: bulk frames installed on a thread this far below */
	int installer, installer_nice;
	/* TLS: CA that signs every peer, our certificate and key. */
	char *ca;
	char *cert;
	char *key;
	/* SHA-256 fingerprint a source must show instead of the --from name */
	char *pin;
	unsigned set; /* which keys were given (conffile.c) */
};

/* The running daemon's (defined by main, uffdd.c). */
extern struct uffdd_conf conf;

#define CONFFILE_DEFAULT_PATH "/etc/uffdd/uffdd.conf"

/* Fills in the built-in defaults; every string is owned by c. */
void conffile_defaults(struct uffdd_conf *c);
/* Frees c's strings. */
void conffile_clear(struct uffdd_conf *c);
/* Sets one key from text, as a flag or a file line would. */
int conffile_set(struct uffdd_conf *c, const char *key, const char *value,
		 char *err, size_t errlen);
/*
 * Reads a file into c (zeroed by the caller): "key value" lines, # comments,
 * values bare or "quoted". A missing file is an error only if must_exist.
 * Errors read "FILE:LINE: what".
 */
int conffile_load(const char *path, int must_exist, struct uffdd_conf *c,
		  char *err, size_t errlen);
/* The same from a descriptor of the file (path names it in err). */
int conffile_load_fd(int fd, const char *path, struct uffdd_conf *c, char *err,
		     size_t errlen);
/* Whether key was set in c (by a flag or a line). */
int conffile_is_set(const struct uffdd_conf *c, const char *key);
/* Forgets that key was set in c: a merge from c then leaves it alone. */
void conffile_forget(struct uffdd_conf *c, const char *key);
/* Copies into dst every key that was set in src. */
void conffile_merge(struct uffdd_conf *dst, const struct uffdd_conf *src);
/* Writes c in the file's syntax: the effective configuration. */
void conffile_print(FILE *, const struct uffdd_conf *c);
/* The name of the first restart-only key that differs, or NULL. */
const char *conffile_restart_key(const struct uffdd_conf *a,
				 const struct uffdd_conf *b);

#endif
