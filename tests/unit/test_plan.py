"""``fastlower.core.plan``: grouping, contract checks, constant duplication, fusion order.

Each test runs twice: with the C++ core and with the pure-Python twin (``plan._core``
set to ``None``, the switch ``FASTLOWER_FORCE_PYTHON=1`` flips at import). Programs
are exported from tiny modules, tagged by hand and encoded; the assertions are the
concrete plans: partitions' nodes, inputs and outputs, the final node order and names,
and the stop (error, stage, partition) where the reference would raise.
"""

from __future__ import annotations

import functools
import warnings

import pytest
import torch
from torch import nn
from torch.export import export

from fastlower import errors
from fastlower.core import plan as fl_plan
from fastlower.core.schema import (
    DELEGATES_AFTER_FUSING, DELEGATES_WHILE_FUSING, OUT_BUFFER_MUTATION, OUT_USER,
)
from fastlower.core.encode import Interner, encode_graph

from tests.unit.modules import AddChain


# graphs the twin planned in the running test (the impl fixture counts them)
_twin_plans: list = []


@pytest.fixture(params=["core", "twin"])
def impl(request, monkeypatch):
    """Select the planning implementation ``plan`` calls into."""
    if request.param == "twin":
        monkeypatch.setattr(fl_plan, "_core", None)
    elif fl_plan.backend_module() is None:
        pytest.skip("fastlower._core is not in use (FASTLOWER_FORCE_PYTHON=1 or not built)")
    twin_plan_graph = fl_plan.twin_plan.plan_graph

    def counting(*args, **kwargs):
        _twin_plans.append(args[0])
        return twin_plan_graph(*args, **kwargs)

    _twin_plans.clear()
    monkeypatch.setattr(fl_plan.twin_plan, "plan_graph", counting)
    return request.param


class BufferUpdate(nn.Module):
    """``b += x``; with ``read`` the updated buffer is also read by a later node."""

    def __init__(self, read: bool) -> None:
        super().__init__()
        self.register_buffer("b", torch.zeros(2))
        self.read = read

    def forward(self, x):
        self.b.add_(x)
        return self.b * 2 if self.read else x.sin() * 2


@functools.lru_cache(maxsize=None)
def _program(module_class, n_inputs, *args):
    # exported once per module: planning reads the graph, never writes it
    return export(module_class(*args),
                  tuple(torch.ones(2) for _ in range(n_inputs))).run_decompositions({})


def _encoded(module_class, n_inputs, tags, tag_names, no_copy=(), args=()):
    ep = _program(module_class, n_inputs, *args)
    for n in ep.graph.nodes:
        n.meta.pop("delegation_tag", None)
        n.meta.pop("no_copy", None)
        if n.name in tags:
            n.meta["delegation_tag"] = tags[n.name]
        if n.name in no_copy:
            n.meta["no_copy"] = True
    return encode_graph(ep.graph_module, {t: i for i, t in enumerate(tag_names)}, ep, Interner())


def _chain(tags, tag_names, no_copy=()):
    enc = _encoded(AddChain, 2, tags, tag_names, no_copy)
    assert enc.arrays.names == ["b_k", "x", "y", "add", "mul", "sub", "add_1", "output"]
    return enc


def _order(plan):
    return [plan.graph.names[i] for i in plan.graph.order]


def _check_simulator(plan, impl):
    # the switch took: the twin planned only when the twin was asked for
    assert bool(_twin_plans) == (impl == "twin")


def test_group_by_tag(impl):
    assert fl_plan.group_by_tag([1, -1, 0, 1, -2, 0], 3) == [[2, 5], [0, 3], []]
    assert fl_plan.group_by_tag([], 2) == [[], []]


def test_single_path_fuses_and_delegates_each_tag_in_order(impl):
    enc = _chain({"add": "t0", "mul": "t0", "add_1": "t1"}, ["t0", "t1"])
    plan = fl_plan.plan_program(enc, ["t0", "t1"], DELEGATES_WHILE_FUSING)
    _check_simulator(plan, impl)
    assert plan.stop is None and plan.after_preprocess is None
    p0, p1 = plan.partitions
    assert (p0.tag, p0.nodes, p0.inputs, p0.outputs) == (0, [3, 4], [1, 2, 0], [4])
    assert p0.member_inputs == {3: [1, 2], 4: [3, 0]}
    assert (p1.tag, p1.nodes, p1.inputs, p1.outputs) == (1, [6], [5, 0], [6])
    # new nodes take ids after the input's: call 8, getitem 9, get_attr 10, delegate 11
    assert (p0.call_module, p0.getitems, p0.get_attr, p0.delegate) == (8, [9], 10, 11)
    assert (p1.call_module, p1.getitems, p1.get_attr, p1.delegate) == (12, [13], 14, 15)
    assert [p.lowered_index for p in plan.partitions] == [0, 1]
    assert [p.debug_handle for p in plan.partitions] == [1, 2]
    assert all(p.single_output and not p.owns_state for p in plan.partitions)
    assert _order(plan) == ["b_k", "x", "y", "lowered_module_0", "executorch_call_delegate",
                            "getitem", "sub", "lowered_module_1", "executorch_call_delegate_1",
                            "getitem_1", "output"]
    assert plan.graph.out_args == [13]


def test_multi_path_fuses_every_tag_without_delegates(impl):
    enc = _chain({"add": "t0", "mul": "t0", "add_1": "t1"}, ["t0", "t1"])
    plan = fl_plan.plan_program(enc, ["t0", "t1"], DELEGATES_AFTER_FUSING)
    _check_simulator(plan, impl)
    assert plan.stop is None
    assert [p.delegate for p in plan.partitions] == [-1, -1]
    assert [(p.call_module, p.getitems) for p in plan.partitions] == [(8, [9]), (10, [11])]
    assert _order(plan) == ["b_k", "x", "y", "fused_t0", "getitem", "sub", "fused_t1",
                            "getitem_1", "output"]
    assert list(fl_plan.iter_partitions(plan)) == [(plan, 0), (plan, 1)]


def test_multi_path_inserts_the_delegates_in_the_order_given(impl):
    enc = _chain({"add": "t0", "mul": "t0", "add_1": "t1"}, ["t0", "t1"])
    plan = fl_plan.plan_program(enc, ["t0", "t1"], DELEGATES_AFTER_FUSING)
    fl_plan.insert_delegates(plan, [(plan, 1), (plan, 0)])
    _check_simulator(plan, impl)
    p0, p1 = plan.partitions
    assert (p1.lowered_index, p0.lowered_index) == (0, 1)
    assert (p1.debug_handle, p0.debug_handle) == (1, 2)
    assert _order(plan) == ["b_k", "x", "y", "lowered_module_1", "executorch_call_delegate_1",
                            "getitem", "sub", "lowered_module_0", "executorch_call_delegate",
                            "getitem_1", "output"]


def test_empty_tag_is_skipped(impl):
    enc = _chain({"mul": "t1"}, ["t0", "t1"])
    plan = fl_plan.plan_program(enc, ["t0", "t1"], DELEGATES_WHILE_FUSING)
    assert [p.tag for p in plan.partitions] == [1]
    assert plan.partitions[0].lowered_index == 0


def test_convexity_failure_names_the_path(impl):
    enc = _chain({"add": "t0", "add_1": "t0"}, ["t0"])
    plan = fl_plan.plan_program(enc, ["t0"], DELEGATES_WHILE_FUSING)
    stop = plan.stop
    assert isinstance(stop.error, errors.CyclicPartitionError)
    assert isinstance(stop.error, AssertionError)  # the reference's class
    assert str(stop.error) == "Invalid partition, found dependency cycles"
    assert stop.error.path == ["add", "mul", "sub", "add_1"]
    assert (stop.stage, stop.pid, stop.graph) == (fl_plan.FUSE, 0, plan)
    assert plan.partitions == []
    assert _order(plan) == ["b_k", "x", "y", "add", "mul", "sub", "add_1", "output"]


def test_cycle_in_second_tag_comes_after_first_tags_delegate(impl):
    enc = _chain({"x": None, "mul": "t0", "add": "t1", "add_1": "t1"}, ["t0", "t1"])
    plan = fl_plan.plan_program(enc, ["t0", "t1"], DELEGATES_WHILE_FUSING)
    assert isinstance(plan.stop.error, errors.CyclicPartitionError)
    assert plan.stop.pid == 1  # one partition fused (and delegated) before it
    assert plan.partitions[0].delegate >= 0


def test_shared_constant_is_duplicated_per_user(impl):
    # k (tagged t1) is read by mul (t0) and add_1 (t1): mul gets the original,
    # add_1 a copy; each is then tagged with its only user's tag
    enc = _chain({"b_k": "t1", "mul": "t0", "add_1": "t1"}, ["t0", "t1"])
    plan = fl_plan.plan_program(enc, ["t0", "t1"], DELEGATES_WHILE_FUSING)
    sim = plan.graph
    assert plan.stop is None
    assert sim.copies == [8]
    assert sim.copy_target == {8: "b_k_copy_0"}
    assert sim.names[8] == "b_k_copy_0"
    assert (sim.tags[0], sim.tags[8]) == (0, 1)
    p0, p1 = plan.partitions
    assert (p0.nodes, p0.inputs, p0.member_inputs) == ([0, 4], [3], {0: [], 4: [3, 0]})
    assert (p1.nodes, p1.inputs, p1.member_inputs) == ([8, 6], [5], {8: [], 6: [5, 8]})
    assert p0.owns_state and p1.owns_state
    assert _order(plan) == ["x", "y", "lowered_module_0", "add", "executorch_call_delegate",
                            "getitem", "sub", "lowered_module_1", "executorch_call_delegate_1",
                            "getitem_1", "output"]


def test_no_copy_shared_constant_stops_before_fusion(impl):
    enc = _chain({"b_k": "t1", "mul": "t0", "add_1": "t1"}, ["t0", "t1"], no_copy=("b_k",))
    plan = fl_plan.plan_program(enc, ["t0", "t1"], DELEGATES_WHILE_FUSING)
    error = plan.stop.error
    assert isinstance(error, errors.SharedConstantError)
    assert str(error) == ("constant data node (b_k) is tagged with (t1) but has user (mul) "
                          "which has tag (t0)")
    assert (plan.stop.stage, plan.stop.pid) == (fl_plan.FUSE, 0)
    assert plan.partitions == [] and plan.graph.copies == []


def test_validate_tagged_runs_at_the_first_duplication(impl):
    calls = []
    enc = _chain({"b_k": "t1", "mul": "t0", "add_1": "t1"}, ["t0", "t1"])
    plan = fl_plan.plan_program(enc, ["t0", "t1"], DELEGATES_WHILE_FUSING,
                                validate_tagged=lambda: calls.append(1))
    assert calls == [1] and plan.stop is None

    def reject():
        raise ValueError("verifier says no")

    plan = fl_plan.plan_program(enc, ["t0", "t1"], DELEGATES_WHILE_FUSING, validate_tagged=reject)
    assert isinstance(plan.stop.error, ValueError) and plan.stop.stage == fl_plan.FUSE


def test_tagged_output_and_tagged_user_input(impl):
    plan = fl_plan.plan_program(_chain({"add": "t0", "output": "t0"}, ["t0"]), ["t0"],
                                DELEGATES_WHILE_FUSING)
    assert isinstance(plan.stop.error, errors.TaggedOutputError)
    assert str(plan.stop.error) == "output node output should not be tagged"
    plan = fl_plan.plan_program(_chain({"add": "t0", "x": "t0"}, ["t0"]), ["t0"],
                                DELEGATES_WHILE_FUSING)
    assert isinstance(plan.stop.error, errors.TaggedUserInputError)
    assert plan.stop.error.node == "x" and plan.stop.stage == fl_plan.FUSE


def test_unknown_tag_warns_or_raises_when_strict(impl):
    enc = _chain({"add": "t0", "mul": "nope"}, ["t0"])
    with pytest.warns(errors.UndelegatedTagWarning, match=r"mul \(nope\)"):
        plan = fl_plan.plan_program(enc, ["t0"], DELEGATES_WHILE_FUSING)
    assert [p.nodes for p in plan.partitions] == [[3]]
    with pytest.raises(errors.UnknownTagError) as info:
        fl_plan.plan_program(enc, ["t0"], DELEGATES_WHILE_FUSING, strict_tags=True)
    assert (info.value.node, info.value.tag) == ("mul", "nope")


def test_partition_without_output(impl):
    g = torch.fx.Graph()
    x = g.placeholder("x")
    dead = g.call_function(torch.neg, (x,))
    g.output(g.call_function(torch.sin, (x,)))
    dead.meta["delegation_tag"] = "t0"
    enc = encode_graph(torch.fx.GraphModule(nn.Module(), g), {"t0": 0}, None, Interner())
    plan = fl_plan.plan_program(enc, ["t0"], DELEGATES_WHILE_FUSING)
    assert isinstance(plan.stop.error, errors.NoPartitionOutputError)
    assert plan.stop.error.node == "neg"


def test_owned_buffer_update_moves_into_the_delegate(impl):
    enc = _encoded(BufferUpdate, 1, {"b_b": "t", "add": "t"}, ["t"], args=(False,))
    assert enc.arrays.names == ["b_b", "x", "add", "sin", "mul", "output"]
    plan = fl_plan.plan_program(enc, ["t"], DELEGATES_WHILE_FUSING)
    assert plan.stop is None
    (p,) = plan.partitions
    assert (p.nodes, p.inputs, p.outputs) == ([0, 2], [1], [2])
    assert (p.output_kinds, p.output_targets, p.output_order) == ([OUT_BUFFER_MUTATION], [0], [0])
    assert p.deleted_getitems == [7] and p.owns_state
    # the buffer-mutation output is dropped from the owning program
    graph = plan.graph
    assert (graph.out_args, graph.out_specs, graph.out_kinds) == ([4], [1], [OUT_USER])
    assert _order(plan) == ["x", "sin", "lowered_module_0", "executorch_call_delegate", "mul",
                            "output"]


@pytest.mark.parametrize("single", [True, False])
def test_owned_buffer_update_read_outside(impl, single):
    enc = _encoded(BufferUpdate, 1, {"b_b": "t", "add": "t"}, ["t"], args=(True,))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plan = fl_plan.plan_program(
            enc, ["t"], DELEGATES_WHILE_FUSING if single else DELEGATES_AFTER_FUSING)
    # single program: met inserting the delegate; multi-method: after every preprocess
    stop = plan.stop if single else plan.after_preprocess
    assert (plan.stop is None) == (not single)
    assert isinstance(stop.error, errors.OwnedBufferUpdateReadError)
    assert (stop.stage, stop.pid) == (fl_plan.INSERT, 0)
    assert stop.error.readers == ["mul"]
