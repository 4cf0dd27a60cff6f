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
