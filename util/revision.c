// SPDX-License-Identifier: Apache-2.0
/* The build's source revision (include/mk/revision.h); rebuilt whenever mk_git.h changes. */
#include "mk/revision.h"

#include "mk_git.h"

const char *mk_git_revision(void)
{
	return MK_GIT_HASH;
}
