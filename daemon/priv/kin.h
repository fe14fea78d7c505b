/*
 * A destination target's forked processes, each made a grant of its own
 * (privop.h, PRIVOP_CHILD and PRIVOP_ORPHAN): the engine never opens a
 * process itself, not even one its target made.
 */
#ifndef UFFDD_PRIV_KIN_H
#define UFFDD_PRIV_KIN_H

struct call;

/* PRIVOP_CHILD: the grant's process's child, as its parent vouches. */
int kin_child(struct call *c);
/* PRIVOP_ORPHAN: one no parent vouches for, looked for here. */
int kin_orphan(struct call *c);

#endif
