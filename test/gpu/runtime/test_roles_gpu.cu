// SPDX-License-Identifier: Apache-2.0
/*
 * The persistent-kernel role framework on a GPU: one CTA per SM (cooperative launch), four roles
 * with task queues of different sizes and costs, every task's output checked and executed
 * exactly once. Static split from the policy engine (no controller); adaptive run starting from a
 * skewed split, where the controller must move CTAs between roles while work runs, and must
 * leave only after every worker left.
 * --quick: a quarter of the tasks (compute-sanitizer runs).
 * Exit: 0 pass, 1 fail, 77 no CUDA device.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "gpu_check.h"

extern "C" {
#include "policy.h"
}
#include "fused/runtime/roles.cuh"

static uint32_t g_div = 1; /* task counts are divided by it (--quick: 4) */

struct task_args {
	uint32_t *out;
	uint32_t *count;
	uint32_t base[MK_ROLES];
	uint32_t spin[MK_ROLES];
};

__host__ __device__ uint32_t task_value(int r, uint32_t t, uint32_t spin)
{
	uint32_t v = (uint32_t)r * 2654435761u ^ t;

	for (uint32_t i = 0; i < spin; i++)
		v = v * 1664525u + 1013904223u;
	return v;
}

__global__ void roles_kernel(struct mk_roles_state *s, int controller, struct task_args a,
			     uint64_t timeout_ns)
{
	__shared__ int role_s, go_s;
	__shared__ uint32_t task_s;
	uint32_t worker;

	if (controller && blockIdx.x == 0) {
		if (threadIdx.x == 0)
			mk_roles_controller(s, timeout_ns);
		return;
	}
	worker = blockIdx.x - (controller ? 1 : 0);
	if (threadIdx.x == 0)
		role_s = mk_roles_initial(s, worker);
	for (;;) {
		int r;
		uint32_t t;
		uint64_t c0;

		if (threadIdx.x == 0) {
			r = role_s;
			go_s = mk_roles_next(s, &r, &t);
			role_s = r;
			task_s = t;
		}
		__syncthreads();
		if (!go_s)
			break;
		r = role_s;
		t = task_s;
		c0 = clock64();
		if (threadIdx.x == 0) {
			a.out[a.base[r] + t] = task_value(r, t, a.spin[r]);
			atomicAdd(&a.count[a.base[r] + t], 1u);
		}
		__syncthreads();
		if (threadIdx.x == 0)
			mk_roles_done(s, r, (uint64_t)(clock64() - c0));
	}
	if (threadIdx.x == 0)
		mk_roles_exit(s, role_s);
}

static void run(const char *name, int controller, const int sms[MK_ROLES], const int mn[MK_ROLES],
		const int mx[MK_ROLES], int window, int max_step, int grid)
{
	const uint32_t ntasks[MK_ROLES] = { 6000 / g_div, 1500 / g_div, 1200 / g_div,
					    1200 / g_div };
	const uint32_t spin[MK_ROLES] = { 200, 6000, 1500, 3000 };
	uint32_t nworkers = (uint32_t)(grid - (controller ? 1 : 0)), total = 0, bad = 0;
	struct mk_roles_state st, *st_d;
	struct task_args a;
	uint32_t *out, *count;
	uint64_t timeout_ns = 20ull * 1000000000ull;
	void *args[4];
	char what[256];

	if (mk_roles_setup(&st, nworkers, ntasks, sms, mn, mx, window, max_step) != 0) {
		expect(0, "mk_roles_setup");
		return;
	}
	for (int r = 0; r < MK_ROLES; r++) {
		a.base[r] = total;
		a.spin[r] = spin[r];
		total += ntasks[r];
	}
	CK(cudaMalloc((void **)&st_d, sizeof(st)));
	CK(cudaMalloc((void **)&a.out, total * 4));
	CK(cudaMalloc((void **)&a.count, total * 4));
	CK(cudaMemset(a.count, 0, total * 4));
	CK(cudaMemcpy(st_d, &st, sizeof(st), cudaMemcpyHostToDevice));
	args[0] = &st_d;
	args[1] = &controller;
	args[2] = &a;
	args[3] = &timeout_ns;
	CK(cudaLaunchCooperativeKernel((void *)roles_kernel, grid, 128, args, 0, 0));
	CK(cudaDeviceSynchronize());
	CK(cudaMemcpy(&st, st_d, sizeof(st), cudaMemcpyDeviceToHost));
	out = (uint32_t *)malloc(total * 4);
	count = (uint32_t *)malloc(total * 4);
	CK(cudaMemcpy(out, a.out, total * 4, cudaMemcpyDeviceToHost));
	CK(cudaMemcpy(count, a.count, total * 4, cudaMemcpyDeviceToHost));
	for (int r = 0; r < MK_ROLES; r++) {
		for (uint32_t t = 0; t < ntasks[r]; t++) {
			bad += count[a.base[r] + t] != 1 ||
			       out[a.base[r] + t] != task_value(r, t, spin[r]);
		}
	}
	snprintf(what, sizeof(what),
		 "%s: %u workers, init %d/%d/%d/%d, %u wrong or repeated tasks, %u switches "
		 "(%u rebalances), %u decisions, error %d",
		 name, nworkers, st.init[0], st.init[1], st.init[2], st.init[3], bad, st.switches,
		 st.rebalances, st.decisions, st.error);
	expect(bad == 0 && st.error == 0 && st.exited == nworkers, what);
	if (controller) {
		expect(st.controller_saw_exited == nworkers,
		       "controller left after every worker had left");
		expect(st.rebalances > 0 && st.decisions > 0,
		       "controller moved CTAs between roles while work ran");
	}
	cudaFree(st_d);
	cudaFree(a.out);
	cudaFree(a.count);
	free(out);
	free(count);
}

int main(int argc, char **argv)
{
	struct mk_policy_op_query q;
	struct mk_policy_sm_split sp;
	int ndev = 0, nsm = 0, per_sm = 0;
	const int skew[MK_ROLES] = { 1, 0, 0, 0 }, zero[MK_ROLES] = { 0, 0, 0, 0 };

	if (argc > 1 && strcmp(argv[1], "--quick") == 0)
		g_div = 4;
	if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
		printf("no CUDA device: skipped\n");
		return 77;
	}
	CK(cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, 0));
	CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, roles_kernel, 128, 0));
	if (per_sm < 1) {
		expect(0, "roles kernel fits on an SM");
		return 1;
	}
	memset(&q, 0, sizeof(q));
	q.op = MK_FUSED_GEMM_ALLREDUCE;
	q.m = q.n = 8192;
	q.k = 512;
	q.nnodes = 2;
	q.nranks = 16;
	q.sms = nsm;
	if (mk_policy_sm_split(&q, &sp) != 0) {
		expect(0, "policy engine answers the SM split");
		return 1;
	}
	printf("policy split for %d SMs: %d/%d/%d/%d (adaptive %d, window %d, step %d)\n", nsm,
	       sp.sms[0], sp.sms[1], sp.sms[2], sp.sms[3], sp.adaptive, sp.window, sp.max_step);
	run("static policy split", 0, sp.sms, sp.min_sms, sp.max_sms, sp.window,
	    sp.max_step > 0 ? sp.max_step : 1, nsm);
	run("adaptive from all-compute", 1, skew, zero, zero, 64, 8, nsm);
	run("adaptive, policy bounds", 1, sp.sms, sp.min_sms, sp.max_sms,
	    sp.window > 0 ? sp.window : 64, sp.max_step > 0 ? sp.max_step : 4, nsm);
	/* Half the SMs, as a rank sharing the GPU under MPS would launch. */
	run("adaptive, half the SMs", 1, skew, zero, zero, 64, 8, nsm / 2);
	printf("%d failure(s)\n", failures);
	return failures ? 1 : 0;
}
