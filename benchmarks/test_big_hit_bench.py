"""A lowering-cache hit at an LLM's size: what reading large entries costs.

``big_hit_run.py`` builds a model with Llama 3.2 1B's big ends (an embedding and an
output projection of ``--big-vocab`` x 2048, default 128256, around 2 small blocks),
quantized 8da4w as ``export_llm`` quantizes, and lowers it to XNNPACK with
``to_edge_transform_and_lower`` then ``to_executorch``, each run a new process:

* ``reference``: ExecuTorch's own functions, no cache;
* ``hit``: fastlower's, on the folder a first (cold) fastlower run filled;
* ``hit-from-disk``: the same, with the folder's files dropped from the page cache
  first (``posix_fadvise(DONTNEED)`` on those files only): the entries come off the disk.

The size limit is left unset (it follows the model: with the old 2 GiB limit these
entries were evicted as they were written). pytest-benchmark times each whole process;
``extra_info`` holds each round's lowering window (both calls, timed in the process),
its parts and the lookups' seconds. Every round must give the cold run's ``.pte``, and
a hit the cold run's key.

``flock /tmp/fastlower-heavy.lock .venv/bin/python -m pytest benchmarks/test_big_hit_bench.py
-p no:cacheprovider --bench-rounds 3 --benchmark-json benchmarks/big_hit_bench.json``
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List

import pytest

SCRIPT = Path(__file__).resolve().parent / "big_hit_run.py"


def _run(cache: Path, out: Path, vocab: int, *extra: str) -> Dict[str, Any]:
    environ = {k: v for k, v in os.environ.items()
               if not k.startswith("FASTLOWER_") and k != "PYTHONPATH"}
    environ.update(FASTLOWER_CACHE_DIR=str(cache), FASTLOWER_WORKERS="1")
    done = subprocess.run([sys.executable, str(SCRIPT), str(out), "--vocab", str(vocab),
                           *extra], env=environ, capture_output=True, timeout=1800)
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-5000:]
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def filled(tmp_path_factory, request) -> Dict[str, Any]:
    vocab = request.config.getoption("--big-vocab")
    root = tmp_path_factory.mktemp("big")
    cache = root / "cache"
    cold = _run(cache, root / "cold.json", vocab)
    assert cold["lowering_cache"] == "miss", cold
    return {"root": root, "cache": cache, "cold": cold, "vocab": vocab}


@pytest.mark.parametrize("case", ["reference", "hit", "hit-from-disk"])
def test_big_hit(benchmark, bench_options, filled, case):
    benchmark.group = f"vocabulary {filled['vocab']} x 2048, 8da4w, XNNPACK: each a new process"
    extra = {"reference": ["--reference"], "hit": [], "hit-from-disk": ["--evict"]}[case]
    runs: List[Dict[str, Any]] = []

    def one() -> None:
        out = filled["root"] / f"{case}-{len(runs)}.json"
        runs.append(_run(filled["cache"], out, filled["vocab"], *extra))

    benchmark.pedantic(one, rounds=bench_options["rounds"], iterations=1)
    cold = filled["cold"]
    for run in runs:
        assert run["pte_sha256"] == cold["pte_sha256"]
        if case != "reference":
            assert (run["lowering_cache"], run["key"]) == ("hit", cold["key"]), run
    windows = [run["window_seconds"] for run in runs]
    benchmark.extra_info.update({
        "cold_window_seconds": cold["window_seconds"], "window_seconds": windows,
        "window_median_seconds": statistics.median(windows),
        "lower_seconds": [run["lower_seconds"] for run in runs],
        "to_executorch_seconds": [run["to_executorch_seconds"] for run in runs],
        "write_seconds": [run["write_seconds"] for run in runs],
        "lookups": [run["lookups"] for run in runs],
        "pte_bytes": cold["pte_bytes"], "peak_rss_bytes": [run["peak_rss_bytes"] for run in runs]})
