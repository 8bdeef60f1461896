"""The final graph of one planned graph module, and the meta of the nodes the plan made."""

from __future__ import annotations

import copy
import operator
from typing import Any, Dict, List, Optional, Sequence

import torch
from torch.export import ExportedProgram

from executorch.exir.delegate import executorch_call_delegate

from ...core.schema import (
    KIND_CALL_MODULE, KIND_CONSTANT_COPY, KIND_DELEGATE, KIND_GET_ATTR, KIND_GETITEM, OP_OUTPUT,
    PlannedGraph,
)
from ...core.plan import GraphPlan
from . import partition as _partition
from .partition import Partition, SignatureIndex

_DROPPED_FROM_GETITEMS = ("nn_module_stack", "source_fn_stack")


class GraphBuilder:
    """Materialises one planned graph: partition programs, then the final graph."""

    def __init__(self, plan: GraphPlan, tag_names: Sequence[str]) -> None:
        self.plan = plan
        self.enc = plan.encoded
        self.tag_names = tag_names
        self.n_orig = len(self.enc.nodes)
        self.meta: Dict[int, dict] = {}  # meta of created nodes, as the reference leaves it
        self.delegate_meta: Dict[int, dict] = {}
        self._set_created_meta()

    @property
    def graph(self) -> PlannedGraph:
        """The planned graph (the plan's latest: the multi-method path plans it again to
        insert its delegates)."""
        return self.plan.graph

    def _tag_name(self, t: int) -> Optional[str]:
        return self.tag_names[t] if t >= 0 else None

    def node_meta(self, i: int) -> dict:
        return self.enc.nodes[i].meta if i < self.n_orig else self.meta[i]

    def original_members(self, pid: int) -> List[torch.fx.Node]:
        """The input graph's nodes that partition ``pid`` holds (constant copies excluded)."""
        return [self.enc.nodes[m] for m in self.graph.partitions[pid].nodes if m < self.n_orig]

    def has_input_without_value(self, pid: int) -> bool:
        """Does partition ``pid`` read a node that has no ``val`` (a ``get_attr`` of a
        control-flow body, say)? Its program's placeholder then has none either,
        which ExecuTorch's verifier rejects; the input's verifier run did not cover it."""
        return any("val" not in self.node_meta(x) for x in self.graph.partitions[pid].inputs)

    def node_type(self, i: int):
        return self.enc.nodes[i].type if i < self.n_orig else None

    def _set_created_meta(self) -> None:
        planned, nodes = self.graph, self.enc.nodes
        touched = {planned.origin[c] for c in planned.copies}
        for c in touched:  # _assign_new_tag re-tags the duplicated constants
            nodes[c].meta["delegation_tag"] = self._tag_name(planned.tags[c])
        for i in range(self.n_orig, len(planned.op)):
            kind = planned.kind[i]
            if kind == KIND_CONSTANT_COPY:
                meta = dict(nodes[planned.origin[i]].meta)
                meta["delegation_tag"] = self._tag_name(planned.tags[i])
                self.meta[i] = meta
            elif kind in (KIND_GETITEM, KIND_CALL_MODULE):
                origin = planned.origin[i]
                meta = dict(self.node_meta(origin)) if origin >= 0 else {}
                if kind == KIND_GETITEM:
                    for key in _DROPPED_FROM_GETITEMS:
                        meta.pop(key, None)
                self.meta[i] = meta
            else:
                self.meta[i] = {}

    # -- partitions (before preprocess; see :mod:`.partition`) ---------------------
    def build_partition(self, pid: int, owning: ExportedProgram, sig: SignatureIndex,
                        real_state: Dict[str, Any], real_constants: Dict[str, Any]) -> Partition:
        """The reference's fused submodule and ExportedProgram for one partition."""
        return _partition.build_partition(self, pid, owning, sig, real_state, real_constants)

    def set_delegate_meta(self, pid: int) -> None:
        part = self.graph.partitions[pid]
        vals = [self.node_meta(o).get("val") for o in part.outputs]
        self.meta[part.delegate] = {"debug_handle": part.debug_handle, "val": vals}

    # -- the final graph ----------------------------------------------------------
    def build_graph(self, lowered_names: Dict[int, str]) -> torch.fx.Graph:
        """Every surviving node in the planned order, with its final args, names and meta."""
        planned, enc = self.graph, self.enc
        g = torch.fx.Graph()
        g._codegen = enc.graph_module.graph._codegen
        fx: Dict[int, torch.fx.Node] = {}
        # the reference drops the tags of the top-level graph only
        drop_tag = not self.plan.is_submodule
        for i in planned.order:
            kind = planned.kind[i]
            if i < self.n_orig and planned.op[i] == OP_OUTPUT:
                fx[i] = self._output(g, fx)
            elif i < self.n_orig:
                node = enc.nodes[i]
                remap = dict(zip(enc.arrays.inputs[i], planned.inputs[i]))

                def planned_arg(a: torch.fx.Node, r: Dict[int, int] = remap) -> torch.fx.Node:
                    return fx[r[enc.index[a]]]

                new = g.node_copy(node, planned_arg)
                if drop_tag:
                    new.meta.pop("delegation_tag", None)
                fx[i] = new
            elif kind == KIND_CONSTANT_COPY:
                new = g.create_node("placeholder", planned.copy_target[i], name=planned.names[i])
                new.meta = dict(self.meta[i])
                if drop_tag:
                    new.meta.pop("delegation_tag", None)
                fx[i] = new
            elif kind == KIND_GETITEM:
                new = g.create_node("call_function", operator.getitem,
                                    (fx[planned.inputs[i][0]], planned.getitem_index[i]),
                                    name=planned.names[i])
                new.meta = dict(self.meta[i])
                if drop_tag:
                    new.meta.pop("delegation_tag", None)
                fx[i] = new
            elif kind == KIND_GET_ATTR:
                fx[i] = g.create_node("get_attr", lowered_names[i], name=planned.names[i])
            elif kind == KIND_DELEGATE:
                args = tuple(fx[x] for x in planned.inputs[i])
                new = g.create_node("call_function", executorch_call_delegate, args,
                                    name=planned.names[i])
                new.meta = dict(self.meta[i])
                fx[i] = new
            else:  # pragma: no cover - a call_module the plan never replaced
                raise RuntimeError(f"unlowered partition call {planned.names[i]} left in the plan")
        self._order_users(fx)
        self.fx = fx
        return g

    def _order_users(self, fx: Dict[int, torch.fx.Node]) -> None:
        """Give every node's ``users`` the order the reference's edits leave them in."""
        users = self.graph.users
        for i, node in fx.items():
            planned = [fx[u] for u in users[i] if u in fx]
            if len(planned) == len(node.users) and list(node.users) != planned:
                node.users.clear()
                node.users.update(dict.fromkeys(planned))

    def _output(self, g: torch.fx.Graph, fx: Dict[int, torch.fx.Node]) -> torch.fx.Node:
        planned, enc = self.graph, self.enc
        node = enc.nodes[planned.output_node]
        original = node.args[0]
        seq = original if isinstance(original, (list, tuple)) else (original,)
        values = []
        result: Any  # the original output's shape: a tuple, its own sequence type or one value
        for spec_index, target in zip(planned.out_specs, planned.out_args):
            old = seq[spec_index]
            values.append(fx[target] if isinstance(old, torch.fx.Node) else old)
        if len(values) != len(seq):
            result = tuple(values)
        elif isinstance(original, (list, tuple)):
            result = type(original)(values)
        else:
            result = values[0]
        new = g.create_node("output", "output", (result,), name=planned.names[planned.output_node],
                            type_expr=node.type)
        new.meta = copy.copy(node.meta)
        if not self.plan.is_submodule:  # the reference drops every top-level tag
            new.meta.pop("delegation_tag", None)
        return new
