#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Regenerate the MKERNEL_* table in README.md from the parameter registry (mkernel-params), or
# with --check, fail when README.md is out of date. usage: gen-readme-params.sh <build> [--check]
set -euo pipefail
build=${1:?build dir}
mode=${2:-}
root=$(cd "$(dirname "$0")/.." && pwd)
readme=$root/README.md
# The table lists defaults: generate it from an environment without MKERNEL_* settings.
table=$(env -i PATH="$PATH" "$build/tools/mkernel-params" --markdown)
new=$(awk -v table="$table" '
	/<!-- params:begin -->/ { print; print table; skip = 1; next }
	/<!-- params:end -->/ { skip = 0 }
	!skip { print }' "$readme")
if [ "$mode" = "--check" ]; then
	if [ "$new" != "$(cat "$readme")" ]; then
		echo "README.md parameter table is out of date: run scripts/gen-readme-params.sh $build"
		diff <(echo "$new") "$readme" | head -40
		exit 1
	fi
	echo "README.md parameter table matches the registry"
	exit 0
fi
printf '%s\n' "$new" > "$readme"
