// SPDX-License-Identifier: Apache-2.0
/*
 * Unit tests of the libfabric backend against the mock library table and fake fid objects:
 * discovery and provider choice, interface filter, both MR key modes, handle codec, connection
 * setup and every unwind path, lanes (one connection over several endpoints), the data path's
 * error and back-pressure handling.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <stdlib.h>
#include <sched.h>
#include <string.h>
#include <signal.h>
#include <stdio.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mk/log.h"
#include "ofi_mock.h"

static const struct mk_transport_ops *tp = &mk_ofi_ops;

static void clear_env(void)
{
	unsetenv("MKERNEL_OFI_PROVIDER");
	unsetenv("MKERNEL_OFI_IFACE");
	unsetenv("MKERNEL_OFI_LIB");
	unsetenv("MKERNEL_OFI_TX_DEPTH");
	unsetenv("MKERNEL_OFI_LANES");
	unsetenv("MKERNEL_TIMEOUT");
	unsetenv("MKERNEL_OFI_SHARED_EP");
	unsetenv("MKERNEL_OFI_PROGRESS_THREAD");
	unsetenv("MKERNEL_OFI_PROGRESS_CPUS");
	mk_param_reset_all();
}

static int setup(void **state)
{
	mock_reset();
	clear_env();
	/*
	 * most tests here are of an endpoint per connection and one lane; the sharing and lanes
	 * tests set their own
	 */
	setenv("MKERNEL_OFI_SHARED_EP", "0", 1);
	setenv("MKERNEL_OFI_LANES", "1", 1);
	/* and without progress threads, whatever the machine's core count would choose */
	setenv("MKERNEL_OFI_PROGRESS_THREAD", "0", 1);
	mk_ofi_lib_override(&mock_lib);
	return 0;
}

static int teardown(void **state)
{
	tp->fini();
	/* every fake object made by a test is gone once the backend is finalised */
	assert_int_equal(mock.ep_live, 0);
	assert_int_equal(mock.cq_live, 0);
	assert_int_equal(mock.av_live, 0);
	assert_int_equal(mock.mr_live, 0);
	assert_int_equal(mock.domain_live, 0);
	assert_int_equal(mock.fabric_live, 0);
	mk_ofi_lib_override(NULL);
	mock_reset();
	clear_env();
	return 0;
}

static void set_env(const char *name, const char *value)
{
	setenv(name, value, 1);
	mk_param_reset_all();
}

static void init_ok(int ndevs)
{
	assert_int_equal(tp->init(), 0);
	assert_int_equal(tp->ndevs(), ndevs);
}

static const char *dev_name(int dev)
{
	static struct mk_dev_props p;

	assert_int_equal(tp->dev_props(dev, &p), 0);
	return p.name;
}

static void live_all_zero(void)
{
	assert_int_equal(mock.ep_live + mock.cq_live + mock.av_live + mock.mr_live, 0);
	assert_int_equal(mock.domain_live + mock.fabric_live, 0);
}

/* ---- discovery ---- */

static void test_init_missing_library_reports_no_device(void **state)
{
	mk_ofi_lib_override(NULL);
	set_env("MKERNEL_OFI_LIB", "libmkernel-no-such-fabric.so.1");
	init_ok(0);
}

static void test_init_library_without_symbols_reports_no_device(void **state)
{
	mk_ofi_lib_override(NULL);
	set_env("MKERNEL_OFI_LIB", "libm.so.6"); /* loads, but has no fi_getinfo */
	init_ok(0);
}

static void test_init_getinfo_error_reports_no_device(void **state)
{
	mock.getinfo_rc = -FI_ENODATA;
	init_ok(0);
}

static void test_init_empty_list_reports_no_device(void **state)
{
	init_ok(0);
}

/* Offer provs (one domain each), optionally name one, and check which device results. */
static void expect_pick(const char *const provs[], const char *env, const char *want)
{
	for (int i = 0; provs[i] != NULL; i++)
		mock_info_add(provs[i], "eth0", 0, 8);
	if (env != NULL)
		set_env("MKERNEL_OFI_PROVIDER", env);
	init_ok(want != NULL ? 1 : 0);
	if (want != NULL)
		assert_string_equal(dev_name(0), want);
}

static void test_init_never_picks_shm_or_sockets_unasked(void **state)
{
	expect_pick((const char *const[]){ "shm", "sockets", NULL }, NULL, NULL);
}

static void test_select_default_prefers_net_over_rxm(void **state)
{
	expect_pick((const char *const[]){ "shm", "tcp;ofi_rxm", "net", "udp;ofi_rxd", NULL }, NULL,
		    "ofi:net:eth0");
}

static void test_select_default_prefers_efa(void **state)
{
	expect_pick((const char *const[]){ "tcp;ofi_rxm", "efa", NULL }, NULL, "ofi:efa:eth0");
}

static void test_select_env_tcp_takes_rxm_layering(void **state)
{
	expect_pick((const char *const[]){ "net", "tcp;ofi_rxm", NULL }, "tcp",
		    "ofi:tcp;ofi_rxm:eth0");
}

static void test_select_env_exact_name_wins(void **state)
{
	expect_pick((const char *const[]){ "tcp;ofi_rxm", "tcp", NULL }, "tcp", "ofi:tcp:eth0");
}

static void test_select_env_net_finds_renamed_tcp(void **state)
{
	/* 1.18+: the net provider became tcp */
	expect_pick((const char *const[]){ "tcp", NULL }, "net", "ofi:tcp:eth0");
}

static void test_select_env_unknown_gives_no_device(void **state)
{
	expect_pick((const char *const[]){ "tcp;ofi_rxm", NULL }, "verbs", NULL);
}

static void test_select_env_shm_when_named(void **state)
{
	mock_info_add("tcp;ofi_rxm", "eth0", 0, 8);
	mock_info_add("shm", "shm", FI_MR_VIRT_ADDR, 8);
	set_env("MKERNEL_OFI_PROVIDER", "shm");
	set_env("MKERNEL_OFI_IFACE", "lo"); /* the filter does not apply to shm */
	init_ok(1);
	assert_string_equal(dev_name(0), "ofi:shm:shm");
}

static void test_iface_default_drops_lo_and_docker(void **state)
{
	mock_info_add("tcp;ofi_rxm", "lo", 0, 8);
	mock_info_add("tcp;ofi_rxm", "docker0", 0, 8);
	mock_info_add("tcp;ofi_rxm", "eth0", 0, 8);
	mock_info_add("tcp;ofi_rxm", "eth0", 0, 8); /* same domain, other address */
	mock_info_add("tcp;ofi_rxm", "eth1", 0, 8);
	init_ok(2);
	assert_string_equal(dev_name(0), "ofi:tcp;ofi_rxm:eth0");
	assert_string_equal(dev_name(1), "ofi:tcp;ofi_rxm:eth1");
}

static void test_iface_lo_kept_when_alone(void **state)
{
	mock_info_add("tcp;ofi_rxm", "lo", 0, 8);
	mock_info_add("tcp;ofi_rxm", "virbr0", 0, 8);
	init_ok(1);
	assert_string_equal(dev_name(0), "ofi:tcp;ofi_rxm:lo");
}

static void test_iface_env_list(void **state)
{
	mock_info_add("tcp;ofi_rxm", "lo", 0, 8);
	mock_info_add("tcp;ofi_rxm", "eth0", 0, 8);
	mock_info_add("tcp;ofi_rxm", "eth1", 0, 8);
	set_env("MKERNEL_OFI_IFACE", "eth1,lo");
	init_ok(2);
	assert_string_equal(dev_name(0), "ofi:tcp;ofi_rxm:lo");
	assert_string_equal(dev_name(1), "ofi:tcp;ofi_rxm:eth1");
}

static void test_props_filled(void **state)
{
	struct mk_dev_props p;

	mock_info_add("tcp;ofi_rxm", "lo", 0, 8)->ep_attr->max_msg_size = SIZE_MAX;
	init_ok(1);
	assert_int_equal(tp->dev_props(0, &p), 0);
	assert_string_equal(p.provider, "tcp;ofi_rxm");
	assert_string_equal(p.pci_path, ""); /* lo has no PCI device */
	assert_int_equal(p.ptr_support, MK_PTR_HOST);
	assert_true(p.speed_mbps > 0);
	assert_int_equal(p.max_lanes, MK_TP_MAX_LANES); /* MKERNEL_OFI_LANES endpoints */
	assert_true(p.max_comms > 0);
	/* length travels in 32 bits of CQ data; all ones marks a quiet write */
	assert_int_equal(p.max_msg, UINT32_MAX - 1);
	/* a clear-to-send is a socket round trip here: 64 KiB go eagerly unless told otherwise */
	assert_int_equal(p.eager_bytes, 65536);
	assert_int_equal(p.cts_batch, 32);
	assert_int_equal(p.eager_write_max, 0);
	assert_int_equal(p.cq_read_rearms, 1);	  /* each fi_cq_read re-arms the wakeup socket */
	assert_int_equal(p.stripe_min, 1u << 20); /* two lanes here: striped above 1 MiB */
	assert_int_equal(tp->dev_props(1, &p), -ENODEV);
}

static void backend_restart(void);

/*
 * shm keeps the core's eager size (its extra copy costs more than a clear-to-send there) with
 * writes of at most 8 KiB, header included; net, another socket provider, asks for 64 KiB like
 * tcp.
 */
static void test_props_shm_keeps_the_core_eager_size(void **state)
{
	struct mk_dev_props p;

	set_env("MKERNEL_OFI_PROVIDER", "net");
	mock_info_add("net", "lo", 0, 8);
	init_ok(1);
	assert_int_equal(tp->dev_props(0, &p), 0);
	assert_int_equal(p.eager_bytes, 65536);
	assert_int_equal(p.cts_batch, 32);
	assert_int_equal(p.cq_read_rearms, 1);
	assert_int_equal(p.stripe_min, 1u << 20);
	backend_restart();
	set_env("MKERNEL_OFI_PROVIDER", "shm");
	mock_info_add("shm", "shm", FI_MR_VIRT_ADDR, 8);
	init_ok(1);
	assert_int_equal(tp->dev_props(0, &p), 0);
	assert_int_equal(p.eager_bytes, 0);
	assert_int_equal(p.cts_batch, 0);
	assert_int_equal(p.eager_write_max, 8192); /* header and payload within 8 KiB */
	assert_int_equal(p.cq_read_rearms, 0);
	assert_int_equal(p.stripe_min, 0); /* the core's */
	unsetenv("MKERNEL_OFI_PROVIDER");
	mk_param_reset_all();
}

static void test_drop_domain_without_cq_data(void **state)
{
	mock_info_add("tcp;ofi_rxm", "eth0", 0, 0);
	init_ok(0);
}

/* ---- registration ---- */

static uint8_t region[1 << 16] __attribute__((aligned(4096)));

static void test_mr_app_keys_unique_per_domain(void **state)
{
	struct mk_bmr *a, *b;
	struct mk_rkey ka, kb;

	mock_info_add("tcp;ofi_rxm", "eth0", 0, 8);
	init_ok(1);
	assert_int_equal(tp->reg_mr(0, region, 4096, NULL, &a, &ka), 0);
	assert_int_equal(tp->reg_mr(0, region + 4096, 4096, NULL, &b, &kb), 0);
	assert_int_equal(mock.nkeys, 2);
	assert_int_not_equal(mock.requested_keys[0], mock.requested_keys[1]);
	assert_int_equal(ka.key, mock.requested_keys[0]);
	assert_int_equal(kb.key, mock.requested_keys[1]);
	assert_int_equal(ka.base, (uintptr_t)region);
	assert_int_equal(mock.domain_live, 1); /* one domain shared by both */
	assert_int_equal(tp->dereg_mr(0, a), 0);
	assert_int_equal(tp->dereg_mr(0, b), 0);
	live_all_zero();
}

/*
 * Where the application picks keys from a wide space they are random: a stranger who reached the
 * endpoint cannot guess one (small integers 1, 2, 3 were). A key the provider says is taken is
 * drawn again.
 */
static void test_mr_app_keys_random_where_wide(void **state)
{
	struct mk_bmr *mrs[16];
	struct mk_rkey k;
	int small = 0;

	mock_info_add("tcp;ofi_rxm", "eth0", 0, 8);
	init_ok(1);
	for (int i = 0; i < 16; i++) {
		assert_int_equal(tp->reg_mr(0, region, 4096, NULL, &mrs[i], &k), 0);
		assert_int_equal(k.key, mock.requested_keys[i]);
		small += k.key < (1u << 20);
		for (int j = 0; j < i; j++)
			assert_int_not_equal(mock.requested_keys[j], k.key);
	}
	assert_true(small <= 1); /* 16 draws below 2^20 of 2^64: not by chance */
	mock.enokey_next = 2;	 /* taken twice, then free */
	assert_int_equal(tp->dereg_mr(0, mrs[0]), 0);
	assert_int_equal(tp->reg_mr(0, region, 4096, NULL, &mrs[0], &k), 0);
	assert_int_equal(mock.nkeys, 19);
	assert_int_equal(k.key, mock.requested_keys[18]);
	for (int i = 0; i < 16; i++)
		assert_int_equal(tp->dereg_mr(0, mrs[i]), 0);
	live_all_zero();
}

static void test_mr_prov_key_used_as_given(void **state)
{
	struct mk_bmr *a;
	struct mk_rkey ka;

	mock_info_add("efa", "rdmap0", FI_MR_LOCAL | FI_MR_PROV_KEY | FI_MR_VIRT_ADDR, 4);
	init_ok(1);
	assert_int_equal(tp->reg_mr(0, region, 4096, NULL, &a, &ka), 0);
	assert_int_equal(mock.requested_keys[0], 0);
	assert_int_equal(ka.key, 0x1000);
	assert_int_equal(tp->dereg_mr(0, a), 0);
}

static void test_mr_key_exhaustion_unwinds(void **state)
{
	struct mk_bmr *mrs[256];
	struct mk_rkey k;
	int n = 0, rc;

	mock_info_add("tcp;ofi_rxm", "eth0", 0, 8)->domain_attr->mr_key_size = 1;
	init_ok(1);
	while ((rc = tp->reg_mr(0, region, 4096, NULL, &mrs[n], &k)) == 0)
		n++;
	assert_int_equal(rc, -ENOSPC);
	assert_int_equal(n, 255); /* keys 1..255 fit one byte */
	assert_null(mrs[n]);
	/* released keys come back, oldest first */
	assert_int_equal(tp->dereg_mr(0, mrs[7]), 0);
	assert_int_equal(tp->dereg_mr(0, mrs[3]), 0);
	assert_int_equal(tp->reg_mr(0, region, 4096, NULL, &mrs[7], &k), 0);
	assert_int_equal(k.key, 8);
	assert_int_equal(tp->reg_mr(0, region, 4096, NULL, &mrs[3], &k), 0);
	assert_int_equal(k.key, 4);
	assert_int_equal(tp->reg_mr(0, region, 4096, NULL, &mrs[n], &k), -ENOSPC);
	mock.fail_mr_reg = -FI_EIO; /* a failed registration gives its key back */
	assert_int_equal(tp->dereg_mr(0, mrs[0]), 0);
	assert_int_equal(tp->reg_mr(0, region, 4096, NULL, &mrs[0], &k), -EIO);
	mock.fail_mr_reg = 0;
	assert_int_equal(tp->reg_mr(0, region, 4096, NULL, &mrs[0], &k), 0);
	assert_int_equal(k.key, 1);
	for (int i = 0; i < n; i++)
		assert_int_equal(tp->dereg_mr(0, mrs[i]), 0);
	live_all_zero();
}

static void test_mr_reg_failure_unwinds(void **state)
{
	struct mk_bmr *a = (void *)1;
	struct mk_rkey k;

	mock_info_add("tcp;ofi_rxm", "eth0", 0, 8);
	init_ok(1);
	mock.fail_mr_reg = -FI_ENOMEM;
	assert_int_equal(tp->reg_mr(0, region, 4096, NULL, &a, &k), -ENOMEM);
	assert_null(a);
	live_all_zero();
	mock.fail_mr_reg = 0;
	mock.fail_domain = -FI_ENODEV;
	assert_int_equal(tp->reg_mr(0, region, 4096, NULL, &a, &k), -ENODEV);
	live_all_zero();
	mock.fail_domain = 0;
	mock.fail_fabric = -FI_EINVAL;
	assert_int_equal(tp->reg_mr(0, region, 4096, NULL, &a, &k), -EINVAL);
	live_all_zero();
}

static void test_mr_gpu_memory_refused_without_hmem(void **state)
{
	struct mk_mr_attr attr = { .type = MK_PTR_CUDA, .dmabuf_fd = -1, .cuda_device = 0 };
	struct mk_bmr *a;
	struct mk_rkey k;

	mock_info_add("tcp;ofi_rxm", "eth0", 0, 8);
	init_ok(1);
	assert_int_equal(tp->reg_mr(0, region, 4096, &attr, &a, &k), -EOPNOTSUPP);
	assert_int_equal(tp->reg_mr(1, region, 4096, NULL, &a, &k), -ENODEV);
	live_all_zero();
}

/* ---- handle codec ---- */

static void make_handle(uint8_t *buf)
{
	struct mk_ofi_handle h = { .prov_hash = mk_ofi.prov_hash,
				   .nonce = 0x1122334455667788ull,
				   .addrlen = 16 };

	memset(h.addr, 0xab, 16);
	assert_int_equal(mk_ofi_handle_encode(&h, buf), 0);
}

static void test_handle_roundtrip(void **state)
{
	uint8_t buf[MK_TP_HANDLE_MAX];
	struct mk_ofi_handle h;

	mock_info_add("tcp;ofi_rxm", "eth0", 0, 8);
	init_ok(1);
	make_handle(buf);
	assert_int_equal(mk_ofi_handle_decode(buf, &h), 0);
	assert_int_equal(h.nonce, 0x1122334455667788ull);
	assert_int_equal(h.addrlen, 16);
	assert_int_equal(h.addr[15], 0xab);
}

static void test_handle_any_corrupted_byte_rejected(void **state)
{
	uint8_t buf[MK_TP_HANDLE_MAX];
	struct mk_ofi_handle h;

	mock_info_add("tcp;ofi_rxm", "eth0", 0, 8);
	init_ok(1);
	for (size_t i = 0; i < MK_TP_HANDLE_MAX; i++) {
		make_handle(buf);
		buf[i] ^= 0x01;
		assert_int_equal(mk_ofi_handle_decode(buf, &h), -EINVAL);
		buf[i] ^= 0x81;
		assert_int_equal(mk_ofi_handle_decode(buf, &h), -EINVAL);
	}
}

static void test_handle_foreign_provider_rejected(void **state)
{
	uint8_t buf[MK_TP_HANDLE_MAX];
	struct mk_ofi_handle h;

	mock_info_add("tcp;ofi_rxm", "eth0", 0, 8);
	init_ok(1);
	make_handle(buf);
	mk_ofi.prov_hash ^= 1; /* the reader runs another provider */
	assert_int_equal(mk_ofi_handle_decode(buf, &h), -EINVAL);
	mk_ofi.prov_hash ^= 1;
	h.addrlen = 0;
	assert_int_equal(mk_ofi_handle_encode(&h, buf), -EINVAL);
}

static void test_connect_garbage_handle_is_einval(void **state)
{
	uint8_t buf[MK_TP_HANDLE_MAX];
	struct mk_conn *c = (void *)1;

	mock_info_add("tcp;ofi_rxm", "eth0", 0, 8);
	init_ok(1);
	memset(buf, 0x5a, sizeof(buf));
	assert_int_equal(tp->connect(0, buf, NULL, 0, &c), -EINVAL);
	assert_null(c);
	make_handle(buf);
	assert_int_equal(tp->connect(0, buf, buf, MK_TP_BLOB_MAX + 1, &c), -EINVAL);
	live_all_zero();
}

/* ---- connection setup ---- */

struct pair {
	struct mk_listener *l;
	struct mk_conn *a; /* accepted */
	struct mk_conn *c; /* connecting */
	struct mock_ep *la, *cb;
};

static void open_pair_again(struct pair *p);

/* A connected pair over a provider whose inject size is inject. */
static void open_pair_inject(struct pair *p, const char *prov, uint64_t mr_mode, size_t cq_data,
			     size_t inject)
{
	mock_info_add(prov, "eth0", mr_mode, cq_data)->tx_attr->inject_size = inject;
	init_ok(1);
	open_pair_again(p);
}

static struct mock_ep *mock_ep_of(struct fid_ep *ep)
{
	return container_of(ep, struct mock_ep, ep);
}

/* Another connected pair on the device already initialised. */
static void open_pair_again(struct pair *p)
{
	uint8_t handle[MK_TP_HANDLE_MAX];
	const char blob_c[] = "from-connector", blob_a[] = "from-acceptor";

	assert_int_equal(tp->listen(0, handle, &p->l), 0);
	/* the connections' own endpoints, or with sharing the ones they joined */
	p->la = mock_ep_of(mk_ofi_listener_of(p->l)->pending->lanes[0].ep);
	assert_non_null(p->la->rx_buf);
	assert_int_equal(tp->connect(0, handle, blob_c, sizeof(blob_c), &p->c), 0);
	p->cb = mock_ep_of(mk_ofi_conn_of(p->c)->lanes[0].ep);
	assert_int_equal(tp->connected(p->c), 0);
	assert_int_equal(tp->accept(p->l, blob_a, sizeof(blob_a), &p->a), 0);
	assert_null(p->a);	    /* nothing arrived yet */
	mock_deliver(p->cb, p->la); /* the connect request */
	assert_int_equal(tp->accept(p->l, blob_a, sizeof(blob_a), &p->a), 0);
	assert_null(p->a);	    /* reply posted, not yet sent */
	mock_deliver(p->la, p->cb); /* the reply */
	assert_int_equal(tp->accept(p->l, blob_a, sizeof(blob_a), &p->a), 0);
	assert_non_null(p->a);
	assert_int_equal(tp->connected(p->c), 1);
	assert_memory_equal(p->a->peer_blob, blob_c, sizeof(blob_c));
	assert_int_equal(p->a->peer_blob_len, sizeof(blob_c));
	assert_memory_equal(p->c->peer_blob, blob_a, sizeof(blob_a));
	assert_int_equal(tp->close_listen(p->l), 0);
}

static void open_pair(struct pair *p, const char *prov, uint64_t mr_mode, size_t cq_data)
{
	open_pair_inject(p, prov, mr_mode, cq_data, 0);
}

static void close_pair(struct pair *p)
{
	assert_int_equal(tp->close(p->a), 0);
	assert_int_equal(tp->close(p->c), 0);
	live_all_zero();
}

static void test_setup_exchanges_blobs(void **state)
{
	struct pair p;

	open_pair(&p, "tcp;ofi_rxm", 0, 8);
	close_pair(&p);
}

static void test_accept_exactly_one(void **state)
{
	struct mk_conn *extra = (void *)1;
	uint8_t handle[MK_TP_HANDLE_MAX];
	struct mk_listener *l;
	struct mk_conn *c, *a = NULL;

	mock_info_add("tcp;ofi_rxm", "eth0", 0, 8);
	init_ok(1);
	assert_int_equal(tp->listen(0, handle, &l), 0);
	assert_int_equal(tp->connect(0, handle, NULL, 0, &c), 0);
	mock_deliver(mock.eps[1], mock.eps[0]);
	assert_int_equal(tp->accept(l, NULL, 0, &a), 0);
	mock_deliver(mock.eps[0], mock.eps[1]);
	assert_int_equal(tp->accept(l, NULL, 0, &a), 0);
	assert_non_null(a);
	assert_int_equal(tp->accept(l, NULL, 0, &extra), -EINVAL);
	assert_null(extra);
	assert_int_equal(tp->close_listen(l), 0);
	assert_int_equal(tp->close(a), 0);
	assert_int_equal(tp->close(c), 0);
}

static void test_accept_drops_foreign_nonce(void **state)
{
	uint8_t handle[MK_TP_HANDLE_MAX];
	struct mk_listener *l;
	struct mk_conn *c, *a = NULL;
	struct mk_ofi_ctrl *m;

	mock_info_add("tcp;ofi_rxm", "eth0", 0, 8);
	init_ok(1);
	assert_int_equal(tp->listen(0, handle, &l), 0);
	assert_int_equal(tp->connect(0, handle, NULL, 0, &c), 0);
	m = (struct mk_ofi_ctrl *)mock.eps[1]->tx_buf;
	m->nonce ^= 1; /* a connector holding another listener's handle */
	mock_deliver(mock.eps[1], mock.eps[0]);
	mock.eps[0]->rx_buf = NULL;
	assert_int_equal(tp->accept(l, NULL, 0, &a), 0);
	assert_null(a);
	assert_non_null(mock.eps[0]->rx_buf);	  /* dropped and received again */
	assert_int_equal(mock.eps[0]->tx_len, 0); /* no reply */
	m->nonce ^= 1;
	m->magic = 0;
	mock_deliver(mock.eps[1], mock.eps[0]);
	assert_int_equal(tp->accept(l, NULL, 0, &a), 0);
	assert_null(a);
	assert_int_equal(mock.eps[0]->tx_len, 0);
	assert_int_equal(tp->close_listen(l), 0);
	assert_int_equal(tp->close(c), 0);
}

static void test_connected_times_out_without_reply(void **state)
{
	uint8_t handle[MK_TP_HANDLE_MAX];
	struct mk_listener *l;
	struct mk_conn *c;

	set_env("MKERNEL_TIMEOUT", "30");
	mock_info_add("tcp;ofi_rxm", "eth0", 0, 8);
	init_ok(1);
	assert_int_equal(tp->listen(0, handle, &l), 0);
	assert_int_equal(tp->close_listen(l), 0);
	assert_int_equal(tp->connect(0, handle, NULL, 0, &c), 0);
	assert_int_equal(tp->connected(c), 0);
	usleep(40 * 1000);
	assert_int_equal(tp->connected(c), -ETIMEDOUT);
	assert_int_equal(tp->close(c), 0);
}

static void test_connect_resends_after_send_error(void **state)
{
	uint8_t handle[MK_TP_HANDLE_MAX];
	struct mk_listener *l;
	struct mk_conn *c;
	struct mock_ep *ep;

	mock_info_add("tcp;ofi_rxm", "eth0", 0, 8);
	init_ok(1);
	assert_int_equal(tp->listen(0, handle, &l), 0);
	assert_int_equal(tp->connect(0, handle, NULL, 0, &c), 0);
	ep = mock.eps[1];
	mock_cq_push_err(ep, ep->tx_ctx, FI_SEND, FI_ECONNREFUSED);
	ep->tx_len = 0;
	assert_int_equal(tp->connected(c), 0);
	assert_int_equal(ep->tx_len, 0); /* paced: not at once */
	usleep(30 * 1000);
	assert_int_equal(tp->connected(c), 0);
	assert_true(ep->tx_len > 0); /* sent again */
	assert_int_equal(tp->close_listen(l), 0);
	assert_int_equal(tp->close(c), 0);
}

/* Every unwind label of endpoint creation: listen fails with the injected code, nothing leaks. */
static void test_listen_unwinds_every_failure(void **state)
{
	int *const knobs[] = { &mock.fail_fabric,  &mock.fail_domain,	&mock.fail_cq_open,
			       &mock.fail_av_open, &mock.fail_endpoint, &mock.fail_bind,
			       &mock.fail_enable,  &mock.fail_getname,	&mock.fail_recv };
	uint8_t handle[MK_TP_HANDLE_MAX];
	struct mk_listener *l = (void *)1;

	mock_info_add("tcp;ofi_rxm", "eth0", 0, 8);
	init_ok(1);
	for (size_t i = 0; i < MK_ARRAY_SIZE(knobs); i++) {
		*knobs[i] = -FI_EIO;
		assert_int_equal(tp->listen(0, handle, &l), -EIO);
		assert_null(l);
		live_all_zero();
		*knobs[i] = 0;
	}
	assert_int_equal(tp->listen(5, handle, &l), -ENODEV);
}

static void test_connect_unwinds_every_failure(void **state)
{
	int *const knobs[] = { &mock.fail_av_insert, &mock.fail_send, &mock.fail_recv,
			       &mock.fail_endpoint };
	uint8_t handle[MK_TP_HANDLE_MAX];
	struct mk_listener *l;
	struct mk_conn *c = (void *)1;

	mock_info_add("tcp;ofi_rxm", "eth0", 0, 8);
	init_ok(1);
	assert_int_equal(tp->listen(0, handle, &l), 0);
	for (size_t i = 0; i < MK_ARRAY_SIZE(knobs); i++) {
		*knobs[i] = -FI_EIO;
		assert_int_equal(tp->connect(0, handle, NULL, 0, &c), -EIO);
		assert_null(c);
		assert_int_equal(mock.ep_live, 1); /* only the listener's */
		*knobs[i] = 0;
	}
	assert_int_equal(tp->close_listen(l), 0);
	live_all_zero();
}

static void test_init_allocation_failures_unwind(void **state)
{
	mock_info_add("tcp;ofi_rxm", "eth0", 0, 8);
	mock.dupinfo_fail_at = 1; /* the hints */
	assert_int_equal(tp->init(), -ENOMEM);
	assert_int_equal(tp->ndevs(), 0);
	mock.dupinfo_calls = 0;
	mock.dupinfo_fail_at = 2; /* the device's own copy */
	assert_int_equal(tp->init(), -ENOMEM);
	assert_int_equal(tp->ndevs(), 0);
	mock.dupinfo_fail_at = 0;
	init_ok(1);
}

static void test_local_mr_setup_buffer_failure_unwinds(void **state)
{
	uint8_t handle[MK_TP_HANDLE_MAX];
	struct mk_listener *l = (void *)1;

	mock_info_add("efa", "rdmap0", FI_MR_LOCAL | FI_MR_PROV_KEY | FI_MR_VIRT_ADDR, 4);
	init_ok(1);
	mock.fail_mr_reg = -FI_EIO;
	assert_int_equal(tp->listen(0, handle, &l), -EIO);
	assert_null(l);
	live_all_zero();
}

static void test_local_mr_setup_buffers_registered(void **state)
{
	struct pair p;

	open_pair(&p, "efa", FI_MR_LOCAL | FI_MR_PROV_KEY | FI_MR_VIRT_ADDR, 4);
	assert_int_equal(mock.mr_live, 2); /* one setup-message region per endpoint */
	close_pair(&p);
}

/* ---- lanes: one connection over several endpoints ---- */

static struct mock_ep *lane_ep(struct mk_conn *c, int i)
{
	return mk_ofi_conn_of(c)->lanes[i].ep->fid.context;
}

static struct mock_av *lane_av(struct mk_conn *c, int i)
{
	return mk_ofi_conn_of(c)->lanes[i].av->fid.context;
}

/* A pair whose connecting side asked for n lanes; setup messages travel on lane 0. */
static void open_lanes(struct pair *p, int n)
{
	uint8_t handle[MK_TP_HANDLE_MAX];
	char num[8];

	snprintf(num, sizeof(num), "%d", n);
	set_env("MKERNEL_OFI_LANES", num);
	mock_info_add("tcp;ofi_rxm", "eth0", 0, 8);
	init_ok(1);
	assert_int_equal(tp->listen(0, handle, &p->l), 0);
	assert_int_equal(tp->connect(0, handle, NULL, 0, &p->c), 0);
	assert_int_equal(mock.ep_live, 1 + n); /* the listener's lane 0 + ours */
	assert_int_equal(tp->connected(p->c), 0);
	p->cb = lane_ep(p->c, 0);
	p->la = mock.eps[0];
	mock_deliver(p->cb, p->la);
	assert_int_equal(tp->accept(p->l, NULL, 0, &p->a), 0);
	assert_int_equal(mock.ep_live, 2 * n); /* the accepting side followed */
	mock_deliver(p->la, p->cb);
	assert_int_equal(tp->accept(p->l, NULL, 0, &p->a), 0);
	assert_non_null(p->a);
	assert_int_equal(tp->connected(p->c), 1);
	assert_int_equal(tp->close_listen(p->l), 0);
}

static void test_lanes_pair_endpoint_by_endpoint(void **state)
{
	struct pair p;

	open_lanes(&p, 4);
	assert_int_equal(p.c->nlanes, 4);
	assert_int_equal(p.a->nlanes, 4);
	for (int i = 0; i < 4; i++) {
		/* lane i of each side knows exactly lane i of the other */
		assert_int_equal(lane_av(p.c, i)->inserted, 1);
		assert_int_equal(lane_av(p.a, i)->inserted, 1);
		assert_memory_equal(lane_av(p.c, i)->addr, lane_ep(p.a, i)->addr, 16);
		assert_memory_equal(lane_av(p.a, i)->addr, lane_ep(p.c, i)->addr, 16);
		/* and each lane has a CQ of its own */
		for (int j = 0; j < i; j++)
			assert_ptr_not_equal(lane_ep(p.c, i)->cq, lane_ep(p.c, j)->cq);
	}
	close_pair(&p);
}

static void test_lanes_write_on_the_named_endpoint(void **state)
{
	struct mk_rkey rk = { .base = 0, .key = 1 };
	struct mk_event ev[8];
	int ctx[3], seen = 0;
	struct pair p;

	open_lanes(&p, 3);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(
			tp->write(p.c, i, region, 64, NULL, 0, &rk, true, 0x100 + i, &ctx[i]), 0);
		assert_int_equal(lane_ep(p.c, i)->nwrites, 1);
		assert_int_equal(lane_ep(p.c, i)->last_rma.addr,
				 mk_ofi_conn_of(p.c)->lanes[i].peer); /* that lane's peer */
	}
	assert_int_equal(tp->write(p.c, 3, region, 64, NULL, 0, &rk, true, 1, NULL), -EINVAL);
	assert_int_equal(tp->write(p.c, -1, region, 64, NULL, 0, &rk, true, 1, NULL), -EINVAL);
	/* completions and the peer's immediates arrive on each lane's own CQ; poll sees all */
	for (int i = 0; i < 3; i++) {
		mock_cq_push(lane_ep(p.c, i), lane_ep(p.c, i)->last_rma.context, FI_RMA | FI_WRITE,
			     0, 0);
		mock_cq_push(lane_ep(p.a, i), NULL, FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA, 0,
			     (64ull << 32) | (0x100 + i));
	}
	assert_int_equal(tp->poll(p.c, ev, 8), 3);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(ev[i].type, MK_EV_WRITE_DONE);
		for (int j = 0; j < 3; j++)
			seen |= ev[i].ctx == &ctx[j] ? 1 << j : 0;
	}
	assert_int_equal(seen, 7);
	seen = 0;
	assert_int_equal(tp->poll(p.a, ev, 8), 3);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(ev[i].type, MK_EV_IMM);
		assert_int_equal(ev[i].len, 64);
		seen |= 1 << (ev[i].imm - 0x100);
	}
	assert_int_equal(seen, 7);
	close_pair(&p);
}

/* A caller asking for fewer events than the lanes hold still gets them all, over two polls. */
static void test_lanes_poll_takes_turns(void **state)
{
	struct mk_event ev[2];
	int got = 0, n;
	struct pair p;

	open_lanes(&p, 4);
	for (int i = 0; i < 4; i++)
		mock_cq_push(lane_ep(p.a, i), NULL, FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA, 0, i);
	while ((n = tp->poll(p.a, ev, 1)) > 0)
		got += n;
	assert_int_equal(n, 0);
	assert_int_equal(got, 4);
	close_pair(&p);
}

/*
 * Lanes other than 0 are read only while something may move on them: the consumer's
 * lanes_wanted (a striped receive announced), ops of ours posted on them, or once a
 * millisecond (MK_OFI_LANE_SWEEP_NS) as a guard. Each idle read is system calls on the socket
 * providers.
 */
static void test_lanes_idle_ones_read_only_when_expected(void **state)
{
	struct mk_rkey rk = { .base = 0, .key = 1 };
	struct mk_event ev[4];
	uint64_t t0;
	int ctx, n;
	struct pair p;

	open_lanes(&p, 2);
	assert_int_equal(tp->poll(p.a, ev, 4), 0); /* the first poll is a sweep */
	mock_cq_push(lane_ep(p.a, 1), NULL, FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA, 0, 7);
	assert_int_equal(tp->poll(p.a, ev, 4), 0); /* nobody expects anything on lane 1 */
	p.a->lanes_wanted = 1;
	t0 = mk_now_ns(); /* this poll reads every lane */
	assert_int_equal(tp->poll(p.a, ev, 4), 1);
	assert_int_equal(ev[0].imm, 7);
	/* unannounced, the guard sweep finds it a millisecond after the last read, not before */
	p.a->lanes_wanted = 0;
	mock_cq_push(lane_ep(p.a, 1), NULL, FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA, 0, 8);
	while ((n = tp->poll(p.a, ev, 4)) == 0)
		assert_true(mk_now_ns() - t0 < 1000000000ull);
	assert_true(mk_now_ns() - t0 >= 1000000ull);
	assert_int_equal(n, 1);
	assert_int_equal(ev[0].imm, 8);
	/* our own write on lane 1 keeps that lane read until its completion is in */
	assert_int_equal(tp->poll(p.c, ev, 4), 0);
	assert_int_equal(tp->write(p.c, 1, region, 64, NULL, 0, &rk, true, 9, &ctx), 0);
	mock_cq_push(lane_ep(p.c, 1), lane_ep(p.c, 1)->last_rma.context, FI_RMA | FI_WRITE, 0, 0);
	assert_int_equal(tp->poll(p.c, ev, 4), 1);
	assert_int_equal(ev[0].type, MK_EV_WRITE_DONE);
	assert_ptr_equal(ev[0].ctx, &ctx);
	mock_cq_push(lane_ep(p.c, 1), NULL, FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA, 0, 10);
	assert_int_equal(tp->poll(p.c, ev, 4), 0); /* done: lane 1 idle again */
	close_pair(&p);
}

/* Unset, the lanes are the device's choice: two on the socket providers, one elsewhere. */
static void test_lanes_default_per_provider(void **state)
{
	uint8_t handle[MK_TP_HANDLE_MAX];
	struct mk_listener *l;
	struct mk_conn *c;

	set_env("MKERNEL_OFI_PROVIDER", "net");
	unsetenv("MKERNEL_OFI_LANES");
	mk_param_reset_all();
	mock_info_add("net", "eth0", 0, 8);
	init_ok(1);
	assert_int_equal(tp->listen(0, handle, &l), 0);
	assert_int_equal(tp->connect(0, handle, NULL, 0, &c), 0);
	assert_int_equal(mock.ep_live, 1 + 2); /* the listener's lane 0 + our two */
	assert_int_equal(c->nlanes, 2);
	assert_int_equal(tp->close(c), 0);
	assert_int_equal(tp->close_listen(l), 0);
	tp->fini();
	mock_reset();
	set_env("MKERNEL_OFI_PROVIDER", "shm");
	mock_info_add("shm", "shm", FI_MR_VIRT_ADDR, 8);
	init_ok(1);
	assert_int_equal(mk_ofi_dev_at(0)->lanes, 1);
}

/*
 * A pair over tcp;ofi_rxm with MKERNEL_OFI_PROGRESS_CPUS at cpus and the threads and sharing left
 * to the device: whether it chose threads, and that its connections run them or not.
 */
static bool progress_chosen(const char *cpus)
{
	struct mk_ofi_conn *a, *c;
	struct pair p;
	bool on;

	unsetenv("MKERNEL_OFI_PROGRESS_THREAD");
	unsetenv("MKERNEL_OFI_SHARED_EP");
	set_env("MKERNEL_OFI_PROGRESS_CPUS", cpus);
	open_pair(&p, "tcp;ofi_rxm", 0, 8);
	a = mk_ofi_conn_of(p.a);
	c = mk_ofi_conn_of(p.c);
	on = mk_ofi_dev_at(0)->progress;
	/* threads: an endpoint per connection, whose thread reads its CQ into the ring */
	assert_int_equal(mk_ofi_dev_at(0)->sep_mode, on ? 0 : 2);
	assert_int_equal(mock.ep_live, on ? 2 : 1);
	assert_int_equal(a->lanes[0].progress_on, on);
	assert_int_equal(c->lanes[0].ring != NULL, on);
	close_pair(&p);
	tp->fini();
	mock_reset();
	return on;
}

/*
 * Unset, progress threads are the device's choice: on over the socket providers where the
 * process has MKERNEL_OFI_PROGRESS_CPUS cores, off on fewer and on shm.
 */
static void test_progress_default_per_provider_and_cores(void **state)
{
	assert_true(progress_chosen("1"));
	assert_false(progress_chosen("100000"));
	set_env("MKERNEL_OFI_PROVIDER", "shm");
	mock_info_add("shm", "shm", FI_MR_VIRT_ADDR, 8);
	init_ok(1);
	assert_false(mk_ofi_dev_at(0)->progress);
}

/* A listener and a connection to it that asked for lanes (nothing delivered yet). */
static void listen_and_connect(const char *lanes, struct mk_listener **l, struct mk_conn **c)
{
	uint8_t handle[MK_TP_HANDLE_MAX];

	set_env("MKERNEL_OFI_LANES", lanes);
	mock_info_add("tcp;ofi_rxm", "eth0", 0, 8);
	init_ok(1);
	assert_int_equal(tp->listen(0, handle, l), 0);
	assert_int_equal(tp->connect(0, handle, NULL, 0, c), 0);
}

static void test_lanes_reply_for_another_count_is_dropped(void **state)
{
	struct mk_listener *l;
	struct mk_conn *c, *a = NULL;
	struct mk_ofi_ctrl *m;
	struct mock_ep *cb;

	listen_and_connect("2", &l, &c);
	cb = lane_ep(c, 0);
	mock_deliver(cb, mock.eps[0]);
	assert_int_equal(tp->accept(l, NULL, 0, &a), 0);
	m = (struct mk_ofi_ctrl *)mock.eps[0]->tx_buf;
	m->nlanes = 3; /* not what we asked for */
	mock_deliver(mock.eps[0], cb);
	assert_int_equal(tp->connected(c), 0); /* dropped with a WARN, still waiting */
	assert_int_equal(tp->close_listen(l), 0);
	assert_int_equal(tp->close(c), 0);
	live_all_zero();
}

/* Every lane that opened is closed again when a later one fails, on either side. */
static void test_lanes_open_failure_unwinds(void **state)
{
	uint8_t handle[MK_TP_HANDLE_MAX];
	struct mk_listener *l;
	struct mk_conn *c = (void *)1, *a = NULL;

	set_env("MKERNEL_OFI_LANES", "4");
	mock_info_add("tcp;ofi_rxm", "eth0", 0, 8);
	init_ok(1);
	assert_int_equal(tp->listen(0, handle, &l), 0);
	mock.endpoint_calls = 0;
	mock.endpoint_fail_at = 3; /* the connecting side's third lane */
	assert_int_equal(tp->connect(0, handle, NULL, 0, &c), -EIO);
	assert_null(c);
	assert_int_equal(mock.ep_live, 1);
	assert_int_equal(mock.cq_live, 1);
	assert_int_equal(mock.av_live, 1);
	mock.endpoint_calls = 0;
	mock.endpoint_fail_at = 4 + 2; /* all four of ours, then the acceptor's second lane */
	assert_int_equal(tp->connect(0, handle, NULL, 0, &c), 0);
	mock_deliver(lane_ep(c, 0), mock.eps[0]);
	assert_int_equal(tp->accept(l, NULL, 0, &a), -EIO);
	assert_null(a);
	assert_int_equal(tp->close_listen(l), 0);
	assert_int_equal(tp->close(c), 0);
	live_all_zero();
}

/* ---- data path ---- */

/* Exactly one event of type is ready on c. */
static struct mk_event poll_one(struct mk_conn *c, enum mk_event_type type)
{
	struct mk_event ev[4];

	assert_int_equal(tp->poll(c, ev, 4), 1);
	assert_int_equal(ev[0].type, type);
	return ev[0];
}

/* The caller's one write completion: ctx, whole length and status. */
static void write_done(struct mk_conn *c, const void *ctx, size_t len, int status)
{
	struct mk_event ev = poll_one(c, MK_EV_WRITE_DONE);

	assert_ptr_equal(ev.ctx, ctx);
	assert_int_equal(ev.len, len);
	assert_int_equal(ev.status, status);
}

static void test_write_offsets_app_keys_len_in_data(void **state)
{
	struct mk_rkey rk = { .base = 0x10000, .key = 42 };
	struct mk_bmr *mr;
	struct mk_rkey own;
	struct pair p;

	open_pair(&p, "tcp;ofi_rxm", 0, 8);
	assert_int_equal(tp->reg_mr(0, region, 4096, NULL, &mr, &own), 0);
	assert_int_equal(tp->write(p.c, 0, region, 100, mr, 0x10040, &rk, true, 0xbeef, NULL), 0);
	assert_int_equal(p.cb->last_rma_iov.addr, 0x40); /* offset: no FI_MR_VIRT_ADDR */
	assert_int_equal(p.cb->last_rma_iov.key, 42);
	assert_int_equal(p.cb->last_rma.data, (100ull << 32) | 0xbeef);
	assert_true(p.cb->last_flags & FI_REMOTE_CQ_DATA);
	assert_ptr_equal(p.cb->last_desc, mr->desc);
	assert_int_equal(tp->write(p.c, 0, region, 0, NULL, 0x10000, &rk, false, 0, NULL), 0);
	assert_false(p.cb->last_flags & FI_REMOTE_CQ_DATA);
	assert_int_equal(tp->write(p.c, 1, region, 0, NULL, 0x10000, &rk, false, 0, NULL),
			 -EINVAL); /* one lane by default */
	assert_int_equal(tp->dereg_mr(0, mr), 0);
	close_pair(&p);
}

/*
 * shm: a write without an immediate up to the inject size asks for remote CQ data with the
 * quiet marker (its command queue, not a CMA system call), and the target's poll swallows the
 * marker's entry; a larger one, and any write with an immediate, goes as before.
 */
static void test_shm_quiet_writes(void **state)
{
	struct mk_rkey rk = { .base = 0, .key = 1 };
	struct mk_event ev[4];
	struct pair p;

	set_env("MKERNEL_OFI_PROVIDER", "shm");
	open_pair_inject(&p, "shm", FI_MR_VIRT_ADDR, 8, 4096);
	assert_int_equal(tp->write(p.c, 0, region, 64, NULL, 0, &rk, false, 0, NULL), 0);
	assert_true(p.cb->last_flags & FI_REMOTE_CQ_DATA);
	assert_int_equal(p.cb->last_rma.data, MK_OFI_QUIET_DATA);
	assert_int_equal(tp->write(p.c, 0, region, 4096, NULL, 0, &rk, false, 0, NULL), 0);
	assert_int_equal(p.cb->last_rma.data, MK_OFI_QUIET_DATA);
	assert_int_equal(tp->write(p.c, 0, region, 4097, NULL, 0, &rk, false, 0, NULL), 0);
	assert_false(p.cb->last_flags & FI_REMOTE_CQ_DATA);
	assert_int_equal(tp->write(p.c, 0, region, 64, NULL, 0, &rk, true, 5, NULL), 0);
	assert_int_equal(p.cb->last_rma.data, (64ull << 32) | 5);
	/* the quiet write's landing is no event; a real immediate behind it still is */
	mock_cq_push(p.la, NULL, FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA, 64, MK_OFI_QUIET_DATA);
	assert_int_equal(tp->poll(p.a, ev, 4), 0);
	mock_cq_push(p.la, NULL, FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA, 64, MK_OFI_QUIET_DATA);
	mock_cq_push(p.la, NULL, FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA, 0, (64ull << 32) | 5);
	ev[0] = poll_one(p.a, MK_EV_IMM);
	assert_int_equal(ev[0].imm, 5);
	assert_int_equal(ev[0].len, 64);
	close_pair(&p);
}

/*
 * shm: a write with an immediate just past the inject size goes as two writes on the lane, the
 * leading bytes quiet, the trailing inject size with the immediate and the whole length; the
 * caller sees one completion, after both parts.
 */
static void test_shm_split_writes(void **state)
{
	struct mk_rkey rk = { .base = 0, .key = 1 };
	struct mk_event ev[4];
	struct pair p;
	int ctx, n;

	set_env("MKERNEL_OFI_PROVIDER", "shm");
	open_pair_inject(&p, "shm", FI_MR_VIRT_ADDR, 8, 4096);
	n = p.cb->nwrites;
	assert_int_equal(tp->write(p.c, 0, region, 4128, NULL, 0x1000, &rk, true, 9, &ctx), 0);
	assert_int_equal(p.cb->nwrites, n + 2);
	assert_ptr_equal(p.cb->prev_iov.iov_base, region);
	assert_int_equal(p.cb->prev_iov.iov_len, 32);
	assert_int_equal(p.cb->prev_rma_iov.addr, 0x1000);
	assert_int_equal(p.cb->prev_rma_iov.len, 32);
	assert_int_equal(p.cb->prev_data, MK_OFI_QUIET_DATA);
	assert_true(p.cb->prev_flags & FI_REMOTE_CQ_DATA);
	assert_ptr_equal(p.cb->last_iov.iov_base, region + 32);
	assert_int_equal(p.cb->last_iov.iov_len, 4096);
	assert_int_equal(p.cb->last_rma_iov.addr, 0x1020);
	assert_int_equal(p.cb->last_rma_iov.len, 4096);
	assert_int_equal(p.cb->last_rma.data, (4128ull << 32) | 9);
	assert_true(p.cb->last_flags & FI_REMOTE_CQ_DATA);
	/* the quiet part's completion is no event; the second part's is the caller's, whole */
	mock_cq_push(p.cb, p.cb->prev_context, FI_RMA | FI_WRITE, 0, 0);
	assert_int_equal(tp->poll(p.c, ev, 4), 0);
	mock_cq_push(p.cb, p.cb->last_rma.context, FI_RMA | FI_WRITE, 0, 0);
	write_done(p.c, &ctx, 4128, 0);
	/* the target: the quiet part's entry dropped, the immediate with the whole length */
	mock_cq_push(p.la, NULL, FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA, 32, MK_OFI_QUIET_DATA);
	mock_cq_push(p.la, NULL, FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA, 4096, (4128ull << 32) | 9);
	ev[0] = poll_one(p.a, MK_EV_IMM);
	assert_int_equal(ev[0].imm, 9);
	assert_int_equal(ev[0].len, 4128);
	/* at the inject size, and past twice it, one write as before */
	n = p.cb->nwrites;
	assert_int_equal(tp->write(p.c, 0, region, 4096, NULL, 0, &rk, true, 1, NULL), 0);
	assert_int_equal(p.cb->nwrites, n + 1);
	assert_int_equal(p.cb->last_iov.iov_len, 4096);
	assert_int_equal(tp->write(p.c, 0, region, 8193, NULL, 0, &rk, true, 1, NULL), 0);
	assert_int_equal(p.cb->nwrites, n + 2);
	assert_int_equal(p.cb->last_iov.iov_len, 8193);
	assert_int_equal(p.cb->last_rma.data, (8193ull << 32) | 1);
	/* twice the inject size still splits, in two equal halves */
	assert_int_equal(tp->write(p.c, 0, region, 8192, NULL, 0, &rk, true, 1, NULL), 0);
	assert_int_equal(p.cb->nwrites, n + 4);
	assert_int_equal(p.cb->prev_iov.iov_len, 4096);
	assert_int_equal(p.cb->last_iov.iov_len, 4096);
	close_pair(&p);
}

/*
 * shm: the same split from registered host memory goes as two injects, the quiet leading bytes
 * first, and the caller's one event is made at once: nothing to read from the CQ. With no room
 * left for that event, the split goes through the CQ as above.
 */
static void test_shm_split_writes_injected(void **state)
{
	struct mk_rkey rk = { .base = 0, .key = 1 };
	struct mk_rkey own;
	struct mk_event ev[4];
	struct mk_bmr *mr;
	struct pair p;
	int ctx, n, w;

	set_env("MKERNEL_OFI_PROVIDER", "shm");
	open_pair_inject(&p, "shm", FI_MR_VIRT_ADDR, 8, 4096);
	assert_int_equal(tp->reg_mr(0, region, 8192, NULL, &mr, &own), 0);
	n = p.cb->nwrites;
	w = p.cb->ninjects;
	assert_int_equal(tp->write(p.c, 0, region, 4128, mr, 0x1000, &rk, true, 9, &ctx), 0);
	assert_int_equal(p.cb->nwrites, n);
	assert_int_equal(p.cb->ninjects, w + 2);
	assert_int_equal(p.cb->prev_inject_len, 32);
	assert_int_equal(p.cb->prev_inject_data, MK_OFI_QUIET_DATA);
	assert_int_equal(p.cb->prev_inject_raddr, 0x1000);
	assert_int_equal(p.cb->inject_len, 4096);
	assert_true(p.cb->inject_has_data);
	assert_int_equal(p.cb->inject_data, (4128ull << 32) | 9);
	assert_int_equal(p.cb->inject_raddr, 0x1020);
	write_done(p.c, &ctx, 4128, 0);
	assert_int_equal(tp->poll(p.c, ev, 4), 0); /* one event for the two parts */
	/* twice the inject size: two injects of 4096 */
	assert_int_equal(tp->write(p.c, 0, region, 8192, mr, 0, &rk, true, 1, &ctx), 0);
	assert_int_equal(p.cb->ninjects, w + 4);
	assert_int_equal(p.cb->prev_inject_len, 4096);
	assert_int_equal(p.cb->inject_len, 4096);
	poll_one(p.c, MK_EV_WRITE_DONE);
	/* the stash full of injected writes' events: the split goes through the CQ */
	for (int i = 0; i < MK_OFI_STASH; i++)
		assert_int_equal(tp->write(p.c, 0, region, 64, mr, 0, &rk, true, 1, NULL), 0);
	n = p.cb->nwrites;
	assert_int_equal(tp->write(p.c, 0, region, 4128, mr, 0x1000, &rk, true, 9, &ctx), 0);
	assert_int_equal(p.cb->nwrites, n + 2);
	assert_int_equal(p.cb->prev_data, MK_OFI_QUIET_DATA);
	assert_int_equal(tp->dereg_mr(0, mr), 0);
	close_pair(&p);
}

/* An error of the quiet part reaches the caller as its completion's status, in either order. */
static void test_shm_split_write_lead_error(void **state)
{
	struct mk_rkey rk = { .base = 0, .key = 1 };
	struct mk_event ev[4];
	struct pair p;
	int ctx;

	set_env("MKERNEL_OFI_PROVIDER", "shm");
	open_pair_inject(&p, "shm", FI_MR_VIRT_ADDR, 8, 4096);
	assert_int_equal(tp->write(p.c, 0, region, 5000, NULL, 0, &rk, true, 3, &ctx), 0);
	mock_cq_push_err(p.cb, p.cb->prev_context, FI_RMA | FI_WRITE, FI_EIO);
	assert_int_equal(tp->poll(p.c, ev, 4), 0);
	mock_cq_push(p.cb, p.cb->last_rma.context, FI_RMA | FI_WRITE, 0, 0);
	write_done(p.c, &ctx, 5000, -EIO);
	/* the second part first, then the quiet part's error */
	assert_int_equal(tp->write(p.c, 0, region, 5000, NULL, 0, &rk, true, 3, &ctx), 0);
	mock_cq_push(p.cb, p.cb->last_rma.context, FI_RMA | FI_WRITE, 0, 0);
	assert_int_equal(tp->poll(p.c, ev, 4), 0);
	mock_cq_push_err(p.cb, p.cb->prev_context, FI_RMA | FI_WRITE, FI_ECONNRESET);
	ev[0] = poll_one(p.c, MK_EV_WRITE_DONE);
	assert_ptr_equal(ev[0].ctx, &ctx);
	assert_int_equal(ev[0].status, -ECONNRESET);
	close_pair(&p);
}

/* A split write needs two op slots: with one left it is -EAGAIN and takes none. */
static void test_shm_split_write_needs_two_slots(void **state)
{
	struct mk_rkey rk = { .base = 0, .key = 1 };
	struct pair p;
	int n = 0;

	set_env("MKERNEL_OFI_PROVIDER", "shm");
	set_env("MKERNEL_OFI_TX_DEPTH", "8");
	open_pair_inject(&p, "shm", FI_MR_VIRT_ADDR, 8, 4096);
	for (int i = 0; i < 7; i++)
		assert_int_equal(tp->write(p.c, 0, region, 64, NULL, 0, &rk, true, 1, NULL), 0);
	assert_int_equal(tp->write(p.c, 0, region, 4128, NULL, 0, &rk, true, 1, NULL), -EAGAIN);
	while (tp->write(p.c, 0, region, 64, NULL, 0, &rk, true, 1, NULL) == 0)
		n++;
	assert_int_equal(n, 1);
	close_pair(&p);
}

/* Sources of the large writes below (never read: the fake provider records the posts). */
static uint8_t big[4u << 20] __attribute__((aligned(4096)));

/*
 * tcp;ofi_rxm, which keeps writes in order: a write with an immediate from 1 MiB goes as a plain
 * write of all but its last 64 bytes, then those with the immediate and the whole length; the
 * caller sees one completion, the target one immediate. Below 1 MiB, and without the order or
 * with MKERNEL_OFI_SPLIT_WRITES=0, one write.
 */
static void test_large_writes_split(void **state)
{
	struct mk_rkey rk = { .base = 0, .key = 1 };
	const size_t mib = 1u << 20;
	struct mk_event ev[4];
	struct pair p;
	int ctx, n;

	mock_info_add("tcp;ofi_rxm", "eth0", 0, 8)->tx_attr->msg_order = FI_ORDER_WAW;
	init_ok(1);
	open_pair_again(&p);
	n = p.cb->nwrites;
	assert_int_equal(tp->write(p.c, 0, big, mib, NULL, 0x100000, &rk, true, 7, &ctx), 0);
	assert_int_equal(p.cb->nwrites, n + 2);
	assert_ptr_equal(p.cb->prev_iov.iov_base, big);
	assert_int_equal(p.cb->prev_iov.iov_len, mib - MK_OFI_SPLIT_TAIL);
	assert_int_equal(p.cb->prev_rma_iov.addr, 0x100000);
	assert_false(p.cb->prev_flags & FI_REMOTE_CQ_DATA);
	assert_ptr_equal(p.cb->last_iov.iov_base, big + mib - MK_OFI_SPLIT_TAIL);
	assert_int_equal(p.cb->last_iov.iov_len, MK_OFI_SPLIT_TAIL);
	assert_int_equal(p.cb->last_rma_iov.addr, 0x100000 + mib - MK_OFI_SPLIT_TAIL);
	assert_true(p.cb->last_flags & FI_REMOTE_CQ_DATA);
	assert_int_equal(p.cb->last_rma.data, ((uint64_t)mib << 32) | 7);
	mock_cq_push(p.cb, p.cb->prev_context, FI_RMA | FI_WRITE, 0, 0);
	assert_int_equal(tp->poll(p.c, ev, 4), 0);
	mock_cq_push(p.cb, p.cb->last_rma.context, FI_RMA | FI_WRITE, 0, 0);
	write_done(p.c, &ctx, mib, 0);
	/* the target: the plain part makes no entry; the immediate has the whole length */
	mock_cq_push(p.la, NULL, FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA, MK_OFI_SPLIT_TAIL,
		     ((uint64_t)mib << 32) | 7);
	ev[0] = poll_one(p.a, MK_EV_IMM);
	assert_int_equal(ev[0].imm, 7);
	assert_int_equal(ev[0].len, mib);
	/* one byte less, or no immediate: one write */
	n = p.cb->nwrites;
	assert_int_equal(tp->write(p.c, 0, big, mib - 1, NULL, 0, &rk, true, 1, NULL), 0);
	assert_int_equal(tp->write(p.c, 0, big, mib, NULL, 0, &rk, false, 0, NULL), 0);
	assert_int_equal(p.cb->nwrites, n + 2);
	assert_int_equal(p.cb->last_iov.iov_len, mib);
	close_pair(&p);
}

/* No split where the provider does not promise write-after-write order, or when switched off. */
static void test_large_writes_split_needs_order(void **state)
{
	struct mk_rkey rk = { .base = 0, .key = 1 };
	struct pair p;
	int n;

	open_pair_inject(&p, "tcp;ofi_rxm", 0, 8, 64);
	n = p.cb->nwrites;
	assert_int_equal(tp->write(p.c, 0, big, 1u << 20, NULL, 0, &rk, true, 1, NULL), 0);
	assert_int_equal(p.cb->nwrites, n + 1);
	close_pair(&p);
	tp->fini();
	mock_reset();
	set_env("MKERNEL_OFI_SPLIT_WRITES", "0");
	mock_info_add("tcp;ofi_rxm", "eth0", 0, 8)->tx_attr->msg_order = FI_ORDER_WAW;
	init_ok(1);
	open_pair_again(&p);
	n = p.cb->nwrites;
	assert_int_equal(tp->write(p.c, 0, big, 4u << 20, NULL, 0, &rk, true, 1, NULL), 0);
	assert_int_equal(p.cb->nwrites, n + 1);
	close_pair(&p);
}

/* Not on the other providers: there an immediate-less write is no system call more. */
static void test_tcp_writes_never_quiet(void **state)
{
	struct mk_rkey rk = { .base = 0, .key = 1 };
	struct mk_event ev[4];
	struct pair p;
	int n;

	open_pair_inject(&p, "tcp;ofi_rxm", 0, 8, 4096);
	assert_int_equal(tp->write(p.c, 0, region, 64, NULL, 0, &rk, false, 0, NULL), 0);
	assert_false(p.cb->last_flags & FI_REMOTE_CQ_DATA);
	assert_int_equal(tp->write(p.c, 0, region, 0, NULL, 0, &rk, false, 0, NULL), 0);
	assert_false(p.cb->last_flags & FI_REMOTE_CQ_DATA);
	/* nor split: a write with an immediate past the inject size is one write */
	n = p.cb->nwrites;
	assert_int_equal(tp->write(p.c, 0, region, 4128, NULL, 0, &rk, true, 2, NULL), 0);
	assert_int_equal(p.cb->nwrites, n + 1);
	assert_int_equal(p.cb->last_iov.iov_len, 4128);
	assert_int_equal(p.cb->last_rma.data, (4128ull << 32) | 2);
	/* and the marker is then just an immediate like any other */
	mock_cq_push(p.la, NULL, FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA, 0, MK_OFI_QUIET_DATA);
	ev[0] = poll_one(p.a, MK_EV_IMM);
	assert_int_equal(ev[0].imm, UINT32_MAX);
	close_pair(&p);
}

/* Finalise the backend and start it again on a fresh mock, for a test that opens several pairs. */
static void backend_restart(void)
{
	tp->fini();
	assert_int_equal(mock.ep_live, 0);
	assert_int_equal(mock.mr_live, 0);
	mock_reset();
	mk_ofi_lib_override(&mock_lib);
}

/* Injects made by one write of len from registered host memory on a fresh pair. */
static int injects_of_one_write(const char *prov, uint64_t mr_mode, size_t inject, size_t len)
{
	struct mk_rkey rk = { .base = 0, .key = 1 };
	struct mk_rkey own;
	struct mk_bmr *mr;
	struct pair p;
	int n;

	open_pair_inject(&p, prov, mr_mode, 8, inject);
	assert_int_equal(tp->reg_mr(0, region, 4096, NULL, &mr, &own), 0);
	assert_int_equal(tp->write(p.c, 0, region, len, mr, 0, &rk, true, 1, NULL), 0);
	n = p.cb->ninjects;
	assert_int_equal(tp->dereg_mr(0, mr), 0);
	close_pair(&p);
	backend_restart();
	return n;
}

/*
 * A write from registered host memory up to the inject size goes as fi_inject_write[data]
 * (MKERNEL_OFI_INJECT; shm by default, every provider with 2): nothing comes back from the
 * provider, and its completion is ready at the next poll with the caller's ctx. GPU memory, larger
 * writes, writes without a registration, and writes past the stash's room go through the CQ as
 * before; MKERNEL_OFI_INJECT=0 turns it off.
 */
static void test_inject_small_host_writes(void **state)
{
	struct mk_rkey rk = { .base = 0x10000, .key = 42 };
	struct mk_rkey own;
	struct mk_event ev[4];
	struct mk_bmr *mr;
	struct pair p;
	int ctx, n, w, got;

	/* tcp;ofi_rxm only when asked for every provider (2): not by default */
	assert_int_equal(injects_of_one_write("tcp;ofi_rxm", 0, 64, 8), 0);
	set_env("MKERNEL_OFI_INJECT", "2");
	open_pair_inject(&p, "tcp;ofi_rxm", 0, 8, 64);
	assert_int_equal(tp->reg_mr(0, region, 4096, NULL, &mr, &own), 0);
	n = p.cb->nwrites;
	assert_int_equal(tp->write(p.c, 0, region, 64, mr, 0x10040, &rk, true, 7, &ctx), 0);
	assert_int_equal(p.cb->ninjects, 1);
	assert_int_equal(p.cb->nwrites, n);
	assert_int_equal(p.cb->inject_len, 64);
	assert_true(p.cb->inject_has_data);
	assert_int_equal(p.cb->inject_data, (64ull << 32) | 7);
	assert_int_equal(p.cb->inject_raddr, 0x40);
	write_done(p.c, &ctx, 64, 0);
	assert_int_equal(tp->poll(p.c, ev, 4), 0); /* one event, not two */
	/* without an immediate: fi_inject_write */
	assert_int_equal(tp->write(p.c, 0, region, 8, mr, 0x10000, &rk, false, 0, &ctx), 0);
	assert_int_equal(p.cb->ninjects, 2);
	assert_false(p.cb->inject_has_data);
	poll_one(p.c, MK_EV_WRITE_DONE);
	/* past the inject size: through the CQ */
	assert_int_equal(tp->write(p.c, 0, region, 65, mr, 0x10000, &rk, true, 1, &ctx), 0);
	assert_int_equal(p.cb->nwrites, n + 1);
	assert_int_equal(tp->poll(p.c, ev, 4), 0);
	mock_cq_push(p.cb, p.cb->last_rma.context, FI_RMA | FI_WRITE, 0, 0);
	poll_one(p.c, MK_EV_WRITE_DONE);
	/* GPU memory never: the provider would copy from a device pointer at the post */
	mr->host = false;
	assert_int_equal(tp->write(p.c, 0, region, 8, mr, 0x10000, &rk, true, 1, &ctx), 0);
	assert_int_equal(p.cb->nwrites, n + 2);
	mr->host = true;
	/* nor without a registration */
	assert_int_equal(tp->write(p.c, 0, region, 8, NULL, 0x10000, &rk, true, 1, &ctx), 0);
	assert_int_equal(p.cb->nwrites, n + 3);
	mock_cq_push(p.cb, p.cb->prev_context, FI_RMA | FI_WRITE, 0, 0);
	mock_cq_push(p.cb, p.cb->last_rma.context, FI_RMA | FI_WRITE, 0, 0);
	assert_int_equal(tp->poll(p.c, ev, 4), 2);
	/* the stash holds MK_OFI_STASH completions; the next write waits for the CQ */
	w = p.cb->ninjects;
	for (int i = 0; i < MK_OFI_STASH; i++)
		assert_int_equal(tp->write(p.c, 0, region, 8, mr, 0x10000, &rk, true, 1, &ctx), 0);
	assert_int_equal(p.cb->ninjects, w + MK_OFI_STASH);
	assert_int_equal(tp->write(p.c, 0, region, 8, mr, 0x10000, &rk, true, 1, &ctx), 0);
	assert_int_equal(p.cb->ninjects, w + MK_OFI_STASH);
	assert_int_equal(p.cb->nwrites, n + 4);
	got = 0;
	for (int k; (k = tp->poll(p.c, ev, 4)) > 0;)
		got += k;
	assert_int_equal(got, MK_OFI_STASH);
	mock_cq_push(p.cb, p.cb->last_rma.context, FI_RMA | FI_WRITE, 0, 0);
	poll_one(p.c, MK_EV_WRITE_DONE);
	/* a refused inject is -EAGAIN and leaves no event */
	mock.write_rc = -FI_EAGAIN;
	assert_int_equal(tp->write(p.c, 0, region, 8, mr, 0x10000, &rk, true, 1, &ctx), -EAGAIN);
	mock.write_rc = 0;
	assert_int_equal(tp->poll(p.c, ev, 4), 0);
	assert_int_equal(tp->dereg_mr(0, mr), 0);
	close_pair(&p);
	backend_restart();

	/* shm by default; 0 turns it off there too */
	unsetenv("MKERNEL_OFI_INJECT");
	set_env("MKERNEL_OFI_PROVIDER", "shm");
	assert_int_equal(injects_of_one_write("shm", FI_MR_VIRT_ADDR, 4096, 4096), 1);
	set_env("MKERNEL_OFI_INJECT", "0");
	assert_int_equal(injects_of_one_write("shm", FI_MR_VIRT_ADDR, 4096, 8), 0);
	unsetenv("MKERNEL_OFI_INJECT");
	unsetenv("MKERNEL_OFI_PROVIDER");
	mk_param_reset_all();
}

static void test_write_virt_addr_and_4_byte_cq_data(void **state)
{
	struct mk_rkey rk = { .base = 0x10000, .key = 42 };
	struct mk_event ev[4];
	struct pair p;

	open_pair(&p, "efa", FI_MR_LOCAL | FI_MR_PROV_KEY | FI_MR_VIRT_ADDR, 4);
	assert_int_equal(tp->write(p.c, 0, region, 100, NULL, 0x10040, &rk, true, 7, NULL), 0);
	assert_int_equal(p.cb->last_rma_iov.addr, 0x10040); /* a VA */
	assert_int_equal(p.cb->last_rma.data, 7);	    /* no room for the length */
	/* the target's length then comes from the CQ entry */
	mock_cq_push(p.la, NULL, FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA, 100, 7);
	ev[0] = poll_one(p.a, MK_EV_IMM);
	assert_int_equal(ev[0].len, 100);
	close_pair(&p);
}

static void test_poll_imm_and_local_completion(void **state)
{
	struct mk_rkey rk = { .base = 0, .key = 1 };
	struct mk_event ev[4];
	int ctx;
	struct pair p;

	open_pair(&p, "tcp;ofi_rxm", 0, 8);
	assert_int_equal(tp->poll(p.a, ev, 4), 0);
	/* tcp;ofi_rxm reports len 0 at the target: the length rides in the data */
	mock_cq_push(p.la, NULL, FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA, 0, (4096ull << 32) | 9);
	ev[0] = poll_one(p.a, MK_EV_IMM);
	assert_int_equal(ev[0].imm, 9);
	assert_int_equal(ev[0].len, 4096);
	assert_int_equal(ev[0].status, 0);
	assert_int_equal(tp->write(p.c, 0, region, 64, NULL, 0, &rk, false, 0, &ctx), 0);
	/* sockets flags the initiator's completion with FI_REMOTE_CQ_DATA: still a WRITE_DONE */
	mock_cq_push(p.cb, p.cb->last_rma.context, FI_RMA | FI_WRITE | FI_REMOTE_CQ_DATA, 0, 0);
	ev[0] = poll_one(p.c, MK_EV_WRITE_DONE);
	assert_ptr_equal(ev[0].ctx, &ctx);
	assert_int_equal(ev[0].len, 64);
	assert_int_equal(tp->read(p.c, 0, region, 32, NULL, 0, &rk, &ctx), 0);
	mock_cq_push(p.cb, p.cb->last_rma.context, FI_RMA | FI_READ, 32, 0);
	ev[0] = poll_one(p.c, MK_EV_READ_DONE);
	close_pair(&p);
}

static void test_poll_error_entry_is_error_event(void **state)
{
	struct mk_rkey rk = { .base = 0, .key = 1 };
	struct mk_event ev[4];
	int ctx;
	struct pair p;

	open_pair(&p, "tcp;ofi_rxm", 0, 8);
	assert_int_equal(tp->write(p.c, 0, region, 64, NULL, 0, &rk, true, 1, &ctx), 0);
	mock_cq_push_err(p.cb, p.cb->last_rma.context, FI_RMA | FI_WRITE, FI_ECONNRESET);
	ev[0] = poll_one(p.c, MK_EV_WRITE_DONE);
	assert_int_equal(ev[0].status, -ECONNRESET);
	assert_ptr_equal(ev[0].ctx, &ctx);
	/*
	 * A target-side error has no op of ours (a stranger's write with a guessed key fails
	 * here too): it is logged and dropped, the connection goes on.
	 */
	mock_cq_push_err(p.la, NULL, FI_REMOTE_WRITE, FI_EIO);
	assert_int_equal(tp->poll(p.a, ev, 4), 0);
	assert_int_equal(tp->write(p.a, 0, region, 64, NULL, 0, &rk, true, 1, &ctx), 0);
	close_pair(&p);
}

/* Waits (up to 5 s) until someone other than this thread has read every entry of ep's CQ. */
static void wait_cq_taken(struct mock_ep *ep)
{
	uint64_t t0 = mk_now_ns();

	while (mock_cq_pending(ep) > 0) {
		assert_true(mk_now_ns() - t0 < 5000000000ull);
		sched_yield();
	}
}

/* The one event of c, polled for up to 5 s: another thread's read reaches poll() a bit later. */
static struct mk_event poll_until(struct mk_conn *c, enum mk_event_type type)
{
	uint64_t t0 = mk_now_ns();
	struct mk_event ev[4];
	int n;

	while ((n = tp->poll(c, ev, 4)) == 0) {
		assert_true(mk_now_ns() - t0 < 5000000000ull);
		sched_yield();
	}
	assert_int_equal(n, 1);
	assert_int_equal(ev[0].type, type);
	return ev[0];
}

/*
 * MKERNEL_OFI_PROGRESS_THREAD on endpoints of the connection's own: the lane's thread reads the
 * CQ, errors included, and poll() hands out what it read from the lane's ring. The CQs are
 * empty before anyone polls, so a thread that only progressed (completions left for poll())
 * fails this.
 */
static void test_progress_thread_reads_completions_for_poll(void **state)
{
	struct mk_rkey rk = { .base = 0, .key = 1 };
	struct mk_event ev;
	int ctx;
	struct pair p;

	set_env("MKERNEL_OFI_PROGRESS_THREAD", "1");
	open_pair(&p, "tcp;ofi_rxm", 0, 8);
	assert_true(mk_ofi_conn_of(p.c)->lanes[0].progress_on);
	assert_non_null(mk_ofi_conn_of(p.c)->lanes[0].ring);
	assert_non_null(mk_ofi_conn_of(p.a)->lanes[0].ring);
	assert_int_equal(tp->write(p.c, 0, region, 64, NULL, 0, &rk, true, 5, &ctx), 0);
	mock_cq_push(p.cb, p.cb->last_rma.context, FI_RMA | FI_WRITE, 0, 0);
	mock_cq_push(p.la, NULL, FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA, 0, (64ull << 32) | 5);
	wait_cq_taken(p.cb);
	wait_cq_taken(p.la);
	ev = poll_until(p.c, MK_EV_WRITE_DONE);
	assert_ptr_equal(ev.ctx, &ctx);
	assert_int_equal(ev.status, 0);
	ev = poll_until(p.a, MK_EV_IMM);
	assert_int_equal(ev.imm, 5);
	assert_int_equal(ev.len, 64);
	assert_int_equal(tp->write(p.c, 0, region, 64, NULL, 0, &rk, true, 6, &ctx), 0);
	mock_cq_push_err(p.cb, p.cb->last_rma.context, FI_RMA | FI_WRITE, FI_ECONNRESET);
	wait_cq_taken(p.cb);
	ev = poll_until(p.c, MK_EV_WRITE_DONE);
	assert_ptr_equal(ev.ctx, &ctx);
	assert_int_equal(ev.status, -ECONNRESET);
	close_pair(&p);
}

static void test_write_eagain_returns_slot(void **state)
{
	struct mk_rkey rk = { .base = 0, .key = 1 };
	struct pair p;
	int n = 0;

	set_env("MKERNEL_OFI_TX_DEPTH", "8");
	open_pair(&p, "tcp;ofi_rxm", 0, 8);
	mock.write_rc = -FI_EAGAIN;
	for (int i = 0; i < 20; i++)
		assert_int_equal(tp->write(p.c, 0, region, 8, NULL, 0, &rk, true, 1, NULL),
				 -EAGAIN);
	mock.write_rc = -FI_EINVAL;
	assert_int_equal(tp->write(p.c, 0, region, 8, NULL, 0, &rk, true, 1, NULL), -EINVAL);
	mock.write_rc = 0;
	while (tp->write(p.c, 0, region, 8, NULL, 0, &rk, true, 1, NULL) == 0)
		n++;
	assert_int_equal(n, 8); /* no slot leaked by the refused posts */
	close_pair(&p);
}

static void test_pool_exhaustion_then_recovery(void **state)
{
	struct mk_rkey rk = { .base = 0, .key = 1 };
	struct mk_event ev[16];
	void *ctxs[8];
	struct pair p;

	set_env("MKERNEL_OFI_TX_DEPTH", "8");
	open_pair(&p, "tcp;ofi_rxm", 0, 8);
	for (int i = 0; i < 8; i++) {
		assert_int_equal(tp->write(p.c, 0, region, 8, NULL, 0, &rk, true, 1, NULL), 0);
		ctxs[i] = p.cb->last_rma.context;
	}
	assert_int_equal(tp->write(p.c, 0, region, 8, NULL, 0, &rk, true, 1, NULL), -EAGAIN);
	mock_cq_push(p.cb, ctxs[3], FI_RMA | FI_WRITE, 0, 0);
	assert_int_equal(tp->poll(p.c, ev, 16), 1);
	assert_int_equal(tp->write(p.c, 0, region, 8, NULL, 0, &rk, true, 1, NULL), 0);
	assert_int_equal(p.cb->last_rma.context, ctxs[3]); /* the freed slot, reused */
	close_pair(&p);
}

static void test_stalled_writes_time_out(void **state)
{
	struct mk_rkey rk = { .base = 0, .key = 1 };
	struct mk_event ev[16];
	int ctx;
	struct pair p;

	set_env("MKERNEL_TIMEOUT", "20");
	open_pair(&p, "tcp;ofi_rxm", 0, 8);
	assert_int_equal(tp->write(p.c, 0, region, 8, NULL, 0, &rk, true, 1, &ctx), 0);
	assert_int_equal(tp->write(p.c, 0, region, 8, NULL, 0, &rk, true, 1, &ctx), 0);
	assert_int_equal(tp->poll(p.c, ev, 16), 0); /* the stall starts here */
	usleep(30 * 1000);
	assert_int_equal(tp->poll(p.c, ev, 16), 2);
	assert_int_equal(ev[0].status, -ETIMEDOUT);
	assert_ptr_equal(ev[1].ctx, &ctx);
	assert_int_equal(tp->poll(p.c, ev, 16), -ETIMEDOUT);
	assert_int_equal(tp->write(p.c, 0, region, 8, NULL, 0, &rk, true, 1, &ctx), -ETIMEDOUT);
	close_pair(&p);
}

static void test_refused_posts_time_out(void **state)
{
	struct mk_rkey rk = { .base = 0, .key = 1 };
	struct mk_event ev[4];
	struct pair p;

	set_env("MKERNEL_TIMEOUT", "20");
	open_pair(&p, "tcp;ofi_rxm", 0, 8);
	mock.write_rc = -FI_EAGAIN; /* a queue that never drains */
	assert_int_equal(tp->write(p.c, 0, region, 8, NULL, 0, &rk, true, 1, NULL), -EAGAIN);
	assert_int_equal(tp->poll(p.c, ev, 4), 0);
	usleep(30 * 1000);
	assert_int_equal(tp->write(p.c, 0, region, 8, NULL, 0, &rk, true, 1, NULL), -ETIMEDOUT);
	assert_int_equal(tp->poll(p.c, ev, 4), -ETIMEDOUT);
	close_pair(&p);
}

/*
 * A provider that refuses posts while nothing of ours is in flight cannot reach the peer (tcp and
 * net after the peer died): broken after MKERNEL_KEEPALIVE, well before MKERNEL_TIMEOUT. With a
 * write in flight the same refusals are back-pressure and only the timeout applies.
 */
static void test_refused_with_ops_in_flight_is_backpressure(void **state)
{
	struct mk_rkey rk = { .base = 0, .key = 1 };
	struct pair p;
	int ctx;

	set_env("MKERNEL_TIMEOUT", "10000");
	set_env("MKERNEL_KEEPALIVE", "20");
	open_pair(&p, "tcp;ofi_rxm", 0, 8);
	assert_int_equal(tp->write(p.c, 0, region, 8, NULL, 0, &rk, true, 1, &ctx), 0);
	mock.write_rc = -FI_EAGAIN;
	assert_int_equal(tp->write(p.c, 0, region, 8, NULL, 0, &rk, true, 1, NULL), -EAGAIN);
	usleep(30 * 1000);
	assert_int_equal(tp->write(p.c, 0, region, 8, NULL, 0, &rk, true, 1, NULL), -EAGAIN);
	close_pair(&p);
}

static void test_refused_with_nothing_in_flight_breaks(void **state)
{
	struct mk_rkey rk = { .base = 0, .key = 1 };
	struct pair p;

	set_env("MKERNEL_TIMEOUT", "10000");
	set_env("MKERNEL_KEEPALIVE", "20");
	open_pair(&p, "tcp;ofi_rxm", 0, 8);
	mock.write_rc = -FI_EAGAIN; /* nothing in flight */
	assert_int_equal(tp->write(p.c, 0, region, 8, NULL, 0, &rk, true, 1, NULL), -EAGAIN);
	usleep(30 * 1000);
	assert_int_equal(tp->write(p.c, 0, region, 8, NULL, 0, &rk, true, 1, NULL), -ECONNRESET);
	close_pair(&p);
}

static void test_refusal_cleared_by_progress(void **state)
{
	struct mk_rkey rk = { .base = 0, .key = 1 };
	struct mk_event ev[4];
	struct pair p;

	set_env("MKERNEL_TIMEOUT", "20");
	open_pair(&p, "tcp;ofi_rxm", 0, 8);
	mock.write_rc = -FI_EAGAIN;
	assert_int_equal(tp->write(p.c, 0, region, 8, NULL, 0, &rk, true, 1, NULL), -EAGAIN);
	mock.write_rc = 0;
	assert_int_equal(tp->write(p.c, 0, region, 8, NULL, 0, &rk, true, 1, NULL), 0);
	mock_cq_push(p.cb, p.cb->last_rma.context, FI_RMA | FI_WRITE, 0, 0);
	ev[0] = poll_one(p.c, MK_EV_WRITE_DONE);
	usleep(30 * 1000);
	assert_int_equal(tp->poll(p.c, ev, 4), 0); /* idle, not stalled */
	assert_int_equal(tp->write(p.c, 0, region, 8, NULL, 0, &rk, true, 1, NULL), 0);
	close_pair(&p);
}

/*
 * shm: a dead peer process may hold a lock we would spin on; posts and polls check (every
 * 100 us). The peer here is killed and left unreaped: a zombie must count as gone, through the
 * pidfd and through the /proc fallback for kernels without one. Killed inside the provider, it
 * leaves its region file and nothing more is read; closed cleanly (no file), what it sent
 * before it left is still delivered, and the error follows.
 */
static void shm_peer_killed(bool with_pidfd, bool region_left)
{
	char region_file[64];
	int n;
	struct mk_rkey rk = { .base = 0, .key = 1 };
	struct mk_event ev[2];
	char name[32];
	int gate[2];
	pid_t peer;
	struct pair p;

	assert_int_equal(pipe(gate), 0);
	peer = fork();
	if (peer == 0) {
		char c;

		close(gate[1]);
		(void)!read(gate[0], &c, 1); /* lives until killed */
		_exit(0);
	}
	close(gate[0]);
	snprintf(name, sizeof(name), "fi_shm://%d:0:0", (int)peer);
	snprintf(region_file, sizeof(region_file), "/dev/shm/%d:0:0", (int)peer);
	{
		/* the peer's region exists while it listens: connect refuses a vanished one */
		FILE *f = fopen(region_file, "w");

		assert_non_null(f);
		fclose(f);
	}
	mock.next_addr = name; /* the listener's address names the peer process */
	set_env("MKERNEL_OFI_PROVIDER", "shm");
	open_pair(&p, "shm", FI_MR_VIRT_ADDR, 8);
	if (!region_left)
		unlink(region_file); /* it closed its endpoint before it died */
	assert_int_equal(mk_ofi_conn_of(p.c)->peer_pid, peer); /* parsed from the name */
	if (!with_pidfd)
		mk_ofi_peer_unwatch(mk_ofi_conn_of(p.c));
	usleep(200);
	assert_int_equal(tp->write(p.c, 0, region, 8, NULL, 0, &rk, true, 1, NULL), 0);
	kill(peer, SIGKILL);
	for (int i = 0; i < 1000; i++) { /* until the kernel has marked it exited */
		siginfo_t si = { 0 };

		if (waitid(P_PID, (id_t)peer, &si, WEXITED | WNOHANG | WNOWAIT) == 0 &&
		    si.si_pid == peer)
			break;
		usleep(1000);
	}
	usleep(200); /* liveness is looked at every 100 us */
	mock_cq_push(p.cb, NULL, FI_RMA | FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA, 100, 7);
	n = tp->poll(p.c, ev, 2);
	if (region_left) {
		assert_int_equal(n, -ECONNRESET);
	} else {
		assert_int_equal(n, 1);
		assert_int_equal(ev[0].type, MK_EV_IMM);
		assert_int_equal(ev[0].imm, 7);
		assert_int_equal(tp->poll(p.c, ev, 2), -ECONNRESET);
	}
	assert_int_equal(tp->write(p.c, 0, region, 8, NULL, 0, &rk, true, 1, NULL), -ECONNRESET);
	close_pair(&p);
	close(gate[1]);
	assert_int_equal(waitpid(peer, NULL, 0), peer);
	unlink(region_file);
}

static void test_shm_killed_peer_detected_by_pidfd(void **state)
{
	shm_peer_killed(true, true);
}

static void test_shm_killed_peer_detected_without_pidfd(void **state)
{
	shm_peer_killed(false, true);
}

static void test_shm_peer_that_closed_still_delivers(void **state)
{
	shm_peer_killed(true, false);
}

static void test_write_before_connected_is_enotconn(void **state)
{
	struct mk_rkey rk = { .base = 0, .key = 1 };
	uint8_t handle[MK_TP_HANDLE_MAX];
	struct mk_event ev[2];
	struct mk_listener *l;
	struct mk_conn *c;

	mock_info_add("tcp;ofi_rxm", "eth0", 0, 8);
	init_ok(1);
	assert_int_equal(tp->listen(0, handle, &l), 0);
	assert_int_equal(tp->connect(0, handle, NULL, 0, &c), 0);
	assert_int_equal(tp->write(c, 0, region, 8, NULL, 0, &rk, false, 0, NULL), -ENOTCONN);
	assert_int_equal(tp->poll(c, ev, 2), -ENOTCONN);
	assert_int_equal(tp->close_listen(l), 0);
	assert_int_equal(tp->close(c), 0);
}

/* An immediate that lands while connected() is still waiting for the reply is kept for poll. */
static void test_event_during_setup_is_kept(void **state)
{
	uint8_t handle[MK_TP_HANDLE_MAX];
	struct mk_listener *l;
	struct mk_conn *c, *a = NULL;
	struct mk_event ev[2];

	mock_info_add("tcp;ofi_rxm", "eth0", 0, 8);
	init_ok(1);
	assert_int_equal(tp->listen(0, handle, &l), 0);
	assert_int_equal(tp->connect(0, handle, NULL, 0, &c), 0);
	mock_deliver(mock.eps[1], mock.eps[0]);
	assert_int_equal(tp->accept(l, NULL, 0, &a), 0);
	mock_cq_push(mock.eps[1], NULL, FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA, 0, 5);
	assert_int_equal(tp->connected(c), 0); /* reads the immediate, keeps it */
	mock_deliver(mock.eps[0], mock.eps[1]);
	assert_int_equal(tp->connected(c), 1);
	assert_int_equal(tp->poll(c, ev, 2), 1);
	assert_int_equal(ev[0].imm, 5);
	assert_int_equal(tp->accept(l, NULL, 0, &a), 0);
	assert_non_null(a);
	assert_int_equal(tp->close_listen(l), 0);
	assert_int_equal(tp->close(a), 0);
	assert_int_equal(tp->close(c), 0);
}

/* ---- shared endpoints (MKERNEL_OFI_SHARED_EP=1) ---- */

static unsigned conn_num(struct mk_conn *c)
{
	return mk_ofi_conn_of(c)->num;
}

/*
 * Two connected pairs in one process with sharing on: four connections (two accepted, two
 * connecting) on the device's one endpoint, which is mock.eps[0].
 */
static void open_two_shared(struct pair *p, struct pair *q)
{
	int conns;

	set_env("MKERNEL_OFI_SHARED_EP", "1");
	open_pair(p, "tcp;ofi_rxm", 0, 8);
	open_pair_again(q);
	assert_int_equal(mock.ep_live, 1);
	assert_int_equal(mock.cq_live, 1);
	assert_int_equal(mock.av_live, 1);
	assert_int_equal(mk_ofi_sep_count(&conns), 1);
	assert_int_equal(conns, 4);
	/* each side learnt the other's number, and no two connections share one */
	assert_int_equal(mk_ofi_conn_of(p->a)->peer_num, conn_num(p->c));
	assert_int_equal(mk_ofi_conn_of(p->c)->peer_num, conn_num(p->a));
	assert_int_equal(mk_ofi_conn_of(q->a)->peer_num, conn_num(q->c));
	assert_int_not_equal(conn_num(p->a), conn_num(q->a));
	assert_int_not_equal(conn_num(p->c), conn_num(q->c));
}

/* Closes one pair of several: nothing else is checked. */
static void close_pair_only(struct pair *p)
{
	assert_int_equal(tp->close(p->a), 0);
	assert_int_equal(tp->close(p->c), 0);
}

static void close_two_shared(struct pair *p, struct pair *q)
{
	close_pair_only(p);
	assert_int_equal(mock.ep_live, 1); /* q still uses it */
	close_pair(q);
	assert_int_equal(mk_ofi_sep_count(NULL), 0);
}

static void test_shared_two_connections_one_endpoint(void **state)
{
	struct pair p, q;

	open_two_shared(&p, &q);
	/* one peer address inserted once, whatever the number of connections to it */
	assert_int_equal(
		((struct mock_av *)mk_ofi_conn_of(p.c)->lanes[0].av->fid.context)->inserted, 1);
	close_two_shared(&p, &q);
}

static void test_shared_off_one_endpoint_per_connection(void **state)
{
	struct pair p, q;

	open_pair(&p, "tcp;ofi_rxm", 0, 8);
	open_pair_again(&q);
	assert_int_equal(mock.ep_live, 4);
	assert_int_equal(mk_ofi_sep_count(NULL), 0);
	assert_int_equal(mk_ofi_conn_of(p.a)->peer_num, 0);
	assert_int_equal(mk_ofi_conn_of(p.c)->peer_num, 0);
	close_pair_only(&p);
	assert_int_equal(mock.ep_live, 2);
	close_pair(&q);
}

/*
 * A write carries the target's number in immediate bits 18..30; the target's poll routes by it
 * and hands the core the immediate without them, whichever connection's poll read it.
 */
static void test_shared_remote_write_routed_bits_cleared(void **state)
{
	struct mk_rkey rk = { .base = 0, .key = 1 };
	struct mk_event ev[4];
	struct pair p, q;
	uint64_t data;

	open_two_shared(&p, &q);
	assert_int_equal(tp->write(q.c, 0, region, 64, NULL, 0, &rk, true, 0x2abcd, NULL), 0);
	data = mock.eps[0]->last_rma.data;
	assert_int_equal(data >> 32, 64);
	assert_int_equal((data >> 18) & 0x1fff, conn_num(q.a));
	assert_int_equal(data & 0x3ffff, 0x2abcd);
	/* bits 18..30 of the caller's immediate are the backend's */
	assert_int_equal(tp->write(q.c, 0, region, 64, NULL, 0, &rk, true, 1u << 20, NULL),
			 -EINVAL);
	mock_cq_push(mock.eps[0], NULL, FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA, 0, data);
	assert_int_equal(tp->poll(p.a, ev, 4), 0); /* read by p.a's poll, q.a's event */
	ev[0] = poll_one(q.a, MK_EV_IMM);
	assert_int_equal(ev[0].imm, 0x2abcd);
	assert_int_equal(ev[0].len, 64);
	/* one for the poller itself comes out at once */
	mock_cq_push(mock.eps[0], NULL, FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA, 0,
		     (8ull << 32) | ((uint64_t)conn_num(p.a) << 18) | 3);
	ev[0] = poll_one(p.a, MK_EV_IMM);
	assert_int_equal(ev[0].imm, 3);
	/* a number nobody holds: dropped */
	mock_cq_push(mock.eps[0], NULL, FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA, 0,
		     (8ull << 32) | (4000ull << 18) | 3);
	for (int i = 0; i < 2; i++) {
		assert_int_equal(tp->poll(p.a, ev, 4), 0);
		assert_int_equal(tp->poll(q.a, ev, 4), 0);
	}
	close_two_shared(&p, &q);
}

/*
 * Local completions (and error completions) of connection B read by A's poll reach B, in order,
 * and none is lost when more arrive than A's poll could hand out.
 */
static void test_shared_event_for_b_read_by_a_reaches_b(void **state)
{
	struct mk_rkey rk = { .base = 0, .key = 1 };
	struct mk_event ev[4];
	void *ctxs[40];
	int u[40];
	struct pair p, q;

	open_two_shared(&p, &q);
	for (int i = 0; i < 40; i++) {
		assert_int_equal(tp->write(q.c, 0, region, 8, NULL, 0, &rk, true, 1, &u[i]), 0);
		ctxs[i] = mock.eps[0]->last_rma.context;
	}
	for (int i = 0; i < 39; i++)
		mock_cq_push(mock.eps[0], ctxs[i], FI_RMA | FI_WRITE, 0, 0);
	for (int i = 0; i < 8; i++)
		assert_int_equal(tp->poll(p.c, ev, 4), 0); /* all the other pair's: queued there */
	mock_cq_push_err(mock.eps[0], ctxs[39], FI_RMA | FI_WRITE, FI_EIO);
	assert_int_equal(tp->poll(p.c, ev, 4), 0);
	for (int i = 0; i < 40; i += 4) {
		int n = tp->poll(q.c, ev, 4);

		assert_int_equal(n, 4);
		for (int k = 0; k < 4; k++) {
			assert_int_equal(ev[k].type, MK_EV_WRITE_DONE);
			assert_ptr_equal(ev[k].ctx, &u[i + k]);
			assert_int_equal(ev[k].status, i + k == 39 ? -EIO : 0);
		}
	}
	assert_int_equal(tp->poll(q.c, ev, 4), 0);
	assert_int_equal(mk_ofi_conn_of(q.c)->posted, 0);
	close_two_shared(&p, &q);
}

/*
 * A connection closed while the provider holds one of its ops stays allocated (parked) until
 * that op's completion is read, by any poller; the late completion touches nothing freed (the
 * sanitize build checks) and its number is not handed out meanwhile.
 */
static void test_shared_close_with_op_in_flight_parks(void **state)
{
	struct mk_rkey rk = { .base = 0, .key = 1 };
	struct mk_event ev[4];
	struct mk_ofi_sep *sep;
	struct pair p, q, r;
	unsigned num;
	void *ctx;
	int conns;

	open_two_shared(&p, &q);
	sep = mk_ofi_conn_of(q.c)->sep;
	num = conn_num(q.c);
	assert_int_equal(tp->write(q.c, 0, region, 8, NULL, 0, &rk, true, 1, NULL), 0);
	ctx = mock.eps[0]->last_rma.context;
	assert_int_equal(tp->close(q.c), 0);
	assert_non_null(sep->conns[num]); /* parked, not freed */
	assert_true(sep->conns[num]->closed);
	assert_int_equal(mk_ofi_sep_count(&conns), 1);
	assert_int_equal(conns, 3);
	/* a write the peer still sends to it is dropped */
	mock_cq_push(mock.eps[0], NULL, FI_REMOTE_WRITE | FI_REMOTE_CQ_DATA, 0,
		     (8ull << 32) | ((uint64_t)num << 18) | 3);
	assert_int_equal(tp->poll(p.a, ev, 4), 0);
	/* a new connection does not get the parked one's number */
	open_pair_again(&r);
	assert_int_not_equal(conn_num(r.a), num);
	assert_int_not_equal(conn_num(r.c), num);
	mock_cq_push(mock.eps[0], ctx, FI_RMA | FI_WRITE, 0, 0);
	assert_int_equal(tp->poll(p.a, ev, 4), 0);
	assert_null(sep->conns[num]); /* its last op is back: freed */
	assert_int_equal(tp->close(q.a), 0);
	close_pair_only(&r);
	/* parked until the endpoint closes: freed with it (the sanitize build finds a leak) */
	assert_int_equal(tp->write(p.c, 0, region, 8, NULL, 0, &rk, true, 1, NULL), 0);
	assert_int_equal(tp->close(p.c), 0);
	assert_int_equal(mock.ep_live, 1);
	assert_int_equal(tp->close(p.a), 0);
	live_all_zero();
}

/*
 * Setup on the shared endpoint: a request for a nonce no listener here holds is dropped and
 * the endpoint receives again; the request for the right nonce then goes through. A process
 * connecting to its own listener (every pair above) sees both kinds on one endpoint.
 */
static void test_shared_setup_foreign_nonce_dropped(void **state)
{
	uint8_t handle[MK_TP_HANDLE_MAX];
	struct mk_listener *l;
	struct mk_conn *c, *a = NULL;
	struct mk_ofi_ctrl *m;

	set_env("MKERNEL_OFI_SHARED_EP", "1");
	mock_info_add("tcp;ofi_rxm", "eth0", 0, 8);
	init_ok(1);
	assert_int_equal(tp->listen(0, handle, &l), 0);
	assert_int_equal(tp->connect(0, handle, NULL, 0, &c), 0);
	assert_int_equal(mock.ep_live, 1);
	m = (struct mk_ofi_ctrl *)mock.eps[0]->tx_buf;
	assert_int_equal(m->num, conn_num(c));
	m->nonce ^= 1;
	mock_deliver(mock.eps[0], mock.eps[0]);
	mock.eps[0]->tx_len = 0;
	mock.eps[0]->rx_buf = NULL;
	assert_int_equal(tp->accept(l, NULL, 0, &a), 0);
	assert_null(a);
	assert_non_null(mock.eps[0]->rx_buf);	  /* received again */
	assert_int_equal(mock.eps[0]->tx_len, 0); /* no reply */
	m->nonce ^= 1;
	mock.eps[0]->tx_len = sizeof(*m);
	mock_deliver(mock.eps[0], mock.eps[0]);
	assert_int_equal(tp->accept(l, NULL, 0, &a), 0);
	assert_null(a);
	assert_int_not_equal(mock.eps[0]->tx_len, 0); /* the reply */
	mock_deliver(mock.eps[0], mock.eps[0]);
	assert_int_equal(tp->accept(l, NULL, 0, &a), 0);
	assert_non_null(a);
	assert_int_equal(tp->connected(c), 1);
	assert_int_equal(tp->close_listen(l), 0);
	assert_int_equal(tp->close(a), 0);
	assert_int_equal(tp->close(c), 0);
	live_all_zero();
}

static struct mk_ofi_sep *sep_of(struct mk_conn *c)
{
	return mk_ofi_conn_of(c)->sep;
}

/*
 * Pairs, the default (and what a value out of range takes): a set of shared endpoints holds one
 * accepting and one connecting connection, so each pair opened in turn gets a set of its own,
 * and a set freed by closing is not reused by a role it still holds.
 */
static void shared_pairs_check(void)
{
	struct pair p, q, r;
	int conns;

	open_pair(&p, "tcp;ofi_rxm", 0, 8);
	assert_int_equal(mock.ep_live, 1);
	assert_ptr_equal(sep_of(p.a), sep_of(p.c));
	open_pair_again(&q);
	assert_int_equal(mock.ep_live, 2);
	assert_int_equal(mk_ofi_sep_count(&conns), 2);
	assert_int_equal(conns, 4);
	assert_ptr_equal(sep_of(q.a), sep_of(q.c));
	assert_ptr_not_equal(sep_of(p.a), sep_of(q.a));
	assert_int_equal(mk_ofi_conn_of(q.a)->peer_num, conn_num(q.c));
	/* p's set keeps its connecting connection: r's accepting one fits there, not r's other */
	assert_int_equal(tp->close(p.a), 0);
	open_pair_again(&r);
	assert_ptr_equal(sep_of(r.a), sep_of(p.c));
	assert_ptr_not_equal(sep_of(r.c), sep_of(p.c));
	assert_ptr_not_equal(sep_of(r.c), sep_of(q.c));
	assert_int_equal(mock.ep_live, 3);
	assert_int_equal(tp->close(p.c), 0);
	close_pair_only(&r);
	close_pair(&q);
	assert_int_equal(mk_ofi_sep_count(NULL), 0);
}

/* Unset, sharing is the device's choice: pairs where no progress thread runs. */
static void test_shared_pairs_by_default(void **state)
{
	unsetenv("MKERNEL_OFI_SHARED_EP");
	mk_param_reset_all();
	assert_int_equal(mk_param_ofi_shared_ep(), -1);
	shared_pairs_check();
}

static void test_shared_out_of_range_takes_pairs(void **state)
{
	set_env("MKERNEL_OFI_SHARED_EP", "7");
	shared_pairs_check();
}

/* shm keeps one endpoint per connection with the knob on. */
static void test_shared_not_on_shm(void **state)
{
	struct pair p;

	set_env("MKERNEL_OFI_SHARED_EP", "1");
	set_env("MKERNEL_OFI_PROVIDER", "shm");
	open_pair(&p, "shm", FI_MR_VIRT_ADDR, 8);
	assert_int_equal(mock.ep_live, 2);
	assert_int_equal(mk_ofi_sep_count(NULL), 0);
	close_pair(&p);
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)

int main(void)
{
	const struct CMUnitTest tests[] = {
		T(test_init_missing_library_reports_no_device),
		T(test_init_library_without_symbols_reports_no_device),
		T(test_init_getinfo_error_reports_no_device),
		T(test_init_empty_list_reports_no_device),
		T(test_init_never_picks_shm_or_sockets_unasked),
		T(test_select_default_prefers_net_over_rxm),
		T(test_select_default_prefers_efa),
		T(test_select_env_tcp_takes_rxm_layering),
		T(test_select_env_exact_name_wins),
		T(test_select_env_net_finds_renamed_tcp),
		T(test_select_env_shm_when_named),
		T(test_select_env_unknown_gives_no_device),
		T(test_iface_default_drops_lo_and_docker),
		T(test_iface_lo_kept_when_alone),
		T(test_iface_env_list),
		T(test_props_filled),
		T(test_props_shm_keeps_the_core_eager_size),
		T(test_drop_domain_without_cq_data),
		T(test_mr_app_keys_unique_per_domain),
		T(test_mr_app_keys_random_where_wide),
		T(test_mr_prov_key_used_as_given),
		T(test_mr_key_exhaustion_unwinds),
		T(test_mr_reg_failure_unwinds),
		T(test_mr_gpu_memory_refused_without_hmem),
		T(test_handle_roundtrip),
		T(test_handle_any_corrupted_byte_rejected),
		T(test_handle_foreign_provider_rejected),
		T(test_connect_garbage_handle_is_einval),
		T(test_setup_exchanges_blobs),
		T(test_accept_exactly_one),
		T(test_accept_drops_foreign_nonce),
		T(test_connected_times_out_without_reply),
		T(test_connect_resends_after_send_error),
		T(test_listen_unwinds_every_failure),
		T(test_connect_unwinds_every_failure),
		T(test_init_allocation_failures_unwind),
		T(test_local_mr_setup_buffer_failure_unwinds),
		T(test_local_mr_setup_buffers_registered),
		T(test_lanes_pair_endpoint_by_endpoint),
		T(test_lanes_write_on_the_named_endpoint),
		T(test_lanes_poll_takes_turns),
		T(test_lanes_idle_ones_read_only_when_expected),
		T(test_lanes_default_per_provider),
		T(test_progress_default_per_provider_and_cores),
		T(test_lanes_reply_for_another_count_is_dropped),
		T(test_lanes_open_failure_unwinds),
		T(test_write_offsets_app_keys_len_in_data),
		T(test_write_virt_addr_and_4_byte_cq_data),
		T(test_shm_quiet_writes),
		T(test_shm_split_writes_injected),
		T(test_shm_split_writes),
		T(test_shm_split_write_lead_error),
		T(test_shm_split_write_needs_two_slots),
		T(test_tcp_writes_never_quiet),
		T(test_large_writes_split),
		T(test_large_writes_split_needs_order),
		T(test_inject_small_host_writes),
		T(test_poll_imm_and_local_completion),
		T(test_poll_error_entry_is_error_event),
		T(test_progress_thread_reads_completions_for_poll),
		T(test_write_eagain_returns_slot),
		T(test_pool_exhaustion_then_recovery),
		T(test_stalled_writes_time_out),
		T(test_refused_posts_time_out),
		T(test_refused_with_ops_in_flight_is_backpressure),
		T(test_refused_with_nothing_in_flight_breaks),
		T(test_refusal_cleared_by_progress),
		T(test_shm_killed_peer_detected_by_pidfd),
		T(test_shm_killed_peer_detected_without_pidfd),
		T(test_shm_peer_that_closed_still_delivers),
		T(test_write_before_connected_is_enotconn),
		T(test_event_during_setup_is_kept),
		T(test_shared_two_connections_one_endpoint),
		T(test_shared_off_one_endpoint_per_connection),
		T(test_shared_remote_write_routed_bits_cleared),
		T(test_shared_event_for_b_read_by_a_reaches_b),
		T(test_shared_close_with_op_in_flight_parks),
		T(test_shared_setup_foreign_nonce_dropped),
		T(test_shared_not_on_shm),
		T(test_shared_pairs_by_default),
		T(test_shared_out_of_range_takes_pairs),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
