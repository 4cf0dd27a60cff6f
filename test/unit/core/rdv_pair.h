/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A connected send/receive comm pair over the in-process fake backend, and the helpers every
 * rendezvous test uses (cmocka asserts inside: call from a test).
 */
#ifndef MK_TEST_RDV_PAIR_H
#define MK_TEST_RDV_PAIR_H

#include <stddef.h>

#include "mk/rdv.h"

struct pair {
	struct mk_rdv_comm *l, *s, *r;
};

/* Listen, then connect and accept until both are up; the listener is closed again. */
void pair_open(struct pair *p);
/* Close both comms; every registration the test made must be gone. */
void pair_close(struct pair *p);
struct mk_mr *reg(struct mk_rdv_comm *c, void *buf, size_t len);
/*
 * Drive both requests (either may be NULL) to completion; returns the receive's status, the
 * send's in *srcp when given, the receive's sizes in rsizes.
 */
int wait_both(struct mk_rdv_req *sreq, struct mk_rdv_req *rreq, size_t *rsizes, int *srcp);

#endif
