// SPDX-License-Identifier: Apache-2.0
/* The choice of heap-sharing mechanism (heap_policy.h): a pure function of every rank's vote. */
#include "fused/runtime/heap_policy.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

int mk_heap_knob_parse(const char *s)
{
	if (s == NULL || s[0] == '\0' || strcmp(s, "auto") == 0)
		return MK_HEAP_KNOB_AUTO;
	if (strcmp(s, "vmm") == 0)
		return MK_HEAP_KNOB_VMM;
	if (strcmp(s, "legacy") == 0)
		return MK_HEAP_KNOB_LEGACY;
	return -EINVAL;
}

const char *mk_heap_share_name(int share)
{
	switch (share) {
	case MK_HEAP_SHARE_LEGACY:
		return "legacy CUDA IPC";
	case MK_HEAP_SHARE_VMM:
		return "CUDA VMM";
	default:
		return "none";
	}
}

/* Node `node`'s mechanism; *decider = the first rank that forced legacy, -1 if none. */
static int policy_node(const struct mk_heap_vote *v, const int *node_of, int nranks, int node,
		       int *decider)
{
	*decider = -1;
	for (int r = 0; r < nranks; r++) {
		if (node_of[r] != node)
			continue;
		if (v[r].knob == MK_HEAP_KNOB_LEGACY || !v[r].vmm_ok) {
			*decider = r;
			return MK_HEAP_SHARE_LEGACY;
		}
	}
	return MK_HEAP_SHARE_VMM;
}

int mk_heap_share_choose(const struct mk_heap_vote *votes, const int *node_of, int nranks, int node,
			 char *why, size_t why_len)
{
	int share, d;

	/* Every rank looks at every node: one rank's impossible demand fails the whole comm. */
	for (int r = 0; r < nranks; r++) {
		if (votes[r].knob != MK_HEAP_KNOB_VMM ||
		    policy_node(votes, node_of, nranks, node_of[r], &d) == MK_HEAP_SHARE_VMM)
			continue;
		snprintf(why, why_len,
			 "rank %d asks for CUDA VMM heap sharing (MKERNEL_HEAP_SHARE=vmm) but rank "
			 "%d "
			 "of its node %s",
			 r, d,
			 votes[d].knob == MK_HEAP_KNOB_LEGACY ? "asks for legacy CUDA IPC"
							      : "cannot use CUDA VMM");
		return -EINVAL;
	}
	share = policy_node(votes, node_of, nranks, node, &d);
	if (share == MK_HEAP_SHARE_VMM)
		snprintf(why, why_len, "every rank of the node supports it");
	else if (votes[d].knob == MK_HEAP_KNOB_LEGACY)
		snprintf(why, why_len, "rank %d asks for it (MKERNEL_HEAP_SHARE=legacy)", d);
	else
		snprintf(why, why_len, "rank %d of the node cannot use CUDA VMM", d);
	return share;
}
