"""``accelerated()``: inside it, the calling thread's (or asyncio task's) canonical
partitioners, ``get_source_partitions`` and graph-signature lookups run natively.

The state is two context variables: whether the caller is inside ``accelerated()``
(``reference()`` turns it off for a block; the environment switch is read on entry), and
the *scope* of the outermost
``accelerated()`` block, which holds the caches built inside it (source partitions per
graph, signature maps).  A scope's caches die with the block, so nothing built under one
lowering can be seen by code outside it, and an edit made outside every scope can never
leave a stale entry behind.

The patches themselves (see :mod:`.registry`) are installed on the first
``accelerated()`` entry and stay until :func:`uninstall`; each runs the original code
when :func:`is_active` is false.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, Dict, Generator, Optional

from .. import settings
from . import registry

ENV = settings.NATIVE_PARTITIONERS


class Scope:
    """Caches of one outermost ``accelerated()`` block (see :mod:`.source_partitions`,
    :mod:`.signatures`)."""

    __slots__ = ("graphs", "signatures", "signature_epoch", "generation")

    def __init__(self) -> None:
        self.graphs: Dict[Any, Any] = {}       # fx Graph -> source_partitions.GraphCache
        self.signatures: Dict[int, Any] = {}   # id(ExportGraphSignature) -> signatures.Entry
        self.signature_epoch = 0               # bumped by every spec/argument attribute write
        self.generation = registry.generation  # the patches' install generation it was made under


_ON: ContextVar[bool] = ContextVar("fastlower_accelerated", default=False)
_SCOPE: ContextVar[Optional[Scope]] = ContextVar("fastlower_accelerated_scope", default=None)


def enabled_by_environment() -> bool:
    """False when ``FASTLOWER_NATIVE_PARTITIONERS`` is false (see :mod:`fastlower.settings`)."""
    return settings.native_partitioners()


def is_active() -> bool:
    """Whether the calling thread/task is inside ``accelerated()`` (outside ``reference()``),
    the patches are installed, and the environment allowed it when the block was entered."""
    return _ON.get() and registry._installed


def current_scope() -> Optional[Scope]:
    """The caches of the calling context's outermost ``accelerated()`` block, if any (also
    inside a nested ``reference()`` block: edits made there must still reach them)."""
    scope = _SCOPE.get()
    if scope is not None and scope.generation != registry.generation:
        # the patches were removed and put back since: edits in between were not seen
        scope.graphs.clear()
        scope.signatures.clear()
        scope.generation = registry.generation
    return scope


def _install() -> None:
    # the patches registered themselves when the package (__init__) imported their modules
    registry.install()


@contextmanager
def accelerated() -> Generator[None, None, None]:
    """Within the block, the calling thread's (or task's) ``CapabilityBasedPartitioner``
    and ``GroupBasedPartitioner`` propose partitions natively, torch.fx's
    ``get_source_partitions`` is answered from a per-graph index, and
    ``ExportGraphSignature.inputs_to_*`` (so ``is_param``/``is_buffer``/
    ``is_lifted_tensor_constant``) from a per-signature map: the same results as the
    reference.  Subclasses overriding ``propose_partitions`` or a hook it relies on keep
    their own code.  ``FASTLOWER_NATIVE_PARTITIONERS=0`` disables it.  Re-entrant;
    threads and asyncio tasks are independent."""
    _install()
    on_token = _ON.set(enabled_by_environment())
    scope_token = _SCOPE.set(Scope()) if _SCOPE.get() is None else None
    try:
        yield
    finally:
        if scope_token is not None:
            _SCOPE.reset(scope_token)
        _ON.reset(on_token)


@contextmanager
def reference() -> Generator[None, None, None]:
    """Within the block, the calling thread/task runs the reference's code even inside
    ``accelerated()`` (for comparisons)."""
    token = _ON.set(False)
    try:
        yield
    finally:
        _ON.reset(token)


def uninstall() -> None:
    """Remove every patch fastlower installed and restore the original bindings
    (``accelerated()`` installs them again when next entered)."""
    registry.uninstall()


def installed_patches():
    """The bindings fastlower has replaced now, one line each (empty when uninstalled)."""
    return registry.installed_patches()
