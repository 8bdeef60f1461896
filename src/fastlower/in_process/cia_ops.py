"""torch's table of CompositeImplicitAutograd operators materialized once, not once per
operator namespace, while fastlower lowers.

Each ``run_decompositions`` (every retrace of the edge stage) asks
``torch._export.utils._collect_all_valid_cia_ops`` for the operators it may keep, and that
calls ``_materialize_cpp_cia_ops`` once for each of the ~40 namespaces in ``torch.ops``:
each call lists the dispatcher's CompositeImplicitAutograd registrations and ``getattr``\\ s
every one of them into ``torch.ops`` (5% of ExecuTorch's ``to_edge_transform_and_lower`` of
the bundled 4-layer decoder: 660 walks, 0.68 s; ``benchmarks/cia_ops_probe.py``).

The premise: materializing only adds names to the namespaces' ``_dir`` lists (and caches
packets), and what the collection reads is those lists. So when the registrations are the
ones materialized last, and every namespace and its ``_dir`` is as that materialization
left it, a new one would add nothing. The patch checks exactly that (a new registration, a
namespace added, an operator deleted by ``torch.library``: any of them materializes again)
and skips the ``getattr`` walk only then; the sets the collection returns are torch's.

The patch: ``torch._export.utils._materialize_cpp_cia_ops``, bound by the first
:func:`materialized_once` block and kept until :func:`uninstall`, runs torch's own code
unless the calling thread or asyncio task is inside such a block and
``FASTLOWER_CIA_OPS`` is ``once`` (the default) or ``verify`` (each skipped walk is run
anyway and must have changed nothing, else :class:`CiaOpsVerificationError`); ``each`` is
torch's way throughout.
"""

from __future__ import annotations

import functools
import threading
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Callable, Iterator, Optional, Tuple

from .. import settings
from .scoped_patch import ScopedMethodPatch

__all__ = ["CiaOpsVerificationError", "installed", "materialized_once", "skipped",
           "uninstall"]

_MODE: ContextVar[str] = ContextVar("fastlower_cia_ops", default="each")
_lock = threading.Lock()
_last: list = [None]  # the state the last materialization left (see _state)
_skipped = [0]


class CiaOpsVerificationError(AssertionError):
    """``FASTLOWER_CIA_OPS=verify``: a materialization the patch would have skipped changed
    ``torch.ops``."""

    def __init__(self) -> None:
        super().__init__("torch's CompositeImplicitAutograd operators: a materialization "
                         "fastlower would have skipped changed torch.ops; set "
                         "FASTLOWER_CIA_OPS=each and please report it")


def _export_utils() -> Any:
    import torch._export.utils as utils

    return utils


def _state() -> Tuple[Any, ...]:
    """What a materialization depends on and changes: the dispatcher's CompositeImplicitAutograd
    registrations, and each namespace object of ``torch.ops`` with the names in its ``_dir``."""
    import torch

    registrations = tuple(torch._C._dispatch_get_registrations_for_dispatch_key(
        "CompositeImplicitAutograd"))
    namespaces = tuple((name, space, tuple(getattr(space, "_dir", ())))
                       for name, space in list(vars(torch.ops).items())
                       if isinstance(space, torch._ops._OpNamespace))
    return registrations, tuple(torch.ops._dir), namespaces


def _same(a: Optional[Tuple[Any, ...]], b: Tuple[Any, ...]) -> bool:
    if a is None or a[:2] != b[:2] or len(a[2]) != len(b[2]):
        return False
    return all(n1 == n2 and s1 is s2 and d1 == d2
               for (n1, s1, d1), (n2, s2, d2) in zip(a[2], b[2]))


def _once(original: Callable[[], None]) -> Callable[[], None]:
    """``_materialize_cpp_cia_ops`` that skips a walk that would change nothing inside a
    block, else ``original``."""

    def _materialize_cpp_cia_ops() -> None:
        mode = _MODE.get()
        if mode == "each":
            original()
            return
        with _lock:
            before = _state()
            if _same(_last[0], before):
                _skipped[0] += 1
                if mode == "verify":
                    original()
                    if not _same(before, _state()):
                        _last[0] = None
                        raise CiaOpsVerificationError()
                return
            original()
            _last[0] = _state()

    return functools.wraps(original)(_materialize_cpp_cia_ops)


_PATCH = ScopedMethodPatch(_export_utils, "_materialize_cpp_cia_ops", _once)
installed = _PATCH.installed  # whether the patch is bound now


def uninstall() -> None:
    """Puts torch's function back (a binding someone else made after fastlower's stays);
    the next :func:`materialized_once` block binds the patch again."""
    _PATCH.uninstall()
    with _lock:
        _last[0] = None


def skipped() -> int:
    """How many materializations the patch found would change nothing (this process)."""
    return _skipped[0]


@contextmanager
def materialized_once() -> Iterator[None]:
    """Inside the block, in this thread or task, a materialization that would change nothing
    is skipped (see the module); nested blocks are fine."""
    mode = settings.choice(settings.CIA_OPS)
    if mode == "each":
        yield
        return
    with _PATCH.active(_MODE, mode):
        yield
