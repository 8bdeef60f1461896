"""The fork pool and the cache's store child are forked with Python's heap frozen
(``gc.freeze``): a child's cyclic collections then leave the parent's objects alone
instead of copying every page that holds one. The parent gets its objects back
right after, and a caller's own freeze is left as it is."""

from __future__ import annotations

import gc

from fastlower.preprocess.executors import _heap_frozen


def test_frozen_while_forking_then_given_back():
    assert gc.get_freeze_count() == 0
    with _heap_frozen():
        assert gc.get_freeze_count() > 0
    assert gc.get_freeze_count() == 0


def test_a_callers_freeze_is_left_alone(monkeypatch):
    """With objects already frozen by the caller, nothing is frozen or unfrozen.

    (The freeze count itself is not compared: frozen objects can still be freed by
    reference counting, so it may drop between two reads.)"""
    from fastlower.preprocess import executors

    calls = []

    class RecordingGc:
        get_freeze_count = staticmethod(gc.get_freeze_count)

        @staticmethod
        def freeze():
            calls.append("freeze")

        @staticmethod
        def unfreeze():
            calls.append("unfreeze")

    gc.freeze()
    try:
        assert gc.get_freeze_count() > 0
        monkeypatch.setattr(executors, "gc", RecordingGc)
        with _heap_frozen():
            assert gc.get_freeze_count() > 0
        assert gc.get_freeze_count() > 0 and calls == []
        monkeypatch.undo()
    finally:
        gc.unfreeze()
    monkeypatch.setattr(executors, "gc", RecordingGc)  # not frozen: one freeze, one unfreeze
    with _heap_frozen():
        pass
    assert calls == ["freeze", "unfreeze"]
