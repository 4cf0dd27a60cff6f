#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# The parameter table from the registry itself (mkernel-params --markdown, run with no MKERNEL_*
# set so it lists defaults): as the man page mkernel-params(7), or as markdown.
# usage: params-man.sh MKERNEL_PARAMS VERSION man|md > OUT
set -euo pipefail
tool=$1
version=$2
if [ "${3:-man}" = md ]; then
	echo "# mkernel $version: parameters"
	echo
	env -i PATH="$PATH" "$tool" --markdown
	exit 0
fi
cat <<EOT
.TH MKERNEL-PARAMS 7 "" "mkernel $version" "mkernel"
.SH NAME
mkernel-params \- environment variables that configure mkernel
.SH DESCRIPTION
Every tunable of the NCCL net and tuner plugin (libnccl-net-mkernel.so) and of libmkernel.so,
read once from the environment (or the tuner's rules file). \fBmkernel-params\fR prints the
effective value and its source on a given machine. Python-side variables (\fBMKERNEL_LIB\fR,
\fBMKERNEL_STRICT\fR, ...) are described in the package's documentation.
.SH VARIABLES
EOT
env -i PATH="$PATH" "$tool" --markdown | awk -F'|' '
	NR <= 2 { next }
	{
		for (i = 2; i <= 6; i++) { gsub(/^ +| +$/, "", $i); gsub(/`/, "", $i); gsub(/\\/, "\\e", $i) }
		printf ".TP\n.B %s\n(%s, %s; default %s)\n", $2, $3, $4, ($5 == "" ? "unset" : $5)
		text = $6
		if (substr(text, 1, 1) == "." || substr(text, 1, 1) == "\x27") text = "\\&" text
		print text
	}'
