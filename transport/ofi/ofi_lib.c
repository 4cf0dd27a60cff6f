// SPDX-License-Identifier: Apache-2.0
/*
 * Loads libfabric.so.1 (or MKERNEL_OFI_LIB) with dlopen and resolves the seven exported entry
 * points the backend calls directly. Versioned names come first so an old library cannot hand
 * us an ABI-compatibility shim (fi_getinfo@FABRIC_1.0 fills a smaller fi_info); plain dlsym is
 * the fallback for builds without symbol versions.
 */
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stddef.h>

#include "mk/log.h"
#include "ofi.h"

static pthread_mutex_t lib_lock = PTHREAD_MUTEX_INITIALIZER;
static void *lib_handle;
static struct mk_ofi_lib lib_table;
static const struct mk_ofi_lib *lib_forced;

static const struct {
	const char *name;
	const char *version; /* the default version Debian's 1.17 exports */
	size_t offset;
} lib_syms[] = {
	{ "fi_getinfo", "FABRIC_1.3", offsetof(struct mk_ofi_lib, getinfo) },
	{ "fi_freeinfo", "FABRIC_1.3", offsetof(struct mk_ofi_lib, freeinfo) },
	{ "fi_dupinfo", "FABRIC_1.3", offsetof(struct mk_ofi_lib, dupinfo) },
	{ "fi_fabric", "FABRIC_1.1", offsetof(struct mk_ofi_lib, fabric) },
	{ "fi_strerror", "FABRIC_1.0", offsetof(struct mk_ofi_lib, strerror) },
	{ "fi_version", "FABRIC_1.0", offsetof(struct mk_ofi_lib, version) },
	{ "fi_tostr", "FABRIC_1.0", offsetof(struct mk_ofi_lib, tostr) },
};

void mk_ofi_lib_override(const struct mk_ofi_lib *lib)
{
	pthread_mutex_lock(&lib_lock);
	lib_forced = lib;
	pthread_mutex_unlock(&lib_lock);
}

static int lib_resolve(void *h, struct mk_ofi_lib *t)
{
	for (size_t i = 0; i < MK_ARRAY_SIZE(lib_syms); i++) {
		void *p = dlvsym(h, lib_syms[i].name, lib_syms[i].version);

		if (p == NULL)
			p = dlsym(h, lib_syms[i].name);
		if (p == NULL) {
			MK_INFO(MK_SUBSYS_INIT | MK_SUBSYS_NET,
				"ofi: %s has no %s; libfabric backend disabled", t->path,
				lib_syms[i].name);
			return -ENOSYS;
		}
		/* POSIX guarantees object and function pointers share a representation. */
		*(void **)((char *)t + lib_syms[i].offset) = p;
	}
	return 0;
}

int mk_ofi_lib_open(const struct mk_ofi_lib **out)
{
	const char *path = mk_param_ofi_lib();
	int rc = 0;

	pthread_mutex_lock(&lib_lock);
	if (lib_forced != NULL) {
		*out = lib_forced;
		goto unlock;
	}
	if (lib_handle != NULL) {
		*out = &lib_table;
		goto unlock;
	}
	if (path == NULL || *path == '\0')
		path = "libfabric.so.1";
	lib_handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (lib_handle == NULL) {
		MK_INFO(MK_SUBSYS_INIT | MK_SUBSYS_NET, "ofi: cannot load %s (%s); no ofi devices",
			path, dlerror());
		rc = -ENOENT;
		goto unlock;
	}
	lib_table.path = path;
	rc = lib_resolve(lib_handle, &lib_table);
	if (rc)
		goto undo_dlopen;
	MK_INFO(MK_SUBSYS_INIT | MK_SUBSYS_NET, "ofi: loaded %s (libfabric %u.%u)", path,
		FI_MAJOR(lib_table.version()), FI_MINOR(lib_table.version()));
	*out = &lib_table;
	goto unlock;

undo_dlopen:
	dlclose(lib_handle);
	lib_handle = NULL;
unlock:
	pthread_mutex_unlock(&lib_lock);
	return rc;
}

/*
 * libfabric stays loaded once opened: its providers keep process-wide state (and some start
 * threads or register exit handlers) that only its own destructor tears down, so unloading it
 * under them is unsafe; and a leak checker can then still name the library that allocated what
 * it reports (test/sanitize/lsan.supp suppresses libfabric's own, by name). A later open reuses
 * the mapping.
 */
void mk_ofi_lib_close(void)
{
}
