#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Guest script of the rdma suite, run by scripts/rxe-vm/run.sh inside the soft-RoCE guest: stock
# rdma-core/perftest checks on rxe0, then every project test binary that was built, then
# ib_write_bw at 1 MiB and 4 MiB next to mkernel-netbench (emulated figures, JSON lines on the
# serial log and in $BUILD/rdma-bench.jsonl). Environment from /init: GIDX, MKERNEL_IB_GID_INDEX,
# MKERNEL_TRANSPORT=verbs, PEER, BUILD, SRC, RXE_VM_LIB.
# Binaries whose libraries the initramfs must carry (paths under the build dir):
# rxe-vm-needs: test/rdma/verbs/test-verbs-loopback test/loopback/net/test-net-loopback
# rxe-vm-needs: transport/tools/mkernel-netbench

# shellcheck source=../../scripts/rxe-vm/guest-lib.sh
. "$RXE_VM_LIB"
export MKERNEL_TRANSPORT=verbs
fails=0

mk_stock_checks || fails=$((fails + $?))

# run_built <name> <path under $BUILD> [args...]: run a project test if it was built.
run_built() {
	rb_name=$1
	rb_bin=$BUILD/$2
	shift 2
	if [ ! -x "$rb_bin" ]; then
		echo "$rb_name: $rb_bin not built"
		mk_mark "$rb_name SKIP"
		return 0
	fi
	mk_run "$rb_name" "$rb_bin" "$@" || fails=$((fails + 1))
}

run_built verbs-loopback test/rdma/verbs/test-verbs-loopback
run_built net-loopback test/loopback/net/test-net-loopback --all

# Benchmark: the same sizes through ib_write_bw and through our plugin, in this one run.
bench=$BUILD/rdma-bench.jsonl
: >"$bench"
netbench=$BUILD/transport/tools/mkernel-netbench
nb_opts=
if [ -x "$netbench" ]; then
	nb_help=$("$netbench" --help 2>&1)
	if echo "$nb_help" | grep -q -- '--transport'; then
		nb_opts="--transport verbs"
	else
		echo "mkernel-netbench: no --transport option; benchmark step skipped"
		mk_mark "netbench SKIP"
	fi
else
	echo "mkernel-netbench: not built; benchmark compares nothing"
	mk_mark "netbench SKIP"
fi
nb_has() {
	echo "$nb_help" | grep -q -- "$1"
}

port=18520
for size in 1048576 4194304; do
	iters=200
	[ "$size" -le 1048576 ] || iters=100	# 4 MiB x 100 is ~10 s under TCG
	port=$((port + 1))
	name=ib_write_bw-$size
	if mk_pair "$name" "$port" \
		"ib_write_bw -d rxe0 -x $GIDX -s $size -n $iters -F --report_gbits -p $port" \
		"ib_write_bw -d rxe0 -x $GIDX -s $size -n $iters -F --report_gbits -p $port $PEER"; then
		gbps=$(awk -v s="$size" '$1 == s && NF >= 4 { print $4; exit }' "/tmp/$name.client.log")
		line="{\"tool\":\"ib_write_bw\",\"size\":$size,\"iters\":$iters,\"gbps\":${gbps:-null}"
		line="$line,\"device\":\"rxe0\",\"gid_index\":$GIDX,\"emulated\":true"
		line="$line,\"date\":\"$(date -u +%Y-%m-%dT%H:%M:%SZ)\"}"
		echo "$line"
		echo "$line" >>"$bench"
	else
		fails=$((fails + 1))
	fi
	[ -n "$nb_opts" ] || continue
	opts=$nb_opts
	! nb_has '--size' || opts="$opts --size $size"
	! nb_has '--iters' || opts="$opts --iters $iters"
	! nb_has '--json' || opts="$opts --json"
	# shellcheck disable=SC2086 # option list
	mk_run "netbench-$size" "$netbench" $opts >"/tmp/netbench-$size.log" 2>&1 ||
		fails=$((fails + 1))
	cat "/tmp/netbench-$size.log"
	grep '^{' "/tmp/netbench-$size.log" >>"$bench"
done
echo "benchmark lines (emulated, TCG): $bench"

[ "$fails" -eq 0 ]
