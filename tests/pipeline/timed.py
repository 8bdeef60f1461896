"""Run a module or script as ``python -m`` / ``python`` would, timing what the user waits for.

``python -m tests.pipeline.timed OUT.json -m MODULE ARGS...`` (or ``OUT.json SCRIPT ARGS...``)
wraps, before the target is imported, ExecuTorch's ``to_edge_transform_and_lower``,
``EdgeProgramManager.to_executorch`` and the ``to_backend`` that
``to_edge_transform_and_lower`` calls, with timers, runs the target, and writes
the times (and, when fastlower did the lowering, its cache hits) to ``OUT.json``,
with the process's minor page faults at each call's start and end (a phase that
maps a CPython stack chunk per call shows as ~a million of them: see
``fastlower.in_process.stack_room``).
Whatever implementation is bound when the wrappers are made is the one timed, so
the same runner times the reference (plain ``python``) and fastlower (``fastlower
run -m tests.pipeline.timed ...``, which installs fastlower first).
With ``TIMED_PROFILE_DIR`` set, each lowering call is also profiled (cProfile) into it.
With ``TIMED_EDGE_LINES`` set to a file, the canonical lines of each Edge program the edge
stage makes (``_generate_edge_program``'s result, before ``to_backend``) and of each
ExecuTorch program ``to_executorch`` makes (``fastlower.cache.compare.describe``: every
node's metadata but ``from_node`` and ``seq_nr``, the signature, the range constraints...)
are appended to it, one block each, headed ``edge`` or ``executorch``.
"""

from __future__ import annotations

import functools
import json
import resource
import runpy
import sys
import time
from typing import Any, Callable, Dict, List

TIMES: Dict[str, Any] = {"to_edge_transform_and_lower": [], "to_executorch": [], "to_backend": [],
                         "cache_hits": 0, "cache_misses": 0, "lowering_cache": [],
                         "calls": [], "lowering_cache_seconds": [],
                         # per entry of "calls": the process's minor page faults at its
                         # start and end (this process only: not the preprocess workers)
                         "calls_minor_faults": [],
                         # per entry of "calls": this process's peak resident set so far
                         # (VmHWM, bytes) at its start and end: which call raised the peak
                         "calls_peak_rss": [],
                         # at the end: ru_maxrss of this process and of its largest
                         # waited-for child (bytes)
                         "peak_rss_bytes": 0, "children_peak_rss_bytes": 0}
# when each timed call started and ended, seconds since the target started: what the
# process does before, between and after the lowering window
_STARTED = [time.perf_counter()]


def _timed(name: str, fn: Callable) -> Callable:
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        faults = _minor_faults()
        peak = _peak_rss()
        cpu = time.process_time()
        start = time.perf_counter()
        try:
            return _profiled(name, fn, args, kwargs)
        finally:
            end = time.perf_counter()
            TIMES[name].append(end - start)
            TIMES["calls"].append([name, start - _STARTED[0], end - _STARTED[0]])
            TIMES["calls_minor_faults"].append([faults, _minor_faults()])
            TIMES["calls_peak_rss"].append([peak, _peak_rss()])
            # this process's CPU seconds (all its threads) in the call: what a loaded
            # machine's wall clock hides
            TIMES.setdefault("calls_cpu_seconds", []).append(time.process_time() - cpu)
            if name == "to_backend":
                _record_fastlower_report()
            elif name == "to_edge_transform_and_lower":
                _record_lowering_cache()
            if name in ("to_edge_transform_and_lower", "to_executorch"):
                _record_fake_outputs(name)
    return wrapper


def _profiled(name: str, fn: Callable, args: Any, kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``; under ``TIMED_PROFILE_DIR``, a lowering call is profiled
    (cProfile) into ``DIR/NAME-N.prof``: where the window's time goes."""
    import os

    folder = os.environ.get("TIMED_PROFILE_DIR")
    if not folder or name not in ("to_edge_transform_and_lower", "to_executorch"):
        return fn(*args, **kwargs)
    import cProfile

    profile = cProfile.Profile()
    try:
        return profile.runcall(fn, *args, **kwargs)
    finally:
        profile.dump_stats(os.path.join(folder, f"{name}-{len(TIMES[name])}.prof"))


def _minor_faults() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _peak_rss() -> int:
    """This process's peak resident set so far, in bytes (ru_maxrss is KiB on Linux)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _record_fastlower_report() -> None:
    fastlower = sys.modules.get("fastlower")
    if fastlower is None:
        return
    report = fastlower.last_report()
    if report is not None:
        TIMES["cache_hits"] += sum(report.cache_hits.values())
        TIMES["cache_misses"] += sum(report.cache_misses.values())


def _record_lowering_cache() -> None:
    """The lowering cache's answer for the call ("hit", "miss" ...; None: it took no part)."""
    fastlower = sys.modules.get("fastlower")
    report = fastlower.last_report() if fastlower is not None else None
    TIMES["lowering_cache"].append(getattr(report, "lowering_cache", None))
    TIMES["lowering_cache_seconds"].append(getattr(report, "lowering_cache_seconds", None))
    TIMES.setdefault("refit", []).append(getattr(report, "refit", None))  # or why refused


def _record_fake_outputs(name: str) -> None:
    """The call's outer block's counts of fake outputs known without a run (fastlower):
    [name, delegate calls reused, run, quantization operator calls reused, run, repeated
    calls reused, run]."""
    module = sys.modules.get("fastlower.in_process.fake_outputs")
    if module is not None:
        last = module.LAST
        TIMES.setdefault("fake_outputs", []).append(
            [name, last.delegates_reused, last.delegates_run, last.ops_reused, last.ops_run,
             last.repeats_reused, last.repeats_run])
    memo = sys.modules.get("fastlower.in_process.retrace_quant_ops.memo")
    if memo is not None and name == "to_edge_transform_and_lower":
        TIMES.setdefault("retrace_memo", []).append(dict(memo.LAST.reused_by))
    decompose = sys.modules.get("fastlower.in_process.edge.decompose")
    if decompose is not None and name == "to_edge_transform_and_lower":
        TIMES.setdefault("edge_retraces", []).append(  # [skipped, of them repeats, run]
            [decompose.SKIPPED.skipped, decompose.SKIPPED.repeats, decompose.SKIPPED.run])


# export_llm's own stages, outside the lowering window (issue 50's profile): (module,
# owner class or None, attribute, name). Each is timed into "calls" like the lowering's.
STAGES = [
    ("executorch.examples.models.llama.export_llama_lib", None, "_load_llama_model",
     "load_model"),
    ("executorch.extension.llm.export.builder", "LLMEdgeManager", "source_transform",
     "source_transform"),
    ("executorch.extension.llm.export.builder", "LLMEdgeManager", "_export", "torch_export"),
    ("executorch.exir.program._program", "EdgeProgramManager", "transform", "edge_transform"),
    ("executorch.extension.llm.export.builder", "LLMEdgeManager", "save_to_pte",
     "save_to_pte"),
]


def install_stage_timers() -> None:
    """Timers on export_llm's stages (skipped where the module is not there)."""
    import importlib

    for module_name, owner_name, attribute, name in STAGES:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        owner = getattr(module, owner_name) if owner_name else module
        TIMES.setdefault(name, [])
        setattr(owner, attribute, _timed(name, getattr(owner, attribute)))


def install_timers() -> None:
    import executorch.exir as exir
    import executorch.exir.program._program as program

    etl = _timed("to_edge_transform_and_lower", program.to_edge_transform_and_lower)
    for module in (exir, program):
        module.to_edge_transform_and_lower = etl
    program.EdgeProgramManager.to_executorch = _timed(
        "to_executorch", program.EdgeProgramManager.to_executorch)
    program.to_backend = _timed("to_backend", program.to_backend)


def install_edge_lines(path: str) -> None:
    """Each Edge program ``_generate_edge_program`` returns and each ExecuTorch program
    ``ExecutorchProgramManager`` is made with, described into ``path`` (the manager's
    constructor, not ``to_executorch``, which fastlower routes)."""
    import executorch.exir.program._program as program

    def write(kind: str, exported: Any) -> None:
        from fastlower.cache import compare

        with open(path, "a") as f:
            f.write(kind + "\n" + "".join(f"{where}\t{text}\n" for where, text in
                                          compare.describe({"forward": exported})) + "\f\n")

    generate = program._generate_edge_program

    @functools.wraps(generate)
    def described(*args, **kwargs):
        edge = generate(*args, **kwargs)
        write("edge", edge)
        return edge

    made = program.ExecutorchProgramManager.__init__

    @functools.wraps(made)
    def made_described(self, *args, **kwargs):
        made(self, *args, **kwargs)
        write("executorch", self.exported_program())

    program._generate_edge_program = described
    program.ExecutorchProgramManager.__init__ = made_described


def main(argv: List[str]) -> None:
    import os

    out, rest = argv[0], argv[1:]
    install_timers()
    if os.environ.get("TIMED_EDGE_LINES"):
        install_edge_lines(os.environ["TIMED_EDGE_LINES"])
    if rest[:2] == ["-m", "executorch.extension.llm.export.export_llm"]:
        install_stage_timers()
    start = _STARTED[0] = time.perf_counter()
    try:
        if rest[0] == "-m":
            sys.argv = [rest[1]] + rest[2:]
            runpy.run_module(rest[1], run_name="__main__", alter_sys=True)
        else:
            sys.argv = rest
            runpy.run_path(rest[0], run_name="__main__")
    finally:
        TIMES["target_seconds"] = time.perf_counter() - start
        TIMES["peak_rss_bytes"] = _peak_rss()
        TIMES["children_peak_rss_bytes"] = resource.getrusage(
            resource.RUSAGE_CHILDREN).ru_maxrss * 1024
        hqq = sys.modules.get("fastlower.in_process.hqq.native")
        if hqq is not None:  # weights quantized by fastlower's kernels and by torchao
            TIMES["hqq"] = hqq.counts()
        arithmetic = sys.modules.get("fastlower.in_process.sym_arith")
        if arithmetic is not None:  # symbolic-size arithmetic answered / computed
            TIMES["sym_arith"] = arithmetic.counts()
        graph_code = sys.modules.get("fastlower.in_process.graph_code")
        if graph_code is not None:  # graph modules' code remembered / compiled
            TIMES["graph_code"] = graph_code.counts()
        with open(out, "w") as f:
            json.dump(TIMES, f)


if __name__ == "__main__":
    main(sys.argv[1:])
