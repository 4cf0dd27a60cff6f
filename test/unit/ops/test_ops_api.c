// SPDX-License-Identifier: Apache-2.0
/*
 * unit suite, component ops: the public functions of the ops refuse bad arguments before any
 * CUDA call, with ncclInvalidArgument (mkGemm; mkGemmAllReduce with no comm or a pointer that is
 * not a live comm; mkGemmReduceScatter and mkAllGatherGemm, M % nranks included). Pointers are
 * addresses only: nothing here dereferences them.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <limits.h>
#include <string.h>

#include "mkernel.h"
#include "fused/runtime/comm.h"

#define A_PTR ((const void *)(uintptr_t)0x10000)
#define B_PTR ((const void *)(uintptr_t)0x20000)
#define C_PTR ((void *)(uintptr_t)0x30000)

static void test_mkgemm_invalid_arguments_before_cuda(void **state)
{
	(void)state;
	assert_int_equal(mkGemm(NULL, B_PTR, C_PTR, 8, 8, 8, ncclBfloat16, mkLayoutRowMajorNK, 0),
			 ncclInvalidArgument);
	assert_int_equal(mkGemm(A_PTR, B_PTR, NULL, 8, 8, 8, ncclBfloat16, mkLayoutRowMajorNK, 0),
			 ncclInvalidArgument);
	assert_int_equal(mkGemm(A_PTR, B_PTR, C_PTR, 0, 8, 8, ncclBfloat16, mkLayoutRowMajorNK, 0),
			 ncclInvalidArgument);
	assert_int_equal(mkGemm(A_PTR, B_PTR, C_PTR, 8, 8, (size_t)INT_MAX + 1, ncclBfloat16,
				mkLayoutRowMajorNK, 0),
			 ncclInvalidArgument);
	assert_int_equal(mkGemm(A_PTR, B_PTR, C_PTR, 8, 8, 8, ncclFloat16, mkLayoutRowMajorNK, 0),
			 ncclInvalidArgument);
	assert_int_equal(mkGemm(A_PTR, B_PTR, C_PTR, 8, 8, 8, ncclBfloat16, (mkLayout_t)2, 0),
			 ncclInvalidArgument);
	/* bf16 elements at odd addresses: refused, never handed to cuBLAS */
	assert_int_equal(mkGemm((const char *)A_PTR + 1, B_PTR, C_PTR, 8, 8, 8, ncclBfloat16,
				mkLayoutRowMajorNK, 0),
			 ncclInvalidArgument);
	assert_int_equal(mkGemm(A_PTR, (const char *)B_PTR + 3, C_PTR, 8, 8, 8, ncclBfloat16,
				mkLayoutRowMajorKN, 0),
			 ncclInvalidArgument);
	assert_int_equal(mkGemm(A_PTR, B_PTR, (char *)C_PTR + 1, 8, 8, 8, ncclBfloat16,
				mkLayoutRowMajorNK, 0),
			 ncclInvalidArgument);
}

/* No comm can exist without a GPU; a NULL one is refused before anything touches CUDA. */
static void test_mkgemm_allreduce_null_comm_refused(void **state)
{
	(void)state;
	assert_int_equal(mkGemmAllReduce(A_PTR, B_PTR, C_PTR, 8, 8, 8, ncclBfloat16,
					 mkLayoutRowMajorNK, NULL, 0),
			 ncclInvalidArgument);
	assert_int_equal(mkGemmAllReduce(NULL, NULL, NULL, 0, 0, 0, ncclBfloat16,
					 mkLayoutRowMajorNK, NULL, 0),
			 ncclInvalidArgument);
}

/* A pointer that is not a live comm (another object, a destroyed comm) is refused too. */
static void test_mkgemm_allreduce_foreign_comm_refused(void **state)
{
	struct mk_comm fake;

	(void)state;
	memset(&fake, 0, sizeof(fake));
	assert_int_equal(mkGemmAllReduce(A_PTR, B_PTR, C_PTR, 8, 8, 8, ncclBfloat16,
					 mkLayoutRowMajorNK, &fake, 0),
			 ncclInvalidArgument);
}

/*
 * The comm calls refuse a pointer mkCommInit did not hand out or that was destroyed, even one
 * whose header looks live, and they refuse it without reading it: a destroyed comm is never
 * destroyed (or aborted, or queried) twice.
 */
static void test_comm_calls_refuse_dead_or_foreign_comms(void **state)
{
	struct mk_comm fake;
	ncclResult_t ae = ncclSuccess;
	void *p = NULL;

	(void)state;
	memset(&fake, 0, sizeof(fake));
	fake.magic = MK_COMM_MAGIC; /* looks live, was never made */
	fake.nranks = 2;
	assert_int_equal(mkCommDestroy(&fake), ncclInvalidArgument);
	assert_int_equal(mkCommAbort(&fake), ncclInvalidArgument);
	assert_int_equal(mkCommGetAsyncError(&fake, &ae), ncclInvalidArgument);
	assert_int_equal(mkMemAlloc(&fake, 4096, &p), ncclInvalidArgument);
	assert_null(p);
	assert_int_equal(mkMemFree(&fake, C_PTR), ncclInvalidArgument);
	assert_int_equal(mkAllToAll(A_PTR, C_PTR, 8, ncclUint32, &fake, 0), ncclInvalidArgument);
	assert_int_equal(mkCommDestroy(NULL), ncclInvalidArgument);
	assert_int_equal(mkCommAbort(NULL), ncclInvalidArgument);
}

/*
 * mkGemmReduceScatter and mkAllGatherGemm: the same rules, and M must be a multiple of the
 * ranks; all refused before any CUDA call (a comm that looks live, of 4 ranks, is never used).
 */
static void test_seqpar_invalid_arguments_before_cuda(void **state)
{
	const mkLayout_t nk = mkLayoutRowMajorNK;
	struct mk_comm fake;

	(void)state;
	memset(&fake, 0, sizeof(fake));
	assert_int_equal(
		mkGemmReduceScatter(A_PTR, B_PTR, C_PTR, 8, 8, 8, ncclBfloat16, nk, NULL, 0),
		ncclInvalidArgument);
	assert_int_equal(
		mkAllGatherGemm(A_PTR, B_PTR, C_PTR, NULL, 8, 8, 8, ncclBfloat16, nk, &fake, 0),
		ncclInvalidArgument);
	fake.magic = MK_COMM_MAGIC;
	fake.nranks = 4;
	/* M = 10 is not a multiple of 4 ranks */
	assert_int_equal(
		mkGemmReduceScatter(A_PTR, B_PTR, C_PTR, 10, 8, 8, ncclBfloat16, nk, &fake, 0),
		ncclInvalidArgument);
	assert_int_equal(
		mkAllGatherGemm(A_PTR, B_PTR, C_PTR, NULL, 10, 8, 8, ncclBfloat16, nk, &fake, 0),
		ncclInvalidArgument);
	assert_int_equal(
		mkGemmReduceScatter(NULL, B_PTR, C_PTR, 8, 8, 8, ncclBfloat16, nk, &fake, 0),
		ncclInvalidArgument);
	assert_int_equal(
		mkGemmReduceScatter(A_PTR, B_PTR, C_PTR, 8, 0, 8, ncclBfloat16, nk, &fake, 0),
		ncclInvalidArgument);
	assert_int_equal(mkGemmReduceScatter(A_PTR, B_PTR, C_PTR, 8, 8, 8, ncclInt8, nk, &fake, 0),
			 ncclInvalidArgument);
	assert_int_equal(mkAllGatherGemm(A_PTR, B_PTR, C_PTR, NULL, 8, 8, 8, ncclBfloat16,
					 (mkLayout_t)2, &fake, 0),
			 ncclInvalidArgument);
	/* aGathered misaligned for bf16 */
	assert_int_equal(mkAllGatherGemm(A_PTR, B_PTR, C_PTR, (void *)(uintptr_t)0x40001, 8, 8, 8,
					 ncclBfloat16, nk, &fake, 0),
			 ncclInvalidArgument);
	assert_int_equal(mkAllGatherGemm(A_PTR, B_PTR, C_PTR, NULL, 8, 8, (size_t)INT_MAX + 1,
					 ncclBfloat16, nk, &fake, 0),
			 ncclInvalidArgument);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_mkgemm_invalid_arguments_before_cuda),
		cmocka_unit_test(test_mkgemm_allreduce_null_comm_refused),
		cmocka_unit_test(test_mkgemm_allreduce_foreign_comm_refused),
		cmocka_unit_test(test_comm_calls_refuse_dead_or_foreign_comms),
		cmocka_unit_test(test_seqpar_invalid_arguments_before_cuda),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
