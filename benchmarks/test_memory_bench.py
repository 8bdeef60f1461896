"""Peak memory growth of ``to_backend`` with real weights: fastlower vs the reference.

The bundled decoder at dim 1024 (hidden 2816, 11 layers: ~550 MiB of float32
weights), XNNPACK's partitions re-applied by ``PretaggedPartitioner`` and the
no-op backend, so the figure is the lowering machinery's own memory.  Each run
is its own fresh process (``memory_probe.py``): the reference, fastlower with its
default forked preprocess workers, and fastlower with ``FASTLOWER_WORKERS=1``
(every partition copied and preprocessed in process).  Two figures per run:

* ``growth``: this process's VmHWM after the call minus VmRSS before it
  (``benchlib.PeakRss``); it misses what forked workers hold;
* ``machine growth``: the machine's MemAvailable before the call minus its lowest
  value during it (``benchlib.MachinePeak``, sampled): every process's pages, each
  counted once. Needs a quiet machine.

Target: fastlower's growth, by both figures and in both modes, <= 1.2 x the weights.

Run (one command; heavy, about 3-4 minutes on 2 cores)::

    .venv/bin/python -m pytest benchmarks/test_memory_bench.py -s

``--memory-layers`` / ``--memory-backend xnnpack`` change the size / backend.
Results are printed as a table and written to ``benchmarks/memory_results.json``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Dict, Optional

import pytest
from tabulate import tabulate

HERE = os.path.dirname(os.path.abspath(__file__))
TARGET_RATIO = 1.2
MIN_WEIGHTS_MIB = 500
# run name -> (implementation, FASTLOWER_WORKERS or None for the default)
RUNS = {"reference": ("reference", None), "fastlower": ("fastlower", None),
        "fastlower-1-worker": ("fastlower", "1")}


def probe(impl: str, layers: int, backend: str, workers: Optional[str] = None) -> dict:
    cmd = [sys.executable, os.path.join(HERE, "memory_probe.py"), "--impl", impl,
           "--layers", str(layers), "--backend", backend]
    env = dict(os.environ)
    env.pop("FASTLOWER_WORKERS", None)
    if workers is not None:
        env["FASTLOWER_WORKERS"] = workers
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800, env=env)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def results(request) -> Dict[str, dict]:
    layers = request.config.getoption("--memory-layers")
    backend = request.config.getoption("--memory-backend")
    out = {name: probe(impl, layers, backend, workers) for name, (impl, workers) in RUNS.items()}
    rows = [[name, r["workers"] or "-", r["backend"], r["layers"], f"{r['weights_mib']:.0f}",
             f"{r['growth_mib']:.0f}", f"{r['growth_mib'] / r['weights_mib']:.2f}",
             f"{r['machine_growth_mib']:.0f}", f"{r['machine_growth_mib'] / r['weights_mib']:.2f}",
             f"{r['seconds']:.1f}", r["delegates"]] for name, r in out.items()]
    print("\n" + tabulate(rows, headers=["run", "workers", "backend", "layers", "weights MiB",
                                         "process growth MiB", "/ weights", "machine growth MiB",
                                         "/ weights", "seconds", "delegates"]))
    with open(os.path.join(HERE, "memory_results.json"), "w") as f:
        json.dump(out, f, indent=1)
    return out


def test_weights_are_large(results):
    assert results["fastlower"]["weights_mib"] >= MIN_WEIGHTS_MIB


def test_same_partitions(results):
    assert results["fastlower"]["delegates"] == results["reference"]["delegates"] > 0
    assert results["fastlower-1-worker"]["delegates"] == results["reference"]["delegates"]


@pytest.mark.parametrize("run", ["fastlower", "fastlower-1-worker"])
@pytest.mark.parametrize("figure", ["growth_mib", "machine_growth_mib"])
def test_fastlower_peak_growth_within_target(results, run, figure):
    r = results[run]
    assert r[figure] <= TARGET_RATIO * r["weights_mib"], (
        f"{run}: {figure} {r[figure]:.0f} MiB for {r['weights_mib']:.0f} MiB of weights "
        f"(reference: {results['reference'][figure]:.0f} MiB)")
