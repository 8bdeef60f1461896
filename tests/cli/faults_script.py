"""A script for ``fastlower run`` (tests/cli/test_run.py): the most page faults a loop of
calls makes at any stack depth 0-399 below the script's own frame.

    python faults_script.py OUT.txt

Under CPython 3.11 a loop whose callee's frame lands at the end of a frame-stack chunk
maps a chunk per call (python/cpython#142183, see ``fastlower.stack_room``); a script run
by ``fastlower run`` has room on the stack, one run by plain ``python`` does not.
"""

import resource
import sys

CALLS = 2000
_WHO = getattr(resource, "RUSAGE_THREAD", resource.RUSAGE_SELF)


def _leaf():
    return 1


def _loop(calls):
    return sum(_leaf() for _ in range(calls))


def _dive(depth, calls):
    return _loop(calls) if depth == 0 else _dive(depth - 1, calls)


def _faults(depth):
    before = resource.getrusage(_WHO).ru_minflt
    _dive(depth, CALLS)
    return resource.getrusage(_WHO).ru_minflt - before


if __name__ == "__main__":
    with open(sys.argv[1], "w") as out:
        out.write(str(max(_faults(depth) for depth in range(400))))
