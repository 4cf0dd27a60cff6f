// SPDX-License-Identifier: Apache-2.0
/*
 * NIC fusion (NCCL's makeVDevice): a fused device is a list of ports, its rails. It owns no
 * context of its own; every connection made on it builds a CQ per rail and spreads its QPs over
 * the rails (lane i on rail i % nrails), and every registration is made once per rail, so a
 * striped message moves over all the ports at once.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "mk/log.h"
#include "verbs.h"

/* What the fused device reports: the sum of the rails' bandwidth, what all of them can do. */
static void vdev_fill_props(struct mk_verbs_dev *v, int ndevs, const int *devs)
{
	struct mk_dev_props *p = &v->props;
	const struct mk_dev_props *first = &v->rails[0]->props;
	size_t used;

	*p = *first; /* PCI path, GUID and port of the first rail place it in NCCL's topology */
	used = (size_t)snprintf(p->name, sizeof(p->name), "verbs:fused");
	p->speed_mbps = 0;
	for (int i = 0; i < v->nrails; i++) {
		const struct mk_dev_props *r = &v->rails[i]->props;

		if (used < sizeof(p->name))
			used += (size_t)snprintf(p->name + used, sizeof(p->name) - used, "%c%d",
						 i == 0 ? ':' : '+', devs[i]);
		p->speed_mbps += r->speed_mbps;
		p->ptr_support &= r->ptr_support;
		p->max_comms = r->max_comms < p->max_comms ? r->max_comms : p->max_comms;
		p->max_msg = r->max_msg < p->max_msg ? r->max_msg : p->max_msg;
		p->force_flush |= r->force_flush;
	}
	p->nfused = ndevs;
	memcpy(p->fused, devs, sizeof(int) * (size_t)ndevs);
}

int mk_verbs_make_vdev(int ndevs, const int *devs, int *out)
{
	struct mk_verbs_dev *v, *rails[MK_VERBS_MAX_RAILS];
	int nports = mk_verbs_nports(), idx;

	if (ndevs < 1 || ndevs > MK_VERBS_MAX_RAILS || devs == NULL || out == NULL)
		return -EINVAL;
	for (int i = 0; i < ndevs; i++) {
		if (devs[i] < 0 || devs[i] >= nports) {
			MK_WARN("verbs: fusing: device %d is not one of the %d ports", devs[i],
				nports);
			return -EINVAL;
		}
		rails[i] = mk_verbs_dev_get(devs[i]);
		for (int j = 0; j < i; j++) {
			if (devs[j] == devs[i]) {
				MK_WARN("verbs: fusing: port %d listed twice", devs[i]);
				return -EINVAL;
			}
		}
		/* one QP cannot bridge InfiniBand and Ethernet, and the peer checks it per rail */
		if (rails[i]->link_layer != rails[0]->link_layer) {
			MK_WARN("verbs: fusing: %s and %s have different link layers",
				rails[0]->props.name, rails[i]->props.name);
			return -EINVAL;
		}
	}
	v = mk_verbs_dev_append(&idx);
	if (v == NULL) {
		MK_WARN("verbs: fusing: the device table is full (%d)", MK_VERBS_MAX_DEVS);
		return -ENOSPC;
	}
	v->nrails = ndevs;
	memcpy(v->rails, rails, sizeof(rails[0]) * (size_t)ndevs);
	v->link_layer = rails[0]->link_layer;
	v->max_qp_wr = rails[0]->max_qp_wr;
	v->max_cqe = rails[0]->max_cqe;
	v->dmabuf = rails[0]->dmabuf;
	v->peermem = rails[0]->peermem;
	for (int i = 1; i < ndevs; i++) {
		v->max_qp_wr =
			rails[i]->max_qp_wr < v->max_qp_wr ? rails[i]->max_qp_wr : v->max_qp_wr;
		v->max_cqe = rails[i]->max_cqe < v->max_cqe ? rails[i]->max_cqe : v->max_cqe;
		v->dmabuf = v->dmabuf && rails[i]->dmabuf;
		v->peermem = v->peermem && rails[i]->peermem;
	}
	vdev_fill_props(v, ndevs, devs);
	MK_INFO(MK_SUBSYS_INIT | MK_SUBSYS_NET, "verbs: device %d = %s (%d Mbps over %d ports)",
		idx, v->props.name, v->props.speed_mbps, ndevs);
	*out = idx;
	return 0;
}
