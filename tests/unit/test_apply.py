"""``fastlower.lowering.apply``: partition programs and the final graph built from a plan.

Tiny exported programs, tagged by hand, encoded and planned (the single-program path);
the assertions are the concrete graphs: placeholders in the reference's order, the
partition programs' signatures and state, and every node of the final graph with its
target, arguments, users and meta.
"""

from __future__ import annotations

import operator

import torch
from torch import nn
from torch.export import export
from torch.export.graph_signature import InputKind, OutputKind

from executorch.exir.delegate import executorch_call_delegate

from fastlower.core import plan as fl_plan
from fastlower.core.schema import DELEGATES_WHILE_FUSING
from fastlower.lowering.apply import GraphBuilder, SignatureIndex
from fastlower.core.encode import Interner, encode_graph

from tests.unit.modules import AddChain


class BufferUpdate(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("b", torch.zeros(2))

    def forward(self, x):
        self.b.add_(x)
        return x.sin() * 2


def _lowered(module, n_inputs, tags, tag_names):
    """(program, builder, partitions) of the single-program path, delegates' meta set."""
    ep = export(module, tuple(torch.ones(2) for _ in range(n_inputs))).run_decompositions({})
    for n in ep.graph.nodes:
        if n.name in tags:
            n.meta["delegation_tag"] = tags[n.name]
    enc = encode_graph(ep.graph_module, {t: i for i, t in enumerate(tag_names)}, ep, Interner())
    plan = fl_plan.plan_program(enc, tag_names, DELEGATES_WHILE_FUSING)
    assert plan.stop is None
    builder = GraphBuilder(plan, tag_names)
    sig = SignatureIndex(ep.graph_signature)
    parts = [builder.build_partition(pid, ep, sig, ep.state_dict, ep.constants)
             for pid in range(len(plan.partitions))]
    for part in parts:
        builder.set_delegate_meta(part.pid)
    return ep, builder, parts


def _nodes(graph):
    """Each node as (op, name, target, args with nodes by name, lists kept lists)."""
    def name(a):
        return a.name if isinstance(a, torch.fx.Node) else a
    return [(n.op, n.name, n.target,
             tuple(type(a)(name(x) for x in a) if isinstance(a, (list, tuple)) else name(a)
                   for a in n.args))
            for n in graph.nodes]


def _specs(specs):
    return [(s.kind, s.arg.name, s.target) for s in specs]


aten = torch.ops.aten
USER_IN, USER_OUT = InputKind.USER_INPUT, OutputKind.USER_OUTPUT


def test_two_partitions_programs_and_final_graph():
    ep, builder, (p0, p1) = _lowered(AddChain(), 2, {"add": "t0", "mul": "t0", "add_1": "t1"},
                                     ["t0", "t1"])
    assert (p0.tag, p0.pid, p1.tag, p1.pid) == ("t0", 0, "t1", 1)
    assert p0.fused_module is None  # top-level partitions keep no fused module
    # external inputs become placeholders on first use; untagged k is a user input here
    assert _nodes(p0.program.graph) == [
        ("placeholder", "x", "x", ()), ("placeholder", "y", "y", ()),
        ("placeholder", "b_k", "b_k", ()),
        ("call_function", "add", aten.add.Tensor, ("x", "y")),
        ("call_function", "mul", aten.mul.Tensor, ("add", "b_k")),
        ("output", "output", "output", (["mul"],)),  # a flat list
    ]
    assert _specs(p0.program.graph_signature.input_specs) == [
        (USER_IN, "x", None), (USER_IN, "y", None), (USER_IN, "b_k", None)]
    assert _specs(p0.program.graph_signature.output_specs) == [(USER_OUT, "mul", None)]
    assert dict(p0.program.state_dict) == {} and dict(p0.program.constants) == {}
    assert _nodes(p1.program.graph) == [
        ("placeholder", "sub", "sub", ()), ("placeholder", "b_k", "b_k", ()),
        ("call_function", "add_1", aten.add.Tensor, ("sub", "b_k")),
        ("output", "output", "output", (["add_1"],)),
    ]
    # the partition program's nodes carry the input's meta (tags included)
    add_1 = next(n for n in p1.program.graph.nodes if n.name == "add_1")
    assert add_1.meta["delegation_tag"] == "t1"

    graph = builder.build_graph({builder.graph.partitions[0].get_attr: "lowered_module_0",
                                 builder.graph.partitions[1].get_attr: "lowered_module_1"})
    delegate = executorch_call_delegate
    assert _nodes(graph) == [
        ("placeholder", "b_k", "b_k", ()), ("placeholder", "x", "x", ()),
        ("placeholder", "y", "y", ()),
        ("get_attr", "lowered_module_0", "lowered_module_0", ()),
        ("call_function", "executorch_call_delegate", delegate,
         ("lowered_module_0", "x", "y", "b_k")),
        ("call_function", "getitem", operator.getitem, ("executorch_call_delegate", 0)),
        ("call_function", "sub", aten.sub.Tensor, ("getitem", "y")),
        ("get_attr", "lowered_module_1", "lowered_module_1", ()),
        ("call_function", "executorch_call_delegate_1", delegate,
         ("lowered_module_1", "sub", "b_k")),
        ("call_function", "getitem_1", operator.getitem, ("executorch_call_delegate_1", 0)),
        ("output", "output", "output", (("getitem_1",),)),
    ]
    by_name = {n.name: n for n in graph.nodes}
    # users in the order the reference's edits leave them
    assert [u.name for u in by_name["b_k"].users] == ["executorch_call_delegate",
                                                      "executorch_call_delegate_1"]
    assert [u.name for u in by_name["y"].users] == ["executorch_call_delegate", "sub"]
    # the top-level graph drops every tag; delegates get the next debug handles
    assert all("delegation_tag" not in n.meta for n in graph.nodes)
    assert by_name["executorch_call_delegate"].meta["debug_handle"] == 1
    assert by_name["executorch_call_delegate_1"].meta["debug_handle"] == 2
    mul = next(n for n in ep.graph.nodes if n.name == "mul")
    assert by_name["executorch_call_delegate"].meta["val"] == [mul.meta["val"]]
    assert by_name["getitem"].meta["val"] is mul.meta["val"]
    assert "nn_module_stack" not in by_name["getitem"].meta  # dropped from getitems
    assert by_name["sub"].meta["val"] is next(
        n for n in ep.graph.nodes if n.name == "sub").meta["val"]


def test_owned_constants_are_arranged_first_and_leave_the_graph():
    tags = {name: "t0" for name in ("b_k", "add", "mul", "sub", "add_1")}
    ep, builder, (p0,) = _lowered(AddChain(), 2, tags, ["t0"])
    # placeholders by first use are x, y, b_k; the owned buffer goes first
    assert [n.name for n in p0.program.graph.nodes if n.op == "placeholder"] == ["b_k", "x", "y"]
    assert _specs(p0.program.graph_signature.input_specs) == [
        (InputKind.BUFFER, "b_k", "k"), (USER_IN, "x", None), (USER_IN, "y", None)]
    assert list(p0.program.state_dict) == ["k"]
    assert p0.program.state_dict["k"] is ep.state_dict["k"]  # the real tensor, not a copy
    graph = builder.build_graph({builder.graph.partitions[0].get_attr: "lowered_module_0"})
    assert [n.name for n in graph.nodes] == ["x", "y", "lowered_module_0",
                                             "executorch_call_delegate", "getitem", "output"]


def test_owned_buffer_update_becomes_a_partition_output():
    ep, builder, (p0,) = _lowered(BufferUpdate(), 1, {"b_b": "t", "add": "t"}, ["t"])
    assert _nodes(p0.program.graph) == [
        ("placeholder", "b_b", "b_b", ()), ("placeholder", "x", "x", ()),
        ("call_function", "add", aten.add.Tensor, ("b_b", "x")),
        ("output", "output", "output", (["add"],)),
    ]
    sig = p0.program.graph_signature
    assert _specs(sig.input_specs) == [(InputKind.BUFFER, "b_b", "b"), (USER_IN, "x", None)]
    assert _specs(sig.output_specs) == [(OutputKind.BUFFER_MUTATION, "add", "b")]
    assert list(p0.program.state_dict) == ["b"]
    graph = builder.build_graph({builder.graph.partitions[0].get_attr: "lowered_module_0"})
    # the buffer update moved into the delegate: the owning graph returns only mul
    assert _nodes(graph) == [
        ("placeholder", "x", "x", ()),
        ("call_function", "sin", aten.sin.default, ("x",)),
        ("get_attr", "lowered_module_0", "lowered_module_0", ()),
        ("call_function", "executorch_call_delegate", executorch_call_delegate,
         ("lowered_module_0", "x")),
        ("call_function", "mul", aten.mul.Tensor, ("sin", 2)),
        ("output", "output", "output", (("mul",),)),
    ]
    assert len(list(graph.nodes)[3].users) == 0


def test_same_graphs_as_the_reference_on_an_edge_program():
    """The reference's ``to_backend`` on the same tagged Edge program: same final graph
    (ops, names, targets, args, users order, debug handles) and partition graphs."""
    import copy

    from executorch.exir import to_edge
    from executorch.exir.backend.backend_api import to_backend
    from executorch.exir.backend.partitioner import (
        DelegationSpec, Partitioner, PartitionResult,
    )
    from executorch.exir.backend.test.demo_backend import DemoBackend

    tags = {"aten_add_tensor": "t0", "aten_mul_tensor": "t0", "aten_add_tensor_1": "t1"}

    def tag(ep):
        for n in ep.graph.nodes:
            if n.name in tags:
                n.meta["delegation_tag"] = tags[n.name]

    class Tagger(Partitioner):
        def partition(self, ep):
            tag(ep)
            spec = DelegationSpec(DemoBackend.__name__, [])
            return PartitionResult(tagged_exported_program=ep,
                                   partition_tags={"t0": spec, "t1": spec})

    ep = to_edge(export(AddChain(), (torch.ones(2), torch.ones(2)))).exported_program()
    reference = to_backend(copy.deepcopy(ep), Tagger())
    tag(ep)
    enc = encode_graph(ep.graph_module, {"t0": 0, "t1": 1}, ep, Interner())
    plan = fl_plan.plan_program(enc, ["t0", "t1"], DELEGATES_WHILE_FUSING)
    builder = GraphBuilder(plan, ["t0", "t1"])
    sig = SignatureIndex(ep.graph_signature)
    parts = [builder.build_partition(pid, ep, sig, ep.state_dict, ep.constants)
             for pid in range(2)]
    for part in parts:
        builder.set_delegate_meta(part.pid)
    graph = builder.build_graph({p.get_attr: f"lowered_module_{p.lowered_index}"
                                 for p in plan.partitions})

    def shape(g):
        return [(n.op, n.name, str(n.target), [str(a) for a in n.args],
                 [u.name for u in n.users], n.meta.get("debug_handle")) for n in g.nodes]

    assert shape(graph) == shape(reference.graph)
    assert [n.meta.get("debug_handle") for n in graph.nodes][4] == 5  # not a trivial match
    for part in parts:
        lowered = getattr(reference.graph_module, f"lowered_module_{part.pid}")
        assert shape(part.program.graph) == shape(lowered.original_module.graph)
        assert (part.program.graph_signature.input_specs
                == lowered.original_module.graph_signature.input_specs)
