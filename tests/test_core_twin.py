"""The C++ core (``fastlower._core``) against its pure-Python twin (``fastlower.core.twin``).

Every planning area runs on the same hypothesis-generated inputs through both
implementations and the results are compared value by value: ``group_by_tag``,
``find_contract_violation``, ``first_difference``, the name allocator and the
``FusionSimulator`` (driven the way ``fastlower.core.plan`` drives it: duplicate
shared constants, group, find_cycle, fuse, insert_delegate in single and multi
order, plus a nested graph whose delegates take debug handles from the top).

Graphs are generated from a drawn seed and shape parameters (``random.Random``),
so hypothesis shrinks towards small graphs and the examples stay cheap to draw.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import random
import sys
import warnings
from typing import List, Optional

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fastlower.core import loader as _core_loader, plan as fl_plan
from fastlower.core.twin import contract as twin_contract
from fastlower.core.twin import grouping as twin_grouping
from fastlower.core.twin import identity as twin_identity
from fastlower.core.twin import namespace as twin_namespace
from fastlower.core.schema import (
    DELEGATES_AFTER_FUSING, DELEGATES_WHILE_FUSING, OWNABLE_ROLES, STAGE_FUSE, STAGE_INSERT,
    STAGE_PROGRAM, STOP_MUTATION_RETURNED, STOP_OWNED_UPDATE_READ, STOP_TAGGED_OUTPUT,
    STOP_VALIDATE, PlanOptions, PlanResult,
)
from fastlower.core.twin import plan as twin_plan
from fastlower.core.twin.fusion import (
    OP_CALL_FUNCTION, OP_CALL_METHOD, OP_CALL_MODULE, OP_GET_ATTR, OP_OUTPUT, OP_PLACEHOLDER,
    OUT_BUFFER_MUTATION, OUT_OTHER, OUT_USER, ROLE_BUFFER, ROLE_CONSTANT, ROLE_OTHER,
    ROLE_PARAMETER, ROLE_USER_INPUT, FusionSimulator as TwinSimulator, GraphArrays, PartitionPlan,
)

FORCE_PYTHON = os.environ.get("FASTLOWER_FORCE_PYTHON") == "1"

try:
    _core = importlib.import_module("fastlower._core")
    _CORE_ERROR = None
except ImportError as exc:  # pragma: no cover - exercised only without a build
    _core, _CORE_ERROR = None, exc


@pytest.fixture(scope="module")
def core():
    if _core is None:
        if FORCE_PYTHON:
            pytest.skip("FASTLOWER_FORCE_PYTHON=1 and fastlower._core is not importable")
        pytest.fail(f"fastlower._core is not importable ({_CORE_ERROR}); run `pip install .`")
    _core_loader.hand_over_rules(_core)  # load_core() does it; it is skipped under FORCE_PYTHON
    return _core


SETTINGS = dict(deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
PLAN_FIELDS = [f.name for f in dataclasses.fields(PartitionPlan)]


# -- graph generation ---------------------------------------------------------------

_COMPUTE_BASES = ["add", "mul", "linear", "relu", "view", "cat", "getitem", "convBn", "aten_mm",
                  "fused_tag0", "fused_tag_1", "executorch_call_delegate", "lowered_module_0",
                  "sub_2"]
_WEIRD_NAMES = ["a.b", "1abc", "max", "input", "", "x\n", "é_node", "getitem", "fooBar_007",
                "Ünïcode", "t_٣", "__", "_1", "x_0", "a__3", "a-b-c"]
_TAG_NAME_FORMS = ["tag{}", "tag{}", "tag{}", "tag_{}", "Tag{}", "myTag{}", "t.{}", "tag{}\n",
                   "ταγ{}", "\u212a{}", "\u0130{}", "t_\u0663{}", "{}", "lowered_module_{}"]


@dataclasses.dataclass
class Case:
    arrays: GraphArrays
    tag_names: List[str]
    no_copy: List[int]
    sub: Optional["Case"] = None


def make_tag_names(rng: random.Random, n_tags: int, fancy: bool) -> List[str]:
    names: List[str] = []
    for i in range(n_tags):
        form = rng.choice(_TAG_NAME_FORMS) if fancy else "tag{}"
        name = form.format(i)
        names.append(name if name not in names else f"tag{i}_{len(names)}")
    return names


def make_graph(rng: random.Random, n: int, n_tags: int, *, tag_mode: str = "runs",
               weird_names: bool = False, submodule: bool = False, shuffle_users: float = 0.3,
               p_mutation: float = 0.35) -> Case:
    n = max(n, 3)
    n_ph = rng.randint(1, max(1, n // 4))
    ns = twin_namespace.Namespace()
    op, prio, inputs, names, roles, targets, dh, fake, tags, no_copy = ([] for _ in range(10))
    role_choices = ([ROLE_USER_INPUT] * 3 + [ROLE_PARAMETER] * 3 + [ROLE_BUFFER] * 2
                    + [ROLE_CONSTANT] * 2 + [ROLE_OTHER])
    n_targets = 0
    for _ in range(n_ph):
        role = ROLE_USER_INPUT if submodule else rng.choice(role_choices)
        prefix = {ROLE_PARAMETER: "p_weight", ROLE_BUFFER: "b_buffer", ROLE_CONSTANT: "c_lifted",
                  ROLE_USER_INPUT: "x", ROLE_OTHER: "token"}[role]
        if rng.random() < 0.1:
            prefix += "Camel"
        op.append(OP_PLACEHOLDER)
        names.append(ns.create(prefix))
        roles.append(role)
        if role in (ROLE_PARAMETER, ROLE_BUFFER, ROLE_CONSTANT):
            if n_targets and rng.random() < 0.1:
                targets.append(rng.randrange(n_targets))
            else:
                targets.append(n_targets)
                n_targets += 1
        else:
            targets.append(-1)
        inputs.append([])
        no_copy.append(int(rng.random() < 0.1))
    for i in range(n_ph, n - 1):
        r = rng.random()
        node_op = (OP_CALL_FUNCTION if r < 0.85 else OP_GET_ATTR if r < 0.9
                   else OP_CALL_METHOD if r < 0.95 else OP_CALL_MODULE)
        ins: List[int] = []
        if node_op != OP_GET_ATTR:
            for _ in range(rng.choice([1, 1, 2, 2, 2, 3, 4])):
                r = rng.random()
                if r < 0.6:
                    x = rng.randrange(max(0, i - 8), i)
                elif r < 0.85:
                    x = rng.randrange(0, n_ph)
                else:
                    x = rng.randrange(0, i)
                if x not in ins:
                    ins.append(x)
        op.append(node_op)
        names.append(ns.create(rng.choice(_COMPUTE_BASES)))
        roles.append(ROLE_OTHER)
        targets.append(-1)
        inputs.append(ins)
        no_copy.append(0)
    # output node
    compute = list(range(n_ph, n - 1))
    out_args: List[int] = []
    for _ in range(rng.randint(1, min(8, max(1, len(compute))))):
        r = rng.random()
        if r < 0.08:
            out_args.append(-1)
        elif r < 0.15:
            out_args.append(rng.randrange(0, n - 1))
        else:
            out_args.append(rng.choice(compute) if compute else rng.randrange(0, n - 1))
    # the outputs of the last nodes (as graphs usually end)
    for x in range(max(n_ph, n - 1 - rng.randint(0, 3)), n - 1):
        out_args.append(x)
    out_ins: List[int] = []
    for x in out_args:
        if x >= 0 and x not in out_ins:
            out_ins.append(x)
    if rng.random() < 0.1:
        x = rng.randrange(0, n - 1)
        if x not in out_ins:
            out_ins.append(x)
    op.append(OP_OUTPUT)
    names.append("output")
    roles.append(ROLE_OTHER)
    targets.append(-1)
    inputs.append(out_ins)
    no_copy.append(0)

    users: List[List[int]] = [[] for _ in range(n)]
    for u in range(n):
        for x in inputs[u]:
            users[x].append(u)
    for x in range(n):
        if rng.random() < shuffle_users:
            rng.shuffle(users[x])

    # tags
    tags = [-1] * n
    if n_tags:
        current = None
        next_tag = 0
        run_switch = min(0.5, max(0.02, 2.0 * n_tags / max(1, len(compute))))
        for i in compute:
            if tag_mode == "runs":
                if current is None or rng.random() < 0.12:
                    current = None if rng.random() < 0.3 else rng.randrange(n_tags)
                tags[i] = -1 if current is None else current
            elif tag_mode == "unique_runs":  # each run of nodes its own tag: cycle-free partitions
                if rng.random() < run_switch:
                    if current is None and next_tag < n_tags:
                        current, next_tag = next_tag, next_tag + 1
                    else:
                        current = None
                tags[i] = -1 if current is None else current
            elif tag_mode == "random":
                tags[i] = rng.randrange(n_tags) if rng.random() < 0.5 else -1
            else:  # sparse
                tags[i] = rng.randrange(n_tags) if rng.random() < 0.15 else -1
        for c in range(n_ph):
            r = rng.random()
            if roles[c] in (ROLE_PARAMETER, ROLE_BUFFER, ROLE_CONSTANT):
                if users[c] and r < 0.6:
                    tags[c] = tags[rng.choice(users[c])]
                elif r < 0.7:
                    tags[c] = rng.randrange(n_tags)
            elif r < 0.03:
                tags[c] = rng.randrange(n_tags)
    for i in range(n):
        prio.append(int(op[i] == OP_CALL_FUNCTION and rng.random() < 0.1))
        r = rng.random()
        dh.append(rng.randint(1, 3 * n) if r < 0.7 else 0 if r < 0.95 else -rng.randint(1, 50))
        fake.append(op[i] != OP_OUTPUT and rng.random() < 0.85)

    # output specs: buffer mutations point at buffer targets, preferably of the same tag
    out_kinds: List[int] = []
    out_targets: List[int] = []
    buffers = [c for c in range(n_ph) if roles[c] == ROLE_BUFFER]
    for x in out_args:
        r = rng.random()
        if submodule:
            out_kinds.append(OUT_USER)
            out_targets.append(-1)
        elif x >= 0 and buffers and r < p_mutation:
            same = [c for c in buffers if tags[c] == tags[x] and tags[x] >= 0]
            c = rng.choice(same) if same and rng.random() < 0.7 else rng.choice(buffers)
            if tags[x] >= 0 and op[x] != OP_PLACEHOLDER and rng.random() < 0.6:
                # the partition of x owns the buffer: the delegate takes over the update
                tags[c] = tags[x]
                if c not in inputs[x]:
                    inputs[x].append(c)
                    users[c].append(x)
            out_kinds.append(OUT_BUFFER_MUTATION)
            out_targets.append(targets[c])
        elif r > 0.95:
            out_kinds.append(OUT_OTHER)
            out_targets.append(rng.choice([-1, 0, 1]))
        else:
            out_kinds.append(OUT_USER)
            out_targets.append(-1)

    if weird_names:
        for i in range(n):
            if rng.random() < 0.1:
                names[i] = rng.choice(_WEIRD_NAMES + [names[rng.randrange(n)]])

    arrays = GraphArrays(op=op, prioritized=prio, inputs=inputs, users=users, names=names,
                         tags=tags, roles=roles, targets=targets, debug_handles=dh, fake_vals=fake,
                         out_args=out_args, out_kinds=out_kinds, out_targets=out_targets)
    return Case(arrays, [], no_copy)


@dataclasses.dataclass
class DriveConfig:
    single: bool
    delegate_order_seed: Optional[int]  # None: plan.iter_partitions order


@st.composite
def sim_cases(draw, min_nodes: int = 3, max_nodes: int = 300):
    n = draw(st.integers(min_nodes, max_nodes))
    seed = draw(st.integers(0, 2**32 - 1))
    n_tags = draw(st.integers(0, max(1, min(300, n // 8))))
    tag_mode = draw(st.sampled_from(["unique_runs", "unique_runs", "unique_runs", "runs", "random",
                                     "sparse"]))
    weird = draw(st.integers(0, 9)) == 0
    fancy_tags = draw(st.booleans())
    nested = draw(st.integers(0, 4)) == 0
    rng = random.Random(seed)
    case = make_graph(rng, n, n_tags, tag_mode=tag_mode, weird_names=weird)
    case.tag_names = make_tag_names(rng, n_tags, fancy_tags)
    if nested:
        case.sub = make_graph(rng, max(3, n // 4), n_tags, tag_mode=tag_mode, submodule=True)
    return case


@st.composite
def drive_configs(draw):
    single = draw(st.booleans())
    order_seed = draw(st.one_of(st.none(), st.integers(0, 2**16)))
    return (DriveConfig(single, order_seed), DriveConfig(single, order_seed))


# -- driving a simulator the way plan.py does -------------------------------------------

def plan_fields(p) -> dict:
    return {f: getattr(p, f) for f in PLAN_FIELDS}


def _fuse_all(sim, n_tags: int, single: bool, trace: list) -> None:
    """plan._fuse_all, except that a cyclic / output-less tag is recorded and skipped."""
    sim.renumber()
    groups = twin_grouping.group_by_tag(list(sim.tags), n_tags)
    for t in range(n_tags):
        members = [m for m in groups[t] if sim.alive[m]]
        if not members:
            continue
        members.sort(key=sim.pos.__getitem__)
        path = sim.find_cycle(members)
        trace.append(("find_cycle", t, path))
        if path is not None:
            continue
        inside = set(members)
        if not any(u not in inside for m in members for u in sim.users[m]):
            trace.append(("no-output", t))
            continue
        p = sim.fuse(t, members)
        trace.append(("fuse", t, plan_fields(p), sim.order()))
        if single:
            sim.insert_delegate(len(sim.partitions) - 1)
            trace.append(("delegate", sim.order(), sim.max_debug_handle()))


def _duplicate(sim, arrays: GraphArrays, tag_names: List[str]):
    """plan_graph's constant duplication through the simulator's fine-grained calls: None,
    or where a tagged user input among the candidates stops it."""
    for order in fl_plan.duplication_order(arrays, len(tag_names)):
        touched = []
        for c in order:
            if arrays.roles[c] not in OWNABLE_ROLES:
                return ("tagged user input", c)
            touched.append(c)
            touched.extend(sim.duplicate_constant(c))
        for c in touched:
            sim.retag_constant(c)
    return None


def drive(make_sim, case: Case, cfg: DriveConfig):
    """Run the planning sequence; returns (trace, simulators). Errors end the trace."""
    n_tags = len(case.tag_names)
    trace: list = []
    sims = []
    try:
        sim = make_sim(case.arrays, case.tag_names, False, None)
        sims.append(sim)
        # plan.py's own sequence of per-constant calls (the reference's set-of-names order)
        error = _duplicate(sim, case.arrays, case.tag_names)
        trace.append(("duplicated", sim.order(), list(sim.names), list(sim.tags), error))
        _fuse_all(sim, n_tags, cfg.single, trace)
        if case.sub is not None:
            sub = make_sim(case.sub.arrays, case.tag_names, True, sim.top)
            sims.append(sub)
            _fuse_all(sub, n_tags, cfg.single, trace)
        if not cfg.single:
            for s in sims:
                pos = {node: p for p, node in enumerate(s.order())}
                pids = sorted(range(len(s.partitions)),
                              key=lambda pid: pos[s.partitions[pid].call_module])
                if cfg.delegate_order_seed is not None:
                    random.Random(cfg.delegate_order_seed).shuffle(pids)
                for pid in pids:
                    s.insert_delegate(pid)
                    trace.append(("delegate", pid, s.max_debug_handle()))
    except Exception as exc:  # both implementations must fail the same way
        trace.append(("error", type(exc).__name__, str(exc)))
    return trace, sims


def snapshot(sim) -> dict:
    n = len(sim.op)
    return dict(
        n=n, order=list(sim.order()), op=list(sim.op), kind=list(sim.kind),
        origin=list(sim.origin), inputs=[list(sim.inputs[i]) for i in range(n)],
        users=[list(sim.users[i]) for i in range(n)],
        names=list(sim.names), tags=list(sim.tags), alive=[bool(a) for a in sim.alive],
        pos=list(sim.pos), getitem_index=list(sim.getitem_index),
        partition_of=list(sim.partition_of),
        debug_handle=list(sim.debug_handle), has_fake_val=[bool(f) for f in sim.has_fake_val],
        prioritized=[bool(p) for p in sim.prioritized],
        out_args=list(sim.out_args), out_specs=list(sim.out_specs), out_kinds=list(sim.out_kinds),
        out_targets=list(sim.out_targets), output_node=sim.output_node, copies=list(sim.copies),
        copy_target=dict(sim.copy_target), lowered_count=sim.lowered_count,
        partitions=[plan_fields(p) for p in sim.partitions],
        max_debug_handle=sim.max_debug_handle(),
        is_top=sim.top is sim,
    )


def assert_same(twin_result, core_result) -> None:
    twin_trace, twin_sims = twin_result
    core_trace, core_sims = core_result
    assert len(core_trace) == len(twin_trace)
    for i, (a, b) in enumerate(zip(twin_trace, core_trace)):
        assert b == a, f"trace step {i} differs"
    assert len(core_sims) == len(twin_sims)
    for ts, cs in zip(twin_sims, core_sims):
        a, b = snapshot(ts), snapshot(cs)
        for key in a:
            assert b[key] == a[key], f"{key} differs"


def run_both(core, case: Case, cfgs) -> tuple:
    twin = drive(TwinSimulator, case, cfgs[0])
    native = drive(core.FusionSimulator, case, cfgs[1])
    assert isinstance(native[1][0], core.FusionSimulator)
    assert_same(twin, native)
    return twin, native


# -- FusionSimulator ------------------------------------------------------------------------

@settings(max_examples=120, **SETTINGS)
@given(case=sim_cases(max_nodes=250), cfgs=drive_configs())
def test_fusion_simulator_matches_twin(core, case, cfgs):
    run_both(core, case, cfgs)


@settings(max_examples=5, **SETTINGS)
@given(case=sim_cases(min_nodes=1000, max_nodes=3000), cfgs=drive_configs())
def test_fusion_simulator_matches_twin_large(core, case, cfgs):
    run_both(core, case, cfgs)


@pytest.mark.slow
@settings(max_examples=4, **SETTINGS)
@given(case=sim_cases(min_nodes=5000, max_nodes=10000), cfgs=drive_configs())
def test_fusion_simulator_matches_twin_huge(core, case, cfgs):
    run_both(core, case, cfgs)


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("single", [True, False])
def test_fusion_simulator_fuses_many_partitions(core, seed, single):
    """Cycle-free tag runs: most tags fuse, so the namespace/legalize paths run many times.

    (No buffer-mutation outputs: a delegate-owned update that other nodes still read
    leaves them a dangling input, which the twin reports as a cycle at the next fuse.)
    """
    rng = random.Random(seed)
    case = make_graph(rng, 600, 40, tag_mode="unique_runs", p_mutation=0.0)
    case.tag_names = make_tag_names(rng, 40, fancy=seed % 2 == 1)
    cfg = DriveConfig(single, None)
    twin, _ = run_both(core, case, (cfg, cfg))
    fused = sum(1 for step in twin[0] if step[0] == "fuse")
    assert fused >= 10, twin[0][-1]
    if not single:
        assert twin[1][0].lowered_count == fused


@pytest.mark.slow
@pytest.mark.parametrize("single", [True, False])
def test_fusion_simulator_many_partitions_huge(core, single):
    rng = random.Random(11)
    case = make_graph(rng, 8000, 300, tag_mode="unique_runs")
    case.tag_names = make_tag_names(rng, 300, fancy=True)
    cfg = DriveConfig(single, None)
    twin, _ = run_both(core, case, (cfg, cfg))
    assert sum(1 for step in twin[0] if step[0] == "fuse") >= 100


def _chain_with_buffer_mutation():
    """p_w -> add (tag0) -> mul (tag0) -> output; mul is also a buffer mutation of b_buf (tag0)."""
    a = GraphArrays(
        op=[OP_PLACEHOLDER, OP_PLACEHOLDER, OP_PLACEHOLDER, OP_CALL_FUNCTION, OP_CALL_FUNCTION,
            OP_CALL_FUNCTION, OP_OUTPUT],
        prioritized=[0] * 7,
        inputs=[[], [], [], [0, 2], [3, 1], [4, 3], [4, 5]],
        users=[[3], [4], [3], [4, 5], [5, 6], [6], []],
        names=["p_w", "b_buf", "x", "add", "mul", "relu", "output"],
        tags=[0, 0, -1, 0, 0, -1, -1],
        roles=[ROLE_PARAMETER, ROLE_BUFFER, ROLE_USER_INPUT, ROLE_OTHER, ROLE_OTHER, ROLE_OTHER,
               ROLE_OTHER],
        targets=[0, 1, -1, -1, -1, -1, -1], debug_handles=[0, 0, 0, 5, 7, 9, 0],
        fake_vals=[1, 1, 1, 1, 1, 1, 0],
        out_args=[4, 5], out_kinds=[OUT_BUFFER_MUTATION, OUT_USER], out_targets=[1, -1])
    return Case(a, ["tag0"], [0] * 7)


@pytest.mark.parametrize("single", [True, False])
def test_fusion_simulator_buffer_mutation_returned_twice(core, single):
    """The same owned update listed twice (plan.py rejects it afterwards): one deleted getitem."""
    case = _chain_with_buffer_mutation()
    a = case.arrays
    a.out_args, a.out_kinds, a.out_targets = ([4, 4, 5], [OUT_BUFFER_MUTATION] * 2 + [OUT_USER],
                                              [1, 1, -1])
    cfg = DriveConfig(single, None)
    twin, native = run_both(core, case, (cfg, cfg))
    part = native[1][0].partitions[0]
    assert part.deleted_getitems == [part.getitems[1]] and native[1][0].out_specs == [2]


@pytest.mark.parametrize("single", [True, False])
def test_fusion_simulator_buffer_mutation(core, single):
    case = _chain_with_buffer_mutation()
    cfg = DriveConfig(single, None)
    twin, native = run_both(core, case, (cfg, cfg))
    sim = native[1][0]
    part = sim.partitions[0]
    # hand-checked against the twin's rules
    assert part.nodes == [0, 1, 3, 4] and part.outputs == [3, 4]
    assert part.output_kinds == [OUT_USER, OUT_BUFFER_MUTATION] and part.output_order == [1, 0]
    assert part.deleted_getitems == [part.getitems[1]] and part.output_targets == [-1, 1]
    assert sim.out_specs == [1] and sim.out_args == [5]
    assert part.debug_handle == 10 and sim.names[part.delegate] == "executorch_call_delegate"
    assert [sim.names[i] for i in sim.order()] == [
        "x", "lowered_module_0", "executorch_call_delegate", "getitem", "relu", "output"]


def test_fusion_simulator_nested_with_twin_top(core):
    """A C++ nested simulator may take its debug handles from a twin top (and vice versa)."""
    rng = random.Random(7)
    top_case = make_graph(rng, 120, 6, tag_mode="unique_runs")
    sub_case = make_graph(rng, 60, 6, tag_mode="unique_runs", submodule=True)
    names = make_tag_names(rng, 6, False)
    results = []
    for top_cls, sub_cls in [(TwinSimulator, TwinSimulator), (TwinSimulator, core.FusionSimulator),
                             (core.FusionSimulator, TwinSimulator)]:
        top = top_cls(top_case.arrays, names, False, None)
        trace: list = []
        _duplicate(top, top_case.arrays, names)
        _fuse_all(top, len(names), True, trace)
        sub = sub_cls(sub_case.arrays, names, True, top)
        assert sub.top is top
        _fuse_all(sub, len(names), True, trace)
        results.append((trace, snapshot(sub)))
    assert any(step[0] == "delegate" for step in results[0][0])
    assert results[1] == results[0]
    assert results[2] == results[0]


def test_node_views_read_like_lists(core):
    case = _chain_with_buffer_mutation()
    twin = TwinSimulator(case.arrays, case.tag_names, False, None)
    sim = core.FusionSimulator(case.arrays, case.tag_names, False, None)
    for attr in ["op", "kind", "origin", "names", "tags", "alive", "pos", "getitem_index",
                 "partition_of"]:
        view, ref = getattr(sim, attr), getattr(twin, attr)
        assert len(view) == len(ref) and list(view) == ref and view == ref
        assert view[-1] == ref[-1] and view[1:5:2] == ref[1:5:2]
        assert (sorted(range(len(ref)), key=view.__getitem__)
                == sorted(range(len(ref)), key=ref.__getitem__))
        with pytest.raises(IndexError):
            view[len(ref)]
    assert [sim.users[i] for i in range(7)] == [list(twin.users[i]) for i in range(7)]
    assert sim.inputs[4] == twin.inputs[4] and "mul" in sim.names
    tags = sim.tags
    sim.fuse(0, [0, 1, 3, 4])
    twin.fuse(0, [0, 1, 3, 4])
    assert tags == twin.tags and len(tags) == len(twin.tags) > 7  # live view
    assert isinstance(sim.partitions[0], PartitionPlan) and sim.top is sim


def test_cycle_error_matches_twin(core):
    """legalize() on a graph with a cycle: same RuntimeError (message lists the stuck nodes)."""
    a = GraphArrays(op=[OP_PLACEHOLDER, OP_CALL_FUNCTION, OP_CALL_FUNCTION, OP_OUTPUT],
                    prioritized=[0] * 4, inputs=[[], [0, 2], [1], [2]],
                    users=[[1], [2], [1, 3], []], names=["x", "a", "b", "output"], tags=[-1] * 4,
                    roles=[0, 4, 4, 4], targets=[-1] * 4, debug_handles=[0] * 4,
                    fake_vals=[1] * 4, out_args=[2], out_kinds=[0], out_targets=[-1])
    msgs = []
    for cls in (TwinSimulator, core.FusionSimulator):
        with pytest.raises(RuntimeError) as info:
            cls(a, [], False, None).legalize()
        msgs.append(str(info.value))
    assert msgs[0] == msgs[1] == "graph has a cycle through ['a', 'b', 'output']"


def test_unsupported_graph_falls_back_to_twin(core):
    case = _chain_with_buffer_mutation()
    case.arrays.names[2] = "x_" + "9" * 25  # numeric suffix beyond int64
    with pytest.raises(core.Unsupported):
        core.FusionSimulator(case.arrays, case.tag_names, False, None)
    with pytest.raises(core.Unsupported):
        core.plan_graph(case.arrays, case.tag_names, plan_options(case))
    result = fl_plan.plan_graph(case.arrays, case.tag_names, plan_options(case))
    assert len(result.partitions) == 1  # the twin planned it
    bad = _chain_with_buffer_mutation()
    bad.arrays.users[0] = []  # users do not match inputs: malformed, not a core limit
    for cls in (core.FusionSimulator, TwinSimulator, lambda *a: fl_plan.plan_graph(
            a[0], a[1], plan_options(bad)),
            lambda *a: core.plan_graph(a[0], a[1], plan_options(bad))):
        with pytest.raises(ValueError, match="users.0. lacks node 3") as info:
            cls(bad.arrays, bad.tag_names, False, None)
        assert not isinstance(info.value, core.Unsupported)


def _csr(lists):
    offsets, flat = [0], []
    for xs in lists:
        flat.extend(xs)
        offsets.append(len(flat))
    return offsets, flat


# -- plan_graph: the coarse call ----------------------------------------------------------------

def plan_options(case: Case, insertion: int = DELEGATES_WHILE_FUSING, validate: bool = False,
                 is_submodule: bool = False) -> PlanOptions:
    order = [] if is_submodule else fl_plan.duplication_order(case.arrays, len(case.tag_names))
    return PlanOptions(is_submodule=is_submodule, delegate_insertion=insertion,
                       duplication_order=order, no_copy=list(case.no_copy),
                       validate_at_first_duplication=validate)


def stop_key(stop):
    """A stop compared by kind and location (codes, node ids), never by message."""
    return None if stop is None else (stop.kind, stop.stage, stop.pid, stop.tag, list(stop.nodes))


def core_plan(core):
    """The core's plan_graph, its plain data made a PlanResult (as fastlower.core.plan does)."""
    return lambda *args: PlanResult.from_core(core.plan_graph(*args))


def plan_case(plan_graph, case: Case, insertion: int, validate: bool = False):
    """plan_graph on the case, then on its control-flow body (after the top's debug
    handles): each graph's stops and final state, or the error both must raise alike."""
    try:
        top = plan_graph(case.arrays, case.tag_names, plan_options(case, insertion, validate))
        out = [(stop_key(top.stop), stop_key(top.insert_stop), dataclasses.asdict(top.graph))]
        if case.sub is not None and top.stop is None:
            sub_case = dataclasses.replace(case.sub, tag_names=case.tag_names)
            options = plan_options(sub_case, insertion, is_submodule=True)
            options.top_debug_handle = top.graph.max_debug_handle
            sub = plan_graph(sub_case.arrays, case.tag_names, options)
            out.append((stop_key(sub.stop), stop_key(sub.insert_stop),
                        dataclasses.asdict(sub.graph)))
        return out
    except Exception as exc:  # both implementations must fail the same way
        return ("error", type(exc).__name__, str(exc))


@settings(max_examples=100, **SETTINGS)
@given(case=sim_cases(max_nodes=250), insertion=st.sampled_from([DELEGATES_WHILE_FUSING,
                                                                  DELEGATES_AFTER_FUSING]),
       validate=st.booleans())
def test_plan_graph_matches_twin(core, case, insertion, validate):
    twin = plan_case(twin_plan.plan_graph, case, insertion, validate)
    native = plan_case(core_plan(core), case, insertion, validate)
    assert native == twin


def inserted_in_order(plan_graph, case: Case, seed: int):
    """DELEGATES_AFTER_FUSING, then planned again with every delegate inserted in a
    shuffled order: (that order, the graph), None when a rule stops it, or the error."""
    try:
        options = plan_options(case, DELEGATES_AFTER_FUSING)
        first = plan_graph(case.arrays, case.tag_names, options)
        if first.stop is not None or first.insert_stop is not None:
            return None
        order = list(range(len(first.partitions)))
        random.Random(seed).shuffle(order)
        options.delegate_order = order
        return order, plan_graph(case.arrays, case.tag_names, options).graph
    except Exception as exc:  # both implementations must fail the same way
        return ("error", type(exc).__name__, str(exc))


@settings(max_examples=60, **SETTINGS)
@given(case=sim_cases(max_nodes=250), seed=st.integers(0, 2**16))
def test_plan_graph_inserts_delegates_in_the_order_given(core, case, seed):
    """The same graph from both, and the same as the simulator's insert_delegate calls in
    that order after fusing (what the multi-method path did with a live simulator)."""
    twin = inserted_in_order(twin_plan.plan_graph, case, seed)
    assert inserted_in_order(core_plan(core), case, seed) == twin
    if twin is None or twin[0] == "error":
        return
    order, graph = twin
    sim = TwinSimulator(case.arrays, case.tag_names, False, None)
    options = plan_options(case, DELEGATES_AFTER_FUSING)
    duplicating, fusing = twin_plan.contract_stops(case.arrays, len(case.tag_names), options)
    assert twin_plan._duplicate_shared_constants(sim, case.arrays, options, duplicating) is None
    assert twin_plan._fuse_all(sim, options, fusing) == (None, None)
    for pid in order:
        sim.insert_delegate(pid)
    assert twin_plan.planned_graph(sim) == graph


@settings(max_examples=5, **SETTINGS)
@given(case=sim_cases(min_nodes=1000, max_nodes=3000),
       insertion=st.sampled_from([DELEGATES_WHILE_FUSING, DELEGATES_AFTER_FUSING]))
def test_plan_graph_matches_twin_large(core, case, insertion):
    assert plan_case(core_plan(core), case, insertion) == plan_case(twin_plan.plan_graph, case,
                                                                      insertion)


@pytest.mark.parametrize("insertion", [DELEGATES_WHILE_FUSING, DELEGATES_AFTER_FUSING])
def test_plan_graph_fuses_many_partitions(core, insertion):
    rng = random.Random(14)
    case = make_graph(rng, 600, 40, tag_mode="unique_runs", p_mutation=0.0)
    case.tag_names = make_tag_names(rng, 40, fancy=True)
    case.no_copy = [0] * len(case.no_copy)  # no shared no_copy constant stops it at once
    twin = plan_case(twin_plan.plan_graph, case, insertion)
    assert plan_case(core_plan(core), case, insertion) == twin
    assert len(twin[0][2]["partitions"]) >= 10


@pytest.mark.parametrize("impl", ["core", "twin"])
def test_plan_graph_stops_where_the_rules_are_broken(core, impl):
    """Each broken rule: its kind, the stage of the reference's work and the nodes involved."""
    plan_graph = core_plan(core) if impl == "core" else twin_plan.plan_graph

    def stops(case, insertion=DELEGATES_WHILE_FUSING, validate=False):
        result = plan_graph(case.arrays, case.tag_names, plan_options(case, insertion, validate))
        return stop_key(result.stop), stop_key(result.insert_stop), result.graph

    # mul (4) updates b_buf, owned by the delegate, and relu (5) reads it
    (stop, later, sim) = stops(_chain_with_buffer_mutation())
    gi = sim.partitions[0].deleted_getitems[0]
    assert (stop, later) == ((STOP_OWNED_UPDATE_READ, STAGE_INSERT, 0, 0, [gi, 5]), None)
    assert sim.partitions[0].delegate == -1  # stopped before inserting it
    (stop, later, sim) = stops(_chain_with_buffer_mutation(), DELEGATES_AFTER_FUSING)
    assert (stop, later) == (None, (STOP_OWNED_UPDATE_READ, STAGE_INSERT, 0, 0,
                                    [sim.partitions[0].deleted_getitems[0], 5]))
    case = _chain_with_buffer_mutation()
    case.arrays.out_args, case.arrays.out_kinds, case.arrays.out_targets = (
        [4, 4, 5], [OUT_BUFFER_MUTATION] * 2 + [OUT_USER], [1, 1, -1])
    (stop, _, sim) = stops(case)
    assert stop == (STOP_MUTATION_RETURNED, STAGE_PROGRAM, 0, 0,
                    [sim.partitions[0].deleted_getitems[0]])
    case = _chain_with_buffer_mutation()
    case.arrays.tags[6] = 0
    assert stops(case)[0] == (STOP_TAGGED_OUTPUT, STAGE_FUSE, 0, 0, [6])
    # p_w (0) shared with an untagged user: validated where it would be duplicated
    case = _chain_with_buffer_mutation()
    case.arrays.inputs[5], case.arrays.users[0] = [4, 3, 0], [3, 5]
    (stop, _, sim) = stops(case, validate=True)
    assert stop == (STOP_VALIDATE, STAGE_FUSE, 0, 0, [0]) and sim.copies == []
    (stop, _, sim) = stops(case)
    assert stop[0] == STOP_OWNED_UPDATE_READ and len(sim.copies) == 1


@pytest.mark.parametrize("mutate, error", [
    (lambda o: setattr(o, "no_copy", o.no_copy[:-1]), ValueError),
    (lambda o: setattr(o, "duplication_order", o.duplication_order + [[]]), ValueError),
    (lambda o: setattr(o, "duplication_order", [[7]]), IndexError),
    (lambda o: setattr(o, "duplication_order", [[-1]]), IndexError),
    (lambda o: setattr(o, "duplication_order", [[2**70]]), IndexError),
    (lambda o: setattr(o, "delegate_order", [0]), ValueError),
    (lambda o: (setattr(o, "delegate_insertion", DELEGATES_AFTER_FUSING),
                setattr(o, "delegate_order", [0]),
                setattr(o, "delegate_top_debug_handles", [1, 2])), ValueError),
])
def test_plan_graph_malformed_options(core, mutate, error):
    """Options that do not fit the graph: the same exception and message from both, before
    any edit."""
    case = _chain_with_buffer_mutation()
    messages = []
    for plan_graph in (twin_plan.plan_graph, core.plan_graph):
        options = plan_options(case)
        mutate(options)
        with pytest.raises(error) as info:
            plan_graph(case.arrays, case.tag_names, options)
        messages.append(str(info.value))
    assert messages[0] == messages[1] and messages[0].startswith("plan_graph: options.")


# -- group_by_tag ---------------------------------------------------------------------------

def outcome(fn, *args):
    """``("ok", result)`` or ``("error", exception class, message)``."""
    try:
        return ("ok", fn(*args))
    except Exception as exc:  # both implementations must fail the same way
        return ("error", type(exc), str(exc))


@settings(max_examples=200, **SETTINGS)
@given(tags=st.lists(st.integers(-3, 12), max_size=300), n_tags=st.integers(-2, 12))
def test_group_by_tag_matches_twin(core, tags, n_tags):
    expected = outcome(twin_grouping.group_by_tag, tags, n_tags)
    assert outcome(core.group_by_tag, tags, n_tags) == expected
    valid = 0 <= n_tags and all(-2 <= t < n_tags for t in tags)
    assert (expected[0] == "ok") == valid  # tags outside {-2, -1} u [0, n_tags) are rejected
    if valid:
        assert sum(map(len, expected[1])) == sum(1 for t in tags if t >= 0)


# -- find_contract_violation ---------------------------------------------------------------

@st.composite
def contract_cases(draw):
    n = draw(st.integers(1, 200))
    rng = random.Random(draw(st.integers(0, 2**32 - 1)))
    p_tag = draw(st.sampled_from([0.0, 0.05, 0.3]))
    p_bad = draw(st.sampled_from([0.0, 0.01, 0.05]))
    op, tags, roles, no_copy, users = [], [], [], [], []
    n_tags = rng.randint(1, 5)
    for i in range(n):
        o = OP_PLACEHOLDER if rng.random() < 0.3 else OP_OUTPUT if i == n - 1 else OP_CALL_FUNCTION
        op.append(o)
        r = rng.random()
        tags.append(-2 if r < p_bad else rng.randrange(n_tags) if r < p_tag + p_bad else -1)
        if o != OP_PLACEHOLDER:
            roles.append(ROLE_OTHER)
        elif rng.random() < p_bad * 5:
            roles.append(rng.choice([ROLE_USER_INPUT, ROLE_OTHER]))
        else:
            roles.append(rng.choice([ROLE_PARAMETER, ROLE_BUFFER, ROLE_CONSTANT]))
        no_copy.append(int(o == OP_PLACEHOLDER and rng.random() < 0.4))
    for i in range(n):
        later = list(range(i + 1, n))
        users.append(sorted(rng.sample(later, min(len(later), rng.randint(0, 3)))))
    # make most tagged constants' users share their tag, so no_copy violations are rarer
    for i in range(n):
        if tags[i] >= 0 and rng.random() < 0.7:
            for u in users[i]:
                if op[u] != OP_OUTPUT:
                    tags[u] = tags[i]
    offsets, flat = _csr(users)
    return op, tags, roles, no_copy, offsets, flat, draw(st.booleans())


@settings(max_examples=300, **SETTINGS)
@given(args=contract_cases())
def test_find_contract_violation_matches_twin(core, args):
    expected = twin_contract.find_contract_violation(*args)
    got = core.find_contract_violation(*args)
    assert tuple(got) == expected
    code, node, other = expected
    if code != twin_contract.OK:  # the reported node really breaks the reported rule
        assert args[1][node] != -1 and (args[1][node] != -2 or args[-1])
        assert (code == twin_contract.NO_COPY_SHARED) == (other >= 0)


def test_find_contract_violation_codes(core):
    users = [[1], [2], []]
    off, flat = _csr(users)
    op = [OP_PLACEHOLDER, OP_CALL_FUNCTION, OP_OUTPUT]
    cases = {
        (0, 0, -1): twin_contract.OK,
        (-1, -1, 0): twin_contract.TAGGED_OUTPUT,
        (-2, -1, -1): twin_contract.UNKNOWN_TAG,
        (0, 1, -1): twin_contract.NO_COPY_SHARED,
    }
    for tags, code in cases.items():
        for impl in (twin_contract.find_contract_violation, core.find_contract_violation):
            assert impl(op, list(tags), [ROLE_PARAMETER, 4, 4], [1, 0, 0], off, flat,
                        True)[0] == code
        if tags[0] == -2:  # not strict: an unknown tag only stays undelegated
            assert impl(op, list(tags), [ROLE_PARAMETER, 4, 4], [1, 0, 0], off, flat, False)[0] == 0
    for impl in (twin_contract.find_contract_violation, core.find_contract_violation):
        got = impl(op, [0, 0, -1], [ROLE_USER_INPUT, 4, 4], [0, 0, 0], off, flat, False)
        assert tuple(got) == (twin_contract.TAGGED_USER_INPUT, 0, -1)


# -- first_difference -------------------------------------------------------------------------

def _structure(rng: random.Random, n: int):
    op, target, offsets, flat = [], [], [0], []
    for i in range(n):
        op.append(rng.randrange(6))
        target.append(rng.randrange(6))
        k = rng.randint(0, min(i, 3))
        ins = rng.sample(range(i), k) if i else []
        if rng.random() < 0.05:
            # a forward reference (dangling ones: test_core_malformed)
            ins.append(rng.randrange(i, n))
        flat.extend(ins)
        offsets.append(len(flat))
    return op, target, offsets, flat


@settings(max_examples=300, **SETTINGS)
@given(n=st.integers(0, 150), seed=st.integers(0, 2**32 - 1),
       mutation=st.sampled_from(["same", "op", "target", "input", "truncate", "extend",
                                 "renumber"]))
def test_first_difference_matches_twin(core, n, seed, mutation):
    rng = random.Random(seed)
    a = _structure(rng, n)
    op, target, off, flat = (list(x) for x in a)
    if mutation == "op" and n:
        op[rng.randrange(n)] += 1
    elif mutation == "target" and n:
        target[rng.randrange(n)] += 7
    elif mutation == "input" and flat:
        k = rng.randrange(len(flat))
        flat[k] = rng.randrange(0, n)
    elif mutation == "truncate" and n:
        m = rng.randrange(n)
        op, target, off, flat = op[:m], target[:m], off[:m + 1], flat[:off[m]]
    elif mutation == "extend":
        op.append(1)
        target.append(2)
        off.append(off[-1])
    elif mutation == "renumber":  # same structure, different target ids for equal targets
        target = [t * 3 + 1 for t in target]
    b = (op, target, off, flat)
    # (a truncated graph may keep a forward reference past its end: both reject it)
    expected = outcome(twin_identity.first_difference, *a, *b)
    assert outcome(core.first_difference, *a, *b) == expected
    assert outcome(core.first_difference, *b, *a) == outcome(twin_identity.first_difference, *b, *a)
    assert core.first_difference(*a, *a) == -1
    if mutation == "same":
        assert expected == ("ok", -1)
    elif mutation != "truncate":
        assert expected[0] == "ok"


def test_first_difference_structural(core):
    # same structure, inputs listed through different but isomorphic node ids
    a = ([0, 0, 2, 2], [1, 1, 5, 6], [0, 0, 0, 2, 3], [0, 1, 2])
    b = ([0, 0, 2, 2], [1, 1, 5, 6], [0, 0, 0, 2, 3], [1, 0, 2])
    c = ([0, 0, 2, 2], [1, 1, 5, 7], [0, 0, 0, 2, 3], [1, 0, 2])
    for impl in (twin_identity.first_difference, core.first_difference):
        assert impl(*a, *b) == -1
        assert impl(*a, *c) == 3
        assert impl(*a, [0, 0], [1, 1], [0, 0, 0], []) == 2


# -- names ----------------------------------------------------------------------------------

_NAME_TOKENS = st.sampled_from(list("abcxyzABXZ_0123456789.-\n é٣\u212a\u0130")
                               + ["getitem", "_1", "max", "input"])
_NAMES = st.lists(_NAME_TOKENS, max_size=6).map("".join)


@settings(max_examples=300, **SETTINGS)
@given(initial=st.lists(_NAMES, max_size=20), candidates=st.lists(_NAMES, max_size=30))
def test_namespace_matches_twin(core, initial, candidates):
    twin_ns = twin_namespace.Namespace(initial)
    core_ns = core.Namespace(initial)
    assert [core_ns.create(c) for c in candidates] == [twin_ns.create(c) for c in candidates]
    for c in candidates + initial:
        assert core.snake_case(c) == twin_namespace.snake_case(c)


# every character str.isdigit / str.isnumeric knows (a superset of the decimals that the
# suffix regex's \d matches), plus letters whose lower() is not one code point
_UNICODE_CHARS = [chr(cp) for cp in range(sys.maxunicode + 1)
                  if not 0xD800 <= cp <= 0xDFFF and chr(cp).isnumeric()]
_UNICODE_CHARS += list("\u0130\u03a3\u212a")


def test_names_with_every_unicode_digit(core):
    """The core splits Unicode digit suffixes natively (Python's Unicode database, no
    callback into the twin): same names as the twin for every numeric character."""
    assert len(_UNICODE_CHARS) > 1500
    for ch in _UNICODE_CHARS:
        for candidate in ("x_" + ch, "x_1" + ch + "0", "x_" + ch + "\n", ch, "Ab" + ch + "Cd"):
            twin_ns, core_ns = twin_namespace.Namespace(["x_1"]), core.Namespace(["x_1"])
            assert core_ns.create(candidate) == twin_ns.create(candidate), candidate
            assert core.snake_case(candidate) == twin_namespace.snake_case(candidate), candidate


@pytest.mark.parametrize("initial, candidates", [
    (["getitem"] + [f"getitem_{i}" for i in range(1, 300) if i % 7] + ["getitem_0100"],
     ["getitem"] * 80),
    ([f"x_{(1 << 20) + d}" for d in range(-3, 3)],
     ["x_1048573", "x", "x_1048576", "x_1048576", "x"]),
    (["max", "input_1", "a_007", "a_7"], ["max", "input", "input", "a_007", "a", "a_7", "a"]),
])
def test_namespace_long_probes(core, initial, candidates):
    twin_ns, core_ns = twin_namespace.Namespace(initial), core.Namespace(initial)
    expected = [twin_ns.create(c) for c in candidates]
    assert [core_ns.create(c) for c in candidates] == expected
    assert len(set(expected)) == len(expected)


# -- the extension is what plan.py uses ----------------------------------------------------------

def test_extension_in_use():
    if FORCE_PYTHON:
        pytest.skip("FASTLOWER_FORCE_PYTHON=1 selects the pure-Python twin on purpose")
    core = fl_plan.backend_module()
    assert core is not None, "fastlower._core did not load; reinstall with `pip install .`"
    assert core.__name__ == "fastlower._core"
    for name in ("group_by_tag", "find_contract_violation", "first_difference", "FusionSimulator",
                 "plan_graph"):
        assert hasattr(core, name), name
    case = _chain_with_buffer_mutation()
    planned = fl_plan.plan_graph(case.arrays, case.tag_names, plan_options(case))
    assert planned == PlanResult.from_core(core.plan_graph(case.arrays, case.tag_names,
                                                           plan_options(case)))


def test_loader_refuses_a_core_built_for_another_interface(monkeypatch):
    from fastlower.core import loader as _core_loader

    class StaleCore:
        __file__ = "/stale/_core.so"
        INTERFACE = _core_loader.CORE_INTERFACE - 1
        rules = []
        set_name_rules = rules.append
        types = []
        register_types = staticmethod(lambda *classes: StaleCore.types.append(classes))

    monkeypatch.delenv(_core_loader.FORCE_PYTHON_ENV, raising=False)
    monkeypatch.setattr(_core_loader.importlib, "import_module", lambda name: StaleCore)
    monkeypatch.setattr(_core_loader, "_warned", False)
    with pytest.warns(RuntimeWarning, match="binding interface .* stale build"):
        assert _core_loader.load_core() is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # announced once per process, not per call
        assert _core_loader.load_core() is None
    assert StaleCore.rules == [] and StaleCore.types == []  # a refused core gets nothing
    StaleCore.INTERFACE = _core_loader.CORE_INTERFACE
    monkeypatch.setattr(_core_loader, "_handed_over", None)
    assert _core_loader.load_core() is StaleCore
    assert StaleCore.rules == [twin_namespace.ILLEGAL_NAMES]
    assert StaleCore.types == [(PartitionPlan,)]


def test_built_core_matches_the_sources_interface(core):
    from fastlower.core import loader as _core_loader

    assert core.INTERFACE == _core_loader.CORE_INTERFACE
