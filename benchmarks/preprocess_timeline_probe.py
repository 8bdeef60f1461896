"""A timeline of one ``export_llm`` lowering's preprocess: when each partition starts and ends
in which process, when results reach the caller, its cache writes and structural classes.

``python benchmarks/preprocess_timeline_probe.py WORK [--layers 2] [--reference]``

Runs ``export_llm`` at Llama-3.2-1B's shape (``--layers`` of its 16; random seeded weights,
``WORK/model``) in a new process, under ``fastlower run --workers 2`` with an emptied cache
folder ``WORK/cache`` (``--reference``: ExecuTorch alone), and prints one ``TL seconds pid
event`` line per event, seconds from the child's start, then the stage timings.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import runpy
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _stamp(message: str) -> None:
    start = float(os.environ["TIMELINE_T0"])
    sys.stderr.write(f"TL {time.time() - start:9.3f} pid {os.getpid()} {message}\n")
    sys.stderr.flush()


def _wrap(owner, name: str, before, after) -> None:
    original = getattr(owner, name)

    def wrapped(*args, **kwargs):
        before(*args)
        result = original(*args, **kwargs)
        after(result)
        return result

    setattr(owner, name, wrapped)


def _instrument() -> None:
    """Stamps around fastlower's preprocess steps and ExecuTorch's calls (child side)."""
    import executorch.exir.program._program as program

    _wrap(program.EdgeProgramManager, "to_backend", lambda *a: _stamp("to_backend enter"),
          lambda r: _stamp("to_backend exit"))
    if os.environ.get("TIMELINE_IMPL") != "fastlower":
        return
    import fastlower.preprocess.executors as executors
    import fastlower.preprocess.partitions as partitions
    from fastlower.preprocess.cache import PreprocessCache
    from fastlower.preprocess.structure.classes import ClassPlan

    call = partitions.call_preprocess

    def traced(job):
        _stamp(f"start {job.tag}")
        result = call(job)
        _stamp(f"end {job.tag} ({result[1]:.3f} s in preprocess)")
        return result

    executors.call_preprocess = partitions.call_preprocess = traced
    _wrap(PreprocessCache, "put", lambda *a: _stamp("cache put enter"),
          lambda r: _stamp("cache put exit"))
    _wrap(ClassPlan, "resolve", lambda *a: _stamp("classes resolve enter"),
          lambda r: _stamp(f"classes resolve exit: {len(r[0])} derived, {len(r[1])} to run"))
    run_jobs = partitions._run_jobs

    def jobs(batch, opts, done, report):
        def arrived(job, result, took):
            _stamp(f"result of {job.tag} here")
            done(job, result, took)
        _stamp(f"preprocess {len(batch)} partitions")
        run_jobs(batch, opts, arrived, report)
        _stamp("preprocess done")

    partitions._run_jobs = jobs


def child() -> None:
    sys.path.insert(0, str(ROOT))
    _instrument()
    sys.argv = sys.argv[1:]  # [this script, "--child", timed's arguments...] -> timed's
    runpy.run_module("tests.pipeline.timed", run_name="__main__", alter_sys=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("work", type=Path)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--reference", action="store_true")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    from tests.pipeline.export_llm import LLAMA32_1B, export_args, model_files

    config = dataclasses.replace(LLAMA32_1B, n_layers=args.layers,
                                 name=f"llama3.2-1b-{args.layers}l-8da4w")
    files = model_files(config, args.work / "model" / config.weights_name)
    out = args.work / f"timeline-{time.monotonic_ns()}"
    out.mkdir(parents=True)
    impl = "reference" if args.reference else "fastlower"
    target = [__file__, "--child", str(out / "timings.json"), "-m",
              "executorch.extension.llm.export.export_llm", *export_args(config, files, out)]
    env = dict(os.environ, PYTHONPATH=str(ROOT), TIMELINE_T0=str(time.time()),
               TIMELINE_IMPL=impl)
    if args.reference:
        command = [sys.executable, *target]
    else:
        shutil.rmtree(args.work / "cache", ignore_errors=True)
        env["FASTLOWER_CACHE_DIR"] = str(args.work / "cache")
        command = [sys.executable, "-m", "fastlower", "run", "--workers", "2", *target]
    done = subprocess.run(command, cwd=out, env=env, capture_output=True, text=True)
    print("\n".join(line for line in done.stderr.splitlines() if line.startswith("TL ")))
    if done.returncode:
        print(done.stderr[-3000:], file=sys.stderr)
        sys.exit(done.returncode)
    times = json.loads((out / "timings.json").read_text())
    print({name: times.get(name) for name in ("to_edge_transform_and_lower", "to_backend",
                                              "to_executorch")})


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--child":
        child()
    else:
        main()
