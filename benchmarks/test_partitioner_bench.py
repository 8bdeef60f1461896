"""Partitioner benchmarks: ``XnnpackPartitioner().partition()`` with ExecuTorch's
``GroupBasedPartitioner.propose_partitions`` (reference) vs fastlower's native one.

Cases (ids ``<setup>-L<layers>-<impl>``):

* ``xnnpack``: ``XnnpackPartitioner().partition(program)`` on the bundled decoder;
* ``singleop``: ``generate_grouped_partitions_from_list_of_nodes`` with every call_function
  node its own group (8 layers: 521 groups, so the merge phase starts from 521 partitions).

Each call gets a fresh deep copy of the pristine Edge program (made outside the timing).
Recorded per case: partition() seconds, propose_partitions seconds and share, peak RSS
growth (``benchlib.PeakRss``), partitions.  ``test_partitioner_summary`` prints the ratios
and the log-log slope of the native propose_partitions over the layer counts, and writes
``--partition-json`` (default ``partitioner_results.json`` next to this file).

Run: ``flock /tmp/fastlower-heavy.lock python -m pytest benchmarks/test_partitioner_bench.py
-s -p no:cacheprovider --partition-layers 4,8,32,64``.
"""

from __future__ import annotations

import json
import math
import os
import time
from typing import Dict, List, Tuple

import pytest
from executorch.exir.backend.canonical_partitioners import group_partitioner
from tabulate import tabulate

import fastlower.partitioners as fp
from benchlib import PeakRss

IMPLS = ("reference", "native")
RESULTS: Dict[Tuple[str, int, str], Dict[str, float]] = {}
HERE = os.path.dirname(os.path.abspath(__file__))


def pytest_generate_tests(metafunc):
    if "pcase" in metafunc.fixturenames:
        cfg = metafunc.config
        layers = sorted({int(x) for x in cfg.getoption("--partition-layers").split(",")
                         if x.strip()})
        cases = [("xnnpack", n, impl) for n in layers for impl in IMPLS]
        single = cfg.getoption("--partition-singleop-layers")
        if single:
            cases += [("singleop", single, impl) for impl in IMPLS]
        metafunc.parametrize("pcase", cases, ids=[f"{s}-L{n}-{i}" for s, n, i in cases])


class ProposeTimer:
    """Accumulates the time spent in ``GroupBasedPartitioner.propose_partitions``."""

    def __init__(self) -> None:
        self.seconds = 0.0

    def __enter__(self):
        cls = group_partitioner.GroupBasedPartitioner
        self._saved = cls.__dict__["propose_partitions"]
        inner = self._saved

        def timed(partitioner):
            t = time.perf_counter()
            try:
                return inner(partitioner)
            finally:
                self.seconds += time.perf_counter() - t

        cls.propose_partitions = timed
        return self

    def __exit__(self, *exc):
        group_partitioner.GroupBasedPartitioner.propose_partitions = self._saved


def _single_op_groups(program):
    import operator

    groups, producer_group = [], {}
    for node in program.graph.nodes:
        if node.op != "call_function":
            continue
        if node.target is operator.getitem and node.args[0] in producer_group:
            producer_group[node.args[0]].append(node)
            continue
        group = [node]
        producer_group[node] = group
        groups.append(group)
    return groups


def _partition_call(setup: str):
    if setup == "xnnpack":
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

        return lambda program: len(XnnpackPartitioner().partition(program).partition_tags)
    from executorch.exir.backend.canonical_partitioners.pattern_op_partitioner import (
        generate_grouped_partitions_from_list_of_nodes,
    )

    def run(program):
        return len(generate_grouped_partitions_from_list_of_nodes(
            program.graph_module, pattern_list=_single_op_groups(program)))
    return run


def test_partition(benchmark, pcase, programs):
    setup, n_layers, impl = pcase
    call = _partition_call(setup)
    rounds = 1 if impl == "reference" and n_layers > 8 else 3
    samples: List[Dict[str, float]] = []
    call(programs.fresh(1))  # warm-up: XNNPACK builds cached pattern graphs on first use

    def make_args():
        PeakRss.prepare()
        return (programs.fresh(n_layers),), {}

    def run(program):
        context = fp.accelerated() if impl == "native" else fp.reference()
        with context, ProposeTimer() as propose, PeakRss() as rss:
            t = time.perf_counter()
            n_parts = call(program)
            seconds = time.perf_counter() - t
        samples.append({"partition_s": seconds, "propose_s": propose.seconds,
                        "rss_mib": rss.growth_mib, "partitions": n_parts})

    benchmark.pedantic(run, setup=make_args, rounds=rounds, iterations=1)
    best = min(samples, key=lambda s: s["partition_s"])
    best = dict(best, propose_s=min(s["propose_s"] for s in samples),
                rss_mib=max(s["rss_mib"] for s in samples),
                nodes=len(programs.pristine(n_layers).graph.nodes), rss_method=PeakRss().method)
    RESULTS[pcase] = best
    benchmark.extra_info.update(best)
    assert best["partitions"] > 0


def _slope(points: List[Tuple[float, float]]) -> float:
    (x0, y0), (x1, y1) = points[0], points[-1]
    return math.log(y1 / y0) / math.log(x1 / x0)


def test_partitioner_summary(request):
    """Ratios, propose share and the native propose_partitions slope (after all cases)."""
    if not RESULTS:
        pytest.skip("no partitioner case ran")
    rows = []
    for (setup, n, impl), r in sorted(RESULTS.items()):
        if impl != "native":
            continue
        ref = RESULTS.get((setup, n, "reference"))
        rows.append([setup, n, r["nodes"], r["partitions"],
                     ref and f"{ref['partition_s']:.3f}", f"{r['partition_s']:.3f}",
                     ref and f"{ref['partition_s'] / r['partition_s']:.1f}x",
                     ref and f"{ref['propose_s']:.3f}", f"{r['propose_s']:.4f}",
                     ref and f"{ref['propose_s'] / r['propose_s']:.0f}x",
                     ref and f"{ref['propose_s'] / ref['partition_s']:.0%}",
                     f"{r['propose_s'] / r['partition_s']:.1%}",
                     ref and f"{ref['rss_mib']:.1f}", f"{r['rss_mib']:.1f}"])
    headers = ["setup", "layers", "nodes", "partitions", "ref partition s", "native partition s",
               "partition ratio", "ref propose s", "native propose s", "propose ratio",
               "ref propose share",
               "native propose share", "ref RSS MiB", "native RSS MiB"]
    native_points = sorted((n, r["propose_s"]) for (s, n, i), r in RESULTS.items()
                           if s == "xnnpack" and i == "native")
    summary = {"rows": [dict(zip(headers, row)) for row in rows],
               "rss_method": next(iter(RESULTS.values()))["rss_method"]}
    text = tabulate(rows, headers=headers, tablefmt="github")
    if len(native_points) >= 2:
        summary["native_propose_slope"] = {"layers": [native_points[0][0], native_points[-1][0]],
                                           "slope": _slope(native_points)}
        text += (f"\nlog-log slope of native propose_partitions, {native_points[0][0]}->"
                 f"{native_points[-1][0]} layers: {_slope(native_points):.2f}")
    out = (request.config.getoption("--partition-json")
           or os.path.join(HERE, "partitioner_results.json"))
    with open(out, "w") as f:
        json.dump(summary, f, indent=1, default=str)
    print("\n" + text)
