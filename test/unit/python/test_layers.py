# SPDX-License-Identifier: Apache-2.0
"""mkernel.nn layers' weight layout and their torch path: two gloo ranks (CPU tensors, so the
layers take torch + c10d, saying why) against whole nn.Linear layers, with and without
sequence parallelism."""
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.parametrize("sp", ["0", "1"])
def test_tp_mlp_over_gloo_equals_whole_layers(tmp_path, sp):
    world = 2
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    env.setdefault("MKERNEL_PY_SOURCE", os.path.join(HERE, "..", "..", "..", "python"))
    procs = [subprocess.Popen([sys.executable, os.path.join(HERE, "layers_gloo_worker.py"),
                               str(r), str(world), str(tmp_path), sp], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for r in range(world)]
    outs = [p.communicate(timeout=180)[0] for p in procs]
    for r, (p, out) in enumerate(zip(procs, outs)):
        assert p.returncode == 0, f"rank {r}:\n{out}"
        assert f"rank {r} max error" in out
