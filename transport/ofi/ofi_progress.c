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
 *
 * A thread spins (yielding) while its connection is busy. After a millisecond in which it
 * moved nothing and nobody polled the connection, it waits on a condition until the next
 * poll (mk_ofi_progress_kick) or a timeout, reads once, and waits again, the
 * timeout doubling from 1 to 32 ms while nothing happens: idle connections hold no core (with
 * spinning threads, or threads reading every millisecond, sixteen connections a side on two
 * cores could not finish their setup), and a caller that waits for something wakes its
 * threads at once. NCCL polls a comm only while it has requests out; traffic nobody waits for
 * is read within the timeout, as it would be at the owner's next poll without a thread.
 */
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
		__atomic_store_n(&lane->busy_ns, mk_now_ns(), __ATOMIC_RELAXED);
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

/* Quiet this long, a ring lane's thread waits to be kicked, at most NAP_MAX at a time. */
#define MK_OFI_PROGRESS_IDLE_NS	   1000000ull
#define MK_OFI_PROGRESS_NAP_MAX_NS 32000000ull

static bool ofi_quiet(struct mk_ofi_lane *lane)
{
	return mk_now_ns() - __atomic_load_n(&lane->busy_ns, __ATOMIC_SEQ_CST) >
	       MK_OFI_PROGRESS_IDLE_NS;
}

/*
 * Waits for a kick or nap_ns. napping is stored before busy_ns is read again, and the kicker
 * stores busy_ns before it reads napping (both sequentially consistent): either this thread
 * sees the kick's time, or the kicker sees it napping and signals under the lock.
 */
static void ofi_nap(struct mk_ofi_conn *conn, struct mk_ofi_lane *lane, uint64_t nap_ns)
{
	struct timespec until;

	clock_gettime(CLOCK_MONOTONIC, &until);
	until.tv_sec += (time_t)(nap_ns / 1000000000ull);
	until.tv_nsec += (long)(nap_ns % 1000000000ull);
	if (until.tv_nsec >= 1000000000l) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000l;
	}
	pthread_mutex_lock(&lane->nap_lock);
	__atomic_store_n(&lane->napping, 1, __ATOMIC_SEQ_CST);
	if (ofi_quiet(lane) && !__atomic_load_n(&conn->progress_stop, __ATOMIC_ACQUIRE))
		pthread_cond_timedwait(&lane->nap_cond, &lane->nap_lock, &until);
	__atomic_store_n(&lane->napping, 0, __ATOMIC_RELAXED);
	pthread_mutex_unlock(&lane->nap_lock);
}

/* Ends a ring lane's thread's wait, if it is in one. */
static void ofi_wake(struct mk_ofi_lane *lane)
{
	pthread_mutex_lock(&lane->nap_lock);
	pthread_cond_signal(&lane->nap_cond);
	pthread_mutex_unlock(&lane->nap_lock);
}

void mk_ofi_progress_kick(struct mk_ofi_conn *conn, uint64_t now)
{
	for (int i = 0; i < conn->nlanes; i++) {
		struct mk_ofi_lane *lane = &conn->lanes[i];

		if (lane->ring == NULL)
			continue;
		__atomic_store_n(&lane->busy_ns, now, __ATOMIC_SEQ_CST);
		if (__atomic_load_n(&lane->napping, __ATOMIC_SEQ_CST))
			ofi_wake(lane);
	}
}

/* A ring lane's nap lock and a condition on the monotonic clock; false when they failed. */
static bool ofi_nap_init(struct mk_ofi_lane *lane)
{
	pthread_condattr_t attr;
	bool ok;

	if (pthread_condattr_init(&attr) != 0)
		return false;
	ok = pthread_condattr_setclock(&attr, CLOCK_MONOTONIC) == 0 &&
	     pthread_cond_init(&lane->nap_cond, &attr) == 0;
	pthread_condattr_destroy(&attr);
	if (!ok)
		return false;
	if (pthread_mutex_init(&lane->nap_lock, NULL) != 0) {
		pthread_cond_destroy(&lane->nap_cond);
		return false;
	}
	return true;
}

static void *ofi_progress_main(void *arg)
{
	struct mk_ofi_lane *lane = arg;
	struct mk_ofi_conn *conn = lane->conn;
	uint64_t nap_ns = MK_OFI_PROGRESS_IDLE_NS;

	while (!__atomic_load_n(&conn->progress_stop, __ATOMIC_ACQUIRE) &&
	       !__atomic_load_n(&conn->wedged, __ATOMIC_ACQUIRE)) {
		if (lane->ring == NULL) {
			/* shared endpoints: no word of the connection's load reaches us */
			mk_ofi_guarded_cq_read(conn, lane->cq, NULL, 0, mk_now_ns());
			sched_yield();
			continue;
		}
		if (ofi_ring_fill(conn, lane))
			continue;
		if (!ofi_quiet(lane)) {
			nap_ns = MK_OFI_PROGRESS_IDLE_NS;
			sched_yield();
			continue;
		}
		ofi_nap(conn, lane, nap_ns);
		if (nap_ns < MK_OFI_PROGRESS_NAP_MAX_NS)
			nap_ns *= 2;
	}
	return NULL;
}

static void ofi_ring_free(struct mk_ofi_lane *lane)
{
	if (lane->ring == NULL)
		return;
	pthread_cond_destroy(&lane->nap_cond);
	pthread_mutex_destroy(&lane->nap_lock);
	free(lane->ring);
	lane->ring = NULL;
}

void mk_ofi_progress_start(struct mk_ofi_conn *conn)
{
	int rc;

	if (!conn->dev->progress)
		return;
	conn->progress_stop = 0;
	for (int i = 0; i < conn->nlanes; i++) {
		struct mk_ofi_lane *lane = &conn->lanes[i];

		if (lane->progress_on)
			continue;
		/* without a ring (shared endpoints, or no memory) poll() reads the CQ itself */
		if (conn->sep == NULL && lane->ring == NULL) {
			lane->ring = calloc(1, sizeof(*lane->ring));
			if (lane->ring != NULL && !ofi_nap_init(lane)) {
				free(lane->ring);
				lane->ring = NULL;
			}
		}
		lane->busy_ns = mk_now_ns();
		rc = pthread_create(&lane->progress, NULL, ofi_progress_main, lane);
		if (rc == 0) {
			lane->progress_on = true;
			continue;
		}
		MK_WARN_ONCE("ofi: %s: no progress thread (%s); progress stays in poll()",
			     conn->dev->props.name, strerror(rc));
		ofi_ring_free(lane);
	}
}

void mk_ofi_progress_stop(struct mk_ofi_conn *conn)
{
	__atomic_store_n(&conn->progress_stop, 1, __ATOMIC_RELEASE);
	for (int i = 0; i < conn->nlanes; i++) {
		struct mk_ofi_lane *lane = &conn->lanes[i];

		if (lane->progress_on) {
			if (lane->ring != NULL)
				ofi_wake(lane); /* out of its wait at once */
			pthread_join(lane->progress, NULL);
			lane->progress_on = false;
		}
		/* what the ring still holds goes with the connection, like a CQ's unread entries */
		ofi_ring_free(lane);
	}
}
