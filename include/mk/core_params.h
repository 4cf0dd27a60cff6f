/* SPDX-License-Identifier: Apache-2.0 */
/* Knobs of the transport core shared by every backend (defined in transport/core/params.c). */
#ifndef MK_CORE_PARAMS_H
#define MK_CORE_PARAMS_H

#include "mk/param.h"

MK_PARAM_DECLARE_STR(transport);	 /* MKERNEL_TRANSPORT */
MK_PARAM_DECLARE_INT(timeout_ms);	 /* MKERNEL_TIMEOUT */
MK_PARAM_DECLARE_INT(keepalive_ms);	 /* MKERNEL_KEEPALIVE */
MK_PARAM_DECLARE_INT(mr_cache);		 /* MKERNEL_MR_CACHE */
MK_PARAM_DECLARE_INT(dump_params);	 /* MKERNEL_DUMP_PARAMS */
MK_PARAM_DECLARE_INT(stripe_min);	 /* MKERNEL_STRIPE_MIN */
MK_PARAM_DECLARE_INT(max_recvs);	 /* MKERNEL_MAX_RECVS */
MK_PARAM_DECLARE_INT(eager_bytes);	 /* MKERNEL_EAGER_BYTES */
MK_PARAM_DECLARE_INT(eager_cts_wait_us); /* MKERNEL_EAGER_CTS_WAIT */
MK_PARAM_DECLARE_INT(poll_share_ns);	 /* MKERNEL_POLL_SHARE_NS */

#endif
