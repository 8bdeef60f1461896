"""Where the time of ``export_llm``'s ``to_edge_transform_and_lower`` goes.

Run ``export_llm`` through it, as ``python -m executorch.extension.llm.export.export_llm``
would run (under ``fastlower run`` for fastlower's lowering)::

    PYTHONPATH=. fastlower run --no-cache -m benchmarks.lowering_call_probe [--profile OUT] ARGS...

Without ``--profile``: for each ``to_edge_transform_and_lower`` call, one ``FAKECOUNT
{json}`` line on stderr: torch's fake-tensor cache hits, misses and bypasses by reason,
and the operators whose fake dispatch the cache did not answer, by seconds (outermost
calls). With ``--profile OUT``: the call under cProfile, its stats written to ``OUT`` (no
census timers). Whatever implementation is bound when the wrapper is made is the one
probed, as in ``tests/pipeline/timed.py``.
"""

from __future__ import annotations

import collections
import cProfile
import json
import runpy
import sys
import time
from typing import Any, Callable

import executorch.exir as exir
import executorch.exir.program._program as program
from torch._subclasses.fake_tensor import FakeTensorMode

_ORIGINAL = program.to_edge_transform_and_lower
_DISPATCH = FakeTensorMode._dispatch_impl
SECONDS: collections.Counter = collections.Counter()
CALLS: collections.Counter = collections.Counter()
_ACTIVE = [False]


def _timed_dispatch(self: Any, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
    if not _ACTIVE[0]:
        return _DISPATCH(self, func, types, args, kwargs)
    _ACTIVE[0] = False  # the outermost call only: its nested ones are its own time
    start = time.perf_counter()
    try:
        return _DISPATCH(self, func, types, args, kwargs)
    finally:
        SECONDS[str(func)] += time.perf_counter() - start
        CALLS[str(func)] += 1
        _ACTIVE[0] = True


def _census(*args: Any, **kwargs: Any) -> Any:
    FakeTensorMode.cache_clear()
    SECONDS.clear()
    CALLS.clear()
    _ACTIVE[0] = True
    start = time.perf_counter()
    try:
        return _ORIGINAL(*args, **kwargs)
    finally:
        _ACTIVE[0] = False
        top = SECONDS.most_common(25)
        print("FAKECOUNT " + json.dumps({
            "seconds": time.perf_counter() - start, "hits": FakeTensorMode.cache_hits,
            "misses": FakeTensorMode.cache_misses,
            "bypasses": dict(FakeTensorMode.cache_bypasses),
            "uncached_seconds": sum(SECONDS.values()),
            "top": [[name, round(sec, 3), CALLS[name]] for name, sec in top]}),
            file=sys.stderr, flush=True)


def _profiled(out: str) -> Callable[..., Any]:
    def call(*args: Any, **kwargs: Any) -> Any:
        profile = cProfile.Profile()
        start = time.perf_counter()
        profile.enable()
        try:
            return _ORIGINAL(*args, **kwargs)
        finally:
            profile.disable()
            print(f"PROFILED to_edge_transform_and_lower {time.perf_counter() - start:.1f} s",
                  file=sys.stderr, flush=True)
            profile.dump_stats(out)

    return call


def run_export_llm(wrapper: Callable[..., Any], argv: list) -> None:
    """``export_llm`` with ``argv``, its ``to_edge_transform_and_lower`` calls through
    ``wrapper`` (which calls the original, ``_ORIGINAL`` of its module)."""
    program.to_edge_transform_and_lower = wrapper
    exir.to_edge_transform_and_lower = wrapper
    sys.argv = ["export_llm"] + argv
    runpy.run_module("executorch.extension.llm.export.export_llm", run_name="__main__",
                     alter_sys=True)


def main(argv: list) -> None:
    if argv[:1] == ["--profile"]:
        wrapper, argv = _profiled(argv[1]), argv[2:]
    else:
        FakeTensorMode._dispatch_impl = _timed_dispatch
        wrapper = _census
    run_export_llm(wrapper, argv)


if __name__ == "__main__":
    main(sys.argv[1:])
