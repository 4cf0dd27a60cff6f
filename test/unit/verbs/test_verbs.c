// SPDX-License-Identifier: Apache-2.0
/*
 * Unit tests of the verbs backend against the mocked verbs seam (mock_ibv.c): device discovery
 * and its failure paths, GID auto-pick from a fake sysfs tree, DMA-BUF and peer-memory probes,
 * registration, the handle codec, every unwind label of connection creation, the socket
 * handshake in one process, and the data path with scripted completions.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "mk/clock.h"
#include "mk/log.h"
#include "mk/param.h"
#include "mock_ibv.h"
#include "verbs.h"

static char sysfs[256];
static char last_warn[1024];
static int nwarn;

static void capture_log(int level, unsigned long flags, const char *file, int line, const char *fmt,
			...)
{
	va_list ap;

	if (level != MK_LOG_WARN)
		return;
	va_start(ap, fmt);
	vsnprintf(last_warn, sizeof(last_warn), fmt, ap);
	va_end(ap);
	nwarn++;
}

static void put_file(const char *rel, const char *text)
{
	char path[512], cmd[700];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", sysfs, rel);
	snprintf(cmd, sizeof(cmd), "mkdir -p \"$(dirname '%s')\"", path);
	assert_int_equal(system(cmd), 0);
	f = fopen(path, "w");
	assert_non_null(f);
	fputs(text, f);
	fclose(f);
}

static int group_setup(void **state)
{
	snprintf(sysfs, sizeof(sysfs), "/tmp/mk-verbs-sysfs-XXXXXX");
	if (mkdtemp(sysfs) == NULL)
		return -1;
	mk_log_set_sink(capture_log);
	return 0;
}

static int group_teardown(void **state)
{
	char cmd[300];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", sysfs);
	return system(cmd) == 0 ? 0 : -1;
}

static int setup(void **state)
{
	char cmd[700];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'/* && mkdir -p '%s'/class/infiniband", sysfs, sysfs);
	assert_int_equal(system(cmd), 0);
	mock_reset();
	setenv("MKERNEL_IB_SYSFS_ROOT", sysfs, 1);
	mk_param_reset_all();
	last_warn[0] = '\0';
	nwarn = 0;
	return 0;
}

static int teardown(void **state)
{
	static const char *const knobs[] = {
		"MKERNEL_IB_GID_INDEX", "MKERNEL_IB_QPS_PER_CONN", "MKERNEL_IB_SQ_DEPTH",
		"MKERNEL_IB_RQ_DEPTH",	"MKERNEL_IB_FORCE_FLUSH",  "MKERNEL_TIMEOUT",
		"MKERNEL_IBVERBS_LIB",	"MKERNEL_SOCKET_IFNAME",
	};

	mk_verbs_ops.fini();
	mk_verbs_lib_override(&mock.lib);
	for (size_t i = 0; i < sizeof(knobs) / sizeof(knobs[0]); i++)
		unsetenv(knobs[i]);
	mk_param_reset_all();
	/* nothing may outlive fini, whatever path the test took */
	assert_int_equal(mock.live_ctx, 0);
	assert_int_equal(mock.live_pd, 0);
	assert_int_equal(mock.live_cq, 0);
	assert_int_equal(mock.live_qp, 0);
	assert_int_equal(mock.live_mr, 0);
	assert_int_equal(mock.live_list, 0);
	return 0;
}

static void set_env(const char *name, const char *value)
{
	setenv(name, value, 1);
	mk_param_reset_all();
}

/* ---- library, discovery, properties ---- */

static void test_lib_absent_reports_no_devices(void **state)
{
	mk_verbs_lib_override(NULL);
	set_env("MKERNEL_IBVERBS_LIB", "/nonexistent/libibverbs-missing.so.1");
	assert_int_equal(mk_verbs_ops.init(), 0);
	assert_int_equal(mk_verbs_ops.ndevs(), 0);
	assert_null(mk_verbs_ibv);
	assert_int_equal(mock.n_open, 0);
}

static void test_lib_without_symbols_reports_no_devices(void **state)
{
	mk_verbs_lib_override(NULL);
	set_env("MKERNEL_IBVERBS_LIB", "libc.so.6"); /* loads, but has no ibv_* */
	assert_int_equal(mk_verbs_lib_load(), -ENOSYS);
	assert_null(mk_verbs_ibv);
	assert_int_equal(mk_verbs_ops.init(), 0);
	assert_int_equal(mk_verbs_ops.ndevs(), 0);
}

static void test_lib_real_resolves_every_symbol(void **state)
{
	mk_verbs_lib_override(NULL);
	if (mk_verbs_lib_load() == -ENOENT)
		return; /* no rdma-core on this host: covered by the absent-library test */
	assert_non_null(mk_verbs_ibv);
	assert_non_null(mk_verbs_ibv->get_device_list);
	assert_non_null(mk_verbs_ibv->query_port);
	assert_non_null(mk_verbs_ibv->wc_status_str);
	assert_non_null(mk_verbs_ibv->reg_mr_iova2); /* rdma-core >= 20 */
	assert_string_equal(mk_verbs_ibv->wc_status_str(IBV_WC_RETRY_EXC_ERR),
			    "transport retry counter exceeded");
	mk_verbs_lib_unload();
	assert_null(mk_verbs_ibv);
}

static void test_init_ib_port_reports_props(void **state)
{
	struct mk_dev_props p;

	assert_int_equal(mk_verbs_ops.init(), 0);
	assert_int_equal(mk_verbs_ops.ndevs(), 1);
	assert_int_equal(mk_verbs_ops.dev_props(0, &p), 0);
	assert_string_equal(p.name, "verbs:mlx5_0:1");
	assert_string_equal(p.provider, "mlx5");
	assert_string_equal(p.pci_path, "");
	assert_true(p.guid == 0x0123456789abcdefull);
	assert_int_equal(p.speed_mbps, 200000);
	assert_int_equal(p.port, 1);
	assert_int_equal(p.ptr_support, MK_PTR_HOST);
	assert_int_equal(p.max_lanes, MK_TP_MAX_LANES);
	assert_true(p.max_msg == 1u << 30);
	assert_int_equal(mk_verbs_dev_get(0)->gid_index, -1); /* LID routing */
	assert_int_equal(mk_verbs_ops.dev_props(1, &p), -EINVAL);
}

static void test_init_pci_path_from_sysfs(void **state)
{
	char target[512], link[512];
	struct mk_dev_props p;

	snprintf(target, sizeof(target), "%s/devices/pci0000:00/0000:00:03.0", sysfs);
	snprintf(link, sizeof(link), "%s/class/infiniband/mlx5_0", sysfs);
	{
		char cmd[2200];

		snprintf(cmd, sizeof(cmd), "mkdir -p '%s' '%s' && ln -s '%s' '%s/device'", target,
			 link, target, link);
		assert_int_equal(system(cmd), 0);
	}
	assert_int_equal(mk_verbs_ops.init(), 0);
	assert_int_equal(mk_verbs_ops.dev_props(0, &p), 0);
	assert_non_null(strstr(p.pci_path, "/devices/pci0000:00/0000:00:03.0"));
}

static void test_speed_table(void **state)
{
	assert_int_equal(mk_verbs_speed_mbps(1, 1), 2500);
	assert_int_equal(mk_verbs_speed_mbps(2, 32), 100000);
	assert_int_equal(mk_verbs_speed_mbps(2, 128), 400000);
	assert_int_equal(mk_verbs_speed_mbps(16, 64), 100000);
	assert_int_equal(mk_verbs_speed_mbps(8, 4), 120000);
}

static void test_init_port_down_is_skipped(void **state)
{
	mock.port_attr.state = IBV_PORT_DOWN;
	assert_int_equal(mk_verbs_ops.init(), 0);
	assert_int_equal(mk_verbs_ops.ndevs(), 0);
}

static void test_init_non_rc_device_is_skipped(void **state)
{
	mock.devices[0].transport_type = IBV_TRANSPORT_UNSPECIFIED; /* EFA-like */
	assert_int_equal(mk_verbs_ops.init(), 0);
	assert_int_equal(mk_verbs_ops.ndevs(), 0);
	assert_int_equal(mock.n_open, 0);
}

static void test_init_two_ports_two_devices(void **state)
{
	mock.dev_attr.phys_port_cnt = 2;
	assert_int_equal(mk_verbs_ops.init(), 0);
	assert_int_equal(mk_verbs_ops.ndevs(), 2);
	assert_int_equal(mk_verbs_dev_get(1)->port, 2);
	assert_string_equal(mk_verbs_dev_get(1)->props.name, "verbs:mlx5_0:2");
}

static void test_init_failures_unwind(void **state)
{
	/* 1: the scan's open, 2: the port's open, then query_port, then alloc_pd */
	for (int step = 0; step < 4; step++) {
		mock_reset();
		mock.fail_open = step == 0 ? 1 : step == 1 ? 2 : 0;
		mock.fail_query_port = step == 2;
		mock.fail_alloc_pd = step == 3;
		assert_int_equal(mk_verbs_ops.init(), 0);
		assert_int_equal(mk_verbs_ops.ndevs(), 0);
		assert_int_equal(mock.live_ctx, 0);
		assert_int_equal(mock.live_pd, 0);
		assert_int_equal(mock.live_list, 0);
		mk_verbs_ops.fini();
	}
}

/* ---- GID selection ---- */

static void roce_tree(void)
{
	put_file("class/infiniband/mlx5_0/ports/1/gids/0",
		 "fe80:0000:0000:0000:0200:00ff:fe00:0000\n");
	put_file("class/infiniband/mlx5_0/ports/1/gid_attrs/types/0", "IB/RoCE v1\n");
	put_file("class/infiniband/mlx5_0/ports/1/gids/1",
		 "0000:0000:0000:0000:0000:ffff:0a00:0001\n");
	put_file("class/infiniband/mlx5_0/ports/1/gid_attrs/types/1", "IB/RoCE v1\n");
	put_file("class/infiniband/mlx5_0/ports/1/gids/2",
		 "0000:0000:0000:0000:0000:ffff:0a00:0001\n");
	put_file("class/infiniband/mlx5_0/ports/1/gid_attrs/types/2", "RoCE v2\n");
	put_file("class/infiniband/mlx5_0/ports/1/gids/3",
		 "0000:0000:0000:0000:0000:0000:0000:0001\n");
	put_file("class/infiniband/mlx5_0/ports/1/gid_attrs/types/3", "RoCE v2\n");
	mock.port_attr.link_layer = IBV_LINK_LAYER_ETHERNET;
	for (int i = 0; i < 4; i++)
		mock.gids[i].raw[15] = (uint8_t)(0x10 + i);
}

static void test_gid_autopick_first_ipv4_roce_v2(void **state)
{
	roce_tree();
	assert_int_equal(mk_verbs_gid_autopick("mlx5_0", 1, 4), 2);
	assert_int_equal(mk_verbs_gid_autopick("mlx5_0", 1, 2), -ENOENT);
	assert_int_equal(mk_verbs_ops.init(), 0);
	assert_int_equal(mk_verbs_ops.ndevs(), 1);
	assert_int_equal(mk_verbs_dev_get(0)->gid_index, 2);
	assert_int_equal(mk_verbs_dev_get(0)->gid.raw[15], 0x12);
}

static void test_gid_index_knob_overrides_autopick(void **state)
{
	roce_tree();
	set_env("MKERNEL_IB_GID_INDEX", "3");
	assert_int_equal(mk_verbs_ops.init(), 0);
	assert_int_equal(mk_verbs_dev_get(0)->gid_index, 3);
	assert_int_equal(mk_verbs_dev_get(0)->gid.raw[15], 0x13);
}

static void test_gid_none_skips_roce_port(void **state)
{
	put_file("class/infiniband/mlx5_0/ports/1/gids/0",
		 "fe80:0000:0000:0000:0200:00ff:fe00:0000\n");
	put_file("class/infiniband/mlx5_0/ports/1/gid_attrs/types/0", "RoCE v2\n");
	put_file("class/infiniband/mlx5_0/ports/1/gids/1", "garbage\n");
	put_file("class/infiniband/mlx5_0/ports/1/gid_attrs/types/1", "RoCE v2\n");
	mock.port_attr.link_layer = IBV_LINK_LAYER_ETHERNET;
	assert_int_equal(mk_verbs_ops.init(), 0);
	assert_int_equal(mk_verbs_ops.ndevs(), 0);
}

/* ---- probes and registration ---- */

static void test_dmabuf_probe_outcomes(void **state)
{
	static const struct {
		int err;
		bool want;
	} cases[] = {
		{ EOPNOTSUPP, false }, { EPROTONOSUPPORT, false }, { EBADF, true }, { EINVAL, true }
	};
	struct mk_dev_props p;

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		mock_reset();
		mock.dmabuf_errno = cases[i].err;
		assert_int_equal(mk_verbs_ops.init(), 0);
		assert_int_equal(mk_verbs_ops.dev_props(0, &p), 0);
		assert_int_equal(!!(p.ptr_support & MK_PTR_DMABUF), cases[i].want);
		assert_int_equal(mock.n_reg_dmabuf, 1); /* probed once per device */
		mk_verbs_ops.fini();
	}
	mock_reset();
	mock.lib.reg_dmabuf_mr = NULL; /* library older than IBVERBS_1.12 */
	assert_int_equal(mk_verbs_ops.init(), 0);
	assert_int_equal(mk_verbs_ops.dev_props(0, &p), 0);
	assert_int_equal(p.ptr_support, MK_PTR_HOST);
}

static void test_peermem_module_reports_cuda(void **state)
{
	struct mk_dev_props p;

	put_file("module/nvidia_peermem/version", "1.0\n");
	assert_int_equal(mk_verbs_ops.init(), 0);
	assert_int_equal(mk_verbs_ops.dev_props(0, &p), 0);
	assert_int_equal(p.ptr_support, MK_PTR_HOST | MK_PTR_CUDA);
}

static void test_reg_mr_paths(void **state)
{
	struct mk_mr_attr host = { .type = MK_PTR_HOST, .dmabuf_fd = -1, .cuda_device = -1 };
	struct mk_mr_attr cuda = { .type = MK_PTR_CUDA, .dmabuf_fd = -1, .cuda_device = 0 };
	struct mk_mr_attr dmabuf = { .type = MK_PTR_CUDA, .dmabuf_fd = 5, .cuda_device = 0 };
	static char buf[8192] __attribute__((aligned(4096)));
	struct mk_bmr *b;
	struct mk_rkey rk;

	assert_int_equal(mk_verbs_ops.init(), 0);
	assert_int_equal(mk_verbs_reg_mr(0, buf, 4096, &host, &b, &rk), 0);
	assert_true(rk.base == (uint64_t)(uintptr_t)buf);
	assert_true(rk.key == b->mr[0]->rkey);
	assert_int_equal(mock.n_reg_iova2, 1);
	assert_true(mock.last_access & IBV_ACCESS_RELAXED_ORDERING);
	assert_true(mock.last_access & IBV_ACCESS_REMOTE_WRITE);
	assert_int_equal(mk_verbs_dereg_mr(0, b), 0);

	host.flags = MK_MR_FLAG_STRICT_ORDER;
	assert_int_equal(mk_verbs_reg_mr(0, buf, 4096, &host, &b, &rk), 0);
	assert_false(mock.last_access & IBV_ACCESS_RELAXED_ORDERING);
	assert_int_equal(mk_verbs_dereg_mr(0, b), 0);

	mock.lib.reg_mr_iova2 = NULL; /* library older than IBVERBS_1.8 */
	assert_int_equal(mk_verbs_reg_mr(0, buf, 4096, &host, &b, &rk), 0);
	assert_int_equal(mock.n_reg_iova2, 2);
	assert_int_equal(mk_verbs_dereg_mr(0, b), 0);

	mock.fail_reg_mr = mock.n_reg_mr + 1;
	mock.fail_errno = EFAULT;
	assert_int_equal(mk_verbs_reg_mr(0, buf, 4096, &host, &b, &rk), -EFAULT);
	assert_non_null(strstr(last_warn, "host"));

	/* no peer memory, no DMA-BUF on this mock device: both GPU paths are refused */
	assert_int_equal(mk_verbs_reg_mr(0, buf, 4096, &cuda, &b, &rk), -EOPNOTSUPP);
	assert_int_equal(mk_verbs_reg_mr(0, buf, 4096, &dmabuf, &b, &rk), -EOPNOTSUPP);
	mk_verbs_dev_get(0)->dmabuf = true;
	assert_int_equal(mk_verbs_reg_mr(0, buf, 4096, &dmabuf, &b, &rk), 0);
	assert_int_equal(mock.n_reg_dmabuf, 2);
	assert_int_equal(mk_verbs_dereg_mr(0, b), 0);
	assert_int_equal(mk_verbs_reg_mr(7, buf, 4096, &host, &b, &rk), -EINVAL);
}

/* ---- handle codec ---- */

static void test_handle_roundtrip_and_every_corrupted_byte(void **state)
{
	uint8_t h[MK_TP_HANDLE_MAX], bad[MK_TP_HANDLE_MAX];
	struct mk_verbs_handle out;
	static const uint8_t flips[] = { 0x01, 0x80, 0xff };

	memset(h, 0, sizeof(h));
	mk_verbs_handle_encode(h, htonl(0x0a000001), htons(4242), 0x1122334455667788ull);
	assert_int_equal(mk_verbs_handle_decode(h, &out), 0);
	assert_true(out.nonce == 0x1122334455667788ull);
	assert_int_equal(ntohs(out.port), 4242);
	for (size_t i = 0; i < sizeof(struct mk_verbs_handle); i++) {
		for (size_t f = 0; f < sizeof(flips); f++) {
			memcpy(bad, h, sizeof(h));
			bad[i] ^= flips[f];
			assert_int_equal(mk_verbs_handle_decode(bad, &out), -EINVAL);
		}
	}
	for (size_t i = 0; i < sizeof(bad); i++)
		bad[i] = (uint8_t)(i * 37 + 11);
	assert_int_equal(mk_verbs_handle_decode(bad, &out), -EINVAL);
	assert_int_equal(mk_verbs_handle_decode(NULL, &out), -EINVAL);
	assert_non_null(strstr(last_warn, "handle"));
}

static void test_listen_address_follows_socket_ifname(void **state)
{
	uint8_t h[MK_TP_HANDLE_MAX];
	struct mk_verbs_handle dec;
	struct mk_listener *l;

	assert_int_equal(mk_verbs_ops.init(), 0);
	set_env("MKERNEL_SOCKET_IFNAME", "lo");
	assert_int_equal(mk_verbs_ops.listen(0, h, &l), 0);
	assert_int_equal(mk_verbs_handle_decode(h, &dec), 0);
	assert_true(dec.ip == htonl(INADDR_LOOPBACK));
	assert_true(dec.port != 0);
	assert_int_equal(nwarn, 0);
	assert_int_equal(mk_verbs_ops.close_listen(l), 0);

	set_env("MKERNEL_SOCKET_IFNAME", "no-such-if0");
	assert_int_equal(mk_verbs_ops.listen(0, h, &l), 0);
	assert_int_equal(mk_verbs_handle_decode(h, &dec), 0);
	assert_true(dec.ip == htonl(INADDR_LOOPBACK));
	assert_non_null(strstr(last_warn, "no-such-if0"));
	assert_int_equal(mk_verbs_ops.close_listen(l), 0);
	assert_int_equal(mk_verbs_ops.listen(3, h, &l), -EINVAL); /* no such device */
}

static void test_connect_foreign_handle_einval(void **state)
{
	uint8_t h[MK_TP_HANDLE_MAX];
	struct mk_conn *c = (struct mk_conn *)0x1;

	assert_int_equal(mk_verbs_ops.init(), 0);
	memset(h, 0xa5, sizeof(h));
	assert_int_equal(mk_verbs_ops.connect(0, h, NULL, 0, &c), -EINVAL);
	assert_null(c);
	assert_int_equal(mock.n_create_qp, 0);
	assert_true(nwarn > 0);
}

/* ---- connection objects: every unwind label ---- */

static void test_conn_create_failures_unwind(void **state)
{
	struct {
		int *field;
		int at;
	} steps[] = {
		{ &mock.fail_create_cq, 1 }, /* undo_slots */
		{ &mock.fail_create_qp, 1 }, /* undo_qps, nothing created yet */
		{ &mock.fail_create_qp, 2 }, /* undo_qps with lane 0 alive */
		{ &mock.fail_modify_qp, 2 }, /* lane 1 INIT */
		{ &mock.fail_post_recv, 5 }, /* lane 1's receives (rq depth 4) */
		{ &mock.fail_reg_mr, 1 },    /* flush buffer: undo_qps */
		{ &mock.fail_create_qp, 3 }, /* flush QP: undo_flush_mr */
		{ &mock.fail_modify_qp, 3 }, /* flush QP INIT: undo_flush_qp */
	};
	struct mk_verbs_conn *c;

	for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
		mock_reset();
		set_env("MKERNEL_IB_RQ_DEPTH", "4");
		set_env("MKERNEL_IB_FORCE_FLUSH", "1");
		assert_int_equal(mk_verbs_ops.init(), 0);
		*steps[i].field = steps[i].at;
		c = NULL;
		assert_true(mk_verbs_conn_create(mk_verbs_dev_get(0), 2, &c) < 0);
		assert_null(c);
		assert_int_equal(mock.live_cq, 0);
		assert_int_equal(mock.live_qp, 0);
		assert_int_equal(mock.live_mr, 0);
		mk_verbs_ops.fini();
	}
	/* and without failures everything exists, then goes away */
	mock_reset();
	assert_int_equal(mk_verbs_ops.init(), 0);
	assert_int_equal(mk_verbs_conn_create(mk_verbs_dev_get(0), 2, &c), 0);
	assert_int_equal(mock.live_qp, 3);
	assert_int_equal(mock.live_cq, 1);
	assert_int_equal(mock.n_post_recv, 8);
	mk_verbs_conn_destroy(c);
	assert_int_equal(mock.live_qp, 0);
}

static void test_qps_connect_roce_uses_grh(void **state)
{
	struct mk_verbs_conn *c;
	struct mk_verbs_wire peer;

	roce_tree();
	assert_int_equal(mk_verbs_ops.init(), 0);
	assert_int_equal(mk_verbs_conn_create(mk_verbs_dev_get(0), 1, &c), 0);
	memset(&peer, 0, sizeof(peer));
	peer.qpn[0] = 0x77;
	peer.psn = 0x123;
	peer.rail[0].mtu = IBV_MTU_1024;
	peer.rail[0].gid[15] = 0x99;
	mock.fail_modify_qp = mock.n_modify_qp + 2; /* RTS fails */
	assert_int_equal(mk_verbs_qps_connect(c, &peer), -EINVAL);
	assert_int_equal(mock.last_qp_attr.qp_state, IBV_QPS_RTR);
	assert_int_equal(mock.last_qp_attr.ah_attr.is_global, 1);
	assert_int_equal(mock.last_qp_attr.ah_attr.grh.sgid_index, 2);
	assert_int_equal(mock.last_qp_attr.ah_attr.grh.dgid.raw[15], 0x99);
	assert_int_equal(mock.last_qp_attr.dest_qp_num, 0x77);
	assert_int_equal(mock.last_qp_attr.rq_psn, 0x123);
	assert_int_equal(mock.last_qp_attr.path_mtu, IBV_MTU_1024);
	assert_non_null(strstr(last_warn, "RTS"));
	mock.fail_modify_qp = 0;
	assert_int_equal(mk_verbs_qps_connect(c, &peer), 0);
	assert_int_equal(mock.last_qp_attr.qp_state, IBV_QPS_RTS);
	assert_int_equal(mock.last_qp_attr.timeout, 20);
	assert_int_equal(mock.last_qp_attr.retry_cnt, 7);
	mk_verbs_conn_destroy(c);
}

static void test_qps_connect_ib_uses_lid(void **state)
{
	struct mk_verbs_conn *c;
	struct mk_verbs_wire peer;

	assert_int_equal(mk_verbs_ops.init(), 0);
	assert_int_equal(mk_verbs_conn_create(mk_verbs_dev_get(0), 1, &c), 0);
	memset(&peer, 0, sizeof(peer));
	peer.rail[0].lid = 42;
	peer.rail[0].mtu = IBV_MTU_4096;
	mock.fail_modify_qp = mock.n_modify_qp + 1; /* RTR fails */
	mock.fail_errno = EPERM;
	assert_int_equal(mk_verbs_qps_connect(c, &peer), -EPERM);
	assert_int_equal(mock.last_qp_attr.qp_state, IBV_QPS_INIT);
	mock.fail_modify_qp = 0;
	assert_int_equal(mk_verbs_qps_connect(c, &peer), 0);
	assert_int_equal(mock.last_qp_attr.qp_state, IBV_QPS_RTS);
	mk_verbs_conn_destroy(c);
	assert_int_equal(mock.live_qp, 0);
}

/* ---- handshake over real sockets, verbs mocked ---- */

static void drive(struct mk_listener *l, struct mk_conn *c, struct mk_conn **acc, int *crc)
{
	for (uint64_t end = mk_now_ms() + 10000;
	     (*acc == NULL || *crc == 0) && mk_now_ms() < end;) {
		if (*acc == NULL)
			assert_int_equal(mk_verbs_ops.accept(l, "acc", 4, acc), 0);
		if (*crc == 0)
			*crc = mk_verbs_ops.connected(c);
	}
}

static void test_handshake_in_process(void **state)
{
	uint8_t h[MK_TP_HANDLE_MAX];
	struct mk_listener *l;
	struct mk_conn *c, *a = NULL, *again;
	int crc = 0;

	set_env("MKERNEL_IB_QPS_PER_CONN", "3");
	assert_int_equal(mk_verbs_ops.init(), 0);
	assert_int_equal(mk_verbs_ops.listen(0, h, &l), 0);
	assert_int_equal(mk_verbs_ops.connect(0, h, "conn-blob", 10, &c), 0);
	assert_int_equal(mk_verbs_ops.connected(c), 0);
	drive(l, c, &a, &crc);
	assert_int_equal(crc, 1);
	assert_non_null(a);
	assert_int_equal(c->nlanes, 3);
	assert_int_equal(a->nlanes, 3);
	assert_int_equal(a->peer_blob_len, 10);
	assert_string_equal((char *)a->peer_blob, "conn-blob");
	assert_int_equal(c->peer_blob_len, 4);
	assert_string_equal((char *)c->peer_blob, "acc");
	/* 6 QPs, each INIT + RTR + RTS */
	assert_int_equal(mock.live_qp, 6);
	assert_int_equal(mock.n_modify_qp, 18);
	assert_int_equal(mk_verbs_ops.connected(c), 1);
	assert_int_equal(mk_verbs_ops.accept(l, NULL, 0, &again), -EINVAL); /* one per listener */
	assert_null(again);
	assert_int_equal(mk_verbs_ops.close(c), 0);
	assert_int_equal(mk_verbs_ops.close(a), 0);
	assert_int_equal(mk_verbs_ops.close_listen(l), 0);
}

static void test_out_of_descriptors_fails_cleanly(void **state)
{
	uint8_t h[MK_TP_HANDLE_MAX], h2[MK_TP_HANDLE_MAX];
	struct rlimit old, low;
	struct mk_listener *l, *l2;
	struct mk_conn *c;
	int fds[64], n = 0, rc;

	assert_int_equal(mk_verbs_ops.init(), 0);
	assert_int_equal(mk_verbs_ops.listen(0, h, &l), 0);
	assert_int_equal(mk_verbs_ops.connect(0, h, NULL, 0, &c), 0);
	assert_int_equal(getrlimit(RLIMIT_NOFILE, &old), 0);
	low = old;
	low.rlim_cur = 64;
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
	while (n < 64 && (fds[n] = dup(0)) >= 0)
		n++;
	rc = mk_verbs_ops.listen(0, h2, &l2); /* socket() fails: undo_alloc */
	assert_int_equal(rc, -EMFILE);
	rc = mk_verbs_ops.connected(c); /* the TCP connect cannot start */
	assert_int_equal(rc, -EMFILE);
	assert_non_null(strstr(last_warn, "connection setup"));
	while (n > 0)
		close(fds[--n]);
	assert_int_equal(setrlimit(RLIMIT_NOFILE, &old), 0);
	assert_int_equal(mk_verbs_ops.connected(c), -EMFILE); /* failure is final */
	assert_int_equal(mk_verbs_ops.close(c), 0);
	assert_int_equal(mk_verbs_ops.close_listen(l), 0);
}

static void test_stale_handle_times_out(void **state)
{
	uint8_t h[MK_TP_HANDLE_MAX];
	struct mk_listener *l;
	struct mk_conn *c;
	int rc;

	set_env("MKERNEL_TIMEOUT", "300");
	assert_int_equal(mk_verbs_ops.init(), 0);
	assert_int_equal(mk_verbs_ops.listen(0, h, &l), 0);
	assert_int_equal(mk_verbs_ops.close_listen(l), 0);
	assert_int_equal(mk_verbs_ops.connect(0, h, NULL, 0, &c), 0);
	while ((rc = mk_verbs_ops.connected(c)) == 0)
		usleep(1000);
	assert_int_equal(rc, -ETIMEDOUT);
	assert_int_equal(mk_verbs_ops.connected(c), -ETIMEDOUT);
	assert_non_null(strstr(last_warn, "MKERNEL_TIMEOUT"));
	assert_int_equal(mk_verbs_ops.close(c), 0);
}

static void test_foreign_nonce_is_dropped_then_times_out(void **state)
{
	uint8_t h[MK_TP_HANDLE_MAX];
	struct mk_verbs_handle dec;
	struct mk_listener *l;
	struct mk_conn *c, *a = NULL;
	int rc = 0;

	set_env("MKERNEL_TIMEOUT", "300");
	assert_int_equal(mk_verbs_ops.init(), 0);
	assert_int_equal(mk_verbs_ops.listen(0, h, &l), 0);
	assert_int_equal(mk_verbs_handle_decode(h, &dec), 0);
	/* same address, another listener's nonce: a well-formed handle of someone else */
	mk_verbs_handle_encode(h, dec.ip, dec.port, dec.nonce + 1);
	assert_int_equal(mk_verbs_ops.connect(0, h, NULL, 0, &c), 0);
	for (uint64_t end = mk_now_ms() + 10000; rc == 0 && mk_now_ms() < end;) {
		assert_int_equal(mk_verbs_ops.accept(l, NULL, 0, &a), 0);
		assert_null(a);
		rc = mk_verbs_ops.connected(c);
	}
	assert_int_equal(rc, -ETIMEDOUT);
	assert_int_equal(mk_verbs_ops.close(c), 0);
	assert_int_equal(mk_verbs_ops.close_listen(l), 0);
}

static void test_connect_and_accept_object_failures_unwind(void **state)
{
	uint8_t h[MK_TP_HANDLE_MAX];
	struct mk_listener *l;
	struct mk_conn *c = NULL, *a = NULL;
	int rc = 0;

	assert_int_equal(mk_verbs_ops.init(), 0);
	assert_int_equal(mk_verbs_ops.listen(0, h, &l), 0);
	mock.fail_create_cq = 1; /* the connector's CQ */
	assert_int_equal(mk_verbs_ops.connect(0, h, NULL, 0, &c), -ENOMEM);
	assert_null(c);
	assert_int_equal(mock.live_qp + mock.live_cq, 0);

	mock.fail_create_cq = 0;
	mock.fail_create_qp = mock.n_create_qp + 2; /* the acceptor's first QP */
	assert_int_equal(mk_verbs_ops.connect(0, h, NULL, 0, &c), 0);
	for (uint64_t end = mk_now_ms() + 10000; rc == 0 && mk_now_ms() < end;) {
		rc = mk_verbs_ops.accept(l, NULL, 0, &a);
		if (rc == 0)
			assert_int_equal(mk_verbs_ops.connected(c), 0);
	}
	assert_int_equal(rc, -ENOMEM);
	assert_null(a);
	assert_int_equal(mock.live_qp, 1); /* only the connector's QP is left */
	assert_int_equal(mk_verbs_ops.close(c), 0);
	assert_int_equal(mk_verbs_ops.close_listen(l), 0);
}

/* ---- data path ---- */

static struct mk_verbs_conn *ready_conn(int nqps)
{
	struct mk_verbs_conn *c;

	assert_int_equal(mk_verbs_ops.init(), 0);
	assert_int_equal(mk_verbs_conn_create(mk_verbs_dev_get(0), nqps, &c), 0);
	c->state = MK_VC_READY;
	c->base.nlanes = nqps;
	return c;
}

static struct mk_bmr *host_mr(void *buf, size_t len, struct mk_rkey *rk)
{
	struct mk_mr_attr a = { .type = MK_PTR_HOST, .dmabuf_fd = -1, .cuda_device = -1 };
	struct mk_bmr *b;

	assert_int_equal(mk_verbs_reg_mr(0, buf, len, &a, &b, rk), 0);
	return b;
}

/*
 * NIC fusion: two ports fused into one device. Bad lists make no device; the fused device sums
 * the speed and names its children; a connection spreads QPs and CQs over both ports' objects;
 * a registration is made on both PDs with both keys packed; lane 1 writes with rail 1's keys.
 */
static void test_fused_device_spreads_qps_keys_and_writes(void **state)
{
	static char buf[4096] __attribute__((aligned(4096)));
	const int bad[][3] = { { 0, 0, 0 }, { 2, 0, 0 }, { 2, 0, 5 }, { 5, 0, 1 } };
	struct mk_verbs_dev *p0, *p1, *v;
	struct mk_dev_props props;
	struct mk_verbs_conn *c;
	struct mk_bmr *b;
	struct mk_rkey rk;
	int devs[2] = { 0, 1 }, idx = -1;

	mock.ndevices = 2;
	strcpy(mock.devices[1].name, "mlx5_1");
	mock.devices[1].transport_type = IBV_TRANSPORT_IB;
	mock.devices[1].node_type = IBV_NODE_CA;
	assert_int_equal(mk_verbs_ops.init(), 0);
	assert_int_equal(mk_verbs_ops.ndevs(), 2);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		assert_int_equal(mk_verbs_ops.make_vdev(bad[i][0], &bad[i][1], &idx), -EINVAL);
	assert_int_equal(mk_verbs_ops.ndevs(), 2);
	assert_int_equal(mk_verbs_ops.make_vdev(2, devs, &idx), 0);
	assert_int_equal(idx, 2);
	assert_int_equal(mk_verbs_ops.ndevs(), 3);
	devs[0] = idx; /* a fused device is not a port */
	assert_int_equal(mk_verbs_ops.make_vdev(2, devs, &idx), -EINVAL);
	idx = 2;
	assert_int_equal(mk_verbs_ops.dev_props(idx, &props), 0);
	assert_int_equal(props.nfused, 2);
	assert_int_equal(props.fused[0], 0);
	assert_int_equal(props.fused[1], 1);
	assert_int_equal(props.speed_mbps, 2 * 200000);
	assert_string_equal(props.name, "verbs:fused:0+1");

	p0 = mk_verbs_dev_get(0);
	p1 = mk_verbs_dev_get(1);
	v = mk_verbs_dev_get(idx);
	assert_int_equal(mk_verbs_conn_create(v, 4, &c), 0);
	assert_int_equal(c->nrails, 2);
	for (int i = 0; i < 4; i++)
		assert_ptr_equal(c->qps[i]->pd, (i % 2) ? p1->pd : p0->pd);
	assert_ptr_equal(c->cqs[0]->context, p0->ctx);
	assert_ptr_equal(c->cqs[1]->context, p1->ctx);
	c->state = MK_VC_READY;
	c->base.nlanes = 4;

	struct mk_mr_attr a = { .type = MK_PTR_HOST, .dmabuf_fd = -1, .cuda_device = -1 };
	assert_int_equal(mk_verbs_reg_mr(idx, buf, sizeof(buf), &a, &b, &rk), 0);
	assert_int_equal(b->nmr, 2);
	assert_ptr_equal(b->mr[0]->pd, p0->pd);
	assert_ptr_equal(b->mr[1]->pd, p1->pd);
	assert_true(rk.key == ((uint64_t)b->mr[1]->rkey << 32 | b->mr[0]->rkey));
	assert_true(rk.key2 == 0);
	assert_int_equal(mk_verbs_write(&c->base, 1, buf, 64, b, 0x5000, &rk, true, 7, NULL), 0);
	assert_true(mock.last_wr.wr.rdma.rkey == b->mr[1]->rkey);
	assert_int_equal(mock.last_sge.lkey, b->mr[1]->lkey);
	assert_int_equal(mk_verbs_write(&c->base, 2, buf, 64, b, 0x5000, &rk, true, 7, NULL), 0);
	assert_true(mock.last_wr.wr.rdma.rkey == b->mr[0]->rkey);
	assert_int_equal(mock.last_sge.lkey, b->mr[0]->lkey);

	/* a peer that fused one port: lane 1 leaves from our rail 1 for its only port */
	c->peer_nrails = 1;
	assert_int_equal(mk_verbs_write(&c->base, 1, buf, 64, b, 0x5000, &rk, true, 7, NULL), 0);
	assert_true(mock.last_wr.wr.rdma.rkey == b->mr[0]->rkey);
	assert_int_equal(mock.last_sge.lkey, b->mr[1]->lkey);
	struct mk_verbs_wire peer;
	memset(&peer, 0, sizeof(peer));
	peer.nrails = 1;
	peer.rail[0].lid = 9;
	peer.rail[0].mtu = IBV_MTU_4096;
	for (int i = 0; i < 4; i++)
		peer.qpn[i] = 0x100u + (uint32_t)i;
	assert_int_equal(mk_verbs_qps_connect(c, &peer), 0);
	assert_int_equal(c->peer_nrails, 1);
	assert_int_equal(mock.last_qp_attr.qp_state, IBV_QPS_RTS);
	c->peer_nrails = 2;

	/* a registration of one port has no key for rail 1: refused, not sent with a wrong key */
	struct mk_bmr *one;
	struct mk_rkey rk1;
	assert_int_equal(mk_verbs_reg_mr(0, buf, sizeof(buf), &a, &one, &rk1), 0);
	assert_int_equal(mk_verbs_write(&c->base, 1, buf, 64, one, 0x5000, &rk1, true, 7, NULL),
			 -EINVAL);
	assert_int_equal(mk_verbs_dereg_mr(0, one), 0);
	assert_int_equal(mk_verbs_dereg_mr(idx, b), 0);
	mk_verbs_conn_destroy(c);
	assert_int_equal(mock.live_qp + mock.live_cq + mock.live_mr, 0);
}

static void test_write_builds_the_right_wr(void **state)
{
	static char buf[4096] __attribute__((aligned(4096)));
	struct mk_verbs_conn *c = ready_conn(2);
	struct mk_rkey rk;
	struct mk_bmr *b = host_mr(buf, sizeof(buf), &rk);

	assert_int_equal(mk_verbs_write(&c->base, 1, buf + 8, 100, b, 0x5000, &rk, true, 0xdeadbeef,
					(void *)0x42),
			 0);
	assert_int_equal(mock.last_wr.opcode, IBV_WR_RDMA_WRITE_WITH_IMM);
	assert_true(mock.last_wr.imm_data == htonl(0xdeadbeef));
	assert_true(mock.last_wr.send_flags & IBV_SEND_SIGNALED);
	assert_true(mock.last_wr.wr.rdma.remote_addr == 0x5000);
	assert_true(mock.last_wr.wr.rdma.rkey == (uint32_t)rk.key);
	assert_int_equal(mock.last_sge.length, 100);
	assert_true(mock.last_sge.addr == (uint64_t)(uintptr_t)(buf + 8));
	assert_int_equal(mock.last_sge.lkey, b->mr[0]->lkey);
	assert_int_equal(c->sq_used[1], 1);

	assert_int_equal(mk_verbs_write(&c->base, 0, NULL, 0, NULL, 0x5000, &rk, true, 1, NULL), 0);
	assert_int_equal(mock.last_wr.num_sge, 0); /* 0-byte write with immediate */
	assert_int_equal(mk_verbs_write(&c->base, 0, NULL, 0, NULL, 0x5000, &rk, false, 0, NULL),
			 -EINVAL);
	assert_int_equal(mk_verbs_write(&c->base, 0, buf, 8, b, 0x5000, &rk, false, 0, NULL), 0);
	assert_int_equal(mock.last_wr.opcode, IBV_WR_RDMA_WRITE);
	assert_int_equal(mk_verbs_write(&c->base, 2, buf, 8, b, 0, &rk, false, 0, NULL), -EINVAL);
	assert_int_equal(mk_verbs_read(&c->base, 0, buf, 64, b, 0x7000, &rk, NULL), 0);
	assert_int_equal(mock.last_wr.opcode, IBV_WR_RDMA_READ);
	assert_int_equal(mk_verbs_dereg_mr(0, b), 0);
	mk_verbs_conn_destroy(c);
}

/* Writes up to what the QPs granted inline go IBV_SEND_INLINE; larger ones and reads do not. */
static void test_small_writes_go_inline(void **state)
{
	static char buf[4096] __attribute__((aligned(4096)));
	struct mk_verbs_conn *c;
	struct mk_rkey rk;
	struct mk_bmr *b;

	mock.max_inline = 64;
	c = ready_conn(2);
	b = host_mr(buf, sizeof(buf), &rk);
	assert_int_equal(c->max_inline, 64);
	assert_int_equal(mk_verbs_write(&c->base, 0, buf, 64, b, 0x5000, &rk, true, 1, NULL), 0);
	assert_true(mock.last_wr.send_flags & IBV_SEND_INLINE);
	assert_true(mock.last_wr.send_flags & IBV_SEND_SIGNALED);
	assert_int_equal(mk_verbs_write(&c->base, 1, buf, 65, b, 0x5000, &rk, true, 1, NULL), 0);
	assert_false(mock.last_wr.send_flags & IBV_SEND_INLINE);
	assert_int_equal(mk_verbs_write(&c->base, 0, NULL, 0, NULL, 0x5000, &rk, true, 1, NULL), 0);
	assert_false(mock.last_wr.send_flags & IBV_SEND_INLINE);
	assert_int_equal(mk_verbs_read(&c->base, 0, buf, 8, b, 0x7000, &rk, NULL), 0);
	assert_false(mock.last_wr.send_flags & IBV_SEND_INLINE);
	assert_int_equal(mk_verbs_dereg_mr(0, b), 0);
	mk_verbs_conn_destroy(c);

	/* a provider that refuses inline data altogether: the QPs come up without */
	mock.refuse_inline = 1;
	mock.max_inline = 0;
	c = ready_conn(1);
	b = host_mr(buf, sizeof(buf), &rk);
	assert_int_equal(c->max_inline, 0);
	assert_int_equal(mk_verbs_write(&c->base, 0, buf, 8, b, 0x5000, &rk, true, 1, NULL), 0);
	assert_false(mock.last_wr.send_flags & IBV_SEND_INLINE);
	assert_int_equal(mk_verbs_dereg_mr(0, b), 0);
	mk_verbs_conn_destroy(c);
	assert_int_equal(mock.live_qp + mock.live_cq + mock.live_mr, 0);
}

static void test_send_queue_full_eagain_then_completion_frees(void **state)
{
	static char buf[4096] __attribute__((aligned(4096)));
	struct mk_verbs_conn *c;
	struct mk_rkey rk;
	struct mk_bmr *b;
	struct mk_event ev[4];
	uint64_t wr_id;

	set_env("MKERNEL_IB_SQ_DEPTH", "2");
	c = ready_conn(1);
	b = host_mr(buf, sizeof(buf), &rk);
	assert_int_equal(mk_verbs_write(&c->base, 0, buf, 8, b, 0, &rk, false, 0, (void *)1), 0);
	wr_id = mock.last_wr.wr_id;
	assert_int_equal(mk_verbs_write(&c->base, 0, buf, 8, b, 0, &rk, false, 0, (void *)2), 0);
	assert_int_equal(mk_verbs_write(&c->base, 0, buf, 8, b, 0, &rk, false, 0, (void *)3),
			 -EAGAIN);
	assert_int_equal(mock.n_post_send, 2);
	mock_push_wc(wr_id, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, c->qps[0]->qp_num, 0, 0);
	assert_int_equal(mk_verbs_poll(&c->base, ev, 4), 1);
	assert_int_equal(ev[0].type, MK_EV_WRITE_DONE);
	assert_int_equal(ev[0].status, 0);
	assert_ptr_equal(ev[0].ctx, (void *)1);
	assert_int_equal(ev[0].len, 8);
	assert_int_equal(mk_verbs_write(&c->base, 0, buf, 8, b, 0, &rk, false, 0, (void *)3), 0);
	assert_int_equal(mk_verbs_dereg_mr(0, b), 0);
	mk_verbs_conn_destroy(c);
}

static void test_post_send_failure_releases_slot(void **state)
{
	static char buf[4096] __attribute__((aligned(4096)));
	struct mk_verbs_conn *c = ready_conn(1);
	struct mk_rkey rk;
	struct mk_bmr *b = host_mr(buf, sizeof(buf), &rk);
	int nfree = c->nfree;

	mock.fail_post_send = 1;
	mock.fail_errno = EINVAL;
	assert_int_equal(mk_verbs_write(&c->base, 0, buf, 8, b, 0, &rk, false, 0, NULL), -EINVAL);
	assert_int_equal(c->nfree, nfree);
	assert_int_equal(c->sq_used[0], 0);
	mock.fail_post_send = 2;
	mock.fail_errno = ENOMEM; /* provider's "queue full" */
	assert_int_equal(mk_verbs_write(&c->base, 0, buf, 8, b, 0, &rk, false, 0, NULL), -EAGAIN);
	assert_int_equal(c->nfree, nfree);
	assert_int_equal(mk_verbs_dereg_mr(0, b), 0);
	mk_verbs_conn_destroy(c);
}

static void test_poll_immediate_and_repost(void **state)
{
	struct mk_verbs_conn *c = ready_conn(2);
	struct mk_event ev[2];
	int recvs = mock.n_post_recv;

	mock_push_wc(MK_VERBS_WR_RECV | 1, IBV_WC_SUCCESS, IBV_WC_RECV_RDMA_WITH_IMM,
		     c->qps[1]->qp_num, htonl(0xcafe0001), 4096);
	mock_push_wc(MK_VERBS_WR_RECV | 0, IBV_WC_SUCCESS, IBV_WC_RECV_RDMA_WITH_IMM,
		     c->qps[0]->qp_num, htonl(7), 0);
	assert_int_equal(mk_verbs_poll(&c->base, ev, 2), 2);
	assert_int_equal(ev[0].type, MK_EV_IMM);
	assert_true(ev[0].imm == 0xcafe0001);
	assert_int_equal(ev[0].len, 4096);
	assert_null(ev[0].ctx);
	assert_true(ev[1].imm == 7);
	assert_int_equal(ev[1].len, 0);
	assert_int_equal(mock.n_post_recv, recvs + 2); /* the receive queue stays full */
	assert_int_equal(mk_verbs_poll(&c->base, ev, 2), 0);
	mk_verbs_conn_destroy(c);
}

static void test_poll_error_completions(void **state)
{
	static char buf[4096] __attribute__((aligned(4096)));
	struct mk_verbs_conn *c = ready_conn(1);
	struct mk_rkey rk;
	struct mk_bmr *b = host_mr(buf, sizeof(buf), &rk);
	struct mk_event ev[4];
	uint64_t w1, w2;
	char qpn[32];

	assert_int_equal(mk_verbs_write(&c->base, 0, buf, 8, b, 0, &rk, true, 1, (void *)11), 0);
	w1 = mock.last_wr.wr_id;
	assert_int_equal(mk_verbs_write(&c->base, 0, buf, 8, b, 0, &rk, true, 2, (void *)12), 0);
	w2 = mock.last_wr.wr_id;
	mock_push_wc(w1, IBV_WC_RETRY_EXC_ERR, 0, c->qps[0]->qp_num, 0, 0);
	mock_push_wc(w2, IBV_WC_WR_FLUSH_ERR, 0, c->qps[0]->qp_num, 0, 0);
	mock_push_wc(MK_VERBS_WR_RECV, IBV_WC_WR_FLUSH_ERR, 0, c->qps[0]->qp_num, 0, 0);
	assert_int_equal(mk_verbs_poll(&c->base, ev, 4), 2);
	assert_int_equal(ev[0].type, MK_EV_WRITE_DONE);
	assert_int_equal(ev[0].status, -ETIMEDOUT);
	assert_ptr_equal(ev[0].ctx, (void *)11);
	assert_int_equal(ev[1].status, -ETIMEDOUT); /* flushed: reports the cause */
	assert_ptr_equal(ev[1].ctx, (void *)12);
	/* one WARN naming device, QP and the verbs status text */
	assert_int_equal(nwarn, 1);
	snprintf(qpn, sizeof(qpn), "QP %u", c->qps[0]->qp_num);
	assert_non_null(strstr(last_warn, "mlx5_0"));
	assert_non_null(strstr(last_warn, qpn));
	assert_non_null(strstr(last_warn, "transport retry counter exceeded"));
	/* afterwards: poll and write report the broken connection, never hang */
	assert_int_equal(mk_verbs_poll(&c->base, ev, 4), -ETIMEDOUT);
	assert_int_equal(mk_verbs_write(&c->base, 0, buf, 8, b, 0, &rk, true, 3, NULL), -ETIMEDOUT);
	assert_int_equal(mk_verbs_dereg_mr(0, b), 0);
	mk_verbs_conn_destroy(c);
}

static void test_poll_remote_access_and_recv_errors(void **state)
{
	static char buf[4096] __attribute__((aligned(4096)));
	struct mk_verbs_conn *c = ready_conn(1);
	struct mk_rkey rk;
	struct mk_bmr *b = host_mr(buf, sizeof(buf), &rk);
	struct mk_event ev[2];

	assert_int_equal(mk_verbs_write(&c->base, 0, buf, 8, b, 0, &rk, false, 0, (void *)5), 0);
	mock_push_wc(mock.last_wr.wr_id, IBV_WC_REM_ACCESS_ERR, 0, c->qps[0]->qp_num, 0, 0);
	assert_int_equal(mk_verbs_poll(&c->base, ev, 2), 1);
	assert_int_equal(ev[0].status, -EREMOTEIO);
	assert_non_null(strstr(last_warn, "remote access error"));
	mk_verbs_conn_destroy(c);

	assert_int_equal(mk_verbs_conn_create(mk_verbs_dev_get(0), 1, &c), 0);
	c->state = MK_VC_READY;
	mock_push_wc(MK_VERBS_WR_RECV, IBV_WC_LOC_LEN_ERR, 0, c->qps[0]->qp_num, 0, 0);
	assert_int_equal(mk_verbs_poll(&c->base, ev, 2), 1);
	assert_int_equal(ev[0].type, MK_EV_IMM);
	assert_int_equal(ev[0].status, -EIO);
	assert_int_equal(mk_verbs_dereg_mr(0, b), 0);
	mk_verbs_conn_destroy(c);
}

static void test_wc_status_mapping(void **state)
{
	assert_int_equal(mk_verbs_wc_errno(IBV_WC_SUCCESS), 0);
	assert_int_equal(mk_verbs_wc_errno(IBV_WC_RETRY_EXC_ERR), -ETIMEDOUT);
	assert_int_equal(mk_verbs_wc_errno(IBV_WC_RNR_RETRY_EXC_ERR), -ECONNRESET);
	assert_int_equal(mk_verbs_wc_errno(IBV_WC_REM_ACCESS_ERR), -EREMOTEIO);
	assert_int_equal(mk_verbs_wc_errno(IBV_WC_REM_OP_ERR), -EREMOTEIO);
	assert_int_equal(mk_verbs_wc_errno(IBV_WC_WR_FLUSH_ERR), -ECANCELED);
	assert_int_equal(mk_verbs_wc_errno(IBV_WC_LOC_PROT_ERR), -EFAULT);
	assert_int_equal(mk_verbs_wc_errno(IBV_WC_FATAL_ERR), -EIO);
}

static void test_poll_cq_failure_breaks_connection(void **state)
{
	struct mk_verbs_conn *c = ready_conn(1);
	struct mk_event ev;

	mock.poll_error = -1;
	assert_int_equal(mk_verbs_poll(&c->base, &ev, 1), -EIO);
	mk_verbs_conn_destroy(c);
}

static void test_flush_host_completes_at_once(void **state)
{
	static char buf[4096] __attribute__((aligned(4096)));
	struct mk_verbs_conn *c = ready_conn(1);
	struct mk_rkey rk;
	struct mk_bmr *b = host_mr(buf, sizeof(buf), &rk);
	struct mk_event ev[2];
	int posts = mock.n_post_send;

	assert_null(c->flush_qp);
	assert_int_equal(mk_verbs_flush(&c->base, buf, 4096, b, (void *)9), 0);
	assert_int_equal(mock.n_post_send, posts);
	assert_int_equal(mk_verbs_poll(&c->base, ev, 2), 1);
	assert_int_equal(ev[0].type, MK_EV_READ_DONE);
	assert_ptr_equal(ev[0].ctx, (void *)9);
	for (int i = 0; i < MK_VERBS_FAST_MAX; i++)
		assert_int_equal(mk_verbs_flush(&c->base, buf, 4096, b, NULL), 0);
	assert_int_equal(mk_verbs_flush(&c->base, buf, 4096, b, NULL), -EAGAIN);
	assert_int_equal(mk_verbs_dereg_mr(0, b), 0);
	mk_verbs_conn_destroy(c);
}

static void test_flush_forced_reads_last_bytes(void **state)
{
	static char buf[8192] __attribute__((aligned(4096)));
	struct mk_verbs_conn *c;
	struct mk_rkey rk;
	struct mk_bmr *b;
	struct mk_event ev[2];

	set_env("MKERNEL_IB_FORCE_FLUSH", "1");
	c = ready_conn(1);
	b = host_mr(buf, sizeof(buf), &rk);
	assert_non_null(c->flush_qp);
	assert_int_equal(mk_verbs_flush(&c->base, buf, 8192, b, (void *)9), 0);
	assert_int_equal(mock.last_wr.opcode, IBV_WR_RDMA_READ);
	assert_true(mock.last_wr.wr.rdma.remote_addr ==
		    (uint64_t)(uintptr_t)buf + 8192 - sizeof(c->flush_buf));
	assert_true(mock.last_sge.addr == (uint64_t)(uintptr_t)c->flush_buf);
	assert_int_equal(c->flush_used, 1);
	mock_push_wc(mock.last_wr.wr_id, IBV_WC_SUCCESS, IBV_WC_RDMA_READ, c->flush_qp->qp_num, 0,
		     0);
	assert_int_equal(mk_verbs_poll(&c->base, ev, 2), 1);
	assert_int_equal(ev[0].type, MK_EV_READ_DONE);
	assert_ptr_equal(ev[0].ctx, (void *)9);
	assert_int_equal(c->flush_used, 0);
	assert_int_equal(mk_verbs_dereg_mr(0, b), 0);
	mk_verbs_conn_destroy(c);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_lib_absent_reports_no_devices, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_lib_without_symbols_reports_no_devices, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_lib_real_resolves_every_symbol, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_init_ib_port_reports_props, setup, teardown),
		cmocka_unit_test_setup_teardown(test_fused_device_spreads_qps_keys_and_writes,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_init_pci_path_from_sysfs, setup, teardown),
		cmocka_unit_test_setup_teardown(test_speed_table, setup, teardown),
		cmocka_unit_test_setup_teardown(test_init_port_down_is_skipped, setup, teardown),
		cmocka_unit_test_setup_teardown(test_init_non_rc_device_is_skipped, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_init_two_ports_two_devices, setup, teardown),
		cmocka_unit_test_setup_teardown(test_init_failures_unwind, setup, teardown),
		cmocka_unit_test_setup_teardown(test_gid_autopick_first_ipv4_roce_v2, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_gid_index_knob_overrides_autopick, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_gid_none_skips_roce_port, setup, teardown),
		cmocka_unit_test_setup_teardown(test_dmabuf_probe_outcomes, setup, teardown),
		cmocka_unit_test_setup_teardown(test_peermem_module_reports_cuda, setup, teardown),
		cmocka_unit_test_setup_teardown(test_reg_mr_paths, setup, teardown),
		cmocka_unit_test_setup_teardown(test_handle_roundtrip_and_every_corrupted_byte,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_listen_address_follows_socket_ifname, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_connect_foreign_handle_einval, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_conn_create_failures_unwind, setup, teardown),
		cmocka_unit_test_setup_teardown(test_qps_connect_roce_uses_grh, setup, teardown),
		cmocka_unit_test_setup_teardown(test_qps_connect_ib_uses_lid, setup, teardown),
		cmocka_unit_test_setup_teardown(test_handshake_in_process, setup, teardown),
		cmocka_unit_test_setup_teardown(test_out_of_descriptors_fails_cleanly, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_stale_handle_times_out, setup, teardown),
		cmocka_unit_test_setup_teardown(test_foreign_nonce_is_dropped_then_times_out, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_connect_and_accept_object_failures_unwind,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_write_builds_the_right_wr, setup, teardown),
		cmocka_unit_test_setup_teardown(test_small_writes_go_inline, setup, teardown),
		cmocka_unit_test_setup_teardown(test_send_queue_full_eagain_then_completion_frees,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_post_send_failure_releases_slot, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_poll_immediate_and_repost, setup, teardown),
		cmocka_unit_test_setup_teardown(test_poll_error_completions, setup, teardown),
		cmocka_unit_test_setup_teardown(test_poll_remote_access_and_recv_errors, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_wc_status_mapping, setup, teardown),
		cmocka_unit_test_setup_teardown(test_poll_cq_failure_breaks_connection, setup,
						teardown),
		cmocka_unit_test_setup_teardown(test_flush_host_completes_at_once, setup, teardown),
		cmocka_unit_test_setup_teardown(test_flush_forced_reads_last_bytes, setup,
						teardown),
	};

	return cmocka_run_group_tests_name("verbs", tests, group_setup, group_teardown);
}
