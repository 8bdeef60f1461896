"""Lower small programs in a process of its own (a subprocess of the lowering-cache tests).

``python -m tests.cache.lower_once OUT.json STEP [STEP ...] [--chain] [--patched]
[--barrier DIR COUNT]``

Each ``STEP`` lowers ``helpers.small_aten()`` (``base``) or ``helpers.small_aten("param")``
(``param``: one weight moved) with the base call's arguments (``helpers.base_args``;
with ``--chain`` the partitioners are ExecuTorch's demo add/mul partitioner then
XNNPACK's: three partitions, one holding the moved weight), then makes its ``.pte``.
The cache folder is ``FASTLOWER_CACHE_DIR``. Without ``--patched`` the entry points are
``fastlower.cache.to_edge_transform_and_lower`` and ExecuTorch's own
``to_executorch``; with it, the plain ``executorch.exir.to_edge_transform_and_lower``
and ``EdgeProgramManager.to_executorch`` inside ``fastlower.patch.installed()``.
``--barrier DIR COUNT``: before the first step, wait until COUNT processes reached
the barrier in DIR (concurrent writers then really overlap).

``OUT.json``: per step the key, ``lowering_cache``, ``cache_hits``, ``cache_misses``,
whether ``to_executorch`` was served from its cache (its debug line), and the ``.pte``
(written to ``OUT.json.<i>.pte``); and the message of every ``CacheWarning`` the process saw.

The tests start it with :func:`start` and read its outcome with :func:`outcome`;
:func:`reference_pte` is the oracle (ExecuTorch's own lowering, no cache).
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import os
import subprocess
import sys
import time
import uuid
import warnings
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple
from tests import python_children

ROOT = Path(__file__).resolve().parents[2]
_ENV_CLEARED = ("FASTLOWER_LOWERING_CACHE", "FASTLOWER_CACHE_VERIFY", "FASTLOWER_CACHE_SIZE",
                "FASTLOWER_CACHE_KEY_FILE")


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: List[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


def _wait_at_barrier(folder: Path, count: int, timeout: float = 120.0) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{os.getpid()}-{uuid.uuid4().hex}").touch()
    deadline = time.monotonic() + timeout
    while len(list(folder.iterdir())) < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {len(list(folder.iterdir()))} of {count} processes came")
        time.sleep(0.005)


def partitioners(chain: bool) -> List[Any]:
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

    from tests.cache.helpers import demo_partitioner

    return [demo_partitioner(), XnnpackPartitioner()] if chain else [demo_partitioner()]


def _step(step: str, chain: bool, patched: bool, lines: _Lines) -> Dict[str, Any]:
    import executorch.exir as exir

    import fastlower
    import fastlower.cache
    import fastlower.patch
    from fastlower.cache.key import lowering_key
    from tests.cache.helpers import base_args, small_aten

    program = small_aten("param" if step == "param" else None)
    key = lowering_key(program, generate_etrecord=False,
                       **base_args(partitioner=partitioners(chain))).key
    args = base_args(partitioner=partitioners(chain))
    before = len(lines.lines)
    if patched:
        with fastlower.patch.installed():
            manager = exir.to_edge_transform_and_lower(program, **args)
            pte = bytes(manager.to_executorch().buffer)
    else:
        manager = fastlower.cache.to_edge_transform_and_lower(program, **args)
        pte = bytes(manager.to_executorch().buffer)
    report = fastlower.report_for(manager)
    served = any("to_executorch served from the cache" in line for line in lines.lines[before:])
    return {"key": key, "lowering_cache": report.lowering_cache if report else None,
            "cache_hits": dict(report.cache_hits) if report else {},
            "cache_misses": dict(report.cache_misses) if report else {},
            "to_executorch_hit": served, "pte": pte}


# --- the test's side -----------------------------------------------------------------------

def start(out: Path, steps: Sequence[str], cache_dir: Path, *, chain: bool = False,
          patched: bool = False, barrier: Optional[Tuple[Path, int]] = None,
          wrap: Callable[[List[str]], List[str]] = list,
          env: Optional[Dict[str, str]] = None, real: bool = False) -> "subprocess.Popen[bytes]":
    """Starts this module in a new process (serial preprocess, ``FASTLOWER_CACHE_DIR=cache_dir``,
    plus ``env``); ``wrap`` may put the command inside another (a mount namespace). The process
    is a fork of a pre-imported interpreter (``tests.python_children``) unless ``real``."""
    argv = [sys.executable, "-m", "tests.cache.lower_once", str(out), *steps]
    argv += ["--chain"] * chain + ["--patched"] * patched
    if barrier is not None:
        argv += ["--barrier", str(barrier[0]), str(barrier[1])]
    environ = {k: v for k, v in os.environ.items() if k not in _ENV_CLEARED}
    environ.update(FASTLOWER_CACHE_DIR=str(cache_dir), FASTLOWER_WORKERS="1",
                   PYTHONPATH=str(ROOT), **(env or {}))
    log_file = open(out.with_name(out.name + ".log"), "wb")
    try:
        return python_children.popen(wrap(argv), cwd=ROOT, env=environ, stdout=log_file,
                                     stderr=subprocess.STDOUT, real=real)
    finally:
        log_file.close()


def outcome(process: "subprocess.Popen[bytes]", out: Path, timeout: float = 300) -> Dict[str, Any]:
    """The process's ``OUT.json``, each step's ``pte`` read as bytes; its log if it failed."""
    try:
        code = process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise
    log = out.with_name(out.name + ".log").read_text(errors="replace")
    if code != 0:
        raise AssertionError(f"{process.args} exited with {code}:\n{log[-4000:]}")
    result = json.loads(out.read_text())
    for step in result["steps"]:
        step["pte"] = Path(step["pte"]).read_bytes()
    return result


def run(out: Path, steps: Sequence[str], cache_dir: Path, **options: Any) -> Dict[str, Any]:
    """:func:`start`, then :func:`outcome`."""
    return outcome(start(out, steps, cache_dir, **options), out)


@functools.lru_cache(maxsize=None)
def reference_pte(step: str, chain: bool = False) -> bytes:
    """The ``.pte`` of ExecuTorch's own lowering of ``step`` (no fastlower, no cache)."""
    import executorch.exir as exir

    import fastlower.patch
    from tests.cache.helpers import base_args, small_aten

    program = small_aten("param" if step == "param" else None)
    with fastlower.patch.reference(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        manager = exir.to_edge_transform_and_lower(program,
                                                   **base_args(partitioner=partitioners(chain)))
        return bytes(manager.to_executorch().buffer)


# --- the subprocess's side ------------------------------------------------------------------

def main(argv: List[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("steps", nargs="+", choices=["base", "param"])
    parser.add_argument("--chain", action="store_true")
    parser.add_argument("--patched", action="store_true")
    parser.add_argument("--barrier", nargs=2)
    options = parser.parse_args(argv)

    import fastlower.preprocess

    lines = _Lines()
    logger = logging.getLogger("fastlower.cache")
    logger.addHandler(lines)
    logger.setLevel(logging.DEBUG)
    results = []
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        if options.barrier:
            import tests.cache.helpers  # noqa: F401  (imports paid before the barrier)

            _wait_at_barrier(Path(options.barrier[0]), int(options.barrier[1]))
        for i, step in enumerate(options.steps):
            result = _step(step, options.chain, options.patched, lines)
            pte_path = options.out.with_name(f"{options.out.name}.{i}.pte")
            pte_path.write_bytes(result.pop("pte"))
            results.append(dict(result, step=step, pte=str(pte_path)))
    cache_warnings = [str(w.message) for w in seen
                      if issubclass(w.category, fastlower.preprocess.CacheWarning)]
    options.out.write_text(json.dumps({"steps": results, "warnings": cache_warnings}))


if __name__ == "__main__":
    main(sys.argv[1:])
