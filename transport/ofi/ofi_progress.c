// SPDX-License-Identifier: Apache-2.0
/*
 * MKERNEL_OFI_PROGRESS_THREAD: a thread per lane that drives the provider's progress, so the
 * socket copies of tcp, net and rxm (which happen inside fi_cq_read) run beside the caller's
 * thread, one thread per connection as NCCL's own Socket transport does.
 *
 * On a connection with endpoints of its own the thread also reads the completions, into a
 * single-producer single-consumer ring that poll() empties (ofi_data.c) without calling the
 * provider: when both threads read the CQ, every short read of NCCL's proxy thread waited on
 * the provider's lock while the other thread copied a large message under it (through NCCL,
 * 1 MiB at 0.58-0.67 of Socket). On shared endpoints completions are routed between
 * connections under the endpoints' lock (ofi_sep.c), so there the thread only progresses
 * (fi_cq_read of zero entries) and poll() reads as without it.
 */
#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "mk/log.h"
#include "ofi.h"

/* Moves what the lane's CQ holds into its ring, as much as fits; true when anything moved. */
static bool ofi_ring_fill(struct mk_ofi_conn *conn, struct mk_ofi_lane *lane)
{
	struct mk_ofi_ring *r = lane->ring;
	struct fi_cq_data_entry ent[MK_OFI_CQ_BATCH_MAX];
	unsigned tail = r->tail; /* ours alone */
	unsigned room = MK_OFI_RING - (tail - __atomic_load_n(&r->head, __ATOMIC_ACQUIRE));
	struct fi_cq_err_entry err = { 0 };
	ssize_t got;
	int status;

	if (room > (unsigned)conn->cq_batch)
		room = (unsigned)conn->cq_batch;
	if (room == 0) {
		/* full until poll() takes some: keep the bytes moving, leave completions queued */
		mk_ofi_guarded_cq_read(conn, lane->cq, NULL, 0, mk_now_ns());
		return false;
	}
	got = mk_ofi_guarded_cq_read(conn, lane->cq, ent, room, mk_now_ns());
	if (got > 0) {
		for (ssize_t i = 0; i < got; i++)
			r->e[(tail + (unsigned)i) % MK_OFI_RING] =
				(struct mk_ofi_ring_ent){ .ent = ent[i], .status = 0 };
		__atomic_store_n(&r->tail, tail + (unsigned)got, __ATOMIC_RELEASE);
		return true;
	}
	if (got != -FI_EAVAIL)
		return false; /* -FI_EAGAIN, or an error poll()'s own checks will meet */
	status = mk_ofi_cq_err_read(conn, lane->cq, &err);
	if (status == 0)
		return false;
	r->e[tail % MK_OFI_RING] = (struct mk_ofi_ring_ent){
		.ent = { .op_context = err.op_context, .flags = err.flags },
		.status = status,
	};
	__atomic_store_n(&r->tail, tail + 1, __ATOMIC_RELEASE);
	return true;
}

static void *ofi_progress_main(void *arg)
{
	struct mk_ofi_lane *lane = arg;
	struct mk_ofi_conn *conn = lane->conn;

	while (!__atomic_load_n(&conn->progress_stop, __ATOMIC_ACQUIRE) &&
	       !__atomic_load_n(&conn->wedged, __ATOMIC_ACQUIRE)) {
		if (lane->ring != NULL) {
			if (ofi_ring_fill(conn, lane))
				continue;
		} else {
			mk_ofi_guarded_cq_read(conn, lane->cq, NULL, 0, mk_now_ns());
		}
		sched_yield();
	}
	return NULL;
}

void mk_ofi_progress_start(struct mk_ofi_conn *conn)
{
	int rc;

	if (!mk_param_ofi_progress_thread())
		return;
	conn->progress_stop = 0;
	for (int i = 0; i < conn->nlanes; i++) {
		struct mk_ofi_lane *lane = &conn->lanes[i];

		if (lane->progress_on)
			continue;
		/* without a ring (shared endpoints, or no memory) poll() reads the CQ itself */
		if (conn->sep == NULL && lane->ring == NULL)
			lane->ring = calloc(1, sizeof(*lane->ring));
		rc = pthread_create(&lane->progress, NULL, ofi_progress_main, lane);
		if (rc == 0) {
			lane->progress_on = true;
			continue;
		}
		MK_WARN_ONCE("ofi: %s: no progress thread (%s); progress stays in poll()",
			     conn->dev->props.name, strerror(rc));
		free(lane->ring);
		lane->ring = NULL;
	}
}

void mk_ofi_progress_stop(struct mk_ofi_conn *conn)
{
	__atomic_store_n(&conn->progress_stop, 1, __ATOMIC_RELEASE);
	for (int i = 0; i < conn->nlanes; i++) {
		struct mk_ofi_lane *lane = &conn->lanes[i];

		if (lane->progress_on) {
			pthread_join(lane->progress, NULL);
			lane->progress_on = false;
		}
		/* what the ring still holds goes with the connection, like a CQ's unread entries */
		free(lane->ring);
		lane->ring = NULL;
	}
}
