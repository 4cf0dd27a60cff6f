/* SPDX-License-Identifier: Apache-2.0 */
/*
 * mkernel public API (libmkernel.so): NCCL-shaped entry points for fused multi-GPU kernels and
 * the GEMM engine they are built on. Every function returns ncclResult_t and is stream-ordered
 * where it takes a stream. Unsupported GPUs or shapes take an unfused fallback (cuBLAS, NCCL),
 * never an error.
 */
#ifndef MKERNEL_H
#define MKERNEL_H

#include <stddef.h>

#include <cuda_runtime.h>
#include <nccl.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define MK_API __attribute__((visibility("default")))
#else
#define MK_API
#endif

#define MK_VERSION_MAJOR 0
#define MK_VERSION_MINOR 1

/* Layout of the B operand of C = A @ B (A is always row-major M x K, C row-major M x N). */
typedef enum {
	mkLayoutRowMajorKN = 0, /* B row-major K x N */
	mkLayoutRowMajorNK = 1, /* B row-major N x K, i.e. an nn.Linear weight: C = A @ W^T */
} mkLayout_t;

/*
 * C = A @ B in bf16 with fp32 accumulation, enqueued on `stream`. type must be ncclBfloat16;
 * m, n, k >= 1 and <= INT_MAX. The path is chosen per shape from measured data: the fastest of
 * mkernel's persistent GEMM engine (Hopper, compute capability 9.0, its tile-shape variants),
 * cuBLASLt and cublasGemmEx for the shape's class in the calibration (MKERNEL_CALIBRATION, else
 * the built-in table; cublasGemmEx where it is 10 % ahead, or where N or K is not a multiple of
 * 8), restricted to what can run the call (the engine needs A and B 16-byte
 * aligned, K a multiple of 8 and, for mkLayoutRowMajorKN, N a multiple of 8). The engine's
 * split-K variants run only when MKERNEL_GEMM_PATH names one; MKERNEL_GEMM_PATH forces a path,
 * MKERNEL_GEMM_FORCE_FALLBACK=1 always runs cuBLAS.
 * Returns ncclInvalidArgument for NULL pointers or pointers not aligned to the 2-byte element,
 * zero or too large sizes, another type or layout; ncclUnhandledCudaError if a launch fails.
 */
MK_API ncclResult_t mkGemm(const void *a, const void *b, void *c, size_t m, size_t n, size_t k,
			   ncclDataType_t type, mkLayout_t bLayout, cudaStream_t stream);

/*
 * Grouped GEMM (mixture-of-experts layers), bf16 with fp32 accumulation, enqueued on `stream`:
 * for expert e, rows [offsets[e], offsets[e+1]) of A (row-major, maxRows x k) times B_e into the
 * same rows of C (row-major, maxRows x n). B is numExperts stacked matrices, each k x n
 * (mkLayoutRowMajorKN) or n x k (mkLayoutRowMajorNK, an nn.Linear weight). offsets is a device
 * array of numExperts + 1 int32, read by the kernel: the host need not know the counts (no
 * synchronisation; CUDA-graph replays see the offsets of the moment). A and C must hold maxRows
 * rows; rows of C outside every expert's range are not written.
 * Offsets should be non-decreasing with offsets[numExperts] <= maxRows; others never lead to an
 * access outside rows [0, maxRows) or a row written twice: expert e then gets rows
 * [max(offsets[e], end of e - 1), offsets[e + 1]) clipped to [0, maxRows) (possibly none).
 * On Hopper (compute capability 9.0) with A and B 16-byte aligned, k a multiple of 8 and (for
 * mkLayoutRowMajorKN) n a multiple of 8, mkernel's persistent grouped GEMM runs; any other valid
 * call runs a portable CUDA-core kernel (slower, same results up to fp32 summation order).
 * MKERNEL_GROUPED_FORCE_PORTABLE=1 always runs the portable kernel. Returns ncclInvalidArgument
 * (nothing launched) for NULL pointers, numExperts < 1, n or k outside [1, INT_MAX], maxRows
 * above INT_MAX, another type than ncclBfloat16, an unknown layout, a misaligned pointer or an
 * offsets array the GPU cannot read (checked outside graph capture); ncclUnhandledCudaError if a
 * launch fails. maxRows = 0 is valid and launches nothing.
 */
MK_API ncclResult_t mkGroupedGemm(const void *a, const void *b, void *c, const int *offsets,
				  int numExperts, size_t maxRows, size_t n, size_t k,
				  ncclDataType_t type, mkLayout_t bLayout, cudaStream_t stream);

/*
 * Flash-attention forward in bf16 with fp32 softmax statistics, enqueued on `stream`.
 * q: [batch, seqQ, headsQ, headDim], k and v: [batch, seqKv, headsKv, headDim], o: like q
 * (contiguous "BSHD", as FlashAttention takes them); lse: fp32 [batch, headsQ, seqQ], the natural
 * log of the sum of exp(scaled scores) of each query row (may be NULL when not needed). The scale
 * is 1/sqrt(headDim). headsQ % headsKv == 0 (GQA / MQA), headDim 64 or 128, seqQ and seqKv >= 1.
 * causal: query i sees keys j <= i + (seqKv - seqQ) (bottom-right aligned, as FlashAttention
 * >= 2.1); a query row that sees no key gets o = 0 and lse = -inf. On Hopper (compute capability
 * 9.0) with q, k, v 16-byte aligned and o 4-byte aligned mkernel's warp-specialised TMA/wgmma
 * kernel runs; otherwise (MKERNEL_ATTN_FORCE_PORTABLE=1 too) a portable kernel gives the same
 * results, never an error. Returns ncclInvalidArgument for NULL pointers, sizes out of range,
 * another head dim, headsQ not a multiple of headsKv, misaligned buffers (bf16 needs 2 bytes,
 * lse 4); ncclUnhandledCudaError if a launch fails.
 */
MK_API ncclResult_t mkAttention(const void *q, const void *k, const void *v, void *o, float *lse,
				int batch, int headsQ, int headsKv, int seqQ, int seqKv,
				int headDim, int causal, cudaStream_t stream);

/* ---- communicators over an NCCL communicator ---- */

/* A communicator of the device runtime, bound to one ncclComm_t and one CUDA device. */
typedef struct mk_comm *mkComm_t;

#define MK_CONFIG_UNDEF_INT  (-2147483647 - 1)
#define MK_CONFIG_UNDEF_SIZE ((size_t)0)
#define MK_CONFIG_MAGIC	     0x6d6b6366u

/*
 * Options of mkCommInit; start from MK_CONFIG_INITIALIZER and set what you need. Fields left
 * undefined take their MKERNEL_* environment value (or its default).
 */
typedef struct {
	size_t size;	      /* sizeof(mkConfig_t), set by the initializer */
	unsigned int magic;   /* MK_CONFIG_MAGIC */
	unsigned int version; /* MK_VERSION_MAJOR * 100 + MK_VERSION_MINOR */
	size_t heapBytes;     /* symmetric heap per rank (MKERNEL_SYMM_HEAP) */
	int proxyThreads;     /* host proxy threads (MKERNEL_PROXY_THREADS) */
	int queueSlots;	      /* command-queue entries, power of two (MKERNEL_CMDQ_SLOTS) */
	int timeoutMs;	      /* bound of every wait, host and device (MKERNEL_TIMEOUT) */
} mkConfig_t;

#define MK_CONFIG_INITIALIZER                                                                      \
	{                                                                                          \
		sizeof(mkConfig_t), MK_CONFIG_MAGIC, MK_VERSION_MAJOR * 100 + MK_VERSION_MINOR,    \
			MK_CONFIG_UNDEF_SIZE, MK_CONFIG_UNDEF_INT, MK_CONFIG_UNDEF_INT,            \
			MK_CONFIG_UNDEF_INT                                                        \
	}

/*
 * Collective over `nccl` (every rank calls it; every exchange goes through NCCL itself): discovers
 * nodes exactly as NCCL does (NCCL_HOSTID honoured), connects the transport between ranks, sets
 * up the symmetric heap, the GPU -> host command queue and the host proxy. config may be NULL.
 * The caller's current CUDA device must be the one `nccl` uses. When one rank's arguments are bad
 * or its setup fails, every rank's call fails (that rank's with the specific error) instead of
 * some ranks waiting in an exchange for it; each step is bounded by the comm's timeout.
 */
MK_API ncclResult_t mkCommInit(ncclComm_t nccl, const mkConfig_t *config, mkComm_t *comm);
/*
 * Collective: waits (bounded) until no rank still sends, then frees everything. Every call below
 * that takes a comm refuses, with ncclInvalidArgument and without reading it, a pointer that
 * mkCommInit did not hand out or that was destroyed or aborted: a second mkCommDestroy, an
 * mkCommAbort after it, or mkCommGetAsyncError on a destroyed comm are errors, not crashes.
 */
MK_API ncclResult_t mkCommDestroy(mkComm_t comm);
/*
 * Local: stops the proxy, makes this rank's kernels of the comm leave (they see the error; the
 * call waits for them, at most the comm's timeout), and frees everything without talking to any
 * peer, except the symmetric heap when the node has other ranks: their kernels may still read
 * it through their mapping, so it is released when the process ends.
 */
MK_API ncclResult_t mkCommAbort(mkComm_t comm);
/* ncclSuccess, or the error the proxy or a kernel of this comm hit (dead peer, timeout, ...). */
MK_API ncclResult_t mkCommGetAsyncError(mkComm_t comm, ncclResult_t *asyncError);

/*
 * Symmetric memory, collective: every rank allocates the same size in the same order and gets a
 * buffer at the same offset of its symmetric heap; peers can put into it. The pointer is usable
 * from the host and from kernels. The ranks agree before anything is kept: bad arguments (size
 * 0, ptr NULL), an exhausted heap (MKERNEL_SYMM_HEAP, mkConfig_t.heapBytes) or different sizes
 * on any rank make every rank return an error with nothing allocated, instead of leaving the
 * others waiting: ncclInvalidArgument on a rank whose own arguments were bad, ncclInvalidUsage
 * on the others and for an exhausted heap or different sizes.
 */
MK_API ncclResult_t mkMemAlloc(mkComm_t comm, size_t size, void **ptr);
MK_API ncclResult_t mkMemFree(mkComm_t comm, void *ptr);

/*
 * Context-parallel (ring) attention, forward: each rank holds seqLocal tokens of q, k, v
 * ([batch, seqLocal, heads, headDim] bf16, as mkAttention takes them) and receives o and lse for
 * its queries against the whole sequence of nranks x seqLocal tokens. Non-causal: rank r holds
 * the contiguous chunk r of the sequence. Causal: zigzag sharding, rank r holds chunks r and
 * 2R-1-r of 2R chunks of seqLocal/2 tokens (in that order), so every rank does the same work;
 * seqLocal must be even. headsQ % headsKv == 0, headDim 64 or 128; lse may be NULL. Collective
 * over comm: every rank calls with the same sizes (checked at a shape's first call: a mismatch is
 * ncclInvalidArgument on every rank). Where it pays and can (sm_90, at most 16 ranks, q, k, v
 * 16-byte aligned; MKERNEL_RING_ATTN_FUSED forces either way), one persistent kernel computes
 * attention against the local K/V block while the others arrive: node peers' blocks read through
 * their mapped heaps, other nodes' sent once per node through the proxy and shared in the node;
 * partials merged with the log-sum-exp rule. Otherwise ncclAllGather of K and V, then mkernel's
 * attention engine. The fused path keeps 2 (nnodes) x batch x seqLocal x headsKv x headDim x 2
 * bytes of the symmetric heap; the first call of a new shape sets it up (collective, synchronises
 * the host: call once before capturing a CUDA graph); later calls enqueue without host
 * synchronisation and replay under graphs. Returns ncclInvalidArgument (NULL comm or buffer, a
 * comm that is not live or of another device, sizes out of range, headDim, heads, an odd causal
 * seqLocal, misaligned buffers) with nothing launched; a dead peer shows as ncclRemoteError from
 * mkCommGetAsyncError within the comm's timeout.
 */
MK_API ncclResult_t mkRingAttention(const void *q, const void *k, const void *v, void *o,
				    float *lse, int batch, int headsQ, int headsKv, int seqLocal,
				    int headDim, int causal, mkComm_t comm, cudaStream_t stream);

/*
 * All-to-all with ncclAllToAll's meaning: block r (count elements) of sendbuff goes to rank r,
 * block r of recvbuff comes from rank r. Both buffers must come from mkMemAlloc and hold
 * count x nranks elements; a count whose size in bytes (times the ranks) does not fit 64 bits is
 * ncclInvalidArgument. Enqueued on `stream`; GPU-initiated puts through the command queue and the
 * host proxy.
 */
MK_API ncclResult_t mkAllToAll(const void *sendbuff, void *recvbuff, size_t count,
			       ncclDataType_t datatype, mkComm_t comm, cudaStream_t stream);

/*
 * C = allreduce_sum over the comm's ranks of (A @ B), every rank passing its own A (row-major
 * M x K) and B (layout as in mkGemm) and receiving the whole M x N sum in C (row-major, any
 * device memory). Collective: every rank calls it with the same M, N, K, type and layout; type
 * is ncclBfloat16, ncclFloat16 or ncclFloat32. Three paths, the calibrated cost model of the
 * policy engine choosing the cheapest that can run the call (MKERNEL_GEMM_AR_PATH forces one,
 * MKERNEL_GEMM_AR_FUSED=1 the fused one, =0 the unfused one):
 *  - fused: one persistent kernel computes the GEMM tiles, reduces them within the node through
 *    the ranks' mapped heaps as they are ready (fp32 sums of the bf16 partials) and, with several
 *    nodes, sends only each rank's node slice to the other nodes through the command queue;
 *  - one-shot (decode sizes, outputs up to 8 MiB, several ranks): the GEMM, then one kernel in
 *    which every rank publishes its partial in its heap and sums its node peers' through the
 *    mapped heaps; across nodes one put per node of each rank's slice;
 *  - unfused: the GEMM (mkGemm's choice; cuBLAS for fp16 and fp32), then ncclAllReduce on
 *    `stream` (no all-reduce with one rank).
 * The fused and one-shot paths are bf16 only, on sm_90, with nodes of equal size and a heap that
 * holds the shape; other calls take the unfused path. MKERNEL_DEBUG=INFO says which ran and why.
 * The fused and one-shot paths keep their per-shape memory in the symmetric heap; the first call
 * of a new output shape allocates it (collective, synchronises the host: call once before
 * capturing a CUDA graph, or that call takes the unfused path); later calls enqueue without host
 * synchronisation and replay under graphs. Returns ncclInvalidArgument (NULL pointers, a pointer
 * that is not a live comm, zero or too large sizes, a type other than those three, buffers not
 * aligned to their element size, a comm of another device) with nothing launched;
 * ncclRemoteError when a peer stopped answering within the comm's timeout.
 */
MK_API ncclResult_t mkGemmAllReduce(const void *a, const void *b, void *c, size_t m, size_t n,
				    size_t k, ncclDataType_t type, mkLayout_t bLayout,
				    mkComm_t comm, cudaStream_t stream);

/*
 * GEMM + reduce-scatter, the row-parallel linear layer with sequence parallelism: every rank
 * passes its own A (row-major M x K) and B (layout as in mkGemm); rank r receives rows
 * [r M / nranks, (r + 1) M / nranks) of the sum over ranks of A @ B in C (row-major M / nranks x
 * N). M must be a multiple of the ranks (else ncclInvalidArgument). Collective: every rank calls
 * it with the same M, N, K, type and layout. Where it can (bf16, sm_90, the heap holds the
 * shape, MKERNEL_GEMM_RS_FUSED and the policy engine's cost model agree) one persistent kernel
 * computes the tiles in the order their owners need them and reduces each as it is ready:
 * within the node through the mapped heaps, across nodes only the node sums, each sent once per
 * node; otherwise cuBLAS then ncclReduceScatter on `stream`. MKERNEL_DEBUG=INFO says which ran
 * and why. The fused path keeps M x N x 2 bytes of the symmetric heap (plus a landing area of
 * (nodes - 1) x M / nranks x N x 2 across nodes; one rank alone only a few KiB of flags); a new
 * shape's first call allocates it
 * (collective, synchronises the host: call once before capturing a CUDA graph). Bad arguments as
 * for mkGemmAllReduce: ncclInvalidArgument, nothing launched.
 */
MK_API ncclResult_t mkGemmReduceScatter(const void *a, const void *b, void *c, size_t m, size_t n,
					size_t k, ncclDataType_t type, mkLayout_t bLayout,
					mkComm_t comm, cudaStream_t stream);

/*
 * All-gather + GEMM, the column-parallel linear layer with sequence parallelism: C (row-major
 * M x N) = allgather(aShard) @ B, aShard being this rank's rows [r M / nranks, (r + 1) M /
 * nranks) of A (row-major M / nranks x K). aGathered (row-major M x K) may be NULL; when given
 * it receives the gathered A. M must be a multiple of the ranks. Where it can, one persistent
 * kernel gathers A chunk by chunk (node peers' shards through the mapped heaps, other nodes'
 * through the network, each shard crossing it once per node) while the GEMM consumes the rows
 * that arrived, in arrival order; otherwise ncclAllGather then cuBLAS on `stream`
 * (MKERNEL_AG_GEMM_FUSED, MKERNEL_DEBUG=INFO as above). The fused path keeps M x K x 2 bytes of
 * the symmetric heap (one rank alone: none); first call of a shape and bad arguments as above.
 */
MK_API ncclResult_t mkAllGatherGemm(const void *aShard, const void *b, void *c, void *aGathered,
				    size_t m, size_t n, size_t k, ncclDataType_t type,
				    mkLayout_t bLayout, mkComm_t comm, cudaStream_t stream);

/* ---- mixture of experts: token dispatch + expert GEMM, expert GEMM + combine ---- */

#define MK_MOE_MAX_TOPK 16

/*
 * Expert parallelism of one MoE layer on a comm; the same on every rank. Experts are sharded
 * over the ranks in order: rank r owns experts [r * E / nranks, (r + 1) * E / nranks), its
 * "local" experts 0 .. E / nranks - 1.
 */
typedef struct {
	int numExperts;		 /* E, global: a multiple of the comm's rank count */
	int topk;		 /* experts per token: 1 .. MK_MOE_MAX_TOPK */
	size_t hidden;		 /* H: row length of x and y */
	size_t inter;		 /* I: row length of out (dispatch) or of h (combine); the
				  * combine may pass another I than its dispatch (a gated MLP's
				  * h is half as wide as out), every other field must match */
	size_t maxTokensPerRank; /* the most tokens any rank passes */
	size_t maxRecv;	    /* rows of out and h on every rank: (token, expert) pairs it can take */
	mkLayout_t wLayout; /* per expert: w_up H x I, w_down I x H (RowMajorKN), or w_up I x H,
			     * w_down H x I (RowMajorNK: nn.Linear weights) */
	ncclDataType_t type; /* ncclBfloat16 */
} mkMoeConfig_t;

/*
 * Bytes of the `layout` buffer (device memory) dispatch fills and combine reads. It starts with
 * int32 recvOffsets[E / nranks + 1]: local expert e's rows of out and h are
 * [recvOffsets[e], recvOffsets[e + 1]); rows from recvOffsets[E / nranks] on are not used.
 */
MK_API ncclResult_t mkMoeLayoutSize(const mkMoeConfig_t *cfg, mkComm_t comm, size_t *bytes);

/*
 * Dispatch + up projection, collective. Each rank holds numTokens (<= maxTokensPerRank) rows of
 * x (bf16, numTokens x H) with their top-k experts topkIdx (int32 numTokens x topk, global ids,
 * -1 = no expert in that slot) and weights topkWeight (fp32 numTokens x topk). Every (token,
 * slot) pair goes to the rank owning the expert; there, out (bf16, maxRecv x I) receives
 * x[token] @ w_up[local expert], rows grouped by local expert (recvOffsets above), inside an
 * expert ordered by source rank, then token, then slot. wUp: this rank's E / nranks experts'
 * matrices, stacked. layout (mkMoeLayoutSize bytes) records where every pair went, for
 * mkMoeGemmCombine; it must stay untouched until that combine has run.
 * Fused path: counts first, then token rows straight to the expert's rank (ranks of my node by
 * stores into their mapped heaps; other nodes through the command queue and proxy, one copy per
 * destination node, fanned out there), and the expert GEMM starts on a tile as soon as its rows
 * have landed. Unfused path (chosen by the cost model, MKERNEL_MOE_FUSED=0, GPUs other than
 * sm_90, layouts the fused kernel does not take): host-planned ncclSend/ncclRecv exchange, then
 * mkGroupedGemm. MKERNEL_DEBUG=INFO says which ran and why.
 * Capacity (no pair is ever dropped): with maxRecv >= nranks x maxTokensPerRank x min(topk,
 * E / nranks) nothing can overflow and the fused path never synchronises the host (CUDA-graph
 * safe). With a smaller maxRecv the counts are first exchanged and read on the host; if any
 * rank would receive more than maxRecv pairs, every rank returns ncclInvalidUsage with a WARN
 * naming the rows needed (the largest over ranks), and no token row moves. That check needs the
 * host, so it returns ncclInvalidUsage under CUDA-graph capture; so does the unfused path.
 * Bad input: ncclInvalidArgument with a WARN and nothing launched for NULL pointers, a config
 * the comm cannot take (E % nranks, topk, sizes 0 or above INT_MAX, numTokens > maxTokensPerRank,
 * type, layout), misaligned pointers, a dead comm. Expert ids outside [-1, E) are found on the
 * device: where the host reads the counts the call returns ncclInvalidArgument naming the first
 * bad (token, slot, id); otherwise no token moves on any rank and mkCommGetAsyncError reports
 * ncclInvalidUsage.
 */
MK_API ncclResult_t mkMoeDispatchGemm(const void *x, const int *topkIdx, const float *topkWeight,
				      const void *wUp, void *out, void *layout, size_t numTokens,
				      const mkMoeConfig_t *cfg, mkComm_t comm, cudaStream_t stream);

/*
 * Down projection + combine, collective: the inverse of the mkMoeDispatchGemm that filled
 * layout. h (bf16, maxRecv x I, rows as that dispatch's out, e.g. the activation of it) times
 * w_down of each row's expert gives one H-row per (token, slot); every token's rows are weighted
 * by its topkWeight and summed into y (bf16, numTokens x H of that dispatch) on the token's home
 * rank; a token without any expert gets zeros. Fused path: the GEMM's output rows are summed
 * within each node first (one partial per token and node crosses the network), then on the home
 * rank. Paths, capacity and errors as for the dispatch (the same path is taken for both).
 */
MK_API ncclResult_t mkMoeGemmCombine(const void *h, const void *wDown, void *y, const void *layout,
				     const mkMoeConfig_t *cfg, mkComm_t comm, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif /* MKERNEL_H */
