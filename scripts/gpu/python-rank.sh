#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# One rank of a Python program under runtime-comm.sh, which starts a rank as
# `BIN RANK WORLD NCCLID-FILE NODES NLOCAL ARGS...`: the first five become torch.distributed's
# environment, ARGS are the program and its arguments. LOCAL_RANK is the rank's GPU
# (MK_TEST_DEVICE from the layout: 0 where every rank shares GPU 0). KILLED_RANK=r: rank r must die by SIGKILL
# (exit 137 becomes 0, anything else 1).
set -uo pipefail
export RANK=$1 WORLD_SIZE=$2 LOCAL_RANK=${MK_TEST_DEVICE:-0} MK_NLOCAL=$5
shift 5
python3 "$@"
rc=$?
if [ "$RANK" = "${KILLED_RANK:-}" ]; then
	[ "$rc" = 137 ] && exit 0
	echo "rank $RANK was meant to be killed by SIGKILL but exited $rc"
	exit 1
fi
exit "$rc"
