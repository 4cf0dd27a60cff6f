// SPDX-License-Identifier: Apache-2.0
/* Host identity and node / local-rank assignment (see topo.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fused/runtime/runtime_params.h"
#include "fused/runtime/topo.h"

uint64_t mk_topo_hash_str(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (; *s != '\0'; s++) {
		h ^= (uint8_t)*s;
		h *= 0x100000001b3ull;
	}
	return h;
}

/* hostname followed by the kernel's boot id: NCCL's identity when nothing overrides it. */
static int topo_machine_id(char *buf, size_t len)
{
	char boot[64] = "";
	size_t n;
	FILE *f;

	if (gethostname(buf, len) != 0)
		return -errno;
	buf[len - 1] = '\0';
	f = fopen("/proc/sys/kernel/random/boot_id", "r");
	if (f != NULL) {
		if (fgets(boot, sizeof(boot), f) == NULL)
			boot[0] = '\0';
		fclose(f);
	}
	boot[strcspn(boot, "\n")] = '\0';
	n = strlen(buf);
	snprintf(buf + n, len - n, "%s", boot);
	return 0;
}

int mk_topo_host_id(char *buf, size_t len)
{
	const char *own = mk_param_hostid(), *env = getenv("NCCL_HOSTID");

	if (len == 0)
		return -EINVAL;
	if (own != NULL && own[0] != '\0')
		env = own;
	if (env != NULL && env[0] != '\0') {
		snprintf(buf, len, "%s", env);
		return 0;
	}
	return topo_machine_id(buf, len);
}

uint64_t mk_topo_machine_hash(void)
{
	char id[1024];

	if (topo_machine_id(id, sizeof(id)) != 0)
		return 0;
	return mk_topo_hash_str(id);
}

uint64_t mk_topo_host_hash(void)
{
	char id[1024];

	if (mk_topo_host_id(id, sizeof(id)) != 0)
		return 0;
	return mk_topo_hash_str(id);
}

int mk_topo_assign(const uint64_t *host_hash, int nranks, int rank, struct mk_topo *out)
{
	int *first;

	if (host_hash == NULL || nranks < 1 || rank < 0 || rank >= nranks)
		return -EINVAL;
	memset(out, 0, sizeof(*out));
	out->node_of = calloc((size_t)nranks, sizeof(int));
	out->local_of = calloc((size_t)nranks, sizeof(int));
	first = calloc((size_t)nranks, sizeof(int)); /* first rank of each node */
	if (out->node_of == NULL || out->local_of == NULL || first == NULL) {
		free(first);
		mk_topo_fini(out);
		return -ENOMEM;
	}
	for (int r = 0; r < nranks; r++) {
		int node = -1;

		for (int n = 0; n < out->nnodes; n++) {
			if (host_hash[first[n]] == host_hash[r]) {
				node = n;
				break;
			}
		}
		if (node < 0) {
			node = out->nnodes++;
			first[node] = r;
		}
		out->node_of[r] = node;
		out->local_of[r] = 0;
		for (int q = 0; q < r; q++)
			out->local_of[r] += out->node_of[q] == node;
	}
	out->rank = rank;
	out->nranks = nranks;
	out->node = out->node_of[rank];
	out->local_rank = out->local_of[rank];
	for (int r = 0; r < nranks; r++)
		out->nlocal += out->node_of[r] == out->node;
	/* As many ranks as nodes x mine, and none with a local rank beyond mine: all equal. */
	out->uniform = nranks == out->nnodes * out->nlocal;
	for (int r = 0; r < nranks; r++)
		out->uniform &= out->local_of[r] < out->nlocal;
	free(first);
	return 0;
}

void mk_topo_fini(struct mk_topo *t)
{
	free(t->node_of);
	free(t->local_of);
	t->node_of = NULL;
	t->local_of = NULL;
}
