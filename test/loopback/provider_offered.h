/* SPDX-License-Identifier: Apache-2.0 */
/*
 * A loopback test may skip only when its precondition fails: the libfabric provider it is told to
 * use is not offered on this host. This asks libfabric itself (dlopen, fi_getinfo by provider
 * name), never the module under test, and in a child process: the test's peers fork later from a
 * process that must not have initialised libfabric. Where libfabric's headers were not there at
 * build time the answer is "unknown" (-1), and the caller keeps its own judgement.
 */
#ifndef MK_TEST_PROVIDER_OFFERED_H
#define MK_TEST_PROVIDER_OFFERED_H

#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#if __has_include(<rdma/fabric.h>)
#include <rdma/fabric.h>

static inline int lb_provider_probe(const char *prov)
{
	void *lib = dlopen("libfabric.so.1", RTLD_NOW | RTLD_LOCAL);
	int (*getinfo)(uint32_t, const char *, const char *, uint64_t, const struct fi_info *,
		       struct fi_info **);
	struct fi_info *(*dupinfo)(const struct fi_info *);
	struct fi_info *hints, *info = NULL;

	if (lib == NULL)
		return 1;
	getinfo = (int (*)(uint32_t, const char *, const char *, uint64_t, const struct fi_info *,
			   struct fi_info **))dlsym(lib, "fi_getinfo");
	dupinfo = (struct fi_info * (*)(const struct fi_info *)) dlsym(lib, "fi_dupinfo");
	if (getinfo == NULL || dupinfo == NULL || (hints = dupinfo(NULL)) == NULL)
		return 1;
	hints->ep_attr->type = FI_EP_RDM;
	hints->fabric_attr->prov_name = strdup(prov);
	return getinfo(FI_VERSION(1, 17), strcmp(prov, "shm") == 0 ? NULL : "127.0.0.1", NULL, 0,
		       hints, &info) == 0 &&
			       info != NULL
		       ? 0
		       : 1;
}

/* 1: offered, 0: not offered (or no libfabric at all). */
static inline int lb_provider_offered(const char *prov)
{
	pid_t pid = fork();
	int st = 0;

	if (pid < 0)
		return -1;
	if (pid == 0)
		_exit(lb_provider_probe(prov));
	while (waitpid(pid, &st, 0) < 0)
		;
	return WIFEXITED(st) && WEXITSTATUS(st) == 0;
}
#else
static inline int lb_provider_offered(const char *prov)
{
	(void)prov;
	return -1;
}
#endif

#endif /* MK_TEST_PROVIDER_OFFERED_H */
