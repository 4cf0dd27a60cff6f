// SPDX-License-Identifier: Apache-2.0
/*
 * Memory registration on a device's shared domain. Two key modes: FI_MR_PROV_KEY (the provider
 * picks, e.g. efa) or application keys (tcp, net, shm on 1.17), which must be unique per domain.
 * A remote key is all a stranger who reached the endpoint needs to write into a registration,
 * so application keys are random where the key space is wide (4 bytes and more: a duplicate is
 * refused by the provider and drawn again) and a counter with reuse only where it is too small
 * to hide anything (1-3 bytes). Registrations are global to the device, hold a
 * reference on its domain, and may run on any thread while data ops run on others (the domain
 * is opened FI_THREAD_SAFE; the device lock only guards the domain's lifetime).
 */
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "mk/err.h"
#include "mk/log.h"
#include "ofi.h"

#define OFI_MR_ACCESS (FI_READ | FI_WRITE | FI_REMOTE_READ | FI_REMOTE_WRITE | FI_SEND | FI_RECV)

/* Key spaces at least this wide get random keys. */
#define OFI_RANDOM_KEYS_MIN (1ull << 32)
/* Draws of a random key the provider may refuse as taken before giving up. */
#define OFI_KEY_DRAWS	    8

/* A random key in 1..key_limit (0 means "no key" here). */
static uint64_t ofi_random_key(const struct mk_ofi_dev *d)
{
	static uint64_t fallback;
	uint64_t k = 0;

	if (getrandom(&k, sizeof(k), GRND_NONBLOCK) != (ssize_t)sizeof(k))
		k = mk_now_ns() * 0x9e3779b97f4a7c15ull ^
		    __atomic_add_fetch(&fallback, 0xbf58476d1ce4e5b9ull, __ATOMIC_RELAXED);
	if (d->key_limit != UINT64_MAX)
		k %= d->key_limit;
	return k == 0 ? 1 : k;
}

static bool ofi_keys_random(const struct mk_ofi_dev *d)
{
	return !(d->mr_mode & FI_MR_PROV_KEY) && d->key_limit >= OFI_RANDOM_KEYS_MIN;
}

static int ofi_mr_key(struct mk_ofi_dev *d, uint64_t *key)
{
	int rc = 0;

	if (d->mr_mode & FI_MR_PROV_KEY) {
		*key = 0;
		return 0;
	}
	if (ofi_keys_random(d)) {
		*key = ofi_random_key(d);
		return 0;
	}
	*key = __atomic_fetch_add(&d->next_key, 1, __ATOMIC_RELAXED);
	if (*key <= d->key_limit)
		return 0;
	pthread_mutex_lock(&d->lock);
	if (d->free_head != d->free_tail)
		*key = d->free_keys[d->free_head++ % d->free_cap];
	else
		rc = -ENOSPC;
	pthread_mutex_unlock(&d->lock);
	if (rc)
		MK_WARN("ofi: %s ran out of memory-registration keys (%zu-byte keys, all in use)",
			d->props.name, d->info->domain_attr->mr_key_size);
	return rc;
}

void mk_ofi_key_put(struct mk_ofi_dev *d, uint64_t key)
{
	uint64_t *grown;

	if (key == 0 || ofi_keys_random(d))
		return; /* random keys are drawn again, not handed back */
	pthread_mutex_lock(&d->lock);
	if (d->free_tail - d->free_head == d->free_cap) {
		size_t cap = d->free_cap ? d->free_cap * 2 : 64;

		grown = malloc(cap * sizeof(*grown));
		if (grown == NULL)
			goto unlock; /* the key is lost, not reused: still unique */
		for (size_t i = 0; i < d->free_cap; i++)
			grown[i] = d->free_keys[(d->free_head + i) % d->free_cap];
		free(d->free_keys);
		d->free_keys = grown;
		d->free_tail = d->free_cap;
		d->free_head = 0;
		d->free_cap = cap;
	}
	d->free_keys[d->free_tail++ % d->free_cap] = key;
unlock:
	pthread_mutex_unlock(&d->lock);
}

int mk_ofi_mr_raw(struct mk_ofi_dev *d, void *addr, size_t len, uint64_t access,
		  struct fid_mr **out, uint64_t *app_key)
{
	uint64_t key;
	int rc = ofi_mr_key(d, &key);

	if (rc)
		return rc;
	rc = fi_mr_reg(d->domain, addr, len, access, 0, key, 0, out, NULL);
	/* a random key another registration holds: draw again */
	for (int i = 1; rc == -FI_ENOKEY && ofi_keys_random(d) && i < OFI_KEY_DRAWS; i++) {
		key = ofi_random_key(d);
		rc = fi_mr_reg(d->domain, addr, len, access, 0, key, 0, out, NULL);
	}
	if (rc)
		mk_ofi_key_put(d, key);
	else
		*app_key = key;
	return rc;
}

#if MK_OFI_HAVE_DMABUF
/* GPU memory: by VA through FI_HMEM_CUDA, or a DMA-BUF imported during the call. */
static int ofi_mr_reg_hmem(struct mk_ofi_dev *d, void *addr, size_t len,
			   const struct mk_mr_attr *attr, struct fid_mr **out, uint64_t *app_key)
{
	struct iovec iov = { .iov_base = addr, .iov_len = len };
	struct fi_mr_dmabuf dmabuf = {
		.fd = attr->dmabuf_fd,
		.offset = attr->dmabuf_offset,
		.len = len,
		.base_addr = addr,
	};
	struct fi_mr_attr mra = {
		.iov_count = 1,
		.access = OFI_MR_ACCESS,
		.iface = FI_HMEM_CUDA,
	};
	uint64_t flags = 0;
	int rc = ofi_mr_key(d, &mra.requested_key);

	if (rc)
		return rc;
	*app_key = mra.requested_key;
	mra.device.cuda = attr->cuda_device;
	if (attr->dmabuf_fd >= 0) {
		mra.dmabuf = &dmabuf;
		flags = FI_MR_DMABUF;
	} else {
		mra.mr_iov = &iov;
	}
	rc = fi_mr_regattr(d->domain, &mra, flags, out);
	if (rc) {
		mk_ofi_key_put(d, mra.requested_key);
		*app_key = 0;
	}
	return rc;
}
#endif

static int ofi_mr_check(const struct mk_ofi_dev *d, const struct mk_mr_attr *attr)
{
	int want = attr == NULL ? MK_PTR_HOST : attr->type;

	if (attr != NULL && attr->dmabuf_fd >= 0)
		want |= MK_PTR_DMABUF;
	if (want != MK_PTR_HOST && want != MK_PTR_CUDA && want != (MK_PTR_CUDA | MK_PTR_DMABUF))
		return -EINVAL;
	if ((d->props.ptr_support & want) != want)
		return -EOPNOTSUPP;
	return 0;
}

int mk_ofi_reg_mr(int dev, void *addr, size_t len, const struct mk_mr_attr *attr,
		  struct mk_bmr **out, struct mk_rkey *rkey)
{
	struct mk_ofi_dev *d = mk_ofi_dev_at(dev);
	struct mk_bmr *b;
	int rc;

	*out = NULL;
	if (d == NULL)
		return -ENODEV;
	rc = ofi_mr_check(d, attr);
	if (rc) {
		MK_WARN("ofi: %s cannot register %p (%zu bytes) of type %d: %s", d->props.name,
			addr, len, attr != NULL ? attr->type : MK_PTR_HOST, mk_strerror(rc));
		return rc;
	}
	b = calloc(1, sizeof(*b));
	if (b == NULL)
		return -ENOMEM;
	rc = mk_ofi_dev_get(d);
	if (rc)
		goto undo_alloc;
#if MK_OFI_HAVE_DMABUF
	if (attr != NULL && attr->type == MK_PTR_CUDA)
		rc = ofi_mr_reg_hmem(d, addr, len, attr, &b->mr, &b->app_key);
	else
#endif
		rc = mk_ofi_mr_raw(d, addr, len, OFI_MR_ACCESS, &b->mr, &b->app_key);
	if (rc) {
		MK_WARN("ofi: %s fi_mr_reg(%p, %zu bytes, type %d) failed: %s", d->props.name, addr,
			len, attr != NULL ? attr->type : MK_PTR_HOST,
			rc == -ENOSPC ? "no keys left" : mk_ofi.lib->strerror(-rc));
		rc = mk_ofi_errno(rc);
		goto undo_dev;
	}
	b->dev = d;
	b->desc = fi_mr_desc(b->mr);
	b->host = attr == NULL || attr->type == MK_PTR_HOST;
	b->base = (uint64_t)(uintptr_t)addr;
	rkey->base = b->base;
	rkey->key = fi_mr_key(b->mr);
	*out = b;
	return 0;

undo_dev:
	mk_ofi_dev_put(d);
undo_alloc:
	free(b);
	return rc;
}

int mk_ofi_dereg_mr(int dev, struct mk_bmr *mr)
{
	struct mk_ofi_dev *d = mk_ofi_dev_at(dev);
	int rc;

	if (d == NULL || mr == NULL || mr->dev != d)
		return -EINVAL;
	rc = fi_close(&mr->mr->fid);
	if (rc)
		MK_WARN("ofi: %s deregistration failed: %s", d->props.name,
			mk_ofi.lib->strerror(-rc));
	else
		mk_ofi_key_put(d, mr->app_key); /* a key still bound to a live MR stays out */
	mk_ofi_dev_put(d);
	free(mr);
	return mk_ofi_errno(rc);
}
