/*
 * Grant records (docs/privsep.md, "A restarted daemon"): each grant bound
 * to a migration is written to a directory only this part writes (a
 * "grants" directory in the state directory, 0700, ours), so that a
 * privileged part started again after the whole daemon died or stopped
 * opens the grants of the last one again, before it starts the engine:
 * the engine then takes its migrations up by grant, as after its own
 * death. Never a file of the engine's: a record holds what the privileged
 * part decided (the caller's connect-time credentials, the process's pid
 * and start time, the migrations), and is checked again on reading.
 */
#ifndef UFFDD_PRIV_RECORD_H
#define UFFDD_PRIV_RECORD_H

struct grant;

/*
 * Opens (makes) the directory in state_dir; 0, or -1 (said why): then no
 * grant is recorded, and none survives a restart of the daemon.
 */
int record_dir_open(const char *state_dir);
void record_dir_close(void);
/* Grant g (a process's, bound to a migration) written, again. */
void record_write(struct grant *g);
/* Grant g ended: its record goes (but while the daemon stops). */
void record_remove(struct grant *g);
/* The daemon stops: the records stay, for the next one. */
void record_keep_all(void);
/*
 * Each record read and its grant opened again, if its process is still
 * the one recorded and its caller could still ptrace it; a record of a
 * process gone is removed (a destination's is kept as a grant with no
 * process, for the processes its target forked), one that is not ours
 * (owner, mode, kind) or does not parse is ignored; each said. The grants
 * wait for the engine's claim (grant.h). Returns how many were opened.
 */
int record_restore_all(void);

#endif
