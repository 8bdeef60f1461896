"""An FX graph module as a :class:`GraphRecord` (its nodes in order, users, name
table, code generator, children, parameters, buffers, attributes, ``meta``) and the
graph module rebuilt from one, node by node with ``Graph.create_node``, never
re-traced. Node arguments refer to earlier nodes by :class:`NodeRef`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Tuple

import torch
from torch.fx import GraphModule
from torch.fx._lazy_graph_module import _LazyGraphModule

from ..errors import DamagedEntry

_MODULE_INTERNALS = frozenset({
    "training", "_parameters", "_buffers", "_non_persistent_buffers_set", "_backward_pre_hooks",
    "_backward_hooks", "_is_full_backward_hook", "_forward_hooks", "_forward_hooks_with_kwargs",
    "_forward_hooks_always_called", "_forward_pre_hooks", "_forward_pre_hooks_with_kwargs",
    "_state_dict_hooks", "_state_dict_pre_hooks", "_load_state_dict_pre_hooks",
    "_load_state_dict_post_hooks", "_modules", "_graph", "_code", "_lineno_map",
    "_prologue_start", "_tracer_cls", "_tracer_extras", "meta", "_replace_hooks",
    "_create_node_hooks", "_erase_node_hooks", "_deepcopy_hooks", "shape_env",
    "_is_lazy_graph_module", "_recompile_count"})


@dataclass(frozen=True)
class NodeRef:
    """A node inside a node's arguments, by name."""

    name: str


@dataclass
class GraphRecord:
    """An FX graph module, node by node (see the module docstring)."""

    lazy: bool
    nodes: List[Tuple[Any, ...]]  # (op, name, target, args, kwargs, type, meta)
    users: Dict[str, List[str]]
    used_names: List[str]
    base_count: Dict[str, int]
    graph_used_names: Dict[str, int]
    codegen: Any
    tracer: Tuple[Any, Any]
    children: List[Tuple[str, Any]]
    parameters: List[Tuple[str, Any]]
    buffers: List[Tuple[str, Any]]
    non_persistent: List[str]
    attributes: List[Tuple[str, Any]]
    meta: Dict[str, Any]
    training: bool
    shape_env: Any
    # torch.fx names each module's class (``fused_tag1`` for a partition's leftover
    # submodule): kept, as named_children shows it
    class_name: str = "GraphModule"


def record_graph_module(gm: GraphModule, visiting: Callable[[str], None]) -> GraphRecord:
    """``gm`` as a record; ``visiting(name)`` is told each node in turn (the writer names
    the node in its error messages)."""
    graph = gm.graph
    nodes, users = [], {}
    for node in graph.nodes:
        visiting(node.name)
        args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs),
                                             lambda n: NodeRef(n.name))
        nodes.append((node.op, node.name, node.target, args, kwargs, node.type,
                      dict(node.meta)))
        users[node.name] = [u.name for u in node.users]
    namespace = graph._graph_namespace
    extra = [(k, v) for k, v in gm.__dict__.items() if k not in _MODULE_INTERNALS]
    registered = set(gm._modules) | set(gm._parameters) | set(gm._buffers)
    attributes = []
    for node in graph.nodes:
        if node.op == "get_attr" and "." not in node.target and \
                node.target not in registered and hasattr(gm, node.target):
            attributes.append((node.target, getattr(gm, node.target)))
    return GraphRecord(
        lazy=isinstance(gm, _LazyGraphModule), nodes=nodes, users=users,
        used_names=sorted(namespace._used_names), base_count=dict(namespace._base_count),
        graph_used_names=dict(getattr(graph, "_used_names", {})),
        codegen=graph._codegen, tracer=(graph._tracer_cls, graph._tracer_extras),
        children=list(gm._modules.items()), parameters=list(gm._parameters.items()),
        buffers=list(gm._buffers.items()),
        non_persistent=sorted(gm._non_persistent_buffers_set),
        attributes=attributes + extra, meta=dict(gm.meta), training=gm.training,
        shape_env=getattr(gm, "shape_env", None), class_name=type(gm).__name__)


def rebuild_graph_module(record: GraphRecord) -> GraphModule:
    """The graph module ``record`` was made from (a :class:`DamagedEntry` when it is not
    consistent)."""
    graph = torch.fx.Graph(tracer_cls=record.tracer[0], tracer_extras=record.tracer[1])
    made: Dict[str, torch.fx.Node] = {}

    def resolve(ref: NodeRef) -> torch.fx.Node:
        try:
            return made[ref.name]
        except KeyError:
            raise DamagedEntry(f"node argument {ref.name!r} is not an earlier node") from None

    for op, name, target, args, kwargs, type_expr, meta in record.nodes:
        args, kwargs = _map_refs((args, kwargs), resolve)
        node = graph.create_node(op, target, tuple(args), dict(kwargs), name=name,
                                 type_expr=type_expr)
        if node.name != name:
            raise DamagedEntry(f"node {name!r} came back as {node.name!r}")
        node.meta = meta
        made[name] = node
    for name, order in record.users.items():
        users = made[name].users
        if list(u.name for u in users) != order:
            if sorted(u.name for u in users) != sorted(order):
                raise DamagedEntry(f"the users of node {name!r} differ")
            users.clear()
            for user in order:
                users[made[user]] = None
    namespace = graph._graph_namespace
    namespace._used_names = set(record.used_names)
    namespace._base_count = type(namespace._base_count)(record.base_count) \
        if not isinstance(namespace._base_count, dict) else dict(record.base_count)
    if hasattr(graph, "_used_names"):
        graph._used_names = dict(record.graph_used_names)
    graph._codegen = record.codegen

    root = torch.nn.Module()
    for name, child in record.children:
        root._modules[name] = child
    for name, param in record.parameters:
        root._parameters[name] = param
    for name, buffer in record.buffers:
        root._buffers[name] = buffer
    for name, value in record.attributes:
        object.__setattr__(root, name, value)
    cls = _LazyGraphModule if record.lazy else GraphModule
    gm = cls(root, graph, record.class_name)
    gm._modules.clear()
    gm._modules.update(record.children)
    gm._parameters.clear()
    gm._parameters.update(record.parameters)
    gm._buffers.clear()
    gm._buffers.update(record.buffers)
    gm._non_persistent_buffers_set = set(record.non_persistent)
    for name, value in record.attributes:
        object.__setattr__(gm, name, value)
    gm.meta = record.meta
    gm.training = record.training
    if "shape_env" in gm.__dict__ or record.shape_env is not None:
        gm.shape_env = record.shape_env
    return gm


_LEAVES = frozenset({int, float, bool, str, type(None), torch.dtype, torch.device,
                     torch.layout, torch.memory_format})


def _map_refs(value: Any, fn: Callable[[NodeRef], Any]) -> Any:
    kind = type(value)
    if kind in _LEAVES:  # most arguments (a fast path: this runs for every node)
        return value
    if kind is list:
        return [_map_refs(v, fn) for v in value]
    if kind is tuple:
        return tuple([_map_refs(v, fn) for v in value])
    if isinstance(value, NodeRef):
        return fn(value)
    if isinstance(value, tuple):
        if hasattr(value, "_fields"):  # named tuples keep their type
            return type(value)(*(_map_refs(v, fn) for v in value))
        return tuple(_map_refs(v, fn) for v in value)
    if isinstance(value, list):
        return [_map_refs(v, fn) for v in value]
    if isinstance(value, dict):
        return {k: _map_refs(v, fn) for k, v in value.items()}
    if isinstance(value, slice):
        return slice(_map_refs(value.start, fn), _map_refs(value.stop, fn),
                     _map_refs(value.step, fn))
    return value
