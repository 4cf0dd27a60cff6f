// SPDX-License-Identifier: Apache-2.0
/*
 * Discovery for the libfabric backend: load the library, ask for RDM endpoints with RMA, pick one
 * provider (MKERNEL_OFI_PROVIDER or the fastest that crosses nodes), turn its distinct domains
 * into devices (filtered by MKERNEL_OFI_IFACE), fill their properties, and open each device's
 * fabric + domain on first use. The ops table sits at the bottom.
 */
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mk/err.h"
#include "mk/log.h"
#include "ofi.h"

#define OFI_DEFAULT_SPEED_MBPS 10000 /* reported when neither provider nor sysfs knows */
#define OFI_CAPS	       (FI_MSG | FI_RMA | FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE)
#define OFI_MR_MODES	       (FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY)

struct mk_ofi_state mk_ofi;

/* Providers that cross nodes, fastest first; shm and sockets are never picked unasked. */
static const char *const ofi_default_order[] = {
	"efa", "tcp", "net", "tcp;ofi_rxm", "udp;ofi_rxd",
};

/*
 * How well provider prov answers a request for want: 0 exact, 1 the rxm layering of it (a
 * request for "tcp" on 1.17), 2 the 1.18 rename of net to tcp; -1 no match.
 */
static int ofi_prov_rank(const char *want, const char *prov)
{
	size_t n = strlen(want);

	if (strcmp(want, prov) == 0)
		return 0;
	if (strncmp(want, prov, n) == 0 && strcmp(prov + n, ";ofi_rxm") == 0)
		return 1;
	if (strcmp(want, "net") == 0 && strcmp(prov, "tcp") == 0)
		return 2;
	return -1;
}

/* The provider name in list that best answers want (ranks up to max_rank), or NULL. */
static const char *ofi_find_prov(const struct fi_info *list, const char *want, int max_rank)
{
	const char *best = NULL;
	int best_rank = INT_MAX;

	for (const struct fi_info *i = list; i != NULL; i = i->next) {
		int r = ofi_prov_rank(want, i->fabric_attr->prov_name);

		if (r >= 0 && r <= max_rank && r < best_rank) {
			best = i->fabric_attr->prov_name;
			best_rank = r;
		}
	}
	return best;
}

static const char *ofi_choose_prov(const struct fi_info *list)
{
	const char *want = mk_param_ofi_provider();
	const char *p;

	if (want != NULL && *want != '\0')
		return ofi_find_prov(list, want, 2);
	/* the default order names providers exactly: "tcp" there means native RDM only */
	for (size_t i = 0; i < MK_ARRAY_SIZE(ofi_default_order); i++) {
		p = ofi_find_prov(list, ofi_default_order[i], 0);
		if (p != NULL)
			return p;
	}
	return NULL;
}

/* Interface name of a domain: the NIC's name where the provider gives one, else the domain's. */
static const char *ofi_iface(const struct fi_info *i)
{
	if (i->nic != NULL && i->nic->device_attr != NULL && i->nic->device_attr->name != NULL)
		return i->nic->device_attr->name;
	return i->domain_attr->name;
}

static bool ofi_in_list(const char *list, const char *name)
{
	size_t n = strlen(name);

	for (const char *p = list; *p != '\0';) {
		size_t len = strcspn(p, ",");

		if (len == n && strncmp(p, name, n) == 0)
			return true;
		p += len;
		if (*p == ',')
			p++;
	}
	return false;
}

/* 1 keep, 0 drop; others_exist: a real interface exists, so the default filter drops lo. */
static int ofi_iface_wanted(const char *prov, const char *iface, bool others_exist)
{
	const char *list = mk_param_ofi_iface();

	if (strcmp(prov, "shm") == 0)
		return 1; /* one node-local domain, no interface to choose */
	if (list != NULL && *list != '\0')
		return ofi_in_list(list, iface);
	if (strncmp(iface, "docker", 6) == 0 || strncmp(iface, "virbr", 5) == 0)
		return 0;
	if (strcmp(iface, "lo") == 0)
		return !others_exist;
	return 1;
}

static bool ofi_is_virtual(const char *iface)
{
	return strcmp(iface, "lo") == 0 || strncmp(iface, "docker", 6) == 0 ||
	       strncmp(iface, "virbr", 5) == 0;
}

/* The hints every query uses; prov and domain narrow it to one device when not NULL. */
static struct fi_info *ofi_hints(const char *prov, const char *domain)
{
	struct fi_info *h = mk_ofi.lib->dupinfo(NULL);

	if (h == NULL)
		return NULL;
	h->caps = OFI_CAPS;
	h->mode = FI_CONTEXT | FI_CONTEXT2;
	h->ep_attr->type = FI_EP_RDM;
	h->domain_attr->mr_mode = OFI_MR_MODES;
	h->domain_attr->av_type = FI_AV_TABLE;
	/* registrations may race with data ops of other connections on the same domain */
	h->domain_attr->threading = FI_THREAD_SAFE;
	if (prov != NULL)
		h->fabric_attr->prov_name = strdup(prov);
	if (domain != NULL)
		h->domain_attr->name = strdup(domain);
	if ((prov != NULL && h->fabric_attr->prov_name == NULL) ||
	    (domain != NULL && h->domain_attr->name == NULL)) {
		mk_ofi.lib->freeinfo(h);
		return NULL;
	}
	return h;
}

/*
 * Re-ask for one device with a source address: lo gets 127.0.0.1 so nothing binds another NIC;
 * hmem adds FI_HMEM. Returns false and keeps *info unchanged when the query fails.
 */
static bool ofi_refine(struct fi_info **info, const char *prov, const char *domain, bool lo,
		       bool hmem)
{
	struct fi_info *h = ofi_hints(prov, domain);
	struct fi_info *got = NULL;
	int rc;

	if (h == NULL)
		return false;
	if (hmem) {
		h->caps |= FI_HMEM;
		h->domain_attr->mr_mode |= FI_MR_HMEM;
	}
	rc = mk_ofi.lib->getinfo(mk_ofi.api_version, lo ? "127.0.0.1" : NULL, NULL,
				 lo ? FI_SOURCE : 0, h, &got);
	mk_ofi.lib->freeinfo(h);
	if (rc || got == NULL)
		return false;
	if (got->next != NULL) {
		mk_ofi.lib->freeinfo(got->next);
		got->next = NULL;
	}
	mk_ofi.lib->freeinfo(*info);
	*info = got;
	return true;
}

static void ofi_sysfs_path(const char *iface, const struct fi_info *i, char *out, size_t n)
{
	char path[128];
	char *real;

	out[0] = '\0';
	if (i->nic != NULL && i->nic->bus_attr != NULL &&
	    i->nic->bus_attr->bus_type == FI_BUS_PCI) {
		const struct fi_pci_attr *pci = &i->nic->bus_attr->attr.pci;

		snprintf(path, sizeof(path), "/sys/bus/pci/devices/%04x:%02x:%02x.%x",
			 pci->domain_id, pci->bus_id, pci->device_id, pci->function_id);
	} else {
		snprintf(path, sizeof(path), "/sys/class/net/%s/device", iface);
	}
	real = realpath(path, NULL);
	if (real == NULL)
		return; /* virtual interface or no sysfs: NCCL treats "" as CPU-attached */
	snprintf(out, n, "%s", real);
	free(real);
}

static int ofi_speed(const char *iface, const struct fi_info *i)
{
	int64_t forced = mk_param_ofi_speed_mbps();
	char path[128];
	FILE *f;
	int mbps = 0;

	if (forced > 0)
		return forced > INT_MAX ? INT_MAX : (int)forced;
	if (i->nic != NULL && i->nic->link_attr != NULL && i->nic->link_attr->speed > 0)
		return (int)(i->nic->link_attr->speed / 1000000);
	snprintf(path, sizeof(path), "/sys/class/net/%s/speed", iface);
	f = fopen(path, "r");
	if (f != NULL) {
		if (fscanf(f, "%d", &mbps) != 1)
			mbps = 0;
		fclose(f);
	}
	return mbps > 0 ? mbps : OFI_DEFAULT_SPEED_MBPS;
}

/* The socket providers (rxm on tcp, net): every write is system calls at both ends. */
static bool ofi_prov_sockets(const char *prov)
{
	return strstr(prov, "tcp") != NULL || strcmp(prov, "net") == 0;
}

static void ofi_fill_props(struct mk_ofi_dev *d, bool hmem)
{
	const struct fi_info *i = d->info;
	const char *prov = i->fabric_attr->prov_name;
	const char *iface = ofi_iface(i);
	struct mk_dev_props *p = &d->props;
	bool sockets = ofi_prov_sockets(prov);

	memset(p, 0, sizeof(*p));
	snprintf(p->name, sizeof(p->name), "ofi:%s:%s", prov, i->domain_attr->name);
	snprintf(p->provider, sizeof(p->provider), "%s", prov);
	if (!ofi_is_virtual(iface) && strcmp(prov, "shm") != 0)
		ofi_sysfs_path(iface, i, p->pci_path, sizeof(p->pci_path));
	p->guid = ((uint64_t)mk_fnv1a32(iface, strlen(iface)) << 32) |
		  mk_fnv1a32(p->pci_path, strlen(p->pci_path));
	p->ptr_support = MK_PTR_HOST;
	if (hmem)
		p->ptr_support |= MK_PTR_CUDA | MK_PTR_DMABUF;
	p->speed_mbps = ofi_speed(iface, i);
	p->port = 0;
	p->latency_us = 0;
	p->max_comms = i->domain_attr->ep_cnt > 0 && i->domain_attr->ep_cnt < INT_MAX
			       ? (int)i->domain_attr->ep_cnt
			       : 65536;
	p->max_lanes = MK_TP_MAX_LANES; /* endpoints per connection: MKERNEL_OFI_LANES */
	/*
	 * Over the socket providers (rxm on tcp, net) a clear-to-send costs a socket round trip
	 * (~7 us on the CI VM): messages up to 64 KiB go eagerly (1.3-2.2x bandwidth at 16 KiB,
	 * 1.5-1.6x at 64 KiB with one in flight, 0.8-0.9x latency; docs/benchmarks.md). On shm the
	 * extra copy costs more than the clear-to-send (0.73-0.94x), so it keeps the core's
	 * default.
	 */
	p->eager_bytes = sockets ? 65536 : 0;
	/*
	 * There too every write is a system call at both ends, and its bytes hardly count: held
	 * CTS go 32 groups to a write (6-8 % off the tcp one-way latency of small messages, 1-6 %
	 * more bandwidth); shm, which copies every byte, keeps the core's 8.
	 */
	p->cts_batch = sockets ? 32 : 0;
	/*
	 * With two lanes there (ofi_lanes), 256 KiB messages ran 0.69-0.89x striped in two and
	 * 1 MiB with one in flight 0.85x; unstriped up to 1 MiB they ran as on one lane while
	 * 4-16 MiB kept 1.1-1.3x (docs/benchmarks.md, section 1).
	 */
	p->stripe_min = sockets ? 1u << 20 : 0;
	/*
	 * shm handles an eager write of 8 KiB well and one a header larger badly: an 8 KiB message
	 * by rendezvous instead of eagerly (8 KiB + header) gave 2.1-2.9x bandwidth and 0.33x
	 * latency, while 7 KiB eagerly still beat the rendezvous at one in flight (1.9x;
	 * docs/benchmarks.md). So eager writes stay within 8 KiB there.
	 */
	p->eager_write_max = mk_ofi_is_shm(d) ? 8192 : 0;
	/*
	 * The tcp provider signals its CQ's wakeup socket at each completion unless a signal is
	 * pending, and each fi_cq_read takes a pending one back: a write and a read per completion
	 * that follows a read. A small receive reading at its post put one between a message's
	 * arrival and the reply's send, 1.5 pairs a message in a ping-pong against the raw
	 * ping-pong's 1; without that read the tcp one-way latency is 0.90-0.94x (net
	 * 0.94-0.96x). On shm the read helps 8-64 B with 8 in flight (0.79x without): it stays.
	 */
	p->cq_read_rearms = sockets;
	p->force_flush = 0;
	/*
	 * Only a NIC that places RMA itself (efa) lands writes while we do not poll: tcp, net
	 * and rxm progress the target inside fi_cq_read (measured), shm needs the target too.
	 */
	p->rma_lands_unpolled = (strcmp(i->fabric_attr->prov_name, "efa") == 0 &&
				 i->domain_attr->data_progress == FI_PROGRESS_AUTO) ||
				d->progress;
	p->max_msg = i->ep_attr->max_msg_size;
	if (d->len_in_data && p->max_msg >= UINT32_MAX)
		p->max_msg = UINT32_MAX - 1; /* the length rides in 32 bits of the CQ data, all
						ones meaning a quiet write */
}

/*
 * Where a write with an immediate goes in two parts (MKERNEL_OFI_SPLIT_WRITES): all but its last
 * MK_OFI_SPLIT_TAIL bytes as a plain write, then those with the immediate. Over rxm on tcp a
 * 1 MiB rendezvous write went 1.25-1.53x faster so, 2-4 MiB 1.06-1.23x, 16 MiB even, and
 * 256-512 KiB no faster (docs/benchmarks.md), with the mechanism inside the provider not pinned
 * down. The immediate must not land before the data: the provider has to keep writes
 * in order (FI_ORDER_WAW), and the target must learn the whole length from the CQ data.
 */
static size_t ofi_split_min(const struct mk_ofi_dev *d, const char *prov)
{
	long long v = mk_param_ofi_split_writes();
	bool ordered = d->info->tx_attr != NULL && (d->info->tx_attr->msg_order & FI_ORDER_WAW);

	if (v < 0)
		v = ofi_prov_sockets(prov) ? 1 << 20 : 0;
	if (v == 0)
		return 0;
	if (!ordered || !d->len_in_data) {
		MK_INFO(MK_SUBSYS_NET,
			"ofi: %s: writes are not split (MKERNEL_OFI_SPLIT_WRITES): the provider %s",
			prov,
			!ordered ? "does not keep writes in order"
				 : "has no room for the length in its CQ data");
		return 0;
	}
	return (size_t)v > MK_OFI_SPLIT_TAIL ? (size_t)v : MK_OFI_SPLIT_TAIL + 1;
}

/*
 * MKERNEL_OFI_LANES, clamped; -1 (the default) is the device's choice: two on the socket
 * providers, where a second socket carries half of every large message (4-16 MiB 1.1-1.4x,
 * small messages within 1-3 %: docs/benchmarks.md, section 1), one elsewhere.
 */
static int ofi_lanes(const char *prov)
{
	long long n = mk_param_ofi_lanes();

	if (n < 0)
		n = ofi_prov_sockets(prov) ? 2 : 1;
	return n < 1 ? 1 : n > MK_TP_MAX_LANES ? MK_TP_MAX_LANES : (int)n;
}

/* CPUs this process may run on (its affinity), or the online count where that is unknown. */
static long ofi_cpus(void)
{
	cpu_set_t set;

	if (sched_getaffinity(0, sizeof(set), &set) == 0)
		return CPU_COUNT(&set);
	return sysconf(_SC_NPROCESSORS_ONLN);
}

/*
 * MKERNEL_OFI_PROGRESS_THREAD; -1 (the default) is the device's choice: on over the socket
 * providers where cores are spare. There every byte is a socket copy inside fi_cq_read, and
 * through NCCL, whose one proxy thread would otherwise make all of them, a thread per
 * connection took busbw from 0.79-0.95 to 0.99-1.28 of NCCL's Socket transport on a 16-core
 * host (docs/benchmarks.md, section 3). On a host of a few cores the threads take the cores
 * those copies need.
 */
static bool ofi_progress(const char *prov)
{
	long long v = mk_param_ofi_progress_thread();

	if (v >= 0)
		return v != 0;
	return ofi_prov_sockets(prov) && ofi_cpus() >= mk_param_ofi_progress_cpus();
}

/*
 * MKERNEL_OFI_SHARED_EP, checked; -1 (the default) is the device's choice: an endpoint per
 * connection where progress threads run (so each thread reads a CQ of its connection's own,
 * ofi_progress.c), pairs elsewhere.
 */
static int ofi_sep_mode(bool progress)
{
	long long v = mk_param_ofi_shared_ep();

	if (v == -1)
		return progress ? 0 : 2;
	if (v < 0 || v > 2) {
		static int said;

		if (!__atomic_exchange_n(&said, 1, __ATOMIC_RELAXED))
			MK_WARN("ofi: MKERNEL_OFI_SHARED_EP=%lld is not -1, 0, 1 or 2: taking 2",
				v);
		return 2;
	}
	return (int)v;
}

static int ofi_dev_init(struct mk_ofi_dev *d, struct fi_info *info, bool lo, bool hmem)
{
	const long long inject = mk_param_ofi_inject(); /* MKERNEL_OFI_INJECT: 1 shm, 2 all */
	const char *prov;
	const char *domain;
	size_t key_size;
	bool shm;

	d->info = mk_ofi.lib->dupinfo(info);
	if (d->info == NULL)
		return -ENOMEM;
	d->info->next = NULL;
	prov = info->fabric_attr->prov_name;
	domain = info->domain_attr->name;
	shm = strcmp(prov, "shm") == 0;
	if (lo)
		ofi_refine(&d->info, prov, domain, true, false);
	if (hmem)
		hmem = ofi_refine(&d->info, prov, domain, false, true) &&
		       (d->info->caps & FI_HMEM) != 0;
	d->mr_mode = d->info->domain_attr->mr_mode;
	key_size = d->info->domain_attr->mr_key_size;
	d->key_limit = key_size == 0 || key_size >= 8 ? UINT64_MAX : (1ull << (8 * key_size)) - 1;
	/*
	 * tcp;ofi_rxm and net leave fi_cq_data_entry.len at 0 for remote writes (measured on
	 * 1.17): where the CQ data has room, the writer puts the length in its upper 32 bits.
	 */
	d->len_in_data = d->info->domain_attr->cq_data_size >= 8;
	/*
	 * shm copies an RMA write without remote CQ data by process_vm_writev at the writer: a
	 * system call per write, on a VM several times the cost of the small message it serves
	 * (CTS entries, credits, frontiers). With CQ data the same write goes inline through the
	 * target's command queue up to its inject size, and lands at the target's next poll,
	 * which drops the entry (MK_OFI_QUIET_DATA). Needs the length bits to tell it apart.
	 */
	d->quiet_max = shm && d->len_in_data && d->info->tx_attr != NULL
			       ? d->info->tx_attr->inject_size
			       : 0;
	/*
	 * An inject write leaves nothing to read back: on shm no CQ entry, on tcp;ofi_rxm no
	 * wakeup of the provider's poll set (a write and a read of its signal socket); the small
	 * messages of the eager path and the control words pay that on every message. Only shm
	 * by default: rxm on 1.17 crashes (SIGSEGV inside fi_inject_writedata) when the peer's
	 * process died, where the same write through fi_writemsg returns an error completion.
	 */
	d->inject_max = d->info->tx_attr != NULL && (inject >= 2 || (inject == 1 && shm))
				? d->info->tx_attr->inject_size
				: 0;
	d->split_min = ofi_split_min(d, prov);
	d->lanes = ofi_lanes(prov);
	d->progress = ofi_progress(prov);
	d->sep_mode = ofi_sep_mode(d->progress);
	d->next_key = 1;
	pthread_mutex_init(&d->lock, NULL);
	ofi_fill_props(d, hmem);
	return 0;
}

static bool ofi_prov_offers_hmem(const char *prov)
{
#if MK_OFI_HAVE_DMABUF
	/* efa adds FI_HMEM only when its CUDA support initialised; others emulate with copies */
	return strcmp(prov, "efa") == 0;
#else
	(void)prov;
	return false; /* no DMA-BUF API in these headers: host memory only */
#endif
}

/* Devices from the distinct domains of prov; IPv4 entries preferred for the same domain. */
static int ofi_build_devs(struct fi_info *list, const char *prov)
{
	struct fi_info *pick[64];
	int n = 0, others = 0, kept = 0, rc = 0;

	for (struct fi_info *i = list; i != NULL; i = i->next) {
		int j;

		if (strcmp(i->fabric_attr->prov_name, prov) != 0)
			continue;
		if (i->domain_attr->cq_data_size < 4) {
			MK_INFO(MK_SUBSYS_INIT | MK_SUBSYS_NET,
				"ofi: %s domain %s dropped: cq_data_size %zu < 4", prov,
				i->domain_attr->name, i->domain_attr->cq_data_size);
			continue;
		}
		for (j = 0; j < n; j++) {
			if (strcmp(pick[j]->domain_attr->name, i->domain_attr->name) == 0)
				break;
		}
		if (j < n) {
			if (pick[j]->addr_format != FI_SOCKADDR_IN &&
			    i->addr_format == FI_SOCKADDR_IN)
				pick[j] = i;
			continue;
		}
		if (n == (int)MK_ARRAY_SIZE(pick))
			break;
		pick[n++] = i;
		if (!ofi_is_virtual(ofi_iface(i)))
			others++;
	}
	mk_ofi.devs = calloc(n > 0 ? (size_t)n : 1, sizeof(*mk_ofi.devs));
	if (mk_ofi.devs == NULL)
		return -ENOMEM;
	for (int j = 0; j < n; j++) {
		const char *iface = ofi_iface(pick[j]);

		if (!ofi_iface_wanted(prov, iface, others > 0)) {
			MK_INFO(MK_SUBSYS_INIT | MK_SUBSYS_NET,
				"ofi: %s domain %s skipped by the interface filter "
				"(MKERNEL_OFI_IFACE)",
				prov, pick[j]->domain_attr->name);
			continue;
		}
		rc = ofi_dev_init(&mk_ofi.devs[kept], pick[j], strcmp(iface, "lo") == 0,
				  ofi_prov_offers_hmem(prov));
		if (rc)
			break;
		kept++;
		mk_ofi.ndevs = kept;
	}
	return rc;
}

static void ofi_log_providers(const struct fi_info *list)
{
	char seen[256] = "";

	for (const struct fi_info *i = list; i != NULL; i = i->next) {
		const char *p = i->fabric_attr->prov_name;
		char tok[48];

		snprintf(tok, sizeof(tok), " %s", p);
		if (strstr(seen, tok) != NULL)
			continue;
		strncat(seen, tok, sizeof(seen) - strlen(seen) - 1);
	}
	MK_INFO(MK_SUBSYS_INIT | MK_SUBSYS_NET, "ofi: RDM+RMA providers seen:%s", seen);
}

static void ofi_free_devs(void)
{
	for (int i = 0; i < mk_ofi.ndevs; i++) {
		struct mk_ofi_dev *d = &mk_ofi.devs[i];

		if (d->refs > 0) {
			MK_WARN("ofi: device %s still has %d users at fini; closing its domain",
				d->props.name, d->refs);
			d->refs = 1;
			mk_ofi_dev_put(d);
		}
		mk_ofi.lib->freeinfo(d->info);
		free(d->free_keys);
		pthread_mutex_destroy(&d->lock);
	}
	free(mk_ofi.devs);
	mk_ofi.devs = NULL;
	mk_ofi.ndevs = 0;
}

static int ofi_init(void)
{
	struct fi_info *hints, *list = NULL;
	const char *prov;
	uint32_t hdr = FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION);
	int rc;

	memset(&mk_ofi, 0, sizeof(mk_ofi));
	if (mk_ofi_lib_open(&mk_ofi.lib) != 0) {
		mk_ofi.lib = NULL;
		return 0; /* INFO already says why: no devices, not an error */
	}
	/* ask for the older of the headers we were built with and the library we run on */
	mk_ofi.api_version = mk_ofi.lib->version() < hdr ? mk_ofi.lib->version() : hdr;
	hints = ofi_hints(NULL, NULL);
	if (hints == NULL) {
		rc = -ENOMEM;
		goto undo_lib;
	}
	rc = mk_ofi.lib->getinfo(mk_ofi.api_version, NULL, NULL, 0, hints, &list);
	mk_ofi.lib->freeinfo(hints);
	if (rc || list == NULL) {
		MK_INFO(MK_SUBSYS_INIT | MK_SUBSYS_NET,
			"ofi: fi_getinfo found no RDM provider with RMA (%s); no ofi devices",
			rc ? mk_ofi.lib->strerror(-rc) : "empty list");
		rc = 0;
		goto undo_lib;
	}
	ofi_log_providers(list);
	prov = ofi_choose_prov(list);
	if (prov == NULL) {
		MK_INFO(MK_SUBSYS_INIT | MK_SUBSYS_NET,
			"ofi: no provider matches MKERNEL_OFI_PROVIDER='%s' (shm and sockets are "
			"used "
			"only when named); no ofi devices",
			mk_param_ofi_provider());
		goto undo_list;
	}
	mk_ofi.prov_hash = mk_fnv1a32(prov, strlen(prov));
	rc = ofi_build_devs(list, prov);
	if (rc)
		goto undo_devs;
	for (int i = 0; i < mk_ofi.ndevs; i++) {
		const struct mk_ofi_dev *d = &mk_ofi.devs[i];

		/* the device's choices, so a run's log says what its defaults came to */
		MK_INFO(MK_SUBSYS_INIT | MK_SUBSYS_NET,
			"ofi: device %d %s mr_mode %s%s%s speed %d Mbps pci '%s' lanes %d "
			"progress threads %s shared endpoints %d",
			i, d->props.name, d->mr_mode & FI_MR_PROV_KEY ? "prov-key" : "app-key",
			d->mr_mode & FI_MR_VIRT_ADDR ? ",virt-addr" : ",offset",
			d->mr_mode & FI_MR_LOCAL ? ",local" : "", d->props.speed_mbps,
			d->props.pci_path, d->lanes, d->progress ? "on" : "off", d->sep_mode);
	}
	mk_ofi.lib->freeinfo(list);
	return 0;

undo_devs:
	ofi_free_devs();
undo_list:
	mk_ofi.lib->freeinfo(list);
undo_lib:
	mk_ofi_lib_close();
	mk_ofi.lib = NULL;
	return rc;
}

static void ofi_fini(void)
{
	if (mk_ofi.lib == NULL)
		return;
	ofi_free_devs();
	mk_ofi.lib = NULL;
	mk_ofi_lib_close();
}

static int ofi_ndevs(void)
{
	return mk_ofi.ndevs;
}

static int ofi_dev_props(int dev, struct mk_dev_props *props)
{
	struct mk_ofi_dev *d = mk_ofi_dev_at(dev);

	if (d == NULL)
		return -ENODEV;
	*props = d->props;
	return 0;
}

int mk_ofi_dev_get(struct mk_ofi_dev *d)
{
	int rc = 0;

	pthread_mutex_lock(&d->lock);
	if (d->refs > 0)
		goto done;
	rc = mk_ofi.lib->fabric(d->info->fabric_attr, &d->fabric, NULL);
	if (rc) {
		MK_WARN("ofi: fi_fabric(%s) failed: %s", d->props.name, mk_ofi.lib->strerror(-rc));
		goto unlock;
	}
	rc = fi_domain(d->fabric, d->info, &d->domain, NULL);
	if (rc) {
		MK_WARN("ofi: fi_domain(%s) failed: %s", d->props.name, mk_ofi.lib->strerror(-rc));
		goto undo_fabric;
	}
	goto done;

undo_fabric:
	fi_close(&d->fabric->fid);
	d->fabric = NULL;
	goto unlock;
done:
	d->refs++;
unlock:
	pthread_mutex_unlock(&d->lock);
	return mk_ofi_errno(rc);
}

void mk_ofi_dev_put(struct mk_ofi_dev *d)
{
	int rc;

	pthread_mutex_lock(&d->lock);
	if (--d->refs == 0) {
		rc = fi_close(&d->domain->fid);
		if (rc)
			MK_WARN("ofi: closing domain of %s: %s", d->props.name,
				mk_ofi.lib->strerror(-rc));
		rc = fi_close(&d->fabric->fid);
		if (rc)
			MK_WARN("ofi: closing fabric of %s: %s", d->props.name,
				mk_ofi.lib->strerror(-rc));
		d->domain = NULL;
		d->fabric = NULL;
	}
	pthread_mutex_unlock(&d->lock);
}

const struct mk_transport_ops mk_ofi_ops = {
	.name = "ofi",
	.init = ofi_init,
	.fini = ofi_fini,
	.ndevs = ofi_ndevs,
	.dev_props = ofi_dev_props,
	.listen = mk_ofi_listen,
	.connect = mk_ofi_connect,
	.connected = mk_ofi_connected,
	.accept = mk_ofi_accept,
	.close_listen = mk_ofi_close_listen,
	.close = mk_ofi_close,
	.reg_mr = mk_ofi_reg_mr,
	.dereg_mr = mk_ofi_dereg_mr,
	.write = mk_ofi_write,
	.read = mk_ofi_read,
	.flush = NULL, /* host memory only on these builds: nothing to make visible */
	.poll = mk_ofi_poll,
};
