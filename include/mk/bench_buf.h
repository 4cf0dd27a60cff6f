/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Message buffers of the benchmark tools: mkernel-netbench and the raw libfabric ceiling allocate
 * theirs the same way, so neither side of a comparison gets the better memory. 2 MiB aligned and
 * asking for transparent huge pages: over shm every byte is copied by the kernel page by page,
 * and with 4 KiB pages a process pair's speed depended on where its pages lay (16 MiB with one
 * in flight 9.0-11.8 GB/s from one pair to the next, 13.1-14.2 with huge pages;
 * docs/benchmarks.md). Only a hint: where the kernel says "never" the pages stay 4 KiB.
 */
#ifndef MK_BENCH_BUF_H
#define MK_BENCH_BUF_H

#include <stdlib.h>
#include <sys/mman.h>

static inline void *mk_bench_alloc(size_t bytes)
{
	const size_t huge = (size_t)2 << 20;
	size_t len = (bytes + huge - 1) & ~(huge - 1);
	void *p = aligned_alloc(huge, len);

	if (p != NULL)
		(void)madvise(p, len, MADV_HUGEPAGE);
	return p;
}

#endif /* MK_BENCH_BUF_H */
