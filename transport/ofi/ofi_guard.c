// SPDX-License-Identifier: Apache-2.0
/*
 * A way out of libfabric's shm provider when a peer died holding one of its locks. shm keeps
 * each endpoint's queues in a shared region guarded by a spin lock; a process killed while it
 * holds the lock of its own region (progress) or of ours (posting to us) leaves it taken for
 * good, and our next post or completion read spins on it forever. The liveness checks before
 * each call (ofi_shm.c) catch a peer already gone, not one that dies between the check and the
 * lock, nor one whose exit the kernel has not finished: a pidfd turns readable only after the
 * whole process is torn down.
 *
 * So every provider call on a connection to a shm peer runs under a guard: the thread records
 * that it is inside the call and leaves a sigsetjmp point. A watchdog thread (one per process,
 * running while shm connections exist) looks every GUARD_PERIOD_NS for a call that has lasted
 * longer than GUARD_STUCK_NS while its peer is gone, and signals that thread. The handler jumps
 * back out only when the thread is spinning inside pthread_spin_lock, where it holds nothing of
 * its own (the provider takes the region lock first in its post path); anywhere else the
 * signal is ignored and tried again later. The connection is then wedged: the call returns
 * -ECONNRESET, nothing calls into its endpoint again, and close leaves its provider objects
 * behind (closing them would take the same lock) until the process exits.
 */
#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <string.h>
#include <time.h>

#include "mk/log.h"
#include "ofi.h"

#define GUARD_SLOTS	64	    /* threads that may call into shm at once */
#define GUARD_PERIOD_NS 20000000ull /* watchdog wake-up */
#define GUARD_STUCK_NS	50000000ull /* no shm call legitimately takes this long on a dead peer */
#define GUARD_SIGNAL	(SIGRTMAX - 2)

struct ofi_guard {
	int used; /* slot owned by a thread (atomic) */
	pthread_t thread;
	uint64_t since_ns; /* inside a guarded call since then; 0 outside (atomic) */
	int pidfd, pid;	   /* the call's peer */
	int escape;	   /* the watchdog asked this thread to leave its call (atomic) */
	sigjmp_buf jmp;
};

static struct ofi_guard guards[GUARD_SLOTS];
static __thread int guard_idx = -1;
static pthread_key_t guard_key;
static pthread_once_t guard_once = PTHREAD_ONCE_INIT;
static bool guard_usable; /* signal installed and pthread_spin_lock located */
static uintptr_t spin_lo, spin_hi;

static pthread_mutex_t guard_lock = PTHREAD_MUTEX_INITIALIZER;
static int guard_watchers; /* connections watching a shm peer, under guard_lock */
static pthread_t guard_thread;
static int guard_stop;

static void guard_release(void *arg)
{
	int idx = (int)(uintptr_t)arg - 1;

	if (idx >= 0)
		__atomic_store_n(&guards[idx].used, 0, __ATOMIC_RELEASE);
}

/* Inside pthread_spin_lock: the interrupted pc of the signalled thread. */
static bool guard_in_spin(void *ucontext)
{
	const ucontext_t *uc = ucontext;
	uintptr_t pc;

#if defined(__x86_64__)
	pc = (uintptr_t)uc->uc_mcontext.gregs[REG_RIP];
#elif defined(__aarch64__)
	pc = (uintptr_t)uc->uc_mcontext.pc;
#else
	(void)uc;
	return false;
#endif
	return pc >= spin_lo && pc < spin_hi;
}

static void guard_signal(int sig, siginfo_t *si, void *uc)
{
	struct ofi_guard *g;

	(void)sig;
	(void)si;
	if (guard_idx < 0)
		return;
	g = &guards[guard_idx];
	if (!__atomic_load_n(&g->escape, __ATOMIC_ACQUIRE) ||
	    __atomic_load_n(&g->since_ns, __ATOMIC_ACQUIRE) == 0 || !guard_in_spin(uc))
		return;
	__atomic_store_n(&g->escape, 0, __ATOMIC_RELAXED);
	siglongjmp(g->jmp, 1);
}

/* Once per process: locate pthread_spin_lock and claim the signal, unless someone owns it. */
static void guard_setup(void)
{
	struct sigaction sa = { .sa_sigaction = guard_signal,
				.sa_flags = SA_SIGINFO | SA_NODEFER | SA_RESTART };
	struct sigaction old;
	const ElfW(Sym) *sym = NULL;
	Dl_info info;
	void *f = dlsym(RTLD_DEFAULT, "pthread_spin_lock");

	pthread_key_create(&guard_key, guard_release);
	if (f == NULL || dladdr1(f, &info, (void **)&sym, RTLD_DL_SYMENT) == 0 || sym == NULL ||
	    sym->st_size == 0) {
		MK_INFO(MK_SUBSYS_NET, "ofi: shm: pthread_spin_lock not located; a peer that dies "
				       "holding a shm lock cannot be escaped from");
		return;
	}
	spin_lo = (uintptr_t)f;
	spin_hi = spin_lo + sym->st_size;
	sigaction(GUARD_SIGNAL, NULL, &old);
	if ((old.sa_flags & SA_SIGINFO)
		    ? old.sa_sigaction != NULL
		    : (old.sa_handler != SIG_DFL && old.sa_handler != SIG_IGN)) {
		MK_INFO(MK_SUBSYS_NET,
			"ofi: shm: signal %d has a handler already; a peer that dies holding a shm "
			"lock cannot be escaped from",
			GUARD_SIGNAL);
		return;
	}
	sigemptyset(&sa.sa_mask);
	__atomic_store_n(&guard_usable, sigaction(GUARD_SIGNAL, &sa, NULL) == 0, __ATOMIC_RELEASE);
}

/* This thread's guard slot (claimed on first use), or NULL when all are taken. */
static struct ofi_guard *guard_self(void)
{
	if (guard_idx >= 0)
		return &guards[guard_idx];
	for (int i = 0; i < GUARD_SLOTS; i++) {
		int expect = 0;

		if (__atomic_compare_exchange_n(&guards[i].used, &expect, 1, false,
						__ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
			guards[i].thread = pthread_self();
			guard_idx = i;
			pthread_setspecific(guard_key, (void *)(uintptr_t)(i + 1));
			return &guards[i];
		}
	}
	return NULL;
}

static int guard_escaped(struct mk_ofi_conn *conn, struct ofi_guard *g)
{
	__atomic_store_n(&g->since_ns, 0, __ATOMIC_RELEASE);
	conn->wedged = true;
	conn->err = -ECONNRESET;
	MK_WARN("ofi: %s: peer process %d died holding a lock of the shm provider; the call was "
		"abandoned and the connection is broken (its provider objects stay until exit)",
		conn->dev->props.name, conn->peer_pid);
	return -ECONNRESET;
}

/* The calls that can meet a lock a peer holds: post a write (or inject one), a read; read a CQ. */
enum guard_call { GUARD_WRITE, GUARD_INJECT, GUARD_READ, GUARD_CQ };

/* The provider objects of one call: every lane has its own endpoint and CQ. */
struct guard_args {
	struct fid_ep *ep;
	struct fid_cq *cq;
	const struct fi_msg_rma *msg;
	uint64_t flags;
	struct fi_cq_data_entry *ent;
	size_t count;
};

static ssize_t guard_call(enum guard_call call, const struct guard_args *a)
{
	switch (call) {
	case GUARD_WRITE:
		return fi_writemsg(a->ep, a->msg, a->flags);
	case GUARD_INJECT:
		if (a->flags & FI_REMOTE_CQ_DATA)
			return fi_inject_writedata(a->ep, a->msg->msg_iov[0].iov_base,
						   a->msg->msg_iov[0].iov_len, a->msg->data,
						   a->msg->addr, a->msg->rma_iov[0].addr,
						   a->msg->rma_iov[0].key);
		return fi_inject_write(a->ep, a->msg->msg_iov[0].iov_base,
				       a->msg->msg_iov[0].iov_len, a->msg->addr,
				       a->msg->rma_iov[0].addr, a->msg->rma_iov[0].key);
	case GUARD_READ:
		return fi_readmsg(a->ep, a->msg, a->flags);
	default:
		return fi_cq_read(a->cq, a->ent, a->count);
	}
}

static ssize_t guarded(struct mk_ofi_conn *conn, enum guard_call call, const struct guard_args *a,
		       uint64_t now)
{
	struct ofi_guard *g;
	ssize_t rc;

	if (conn->peer_pid == 0)
		return guard_call(call, a);
	if (conn->wedged)
		return conn->err;
	g = __atomic_load_n(&guard_usable, __ATOMIC_ACQUIRE) ? guard_self() : NULL;
	if (g == NULL)
		return guard_call(call, a);
	g->pidfd = conn->peer_pidfd;
	g->pid = conn->peer_pid;
	if (sigsetjmp(g->jmp, 0))
		return guard_escaped(conn, g);
	__atomic_store_n(&g->since_ns, now, __ATOMIC_RELEASE);
	rc = guard_call(call, a);
	__atomic_store_n(&g->since_ns, 0, __ATOMIC_RELEASE);
	return rc;
}

ssize_t mk_ofi_guarded_rma(struct mk_ofi_conn *conn, struct fid_ep *ep, bool write,
			   const struct fi_msg_rma *msg, uint64_t flags, uint64_t now)
{
	const struct guard_args a = { .ep = ep, .msg = msg, .flags = flags };

	return guarded(conn, write ? GUARD_WRITE : GUARD_READ, &a, now);
}

ssize_t mk_ofi_guarded_inject(struct mk_ofi_conn *conn, struct fid_ep *ep,
			      const struct fi_msg_rma *msg, uint64_t flags, uint64_t now)
{
	const struct guard_args a = { .ep = ep, .msg = msg, .flags = flags };

	return guarded(conn, GUARD_INJECT, &a, now);
}

ssize_t mk_ofi_guarded_cq_read(struct mk_ofi_conn *conn, struct fid_cq *cq,
			       struct fi_cq_data_entry *ent, size_t count, uint64_t now)
{
	const struct guard_args a = { .cq = cq, .ent = ent, .count = count };

	return guarded(conn, GUARD_CQ, &a, now);
}

static bool guard_peer_gone(int pidfd, int pid)
{
	struct pollfd pfd = { .fd = pidfd, .events = POLLIN };

	if (pidfd >= 0)
		return poll(&pfd, 1, 0) == 1;
	return kill(pid, 0) != 0 && errno == ESRCH;
}

static void *guard_main(void *arg)
{
	struct timespec ts = { .tv_nsec = (long)GUARD_PERIOD_NS };

	(void)arg;
	while (!__atomic_load_n(&guard_stop, __ATOMIC_ACQUIRE)) {
		uint64_t now;

		nanosleep(&ts, NULL);
		now = mk_now_ns();
		for (int i = 0; i < GUARD_SLOTS; i++) {
			struct ofi_guard *g = &guards[i];
			uint64_t since = __atomic_load_n(&g->since_ns, __ATOMIC_ACQUIRE);

			if (!__atomic_load_n(&g->used, __ATOMIC_ACQUIRE) || since == 0 ||
			    now - since < GUARD_STUCK_NS || !guard_peer_gone(g->pidfd, g->pid))
				continue;
			/* asked again every period until the thread is caught spinning */
			__atomic_store_n(&g->escape, 1, __ATOMIC_RELEASE);
			pthread_kill(g->thread, GUARD_SIGNAL);
		}
	}
	return NULL;
}

void mk_ofi_guard_watch(void)
{
	pthread_once(&guard_once, guard_setup);
	if (!__atomic_load_n(&guard_usable, __ATOMIC_ACQUIRE))
		return;
	pthread_mutex_lock(&guard_lock);
	if (guard_watchers++ == 0) {
		__atomic_store_n(&guard_stop, 0, __ATOMIC_RELEASE);
		if (pthread_create(&guard_thread, NULL, guard_main, NULL) != 0) {
			guard_watchers = 0;
			MK_WARN_ONCE(
				"ofi: shm: no watchdog thread (%s); a peer that dies holding a "
				"shm lock cannot be escaped from",
				strerror(errno));
		}
	}
	pthread_mutex_unlock(&guard_lock);
}

void mk_ofi_guard_unwatch(void)
{
	if (!__atomic_load_n(&guard_usable, __ATOMIC_ACQUIRE))
		return;
	/* joined under the lock: a watch racing with the last unwatch starts a fresh thread */
	pthread_mutex_lock(&guard_lock);
	if (guard_watchers > 0 && --guard_watchers == 0) {
		__atomic_store_n(&guard_stop, 1, __ATOMIC_RELEASE);
		pthread_join(guard_thread, NULL);
	}
	pthread_mutex_unlock(&guard_lock);
}
