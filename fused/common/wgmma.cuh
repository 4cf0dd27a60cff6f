/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The wgmma shapes the engine issues: m64n256k16 (the 256-column tiles) and m64n128k16 (the
 * 128-column tiles of small or narrow problems), bf16 x bf16 -> fp32, A and B from shared
 * memory through descriptors. Each comes in two variants that differ only in B's major-ness
 * (the instruction's transpose immediate): K-major B (an N x K row-major weight) and MN-major B
 * (K x N row-major). accumulate = 0 overwrites d (first k-step of a tile). d[] must stay in
 * registers: index it only with constants after unrolling.
 */
#ifndef MK_FUSED_COMMON_WGMMA_CUH
#define MK_FUSED_COMMON_WGMMA_CUH

#include "fused/common/ptx.cuh"

/* Accumulator operands: register names %0.. in the asm text, "+f" constraints on d[]. */
#define MK_WGMMA_REGS_0_63                                                                        \
	"%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "                   \
	"%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "         \
	"%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "         \
	"%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define MK_WGMMA_REGS_64_127                                                                      \
	"%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "         \
	"%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "         \
	"%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, "   \
	"%111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, "      \
	"%125, %126, %127"
#define MK_WGMMA_D8(i)                                                                            \
	"+f"(d[(i)]), "+f"(d[(i) + 1]), "+f"(d[(i) + 2]), "+f"(d[(i) + 3]), "+f"(d[(i) + 4]),     \
		"+f"(d[(i) + 5]), "+f"(d[(i) + 6]), "+f"(d[(i) + 7])
#define MK_WGMMA_D64(i)                                                                           \
	MK_WGMMA_D8(i), MK_WGMMA_D8((i) + 8), MK_WGMMA_D8((i) + 16), MK_WGMMA_D8((i) + 24),        \
		MK_WGMMA_D8((i) + 32), MK_WGMMA_D8((i) + 40), MK_WGMMA_D8((i) + 48),               \
		MK_WGMMA_D8((i) + 56)

/* m64nNk16: N = 256 (128 accumulators per thread) or 128 (64). */
#define MK_WGMMA_M64N256K16_DEF(name, tnspb)                                                      \
	MK_DEV void name(float *d, uint64_t da, uint64_t db, uint32_t accumulate)                  \
	{                                                                                          \
		asm volatile("{\n\t.reg .pred p;\n\t"                                             \
			     "setp.ne.b32 p, %130, 0;\n\t"                                          \
			     "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"            \
			     MK_WGMMA_REGS_0_63 ", " MK_WGMMA_REGS_64_127                           \
			     "}, %128, %129, p, 1, 1, 0, " #tnspb ";\n\t}"                          \
			     : MK_WGMMA_D64(0), MK_WGMMA_D64(64)                                  \
			     : "l"(da), "l"(db), "r"(accumulate));                                 \
	}

/* B is K-major (row-major N x K). */
MK_WGMMA_M64N256K16_DEF(mk_wgmma_m64n256k16_bk, 0)

/* B is MN-major (row-major K x N). */
MK_WGMMA_M64N256K16_DEF(mk_wgmma_m64n256k16_bmn, 1)

#define MK_WGMMA_M64N128K16_DEF(name, tnspb)                                                      \
	MK_DEV void name(float *d, uint64_t da, uint64_t db, uint32_t accumulate)                  \
	{                                                                                          \
		asm volatile("{\n\t.reg .pred p;\n\t"                                             \
			     "setp.ne.b32 p, %66, 0;\n\t"                                           \
			     "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"            \
			     MK_WGMMA_REGS_0_63 "}, %64, %65, p, 1, 1, 0, " #tnspb ";\n\t}"          \
			     : MK_WGMMA_D64(0)                                                      \
			     : "l"(da), "l"(db), "r"(accumulate));                                 \
	}

/* B is K-major (row-major N x K), 128 columns. */
MK_WGMMA_M64N128K16_DEF(mk_wgmma_m64n128k16_bk, 0)

/* B is MN-major (row-major K x N), 128 columns. */
MK_WGMMA_M64N128K16_DEF(mk_wgmma_m64n128k16_bmn, 1)

#endif /* MK_FUSED_COMMON_WGMMA_CUH */
