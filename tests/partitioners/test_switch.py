"""``accelerated()``: which partitioners propose natively, fallbacks, threads, bad input."""

from __future__ import annotations

import operator
import threading

import pytest
import torch
from executorch.exir.backend.canonical_partitioners.group_partitioner import GroupBasedPartitioner
from torch.fx import Graph, GraphModule
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner

import fastlower.partitioners as fp
from fastlower.partitioners import native

from .conftest import partitions_key
from .random_graphs import NamesSupport, random_case


@pytest.fixture
def spy(monkeypatch):
    """Counts native proposals per class."""
    calls = {"capability": 0, "group": 0}
    real_cap, real_group = native.propose_capability, native.propose_group

    def cap(p):
        calls["capability"] += 1
        return real_cap(p)

    def group(p):
        calls["group"] += 1
        return real_group(p)

    monkeypatch.setattr(native, "propose_capability", cap)
    monkeypatch.setattr(native, "propose_group", group)
    return calls


def _case():
    return random_case(3, 150, 0.7, 0.4, 20)


def _group(case, cls=GroupBasedPartitioner):
    return cls(case.graph_module, NamesSupport(case.supported), node_groups=case.node_groups)


def test_native_only_inside_accelerated(spy):
    case = _case()
    outside = partitions_key(_group(case).propose_partitions())
    with fp.accelerated():
        inside = partitions_key(_group(case).propose_partitions())
        CapabilityBasedPartitioner(case.graph_module,
                                   NamesSupport(case.supported)).propose_partitions()
    assert spy == {"capability": 1, "group": 1}
    assert inside == outside
    _group(case).propose_partitions()
    assert spy["group"] == 1


def test_environment_turns_it_off(spy, monkeypatch):
    monkeypatch.setenv(fp.ENV, "0")
    with fp.accelerated():
        _group(_case()).propose_partitions()
    assert spy["group"] == 0


class OwnMerge(GroupBasedPartitioner):
    def _can_merge_partitions(self, p1, p2, partitions_by_id):
        return False  # never merge


class OwnPropose(CapabilityBasedPartitioner):
    def propose_partitions(self):
        return []


def test_subclass_overriding_a_hook_keeps_its_code(spy):
    case = _case()
    with fp.accelerated():
        own = _group(case, OwnMerge).propose_partitions()
        own_propose = OwnPropose(case.graph_module, NamesSupport(case.supported))
        assert own_propose.propose_partitions() == []
    assert spy == {"capability": 0, "group": 0}
    with fp.reference():
        expected = partitions_key(_group(case, OwnMerge).propose_partitions())
    assert partitions_key(own) == expected
    assert partitions_key(own) != partitions_key(_group(case).propose_partitions())


def test_dependency_viewer_is_lazy_inside_and_exact_when_read():
    case = _case()
    with fp.accelerated():
        lazy = _group(case)
    assert "downstreams" not in lazy.dependency_viewer.__dict__
    eager = _group(case)
    assert "downstreams" in eager.dependency_viewer.__dict__
    for node in case.graph_module.graph.nodes:
        lazy_viewer, eager_viewer = lazy.dependency_viewer, eager.dependency_viewer
        assert lazy_viewer.downstreams_of(node) == eager_viewer.downstreams_of(node)
        assert lazy_viewer.upstreams_of(node) == eager_viewer.upstreams_of(node)


def test_threads_do_not_see_each_others_switch(spy):
    case = _case()
    expected = partitions_key(_group(case).propose_partitions())
    inside_done, outside_may_run = threading.Event(), threading.Event()
    results, errors = {}, []

    def accelerated_thread():
        try:
            with fp.accelerated():
                outside_may_run.set()
                for _ in range(5):
                    results.setdefault("inside", []).append(
                        partitions_key(_group(case).propose_partitions()))
            inside_done.set()
        except Exception as exc:  # reported below
            errors.append(exc)

    def plain_thread():
        try:
            outside_may_run.wait(10)
            for _ in range(5):
                results.setdefault("outside", []).append(
                    partitions_key(_group(case).propose_partitions()))
        except Exception as exc:
            errors.append(exc)

    threads = [threading.Thread(target=accelerated_thread), threading.Thread(target=plain_thread)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    assert results["inside"] == [expected] * 5 and results["outside"] == [expected] * 5
    assert spy["group"] == 5  # only the accelerated thread's calls


def test_node_in_two_groups_raises_the_references_error():
    case = _case()
    node = next(n for n in case.graph_module.graph.nodes if n.op == "call_function")
    with fp.accelerated(), pytest.raises(ValueError,
                                         match=f"Node {node.name} exists in multiple groups"):
        GroupBasedPartitioner(case.graph_module, NamesSupport(case.supported),
                              node_groups=[[node], [node]])


def test_non_callable_target_falls_back_to_the_references_error(spy):
    graph = Graph()
    x = graph.placeholder("x")
    a = graph.call_function(torch.ops.aten.relu.default, (x,))
    b = graph.call_function(torch.ops.aten.relu.default, (a,))
    weird = graph.call_function(torch.ops.aten.relu.default, (b,))
    graph.output(weird)
    gm = GraphModule(torch.nn.Module(), graph)
    weird.target = "not_callable"  # fx refuses it at creation; a pass may still leave one
    part = CapabilityBasedPartitioner(gm, NamesSupport({a.name, b.name, weird.name}))
    with pytest.raises(Exception) as reference_error:
        part.propose_partitions()
    with fp.accelerated(), pytest.raises(reference_error.type) as ours:
        part.propose_partitions()
    assert str(ours.value) == str(reference_error.value)
    assert spy["capability"] == 1  # tried natively, then handed to the reference's code


@pytest.mark.parametrize("variant", ["capability", "group"])
def test_core_rejects_malformed_arrays(core, variant):
    """Every entry point validates its arrays: a Python exception, never a crash."""
    from fastlower.core.twin import partition_proposals as twin

    good = dict(users_offsets=[0, 1, 1], users=[1], is_getitem=[False, False],
                supported=[True, True], compute_weight=[1, 1])
    bad_cases = [
        dict(users=[5]),                      # index out of range
        dict(users=[0]),                      # user before its producer
        dict(users_offsets=[0, 1]),           # wrong length
        dict(users_offsets=[0, 2, 1]),        # decreasing / wrong end
        dict(supported=[True]),               # per-node lengths differ
        dict(compute_weight=[1, 7]),          # weight outside 0..2
    ]
    for bad in bad_cases:
        args = {**good, **bad}
        for impl in (core, twin):
            with pytest.raises((ValueError, IndexError)):
                if variant == "capability":
                    impl.propose_capability_partitions(**args, allows_single_node_partition=False,
                                                       skip_horizontal_fusion=False)
                else:
                    impl.propose_group_partitions(
                        **args, inputs_offsets=[0, 0, 1], inputs=[0], group_offsets=[0],
                        group_members=[], allows_single_node_partition=False)
    if variant == "group":
        for impl in (core, twin):
            with pytest.raises(ValueError, match="node 1 exists in multiple groups"):
                impl.propose_group_partitions(**good, inputs_offsets=[0, 0, 1], inputs=[0],
                                              group_offsets=[0, 1, 2], group_members=[1, 1],
                                              allows_single_node_partition=False)


def _oscillating_getitem_graph():
    """p1 -> u=getitem(p1) -> p2; g = getitem(p1, p2): g's two tuple producers sit in two
    partitions, so the reference's getitem pass moves g back and forth forever."""
    graph = Graph()
    x = graph.placeholder("x")
    p1 = graph.call_function(torch.ops.aten.split.Tensor, (x, 1))
    u = graph.call_function(operator.getitem, (p1, 0))
    p2 = graph.call_function(torch.ops.aten.split.Tensor, (u, 1))
    g = graph.call_function(operator.getitem, (p1, p2))
    graph.output(g)
    return GraphModule(torch.nn.Module(), graph), {p1.name, p2.name, g.name}


def test_getitem_pass_that_never_converges_raises():
    """The reference hangs here (not run); native and twin raise naming a node."""
    from fastlower import errors

    gm, supported = _oscillating_getitem_graph()
    part = CapabilityBasedPartitioner(gm, NamesSupport(supported),
                                      allows_single_node_partition=True)
    with fp.accelerated(), pytest.raises(errors.PartitionerGraphError,
                                         match="node 'getitem_1'.*converge"):
        part.propose_partitions()
    with pytest.raises(ValueError, match="node 4: getitem reassignment does not converge"):
        _twin_capability(part)


def _twin_capability(part):
    from fastlower.core.twin import partition_proposals as twin

    graph = native._encode(part)
    return twin.propose_capability_partitions(graph.users_offsets, graph.users, graph.is_getitem,
                                              graph.supported, graph.compute_weight, True, False)


def test_partitioner_built_before_first_use_is_accelerated(spy):
    """A partitioner constructed outside accelerated() (eager reference viewer) still
    proposes natively inside it."""
    case = _case()
    part = _group(case)
    with fp.accelerated():
        got = partitions_key(part.propose_partitions())
    assert spy["group"] == 1
    with fp.reference():
        assert got == partitions_key(part.propose_partitions())
