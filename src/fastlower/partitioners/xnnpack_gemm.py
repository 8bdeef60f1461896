"""XNNPACK's ``AddmmConfig.get_deps`` inside ``accelerated()``: the source partition that
holds the node is looked up in the native index instead of found by scanning every
partition of the graph (``gemm_configs.py``: one full ``get_source_partitions`` and one
scan per ``addmm``/``mm`` node).  Everything else is XNNPACK's own code, unchanged:
``self.src_partitions`` is set as XNNPACK sets it, and ``get_deps_from_src_partition``
(which rewires the node's ``args``/``users`` and restores them) runs unchanged.
"""

from __future__ import annotations

from typing import Any, Callable

from . import source_partitions
from .registry import Patch, register
from .switch import is_active

MODULE = "executorch.backends.xnnpack.partition.config.gemm_configs"


def _get_deps(reference: Callable[..., Any]) -> Callable[..., Any]:
    def get_deps(self, node, ep):
        if is_active():
            found = source_partitions.partitions_and_holder(ep.graph, self.linear_modules, node)
            if found is not None:
                self.src_partitions, src_partition = found
                if src_partition:
                    return self.get_deps_from_src_partition(node, ep, src_partition)
                owner = reference.__globals__["AddmmConfig"]
                return super(owner, self).get_deps(node, ep)
        return reference(self, node, ep)

    get_deps.__doc__ = reference.__doc__
    get_deps.__wrapped__ = reference  # type: ignore[attr-defined]
    return get_deps


register(Patch(MODULE, "AddmmConfig", "get_deps", _get_deps,
               "finds the node's linear source partition in the native index inside accelerated()"))
