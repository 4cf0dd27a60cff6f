/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A mock libfabric for the ofi backend's unit tests: a function table to install with
 * mk_ofi_lib_override() and fake fid objects whose ops tables point at the functions in
 * ofi_mock.c. Every fake object is counted while alive, every call can be made to fail, and
 * posted sends/receives/writes are captured so tests can deliver them by hand.
 */
#ifndef MK_TEST_OFI_MOCK_H
#define MK_TEST_OFI_MOCK_H

#include "ofi.h"

#define MOCK_CQ_DEPTH 64
#define MOCK_MAX_KEYS 512

struct mock_cq {
	struct fid_cq cq;
	struct fi_cq_data_entry ent[MOCK_CQ_DEPTH];
	int head, tail;
	struct fi_cq_err_entry err[4];
	int nerr;
};

struct mock_ep {
	struct fid_ep ep;
	struct mock_cq *cq;
	uint8_t addr[32];
	size_t addrlen;
	void *rx_buf; /* last posted receive */
	size_t rx_len;
	void *rx_ctx;
	uint8_t tx_buf[2048]; /* copy of the last send (a setup message with 16 lanes fits) */
	size_t tx_len;
	void *tx_ctx;
	struct fi_msg_rma last_rma; /* last writemsg/readmsg, with copies of its arrays */
	struct iovec last_iov;
	void *last_desc;
	struct fi_rma_iov last_rma_iov;
	uint64_t last_flags;
	int nwrites;
	/* the last fi_inject_write[data]: no completion follows it */
	int ninjects;
	size_t inject_len;
	uint64_t inject_data;
	bool inject_has_data;
	uint64_t inject_raddr;
	/* the fi_inject_writedata before the last one */
	size_t prev_inject_len;
	uint64_t prev_inject_data, prev_inject_raddr;
	/* the write/read before the last one */
	struct iovec prev_iov;
	struct fi_rma_iov prev_rma_iov;
	uint64_t prev_data, prev_flags;
	void *prev_context;
};

struct mock_av {
	struct fid_av av;
	uint8_t addr[64]; /* the address inserted last */
	size_t addrlen;
	int inserted;
};

struct mock_ofi {
	/* what getinfo returns: a list built with mock_info_add(), or an error */
	struct fi_info *list;
	int getinfo_rc;

	/* failure injection: 0 = succeed, else the -FI_E* value returned */
	int fail_fabric, fail_domain, fail_cq_open, fail_av_open, fail_endpoint, fail_bind;
	int fail_enable, fail_getname, fail_mr_reg, fail_recv, fail_send, fail_av_insert;
	ssize_t write_rc;    /* returned by writemsg/readmsg */
	int dupinfo_fail_at; /* dupinfo call number (1-based) that returns NULL */
	int dupinfo_calls;
	int endpoint_fail_at; /* endpoint call number (1-based) that fails with -FI_EIO */
	int endpoint_calls;

	/* live fake objects */
	int fabric_live, domain_live, cq_live, av_live, ep_live, mr_live;

	/* registrations */
	int enokey_next; /* the next N registrations fail as "key in use" (-FI_ENOKEY) */
	uint64_t requested_keys[MOCK_MAX_KEYS];
	int nkeys;
	uint64_t prov_key_next; /* keys handed out when FI_MR_PROV_KEY is in use */
	uint64_t mr_mode;	/* of the domain opened last */

	const char *next_addr;	 /* name of the endpoints created next (default: 16 bytes) */
	struct mock_ep *eps[64]; /* in creation order */
	int neps;
};

extern struct mock_ofi mock;
extern const struct mk_ofi_lib mock_lib;

void mock_reset(void);
/* Append one provider/domain entry to mock.list. */
struct fi_info *mock_info_add(const char *prov, const char *domain, uint64_t mr_mode,
			      size_t cq_data_size);

/* Queue a completion / an error completion on an endpoint's CQ. */
void mock_cq_push(struct mock_ep *ep, void *ctx, uint64_t flags, size_t len, uint64_t data);
void mock_cq_push_err(struct mock_ep *ep, void *ctx, uint64_t flags, int err);
/* Entries (errors included) an endpoint's CQ still holds. */
int mock_cq_pending(struct mock_ep *ep);

/* Copy from's last send into to's posted receive and complete both sides. */
void mock_deliver(struct mock_ep *from, struct mock_ep *to);

#endif
