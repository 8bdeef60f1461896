"""Where torch's fake-tensor cache does not answer inside ``to_edge_transform_and_lower``.

Run ``export_llm`` through it, as ``python -m executorch.extension.llm.export.export_llm``
would run (under ``fastlower run`` for fastlower's edge stage)::

    PYTHONPATH=. fastlower run --no-cache -m benchmarks.fake_dispatch_census ARGS...

For the first ``to_edge_transform_and_lower`` call it prints one ``FAKECOUNT {json}`` line
on stderr: torch's fake-tensor cache hits, misses and bypasses by reason, and the
operators whose fake dispatch the cache did not answer, by seconds (outermost calls).
"""

from __future__ import annotations

import collections
import json
import runpy
import sys
import time
from typing import Any

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


def main() -> None:
    FakeTensorMode._dispatch_impl = _timed_dispatch
    program.to_edge_transform_and_lower = _census
    exir.to_edge_transform_and_lower = _census
    sys.argv = ["export_llm"] + sys.argv[1:]
    runpy.run_module("executorch.extension.llm.export.export_llm", run_name="__main__",
                     alter_sys=True)


if __name__ == "__main__":
    main()
