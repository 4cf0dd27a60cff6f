// SPDX-License-Identifier: Apache-2.0
/*
 * Loads libibverbs with dlopen and resolves the entry points of struct mk_ibv_lib once. Nothing
 * in this backend links against libibverbs: a host without rdma-core simply has no verbs
 * devices.
 */
#include <dlfcn.h>
#include <errno.h>
#include <string.h>

#include "mk/log.h"
#include "verbs.h"

const struct mk_ibv_lib *mk_verbs_ibv;

static struct mk_ibv_lib lib_table;
static void *lib_handle;
static const struct mk_ibv_lib *lib_override;

#define LIB_BASE_VERSION "IBVERBS_1.1"

struct lib_sym {
	const char *name;
	const char *version;
	size_t offset;
	bool optional;
};

#define LIB_SYM(field, ver, opt)                                                                   \
	{                                                                                          \
		"ibv_" #field, (ver), offsetof(struct mk_ibv_lib, field), (opt)                    \
	}

static const struct lib_sym lib_syms[] = {
	LIB_SYM(get_device_list, LIB_BASE_VERSION, false),
	LIB_SYM(free_device_list, LIB_BASE_VERSION, false),
	LIB_SYM(get_device_name, LIB_BASE_VERSION, false),
	LIB_SYM(open_device, LIB_BASE_VERSION, false),
	LIB_SYM(close_device, LIB_BASE_VERSION, false),
	LIB_SYM(query_device, LIB_BASE_VERSION, false),
	LIB_SYM(query_port, LIB_BASE_VERSION, false),
	LIB_SYM(query_gid, LIB_BASE_VERSION, false),
	LIB_SYM(alloc_pd, LIB_BASE_VERSION, false),
	LIB_SYM(dealloc_pd, LIB_BASE_VERSION, false),
	LIB_SYM(reg_mr, LIB_BASE_VERSION, false),
	LIB_SYM(dereg_mr, LIB_BASE_VERSION, false),
	LIB_SYM(create_cq, LIB_BASE_VERSION, false),
	LIB_SYM(destroy_cq, LIB_BASE_VERSION, false),
	LIB_SYM(create_qp, LIB_BASE_VERSION, false),
	LIB_SYM(modify_qp, LIB_BASE_VERSION, false),
	LIB_SYM(destroy_qp, LIB_BASE_VERSION, false),
	LIB_SYM(wc_status_str, LIB_BASE_VERSION, false),
	LIB_SYM(reg_mr_iova2, "IBVERBS_1.8", true),
	LIB_SYM(reg_dmabuf_mr, "IBVERBS_1.12", true),
};

void mk_verbs_lib_override(const struct mk_ibv_lib *lib)
{
	lib_override = lib;
	mk_verbs_ibv = lib;
}

int mk_verbs_lib_load(void)
{
	const char *path = mk_param_ibverbs_lib();
	void *h;

	if (lib_override != NULL) {
		mk_verbs_ibv = lib_override;
		return 0;
	}
	if (mk_verbs_ibv != NULL)
		return 0;
	if (path == NULL || *path == '\0')
		path = "libibverbs.so.1";
	h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (h == NULL) {
		MK_INFO(MK_SUBSYS_INIT | MK_SUBSYS_NET,
			"verbs: cannot load %s (%s): no verbs devices", path, dlerror());
		return -ENOENT;
	}
	memset(&lib_table, 0, sizeof(lib_table));
	for (size_t i = 0; i < MK_ARRAY_SIZE(lib_syms); i++) {
		const struct lib_sym *s = &lib_syms[i];
		void *fn = dlvsym(h, s->name, s->version);

		if (fn == NULL && !s->optional) {
			MK_INFO(MK_SUBSYS_INIT | MK_SUBSYS_NET,
				"verbs: %s lacks %s@%s (rdma-core too old): no verbs devices", path,
				s->name, s->version);
			dlclose(h);
			return -ENOSYS;
		}
		memcpy((char *)&lib_table + s->offset, &fn, sizeof(fn));
	}
	lib_handle = h;
	mk_verbs_ibv = &lib_table;
	MK_INFO(MK_SUBSYS_INIT | MK_SUBSYS_NET, "verbs: loaded %s (reg_mr_iova2 %s, dmabuf %s)",
		path, lib_table.reg_mr_iova2 ? "yes" : "no",
		lib_table.reg_dmabuf_mr ? "yes" : "no");
	return 0;
}

void mk_verbs_lib_unload(void)
{
	if (lib_override != NULL)
		return;
	mk_verbs_ibv = NULL;
	if (lib_handle != NULL)
		dlclose(lib_handle);
	lib_handle = NULL;
}
