"""What a finished lowering hands the report: neutral per-method, per-partition records.

This module imports nothing of fastlower, so both sides can depend on it: the
lowering fills these records from its own state, the report
(``fastlower.report.collect``) reads only them, never the lowering's internals.

A *graph path* is ``""`` (``TOP``) for a method's top-level graph and the attribute
path of a control-flow body otherwise (``"true_graph_0"``,
``"body_graph_0/true_graph_0"``). A partition's *key*, unique within a report, is
built by :func:`partition_key` and nowhere else.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional

#: the path of a method's top-level graph
TOP = ""


def partition_key(method: str, graph: str, tag: str) -> str:
    """``method/graph/tag`` without the empty parts: a partition's key in a report."""
    return "/".join(p for p in (method, graph, tag) if p)


def join_path(path: str, attr: str) -> str:
    """The path of body ``attr`` of a graph at ``path``."""
    return f"{path}/{attr}" if path else attr


@dataclass
class GraphRecord:
    """A tagged graph's nodes (``torch.fx.Node``) in order and, for each control-flow
    node, the graphs of its bodies."""

    path: str
    nodes: List[Any]
    bodies: Dict[Any, List["GraphRecord"]] = field(default_factory=dict)


@dataclass
class PartitionOutcome:
    """What the lowering did with one partition."""

    graph: str  # path of the partition's graph in its method
    tag: str
    program: Any  # the partition's ExportedProgram (its owned constants are read off it)
    processed_bytes: Optional[int] = None  # size of the backend's blob; None: not lowered
    preprocess_seconds: float = 0.0  # time in the backend's preprocess for this partition
    cache_hit: Optional[bool] = None  # None: no preprocess cache took part


@dataclass
class MethodRecord:
    """One lowered method: its tagged graphs, its tags' specs, and its partitions."""

    name: str
    graph: GraphRecord  # the top-level graph, bodies below it
    partition_tags: Mapping[str, Any]  # tag -> DelegationSpec (``backend_id`` is read)
    partitions: List[PartitionOutcome] = field(default_factory=list)


def graph_of_encoded(enc: Any, path: str = TOP,
                     paths: Optional[Dict[int, str]] = None) -> GraphRecord:
    """The record of an ``encode.EncodedGraph`` (``nodes``, ``nested``: node index ->
    ``[(attr, EncodedGraph)]``) and its bodies; ``paths`` receives each encoded
    graph's path by ``id``."""
    if paths is not None:
        paths[id(enc)] = path
    record = GraphRecord(path, list(enc.nodes))
    for i, subs in enc.nested.items():
        record.bodies[enc.nodes[i]] = [graph_of_encoded(sub, join_path(path, attr), paths)
                                       for attr, sub in subs]
    return record
