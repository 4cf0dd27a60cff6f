/* SPDX-License-Identifier: Apache-2.0 */
/* Checks shared by the single-process runtime GPU tests: CUDA call checks and named results. */
#ifndef MK_TEST_GPU_RUNTIME_CHECK_H
#define MK_TEST_GPU_RUNTIME_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#include <cuda_runtime.h>

#define CK(x)                                                                                      \
	do {                                                                                       \
		cudaError_t e_ = (x);                                                              \
		if (e_ != cudaSuccess) {                                                           \
			fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x,                  \
				cudaGetErrorString(e_));                                           \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)

static int failures;

/* Print "ok what" or "FAIL what" and count failures. */
static void expect(int cond, const char *what)
{
	printf("%s %s\n", cond ? "ok" : "FAIL", what);
	if (!cond)
		failures++;
}

#endif /* MK_TEST_GPU_RUNTIME_CHECK_H */
