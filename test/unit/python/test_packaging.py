# SPDX-License-Identifier: Apache-2.0
"""meson install adds mkernel.pc and the parameter table (man page and markdown), and the man
page lists every variable of the registry."""
import os
import re
import subprocess

import pytest

BUILD = os.environ.get("MKERNEL_TEST_BUILD")
SOURCE = os.environ.get("MKERNEL_TEST_SOURCE")
PARAMS = os.environ.get("MKERNEL_TEST_PARAMS")


def _need_build():
    if not (BUILD and SOURCE and PARAMS):
        pytest.skip("run through meson test (it sets MKERNEL_TEST_BUILD/SOURCE/PARAMS)")


def _registry_names():
    out = subprocess.run([PARAMS, "--markdown"], capture_output=True, text=True, check=True,
                         env={"PATH": os.environ["PATH"]}).stdout
    return re.findall(r"^\| `(MKERNEL_[A-Z0-9_]+)`", out, re.M)


def test_man_page_lists_every_parameter():
    _need_build()
    man = subprocess.run([os.path.join(SOURCE, "packaging", "params-man.sh"), PARAMS, "9.9",
                          "man"], capture_output=True, text=True, check=True).stdout
    assert man.startswith('.TH MKERNEL-PARAMS 7 "" "mkernel 9.9"')
    names = _registry_names()
    assert len(names) > 20
    listed = re.findall(r"^\.B (MKERNEL_[A-Z0-9_]+)$", man, re.M)
    assert listed == names
    # every entry has its type/default line and its help text
    assert man.count(".TP\n") == len(names)


def test_meson_install_adds_pc_and_docs(tmp_path):
    _need_build()
    r = subprocess.run(["meson", "install", "-C", BUILD, "--no-rebuild", "--quiet", "--destdir",
                        str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    files = {os.path.relpath(os.path.join(d, f), tmp_path) for d, _, fs in os.walk(tmp_path)
             for f in fs}
    man = [f for f in files if f.endswith("man7/mkernel-params.7")]
    md = [f for f in files if f.endswith("doc/mkernel/parameters.md")]
    assert man and md, sorted(files)
    if os.environ.get("MKERNEL_TEST_LIB"):  # libmkernel.so built here: its pc file too
        pcs = [f for f in files if f.endswith("pkgconfig/mkernel.pc")]
        assert pcs, sorted(files)
        pcdir = os.path.dirname(os.path.join(tmp_path, pcs[0]))
        env = dict(os.environ, PKG_CONFIG_PATH=pcdir)
        out = subprocess.run(["pkg-config", "--define-prefix", "--libs", "--cflags", "mkernel"],
                             capture_output=True, text=True, env=env, check=True).stdout
        assert "-lmkernel" in out and "-I" in out
        assert any(f.endswith("include/mkernel.h") for f in files)
