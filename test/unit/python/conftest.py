# SPDX-License-Identifier: Apache-2.0
"""Shared fixtures. torch is required: without it this file fails to import and so does every
test (scripts/deps.sh installs it); nothing here skips for want of torch."""
import os
import sys

import pytest
import torch  # noqa: F401  (a missing torch is a failure, by design)
import torch.distributed as dist

sys.path.insert(0, os.path.abspath(os.environ.get(
    "MKERNEL_PY_SOURCE", os.path.join(os.path.dirname(__file__), "..", "..", "..", "python"))))

import mkernel  # noqa: E402
from mkernel import _lib  # noqa: E402
from mkernel.ops import _base  # noqa: E402


@pytest.fixture(autouse=True)
def _fresh(monkeypatch):
    """Every test starts with no library loaded, no counters and no strict mode."""
    monkeypatch.delenv("MKERNEL_STRICT", raising=False)
    _lib.reset()
    _base.reset_stats()
    yield
    _lib.reset()


@pytest.fixture
def fake_world():
    """A 4-rank world of torch's fake backend, this process rank 1: group sizes and names for
    fake impls and tracing, no communication."""
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", rank=1, world_size=4, store=FakeStore())
    yield dist.group.WORLD
    dist.destroy_process_group()


@pytest.fixture
def gloo_world(tmp_path):
    """A 1-rank gloo world: a real process group of a backend mkernel must refuse."""
    store = dist.FileStore(str(tmp_path / "store"), 1)
    dist.init_process_group("gloo", rank=0, world_size=1, store=store)
    yield dist.group.WORLD
    dist.destroy_process_group()
