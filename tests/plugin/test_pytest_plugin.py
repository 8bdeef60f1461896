"""fastlower's pytest plugin (``lower_benchmark``) in real pytest runs (``pytester``):
the entry point loads it, ``extra_info`` gets the report, ``check_reference``
compares with the reference, and a pytest-benchmark compare run fails on a
deliberate lowering-time regression."""

import json
import os
from importlib.metadata import entry_points

import pytest


pytest_plugins = ["pytester"]

USER_TEST = '''
import os
import time
from typing import List, final

import torch
from executorch.exir import to_edge
from executorch.exir.backend.backend_details import BackendDetails, PreprocessResult
from executorch.exir.backend.compile_spec_schema import CompileSpec
from executorch.exir.backend.partitioner import DelegationSpec, Partitioner, PartitionResult
from executorch.exir.dialects._ops import ops as exir_ops


@final
class PluginTestBackend(BackendDetails):
    @staticmethod
    def preprocess(edge_program, compile_specs: List[CompileSpec]) -> PreprocessResult:
        return PreprocessResult(processed_bytes=b"plugin-test")


class AddPartitioner(Partitioner):
    """Each add its own partition. PLUGIN_TEST_SLEEP makes it slower (the regression)."""

    def partition(self, program) -> PartitionResult:
        time.sleep(float(os.environ.get("PLUGIN_TEST_SLEEP", "0")))
        spec = DelegationSpec(PluginTestBackend.__name__, [])
        tags = {}
        for node in program.graph.nodes:
            if node.op == "call_function" and node.target == exir_ops.edge.aten.add.Tensor:
                node.meta["delegation_tag"] = tag = f"tag{len(tags)}"
                tags[tag] = spec
        return PartitionResult(tagged_exported_program=program, partition_tags=tags)


class Model(torch.nn.Module):
    def forward(self, x):
        return torch.sin(x + 1.0) + 2.0


def test_lowering_time(lower_benchmark):
    program = to_edge(torch.export.export(Model(), (torch.randn(4),))).exported_program()
    lowered = lower_benchmark(program, AddPartitioner, check_reference=True)
    assert lower_benchmark.report.partitions == {"PluginTestBackend": 2}
    assert "executorch_call_delegate" in lowered.graph_module.code
'''


def test_the_entry_point_names_the_plugin():
    names = {ep.name: ep.value for ep in entry_points(group="pytest11")}
    assert names.get("fastlower") == "fastlower.frontends.pytest_plugin"


@pytest.fixture(autouse=True)
def _not_an_xdist_worker(monkeypatch):
    """The inner pytest is a plain run even when this one runs under pytest-xdist:
    pytest-benchmark reads ``PYTEST_XDIST_WORKER`` from the environment and would
    otherwise disable itself there."""
    for name in [n for n in os.environ if n.startswith("PYTEST_XDIST_")]:
        monkeypatch.delenv(name)


def _saved_runs(pytester):
    return sorted(pytester.path.glob(".benchmarks/*/*.json"))


def _one_saved_benchmark(pytester, *options):
    """Runs the inner pytest with ``options`` and autosave; its one saved benchmark."""
    result = pytester.runpytest_subprocess("--benchmark-autosave", *options, "-q")
    result.assert_outcomes(passed=1)
    [saved] = _saved_runs(pytester)
    return json.loads(saved.read_text())["benchmarks"][0]


def test_benchmark_records_the_report_and_compare_fails_on_a_regression(pytester, monkeypatch):
    pytester.makepyfile(test_user_model=USER_TEST)
    monkeypatch.delenv("PLUGIN_TEST_SLEEP", raising=False)
    bench = _one_saved_benchmark(pytester, "--lower-rounds=5")
    assert bench["stats"]["rounds"] == 5
    info = bench["extra_info"]["fastlower"]
    assert list(info["phases"]) == ["partition+plan", "preprocess", "apply"]
    assert info["coverage"]["delegated_nodes"] == 2 and info["coverage"]["total_nodes"] == 3
    assert info["partitions"] == {"PluginTestBackend": 2}
    assert info["same_as_reference"] is True
    assert (info["cache_hits"], info["cache_misses"]) == (0, 0)

    # the same lowering, slower in the partitioner by twice the baseline's median (at least
    # 0.3 s, so a loaded machine's slow baseline still leaves a regression over 10%)
    monkeypatch.setenv("PLUGIN_TEST_SLEEP", str(max(0.3, 2 * bench["stats"]["median"])))
    slow = pytester.runpytest_subprocess("--benchmark-compare=0001",
                                         "--benchmark-compare-fail=median:10%",
                                         "--lower-rounds=3", "-q")
    assert slow.ret != 0
    output = slow.stdout.str() + slow.stderr.str()
    assert "PerformanceRegression: Performance has regressed." in output
    assert "test_lowering_time (0001_unversi) - Field 'median' has failed " \
           "PercentageRegressionCheck" in output


CACHED_TEST = USER_TEST.replace(
    "lowered = lower_benchmark(program, AddPartitioner, check_reference=True)",
    "lowered = lower_benchmark(program, AddPartitioner, warmup_rounds=1,\n"
    "                              use_cache=os.environ.get('USE_CACHE') == '1')")


@pytest.mark.parametrize("use_cache, hits", [pytest.param(False, 0, marks=pytest.mark.slow),
                                             (True, 2)])
def test_timed_rounds_use_no_cache_unless_asked(use_cache, hits, pytester, monkeypatch,
                                                tmp_path):
    """With FASTLOWER_CACHE_DIR set, the warm-up round would fill the cache and every timed
    round would be a hit: the rounds run without it, unless the test passes use_cache."""
    pytester.makepyfile(test_user_model=CACHED_TEST)
    monkeypatch.setenv("FASTLOWER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("USE_CACHE", "1" if use_cache else "0")
    bench = _one_saved_benchmark(pytester, "--fastlower-rounds=4")
    assert bench["stats"]["rounds"] == 4
    info = bench["extra_info"]["fastlower"]
    assert (info["cache_hits"], info["cache_misses"]) == ((hits, 0) if use_cache else (0, 0))


def test_without_pytest_benchmark_the_fixture_fails_and_says_why(pytester):
    pytester.makepyfile(test_user_model=USER_TEST)
    result = pytester.runpytest_subprocess("-p", "no:benchmark", "-q")
    result.assert_outcomes(errors=1)  # the fixture fails: an error at the test's setup
    assert "lower_benchmark needs pytest-benchmark" in result.stdout.str()


def test_under_xdist_the_fixture_warns_that_nothing_is_timed(pytester):
    pytester.makepyfile(test_user_model=USER_TEST)
    result = pytester.runpytest_subprocess("-n", "1", "-q", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    output = result.stdout.str()
    assert "XdistBenchmarkWarning" in output and "the rounds are not timed" in output
