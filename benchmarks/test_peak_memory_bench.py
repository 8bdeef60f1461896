"""Peak memory of ExecuTorch's own LLM export, reference and fastlower, each run its own process.

The pipeline of ``test_export_llm_bench.py`` (``python -m
executorch.extension.llm.export.export_llm``, torchao ``8da4w``, XNNPACK's two
partitioners, ``to_executorch()``; ``tests/pipeline/export_llm.py``), in one session
and in this order per config:

* ``reference``: plain ``python`` (ExecuTorch's code);
* ``cold``:      ``fastlower run --workers 2`` with an empty cache folder;
* ``warm``:      the same command again, a new process, the cache ``cold`` filled
                 (a lowering-cache hit);
* ``edited``:    the same with one weight of the checkpoint changed: a lowering-cache
                 miss against a filled cache (the preprocess cache serves the
                 partitions that do not hold that weight).

Two figures per run, in bytes (the table shows MiB):

* ``peak_rss_bytes``: the exporting process's peak resident set, its own
  ``ru_maxrss`` read when the exported script ends (exact; what GNU ``time -f %M``
  reports for it);
* ``tree_peak_pss_bytes``: the peak of the summed proportional set size of the
  exporting process and every process under it (the preprocess workers, a cache
  store's child), sampled every 0.2 s from the benchmark's process
  (``tests/pipeline/tree_memory.py``): pages shared copy-on-write are counted once. A
  sample can miss a short peak, so it is a lower bound.

Each ratio is to the reference of the same session; the ``.pte`` of every run but
``edited`` must equal the reference's. Targets (reported, and asserted with
``FASTLOWER_BENCH_MEM_ASSERT=1``): the exporting process <= 1.15x the reference's,
cold and warm; the tree <= 1.5x the reference's tree, cold.

Configs: ``FASTLOWER_BENCH_MEM_CONFIGS`` (default ``stories15m-8da4w``; add
``stories110m-8da4w`` on a quiet machine); runs: ``FASTLOWER_BENCH_MEM_RUNS`` (default
all); results: ``benchmarks/peak_memory_results.json`` (``FASTLOWER_BENCH_MEM_JSON``).
Run: ``.venv/bin/python -m pytest benchmarks/test_peak_memory_bench.py -s -p no:cacheprovider``
(stories15M: ~15 min on 2 cores).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from tabulate import tabulate

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from tests.pipeline.export_llm import CONFIGS, ExportRun, run_export  # noqa: E402

NAMES = os.environ.get("FASTLOWER_BENCH_MEM_CONFIGS", "stories15m-8da4w").split(",")
RUNS = tuple(os.environ.get("FASTLOWER_BENCH_MEM_RUNS", "reference,cold,warm,edited").split(","))
NUDGED = "layers.0.attention_norm.weight"
JSON_OUT = Path(os.environ.get("FASTLOWER_BENCH_MEM_JSON", HERE / "peak_memory_results.json"))
ASSERT_TARGETS = os.environ.get("FASTLOWER_BENCH_MEM_ASSERT", "") == "1"
# run -> (figure, largest ratio to the reference's); the targets
TARGETS = {"cold": {"peak_rss_bytes": 1.15, "tree_peak_pss_bytes": 1.5},
           "warm": {"peak_rss_bytes": 1.15}}
KEPT = ("process_seconds", "window_seconds", "lowering_cache", "cache_hits", "cache_misses",
        "pte_sha256", "peak_rss_bytes", "children_peak_rss_bytes", "calls_peak_rss", "calls",
        "tree_peak_pss_bytes", "sampled_peak_rss_bytes", "tree_peak_processes")
_RESULTS: dict = {}
MIB = 2 ** 20


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("peak_memory")


def _run(kind: str, config, work: Path) -> ExportRun:
    if kind == "reference":
        return run_export("reference", config, work)
    cache = work / f"cache-{config.name}"
    return run_export("fastlower", config, work, workers=2, cache_dir=cache,
                      nudge=NUDGED if kind == "edited" else None)


def _table(name: str, runs: dict) -> str:
    reference = runs.get("reference")
    rows = []
    for kind, run in runs.items():
        row = [kind, f"{run.peak_rss_bytes / MIB:,.0f}", f"{run.tree_peak_pss_bytes / MIB:,.0f}"]
        if reference is not None and kind != "reference":
            row += [f"{run.peak_rss_bytes / reference.peak_rss_bytes:.2f}x",
                    f"{run.tree_peak_pss_bytes / reference.tree_peak_pss_bytes:.2f}x"]
        else:
            row += ["", ""]
        rows.append(row + [f"{run.process_seconds:.0f}", run.lowering_cache])
    return f"{name}\n" + tabulate(rows, headers=[
        "run", "process peak RSS MiB", "tree peak PSS MiB", "process vs ref", "tree vs ref",
        "process s", "lowering cache"])


@pytest.mark.parametrize("kind", RUNS)
@pytest.mark.parametrize("name", NAMES)
def test_peak_memory(benchmark, name, kind, work):
    config = CONFIGS[name]
    runs = _RESULTS.setdefault(name, {})
    holder = {}
    benchmark.pedantic(lambda: holder.setdefault("run", _run(kind, config, work)),
                       rounds=1, iterations=1)
    run: ExportRun = holder["run"]
    assert run.ok, run.log
    assert run.peak_rss_bytes > 0 and run.tree_peak_pss_bytes > 0, run
    runs[kind] = run
    benchmark.extra_info.update({k: getattr(run, k) for k in KEPT})
    reference = runs.get("reference")
    if kind != "reference":
        assert reference is not None, "run the reference first (same session)"
        if kind == "edited":
            assert run.pte_sha256 != reference.pte_sha256, "the changed weight changed nothing"
            assert run.lowering_cache == ["miss"], run.lowering_cache
        else:
            assert run.pte_sha256 == reference.pte_sha256, f"{name} {kind}: .pte differs"
        if kind == "warm":
            assert run.lowering_cache == ["hit"], run.lowering_cache
    print("\n" + _table(name, runs))
    results = json.loads(JSON_OUT.read_text()) if JSON_OUT.exists() else {}
    for n, rs in _RESULTS.items():
        results[n] = {k: {f: getattr(r, f) for f in KEPT} for k, r in rs.items()}
    JSON_OUT.write_text(json.dumps(results, indent=1))
    if ASSERT_TARGETS and reference is not None:
        for figure, ratio in TARGETS.get(kind, {}).items():
            got = getattr(run, figure) / getattr(reference, figure)
            assert got <= ratio, f"{name} {kind}: {figure} {got:.2f}x the reference's (> {ratio}x)"
