"""ExecuTorch's own LLM export pipeline, reference and fastlower, each run its own process.

``python -m executorch.extension.llm.export.export_llm`` (torchao ``8da4w`` or no
quantization, KV cache, custom SDPA, dynamic shapes, XNNPACK's two partitioners in
turn, ``to_executorch()``) with deterministic weights (``tests/pipeline/export_llm.py``).
Per config, in one session, in this order:

* ``reference``: plain ``python`` (ExecuTorch's code);
* ``serial``:    ``fastlower run --workers 1 --no-cache``;
* ``cold``:      ``fastlower run --workers 2`` with an empty cache folder;
* ``warm``:      the same command again, a new process, the cache ``cold`` filled
                 (the whole call from the lowering cache, ``to_executorch`` too);
* ``warm-preprocess``: the same again with ``FASTLOWER_LOWERING_CACHE=0``: every
                 partition from the preprocess cache, the edge stage and partitioners
                 run (a warm run without the lowering cache);
* ``edited``:    the same, with one weight of the checkpoint changed (the first
                 element of layer 0's ``wq``): the lowering cache refits ``cold``'s
                 entry (``fastlower.cache.refit``); compared with ``reference-edited``
                 (ExecuTorch on that checkpoint) when it ran;
* ``reference-b``: ExecuTorch on checkpoint B (seed 1: every weight different);
* ``refit-b``:   ``fastlower run --workers 2`` on checkpoint B with the cache ``cold``
                 filled (checkpoint A): a refit; its ratio is to ``reference-b``;
* ``reference-edited``: ExecuTorch on ``edited``'s checkpoint.

Each reports the whole process's wall time, the lowering window
(``to_edge_transform_and_lower`` + ``to_executorch``), ``to_backend``'s time (both
partitioners), cache hits/misses, and the ``.pte``'s digest, which must equal the
reference's in every run. Configs: ``FASTLOWER_BENCH_LLM_CONFIGS`` (default
``stories15m-8da4w,stories110m-8da4w``; ``-fp32`` variants without quantization); results JSON:
``FASTLOWER_BENCH_LLM_JSON`` (default ``benchmarks/export_llm_results.json``); runs:
``FASTLOWER_BENCH_LLM_RUNS`` (default all, comma-separated); the
table in ``benchmarks/README.md`` is made from it by ``report_export_llm.py``.

With ``FASTLOWER_BENCH_LLM_ROUNDS=N`` one more case per config,
``test_cold_against_reference_interleaved``, runs the reference and a cold fastlower
process (an empty cache each time) in alternating pairs, N rounds, the pair's order
flipped every round (ABBA...): the host's speed drifts by tens of percent within an
hour, so a ratio is only fair between runs close in time. It reports each round's
ratios and their median (JSON key ``interleaved``).
Run (quiet 2-core machine, ~45 min):
``.venv/bin/python -m pytest benchmarks/test_export_llm_bench.py -s -p no:cacheprovider``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from tests.pipeline.export_llm import CONFIGS, ExportRun, run_export  # noqa: E402

NAMES = os.environ.get("FASTLOWER_BENCH_LLM_CONFIGS",
                       "stories15m-8da4w,stories110m-8da4w").split(",")
ALL_RUNS = ("reference", "serial", "cold", "warm", "warm-preprocess", "reference-edited",
            "edited", "reference-b", "refit-b")
# a subset, in this order (e.g. "reference,cold,warm" for the biggest config); the
# reference always runs first, as every ratio is to it
RUNS = tuple(os.environ.get("FASTLOWER_BENCH_LLM_RUNS", ",".join(ALL_RUNS)).split(","))
NUDGED = "layers.0.attention.wq.weight"
# each run's own reference (its checkpoint's): the others' is "reference"
OWN_REFERENCE = {"edited": "reference-edited", "refit-b": "reference-b"}
ROUNDS = int(os.environ.get("FASTLOWER_BENCH_LLM_ROUNDS", "0") or 0)
# what the interleaved rounds keep of each run, beyond the ratios
PROFILED = ("process_seconds", "target_seconds", "calls", "lowering_cache_seconds",
            "calls_minor_faults")
JSON_OUT = Path(os.environ.get("FASTLOWER_BENCH_LLM_JSON", HERE / "export_llm_results.json"))
_RESULTS: dict = {}


def _all_configs():
    configs = dict(CONFIGS)
    for name in list(configs):  # every size also without quantization
        fp32 = configs[name].with_qmode(None)
        configs[fp32.name] = fp32
    return configs


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    return tmp_path_factory.mktemp("export_llm")


def _run(kind: str, config, work: Path) -> ExportRun:
    cache = work / f"cache-{config.name}"
    if kind == "reference":
        return run_export("reference", config, work)
    if kind == "reference-edited":
        return run_export("reference", config, work, nudge=NUDGED)
    if kind == "reference-b":
        return run_export("reference", config, work, seed=1)
    if kind == "refit-b":
        return run_export("fastlower", config, work, workers=2, cache_dir=cache, seed=1)
    if kind == "serial":
        return run_export("fastlower", config, work, workers=1)
    if kind == "warm-preprocess":
        return run_export("fastlower", config, work, workers=2, cache_dir=cache,
                          extra_env={"FASTLOWER_LOWERING_CACHE": "0"})
    if kind == "edited":
        return run_export("fastlower", config, work, workers=2, cache_dir=cache, nudge=NUDGED)
    return run_export("fastlower", config, work, workers=2, cache_dir=cache)


@pytest.mark.parametrize("kind", RUNS)
@pytest.mark.parametrize("name", NAMES)
def test_export_llm(benchmark, name, kind, work):
    config = _all_configs()[name]
    runs = _RESULTS.setdefault(name, {})
    holder = {}
    benchmark.pedantic(lambda: holder.setdefault("run", _run(kind, config, work)),
                       rounds=1, iterations=1)
    run: ExportRun = holder["run"]
    assert run.ok, run.log
    runs[kind] = run
    benchmark.extra_info.update({k: v for k, v in dataclasses.asdict(run).items() if k != "log"})
    print(f"\n{name} {kind}: process {run.process_seconds:.1f}s window {run.window_seconds:.1f}s "
          f"to_backend {run.to_backend_seconds:.1f}s hits {run.cache_hits} misses "
          f"{run.cache_misses} lowering cache {run.lowering_cache} pte {run.pte_sha256[:12]}")
    if not kind.startswith("reference"):
        reference = runs.get(OWN_REFERENCE.get(kind, "reference"))
        if kind == "edited" and reference is None:  # no reference of that checkpoint ran
            assert run.pte_sha256 != runs["reference"].pte_sha256, "the weight changed nothing"
            reference = runs["reference"]
        else:
            assert reference is not None, "run the reference first (same session)"
            assert run.pte_sha256 == reference.pte_sha256, f"{name} {kind}: .pte differs"
        if kind in OWN_REFERENCE:  # a new checkpoint after "cold": refit from its entry
            assert run.lowering_cache == ["refit"], run
        benchmark.extra_info["window_ratio"] = reference.window_seconds / run.window_seconds
        benchmark.extra_info["process_ratio"] = reference.process_seconds / run.process_seconds
    if kind == "warm":
        assert run.lowering_cache == ["hit"] and run.cache_misses == 0, run
    if kind == "warm-preprocess":
        assert run.lowering_cache == [None] and run.cache_misses == 0 < run.cache_hits, run
    # configs this session did not run keep their rows, and a config's interleaved rounds
    # (pairs of their own) stay; its other runs are replaced together, as every ratio is
    # to the reference of the same session
    results = json.loads(JSON_OUT.read_text()) if JSON_OUT.exists() else {}
    for n, rs in _RESULTS.items():
        kept = {k: v for k, v in results.get(n, {}).items() if k == "interleaved"}
        results[n] = {**kept, **{k: {f: v for f, v in dataclasses.asdict(r).items() if f != "log"}
                                 for k, r in rs.items()}}
    JSON_OUT.write_text(json.dumps(results, indent=1))


def _commit() -> Optional[str]:
    """The checkout's commit, ``+`` when its tracked files differ from it (the runs use the
    installed fastlower: ``pip install .`` from this checkout)."""
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE, text=True,
                              capture_output=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "diff", "--quiet", "HEAD"], cwd=HERE).returncode != 0
    except (OSError, subprocess.CalledProcessError):
        return None
    return head + ("+" if dirty else "")


def _merge_into_json(name: str, key: str, value) -> None:
    results = json.loads(JSON_OUT.read_text()) if JSON_OUT.exists() else {}
    results.setdefault(name, {})[key] = value
    JSON_OUT.write_text(json.dumps(results, indent=1))


@pytest.mark.skipif(ROUNDS < 1, reason="set FASTLOWER_BENCH_LLM_ROUNDS=N to run N interleaved "
                                         "reference/cold pairs")
@pytest.mark.parametrize("name", NAMES)
def test_cold_against_reference_interleaved(benchmark, name, work):
    config = _all_configs()[name]
    rounds = []

    def one_pair(index: int) -> dict:
        cache = work / f"cache-interleaved-{config.name}-{index}"  # empty: a cold run
        order = ("reference", "cold") if index % 2 == 0 else ("cold", "reference")
        started = datetime.now(timezone.utc).isoformat(timespec="seconds")
        pair = {}
        for kind in order:
            pair[kind] = (run_export("reference", config, work) if kind == "reference" else
                          run_export("fastlower", config, work, workers=2, cache_dir=cache))
            assert pair[kind].ok, pair[kind].log
        reference, cold = pair["reference"], pair["cold"]
        assert cold.pte_sha256 == reference.pte_sha256, f"{name} round {index}: .pte differs"
        assert cold.lowering_cache == ["miss"] and cold.cache_hits == 0, cold
        return {"order": list(order), "started": started, "commit": _commit(),
                **{f"{kind}_{field}": getattr(run, field) for kind, run in pair.items()
                   for field in ("process_seconds", "window_seconds", "to_backend_seconds")},
                # each run's timed calls, for report_export_llm.py's profile of the rounds
                "runs": {kind: {field: getattr(run, field) for field in PROFILED}
                         for kind, run in pair.items()},
                "window_ratio": reference.window_seconds / cold.window_seconds,
                "process_ratio": reference.process_seconds / cold.process_seconds,
                "to_backend_ratio": reference.to_backend_seconds / cold.to_backend_seconds}

    benchmark.pedantic(lambda: rounds.extend(one_pair(i) for i in range(ROUNDS)),
                       rounds=1, iterations=1)
    summary = {"rounds": rounds}
    for ratio in ("window_ratio", "process_ratio", "to_backend_ratio"):
        summary[f"median_{ratio}"] = statistics.median(r[ratio] for r in rounds)
    benchmark.extra_info.update(summary)
    for i, r in enumerate(rounds):
        print(f"\n{name} round {i} ({' then '.join(r['order'])}): window "
              f"{r['reference_window_seconds']:.1f}/{r['cold_window_seconds']:.1f} s = "
              f"{r['window_ratio']:.2f}x, process {r['process_ratio']:.2f}x, to_backend "
              f"{r['to_backend_ratio']:.2f}x")
    print(f"{name} median over {ROUNDS} rounds: window {summary['median_window_ratio']:.2f}x, "
          f"process {summary['median_process_ratio']:.2f}x, to_backend "
          f"{summary['median_to_backend_ratio']:.2f}x")
    _merge_into_json(name, "interleaved", summary)
