/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The policy engine: one answer, from one set of inputs, to two questions.
 *
 *  1. NCCL collectives: which algorithm and protocol (a cost table of float[algo][proto] where
 *     a negative entry means "never pick", lower is preferred) and how many channels (CTAs).
 *  2. Fused ops: how many SMs each role of a persistent kernel gets for op X at shape S on
 *     topology T, plus the on-GPU controller's parameters.
 *
 * Inputs, highest precedence first: MKERNEL_TUNER_* environment variables, the rules file named
 * by MKERNEL_TUNER_CONFIG, the built-in cost model / static split table, and finally NCCL's own
 * choice (the table is left alone). Everything here is plain C with no NCCL spellings;
 * tuner/tuner_abi.c maps NCCL's ABI onto it. Indices below equal NCCL's so the mapping is a cast.
 *
 * Thread rules: mk_policy_create/destroy may run concurrently for different communicators;
 * one policy's mk_policy_coll() is called by one thread at a time (NCCL's enqueue path) and
 * never allocates, blocks or logs beyond one-time messages. mk_policy_sm_split() is thread safe.
 */
#ifndef MK_TUNER_POLICY_H
#define MK_TUNER_POLICY_H

#include <stddef.h>
#include <stdint.h>

/* Collectives the policy is asked about (same numbering as NCCL's function index). */
enum mk_coll {
	MK_COLL_BROADCAST = 0,
	MK_COLL_REDUCE = 1,
	MK_COLL_ALLGATHER = 2,
	MK_COLL_REDUCESCATTER = 3,
	MK_COLL_ALLREDUCE = 4,
	MK_COLL_COUNT = 5,
};

/* Cost-table rows. MK_ALGO_ANY (-1) in a rule means "not forced". */
enum mk_algo {
	MK_ALGO_ANY = -1,
	MK_ALGO_TREE = 0,
	MK_ALGO_RING = 1,
	MK_ALGO_COLLNET_DIRECT = 2,
	MK_ALGO_COLLNET_CHAIN = 3,
	MK_ALGO_NVLS = 4,
	MK_ALGO_NVLS_TREE = 5,
	MK_ALGO_PAT = 6,
	MK_ALGO_COUNT = 7,
};

/* Cost-table columns. */
enum mk_proto {
	MK_PROTO_ANY = -1,
	MK_PROTO_LL = 0,
	MK_PROTO_LL128 = 1,
	MK_PROTO_SIMPLE = 2,
	MK_PROTO_COUNT = 3,
};

/* Which input decided (returned by mk_policy_coll, recorded in an SM split). */
enum mk_policy_src {
	MK_POLICY_SRC_NONE = 0, /* undecided: NCCL's own choice stands */
	MK_POLICY_SRC_ENV,	/* an MKERNEL_TUNER_* variable */
	MK_POLICY_SRC_RULE,	/* a line of the rules file */
	MK_POLICY_SRC_MODEL,	/* the cost model or the static split table */
};

/* Topology of one communicator, as the tuner learns it at init. */
struct mk_policy_topo {
	int nranks;
	int nnodes;
	int ranks_per_node; /* largest NVLink domain; 0 = derive as ceil(nranks / nnodes) */
};

struct mk_policy;

/* Create the policy of one communicator: reads the environment and the rules file (once per
 * process, shared). Returns 0, -EINVAL (nonsense topology) or -ENOMEM. */
int mk_policy_create(const struct mk_policy_topo *topo, struct mk_policy **out);
/*
 * 0, or -EBADF for a pointer that is not a live policy (destroyed already, or never created):
 * it is refused without being read. Destroying the last live policy also releases the shared
 * snapshot of the inputs (the next create reads them again), so nothing outlives finalize.
 */
int mk_policy_destroy(struct mk_policy *p);

/* What mk_policy_coll decided, for logs and tests. */
struct mk_policy_choice {
	enum mk_policy_src src; /* who chose algo/proto; NONE = table untouched */
	int algo;		/* MK_ALGO_ANY when undecided */
	int proto;		/* MK_PROTO_ANY when undecided */
	int channels;		/* written to *nchannels; 0 = not written */
	enum mk_policy_src channels_src;
	int rule_line; /* line of the matching rule, 0 if none */
};

/*
 * Decide one collective. table is float[nalgo][nproto], row-major. The chosen entry is set to
 * 0.0 (and other non-negative zero entries raised just above it, so ties cannot steal it);
 * negative entries are never written or chosen. If nothing decides, the table is untouched.
 * *nchannels is written only when an input asks for a channel count (0 keeps NCCL's choice).
 * Never fails; choice may be NULL.
 */
enum mk_policy_src mk_policy_coll(struct mk_policy *p, int coll, uint64_t nbytes, int pipeops,
				  int regbuff, float *table, int nalgo, int nproto, int *nchannels,
				  struct mk_policy_choice *choice);

/* ---- fused ops -------------------------------------------------------------------------- */

enum mk_fused_op {
	MK_FUSED_GEMM_ALLREDUCE = 0,
	MK_FUSED_GEMM_REDUCESCATTER = 1,
	MK_FUSED_ALLGATHER_GEMM = 2,
	MK_FUSED_RING_ATTENTION = 3,
	MK_FUSED_MOE_DISPATCH = 4,
	MK_FUSED_MOE_COMBINE = 5,
	MK_FUSED_OP_COUNT = 6,
};

/* CTA roles of a fused persistent kernel. */
enum mk_sm_role {
	MK_ROLE_COMPUTE = 0, /* GEMM / attention tiles */
	MK_ROLE_INTRA = 1,   /* intra-node comm over NVLink peer pointers */
	MK_ROLE_SEND = 2,    /* inter-node send: pushes put+signal commands to the host proxy */
	MK_ROLE_REDUCE = 3,  /* inter-node reduce + publish as remote slices arrive */
	MK_ROLE_COUNT = 4,
};

/*
 * The question a fused op asks. Shape meaning per op: GEMM ops use m, n, k of the local GEMM;
 * ring attention uses m = sequence length per rank, n = heads x head dim, k = batch; MoE uses
 * m = (token, expert) pairs per rank (tokens x top-k), n = hidden size, k = the experts'
 * intermediate size. Unused fields are 0.
 */
struct mk_policy_op_query {
	enum mk_fused_op op;
	uint64_t m, n, k;
	int dtype_bytes; /* 2 for bf16; 0 = 2 */
	int nnodes;
	int nranks;
	int ranks_per_node; /* 0 = ceil(nranks / nnodes) */
	int sms;	    /* SMs of the GPU the kernel runs on; 0 = MKERNEL_TUNER_GPU_SMS */
	/* ring attention: key/value heads x head dim (0 = n), causal halves the work */
	uint64_t kv_n;
	int causal;
};

/* How a fused op should run a call (the cost model's cheapest estimate). */
enum mk_policy_path {
	MK_PATH_UNFUSED = 0, /* compute, then the NCCL collective (nothing with one rank) */
	MK_PATH_FUSED = 1,   /* the persistent fused kernel */
	MK_PATH_ONESHOT = 2, /* compute, then a one-shot exchange through peers' memory */
};

/* The answer: initial split plus the controller's bounds and cadence. */
struct mk_policy_sm_split {
	int sms[MK_ROLE_COUNT];	    /* initial CTAs per role; sum <= query sms */
	int min_sms[MK_ROLE_COUNT]; /* controller never goes below (0 for unused roles) */
	int max_sms[MK_ROLE_COUNT]; /* controller never goes above (0 for unused roles) */
	int window;		    /* tasks sampled per role before the controller moves */
	int max_step;		    /* most CTAs moved between roles per window */
	int adaptive;		    /* 1: run the on-GPU controller; 0: keep the split static */
	enum mk_policy_src src;	    /* who decided sms[] */
	int rule_line;		    /* line of the rule that matched, 0 if none */
	/*
	 * Ops the cost model covers, with m, n, k given: the cheapest path (calibrated GEMM times
	 * per shape class, collective times from the link model, the fused call's measured fixed
	 * cost; model.h), fuse = (path == MK_PATH_FUSED), and the estimates in us (oneshot_us < 0:
	 * the op has no one-shot path or the output is too large for it). Other ops: path
	 * MK_PATH_UNFUSED, fuse 0, estimates 0. MoE ops: the fused kernel against the exchange
	 * read on the host, then the expert GEMMs (fuse, fused_us, unfused_us).
	 */
	int fuse;
	double fused_us, unfused_us;
	int path;
	double oneshot_us;
};

/* Answer the fused op's question. 0, or -EINVAL for a bad query (unknown op, sms < 8, ...). */
int mk_policy_sm_split(const struct mk_policy_op_query *q, struct mk_policy_sm_split *out);

/* Drop the cached environment and rules so the next create re-reads them (tests, tools).
 * Policies alive keep the inputs they were created with. */
void mk_policy_reload(void);

#endif /* MK_TUNER_POLICY_H */
