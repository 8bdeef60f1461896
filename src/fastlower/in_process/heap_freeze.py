"""The heap frozen for Python's cyclic collector while fastlower lowers.

A full collection walks every tracked object. When a lowering starts, the process holds
millions of them (the model, its exported programs, torch's own), and each step of the
lowering makes millions more: in ``export_llm``'s pipeline at stories110M size the
collector's full collections took about 6 s of the lowering window (``gc.callbacks``
timing, ``benchmarks/README.md``), walking objects that live on. ``gc.freeze()`` moves
every tracked object to the permanent generation, which no collection walks, so each
lowering step only walks what it made itself.

:func:`frozen_heap` freezes what is alive when a block starts (a nested block freezes
what the outer one made since); the last of fastlower's blocks to end unfreezes
everything, so the objects are the collector's again. The cost: garbage cycles that
exist when a block starts are freed when the outermost block ends, not during it.
When the process froze objects itself (a nonzero freeze count with no fastlower block
open), fastlower leaves the heap alone: unfreezing would release theirs too. The same
blocks keep a forked child's collections off the parent's pages (``preprocess.executors``).

:func:`full_collections_paused` goes further for the edge stage, whose retraces each
leave a whole program behind: no full collection runs inside it (the oldest
generation's threshold raised; young collections go on), and the threshold is put back
when the last such block ends. At stories110M size the process's peak did not move
(1,561 MiB before and after the stage), and the one full collection after the stage
replaces about 18 inside it.
"""

from __future__ import annotations

import gc
import threading
from contextlib import contextmanager
from typing import Callable, ContextManager, Iterator

from .. import settings

__all__ = ["frozen_heap", "full_collections_paused", "held"]

_LOCK = threading.Lock()
_PAUSED_THRESHOLD = 1 << 30


class _Hold:
    """A process-wide change held by fastlower's open blocks, in every thread: each
    entering block asks ``enter(first)`` whether it takes part (and makes its part of
    the change); the last one out calls ``leave()``."""

    def __init__(self, enter: Callable[[bool], bool], leave: Callable[[], None]) -> None:
        self.count = 0
        self._enter = enter
        self._leave = leave

    @contextmanager
    def block(self, wanted: bool) -> Iterator[bool]:
        own = False
        if wanted:
            with _LOCK:
                own = self._enter(not self.count)
                self.count += own
        try:
            yield own
        finally:
            if own:
                with _LOCK:
                    self.count -= 1
                    if not self.count:
                        self._leave()


def _freeze(first: bool) -> bool:
    if first and gc.get_freeze_count():
        return False  # the process froze objects itself: unfreezing would release theirs
    gc.freeze()
    return True


_saved_threshold = [0]  # the oldest generation's threshold before the pause


def _pause(first: bool) -> bool:
    if first:
        young, middle, oldest = gc.get_threshold()
        if not oldest:
            return False  # automatic full collections off: the process's own business
        _saved_threshold[0] = oldest
        gc.set_threshold(young, middle, _PAUSED_THRESHOLD)
    return True


def _resume() -> None:
    young, middle, oldest = gc.get_threshold()
    if oldest == _PAUSED_THRESHOLD:  # else someone set their own meanwhile
        gc.set_threshold(young, middle, _saved_threshold[0])


def _unfreeze() -> None:
    gc.unfreeze()


_FROZEN = _Hold(_freeze, _unfreeze)
_PAUSED = _Hold(_pause, _resume)


def held() -> int:
    """How many of fastlower's blocks hold the heap frozen now."""
    return _FROZEN.count


def frozen_heap(required: bool = False) -> ContextManager[bool]:
    """Within the block the objects alive at its start are frozen (see the module).
    Yields whether this block froze them. ``required``: whatever
    ``FASTLOWER_HEAP_FREEZE`` says (a fork's children must not walk the parent's pages)."""
    return _FROZEN.block(required or settings.heap_freeze())


def full_collections_paused() -> ContextManager[bool]:
    """Within the block no full collection runs (see the module); with
    ``FASTLOWER_HEAP_FREEZE=0``, or when the process set that threshold to 0 (automatic
    collection of the oldest generation is then its own business), nothing changes.
    Yields whether this block paused them."""
    return _PAUSED.block(settings.heap_freeze())
