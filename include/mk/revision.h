/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The source revision this build was made from (`git describe --always --dirty`, "unknown"
 * outside git), for the records benchmarks write. A function in util/revision.c rather than the
 * generated mk_git.h in each tool: nvcc reports no header dependencies, so a CUDA file that
 * included mk_git.h kept the revision of its first build.
 */
#ifndef MK_REVISION_H
#define MK_REVISION_H

#ifdef __cplusplus
extern "C" {
#endif

const char *mk_git_revision(void);

#ifdef __cplusplus
}
#endif

#endif
