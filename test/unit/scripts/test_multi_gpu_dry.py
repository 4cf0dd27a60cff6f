#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""The multi-GPU launchers on a machine without a GPU.

scripts/gpu/layout.sh (where each rank of a layout runs, the GPU count from MK_GPUS,
CUDA_VISIBLE_DEVICES or nvidia-smi -L), scripts/gpu/runtime-comm.sh under DRY_RUN=1 (each rank's
GPU, node, host identities and the no-multicast variables), scripts/gpu/multi-gpu.sh: exit 77
below two GPUs, exit 2 on bad usage, every phase's dry run on 2, 4 and 8 GPUs, and a real run of
one phase over fake per-rank binaries (a flat folder of executables standing in for the build)
that checks the failure accounting and the tags of its JSON lines. Environment: MK_SOURCE.
"""
import json
import os
import re
import shlex
import shutil
import stat
import subprocess
import tempfile
import unittest

SRC = os.environ.get("MK_SOURCE", os.path.join(os.path.dirname(__file__), "..", "..", ".."))
GPU = os.path.join(SRC, "scripts", "gpu")
MULTI = os.path.join(GPU, "multi-gpu.sh")
COMM = os.path.join(GPU, "runtime-comm.sh")
LAYOUT = os.path.join(GPU, "layout.sh")
NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
                "NVSHMEM_DISABLE_NVLS": "1"}
RANK_LINE = re.compile(r"^rank (\d+): (.*)$")


def clean_env(**extra):
    """This environment less what would tell the scripts a GPU count or a layout."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("MK_GPUS", "CUDA_VISIBLE_DEVICES", "STEPS", "LAYOUTS", "DRY_RUN",
                        "QUICK", "MK_SMS", "NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST",
                        "NVSHMEM_DISABLE_NVLS")}
    env.update(extra)
    return env


def sh(script, env, timeout=240):
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env,
                          timeout=timeout)


def write_exe(path, text):
    with open(path, "w") as f:
        f.write(text)
    os.chmod(path, os.stat(path).st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def rank_vars(line):
    """{VAR: VALUE} of a dry-run rank line (`env VAR=VALUE ... timeout ...`) and the rest."""
    words = shlex.split(line)
    assert words[0] == "env", line
    got, i = {}, 1
    while i < len(words) and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[i]):
        k, _, v = words[i].partition("=")
        got[k] = v
        i += 1
    return got, words[i:]


class Layout(unittest.TestCase):
    def layout(self, name, **env):
        r = sh(f'. "{LAYOUT}"; mk_layout {name}; rc=$?; '
               'echo "rc=$rc ranks=${MK_L_RANKS:-} nodes=${MK_L_NODES:-} '
               'nlocal=${MK_L_NLOCAL:-} per_gpu=${MK_L_PER_GPU:-} gpus=${MK_L_GPUS:-}"; '
               '[ "$rc" = 0 ] && for r in $(seq 0 $((MK_L_RANKS - 1))); do '
               'echo "r$r $(mk_layout_env $r | tr "\\n" " ")"; done; true', clean_env(**env))
        return r.stdout, r.stderr

    def test_per_gpu_layouts(self):
        for g in (2, 4, 8):
            out, _ = self.layout("g", MK_GPUS=str(g))
            self.assertIn(f"rc=0 ranks={g} nodes=1 nlocal={g} per_gpu=1 gpus={g}", out)
            for r in range(g):
                self.assertIn(f"r{r} NCCL_HOSTID=gpu-node-0 MKERNEL_HOSTID=gpu-node-0 "
                              f"MK_TEST_DEVICE={r} ", out)
            out, _ = self.layout("h", MK_GPUS=str(g))
            half = g // 2
            self.assertIn(f"rc=0 ranks={g} nodes=2 nlocal={half} per_gpu=1 gpus={g}", out)
            for r in range(g):
                node = r // half
                self.assertIn(f"r{r} NCCL_HOSTID=gpu-node-{node} MKERNEL_HOSTID=gpu-node-{node} "
                              f"MK_TEST_DEVICE={r} ", out)
        out, _ = self.layout("h4", MK_GPUS="8")
        self.assertIn("rc=0 ranks=4 nodes=2 nlocal=2 per_gpu=1 gpus=4", out)

    def test_one_gpu_layouts(self):
        out, _ = self.layout("c", MK_GPUS="8")
        self.assertIn("rc=0 ranks=4 nodes=2 nlocal=2 per_gpu=0 gpus=1", out)
        # every rank on GPU 0, a host identity each, mkernel's node shared by two
        self.assertIn("r3 NCCL_HOSTID=fake-node-3 MKERNEL_HOSTID=mk-node-1 MK_TEST_DEVICE=0 ", out)

    def test_refusals(self):
        out, err = self.layout("g", MK_GPUS="1")
        self.assertIn("rc=77", out)
        self.assertIn("at least 2 GPUs", err)
        out, err = self.layout("g8", MK_GPUS="4")
        self.assertIn("rc=77", out)
        self.assertIn("needs 8 GPUs, this host has 4", err)
        out, err = self.layout("h3", MK_GPUS="4")
        self.assertIn("rc=2", out)
        self.assertIn("even number", err)
        out, err = self.layout("x", MK_GPUS="4")
        self.assertIn("rc=2", out)
        self.assertIn("unknown layout x", err)
        out, err = self.layout("g", MK_GPUS="many")
        self.assertIn("rc=2", out)

    def test_gpu_count_sources(self):
        count = f'. "{LAYOUT}"; mk_gpu_count'
        with tempfile.TemporaryDirectory() as d:
            write_exe(os.path.join(d, "nvidia-smi"),
                      "#!/bin/sh\n[ \"$1\" = -L ] || exit 9\nfor i in 0 1 2 3 4 5; do "
                      "echo \"GPU $i: NVIDIA H200 (UUID: GPU-$i)\"; done\n"
                      "echo '  MIG 1g.18gb Device 0: (UUID: MIG-x)'\n")
            path = d + ":" + os.environ.get("PATH", "")
            self.assertEqual(sh(count, clean_env(PATH=path)).stdout.strip(), "6")
            self.assertEqual(sh(count, clean_env(PATH=path, CUDA_VISIBLE_DEVICES="2,5"))
                             .stdout.strip(), "2")
            self.assertEqual(sh(count, clean_env(PATH=path, CUDA_VISIBLE_DEVICES=""))
                             .stdout.strip(), "0")
            self.assertEqual(sh(count, clean_env(PATH=path, MK_GPUS="8",
                                                 CUDA_VISIBLE_DEVICES="0")).stdout.strip(), "8")


class RuntimeCommDry(unittest.TestCase):
    def test_ranks(self):
        for g in (2, 4, 8):
            for layout in ("g", "h"):
                r = subprocess.run(["bash", COMM, "/bin/test-x-gpu", layout, "--bench"],
                                   capture_output=True, text=True, timeout=60,
                                   env=clean_env(MK_GPUS=str(g), DRY_RUN="1"))
                self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
                ranks = {}
                for line in r.stdout.splitlines():
                    m = RANK_LINE.match(line)
                    if m:
                        ranks[int(m.group(1))] = rank_vars(m.group(2))
                self.assertEqual(sorted(ranks), list(range(g)), r.stdout)
                nodes = 1 if layout == "g" else 2
                for rank, (v, rest) in ranks.items():
                    node = rank // (g // nodes)
                    self.assertEqual(v["MK_TEST_DEVICE"], str(rank))
                    self.assertEqual(v["NCCL_HOSTID"], f"gpu-node-{node}")
                    self.assertEqual(v["MKERNEL_HOSTID"], f"gpu-node-{node}")
                    for k, want in NO_MULTICAST.items():
                        self.assertEqual(v.get(k), want, f"{k} of rank {rank}")
                    self.assertNotIn("CUDA_MPS_PIPE_DIRECTORY", v)  # no MPS with a GPU each
                    self.assertEqual(rest[2:], ["/bin/test-x-gpu", str(rank), str(g), "IDFILE",
                                                str(nodes), str(g // nodes), "--bench"])

    def test_too_few_gpus(self):
        r = subprocess.run(["bash", COMM, "/bin/true", "h8"], capture_output=True, text=True,
                           timeout=60, env=clean_env(MK_GPUS="4", DRY_RUN="1"))
        self.assertEqual(r.returncode, 77)
        self.assertIn("needs 8 GPUs", r.stderr)


class MultiGpu(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="multi-gpu-test-")
        # a flat folder of "build files": per-rank test binaries that print what they were given
        cls.flat = os.path.join(cls.tmp, "flat")
        os.mkdir(cls.flat)
        write_exe(os.path.join(cls.flat, "test-gar-gpu"), """#!/bin/bash
# RANK NRANKS IDFILE NNODES NLOCAL [options]: rank 0 prints a record of what it ran under;
# FAIL_RANK=r makes rank r fail
echo "rank $1: device ${MK_TEST_DEVICE:-unset}"
if [ "$1" = 0 ]; then
	printf '{"bench":"fake","rank":%s,"nranks":%s,"nnodes":%s,"nlocal":%s,"device":"%s",' \\
		"$1" "$2" "$4" "$5" "$MK_TEST_DEVICE"
	printf '"nvls":"%s","symm":"%s","nvshmem":"%s","hostid":"%s","emulated":true}\\n' \\
		"${NCCL_NVLS_ENABLE:-}" "${TORCH_SYMM_MEM_DISABLE_MULTICAST:-}" \\
		"${NVSHMEM_DISABLE_NVLS:-}" "$NCCL_HOSTID"
fi
[ "${FAIL_RANK:-x}" = "$1" ] && { echo "FAIL: rank $1 asked to"; exit 1; }
exit 0
""")
        # an unpacked bundle's shape (env.sh, lib/ with the plugin, bin/) for the dry runs
        cls.bundle = os.path.join(cls.tmp, "bundle")
        os.makedirs(os.path.join(cls.bundle, "lib"))
        os.makedirs(os.path.join(cls.bundle, "bin"))
        with open(os.path.join(cls.bundle, "env.sh"), "w") as f:  # as scripts/bundle.sh's
            f.write('mk_bundle=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)\n'
                    'export LD_LIBRARY_PATH="$mk_bundle/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"\n')
        open(os.path.join(cls.bundle, "lib", "libnccl-net-mkernel.so"), "w").close()
        cls.nosmi = os.path.join(cls.tmp, "bin")
        os.mkdir(cls.nosmi)
        # an nvidia-smi that shows one GPU: the host of a run refused with 77
        write_exe(os.path.join(cls.nosmi, "nvidia-smi"),
                  "#!/bin/sh\n[ \"$1\" = -L ] && echo 'GPU 0: NVIDIA H200 (UUID: GPU-0)'\n"
                  "exit 0\n")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.tmp, ignore_errors=True)

    def multi(self, *args, timeout=240, **env):
        return subprocess.run(["bash", MULTI, *args], capture_output=True, text=True,
                              timeout=timeout, env=clean_env(**env))

    def test_fewer_than_two_gpus(self):
        out = os.path.join(self.tmp, "out-77")
        for env in ({"MK_GPUS": "1"}, {"MK_GPUS": "0"}, {"CUDA_VISIBLE_DEVICES": ""},
                    {"PATH": self.nosmi + ":" + os.environ["PATH"]}):
            for args in ((), ("test-gar",), ("test-gar", "bench-gar")):
                r = self.multi(self.flat, out, *args, **env)
                self.assertEqual(r.returncode, 77, (env, args, r.stdout, r.stderr))
                self.assertIn("needs at least 2", r.stdout)
                self.assertFalse(os.path.exists(os.path.join(out, "test-gar")))
        # re-tuning alone is CPU work: no GPU needed (and no JSON lines here: it fails, saying so)
        r = self.multi(self.flat, out, "retune", MK_GPUS="0")
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("no JSON lines", r.stdout)
        self.assertIn("FAILED: retune", r.stdout)

    def test_bad_usage(self):
        self.assertEqual(self.multi(self.flat).returncode, 2)
        r = self.multi(self.flat, os.path.join(self.tmp, "o"), "test-gar", "nonsense",
                       MK_GPUS="8")
        self.assertEqual(r.returncode, 2)
        self.assertIn("unknown phase 'nonsense'", r.stderr)
        r = self.multi(os.path.join(self.tmp, "missing"), os.path.join(self.tmp, "o"),
                       MK_GPUS="8")
        self.assertEqual(r.returncode, 2)

    def dry_all(self, gpus):
        out = os.path.join(self.tmp, f"dry-{gpus}")
        r = self.multi(self.bundle, out, timeout=280, MK_GPUS=str(gpus), MK_SMS="132", DRY_RUN="1")
        self.assertEqual(r.returncode, 0, r.stdout[-3000:] + r.stderr[-3000:])
        self.assertIn("multi-gpu: every phase passed (25 phases", r.stdout)
        steps, step = {}, None
        for line in r.stdout.splitlines():
            m = re.match(r"^== (\S+) \(layout (\S+), (\d+) s\)", line)
            if m:
                step = m.group(1)
                steps[step] = {"layout": m.group(2), "ranks": {}}
                continue
            m = RANK_LINE.match(line)
            if m and step is not None:
                v, _ = rank_vars(m.group(2)) if m.group(2).startswith("env ") else ({}, [])
                steps[step]["ranks"][int(m.group(1))] = v
        return steps, r.stdout

    def check_dry(self, gpus):
        steps, text = self.dry_all(gpus)
        for name in ("comm-g", "comm-kill-h", "gar-g", "gar-h", "rs-kill-h", "ag-h", "ring-g",
                     "moe-kill-g", "check-h", "kill-g", "graph-h", "gar-bench-h",
                     "gar-paths-g", "rs-bench-g", "ring-bench-h", "ring-split33-h",
                     "ring-adaptive-g", "moe-bench-h", "moe-comm66-h", "comm-bench-g",
                     "gar-bench-h-plugin", "comm-bench-h-plugin", "cmdq-cpu", "mlp-bench-g",
                     "async-tp", "ring-torch-h", "nccl-h", "nccl-g"):
            self.assertIn(name, steps, f"{gpus} GPUs: step {name} missing")
        for q in range(gpus):
            self.assertIn(f"cmdq-gpu{q}", steps)
        self.assertNotIn(f"cmdq-gpu{gpus}", steps)
        self.assertIn("== retune (CPU)", text)
        # every launched step: a rank per GPU, rank r on GPU r, never multicast
        launched = 0
        for name, s in steps.items():
            if not s["ranks"] or name.startswith("nccl-"):
                continue
            launched += 1
            self.assertEqual(sorted(s["ranks"]), list(range(gpus)), name)
            for r, v in s["ranks"].items():
                self.assertEqual(v.get("MK_TEST_DEVICE"), str(r), f"{name} rank {r}")
                for k, want in NO_MULTICAST.items():
                    self.assertEqual(v.get(k), want, f"{name} rank {r}: {k}")
                half = gpus // 2 if s["layout"].startswith("h") else gpus
                self.assertEqual(v.get("NCCL_HOSTID"), f"gpu-node-{r // half}", f"{name} {r}")
        self.assertGreater(launched, 40)
        # stock NCCL's runs: one process per GPU too (its own launcher's dry run)
        self.assertRegex(text, rf"rank {gpus - 1}:.* MK_TEST_DEVICE={gpus - 1} .*"
                               rf"LOCAL_RANK={gpus - 1} RANK={gpus - 1} WORLD_SIZE={gpus} ")
        # the plugin's benchmarks ask for the plugin; the others leave NCCL its own transport
        for name in ("gar-bench-h-plugin", "comm-bench-h-plugin"):
            v = steps[name]["ranks"][0]
            self.assertEqual(v.get("NCCL_NET"), "mkernel", name)
            self.assertTrue(v.get("NCCL_NET_PLUGIN", "").endswith("/libnccl-net-mkernel.so"))
        self.assertNotIn("NCCL_NET", steps["gar-bench-h"]["ranks"][0])

    def test_dry_run_2(self):
        self.check_dry(2)

    def test_dry_run_8(self):
        self.check_dry(8)

    def test_dry_run_4_some(self):
        out = os.path.join(self.tmp, "dry-4")
        r = self.multi(self.bundle, out, "test-gar", "sweep-moe-h", MK_GPUS="4", MK_SMS="132",
                       DRY_RUN="1")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("every phase passed (2 phases", r.stdout)
        self.assertIn("layout h: 4 rank(s), 2 node(s) x 2, one GPU per rank", r.stdout)
        self.assertNotIn("moe-policy-g", r.stdout)  # sweep-moe-h: the h layouts only
        self.assertIn("moe-policy-h", r.stdout)

    def test_real_run_fake_binaries(self):
        out = os.path.join(self.tmp, "real")
        env = dict(MK_GPUS="4", MK_SMS="132", STEPS="gar-g gar-h")
        r = self.multi(self.flat, out, "test-gar", **env)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("multi-gpu test-gar: every step passed", r.stdout)
        with open(os.path.join(out, "test-gar.jsonl")) as f:
            recs = [json.loads(x) for x in f]
        self.assertEqual(len(recs), 2)  # rank 0's line of each step, the others' left out
        by = {x["step"]: x for x in recs}
        self.assertEqual(set(by), {"gar-g", "gar-h"})
        for name, nodes in (("gar-g", 1), ("gar-h", 2)):
            x = by[name]
            self.assertEqual((x["nranks"], x["nnodes"], x["nlocal"]), (4, nodes, 4 // nodes))
            self.assertEqual((x["layout"], x["gpus"], x["ranks"], x["share"]),
                             (name[-1], 4, 4, 132))
            self.assertIs(x["emulated"], False)  # the launcher's word, not the record's
            self.assertEqual((x["device"], x["hostid"]), ("0", "gpu-node-0"))
            self.assertEqual((x["nvls"], x["symm"], x["nvshmem"]), ("0", "1", "1"))
        with open(os.path.join(out, "test-gar", "gar-h.log")) as f:
            log = f.read()
        for rank in range(4):
            self.assertIn(f"rank {rank}: device {rank}", log)
        # a rank that fails: the step and the phase named, exit 1; a run again replaces the
        # phase's records
        r = self.multi(self.flat, out, "test-gar", FAIL_RANK="3", **env)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("multi-gpu test-gar: FAILED: gar-g gar-h", r.stdout)
        self.assertIn("FAIL: rank 3 asked to", r.stdout)
        with open(os.path.join(out, "test-gar.jsonl")) as f:
            self.assertEqual(len(f.readlines()), 2)
        # several phases: the failing one named at the end; a missing binary fails its step
        r = self.multi(self.flat, out, "test-gar", "test-rs", MK_GPUS="4", MK_SMS="132",
                       STEPS="gar-g rs-g")
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertIn("multi-gpu test-rs: FAILED: rs-g", r.stdout)
        self.assertIn("multi-gpu: FAILED phases: test-rs (of 2", r.stdout)


if __name__ == "__main__":
    unittest.main(verbosity=2)
