"""Apply a plan: build each partition's program, then the final graph, in one pass."""

from __future__ import annotations

import copy
import operator
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence

import torch
import torch.utils._pytree as pytree
from torch.export import ExportedProgram
from torch.export.exported_program import (
    ConstantArgument, ExportGraphSignature, InputKind, InputSpec, ModuleCallEntry,
    ModuleCallSignature, OutputKind, OutputSpec, TensorArgument,
)
from torch.fx.graph_module import _get_attr
from torch.fx.passes.utils import lift_subgraph_as_module

from executorch.exir.delegate import executorch_call_delegate

from ._schema import (
    KIND_CALL_MODULE, KIND_CONSTANT_COPY, KIND_DELEGATE, KIND_GET_ATTR, KIND_GETITEM,
    OP_OUTPUT, OUT_BUFFER_MUTATION, PartitionPlan,
)
from .plan import GraphPlan
from .programs import unvalidated_program

_DROPPED_FROM_GETITEMS = ("nn_module_stack", "source_fn_stack")


@dataclass
class Partition:
    """One fused partition, ready for its backend."""

    builder: "GraphBuilder"
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


class GraphBuilder:
    """Materialises one planned graph: partition programs, then the final graph."""

    def __init__(self, plan: GraphPlan, tag_names: Sequence[str]) -> None:
        self.plan = plan
        self.sim = plan.sim
        self.enc = plan.encoded
        self.tag_names = tag_names
        self.n_orig = len(self.enc.nodes)
        self.meta: Dict[int, dict] = {}  # meta of created nodes, as the reference leaves it
        self.delegate_meta: Dict[int, dict] = {}
        self._set_created_meta()

    def _tag_name(self, t: int) -> Optional[str]:
        return self.tag_names[t] if t >= 0 else None

    def node_meta(self, i: int) -> dict:
        return self.enc.nodes[i].meta if i < self.n_orig else self.meta[i]

    def original_members(self, pid: int) -> List[torch.fx.Node]:
        """The input graph's nodes that partition ``pid`` holds (constant copies excluded)."""
        return [self.enc.nodes[m] for m in self.sim.partitions[pid].nodes if m < self.n_orig]

    def has_input_without_value(self, pid: int) -> bool:
        """Does partition ``pid`` read a node that has no ``val`` (a ``get_attr`` of a
        control-flow body, say)? Its program's placeholder then has none either,
        which ExecuTorch's verifier rejects; the input's verifier run did not cover it."""
        return any("val" not in self.node_meta(x) for x in self.sim.partitions[pid].inputs)

    def node_type(self, i: int):
        return self.enc.nodes[i].type if i < self.n_orig else None

    def _set_created_meta(self) -> None:
        sim, nodes = self.sim, self.enc.nodes
        touched = {sim.origin[c] for c in sim.copies}
        for c in touched:  # _assign_new_tag re-tags the duplicated constants
            nodes[c].meta["delegation_tag"] = self._tag_name(sim.tags[c])
        for i in range(self.n_orig, len(sim.op)):
            kind = sim.kind[i]
            if kind == KIND_CONSTANT_COPY:
                meta = dict(nodes[sim.origin[i]].meta)
                meta["delegation_tag"] = self._tag_name(sim.tags[i])
                self.meta[i] = meta
            elif kind in (KIND_GETITEM, KIND_CALL_MODULE):
                origin = sim.origin[i]
                meta = dict(self.node_meta(origin)) if origin >= 0 else {}
                if kind == KIND_GETITEM:
                    for key in _DROPPED_FROM_GETITEMS:
                        meta.pop(key, None)
                self.meta[i] = meta
            else:
                self.meta[i] = {}

    # -- partitions -------------------------------------------------------------
    def build_partition(self, pid: int, owning: ExportedProgram, sig: SignatureIndex,
                        real_state: Dict[str, Any], real_constants: Dict[str, Any],
                        single_path: bool) -> Partition:
        """The reference's fused submodule and ExportedProgram for one partition."""
        sim, enc = self.sim, self.enc
        part: PartitionPlan = sim.partitions[pid]
        tag = self.tag_names[part.tag]
        inside = set(part.nodes)

        # the fuse subgraph: members in order, external inputs as placeholders on first use
        g = torch.fx.Graph()
        env: Dict[int, torch.fx.Node] = {}
        for m in part.nodes:
            node = enc.nodes[m] if m < self.n_orig else None
            if node is None or node.op == "placeholder":
                target = node.target if node is not None else sim.copy_target[m]
                ph = g.create_node("placeholder", target, name=sim.names[m],
                                   type_expr=node.type if node is not None else None)
                ph.meta = copy.copy(self.node_meta(m))
                env[m] = ph
                continue
            now = part.member_inputs[m]
            for x in now:
                if x not in inside and x not in env:
                    ph = g.placeholder(sim.names[x], type_expr=self.node_type(x))
                    ph.meta = copy.copy(self.node_meta(x))
                    env[x] = ph
            remap = dict(zip(enc.arrays.inputs[m], now))
            env[m] = g.node_copy(node, lambda a, r=remap: env[r[enc.index[a]]])
        outs = [env[o] for o in part.outputs]
        out_node = g.output(outs[0] if len(outs) == 1 else tuple(outs))
        _fixup_output_node(g, out_node)
        if single_path and sim.output_node >= 0:
            out_node.meta = enc.nodes[sim.output_node].meta
        arranged = _arrange_placeholders(g, tag, sig)
        if self.plan.is_submodule:
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

        signature, state, consts_out = self._partition_signature(
            part, tag, arranged, sig, real_state, real_constants)
        in_spec = pytree.tree_flatten((tuple(signature.user_inputs), {}))[1]
        out_spec = pytree.tree_flatten(signature.user_outputs)[1]
        program = unvalidated_program(
            lazy=not self.plan.is_submodule, root=root, graph=arranged,
            graph_signature=signature, state_dict=state,
            range_constraints=copy.deepcopy(owning.range_constraints),
            module_call_graph=[ModuleCallEntry("", ModuleCallSignature(
                inputs=[], outputs=[], in_spec=in_spec, out_spec=out_spec))],
            constants=consts_out, verifiers=[owning.verifier],
        )
        return Partition(self, pid, tag, program, submodule)

    def _partition_signature(self, part, tag, arranged, sig, real_state, real_constants):
        """The reference's ``_get_new_signature`` + ``arrange_graph_outputs``."""
        input_by_name = {} if self.plan.is_submodule else sig.input_by_name
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
        targets = self.enc.targets.values
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

    def set_delegate_meta(self, pid: int) -> None:
        part = self.sim.partitions[pid]
        vals = [self.node_meta(o).get("val") for o in part.outputs]
        self.meta[part.delegate] = {"debug_handle": part.debug_handle, "val": vals}

    # -- the final graph ----------------------------------------------------------
    def build_graph(self, lowered_names: Dict[int, str]) -> torch.fx.Graph:
        """Every surviving node in the planned order, with its final args, names and meta."""
        sim, enc = self.sim, self.enc
        g = torch.fx.Graph()
        g._codegen = enc.graph_module.graph._codegen
        fx: Dict[int, torch.fx.Node] = {}
        # the reference drops the tags of the top-level graph only
        drop_tag = not self.plan.is_submodule
        for i in sim.order():
            kind = sim.kind[i]
            if i < self.n_orig and sim.op[i] == OP_OUTPUT:
                fx[i] = self._output(g, fx)
            elif i < self.n_orig:
                node = enc.nodes[i]
                remap = dict(zip(enc.arrays.inputs[i], sim.inputs[i]))
                new = g.node_copy(node, lambda a, r=remap: fx[r[enc.index[a]]])
                if drop_tag:
                    new.meta.pop("delegation_tag", None)
                fx[i] = new
            elif kind == KIND_CONSTANT_COPY:
                new = g.create_node("placeholder", sim.copy_target[i], name=sim.names[i])
                new.meta = dict(self.meta[i])
                if drop_tag:
                    new.meta.pop("delegation_tag", None)
                fx[i] = new
            elif kind == KIND_GETITEM:
                new = g.create_node("call_function", operator.getitem,
                                    (fx[sim.inputs[i][0]], sim.getitem_index[i]), name=sim.names[i])
                new.meta = dict(self.meta[i])
                if drop_tag:
                    new.meta.pop("delegation_tag", None)
                fx[i] = new
            elif kind == KIND_GET_ATTR:
                fx[i] = g.create_node("get_attr", lowered_names[i], name=sim.names[i])
            elif kind == KIND_DELEGATE:
                args = tuple(fx[x] for x in sim.inputs[i])
                new = g.create_node("call_function", executorch_call_delegate, args,
                                    name=sim.names[i])
                new.meta = dict(self.meta[i])
                fx[i] = new
            else:  # pragma: no cover - a call_module the plan never replaced
                raise RuntimeError(f"unlowered partition call {sim.names[i]} left in the plan")
        self._order_users(fx)
        self.fx = fx
        return g

    def _order_users(self, fx: Dict[int, torch.fx.Node]) -> None:
        """Give every node's ``users`` the order the reference's edits leave them in."""
        users = self.sim.users
        for i, node in fx.items():
            planned = [fx[u] for u in users[i] if u in fx]
            if len(planned) == len(node.users) and list(node.users) != planned:
                node.users.clear()
                node.users.update(dict.fromkeys(planned))

    def _output(self, g: torch.fx.Graph, fx: Dict[int, torch.fx.Node]) -> torch.fx.Node:
        sim, enc = self.sim, self.enc
        node = enc.nodes[sim.output_node]
        original = node.args[0]
        seq = original if isinstance(original, (list, tuple)) else (original,)
        values = []
        for spec_index, target in zip(sim.out_specs, sim.out_args):
            old = seq[spec_index]
            values.append(fx[target] if isinstance(old, torch.fx.Node) else old)
        if len(values) != len(seq):
            result = tuple(values)
        elif isinstance(original, (list, tuple)):
            result = type(original)(values)
        else:
            result = values[0]
        new = g.create_node("output", "output", (result,), name=sim.names[sim.output_node],
                            type_expr=node.type)
        new.meta = copy.copy(node.meta)
        if not self.plan.is_submodule:  # the reference drops every top-level tag
            new.meta.pop("delegation_tag", None)
        return new


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
                outputs = [torch.fx.Proxy(outputs)[i].node for i in range(len(val))]
        returns, _ = pytree.tree_flatten(outputs)
        out_node.args = (returns,)
