// SPDX-License-Identifier: Apache-2.0
/*
 * Backend registry: the list of built backends comes from the generated mk_backends.h, so core
 * code never names one. MKERNEL_TRANSPORT picks; auto takes the first with a device.
 */
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "mk/core_params.h"
#include "mk/err.h"
#include "mk/log.h"
#include "mk/transport.h"
#include "mk_backends.h"

static const struct mk_transport_ops *const reg_backends[] = { MK_BACKEND_LIST NULL };
static const char *const reg_names[] = { MK_BACKEND_NAMES NULL };

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static const struct mk_transport_ops *reg_selected;
static int reg_refs;
static const struct mk_transport_ops *reg_override;

void mk_transport_override(const struct mk_transport_ops *ops)
{
	pthread_mutex_lock(&reg_lock);
	reg_override = ops;
	pthread_mutex_unlock(&reg_lock);
}

const char *const *mk_transport_built(void)
{
	return reg_names;
}

int mk_transport_find(const char *name, const struct mk_transport_ops **out)
{
	for (int i = 0; reg_backends[i] != NULL; i++) {
		if (strcmp(reg_backends[i]->name, name) == 0) {
			*out = reg_backends[i];
			return 0;
		}
	}
	return -ENOENT;
}

static int reg_try(const struct mk_transport_ops *b)
{
	int rc = b->init();

	if (rc) {
		MK_WARN("backend %s failed to initialise: %s", b->name, mk_strerror(rc));
		return rc;
	}
	if (b->ndevs() > 0)
		return 0;
	MK_INFO(MK_SUBSYS_INIT | MK_SUBSYS_NET, "backend %s: no usable device", b->name);
	b->fini();
	return -ENODEV;
}

static void reg_warn_unknown(const char *want)
{
	char list[128] = "";

	for (int i = 0; reg_names[i] != NULL; i++) {
		strncat(list, " ", sizeof(list) - strlen(list) - 1);
		strncat(list, reg_names[i], sizeof(list) - strlen(list) - 1);
	}
	MK_WARN("MKERNEL_TRANSPORT=%s names no backend built into this binary (built:%s)", want,
		list[0] ? list : " none");
}

int mk_transport_get(const struct mk_transport_ops **out)
{
	const char *want = mk_param_transport();
	const struct mk_transport_ops *b = NULL;
	int auto_pick = want == NULL || *want == '\0' || strcmp(want, "auto") == 0;
	int rc = -ENODEV;

	pthread_mutex_lock(&reg_lock);
	if (reg_override != NULL) {
		*out = reg_override;
		rc = 0;
		goto unlock;
	}
	if (reg_selected != NULL) {
		reg_refs++;
		*out = reg_selected;
		rc = 0;
		goto unlock;
	}
	if (!auto_pick) {
		if (mk_transport_find(want, &b) != 0) {
			reg_warn_unknown(want);
			rc = -EINVAL;
			goto unlock;
		}
		rc = reg_try(b);
	} else {
		for (int i = 0; reg_backends[i] != NULL && rc != 0; i++) {
			b = reg_backends[i];
			rc = reg_try(b);
		}
	}
	if (rc)
		goto unlock;
	MK_INFO(MK_SUBSYS_INIT | MK_SUBSYS_NET, "using backend %s (%d device%s)", b->name,
		b->ndevs(), b->ndevs() == 1 ? "" : "s");
	reg_selected = b;
	reg_refs = 1;
	*out = b;
unlock:
	pthread_mutex_unlock(&reg_lock);
	return rc;
}

void mk_transport_put(void)
{
	pthread_mutex_lock(&reg_lock);
	if (reg_override == NULL && reg_selected != NULL && --reg_refs == 0) {
		reg_selected->fini();
		reg_selected = NULL;
	}
	pthread_mutex_unlock(&reg_lock);
}
