/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Shared by the per-rank runtime GPU tests (one process per rank, started by
 * scripts/gpu/runtime-comm.sh): CUDA and NCCL call checks that name the rank, rank-prefixed
 * results, and the NCCL unique id handed from rank 0 to the others through a file.
 */
#ifndef MK_TEST_GPU_RUNTIME_RANK_CHECK_H
#define MK_TEST_GPU_RUNTIME_RANK_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda_runtime.h>
#include <nccl.h>

static int g_rank, g_failures;

#define CK(x)                                                                                      \
	do {                                                                                       \
		cudaError_t e_ = (x);                                                              \
		if (e_ != cudaSuccess) {                                                           \
			fprintf(stderr, "rank %d %s:%d %s: %s\n", g_rank, __FILE__, __LINE__, #x,  \
				cudaGetErrorString(e_));                                           \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)
#define NK(x)                                                                                      \
	do {                                                                                       \
		ncclResult_t r_ = (x);                                                             \
		if (r_ != ncclSuccess) {                                                           \
			fprintf(stderr, "rank %d %s:%d %s: %s\n", g_rank, __FILE__, __LINE__, #x,  \
				ncclGetErrorString(r_));                                           \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)

/* Print "rank R: ok what" or "rank R: FAIL what" and count failures. */
static void expect(int cond, const char *what)
{
	printf("rank %d: %s %s\n", g_rank, cond ? "ok" : "FAIL", what);
	fflush(stdout);
	if (!cond)
		g_failures++;
}

/* Rank 0 writes a fresh NCCL unique id to path (atomically); the others wait up to 60 s. */
static void get_id(int rank, const char *path, ncclUniqueId *id)
{
	if (rank == 0) {
		char tmp[512];
		FILE *f;

		NK(ncclGetUniqueId(id));
		snprintf(tmp, sizeof(tmp), "%s.tmp", path);
		f = fopen(tmp, "wb");
		if (f == NULL || fwrite(id, sizeof(*id), 1, f) != 1)
			exit(1);
		fclose(f);
		rename(tmp, path);
		return;
	}
	for (int i = 0; i < 60000; i++) {
		FILE *f = fopen(path, "rb");

		if (f != NULL) {
			size_t n = fread(id, sizeof(*id), 1, f);

			fclose(f);
			if (n == 1)
				return;
		}
		usleep(1000);
	}
	fprintf(stderr, "rank %d: no NCCL id in %s\n", rank, path);
	exit(1);
}

/* qsort order of floats (benchmark medians). */
static int cmp_f(const void *a, const void *b)
{
	float x = *(const float *)a, y = *(const float *)b;

	return x < y ? -1 : x > y;
}

struct rank_args {
	int rank, nranks, nnodes, nlocal;
	int device; /* CUDA device of this rank: MK_TEST_DEVICE, default 0 */
	const char *idfile;
};

/*
 * "RANK NRANKS IDFILE NNODES NLOCAL [options]": 0 and *a filled (g_rank set), 2 after printing
 * the usage (`opts` lists the options) or when MK_TEST_DEVICE names no device, or 77 where there
 * is no CUDA device. The launcher (scripts/gpu/runtime-comm.sh) sets MK_TEST_DEVICE to the rank's
 * GPU where each rank has its own; every rank on GPU 0 otherwise.
 */
static int rank_args_parse(int argc, char **argv, const char *opts, struct rank_args *a)
{
	const char *dev = getenv("MK_TEST_DEVICE");
	int ndev = 0;
	char *end;

	if (argc < 6) {
		fprintf(stderr, "usage: %s RANK NRANKS IDFILE NNODES NLOCAL %s\n", argv[0], opts);
		return 2;
	}
	if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
		printf("no CUDA device: skipped\n");
		return 77;
	}
	a->rank = g_rank = atoi(argv[1]);
	a->nranks = atoi(argv[2]);
	a->idfile = argv[3];
	a->nnodes = atoi(argv[4]);
	a->nlocal = atoi(argv[5]);
	a->device = 0;
	if (dev != NULL && dev[0] != '\0') {
		long d = strtol(dev, &end, 10);

		if (*end != '\0' || d < 0 || d >= ndev) {
			fprintf(stderr, "rank %d: MK_TEST_DEVICE=%s is not one of the %d devices\n",
				a->rank, dev, ndev);
			return 2;
		}
		a->device = (int)d;
	}
	return 0;
}

/* 1 if `name` is among the options after the five positional arguments. */
static int rank_has_opt(int argc, char **argv, const char *name)
{
	for (int i = 6; i < argc; i++) {
		if (strcmp(argv[i], name) == 0)
			return 1;
	}
	return 0;
}

/* The rank's GPU and an NCCL communicator over all ranks (the unique id through a->idfile). */
static void rank_nccl_init(const struct rank_args *a, ncclComm_t *nccl)
{
	ncclUniqueId id;

	CK(cudaSetDevice(a->device));
	get_id(a->rank, a->idfile, &id);
	NK(ncclCommInitRank(nccl, a->nranks, id, a->rank));
}

#endif /* MK_TEST_GPU_RUNTIME_RANK_CHECK_H */
