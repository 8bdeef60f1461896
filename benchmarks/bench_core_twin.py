"""Planner speed: the pure-Python twin against the C++ core on one random graph.

    .venv/bin/python benchmarks/bench_core_twin.py [--nodes 5000] [--tags 250] [--repeat 3]

Plans the graph with ``fastlower.core.plan.plan_program`` (one ``plan_graph`` call: constant
duplication, grouping, cycle checks, fusion, delegate insertion on the single-program path;
then the multi-method path's delegate insertion in iter_partitions order), once
with the twin and once with ``fastlower._core``, checks both plans agree and
prints the best wall time of each.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import random
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from fastlower.core import plan as fl_plan  # noqa: E402
from fastlower.core.schema import (  # noqa: E402
    DELEGATES_AFTER_FUSING, DELEGATES_WHILE_FUSING, OP_PLACEHOLDER, OWNABLE_ROLES,
)
from fastlower.core.encode import EncodedGraph, Interner  # noqa: E402
from fastlower.core.twin.fusion import FusionSimulator  # noqa: E402
from tests.test_core_twin import DriveConfig, drive, make_graph, make_tag_names  # noqa: E402


def drop_invalid_tags(case) -> None:
    """Untag the tags plan.py would reject (cyclic or output-less partitions)."""
    while True:
        trace, _ = drive(FusionSimulator, case, DriveConfig(True, None))
        bad = {step[1] for step in trace if (step[0] == "find_cycle" and step[2] is not None)
               or step[0] == "no-output"}
        if not bad:
            return
        case.arrays.tags = [-1 if t in bad else t for t in case.arrays.tags]


def plan_once(core, case, single: bool):
    saved = fl_plan._core
    fl_plan._core = core
    try:
        enc = EncodedGraph(graph_module=None, nodes=[], arrays=case.arrays, no_copy=case.no_copy,
                           targets=Interner())
        t0 = time.perf_counter()
        plan = fl_plan.plan_program(
            enc, case.tag_names, DELEGATES_WHILE_FUSING if single else DELEGATES_AFTER_FUSING)
        assert plan.stop is None and plan.after_preprocess is None
        if not single:
            fl_plan.insert_delegates(plan, list(fl_plan.iter_partitions(plan)))
        return time.perf_counter() - t0, plan
    finally:
        fl_plan._core = saved


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--tags", type=int, default=250)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    core = fl_plan.load_core()
    if core is None:
        sys.exit("fastlower._core is not available")
    rng = random.Random(args.seed)
    case = make_graph(rng, args.nodes, args.tags, tag_mode="unique_runs", p_mutation=0.0)
    case.tag_names = make_tag_names(rng, args.tags, fancy=False)
    # broken rules stop planning at once: no shared no_copy constant, no tagged user input
    case.no_copy = [0] * len(case.no_copy)
    a = case.arrays
    a.tags = [-1 if o == OP_PLACEHOLDER and a.roles[i] not in OWNABLE_ROLES else a.tags[i]
              for i, o in enumerate(a.op)]
    drop_invalid_tags(case)
    for single in (True, False):
        times = {}
        plans = {}
        for label, impl in (("twin", None), ("c++", core)):
            best = float("inf")
            for _ in range(args.repeat):
                dt, plans[label] = plan_once(impl, case, single)
                best = min(best, dt)
            times[label] = best
        a, b = (dataclasses.asdict(plans[label].graph) for label in ("twin", "c++"))
        assert a == b, "twin and C++ plans differ"
        n_parts = len(plans["twin"].graph.partitions)
        print(f"{'single' if single else 'multi '}: {args.nodes} nodes, {n_parts} partitions: "
              f"twin {times['twin'] * 1e3:.1f} ms, c++ {times['c++'] * 1e3:.1f} ms, "
              f"speed-up x{times['twin'] / times['c++']:.1f}")


if __name__ == "__main__":
    main()
