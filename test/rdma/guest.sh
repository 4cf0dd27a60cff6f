#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Guest script of the rdma suite, run by scripts/rxe-vm/run.sh inside the soft-RoCE guest: stock
# rdma-core/perftest checks on rxe0, then every project test binary that was built, then
# ib_write_bw at 1 MiB and 4 MiB and ib_write_lat at 8 B and 4 KiB next to mkernel-netbench (and
# mkernel-rawbench-verbs, the device in the plugin's shape, at the latency sizes)
# (emulated figures, JSON lines on the serial log and in $BUILD/rdma-bench.jsonl). Environment from /init: GIDX, MKERNEL_IB_GID_INDEX,
# MKERNEL_TRANSPORT=verbs, PEER, BUILD, SRC, RXE_VM_LIB.
# Binaries whose libraries the initramfs must carry (paths under the build dir):
# rxe-vm-needs: test/rdma/verbs/test-verbs-loopback test/loopback/net/test-net-loopback
# rxe-vm-needs: nccl_plugin/tools/mkernel-netbench nccl_plugin/libnccl-net-mkernel.so
# rxe-vm-needs: transport/tools/rawbench/mkernel-rawbench-verbs
# pipefail where the shell has it (bash, busybox ash; Debian's dash lacks it)
(set -o pipefail) 2>/dev/null && set -o pipefail

# shellcheck source=../../scripts/rxe-vm/guest-lib.sh
. "$RXE_VM_LIB"
export MKERNEL_TRANSPORT=verbs
fails=0

mk_stock_checks || fails=$((fails + $?))
# rxe0 is up: from here on a test that says "no device" (77) is a failure, not a skip
if mk_rxe0_active; then
	MK_SKIP_IS_FAIL=1
else
	mk_mark "rxe0-active FAIL"
	fails=$((fails + 1))
fi

# run_built <name> <path under $BUILD> [args...]: run a project test; not built is a FAIL.
run_built() {
	rb_name=$1
	rb_bin=$BUILD/$2
	shift 2
	mk_need "$rb_name" "$rb_bin" || { fails=$((fails + 1)); return 0; }
	mk_run "$rb_name" "$rb_bin" "$@" || fails=$((fails + 1))
}

run_built verbs-loopback test/rdma/verbs/test-verbs-loopback
run_built net-loopback test/loopback/net/test-net-loopback --all --transport verbs "$BUILD/nccl_plugin/libnccl-net-mkernel.so"

# The same plugin binary on a host without libfabric: hidden from the loader, auto selection
# must take verbs (the host's loopback suite checks the converse).
if mk_need plugin-without-libfabric "$BUILD/nccl_plugin/tools/mkernel-netbench"; then
	MKERNEL_OFI_LIB=/nonexistent/libfabric.so.1 MKERNEL_TRANSPORT=auto \
		mk_run plugin-without-libfabric sh "$SRC/test/loopback/net/hidden-lib.sh" \
		"$BUILD/nccl_plugin/tools/mkernel-netbench" "$BUILD/nccl_plugin/libnccl-net-mkernel.so" \
		verbs: || fails=$((fails + 1))
else
	fails=$((fails + 1))
fi

# Benchmark: the same sizes through ib_write_bw and through our plugin, alternating in this run.
bench=$BUILD/rdma-bench.jsonl
: >"$bench"
netbench=
for nb in nccl_plugin/tools/mkernel-netbench; do
	[ -x "$BUILD/$nb" ] && netbench=$BUILD/$nb && break
done
if [ -z "$netbench" ]; then
	echo "mkernel-netbench: not built"
	mk_mark "netbench FAIL"
	fails=$((fails + 1))
elif ! printf '%s\n' "$("$netbench" --help 2>&1)" | grep -q -- '--transport'; then
	echo "mkernel-netbench: no --transport option"
	mk_mark "netbench FAIL"
	fails=$((fails + 1))
	netbench=
fi

# bench_line <json>: one measurement to the serial log and to the share.
bench_line() {
	echo "$1"
	echo "$1" >>"$bench"
}

port=18520
for size in 1048576 4194304; do
	iters=200
	[ "$size" -le 1048576 ] || iters=100	# 4 MiB x 100 is ~10 s under TCG
	port=$((port + 1))
	name=ib_write_bw-$size
	gbps=
	if mk_pair "$name" "$port" \
		"ib_write_bw -d rxe0 -x $GIDX -s $size -n $iters -F --report_gbits -p $port" \
		"ib_write_bw -d rxe0 -x $GIDX -s $size -n $iters -F --report_gbits -p $port $PEER"; then
		gbps=$(awk -v s="$size" '$1 == s && NF >= 4 { print $4; exit }' "/tmp/$name.client.log")
		j="{\"tool\":\"ib_write_bw\",\"size\":$size,\"iters\":$iters,\"gbps\":${gbps:-null}"
		j="$j,\"unit\":\"Gbit/s\""
		j="$j,\"device\":\"rxe0\",\"gid_index\":$GIDX,\"emulated\":true"
		bench_line "$j,\"date\":\"$(date -u +%Y-%m-%dT%H:%M:%SZ)\"}"
	else
		fails=$((fails + 1))
	fi
	[ -n "$netbench" ] || continue
	# Bandwidth only, 32 in flight (ib_write_bw keeps up to 128), 32 MiB per repetition.
	# At 4 MiB that is 128 messages (4 x the window) per repetition, 3.5 GiB in all: on a
	# slow host TCG moves it in more than the default 120 s, so this step gets 300 s.
	nbj=/tmp/netbench-$size.jsonl
	nb_keep_timeout=$MK_TIMEOUT
	MK_TIMEOUT=300
	mk_run "netbench-$size" "$netbench" --transport verbs --sizes "$size" --windows 32 \
		--lat-sizes "" --reps 5 --rounds 1 --warmup 2 --min-bytes 32M --raw none --json "$nbj"
	nb_rc=$?
	MK_TIMEOUT=$nb_keep_timeout
	if [ "$nb_rc" = 0 ]; then
		while read -r l; do
			bench_line "$(echo "$l" | sed 's/}$/,"emulated":true}/')"
		done <"$nbj"
		# netbench reports GB/s (10^9 bytes); ib_write_bw --report_gbits Gbit/s.
		nb_gbytes=$(sed -n 's/.*"gbps_median":\([0-9.]*\).*/\1/p' "$nbj" | head -n 1)
		if [ -n "$gbps" ] && [ -n "$nb_gbytes" ]; then
			# shellcheck disable=SC2046 # two words: Gbit/s and ratio
			set -- $(awk -v a="$nb_gbytes" -v b="$gbps" 'BEGIN { a *= 8;
				printf "%.4f %s\n", a, (b > 0 ? sprintf("%.3f", a / b) : "null") }')
			j="{\"tool\":\"compare\",\"size\":$size,\"unit\":\"Gbit/s\""
			j="$j,\"candidate\":\"mkernel-netbench\",\"candidate_gbps\":$1"
			j="$j,\"baseline\":\"ib_write_bw\",\"baseline_gbps\":$gbps"
			bench_line "$j,\"ratio\":$2,\"emulated\":true}"
		fi
	else
		fails=$((fails + 1))
	fi
done
# One-way latency: ib_write_lat (perftest's ping-pong of RDMA writes, half the round trip) next
# to mkernel-netbench's ping-pong through the plugin, 8 B and 4 KiB (eager on the plugin's side).
for size in 8 4096; do
	port=$((port + 1))
	name=ib_write_lat-$size
	lat=
	if mk_pair "$name" "$port" \
		"ib_write_lat -d rxe0 -x $GIDX -s $size -n 2000 -F -p $port" \
		"ib_write_lat -d rxe0 -x $GIDX -s $size -n 2000 -F -p $port $PEER"; then
		# t_typical, the fifth column of the size's row
		lat=$(awk -v s="$size" '$1 == s && NF >= 5 { print $5; exit }' "/tmp/$name.client.log")
		j="{\"tool\":\"ib_write_lat\",\"size\":$size,\"iters\":2000,\"lat_us\":${lat:-null}"
		bench_line "$j,\"device\":\"rxe0\",\"gid_index\":$GIDX,\"emulated\":true}"
	else
		fails=$((fails + 1))
	fi
	# The device in the plugin's shape with nothing of the plugin in it (a write with immediate
	# into a QP per direction, every send signalled, the receive taken from the CQ and posted
	# again): what of the plugin's latency is the device's.
	port=$((port + 1))
	name=rawbench-verbs-$size
	rawv=$BUILD/transport/tools/rawbench/mkernel-rawbench-verbs
	if mk_need "$name" "$rawv" && mk_pair "$name" "$port" \
		"$rawv --dev rxe0 --gid-index $GIDX --server $port" \
		"$rawv --dev rxe0 --gid-index $GIDX --client $PEER:$port --method imm --qps 2 \
		--sizes $size --iters 2000 --reps 5"; then
		bench_line "$(sed -n 's/^\({"tool":"mkernel-rawbench-verbs".*\)}$/\1,"emulated":true}/p' "/tmp/$name.client.log")"
	else
		fails=$((fails + 1))
	fi
	[ -n "$netbench" ] || continue
	nbj=/tmp/netbench-lat-$size.jsonl
	if mk_run "netbench-lat-$size" "$netbench" --transport verbs --sizes "" \
		--lat-sizes "$size" --lat-iters 2000 --reps 5 --rounds 1 --warmup 1 --raw none \
		--json "$nbj"; then
		while read -r l; do
			bench_line "$(echo "$l" | sed 's/}$/,"emulated":true}/')"
		done <"$nbj"
		nb_lat=$(sed -n 's/.*"lat_us_median":\([0-9.]*\).*/\1/p' "$nbj" | head -n 1)
		if [ -n "$lat" ] && [ -n "$nb_lat" ]; then
			r=$(awk -v a="$nb_lat" -v b="$lat" 'BEGIN { printf "%.3f", (b > 0 ? a / b : 0) }')
			j="{\"tool\":\"compare\",\"size\":$size,\"unit\":\"us\""
			j="$j,\"candidate\":\"mkernel-netbench\",\"candidate_lat_us\":$nb_lat"
			j="$j,\"baseline\":\"ib_write_lat\",\"baseline_lat_us\":$lat"
			bench_line "$j,\"latency_ratio\":$r,\"emulated\":true}"
		fi
	else
		fails=$((fails + 1))
	fi
done
echo "benchmark lines (emulated, TCG): $bench"

# second_port: rxe1 on the netdev rxe0 does not use (dummy0 at 192.0.2.10, or lo), ACTIVE and
# with an IPv4-mapped RoCE v2 GID, so that two ports can be fused.
second_port() {
	if [ "$RXE_NETDEV" = lo ]; then
		sp_dev=dummy0
		[ -e /sys/class/net/dummy0 ] || ip link add dummy0 type dummy || return 1
		ip addr add 192.0.2.10/24 dev dummy0 2>/dev/null
		ip link set dummy0 up || return 1
	else
		sp_dev=lo
	fi
	rdma link add rxe1 type rxe netdev "$sp_dev" || return 1
	sp_port=/sys/class/infiniband/rxe1/ports/1
	sp_n=100
	while :; do
		for sp_g in "$sp_port"/gids/*; do
			case $(cat "$sp_g" 2>/dev/null) in
			0000:0000:0000:0000:0000:ffff:*)
				grep -q v2 "$sp_port/gid_attrs/types/${sp_g##*/}" 2>/dev/null &&
					grep -q ACTIVE "$sp_port/state" && return 0
				;;
			esac
		done
		sp_n=$((sp_n - 1))
		[ "$sp_n" -gt 0 ] || return 1
		sleep 0.1
	done
}

# NIC fusion: every case again on the device the plugin fuses from rxe0 and rxe1
# (makeVDevice), each port carrying its share of the QPs. The GID index is picked per port
# (the two tables differ), and 77 (fewer than two ports seen) counts as a failure here.
if mk_need net-loopback-fused "$BUILD/test/loopback/net/test-net-loopback"; then
	if second_port; then
		rail1=/sys/class/infiniband/rxe1/ports/1/hw_counters/sent_pkts
		rail1_before=$(cat "$rail1" 2>/dev/null || echo 0)
		(
			unset MKERNEL_IB_GID_INDEX
			mk_run net-loopback-fused sh -c '"$@"; rc=$?; [ $rc -ne 77 ] || rc=1; exit $rc' \
				sh "$BUILD/test/loopback/net/test-net-loopback" --all --fuse 0,1 \
				--transport verbs "$BUILD/nccl_plugin/libnccl-net-mkernel.so"
		) || fails=$((fails + 1))
		# the second port must have carried its share, not sat idle beside rxe0
		rail1_sent=$(($(cat "$rail1" 2>/dev/null || echo 0) - rail1_before))
		echo "rxe1 sent $rail1_sent packets during the fused run"
		if [ "$rail1_sent" -gt 0 ]; then
			mk_mark "fused-second-port-used PASS"
		else
			mk_mark "fused-second-port-used FAIL"
			fails=$((fails + 1))
		fi
	else
		echo "net-loopback-fused: could not bring up rxe1"
		mk_mark "net-loopback-fused FAIL"
		fails=$((fails + 1))
	fi
else
	fails=$((fails + 1))
fi

[ "$fails" -eq 0 ]
