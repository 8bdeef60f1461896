"""What torch's question "which CompositeImplicitAutograd operators may a
``run_decompositions`` keep" costs, with torch's walks and with ``fastlower.in_process.cia_ops``
(docs/edge-stage.md)::

    python benchmarks/cia_ops_probe.py [--layers 4]
    python benchmarks/cia_ops_probe.py --export-llm-rounds 3 WORK

Prints the cost of one question (mean of ten, after a first) each way, then the walks
ExecuTorch's own ``to_edge_transform_and_lower`` of the bundled decoder with
``XnnpackPartitioner`` makes, and their seconds. With ``--export-llm-rounds N``: instead,
``export_llm``'s tiny 8da4w config through fastlower in a new process per run, an empty
cache folder each time, ``FASTLOWER_CIA_OPS=each`` then ``once`` in each of N rounds: the
lowering window and ``to_edge_transform_and_lower`` of each, their medians, the ``.pte``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def export_llm_rounds(rounds: int, work: Path) -> None:
    """``FASTLOWER_CIA_OPS=each`` against ``once`` on export_llm's tiny config (see the
    module)."""
    import shutil
    import statistics

    from tests.pipeline.export_llm import TINY, run_export

    work.mkdir(parents=True, exist_ok=True)
    windows: dict = {"each": [], "once": []}
    for round_ in range(rounds):
        for mode in windows:
            shutil.rmtree(work / "cache", ignore_errors=True)
            run = run_export("fastlower", TINY, work, cache_dir=work / "cache", workers=2,
                             extra_env={"FASTLOWER_CIA_OPS": mode})
            if not run.ok:
                raise SystemExit(run.log[-3000:])
            etl = sum(end - start for name, start, end in run.calls
                      if name == "to_edge_transform_and_lower")
            windows[mode].append((run.window_seconds, etl))
            print(f"round {round_} {mode}: window {run.window_seconds:.2f} s, "
                  f"to_edge_transform_and_lower {etl:.2f} s, pte {run.pte_sha256[:12]}",
                  flush=True)
    for mode, runs in windows.items():
        print(f"{mode}: median window {statistics.median(w for w, _ in runs):.2f} s, median "
              f"to_edge_transform_and_lower {statistics.median(e for _, e in runs):.2f} s")


def _mean_seconds(call, rounds: int = 10) -> float:
    start = time.perf_counter()
    for _ in range(rounds):
        call()
    return (time.perf_counter() - start) / rounds


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--export-llm-rounds", type=int, default=0)
    parser.add_argument("work", type=Path, nargs="?", default=Path("cia_ops_work"))
    args = parser.parse_args()
    if args.export_llm_rounds:
        export_llm_rounds(args.export_llm_rounds, args.work)
        return

    import torch._export.utils as export_utils
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    from fastlower.frontends.examples.llama import edge_compile_config, export_aten
    from fastlower.in_process import cia_ops

    collect = export_utils._collect_all_valid_cia_ops
    torchs = collect()
    print(f"one question, torch's walks: {_mean_seconds(collect) * 1e3:.1f} ms")
    with cia_ops.materialized_once():
        assert collect() == torchs
        print(f"one question, walked once: {_mean_seconds(collect) * 1e3:.1f} ms")
    cia_ops.uninstall()

    walks, seconds = [0], [0.0]
    original = export_utils._materialize_cpp_cia_ops

    def counted() -> None:
        start = time.perf_counter()
        original()
        walks[0] += 1
        seconds[0] += time.perf_counter() - start

    export_utils._materialize_cpp_cia_ops = counted
    try:
        _, aten, _ = export_aten(args.layers)
        start = time.perf_counter()
        to_edge_transform_and_lower(aten, partitioner=[XnnpackPartitioner()],
                                    compile_config=edge_compile_config(True))
        total = time.perf_counter() - start
    finally:
        export_utils._materialize_cpp_cia_ops = original
    print(f"ExecuTorch's to_edge_transform_and_lower, {args.layers} layers: {total:.1f} s, "
          f"{walks[0]} walks, {seconds[0]:.2f} s in them")


if __name__ == "__main__":
    main()
