"""After lowering, torch's global generator is where ExecuTorch leaves it
(``fastlower.in_process.xnnpack_draws``): each case is a new process that seeds, lowers
a linear then a softmax program with XNNPACK, and reports the generator's state. Without
the draws, every fastlower case but the first differs from ExecuTorch's."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from tests import python_children

ROOT = Path(__file__).resolve().parents[1]


def _state(impl: str, workers: int = 1, cache: str = "-") -> list:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FASTLOWER_")}
    env["PYTHONPATH"] = str(ROOT)
    done = python_children.run([sys.executable, "-m", "tests.xnnpack_draws_child", impl,
                                str(workers), cache], cwd=ROOT, env=env, capture_output=True,
                               text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    line = [x for x in done.stdout.splitlines() if x.startswith("rng ")][-1]
    return line.split()[1:]


@pytest.fixture(scope="module")
def reference() -> str:
    return _state("reference")[0]


def test_in_process_preprocess_leaves_executorchs_state(reference):
    assert _state("fastlower", 1)[0] == reference


def test_worker_processes_leave_executorchs_state(reference):
    assert _state("fastlower", 2)[0] == reference


def test_cache_hits_leave_executorchs_state(reference, tmp_path):
    cache = str(tmp_path / "cache")
    assert _state("fastlower", 1, cache) == [reference, "miss", "miss"]
    assert _state("fastlower", 1, cache) == [reference, "hit", "hit"]
