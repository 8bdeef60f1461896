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


def test_a_callers_freeze_is_left_alone():
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        assert frozen > 0
        with _heap_frozen():
            assert gc.get_freeze_count() == frozen
        assert gc.get_freeze_count() == frozen
    finally:
        gc.unfreeze()
