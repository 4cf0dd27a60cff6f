/* SPDX-License-Identifier: Apache-2.0 */
/*
 * The fault harness: drives the built libnccl-net-mkernel.so through its exported ncclNet_v11
 * table from separate processes, as an independent user would, and injects faults from outside
 * (a peer SIGKILLed mid-transfer, strangers on the listening ports, bad arguments, a long soak).
 * Every plugin user is a fresh process forked before the module is loaded; the parent only
 * orchestrates and measures. Results are JSON lines on stdout, one per trial plus a summary.
 */
#ifndef MK_TEST_FAULT_H
#define MK_TEST_FAULT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "mk_nccl/net_v11.h"

#define FAULT_HANDLE	MK_NCCL_NET_HANDLE_MAXSIZE
#define FAULT_EXIT_SKIP 77

/* One plugin user: the module, its v11 table and the context of this process. */
struct fault_net {
	void *lib;
	struct mk_nccl_net_v11 *t;
	void *ctx;
	int ndev;
	int max_recvs;
};

/* Options every scenario reads. */
struct fault_opts {
	const char *plugin;   /* path of libnccl-net-mkernel.so */
	const char *provider; /* MKERNEL_OFI_PROVIDER of every peer */
	int trials;
	unsigned seed;
	double max_detect_s; /* a survivor must see its error within this */
	long messages;	     /* soak */
	long churn;	     /* soak: messages between re-registrations (0: default 1000) */
	double seconds;	     /* strangers: length of the attack */
	const char *victim;  /* kill: "send", "recv" or "both" (alternating) */
	const char *only;    /* bad: run one case */
};

/* ---- plumbing (fault_peer.c) ---- */

double fault_now(void);
void fault_sleep(double s);
/* xorshift64*; every scenario seeds it from --seed so a failing run can be repeated */
uint64_t fault_rand(void);
void fault_srand(uint64_t seed);

/* Open the module, init v11, devices(). 0, FAULT_EXIT_SKIP (no device), or 1 (with a message). */
int fault_net_open(struct fault_net *n, const char *path);
void fault_net_close(struct fault_net *n);
/* WARN lines the module logged in this process, and how many contained needle (NULL: any). */
unsigned fault_warns(const char *needle);
/* Keep the module's INFO lines too (--verbose). */
extern int fault_verbose;

/* Pipes between the processes of one trial. Each blocks at most the given seconds. */
int fault_write_all(int fd, const void *buf, size_t len);
int fault_read_all(int fd, void *buf, size_t len, double timeout_s);

/*
 * Connection setup as NCCL does it, bounded by a deadline: the receiver listens, writes the
 * handle to hfd and loops accept; the sender reads the handle from hfd and loops connect.
 */
int fault_recv_setup(struct fault_net *n, int hfd, void **lc, void **rc, double timeout_s);
int fault_send_setup(struct fault_net *n, int hfd, void **sc, double timeout_s);

/* One end of a connection in a peer process: the module opened, then connected or accepted. */
struct fault_side {
	struct fault_net n;
	bool recv;
	void *lc, *comm; /* listener (receiver only) and the connected comm */
};

/* fault_net_open + fault_recv_setup / fault_send_setup; 0 or 1 (with a message). */
int fault_side_open(struct fault_side *s, const char *plugin, bool recv, int hfd, double timeout_s);
/* Close the comm (and the receiver's listener), then finalize. */
void fault_side_close(struct fault_side *s);

/* Process facts for the soak and the strangers. */
long fault_rss_kib(pid_t pid);
int fault_nfds(pid_t pid);

/* fork() a child running fn(arg); the child never returns. */
pid_t fault_spawn(int (*fn)(void *), void *arg);
/*
 * Wait for pid until the deadline (absolute, fault_now()); SIGKILL it past that. Returns the
 * raw wait status, and sets *killed when the watchdog had to kill it.
 */
int fault_reap(pid_t pid, double deadline, bool *killed);

/* The environment every peer gets for a provider (transport, provider, interface). */
void fault_env(const struct fault_opts *o);
/* Remove the /dev/shm files of a process killed before it could clean up. */
void fault_shm_cleanup(pid_t pid);

/*
 * One JSON line on stdout: "{" + the fields fmt makes + the source revision the harness was built
 * from and the date + "}" (records in docs/data must name the commit they measured).
 */
void fault_json(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Median and maximum of n values (sorts v). */
void fault_stats(double *v, int n, double *median, double *max);

/* ---- scenarios ---- */

int fault_kill_main(const struct fault_opts *o);
int fault_stranger_main(const struct fault_opts *o);
int fault_soak_main(const struct fault_opts *o);
int fault_bad_main(const struct fault_opts *o);

#endif /* MK_TEST_FAULT_H */
