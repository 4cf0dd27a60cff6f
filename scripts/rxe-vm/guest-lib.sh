# SPDX-License-Identifier: Apache-2.0
# Guest-side helpers (busybox sh), sourced by /init and by guest scripts through "$RXE_VM_LIB".
# Every verdict is one serial-console line "RXEVM: <name> PASS|FAIL|SKIP"; the host passes the run
# only if "RXEVM: done" appears and no FAIL or non-zero exit= marker does.

# sourced: pipefail where the shell has it (busybox ash, bash; not dash), so a failing producer
# in a pipeline is not hidden by its consumer
(set -o pipefail) 2>/dev/null && set -o pipefail

MK_MARK=RXEVM
MK_TIMEOUT=${MK_TIMEOUT:-120}	# seconds per command, so one hung test cannot eat the whole run

mk_mark() {
	echo "$MK_MARK: $*"
}

mk_uptime() {
	cut -d' ' -f1 /proc/uptime
}

# mk_run <name> <cmd...>: run a command under a timeout; exit 0 PASS, 77 SKIP, else FAIL.
# Once a guest script has proven rxe0 ACTIVE it sets MK_SKIP_IS_FAIL=1: from then on a test that
# skips (77: "no device") contradicts what was proven and is a FAIL.
# Returns 0 unless the command failed.
mk_run() {
	mk_run_name=$1
	shift
	echo "--- $mk_run_name: $*"
	timeout "$MK_TIMEOUT" "$@"
	mk_run_rc=$?
	if [ "$mk_run_rc" = 77 ] && [ "${MK_SKIP_IS_FAIL:-0}" = 1 ]; then
		echo "$mk_run_name: skipped (exit 77) although rxe0 is ACTIVE"
		mk_run_rc=1
	fi
	case $mk_run_rc in
	0) mk_mark "$mk_run_name PASS" ;;
	77) mk_mark "$mk_run_name SKIP" ;;
	*)
		echo "$mk_run_name: exit status $mk_run_rc"
		mk_mark "$mk_run_name FAIL"
		return 1
		;;
	esac
	return 0
}

# mk_wait_port <tcp port> <seconds>: wait until something listens on the port (any address).
mk_wait_port() {
	mk_wp_hex=$(printf ':%04X' "$1")
	mk_wp_n=$(($2 * 10))
	while [ "$mk_wp_n" -gt 0 ]; do
		if awk -v p="$mk_wp_hex" '$4 == "0A" && substr($2, length($2) - 4) == p { f = 1 }
			END { exit !f }' /proc/net/tcp /proc/net/tcp6 2>/dev/null; then
			return 0
		fi
		sleep 0.1
		mk_wp_n=$((mk_wp_n - 1))
	done
	return 1
}

# mk_pair <name> <port> "<server cmd>" "<client cmd>": a two-process test. The server starts
# first; the client starts once the server listens on TCP <port>, or after 3 s when <port> is "cm"
# (rdma_cm listeners do not show in /proc/net/tcp). PASS only if both exit 0.
# Commands are split on blanks (no quoting inside). The client's output stays in
# /tmp/<name>.client.log for callers that parse figures out of it.
mk_pair() {
	mk_p_name=$1
	mk_p_port=$2
	echo "--- $mk_p_name: server: $3"
	echo "--- $mk_p_name: client: $4"
	# shellcheck disable=SC2086 # the commands are word lists on purpose
	timeout "$MK_TIMEOUT" $3 >"/tmp/$mk_p_name.server.log" 2>&1 &
	mk_p_spid=$!
	if [ "$mk_p_port" = cm ]; then
		sleep 3
	elif ! mk_wait_port "$mk_p_port" 60; then
		echo "$mk_p_name: server is not listening on port $mk_p_port"
		kill "$mk_p_spid" 2>/dev/null
		wait "$mk_p_spid"
		cat "/tmp/$mk_p_name.server.log"
		mk_mark "$mk_p_name FAIL"
		return 1
	fi
	# shellcheck disable=SC2086
	timeout "$MK_TIMEOUT" $4 >"/tmp/$mk_p_name.client.log" 2>&1
	mk_p_crc=$?
	wait "$mk_p_spid"
	mk_p_src=$?
	cat "/tmp/$mk_p_name.client.log"
	if [ "$mk_p_crc" -eq 0 ] && [ "$mk_p_src" -eq 0 ]; then
		mk_mark "$mk_p_name PASS"
		return 0
	fi
	echo "$mk_p_name: client exit $mk_p_crc, server exit $mk_p_src; server output:"
	cat "/tmp/$mk_p_name.server.log"
	mk_mark "$mk_p_name FAIL"
	return 1
}

# mk_rxe0_active: rxe0's port is ACTIVE (then every test that can run must run: MK_SKIP_IS_FAIL).
mk_rxe0_active() {
	# read whole first: with pipefail, grep -q leaving early would fail ibv_devinfo (SIGPIPE)
	_info=$(ibv_devinfo -d rxe0 2>/dev/null) || return 1
	printf '%s\n' "$_info" | grep -q "state:[ 	]*PORT_ACTIVE"
}

# mk_need <name> <path>: a binary the guest script must run; not built is a FAIL, never a SKIP
# (the suite is only registered where the verbs backend is built). Returns 1 when missing.
mk_need() {
	[ -x "$2" ] && return 0
	echo "$1: $2 not built"
	mk_mark "$1 FAIL"
	return 1
}

# mk_stock_checks: the stock rdma-core/perftest checks on rxe0 (needs GIDX and PEER; rping too
# when RXE_NETDEV is not lo).
# Returns the number of failed checks.
mk_stock_checks() {
	mk_sc_fail=0
	mk_run rxe0-port-active sh -c 'ibv_devinfo -d rxe0 | tee /tmp/devinfo.log;
		grep -q "state:[ 	]*PORT_ACTIVE" /tmp/devinfo.log &&
		grep -q "link_layer:[ 	]*Ethernet" /tmp/devinfo.log' ||
		mk_sc_fail=$((mk_sc_fail + 1))
	mk_pair ib_write_bw-64k 18515 \
		"ib_write_bw -d rxe0 -x $GIDX -s 65536 -n 200 -F -p 18515" \
		"ib_write_bw -d rxe0 -x $GIDX -s 65536 -n 200 -F -p 18515 $PEER" ||
		mk_sc_fail=$((mk_sc_fail + 1))
	mk_pair ibv_rc_pingpong 18516 \
		"ibv_rc_pingpong -d rxe0 -g $GIDX -n 100 -p 18516" \
		"ibv_rc_pingpong -d rxe0 -g $GIDX -n 100 -p 18516 $PEER" ||
		mk_sc_fail=$((mk_sc_fail + 1))
	if [ "${RXE_NETDEV:-lo}" != lo ]; then
		# rdma_cm resolves routes only over a real netdev (not lo).
		mk_pair rping cm "rping -s -a $PEER -C 10 -v" "rping -c -a $PEER -C 10 -v" ||
			mk_sc_fail=$((mk_sc_fail + 1))
	fi
	return "$mk_sc_fail"
}
