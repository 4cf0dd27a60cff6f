#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Guest script that runs only the verbs backend's real-verbs test (quicker than test/rdma/guest.sh
# when working on the backend): scripts/rxe-vm/run.sh --build <dir> --guest-script <this file>.
# The first run lets the GID be picked automatically; the second uses the index /init found.
# rxe-vm-needs: test/rdma/verbs/test-verbs-loopback
# pipefail where the shell has it (bash, busybox ash; Debian's dash lacks it)
(set -o pipefail) 2>/dev/null && set -o pipefail

. "$RXE_VM_LIB"
fails=0
mk_rxe0_active && MK_SKIP_IS_FAIL=1
mk_need verbs-loopback "$BUILD/test/rdma/verbs/test-verbs-loopback" || exit 1
MK_TIMEOUT=400 mk_run verbs-loopback "$BUILD/test/rdma/verbs/test-verbs-loopback" ||
	fails=$((fails + 1))
[ "$fails" -eq 0 ]
