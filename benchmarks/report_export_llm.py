"""The export_llm benchmark's results as a Markdown table (for benchmarks/README.md).

``python benchmarks/report_export_llm.py [benchmarks/export_llm_results.json]``
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import List, Optional

from tabulate import tabulate

RUNS = ("reference", "serial", "cold", "warm", "warm-preprocess", "reference-edited", "edited",
        "reference-b", "refit-b")
LABELS = {"reference": "reference", "serial": "fastlower, 1 worker, no cache",
          "cold": "fastlower, 2 workers, empty cache", "warm": "fastlower, same cache, new process",
          "warm-preprocess": "fastlower, same cache, lowering cache off",
          "reference-edited": "reference, one weight changed",
          "edited": "fastlower, one weight changed, same cache",
          "reference-b": "reference, checkpoint B (every weight different)",
          "refit-b": "fastlower, checkpoint B, cache of checkpoint A"}
# a run compared with the reference of its own checkpoint
OWN_REFERENCE = {"edited": "reference-edited", "refit-b": "reference-b"}


def _ratio(reference: float, value: float) -> str:
    return f"{reference / value:.2f}x" if value > 0 else "-"


def table(results: dict) -> str:
    rows = []
    for config, runs in results.items():
        reference = runs.get("reference")
        if reference is None and not any(kind in runs for kind in RUNS):
            continue
        for kind in RUNS:
            run = runs.get(kind)
            if run is None:
                continue
            own = runs.get(OWN_REFERENCE.get(kind, "reference"))
            same = "" if kind.startswith("reference") or own is None else (
                "yes" if run["pte_sha256"] == own["pte_sha256"] else "NO")
            lowering = run.get("lowering_cache") or []
            total = run["cache_hits"] + run["cache_misses"]
            if kind.startswith("reference") or kind == "serial":
                hits = ""
            elif total == 0 and lowering == ["hit"]:
                hits = "no to_backend ran (lowering cache: hit)"
            else:
                answers = ", ".join("off" if x is None else str(x) for x in lowering)
                hits = f"{run['cache_hits']}/{total}" + (
                    f" (lowering cache: {answers})" if lowering else "")
            ratios = ("", "", "") if kind.startswith("reference") or own is None else (
                _ratio(own["process_seconds"], run["process_seconds"]),
                _ratio(own["window_seconds"], run["window_seconds"]),
                _ratio(own["to_backend_seconds"], run["to_backend_seconds"]))
            rows.append([config, LABELS[kind],
                         f"{run['process_seconds']:.1f} s", ratios[0],
                         f"{run['window_seconds']:.1f} s", ratios[1],
                         f"{run['to_backend_seconds']:.2f} s", ratios[2], hits, same])
            config = ""
    return tabulate(rows, headers=["config", "run", "whole process", "", "lowering window", "",
                                   "to_backend", "", "preprocess cache hits", ".pte = reference"],
                    tablefmt="github")


def _spans(run: dict) -> Optional[List[float]]:
    """Where the process's time goes, from the timed calls (None: not recorded)."""
    calls = run.get("calls") or []
    etl = [c for c in calls if c[0] == "to_edge_transform_and_lower"]
    te = [c for c in calls if c[0] == "to_executorch"]
    if len(etl) != 1 or len(te) != 1:
        return None
    (_, etl_start, etl_end), (_, te_start, te_end) = etl[0], te[0]
    backends = [c for c in calls if c[0] == "to_backend"]
    edge = (backends[0][1] if backends else etl_end) - etl_start
    in_backend = sum(end - start for _, start, end in backends)
    return [run["process_seconds"] - run["target_seconds"], etl_start, edge, in_backend,
            etl_end - etl_start - edge - in_backend, te_start - etl_end, te_end - te_start,
            run["target_seconds"] - te_end]


def _faults(run: dict) -> str:
    """The parent process's minor page faults (thousands) in the edge stage and in
    ``to_backend`` ("" for runs recorded before they were counted)."""
    calls, faults = run.get("calls") or [], run.get("calls_minor_faults") or []
    if len(calls) != len(faults):
        return ""
    names = [c[0] for c in calls]
    backends = [i for i, n in enumerate(names) if n == "to_backend"]
    etl = [i for i, n in enumerate(names) if n == "to_edge_transform_and_lower"]
    if len(etl) != 1:
        return ""
    # calls are listed as they end: the edge stage ends where the first to_backend starts
    edge_end = faults[backends[0]][0] if backends else faults[etl[0]][1]
    edge = edge_end - faults[etl[0]][0]
    in_backend = sum(faults[i][1] - faults[i][0] for i in backends)
    return f"{edge / 1000:.0f}K / {in_backend / 1000:.0f}K"


def _profile_row(config: str, kind: str, run: dict, spans: List[float]) -> list:
    phases = (run.get("lowering_cache_seconds") or [None])[0] or {}
    return [config, kind, *(f"{v:.1f}" for v in spans),
            ", ".join(f"{k} {v:.1f}" for k, v in phases.items()), _faults(run)]


def profile(results: dict) -> str:
    """Per run: start-up (interpreter, imports, ``fastlower run``), ``export_llm`` before
    the window (load, quantize, ``torch.export``), the edge stage (until the first
    ``to_backend``), ``to_backend``, the rest of ``to_edge_transform_and_lower``
    (partitioner rounds' checks, the lowering cache's key, load or store), between the
    two calls, ``to_executorch``, after it (the ``.pte`` written, exit)."""
    rows = []
    for config, runs in results.items():
        for kind in RUNS:
            run = runs.get(kind)
            spans = _spans(run) if run else None
            if spans is None:
                continue
            rows.append(_profile_row(config, kind, run, spans))
            config = ""
        for i, pair in enumerate((runs.get("interleaved") or {}).get("rounds", [])):
            for kind, run in (pair.get("runs") or {}).items():
                spans = _spans(run)
                if spans is not None:
                    rows.append(_profile_row(config, f"round {i}: {kind}", run, spans))
                    config = ""
    return tabulate(rows, headers=["config", "run", "start-up", "before", "edge stage",
                                   "to_backend", "rest of etl", "between", "to_executorch",
                                   "after", "lowering cache (s)",
                                   "page faults: edge stage / to_backend"], tablefmt="github")


def interleaved(results: dict) -> str:
    """Reference and cold fastlower in alternating pairs (``FASTLOWER_BENCH_LLM_ROUNDS``):
    each round's start, commit, seconds and ratios, then the medians."""
    rows = []
    for config, runs in results.items():
        summary = runs.get("interleaved")
        if not summary:
            continue
        for i, r in enumerate(summary["rounds"]):
            when = " ".join(v for v in (r.get("started", "")[:16].replace("T", " "),
                                        r.get("commit") or "") if v)
            rows.append([config, i, when, " then ".join(r["order"]),
                         f"{r['reference_window_seconds']:.1f} / {r['cold_window_seconds']:.1f} s",
                         f"{r['window_ratio']:.2f}x", f"{r['process_ratio']:.2f}x",
                         f"{r['to_backend_ratio']:.2f}x"])
            config = ""
        rows.append(["", "median", "", "", "", f"{summary['median_window_ratio']:.2f}x",
                     f"{summary['median_process_ratio']:.2f}x",
                     f"{summary['median_to_backend_ratio']:.2f}x"])
    if not rows:
        return ""
    return tabulate(rows, headers=["config", "round", "started (UTC), commit", "order",
                                   "window (reference / cold)",
                                   "window", "process", "to_backend"], tablefmt="github")


def main() -> None:
    path = Path(sys.argv[1] if len(sys.argv) > 1 else
                Path(__file__).resolve().parent / "export_llm_results.json")
    results = json.loads(path.read_text())
    print(table(results))
    print()
    print(profile(results))
    pairs = interleaved(results)
    if pairs:
        print()
        print(pairs)


if __name__ == "__main__":
    main()
