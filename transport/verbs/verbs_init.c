// SPDX-License-Identifier: Apache-2.0
/*
 * Device discovery of the verbs backend: one device per active port that can run RC queue pairs,
 * with its properties (name, PCI path, GUID, speed), its routing identity (LID for InfiniBand,
 * a RoCE v2 GID picked from sysfs for Ethernet) and its pointer support. The ops table sits at
 * the bottom.
 */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mk/err.h"
#include "mk/log.h"
#include "verbs.h"

static struct mk_verbs_dev init_devs[MK_VERBS_MAX_DEVS]; /* ports, then fused devices */
static int init_ndevs;
static int init_nports;
static bool init_done;

struct mk_verbs_dev *mk_verbs_dev_get(int dev)
{
	if (dev < 0 || dev >= init_ndevs)
		return NULL;
	return &init_devs[dev];
}

int mk_verbs_nports(void)
{
	return init_nports;
}

struct mk_verbs_dev *mk_verbs_dev_append(int *index)
{
	if (init_ndevs == MK_VERBS_MAX_DEVS)
		return NULL;
	*index = init_ndevs;
	memset(&init_devs[init_ndevs], 0, sizeof(init_devs[0]));
	return &init_devs[init_ndevs++];
}

struct init_code {
	int code;
	int value;
};

/* IB spec codes: active_width -> lanes, active_speed -> Mbit/s per lane. */
static const struct init_code init_lanes[] = {
	{ 1, 1 }, { 2, 4 }, { 4, 8 }, { 8, 12 }, { 16, 2 },
};

static const struct init_code init_rates[] = {
	{ 1, 2500 },	 /* SDR */
	{ 2, 5000 },	 /* DDR */
	{ 4, 10000 },	 /* QDR */
	{ 8, 10000 },	 /* FDR10 */
	{ 16, 14000 },	 /* FDR */
	{ 32, 25000 },	 /* EDR */
	{ 64, 50000 },	 /* HDR */
	{ 128, 100000 }, /* NDR */
	{ 256, 200000 }, /* XDR */
};

static int init_lookup(const struct init_code *t, size_t n, int code, int dflt)
{
	for (size_t i = 0; i < n; i++)
		if (t[i].code == code)
			return t[i].value;
	return dflt;
}

int mk_verbs_speed_mbps(int width, int speed)
{
	return init_lookup(init_lanes, MK_ARRAY_SIZE(init_lanes), width, 1) *
	       init_lookup(init_rates, MK_ARRAY_SIZE(init_rates), speed, 10000);
}

static int init_read_line(const char *path, char *buf, size_t len)
{
	FILE *f = fopen(path, "r");
	size_t n;

	if (f == NULL)
		return -errno;
	n = fread(buf, 1, len - 1, f);
	fclose(f);
	buf[n] = '\0';
	while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
		buf[--n] = '\0';
	return 0;
}

/* "0000:0000:0000:0000:0000:ffff:7f00:0001" -> 16 bytes; -EINVAL if malformed. */
static int init_parse_gid(const char *s, uint8_t gid[16])
{
	for (int i = 0; i < 8; i++) {
		unsigned int v;
		int used;

		if (sscanf(s, "%4x%n", &v, &used) != 1 || used != 4)
			return -EINVAL;
		gid[2 * i] = (uint8_t)(v >> 8);
		gid[2 * i + 1] = (uint8_t)v;
		s += 4;
		if (i < 7 && *s++ != ':')
			return -EINVAL;
	}
	return *s == '\0' ? 0 : -EINVAL;
}

static bool init_gid_ipv4_mapped(const uint8_t gid[16])
{
	for (int i = 0; i < 10; i++)
		if (gid[i] != 0)
			return false;
	return gid[10] == 0xff && gid[11] == 0xff;
}

int mk_verbs_gid_autopick(const char *ibdev, int port, int tbl_len)
{
	const char *root = mk_param_ib_sysfs_root();
	char path[PATH_MAX], text[64];
	uint8_t gid[16];

	for (int i = 0; i < tbl_len; i++) {
		snprintf(path, sizeof(path), "%s/class/infiniband/%s/ports/%d/gids/%d", root, ibdev,
			 port, i);
		if (init_read_line(path, text, sizeof(text)) || init_parse_gid(text, gid))
			continue;
		if (!init_gid_ipv4_mapped(gid))
			continue;
		snprintf(path, sizeof(path), "%s/class/infiniband/%s/ports/%d/gid_attrs/types/%d",
			 root, ibdev, port, i);
		if (init_read_line(path, text, sizeof(text)))
			continue;
		if (strcasecmp(text, "RoCE v2") == 0)
			return i;
	}
	return -ENOENT;
}

static void init_pci_path(const char *ibdev, char *out, size_t len)
{
	char path[PATH_MAX], real[PATH_MAX];

	out[0] = '\0';
	snprintf(path, sizeof(path), "%s/class/infiniband/%s/device", mk_param_ib_sysfs_root(),
		 ibdev);
	/* rxe/siw sit on a netdev, not a PCI function: leave the path empty */
	if (realpath(path, real) == NULL || strstr(real, "/pci") == NULL || strlen(real) >= len)
		return;
	memcpy(out, real, strlen(real) + 1);
}

/* "mlx5_0" -> "mlx5", "rxe0" -> "rxe": the provider family for logs. */
static void init_provider(const char *ibdev, char *out, size_t len)
{
	size_t n;

	snprintf(out, len, "%s", ibdev);
	n = strlen(out);
	while (n > 0 && isdigit((unsigned char)out[n - 1]))
		out[--n] = '\0';
	if (n > 0 && out[n - 1] == '_')
		out[--n] = '\0';
}

/* Routing identity of the port: LID (InfiniBand) or the chosen RoCE GID. 0 or -errno. */
static int init_pick_gid(struct mk_verbs_dev *d, const char *ibdev, int tbl_len)
{
	int idx = (int)mk_param_ib_gid_index();

	if (d->link_layer == IBV_LINK_LAYER_INFINIBAND && idx < 0) {
		d->gid_index = -1; /* LID routing */
		return 0;
	}
	if (idx < 0)
		idx = mk_verbs_gid_autopick(ibdev, d->port, tbl_len);
	if (idx < 0) {
		MK_INFO(MK_SUBSYS_INIT | MK_SUBSYS_NET,
			"verbs: %s port %u has no IPv4-mapped RoCE v2 GID (set "
			"MKERNEL_IB_GID_INDEX): "
			"skipped",
			ibdev, d->port);
		return -ENOENT;
	}
	if (mk_verbs_ibv->query_gid(d->ctx, d->port, idx, &d->gid)) {
		MK_INFO(MK_SUBSYS_INIT | MK_SUBSYS_NET,
			"verbs: %s port %u: query_gid(%d) failed: %s", ibdev, d->port, idx,
			strerror(errno));
		return -ENOENT;
	}
	d->gid_index = idx;
	return 0;
}

static void init_fill_props(struct mk_verbs_dev *d, const char *ibdev,
			    const struct ibv_device_attr *da, const struct ibv_port_attr *pa)
{
	struct mk_dev_props *p = &d->props;
	int qps = (int)mk_param_ib_qps_per_conn();

	memset(p, 0, sizeof(*p));
	snprintf(p->name, sizeof(p->name), "verbs:%s:%u", ibdev, d->port);
	init_pci_path(ibdev, p->pci_path, sizeof(p->pci_path));
	p->guid = be64toh(da->node_guid);
	p->ptr_support =
		MK_PTR_HOST | (d->peermem ? MK_PTR_CUDA : 0) | (d->dmabuf ? MK_PTR_DMABUF : 0);
	p->speed_mbps = mk_verbs_speed_mbps(pa->active_width, pa->active_speed);
	p->port = d->port;
	p->latency_us = 0;
	p->max_comms = da->max_qp / (qps > 0 ? qps + 1 : 2);
	p->max_lanes = MK_TP_MAX_LANES;
	p->force_flush = mk_param_ib_force_flush() ? 1 : 0;
	p->max_msg = pa->max_msg_sz;
	p->rma_lands_unpolled = 1; /* RDMA writes are placed by the NIC, not by our polling */
	init_provider(ibdev, p->provider, sizeof(p->provider));
}

/* Open (ibdev, port) as device d: 0, -ENODEV when the port is unusable, other -errno. */
static int init_dev_open(struct ibv_device *ibd, uint8_t port, struct mk_verbs_dev *d)
{
	const char *name = mk_verbs_ibv->get_device_name(ibd);
	struct ibv_device_attr da;
	struct ibv_port_attr pa;
	int rc;

	memset(d, 0, sizeof(*d));
	d->port = port;
	d->ctx = mk_verbs_ibv->open_device(ibd);
	if (d->ctx == NULL) {
		rc = -(errno ? errno : ENODEV);
		MK_INFO(MK_SUBSYS_INIT | MK_SUBSYS_NET, "verbs: cannot open %s: %s", name,
			mk_strerror(rc));
		return rc;
	}
	memset(&da, 0, sizeof(da));
	if (mk_verbs_ibv->query_device(d->ctx, &da)) {
		rc = -(errno ? errno : EIO);
		MK_INFO(MK_SUBSYS_INIT | MK_SUBSYS_NET, "verbs: query_device(%s) failed: %s", name,
			mk_strerror(rc));
		goto undo_ctx;
	}
	memset(&pa, 0, sizeof(pa));
	if (mk_verbs_ibv->query_port(d->ctx, port, &pa)) {
		rc = -(errno ? errno : EIO);
		MK_INFO(MK_SUBSYS_INIT | MK_SUBSYS_NET, "verbs: query_port(%s, %u) failed: %s",
			name, port, mk_strerror(rc));
		goto undo_ctx;
	}
	if (pa.state != IBV_PORT_ACTIVE) {
		MK_INFO(MK_SUBSYS_INIT | MK_SUBSYS_NET, "verbs: %s port %u is %s: skipped", name,
			port, pa.state == IBV_PORT_DOWN ? "down" : "not active");
		rc = -ENODEV;
		goto undo_ctx;
	}
	if (pa.link_layer != IBV_LINK_LAYER_INFINIBAND &&
	    pa.link_layer != IBV_LINK_LAYER_ETHERNET) {
		MK_INFO(MK_SUBSYS_INIT | MK_SUBSYS_NET,
			"verbs: %s port %u has link layer %u: skipped", name, port, pa.link_layer);
		rc = -ENODEV;
		goto undo_ctx;
	}
	d->link_layer = pa.link_layer;
	d->lid = pa.lid;
	d->mtu = pa.active_mtu;
	d->max_qp_wr = da.max_qp_wr;
	d->max_cqe = da.max_cqe;
	rc = init_pick_gid(d, name, pa.gid_tbl_len);
	if (rc) {
		rc = -ENODEV;
		goto undo_ctx;
	}
	d->pd = mk_verbs_ibv->alloc_pd(d->ctx);
	if (d->pd == NULL) {
		rc = -(errno ? errno : ENOMEM);
		MK_WARN("verbs: alloc_pd(%s) failed: %s", name, mk_strerror(rc));
		goto undo_ctx;
	}
	d->dmabuf = mk_verbs_dmabuf_probe(d->pd);
	d->peermem = mk_verbs_peermem_present();
	d->nrails = 1;
	d->rails[0] = d;
	init_fill_props(d, name, &da, &pa);
	MK_INFO(MK_SUBSYS_INIT | MK_SUBSYS_NET,
		"verbs: %s (%s, %d Mbps, mtu %d, %s %d, pci '%s', dmabuf %s, peermem %s)",
		d->props.name, pa.link_layer == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "IB",
		d->props.speed_mbps, 128 << pa.active_mtu, d->gid_index < 0 ? "lid" : "gid",
		d->gid_index < 0 ? pa.lid : d->gid_index, d->props.pci_path,
		d->dmabuf ? "yes" : "no", d->peermem ? "yes" : "no");
	return 0;

undo_ctx:
	mk_verbs_ibv->close_device(d->ctx);
	d->ctx = NULL;
	return rc;
}

static void init_dev_close(struct mk_verbs_dev *d)
{
	if (d->pd != NULL && mk_verbs_ibv->dealloc_pd(d->pd))
		MK_WARN("verbs: dealloc_pd(%s) failed: %s", d->props.name, strerror(errno));
	if (d->ctx != NULL && mk_verbs_ibv->close_device(d->ctx))
		MK_WARN("verbs: close_device(%s) failed: %s", d->props.name, strerror(errno));
	memset(d, 0, sizeof(*d));
}

/* Ports of one device worth a try; EFA and iWARP cannot do what we need (RC without rdma_cm). */
static int init_scan_device(struct ibv_device *ibd)
{
	const char *name = mk_verbs_ibv->get_device_name(ibd);
	struct ibv_device_attr da;
	struct ibv_context *ctx;
	int nports, rc;

	if (ibd->transport_type != IBV_TRANSPORT_IB) {
		MK_INFO(MK_SUBSYS_INIT | MK_SUBSYS_NET,
			"verbs: %s: transport %d cannot run RC queue pairs over verbs alone: "
			"skipped",
			name, ibd->transport_type);
		return 0;
	}
	ctx = mk_verbs_ibv->open_device(ibd);
	if (ctx == NULL) {
		MK_INFO(MK_SUBSYS_INIT | MK_SUBSYS_NET, "verbs: cannot open %s: %s", name,
			strerror(errno));
		return 0;
	}
	memset(&da, 0, sizeof(da));
	rc = mk_verbs_ibv->query_device(ctx, &da);
	nports = rc ? 0 : da.phys_port_cnt;
	mk_verbs_ibv->close_device(ctx);
	for (int port = 1; port <= nports && init_ndevs < MK_VERBS_MAX_DEVS; port++) {
		rc = init_dev_open(ibd, (uint8_t)port, &init_devs[init_ndevs]);
		if (rc == 0)
			init_ndevs++;
	}
	return 0;
}

static int verbs_init(void)
{
	struct ibv_device **list;
	int n = 0, rc;

	if (init_done)
		return 0;
	init_done = true;
	init_ndevs = 0;
	rc = mk_verbs_lib_load();
	if (rc)
		return 0; /* no library: no devices, already said why */
	list = mk_verbs_ibv->get_device_list(&n);
	if (list == NULL || n == 0) {
		MK_INFO(MK_SUBSYS_INIT | MK_SUBSYS_NET, "verbs: no RDMA device found%s%s",
			list == NULL ? ": " : "", list == NULL ? strerror(errno) : "");
		if (list != NULL)
			mk_verbs_ibv->free_device_list(list);
		return 0;
	}
	for (int i = 0; i < n; i++)
		init_scan_device(list[i]);
	mk_verbs_ibv->free_device_list(list);
	init_nports = init_ndevs;
	MK_INFO(MK_SUBSYS_INIT | MK_SUBSYS_NET, "verbs: %d usable port%s on %d device%s",
		init_ndevs, init_ndevs == 1 ? "" : "s", n, n == 1 ? "" : "s");
	return 0;
}

static void verbs_fini(void)
{
	for (int i = 0; i < init_ndevs; i++)
		init_dev_close(&init_devs[i]);
	init_ndevs = 0;
	init_nports = 0;
	init_done = false;
	mk_verbs_lib_unload();
}

static int verbs_ndevs(void)
{
	return init_ndevs;
}

static int verbs_dev_props(int dev, struct mk_dev_props *props)
{
	struct mk_verbs_dev *d = mk_verbs_dev_get(dev);

	if (d == NULL || props == NULL)
		return -EINVAL;
	*props = d->props;
	return 0;
}

const struct mk_transport_ops mk_verbs_ops = {
	.name = "verbs",
	.init = verbs_init,
	.fini = verbs_fini,
	.ndevs = verbs_ndevs,
	.dev_props = verbs_dev_props,
	.make_vdev = mk_verbs_make_vdev,
	.listen = mk_verbs_listen,
	.connect = mk_verbs_connect,
	.connected = mk_verbs_connected,
	.accept = mk_verbs_accept,
	.close_listen = mk_verbs_close_listen,
	.close = mk_verbs_close,
	.reg_mr = mk_verbs_reg_mr,
	.dereg_mr = mk_verbs_dereg_mr,
	.write = mk_verbs_write,
	.read = mk_verbs_read,
	.flush = mk_verbs_flush,
	.poll = mk_verbs_poll,
};
