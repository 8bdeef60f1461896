"""ExecuTorch's ``export_llm`` at Llama-3.2-1B's shape, reference against fastlower, each run
a new process: where the whole process's time goes, not only the lowering's (issue 50).

``python benchmarks/production_size_run.py OUT.json WORK [--layers 2] [--runs SPEC]
[--shape llama3.2-1b|d256|stories110m]``

``--runs`` lists the runs in order, comma-separated: ``reference`` (ExecuTorch),
``cold`` (fastlower, ``WORK/cache`` emptied first), ``rerun`` (fastlower, the
same folder again: a lowering-cache hit), ``reference-b`` / ``refit-b`` (checkpoint B,
every weight different: ExecuTorch, and fastlower with the cache of checkpoint A). Each
run records the whole process, the lowering window, export_llm's own stages
(``tests/pipeline/timed.py``'s stage timers: model load, source transforms with torchao's
quantization, the two ``torch.export`` calls, the
edge transform between the lowering's steps, the ``.pte`` write), the peak RSS of the
process and the peak PSS of its tree, and the ``.pte``'s digest. Random weights, seeded;
no download.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import sys
from pathlib import Path
from typing import Dict, List, Optional

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.pipeline.export_llm import DEEP, LLAMA32_1B, STORIES110M, run_export  # noqa: E402

SHAPES = {"llama3.2-1b": LLAMA32_1B, "d256": DEEP, "stories110m": STORIES110M}

STAGES = ("load_model", "source_transform", "torch_export", "to_edge_transform_and_lower",
          "edge_transform", "to_executorch", "save_to_pte")


def stage_seconds(calls: List[list]) -> Dict[str, float]:
    """Seconds per stage name, summed over its calls (top-level calls only)."""
    out: Dict[str, float] = {}
    for name, start, end in calls:
        if name in STAGES:
            out[name] = out.get(name, 0.0) + end - start
    return out


def edge_stage_seconds(calls: List[list]) -> Optional[float]:
    """From ``to_edge_transform_and_lower``'s start to its first ``to_backend``'s (None when
    no ``to_backend`` ran: a lowering-cache hit or a refit)."""
    starts = [begin for name, begin, _ in calls if name == "to_edge_transform_and_lower"]
    backends = [begin for name, begin, _ in calls if name == "to_backend"]
    return min(backends) - min(starts) if starts and backends else None


def one_run(kind: str, config, work: Path, workers: int) -> dict:
    impl = "reference" if kind.startswith("reference") else "fastlower"
    if kind == "cold":  # an empty cache folder, whatever ran before
        shutil.rmtree(work / "cache", ignore_errors=True)
    seed = 1 if kind.endswith("-b") else 0
    run = run_export(impl, config, work, workers=workers, seed=seed, timeout=7200,
                     cache_dir=None if impl == "reference" else work / "cache")
    record = dataclasses.asdict(run)
    record.pop("memory_timeline")
    record["kind"] = kind
    record["stages"] = stage_seconds(run.calls)
    record["edge_stage_seconds"] = edge_stage_seconds(run.calls) if run.ok else None
    record["stages_cpu"] = {}
    for (name, _, _), cpu in zip(run.calls, run.calls_cpu_seconds):
        if name in STAGES:
            record["stages_cpu"][name] = record["stages_cpu"].get(name, 0.0) + cpu
    if not run.ok:
        print(run.log[-3000:], file=sys.stderr)
    print(f"{kind}: rc {run.returncode} process {run.process_seconds:.1f} s, window "
          f"{run.window_seconds:.1f} s (edge stage {record['edge_stage_seconds'] or 0:.1f} s),"
          f" lowering cache {run.lowering_cache}, peak RSS "
          f"{run.peak_rss_bytes / 2**20:,.0f} MiB, tree PSS {run.tree_peak_pss_bytes / 2**20:,.0f}"
          f" MiB, pte {run.pte_sha256[:12]} ({run.pte_bytes:,} B); stages "
          + ", ".join(f"{k} {v:.1f} (cpu {record['stages_cpu'].get(k, 0):.1f})"
                      for k, v in record["stages"].items()), flush=True)
    return record


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("work", type=Path)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--runs", default="reference,cold,rerun")
    parser.add_argument("--shape", choices=sorted(SHAPES), default="llama3.2-1b")
    args = parser.parse_args()
    config = dataclasses.replace(SHAPES[args.shape], n_layers=args.layers,
                                 name=f"{args.shape}-{args.layers}l-8da4w")
    args.work.mkdir(parents=True, exist_ok=True)
    results = []
    for kind in args.runs.split(","):
        results.append(one_run(kind, config, args.work, args.workers))
        args.out.write_text(json.dumps({"config": dataclasses.asdict(config),
                                        "runs": results}, indent=1))


if __name__ == "__main__":
    main()
