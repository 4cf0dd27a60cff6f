# SPDX-License-Identifier: Apache-2.0
"""Library search: order, MKERNEL_LIB forms, the messages when nothing loads, and the real
libmkernel.so of this build (MKERNEL_TEST_LIB, set by meson where it was built)."""
import ctypes
import ctypes.util
import logging
import os
import shutil

import pytest

import mkernel
from mkernel import _lib
from mkernel.ops import _base


def test_search_order_without_mkernel_lib(monkeypatch):
    monkeypatch.delenv("MKERNEL_LIB", raising=False)
    c = _lib.candidates({})
    sources = [s for s, _ in c]
    # package first, then prefixes, the dynamic linker last; each step in one block
    assert sources[0] == "package" and sources[-1] == "system"
    assert sources.index("prefix") > max(i for i, s in enumerate(sources) if s == "package")
    pkg = os.path.dirname(os.path.abspath(mkernel.__file__))
    assert c[0][1] == os.path.join(pkg, "lib", "libmkernel.so.0")
    assert ("prefix", "/usr/local/lib/libmkernel.so.0") in c
    assert c[-1] == ("system", "libmkernel.so.0")


def test_mkernel_lib_file_is_the_only_candidate():
    assert _lib.candidates({"MKERNEL_LIB": "/x/libmkernel.so"}) == [("MKERNEL_LIB",
                                                                     "/x/libmkernel.so")]


def test_mkernel_lib_directory(tmp_path):
    c = _lib.candidates({"MKERNEL_LIB": str(tmp_path)})
    assert c == [("MKERNEL_LIB", str(tmp_path / "libmkernel.so.0")),
                 ("MKERNEL_LIB", str(tmp_path / "libmkernel.so"))]


def test_missing_file_named_in_error(monkeypatch):
    monkeypatch.setenv("MKERNEL_LIB", "/nonexistent/libmkernel.so")
    with pytest.raises(mkernel.LibraryNotFound) as e:
        mkernel.library()
    msg = str(e.value)
    assert "[MKERNEL_LIB] /nonexistent/libmkernel.so: no such file" in msg
    assert "MKERNEL_LIB" in msg and "meson" in msg  # says how to get one
    assert e.value.attempts == [("MKERNEL_LIB", "/nonexistent/libmkernel.so", "no such file")]


def test_not_a_library(monkeypatch, tmp_path):
    bad = tmp_path / "libmkernel.so"
    bad.write_text("not an ELF file\n")
    monkeypatch.setenv("MKERNEL_LIB", str(bad))
    with pytest.raises(mkernel.LibraryNotFound) as e:
        mkernel.library()
    assert "dlopen failed" in str(e.value) and str(bad) in str(e.value)


def test_another_library_is_refused(monkeypatch, tmp_path):
    # A real shared library that is not libmkernel: its missing entry points are listed.
    libm = ctypes.util.find_library("m")
    path = None
    for d in ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64"):
        if os.path.exists(os.path.join(d, libm)):
            path = os.path.join(d, libm)
            break
    assert path, "libm not found"
    fake = tmp_path / "libmkernel.so.0"
    shutil.copy(path, fake)
    monkeypatch.setenv("MKERNEL_LIB", str(tmp_path))
    with pytest.raises(mkernel.LibraryNotFound) as e:
        mkernel.library()
    msg = str(e.value)
    assert f"{fake}: not libmkernel: missing mkCommInit" in msg
    assert f"{tmp_path / 'libmkernel.so'}: no such file" in msg


def test_unloadable_library_sends_ops_to_torch_with_reason(monkeypatch, caplog):
    monkeypatch.setenv("MKERNEL_LIB", "/nonexistent/libmkernel.so")
    with caplog.at_level(logging.INFO, logger="mkernel"):
        fn, comm = _base.choose("attention", "mkAttention", [])
        _base.choose("attention", "mkAttention", [])
    assert fn is None and comm is None
    st = mkernel.stats()["attention"]
    assert st["torch"] == 2 and st["mkernel"] == 0
    assert "libmkernel.so not loaded" in st["reason"] and "/nonexistent" in st["reason"]
    lines = [r.getMessage() for r in caplog.records if "torch fallback" in r.getMessage()]
    assert len(lines) == 1, lines  # said once, not per call
    assert lines[0].startswith("mkernel.attention: torch fallback: libmkernel.so not loaded")


def test_strict_refuses_fallback(monkeypatch):
    monkeypatch.setenv("MKERNEL_LIB", "/nonexistent/libmkernel.so")
    monkeypatch.setenv("MKERNEL_STRICT", "1")
    with pytest.raises(mkernel.FallbackRefused, match="MKERNEL_STRICT=1.*not loaded"):
        _base.choose("grouped_gemm", "mkGroupedGemm", [])
    # a list names the ops that must not fall back; the others may
    monkeypatch.setenv("MKERNEL_STRICT", "gemm_all_reduce, all_to_all")
    with pytest.raises(mkernel.FallbackRefused):
        _base.choose("all_to_all", "mkAllToAll", [])
    assert _base.choose("attention", "mkAttention", []) == (None, None)


def _real_lib():
    path = os.environ.get("MKERNEL_TEST_LIB")
    if not path:
        pytest.skip("libmkernel.so was not built here (meson sets MKERNEL_TEST_LIB when it is)")
    return path


def test_real_library_loads_and_reports_where(monkeypatch, caplog):
    path = _real_lib()
    monkeypatch.setenv("MKERNEL_LIB", path)
    with caplog.at_level(logging.INFO, logger="mkernel"):
        info = mkernel.library()
    assert info.source == "MKERNEL_LIB"
    assert info.path == os.path.realpath(path)
    assert any(f"loaded {info.path} (found by MKERNEL_LIB)" in r.getMessage()
               for r in caplog.records)
    # it uses the NCCL that torch loaded: one libnccl in the process
    assert len(_lib._mapped_path("libnccl")) <= 1


def test_real_library_symbols_and_missing_ones(monkeypatch):
    monkeypatch.setenv("MKERNEL_LIB", _real_lib())
    for sym in ("mkGemmAllReduce", "mkAllToAll", "mkCommInit", "mkMemAlloc"):
        fn, why = _lib.function(sym, [])
        assert fn is not None and why is None, sym
    fn, why = _lib.function("mkNoSuchOperation", [])
    assert fn is None and why.endswith("has no mkNoSuchOperation (an older libmkernel.so)")


def test_real_library_error_codes_become_named_exceptions(monkeypatch):
    # The C API's own checks, through ctypes, without a GPU: a NULL comm and NULL buffers are
    # ncclInvalidArgument, raised as MkernelError naming the call and the result.
    monkeypatch.setenv("MKERNEL_LIB", _real_lib())
    fn, _ = _lib.function("mkGemmAllReduce", _base.GEMM_ARGTYPES)
    rc = fn(None, None, None, 16, 16, 16, 9, 1, None, None)
    with pytest.raises(mkernel.MkernelError) as e:
        _lib.check("mkGemmAllReduce", rc)
    assert e.value.name == "ncclInvalidArgument" and e.value.result == 4
    assert str(e.value).startswith("mkGemmAllReduce failed: ncclInvalidArgument")
    info = mkernel.library()
    err = ctypes.c_int(-1)
    rc = info.cdll.mkCommGetAsyncError(None, ctypes.byref(err))
    assert _lib.NCCL_RESULTS[rc][0] == "ncclInvalidArgument"


def test_error_names_cover_nccl_results():
    assert mkernel.MkernelError("f", 6).name == "ncclRemoteError"
    assert "remote rank" in str(mkernel.MkernelError("f", 6))
    assert mkernel.MkernelError("f", 99).name == "ncclResult 99"
