// SPDX-License-Identifier: Apache-2.0
/* The raw benchmarks' control socket, clock and size lists (rawbench_ctl.h). */
#include "rawbench_ctl.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static void ctl_die(const char *what)
{
	fprintf(stderr, "%s: %s: %s\n", program_invocation_short_name, what, strerror(errno));
	exit(1);
}

int rb_serve(int port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	socklen_t len = sizeof(sa);
	int one = 1, ls, fd;

	ls = socket(AF_INET, SOCK_STREAM, 0);
	if (ls < 0)
		ctl_die("socket");
	setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(ls, (struct sockaddr *)&sa, sizeof(sa)) || listen(ls, 1))
		ctl_die("bind/listen");
	getsockname(ls, (struct sockaddr *)&sa, &len);
	printf("listening %d\n", ntohs(sa.sin_port));
	fflush(stdout);
	fd = accept(ls, NULL, NULL);
	if (fd < 0)
		ctl_die("accept");
	close(ls);
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

int rb_connect(const char *hostport)
{
	struct addrinfo hints = { .ai_family = AF_INET, .ai_socktype = SOCK_STREAM }, *ai;
	char host[256];
	const char *colon = strrchr(hostport, ':');
	int fd, one = 1;

	if (colon == NULL || (size_t)(colon - hostport) >= sizeof(host)) {
		fprintf(stderr, "%s: --client wants HOST:PORT\n", program_invocation_short_name);
		exit(2);
	}
	memcpy(host, hostport, (size_t)(colon - hostport));
	host[colon - hostport] = '\0';
	if (getaddrinfo(host, colon + 1, &hints, &ai))
		ctl_die("getaddrinfo");
	fd = socket(AF_INET, SOCK_STREAM, 0);
	for (int tries = 0; connect(fd, ai->ai_addr, ai->ai_addrlen) != 0; tries++) {
		if (tries == 100)
			ctl_die("connect to the server");
		usleep(50 * 1000); /* the server may still be starting */
	}
	freeaddrinfo(ai);
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

void rb_send(int fd, const void *b, size_t n)
{
	if (send(fd, b, n, MSG_NOSIGNAL) != (ssize_t)n)
		ctl_die("control socket send");
}

void rb_recv(int fd, void *b, size_t n)
{
	if (recv(fd, b, n, MSG_WAITALL) != (ssize_t)n)
		ctl_die("control socket recv");
}

void rb_barrier(int fd)
{
	char c = 'b';

	rb_send(fd, &c, 1);
	rb_recv(fd, &c, 1);
}

double rb_now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int rb_parse_sizes(const char *s, uint64_t *sizes, int max)
{
	int n = 0;
	char *end;

	while (*s != '\0' && n < max) {
		unsigned long long v = strtoull(s, &end, 0);

		if (end == s)
			break;
		if (*end == 'K' || *end == 'k')
			v <<= 10, end++;
		else if (*end == 'M' || *end == 'm')
			v <<= 20, end++;
		sizes[n++] = v;
		s = *end == ',' ? end + 1 : end;
	}
	return n;
}

int rb_cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}
