/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Mock of the verbs seam: a function table for mk_verbs_lib_override() plus fake ibv_context,
 * ibv_pd, ibv_cq, ibv_qp and ibv_mr objects whose provider ops (post_send, post_recv, poll_cq)
 * point at mocks. Counters of live objects catch leaks on every unwind path; fail_* fields inject
 * failures (0 = never, n = the n-th call fails).
 */
#ifndef MK_TEST_UNIT_VERBS_MOCK_IBV_H
#define MK_TEST_UNIT_VERBS_MOCK_IBV_H

#include <stdint.h>

#include "verbs.h"

#define MOCK_MAX_WC   64
#define MOCK_MAX_DEVS 4

struct mock_ibv {
	struct mk_ibv_lib lib;

	/* devices returned by get_device_list */
	int ndevices;
	struct ibv_device devices[MOCK_MAX_DEVS];
	struct ibv_device *list[MOCK_MAX_DEVS + 1];

	/* what the fake device reports */
	struct ibv_device_attr dev_attr;
	struct ibv_port_attr port_attr;
	union ibv_gid gids[8];

	/* failure injection: n-th call fails (0 = never); errno to set */
	int fail_open, fail_query_port, fail_alloc_pd, fail_create_cq, fail_create_qp;
	int fail_modify_qp, fail_post_send, fail_post_recv, fail_reg_mr;
	int fail_errno;
	int dmabuf_errno; /* errno from reg_dmabuf_mr with fd -1 */
	/* inline bytes a QP gets at most; refuse_inline: asking for more is EINVAL, not clamped */
	int max_inline;
	int refuse_inline;

	/* call counts */
	int n_open, n_query_port, n_alloc_pd, n_create_cq, n_create_qp, n_modify_qp;
	int n_post_send, n_post_recv, n_reg_mr, n_reg_iova2, n_reg_dmabuf;

	/* live objects: must be 0 after every unwind and after fini */
	int live_ctx, live_pd, live_cq, live_qp, live_mr, live_list;

	/* last posted send WR, copied */
	struct ibv_send_wr last_wr;
	struct ibv_sge last_sge;
	int last_has_sge;
	unsigned int last_access;
	struct ibv_qp_attr last_qp_attr;
	int last_qp_mask;

	/* completions poll_cq hands out, in order */
	struct ibv_wc wcs[MOCK_MAX_WC];
	int nwc, wc_pos;
	int poll_error; /* poll_cq returns this when non-zero */

	uint32_t next_qpn;
	uint32_t next_key;
};

extern struct mock_ibv mock;

/* Reset counters and defaults (one active IB port, LID 7) and install the table. */
void mock_reset(void);
/* Queue a completion for poll_cq. */
void mock_push_wc(uint64_t wr_id, enum ibv_wc_status st, enum ibv_wc_opcode op, uint32_t qpn,
		  uint32_t imm_be, uint32_t byte_len);

#endif
