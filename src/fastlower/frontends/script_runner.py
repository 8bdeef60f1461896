"""Run an unchanged script or module with fastlower as ExecuTorch's ``to_backend``.

``fastlower run script.py ARGS...`` and ``fastlower run -m MODULE ARGS...`` do
what ``python script.py ARGS...`` and ``python -m MODULE ARGS...`` do, with
``fastlower.patch.install()`` first, as ``python -m cProfile`` runs a script
under the profiler:

* the script sees what it would see run directly: ``sys.argv`` (``[script,
  *ARGS]``; for ``-m`` the module's file, as ``python -m`` sets it),
  ``__name__ == "__main__"``, ``__file__``, ``sys.modules["__main__"]`` (so its
  classes pickle as ``__main__.X``) and ``sys.path[0]`` (the script's folder;
  for ``-m`` the current folder); ``runpy`` (stdlib) does this, as for ``python``;
* its output is not captured and its exit code is python's: ``sys.exit(n)``
  gives ``n``, ``sys.exit("message")`` prints the message and gives 1, an
  uncaught exception prints the traceback (from the script's frame on) and gives 1;
* the preprocess settings (workers, cache) hold for the whole process, every
  thread the script starts included (``fastlower.preprocess.set_options``);
* every report of a lowering the script makes (one per ``to_backend`` call, in
  any thread; as python does at exit, the run waits for the non-daemon threads
  the script started) is collected through ``fastlower.report.collecting`` and
  written when the script ends, however it ends: ``--report-json r.json`` writes
  ``r.1.json``, ``r.2.json``, ... in the order the lowerings finished (the
  number goes before the last suffix: ``out/r`` -> ``out/r.1``), relative
  paths in the folder the run started in (whatever folder the script moves to).

The ``fastlower`` command calls this with room on CPython's frame stack
(``fastlower.in_process.stack_room``), so the script's loops do not land on a stack chunk's end
because fastlower's frames sit under them.

This runs in the caller's process and changes it for good (fastlower stays
installed, as the command needs); it is what ``fastlower run`` calls.
"""

from __future__ import annotations

import os
import runpy
import sys
import threading
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, List, Optional, Sequence

if TYPE_CHECKING:  # pragma: no cover
    from ..report import LoweringReport

__all__ = ["RunSettings", "RunResult", "run", "numbered"]


@dataclass
class RunSettings:
    """How to run: preprocess workers and cache, and where to write the reports."""

    workers: Optional[int] = None  # None: fastlower's default (the usable cores)
    cache_dir: Optional[str] = None  # None: no preprocess cache
    report_json: Optional[str] = None  # pattern: r.json -> r.1.json, r.2.json, ...
    report_html: Optional[str] = None


@dataclass
class RunResult:
    """What happened: the script's exit code, the lowerings' reports, the files written."""

    exit_code: int
    reports: List["LoweringReport"] = field(default_factory=list)
    written: List[Path] = field(default_factory=list)


def numbered(pattern: str, index: int) -> Path:
    """The ``index``-th (from 1) report file for ``pattern``: ``r.json`` -> ``r.1.json``."""
    path = Path(pattern)
    return path.with_name(f"{path.stem}.{index}{path.suffix}")


def run(target: str, args: Sequence[str], *, module: bool = False,
        settings: Optional[RunSettings] = None) -> RunResult:
    """Run the script at ``target`` (or the module named ``target`` when ``module``) with
    ``args`` as its arguments and fastlower installed; see the module doc."""
    from .. import patch
    from ..preprocess import options, set_options
    from ..report import collecting

    settings = settings or RunSettings()
    start_folder = Path.cwd()  # report paths are relative to it, whatever the script does
    patch.install()
    with options() as before:  # the process-wide settings, restored afterwards
        pass
    # an empty cache_dir is "no cache", whatever FASTLOWER_CACHE_DIR says
    set_options(workers=settings.workers, cache_dir=settings.cache_dir or "")
    try:
        with collecting(all_threads=True) as reports:
            try:
                alive = set(threading.enumerate())
                code = _execute(target, list(args), module)
                # as python does before it exits: wait for the script's non-daemon threads
                # (their lowerings' reports belong to the run)
                _join_new_threads(alive)
            finally:
                made = list(reports)
                written = _write_reports(made, settings, target, start_folder)
    finally:
        set_options(workers=before.workers, cache_dir=before.cache_dir)
    return RunResult(code, made, written)


def _execute(target: str, args: List[str], module: bool) -> int:
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv[:] = [target, *args]
    # python puts the script's folder (python -m: the current folder) first on sys.path,
    # where this process has the folder of the `fastlower` launcher
    first = os.getcwd() if module else os.path.dirname(os.path.abspath(target))
    if sys.path:
        sys.path[0] = first
    else:
        sys.path.insert(0, first)
    try:
        if module:
            runpy.run_module(target, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(target, run_name="__main__")
        return 0
    except SystemExit as exc:
        return _exit_code(exc)
    except KeyboardInterrupt:
        _print_script_traceback(*sys.exc_info())
        return 130
    except Exception:
        _print_script_traceback(*sys.exc_info())
        return 1
    finally:
        sys.argv[:] = saved_argv
        sys.path[:] = saved_path
        sys.stdout.flush()
        sys.stderr.flush()


def _join_new_threads(alive: "set[threading.Thread]") -> None:
    for thread in threading.enumerate():
        if thread not in alive and not thread.daemon and thread is not threading.current_thread():
            thread.join()


def _exit_code(exc: SystemExit) -> int:
    """The exit status python gives for an uncaught ``SystemExit``."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    sys.stderr.write(f"{exc.code}\n")
    return 1


_OWN_FILES = {os.path.abspath(__file__), os.path.abspath(runpy.__file__)}


def _print_script_traceback(kind: Optional[type], value: Optional[BaseException],
                            tb: Optional[TracebackType]) -> None:
    """The traceback python prints: from the script's own frame on, not fastlower's or runpy's."""
    while tb is not None and (os.path.abspath(tb.tb_frame.f_code.co_filename) in _OWN_FILES
                              or tb.tb_frame.f_code.co_filename.startswith("<frozen runpy")):
        tb = tb.tb_next
    traceback.print_exception(kind, value, tb, file=sys.stderr)


def _write_reports(reports: List["LoweringReport"], settings: RunSettings, target: str,
                   folder: Path) -> List[Path]:
    """Each report to its numbered file (relative patterns under ``folder``); the paths as
    the patterns name them."""
    from ..report import html
    from ..report import json as report_json

    written: List[Path] = []
    total = len(reports)
    for index, report in enumerate(reports, start=1):
        if settings.report_json:
            path = numbered(settings.report_json, index)
            report_json.write(report, folder / path)
            written.append(path)
        if settings.report_html:
            path = numbered(settings.report_html, index)
            html.write(report, folder / path,
                       title=f"{Path(target).name}, lowering {index} of {total}")
            written.append(path)
    return written
