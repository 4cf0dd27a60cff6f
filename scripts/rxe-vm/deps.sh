#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Install what the rxe guest needs on a Debian 12 host (run as root). Exit 77 only when qemu itself
# cannot be installed; any other missing package is an error.
set -uo pipefail

pkgs=(qemu-system-x86 cpio busybox-static perftest rdmacm-utils ibverbs-utils rdma-core
	ibverbs-providers iproute2 file)

if [ "$(id -u)" != 0 ]; then
	echo "rxe-vm: not root; install as root: apt-get install --no-install-recommends ${pkgs[*]}" >&2
	command -v qemu-system-x86_64 >/dev/null || exit 77
	exit 1
fi
export DEBIAN_FRONTEND=noninteractive
install() {
	apt-get install -y -q --no-install-recommends "${pkgs[@]}" >&2
}
# Stale or missing package lists are the usual reason for a failure: refresh once and retry.
install || { apt-get update -q >&2 && install; }
rc=$?
if ! command -v qemu-system-x86_64 >/dev/null; then
	echo "rxe-vm: qemu-system-x86 could not be installed" >&2
	exit 77
fi
exit "$rc"
