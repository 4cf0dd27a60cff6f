#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Guest script that runs only the verbs backend's real-verbs test (quicker than test/rdma/guest.sh
# when working on the backend): scripts/rxe-vm/run.sh --build <dir> --guest-script <this file>.
# The first run lets the GID be picked automatically; the second uses the index /init found.
# rxe-vm-needs: test/rdma/verbs/test-verbs-loopback

. "$RXE_VM_LIB"
fails=0
if [ ! -x "$BUILD/test/rdma/verbs/test-verbs-loopback" ]; then
	mk_mark "verbs-loopback SKIP"
	exit 0
fi
MK_TIMEOUT=400 mk_run verbs-loopback "$BUILD/test/rdma/verbs/test-verbs-loopback" ||
	fails=$((fails + 1))
[ "$fails" -eq 0 ]
