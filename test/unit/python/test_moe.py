# SPDX-License-Identifier: Apache-2.0
"""The MoE ops' torch path and mkernel.nn.MoE on two gloo ranks (CPU, so the ops take the
fallback and say why) against a plain PyTorch reference: uniform, skewed and sparse routings
with empty experts and -1 slots, top-k 1 .. 8, token counts that differ between ranks and are
multiples of nothing, a rank without tokens, the capacity and bad-id refusals on every rank."""
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def test_moe_over_gloo_equals_reference(tmp_path):
    world = 2
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    env.setdefault("MKERNEL_PY_SOURCE", os.path.join(HERE, "..", "..", "..", "python"))
    procs = [subprocess.Popen([sys.executable, os.path.join(HERE, "moe_gloo_worker.py"),
                               str(r), str(world), str(tmp_path)], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(world)]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    for r, (p, out) in enumerate(zip(procs, outs)):
        assert p.returncode == 0, f"rank {r}:\n{out}"
        assert f"rank {r} all ok" in out, out
        assert out.count(f"rank {r} ok ops") == 8 and out.count(f"rank {r} ok raises") == 2
