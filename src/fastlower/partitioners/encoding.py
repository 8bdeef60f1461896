"""Flat encoding of an fx graph for the native ``propose_partitions`` (see
``fastlower.core.twin.partition_proposals`` for the meaning of each array)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, Iterable, List, Optional, Sequence

from torch.fx.node import Node, _get_qualified_name

GETITEM = "_operator.getitem"
DEFAULT_NON_COMPUTE_OPS = frozenset({"torch.ops.aten.view", GETITEM})


class NotEncodable(Exception):
    """The graph or the options fall outside what the native partitioners model; the
    caller runs the reference's own code instead (which then behaves, or fails, as it does)."""


@dataclass
class EncodedGraph:
    """Node list and the per-node arrays shared by both native partitioners."""

    nodes: List[Node]
    index: Dict[Node, int]
    users_offsets: List[int]
    users: List[int]
    inputs_offsets: List[int]
    inputs: List[int]
    is_getitem: List[bool]
    supported: List[bool]
    compute_weight: List[int]


def _qualified_name(node: Node) -> Optional[str]:
    if node.op != "call_function":
        return None
    if not callable(node.target):
        raise NotEncodable(
            f"node {node.name}: call_function target {node.target!r} is not callable")
    try:
        return _get_qualified_name(node.target)
    except Exception as exc:  # whatever the reference would raise, it raises itself
        raise NotEncodable(f"node {node.name}: no qualified name ({exc})") from exc


def encode_graph(nodes: Iterable[Node], is_supported: Callable[[Node], bool],
                 allows_single_node_partition: bool, non_compute_ops: Sequence[str],
                 allowed_single_node_partition_ops: Sequence[str]) -> EncodedGraph:
    """Encode ``nodes`` (a graph's node list, in order); ``is_supported`` is asked once per
    node, in reverse graph order as the reference first asks."""
    nodes = list(nodes)
    index = {node: i for i, node in enumerate(nodes)}
    n = len(nodes)
    users_offsets: List[int] = [0]
    users: List[int] = []
    inputs_offsets: List[int] = [0]
    inputs: List[int] = []
    names = [_qualified_name(node) for node in nodes]
    for node in nodes:
        for collection, out, offsets in ((node.users, users, users_offsets),
                                         (node.all_input_nodes, inputs, inputs_offsets)):
            for other in collection:
                j = index.get(other)
                if j is None:
                    raise NotEncodable(f"node {node.name} is linked to {other.name}, which is not "
                                       "in the graph")
                out.append(j)
            offsets.append(len(out))
    is_getitem = [name == GETITEM for name in names]
    supported: List[bool] = [False] * n
    for i in reversed(range(n)):
        supported[i] = bool(is_supported(nodes[i]))
    compute_weight = [0] * n
    if not allows_single_node_partition:
        non_compute = DEFAULT_NON_COMPUTE_OPS.union(non_compute_ops or ())
        allowed = set(allowed_single_node_partition_ops or ())
        for i, name in enumerate(names):
            if name is not None:
                compute_weight[i] = (name not in non_compute) + (name in allowed)
    return EncodedGraph(nodes, index, users_offsets, users, inputs_offsets, inputs, is_getitem,
                        supported, compute_weight)
