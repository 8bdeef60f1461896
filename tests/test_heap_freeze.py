"""fastlower.in_process.heap_freeze: the heap is frozen for the cyclic collector inside fastlower's
blocks (each lowering step; every fork of a pool or store child), given back when the
last block ends, and a caller's own freeze is left as it is."""

from __future__ import annotations

import gc
import threading

from fastlower.in_process import heap_freeze
from fastlower.in_process.heap_freeze import frozen_heap


class RecordingGc:
    """``gc`` as the module sees it, recording freezes and unfreezes."""

    def __init__(self) -> None:
        self.calls: list = []
        self.get_freeze_count = gc.get_freeze_count

    def freeze(self) -> None:
        self.calls.append("freeze")

    def unfreeze(self) -> None:
        self.calls.append("unfreeze")


def test_frozen_in_the_block_then_given_back():
    assert gc.get_freeze_count() == 0
    with frozen_heap() as froze:
        assert froze and gc.get_freeze_count() > 0 and heap_freeze.held() == 1
    assert gc.get_freeze_count() == 0 and heap_freeze.held() == 0


def test_nested_blocks_freeze_more_and_the_last_one_unfreezes():
    with frozen_heap():
        kept = [object() for _ in range(5)]  # tracked? plain objects are not; lists are
        made = [[] for _ in range(1000)]
        before = gc.get_freeze_count()
        with frozen_heap() as froze:
            assert froze and gc.get_freeze_count() >= before + 1000
        assert gc.get_freeze_count() >= before + 1000  # still frozen: the outer block holds
        del kept, made
    assert gc.get_freeze_count() == 0


def test_a_callers_freeze_is_left_alone(monkeypatch):
    """With objects frozen by the caller, nothing is frozen or unfrozen. (The count is
    not compared: frozen objects can still be freed by reference counting.)"""
    recording = RecordingGc()
    gc.freeze()
    try:
        monkeypatch.setattr(heap_freeze, "gc", recording)
        with frozen_heap(required=True) as froze:
            assert not froze
        assert recording.calls == [] and gc.get_freeze_count() > 0
        monkeypatch.undo()
    finally:
        gc.unfreeze()
    monkeypatch.setattr(heap_freeze, "gc", recording)  # not frozen: one freeze, one unfreeze
    with frozen_heap():
        pass
    assert recording.calls == ["freeze", "unfreeze"]


def test_the_setting_turns_the_lowering_freeze_off_but_not_a_forks(monkeypatch):
    monkeypatch.setenv("FASTLOWER_HEAP_FREEZE", "0")
    with frozen_heap() as froze:
        assert not froze and gc.get_freeze_count() == 0
    with frozen_heap(required=True) as froze:
        assert froze and gc.get_freeze_count() > 0
    assert gc.get_freeze_count() == 0


def test_threads_share_the_freeze_and_the_last_to_leave_unfreezes():
    entered, leave = threading.Barrier(2), threading.Event()
    counts = []

    def step() -> None:
        with frozen_heap():
            entered.wait(timeout=30)
            leave.wait(timeout=30)
        counts.append(heap_freeze.held())

    other = threading.Thread(target=step)
    other.start()
    with frozen_heap():
        entered.wait(timeout=30)
        assert heap_freeze.held() == 2
        leave.set()
        other.join(timeout=30)
        assert counts == [1] and gc.get_freeze_count() > 0  # the other left; this one holds
    assert heap_freeze.held() == 0 and gc.get_freeze_count() == 0


def test_full_collections_paused_then_the_threshold_is_back():
    from fastlower.in_process.heap_freeze import full_collections_paused

    before = gc.get_threshold()
    with full_collections_paused() as paused:
        assert paused and gc.get_threshold()[:2] == before[:2]
        assert gc.get_threshold()[2] > 10**6
        with full_collections_paused():
            assert gc.get_threshold()[2] > 10**6
        assert gc.get_threshold()[2] > 10**6  # the outer block still holds
    assert gc.get_threshold() == before


def test_a_threshold_set_inside_the_pause_is_kept_and_zero_is_left_alone(monkeypatch):
    from fastlower.in_process.heap_freeze import full_collections_paused

    before = gc.get_threshold()
    try:
        with full_collections_paused():
            gc.set_threshold(before[0], before[1], 7)  # the process's own choice
        assert gc.get_threshold()[2] == 7
        gc.set_threshold(before[0], before[1], 0)
        with full_collections_paused() as paused:
            assert not paused and gc.get_threshold()[2] == 0
        gc.set_threshold(*before)
        monkeypatch.setenv("FASTLOWER_HEAP_FREEZE", "0")
        with full_collections_paused() as paused:
            assert not paused and gc.get_threshold() == before
    finally:
        gc.set_threshold(*before)


def test_the_edge_stage_runs_with_full_collections_paused(monkeypatch):
    """fastlower's edge stage holds the pause for its retraces and passes."""
    from fastlower.in_process.edge import decompose

    seen = []

    def edge_manager(*args, **kwargs):
        seen.append(gc.get_threshold()[2])
        raise RuntimeError("stop here")

    monkeypatch.setattr(decompose, "_edge_manager", edge_manager)
    before = gc.get_threshold()
    try:
        decompose.gen_edge_manager_for_partitioners({}, {}, None, None)
    except RuntimeError:
        pass
    assert seen and seen[0] > 10**6 and gc.get_threshold() == before
