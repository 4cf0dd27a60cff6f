/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Node and local-rank discovery that agrees with NCCL's: a process's host identity is the whole
 * value of NCCL_HOSTID when set, else the hostname followed by the kernel's boot id, exactly the
 * string NCCL hashes; ranks with equal identities form a node. Fake nodes on one host (distinct
 * NCCL_HOSTID per process) therefore take the same code path as a real cluster.
 *
 * MKERNEL_HOSTID, when set, replaces that identity for mkernel alone. It exists for one case:
 * emulating nodes of several ranks on a single GPU. NCCL refuses two ranks with one identity on
 * one GPU ("Duplicate GPU detected"), so such ranks keep distinct NCCL_HOSTIDs (NCCL sees one
 * node each) and share an MKERNEL_HOSTID (mkernel maps their heaps into each other, which CUDA
 * IPC allows between processes on one GPU). Unset, mkernel's nodes are exactly NCCL's.
 */
#ifndef MK_FUSED_RUNTIME_TOPO_H
#define MK_FUSED_RUNTIME_TOPO_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The identity string (NUL-terminated, truncated to len - 1). 0 or -errno. */
int mk_topo_host_id(char *buf, size_t len);
/* 64-bit FNV-1a of the identity string: what ranks exchange. */
uint64_t mk_topo_host_hash(void);
/* The same of the machine itself (hostname + boot id), whatever NCCL_HOSTID / MKERNEL_HOSTID
 * say: ranks that share a GPU share this and the GPU's PCI id. */
uint64_t mk_topo_machine_hash(void);
uint64_t mk_topo_hash_str(const char *s);

struct mk_topo {
	int rank;
	int nranks;
	int node; /* index of my node, nodes numbered by their lowest rank */
	int nnodes;
	int local_rank; /* my index among my node's ranks, in rank order */
	int nlocal;	/* ranks in my node */
	int uniform;	/* every node has nlocal ranks */
	int *node_of;	/* node_of[r] for every rank (owned; mk_topo_fini frees it) */
	int *local_of;	/* local rank of every rank */
};

/* From every rank's host hash (in rank order). 0, -EINVAL or -ENOMEM. */
int mk_topo_assign(const uint64_t *host_hash, int nranks, int rank, struct mk_topo *out);
void mk_topo_fini(struct mk_topo *t);

#ifdef __cplusplus
}
#endif

#endif /* MK_FUSED_RUNTIME_TOPO_H */
