// SPDX-License-Identifier: Apache-2.0
/* Mock libfabric: the library table and fake fabric/domain/cq/av/ep/mr objects (see ofi_mock.h). */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "ofi_mock.h"

struct mock_ofi mock;

/* ---- fi_info lists ---- */

static struct fi_info *info_alloc(void)
{
	struct fi_info *i = calloc(1, sizeof(*i));

	i->fabric_attr = calloc(1, sizeof(*i->fabric_attr));
	i->domain_attr = calloc(1, sizeof(*i->domain_attr));
	i->ep_attr = calloc(1, sizeof(*i->ep_attr));
	i->tx_attr = calloc(1, sizeof(*i->tx_attr));
	i->rx_attr = calloc(1, sizeof(*i->rx_attr));
	return i;
}

static void info_free_one(struct fi_info *i)
{
	free(i->fabric_attr->prov_name);
	free(i->fabric_attr->name);
	free(i->domain_attr->name);
	free(i->fabric_attr);
	free(i->domain_attr);
	free(i->ep_attr);
	free(i->tx_attr);
	free(i->rx_attr);
	free(i);
}

static void m_freeinfo(struct fi_info *info)
{
	while (info != NULL) {
		struct fi_info *next = info->next;

		info_free_one(info);
		info = next;
	}
}

static char *dup_or_null(const char *s)
{
	return s != NULL ? strdup(s) : NULL;
}

static struct fi_info *m_dupinfo(const struct fi_info *src)
{
	struct fi_info *i;

	if (++mock.dupinfo_calls == mock.dupinfo_fail_at)
		return NULL;
	i = info_alloc();

	if (src == NULL)
		return i;
	*i->fabric_attr = *src->fabric_attr;
	*i->domain_attr = *src->domain_attr;
	*i->ep_attr = *src->ep_attr;
	i->tx_attr->inject_size = src->tx_attr->inject_size;
	i->tx_attr->msg_order = src->tx_attr->msg_order;
	i->fabric_attr->prov_name = dup_or_null(src->fabric_attr->prov_name);
	i->fabric_attr->name = dup_or_null(src->fabric_attr->name);
	i->domain_attr->name = dup_or_null(src->domain_attr->name);
	i->caps = src->caps;
	i->mode = src->mode;
	i->addr_format = src->addr_format;
	i->next = src->next; /* as libfabric does: the caller cuts the list */
	return i;
}

struct fi_info *mock_info_add(const char *prov, const char *domain, uint64_t mr_mode,
			      size_t cq_data_size)
{
	struct fi_info *i = info_alloc();
	struct fi_info **tail = &mock.list;

	i->fabric_attr->prov_name = strdup(prov);
	i->fabric_attr->name = strdup("fabric");
	i->domain_attr->name = strdup(domain);
	i->domain_attr->mr_mode = mr_mode;
	i->domain_attr->cq_data_size = cq_data_size;
	i->domain_attr->mr_key_size = 8;
	i->ep_attr->max_msg_size = 1ull << 30;
	i->caps = FI_MSG | FI_RMA;
	i->addr_format = FI_SOCKADDR_IN;
	while (*tail != NULL)
		tail = &(*tail)->next;
	*tail = i;
	return i;
}

/* Match the query like a provider would: by provider and domain name when the hints name them. */
static int m_getinfo(uint32_t version, const char *node, const char *service, uint64_t flags,
		     const struct fi_info *hints, struct fi_info **out)
{
	struct fi_info *head = NULL, **tail = &head;

	if (mock.getinfo_rc)
		return mock.getinfo_rc;
	for (struct fi_info *i = mock.list; i != NULL; i = i->next) {
		const char *p = hints->fabric_attr->prov_name;
		const char *d = hints->domain_attr->name;
		struct fi_info *c;

		if (p != NULL && strcmp(p, i->fabric_attr->prov_name) != 0)
			continue;
		if (d != NULL && strcmp(d, i->domain_attr->name) != 0)
			continue;
		if ((hints->caps & FI_HMEM) && !(i->caps & FI_HMEM))
			continue;
		mock.dupinfo_calls--; /* the library's own copies are not the caller's */
		c = m_dupinfo(i);
		c->next = NULL;
		*tail = c;
		tail = &c->next;
	}
	*out = head;
	return head == NULL ? -FI_ENODATA : 0;
}

static const char *m_strerror(int err)
{
	return err == 0 ? "success" : "mock error";
}

static uint32_t m_version(void)
{
	return FI_VERSION(1, 17);
}

static char *m_tostr(const void *data, enum fi_type t)
{
	return (char *)"";
}

/* ---- fake objects ---- */

static int m_close(struct fid *fid)
{
	switch (fid->fclass) {
	case FI_CLASS_FABRIC:
		mock.fabric_live--;
		break;
	case FI_CLASS_DOMAIN:
		mock.domain_live--;
		break;
	case FI_CLASS_CQ:
		mock.cq_live--;
		break;
	case FI_CLASS_AV:
		mock.av_live--;
		break;
	case FI_CLASS_EP:
		mock.ep_live--;
		for (int i = 0; i < mock.neps; i++) {
			if (mock.eps[i] != NULL && &mock.eps[i]->ep.fid == fid)
				mock.eps[i] = NULL;
		}
		break;
	case FI_CLASS_MR:
		mock.mr_live--;
		break;
	}
	free(fid->context); /* the fake object itself */
	return 0;
}

static int m_bind(struct fid *fid, struct fid *bfid, uint64_t flags)
{
	struct mock_ep *ep = fid->context;

	if (mock.fail_bind)
		return mock.fail_bind;
	if (bfid->fclass == FI_CLASS_CQ)
		ep->cq = bfid->context;
	return 0;
}

static int m_control(struct fid *fid, int cmd, void *arg)
{
	return cmd == FI_ENABLE ? mock.fail_enable : -FI_ENOSYS;
}

static struct fi_ops m_fid_ops = {
	.size = sizeof(struct fi_ops),
	.close = m_close,
	.bind = m_bind,
	.control = m_control,
};

/* Each fake starts with its fid; context points back at the allocation for m_close. */
static void *fake(size_t size, size_t fclass, int *live)
{
	struct fid *f = calloc(1, size);

	f->fclass = fclass;
	f->context = f;
	f->ops = &m_fid_ops;
	(*live)++;
	return f;
}

/*
 * The CQs are the one part of the mock two threads use at once (a progress thread reads while
 * the test pushes), so their reads and pushes take this lock, as a FI_THREAD_SAFE domain's do.
 */
static pthread_mutex_t mock_cq_lock = PTHREAD_MUTEX_INITIALIZER;

static ssize_t m_cq_read(struct fid_cq *cq, void *buf, size_t count)
{
	struct mock_cq *m = cq->fid.context;
	struct fi_cq_data_entry *out = buf;
	size_t n = 0;
	ssize_t rc;

	pthread_mutex_lock(&mock_cq_lock);
	if (m->nerr > 0) {
		rc = -FI_EAVAIL;
		goto out;
	}
	while (n < count && m->head != m->tail) {
		out[n++] = m->ent[m->head];
		m->head = (m->head + 1) % MOCK_CQ_DEPTH;
	}
	rc = n > 0 ? (ssize_t)n : -FI_EAGAIN;
out:
	pthread_mutex_unlock(&mock_cq_lock);
	return rc;
}

static ssize_t m_cq_readerr(struct fid_cq *cq, struct fi_cq_err_entry *buf, uint64_t flags)
{
	struct mock_cq *m = cq->fid.context;
	ssize_t rc = 1;

	pthread_mutex_lock(&mock_cq_lock);
	if (m->nerr == 0) {
		rc = -FI_EAGAIN;
	} else {
		*buf = m->err[0];
		memmove(m->err, m->err + 1, (size_t)(--m->nerr) * sizeof(m->err[0]));
	}
	pthread_mutex_unlock(&mock_cq_lock);
	return rc;
}

int mock_cq_pending(struct mock_ep *ep)
{
	struct mock_cq *m = ep->cq;
	int n;

	pthread_mutex_lock(&mock_cq_lock);
	n = (m->tail - m->head + MOCK_CQ_DEPTH) % MOCK_CQ_DEPTH + m->nerr;
	pthread_mutex_unlock(&mock_cq_lock);
	return n;
}

static const char *m_cq_strerror(struct fid_cq *cq, int prov_errno, const void *err_data, char *buf,
				 size_t len)
{
	return "mock provider error";
}

static struct fi_ops_cq m_cq_ops = {
	.size = sizeof(struct fi_ops_cq),
	.read = m_cq_read,
	.readerr = m_cq_readerr,
	.strerror = m_cq_strerror,
};

static int m_av_insert(struct fid_av *av, const void *addr, size_t count, fi_addr_t *fi_addr,
		       uint64_t flags, void *context)
{
	struct mock_av *m = av->fid.context;

	if (mock.fail_av_insert)
		return mock.fail_av_insert;
	/* the tests use endpoint names no longer than 32 bytes, one per insert */
	m->addrlen = 32;
	memcpy(m->addr, addr, m->addrlen);
	*fi_addr = (fi_addr_t)m->inserted++;
	return (int)count;
}

static struct fi_ops_av m_av_ops = {
	.size = sizeof(struct fi_ops_av),
	.insert = m_av_insert,
};

static int m_getname(fid_t fid, void *addr, size_t *addrlen)
{
	struct mock_ep *ep = fid->context;

	if (mock.fail_getname)
		return mock.fail_getname;
	if (*addrlen < ep->addrlen) {
		*addrlen = ep->addrlen;
		return -FI_ETOOSMALL;
	}
	memcpy(addr, ep->addr, ep->addrlen);
	*addrlen = ep->addrlen;
	return 0;
}

static struct fi_ops_cm m_cm_ops = {
	.size = sizeof(struct fi_ops_cm),
	.getname = m_getname,
};

static ssize_t m_recv(struct fid_ep *e, void *buf, size_t len, void *desc, fi_addr_t src, void *ctx)
{
	struct mock_ep *ep = e->fid.context;

	if (mock.fail_recv)
		return mock.fail_recv;
	ep->rx_buf = buf;
	ep->rx_len = len;
	ep->rx_ctx = ctx;
	return 0;
}

static ssize_t m_send(struct fid_ep *e, const void *buf, size_t len, void *desc, fi_addr_t dest,
		      void *ctx)
{
	struct mock_ep *ep = e->fid.context;

	if (mock.fail_send)
		return mock.fail_send;
	memcpy(ep->tx_buf, buf, len < sizeof(ep->tx_buf) ? len : sizeof(ep->tx_buf));
	ep->tx_len = len;
	ep->tx_ctx = ctx;
	return 0;
}

static struct fi_ops_msg m_msg_ops = {
	.size = sizeof(struct fi_ops_msg),
	.recv = m_recv,
	.send = m_send,
};

static ssize_t m_rmamsg(struct fid_ep *e, const struct fi_msg_rma *msg, uint64_t flags)
{
	struct mock_ep *ep = e->fid.context;

	if (mock.write_rc)
		return mock.write_rc;
	ep->prev_iov = ep->last_iov;
	ep->prev_rma_iov = ep->last_rma_iov;
	ep->prev_data = ep->last_rma.data;
	ep->prev_flags = ep->last_flags;
	ep->prev_context = ep->last_rma.context;
	ep->last_rma = *msg;
	ep->last_iov = msg->msg_iov[0];
	ep->last_desc = msg->desc != NULL ? msg->desc[0] : NULL;
	ep->last_rma_iov = msg->rma_iov[0];
	ep->last_flags = flags;
	ep->nwrites++;
	return 0;
}

static ssize_t m_injectdata(struct fid_ep *e, const void *buf, size_t len, uint64_t data,
			    fi_addr_t dest, uint64_t addr, uint64_t key)
{
	struct mock_ep *ep = e->fid.context;

	(void)buf;
	(void)dest;
	(void)key;
	if (mock.write_rc)
		return mock.write_rc;
	ep->ninjects++;
	ep->prev_inject_len = ep->inject_len;
	ep->prev_inject_data = ep->inject_data;
	ep->prev_inject_raddr = ep->inject_raddr;
	ep->inject_len = len;
	ep->inject_data = data;
	ep->inject_has_data = true;
	ep->inject_raddr = addr;
	return 0;
}

static ssize_t m_inject(struct fid_ep *e, const void *buf, size_t len, fi_addr_t dest,
			uint64_t addr, uint64_t key)
{
	struct mock_ep *ep = e->fid.context;
	ssize_t rc = m_injectdata(e, buf, len, 0, dest, addr, key);

	ep->inject_has_data = false;
	return rc;
}

static struct fi_ops_rma m_rma_ops = {
	.size = sizeof(struct fi_ops_rma),
	.readmsg = m_rmamsg,
	.writemsg = m_rmamsg,
	.inject = m_inject,
	.injectdata = m_injectdata,
};

static int m_cq_open(struct fid_domain *d, struct fi_cq_attr *attr, struct fid_cq **out, void *ctx)
{
	struct mock_cq *cq;

	if (mock.fail_cq_open)
		return mock.fail_cq_open;
	cq = fake(sizeof(*cq), FI_CLASS_CQ, &mock.cq_live);
	cq->cq.ops = &m_cq_ops;
	*out = &cq->cq;
	return 0;
}

static int m_av_open(struct fid_domain *d, struct fi_av_attr *attr, struct fid_av **out, void *ctx)
{
	struct mock_av *av;

	if (mock.fail_av_open)
		return mock.fail_av_open;
	av = fake(sizeof(*av), FI_CLASS_AV, &mock.av_live);
	av->av.ops = &m_av_ops;
	*out = &av->av;
	return 0;
}

static int m_endpoint(struct fid_domain *d, struct fi_info *info, struct fid_ep **out, void *ctx)
{
	struct mock_ep *ep;

	if (mock.fail_endpoint)
		return mock.fail_endpoint;
	if (++mock.endpoint_calls == mock.endpoint_fail_at)
		return -FI_EIO;
	ep = fake(sizeof(*ep), FI_CLASS_EP, &mock.ep_live);
	ep->ep.cm = &m_cm_ops;
	ep->ep.msg = &m_msg_ops;
	ep->ep.rma = &m_rma_ops;
	ep->addrlen = 16;
	memset(ep->addr, 0x10 + mock.neps, ep->addrlen);
	if (mock.next_addr != NULL) {
		ep->addrlen = strlen(mock.next_addr);
		memcpy(ep->addr, mock.next_addr, ep->addrlen);
	}
	if (mock.neps < (int)MK_ARRAY_SIZE(mock.eps))
		mock.eps[mock.neps++] = ep;
	*out = &ep->ep;
	return 0;
}

static struct fi_ops_domain m_domain_ops = {
	.size = sizeof(struct fi_ops_domain),
	.av_open = m_av_open,
	.cq_open = m_cq_open,
	.endpoint = m_endpoint,
};

static int m_mr_reg(struct fid *fid, const void *buf, size_t len, uint64_t access, uint64_t off,
		    uint64_t requested_key, uint64_t flags, struct fid_mr **out, void *ctx)
{
	struct fid_mr *mr;

	if (mock.fail_mr_reg)
		return mock.fail_mr_reg;
	if (mock.nkeys < MOCK_MAX_KEYS)
		mock.requested_keys[mock.nkeys++] = requested_key;
	if (mock.enokey_next > 0) {
		mock.enokey_next--;
		return -FI_ENOKEY;
	}
	mr = fake(sizeof(*mr), FI_CLASS_MR, &mock.mr_live);
	mr->key = (mock.mr_mode & FI_MR_PROV_KEY) ? mock.prov_key_next++ : requested_key;
	mr->mem_desc = (void *)(uintptr_t)(0xd000 + mr->key);
	*out = mr;
	return 0;
}

static struct fi_ops_mr m_mr_ops = {
	.size = sizeof(struct fi_ops_mr),
	.reg = m_mr_reg,
};

static int m_domain(struct fid_fabric *f, struct fi_info *info, struct fid_domain **out, void *ctx)
{
	struct fid_domain *d;

	if (mock.fail_domain)
		return mock.fail_domain;
	d = fake(sizeof(*d), FI_CLASS_DOMAIN, &mock.domain_live);
	d->ops = &m_domain_ops;
	d->mr = &m_mr_ops;
	mock.mr_mode = info->domain_attr->mr_mode;
	*out = d;
	return 0;
}

static struct fi_ops_fabric m_fabric_ops = {
	.size = sizeof(struct fi_ops_fabric),
	.domain = m_domain,
};

static int m_fabric(struct fi_fabric_attr *attr, struct fid_fabric **out, void *ctx)
{
	struct fid_fabric *f;

	if (mock.fail_fabric)
		return mock.fail_fabric;
	f = fake(sizeof(*f), FI_CLASS_FABRIC, &mock.fabric_live);
	f->ops = &m_fabric_ops;
	*out = f;
	return 0;
}

const struct mk_ofi_lib mock_lib = {
	.getinfo = m_getinfo,
	.freeinfo = m_freeinfo,
	.dupinfo = m_dupinfo,
	.fabric = m_fabric,
	.strerror = m_strerror,
	.version = m_version,
	.tostr = m_tostr,
	.path = "mock",
};

void mock_reset(void)
{
	m_freeinfo(mock.list);
	memset(&mock, 0, sizeof(mock));
	mock.prov_key_next = 0x1000;
}

void mock_cq_push(struct mock_ep *ep, void *ctx, uint64_t flags, size_t len, uint64_t data)
{
	struct mock_cq *m = ep->cq;

	pthread_mutex_lock(&mock_cq_lock);
	m->ent[m->tail] = (struct fi_cq_data_entry){
		.op_context = ctx,
		.flags = flags,
		.len = len,
		.data = data,
	};
	m->tail = (m->tail + 1) % MOCK_CQ_DEPTH;
	pthread_mutex_unlock(&mock_cq_lock);
}

void mock_cq_push_err(struct mock_ep *ep, void *ctx, uint64_t flags, int err)
{
	struct mock_cq *m = ep->cq;

	pthread_mutex_lock(&mock_cq_lock);
	m->err[m->nerr++] = (struct fi_cq_err_entry){
		.op_context = ctx,
		.flags = flags,
		.err = err,
		.prov_errno = 7,
	};
	pthread_mutex_unlock(&mock_cq_lock);
}

void mock_deliver(struct mock_ep *from, struct mock_ep *to)
{
	memcpy(to->rx_buf, from->tx_buf, from->tx_len < to->rx_len ? from->tx_len : to->rx_len);
	mock_cq_push(to, to->rx_ctx, FI_MSG | FI_RECV, from->tx_len, 0);
	mock_cq_push(from, from->tx_ctx, FI_MSG | FI_SEND, from->tx_len, 0);
}
