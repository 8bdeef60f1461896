"""A lowering-cache hit from another checkout path costs what a hit from the same path does.

The lowering key holds node meta paths relative to base directories (issue 48,
``fastlower.cache.paths``), so a checkout at another path hits the entry another one
wrote, and the hit's meta is rewritten from the writer's paths to the reader's. This
times that rewrite against a hit with nothing to rewrite.

``checkout_hit_run.py`` (a 16-block Linear/ReLU/add/mul model defined in the script,
so every node's ``stack_trace`` names the checkout; ``XnnpackPartitioner``;
``to_executorch``) is copied into two checkouts at different absolute paths and depths.
Checkout ``a`` fills an empty cache folder (one cold process); then, each hit a new
process (as ``test_export_llm_bench.py``'s ``warm`` run), sharing that folder:

* ``same-path``: checkout ``a`` again (its bases are the writer's: nothing rewritten);
* ``other-path``: checkout ``bb/elsewhere`` (its meta rewritten to its own paths).

pytest-benchmark times each whole process; ``extra_info`` holds each round's lowering
window (``to_edge_transform_and_lower`` + ``to_executorch``, timed in the process) and
its median. Every round must hit the filler's key and give its ``.pte``.

``.venv/bin/python -m pytest benchmarks/test_checkout_hit_bench.py -p no:cacheprovider
--bench-rounds 5 --benchmark-json benchmarks/checkout_hit_bench.json``
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List

import pytest

SCRIPT = Path(__file__).resolve().parent / "checkout_hit_run.py"


def _run(checkout: Path, cache: Path, out: Path) -> Dict[str, Any]:
    environ = {k: v for k, v in os.environ.items()
               if not k.startswith("FASTLOWER_") and k != "PYTHONPATH"}
    environ.update(FASTLOWER_CACHE_DIR=str(cache), FASTLOWER_WORKERS="1")
    done = subprocess.run([sys.executable, str(checkout / "export.py"), str(out)],
                          cwd=checkout, env=environ, capture_output=True, timeout=600)
    assert done.returncode == 0, done.stderr.decode(errors="replace")[-5000:]
    return json.loads(out.read_text())


@pytest.fixture(scope="module")
def filled(tmp_path_factory) -> Dict[str, Any]:
    root = tmp_path_factory.mktemp("checkouts")
    checkouts = {"same-path": root / "a" / "repo", "other-path": root / "bb" / "elsewhere" / "repo"}
    for checkout in checkouts.values():
        checkout.mkdir(parents=True)
        shutil.copyfile(SCRIPT, checkout / "export.py")
    cache = root / "cache"
    cold = _run(checkouts["same-path"], cache, root / "cold.json")
    assert cold["lowering_cache"] == "miss", cold
    return {"root": root, "checkouts": checkouts, "cache": cache, "cold": cold}


@pytest.mark.parametrize("case", ["same-path", "other-path"])
def test_hit_from_a_checkout(benchmark, bench_options, filled, case):
    benchmark.group = "lowering-cache hit, each a new process"
    checkout, cold = filled["checkouts"][case], filled["cold"]
    runs: List[Dict[str, Any]] = []

    def one() -> None:
        runs.append(_run(checkout, filled["cache"], filled["root"] / f"{case}-{len(runs)}.json"))

    benchmark.pedantic(one, rounds=bench_options["rounds"], iterations=1)
    for run in runs:
        assert (run["lowering_cache"], run["key"]) == ("hit", cold["key"]), run
        assert run["pte_sha256"] == cold["pte_sha256"]
    windows = [run["window_seconds"] for run in runs]
    benchmark.extra_info.update({
        "checkout": str(checkout), "cold_window_seconds": cold["window_seconds"],
        "window_seconds": windows, "window_median_seconds": statistics.median(windows),
        "lower_median_seconds": statistics.median(run["lower_seconds"] for run in runs),
        "cache_seconds": [run["cache_seconds"] for run in runs]})
