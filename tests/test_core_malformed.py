"""Malformed input to every entry point of ``fastlower._core``: a Python exception, never a crash.

Each case hands the C++ core and its pure-Python twin the same hand-written bad
arrays; both must raise the same exception class with the same message (the
checks live in ``csrc/checks.hpp`` and ``fastlower/core/twin/checks.py``).  A
simulator method that rejects its arguments leaves the simulator unchanged.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Callable

import pytest

from fastlower.core.loader import hand_over_rules
from fastlower.core.twin import contract as twin_contract
from fastlower.core.twin import grouping as twin_grouping
from fastlower.core.twin import identity as twin_identity
from fastlower.core.twin.checks import MAX_TAGS
from fastlower.core.twin.fusion import (
    OP_CALL_FUNCTION, OP_OUTPUT, OP_PLACEHOLDER, OUT_USER, ROLE_PARAMETER, ROLE_USER_INPUT,
    FusionSimulator as TwinSimulator, GraphArrays,
)

core_module = pytest.importorskip("fastlower._core")
hand_over_rules(core_module)  # what load_core() does (it returns None under FASTLOWER_FORCE_PYTHON)

HUGE = 2**70  # beyond int64: the core clamps it, then rejects it like any bad id


def graph(**changes) -> GraphArrays:
    """x, p_w -> add(x, p_w) (tag 0) -> relu (tag 0) -> mul(relu, x) -> output(mul)."""
    g = GraphArrays(
        op=[OP_PLACEHOLDER, OP_PLACEHOLDER, OP_CALL_FUNCTION, OP_CALL_FUNCTION, OP_CALL_FUNCTION,
            OP_OUTPUT],
        prioritized=[0] * 6,
        inputs=[[], [], [0, 1], [2], [3, 0], [4]],
        users=[[2, 4], [2], [3], [4], [5], []],
        names=["x", "p_w", "add", "relu", "mul", "output"],
        tags=[-1, 0, 0, 0, -1, -1],
        roles=[ROLE_USER_INPUT, ROLE_PARAMETER, 4, 4, 4, 4],
        targets=[-1, 0, -1, -1, -1, -1],
        debug_handles=[0, 0, 1, 2, 3, 0],
        fake_vals=[1, 1, 1, 1, 1, 0],
        out_args=[4], out_kinds=[OUT_USER], out_targets=[-1])
    for k, v in changes.items():
        setattr(g, k, v)
    return g


def both_raise(call: Callable, exc_type, match: str) -> None:
    """``call(impl)`` raises ``exc_type`` with the same message for impl = core and twin."""
    messages = []
    for impl in ("core", "twin"):
        with pytest.raises(exc_type, match=match) as info:
            call(impl)
        messages.append(str(info.value))
    assert messages[0] == messages[1]


def simulator(impl: str, g: GraphArrays, tag_names=("tag0",)):
    cls = core_module.FusionSimulator if impl == "core" else TwinSimulator
    return cls(g, list(tag_names), False, None)


def state(sim) -> dict:
    n = len(sim.op)
    return dict(order=list(sim.order()), alive=list(sim.alive), names=list(sim.names),
                tags=list(sim.tags), users=[list(sim.users[i]) for i in range(n)],
                inputs=[list(sim.inputs[i]) for i in range(n)], out_args=list(sim.out_args),
                partitions=[dataclasses.asdict(p) for p in sim.partitions], n=n)


# -- FusionSimulator(g, ...) --------------------------------------------------------------------

CONSTRUCTOR_CASES = [
    ("short per-node array", dict(tags=[-1, 0]), ValueError, r"g\.tags has 2 entries, expected 6"),
    ("long per-node array", dict(names=["a"] * 7), ValueError,
     r"g\.names has 7 entries, expected 6"),
    ("output arrays", dict(out_kinds=[]), ValueError, r"g\.out_kinds has 0 entries, expected 1"),
    ("op code", dict(op=[0, 0, 2, 2, 9, 5]), ValueError, r"g\.op\[4\] is not an op code"),
    ("negative op code", dict(op=[-1, 0, 2, 2, 2, 5]), ValueError, r"g\.op\[0\] is not an op code"),
    ("input id too large", dict(inputs=[[], [], [0, 1], [2], [3, 6], [4]]), IndexError,
     r"g\.inputs\[4\]\[1\] is not a node id in \[0, 6\)"),
    ("negative input id", dict(inputs=[[], [], [0, -1], [2], [3, 0], [4]]), IndexError,
     r"g\.inputs\[2\]\[1\] is not a node id"),
    ("input id beyond int64", dict(inputs=[[], [], [0, HUGE], [2], [3, 0], [4]]), IndexError,
     r"g\.inputs\[2\]\[1\] is not a node id"),
    ("user id", dict(users=[[2, 4], [2], [3], [40], [5], []]), IndexError, r"g\.users\[3\]\[0\]"),
    ("duplicate input", dict(inputs=[[], [], [0, 0], [2], [3, 0], [4]],
                             users=[[2, 2, 4], [], [3], [4], [5], []]), ValueError,
     r"g\.inputs\[2\] lists a node twice"),
    ("user not taking the input", dict(users=[[2, 4, 3], [2], [3], [4], [5], []]), ValueError,
     r"g\.users\[0\] does not match g\.inputs \(user 3\)"),
    ("user listed twice", dict(users=[[2, 4, 2], [2], [3], [4], [5], []]), ValueError,
     r"g\.users\[0\] does not match g\.inputs \(user 2\)"),
    ("missing user", dict(users=[[2], [2], [3], [4], [5], []]), ValueError,
     r"g\.users\[0\] lacks node 4, which takes it as an input"),
    ("output arg id", dict(out_args=[7]), IndexError,
     r"g\.out_args\[0\] is neither -1 nor a node id"),
    ("output arg below -1", dict(out_args=[-5]), IndexError, r"g\.out_args\[0\] is neither -1"),
    ("no output node", dict(op=[0, 0, 2, 2, 2, 2]), ValueError, r"last node is not an output node"),
    ("output arg not an output input", dict(out_args=[3]), ValueError,
     r"g\.out_args\[0\] is not an input of the output node"),
]


@pytest.mark.parametrize("label, changes, exc_type, match", CONSTRUCTOR_CASES,
                         ids=[c[0] for c in CONSTRUCTOR_CASES])
def test_simulator_rejects_malformed_arrays(label, changes, exc_type, match):
    g = graph(**changes)
    both_raise(lambda impl: simulator(impl, copy.deepcopy(g)), exc_type, match)


def test_malformed_arrays_are_not_unsupported():
    """``Unsupported`` (fall back to the twin) is for core limits only, not for bad arrays."""
    with pytest.raises(ValueError) as info:
        simulator("core", graph(users=[[2], [2], [3], [4], [5], []]))
    assert not isinstance(info.value, core_module.Unsupported)


def test_valid_graph_is_accepted():
    for impl in ("core", "twin"):
        sim = simulator(impl, graph())
        assert sim.find_cycle([1, 2, 3]) is None
        plan = sim.fuse(0, [1, 2, 3])
        assert plan.outputs == [3]
        sim.insert_delegate(0)
        assert [sim.names[i] for i in sim.order()] == [
            "x", "lowered_module_0", "executorch_call_delegate", "getitem", "mul", "output"]


# -- FusionSimulator methods -----------------------------------------------------------------------

METHOD_CASES = [
    ("duplicate_constant id", lambda s: s.duplicate_constant(6), IndexError,
     r"duplicate_constant: c is not a node id in \[0, 6\)"),
    ("duplicate_constant negative", lambda s: s.duplicate_constant(-1), IndexError,
     r"c is not a node id"),
    ("duplicate_constant huge", lambda s: s.duplicate_constant(HUGE), IndexError,
     r"c is not a node id"),
    ("duplicate_constant non-placeholder", lambda s: s.duplicate_constant(2), ValueError,
     r"node 2 is not a live placeholder"),
    ("retag_constant id", lambda s: s.retag_constant(-7), IndexError,
     r"retag_constant: c is not a node id"),
    ("find_cycle id", lambda s: s.find_cycle([1, 99]), IndexError,
     r"find_cycle: members\[1\] is not a node id"),
    ("find_cycle empty", lambda s: s.find_cycle([]), ValueError, r"find_cycle: members is empty"),
    ("fuse tag", lambda s: s.fuse(1, [1, 2, 3]), IndexError,
     r"fuse: tag is not a tag id in \[0, 1\)"),
    ("fuse negative tag", lambda s: s.fuse(-1, [1, 2, 3]), IndexError,
     r"fuse: tag is not a tag id"),
    ("fuse member id", lambda s: s.fuse(0, [1, 2, 30]), IndexError,
     r"fuse: members\[2\] is not a node id"),
    ("fuse no members", lambda s: s.fuse(0, []), ValueError, r"fuse: members is empty"),
    ("fuse repeated member", lambda s: s.fuse(0, [1, 2, 2, 3]), ValueError,
     r"members\[2\] repeats a node"),
    ("fuse the output node", lambda s: s.fuse(0, [4, 5]), ValueError,
     r"node 5 is dead, made by the planner"),
    ("insert_delegate without partitions", lambda s: s.insert_delegate(0), IndexError,
     r"insert_delegate: pid is not a partition id in \[0, 0\)"),
]


@pytest.mark.parametrize("label, call, exc_type, match", METHOD_CASES,
                         ids=[c[0] for c in METHOD_CASES])
def test_simulator_method_rejects_bad_arguments(label, call, exc_type, match):
    sims = {}

    def run(impl):
        sims[impl] = sim = simulator(impl, graph())
        before = state(sim)
        try:
            call(sim)
        finally:
            assert state(sim) == before  # nothing changed

    both_raise(run, exc_type, match)


def test_fuse_rejects_a_partition_without_an_output():
    """x -> relu, nothing reads relu: a partition of both has no output to fuse to."""
    g = GraphArrays(op=[OP_PLACEHOLDER, OP_CALL_FUNCTION, OP_OUTPUT], prioritized=[0] * 3,
                    inputs=[[], [0], []], users=[[1], [], []], names=["x", "relu", "output"],
                    tags=[-1, 0, -1], roles=[ROLE_PARAMETER, 4, 4], targets=[0, -1, -1],
                    debug_handles=[0] * 3, fake_vals=[1, 1, 0], out_args=[], out_kinds=[],
                    out_targets=[])

    def run(impl):
        sim = simulator(impl, copy.deepcopy(g))
        before = state(sim)
        try:
            sim.fuse(0, [0, 1])
        finally:
            assert state(sim) == before

    both_raise(run, ValueError, r"fuse: no member has a user outside the partition")


def fused(impl: str):
    sim = simulator(impl, graph())
    sim.fuse(0, [1, 2, 3])
    return sim


STATE_CASES = [
    ("fuse an erased node again", lambda s: s.fuse(0, [1, 2]), ValueError, r"node 1 is dead"),
    ("fuse a node the planner made", lambda s: s.fuse(0, [6]), ValueError,
     r"node 6 is dead, made by the planner"),
    ("duplicate an erased constant", lambda s: s.duplicate_constant(1), ValueError,
     r"node 1 is not a live placeholder"),
    ("delegate twice", lambda s: (s.insert_delegate(0), s.insert_delegate(0)), ValueError,
     r"insert_delegate: partition 0 is already delegated"),
    ("delegate a missing partition", lambda s: s.insert_delegate(1), IndexError,
     r"pid is not a partition id in \[0, 1\)"),
]


@pytest.mark.parametrize("label, call, exc_type, match", STATE_CASES,
                         ids=[c[0] for c in STATE_CASES])
def test_simulator_method_rejects_calls_in_the_wrong_state(label, call, exc_type, match):
    """Calls the planner never makes (they would corrupt the node order): rejected, state kept."""
    def run(impl):
        sim = fused(impl)
        try:
            call(sim)
        finally:
            order = list(sim.order())
            assert len(order) == len(set(order))  # the linked node order is intact
            assert all(sim.alive[i] for i in order)

    both_raise(run, exc_type, match)


# -- group_by_tag ---------------------------------------------------------------------------------

GROUP_CASES = [
    ("negative n_tags", [0], -1, ValueError, r"group_by_tag: n_tags is not in \[0, 1048576\]"),
    ("huge n_tags", [0], HUGE, ValueError, r"n_tags is not in"),
    ("n_tags above the cap", [], MAX_TAGS + 1, ValueError, r"n_tags is not in"),
    ("tag id too large", [0, 1, 2], 2, IndexError,
     r"group_by_tag: tags\[2\] is not -2, -1 or a tag id in \[0, 2\)"),
    ("tag below -2", [0, -3], 2, IndexError, r"tags\[1\] is not -2, -1 or a tag id"),
    ("tag beyond int64", [HUGE], 2, IndexError, r"tags\[0\] is not -2, -1"),
]


@pytest.mark.parametrize("label, tags, n_tags, exc_type, match", GROUP_CASES,
                         ids=[c[0] for c in GROUP_CASES])
def test_group_by_tag_rejects(label, tags, n_tags, exc_type, match):
    impls = {"core": core_module.group_by_tag, "twin": twin_grouping.group_by_tag}
    both_raise(lambda impl: impls[impl](tags, n_tags), exc_type, match)


def test_group_by_tag_accepts_unknown_and_untagged():
    for impl in (core_module.group_by_tag, twin_grouping.group_by_tag):
        assert impl([-2, 1, -1, 0, 1], 3) == [[3], [1, 4], []]
        assert impl([], MAX_TAGS)[-1] == []


# -- find_contract_violation -------------------------------------------------------------------

def contract_args(**changes):
    args = dict(op=[OP_PLACEHOLDER, OP_CALL_FUNCTION, OP_OUTPUT], tags=[0, 0, -1],
                roles=[ROLE_PARAMETER, 4, 4], no_copy=[1, 0, 0], users_offsets=[0, 1, 2, 2],
                users_flat=[1, 2], strict_tags=True)
    args.update(changes)
    return list(args.values())


CONTRACT_CASES = [
    ("tags length", dict(tags=[0]), ValueError,
     r"find_contract_violation: tags has 1 entries, expected 3"),
    ("roles length", dict(roles=[]), ValueError, r"roles has 0 entries"),
    ("no_copy length", dict(no_copy=[1, 0, 0, 0]), ValueError, r"no_copy has 4 entries"),
    ("offsets length", dict(users_offsets=[0, 1, 2]), ValueError,
     r"users_offsets has 3 entries, expected 4"),
    ("offsets start", dict(users_offsets=[1, 1, 2, 2]), ValueError, r"users_offsets\[0\] is not 0"),
    ("offsets decrease", dict(users_offsets=[0, 2, 1, 2]), ValueError,
     r"users_offsets decreases at 2"),
    ("offsets end short", dict(users_offsets=[0, 1, 1, 1]), ValueError,
     r"users_offsets\[3\] is not len\(users_flat\) = 2"),
    ("offsets end long", dict(users_offsets=[0, 1, 2, 5]), ValueError,
     r"users_offsets\[3\] is not len"),
    ("user id", dict(users_flat=[1, 3]), IndexError,
     r"users_flat\[1\] is not a node id in \[0, 3\)"),
    ("negative user id", dict(users_flat=[-1, 2]), IndexError, r"users_flat\[0\] is not a node id"),
    ("tag below -2", dict(tags=[0, -3, -1]), IndexError,
     r"tags\[1\] is not -2, -1 or a tag id >= 0"),
]


@pytest.mark.parametrize("label, changes, exc_type, match", CONTRACT_CASES,
                         ids=[c[0] for c in CONTRACT_CASES])
def test_find_contract_violation_rejects(label, changes, exc_type, match):
    impls = {"core": core_module.find_contract_violation,
             "twin": twin_contract.find_contract_violation}
    both_raise(lambda impl: impls[impl](*contract_args(**changes)), exc_type, match)


@pytest.mark.parametrize("offsets, twin_message", [
    ([0, HUGE, HUGE, 2], r"users_offsets decreases at 3"),
    ([0, 2 * HUGE, HUGE, 2], r"users_offsets decreases at 2"),
    ([0, 1, 2, HUGE], r"users_offsets\[3\] is not len\(users_flat\) = 2"),
])
def test_contract_offsets_beyond_int64_are_a_core_limit(offsets, twin_message):
    """Offsets are compared with each other, so the core does not clamp them: OverflowError
    (a documented core limit; the encoder never makes them), where the twin names the rule."""
    with pytest.raises(OverflowError):
        core_module.find_contract_violation(*contract_args(users_offsets=offsets))
    with pytest.raises(ValueError, match=twin_message):
        twin_contract.find_contract_violation(*contract_args(users_offsets=offsets))


def test_find_contract_violation_valid_base_case():
    for impl in (core_module.find_contract_violation, twin_contract.find_contract_violation):
        assert tuple(impl(*contract_args())) == (twin_contract.OK, -1, -1)
        assert tuple(impl(*contract_args(tags=[0, 1, -1]))) == (twin_contract.NO_COPY_SHARED, 0, 1)


# -- first_difference ------------------------------------------------------------------------------

def identity_args(**changes):
    a = dict(op_a=[0, 2, 5], target_a=[0, 1, 2], off_a=[0, 0, 1, 2], in_a=[0, 1])
    b = dict(op_b=[0, 2, 5], target_b=[0, 1, 2], off_b=[0, 0, 1, 2], in_b=[0, 1])
    a.update(b)
    a.update(changes)
    return list(a.values())


IDENTITY_CASES = [
    ("target length", dict(target_a=[0, 1]), ValueError,
     r"first_difference: target_a has 2 entries, expected 3"),
    ("offsets length", dict(off_b=[0, 0, 1]), ValueError, r"off_b has 3 entries, expected 4"),
    ("offsets start", dict(off_a=[-1, 0, 1, 2]), ValueError, r"off_a\[0\] is not 0"),
    ("offsets decrease", dict(off_a=[0, 1, 0, 2]), ValueError, r"off_a decreases at 2"),
    ("offsets end", dict(off_b=[0, 0, 1, 1]), ValueError, r"off_b\[3\] is not len\(in_b\) = 2"),
    ("dangling input", dict(in_a=[0, 3]), IndexError, r"in_a\[1\] is not a node id in \[0, 3\)"),
    ("negative input", dict(in_b=[-1, 1]), IndexError, r"in_b\[0\] is not a node id"),
    ("input beyond int64", dict(in_b=[HUGE, 1]), IndexError, r"in_b\[0\] is not a node id"),
]


@pytest.mark.parametrize("offsets, twin_message", [
    ([0, 2 * HUGE, HUGE, 2], r"off_a decreases at 2"),
    ([0, HUGE, HUGE, 2], r"off_a decreases at 3"),
])
def test_identity_offsets_beyond_int64_are_a_core_limit(offsets, twin_message):
    """Two offsets beyond int64 would clamp to one value and hide their order (the fuzzer's
    crash-e5a85029: the twin said "decreases at", the clamped core "is not len")."""
    with pytest.raises(OverflowError):
        core_module.first_difference(*identity_args(off_a=offsets))
    with pytest.raises(ValueError, match=twin_message):
        twin_identity.first_difference(*identity_args(off_a=offsets))


@pytest.mark.parametrize("label, changes, exc_type, match", IDENTITY_CASES,
                         ids=[c[0] for c in IDENTITY_CASES])
def test_first_difference_rejects(label, changes, exc_type, match):
    impls = {"core": core_module.first_difference, "twin": twin_identity.first_difference}
    both_raise(lambda impl: impls[impl](*identity_args(**changes)), exc_type, match)


def test_first_difference_accepts_a_forward_reference():
    for impl in (core_module.first_difference, twin_identity.first_difference):
        assert impl(*identity_args(in_a=[2, 1])) == 1  # node 1 reads node 2 (later): differs from b
        assert impl(*identity_args(in_a=[2, 1], in_b=[2, 1])) == -1


# -- names -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("bad", [None, 3, b"bytes", ["list"]])
def test_name_functions_reject_non_strings(bad):
    with pytest.raises(TypeError):
        core_module.Namespace(["x"]).create(bad)
    with pytest.raises(TypeError):
        core_module.snake_case(bad)
    with pytest.raises(TypeError):
        core_module.Namespace([bad])


def test_name_functions_reject_lone_surrogates():
    """Not UTF-8 encodable: a Python error from the core (the FusionSimulator falls back to the
    twin)."""
    with pytest.raises(UnicodeError):
        core_module.Namespace().create("a\ud800")
    g = graph(names=["x", "p\ud800", "add", "relu", "mul", "output"])
    with pytest.raises(core_module.Unsupported):
        simulator("core", g)
    assert simulator("twin", g).names[1] == "p\ud800"


def test_simulator_rejects_non_string_tag_names():
    with pytest.raises(TypeError):
        simulator("core", graph(), tag_names=[3])
