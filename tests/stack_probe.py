"""A probe of CPython 3.11's frame-stack chunks (python/cpython#142183, see
``fastlower.in_process.stack_room``): the most page faults a loop of calls makes at any stack depth
0-399. A loop whose callee's frame lands at a chunk's end maps a chunk per call, ~one
page fault each.

Imported by ``tests/test_stack_room.py``; run as a script by ``tests/cli/test_run.py``
(``python stack_probe.py OUT.txt`` writes the worst count below the script's own frame),
directly and under ``fastlower run``.
"""

from __future__ import annotations

import resource
import sys
from typing import Any, Callable

CALLS = 2000

# this thread's page faults (Linux), the process's elsewhere
_WHO = getattr(resource, "RUSAGE_THREAD", resource.RUSAGE_SELF)


def _leaf() -> int:
    return 1


def _loop(calls: int) -> int:
    return sum(_leaf() for _ in range(calls))


def _dive(depth: int, calls: int) -> int:
    return _loop(calls) if depth == 0 else _dive(depth - 1, calls)


def faults(run: Callable[[], Any]) -> int:
    """This thread's minor page faults during ``run()``."""
    before = resource.getrusage(_WHO).ru_minflt
    run()
    return resource.getrusage(_WHO).ru_minflt - before


def plain(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``: the caller :func:`worst_depth` compares ``with_stack_room`` with."""
    return fn(*args)


def worst_depth(call: Callable[..., Any]) -> int:
    """The most page faults a loop of CALLS calls made at any depth 0-399 under ``call``."""
    return max(faults(lambda d=d: call(_dive, d, CALLS)) for d in range(400))


if __name__ == "__main__":
    with open(sys.argv[1], "w") as out:
        out.write(str(worst_depth(plain)))
