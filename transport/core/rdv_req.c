// SPDX-License-Identifier: Apache-2.0
/*
 * Rendezvous messaging, requests: the check of a caller's request pointer and test(), which hands
 * a request to the side that made it (rdv_send.c or rdv_recv.c). Kept apart from setup so that
 * setup -> send / receive -> connection state reads one way, with nothing calling back up.
 */
#include <errno.h>
#include <stddef.h>

#include "rdv_internal.h"

int mk_rdv_req_check(const void *req)
{
	const struct mk_rdv_req *r = req;

	if (r == NULL || r->magic != MK_RDV_REQ_MAGIC || r->state == MK_RDV_REQ_FREE ||
	    r->comm == NULL || r->comm->magic != MK_RDV_MAGIC)
		return -EBADF;
	return 0;
}

int mk_rdv_test(struct mk_rdv_req *req, int *done, size_t *sizes)
{
	if (req->kind == MK_RDV_REQ_SEND)
		return mk_rdv_send_test(req, done, sizes);
	return mk_rdv_recv_test(req, done, sizes);
}
