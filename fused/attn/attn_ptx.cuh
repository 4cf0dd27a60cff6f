/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Inline-PTX wrappers the attention engine needs beyond the common ones (fused/common/ptx.cuh):
 * mbarrier operations on 32-bit shared addresses, 4-D TMA loads (BSHD tensors: one box = rows
 * of one head, rows past the end zero-filled), the fast base-2 exponential of the softmax, and
 * the three wgmma shapes of a flash-attention step:
 * S = Q K^T (m64n128k16, both operands in shared memory, K K-major) and O += P V (m64n128k16 or
 * m64n64k16 for D = 128 / 64, P from registers, V MN-major). d[] must stay in registers: index it
 * only with constants after unrolling.
 */
#ifndef MK_FUSED_ATTN_ATTN_PTX_CUH
#define MK_FUSED_ATTN_ATTN_PTX_CUH

#include <stdint.h>

#include "fused/common/ptx.cuh"
#include "fused/common/wait.cuh"

/*
 * mbarrier operations on a 32-bit shared-memory address. The engine keeps barrier addresses as
 * offsets from one base, so a producer warp capped at a few dozen registers holds no 64-bit
 * generic pointers.
 */
MK_DEV void mk_mbar_wait_a(uint32_t bar, uint32_t parity)
{
	asm volatile("{\n\t.reg .pred done;\n"
		     "mk_wait_a_%=:\n\t"
		     "mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 done, [%0], %1;\n\t"
		     "@!done bra mk_wait_a_%=;\n\t}" ::"r"(bar),
		     "r"(parity)
		     : "memory");
}

/* One probe of the phase with this parity, no loop (bounded waits build on it). */
MK_DEV uint32_t mk_mbar_test_a(uint32_t bar, uint32_t parity)
{
	uint32_t done;

	asm volatile("{\n\t.reg .pred p;\n\t"
		     "mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 p, [%1], %2;\n\t"
		     "selp.u32 %0, 1, 0, p;\n\t}"
		     : "=r"(done)
		     : "r"(bar), "r"(parity)
		     : "memory");
	return done;
}

MK_DEV void mk_mbar_arrive_a(uint32_t bar)
{
	asm volatile("{\n\t.reg .b64 st;\n\t"
		     "mbarrier.arrive.release.cta.shared::cta.b64 st, [%0];\n\t}" ::"r"(bar)
		     : "memory");
}

MK_DEV void mk_mbar_arrive_expect_tx_a(uint32_t bar, uint32_t bytes)
{
	asm volatile("{\n\t.reg .b64 st;\n\t"
		     "mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 st, [%0], %1;\n\t}" ::"r"(
			     bar),
		     "r"(bytes)
		     : "memory");
}

MK_DEV int mk_ld_volatile_shared_s32(uint32_t addr)
{
	int v;

	asm volatile("ld.volatile.shared.s32 %0, [%1];" : "=r"(v) : "r"(addr) : "memory");
	return v;
}

/* 4-D tiled bulk tensor load into shared memory, completing on an mbarrier (tx bytes). */
MK_DEV void mk_tma_load_4d(uint32_t dst, const void *tmap, uint32_t bar, int c0, int c1, int c2,
			   int c3)
{
	asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
		     " [%0], [%1, {%3, %4, %5, %6}], [%2];" ::"r"(dst),
		     "l"(tmap), "r"(bar), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
		     : "memory");
}

/* 2^x, approximate (relative error ~2^-22), -inf -> +0, flushing denormals. */
MK_DEV float mk_ex2(float x)
{
	float y;

	asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
	return y;
}

/* S = A B^T-style product with both operands in shared memory: m64n128k16, B K-major. */
MK_DEV void mk_attn_wgmma_ss_n128(float *d, uint64_t da, uint64_t db, uint32_t accumulate)
{
	asm volatile("{\n\t.reg .pred p;\n\t"
		     "setp.ne.b32 p, %66, 0;\n\t"
		     "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
		     "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
		     "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
		     "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
		     "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
		     "}, %64, %65, p, 1, 1, 0, 0;\n\t}"
		     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
			  "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
			  "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
			  "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
			  "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
			  "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
			  "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
			  "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
		     : "l"(da), "l"(db), "r"(accumulate));
}

/* D += A B with A (4 registers of bf16 pairs per thread) from registers and B MN-major in
 * shared memory: m64n128k16. accumulate = 0 overwrites d. */
MK_DEV void mk_attn_wgmma_rs_n128(float *d, const uint32_t *a, uint64_t db, uint32_t accumulate)
{
	asm volatile("{\n\t.reg .pred p;\n\t"
		     "setp.ne.b32 p, %69, 0;\n\t"
		     "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
		     "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
		     "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31,"
		     "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47,"
		     "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
		     "}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n\t}"
		     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
			  "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
			  "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
			  "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
			  "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
			  "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
			  "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
			  "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
		     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db),
		       "r"(accumulate));
}

/* D += A B with A (4 registers of bf16 pairs per thread) from registers and B MN-major in
 * shared memory: m64n64k16. accumulate = 0 overwrites d. */
MK_DEV void mk_attn_wgmma_rs_n64(float *d, const uint32_t *a, uint64_t db, uint32_t accumulate)
{
	asm volatile("{\n\t.reg .pred p;\n\t"
		     "setp.ne.b32 p, %37, 0;\n\t"
		     "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
		     "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
		     "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
		     "}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n\t}"
		     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
			  "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
			  "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
			  "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
		     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db),
		       "r"(accumulate));
}

#endif /* MK_FUSED_ATTN_ATTN_PTX_CUH */
