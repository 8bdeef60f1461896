"""The adversarial fuzzer on a fixed seed range: each seed draws a repeated-block
structure and premise-breaking weights (``weights.draw``), lowers it with ExecuTorch
and with fastlower's default mode in one new process, one cache folder for all seeds
(so later seeds derive with templates, and are refit from entries, of earlier ones),
and every ``.pte`` (or error) must be ExecuTorch's.

The default run takes seeds 0-4 (seed 4 is refit, 2 and 3 derive); ``-m slow`` takes
5-29 (about 10 s a seed on 2 cores; CI runs the slow set too). Other ranges by hand:
``python -m tests.adversarial.run fuzz OUT.json FIRST STOP CACHE_DIR``
(docs/testing.md, "The adversarial fuzzer").
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from tests import python_children

ROOT = Path(__file__).resolve().parents[2]


def _fuzz(tmp_path: Path, first: int, stop: int) -> list:
    out = tmp_path / "fuzz.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("FASTLOWER_")}
    env["PYTHONPATH"] = str(ROOT)
    done = python_children.run([sys.executable, "-m", "tests.adversarial.run", "fuzz", str(out),
                                str(first), str(stop), str(tmp_path / "cache")], cwd=ROOT, env=env,
                               capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(out.read_text())


def _check(results: list, first: int, stop: int, refit: bool = True) -> None:
    assert [r["seed"] for r in results] == list(range(first, stop))
    different = [r for r in results if not r["same"]]
    assert not different, json.dumps(different, indent=1)
    # the range exercises what it is for: shortcuts taken, not only real lowerings
    assert not refit or any(r["cache"] == "refit" for r in results), results
    assert any(r["derived"] for r in results), results


def test_fixed_seed_range(tmp_path):
    _check(_fuzz(tmp_path, 0, 5), 0, 5)


@pytest.mark.slow
def test_more_seeds(tmp_path):
    # seeds 5-29 draw no refit (seed 4 of the default range does, and tests/structure's
    # refit tests): here every .pte must be ExecuTorch's, and members are derived
    _check(_fuzz(tmp_path, 5, 30), 5, 30, refit=False)
