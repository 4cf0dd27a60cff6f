/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Error convention: every internal function returns 0 or a negative errno. Conversion to
 * ncclResult_t happens once, at the NCCL or public-API edge (mk/result.h).
 */
#ifndef MK_ERR_H
#define MK_ERR_H

#include <errno.h>
#include <string.h>

/* Text for a negative errno; never NULL, safe from any thread (glibc's table, no buffer). */
static inline const char *mk_strerror(int rc)
{
	const char *s;

	if (rc < 0)
		rc = -rc;
	s = strerrordesc_np(rc);
	return s != NULL ? s : "unknown error";
}

#endif /* MK_ERR_H */
