"""The edge stage of ``to_edge_transform_and_lower`` (ATen to Edge, before ``to_backend``):
ExecuTorch's ``_gen_edge_manager_for_partitioners`` against fastlower's (the retraces
that provably change nothing skipped), in the same session.

``pytest benchmarks/test_edge_stage_bench.py [--edge-layers 6]``: ExecuTorch's Llama
(the export_llm model class, dim 64, static shapes: with symbolic sizes fastlower skips
nothing) with each of XNNPACK's two
partitioner set-ups; each call gets a deep copy of the exported program (made outside
the timing) and new partitioners. After timing, the two results are compared
(``fastlower.in_process.edge.verify``); a difference fails the fastlower case. ``extra_info``:
retraces skipped and run, and on the fastlower case the ratio to the reference.
"""

from __future__ import annotations

import copy

import pytest

from edge_stage_growth import _program

SETUPS = ("xnnpack", "dq+xnnpack")
_RESULTS: dict = {}


def _layers(config) -> list:
    return [int(x) for x in config.getoption("--edge-layers").split(",")]


def pytest_generate_tests(metafunc):
    if "edge_case" in metafunc.fixturenames:
        cases = [(layers, setup, impl) for layers in _layers(metafunc.config)
                 for setup in SETUPS for impl in ("reference", "fastlower")]
        metafunc.parametrize("edge_case", cases, ids=[f"L{c[0]}-{c[1]}-{c[2]}" for c in cases])


_ATEN: dict = {}


def _partitioners(setup: str) -> list:
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import (
        XnnpackDynamicallyQuantizedPartitioner, XnnpackPartitioner,
    )

    if setup == "xnnpack":
        return [XnnpackPartitioner()]
    return [XnnpackDynamicallyQuantizedPartitioner(), XnnpackPartitioner()]


def test_edge_stage(benchmark, edge_case):
    from executorch.exir import EdgeCompileConfig
    from executorch.exir.program._program import _gen_edge_manager_for_partitioners

    from fastlower.in_process.edge.decompose import SKIPPED, gen_edge_manager_for_partitioners
    from fastlower.in_process.edge.verify import first_difference

    layers, setup, impl = edge_case
    aten = _ATEN.setdefault(layers, _program(layers, 64))
    function = (_gen_edge_manager_for_partitioners if impl == "reference"
                else gen_edge_manager_for_partitioners)
    made = []

    def setup_args():
        return ({"forward": _partitioners(setup)}, {"forward": copy.deepcopy(aten)},
                EdgeCompileConfig(), None, False), {}

    def run(*args):
        made.append(function(*args))

    benchmark.pedantic(run, setup=setup_args, rounds=3, iterations=1, warmup_rounds=1)
    _RESULTS[(layers, setup, impl)] = (benchmark.stats.stats.min, made[-1])
    if impl == "fastlower":
        benchmark.extra_info.update(skipped=SKIPPED.skipped, run=SKIPPED.run)
        reference = _RESULTS.get((layers, setup, "reference"))
        if reference is not None:
            benchmark.extra_info["ratio"] = reference[0] / benchmark.stats.stats.min
            assert first_difference(reference[1], made[-1]) is None
        else:
            pytest.skip("no reference case in this session to compare with")
