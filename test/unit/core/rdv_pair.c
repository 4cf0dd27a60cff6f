// SPDX-License-Identifier: Apache-2.0
/* Connected comm pairs over the fake backend for the rendezvous tests (rdv_pair.h). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>
#include <string.h>

#include "fake_tp.h"
#include "rdv_pair.h"

void pair_open(struct pair *p)
{
	uint8_t handle[MK_RDV_HANDLE_SIZE];
	int spins = 0;

	memset(p, 0, sizeof(*p));
	assert_int_equal(mk_rdv_listen(&fake_tp_ops, 0, handle, &p->l), 0);
	while (p->s == NULL || p->r == NULL) {
		if (p->s == NULL)
			assert_int_equal(mk_rdv_connect(&fake_tp_ops, 0, handle, &p->s), 0);
		if (p->r == NULL)
			assert_int_equal(mk_rdv_accept(p->l, &p->r), 0);
		assert_true(++spins < 100);
	}
	assert_int_equal(mk_rdv_close(p->l), 0);
}

void pair_close(struct pair *p)
{
	assert_int_equal(mk_rdv_close(p->s), 0);
	assert_int_equal(mk_rdv_close(p->r), 0);
	assert_int_equal(fake_tp_live_regs(), 0);
}

struct mk_mr *reg(struct mk_rdv_comm *c, void *buf, size_t len)
{
	struct mk_mr *mr = NULL;

	assert_int_equal(mk_rdv_reg(c, buf, len, MK_PTR_HOST, -1, 0, &mr), 0);
	assert_non_null(mr);
	return mr;
}

int wait_both(struct mk_rdv_req *sreq, struct mk_rdv_req *rreq, size_t *rsizes, int *srcp)
{
	int sdone = sreq == NULL, rdone = rreq == NULL, rc_s = 0, rc_r = 0;
	size_t ssize;

	for (int i = 0; i < 100000 && (!sdone || !rdone); i++) {
		if (!sdone) {
			rc_s = mk_rdv_test(sreq, &sdone, &ssize);
			if (rc_s)
				sdone = 1;
		}
		if (!rdone) {
			rc_r = mk_rdv_test(rreq, &rdone, rsizes);
			if (rc_r)
				rdone = 1;
		}
	}
	assert_true(sdone && rdone);
	if (srcp)
		*srcp = rc_s;
	return rc_r;
}
