"""Peak RSS growth of ``to_backend`` with real weights: fastlower vs the reference (issue 11, part 6).

The bundled decoder at dim 1024 (hidden 2816, 11 layers: ~550 MiB of float32
weights), XNNPACK's partitions re-applied by ``PretaggedPartitioner`` and the
no-op backend, so the figure is the lowering machinery's own memory.  Each
implementation runs in its own fresh process (``memory_probe.py``); the growth
is VmHWM after the call minus VmRSS before it (``benchlib.PeakRss``).
Target: fastlower's growth <= 1.2 x the weights' size.

Run (one command; heavy, about 2-3 minutes on 2 cores)::

    .venv/bin/python -m pytest benchmarks/test_memory_bench.py -s

``--memory-layers`` / ``--memory-backend xnnpack`` change the size / backend.
Results are printed as a table and written to ``benchmarks/memory_results.json``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from tabulate import tabulate

HERE = os.path.dirname(os.path.abspath(__file__))
TARGET_RATIO = 1.2
MIN_WEIGHTS_MIB = 500


def probe(impl: str, layers: int, backend: str) -> dict:
    cmd = [sys.executable, os.path.join(HERE, "memory_probe.py"), "--impl", impl, "--layers", str(layers),
           "--backend", backend]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def results(request) -> dict:
    layers = request.config.getoption("--memory-layers")
    backend = request.config.getoption("--memory-backend")
    out = {impl: probe(impl, layers, backend) for impl in ("reference", "fastlower")}
    rows = [[r["impl"], r["backend"], r["layers"], f"{r['weights_mib']:.0f}", f"{r['baseline_mib']:.0f}",
             f"{r['growth_mib']:.0f}", f"{r['growth_mib'] / r['weights_mib']:.2f}", f"{r['seconds']:.1f}",
             r["delegates"]] for r in out.values()]
    print("\n" + tabulate(rows, headers=["impl", "backend", "layers", "weights MiB", "baseline MiB",
                                         "peak growth MiB", "growth / weights", "seconds", "delegates"]))
    with open(os.path.join(HERE, "memory_results.json"), "w") as f:
        json.dump(out, f, indent=1)
    return out


def test_weights_are_large(results):
    assert results["fastlower"]["weights_mib"] >= MIN_WEIGHTS_MIB


def test_same_partitions(results):
    assert results["fastlower"]["delegates"] == results["reference"]["delegates"] > 0


def test_fastlower_peak_growth_within_target(results):
    r = results["fastlower"]
    assert r["growth_mib"] <= TARGET_RATIO * r["weights_mib"], (
        f"fastlower grew {r['growth_mib']:.0f} MiB for {r['weights_mib']:.0f} MiB of weights "
        f"(reference: {results['reference']['growth_mib']:.0f} MiB)")
