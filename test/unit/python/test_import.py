# SPDX-License-Identifier: Apache-2.0
"""`import mkernel` on a machine without a GPU and without libmkernel.so."""
import os
import subprocess
import sys

import torch

import mkernel
from mkernel import ops

SRC = os.environ.get("MKERNEL_PY_SOURCE",
                     os.path.join(os.path.dirname(__file__), "..", "..", "..", "python"))


def test_import_needs_no_gpu_and_no_library():
    # A fresh interpreter with no visible GPU and a library path that does not exist: import
    # works, every op is registered, and nothing has loaded libmkernel yet.
    code = (
        "import os, torch, mkernel\n"
        "assert not torch.cuda.is_available()\n"
        "names = [n for n in mkernel.ops.OPS if hasattr(torch.ops.mkernel, n)]\n"
        "assert names == list(mkernel.ops.OPS), names\n"
        "maps = open('/proc/self/maps').read()\n"
        "assert 'libmkernel' not in maps\n"
        "print('ok', torch.__version__)\n"
    )
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="", MKERNEL_LIB="/nonexistent/libmkernel.so",
               PYTHONPATH=SRC)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("ok")


def test_every_op_has_a_wrapper_with_docstring_and_a_schema():
    for name in ops.OPS:
        fn = getattr(mkernel, name)
        assert callable(fn) and fn.__doc__ and len(fn.__doc__) > 80, name
        packet = getattr(torch.ops.mkernel, name)
        schema = str(packet.default._schema)
        assert schema.startswith(f"mkernel::{name}("), schema
    # the two GEMM + collective ops take the signature
    s = str(torch.ops.mkernel.gemm_all_reduce.default._schema)
    assert s == ("mkernel::gemm_all_reduce(Tensor a, Tensor b, str group_name, int b_layout) "
                 "-> Tensor"), s
    assert callable(mkernel.zigzag_shard) and callable(mkernel.zigzag_unshard)


def test_destroy_hook_installed_once():
    import torch.distributed as dist

    assert getattr(dist.destroy_process_group, "_mkernel_hook", False)
    first = dist.destroy_process_group
    mkernel.install_hooks()
    assert dist.destroy_process_group is first


def test_wheel_builds_with_every_op_file(tmp_path):
    # from a copy: setuptools writes build/ and *.egg-info next to pyproject.toml
    import shutil

    src = tmp_path / "src"
    shutil.copytree(SRC, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation",
                        "-q", "-w", str(tmp_path), str(src)], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    wheels = list(tmp_path.glob("mkernel-*.whl"))
    assert len(wheels) == 1, list(tmp_path.iterdir())
    import zipfile

    names = zipfile.ZipFile(wheels[0]).namelist()
    for op in ops.OPS:
        assert f"mkernel/ops/{op}.py" in names, names
    assert "mkernel/nn.py" in names and "mkernel/_lib.py" in names
