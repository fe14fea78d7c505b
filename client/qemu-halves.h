/*
 * The two halves of a QEMU migration (cmd-qemu-send.c, cmd-qemu-receive.c)
 * as steps: run apart on two hosts by migrate-qemu send and receive, or
 * interleaved in one process by migrate-qemu --precopy on one host
 * (qemu-local.c). Each step returns 0, or -1 said why; the undo of each
 * half says, and undoes, what a failure leaves.
 */
#ifndef UFFDD_CLIENT_QEMU_HALVES_H
#define UFFDD_CLIENT_QEMU_HALVES_H

#include "client/qemu.h"

/* The source's half: its command line, and how far it went. */
struct send {
	const char *qmp, *to, *want_id, *ctl;
	double timeout;
	struct qmp *q;
	struct ramblock b[MAX_BLOCKS];
	size_t n;
	char st[64], id[64], names[MAX_BLOCKS][160];
	pid_t holder;
	double t_stop;
	int precopy; /* --precopy: the RAM pre-copied while the guest runs */
	/* How far it went, for what a failure must undo. */
	int ignoring, running, migrating, went, sent, resident;
	int failed; /* the source's migration failed after the device state */
};

int send_open(struct send *s);
int send_export(struct send *s);
int send_wait_dest(struct send *s);
int send_wait_ready(struct send *s);
int send_prepare(struct send *s);
int send_switch(struct send *s);
int send_go(struct send *s);
int send_devstate(struct send *s);
int send_finish(struct send *s);
void send_undo(struct send *s);

/* The destination's half. */
struct receive {
	const char *qmp, *id, *from, *incoming, *ctl;
	double timeout, t0, t_run;
	int resume;
	int port; /* where QEMU listens for the device state */
	struct qmp *q;
	struct ramblock b[MAX_BLOCKS];
	size_t n;
	char st[64], names[MAX_BLOCKS][160];
	/* How far it went, for what a failure must say. */
	int ignoring, listening, attached, ran;
	int failed, stopped; /* the migration failed; uffdd stopped QEMU */
};

int receive_open(struct receive *r);
int receive_attach(struct receive *r);
/* Tells QEMU to run the guest once loaded (none with --no-resume). */
int receive_cont(struct receive *r);
/* Waits until QEMU has loaded the device state; it runs then. */
int receive_loaded(struct receive *r);
int receive_finish(struct receive *r);
void receive_undo(struct receive *r);

#endif
