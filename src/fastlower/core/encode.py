"""Encode an FX graph once into flat integer arrays for the planner."""

from __future__ import annotations

import operator
import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple, cast

import torch
from torch._subclasses.fake_tensor import FakeTensor
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, OutputKind

from .schema import (
    OP_CALL_FUNCTION, OP_CALL_METHOD, OP_CALL_MODULE, OP_GET_ATTR, OP_OUTPUT, OP_PLACEHOLDER,
    OUT_BUFFER_MUTATION, OUT_OTHER, OUT_USER, ROLE_BUFFER, ROLE_CONSTANT, ROLE_OTHER,
    ROLE_PARAMETER, ROLE_USER_INPUT, GraphArrays,
)

_OP_CODES = {
    "placeholder": OP_PLACEHOLDER, "get_attr": OP_GET_ATTR, "call_function": OP_CALL_FUNCTION,
    "call_module": OP_CALL_MODULE, "call_method": OP_CALL_METHOD, "output": OP_OUTPUT,
}

# legalize_graph moves these to the front of its queue (torch/fx/passes/tools_common.py)
_PRIORITIZED_OPS = frozenset([
    operator.add, operator.mul, operator.sub, operator.floordiv, operator.truediv, operator.mod,
    operator.le, operator.lt, operator.ge, operator.gt, operator.eq, operator.ne,
    torch.ops.aten.sym_constrain_range.default, torch.ops.aten.sym_constrain_range_for_size.default,
    torch.ops.aten._assert_async.msg, torch.ops.aten.scalar_tensor.default,
    torch.ops.aten._assert_scalar.default,
])

_CONTROL_FLOW_ARGS = {
    torch.ops.higher_order.cond: (1, 2),
    torch.ops.higher_order.map_impl: (0,),
    torch.ops.higher_order.scan: (0,),
}

UNKNOWN_TAG = -2


def _is_prioritized(node: torch.fx.Node) -> bool:
    try:
        return node.op == "call_function" and node.target in _PRIORITIZED_OPS
    except TypeError:  # unhashable target
        return False


@dataclass
class EncodedGraph:
    """One graph module's nodes and arrays; ``nested`` maps a node index to its subgraphs."""

    graph_module: torch.fx.GraphModule
    nodes: List[torch.fx.Node]
    arrays: GraphArrays
    no_copy: List[int]
    unknown_tags: Dict[int, object] = field(default_factory=dict)  # node -> tag value
    nested: Dict[int, List[Tuple[str, "EncodedGraph"]]] = field(default_factory=dict)
    index: Dict[torch.fx.Node, int] = field(default_factory=dict)
    targets: Optional["Interner"] = None
    # i such that the module already has an attribute lowered_module_{i}
    taken_lowered: List[int] = field(default_factory=list)


class Interner:
    def __init__(self) -> None:
        self.ids: Dict[object, int] = {}
        self.values: List[object] = []

    def __call__(self, value) -> int:
        if value is None:
            return -1
        i = self.ids.get(value)
        if i is None:
            i = self.ids[value] = len(self.values)
            self.values.append(value)
        return i


def encode_graph(gm: torch.fx.GraphModule, tag_index: Dict[object, int],
                 program: Optional[ExportedProgram], targets: Interner) -> EncodedGraph:
    """Encode ``gm``; ``program`` gives the signature (None for a control-flow body)."""
    nodes = list(gm.graph.nodes)
    index = {node: i for i, node in enumerate(nodes)}
    roles_by_name: Dict[str, Tuple[int, int]] = {}
    out_kinds: List[int] = []
    out_targets: List[int] = []
    if program is not None:
        sig = program.graph_signature
        role_of = {InputKind.PARAMETER: ROLE_PARAMETER, InputKind.BUFFER: ROLE_BUFFER,
                   InputKind.CONSTANT_TENSOR: ROLE_CONSTANT, InputKind.USER_INPUT: ROLE_USER_INPUT}
        for spec in sig.input_specs:
            name = getattr(spec.arg, "name", None)
            if name is not None:
                roles_by_name[name] = (role_of.get(spec.kind, ROLE_OTHER), targets(spec.target))
        for spec in sig.output_specs:
            out_kinds.append(OUT_BUFFER_MUTATION if spec.kind == OutputKind.BUFFER_MUTATION
                             else OUT_USER if spec.kind == OutputKind.USER_OUTPUT else OUT_OTHER)
            out_targets.append(targets(spec.target))
    n = len(nodes)
    op = [0] * n
    prio = [0] * n
    inputs: List[List[int]] = [None] * n  # type: ignore[list-item]
    users: List[List[int]] = [None] * n  # type: ignore[list-item]
    names = [""] * n
    tags = [-1] * n
    roles = [ROLE_OTHER] * n
    tgt = [-1] * n
    dh = [0] * n
    fake = [0] * n
    no_copy = [0] * n
    unknown: Dict[int, object] = {}
    nested: Dict[int, List[Tuple[str, EncodedGraph]]] = {}
    out_args: List[int] = []
    for i, node in enumerate(nodes):
        op[i] = _OP_CODES[node.op]
        prio[i] = _is_prioritized(node)
        inputs[i] = [index[x] for x in node.all_input_nodes]
        users[i] = [index[u] for u in node.users]
        names[i] = node.name
        meta = node.meta
        tag = meta.get("delegation_tag")
        if tag is not None:
            t = tag_index.get(tag, UNKNOWN_TAG)
            tags[i] = t
            if t == UNKNOWN_TAG:
                unknown[i] = tag
        handle = meta.get("debug_handle", 0)
        dh[i] = handle if isinstance(handle, int) else 0
        fake[i] = isinstance(meta.get("val"), FakeTensor)
        if node.op == "placeholder":
            no_copy[i] = bool(meta.get("no_copy", False))
            if program is None:
                roles[i] = ROLE_USER_INPUT
            else:
                roles[i], tgt[i] = roles_by_name.get(node.name, (ROLE_USER_INPUT, -1))
        elif node.op == "output":
            outs = node.args[0]
            if not isinstance(outs, (list, tuple)):
                outs = (outs,)
            out_args = [index[x] if isinstance(x, torch.fx.Node) else -1 for x in outs]
        elif node.op == "call_function" and node.target in _CONTROL_FLOW_ARGS:
            subs = []
            for arg_i in _CONTROL_FLOW_ARGS[node.target]:
                attr = node.args[arg_i]
                sub = cast(torch.fx.GraphModule, gm.get_submodule(attr.target))  # a body
                subs.append((attr.target, encode_graph(sub, tag_index, None, targets)))
            nested[i] = subs
    if program is None:
        out_kinds = [OUT_USER] * len(out_args)
        out_targets = [-1] * len(out_args)
    arrays = GraphArrays(op=op, prioritized=prio, inputs=inputs, users=users, names=names,
                         tags=tags, roles=roles, targets=tgt, debug_handles=dh, fake_vals=fake,
                         out_args=out_args, out_kinds=out_kinds, out_targets=out_targets)
    return EncodedGraph(gm, nodes, arrays, no_copy, unknown, nested, index, targets,
                        taken_lowered_indices(gm))


_LOWERED_ATTR = re.compile(r"lowered_module_(0|[1-9][0-9]*)")


def taken_lowered_indices(*modules: torch.nn.Module) -> List[int]:
    """Every i for which one of ``modules`` has an attribute ``lowered_module_{i}``.

    The reference names a new delegate ``lowered_module_{i}`` with the smallest
    i for which ``hasattr(owning_module, name)`` is false; a program lowered
    before (a second partitioner) already holds some of those names.
    """
    taken = set()
    for module in modules:
        names = (set(module.__dict__) | set(module._modules) | set(module._parameters)
                 | set(module._buffers) | set(dir(type(module))))
        for name in names:
            match = _LOWERED_ATTR.fullmatch(name)
            if match:
                taken.add(int(match.group(1)))
    return sorted(taken)


class TargetKeys:
    """A small integer per distinct node target, for one comparison of graphs.

    Equal keys mean the same target: strings by value, anything else by identity.
    The table holds every non-string target it numbered, so no target can be freed
    and its ``id`` reused for another while the table lives; it lives as long as
    one comparison, so nothing accumulates and no other thread shares it.
    """

    def __init__(self) -> None:
        self._keys: Dict[object, int] = {}
        self._held: List[object] = []

    def __call__(self, target: object) -> int:
        key = target if isinstance(target, str) else id(target)
        k = self._keys.get(key)
        if k is None:
            if not isinstance(target, str):
                self._held.append(target)
            k = self._keys[key] = len(self._keys)
        return k


def structure_arrays(gm: torch.fx.GraphModule,
                     keys: TargetKeys) -> Tuple[List[int], List[int], List[int], List[int]]:
    """(op, target key, input offsets, input ids) of every node, for graph identity checks."""
    nodes = list(gm.graph.nodes)
    index = {node: i for i, node in enumerate(nodes)}
    op: List[int] = []
    target: List[int] = []
    offsets: List[int] = [0]
    flat: List[int] = []
    for node in nodes:
        op.append(_OP_CODES[node.op])
        target.append(keys(node.target))
        flat.extend(index[x] for x in node.all_input_nodes)
        offsets.append(len(flat))
    return op, target, offsets, flat

