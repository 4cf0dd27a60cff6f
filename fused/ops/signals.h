/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The comm's signal words, one range per op. A signal word only grows and a kernel waits until
 * it passes what its own op expects, so a word another op raises satisfies that wait early and
 * the kernel reads data that has not landed: the ranges must be disjoint. With S = nsignals
 * (MK_COMM_SIGNALS, a multiple of 8), R ranks and N nodes:
 *   [0, 2R)          mkAllToAll (per peer: arrival, then slices announced)
 *   [2R, S/4)        mkGemmAllReduce: the fused kernel from 2R up, the one-shot path the last N
 *   [S/4, 3S/8)      mkRingAttention: its 2N words at the top
 *   [3S/8, S/2)      the MoE ops: their 2R + 2N words at the top
 *   [S/2, 3S/4)      mkGemmReduceScatter (seqpar.h: quarter 2)
 *   [3S/4, S)        mkAllGatherGemm (quarter 3)
 * Each op checks that its words fit its range before it takes the fused path.
 */
#ifndef MK_OPS_SIGNALS_H
#define MK_OPS_SIGNALS_H

#include <stdint.h>

#ifdef __CUDACC__
#define MK_SIG_HD __host__ __device__ static inline
#else
#define MK_SIG_HD static inline
#endif

/* End (exclusive) of mkGemmAllReduce's words. */
MK_SIG_HD uint32_t mk_sig_gar_end(uint32_t nsignals)
{
	return nsignals / 4;
}

/* End of mkRingAttention's words (its range starts at mk_sig_gar_end). */
MK_SIG_HD uint32_t mk_sig_ring_end(uint32_t nsignals)
{
	return nsignals / 8 * 3;
}

/* End of the MoE ops' words (their range starts at mk_sig_ring_end). */
MK_SIG_HD uint32_t mk_sig_moe_end(uint32_t nsignals)
{
	return nsignals / 2;
}

/* Words in the ring's and in the MoE ops' ranges. */
MK_SIG_HD uint32_t mk_sig_eighth(uint32_t nsignals)
{
	return nsignals / 8;
}

#endif
