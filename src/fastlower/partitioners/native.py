"""``propose_partitions`` of torch.fx's ``CapabilityBasedPartitioner`` and ExecuTorch's
``GroupBasedPartitioner``, computed by the native core (or its Python twin)."""

from __future__ import annotations

import logging
import re
from typing import Callable, List, Optional

from executorch.exir.backend.canonical_partitioners import group_partitioner as _group_module
from torch.fx.node import Node
from torch.fx.passes.infra import partitioner as _capability_module
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner, Partition

from .. import errors
from ..core.loader import load_core
from ..core.twin import partition_proposals as _twin
from .encoding import EncodedGraph, NotEncodable, encode_graph

log = logging.getLogger("fastlower.partitioners")

GroupBasedPartitioner = _group_module.GroupBasedPartitioner

# Hooks the reference's propose_partitions calls on ``self``; a subclass overriding one
# of them keeps the reference's code.
CAPABILITY_HOOKS = ("propose_partitions",)
GROUP_HOOKS = ("propose_partitions", "_can_merge_partitions", "_process_all_nodes",
               "_merge_partitions", "_perform_partition_merge", "_process_getitem_nodes",
               "_filter_single_node_partitions")


def _algorithms():
    core = load_core()
    if core is not None and hasattr(core, "propose_capability_partitions"):
        return core.propose_capability_partitions, core.propose_group_partitions
    return _twin.propose_capability_partitions, _twin.propose_group_partitions


def overrides_hooks(instance: object, base: type, hooks) -> Optional[str]:
    """Name of the first hook in ``hooks`` that ``type(instance)`` overrides, else None."""
    cls = type(instance)
    for name in hooks:
        if getattr(cls, name) is not getattr(base, name):
            return name
    return None


def _support_function(partitioner: CapabilityBasedPartitioner) -> Callable[[Node], bool]:
    if type(partitioner)._is_node_supported is CapabilityBasedPartitioner._is_node_supported:
        submodules = dict(partitioner.graph_module.named_modules())
        support = partitioner.operator_support
        return lambda node: support.is_node_supported(submodules, node)
    return partitioner._is_node_supported


def _encode(partitioner: CapabilityBasedPartitioner) -> EncodedGraph:
    return encode_graph(partitioner.graph_module.graph.nodes, _support_function(partitioner),
                        partitioner.allows_single_node_partition, partitioner.non_compute_ops,
                        partitioner.allowed_single_node_partition_ops)


def _partitions(graph: EncodedGraph, result) -> List[Partition]:
    ids, members, ordered_counts = result
    nodes, n = graph.nodes, len(graph.nodes)
    out = []
    for pid, indices, n_ordered in zip(ids, members, ordered_counts):
        partition = Partition(id=pid)
        partition.nodes = {nodes[i]: (n - 1 - i if k < n_ordered else None)
                           for k, i in enumerate(indices)}
        out.append(partition)
    return out


def _run(graph: EncodedGraph, propose, *args):
    """Call the core/twin; its ValueError names a node by index: name it by its node name."""
    try:
        return propose(*args)
    except ValueError as exc:
        found = re.search(r"node (\d+)", str(exc))
        node = (graph.nodes[int(found.group(1))].name
                if found and int(found.group(1)) < len(graph.nodes) else None)
        raise errors.PartitionerGraphError(str(exc), node) from exc


def propose_capability(partitioner: CapabilityBasedPartitioner) -> List[Partition]:
    """What ``CapabilityBasedPartitioner.propose_partitions`` returns, computed natively."""
    graph = _encode(partitioner)
    propose, _ = _algorithms()
    result = _run(graph, propose, graph.users_offsets, graph.users, graph.is_getitem,
                  graph.supported, graph.compute_weight,
                  bool(partitioner.allows_single_node_partition),
                  bool(getattr(partitioner, "skip_horizontal_fusion", False)))
    return _partitions(graph, result)


def _group_arrays(partitioner, graph: EncodedGraph):
    groups = partitioner.node_groups or []
    in_groups = partitioner.all_nodes_in_groups
    offsets, members = [0], []
    for g, group in enumerate(groups):
        for node in group:  # the reference iterates these very sets
            i = graph.index.get(node)
            if i is None:
                raise NotEncodable(f"node {node} of group {g} is not in the graph")
            if node not in in_groups or partitioner.node_to_group.get(node) != g:
                raise NotEncodable(f"node {node}: node_groups changed after construction")
            members.append(i)
        offsets.append(len(members))
    if len(members) != len(in_groups):
        raise NotEncodable("node_groups changed after construction")
    return offsets, members


def propose_group(partitioner) -> List[Partition]:
    """What ``GroupBasedPartitioner.propose_partitions`` returns, computed natively."""
    graph = _encode(partitioner)
    offsets, members = _group_arrays(partitioner, graph)
    _, propose = _algorithms()
    result = _run(graph, propose, graph.users_offsets, graph.users, graph.inputs_offsets,
                  graph.inputs, graph.is_getitem, graph.supported, graph.compute_weight, offsets,
                  members, bool(partitioner.allows_single_node_partition))
    return _partitions(graph, result)


__all__ = ["propose_capability", "propose_group", "NotEncodable", "overrides_hooks",
           "CAPABILITY_HOOKS", "GROUP_HOOKS", "GroupBasedPartitioner", "_capability_module",
           "_group_module"]
