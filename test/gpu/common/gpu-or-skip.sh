#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Runs a GPU script as a meson test of the gpu suite: exit 77 (SKIP) when this host has no NVIDIA
# GPU, else the script's own exit status. With a GPU present the script must run: PyTorch with
# CUDA and NCCL (the scripts drive stock NCCL through it) is then a requirement, not a skip.
# Usage: gpu-or-skip.sh SCRIPT [args...]
set -uo pipefail
if ! command -v nvidia-smi >/dev/null 2>&1 || ! nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
	echo "no NVIDIA GPU here: skipping $(basename "$1")"
	exit 77
fi
exec bash "$@"
