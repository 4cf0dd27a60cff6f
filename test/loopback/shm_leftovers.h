/* SPDX-License-Identifier: Apache-2.0 */
/*
 * libfabric's shm keeps an endpoint's region in /dev/shm under "<pid>:<domain>:<endpoint>" and
 * removes it at exit; a process killed on purpose by a test cannot. Removing what such a process
 * left keeps repeated runs from filling /dev/shm and from handing a later process with the same
 * pid a name already taken.
 */
#ifndef MK_TEST_SHM_LEFTOVERS_H
#define MK_TEST_SHM_LEFTOVERS_H

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

static inline void mk_test_shm_remove_regions_of(pid_t pid)
{
	char prefix[24];
	struct dirent *e;
	DIR *d;

	if (pid <= 0)
		return;
	d = opendir("/dev/shm");
	if (d == NULL)
		return;
	snprintf(prefix, sizeof(prefix), "%d:", (int)pid);
	while ((e = readdir(d)) != NULL) {
		if (strncmp(e->d_name, prefix, strlen(prefix)) == 0)
			unlinkat(dirfd(d), e->d_name, 0);
	}
	closedir(d);
}

#endif /* MK_TEST_SHM_LEFTOVERS_H */
