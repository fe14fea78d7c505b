/*
 * A destination grant's setup and hold, served for the engine (privop.h,
 * PRIVOP_DEST_*): the privileged part stops the target, has it make its
 * userfaultfd, empties the regions, and holds or lets it go; the engine
 * only registers the regions with the uffd it was handed. What is open
 * (the injection, a kept sole target) is the privileged part's: it ends
 * with the grant, or with the engine.
 */
#ifndef UFFDD_PRIV_DSETUP_H
#define UFFDD_PRIV_DSETUP_H

struct call;

/* The operations (serve.c's table): each answers an errno value. */
int dsetup_uffd(struct call *);
int dsetup_discard(struct call *);
int dsetup_end(struct call *);
int dsetup_close(struct call *);
int dsetup_child_uffd(struct call *);
int dsetup_child_hold(struct call *);
int dsetup_retake(struct call *);

/*
 * Ends what a grant that is gone or dropped left open: its threads let
 * go, a kept target released.
 */
void dsetup_sweep(void);

/*
 * The engine is gone: what it would have ended with the daemon before the
 * split ends now. A pre-copy's held target and a sole one are killed (the
 * kernel would have, PTRACE_O_EXITKILL); a held one is let go, a setup
 * under way undone.
 */
void dsetup_engine_gone(void);

#endif
