"""One method of a third-party class (or one function of a module), replaced for good
once fastlower first needs it, and acting only where a context variable says so.

The replacement is bound by the first :meth:`ScopedMethodPatch.install` and kept until
:meth:`ScopedMethodPatch.uninstall`; the replacement itself checks its context variable
(this thread or asyncio task) and runs the original outside fastlower's blocks. A
binding someone else made after fastlower's is left in place by ``uninstall``.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Callable, Iterator, Optional, TypeVar

T = TypeVar("T")

__all__ = ["ScopedMethodPatch"]


class ScopedMethodPatch:
    """``owner().<name>`` replaced by ``replace(original)`` while installed."""

    def __init__(self, owner: Callable[[], Any], name: str,
                 replace: Callable[[Callable[..., Any]], Callable[..., Any]]) -> None:
        self._owner = owner  # imports the class (or module) on first use
        self._name = name
        self._replace = replace
        self._lock = threading.Lock()
        self._original: Optional[Callable[..., Any]] = None
        self._patched: Optional[Callable[..., Any]] = None

    def install(self) -> None:
        """Binds the replacement (once; later calls change nothing)."""
        with self._lock:
            if self._patched is not None:
                return
            owner = self._owner()
            self._original = owner.__dict__[self._name]
            self._patched = self._replace(self._original)
            setattr(owner, self._name, self._patched)

    @contextmanager
    def active(self, var: "ContextVar[T]", value: T) -> Iterator[T]:
        """Binds the replacement (once) and sets ``var``, the context variable it reads, to
        ``value`` inside the block (this thread or asyncio task); yields ``value``."""
        self.install()
        token = var.set(value)
        try:
            yield value
        finally:
            var.reset(token)

    def installed(self) -> bool:
        """Whether the replacement is bound now (not when ``replace`` declined the
        original and gave it back: nothing was replaced)."""
        return self._patched is not None and self._patched is not self._original

    def uninstall(self) -> None:
        """Puts the original back (unless someone rebound the method since)."""
        with self._lock:
            if self._patched is None:
                return
            owner = self._owner()
            if owner.__dict__.get(self._name) is self._patched:
                setattr(owner, self._name, self._original)
            self._original = self._patched = None
