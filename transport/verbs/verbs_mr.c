// SPDX-License-Identifier: Apache-2.0
/*
 * Memory registration of the verbs backend: host memory through ibv_reg_mr_iova2 (relaxed
 * ordering unless the caller needs strict order) or ibv_reg_mr, GPU memory through
 * ibv_reg_dmabuf_mr or the peer-memory kernel module, and the once-per-device probes that decide
 * what a device reports in ptr_support.
 */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mk/err.h"
#include "mk/log.h"
#include "verbs.h"

#define MR_ACCESS (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ)

bool mk_verbs_dmabuf_probe(struct ibv_pd *pd)
{
	struct ibv_mr *mr;

	if (mk_verbs_ibv->reg_dmabuf_mr == NULL)
		return false;
	errno = 0;
	mr = mk_verbs_ibv->reg_dmabuf_mr(pd, 0, 0, 0, -1, MR_ACCESS);
	if (mr != NULL) {
		/* cannot happen with fd -1; do not leak it if a provider accepts it anyway */
		mk_verbs_ibv->dereg_mr(mr);
		return true;
	}
	return errno != EOPNOTSUPP && errno != EPROTONOSUPPORT;
}

bool mk_verbs_peermem_present(void)
{
	static const char *const files[] = {
		"kernel/mm/memory_peers/nv_mem/version",
		"kernel/mm/memory_peers/nv_mem_nc/version",
		"module/nvidia_peermem/version",
	};
	char path[PATH_MAX];

	for (size_t i = 0; i < MK_ARRAY_SIZE(files); i++) {
		snprintf(path, sizeof(path), "%s/%s", mk_param_ib_sysfs_root(), files[i]);
		if (access(path, F_OK) == 0)
			return true;
	}
	return false;
}

static struct ibv_mr *mr_reg_va(struct ibv_pd *pd, void *addr, size_t len, bool strict)
{
	if (mk_verbs_ibv->reg_mr_iova2 != NULL)
		return mk_verbs_ibv->reg_mr_iova2(
			pd, addr, len, (uint64_t)(uintptr_t)addr,
			MR_ACCESS | (strict ? 0 : IBV_ACCESS_RELAXED_ORDERING));
	return mk_verbs_ibv->reg_mr(pd, addr, len, MR_ACCESS);
}

/* One registration on one rail's PD; NULL with errno set, *path saying which way was tried. */
static struct ibv_mr *mr_reg_rail(const struct mk_verbs_dev *d, struct ibv_pd *pd, void *addr,
				  size_t len, const struct mk_mr_attr *attr, const char **path)
{
	bool strict = (attr->flags & MK_MR_FLAG_STRICT_ORDER) != 0;

	if (attr->dmabuf_fd >= 0) {
		*path = "dmabuf";
		if (!d->dmabuf) {
			errno = EOPNOTSUPP;
			return NULL;
		}
		return mk_verbs_ibv->reg_dmabuf_mr(
			pd, attr->dmabuf_offset, len, (uint64_t)(uintptr_t)addr, attr->dmabuf_fd,
			MR_ACCESS | (strict ? 0 : IBV_ACCESS_RELAXED_ORDERING));
	}
	if (attr->type == MK_PTR_CUDA) {
		*path = "peermem";
		if (!d->peermem) {
			errno = EOPNOTSUPP;
			return NULL;
		}
		return mr_reg_va(pd, addr, len, strict);
	}
	if (attr->type == MK_PTR_HOST) {
		*path = "host";
		return mr_reg_va(pd, addr, len, strict);
	}
	*path = "unknown type";
	errno = EINVAL;
	return NULL;
}

/* Deregisters every rail's MR and frees b: 0 or the first failure. */
static int mr_release(struct mk_bmr *b)
{
	int rc = 0;

	for (int i = 0; i < b->nmr; i++) {
		if (b->mr[i] != NULL && mk_verbs_ibv->dereg_mr(b->mr[i]) && rc == 0)
			rc = -(errno ? errno : EIO);
	}
	free(b);
	return rc;
}

int mk_verbs_reg_mr(int dev, void *addr, size_t len, const struct mk_mr_attr *attr,
		    struct mk_bmr **out, struct mk_rkey *rkey)
{
	struct mk_verbs_dev *d = mk_verbs_dev_get(dev);
	const char *path = "host";
	struct mk_bmr *b;
	int rc;

	if (d == NULL || attr == NULL || out == NULL || rkey == NULL || len == 0)
		return -EINVAL;
	b = calloc(1, sizeof(*b));
	if (b == NULL)
		return -ENOMEM;
	b->type = attr->type;
	rkey->base = (uint64_t)(uintptr_t)addr;
	rkey->key = 0;
	rkey->key2 = 0;
	/* a fused device: the same pages once per rail, each key in its half-word */
	for (int r = 0; r < d->nrails; r++) {
		struct ibv_mr *mr;

		errno = 0;
		mr = mr_reg_rail(d, d->rails[r]->pd, addr, len, attr, &path);
		if (mr == NULL) {
			rc = -(errno ? errno : EIO);
			goto undo;
		}
		b->mr[b->nmr++] = mr;
		if (r < 2)
			rkey->key |= (uint64_t)mr->rkey << (32 * r);
		else
			rkey->key2 |= (uint64_t)mr->rkey << (32 * (r - 2));
	}
	*out = b;
	return 0;

undo:
	MK_WARN("verbs: %s: registering %p+%zu (%s, type %d, fd %d, access 0x%x%s) failed: %s",
		d->props.name, addr, len, path, attr->type, attr->dmabuf_fd, MR_ACCESS,
		(attr->flags & MK_MR_FLAG_STRICT_ORDER) ? "" : "|relaxed", mk_strerror(rc));
	if (mr_release(b))
		MK_WARN("verbs: %s: releasing the rails already registered failed", d->props.name);
	return rc;
}

int mk_verbs_dereg_mr(int dev, struct mk_bmr *mr)
{
	if (mr == NULL)
		return -EINVAL;
	return mr_release(mr);
}
