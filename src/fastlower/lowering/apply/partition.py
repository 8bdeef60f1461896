"""Partition programs: each fused partition's submodule and ``ExportedProgram``.

The first half of applying a plan, before any backend runs: what the reference
builds for one partition (``create_exported_program_from_submodule``:
its fuse subgraph, placeholders arranged, signature, state).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Protocol, Sequence, cast

import torch
import torch.utils._pytree as pytree
from torch.export import ExportedProgram
from torch.export.exported_program import (
    ConstantArgument, ExportGraphSignature, InputKind, InputSpec, ModuleCallEntry,
    ModuleCallSignature, OutputKind, OutputSpec, TensorArgument,
)
from torch.fx.graph_module import _get_attr
from torch.fx.passes.utils import lift_subgraph_as_module

from ...core.encode import EncodedGraph, Interner
from ...core.plan import GraphPlan
from ...core.schema import OUT_BUFFER_MUTATION, PartitionPlan, PlannedGraph
from ..programs import unvalidated_program

class PlannedSource(Protocol):
    """What building a partition reads of its planned graph, and what the lowering asks of
    it afterwards: :class:`.graph.GraphBuilder` is one (handed down, never imported here)."""

    plan: GraphPlan
    enc: EncodedGraph
    n_orig: int
    tag_names: Sequence[str]

    @property
    def graph(self) -> PlannedGraph: ...

    def node_meta(self, i: int) -> dict: ...

    def node_type(self, i: int) -> Any: ...

    def set_delegate_meta(self, pid: int) -> None: ...


@dataclass
class Partition:
    """One fused partition, ready for its backend."""

    builder: PlannedSource
    pid: int
    tag: str
    program: ExportedProgram
    fused_module: Optional[torch.fx.GraphModule]  # kept on control-flow bodies only
    lowered: Any = None


class SignatureIndex:
    """Lookups into the (post-duplication) owning signature, built once per lowering.

    ``ExportGraphSignature``'s ``inputs_to_*`` are properties that rebuild a dict
    on every access; partitions must not pay that each.
    """

    def __init__(self, sig: ExportGraphSignature) -> None:
        self.params = sig.inputs_to_parameters
        self.buffers = sig.inputs_to_buffers
        self.consts = sig.inputs_to_lifted_tensor_constants
        self.input_by_name = {s.arg.name: s for s in sig.input_specs}


def build_partition(builder: PlannedSource, pid: int, owning: ExportedProgram,
                    sig: SignatureIndex, real_state: Dict[str, Any],
                    real_constants: Dict[str, Any]) -> Partition:
    """The reference's fused submodule and ExportedProgram for partition ``pid`` of
    ``builder``'s graph."""
    planned, enc, n_orig = builder.graph, builder.enc, builder.n_orig
    part: PartitionPlan = planned.partitions[pid]
    tag = builder.tag_names[part.tag]
    inside = set(part.nodes)

    # the fuse subgraph: members in order, external inputs as placeholders on first use
    g = torch.fx.Graph()
    env: Dict[int, torch.fx.Node] = {}
    for m in part.nodes:
        node = enc.nodes[m] if m < n_orig else None
        if node is None or node.op == "placeholder":
            target = node.target if node is not None else planned.copy_target[m]
            ph = g.create_node("placeholder", target, name=planned.names[m],
                               type_expr=node.type if node is not None else None)
            ph.meta = copy.copy(builder.node_meta(m))
            env[m] = ph
            continue
        now = part.member_inputs[m]
        for x in now:
            if x not in inside and x not in env:
                ph = g.placeholder(planned.names[x], type_expr=builder.node_type(x))
                ph.meta = copy.copy(builder.node_meta(x))
                env[x] = ph
        remap = dict(zip(enc.arrays.inputs[m], now))

        def member_arg(a: torch.fx.Node, r: Dict[int, int] = remap) -> torch.fx.Node:
            return env[r[enc.index[a]]]

        env[m] = g.node_copy(node, member_arg)
    outs = [env[o] for o in part.outputs]
    out_node = g.output(outs[0] if len(outs) == 1 else tuple(outs))
    _fixup_output_node(g, out_node)
    # the single-program path (delegates inserted while fusing) keeps the owning
    # graph's output meta in the partition program
    if builder.plan.delegates_while_fusing and planned.output_node >= 0:
        out_node.meta = enc.nodes[planned.output_node].meta
    arranged = _arrange_placeholders(g, tag, sig)
    is_submodule = builder.plan.is_submodule
    root: Any  # the program's module: the fused module, or the attributes it reads
    if is_submodule:
        # the reference leaves this fused module on the control-flow body
        submodule, _ = lift_subgraph_as_module(enc.graph_module, arranged, comp_name="",
                                               class_name="fused_" + tag)
        root = submodule
    else:
        # nothing keeps the fused module of a top-level partition: the program's
        # module gets the same attributes straight from the owning module
        submodule = None
        root = {n.target: _get_attr(enc.graph_module, n.target) for n in arranged.nodes
                if n.op in ("get_attr", "call_module")}

    signature, state, consts_out = _partition_signature(
        part, tag, arranged, {} if is_submodule else sig.input_by_name,
        cast(Interner, enc.targets).values, real_state, real_constants)  # every target interned
    in_spec = pytree.tree_flatten((tuple(signature.user_inputs), {}))[1]
    out_spec = pytree.tree_flatten(signature.user_outputs)[1]
    program = unvalidated_program(
        lazy=not is_submodule, root=root, graph=arranged,
        graph_signature=signature, state_dict=state,
        range_constraints=copy.deepcopy(owning.range_constraints),
        module_call_graph=[ModuleCallEntry("", ModuleCallSignature(
            inputs=[], outputs=[], in_spec=in_spec, out_spec=out_spec))],
        constants=consts_out, verifiers=[owning.verifier],
    )
    return Partition(builder, pid, tag, program, submodule)


def _partition_signature(part, tag, arranged, input_by_name, targets, real_state, real_constants):
    """The reference's ``_get_new_signature`` + ``arrange_graph_outputs``."""
    input_specs, state, consts = [], {}, {}
    for node in arranged.nodes:
        if node.op != "placeholder":
            continue
        spec = input_by_name.get(node.name)
        if spec is not None and not isinstance(spec.arg, TensorArgument):
            input_specs.append(spec)
        elif spec is not None and node.meta.get("delegation_tag", None) == tag:
            input_specs.append(spec)
            if spec.kind == InputKind.USER_INPUT:
                continue
            if spec.target in real_state:
                state[spec.target] = real_state[spec.target]
            elif spec.target in real_constants:
                consts[spec.target] = real_constants[spec.target]
            else:
                raise RuntimeError(f"Invalid input spec {spec} received")
        else:
            input_specs.append(InputSpec(kind=InputKind.USER_INPUT,
                                         arg=TensorArgument(name=node.name), target=None))
    a_out = arranged.output_node()
    output_specs = []
    for i, o in enumerate(a_out.args[0]):
        if i < len(part.output_kinds) and part.output_kinds[i] == OUT_BUFFER_MUTATION:
            output_specs.append(OutputSpec(kind=OutputKind.BUFFER_MUTATION,
                                           arg=TensorArgument(name=o.name),
                                           target=targets[part.output_targets[i]]))
        elif not isinstance(o, torch.fx.Node):
            output_specs.append(OutputSpec(kind=OutputKind.USER_OUTPUT,
                                           arg=ConstantArgument(name="", value=o), target=None))
        else:
            output_specs.append(OutputSpec(kind=OutputKind.USER_OUTPUT,
                                           arg=TensorArgument(name=o.name), target=None))
    if part.output_order != list(range(len(part.output_order))):
        old = list(a_out.args[0])
        a_out.args = (tuple(old[i] for i in part.output_order),)
        output_specs = [output_specs[i] for i in part.output_order]
        arranged.lint()
    signature = ExportGraphSignature(input_specs=input_specs, output_specs=output_specs)
    return signature, state, consts


def _arrange_placeholders(g: torch.fx.Graph, tag: str, sig: SignatureIndex) -> torch.fx.Graph:
    """``arrange_graph_placeholders``: owned parameters, buffers, constants first."""
    params, buffers, consts = sig.params, sig.buffers, sig.consts
    groups: List[List[torch.fx.Node]] = [[], [], [], []]
    for node in g.nodes:
        if node.op != "placeholder":
            continue
        tagged = node.meta.get("delegation_tag", None) == tag
        if node.name in params and tagged:
            groups[0].append(node)
        elif node.name in buffers and tagged:
            groups[1].append(node)
        elif node.name in consts and tagged:
            groups[2].append(node)
        else:
            groups[3].append(node)
    arranged = torch.fx.Graph()
    amap: Dict[torch.fx.Node, torch.fx.Node] = {}
    for node in groups[0] + groups[1] + groups[2] + groups[3]:
        amap[node] = arranged.node_copy(node, lambda x: amap[x])
    for node in g.nodes:
        if node.op != "placeholder":
            amap[node] = arranged.node_copy(node, lambda x: amap[x])
    arranged._codegen = g._codegen
    return arranged


def _fixup_output_node(g: torch.fx.Graph, out_node: torch.fx.Node) -> None:
    """The output is always a flat list, a list-valued single output opened up."""
    with g.inserting_before(out_node):
        outputs = out_node.args[0]
        if isinstance(outputs, torch.fx.Node):
            val = outputs.meta.get("val")
            if isinstance(val, list):
                # Proxy's item access is generated at run time, unknown to its stubs
                proxy: Any = torch.fx.Proxy(outputs)
                outputs = [proxy[i].node for i in range(len(val))]
        returns, _ = pytree.tree_flatten(outputs)
        out_node.args = (returns,)
