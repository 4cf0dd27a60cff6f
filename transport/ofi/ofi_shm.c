// SPDX-License-Identifier: Apache-2.0
/*
 * What only libfabric's shm provider needs. Its endpoints are files in /dev/shm named after the
 * owning process ("fi_shm://<pid>:..." on 1.17), which gives two hazards the other providers do
 * not have: a full /dev/shm turns the provider's first touch of a new region into SIGBUS (the
 * whole job dies, no error code), and a peer killed while holding the region's lock makes every
 * later call spin. The first is refused before the endpoint opens; the second is caught by
 * looking at the peer's process.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "mk/clock.h"
#include "mk/log.h"
#include "ofi.h"

/*
 * Bytes one endpoint's region may occupy: the size shm gives its file (16 MiB on 1.17, learned
 * from the first endpoint we open). Only a quarter is touched at open, the rest as traffic
 * needs it; asking for the whole file keeps a busy job away from SIGBUS.
 */
#define OFI_SHM_DIR	     "/dev/shm"
#define OFI_SHM_REGION_GUESS (16ull << 20)

static unsigned long long shm_region_bytes = OFI_SHM_REGION_GUESS;
static int shm_said; /* the INFO that shm is for tests was logged */

bool mk_ofi_is_shm(const struct mk_ofi_dev *d)
{
	return strcmp(d->props.provider, "shm") == 0;
}

int mk_ofi_shm_room(const struct mk_ofi_dev *d)
{
	unsigned long long need = __atomic_load_n(&shm_region_bytes, __ATOMIC_RELAXED), avail;
	struct statvfs vfs;

	if (!mk_ofi_is_shm(d) || statvfs(OFI_SHM_DIR, &vfs) != 0)
		return 0; /* no /dev/shm to measure: let the provider say what it thinks */
	avail = (unsigned long long)vfs.f_bavail * vfs.f_frsize;
	if (avail >= need)
		return 0;
	MK_WARN("ofi: %s: %s has %llu MiB free, a shm endpoint needs %llu MiB; refusing the "
		"connection instead of letting the provider fault (enlarge %s, e.g. docker "
		"--shm-size, or pick another MKERNEL_OFI_PROVIDER)",
		d->props.name, OFI_SHM_DIR, avail >> 20, need >> 20, OFI_SHM_DIR);
	return -ENOSPC;
}

/*
 * The region file behind a shm address "fi_shm://<name>" (1.17): "/dev/shm/<name>". False for
 * any other form, which leaves the checks that need it off.
 */
static bool ofi_shm_region_path(const void *addr, size_t len, char *out, size_t outlen)
{
	static const char scheme[] = "fi_shm://";
	const size_t skip = sizeof(scheme) - 1;

	if (len <= skip || len > MK_OFI_ADDR_MAX || memcmp(addr, scheme, skip) != 0)
		return false;
	snprintf(out, outlen, "%s/%.*s", OFI_SHM_DIR, (int)(len - skip), (const char *)addr + skip);
	return true;
}

void mk_ofi_shm_learn(const struct mk_ofi_conn *conn)
{
	static int learned; /* every region of a process has the same size: look once */
	char path[sizeof(OFI_SHM_DIR) + MK_OFI_ADDR_MAX + 2];
	struct stat st;

	if (__atomic_load_n(&learned, __ATOMIC_RELAXED) || !mk_ofi_is_shm(conn->dev) ||
	    !ofi_shm_region_path(conn->lanes[0].addr, conn->lanes[0].addrlen, path, sizeof(path)))
		return;
	if (stat(path, &st) == 0 && st.st_size > 0) {
		__atomic_store_n(&shm_region_bytes, (unsigned long long)st.st_size,
				 __ATOMIC_RELAXED);
		__atomic_store_n(&learned, 1, __ATOMIC_RELAXED);
	}
}

int mk_ofi_enable(struct mk_ofi_conn *conn, struct mk_ofi_lane *lane)
{
	int rc = fi_enable(lane->ep);

	/*
	 * shm names a region "<pid>:<domain>:<endpoint>". A file of that name left by a killed
	 * process whose pid we now carry makes the provider refuse with -FI_EBUSY and unlink the
	 * file, so the next attempt finds the name free. Retried a few times, not once: the name
	 * is the same each time, but the first attempt may meet a file another stale owner
	 * recreated in between.
	 */
	for (int i = 0; i < 3 && rc == -FI_EBUSY && mk_ofi_is_shm(conn->dev); i++) {
		MK_INFO(MK_SUBSYS_NET,
			"ofi: %s: a stale shm region of a dead process held our endpoint's name; "
			"retrying",
			conn->dev->props.name);
		rc = fi_enable(lane->ep);
	}
	return rc;
}

void mk_ofi_peer_watch(struct mk_ofi_conn *conn, const void *addr, size_t len)
{
	const char *name = conn->peer_region + sizeof(OFI_SHM_DIR); /* after "/dev/shm/" */
	int pid = 0;

	if (!mk_ofi_is_shm(conn->dev) ||
	    !ofi_shm_region_path(addr, len, conn->peer_region, sizeof(conn->peer_region)))
		return;
	if (sscanf(name, "%d", &pid) != 1 || pid <= 0) {
		conn->peer_region[0] = '\0'; /* another naming scheme: leave the checks off */
		return;
	}
	conn->peer_pid = pid;
	/*
	 * A pidfd turns readable when the process exits, zombie or reaped, and cannot be fooled by
	 * the pid being handed to a newer process; kill(pid, 0) is only the fallback (kernels
	 * before 5.3).
	 */
	conn->peer_pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (!__atomic_exchange_n(&shm_said, 1, __ATOMIC_RELAXED))
		MK_INFO(MK_SUBSYS_INIT | MK_SUBSYS_NET,
			"ofi: %s: shm is meant for tests and single-host runs (NCCL's own SHM "
			"transport serves one host in production): a peer killed inside the "
			"provider can leave a lock of a shared region taken; the backend then "
			"breaks that connection instead of waiting, and keeps its resources until "
			"exit",
			conn->dev->props.name);
	mk_ofi_guard_watch();
	conn->guarded = true;
}

void mk_ofi_peer_unwatch(struct mk_ofi_conn *conn)
{
	if (conn->peer_pidfd >= 0)
		close(conn->peer_pidfd);
	conn->peer_pidfd = -1;
	if (conn->guarded)
		mk_ofi_guard_unwatch();
	conn->guarded = false;
}

int mk_ofi_shm_peer_present(const struct mk_ofi_conn *conn, const void *addr, size_t len)
{
	char path[sizeof(OFI_SHM_DIR) + MK_OFI_ADDR_MAX + 2];

	if (!mk_ofi_is_shm(conn->dev) || !ofi_shm_region_path(addr, len, path, sizeof(path)) ||
	    access(path, F_OK) == 0 || errno != ENOENT)
		return 0;
	MK_WARN("ofi: %s: the peer's endpoint %s is gone (closed or exited): refusing to connect",
		conn->dev->props.name, path);
	return -ECONNREFUSED;
}

/* Without a pidfd: gone, or a zombie nobody reaped yet (its region is as dead as it is). */
static bool ofi_pid_exited(int pid)
{
	char path[32], stat[256];
	const char *paren;
	ssize_t n;
	int fd;

	if (kill(pid, 0) != 0)
		return errno == ESRCH;
	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	n = read(fd, stat, sizeof(stat) - 1);
	close(fd);
	if (n <= 0)
		return false;
	stat[n] = '\0';
	paren = strrchr(stat, ')'); /* the name may hold spaces and parentheses */
	return paren != NULL && (paren[2] == 'Z' || paren[2] == 'X');
}

static bool ofi_peer_exited(const struct mk_ofi_conn *conn)
{
	struct pollfd pfd = { .fd = conn->peer_pidfd, .events = POLLIN };

	if (conn->peer_pidfd < 0)
		return ofi_pid_exited(conn->peer_pid);
	return poll(&pfd, 1, 0) == 1;
}

bool mk_ofi_peer_left_cleanly(const struct mk_ofi_conn *conn)
{
	return conn->peer_region[0] != '\0' && access(conn->peer_region, F_OK) != 0 &&
	       errno == ENOENT;
}

int mk_ofi_peer_gone(struct mk_ofi_conn *conn, uint64_t now)
{
	/*
	 * A syscall on every post and poll costs more than the shm transfer itself: while
	 * completions keep arriving look at most every 100 us; a connection quiet for longer is
	 * checked before every call (its peer may have died in the silence). A peer dying between
	 * the check and the provider's lock is left to the guard (ofi_guard.c).
	 */
	if (conn->err == 0 && now - conn->peer_checked_ns < 100000 &&
	    now - conn->last_cq_ns < 100000)
		return 0;
	conn->peer_checked_ns = now;
	if (!ofi_peer_exited(conn))
		return 0;
	if (conn->err == 0) {
		MK_WARN("ofi: %s: peer process %d is gone", conn->dev->props.name, conn->peer_pid);
		conn->err = -ECONNRESET;
	}
	return conn->err;
}
