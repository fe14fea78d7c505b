/*
 * A destination target's forked processes, each made a grant of its own
 * (privop.h, PRIVOP_CHILD and PRIVOP_ORPHAN): the engine never opens a
 * process itself, not even one its target made.
 */
#ifndef UFFDD_PRIV_KIN_H
#define UFFDD_PRIV_KIN_H

struct call;
struct grant;

/*
 * Grant g handed to the engine (made or claimed): its process still the
 * one checked and one its caller may ptrace; the answer is its pidfd and
 * memory file (privop_child_reply). An errno value, 0: done.
 */
int kin_answer(struct call *c, struct grant *g);

/* PRIVOP_CHILD: the grant's process's child, as its parent vouches. */
int kin_child(struct call *c);
/* PRIVOP_ORPHAN: one no parent vouches for, looked for here. */
int kin_orphan(struct call *c);

#endif
