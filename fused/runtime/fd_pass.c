// SPDX-License-Identifier: Apache-2.0
/*
 * fds between the processes of one node over abstract Unix sockets (fd_pass.h). Every blocking
 * step is a poll() bounded by the caller's deadline: a peer that died or never came gives
 * -ETIMEDOUT, never a hang.
 */
#define MK_LOG_PREFIX "RUNTIME/mkernel"

#include "fused/runtime/fd_pass.h"

#include <errno.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "mk/clock.h"
#include "mk/err.h"
#include "mk/log.h"

/* What travels with the fd. */
struct fdpass_msg {
	uint64_t nonce;
	uint64_t value;
	int32_t rank;
	int32_t pid;
};

/* "\0mkernel-fd-<nonce>-<pid>-<rank>": abstract, gone with the last socket that holds it. */
static socklen_t fdpass_addr(struct sockaddr_un *a, uint64_t nonce, int32_t pid, int32_t rank)
{
	int len;

	memset(a, 0, sizeof(*a));
	a->sun_family = AF_UNIX;
	len = snprintf(a->sun_path + 1, sizeof(a->sun_path) - 1, "mkernel-fd-%016llx-%d-%d",
		       (unsigned long long)nonce, (int)pid, (int)rank);
	return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)len);
}

/* Milliseconds left before deadline (ns), 0 once past it. */
static int fdpass_left_ms(uint64_t deadline)
{
	uint64_t now = mk_now_ns();

	return now >= deadline ? 0 : (int)((deadline - now + 999999u) / 1000000u);
}

/* Waits for events on fd until deadline: 0, -ETIMEDOUT or -errno. */
static int fdpass_wait(int fd, short events, uint64_t deadline)
{
	for (;;) {
		struct pollfd p = { .fd = fd, .events = events };
		int n = poll(&p, 1, fdpass_left_ms(deadline));

		if (n > 0)
			return 0;
		if (n == 0)
			return -ETIMEDOUT;
		if (errno != EINTR)
			return -errno;
	}
}

int mk_fdpass_listen(struct mk_fdpass *fp, uint64_t nonce, int32_t pid, int32_t rank, int backlog)
{
	struct sockaddr_un a;
	socklen_t len = fdpass_addr(&a, nonce, pid, rank);
	int rc;

	fp->lfd = -1;
	fp->nonce = nonce;
	fp->pid = pid;
	fp->rank = rank;
	fp->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fp->lfd < 0)
		return -errno;
	if (bind(fp->lfd, (struct sockaddr *)&a, len) != 0 || listen(fp->lfd, backlog) != 0) {
		rc = -errno;
		MK_WARN("rank %d: cannot listen on Unix socket @%s: %s", rank, a.sun_path + 1,
			mk_strerror(rc));
		mk_fdpass_close(fp);
		return rc;
	}
	return 0;
}

/* Connects to peer's listener; a full backlog (EAGAIN) is retried until deadline. */
static int fdpass_connect(const struct mk_fdpass *fp, const struct mk_fdpass_peer *peer,
			  uint64_t deadline, int *out)
{
	struct sockaddr_un a;
	socklen_t len = fdpass_addr(&a, fp->nonce, peer->pid, peer->rank);
	int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);

	if (s < 0)
		return -errno;
	while (connect(s, (struct sockaddr *)&a, len) != 0) {
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN || fdpass_left_ms(deadline) == 0) {
			int rc = errno == EAGAIN ? -ETIMEDOUT : -errno;

			close(s);
			return rc;
		}
		usleep(1000);
	}
	*out = s;
	return 0;
}

int mk_fdpass_send(const struct mk_fdpass *fp, const struct mk_fdpass_peer *peer, int fd,
		   uint64_t value, int timeout_ms)
{
	const uint64_t deadline = mk_now_ns() + (uint64_t)timeout_ms * 1000000u;
	struct fdpass_msg m = { fp->nonce, value, fp->rank, fp->pid };
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(sizeof(int))];
	} ctl;
	struct iovec iov = { &m, sizeof(m) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	struct cmsghdr *cm;
	int s = -1, rc;
	ssize_t n;

	memset(&ctl, 0, sizeof(ctl));
	mh.msg_control = ctl.buf;
	mh.msg_controllen = sizeof(ctl.buf);
	cm = CMSG_FIRSTHDR(&mh);
	cm->cmsg_level = SOL_SOCKET;
	cm->cmsg_type = SCM_RIGHTS;
	cm->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(cm), &fd, sizeof(int));
	rc = fdpass_connect(fp, peer, deadline, &s);
	if (rc)
		goto out;
	do {
		rc = fdpass_wait(s, POLLOUT, deadline);
		if (rc)
			break;
		n = sendmsg(s, &mh, MSG_NOSIGNAL);
		rc = n == (ssize_t)sizeof(m) ? 0 : n < 0 ? -errno : -EIO;
	} while (rc == -EAGAIN || rc == -EINTR);
	/* Closing right away is safe: the message and its fd wait in the peer's queue. */
	close(s);
out:
	if (rc)
		MK_WARN("rank %d: sending an fd to rank %d (pid %d) failed: %s", fp->rank,
			peer->rank, peer->pid, mk_strerror(rc));
	return rc;
}

/* Reads one message with exactly one fd from s: 0 (*fd >= 0), -EPROTO or -errno. */
static int fdpass_read(int s, struct fdpass_msg *m, int *fd, uint64_t deadline)
{
	union {
		struct cmsghdr h;
		char buf[CMSG_SPACE(4 * sizeof(int))];
	} ctl;
	struct iovec iov = { m, sizeof(*m) };
	struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
	int nfd = 0, rc;
	ssize_t n;

	*fd = -1;
	do {
		rc = fdpass_wait(s, POLLIN, deadline);
		if (rc)
			return rc;
		mh.msg_control = ctl.buf;
		mh.msg_controllen = sizeof(ctl.buf);
		n = recvmsg(s, &mh, MSG_CMSG_CLOEXEC);
	} while (n < 0 && (errno == EAGAIN || errno == EINTR));
	if (n < 0)
		return -errno;
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm != NULL; cm = CMSG_NXTHDR(&mh, cm)) {
		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		for (size_t i = 0; i < (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++) {
			int got;

			memcpy(&got, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
			if (nfd++ == 0)
				*fd = got;
			else
				close(got);
		}
	}
	if (n == (ssize_t)sizeof(*m) && nfd == 1 && !(mh.msg_flags & (MSG_CTRUNC | MSG_TRUNC)))
		return 0;
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
	return -EPROTO;
}

/* Index in peers of the sender of m (checked against the socket's credentials), or -1. */
static int fdpass_sender(const struct mk_fdpass *fp, const struct mk_fdpass_peer *peers, int n,
			 const struct fdpass_msg *m, int s)
{
	struct ucred cred;
	socklen_t len = sizeof(cred);

	/* another user's process on the node must not hand us memory */
	if (getsockopt(s, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || cred.uid != geteuid())
		return -1;
	if (m->nonce != fp->nonce)
		return -1;
	for (int i = 0; i < n; i++) {
		if (peers[i].rank == m->rank && peers[i].pid == m->pid)
			return i;
	}
	return -1;
}

int mk_fdpass_recv(struct mk_fdpass *fp, const struct mk_fdpass_peer *peers, int n, int *fds,
		   uint64_t *values, int timeout_ms)
{
	const uint64_t deadline = mk_now_ns() + (uint64_t)timeout_ms * 1000000u;
	int got = 0, rc = 0;

	for (int i = 0; i < n; i++)
		fds[i] = -1;
	while (got < n && rc == 0) {
		struct fdpass_msg m;
		int s, fd, i;

		rc = fdpass_wait(fp->lfd, POLLIN, deadline);
		if (rc)
			break;
		s = accept4(fp->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (s < 0) {
			rc = errno == EAGAIN || errno == EINTR || errno == ECONNABORTED ? 0
											: -errno;
			continue;
		}
		rc = fdpass_read(s, &m, &fd, deadline);
		if (rc == 0) {
			i = fdpass_sender(fp, peers, n, &m, s);
			if (i < 0 || fds[i] >= 0) {
				MK_WARN("rank %d: an fd message from rank %d (pid %d) that is not "
					"one "
					"of this exchange's peers (or came twice)",
					fp->rank, m.rank, m.pid);
				close(fd);
				rc = -EPROTO;
			} else {
				fds[i] = fd;
				values[i] = m.value;
				got++;
			}
		}
		close(s);
	}
	if (rc == 0)
		return 0;
	for (int i = 0; i < n; i++) {
		if (fds[i] >= 0) {
			close(fds[i]);
			fds[i] = -1;
		} else if (rc == -ETIMEDOUT) {
			MK_WARN("rank %d: no fd from rank %d (pid %d) within %d ms", fp->rank,
				peers[i].rank, peers[i].pid, timeout_ms);
		}
	}
	return rc;
}

int mk_fdpass_exchange(struct mk_fdpass *fp, const struct mk_fdpass_peer *peers, int n, int fd,
		       uint64_t value, int *fds, uint64_t *values, int timeout_ms)
{
	const uint64_t deadline = mk_now_ns() + (uint64_t)timeout_ms * 1000000u;
	int rc;

	for (int i = 0; i < n; i++)
		fds[i] = -1;
	for (int i = 0; i < n; i++) {
		rc = mk_fdpass_send(fp, &peers[i], fd, value, fdpass_left_ms(deadline));
		if (rc)
			return rc;
	}
	return mk_fdpass_recv(fp, peers, n, fds, values, fdpass_left_ms(deadline));
}

void mk_fdpass_close(struct mk_fdpass *fp)
{
	if (fp->lfd >= 0)
		close(fp->lfd);
	fp->lfd = -1;
}
