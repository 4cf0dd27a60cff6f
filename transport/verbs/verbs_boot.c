// SPDX-License-Identifier: Apache-2.0
/*
 * Bootstrap of the verbs backend: what travels before the queue pairs exist. The listen handle's
 * encoding (the listener's TCP address and a nonce, with a checksum), the local address it
 * names, and the non-blocking TCP socket the setup messages cross (listen, accept, dial, move
 * bytes). Nothing here knows a queue pair; verbs_conn.c drives these steps.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "mk/err.h"
#include "mk/log.h"
#include "verbs.h"

uint64_t mk_verbs_boot_random64(void)
{
	uint64_t v = 0;

	if (getrandom(&v, sizeof(v), GRND_NONBLOCK) != (ssize_t)sizeof(v))
		v = mk_now_ns() ^ ((uint64_t)getpid() << 32);
	return v;
}

int mk_verbs_handle_encode(void *buf, uint32_t ip, uint16_t port, uint64_t nonce)
{
	struct mk_verbs_handle h;

	memset(&h, 0, sizeof(h));
	h.magic = MK_VERBS_HANDLE_MAGIC;
	h.version = MK_VERBS_VERSION;
	h.size = sizeof(h);
	h.nonce = nonce;
	h.ip = ip;
	h.port = port;
	h.check = mk_fnv1a32(&h, offsetof(struct mk_verbs_handle, check));
	memcpy(buf, &h, sizeof(h));
	return 0;
}

int mk_verbs_handle_decode(const void *buf, struct mk_verbs_handle *out)
{
	struct mk_verbs_handle h;
	const char *why = NULL;

	if (buf == NULL) {
		MK_WARN("verbs: connect with a NULL handle");
		return -EINVAL;
	}
	memcpy(&h, buf, sizeof(h));
	if (h.magic != MK_VERBS_HANDLE_MAGIC)
		why = "not a verbs handle (wrong magic)";
	else if (h.version != MK_VERBS_VERSION)
		why = "unsupported handle version";
	else if (h.size != sizeof(h) || h.reserved != 0 || h.reserved2 != 0)
		why = "malformed handle";
	else if (h.check != mk_fnv1a32(&h, offsetof(struct mk_verbs_handle, check)))
		why = "handle checksum mismatch (corrupted)";
	else if (h.ip == 0 || h.port == 0)
		why = "handle names no address";
	if (why != NULL) {
		MK_WARN("verbs: rejecting connect handle: %s", why);
		return -EINVAL;
	}
	*out = h;
	return 0;
}

/*
 * IPv4 of MKERNEL_SOCKET_IFNAME, else of the first interface that is up and neither loopback nor a
 * docker/virbr bridge, else 127.0.0.1.
 */
uint32_t mk_verbs_boot_local_ip(void)
{
	const char *want = mk_param_ib_socket_ifname();
	struct ifaddrs *ifs, *i;
	uint32_t ip = htonl(INADDR_LOOPBACK);

	if (getifaddrs(&ifs))
		return ip;
	for (i = ifs; i != NULL; i = i->ifa_next) {
		if (i->ifa_addr == NULL || i->ifa_addr->sa_family != AF_INET ||
		    !(i->ifa_flags & IFF_UP))
			continue;
		if (want != NULL && *want != '\0') {
			if (strcmp(i->ifa_name, want) != 0)
				continue;
		} else if ((i->ifa_flags & IFF_LOOPBACK) ||
			   strncmp(i->ifa_name, "docker", 6) == 0 ||
			   strncmp(i->ifa_name, "virbr", 5) == 0) {
			continue; /* host-local bridges do not reach other nodes */
		}
		ip = ((struct sockaddr_in *)i->ifa_addr)->sin_addr.s_addr;
		break;
	}
	if (i == NULL && want != NULL && *want != '\0')
		MK_WARN("verbs: MKERNEL_SOCKET_IFNAME=%s has no IPv4 address; using 127.0.0.1",
			want);
	freeifaddrs(ifs);
	return ip;
}

/*
 * A listening TCP socket on every address, non-blocking; its port in network order. WARNs on a
 * failure. 0 or -errno.
 */
int mk_verbs_boot_listen(int *fd, uint16_t *port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_ANY) };
	socklen_t salen = sizeof(sa);
	int s, rc;

	s = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (s < 0)
		return -errno;
	if (bind(s, (struct sockaddr *)&sa, sizeof(sa)) || listen(s, 16) ||
	    getsockname(s, (struct sockaddr *)&sa, &salen)) {
		rc = -errno;
		MK_WARN("verbs: listen socket: %s", mk_strerror(rc));
		close(s);
		return rc;
	}
	*fd = s;
	*port = sa.sin_port;
	return 0;
}

/* One pending connection of listener lfd: 1 and *fd, 0 when none is waiting, -errno. */
int mk_verbs_boot_accept(int lfd, int *fd)
{
	int s = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC), one = 1;

	if (s < 0)
		return errno == EAGAIN || errno == EWOULDBLOCK || errno == ECONNABORTED ||
				       errno == EINTR
			       ? 0
			       : -errno;
	setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	*fd = s;
	return 1;
}

/*
 * Start a non-blocking connect to (ip, port), both in network order: 1 connected, 0 in progress,
 * -errno when it failed at once (*fd is set whenever a socket was made: the caller closes it).
 */
int mk_verbs_boot_dial(uint32_t ip, uint16_t port, int *fd)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_addr.s_addr = ip, .sin_port = port };
	int one = 1;

	*fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (*fd < 0)
		return -errno;
	setsockopt(*fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (connect(*fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
		return 1;
	return errno == EINPROGRESS ? 0 : -errno;
}

/* A connect in progress on fd: 1 connected, 0 still in progress, -errno when it failed. */
int mk_verbs_boot_dial_done(int fd)
{
	struct pollfd pfd = { .fd = fd, .events = POLLOUT };
	socklen_t len = sizeof(int);
	int err = 0;

	if (poll(&pfd, 1, 0) <= 0)
		return 0;
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0)
		return 1;
	return -err;
}

/* The listener is not there (yet), or dropped us: worth dialling again until the deadline. */
bool mk_verbs_boot_retryable(int rc)
{
	return rc == -ECONNREFUSED || rc == -ECONNRESET || rc == -ETIMEDOUT ||
	       rc == -EHOSTUNREACH || rc == -ENETUNREACH || rc == -EAGAIN;
}

/* Move bytes of one setup message: 1 done, 0 would block, -errno (-ECONNRESET on EOF). */
int mk_verbs_boot_io(int fd, bool out, void *buf, size_t len, size_t *done)
{
	while (*done < len) {
		ssize_t n = out ? send(fd, (char *)buf + *done, len - *done,
				       MSG_NOSIGNAL | MSG_DONTWAIT)
				: recv(fd, (char *)buf + *done, len - *done, MSG_DONTWAIT);

		if (n > 0) {
			*done += (size_t)n;
			continue;
		}
		if (n == 0)
			return -ECONNRESET;
		if (errno == EINTR)
			continue;
		if (errno == EAGAIN || errno == EWOULDBLOCK)
			return 0;
		return -errno;
	}
	return 1;
}
