"""``accelerated()``: inside it, every ``CapabilityBasedPartitioner`` and
``GroupBasedPartitioner`` of the current thread proposes natively.

The classes are patched once, on first use, and never restored: the patched
``propose_partitions`` asks a per-thread depth counter whether the calling thread is
inside ``accelerated()`` and otherwise runs the reference's code, so threads lowering
at once neither see nor undo each other's switch.  The reference builds each node's full
downstream (and upstream) set in ``__init__``; inside ``accelerated()`` those
``_DependencyViewer`` objects are built lazily, only if some code still reads them.
"""

from __future__ import annotations

import logging
import os
import threading
from contextlib import contextmanager
from typing import Generator, List

from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner, Partition

from . import native
from .encoding import NotEncodable

log = logging.getLogger("fastlower.partitioners")

ENV = "FASTLOWER_NATIVE_PARTITIONERS"

_state = threading.local()
_install_lock = threading.Lock()
_installed = False
_reference_capability_propose = CapabilityBasedPartitioner.propose_partitions
_reference_group_propose = native.GroupBasedPartitioner.propose_partitions
# the reference's viewer classes (the lazy ones installed later subclass them)
_REFERENCE_VIEWERS = (native._capability_module._DependencyViewer,
                      native._group_module._DependencyViewer)


def enabled_by_environment() -> bool:
    """False when ``FASTLOWER_NATIVE_PARTITIONERS`` is 0/false/no/off."""
    return os.environ.get(ENV, "1").strip().lower() not in {"0", "false", "no", "off"}


def is_active() -> bool:
    """Whether the calling thread is inside ``accelerated()`` (and the environment allows it)."""
    return getattr(_state, "depth", 0) > 0 and enabled_by_environment()


def _lazy_viewer(reference_class: type) -> type:
    class LazyDependencyViewer(reference_class):
        """The reference's ``_DependencyViewer``, computed on first use when built inside
        ``accelerated()`` (the native partitioners never read it)."""

        def __init__(self, graph_module) -> None:
            if is_active():
                self._graph_module = graph_module
            else:
                reference_class.__init__(self, graph_module)

        def __getattr__(self, name: str):
            # only reached for attributes not set yet: downstreams / upstreams of a lazy viewer
            graph_module = self.__dict__.get("_graph_module")
            if graph_module is None or name.startswith("__"):
                raise AttributeError(name)
            del self.__dict__["_graph_module"]
            reference_class.__init__(self, graph_module)
            return getattr(self, name)

    LazyDependencyViewer.__name__ = LazyDependencyViewer.__qualname__ = reference_class.__name__
    LazyDependencyViewer.__module__ = reference_class.__module__
    return LazyDependencyViewer


def _custom_viewer(partitioner) -> bool:
    viewer = getattr(partitioner, "dependency_viewer", None)
    return not isinstance(viewer, _REFERENCE_VIEWERS)


def _capability_propose(self) -> List[Partition]:
    if is_active() and not _custom_viewer(self):
        try:
            return native.propose_capability(self)
        except NotEncodable as exc:
            log.debug("native CapabilityBasedPartitioner declined: %s", exc)
    return _reference_capability_propose(self)


def _group_propose(self) -> List[Partition]:
    if is_active() and not _custom_viewer(self):
        hook = native.overrides_hooks(self, native.GroupBasedPartitioner, native.GROUP_HOOKS[1:])
        if hook is None:
            try:
                return native.propose_group(self)
            except NotEncodable as exc:
                log.debug("native GroupBasedPartitioner declined: %s", exc)
        else:
            log.debug("%s overrides %s: using its own propose_partitions", type(self).__name__, hook)
    return _reference_group_propose(self)


def _install() -> None:
    global _installed
    with _install_lock:
        if _installed:
            return
        for module in (native._capability_module, native._group_module):
            if not getattr(module._DependencyViewer, "_fastlower_lazy", False):
                lazy = _lazy_viewer(module._DependencyViewer)
                lazy._fastlower_lazy = True
                module._DependencyViewer = lazy
        _capability_propose.__doc__ = _reference_capability_propose.__doc__
        _group_propose.__doc__ = _reference_group_propose.__doc__
        CapabilityBasedPartitioner.propose_partitions = _capability_propose
        native.GroupBasedPartitioner.propose_partitions = _group_propose
        _installed = True


@contextmanager
def accelerated() -> Generator[None, None, None]:
    """Within the block, the calling thread's ``CapabilityBasedPartitioner`` and
    ``GroupBasedPartitioner`` instances propose partitions natively (same partitions, ids
    and node order as the reference).  Subclasses overriding ``propose_partitions`` or a
    hook it relies on keep their own code.  ``FASTLOWER_NATIVE_PARTITIONERS=0`` disables it.
    Re-entrant and thread-safe."""
    _install()
    _state.depth = getattr(_state, "depth", 0) + 1
    try:
        yield
    finally:
        _state.depth -= 1


@contextmanager
def reference() -> Generator[None, None, None]:
    """Within the block, the calling thread runs the reference's partitioners even inside
    ``accelerated()`` (for comparisons)."""
    saved = getattr(_state, "depth", 0)
    _state.depth = 0
    try:
        yield
    finally:
        _state.depth = saved
