"""Time and profile ExecuTorch's edge stage and ``to_executorch`` inside ``export_llm``.

``python benchmarks/edge_stage_probe.py --dim 64 --layers 6 [--impl reference|fastlower]
[--profile-edge FILE] [--profile-executorch FILE] [--stop-after-edge] --out FILE.json``
runs ExecuTorch's own ``export_llm`` pipeline (``tests/pipeline/export_llm.py``'s command
line: 8da4w, KV cache, custom SDPA, dynamic shapes, XNNPACK's two partitioners) in this
process, with timers around the edge stage (``to_edge_transform_and_lower`` up to the
first ``to_backend``), each ``run_decompositions`` call in it, ``to_backend`` and
``to_executorch``. ``--impl fastlower`` runs the edge stage through
``fastlower.in_process.edge.lower`` (its skipped retraces) instead of ExecuTorch's. This harness
patches ExecuTorch for its own process only; nothing here is library code.
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import json
import os
import runpy
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.pipeline.export_llm import LlmConfig, export_args, model_files  # noqa: E402

TIMES = {"run_decompositions": [], "edge_stage": None, "to_backend": [], "to_executorch": None,
         "etl": None}


class StopAfterEdge(Exception):
    """Raised at the first ``to_backend`` when only the edge stage is wanted."""


def _install(args) -> None:
    import executorch.exir as exir
    import executorch.exir.program._program as program
    from torch.export import ExportedProgram

    decompose = ExportedProgram.run_decompositions

    @functools.wraps(decompose)
    def timed_decompose(self, table=None, *a, **k):
        start = time.perf_counter()
        try:
            return decompose(self, table, *a, **k)
        finally:
            TIMES["run_decompositions"].append(
                [len(table) if table is not None else None, time.perf_counter() - start])

    ExportedProgram.run_decompositions = timed_decompose
    original_to_backend = program.to_backend
    state = {"etl_start": None, "profiler": None}

    def to_backend(*a, **k):
        if TIMES["edge_stage"] is None:
            TIMES["edge_stage"] = time.perf_counter() - state["etl_start"]
            if state["profiler"] is not None:
                state["profiler"].disable()
                state["profiler"].dump_stats(args.profile_edge)
            if args.stop_after_edge:
                raise StopAfterEdge()
        start = time.perf_counter()
        try:
            return original_to_backend(*a, **k)
        finally:
            TIMES["to_backend"].append(time.perf_counter() - start)

    program.to_backend = to_backend
    reference_etl = program.to_edge_transform_and_lower

    def etl(*a, **k):
        import contextlib

        from fastlower import patch
        from fastlower.in_process.edge.decompose import SKIPPED
        from fastlower.in_process.edge.stage import gen_edge_manager_for_partitioners

        # fastlower: only the edge stage is fastlower's (to_backend, to_executorch: ExecuTorch's)
        routes = (patch.routed({"_gen_edge_manager_for_partitioners":
                                gen_edge_manager_for_partitioners})
                  if args.impl == "fastlower" else contextlib.nullcontext())
        state["etl_start"] = time.perf_counter()
        if args.profile_edge:
            state["profiler"] = cProfile.Profile()
            state["profiler"].enable()
        try:
            with routes:
                return reference_etl(*a, **k)
        finally:
            TIMES["etl"] = time.perf_counter() - state["etl_start"]
            if args.impl == "fastlower":
                TIMES["retraces_skipped"] = SKIPPED.skipped
                TIMES["retraces_run_because"] = list(SKIPPED.reasons)

    for module in (exir, program):
        module.to_edge_transform_and_lower = etl
    to_executorch = program.EdgeProgramManager.to_executorch

    def timed_to_executorch(self, *a, **k):
        profiler = cProfile.Profile() if args.profile_executorch else None
        start = time.perf_counter()
        if profiler:
            profiler.enable()
        try:
            return to_executorch(self, *a, **k)
        finally:
            TIMES["to_executorch"] = time.perf_counter() - start
            if profiler:
                profiler.disable()
                profiler.dump_stats(args.profile_executorch)

    program.EdgeProgramManager.to_executorch = timed_to_executorch


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--vocab", type=int, default=256)
    parser.add_argument("--seq", type=int, default=32)
    parser.add_argument("--impl", choices=("reference", "fastlower"), default="reference")
    parser.add_argument("--stop-after-edge", action="store_true")
    parser.add_argument("--profile-edge")
    parser.add_argument("--profile-executorch")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    config = LlmConfig(f"d{args.dim}l{args.layers}", dim=args.dim, n_layers=args.layers,
                       n_heads=args.heads, vocab_size=args.vocab, hidden_dim=args.hidden,
                       max_seq_length=args.seq)
    work = Path(tempfile.mkdtemp(prefix="edge-probe-"))
    files = model_files(config, work / "model" / config.weights_name)
    _install(args)
    sys.argv = ["export_llm", *export_args(config, files, work)]
    os.chdir(work)  # export_llm writes model.pte to the current folder
    start = time.perf_counter()
    try:
        runpy.run_module("executorch.extension.llm.export.export_llm", run_name="__main__",
                         alter_sys=True)
    except BaseException:  # hydra turns StopAfterEdge into SystemExit
        if not (args.stop_after_edge and TIMES["edge_stage"] is not None):
            raise
    TIMES["process_target"] = time.perf_counter() - start
    pte = work / "model.pte"
    if pte.exists():
        import hashlib
        TIMES["pte_sha256"] = hashlib.sha256(pte.read_bytes()).hexdigest()
    Path(args.out).write_text(json.dumps(TIMES, indent=1))
    print(json.dumps(TIMES))


if __name__ == "__main__":
    main()
