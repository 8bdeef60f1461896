"""How preprocess failures reach the caller: typed, naming the partition and backend.

A backend's own exception keeps its class and its message: the caller gets an
instance of a subclass of *both* the backend's exception class and
:class:`PreprocessError`, so ``except ValueError`` (or whatever the backend
raised) still catches it, ``except fastlower.FastlowerError`` does too, and
``str(exc)`` / ``exc.args`` are exactly the backend's (code and tests that match
the backend's text keep working). The partition's tag, method and backend are
typed attributes and a PEP 678 note (``exc.__notes__``, printed with the
traceback). The original exception is the new one's ``__cause__``.
"""

from __future__ import annotations

import signal
from typing import Dict, Optional, Sequence

from ..errors import FastlowerError, add_note

_SUBCLASSES: Dict[type, type] = {}


class PreprocessError(FastlowerError):
    """A backend's ``preprocess`` failed for one partition.

    Instances are also instances of the backend's exception class (see
    :func:`backend_error`); ``original`` is the exception the backend raised.
    """

    tag: str = ""
    backend_id: str = ""
    method: str = ""
    original: Optional[BaseException] = None


class WorkerDiedError(FastlowerError, RuntimeError):
    """A preprocess worker process died (killed by a signal, out of memory, ``os._exit``)."""

    def __init__(self, message: str, partitions: Sequence[str]):
        super().__init__(message)
        self.partitions = list(partitions)


class CacheVerificationError(FastlowerError, RuntimeError):
    """``FASTLOWER_CACHE_VERIFY=1``: a cached result differs from a fresh ``preprocess``."""


def _subclass_for(cls: type) -> type:
    sub = _SUBCLASSES.get(cls)
    if sub is None:
        sub = type(cls.__name__, (cls, PreprocessError), {
            "__module__": cls.__module__, "__qualname__": cls.__qualname__,
            "__doc__": f"{cls.__qualname__} raised by a backend's preprocess (fastlower)."})
        _SUBCLASSES[cls] = sub
    return sub


def backend_error(exc: BaseException, tag: str, backend_id: str, method: str) -> BaseException:
    """The exception to raise for ``exc`` raised by ``backend_id``'s ``preprocess`` of ``tag``.

    ``KeyboardInterrupt`` and other non-``Exception`` errors pass through as they are.
    The new exception has the original's ``args``, attributes and notes, so its
    ``str()`` is the backend's; the partition is named in one more note. If the
    backend's class cannot be subclassed (or instantiated without its
    ``__init__``), the original is returned with that note.
    """
    where = (f"fastlower: preprocess of partition '{tag}' of method '{method}' "
             f"by backend {backend_id}")
    if not isinstance(exc, Exception) or isinstance(exc, PreprocessError):
        return exc
    try:
        sub = _subclass_for(type(exc))
        new = sub.__new__(sub, *exc.args)
        new.__dict__.update(getattr(exc, "__dict__", {}))
        new.args = exc.args
    except Exception:  # final classes, exotic layouts: keep the original, add a note
        add_note(exc, where)
        return exc
    # the original's notes, in a list of the new exception's own
    new.__notes__ = list(getattr(exc, "__notes__", ()))
    add_note(new, where)
    new.tag, new.backend_id, new.method, new.original = tag, backend_id, method, exc
    new.__cause__ = exc
    new.__traceback__ = exc.__traceback__
    return new


def describe_exit(exitcode: Optional[int]) -> str:
    """``multiprocessing``'s exit code as words."""
    if exitcode is None:
        return "exit status unknown"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        hint = " (out of memory?)" if -exitcode == signal.SIGKILL else ""
        return f"killed by {name}{hint}"
    return f"exited with status {exitcode}"

