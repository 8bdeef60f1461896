"""One ``known_outputs`` block: its mode and what it learned, in a context variable
(this thread or asyncio task; a worker forked inside the block too)."""

from __future__ import annotations

import threading
from contextvars import ContextVar
from typing import Any, Callable, Dict, Optional, Tuple

from .repeated import Repeats

__all__ = ["LAST", "LastCounts", "Scope", "current", "enter", "leave"]


class Scope:
    """A block's mode (``reuse`` or ``verify``), what it learned of each lowered module
    and each operator call (by id and key: a block ends before its programs can go),
    and its counts."""

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.records: Dict[int, Tuple[Any, Any]] = {}
        self.op_outputs: Dict[Any, Any] = {}
        self.op_targets: Dict[int, Tuple[Any, bool]] = {}
        self.delegates_reused = self.delegates_run = 0
        self.ops_reused = self.ops_run = 0
        self.repeats = Repeats()  # calls repeated on the same fake tensors (.repeated)
        self.repeats_reused = self.repeats_run = 0

    @staticmethod
    def by_object(table: Dict[int, Tuple[Any, Any]], obj: Any,
                  compute: Callable[[Any], Any]) -> Any:
        """``compute(obj)``, memoized in ``table`` by the object's identity (its id, checked
        against the object kept beside it)."""
        seen = table.get(id(obj))
        if seen is None or seen[0] is not obj:
            seen = (obj, compute(obj))
            table[id(obj)] = seen
        return seen[1]


class LastCounts(threading.local):
    """This thread's last closed block's counts (for reports and tests)."""

    def __init__(self) -> None:
        self.delegates_reused = self.delegates_run = 0
        self.ops_reused = self.ops_run = 0
        self.repeats_reused = self.repeats_run = 0


LAST = LastCounts()
_SCOPE: ContextVar[Optional[Scope]] = ContextVar("fastlower_fake_outputs", default=None)


def current() -> Optional[Scope]:
    """The innermost open block of this thread or task, or None."""
    return _SCOPE.get()


def enter(scope: Scope) -> Any:
    return _SCOPE.set(scope)


def leave(token: Any, scope: Scope) -> None:
    _SCOPE.reset(token)
    LAST.delegates_reused, LAST.delegates_run = scope.delegates_reused, scope.delegates_run
    LAST.ops_reused, LAST.ops_run = scope.ops_reused, scope.ops_run
    LAST.repeats_reused, LAST.repeats_run = scope.repeats_reused, scope.repeats_run
