"""fastlower.in_process.stack_room: a call with room on the frame stack never maps a stack chunk per
call in its loops (python/cpython#142183), and behaves as the plain call otherwise."""

from __future__ import annotations

import sys
import threading

import pytest

from fastlower.in_process.stack_room import stack_room, with_stack_room
from tests.stack_probe import CALLS, plain, worst_depth


def test_no_loop_maps_a_chunk_per_call_whatever_the_depth():
    worst = worst_depth(plain)
    if worst < CALLS // 2:
        pytest.skip(f"this CPython ({sys.version.split()[0]}) does not map a stack chunk per "
                    f"call at any depth here (worst {worst} faults for {CALLS} calls)")
    assert worst_depth(with_stack_room) < CALLS // 20


def test_nested_calls_each_get_room():
    inner = []

    def outer():
        inner.append(worst_depth(with_stack_room))

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
        results.append(worst_depth(with_stack_room))

    threads = [threading.Thread(target=work) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 2 and max(results) < CALLS // 20
