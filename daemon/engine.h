/*
 * The engine (docs/privsep.md): the event loop, both roles and the data
 * path, in a process of its own that the privileged part starts. Control
 * requests and privileged operations go through its two socket pairs
 * with the privileged part (control.h, privop.h).
 */
#ifndef UFFDD_ENGINE_H
#define UFFDD_ENGINE_H

/* Runs the engine on its socket pairs' ends; returns the exit status. */
int engine_main(int ctl, int rpc);

#endif
