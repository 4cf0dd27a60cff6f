// SPDX-License-Identifier: Apache-2.0
/*
 * The live set of mkComm_t values and the quarantine of destroyed comms' headers (comm_live.h).
 * A process makes a handful of comms, so both are small arrays under one lock, grown on demand;
 * a lookup compares pointer values only.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>

#include "fused/runtime/comm_live.h"

struct live_set {
	const void **v;
	size_t n, cap;
};

static pthread_mutex_t live_lock = PTHREAD_MUTEX_INITIALIZER;
static struct live_set live;	   /* handed out, not yet destroyed */
static struct live_set quarantine; /* destroyed: kept reachable, never freed */

static int set_add(struct live_set *s, const void *p)
{
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 16;
		const void **v = realloc(s->v, cap * sizeof(*v));

		if (v == NULL)
			return -ENOMEM;
		s->v = v;
		s->cap = cap;
	}
	s->v[s->n++] = p;
	return 0;
}

static long set_find(const struct live_set *s, const void *p)
{
	for (size_t i = 0; i < s->n; i++)
		if (s->v[i] == p)
			return (long)i;
	return -1;
}

int mk_comm_live_add(const void *c)
{
	int rc;

	pthread_mutex_lock(&live_lock);
	rc = set_find(&live, c) >= 0 ? -EEXIST : set_add(&live, c);
	pthread_mutex_unlock(&live_lock);
	return rc;
}

int mk_comm_live_check(const void *c)
{
	long i;

	if (c == NULL)
		return -EBADF;
	pthread_mutex_lock(&live_lock);
	i = set_find(&live, c);
	pthread_mutex_unlock(&live_lock);
	return i >= 0 ? 0 : -EBADF;
}

int mk_comm_live_take(const void *c)
{
	long i;

	if (c == NULL)
		return -EBADF;
	pthread_mutex_lock(&live_lock);
	i = set_find(&live, c);
	if (i >= 0)
		live.v[i] = live.v[--live.n];
	pthread_mutex_unlock(&live_lock);
	return i >= 0 ? 0 : -EBADF;
}

void mk_comm_quarantine(void *c)
{
	if (c == NULL)
		return;
	pthread_mutex_lock(&live_lock);
	/* without room to remember it the header is lost, not freed: still never reused */
	(void)set_add(&quarantine, c);
	pthread_mutex_unlock(&live_lock);
}
