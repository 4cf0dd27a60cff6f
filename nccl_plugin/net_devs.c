// SPDX-License-Identifier: Apache-2.0
/*
 * The devices NCCL sees: the chosen backend's device properties, read once per backend and
 * cached (NCCL keeps pointers to the names), devices() and getProperties() over that cache, and
 * NIC fusion (makeVDevice), which adds a device to it. net.c selects the backend at init and
 * checks device numbers here; everything else of the ABI is there.
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "mk/err.h"
#include "mk/log.h"
#include "mk/rdv.h"
#include "mk/result.h"
#include "mk/transport.h"
#include "mk_config.h"
#include "mk_git.h"
#include "net.h"

#define MK_NET_MAX_DEVS 32 /* devices reported to NCCL */

/* The cache, under net_devs_lock; the data path reads none of it. */
static pthread_mutex_t net_devs_lock = PTHREAD_MUTEX_INITIALIZER;
static const struct mk_transport_ops *net_devs_ops;
static struct mk_dev_props net_devs[MK_NET_MAX_DEVS];
static int net_ndevs;

int mk_net_dev_check(int dev)
{
	int n;

	pthread_mutex_lock(&net_devs_lock);
	n = net_devs_ops != NULL ? net_ndevs : 0;
	pthread_mutex_unlock(&net_devs_lock);
	return dev >= 0 && dev < n ? 0 : -EINVAL;
}

/*
 * NCCL treats a makeVDevice that fails as fatal for the communicator, but a NULL one as "no NIC
 * fusion here". So the member is set only while the chosen backend can fuse devices (verbs),
 * and stays NULL for the others (ofi); NCCL reads it after init. Under net_devs_lock.
 */
static void net_publish_fusion(const struct mk_transport_ops *ops)
{
	ncclResult_t (*fn)(int *, struct mk_nccl_vdev_props *) =
		ops->make_vdev != NULL ? mk_net11_makeVDevice : NULL;

	ncclNetPlugin_v11.makeVDevice = fn;
	ncclNetPlugin_v10.makeVDevice = fn;
	ncclNetPlugin_v9.makeVDevice = fn;
}

/* Read every device's properties once per backend selection; under net_devs_lock. */
static int net_devs_load(const struct mk_transport_ops *ops)
{
	int n = ops->ndevs();
	int rc;

	if (n > MK_NET_MAX_DEVS) {
		MK_WARN("backend %s has %d devices; reporting the first %d", ops->name, n,
			MK_NET_MAX_DEVS);
		n = MK_NET_MAX_DEVS;
	}
	for (int i = 0; i < n; i++) {
		memset(&net_devs[i], 0, sizeof(net_devs[i]));
		rc = ops->dev_props(i, &net_devs[i]);
		if (rc) {
			MK_WARN("backend %s: properties of device %d: %s", ops->name, i,
				mk_strerror(rc));
			return rc;
		}
		net_devs[i].name[sizeof(net_devs[i].name) - 1] = '\0';
		net_devs[i].pci_path[sizeof(net_devs[i].pci_path) - 1] = '\0';
		net_devs[i].provider[sizeof(net_devs[i].provider) - 1] = '\0';
	}
	net_ndevs = n;
	net_devs_ops = ops;
	net_publish_fusion(ops);
	MK_INFO(MK_SUBSYS_INIT | MK_SUBSYS_NET, "plugin %s (git %s), backend %s, %d device%s",
		MK_VERSION, MK_GIT_HASH, ops->name, n, n == 1 ? "" : "s");
	for (int i = 0; i < n; i++)
		MK_INFO(MK_SUBSYS_INIT | MK_SUBSYS_NET,
			"device %d: %s (%s) speed %d Mbps, port %d, ptrSupport 0x%x, pci %s", i,
			net_devs[i].name, net_devs[i].provider, net_devs[i].speed_mbps,
			net_devs[i].port, net_devs[i].ptr_support,
			net_devs[i].pci_path[0] ? net_devs[i].pci_path : "none");
	return 0;
}

int mk_net_devs_select(const struct mk_transport_ops *ops)
{
	int rc = 0;

	pthread_mutex_lock(&net_devs_lock);
	if (ops != net_devs_ops)
		rc = net_devs_load(ops);
	pthread_mutex_unlock(&net_devs_lock);
	return rc;
}

ncclResult_t mk_net11_devices(int *ndev)
{
	int rc = -EINVAL;

	if (ndev == NULL)
		goto fail;
	pthread_mutex_lock(&net_devs_lock);
	if (net_devs_ops != NULL) {
		*ndev = net_ndevs;
		rc = 0;
	}
	pthread_mutex_unlock(&net_devs_lock);
	if (rc)
		goto fail;
	return ncclSuccess;

fail:
	MK_WARN("devices() failed (called before init?): %s", mk_strerror(rc));
	return mk_result_net(rc);
}

ncclResult_t mk_net11_getProperties(int dev, struct mk_nccl_net_props_v11 *props)
{
	const struct mk_dev_props *d;
	int rc = -EINVAL, nfused, fused[MK_TP_MAX_FUSED];

	if (props == NULL)
		goto fail;
	memset(props, 0, sizeof(*props));
	pthread_mutex_lock(&net_devs_lock);
	if (net_devs_ops == NULL || dev < 0 || dev >= net_ndevs) {
		pthread_mutex_unlock(&net_devs_lock);
		goto fail;
	}
	d = &net_devs[dev];
	props->name = (char *)d->name;
	props->pciPath = d->pci_path[0] != '\0' ? (char *)d->pci_path : NULL;
	props->guid = d->guid;
	props->ptrSupport = d->ptr_support;
	props->regIsGlobal = 1; /* one MR cache per process, keyed by device */
	props->forceFlush = d->force_flush;
	props->speed = d->speed_mbps;
	props->port = d->port;
	props->latency = d->latency_us;
	props->maxComms = d->max_comms;
	nfused = d->nfused;
	memcpy(fused, d->fused, sizeof(fused));
	pthread_mutex_unlock(&net_devs_lock);
	props->maxRecvs = mk_rdv_max_recvs();
	props->netDeviceType = MK_NCCL_NET_DEVICE_HOST;
	props->netDeviceVersion = MK_NCCL_NET_DEVICE_INVALID_VERSION;
	props->vProps.ndevs = 1;
	props->vProps.devs[0] = dev;
	if (nfused > 0) { /* a fused device: NCCL places it by its children */
		props->vProps.ndevs = nfused;
		memcpy(props->vProps.devs, fused, sizeof(int) * (size_t)nfused);
	}
	props->maxP2pBytes = MK_NET_MAX_BYTES;
	props->maxCollBytes = MK_NET_MAX_BYTES;
	props->maxMultiRequestSize = 1;
	return ncclSuccess;

fail:
	MK_WARN("getProperties(dev %d) failed: %s", dev, mk_strerror(rc));
	return mk_result_net(rc);
}

/* Checks NCCL's list and has the backend build the fused device; under net_devs_lock. */
static int net_make_vdev(const struct mk_nccl_vdev_props *props, int *out)
{
	const struct mk_transport_ops *ops = net_devs_ops;
	int rc;

	if (ops == NULL) {
		MK_WARN("makeVDevice before init");
		return -EINVAL;
	}
	if (ops->make_vdev == NULL) {
		MK_WARN("makeVDevice: backend %s cannot fuse devices (set "
			"NCCL_NET_MERGE_LEVEL=LOC)",
			ops->name);
		return -EOPNOTSUPP;
	}
	if (props->ndevs < 1 || props->ndevs > MK_TP_MAX_FUSED) {
		MK_WARN("makeVDevice: %d devices, between 1 and %d can be fused", props->ndevs,
			MK_TP_MAX_FUSED);
		return -EINVAL;
	}
	for (int i = 0; i < props->ndevs; i++) {
		int c = props->devs[i];

		if (c < 0 || c >= net_ndevs || net_devs[c].nfused > 0) {
			MK_WARN("makeVDevice: child %d is device %d, not one of the %d physical "
				"devices",
				i, c, net_ndevs);
			return -EINVAL;
		}
		for (int j = 0; j < i; j++) {
			if (props->devs[j] == c) {
				MK_WARN("makeVDevice: device %d listed twice", c);
				return -EINVAL;
			}
		}
	}
	rc = ops->make_vdev(props->ndevs, props->devs, out);
	if (rc == 0)
		rc = net_devs_load(ops); /* devices() and getProperties() now include it */
	return rc;
}

ncclResult_t mk_net11_makeVDevice(int *d, struct mk_nccl_vdev_props *props)
{
	int rc = -EINVAL, idx = -1;

	if (d == NULL || props == NULL) {
		MK_WARN("makeVDevice(%p, %p): NULL argument", (void *)d, (void *)props);
		goto fail;
	}
	pthread_mutex_lock(&net_devs_lock);
	rc = net_make_vdev(props, &idx);
	pthread_mutex_unlock(&net_devs_lock);
	if (rc)
		goto fail;
	*d = idx;
	MK_INFO(MK_SUBSYS_INIT | MK_SUBSYS_NET, "makeVDevice: %d devices fused into device %d",
		props->ndevs, idx);
	return ncclSuccess;

fail:
	MK_WARN("makeVDevice failed: %s", mk_strerror(rc));
	return mk_result_net(rc);
}

ncclResult_t mk_net_props_prefix(int dev, void *props, size_t len)
{
	struct mk_nccl_net_props_v11 p11;
	ncclResult_t ret;

	if (len > sizeof(p11))
		return mk_result_net(-EINVAL);
	ret = mk_net11_getProperties(dev, props != NULL ? &p11 : NULL);
	if (ret == ncclSuccess)
		memcpy(props, &p11, len);
	return ret;
}
