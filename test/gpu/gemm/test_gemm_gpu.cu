/* SPDX-License-Identifier: Apache-2.0 */
/*
 * gpu suite, component gemm: mkernel's GEMM engine and mkGemm against cuBLAS on the device.
 *
 * Reference: cuBLAS with the same bf16 inputs and an fp32 output (CUBLAS_COMPUTE_32F). Bound per
 * element: |out - ref| <= 2^-8 |ref| + 1e-5 K. The first term is the engine's one rounding of
 * an fp32 sum to bf16 (at most half an ulp, 2^-9 relative; 2^-8 leaves room for a tie rounded
 * the other way after a different fp32 summation order). The second covers fp32 accumulation-
 * order differences between two correct kernels: inputs are uniform in [-1, 1], partial sums grow
 * like sqrt(K), and fp32 reordering errors stay orders of magnitude under 1e-5 K, while a lost or
 * repeated k-block moves an element by about sqrt(64)/3 ~ 2.7. Outputs are poisoned with NaN
 * before each run, so an unwritten element fails.
 *
 * Cases: shapes (square, tall, wide, tails in M, N and K, K = 1 and K = 8, tiny M) x both B
 * layouts through mkGemm and, where the engine's alignment rules hold, through the engine
 * directly; every engine variant (64 and 128-row, 128 and 256-column tiles, 1 to 16 k-splits)
 * on decode and tail shapes through mkGemm's dispatch with the variant forced, asserting through
 * the dispatch's record that the variant ran; the skinny kernel the same way (and the calls it
 * refuses going to cuBLAS); split-K properties (deterministic, counters reset
 * between launches, ready flags once per tile, dynamic tickets); the dispatch's own choice, its
 * knob and graph capture; tile order and CTA subset hooks (bitwise identical results for any
 * order, any subset, a dynamic ticket counter and an SM budget changed by a concurrent controller
 * kernel); ready flags (raised exactly once per tile, and a concurrent consumer kernel that
 * acquires each flag finds the whole tile already correct); epilogue modes (accumulate, atomic
 * add, two outputs).
 *
 * One run says as much as it can: a failed check prints the first wrong element (row, column,
 * value, reference) and the run goes on; every launch is waited for with a host-side bound
 * (T_HANG_S), and a hang prints the case and exits at once (a hung kernel cannot be recovered),
 * as does a process-wide alarm.
 *
 * Usage: test-gemm-gpu [--quick]   (--quick: small shapes only, for compute-sanitizer)
 * Exit: 0 pass, 1 fail, 2 hang, 77 no CUDA device.
 */
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "mkernel.h"
#include "fused/bench/fill.cuh"
#include "fused/gemm/gemm.h"
#include "fused/gemm/skinny.h"
#include "fused/ops/gemm_dispatch.h"
#include "fused/ops/gemm_fallback.h"
#include "fused/gemm/gemm_engine.cuh"
extern "C" {
#include "mk/param.h"
}

#define T_HANG_S  20  /* one launch may take this long before the run is declared hung */
#define T_ALARM_S 230 /* the whole run (gemm-run.sh allows 240 s) */

static int t_failed, t_passed, t_quick;
static cublasHandle_t t_blas;
static cudaStream_t t_st;
static char t_case[200] = "start"; /* what runs now, for hang reports */

static void t_alarm(int sig)
{
	static const char msg[] = "HANG: the whole run exceeded its time; case: ";

	(void)sig;
	(void)!write(2, msg, sizeof(msg) - 1);
	(void)!write(2, t_case, strnlen(t_case, sizeof(t_case)));
	(void)!write(2, "\n", 1);
	_exit(2);
}

/* Wait for the stream with a bound: a kernel that never ends is reported, then the process ends
 * (nothing else can run on a device with a hung kernel). */
static void t_sync(cudaStream_t st)
{
	struct timespec t0, now;
	cudaError_t e;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	while ((e = cudaStreamQuery(st)) == cudaErrorNotReady) {
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec - t0.tv_sec > T_HANG_S) {
			fprintf(stderr, "HANG: %s did not finish in %d s\n", t_case, T_HANG_S);
			fflush(stdout);
			_exit(2);
		}
		usleep(100);
	}
	if (e != cudaSuccess) {
		fprintf(stderr, "CUDA error after %s: %s\n", t_case, cudaGetErrorString(e));
		exit(1);
	}
}

#define T_CHECK_CUDA(x)                                                                         \
	do {                                                                                    \
		cudaError_t e_ = (x);                                                           \
		if (e_ != cudaSuccess) {                                                        \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x,              \
				cudaGetErrorString(e_));                                        \
			exit(1);                                                                \
		}                                                                               \
	} while (0)

static void t_report(int ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void t_report(int ok, const char *fmt, ...)
{
	va_list ap;

	printf("%s ", ok ? "ok  " : "FAIL");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	if (ok)
		t_passed++;
	else
		t_failed++;
}

struct t_buf {
	__nv_bfloat16 *a, *b, *c;
	float *ref;
	int m, n, k, b_nk;
};

static void t_alloc(struct t_buf *t, int m, int n, int k, int b_nk, uint32_t seed)
{
	t->m = m;
	t->n = n;
	t->k = k;
	t->b_nk = b_nk;
	T_CHECK_CUDA(cudaMalloc((void **)&t->a, (size_t)m * k * 2 + 16));
	T_CHECK_CUDA(cudaMalloc((void **)&t->b, (size_t)k * n * 2 + 16));
	T_CHECK_CUDA(cudaMalloc((void **)&t->c, (size_t)m * n * 2 + 16));
	T_CHECK_CUDA(cudaMalloc((void **)&t->ref, (size_t)m * n * 4));
	mk_fill_bf16<<<512, 256, 0, t_st>>>(t->a, (size_t)m * k, seed);
	mk_fill_bf16<<<512, 256, 0, t_st>>>(t->b, (size_t)k * n, seed * 7 + 1);
	T_CHECK_CUDA(cudaGetLastError());
}

static void t_free(struct t_buf *t)
{
	cudaFree(t->a);
	cudaFree(t->b);
	cudaFree(t->c);
	cudaFree(t->ref);
}

/* fp32 reference through cuBLAS. */
static void t_reference(struct t_buf *t)
{
	const float one = 1.0f, zero = 0.0f;
	cublasStatus_t s;

	s = cublasGemmEx(t_blas, t->b_nk ? CUBLAS_OP_T : CUBLAS_OP_N, CUBLAS_OP_N, t->n, t->m, t->k,
			 &one, t->b, CUDA_R_16BF, t->b_nk ? t->k : t->n, t->a, CUDA_R_16BF, t->k,
			 &zero, t->ref, CUDA_R_32F, t->n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
	if (s != CUBLAS_STATUS_SUCCESS) {
		fprintf(stderr, "reference cublasGemmEx failed: %d\n", (int)s);
		exit(1);
	}
}

/* Count elements outside the bound: |c - (scale * ref + base)| <= rtol |expect| + atol; keep
 * the first (lowest index) one. st[0] = count, st[1] = first index. */
__global__ void t_compare(const __nv_bfloat16 *c, const float *ref, const __nv_bfloat16 *base,
			  float scale, size_t n, float rtol, float atol, unsigned long long *st,
			  float *worst)
{
	for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
	     i += (size_t)gridDim.x * blockDim.x) {
		float expect = scale * ref[i] + (base != NULL ? __bfloat162float(base[i]) : 0.0f);
		float got = __bfloat162float(c[i]);
		float err = fabsf(got - expect);

		if (!(err <= rtol * fabsf(expect) + atol)) {
			atomicAdd(&st[0], 1ull);
			atomicMin(&st[1], (unsigned long long)i);
			atomicMax((int *)worst, __float_as_int(isnan(err) ? 1e30f : err));
		}
	}
}

static unsigned long long t_check(const struct t_buf *t, const __nv_bfloat16 *c,
				  const __nv_bfloat16 *base, float scale, float rtol, float *worst)
{
	unsigned long long *d, h[2] = { 0, ~0ull };
	float *w, hw = 0;

	T_CHECK_CUDA(cudaMalloc((void **)&d, sizeof(h)));
	T_CHECK_CUDA(cudaMalloc((void **)&w, sizeof(*w)));
	T_CHECK_CUDA(cudaMemcpyAsync(d, h, sizeof(h), cudaMemcpyHostToDevice, t_st));
	T_CHECK_CUDA(cudaMemsetAsync(w, 0, sizeof(*w), t_st));
	t_compare<<<512, 256, 0, t_st>>>(c, t->ref, base, scale, (size_t)t->m * t->n, rtol,
					 1e-5f * t->k, d, w);
	T_CHECK_CUDA(cudaMemcpyAsync(h, d, sizeof(h), cudaMemcpyDeviceToHost, t_st));
	T_CHECK_CUDA(cudaMemcpyAsync(&hw, w, sizeof(hw), cudaMemcpyDeviceToHost, t_st));
	t_sync(t_st);
	if (h[0] != 0) {
		/* the first wrong element, with what it should be */
		const size_t i = h[1];
		__nv_bfloat16 got, bv = __float2bfloat16(0.0f);
		float want;

		T_CHECK_CUDA(cudaMemcpy(&got, c + i, 2, cudaMemcpyDeviceToHost));
		T_CHECK_CUDA(cudaMemcpy(&want, t->ref + i, 4, cudaMemcpyDeviceToHost));
		if (base != NULL)
			T_CHECK_CUDA(cudaMemcpy(&bv, base + i, 2, cudaMemcpyDeviceToHost));
		printf("     first wrong element: row %zu col %zu: %g, expected %g (%s)\n",
		       i / (size_t)t->n, i % (size_t)t->n, (double)__bfloat162float(got),
		       (double)(scale * want + __bfloat162float(bv)), t_case);
	}
	cudaFree(d);
	cudaFree(w);
	*worst = hw;
	return h[0];
}

static void t_poison(void *p, size_t bytes)
{
	T_CHECK_CUDA(cudaMemsetAsync(p, 0xFF, bytes, t_st)); /* bf16 0xFFFF = NaN */
}

static int t_engine(const struct t_buf *t, const struct mk_gemm_launch *tmpl, void *c)
{
	struct mk_gemm_launch l;

	if (tmpl != NULL) {
		l = *tmpl;
	} else {
		memset(&l, 0, sizeof(l));
		mk_gemm_args_init(&l.args, t->m, t->n, t->k, t->b_nk ? MK_GEMM_B_NK : MK_GEMM_B_KN,
				  c);
	}
	l.a = t->a;
	l.b = t->b;
	return mk_gemm_run(&l, t_st);
}

/* One shape, one layout: mkGemm always; the engine directly where its rules hold. */
static void t_shape(int m, int n, int k, int b_nk, int engine_ok)
{
	struct t_buf t;
	struct mk_gemm_args args;
	const char *why = NULL;
	unsigned long long bad;
	float worst;
	ncclResult_t r;

	t_alloc(&t, m, n, k, b_nk, (uint32_t)(m * 131 + n * 7 + k));
	t_reference(&t);
	mk_gemm_args_init(&args, m, n, k, b_nk ? MK_GEMM_B_NK : MK_GEMM_B_KN, t.c);
	int eligible = mk_gemm_check(t.a, t.b, &args, &why) == 0;

	t_poison(t.c, (size_t)m * n * 2);
	r = mkGemm(t.a, t.b, t.c, m, n, k, ncclBfloat16,
		   b_nk ? mkLayoutRowMajorNK : mkLayoutRowMajorKN, t_st);
	t_sync(t_st);
	bad = r == ncclSuccess ? t_check(&t, t.c, NULL, 1.0f, 1.0f / 256, &worst) : 1;
	t_report(r == ncclSuccess && bad == 0,
		 "mkGemm %5d x %5d x %5d B=%s path=%s: %llu bad, worst err %.3g", m, n, k,
		 b_nk ? "NK" : "KN", eligible && engine_ok ? "engine" : "cuBLAS", bad, worst);

	if (eligible && engine_ok) {
		t_poison(t.c, (size_t)m * n * 2);
		int rc = t_engine(&t, NULL, t.c);

		t_sync(t_st);
		bad = rc == 0 ? t_check(&t, t.c, NULL, 1.0f, 1.0f / 256, &worst) : 1;
		t_report(rc == 0 && bad == 0, "engine %5d x %5d x %5d B=%s: %llu bad, worst err %.3g",
			 m, n, k, b_nk ? "NK" : "KN", bad, worst);
	} else if (!eligible) {
		printf("     (engine rule: %s)\n", why);
	}
	t_free(&t);
}

static int t_bitwise_equal(const void *x, const void *y, size_t bytes)
{
	void *hx = malloc(bytes), *hy = malloc(bytes);
	int eq;

	T_CHECK_CUDA(cudaMemcpy(hx, x, bytes, cudaMemcpyDeviceToHost));
	T_CHECK_CUDA(cudaMemcpy(hy, y, bytes, cudaMemcpyDeviceToHost));
	eq = memcmp(hx, hy, bytes) == 0;
	free(hx);
	free(hy);
	return eq;
}

/* Controller: lowers and raises the SM budget as tiles become ready (flags), like an on-GPU
 * controller moving SMs between roles. Records how many tiles were ready at its first look. */
__global__ void t_controller(const unsigned int *ready, int tiles, int *active, int full,
			     int *first_seen)
{
	long long start = clock64();
	int stage = 0, first = -1;

	while (stage < 3 && clock64() - start < 20000000000ll) {
		int done = 0;

		for (int i = 0; i < tiles; i++)
			done += *(volatile const unsigned int *)&ready[i] != 0;
		if (first < 0)
			first = done;
		if (stage == 0 && done >= tiles / 4) {
			atomicExch(active, full / 3);
			stage = 1;
		} else if (stage == 1 && done >= tiles / 2) {
			atomicExch(active, 2);
			stage = 2;
		} else if (stage == 2 && done >= (3 * tiles) / 4) {
			atomicExch(active, full);
			stage = 3;
		}
		__nanosleep(1000);
	}
	*first_seen = first;
}

/* Consumer: for each of its tiles, acquire the ready flag, then check the tile against `want`.
 * Counts tiles first seen not ready (proof of overlap) and wrong elements. */
__global__ void t_consumer(const unsigned int *ready, const __nv_bfloat16 *c,
			   const __nv_bfloat16 *want, int m, int n, int tiles_n, int tiles,
			   unsigned long long *wrong, unsigned int *not_ready_seen,
			   unsigned int *timeouts)
{
	__shared__ int go;

	for (int tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
		if (threadIdx.x == 0) {
			long long start = clock64();
			unsigned int v;
			int first = 1;

			go = 1;
			for (;;) {
				asm volatile("ld.acquire.gpu.global.u32 %0, [%1];"
					     : "=r"(v)
					     : "l"(&ready[tile])
					     : "memory");
				if (v != 0)
					break;
				if (first)
					atomicAdd(not_ready_seen, 1u);
				first = 0;
				if (clock64() - start > 20000000000ll) {
					atomicAdd(timeouts, 1u);
					go = 0;
					break;
				}
			}
		}
		__syncthreads();
		if (go) {
			int r0 = (tile / tiles_n) * MK_GEMM_BM, c0 = (tile % tiles_n) * MK_GEMM_BN;
			unsigned long long local = 0;

			for (int i = threadIdx.x; i < MK_GEMM_BM * MK_GEMM_BN; i += blockDim.x) {
				int r = r0 + i / MK_GEMM_BN, col = c0 + i % MK_GEMM_BN;
				size_t off = (size_t)r * n + col;

				if (r < m && col < n &&
				    *(const unsigned short *)&c[off] !=
					    *(const unsigned short *)&want[off])
					local++;
			}
			if (local)
				atomicAdd(wrong, local);
		}
		__syncthreads();
	}
}

/*
 * One kernel, two roles, no second launch: CTAs below `late` first act as another role (here:
 * wait until a quarter of the tiles are published), then join the compute role; the others
 * compute from the start. With dynamic tickets the late CTAs take whatever tiles are left.
 */
extern "C" __global__ void __launch_bounds__(MK_GEMM_THREADS, 1)
	t_two_role_kernel(const __grid_constant__ struct mk_gemm_tmaps maps,
			  const __grid_constant__ struct mk_gemm_args args, int late,
			  unsigned int *joined)
{
	extern __shared__ unsigned char t_dyn_smem[];
	const int tiles = args.tiles_m * args.tiles_n;

	if ((int)blockIdx.x < late) {
		if (threadIdx.x == 0) {
			long long start = clock64();
			int done = 0;

			while (done < tiles / 4 && clock64() - start < 20000000000ll) {
				done = 0;
				for (int i = 0; i < tiles; i++)
					done += mk_ld_acquire_gpu_u32(&args.epi.ready[i]) != 0;
			}
			atomicAdd(joined, 1u);
		}
		__syncthreads();
		mk_gemm_role(&args, &maps, gridDim.x - late + blockIdx.x, gridDim.x, t_dyn_smem, 1);
	} else {
		mk_gemm_role(&args, &maps, blockIdx.x - late, gridDim.x, t_dyn_smem, 1);
	}
}

static void t_hooks(int sms)
{
	const int m = t_quick ? 700 : 2000, n = t_quick ? 900 : 3000, k = t_quick ? 192 : 520;
	struct t_buf t;
	struct mk_gemm_launch l;
	__nv_bfloat16 *c0, *c1;
	unsigned int *counter, *ready, *h_ready;
	int *order, *h_order, *active, *first_seen;
	size_t cbytes = (size_t)m * n * 2;
	int tiles, tm, tn;

	t_alloc(&t, m, n, k, 1, 4242);
	t_reference(&t);
	memset(&l, 0, sizeof(l));
	mk_gemm_args_init(&l.args, m, n, k, MK_GEMM_B_NK, NULL);
	tm = l.args.tiles_m;
	tn = l.args.tiles_n;
	tiles = tm * tn;
	T_CHECK_CUDA(cudaMalloc((void **)&c0, cbytes));
	T_CHECK_CUDA(cudaMalloc((void **)&c1, cbytes));
	T_CHECK_CUDA(cudaMalloc((void **)&counter, sizeof(*counter)));
	T_CHECK_CUDA(cudaMalloc((void **)&ready, tiles * sizeof(*ready)));
	T_CHECK_CUDA(cudaMalloc((void **)&order, tiles * sizeof(*order)));
	T_CHECK_CUDA(cudaMalloc((void **)&active, sizeof(*active)));
	T_CHECK_CUDA(cudaMalloc((void **)&first_seen, sizeof(*first_seen)));
	h_order = (int *)malloc(tiles * sizeof(*h_order));
	h_ready = (unsigned int *)malloc(tiles * sizeof(*h_ready));

	/* The default run is the bitwise reference for every hook variant. */
	t_poison(c0, cbytes);
	l.args.epi.out[0] = c0;
	int rc = t_engine(&t, &l, c0);
	float worst;
	unsigned long long bad;

	t_sync(t_st);
	bad = rc == 0 ? t_check(&t, c0, NULL, 1.0f, 1.0f / 256, &worst) : 1;
	t_report(rc == 0 && bad == 0, "hooks base %dx%dx%d (%d tiles): %llu bad", m, n, k, tiles,
		 bad);

	/* Orders x subsets x static/dynamic tickets. */
	const int subsets[] = { 1, 3, 7, 66, sms - 1, sms };
	const char *order_names[] = { "default", "reversed", "random", "slice-first" };

	for (int o = 0; o < 4; o++) {
		for (int i = 0; i < tiles; i++)
			h_order[i] = i;
		if (o == 1) {
			for (int i = 0; i < tiles; i++)
				h_order[i] = tiles - 1 - i;
		} else if (o == 2) {
			srand(7);
			for (int i = tiles - 1; i > 0; i--) {
				int j = rand() % (i + 1), x = h_order[i];

				h_order[i] = h_order[j];
				h_order[j] = x;
			}
		} else if (o == 3) {
			/* 'this GPU's slice first': tile columns of slice 2 of 4, then the rest. */
			int w = 0, lo = (2 * tn) / 4, hi = (3 * tn) / 4;

			for (int i = 0; i < tiles; i++)
				if (i % tn >= lo && i % tn < hi)
					h_order[w++] = i;
			for (int i = 0; i < tiles; i++)
				if (!(i % tn >= lo && i % tn < hi))
					h_order[w++] = i;
		}
		T_CHECK_CUDA(cudaMemcpy(order, h_order, tiles * sizeof(int), cudaMemcpyHostToDevice));
		for (size_t s = 0; s < sizeof(subsets) / sizeof(subsets[0]); s++) {
			for (int dyn = 0; dyn < 2; dyn++) {
				struct mk_gemm_launch v = l;

				if (t_quick && s % 2)
					continue;
				v.ctas = subsets[s];
				v.args.sched.order = o == 0 ? NULL : order;
				v.args.epi.out[0] = c1;
				if (dyn) {
					T_CHECK_CUDA(cudaMemsetAsync(counter, 0, 4, t_st));
					v.args.sched.counter = counter;
				}
				t_poison(c1, cbytes);
				rc = t_engine(&t, &v, c1);
				t_sync(t_st);
				t_report(rc == 0 && t_bitwise_equal(c0, c1, cbytes),
					 "order %-11s ctas %3d %s tickets: bitwise equal",
					 order_names[o], subsets[s], dyn ? "dynamic" : "static ");
			}
		}
	}

	/* SM budget moved by a concurrent controller while the kernel runs, plus ready flags. */
	{
		struct mk_gemm_launch v = l;
		cudaStream_t side;
		int full = sms - 4, h_first = -1;

		T_CHECK_CUDA(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
		T_CHECK_CUDA(cudaMemsetAsync(counter, 0, 4, t_st));
		T_CHECK_CUDA(cudaMemsetAsync(ready, 0, tiles * 4, t_st));
		T_CHECK_CUDA(cudaMemcpyAsync(active, &full, 4, cudaMemcpyHostToDevice, t_st));
		t_poison(c1, cbytes);
		t_sync(t_st);
		t_controller<<<1, 1, 0, side>>>(ready, tiles, active, full, first_seen);
		v.ctas = full;
		v.args.sched.counter = counter;
		v.args.sched.active = active;
		v.args.sched.order = order;
		v.args.epi.out[0] = c1;
		v.args.epi.ready = ready;
		rc = t_engine(&t, &v, c1);
		t_sync(t_st);
		t_sync(side);
		T_CHECK_CUDA(cudaMemcpy(h_ready, ready, tiles * 4, cudaMemcpyDeviceToHost));
		T_CHECK_CUDA(cudaMemcpy(&h_first, first_seen, 4, cudaMemcpyDeviceToHost));
		int once = 1;

		for (int i = 0; i < tiles; i++)
			once &= h_ready[i] == 1;
		t_report(rc == 0 && t_bitwise_equal(c0, c1, cbytes) && once,
			 "SM budget %d -> %d -> 2 -> %d during the run: bitwise equal, flags once "
			 "(controller first saw %d/%d tiles ready)",
			 full, full / 3, full, h_first, tiles);
		cudaStreamDestroy(side);
	}

	/* Ready flags: a consumer kernel on 16 CTAs acquires each flag and checks the tile. */
	{
		struct mk_gemm_launch v = l;
		cudaStream_t side;
		unsigned long long *wrong, h_wrong = 0;
		unsigned int *stats, h_stats[2] = { 0, 0 };
		const int consumers = 16, gemm_ctas = sms - consumers - 4;

		T_CHECK_CUDA(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
		T_CHECK_CUDA(cudaMalloc((void **)&wrong, sizeof(*wrong)));
		T_CHECK_CUDA(cudaMalloc((void **)&stats, 2 * sizeof(*stats)));
		T_CHECK_CUDA(cudaMemset(wrong, 0, sizeof(*wrong)));
		T_CHECK_CUDA(cudaMemset(stats, 0, 2 * sizeof(*stats)));
		T_CHECK_CUDA(cudaMemset(ready, 0, tiles * 4));
		T_CHECK_CUDA(cudaMemset(c1, 0xFF, cbytes));
		T_CHECK_CUDA(cudaDeviceSynchronize());
		t_consumer<<<consumers, 256, 0, side>>>(ready, c1, c0, m, n, tn, tiles, wrong,
							&stats[0], &stats[1]);
		v.ctas = gemm_ctas > 1 ? gemm_ctas : 1;
		v.args.epi.out[0] = c1;
		v.args.epi.ready = ready;
		rc = t_engine(&t, &v, c1);
		t_sync(t_st);
		t_sync(side);
		T_CHECK_CUDA(cudaMemcpy(&h_wrong, wrong, sizeof(h_wrong), cudaMemcpyDeviceToHost));
		T_CHECK_CUDA(cudaMemcpy(h_stats, stats, sizeof(h_stats), cudaMemcpyDeviceToHost));
		T_CHECK_CUDA(cudaMemcpy(h_ready, ready, tiles * 4, cudaMemcpyDeviceToHost));
		int once = 1;

		for (int i = 0; i < tiles; i++)
			once &= h_ready[i] == 1;
		t_report(rc == 0 && h_wrong == 0 && h_stats[1] == 0 && once,
			 "ready flags: %d tiles, each raised once=%d, consumer saw %u tiles not yet "
			 "ready, %llu wrong elements after acquire, %u timeouts",
			 tiles, once, h_stats[0], h_wrong, h_stats[1]);
		cudaFree(wrong);
		cudaFree(stats);
		cudaStreamDestroy(side);
	}

	/* The compute role inside another kernel, joined late by CTAs that had another role. */
	{
		struct mk_gemm_args args = l.args;
		struct mk_gemm_tmaps maps;
		unsigned int *joined, h_joined = 0;
		const int late = 8;

		T_CHECK_CUDA(cudaMalloc((void **)&joined, sizeof(*joined)));
		T_CHECK_CUDA(cudaMemset(joined, 0, sizeof(*joined)));
		T_CHECK_CUDA(cudaMemset(counter, 0, 4));
		T_CHECK_CUDA(cudaMemset(ready, 0, tiles * 4));
		T_CHECK_CUDA(cudaMemset(c1, 0xFF, cbytes));
		args.sched.counter = counter;
		args.epi.out[0] = c1;
		args.epi.ready = ready;
		rc = mk_gemm_make_tensor_maps(t.a, t.b, &args, &maps);
		T_CHECK_CUDA(cudaFuncSetAttribute((const void *)t_two_role_kernel,
						  cudaFuncAttributeMaxDynamicSharedMemorySize,
						  MK_GEMM_SMEM_BYTES));
		if (rc == 0)
			t_two_role_kernel<<<sms, MK_GEMM_THREADS, MK_GEMM_SMEM_BYTES, t_st>>>(
				maps, args, late, joined);
		T_CHECK_CUDA(cudaGetLastError());
		t_sync(t_st);
		T_CHECK_CUDA(cudaMemcpy(&h_joined, joined, 4, cudaMemcpyDeviceToHost));
		T_CHECK_CUDA(cudaMemcpy(h_ready, ready, tiles * 4, cudaMemcpyDeviceToHost));
		int once = 1;

		for (int i = 0; i < tiles; i++)
			once &= h_ready[i] == 1;
		t_report(rc == 0 && h_joined == (unsigned)late && once &&
				 t_bitwise_equal(c0, c1, cbytes),
			 "compute role in a two-role kernel (%d CTAs join late): bitwise equal, "
			 "flags once", late);
		cudaFree(joined);
	}

	/* Epilogue modes. */
	{
		struct mk_gemm_launch v = l;
		__nv_bfloat16 *base;

		T_CHECK_CUDA(cudaMalloc((void **)&base, cbytes));
		mk_fill_bf16<<<512, 256, 0, t_st>>>(base, (size_t)m * n, 99);
		T_CHECK_CUDA(cudaMemcpyAsync(c1, base, cbytes, cudaMemcpyDeviceToDevice, t_st));
		v.args.epi.out[0] = c1;
		v.args.epi.mode[0] = MK_GEMM_EPI_ACCUMULATE;
		rc = t_engine(&t, &v, c1);
		t_sync(t_st);
		bad = rc == 0 ? t_check(&t, c1, base, 1.0f, 1.0f / 128, &worst) : 1;
		t_report(rc == 0 && bad == 0, "epilogue accumulate: out + A@B, %llu bad", bad);

		T_CHECK_CUDA(cudaMemsetAsync(c1, 0, cbytes, t_st));
		v.args.epi.mode[0] = MK_GEMM_EPI_ATOMIC_ADD;
		v.args.epi.ready = ready;
		v.args.epi.ready_scope = MK_GEMM_FLAG_SYS;
		T_CHECK_CUDA(cudaMemsetAsync(ready, 0, tiles * 4, t_st));
		rc = t_engine(&t, &v, c1);
		rc |= t_engine(&t, &v, c1);
		t_sync(t_st);
		T_CHECK_CUDA(cudaMemcpy(h_ready, ready, tiles * 4, cudaMemcpyDeviceToHost));
		int twice = 1;

		for (int i = 0; i < tiles; i++)
			twice &= h_ready[i] == 2;
		bad = rc == 0 ? t_check(&t, c1, NULL, 2.0f, 1.0f / 64, &worst) : 1;
		t_report(rc == 0 && bad == 0 && twice,
			 "epilogue atomic add (two runs, sys-scope flags == 2): %llu bad", bad);

		/* Two destinations: local store + a second buffer standing in for a peer's. */
		v = l;
		t_poison(c1, cbytes);
		t_poison(base, cbytes);
		v.args.epi.out[0] = c1;
		v.args.epi.out[1] = base;
		v.args.epi.ld[1] = n;
		rc = t_engine(&t, &v, c1);
		t_sync(t_st);
		t_report(rc == 0 && t_bitwise_equal(c0, c1, cbytes) &&
				 t_bitwise_equal(c0, base, cbytes),
			 "epilogue two outputs: both bitwise equal to the plain run");
		cudaFree(base);
	}

	cudaFree(c0);
	cudaFree(c1);
	cudaFree(counter);
	cudaFree(ready);
	cudaFree(order);
	cudaFree(active);
	cudaFree(first_seen);
	free(h_order);
	free(h_ready);
	t_free(&t);
}

/* ---- engine variants through mkGemm's dispatch ---- */

static int t_same_pick(const struct mk_gemm_pick *x, const struct mk_gemm_pick *y)
{
	return x->path == y->path &&
	       (x->path != MK_GEMM_PATH_ENGINE || (x->tile == y->tile && x->splits == y->splits));
}

/* Whether the engine can run variant p on t (its rules, with a workspace). */
static int t_variant_runs(const struct t_buf *t, const struct mk_gemm_pick *p)
{
	static char ws[16] __attribute__((aligned(16)));
	struct mk_gemm_args args;

	if (p->path == MK_GEMM_PATH_SKINNY)
		return mk_skinny_check(t->a, t->b, t->c, t->m, t->n, t->k, t->b_nk, NULL) == 0;
	mk_gemm_args_init(&args, t->m, t->n, t->k, t->b_nk ? MK_GEMM_B_NK : MK_GEMM_B_KN, t->c);
	mk_gemm_args_variant(&args, p->tile, p->splits);
	if (p->splits > 1) {
		if (mk_gemm_split_ws_bytes(&args) > (size_t)(32 << 20))
			return 0;
		mk_gemm_args_split_ws(&args, ws);
	}
	return mk_gemm_check(t->a, t->b, &args, NULL) == 0;
}

/* Run `name` through the dispatch (forced) into t->c, poisoned first; check the result and
 * that the variant ran (or, where the engine cannot run it, that cuBLAS did). */
static void t_pick_case(struct t_buf *t, const char *name)
{
	struct mk_gemm_pick want;
	struct mk_gemm_ran ran, last;
	unsigned long long bad;
	float worst = 0;
	int rc, runs, ok_path;
	char got[32];

	if (mk_gemm_pick_parse(name, &want) != 0) {
		t_report(0, "bad variant name %s", name);
		return;
	}
	runs = t_variant_runs(t, &want);
	snprintf(t_case, sizeof(t_case), "variant %s on %d x %d x %d B=%s", name, t->m, t->n, t->k,
		 t->b_nk ? "NK" : "KN");
	t_poison(t->c, (size_t)t->m * t->n * 2);
	rc = mk_gemm_dispatch(t->a, t->b, t->c, t->m, t->n, t->k, t->b_nk, t_st, &want, &ran);
	t_sync(t_st);
	mk_gemm_dispatch_last(&last);
	bad = rc == 0 ? t_check(t, t->c, NULL, 1.0f, 1.0f / 256, &worst) : 1;
	ok_path = runs ? t_same_pick(&ran.pick, &want) : ran.pick.path != want.path;
	ok_path &= t_same_pick(&last.pick, &ran.pick) && ran.why != NULL;
	t_report(rc == 0 && bad == 0 && ok_path,
		 "%-60s ran %-9s (%s): %llu bad, worst err %.3g", t_case,
		 mk_gemm_pick_name(&ran.pick, got, sizeof(got)),
		 runs ? "asked for" : "cannot run: cuBLAS expected", bad, worst);
}

static double t_bf16_host(__nv_bfloat16 v)
{
	return (double)__bfloat162float(v);
}

/*
 * The skinny kernel's output (in t->c) against an fp64 reference on the host, element by element:
 * |c - ref| <= 2^-8 |ref| + 2^-17 S with S = sum_k |a_k b_k|: one bf16 rounding of the result,
 * plus fp32 accumulation (each warp's chain of MMAs, then eight partial sums), far under 2^-17 S
 * for K up to 2^14. The bound does not depend on cuBLAS; cuBLAS's fp32 output is measured
 * against the same reference and printed beside it.
 */
static void t_skinny_exact(const struct t_buf *t)
{
	const size_t na = (size_t)t->m * t->k, nb = (size_t)t->n * t->k, nc = (size_t)t->m * t->n;
	__nv_bfloat16 *a = (__nv_bfloat16 *)malloc(na * 2), *b = (__nv_bfloat16 *)malloc(nb * 2);
	__nv_bfloat16 *c = (__nv_bfloat16 *)malloc(nc * 2);
	float *ref = (float *)malloc(nc * 4);
	double worst = 0, worst_blas = 0;
	size_t bad = 0, first = 0;

	if ((double)t->m * t->n * t->k > 4e8 || !a || !b || !c || !ref)
		goto out;
	T_CHECK_CUDA(cudaMemcpy(a, t->a, na * 2, cudaMemcpyDeviceToHost));
	T_CHECK_CUDA(cudaMemcpy(b, t->b, nb * 2, cudaMemcpyDeviceToHost));
	T_CHECK_CUDA(cudaMemcpy(c, t->c, nc * 2, cudaMemcpyDeviceToHost));
	T_CHECK_CUDA(cudaMemcpy(ref, t->ref, nc * 4, cudaMemcpyDeviceToHost));
	for (int i = 0; i < t->m; i++) {
		for (int j = 0; j < t->n; j++) {
			double sum = 0, mag = 0, err, bound;

			for (int q = 0; q < t->k; q++) {
				const double x = t_bf16_host(a[(size_t)i * t->k + q]) *
						 t_bf16_host(b[(size_t)j * t->k + q]);

				sum += x;
				mag += fabs(x);
			}
			err = fabs(t_bf16_host(c[(size_t)i * t->n + j]) - sum);
			bound = fabs(sum) / 256 + mag / 131072;
			if (!(err <= bound) && bad++ == 0)
				first = (size_t)i * t->n + j;
			if (mag > 0 && err / mag > worst)
				worst = err / mag;
			if (mag > 0 && fabs(ref[(size_t)i * t->n + j] - sum) / mag > worst_blas)
				worst_blas = fabs(ref[(size_t)i * t->n + j] - sum) / mag;
		}
	}
	t_report(bad == 0,
		 "skinny %d x %d x %d against fp64: %zu outside 2^-8|ref| + 2^-17 S (first at %zu), "
		 "worst err/S %.3g (cuBLAS fp32 %.3g)",
		 t->m, t->n, t->k, bad, first, worst, worst_blas);
out:
	free(a);
	free(b);
	free(c);
	free(ref);
}

/* The skinny kernel (M <= 16, B N x K) forced through the dispatch: decode rows, every M up to
 * 16 around the 8-row halves of its MMA, N and K tails (K past a 32-wide block by 8, 16, 24),
 * one CTA and many; and the calls it must refuse (17 rows, K x N, K not a multiple of 8). */
static void t_skinny(void)
{
	static const int shapes[][3] = {
		{ 1, 4096, 4096 }, { 2, 1000, 1032 }, { 7, 8, 8 },	  { 8, 13, 24 },
		{ 9, 4104, 5000 }, { 15, 300, 64 },   { 16, 8192, 8192 }, { 16, 1000, 5000 },
		{ 3, 14336, 4096 }, { 16, 24, 4104 },  { 17, 256, 256 },   { 4, 100, 1001 },
	};
	const size_t nshapes = t_quick ? 4 : sizeof(shapes) / sizeof(shapes[0]);

	for (size_t i = 0; i < nshapes; i++) {
		for (int b_nk = 0; b_nk < 2; b_nk++) {
			struct t_buf t;

			t_alloc(&t, shapes[i][0], shapes[i][1], shapes[i][2], b_nk,
				(uint32_t)(i * 131 + b_nk));
			t_reference(&t);
			t_pick_case(&t, "skinny");
			if (mk_skinny_check(t.a, t.b, t.c, t.m, t.n, t.k, b_nk, NULL) == 0)
				t_skinny_exact(&t);
			t_free(&t);
		}
	}
}

static void t_variants(void)
{
	static const int shapes[][3] = {
		{ 1, 4096, 4096 },  /* decode: one row */
		{ 16, 1000, 1032 }, /* N and K tails */
		{ 64, 520, 2048 },  /* exactly one 64-row tile */
		{ 65, 304, 520 },   /* one row past it */
		{ 129, 264, 136 },  /* one past the 128-row tile, K tail */
		{ 200, 4104, 64 },  /* one k-block: splits > 1 cannot run */
		{ 256, 1536, 8192 },
	};
	static const char *const tiles[] = { "128x256", "64x256", "128x128", "64x128" };
	static const int splits[] = { 1, 2, 3, 7, 16 };
	const size_t nshapes = t_quick ? 3 : sizeof(shapes) / sizeof(shapes[0]);

	for (size_t i = 0; i < nshapes; i++) {
		for (int b_nk = 0; b_nk < 2; b_nk++) {
			struct t_buf t;

			t_alloc(&t, shapes[i][0], shapes[i][1], shapes[i][2], b_nk,
				(uint32_t)(i * 977 + b_nk));
			t_reference(&t);
			for (int v = 0; v < 4; v++) {
				for (size_t sp = 0; sp < sizeof(splits) / sizeof(splits[0]); sp++) {
					char name[32];

					if (t_quick && sp % 2)
						continue;
					snprintf(name, sizeof(name), "e%ss%d", tiles[v], splits[sp]);
					t_pick_case(&t, name);
				}
			}
			t_free(&t);
		}
	}
}

/* Split-K: deterministic, counters back at zero after every launch, ready flags once per tile,
 * any ticket source and CTA count giving the same bits. */
static void t_split_properties(int sms)
{
	const int m = 100, n = 1000, k = 2048;
	struct t_buf t;
	struct mk_gemm_launch l;
	struct mk_gemm_pick p;
	__nv_bfloat16 *c1, *c2;
	unsigned int *ready, *h_ready, *counter;
	size_t cbytes = (size_t)m * n * 2, ws_bytes = 0;
	void *ws = NULL;
	unsigned long long bad;
	float worst;
	int rc, tiles, once;

	t_alloc(&t, m, n, k, 1, 31337);
	t_reference(&t);
	T_CHECK_CUDA(cudaMalloc((void **)&c1, cbytes));
	T_CHECK_CUDA(cudaMalloc((void **)&c2, cbytes));
	T_CHECK_CUDA(cudaMalloc((void **)&counter, 4));

	/* three launches of one split variant: bitwise equal, all right */
	snprintf(t_case, sizeof(t_case), "split-K e64x256s8 three launches");
	mk_gemm_pick_parse("e64x256s8", &p);
	t_poison(c1, cbytes);
	rc = mk_gemm_dispatch(t.a, t.b, c1, m, n, k, 1, t_st, &p, NULL);
	bad = 0;
	for (int r = 0; r < 2 && rc == 0; r++) {
		t_poison(c2, cbytes);
		rc = mk_gemm_dispatch(t.a, t.b, c2, m, n, k, 1, t_st, &p, NULL);
		t_sync(t_st);
		bad += !t_bitwise_equal(c1, c2, cbytes);
	}
	t_sync(t_st);
	t_report(rc == 0 && bad == 0 && t_check(&t, c1, NULL, 1.0f, 1.0f / 256, &worst) == 0,
		 "%s: bitwise equal each time (deterministic, counters reset), right", t_case);

	/* the engine directly: ready flags, CTA counts, dynamic tickets */
	memset(&l, 0, sizeof(l));
	l.a = t.a;
	l.b = t.b;
	mk_gemm_args_init(&l.args, m, n, k, MK_GEMM_B_NK, c2);
	mk_gemm_args_variant(&l.args, MK_GEMM_TILE_64x128, 4);
	tiles = l.args.tiles_m * l.args.tiles_n;
	rc = mk_gemm_ws_get(t_st, &ws, &ws_bytes);
	if (rc != 0 || mk_gemm_split_ws_bytes(&l.args) > ws_bytes) {
		t_report(0, "split-K workspace: rc %d, %zu bytes", rc, ws_bytes);
		goto out;
	}
	mk_gemm_args_split_ws(&l.args, ws);
	T_CHECK_CUDA(cudaMalloc((void **)&ready, tiles * 4));
	h_ready = (unsigned int *)malloc(tiles * 4);
	T_CHECK_CUDA(cudaMemsetAsync(ready, 0, tiles * 4, t_st));
	l.args.epi.ready = ready;
	snprintf(t_case, sizeof(t_case), "split-K e64x128s4 with ready flags, twice");
	t_poison(c1, cbytes);
	l.args.epi.out[0] = c1;
	rc = mk_gemm_run(&l, t_st);
	rc |= mk_gemm_run(&l, t_st);
	t_sync(t_st);
	T_CHECK_CUDA(cudaMemcpy(h_ready, ready, tiles * 4, cudaMemcpyDeviceToHost));
	once = 1;
	for (int i = 0; i < tiles; i++)
		once &= h_ready[i] == 2;
	bad = rc == 0 ? t_check(&t, c1, NULL, 1.0f, 1.0f / 256, &worst) : 1;
	t_report(rc == 0 && once && bad == 0, "%s: every flag == 2, %llu bad", t_case, bad);
	l.args.epi.ready = NULL;

	{
		const int ctas[] = { 1, 5, 13, sms };

		for (size_t i = 0; i < sizeof(ctas) / sizeof(ctas[0]); i++) {
			for (int dyn = 0; dyn < 2; dyn++) {
				struct mk_gemm_launch v = l;

				snprintf(t_case, sizeof(t_case),
					 "split-K e64x128s4 on %d CTAs, %s tickets", ctas[i],
					 dyn ? "dynamic" : "static");
				v.ctas = ctas[i];
				v.args.epi.out[0] = c2;
				if (dyn) {
					T_CHECK_CUDA(cudaMemsetAsync(counter, 0, 4, t_st));
					v.args.sched.counter = counter;
				}
				t_poison(c2, cbytes);
				rc = mk_gemm_run(&v, t_st);
				t_sync(t_st);
				t_report(rc == 0 && t_bitwise_equal(c1, c2, cbytes), "%s: bitwise equal",
					 t_case);
			}
		}
	}
	cudaFree(ready);
	free(h_ready);
out:
	cudaFree(c1);
	cudaFree(c2);
	cudaFree(counter);
	t_free(&t);
}

static void t_set_env(const char *name, const char *value)
{
	if (value == NULL)
		unsetenv(name);
	else
		setenv(name, value, 1);
	mk_param_reset_all();
}

/* The dispatch's own choice on the shapes users reported, its knobs, and its record. */
static void t_dispatch(void)
{
	static const int shapes[][4] = {
		{ 16, 4096, 4096, 1 }, { 128, 8192, 8192, 1 }, { 3000, 5000, 1000, 1 },
		{ 1001, 1003, 1000, 0 }, /* K x N B with N % 8: the engine's rule sends it to cuBLAS */
		{ 1, 14336, 4096, 1 },	 { 256, 4096, 14336, 0 },
		{ 7, 4100, 4104, 1 }, /* N % 8: rows not 16-byte aligned, not cuBLASLt */
	};
	const size_t nshapes = t_quick ? 2 : sizeof(shapes) / sizeof(shapes[0]);
	struct mk_gemm_ran ran, last;
	unsigned long long bad;
	float worst;
	char name[32];
	int rc;

	for (size_t i = 0; i < nshapes; i++) {
		struct t_buf t;

		t_alloc(&t, shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3],
			(uint32_t)(i + 5));
		t_reference(&t);
		snprintf(t_case, sizeof(t_case), "dispatch auto %d x %d x %d B=%s", t.m, t.n, t.k,
			 t.b_nk ? "NK" : "KN");
		t_poison(t.c, (size_t)t.m * t.n * 2);
		rc = mk_gemm_dispatch(t.a, t.b, t.c, t.m, t.n, t.k, t.b_nk, t_st, NULL, &ran);
		t_sync(t_st);
		mk_gemm_dispatch_last(&last);
		bad = rc == 0 ? t_check(&t, t.c, NULL, 1.0f, 1.0f / 256, &worst) : 1;
		t_report(rc == 0 && bad == 0 && ran.why != NULL && t_same_pick(&ran.pick, &last.pick) &&
				 (t.b_nk || t.n % 8 == 0 || ran.pick.path != MK_GEMM_PATH_ENGINE) &&
				 ((t.n % 8 == 0 && t.k % 8 == 0) ||
				  ran.pick.path != MK_GEMM_PATH_CUBLASLT),
			 "%-45s ran %s (%s): %llu bad", t_case,
			 mk_gemm_pick_name(&ran.pick, name, sizeof(name)), ran.why, bad);

		/* the same call through the public API, with its knobs */
		if (i == 0) {
			struct mk_gemm_pick want;
			ncclResult_t r;

			mk_gemm_pick_parse("e64x128s2", &want);
			t_set_env("MKERNEL_GEMM_PATH", "e64x128s2");
			rc = mk_gemm_dispatch(t.a, t.b, t.c, t.m, t.n, t.k, t.b_nk, t_st, NULL, &ran);
			t_sync(t_st);
			t_report(rc == 0 && t_same_pick(&ran.pick, &want),
				 "MKERNEL_GEMM_PATH=e64x128s2 runs it (%s)", ran.why);
			t_set_env("MKERNEL_GEMM_PATH", "e99x1s1");
			rc = mk_gemm_dispatch(t.a, t.b, t.c, t.m, t.n, t.k, t.b_nk, t_st, NULL, &ran);
			t_sync(t_st);
			t_report(rc == 0 && t_same_pick(&ran.pick, &last.pick),
				 "MKERNEL_GEMM_PATH=e99x1s1 is ignored (auto: %s)",
				 mk_gemm_pick_name(&ran.pick, name, sizeof(name)));
			t_set_env("MKERNEL_GEMM_PATH", NULL);
			t_set_env("MKERNEL_GEMM_FORCE_FALLBACK", "1");
			t_poison(t.c, (size_t)t.m * t.n * 2);
			r = mkGemm(t.a, t.b, t.c, t.m, t.n, t.k, ncclBfloat16, mkLayoutRowMajorNK,
				   t_st);
			t_sync(t_st);
			rc = mk_gemm_dispatch(t.a, t.b, t.c, t.m, t.n, t.k, t.b_nk, t_st, NULL, &ran);
			t_sync(t_st);
			bad = r == ncclSuccess ? t_check(&t, t.c, NULL, 1.0f, 1.0f / 256, &worst) : 1;
			t_report(rc == 0 && ran.pick.path == MK_GEMM_PATH_CUBLAS && bad == 0,
				 "MKERNEL_GEMM_FORCE_FALLBACK=1: cublasGemmEx, mkGemm right");
			t_set_env("MKERNEL_GEMM_FORCE_FALLBACK", NULL);
		}
		t_free(&t);
	}
}

/* Graph capture: a split variant on a stream with no workspace yet takes cuBLASLt (nothing may be
 * allocated in a capture); once the stream has its workspace the variant is captured too. Two
 * replays each: counters reset between them. */
static void t_capture(void)
{
	const int m = 16, n = 2048, k = 2048;
	struct t_buf t;
	struct mk_gemm_pick p;
	struct mk_gemm_ran ran;
	cudaStream_t s2;
	cudaGraph_t g;
	cudaGraphExec_t ge;
	unsigned long long bad;
	float worst;
	int rc;

	t_alloc(&t, m, n, k, 1, 777);
	t_reference(&t);
	mk_gemm_pick_parse("e64x256s4", &p);
	T_CHECK_CUDA(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
	for (int round = 0; round < 2; round++) {
		snprintf(t_case, sizeof(t_case), "graph capture of e64x256s4, %s", round ? "stream with a workspace" : "new stream");
		if (round == 1) { /* one plain call gives the stream its workspace */
			rc = mk_gemm_dispatch(t.a, t.b, t.c, m, n, k, 1, s2, &p, &ran);
			t_sync(s2);
		}
		T_CHECK_CUDA(cudaStreamBeginCapture(s2, cudaStreamCaptureModeThreadLocal));
		rc = mk_gemm_dispatch(t.a, t.b, t.c, m, n, k, 1, s2, &p, &ran);
		T_CHECK_CUDA(cudaStreamEndCapture(s2, &g));
		T_CHECK_CUDA(cudaGraphInstantiate(&ge, g, 0));
		bad = 0;
		for (int r = 0; r < 2 && rc == 0; r++) {
			t_poison(t.c, (size_t)m * n * 2);
			t_sync(t_st);
			T_CHECK_CUDA(cudaGraphLaunch(ge, s2));
			t_sync(s2);
			bad += t_check(&t, t.c, NULL, 1.0f, 1.0f / 256, &worst);
		}
		t_report(rc == 0 && bad == 0 &&
				 (round == 0 ? ran.pick.path == MK_GEMM_PATH_CUBLASLT
					     : t_same_pick(&ran.pick, &p)),
			 "%s: captured %s (%s), 2 replays, %llu bad", t_case,
			 ran.pick.path == MK_GEMM_PATH_ENGINE ? "the variant" : "cuBLASLt", ran.why,
			 bad);
		cudaGraphExecDestroy(ge);
		cudaGraphDestroy(g);
	}
	cudaStreamDestroy(s2);
	t_free(&t);
}

/*
 * Repeated cuBLASLt calls (fused/ops/gemm_graph.h): the first MKERNEL_GEMM_GRAPH (2) calls of a
 * key run directly, later ones replay the captured graph (ran.graph), right every time, also
 * after the inputs change (the graph reads them when it runs); another C is another key; a
 * capturing stream gets the plain call; MKERNEL_GEMM_GRAPH=0 turns replays off.
 */
static int t_graph_call(const struct t_buf *t, void *c, const struct mk_gemm_pick *lt,
			struct mk_gemm_ran *ran)
{
	float worst;
	int rc;

	t_poison(c, (size_t)t->m * t->n * 2);
	rc = mk_gemm_dispatch(t->a, t->b, c, t->m, t->n, t->k, t->b_nk, t_st, lt, ran);
	t_sync(t_st);
	return rc == 0 && t_check(t, (const __nv_bfloat16 *)c, NULL, 1.0f, 1.0f / 256, &worst) == 0;
}

/*
 * A model's layers: T_GRAPH_KEYS keys of one shape, each with its own C, called in turn. Every
 * one replays from its fourth call: the keys must not evict each other (a table of one entry
 * per slot lost most of them to collisions).
 */
#define T_GRAPH_KEYS 32

static void t_graph_many(const struct t_buf *t, const struct mk_gemm_pick *lt)
{
	void *cs[T_GRAPH_KEYS];
	struct mk_gemm_ran ran;
	int replayed = 0, right = 1;

	for (int i = 0; i < T_GRAPH_KEYS; i++)
		T_CHECK_CUDA(cudaMalloc(&cs[i], (size_t)t->m * t->n * 2 + 16));
	for (int turn = 0; turn < 4; turn++) {
		for (int i = 0; i < T_GRAPH_KEYS; i++) {
			right &= t_graph_call(t, cs[i], lt, &ran);
			replayed += turn == 3 && ran.graph;
		}
	}
	t_report(right && replayed == T_GRAPH_KEYS,
		 "%s: %d keys of one shape in turn: %d replayed at their fourth call, every result "
		 "right",
		 t_case, T_GRAPH_KEYS, replayed);
	for (int i = 0; i < T_GRAPH_KEYS; i++)
		cudaFree(cs[i]);
}

static void t_graph_replay(void)
{
	const int m = 48, n = 1000, k = 1032; /* a shape no other case uses: a fresh key */
	struct mk_gemm_pick lt;
	struct mk_gemm_ran ran;
	struct t_buf t;
	char seen[8] = "";
	void *c2;
	cudaGraph_t g;
	cudaGraphExec_t ge;
	int ok = 1, right;

	snprintf(t_case, sizeof(t_case), "cuBLASLt replayed as a graph");
	t_set_env("MKERNEL_GEMM_GRAPH", "2");
	mk_gemm_pick_parse("cublaslt", &lt);
	t_alloc(&t, m, n, k, 1, 4242);
	t_reference(&t);
	for (int i = 0; i < 5; i++) {
		ok &= t_graph_call(&t, t.c, &lt, &ran) && ran.pick.path == MK_GEMM_PATH_CUBLASLT;
		seen[i] = ran.graph ? 'g' : 'd';
	}
	t_report(ok && strcmp(seen, "ddggg") == 0,
		 "%s: 5 calls ran %s (d direct, g graph), every result right", t_case, seen);

	mk_fill_bf16<<<512, 256, 0, t_st>>>(t.a, (size_t)m * k, 99);
	T_CHECK_CUDA(cudaGetLastError());
	t_reference(&t);
	right = t_graph_call(&t, t.c, &lt, &ran);
	t_report(right && ran.graph, "%s: new inputs, same pointers: replayed, right", t_case);

	T_CHECK_CUDA(cudaMalloc(&c2, (size_t)m * n * 2 + 16));
	right = t_graph_call(&t, c2, &lt, &ran);
	t_report(right && !ran.graph, "%s: another C is a new key: direct, right", t_case);

	T_CHECK_CUDA(cudaStreamBeginCapture(t_st, cudaStreamCaptureModeThreadLocal));
	right = mk_gemm_dispatch(t.a, t.b, t.c, m, n, k, 1, t_st, &lt, &ran) == 0;
	T_CHECK_CUDA(cudaStreamEndCapture(t_st, &g));
	T_CHECK_CUDA(cudaGraphInstantiate(&ge, g, 0));
	t_poison(t.c, (size_t)m * n * 2);
	T_CHECK_CUDA(cudaGraphLaunch(ge, t_st));
	t_sync(t_st);
	{
		float worst;

		right = right && t_check(&t, t.c, NULL, 1.0f, 1.0f / 256, &worst) == 0;
	}
	t_report(right && !ran.graph,
		 "%s: under the caller's capture the plain call is captured, right", t_case);
	cudaGraphExecDestroy(ge);
	cudaGraphDestroy(g);

	t_set_env("MKERNEL_GEMM_GRAPH", "0");
	right = t_graph_call(&t, t.c, &lt, &ran);
	t_report(right && !ran.graph, "%s: MKERNEL_GEMM_GRAPH=0: direct, right", t_case);
	t_set_env("MKERNEL_GEMM_GRAPH", NULL);
	right = t_graph_call(&t, t.c, &lt, &ran);
	t_report(right && ran.graph, "%s: default again: the kept graph replays (%s), right (%s)",
		 t_case, ran.graph ? "yes" : "no", right ? "yes" : "no");
	t_graph_many(&t, &lt);
	cudaFree(c2);
	t_free(&t);
}

static void t_api_errors(void)
{
	void *p = NULL;

	T_CHECK_CUDA(cudaMalloc(&p, 4096));
	t_report(mkGemm(NULL, p, p, 8, 8, 8, ncclBfloat16, mkLayoutRowMajorNK, t_st) ==
			 ncclInvalidArgument,
		 "mkGemm NULL A -> ncclInvalidArgument");
	t_report(mkGemm(p, p, p, 0, 8, 8, ncclBfloat16, mkLayoutRowMajorNK, t_st) ==
			 ncclInvalidArgument,
		 "mkGemm M = 0 -> ncclInvalidArgument");
	t_report(mkGemm(p, p, p, 8, 8, 8, ncclFloat32, mkLayoutRowMajorNK, t_st) ==
			 ncclInvalidArgument,
		 "mkGemm float32 -> ncclInvalidArgument");
	t_report(mkGemm(p, p, p, 8, 8, 8, ncclBfloat16, (mkLayout_t)7, t_st) == ncclInvalidArgument,
		 "mkGemm bad layout -> ncclInvalidArgument");
	t_sync(t_st);
	cudaFree(p);
}

int main(int argc, char **argv)
{
	static const int full_shapes[][3] = {
		{ 1024, 1024, 1024 }, /* square */
		{ 4096, 4096, 4096 }, /* square, large */
		{ 8192, 128, 1024 },  /* tall */
		{ 128, 8192, 1024 },  /* wide */
		{ 1000, 1000, 1000 }, /* tails in M, N, K */
		{ 1001, 999, 520 },	/* odd M and N */
		{ 333, 517, 72 },     /* tails everywhere, K < one k-block + tail */
		{ 300, 260, 8 },      /* smallest K the engine takes */
		{ 256, 384, 1 },      /* K = 1: cuBLAS (TMA row stride rule) */
		{ 1, 4096, 4096 },    /* tiny M */
		{ 7, 300, 64 },	      /* tiny M, partial N */
		{ 129, 257, 65 },     /* one past the tile in every dimension */
	};
	static const int quick_shapes[][3] = {
		{ 333, 517, 72 }, { 129, 257, 136 }, { 7, 300, 64 }, { 256, 384, 1 },
	};
	int ndev = 0, sms = 0, engine_ok;
	const int(*shapes)[3] = full_shapes;
	size_t nshapes = sizeof(full_shapes) / sizeof(full_shapes[0]);

	for (int i = 1; i < argc; i++)
		if (!strcmp(argv[i], "--quick"))
			t_quick = 1;
	signal(SIGALRM, t_alarm);
	alarm(T_ALARM_S);
	if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
		printf("SKIP: no CUDA device\n");
		return 77;
	}
	if (t_quick) {
		shapes = quick_shapes;
		nshapes = sizeof(quick_shapes) / sizeof(quick_shapes[0]);
	}
	T_CHECK_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
	T_CHECK_CUDA(cudaStreamCreate(&t_st));
	if (cublasCreate(&t_blas) != CUBLAS_STATUS_SUCCESS)
		return 1;
	cublasSetStream(t_blas, t_st);
	engine_ok = mk_gemm_device_ok();
	printf("# device with %d SMs, engine %s\n", sms, engine_ok ? "runs" : "not supported");

	t_api_errors();
	for (size_t i = 0; i < nshapes; i++)
		for (int b_nk = 0; b_nk < 2; b_nk++)
			t_shape(shapes[i][0], shapes[i][1], shapes[i][2], b_nk, engine_ok);
	if (engine_ok) {
		t_variants();
		t_skinny();
		t_split_properties(sms);
		t_dispatch();
		t_capture();
		t_hooks(sms);
	} else {
		printf("# engine variants and hooks not tested: device is not sm_90\n");
	}
	t_graph_replay();

	cublasDestroy(t_blas);
	cudaStreamDestroy(t_st);
	printf("%d passed, %d failed\n", t_passed, t_failed);
	return t_failed ? 1 : 0;
}
