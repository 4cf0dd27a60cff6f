# SPDX-License-Identifier: Apache-2.0
# Sourced by the scripts in scripts/gpu: every step is run through `step`, which records a
# failing one by name, and the script ends with `steps_done`, which lists the failures and exits
# non-zero when there was any. Use with `set -o pipefail`; filters in pipelines go through
# `show` (grep that does not fail when it selects nothing), so a pipeline's status is the
# status of the command that was run, not of the filter behind it.
#
#   step NAME CMD [ARGS...]   run CMD; a non-zero exit is a failed step NAME
#   check NAME RC             record step NAME as failed when RC (a pipeline's $?) is not 0:
#                             a pipeline runs in subshells, so `step` cannot be used inside one
#   fail_step NAME [WHY]      record a failed step without running anything
#   show GREP-ARGS...         grep that exits 0 when nothing matches
#   steps_done                summary line; exit 1 if any step failed, else 0

steps_failed=()

check() {
	if [ "$2" -ne 0 ]; then
		echo "FAILED step $1 (exit $2)"
		steps_failed+=("$1")
	fi
	return "$2"
}

step() {
	local name=$1
	shift
	"$@"
	check "$name" $?
}

fail_step() {
	echo "FAILED step $1${2:+: $2}"
	steps_failed+=("$1")
}

show() {
	grep "$@"
	local rc=$?
	[ "$rc" -le 1 ] && return 0
	return "$rc"
}

steps_done() {
	if [ "${#steps_failed[@]}" -gt 0 ]; then
		echo "$(basename "$0"): ${#steps_failed[@]} failing step(s): ${steps_failed[*]}"
		exit 1
	fi
	echo "$(basename "$0"): every step passed"
	exit 0
}
