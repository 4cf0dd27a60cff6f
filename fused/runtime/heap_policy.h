/* SPDX-License-Identifier: Apache-2.0 */
/*
 * How node peers map each other's heap: the knob (MKERNEL_HEAP_SHARE) and the choice every rank
 * of a comm makes from every rank's knob and VMM support, the same on every rank. Pure: no CUDA.
 */
#ifndef MK_FUSED_RUNTIME_HEAP_POLICY_H
#define MK_FUSED_RUNTIME_HEAP_POLICY_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The mechanism a node's ranks use (stored in struct mk_comm, read by the GPU tests). */
enum mk_heap_share {
	MK_HEAP_SHARE_LEGACY = 1, /* cudaMalloc + cudaIpcGetMemHandle / cudaIpcOpenMemHandle */
	MK_HEAP_SHARE_VMM = 2,	  /* cuMemCreate, POSIX fds over a Unix socket, cuMemImport... */
};

/* What a rank asked for. */
enum mk_heap_knob {
	MK_HEAP_KNOB_AUTO = 0, /* VMM where every rank of the node supports it, else legacy */
	MK_HEAP_KNOB_VMM = 1,  /* VMM or an init error */
	MK_HEAP_KNOB_LEGACY = 2,
};

/* One rank's vote, all-gathered before any heap is allocated. */
struct mk_heap_vote {
	int32_t knob;	/* enum mk_heap_knob */
	int32_t vmm_ok; /* 1: this rank can allocate, export and import VMM memory */
};

/* "" or "auto", "vmm", "legacy": the knob, or -EINVAL. */
int mk_heap_knob_parse(const char *s);

const char *mk_heap_share_name(int share);

/*
 * The mechanism of node `node` from every rank's vote (votes[nranks], node_of[nranks]): legacy
 * if a rank of that node asked for it or cannot use VMM, else VMM. -EINVAL (on every rank alike:
 * the answer looks at the whole comm) when some rank asked for VMM and its node cannot use it.
 * why gets one line saying which rank decided it.
 */
int mk_heap_share_choose(const struct mk_heap_vote *votes, const int *node_of, int nranks, int node,
			 char *why, size_t why_len);

#ifdef __cplusplus
}
#endif

#endif /* MK_FUSED_RUNTIME_HEAP_POLICY_H */
