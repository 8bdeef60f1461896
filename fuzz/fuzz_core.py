"""atheris harness for the native planning core (``fastlower._core``).

Each input (decoded by ``corpus_format.Reader`` from an
``atheris.FuzzedDataProvider``) picks one entry point, builds its arrays and
calls it: ``group_by_tag``, ``find_contract_violation``, ``first_difference``,
the name allocator, or a ``FusionSimulator`` followed by a sequence of method
calls (the planner's own sequence among them).  Every call runs on the C++ core
and on its pure-Python twin; the harness fails (atheris reports a crash and
saves the input) when

* the interpreter crashes (the point of the exercise: the core must raise);
* a call raises anything but the documented exceptions (``EXPECTED``);
* the core and the twin disagree: a different result, or a different exception
  class or message.  The core may raise ``Unsupported`` where the twin works
  or another of ``CORE_LIMITS`` where the twin works (a value beyond what the
  core represents; see there).

Run (from the repository root, with the project's venv)::

    .venv/bin/python fuzz/fuzz_core.py fuzz/corpus -max_total_time=60

Other libFuzzer flags (``-runs=N``, ``-timeout=S``) work as usual; a crashing input
is replayed with ``.venv/bin/python fuzz/fuzz_core.py crash-<hash>``.  The core is
built with gcc, so coverage guidance comes from the Python code atheris
instruments (the harness, ``fastlower.core.twin`` and ``fastlower.core.plan``), not from
the C++; the seeds (``make_corpus.py``) start it from real encoded graphs.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from typing import Callable, List

import atheris

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import torch  # noqa: E402,F401 - imported first so that atheris does not instrument it

# coverage feedback from fastlower's Python (twin, planner) and the byte format
with atheris.instrument_imports(include=["fastlower", "corpus_format"]):
    import corpus_format as cf
    from fastlower import _core
    from fastlower.core import plan as fl_plan
    from fastlower.core.twin import contract as twin_contract
    from fastlower.core.twin import grouping as twin_grouping
    from fastlower.core.twin import identity as twin_identity
    from fastlower.core.twin import namespace as twin_namespace
    from fastlower.core.schema import OWNABLE_ROLES, PlanOptions, PlanResult
    from fastlower.core.twin import plan as twin_plan
    from fastlower.core.twin.fusion import FusionSimulator as TwinSimulator, GraphArrays

# what a core entry point may raise on bad input; anything else is a bug
EXPECTED = (ValueError, IndexError, KeyError, RuntimeError, OverflowError, UnicodeError)


# what only the core raises, at the limits of its representation: Unsupported
# (FusionSimulator; plan.py then uses the twin), OverflowError (a compared value
# beyond int64, which the encoder never makes), UnicodeEncodeError (a string
# with a lone surrogate, which is not UTF-8; never an FX node name)
CORE_LIMITS = (_core.Unsupported, OverflowError, UnicodeEncodeError)


class Mismatch(AssertionError):
    """The core and the twin disagree."""


def outcome(fn: Callable, *args):
    try:
        return ("ok", fn(*args))
    except EXPECTED as exc:
        return ("error", type(exc), str(exc))


def same(label: str, core_out, twin_out) -> None:
    """Equal outcomes, except where the core documents a limit the twin does not have."""
    if core_out[0] == "error" and issubclass(core_out[1], CORE_LIMITS):
        return  # beyond the core's representation: plan.py uses the twin
    if core_out != twin_out:
        raise Mismatch(f"{label}: core {core_out!r} != twin {twin_out!r}")


# -- decoding ----------------------------------------------------------------------------------

def read_graph(r: cf.Reader) -> GraphArrays:
    if r.byte() % 2 == cf.GRAPH_RAW:
        rows = lambda: [r.sints(8) for _ in range(r.length(cf.MAX_NODES))]  # noqa: E731
        return GraphArrays(op=r.sints(), prioritized=r.sints(), inputs=rows(), users=rows(),
                           names=r.texts(cf.MAX_NODES), tags=r.sints(), roles=r.sints(),
                           targets=r.sints(), debug_handles=r.sints(), fake_vals=r.sints(),
                           out_args=r.sints(), out_kinds=r.sints(), out_targets=r.sints())
    return read_consistent_graph(r)


def read_consistent_graph(r: cf.Reader) -> GraphArrays:
    """A graph whose users match its inputs: it gets past the checks into the algorithm."""
    n = r.length(cf.MAX_NODES)
    n_tags = r.length(cf.MAX_TAGS)
    op, prio, inputs, names, tags, roles, targets, dh, fake = ([] for _ in range(9))
    for _ in range(n):
        op.append(r.uint() % 6)
        ins: List[int] = []
        for _ in range(r.length(cf.MAX_INPUTS)):
            x = r.uint() % n
            if x not in ins:
                ins.append(x)
        inputs.append(ins)
        names.append(r.text())
        t = r.sint()
        tags.append(t if -2 <= t < n_tags else -1)
        roles.append(r.uint() % 5)
        targets.append(r.sint())
        dh.append(r.sint())
        fake.append(r.byte() & 1)
        prio.append(r.byte() & 1)
    takes = [set(ins) for ins in inputs]
    users = []
    for x in range(n):  # the given order of the valid users, then the missing ones
        order = []
        for _ in range(r.length(cf.MAX_LIST)):
            u = r.uint() % n
            if x in takes[u] and u not in order:
                order.append(u)
        listed = set(order)
        order.extend(u for u in range(n) if x in takes[u] and u not in listed)
        users.append(order)
    out_args, out_kinds, out_targets = [], [], []
    for _ in range(r.length(cf.MAX_OUTPUTS)):
        x = r.sint()
        out_args.append(x if n and op[n - 1] == 5 and x in takes[n - 1] else -1)
        out_kinds.append(r.uint() % 3)
        out_targets.append(r.sint())
    if not (n and op[n - 1] == 5):
        out_args, out_kinds, out_targets = [], [], []
    return GraphArrays(op=op, prioritized=prio, inputs=inputs, users=users, names=names, tags=tags,
                       roles=roles, targets=targets, debug_handles=dh, fake_vals=fake,
                       out_args=out_args, out_kinds=out_kinds, out_targets=out_targets)


# -- entry points ----------------------------------------------------------------------------------

def fuzz_group_by_tag(r: cf.Reader) -> None:
    tags, n_tags = r.sints(), r.sint()
    same("group_by_tag", outcome(_core.group_by_tag, tags, n_tags),
         outcome(twin_grouping.group_by_tag, tags, n_tags))


def fuzz_contract(r: cf.Reader) -> None:
    args = [r.sints() for _ in range(6)] + [bool(r.byte() & 1)]
    same("find_contract_violation",
         outcome(lambda *a: tuple(_core.find_contract_violation(*a)), *args),
         outcome(twin_contract.find_contract_violation, *args))


def fuzz_first_difference(r: cf.Reader) -> None:
    args = [r.sints() for _ in range(8)]
    same("first_difference", outcome(_core.first_difference, *args),
         outcome(twin_identity.first_difference, *args))


def fuzz_names(r: cf.Reader) -> None:
    initial, candidates = r.texts(32), r.texts(32)

    def run(namespace_cls, snake_case):
        ns = namespace_cls(initial)
        return [ns.create(c) for c in candidates], [snake_case(c) for c in candidates]

    same("names", outcome(run, _core.Namespace, _core.snake_case),
         outcome(run, twin_namespace.Namespace, twin_namespace.snake_case))


def sim_state(sim) -> tuple:
    n = len(sim.op)
    return (list(sim.order()), [sim.names[i] for i in range(n)],
            [list(sim.users[i]) for i in range(n)], list(sim.tags), list(sim.alive),
            list(sim.out_args), sim.lowered_count, [vars(p) for p in sim.partitions])


def plan_duplicate(sim, g, n_tags: int):
    """``plan_graph``'s constant duplication through the fine-grained calls: None, or the
    tagged user input among the candidates that stops it."""
    for order in fl_plan.duplication_order(g, n_tags):
        touched = []
        for c in order:
            if g.roles[c] not in OWNABLE_ROLES:
                return ("tagged user input", c)
            touched.append(c)
            touched.extend(sim.duplicate_constant(c))
        for c in touched:
            sim.retag_constant(c)
    return None


def plan_fuse_all(sim, n_tags: int, single: bool) -> list:
    """``plan._fuse_all`` with a record of each step instead of typed errors."""
    steps = []
    sim.renumber()
    groups = fl_plan.group_by_tag(list(sim.tags), n_tags)
    for t in range(n_tags):
        members = sorted((m for m in groups[t] if sim.alive[m]), key=sim.pos.__getitem__)
        if not members:
            continue
        path = sim.find_cycle(members)
        steps.append(path)
        inside = set(members)
        if path is not None or not any(u not in inside for m in members for u in sim.users[m]):
            continue
        steps.append(vars(sim.fuse(t, members)))
        if single:
            sim.insert_delegate(len(sim.partitions) - 1)
    return steps


def read_sim_ops(r: cf.Reader) -> list:
    ops = []
    for _ in range(r.length(cf.MAX_OPS)):
        code = r.uint() % cf.N_SIM_OPS
        if code in (cf.OP_MEMBERS, cf.OP_DUPLICATE, cf.OP_RETAG, cf.OP_INSERT_DELEGATE,
                    cf.OP_READ_VIEWS):
            ops.append((code, r.sint()))
        elif code == cf.OP_FIND_CYCLE:
            ops.append((code, r.sints(cf.MAX_NODES)))
        elif code == cf.OP_FUSE:
            ops.append((code, r.sint(), r.sints(cf.MAX_NODES)))
        elif code == cf.OP_PLAN_FUSE_ALL:
            ops.append((code, bool(r.byte() & 1)))
        else:
            ops.append((code,))
    return ops


def apply_op(sim, op: tuple, g: GraphArrays, tag_names: List[str]):
    code = op[0]
    n_tags = len(tag_names)
    if code == cf.OP_ORDER:
        return sim.order()
    if code == cf.OP_RENUMBER:
        return sim.renumber()
    if code == cf.OP_MEMBERS:
        return sim.members(op[1])
    if code == cf.OP_DUPLICATE:
        return sim.duplicate_constant(op[1])
    if code == cf.OP_RETAG:
        return sim.retag_constant(op[1])
    if code == cf.OP_FIND_CYCLE:
        return sim.find_cycle(op[1])
    if code == cf.OP_FUSE:
        return vars(sim.fuse(op[1], op[2]))
    if code == cf.OP_LEGALIZE:
        return sim.legalize()
    if code == cf.OP_INSERT_DELEGATE:
        return sim.insert_delegate(op[1])
    if code == cf.OP_MAX_DH:
        return sim.max_debug_handle()
    if code == cf.OP_READ_VIEWS:
        i = op[1] if -2**62 < op[1] < 2**62 else 0  # the core's views take int64
        return (sim.names[i], sim.tags[i], list(sim.users[i]), list(sim.inputs[i]), sim.pos[i])
    if code == cf.OP_PLAN_FUSE_ALL:
        return plan_fuse_all(sim, n_tags, op[1])
    if code == cf.OP_PLAN_DUPLICATE:
        return plan_duplicate(sim, g, len(tag_names))
    raise AssertionError(code)


def fuzz_simulator(r: cf.Reader) -> None:
    tag_names = r.texts(cf.MAX_TAGS)
    is_submodule = bool(r.byte() & 1)
    g = read_graph(r)
    ops = read_sim_ops(r)
    core_sim = outcome(_core.FusionSimulator, g, tag_names, is_submodule, None)
    twin_sim = outcome(TwinSimulator, g, tag_names, is_submodule, None)
    if core_sim[0] == "error" and issubclass(core_sim[1], _core.Unsupported):
        return
    status = lambda o: ("ok",) if o[0] == "ok" else o  # noqa: E731
    same("FusionSimulator", status(core_sim), status(twin_sim))
    if core_sim[0] == "error":
        return
    sims = (core_sim[1], twin_sim[1])
    for k, op in enumerate(ops):
        results = [outcome(apply_op, sim, op, g, tag_names) for sim in sims]
        same(f"step {k} {op[:1]}", *results)
    same("final state", ("ok", sim_state(sims[0])), ("ok", sim_state(sims[1])))


def core_plan_graph(g, tag_names, options) -> PlanResult:
    """The core's plan_graph, its plain data made a PlanResult (as fastlower.core.plan does)."""
    return PlanResult.from_core(_core.plan_graph(g, tag_names, options))


def plan_outcome(plan_graph, g, tag_names, options) -> tuple:
    """A PlanResult compared by stop kind and location (codes, node ids) and final state."""
    result = plan_graph(g, tag_names, options)
    stops = [None if s is None else (s.kind, s.stage, s.pid, s.tag, list(s.nodes))
             for s in (result.stop, result.insert_stop)]
    return (*stops, dataclasses.asdict(result.graph))


def fuzz_plan_graph(r: cf.Reader) -> None:
    """The coarse call: constant duplication, rule placement, fuse-all, delegates."""
    tag_names = r.texts(cf.MAX_TAGS)
    is_submodule = bool(r.byte() & 1)
    g = read_graph(r)
    insertion, validate = r.byte() % 2, bool(r.byte() & 1)
    no_copy = r.sints() if r.byte() & 1 else [r.byte() & 1 for _ in g.op]
    if r.byte() & 1:  # the order plan.py computes (from arrays that may be malformed)
        order = outcome(fl_plan.duplication_order, g, len(tag_names))
        if order[0] == "error":
            return
        order = order[1]
    else:
        order = [r.sints(8) for _ in range(r.length(cf.MAX_TAGS))]
    options = PlanOptions(is_submodule=is_submodule, delegate_insertion=insertion,
                          duplication_order=order, no_copy=no_copy,
                          validate_at_first_duplication=validate)
    same("plan_graph", outcome(plan_outcome, core_plan_graph, g, tag_names, options),
         outcome(plan_outcome, twin_plan.plan_graph, g, tag_names, options))


ENTRY_POINTS = {
    cf.GROUP_BY_TAG: fuzz_group_by_tag,
    cf.CONTRACT: fuzz_contract,
    cf.FIRST_DIFFERENCE: fuzz_first_difference,
    cf.NAMES: fuzz_names,
    cf.SIMULATOR: fuzz_simulator,
    cf.PLAN_GRAPH: fuzz_plan_graph,
}


def TestOneInput(data: bytes) -> None:  # noqa: N802 - atheris' name
    r = cf.Reader(atheris.FuzzedDataProvider(data))
    ENTRY_POINTS[r.uint() % cf.N_ENTRY_POINTS](r)


def main() -> None:
    atheris.Setup(sys.argv, TestOneInput)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
