// SPDX-License-Identifier: Apache-2.0
/*
 * The registration cache (see mk/mr_cache.h). One list for the process under one mutex: NCCL
 * registers tens of buffers, not thousands, and registration runs off the data path.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "mk/compiler.h"
#include "mk/core_params.h"
#include "mk/err.h"
#include "mk/log.h"
#include "mk/mr_cache.h"

static pthread_mutex_t mr_lock = PTHREAD_MUTEX_INITIALIZER;
static struct mk_mr *mr_list;
static struct mk_mr *mr_free; /* released entries: stale handles stay readable */
static struct mk_mr_stats mr_stats;

static uintptr_t mr_page_size(void)
{
	static uintptr_t page;

	if (page == 0)
		page = (uintptr_t)sysconf(_SC_PAGESIZE);
	return page;
}

static struct mk_mr *mr_find(const struct mk_transport_ops *ops, int dev, int type, uintptr_t start,
			     uintptr_t end)
{
	for (struct mk_mr *m = mr_list; m != NULL; m = m->next)
		if (m->ops == ops && m->dev == dev && m->type == type && m->start <= start &&
		    end <= m->end)
			return m;
	return NULL;
}

/*
 * A range the caller may not register: one that wraps around the address space, or host memory
 * of which a page is not mapped (msync(MS_ASYNC) checks the mappings and does nothing else on
 * Linux). Some providers register host memory without touching it (tcp, shm), so without this
 * check a registration of unmapped memory, or of 2^62 bytes, would succeed and fail later.
 * Device memory is left to the backend: it is not mapped in the host's page tables.
 */
static int mr_range_check(void *addr, size_t len, const struct mk_mr_attr *attr, uintptr_t page)
{
	uintptr_t a = (uintptr_t)addr, start;

	if (len > UINTPTR_MAX - a - page) {
		MK_WARN("registering %p + %zu bytes: the range wraps around the address space",
			addr, len);
		return -EINVAL;
	}
	if (attr->type != MK_PTR_HOST || attr->dmabuf_fd >= 0)
		return 0;
	start = MK_ALIGN_DOWN(a, page);
	if (msync((void *)start, MK_ALIGN_UP(a + (len ? len : 1), page) - start, MS_ASYNC) != 0) {
		MK_WARN("registering %p + %zu bytes: %s", addr, len,
			errno == ENOMEM ? "part of the range is not mapped" : strerror(errno));
		return -EINVAL;
	}
	return 0;
}

int mk_mr_get(const struct mk_transport_ops *ops, int dev, void *addr, size_t len,
	      const struct mk_mr_attr *attr, struct mk_mr **out)
{
	uintptr_t page = mr_page_size();
	uintptr_t start = MK_ALIGN_DOWN((uintptr_t)addr, page);
	uintptr_t end = MK_ALIGN_UP((uintptr_t)addr + (len ? len : 1), page);
	/* DMA-BUF registrations describe the fd's pages, not a VA range: never widen them. */
	int widen = attr->dmabuf_fd < 0;
	struct mk_mr *m;
	int rc;

	if (addr == NULL || out == NULL)
		return -EINVAL;
	rc = mr_range_check(addr, len, attr, page);
	if (rc)
		return rc;
	if (!widen) {
		start = (uintptr_t)addr;
		end = (uintptr_t)addr + len;
	}
	pthread_mutex_lock(&mr_lock);
	if (mk_param_mr_cache()) {
		m = mr_find(ops, dev, attr->type, start, end);
		if (m != NULL) {
			m->refs++;
			mr_stats.hits++;
			*out = m;
			rc = 0;
			goto unlock;
		}
	}
	m = mr_free;
	if (m != NULL)
		mr_free = m->next;
	else
		m = malloc(sizeof(*m));
	if (m != NULL)
		memset(m, 0, sizeof(*m));
	if (m == NULL) {
		rc = -ENOMEM;
		goto unlock;
	}
	m->ops = ops;
	m->dev = dev;
	m->type = attr->type;
	m->start = start;
	m->end = end;
	rc = ops->reg_mr(dev, (void *)start, end - start, attr, &m->bmr, &m->rkey);
	if (rc) {
		MK_WARN("%s: registering %p+%zu (pages 0x%lx-0x%lx, type %d, dmabuf fd %d) on dev "
			"%d failed: %s",
			ops->name, addr, len, (unsigned long)start, (unsigned long)end, attr->type,
			attr->dmabuf_fd, dev, mk_strerror(rc));
		goto undo_alloc;
	}
	m->refs = 1;
	__atomic_store_n(&m->magic, MK_MR_MAGIC, __ATOMIC_RELAXED);
	m->next = mr_list;
	mr_list = m;
	mr_stats.misses++;
	mr_stats.live++;
	*out = m;
	goto unlock;

undo_alloc:
	m->next = mr_free;
	mr_free = m;
unlock:
	pthread_mutex_unlock(&mr_lock);
	return rc;
}

int mk_mr_put(struct mk_mr *mr)
{
	struct mk_mr **pp;
	int rc = 0;

	if (mr == NULL)
		return -EINVAL;
	pthread_mutex_lock(&mr_lock);
	for (pp = &mr_list; *pp != NULL && *pp != mr; pp = &(*pp)->next)
		;
	if (*pp == NULL) {
		rc = -EINVAL; /* stale or foreign handle: refuse instead of freeing it */
		goto unlock;
	}
	if (--mr->refs > 0)
		goto unlock;
	*pp = mr->next;
	mr_stats.live--;
	rc = mr->ops->dereg_mr(mr->dev, mr->bmr);
	if (rc)
		MK_WARN("%s: deregistering 0x%lx+%lu failed: %s", mr->ops->name,
			(unsigned long)mr->start, (unsigned long)(mr->end - mr->start),
			mk_strerror(rc));
	__atomic_store_n(&mr->magic, 0, __ATOMIC_RELAXED);
	mr->next = mr_free;
	mr_free = mr;
unlock:
	pthread_mutex_unlock(&mr_lock);
	return rc;
}

void mk_mr_get_stats(struct mk_mr_stats *st)
{
	pthread_mutex_lock(&mr_lock);
	*st = mr_stats;
	pthread_mutex_unlock(&mr_lock);
}
