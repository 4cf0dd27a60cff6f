#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# Format the project's C sources and headers with .clang-format (clang-format 14), or with
# --check fail when one is not formatted. CUDA files are left to their authors (inline PTX).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang-format >/dev/null || { echo "clang-format not installed"; exit 77; }
mapfile -t files < <(git ls-files '*.c' '*.h' 2>/dev/null || find . -path ./build\* -prune -o \
	\( -name '*.c' -o -name '*.h' \) -print)
if [ "${1:-}" = "--check" ]; then
	clang-format --dry-run -Werror "${files[@]}"
	echo "${#files[@]} files formatted"
else
	clang-format -i "${files[@]}"
fi
