"""fastlower.stack_room: a call with room on the frame stack never maps a stack chunk per
call in its loops (python/cpython#142183), and behaves as the plain call otherwise."""

from __future__ import annotations

import resource
import sys
import threading

import pytest

from fastlower.stack_room import stack_room, with_stack_room

CALLS = 2000


def _leaf() -> int:
    return 1


def _loop(calls: int) -> int:
    return sum(_leaf() for _ in range(calls))


def _dive(depth: int, calls: int) -> int:
    return _loop(calls) if depth == 0 else _dive(depth - 1, calls)


# this thread's page faults (Linux), the process's elsewhere
_WHO = getattr(resource, "RUSAGE_THREAD", resource.RUSAGE_SELF)


def _faults(run) -> int:
    before = resource.getrusage(_WHO).ru_minflt
    run()
    return resource.getrusage(_WHO).ru_minflt - before


def _worst_depth(call) -> int:
    """The most page faults a loop of CALLS calls made at any depth 0-399 under ``call``."""
    return max(_faults(lambda d=d: call(_dive, d, CALLS)) for d in range(400))


def _plain(fn, *args):
    return fn(*args)


def test_no_loop_maps_a_chunk_per_call_whatever_the_depth():
    plain = _worst_depth(_plain)
    if plain < CALLS // 2:
        pytest.skip(f"this CPython ({sys.version.split()[0]}) does not map a stack chunk per "
                    f"call at any depth here (worst {plain} faults for {CALLS} calls)")
    assert _worst_depth(with_stack_room) < CALLS // 20


def test_nested_calls_each_get_room():
    inner = []

    def outer():
        inner.append(_worst_depth(with_stack_room))

    with_stack_room(outer)
    assert inner[0] < CALLS // 20


def test_same_result_exception_and_signature():
    def add(a, b=0, *, c=0):
        """adds"""
        return a + b + c

    assert with_stack_room(add, 1, 2, c=3) == 6
    wrapped = stack_room(add)
    assert wrapped(1, b=2) == 3 and wrapped.__name__ == "add" and wrapped.__doc__ == "adds"
    assert wrapped.__wrapped__ is add

    def fail():
        raise KeyError("node 'x'")

    with pytest.raises(KeyError, match="node 'x'"):
        with_stack_room(fail)


def test_threads_have_their_own_room():
    results = []

    def work():
        results.append(_worst_depth(with_stack_room))

    threads = [threading.Thread(target=work) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 2 and max(results) < CALLS // 20
