// SPDX-License-Identifier: Apache-2.0
/*
 * What the raw benchmarks (mkernel-rawbench-ofi, mkernel-rawbench-verbs) share outside their
 * transport: the TCP control socket the two processes meet on, the clock, and size lists. Every
 * failure here prints the tool's name and what failed, and exits (1; 2 for a bad HOST:PORT).
 */
#ifndef MK_RAWBENCH_CTL_H
#define MK_RAWBENCH_CTL_H

#include <stddef.h>
#include <stdint.h>

/* Server: bind (port 0 = any), print "listening PORT", accept one client; its socket. */
int rb_serve(int port);
/* Client: connect to HOST:PORT, retrying for 5 s while the server starts; its socket. */
int rb_connect(const char *hostport);
void rb_send(int fd, const void *b, size_t n);
void rb_recv(int fd, void *b, size_t n);
/* Both sides reach this point before either goes on. */
void rb_barrier(int fd);

double rb_now_s(void);
/* "4096,64K,1M" into sizes (at most max); returns how many. */
int rb_parse_sizes(const char *s, uint64_t *sizes, int max);
/* qsort order of doubles. */
int rb_cmp_double(const void *a, const void *b);

#endif /* MK_RAWBENCH_CTL_H */
