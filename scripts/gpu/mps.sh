# SPDX-License-Identifier: Apache-2.0
# Sourced by the scripts in scripts/gpu that put several ranks on one GPU. Without MPS their
# kernels time-slice (milliseconds per hand-off) and the figures measure the scheduler; with it
# they are co-resident. Each script runs its own daemon, with pipe and log under its own
# directory, so two scripts never share or stop each other's.
#
#   mps_start DIR   start it (no-op without nvidia-cuda-mps-control); sets MPS_ON=1 on success
#   mps_stop        stop the daemon mps_start started, if any
# sourced: the caller's shell gets pipefail where it has it (bash, busybox ash; not dash)
(set -o pipefail) 2>/dev/null && set -o pipefail

MPS_ON=0

mps_start() {
	command -v nvidia-cuda-mps-control >/dev/null || return 0
	export CUDA_MPS_PIPE_DIRECTORY=$1/mps-pipe CUDA_MPS_LOG_DIRECTORY=$1/mps-log
	mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
	nvidia-cuda-mps-control -d && MPS_ON=1
	return 0
}

mps_stop() {
	if [ "$MPS_ON" = 1 ]; then
		echo quit | nvidia-cuda-mps-control
		MPS_ON=0
	fi
	return 0
}
