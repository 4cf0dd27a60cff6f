// SPDX-License-Identifier: Apache-2.0
/*
 * mkComm: the device runtime's communicator over an ncclComm_t. Init is collective and exchanges
 * everything through NCCL itself (ncclAllGather): host identities (node discovery agreeing with
 * NCCL's), how node peers share heaps, transport listen handles, remote keys.
 *
 * Memory. One device allocation per rank holds the symmetric heap followed by the words node
 * peers write (signals, then the barrier counter); ranks of one node map each other's allocation,
 * so kernels move node-local data with plain loads and stores. The allocation is a CUDA VMM one
 * (heap_share.h) where every rank of the node can use VMM: each rank exports it as a POSIX fd
 * and hands it to its node peers over a Unix socket (fd_pass.h), which import and map it. The
 * physical memory then lives until the last mapping goes: a peer that died or aborted leaves its
 * heap readable to the others, and an aborted comm may release its own. Elsewhere (or
 * MKERNEL_HEAP_SHARE=legacy) it is a cudaMalloc shared through CUDA IPC handles, whose owner must
 * outlive every reader. Ranks of other nodes are reached through the host proxy: the transport
 * registers the heap itself when it can reach GPU memory, and otherwise a host-pinned mirror of
 * the heap (`stage`), which puts leave from and land in (device.cuh copies between heap and
 * mirror on the GPU). The signal words the proxy increments, the error word and the command
 * queue are host-pinned and mapped.
 *
 * Init exchanges that can fail on one rank carry its status: every rank joins every all-gather
 * and returns an error when any rank failed, so none is left waiting in NCCL.
 */
#define MK_LOG_PREFIX "RUNTIME/mkernel"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "fused/runtime/comm.h"
#include "fused/runtime/comm_live.h"
#include "fused/runtime/fd_pass.h"
#include "fused/runtime/heap_policy.h"
#include "fused/runtime/runtime_params.h"
#include "mk/core_params.h"
#include "mk/err.h"
#include "mk/log.h"

#define COMM_HEAP_ALIGN 256

static void comm_unmap_peers(struct mk_comm *c);

struct comm_info {
	uint64_t host_hash;
	uint64_t gpu_key; /* machine and PCI id of the GPU: equal for ranks sharing one GPU */
	int32_t cuda_dev;
	int32_t pid;
};

static int cuda_rc(cudaError_t e, const char *what)
{
	if (e == cudaSuccess)
		return 0;
	MK_WARN("%s failed: %s", what, cudaGetErrorString(e));
	return -EIO;
}

static int nccl_rc(ncclResult_t r, const char *what)
{
	if (r == ncclSuccess)
		return 0;
	MK_WARN("%s failed: %s", what, ncclGetErrorString(r));
	return -EIO;
}

/* Every rank's `bytes` from `mine` into all[nranks * bytes], through NCCL on the comm. */
int mk_comm_allgather(struct mk_comm *c, const void *mine, void *all, size_t bytes)
{
	char *d = NULL;
	int rc;

	rc = cuda_rc(cudaMalloc((void **)&d, bytes * (size_t)c->nranks), "cudaMalloc(allgather)");
	if (rc)
		return rc;
	rc = cuda_rc(cudaMemcpy(d + bytes * (size_t)c->rank, mine, bytes, cudaMemcpyHostToDevice),
		     "cudaMemcpy(allgather in)");
	if (rc == 0)
		rc = nccl_rc(ncclAllGather(d + bytes * (size_t)c->rank, d, bytes, ncclUint8,
					   c->nccl, c->stream),
			     "ncclAllGather");
	if (rc == 0)
		rc = cuda_rc(cudaStreamSynchronize(c->stream), "cudaStreamSynchronize(allgather)");
	if (rc == 0)
		rc = cuda_rc(cudaMemcpy(all, d, bytes * (size_t)c->nranks, cudaMemcpyDeviceToHost),
			     "cudaMemcpy(allgather out)");
	cudaFree(d);
	return rc;
}

static int comm_topology(struct mk_comm *c)
{
	struct comm_info mine = { mk_topo_host_hash(), 0, c->cuda_dev, (int32_t)getpid() };
	struct comm_info *all = calloc((size_t)c->nranks, sizeof(*all));
	uint64_t *hashes = calloc((size_t)c->nranks, sizeof(*hashes));
	char bus[32] = "";
	int rc = -ENOMEM;

	if (all == NULL || hashes == NULL)
		goto out;
	rc = cuda_rc(cudaDeviceGetPCIBusId(bus, sizeof(bus), c->cuda_dev), "cudaDeviceGetPCIBusId");
	if (rc == 0)
		rc = cuda_rc(cudaDeviceGetAttribute(&c->sms, cudaDevAttrMultiProcessorCount,
						    c->cuda_dev),
			     "cudaDeviceGetAttribute(SMs)");
	if (rc)
		goto out;
	mine.gpu_key = mk_topo_machine_hash() ^ mk_topo_hash_str(bus);
	rc = mk_comm_allgather(c, &mine, all, sizeof(mine));
	if (rc)
		goto out;
	c->gpu_share = 0;
	for (int r = 0; r < c->nranks; r++) {
		hashes[r] = all[r].host_hash;
		c->gpu_share += all[r].gpu_key == mine.gpu_key;
	}
	rc = mk_topo_assign(hashes, c->nranks, c->rank, &c->topo);
	if (rc == 0)
		MK_INFO(MK_SUBSYS_INIT,
			"rank %d/%d: node %d of %d, local rank %d of %d, %d rank(s) on its GPU",
			c->rank, c->nranks, c->topo.node, c->topo.nnodes, c->topo.local_rank,
			c->topo.nlocal, c->gpu_share);
out:
	free(all);
	free(hashes);
	return rc;
}

/* Bytes after the heap in the device allocation: node peers' signal words, barrier counter. */
static size_t comm_sync_len(const struct mk_comm *c)
{
	return (size_t)c->nsignals * sizeof(uint64_t) + COMM_HEAP_ALIGN;
}

/* A comm's own random number: the names of its fd-passing sockets differ from any other's. */
static uint64_t comm_nonce(void)
{
	uint64_t n = 0;

	if (getrandom(&n, sizeof(n), GRND_NONBLOCK) != (ssize_t)sizeof(n))
		n = mk_now_ns() ^ ((uint64_t)getpid() << 32);
	return n;
}

struct heap_vote_msg {
	struct mk_heap_vote v;
	int32_t status; /* 0, or this rank's MKERNEL_HEAP_SHARE is not a value */
	int32_t pad;
	uint64_t nonce;
};

/*
 * How node peers will share heaps, decided before any heap exists: every rank's knob and VMM
 * support travel in one all-gather and every rank applies the same rule (heap_policy.h).
 */
static int comm_heap_choose(struct mk_comm *c)
{
	struct heap_vote_msg mine = { 0 }, *all = calloc((size_t)c->nranks, sizeof(*all));
	struct mk_heap_vote *votes = calloc((size_t)c->nranks, sizeof(*votes));
	char why[256], cannot[192] = "";
	int rc = -ENOMEM, knob;

	if (all == NULL || votes == NULL)
		goto out;
	knob = mk_heap_knob_parse(mk_param_heap_share());
	if (knob < 0) {
		MK_WARN("MKERNEL_HEAP_SHARE=%s: expected auto, vmm or legacy",
			mk_param_heap_share());
		mine.status = knob;
	} else {
		mine.v.knob = knob;
		if (knob != MK_HEAP_KNOB_LEGACY)
			mine.v.vmm_ok = mk_heap_vmm_probe(c->cuda_dev, &c->heap_gdr, cannot,
							  sizeof(cannot));
	}
	mine.nonce = comm_nonce();
	rc = mk_comm_allgather(c, &mine, all, sizeof(mine));
	if (rc)
		goto out;
	for (int r = 0; r < c->nranks; r++) {
		votes[r] = all[r].v;
		if (all[r].status != 0 && rc == 0) {
			if (r != c->rank)
				MK_WARN("rank %d has an MKERNEL_HEAP_SHARE it does not know", r);
			rc = -EINVAL;
		}
	}
	if (rc)
		goto out;
	if (mine.v.knob != MK_HEAP_KNOB_LEGACY && !mine.v.vmm_ok)
		MK_INFO(MK_SUBSYS_INIT, "rank %d cannot share its heap through CUDA VMM: %s",
			c->rank, cannot);
	rc = mk_heap_share_choose(votes, c->topo.node_of, c->nranks, c->topo.node, why,
				  sizeof(why));
	if (rc < 0) {
		MK_WARN("%s%s%s", why, cannot[0] != '\0' ? "; this rank: " : "", cannot);
		goto out;
	}
	c->heap_share = rc;
	c->heap_nonce = all[0].nonce;
	if (c->heap_share != MK_HEAP_SHARE_VMM)
		c->heap_gdr = 0;
	MK_INFO(MK_SUBSYS_INIT, "rank %d: node peers share heaps through %s: %s", c->rank,
		mk_heap_share_name(c->heap_share), why);
	rc = 0;
out:
	free(all);
	free(votes);
	return rc;
}

/* The heap + sync words, zeroed: a VMM allocation others can import, or a cudaMalloc. */
static int comm_heap_alloc(struct mk_comm *c)
{
	const size_t total = c->heap_len + comm_sync_len(c);
	int rc;

	if (c->heap_share == MK_HEAP_SHARE_VMM) {
		rc = mk_heap_vmm_alloc(c->cuda_dev, total, c->heap_gdr, &c->heap_vmm);
		c->heap = c->heap_vmm.base;
	} else {
		rc = cuda_rc(cudaMalloc((void **)&c->heap, total), "cudaMalloc(symmetric heap)");
	}
	if (rc) {
		MK_WARN("the symmetric heap takes %zu bytes of GPU memory (MKERNEL_SYMM_HEAP)",
			c->heap_len);
		return rc;
	}
	/* a VMM mapping is ordinary device memory to the runtime once its access is set */
	return cuda_rc(cudaMemset(c->heap, 0, total), "cudaMemset(symmetric heap)");
}

/* Signals, error word and queue (host-pinned, mapped). */
static int comm_memory(struct mk_comm *c)
{
	struct mk_cmdq_prod prod;
	int rc;

	rc = cuda_rc(cudaHostAlloc((void **)&c->signals, c->nsignals * sizeof(uint64_t),
				   cudaHostAllocMapped),
		     "cudaHostAlloc(signals)");
	if (rc)
		return rc;
	memset(c->signals, 0, c->nsignals * sizeof(uint64_t));
	rc = cuda_rc(cudaHostAlloc((void **)&c->kerr, 64, cudaHostAllocMapped),
		     "cudaHostAlloc(error word)");
	if (rc)
		return rc;
	memset(c->kerr, 0, 64);
	rc = cuda_rc(cudaHostAlloc((void **)&c->slots, (size_t)c->nslots * sizeof(*c->slots),
				   cudaHostAllocMapped),
		     "cudaHostAlloc(command queue)");
	if (rc)
		return rc;
	rc = cuda_rc(cudaHostAlloc((void **)&c->ctrl, sizeof(*c->ctrl), cudaHostAllocMapped),
		     "cudaHostAlloc(queue control)");
	if (rc)
		return rc;
	rc = cuda_rc(cudaMalloc((void **)&c->prod_d, sizeof(*c->prod_d)), "cudaMalloc(producer)");
	if (rc)
		return rc;
	rc = mk_cmdq_init(&c->q, c->slots, c->ctrl, c->nslots, 0, &prod);
	if (rc)
		return rc;
	c->q_ready = 1;
	return cuda_rc(cudaMemcpy(c->prod_d, &prod, sizeof(prod), cudaMemcpyHostToDevice),
		       "cudaMemcpy(producer)");
}

/* What each rank tells the others before node peers map heaps. */
struct node_msg {
	cudaIpcMemHandle_t ipc; /* legacy: my heap's handle */
	int32_t status;		/* 0, or why I cannot go on (allocation, export, listen) */
	int32_t pid;		/* VMM: names my fd-passing socket */
};

/* Gets my heap ready for node peers: its CUDA IPC handle, or an exported fd and a listener. */
static int comm_heap_offer(struct mk_comm *c, struct node_msg *mine, struct mk_fdpass *fp, int *fd)
{
	int rc;

	if (c->heap_share != MK_HEAP_SHARE_VMM)
		return cuda_rc(cudaIpcGetMemHandle(&mine->ipc, c->heap),
			       "cudaIpcGetMemHandle(heap)");
	if (c->topo.nlocal == 1)
		return 0;
	rc = mk_heap_vmm_export(&c->heap_vmm, fd);
	if (rc == 0)
		rc = mk_fdpass_listen(fp, c->heap_nonce, (int32_t)getpid(), c->rank,
				      c->topo.nlocal);
	return rc;
}

/* Legacy: opens every node peer's CUDA IPC handle. */
static int comm_map_legacy(struct mk_comm *c, const struct node_msg *all, const int *local)
{
	for (int r = 0; r < c->nranks; r++) {
		cudaError_t e;

		if (r == c->rank || local[r] < 0)
			continue;
		e = cudaIpcOpenMemHandle((void **)&c->peer_base[local[r]], all[r].ipc,
					 cudaIpcMemLazyEnablePeerAccess);
		if (e != cudaSuccess) {
			MK_WARN("rank %d cannot map the heap of rank %d of its node (CUDA IPC: "
				"%s); ranks with one host identity (NCCL_HOSTID, MKERNEL_HOSTID) "
				"must reach each other's GPU memory",
				c->rank, r, cudaGetErrorString(e));
			c->peer_base[local[r]] = NULL;
			return -EIO;
		}
	}
	return 0;
}

/* VMM: my fd to every node peer, theirs to me (bounded by the comm's timeout), imported. */
static int comm_map_vmm(struct mk_comm *c, const struct node_msg *all, const int *local,
			struct mk_fdpass *fp, int fd)
{
	const size_t need = c->heap_len + comm_sync_len(c);
	struct mk_fdpass_peer peers[MK_MAX_LOCAL];
	int fds[MK_MAX_LOCAL], at[MK_MAX_LOCAL], n = 0, rc;
	uint64_t sizes[MK_MAX_LOCAL];

	for (int r = 0; r < c->nranks; r++) {
		if (r != c->rank && local[r] >= 0) {
			peers[n] = (struct mk_fdpass_peer){ r, all[r].pid };
			at[n++] = local[r];
		}
	}
	if (n == 0)
		return 0;
	rc = mk_fdpass_exchange(fp, peers, n, fd, c->heap_vmm.size, fds, sizes, c->timeout_ms);
	if (rc) {
		MK_WARN("rank %d: passing heap fds between the %d ranks of its node failed: %s",
			c->rank, c->topo.nlocal, mk_strerror(rc));
		return rc;
	}
	for (int i = 0; i < n; i++) {
		if (rc == 0 && sizes[i] < need) {
			MK_WARN("rank %d's heap allocation (%llu bytes) is smaller than this "
				"rank's (%zu): every rank needs the same MKERNEL_SYMM_HEAP",
				peers[i].rank, (unsigned long long)sizes[i], need);
			rc = -EPROTO;
		}
		if (rc == 0) {
			rc = mk_heap_vmm_import(c->cuda_dev, fds[i], sizes[i], &c->peer_vmm[at[i]]);
			if (rc)
				MK_WARN("rank %d cannot map the heap of rank %d of its node (CUDA "
					"VMM: %s); MKERNEL_HEAP_SHARE=legacy tries CUDA IPC",
					c->rank, peers[i].rank, mk_strerror(rc));
			else
				c->peer_base[at[i]] = c->peer_vmm[at[i]].base;
		}
		/* the imported handle holds the memory now */
		close(fds[i]);
	}
	return rc;
}

/* Everyone's status in one all-gather: 0 when every rank succeeded, else an error everywhere. */
static int comm_agree(struct mk_comm *c, int rc, const char *what)
{
	int32_t mine = rc, *all = calloc((size_t)c->nranks, sizeof(*all));
	int grc;

	if (all == NULL)
		return -ENOMEM;
	grc = mk_comm_allgather(c, &mine, all, sizeof(mine));
	for (int r = 0; r < c->nranks && grc == 0 && rc == 0; r++) {
		if (all[r] != 0) {
			MK_WARN("rank %d: rank %d failed %s: %s", c->rank, r, what,
				mk_strerror(all[r]));
			rc = -EREMOTEIO; /* ncclRemoteError: another rank failed */
		}
	}
	free(all);
	return rc ? rc : grc;
}

/*
 * Node peers map each other's device allocation (the mechanism comm_heap_choose picked), and
 * every rank learns which ranks are node-local (peer_local_d). rc: how allocating my heap went;
 * a failure is reported to every rank, in the first all-gather, and so is any failure to map.
 */
static int comm_node_map(struct mk_comm *c, int rc)
{
	const struct mk_topo *t = &c->topo;
	struct mk_fdpass fp = { .lfd = -1 };
	struct node_msg mine, *all = calloc((size_t)c->nranks, sizeof(*all));
	int *local = calloc((size_t)c->nranks, sizeof(*local));
	int fd = -1, grc;

	memset(&mine, 0, sizeof(mine));
	if (all == NULL || local == NULL) {
		rc = -ENOMEM;
		goto out;
	}
	if (rc == 0 && t->nlocal > MK_MAX_LOCAL) {
		MK_WARN("%d ranks share a node; at most %d can map each other's heaps", t->nlocal,
			MK_MAX_LOCAL);
		rc = -EINVAL;
	}
	if (rc == 0)
		rc = comm_heap_offer(c, &mine, &fp, &fd);
	mine.status = rc;
	mine.pid = (int32_t)getpid();
	/* separates every listen from every connect, and tells everybody who failed */
	grc = mk_comm_allgather(c, &mine, all, sizeof(mine));
	if (grc) {
		rc = grc;
		goto out;
	}
	for (int r = 0; r < c->nranks && rc == 0; r++) {
		if (all[r].status != 0) {
			MK_WARN("rank %d: rank %d failed to get its heap ready for its node peers: "
				"%s",
				c->rank, r, mk_strerror(all[r].status));
			rc = -EIO;
		}
	}
	for (int r = 0; r < c->nranks; r++)
		local[r] = t->node_of[r] == t->node ? t->local_of[r] : -1;
	if (rc == 0) {
		c->peer_base[t->local_rank] = c->heap;
		rc = c->heap_share == MK_HEAP_SHARE_VMM ? comm_map_vmm(c, all, local, &fp, fd)
							: comm_map_legacy(c, all, local);
	}
	if (fd >= 0)
		close(fd); /* importers hold the allocation now (or the exchange failed) */
	fd = -1;
	mk_fdpass_close(&fp);
	rc = comm_agree(c, rc, "to map its node peers' heaps");
	if (rc == 0)
		rc = cuda_rc(cudaMalloc((void **)&c->peer_local_d, (size_t)c->nranks * sizeof(int)),
			     "cudaMalloc(peer map)");
	if (rc == 0)
		rc = cuda_rc(cudaMemcpy(c->peer_local_d, local, (size_t)c->nranks * sizeof(int),
					cudaMemcpyHostToDevice),
			     "cudaMemcpy(peer map)");
out:
	if (fd >= 0)
		close(fd);
	mk_fdpass_close(&fp);
	free(all);
	free(local);
	return rc;
}

/*
 * Full mesh over the transport: rank j listens for every lower rank i, the handles travel in one
 * all-gather (row j, column i), i connects, j accepts; both poll until established or timeout.
 */
static int comm_connect(struct mk_comm *c)
{
	const size_t hsz = MK_TP_HANDLE_MAX;
	const int n = c->nranks;
	struct mk_listener **ls = calloc((size_t)n, sizeof(*ls));
	uint8_t *mine = calloc((size_t)n, hsz), *all = calloc((size_t)n * n, hsz);
	int32_t me = c->rank;
	uint64_t t0;
	int rc = 0, pending;

	if (ls == NULL || mine == NULL || all == NULL)
		rc = -ENOMEM;
	for (int p = 0; p < me && rc == 0; p++)
		rc = c->ops->listen(c->tp_dev, mine + (size_t)p * hsz, &ls[p]);
	/* a rank that cannot listen still joins the exchange, so no rank waits for it there */
	rc = comm_agree(c, rc, "to listen for its transport connections");
	if (rc == 0)
		rc = mk_comm_allgather(c, mine, all, (size_t)n * hsz);
	if (rc)
		goto out;
	for (int p = me + 1; p < n; p++) {
		rc = c->ops->connect(c->tp_dev, all + ((size_t)p * n + (size_t)me) * hsz, &me,
				     sizeof(me), &c->conns[p]);
		if (rc)
			goto out;
	}
	t0 = mk_now_ns();
	do {
		pending = 0;
		for (int p = 0; p < n; p++) {
			if (p < me && c->conns[p] == NULL) {
				rc = c->ops->accept(ls[p], &me, sizeof(me), &c->conns[p]);
				if (rc)
					goto out;
				pending += c->conns[p] == NULL;
			} else if (p > me && !c->connected[p]) {
				rc = c->ops->connected(c->conns[p]);
				if (rc < 0)
					goto out;
				c->connected[p] = rc;
				pending += rc == 0;
			}
		}
		if (pending && mk_now_ns() - t0 > (uint64_t)c->timeout_ms * 1000000u) {
			MK_WARN("rank %d: %d transport connections still pending after %d ms", me,
				pending, c->timeout_ms);
			rc = -ETIMEDOUT;
			goto out;
		}
	} while (pending);
	rc = 0;
	for (int p = 0; p < me && rc == 0; p++) {
		int32_t who;

		memcpy(&who, c->conns[p]->peer_blob, sizeof(who));
		if (c->conns[p]->peer_blob_len != sizeof(who) || who != p)
			rc = -EPROTO;
	}
out:
	for (int p = 0; p < n && ls != NULL; p++) {
		if (ls[p] != NULL)
			c->ops->close_listen(ls[p]);
	}
	free(ls);
	free(mine);
	free(all);
	return rc;
}

/*
 * What the transport reads and writes: the heap itself where the device registers GPU memory,
 * else a host-pinned mirror of it. Ranks decide alone; a mixed set works (a sender's source and
 * a receiver's landing zone are each the owner's choice).
 */
static int comm_register(struct mk_comm *c, struct mk_rkey *mine)
{
	struct mk_mr_attr attr = { .type = MK_PTR_HOST, .dmabuf_fd = -1, .cuda_device = -1 };
	struct mk_dev_props props;
	void *target = c->heap;
	int rc;

	rc = c->ops->dev_props(c->tp_dev, &props);
	if (rc)
		return rc;
	/* a VMM heap is registrable by a NIC only when created GPUDirect-RDMA capable */
	if ((props.ptr_support & MK_PTR_CUDA) &&
	    (c->heap_share != MK_HEAP_SHARE_VMM || c->heap_gdr)) {
		attr.type = MK_PTR_CUDA;
		attr.cuda_device = c->cuda_dev;
	} else {
		rc = cuda_rc(cudaHostAlloc((void **)&c->stage, c->heap_len, cudaHostAllocMapped),
			     "cudaHostAlloc(heap mirror)");
		if (rc)
			return rc;
		target = c->stage;
		MK_INFO(MK_SUBSYS_INIT,
			"transport device %s cannot register %s: remote puts go through a "
			"%zu-byte host mirror of the heap",
			props.name,
			props.ptr_support & MK_PTR_CUDA
				? "a VMM heap without GPUDirect RDMA support (this GPU)"
				: "GPU memory",
			c->heap_len);
	}
	rc = c->ops->reg_mr(c->tp_dev, target, c->heap_len, &attr, &c->heap_mr, mine);
	if (rc)
		MK_WARN("registering the %zu-byte symmetric heap (%s memory) failed: %s",
			c->heap_len, c->stage != NULL ? "host" : "GPU", mk_strerror(rc));
	return rc;
}

/* rc: how setting up my queue and signal words went (agreed on with the registration). */
static int comm_transport(struct mk_comm *c, int rc)
{
	struct mk_rkey mine = { 0 };

	if (rc == 0 && c->nranks > 1) {
		rc = mk_transport_get(&c->ops);
		if (rc)
			MK_WARN("no transport backend (MKERNEL_TRANSPORT): %s", mk_strerror(rc));
		else
			c->have_tp = 1;
		if (rc == 0)
			rc = comm_register(c, &mine);
	}
	rc = comm_agree(c, rc, "to set up its queue or register its heap");
	if (rc == 0)
		rc = mk_comm_allgather(c, &mine, c->rkeys, sizeof(mine));
	if (rc || c->nranks == 1)
		return rc;
	return comm_connect(c);
}

static int comm_proxy(struct mk_comm *c)
{
	struct mk_proxy_peer *peers = calloc((size_t)c->nranks, sizeof(*peers));
	struct mk_cmdq *qs[1] = { &c->q };
	struct mk_proxy_attr a = {
		.ops = c->ops,
		.rank = c->rank,
		.nranks = c->nranks,
		.peers = peers,
		.heap = c->stage != NULL ? c->stage : c->heap,
		.heap_device = c->stage == NULL,
		.heap_len = c->heap_len,
		.heap_mr = c->heap_mr,
		.signals = c->signals,
		.nsignals = c->nsignals,
		.queues = qs,
		.nqueues = 1,
		.nthreads = c->nthreads,
		.batch = (int)mk_param_proxy_batch(),
		.timeout_ms = c->timeout_ms,
	};
	int rc;

	if (peers == NULL)
		return -ENOMEM;
	for (int p = 0; p < c->nranks; p++) {
		peers[p].conn = c->conns[p];
		peers[p].heap = c->rkeys[p];
	}
	if (a.batch < 1)
		a.batch = 1;
	rc = mk_proxy_create(&a, &c->proxy);
	free(peers);
	if (rc)
		return rc;
	return mk_proxy_start(c->proxy);
}

static int comm_config(struct mk_comm *c, const mkConfig_t *cfg)
{
	int64_t slots = mk_param_cmdq_slots();

	c->heap_len = (size_t)mk_param_symm_heap();
	c->nthreads = (int)mk_param_proxy_threads();
	c->timeout_ms = (int)mk_param_timeout_ms();
	if (cfg != NULL) {
		if (cfg->magic != MK_CONFIG_MAGIC || cfg->size != sizeof(*cfg))
			return -EINVAL;
		if (cfg->heapBytes != MK_CONFIG_UNDEF_SIZE)
			c->heap_len = cfg->heapBytes;
		if (cfg->proxyThreads != MK_CONFIG_UNDEF_INT)
			c->nthreads = cfg->proxyThreads;
		if (cfg->queueSlots != MK_CONFIG_UNDEF_INT)
			slots = cfg->queueSlots;
		if (cfg->timeoutMs != MK_CONFIG_UNDEF_INT)
			c->timeout_ms = cfg->timeoutMs;
	}
	c->heap_len = (c->heap_len + 4095) & ~(size_t)4095;
	if (c->heap_len == 0 || c->nthreads < 1 || c->timeout_ms < 1 || slots < 2 ||
	    slots > MK_CMDQ_MAX_SLOTS || (slots & (slots - 1)) != 0)
		return -EINVAL;
	c->nslots = (uint32_t)slots;
	c->nsignals = MK_COMM_SIGNALS;
	if ((uint32_t)(2 * c->nranks) > c->nsignals)
		return -EINVAL;
	return 0;
}

int mk_comm_init(ncclComm_t nccl, const mkConfig_t *cfg, struct mk_comm **out)
{
	struct mk_comm *c = calloc(1, sizeof(*c));
	int rc;

	if (c == NULL)
		return -ENOMEM;
	c->nccl = nccl;
	rc = nccl_rc(ncclCommCount(nccl, &c->nranks), "ncclCommCount");
	if (rc == 0)
		rc = nccl_rc(ncclCommUserRank(nccl, &c->rank), "ncclCommUserRank");
	if (rc == 0)
		rc = cuda_rc(cudaGetDevice(&c->cuda_dev), "cudaGetDevice");
	if (rc == 0)
		rc = cuda_rc(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking),
			     "cudaStreamCreate");
	if (rc)
		goto undo; /* no rank count or stream: this rank cannot take part in any exchange */
	rc = comm_config(c, cfg);
	if (rc == 0) {
		c->conns = calloc((size_t)c->nranks, sizeof(*c->conns));
		c->connected = calloc((size_t)c->nranks, sizeof(*c->connected));
		c->rkeys = calloc((size_t)c->nranks, sizeof(*c->rkeys));
		if (c->conns == NULL || c->connected == NULL || c->rkeys == NULL)
			rc = -ENOMEM;
	}
	/*
	 * Init is collective: a rank that fails joins the next agreement instead of leaving, and
	 * every rank then returns the error, so none waits in an exchange for a rank that left.
	 * (Each step between two agreements is local or bounded by the comm's timeout.)
	 */
	rc = comm_agree(c, rc, "with its mkCommInit arguments (mkConfig_t) or their allocation");
	if (rc == 0)
		rc = comm_topology(c);
	if (rc == 0)
		rc = comm_heap_choose(c);
	if (rc == 0)
		rc = comm_node_map(c, comm_heap_alloc(c));
	if (rc == 0) {
		rc = comm_transport(c, comm_memory(c));
		if (rc == 0)
			rc = comm_proxy(c);
		if (rc == 0)
			rc = mk_symm_init(&c->symm, c->heap_len);
		if (rc == 0)
			rc = mk_comm_ops_init(c);
		rc = comm_agree(c, rc, "to connect, start its proxy or set up its ops");
	}
	if (rc == 0)
		rc = mk_comm_live_add(c);
	if (rc)
		goto undo;
	c->magic = MK_COMM_MAGIC;
	*out = c;
	return 0;
undo:
	mk_comm_free(c);
	return rc;
}

void mk_comm_free(struct mk_comm *c)
{
	if (c == NULL)
		return;
	c->magic = 0;
	mk_comm_ops_release(c, &c->op_slots);
	mk_proxy_destroy(c->proxy);
	for (int p = 0; c->conns != NULL && p < c->nranks; p++) {
		if (c->conns[p] != NULL)
			c->ops->close(c->conns[p]);
	}
	if (c->heap_mr != NULL)
		c->ops->dereg_mr(c->tp_dev, c->heap_mr);
	if (c->have_tp)
		mk_transport_put();
	if (c->q_ready)
		mk_cmdq_fini(&c->q);
	comm_unmap_peers(c);
	cudaFree(c->peer_local_d);
	if (c->heap_vmm.size != 0) {
		/* node peers' mappings keep the memory for as long as they read it: an aborted comm
		 * releases its heap too, once its own kernels are done with it */
		(void)cudaDeviceSynchronize();
		mk_heap_vmm_unmap(&c->heap_vmm);
	} else if (!c->keep_heap) {
		cudaFree(c->heap);
	}
	cudaFreeHost(c->stage);
	cudaFreeHost(c->signals);
	cudaFreeHost(c->kerr);
	cudaFreeHost(c->slots);
	cudaFreeHost(c->ctrl);
	cudaFree(c->prod_d);
	if (c->stream != NULL)
		cudaStreamDestroy(c->stream);
	mk_symm_fini(&c->symm);
	mk_topo_fini(&c->topo);
	free(c->conns);
	free(c->connected);
	free(c->rkeys);
	/* the header stays, zeroed: a stale mkComm_t reads a dead comm, never freed memory */
	memset(c, 0, sizeof(*c));
	mk_comm_quarantine(c);
}

/* An all-reduce of one int through NCCL: every rank got here. */
int mk_comm_barrier(struct mk_comm *c)
{
	int one = 1, *d = NULL;
	int rc;

	rc = cuda_rc(cudaMalloc((void **)&d, sizeof(int)), "cudaMalloc(barrier)");
	if (rc)
		return rc;
	rc = cuda_rc(cudaMemcpy(d, &one, sizeof(one), cudaMemcpyHostToDevice), "cudaMemcpy");
	if (rc == 0)
		rc = nccl_rc(ncclAllReduce(d, d, 1, ncclInt32, ncclSum, c->nccl, c->stream),
			     "ncclAllReduce(barrier)");
	if (rc == 0)
		rc = cuda_rc(cudaStreamSynchronize(c->stream), "cudaStreamSynchronize(barrier)");
	cudaFree(d);
	return rc;
}

/*
 * Unmap node peers' heaps. CUDA IPC: their owners free them only after everyone did. VMM: my
 * mapping holds the memory; it goes once this process's kernels are done with it (unlike
 * cudaFree, cuMemUnmap does not wait for them).
 */
static void comm_unmap_peers(struct mk_comm *c)
{
	int synced = 0;

	for (int l = 0; l < MK_MAX_LOCAL; l++) {
		if (c->peer_vmm[l].size != 0) {
			if (!synced++)
				(void)cudaDeviceSynchronize();
			mk_heap_vmm_unmap(&c->peer_vmm[l]);
		} else if (c->peer_base[l] != NULL && c->peer_base[l] != c->heap) {
			cudaIpcCloseMemHandle(c->peer_base[l]);
		}
		c->peer_base[l] = NULL;
	}
}

/*
 * No rank still sends once every rank's queue is drained and a NCCL barrier passed; a second
 * barrier after every rank unmapped its node peers' heaps lets the owners free them.
 */
int mk_comm_quiesce(struct mk_comm *c)
{
	uint64_t t0 = mk_now_ns();
	struct mk_cmdq_prod prod;
	int rc;

	/* Every command pushed so far (the producer index lives on the GPU) has completed. */
	rc = cuda_rc(cudaMemcpy(&prod, c->prod_d, sizeof(prod), cudaMemcpyDeviceToHost),
		     "cudaMemcpy(producer index)");
	if (rc)
		return rc;
	while (mk_proxy_error(c->proxy) == 0 &&
	       mk_seq_after(prod.head, __atomic_load_n(&c->ctrl->done, __ATOMIC_ACQUIRE))) {
		if (mk_now_ns() - t0 > (uint64_t)c->timeout_ms * 1000000u)
			return -ETIMEDOUT;
		usleep(100);
	}
	rc = mk_comm_barrier(c);
	if (rc)
		return rc;
	comm_unmap_peers(c);
	return mk_comm_barrier(c);
}

void mk_comm_dev(const struct mk_comm *c, struct mk_dev_comm *d)
{
	const size_t sig_bytes = (size_t)c->nsignals * sizeof(uint64_t);

	memset(d, 0, sizeof(*d));
	d->q = mk_cmdq_dev(&c->q, c->prod_d);
	d->rank = c->rank;
	d->nranks = c->nranks;
	d->heap = c->heap;
	d->stage = c->stage;
	d->peer_local = c->peer_local_d;
	d->net_signals = c->signals;
	d->nsignals = c->nsignals;
	d->local_rank = c->topo.local_rank;
	d->nlocal = c->topo.nlocal;
	d->nvl_signals = (uint64_t *)(c->heap + c->heap_len);
	d->barrier = (uint64_t *)(c->heap + c->heap_len + sig_bytes);
	for (int l = 0; l < c->topo.nlocal && l < MK_MAX_LOCAL; l++) {
		char *base = c->peer_base[l];

		d->peer_heap[l] = base;
		d->peer_nvl_signals[l] = base != NULL ? (uint64_t *)(base + c->heap_len) : NULL;
		d->peer_barrier[l] =
			base != NULL ? (uint64_t *)(base + c->heap_len + sig_bytes) : NULL;
	}
	d->error = c->kerr;
	d->timeout_ns = (uint64_t)c->timeout_ms * 1000000u;
}
