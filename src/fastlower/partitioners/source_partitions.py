"""torch.fx's ``get_source_partitions``, answered from a per-graph index inside
``accelerated()``.

The reference (``torch/fx/passes/utils/source_matcher_utils.py``) walks the whole graph on
every call and builds every ``SourcePartition`` again, with list-membership tests that are
quadratic in a partition's size.  XNNPACK's GEMM configs call it once per ``addmm``/``mm``
node, and PT2E quantizer annotators once per pattern, so a partitioner pays nodes x calls.

Here one pass per (graph, ``wanted_sources``) builds the reference's ``modules`` map (the
same loop, with each source's ``in wanted_sources`` test asked once) and every
``SourcePartition`` (set-based membership; ``input_nodes``/``output_nodes``/``params`` are
built by adding the same nodes in the same order to a ``set`` and listing it, as the
reference does, so even their order is the reference's).  The index lives in the scope of
the outermost ``accelerated()`` block and is checked against the edits recorded by
:mod:`.graph_edits` before each use.  ``filter_fn`` is applied on every call, to the same
node lists in the same order as the reference (it may read state that changes).

Every call returns new ``SourcePartition`` objects and lists, as the reference does (the
index keeps its own lists and copies them: a caller may edit what it got).  Writes into
a node's ``meta`` dict in place (``node.meta["source_fn_stack"] = ...``, or into the
stack list) are seen by a :class:`MetaWatch` (``fastlower._core`` or its twin) checked
before each use; an edit of the graph through torch.fx is seen by :mod:`.graph_edits`.
Anything the index does not model (``wanted_sources`` not a list or tuple, metadata the
reference would fail on or of a type the watch cannot follow) runs the reference.

The index is built in Python once per graph (one linear pass over fx nodes whose every
step is a Python attribute or dict access); an answer costs its own size, and the
metadata check a few pointer compares per node (in C++).
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Dict, List, Optional, Tuple

from torch.fx.graph import Graph
from torch.fx.node import Node
from torch.fx.passes.utils import source_matcher_utils as _reference_module
from torch.fx.passes.utils.source_matcher_utils import SourcePartition

from ..core.loader import load_core
from ..core.twin.meta_watch import MetaWatch as TwinMetaWatch
from . import graph_edits
from .registry import Rebinding, register_rebinding
from .switch import current_scope, is_active

log = logging.getLogger("fastlower.partitioners")

reference_get_source_partitions = _reference_module.get_source_partitions
_NO_MATCH = object()


class SourceIndex:
    """``get_source_partitions(graph, wanted)`` of one graph state, before ``filter_fn``."""

    __slots__ = ("wanted", "fields", "_holder")

    def __init__(self, wanted: tuple, modules: Dict[Any, Dict[Any, List[Node]]]) -> None:
        self.wanted = wanted  # keeps the wanted objects alive: the cache key holds their ids
        # per source, per partition (fqn order): nodes, source, inputs, outputs, params
        self.fields: Dict[Any, List[tuple]] = {
            source: [_partition_fields(nodes, source) for nodes in by_fqn.values()]
            for source, by_fqn in modules.items()}
        self._holder: Optional[Dict[Node, Tuple[Any, int]]] = None

    def answer(self, filter_fn: Optional[Callable[[Node], bool]]
               ) -> Dict[Any, List[SourcePartition]]:
        """New ``SourcePartition`` objects (and lists) on every call, as the reference."""
        if not filter_fn:
            return {source: [_fresh(f) for f in fields] for source, fields in self.fields.items()}
        return {source: [_fresh(f) for f in fields if all(map(filter_fn, f[0]))]
                for source, fields in self.fields.items()}

    def holder(self, node: Node) -> Optional[Tuple[Any, int]]:
        """(source, position) of the unfiltered partition whose ``nodes`` hold ``node``
        (a node is in at most one)."""
        if self._holder is None:
            self._holder = {member: (source, k) for source, fields in self.fields.items()
                            for k, f in enumerate(fields) for member in f[0]}
        return self._holder.get(node)


def _fresh(fields: tuple) -> SourcePartition:
    nodes, source, inputs, outputs, params = fields
    return SourcePartition(list(nodes), source, list(inputs), list(outputs), list(params))


def _partition_fields(nodes: List[Node], source: Any) -> tuple:
    members = set(nodes)
    input_nodes, output_nodes, params = set(), set(), set()
    for node in nodes:
        for arg in node.args:
            if isinstance(arg, Node) and arg not in members and arg.op != "get_attr":
                input_nodes.add(arg)
        if node.op == "get_attr":
            params.add(node)
            continue
        for user in node.users:
            if user not in members:
                output_nodes.add(node)
    return list(nodes), source, list(input_nodes), list(output_nodes), list(params)


def _module_source(innermost_cls: Any, wanted: tuple) -> Any:
    """The reference's ``nn_module_stack`` fallback: the first wanted source matching the
    innermost module class (a type, or its qualified name as a string), else _NO_MATCH."""
    for src in wanted:
        if isinstance(src, type):
            if isinstance(innermost_cls, type) and issubclass(innermost_cls, src):
                return src
            elif isinstance(innermost_cls, str):
                if innermost_cls == src.__module__ + "." + src.__qualname__:
                    return src
        elif innermost_cls == src:
            return src
    return _NO_MATCH


def build_index(graph: Graph, wanted: tuple, metas: Optional[List[Any]] = None) -> SourceIndex:
    """The reference's first loop over ``graph.nodes``, with each distinct source value's
    match against ``wanted`` computed once (strings by value, other objects by identity);
    every node's ``meta`` is appended to ``metas`` if given."""
    modules: Dict[Any, Dict[Any, List[Node]]] = {}
    in_wanted: Dict[Any, bool] = {}
    module_match: Dict[Any, Any] = {}

    def wanted_contains(value: Any) -> bool:
        key = value if type(value) is str else (id(value),)
        hit = in_wanted.get(key)
        if hit is None:
            hit = in_wanted[key] = value in wanted
        return hit

    def add(source: Any, fqn: Any, node: Node) -> None:
        modules.setdefault(source, {}).setdefault(fqn, []).append(node)

    for node in graph.nodes:
        meta = node.meta
        if metas is not None:
            metas.append(meta)
        stack = meta.get("source_fn_stack", None)
        if stack is None:
            matched = False
            torch_fn = meta.get("torch_fn", None)
            if torch_fn is not None:
                node_fqn, source_fn = torch_fn
                name = source_fn.split(".")[1]
                if wanted_contains(name):
                    add(name, node_fqn, node)
                    matched = True
            if not matched and node.op == "call_function":
                module_stack = meta.get("nn_module_stack", None)
                if module_stack:
                    innermost_fqn, innermost_cls = list(module_stack.values())[-1]
                    key = innermost_cls if type(innermost_cls) is str else (id(innermost_cls),)
                    src = module_match.get(key)
                    if src is None:
                        src = module_match[key] = _module_source(innermost_cls, wanted)
                    if src is not _NO_MATCH:
                        add(src, innermost_fqn, node)
        else:
            source_fn = stack[-1]
            if wanted_contains(source_fn[1]):
                add(source_fn[1], source_fn[0], node)
    return SourceIndex(wanted, modules)


def _index(graph: Any, wanted_sources: Any) -> Optional[SourceIndex]:
    """The valid index of (graph, wanted_sources) in the current scope, built if needed;
    None when the reference must run (not modelled, or it would raise)."""
    scope = current_scope()
    if scope is None or not isinstance(graph, Graph) or type(wanted_sources) not in (list, tuple):
        return None
    cache = scope.graphs.get(graph)
    if cache is None:
        cache = scope.graphs[graph] = graph_edits.GraphCache()
    else:
        cache.unchanged()  # drops the graph's indexes if an edit or a meta write shows
    key = tuple(map(id, wanted_sources))
    index = cache.results.get(key)
    if index is None:
        metas: Optional[List[Any]] = [] if not cache.results else None
        try:
            index = build_index(graph, tuple(wanted_sources), metas)
        except Exception as exc:  # the reference raises its own error on this graph
            log.debug("native get_source_partitions declined: %r", exc)
            return None
        if metas is not None:
            cache.watch = _watch(metas)
        if cache.watch is not None:
            cache.results[key] = index
    return index


def _watch(metas: List[Any]) -> Any:
    """A MetaWatch of these ``meta`` dicts (the core's, else the twin's), or None when the
    metadata is of a kind it cannot follow (the index is then not kept)."""
    core = load_core()
    try:
        return (core.MetaWatch if core is not None else TwinMetaWatch)(metas)
    except ValueError as exc:
        log.debug("source-partition index not kept: %s", exc)
        return None


def get_source_partitions(graph: Graph, wanted_sources: List[Any],
                          filter_fn: Optional[Callable[[Node], bool]] = None
                          ) -> Dict[Any, List[SourcePartition]]:
    if is_active():
        index = _index(graph, wanted_sources)
        if index is not None:
            return index.answer(filter_fn)
    return reference_get_source_partitions(graph, wanted_sources, filter_fn)


get_source_partitions.__doc__ = reference_get_source_partitions.__doc__
get_source_partitions.__wrapped__ = reference_get_source_partitions  # type: ignore[attr-defined]


def partitions_and_holder(
        graph: Graph, wanted_sources: List[Any], node: Node,
) -> Optional[Tuple[Dict[Any, List[SourcePartition]], Optional[SourcePartition]]]:
    """``get_source_partitions(graph, wanted_sources)`` and the partition holding ``node``
    (what XNNPACK's GEMM configs find by scanning every partition), or None when the
    native index cannot answer (the caller then runs the reference's code)."""
    if not is_active():
        return None
    index = _index(graph, wanted_sources)
    if index is None:
        return None
    answer = index.answer(None)
    found = index.holder(node)
    return answer, (answer[found[0]][found[1]] if found is not None else None)


register_rebinding(Rebinding(reference_get_source_partitions, get_source_partitions,
                             "answered from a per-graph index inside accelerated()"))
