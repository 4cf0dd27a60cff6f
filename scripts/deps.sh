#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Install what building and testing mkernel needs on Debian 12 (as root). Idempotent: only
# missing packages are fetched. MKERNEL_DEPS_EXTRA adds packages (e.g. the rdma suite's qemu).
set -euo pipefail

pkgs=(
	build-essential
	clang-format
	cpio
	ibverbs-providers
	ibverbs-utils
	libcmocka-dev
	libfabric-bin
	libfabric-dev
	libibverbs-dev
	librdmacm-dev
	meson
	ninja-build
	perftest
	pkg-config
	python3
	python3-matplotlib
	qemu-system-x86
	rdma-core
	rdmacm-utils
	busybox-static
)
missing=()
for p in "${pkgs[@]}" ${MKERNEL_DEPS_EXTRA:-}; do
	# a captured string, not a pipe into grep -q, which pipefail could fail on SIGPIPE
	case $(dpkg-query -W -f='${Status}' "$p" 2>/dev/null) in
	*"install ok installed"*) ;;
	*) missing+=("$p") ;;
	esac
done
if [ ${#missing[@]} -gt 0 ]; then
	echo "deps: installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Python side: torch, pytest and numpy for the mkernel package's tests (test/unit/python), installed into
# the python3 found first on PATH (the one meson's tests run). The CPU wheel from PyTorch's own
# index is small (~200 MB); where that index cannot be reached, PyPI's build (CUDA libraries as
# dependencies, ~4 GB, imports and runs on a machine without a GPU) is the fallback.
# MKERNEL_TORCH picks another requirement (e.g. 'torch==2.11.*'); MKERNEL_DEPS_NO_TORCH=1 skips.
py=$(command -v python3)
if [ -z "${MKERNEL_DEPS_NO_TORCH:-}" ] && ! "$py" -c 'import torch, pytest, numpy' 2>/dev/null; then
	echo "deps: installing ${MKERNEL_TORCH:-torch} and pytest into $py"
	t0=$(date +%s)
	export PIP_BREAK_SYSTEM_PACKAGES=1 # Debian's python3 refuses pip installs without it
	"$py" -m pip install -q --root-user-action=ignore pytest numpy
	if ! "$py" -m pip install -q --root-user-action=ignore --retries 0 --timeout 20 "${MKERNEL_TORCH:-torch}" \
		--index-url https://download.pytorch.org/whl/cpu 2>/dev/null; then
		echo "deps: PyTorch's CPU index unreachable; installing PyPI's torch build"
		"$py" -m pip install -q --root-user-action=ignore "${MKERNEL_TORCH:-torch}"
	fi
	echo "deps: torch $("$py" -c 'import torch; print(torch.__version__)') in $(($(date +%s) - t0)) s"
fi
