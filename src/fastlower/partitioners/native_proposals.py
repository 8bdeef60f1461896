"""Patches for the canonical partitioners: ``propose_partitions`` of torch.fx's
``CapabilityBasedPartitioner`` and ExecuTorch's ``GroupBasedPartitioner`` propose natively
inside ``accelerated()``, and the ``_DependencyViewer`` both build in ``__init__`` is
lazy there (the reference builds each node's full downstream/upstream set; the native
partitioners never read them)."""

from __future__ import annotations

import logging
from typing import List

from torch.fx.passes.infra.partitioner import Partition

from . import native
from .encoding import NotEncodable
from .registry import Patch, register
from .switch import is_active

log = logging.getLogger("fastlower.partitioners")

# the reference's viewer classes, saved before any patch (the lazy ones subclass them)
_REFERENCE_VIEWERS = (native._capability_module._DependencyViewer,
                      native._group_module._DependencyViewer)


def _lazy_viewer(reference_class: type) -> type:
    class LazyDependencyViewer(reference_class):
        """The reference's ``_DependencyViewer``, computed on first use when built inside
        ``accelerated()`` (the native partitioners never read it)."""

        def __init__(self, graph_module) -> None:
            if is_active():
                self._graph_module = graph_module
            else:
                super().__init__(graph_module)

        def __getattr__(self, name: str):
            # only reached for attributes not set yet: downstreams / upstreams of a lazy viewer
            graph_module = self.__dict__.get("_graph_module")
            if graph_module is None or name.startswith("__"):
                raise AttributeError(name)
            del self.__dict__["_graph_module"]
            super().__init__(graph_module)
            return getattr(self, name)

    LazyDependencyViewer.__name__ = LazyDependencyViewer.__qualname__ = reference_class.__name__
    LazyDependencyViewer.__module__ = reference_class.__module__
    return LazyDependencyViewer


def _custom_viewer(partitioner) -> bool:
    viewer = getattr(partitioner, "dependency_viewer", None)
    return not isinstance(viewer, _REFERENCE_VIEWERS)


def _capability_propose(reference):
    def propose_partitions(self) -> List[Partition]:
        if is_active() and not _custom_viewer(self):
            try:
                return native.propose_capability(self)
            except NotEncodable as exc:
                log.debug("native CapabilityBasedPartitioner declined: %s", exc)
        return reference(self)

    propose_partitions.__doc__ = reference.__doc__
    propose_partitions.__wrapped__ = reference  # type: ignore[attr-defined]
    return propose_partitions


def _group_propose(reference):
    def propose_partitions(self) -> List[Partition]:
        if is_active() and not _custom_viewer(self):
            hook = native.overrides_hooks(self, native.GroupBasedPartitioner,
                                          native.GROUP_HOOKS[1:])
            if hook is None:
                try:
                    return native.propose_group(self)
                except NotEncodable as exc:
                    log.debug("native GroupBasedPartitioner declined: %s", exc)
            else:
                log.debug("%s overrides %s: using its own propose_partitions",
                          type(self).__name__, hook)
        return reference(self)

    propose_partitions.__doc__ = reference.__doc__
    propose_partitions.__wrapped__ = reference  # type: ignore[attr-defined]
    return propose_partitions


register(Patch("torch.fx.passes.infra.partitioner", "CapabilityBasedPartitioner",
               "propose_partitions", _capability_propose,
               "native propose_partitions inside accelerated()"))
register(Patch("executorch.exir.backend.canonical_partitioners.group_partitioner",
               "GroupBasedPartitioner", "propose_partitions", _group_propose,
               "native propose_partitions inside accelerated()"))
register(Patch("torch.fx.passes.infra.partitioner", "", "_DependencyViewer",
               lambda original: _lazy_viewer(_REFERENCE_VIEWERS[0]),
               "a _DependencyViewer built inside accelerated() computes its sets only if read"))
register(Patch("executorch.exir.backend.canonical_partitioners.group_partitioner", "",
               "_DependencyViewer", lambda original: _lazy_viewer(_REFERENCE_VIEWERS[1]),
               "a _DependencyViewer built inside accelerated() computes its sets only if read"))
