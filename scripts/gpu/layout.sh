# SPDX-License-Identifier: Apache-2.0
# Sourced by the scripts in scripts/gpu that start one process per rank: where each rank of a
# layout runs (which GPU, which node) on this host.
#
# Layouts on one GPU (every rank on GPU 0: one-host emulation; several ranks want MPS):
#   s 1 rank;  a 2 nodes x 1 rank;  a4 4 nodes x 1 rank;  b 1 node x 2 ranks;  c 2 nodes x 2 ranks.
#   Every process has its own NCCL_HOSTID (NCCL rejects two ranks of one host identity on one
#   GPU), and the ranks of an emulated node share an MKERNEL_HOSTID (mkernel maps their heaps
#   into each other through CUDA IPC on the one GPU).
# Layouts with one GPU per rank (a host of several GPUs; no MPS):
#   g  1 node x G ranks: one host identity, so NCCL uses NVLink/P2P between the GPUs and
#      mkernel maps the peers' heaps through CUDA IPC between distinct GPUs;
#   h  2 nodes x G/2 ranks: the first half of the GPUs is one node, the second half the other
#      (NCCL_HOSTID and MKERNEL_HOSTID per half), so NCCL and mkernel cross between the halves
#      through the network path (the net plugin or NCCL's Socket transport; mkernel's
#      transport) and stay on NVLink within a half;
#   gN, hN the same on the first N GPUs (g4 on a host of 8).
#   Rank r runs on device r of the GPUs this process sees (MK_TEST_DEVICE=r: the per-rank test
#   binaries pass it to cudaSetDevice, python-rank.sh makes it LOCAL_RANK).
# G, the GPUs this process sees: MK_GPUS when set (to say it without asking the driver), else the
# entries of CUDA_VISIBLE_DEVICES when set, else the `GPU n:` lines of `nvidia-smi -L`.
#
#   mk_gpu_count         prints G (0 when there is no GPU or no nvidia-smi)
#   mk_layout LAYOUT     sets MK_L_RANKS, MK_L_NODES, MK_L_NLOCAL, MK_L_PER_GPU (1: one GPU per
#                        rank) and MK_L_GPUS (GPUs used); returns 2 for an unknown layout or one
#                        the GPUs cannot hold (odd G for h), 77 when the host has too few GPUs,
#                        saying why on stderr
#   mk_layout_env R      prints rank R's variables (NCCL_HOSTID, MKERNEL_HOSTID, MK_TEST_DEVICE),
#                        one VAR=VALUE per line, for the layout mk_layout set
# shellcheck disable=SC2034 # the MK_L_* variables are read by the scripts that source this file

mk_gpu_count() {
	local n
	if [ -n "${MK_GPUS:-}" ]; then
		echo "$MK_GPUS"
	elif [ -n "${CUDA_VISIBLE_DEVICES+set}" ]; then
		# "" hides every GPU; otherwise one device per comma-separated entry
		n=0
		[ -n "$CUDA_VISIBLE_DEVICES" ] && n=$(tr ',' '\n' <<<"$CUDA_VISIBLE_DEVICES" | grep -c .)
		echo "$n"
	elif command -v nvidia-smi >/dev/null 2>&1; then
		n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU [0-9]')
		echo "${n:-0}"
	else
		echo 0
	fi
}

mk_layout() {
	local l=$1 g want
	MK_L_PER_GPU=0 MK_L_GPUS=1
	case $l in
	s) MK_L_RANKS=1 MK_L_NODES=1 MK_L_NLOCAL=1 ;;
	a) MK_L_RANKS=2 MK_L_NODES=2 MK_L_NLOCAL=1 ;;
	a4) MK_L_RANKS=4 MK_L_NODES=4 MK_L_NLOCAL=1 ;;
	b) MK_L_RANKS=2 MK_L_NODES=1 MK_L_NLOCAL=2 ;;
	c) MK_L_RANKS=4 MK_L_NODES=2 MK_L_NLOCAL=2 ;;
	g | h | g[1-9] | g[1-9][0-9] | h[1-9] | h[1-9][0-9])
		g=$(mk_gpu_count)
		if ! [[ $g =~ ^[0-9]+$ ]]; then
			echo "layout $l: cannot tell how many GPUs there are ('$g'; MK_GPUS says it)" >&2
			return 2
		fi
		want=${l:1}
		want=${want:-$g}
		if [ "$want" -lt 2 ]; then
			echo "layout $l: one GPU per rank needs at least 2 GPUs (this host: $g; layout s is one rank)" >&2
			return 77
		fi
		if [ "$want" -gt "$g" ]; then
			echo "layout $l: needs $want GPUs, this host has $g" >&2
			return 77
		fi
		if [ "${l:0:1}" = h ] && [ $((want % 2)) != 0 ]; then
			echo "layout $l: two nodes of equal size need an even number of GPUs (not $want)" >&2
			return 2
		fi
		MK_L_PER_GPU=1 MK_L_GPUS=$want MK_L_RANKS=$want
		if [ "${l:0:1}" = g ]; then
			MK_L_NODES=1 MK_L_NLOCAL=$want
		else
			MK_L_NODES=2 MK_L_NLOCAL=$((want / 2))
		fi
		;;
	*)
		echo "unknown layout $l (s a a4 b c: ranks on GPU 0; g h gN hN: one GPU per rank)" >&2
		return 2
		;;
	esac
	return 0
}

mk_layout_env() {
	local r=$1 node=$(($1 / MK_L_NLOCAL))
	if [ "$MK_L_PER_GPU" = 1 ]; then
		echo "NCCL_HOSTID=gpu-node-$node"
		echo "MKERNEL_HOSTID=gpu-node-$node"
		echo "MK_TEST_DEVICE=$r"
	else
		echo "NCCL_HOSTID=fake-node-$r"
		echo "MKERNEL_HOSTID=mk-node-$node"
		echo "MK_TEST_DEVICE=0"
	fi
}
