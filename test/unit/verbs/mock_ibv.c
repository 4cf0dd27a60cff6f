// SPDX-License-Identifier: Apache-2.0
/* Mock verbs seam for the unit tests of the verbs backend (see mock_ibv.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "mock_ibv.h"

struct mock_ibv mock;

static int mock_hit(int *count, int fail_at)
{
	(*count)++;
	if (fail_at != 0 && *count == fail_at) {
		errno = mock.fail_errno ? mock.fail_errno : ENOMEM;
		return 1;
	}
	return 0;
}

static int m_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
	int got = 0;

	if (mock.poll_error)
		return mock.poll_error;
	while (got < n && mock.wc_pos < mock.nwc)
		wc[got++] = mock.wcs[mock.wc_pos++];
	return got;
}

static int m_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
	if (mock_hit(&mock.n_post_send, mock.fail_post_send)) {
		*bad = wr;
		return mock.fail_errno ? mock.fail_errno : ENOMEM;
	}
	mock.last_wr = *wr;
	mock.last_has_sge = wr->num_sge > 0 && wr->sg_list != NULL;
	if (mock.last_has_sge)
		mock.last_sge = wr->sg_list[0];
	return 0;
}

static int m_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
	if (mock_hit(&mock.n_post_recv, mock.fail_post_recv)) {
		*bad = wr;
		return mock.fail_errno ? mock.fail_errno : ENOMEM;
	}
	return 0;
}

static struct ibv_device **m_get_device_list(int *num)
{
	for (int i = 0; i < mock.ndevices; i++)
		mock.list[i] = &mock.devices[i];
	mock.list[mock.ndevices] = NULL;
	*num = mock.ndevices;
	mock.live_list++;
	return mock.list;
}

static void m_free_device_list(struct ibv_device **list)
{
	mock.live_list--;
}

static const char *m_get_device_name(struct ibv_device *dev)
{
	return dev->name;
}

static struct ibv_context *m_open_device(struct ibv_device *dev)
{
	struct ibv_context *ctx;

	if (mock_hit(&mock.n_open, mock.fail_open))
		return NULL;
	ctx = calloc(1, sizeof(*ctx));
	ctx->device = dev;
	ctx->ops.poll_cq = m_poll_cq;
	ctx->ops.post_send = m_post_send;
	ctx->ops.post_recv = m_post_recv;
	mock.live_ctx++;
	return ctx;
}

static int m_close_device(struct ibv_context *ctx)
{
	free(ctx);
	mock.live_ctx--;
	return 0;
}

static int m_query_device(struct ibv_context *ctx, struct ibv_device_attr *attr)
{
	*attr = mock.dev_attr;
	return 0;
}

static int m_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr)
{
	if (mock_hit(&mock.n_query_port, mock.fail_query_port))
		return -1;
	*attr = mock.port_attr;
	return 0;
}

static int m_query_gid(struct ibv_context *ctx, uint8_t port, int index, union ibv_gid *gid)
{
	if (index < 0 || index >= 8) {
		errno = EINVAL;
		return -1;
	}
	*gid = mock.gids[index];
	return 0;
}

static struct ibv_pd *m_alloc_pd(struct ibv_context *ctx)
{
	struct ibv_pd *pd;

	if (mock_hit(&mock.n_alloc_pd, mock.fail_alloc_pd))
		return NULL;
	pd = calloc(1, sizeof(*pd));
	pd->context = ctx;
	mock.live_pd++;
	return pd;
}

static int m_dealloc_pd(struct ibv_pd *pd)
{
	free(pd);
	mock.live_pd--;
	return 0;
}

static struct ibv_mr *mock_new_mr(struct ibv_pd *pd, void *addr, size_t len)
{
	struct ibv_mr *mr = calloc(1, sizeof(*mr));

	mr->pd = pd;
	mr->context = pd->context;
	mr->addr = addr;
	mr->length = len;
	mr->lkey = ++mock.next_key;
	mr->rkey = 0x1000 + mock.next_key;
	mock.live_mr++;
	return mr;
}

static struct ibv_mr *m_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access)
{
	if (mock_hit(&mock.n_reg_mr, mock.fail_reg_mr))
		return NULL;
	mock.last_access = (unsigned int)access;
	return mock_new_mr(pd, addr, len);
}

static struct ibv_mr *m_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t len, uint64_t iova,
				     unsigned int access)
{
	mock.n_reg_iova2++;
	if (mock_hit(&mock.n_reg_mr, mock.fail_reg_mr))
		return NULL;
	mock.last_access = access;
	return mock_new_mr(pd, addr, len);
}

static struct ibv_mr *m_reg_dmabuf_mr(struct ibv_pd *pd, uint64_t off, size_t len, uint64_t iova,
				      int fd, int access)
{
	mock.n_reg_dmabuf++;
	if (fd < 0) {
		errno = mock.dmabuf_errno;
		return NULL;
	}
	mock.last_access = (unsigned int)access;
	return mock_new_mr(pd, (void *)(uintptr_t)iova, len);
}

static int m_dereg_mr(struct ibv_mr *mr)
{
	free(mr);
	mock.live_mr--;
	return 0;
}

static struct ibv_cq *m_create_cq(struct ibv_context *ctx, int cqe, void *cq_ctx,
				  struct ibv_comp_channel *ch, int vec)
{
	struct ibv_cq *cq;

	if (mock_hit(&mock.n_create_cq, mock.fail_create_cq))
		return NULL;
	cq = calloc(1, sizeof(*cq));
	cq->context = ctx;
	cq->cqe = cqe;
	mock.live_cq++;
	return cq;
}

static int m_destroy_cq(struct ibv_cq *cq)
{
	free(cq);
	mock.live_cq--;
	return 0;
}

static struct ibv_qp *m_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	struct ibv_qp *qp;

	if (mock_hit(&mock.n_create_qp, mock.fail_create_qp))
		return NULL;
	if (attr->cap.max_inline_data > (uint32_t)mock.max_inline) {
		if (mock.refuse_inline) {
			errno = EINVAL;
			return NULL;
		}
		attr->cap.max_inline_data = (uint32_t)mock.max_inline; /* the caps written back */
	}
	qp = calloc(1, sizeof(*qp));
	qp->context = pd->context;
	qp->pd = pd;
	qp->send_cq = attr->send_cq;
	qp->recv_cq = attr->recv_cq;
	qp->qp_type = attr->qp_type;
	qp->qp_num = ++mock.next_qpn;
	mock.live_qp++;
	return qp;
}

static int m_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask)
{
	if (mock_hit(&mock.n_modify_qp, mock.fail_modify_qp))
		return mock.fail_errno ? mock.fail_errno : EINVAL;
	mock.last_qp_attr = *attr;
	mock.last_qp_mask = mask;
	qp->state = attr->qp_state;
	return 0;
}

static int m_destroy_qp(struct ibv_qp *qp)
{
	free(qp);
	mock.live_qp--;
	return 0;
}

static const char *m_wc_status_str(enum ibv_wc_status st)
{
	switch (st) {
	case IBV_WC_RETRY_EXC_ERR:
		return "transport retry counter exceeded";
	case IBV_WC_REM_ACCESS_ERR:
		return "remote access error";
	default:
		return "mock status";
	}
}

void mock_reset(void)
{
	memset(&mock, 0, sizeof(mock));
	mock.lib = (struct mk_ibv_lib){
		.get_device_list = m_get_device_list,
		.free_device_list = m_free_device_list,
		.get_device_name = m_get_device_name,
		.open_device = m_open_device,
		.close_device = m_close_device,
		.query_device = m_query_device,
		.query_port = m_query_port,
		.query_gid = m_query_gid,
		.alloc_pd = m_alloc_pd,
		.dealloc_pd = m_dealloc_pd,
		.reg_mr = m_reg_mr,
		.dereg_mr = m_dereg_mr,
		.create_cq = m_create_cq,
		.destroy_cq = m_destroy_cq,
		.create_qp = m_create_qp,
		.modify_qp = m_modify_qp,
		.destroy_qp = m_destroy_qp,
		.wc_status_str = m_wc_status_str,
		.reg_mr_iova2 = m_reg_mr_iova2,
		.reg_dmabuf_mr = m_reg_dmabuf_mr,
	};
	mock.ndevices = 1;
	strcpy(mock.devices[0].name, "mlx5_0");
	mock.devices[0].transport_type = IBV_TRANSPORT_IB;
	mock.devices[0].node_type = IBV_NODE_CA;
	mock.dev_attr.phys_port_cnt = 1;
	mock.dev_attr.max_qp = 1024;
	mock.dev_attr.max_qp_wr = 4096;
	mock.dev_attr.max_cqe = 65536;
	mock.dev_attr.node_guid = htobe64(0x0123456789abcdefull);
	mock.port_attr.state = IBV_PORT_ACTIVE;
	mock.port_attr.link_layer = IBV_LINK_LAYER_INFINIBAND;
	mock.port_attr.active_mtu = IBV_MTU_4096;
	mock.port_attr.gid_tbl_len = 4;
	mock.port_attr.lid = 7;
	mock.port_attr.active_width = 2;  /* 4x */
	mock.port_attr.active_speed = 64; /* HDR: 50 Gb/s per lane */
	mock.port_attr.max_msg_sz = 1u << 30;
	mock.dmabuf_errno = EOPNOTSUPP;
	mock.lib.reg_dmabuf_mr = m_reg_dmabuf_mr;
	mk_verbs_lib_override(&mock.lib);
}

void mock_push_wc(uint64_t wr_id, enum ibv_wc_status st, enum ibv_wc_opcode op, uint32_t qpn,
		  uint32_t imm_be, uint32_t byte_len)
{
	struct ibv_wc *wc = &mock.wcs[mock.nwc++];

	memset(wc, 0, sizeof(*wc));
	wc->wr_id = wr_id;
	wc->status = st;
	wc->opcode = op;
	wc->qp_num = qpn;
	wc->imm_data = imm_be;
	wc->byte_len = byte_len;
	wc->wc_flags = imm_be ? IBV_WC_WITH_IMM : 0;
}
