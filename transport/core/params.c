// SPDX-License-Identifier: Apache-2.0
/* Knobs of the transport core: backend choice, timeouts, MR cache, striping, multi-receive. */
#include "mk/core_params.h"

MK_PARAM_STR(transport, "core", "MKERNEL_TRANSPORT", "auto",
	     "backend to use: auto (verbs if it has a device, else ofi), ofi or verbs")
MK_PARAM_INT(timeout_ms, "core", "MKERNEL_TIMEOUT", 30000,
	     "milliseconds after which an unanswered connect or an unresponsive peer is an error")
MK_PARAM_INT(keepalive_ms, "core", "MKERNEL_KEEPALIVE", 1000,
	     "milliseconds of silence on a busy connection before a liveness probe is sent")
MK_PARAM_INT(
	mr_cache, "core", "MKERNEL_MR_CACHE", 1,
	"1: share registrations of overlapping page ranges (refcounted); 0: register every call")
MK_PARAM_INT(dump_params, "core", "MKERNEL_DUMP_PARAMS", 0,
	     "1: log every parameter with its effective value and source at init")
MK_PARAM_INT(stripe_min, "core", "MKERNEL_STRIPE_MIN", -1,
	     "bytes above which a message is striped over a connection's lanes (128-B aligned); "
	     "-1 the device's choice: 1 MiB on tcp;ofi_rxm and net, 128 KiB elsewhere")
MK_PARAM_INT(
	eager_bytes, "core", "MKERNEL_EAGER_BYTES", -1,
	"largest message sent without waiting for the receiver's clear-to-send, through bounce "
	"buffers the receiver registered (0 = never; at most 65536; -1 = the device's choice: "
	"65536 on tcp;ofi_rxm and net, where a clear-to-send costs a socket round trip, 8160 on "
	"shm, whose eager writes stay within 8 KiB with their header, else 8192)")
MK_PARAM_INT(eager_cts_wait_us, "core", "MKERNEL_EAGER_CTS_WAIT", 100,
	     "microseconds a host receive that fits the eager path holds its clear-to-send back "
	     "for the eager message it expects (then sends it); 0: send it at once, so a send "
	     "larger than its receive fails at the sender's isend rather than at the receiver")
MK_PARAM_INT(poll_share_ns, "core", "MKERNEL_POLL_SHARE_NS", 5000,
	     "nanoseconds during which a completion-queue read made by one test() also answers "
	     "the tests of the connection's other unfinished requests (0: every test reads)")
MK_PARAM_INT(max_recvs, "core", "MKERNEL_MAX_RECVS", 8,
	     "receives NCCL may group in one irecv (maxRecvs, 1..8)")
