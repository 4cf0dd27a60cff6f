#!/bin/busybox sh
# SPDX-License-Identifier: Apache-2.0
# /init of the rxe guest: load the soft-RoCE and 9p modules, create rxe0 on a netdev, pick the
# RoCE v2 GID index, mount the host share, run the stock checks and the guest script, print the
# markers the host judges, power off. Kernel command-line knobs (set by run.sh):
#   rxe_netdev=lo|dummy  rxe_tests=0|1  rxe_script=<guest path>  rxe_src=<guest path>
#   rxe_build=<guest path>  rxe_share2=0|1  rxe_timeout=<seconds for the guest script>

/bin/busybox --install -s
echo	# the firmware's last line has no newline: markers start on their own line
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/shm
mount -t tmpfs tmpfs /tmp
mount -t tmpfs tmpfs /dev/shm
mount -t tmpfs tmpfs /run
ulimit -l unlimited
. /lib/rxe-vm/guest-lib.sh

finish() {
	mk_mark "info poweroff at uptime $(mk_uptime) s"
	mk_mark "done"
	sync
	poweroff -f
}

setup_fail() {
	echo "rxe-vm: $*"
	mk_mark "setup FAIL"
	finish
}

netdev=lo
tests=1
script=
src=/mnt/host
build=/mnt/host
share2=0
script_timeout=300
for w in $(cat /proc/cmdline); do
	case $w in
	rxe_netdev=*) netdev=${w#*=} ;;
	rxe_tests=*) tests=${w#*=} ;;
	rxe_script=*) script=${w#*=} ;;
	rxe_src=*) src=${w#*=} ;;
	rxe_build=*) build=${w#*=} ;;
	rxe_share2=*) share2=${w#*=} ;;
	rxe_timeout=*) script_timeout=${w#*=} ;;
	esac
done
mk_mark "info init at uptime $(mk_uptime) s"

while read -r m; do
	insmod "/lib/modules/$m.ko" || {
		mk_mark "insmod-$m FAIL"
		finish
	}
done </lib/modules/modules.order

ip link set lo up
case $netdev in
lo)
	dev=lo
	PEER=127.0.0.1
	;;
dummy)
	# rdma_cm resolves routes over a real netdev but not over lo.
	dev=dummy0
	PEER=192.0.2.10
	# Loading dummy usually creates dummy0 already (numdummies=1).
	[ -e /sys/class/net/dummy0 ] || ip link add dummy0 type dummy ||
		setup_fail "cannot create dummy0"
	ip addr add 192.0.2.10/24 dev dummy0 && ip link set dummy0 up ||
		setup_fail "cannot configure dummy0"
	;;
*) setup_fail "unknown rxe_netdev=$netdev" ;;
esac
rdma link add rxe0 type rxe netdev "$dev" || setup_fail "rdma link add rxe0 on $dev failed"

port=/sys/class/infiniband/rxe0/ports/1
n=100
until grep -q ACTIVE "$port/state" 2>/dev/null; do
	n=$((n - 1))
	[ "$n" -gt 0 ] || setup_fail "rxe0 port 1 not ACTIVE: $(cat "$port/state" 2>&1)"
	sleep 0.1
done

# The GID table fills asynchronously: take the first IPv4-mapped RoCE v2 entry.
GIDX=
n=100
while [ -z "$GIDX" ]; do
	i=0
	while [ -e "$port/gids/$i" ]; do
		case $(cat "$port/gids/$i" 2>/dev/null) in
		0000:0000:0000:0000:0000:ffff:*)
			if grep -q 'v2' "$port/gid_attrs/types/$i" 2>/dev/null; then
				GIDX=$i
				break
			fi
			;;
		esac
		i=$((i + 1))
	done
	[ -n "$GIDX" ] && break
	n=$((n - 1))
	[ "$n" -gt 0 ] || setup_fail "no IPv4-mapped RoCE v2 GID on rxe0"
	sleep 0.1
done
RXE_NETDEV=$netdev
export GIDX PEER RXE_NETDEV
export MKERNEL_IB_GID_INDEX=$GIDX
export MKERNEL_TRANSPORT=verbs
mk_mark "info rxe0 on $dev ACTIVE, GID index $GIDX ($(cat "$port/gids/$GIDX")), uptime $(mk_uptime) s"

mkdir -p /mnt/host /mnt/build
mount -t 9p -o trans=virtio,version=9p2000.L,msize=1048576 host0 /mnt/host ||
	setup_fail "cannot mount the host share"
if [ "$share2" = 1 ]; then
	mount -t 9p -o trans=virtio,version=9p2000.L,msize=1048576 host1 /mnt/build ||
		setup_fail "cannot mount the build-directory share"
fi

if [ "$tests" != 0 ]; then
	mk_stock_checks
	mk_mark "info stock checks done at uptime $(mk_uptime) s"
fi

if [ -n "$script" ]; then
	export SRC="$src" BUILD="$build" RXE_VM_LIB=/lib/rxe-vm/guest-lib.sh
	cd "$SRC" || setup_fail "no $SRC"
	timeout "$script_timeout" sh "$script"
	rc=$?
	mk_mark "$(basename "$script") exit=$rc"
	cd /
fi
finish
