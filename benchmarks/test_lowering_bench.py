"""Lowering benchmarks: the reference ``to_backend`` vs ``fastlower.to_backend``.

Cases (ids ``<setup>-L<layers>-<impl>``), run size by size, reference first:

* ``xnnpack``   (a) ``XnnpackPartitioner()`` + the real XNNPACK backend;
* ``pretagged`` (b) XNNPACK's tags re-applied by :class:`PretaggedPartitioner`
  (learnt once per size, outside the timings) + :class:`FastlowerBenchNoopBackend`;
* ``many``      every call_function node of the ``--many-layers`` graph its own
  partition (>= 500 partitions at 8 layers) + the no-op backend;
* ``chain``     chained lowering: XNNPACK's ``add`` partitions first, then
  ``XnnpackPartitioner()`` on the program that already holds them;
* ``floor``     the graph-copy floor: ``copy.deepcopy(graph_module)`` and
  ``Graph.graph_copy`` + ``GraphModule`` of the same Edge graph.

Every timed call gets a fresh deep copy of a pristine Edge program and a new
partitioner, both made in pytest-benchmark's ``setup`` (outside the timing).
"""

from __future__ import annotations

import copy
import statistics
import time
from typing import Dict, List, Tuple

import pytest
import torch

import benchlib
from benchlib import STOPWATCH, PeakRss

IMPLS = ("reference", "fastlower")


def _cases(config) -> List[Tuple[str, int, str]]:
    layers = sorted({int(x) for x in config.getoption("--bench-layers").split(",") if x.strip()})
    many = config.getoption("--many-layers")
    setups = {s.strip() for s in config.getoption("--bench-setups").split(",")}
    wanted_impls = {s.strip() for s in config.getoption("--bench-impls").split(",")}
    impls = [i for i in IMPLS if i in wanted_impls]
    cases = []

    def add_many():
        if "many" in setups and many:
            cases.extend(("many", many, impl) for impl in impls)

    many_done = False
    for n in layers:
        if many and not many_done and n > many:
            add_many()
            many_done = True
        if "floor" in setups:
            cases += [("floor", n, "deepcopy"), ("floor", n, "graph_copy")]
        for setup in ("xnnpack", "pretagged", "chain"):
            if setup in setups:
                cases.extend((setup, n, impl) for impl in impls)
        if n == many and not many_done:
            add_many()
            many_done = True
    if not many_done:
        add_many()
    return cases


def pytest_generate_tests(metafunc):
    if "case" in metafunc.fixturenames:
        cases = _cases(metafunc.config)
        metafunc.parametrize("case", cases, ids=[f"{s}-L{n}-{i}" for s, n, i in cases])


def _rounds(setup: str, n: int, impl: str, opts) -> int:
    if setup == "floor":
        return max(opts["rounds"], 5)
    cheap = impl == "fastlower" and setup in ("pretagged", "many")
    if cheap or (n <= 4 and setup != "many"):
        return opts["rounds"]
    return opts["slow_rounds"]


def _implementation(impl: str):
    if impl == "reference":
        from executorch.exir.backend.backend_api import to_backend
        return to_backend
    import fastlower
    return fastlower.to_backend


def _core_info() -> Dict[str, object]:
    import fastlower
    import fastlower.core.plan

    core = fastlower.core.plan.backend_module()
    return {"core": "native" if core is not None else "python-twin",
            "native_core": core is not None, "fastlower_file": fastlower.__file__}


def _bench_floor(benchmark, programs, n: int, impl: str, rounds: int) -> None:
    program = programs.pristine(n)
    gm = program.graph_module

    def deepcopy_gm():
        return copy.deepcopy(gm)

    def graph_copy_gm():
        g = torch.fx.Graph()
        out = g.graph_copy(gm.graph, {})
        g.output(out)
        return torch.fx.GraphModule(gm, g)

    fn = deepcopy_gm if impl == "deepcopy" else graph_copy_gm
    benchmark.pedantic(fn, rounds=rounds, iterations=1, warmup_rounds=1)
    benchmark.extra_info.update(setup="floor", layers=n, impl=impl,
                                nodes=benchlib.call_function_count(program), partitions=0)


def test_bench(benchmark, case, programs, session_results, bench_options, warmed_up):
    setup, n, impl = case
    benchmark.group = f"{setup}-L{n}"
    rounds = _rounds(setup, n, impl, bench_options)
    if setup == "floor":
        _bench_floor(benchmark, programs, n, impl, rounds)
        return
    limit = bench_options["skip_ref_above"]
    if impl == "reference" and limit is not None and n > limit:
        pytest.skip(f"--skip-large-reference={limit}")

    pristine = programs.pristine(n)
    if setup == "xnnpack":
        make_partitioner = benchlib.timed_xnnpack_partitioner
    elif setup == "chain":
        make_partitioner = benchlib.chained_xnnpack
    else:
        tags = programs.tags(n, "xnnpack" if setup == "pretagged" else "single")
        label = f"{setup}-L{n}"
        make_partitioner = lambda: benchlib.PretaggedPartitioner(tags, label)  # noqa: E731
    lower = _implementation(impl)
    held: List[object] = []
    per_round: List[Dict[str, object]] = []

    def make_args():
        held.clear()  # drop the previous round's output before measuring the next
        program = programs.fresh(n)
        partitioner = make_partitioner()
        PeakRss.prepare()
        STOPWATCH.reset()
        return (program, partitioner), {}

    def run(program, partitioner):
        t = time.perf_counter()
        with PeakRss() as rss:
            if isinstance(partitioner, benchlib.Chain):
                result = program
                for step in partitioner:
                    result = lower(result, step)
            else:
                result = lower(program, partitioner)
        seconds = time.perf_counter() - t
        info = {"seconds": seconds, "rss_mib": rss.growth_mib, "rss_method": rss.method,
                "hooks": dict(STOPWATCH.seconds)}
        if impl == "fastlower":
            import fastlower
            info["phases"] = dict(fastlower.last_report().phases)
        per_round.append(info)
        held.append(result)

    benchmark.pedantic(run, setup=make_args, rounds=rounds, iterations=1, warmup_rounds=0)

    result = held[0]
    partitions = len(benchlib.lowered_modules(result))
    fp = benchlib.fingerprint(result)
    held.clear()
    times = [r["seconds"] for r in per_round]
    extra = dict(
        setup=setup, layers=n, impl=impl, rounds=rounds,
        nodes=benchlib.call_function_count(pristine), partitions=partitions,
        time_min_s=min(times), times_s=times,
        peak_rss_growth_mib=max(r["rss_mib"] for r in per_round),
        peak_rss_growth_mib_rounds=[r["rss_mib"] for r in per_round],
        rss_method=per_round[0]["rss_method"],
        export_s=programs.export_seconds.get(n),
    )
    for key in ("xnnpack_preprocess", "partition", "verifier"):
        vals = [r["hooks"].get(key, 0.0) for r in per_round]
        extra[f"{key}_s"] = statistics.mean(vals)
    # the same split of the round the report's time comes from
    fastest = min(per_round, key=lambda r: r["seconds"])
    extra["fastest_round_hooks_s"] = dict(fastest["hooks"])
    extra.update(_core_info())
    if impl == "fastlower":
        phases = {}
        for r in per_round:
            for k, v in r["phases"].items():
                phases.setdefault(k, []).append(v)
        extra["phases_s"] = {k: statistics.mean(v) for k, v in phases.items()}
    key = (setup, n)
    mismatch = ""
    if impl == "reference":
        session_results[key] = {"time_min_s": min(times), "fingerprint": fp,
                                "partitions": partitions,
                                "peak_rss_growth_mib": extra["peak_rss_growth_mib"]}
    elif key in session_results:
        ref = session_results[key]
        extra["ratio"] = ref["time_min_s"] / min(times)
        extra["rss_ratio"] = (ref["peak_rss_growth_mib"] / extra["peak_rss_growth_mib"]
                              if extra["peak_rss_growth_mib"] else None)
        mismatch = benchlib.describe_mismatch(ref["fingerprint"], fp)
        extra["matches_reference"] = not mismatch
        if mismatch:
            extra["mismatch"] = mismatch
    benchmark.extra_info.update(extra)
    if mismatch:
        pytest.fail(f"fastlower's output differs from the reference's ({setup}, {n} layers): "
                    f"{mismatch}")
