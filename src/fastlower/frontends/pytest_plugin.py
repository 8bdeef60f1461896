"""fastlower's pytest plugin (entry point ``pytest11``: ``fastlower``): lowering-time
regression runs with pytest-benchmark.

The fixture ``lower_benchmark`` lowers a program with a partitioner under
pytest-benchmark's ``benchmark`` and records fastlower's report in the
benchmark's ``extra_info["fastlower"]``: time per phase, time in the partitioner
and the backends, coverage, partitions and preprocess-cache hits::

    def test_lowering_time(lower_benchmark):
        program = to_edge(torch.export.export(MyModel(), inputs)).exported_program()
        lowered = lower_benchmark(program, XnnpackPartitioner, check_reference=True)

Run ``pytest --benchmark-autosave`` once for a baseline, then
``pytest --benchmark-compare --benchmark-compare-fail=median:10%`` fails when the
lowering got more than 10% slower. ``check_reference=True`` also lowers the same
program with ExecuTorch's reference ``to_backend`` (once, outside the timing)
and fails unless both give the same graph and the same ``.pte`` bytes.

The timed rounds use no preprocess cache (a warm-up round would otherwise fill it
and every timed round would measure a hit), unless the test passes
``use_cache=True``. ``--fastlower-rounds N`` (alias ``--lower-rounds``) sets the
rounds. pytest-benchmark turns itself off under pytest-xdist (``-n``); the fixture
warns (:class:`XdistBenchmarkWarning`) when a run has both, as such a run measures
nothing.

Laid out like pytest-benchmark's own plugin: options in ``pytest_addoption``,
the fixture in this module, the work in a small class. Nothing heavy is
imported until the fixture is used, so the plugin costs nothing in other runs.
"""

from __future__ import annotations

import copy
import warnings
from typing import TYPE_CHECKING, Any, Callable, Dict, Optional, Union

import pytest

if TYPE_CHECKING:  # the plugin loads in every pytest run: no torch at import
    from ..report.document import LoweringReport


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("fastlower", "fastlower lowering benchmarks")
    group.addoption("--fastlower-rounds", "--lower-rounds", dest="fastlower_rounds", type=int,
                    default=3, metavar="N",
                    help="rounds of each lower_benchmark (default 3; pytest-benchmark's "
                         "statistics and --benchmark-compare-fail use them)")


class XdistBenchmarkWarning(pytest.PytestWarning):
    """lower_benchmark under pytest-xdist: pytest-benchmark measures nothing there."""


def _under_xdist(config: pytest.Config) -> bool:
    """Whether this is an xdist worker (or a run that starts them)."""
    if getattr(config, "workerinput", None) is not None:
        return True
    return bool(getattr(config.option, "numprocesses", None))


class LowerBenchmark:
    """Callable fixture value: ``lower_benchmark(program, partitioner, ...)``."""

    def __init__(self, benchmark: Any, rounds: int) -> None:
        self.benchmark = benchmark
        self.rounds = rounds
        self.report: Optional[LoweringReport] = None

    def __call__(self, program: Any, partitioner: Union[Any, Callable[[], Any]], *,
                 check_reference: bool = False, rounds: Optional[int] = None,
                 warmup_rounds: int = 0, use_cache: bool = False) -> Any:
        """Lower ``program`` (an Edge ``ExportedProgram``) with fastlower, timed.

        ``partitioner`` is a ``Partitioner`` or a callable making one (a class):
        a callable gives each round a fresh partitioner. The rounds use no preprocess
        cache unless ``use_cache``. Returns the lowered program of the last round;
        ``self.report`` is its report.
        """
        from executorch.exir.backend.partitioner import Partitioner

        from ..lowering.api import lower_with_report
        from ..preprocess import options

        make = (lambda: partitioner) if isinstance(partitioner, Partitioner) else partitioner
        reports = []

        def lower_once():
            # warnings go to pytest's own capture (no filter of ours: it would be process-wide);
            # an empty cache_dir is no cache, whatever FASTLOWER_CACHE_DIR says
            with options() if use_cache else options(cache_dir=""):
                result, report = lower_with_report(program, make())
            reports.append(report)
            return result

        result = self.benchmark.pedantic(lower_once, rounds=rounds or self.rounds, iterations=1,
                                         warmup_rounds=warmup_rounds)
        self.report = reports[-1]
        info = extra_info(self.report)
        if check_reference:
            info["same_as_reference"] = _check_reference(program, make, result)
        self.benchmark.extra_info["fastlower"] = info
        return result


def extra_info(report: Any) -> Dict[str, Any]:
    """The JSON-ready part of a report that a benchmark run keeps."""
    cov = report.coverage
    hits = [p.cache_hit for p in report.partition_records]
    return {
        "phases": dict(report.phases),
        "external": dict(report.external),
        "own_seconds": report.own_seconds,
        "partitions": dict(report.partitions),
        "coverage": {"delegated_nodes": cov.delegated_nodes, "total_nodes": cov.total_nodes,
                     "node_share": cov.node_share, "delegated_ops": cov.delegated_ops,
                     "total_ops": cov.total_ops, "op_share": cov.op_share},
        "cache_hits": sum(1 for h in hits if h is True),
        "cache_misses": sum(1 for h in hits if h is False),
    }


def _pte(program: Any) -> bytes:
    from executorch.exir import EdgeCompileConfig, EdgeProgramManager

    manager = EdgeProgramManager({"forward": program},
                                 compile_config=EdgeCompileConfig(_check_ir_validity=False))
    return bytes(manager.to_executorch().buffer)


def _check_reference(program: Any, make: Callable[[], Any], ours: Any) -> bool:
    """Lower with the reference and fail the test unless graph and ``.pte`` bytes match."""
    from ..patch import reference_of

    # ExecuTorch's own function, even where fastlower.patch routes to_backend to fastlower
    reference_to_backend = reference_of("to_backend")
    # the reference edits its input's constants: give it its own copy
    theirs = reference_to_backend(copy.deepcopy(program), make())
    if theirs.graph_module.code != ours.graph_module.code:
        pytest.fail("fastlower's lowered graph differs from the reference's", pytrace=False)
    if _pte(copy.deepcopy(ours)) != _pte(theirs):
        pytest.fail("fastlower's .pte bytes differ from the reference's", pytrace=False)
    return True


@pytest.fixture
def lower_benchmark(request: pytest.FixtureRequest) -> LowerBenchmark:
    """Lower a program under pytest-benchmark's ``benchmark``; see the module doc."""
    try:
        benchmark = request.getfixturevalue("benchmark")
    except pytest.FixtureLookupError:
        pytest.fail("lower_benchmark needs pytest-benchmark, which is not installed "
                    "(pip install pytest-benchmark): without it nothing is measured",
                    pytrace=False)
    config = request.config
    if _under_xdist(config):
        warnings.warn(XdistBenchmarkWarning(
            "lower_benchmark runs under pytest-xdist (-n), where pytest-benchmark disables "
            "itself: the rounds are not timed. Run the benchmarks with -p no:xdist or -n 0."),
            stacklevel=2)
    return LowerBenchmark(benchmark, config.getoption("fastlower_rounds"))
