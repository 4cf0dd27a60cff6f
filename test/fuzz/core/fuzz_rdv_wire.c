// SPDX-License-Identifier: Apache-2.0
/*
 * What a peer hands the rendezvous layer, fuzzed: the 128-byte connect handle (mutations of a
 * real one, and random bytes) and the connection blob each side receives at setup (mutations of
 * the real blob, and well-formed blobs whose ring, probe and key fields point anywhere). Over the
 * in-memory fake transport, which checks every write's key and bounds like a NIC does. Per
 * input: connect / accept with the fuzzed bytes, then a short exchange (isend, irecv, test) and
 * close. The layer must answer with 0 or -errno (never a crash: run under ASan in the sanitize
 * suite), a handle whose trailer is not ours is refused at connect, a blob with a bad magic or
 * version is refused at setup, and data never reaches a buffer it was not sent to.
 * Usage: fuzz-rdv-wire [inputs] [seed]   (a fixed seed gives a fixed corpus)
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../fuzz.h"
#include "fake_tp.h"
#include "mk/compiler.h"
#include "mk/param.h"
#include "mk/rdv.h"
#include "rdv_internal.h"

#define BUF    8192
#define ROUNDS 2000
#define CANARY 0xa5

static void mutate(uint8_t *b, size_t len)
{
	int n = 1 + (int)(fuzz_rng() % 6);

	for (int i = 0; i < n; i++) {
		size_t at = fuzz_rng() % len;

		switch (fuzz_rng() % 4) {
		case 0:
			b[at] ^= (uint8_t)(1u << (fuzz_rng() % 8));
			break;
		case 1:
			b[at] = (uint8_t)fuzz_rng();
			break;
		case 2: /* a whole 8-byte field */
			for (size_t k = at & ~(size_t)7; k < len && k < (at & ~(size_t)7) + 8; k++)
				b[k] = (uint8_t)fuzz_rng();
			break;
		default:
			b[at] = 0;
			break;
		}
	}
}

/*
 * The blob a side receives goes through this hook: the fake transport's accept and connected
 * are wrapped so the fuzzer can replace what the peer sent before the rendezvous layer reads it.
 */
enum side { SIDE_NONE, SIDE_RECV, SIDE_SEND };
static enum side fuzz_side;
static uint8_t fuzz_blob[MK_TP_BLOB_MAX];
static size_t fuzz_blob_len;
static struct mk_transport_ops fuzz_ops;

static void fuzz_patch(struct mk_conn *c)
{
	memcpy(c->peer_blob, fuzz_blob, fuzz_blob_len);
	c->peer_blob_len = fuzz_blob_len;
}

static int fuzz_accept(struct mk_listener *l, const void *blob, size_t len, struct mk_conn **out)
{
	int rc = fake_tp_ops.accept(l, blob, len, out);

	if (rc == 0 && *out != NULL && fuzz_side == SIDE_RECV)
		fuzz_patch(*out);
	return rc;
}

static int fuzz_connected(struct mk_conn *c)
{
	int rc = fake_tp_ops.connected(c);

	if (rc == 1 && fuzz_side == SIDE_SEND)
		fuzz_patch(c);
	return rc;
}

/* The blob that side would really have received, from a clean connection made for the purpose. */
static void real_blob(enum side side, uint8_t *out, size_t *len)
{
	uint8_t handle[MK_RDV_HANDLE_SIZE];
	struct mk_rdv_comm *l = NULL, *s = NULL, *r = NULL;
	struct mk_rdv_send *sc;
	struct mk_rdv_recv *rc;

	fuzz_side = SIDE_NONE;
	*len = 0;
	if (mk_rdv_listen(&fuzz_ops, 0, handle, &l))
		return;
	for (int i = 0; i < 100 && (s == NULL || r == NULL); i++) {
		if (s == NULL && mk_rdv_connect(&fuzz_ops, 0, handle, &s))
			break;
		if (r == NULL && mk_rdv_accept(l, &r))
			break;
	}
	if (s != NULL && r != NULL) {
		sc = container_of(s, struct mk_rdv_send, head);
		rc = container_of(r, struct mk_rdv_recv, head);
		if (side == SIDE_SEND) {
			*len = sc->cs.conn->peer_blob_len;
			memcpy(out, sc->cs.conn->peer_blob, *len);
		} else {
			*len = rc->cs.conn->peer_blob_len;
			memcpy(out, rc->cs.conn->peer_blob, *len);
		}
	}
	if (s != NULL)
		mk_rdv_close(s);
	if (r != NULL)
		mk_rdv_close(r);
	mk_rdv_close(l);
}

/* A well-formed blob (right magic and version) with fields that point anywhere. */
static void wild_blob(uint8_t *b, size_t *len, const uint8_t *real, size_t real_len)
{
	struct mk_rdv_blob w;

	memcpy(&w, real, sizeof(w) <= real_len ? sizeof(w) : real_len);
	switch (fuzz_rng() % 4) {
	case 0:
		w.ring_addr = fuzz_rng();
		break;
	case 1:
		w.probe_addr = fuzz_rng();
		break;
	case 2:
		w.rkey.key = fuzz_rng();
		break;
	default:
		w.ring_addr += (fuzz_rng() % 2 ? 1 : -1) * (uint64_t)(fuzz_rng() % 8192);
		w.probe_addr += (fuzz_rng() % 2 ? 1 : -1) * (uint64_t)(fuzz_rng() % 8192);
		break;
	}
	memcpy(b, &w, sizeof(w));
	*len = sizeof(w);
}

struct outcome {
	bool refused_handle, connected, exchanged;
};

/* Try a few messages each way over the pair; every call may fail, none may crash. */
static int exchange(struct mk_rdv_comm *s, struct mk_rdv_comm *r, uint8_t *sbuf, uint8_t *rbuf)
{
	struct mk_mr *smr = NULL, *rmr = NULL;
	struct mk_rdv_req *sreq = NULL, *rreq = NULL;
	int sdone = 0, rdone = 0, rc = 0, tag = 1;
	size_t cap = BUF / 2, got[MK_RDV_MAX_RECVS];
	void *data = rbuf;

	memset(sbuf, 0x3c, BUF);
	memset(rbuf, CANARY, BUF);
	if (mk_rdv_reg(s, sbuf, BUF, MK_PTR_HOST, -1, 0, &smr) ||
	    mk_rdv_reg(r, rbuf, BUF, MK_PTR_HOST, -1, 0, &rmr))
		goto out;
	for (int i = 0; i < ROUNDS && (!sdone || !rdone); i++) {
		if (rreq == NULL && !rdone &&
		    mk_rdv_irecv(r, 1, &data, &cap, &tag, &rmr, false, &rreq))
			rdone = 1;
		if (sreq == NULL && !sdone && mk_rdv_isend(s, sbuf, BUF / 4, tag, smr, &sreq))
			sdone = 1;
		if (sreq != NULL && mk_rdv_test(sreq, &sdone, got))
			sdone = 1;
		if (sreq != NULL && sdone)
			sreq = NULL;
		if (rreq != NULL && mk_rdv_test(rreq, &rdone, got))
			rdone = 1;
		if (rreq != NULL && rdone)
			rreq = NULL;
	}
	/* whatever happened, nothing was written past the posted receive's capacity */
	for (size_t k = cap; k < BUF; k++)
		if (rbuf[k] != CANARY)
			rc = -1;
out:
	if (smr != NULL)
		mk_rdv_dereg(s, smr);
	if (rmr != NULL)
		mk_rdv_dereg(r, rmr);
	return rc;
}

static int run_one(long input, uint8_t *sbuf, uint8_t *rbuf, struct outcome *o)
{
	uint8_t handle[MK_RDV_HANDLE_SIZE], real[MK_TP_BLOB_MAX];
	struct mk_rdv_comm *l = NULL, *s = NULL, *r = NULL;
	struct mk_rdv_handle_tail tail;
	size_t real_len;
	bool handle_fuzz = fuzz_rng() % 3 == 0, ours;
	int rc = 0, e;

	memset(o, 0, sizeof(*o));
	fake_tp_reset();
	fuzz_side = fuzz_rng() % 2 ? SIDE_RECV : SIDE_SEND;
	real_blob(fuzz_side, real, &real_len);
	if (real_len == 0)
		return 1;
	if (mk_rdv_listen(&fuzz_ops, 0, handle, &l))
		return 1;
	if (handle_fuzz) {
		if (fuzz_rng() % 4 == 0)
			for (size_t k = 0; k < sizeof(handle); k++)
				handle[k] = (uint8_t)fuzz_rng();
		else
			mutate(handle, sizeof(handle));
		fuzz_side = SIDE_NONE;
	} else {
		memcpy(fuzz_blob, real, real_len);
		fuzz_blob_len = real_len;
		if (fuzz_rng() % 2)
			mutate(fuzz_blob, real_len);
		else
			wild_blob(fuzz_blob, &fuzz_blob_len, real, real_len);
		if (fuzz_rng() % 8 == 0)
			fuzz_blob_len = fuzz_rng() % (real_len + 1); /* short */
	}
	memcpy(&tail, handle + MK_RDV_TAIL_OFF, sizeof(tail));
	ours = tail.tag == MK_RDV_HANDLE_TAG;
	for (int i = 0; i < 100 && (s == NULL || r == NULL); i++) {
		if (s == NULL) {
			e = mk_rdv_connect(&fuzz_ops, 0, handle, &s);
			if (e) {
				o->refused_handle = true;
				rc |= e > 0;
				break;
			}
		}
		if (r == NULL) {
			e = mk_rdv_accept(l, &r);
			if (e) {
				rc |= e > 0;
				break;
			}
		}
	}
	/* a handle without our trailer must never get as far as a connection */
	if (!ours && s != NULL)
		rc = -1;
	o->connected = s != NULL && r != NULL;
	if (o->connected)
		o->exchanged = exchange(s, r, sbuf, rbuf) == 0;
	if (o->connected && !o->exchanged)
		rc = -1;
	if (s != NULL)
		mk_rdv_close(s);
	if (r != NULL)
		mk_rdv_close(r);
	mk_rdv_close(l);
	if (fake_tp_live_regs() != 0)
		rc = -1; /* something was left registered */
	if (rc)
		fprintf(stderr, "input %ld: %s fuzz, result %d, connected %d\n", input,
			handle_fuzz		 ? "handle"
			: fuzz_side == SIDE_RECV ? "recv blob"
						 : "send blob",
			rc, o->connected);
	return rc;
}

int main(int argc, char **argv)
{
	long inputs = argc > 1 ? atol(argv[1]) : 2000, refused = 0, connected = 0;
	uint64_t seed = argc > 2 ? strtoull(argv[2], NULL, 0) : 0x7264767769726500ull;
	uint8_t *sbuf = aligned_alloc(4096, BUF), *rbuf = aligned_alloc(4096, BUF);

	if (sbuf == NULL || rbuf == NULL)
		return 1;
	/* a dead connection must show up quickly, not after 30 s */
	setenv("MKERNEL_TIMEOUT", "50", 1);
	setenv("MKERNEL_KEEPALIVE", "5", 1);
	mk_param_reset_all();
	fuzz_ops = fake_tp_ops;
	fuzz_ops.accept = fuzz_accept;
	fuzz_ops.connected = fuzz_connected;
	printf("fuzz-rdv-wire: seed %#llx, %ld inputs\n", (unsigned long long)seed, inputs);
	for (long i = 0; i < inputs; i++) {
		struct outcome o;

		fuzz_input(seed, i);
		if (run_one(i, sbuf, rbuf, &o)) {
			fprintf(stderr, "replay: fuzz-rdv-wire %ld %#llx\n", i + 1,
				(unsigned long long)seed);
			return 1;
		}
		refused += o.refused_handle;
		connected += o.connected;
	}
	printf("fuzz-rdv-wire: %ld inputs, %ld handles refused, %ld connections made and "
	       "exercised\n",
	       inputs, refused, connected);
	free(sbuf);
	free(rbuf);
	return refused > 0 && connected > 0 ? 0 : 1;
}
