"""``fastlower.last_report()``: what was delegated and where the time went."""

import time
import warnings
from typing import List, final

import pytest
import torch
from executorch.exir import to_edge
from executorch.exir.backend.backend_details import BackendDetails, PreprocessResult
from executorch.exir.backend.compile_spec_schema import CompileSpec
from executorch.exir.backend.partitioner import DelegationSpec, Partitioner, PartitionResult
from executorch.exir.dialects._ops import ops as exir_ops
from executorch.exir.lowered_backend_module import get_lowered_submodules

import fastlower
from fastlower.lowering.spec import MethodProgramsPartitionerSpec

PARTITIONER_SLEEP = 0.2
BACKEND_SLEEP = 0.05


@final
class FastlowerReportTestSleepyBackend(BackendDetails):
    """Takes a known minimum time, so the report's attribution can be checked."""

    @staticmethod
    def preprocess(edge_program, compile_specs: List[CompileSpec]) -> PreprocessResult:
        time.sleep(BACKEND_SLEEP)
        return PreprocessResult(processed_bytes=b"sleepy")


class SleepyAddPartitioner(Partitioner):
    """Each ``add`` its own partition, after sleeping."""

    def partition(self, exported_program) -> PartitionResult:
        time.sleep(PARTITIONER_SLEEP)
        spec = DelegationSpec(FastlowerReportTestSleepyBackend.__name__, [])
        tags = {}
        for node in exported_program.graph.nodes:
            if node.op == "call_function" and node.target == exir_ops.edge.aten.add.Tensor:
                tag = f"tag{len(tags)}"
                node.meta["delegation_tag"] = tag
                tags[tag] = spec
        return PartitionResult(tagged_exported_program=exported_program, partition_tags=tags)


class TwoAdds(torch.nn.Module):
    def forward(self, x):
        a = x + 1.0
        b = torch.sin(a)
        return b + 2.0


def _edge_program():
    return to_edge(torch.export.export(TwoAdds(), (torch.randn(3),))).exported_program()


def _call_functions(program) -> int:
    return sum(1 for n in program.graph.nodes if n.op == "call_function")


def _check(report, program, lowered_programs) -> None:
    lowered = [m for p in lowered_programs for _, m, _ in get_lowered_submodules(p.graph_module)]
    assert report.partitions == {FastlowerReportTestSleepyBackend.__name__: 2} == {
        FastlowerReportTestSleepyBackend.__name__: len(lowered)}
    assert report.delegated_nodes == sum(_call_functions(m.original_module) for m in lowered) == 2
    assert report.total_nodes == _call_functions(program) == 3
    assert report.delegated_share == pytest.approx(2 / 3)
    assert list(report.phases) == ["partition+plan", "preprocess", "apply"]
    assert sum(report.phases.values()) == pytest.approx(report.seconds, rel=1e-6, abs=1e-6)
    # sleeps are lower bounds of the attributed times
    assert report.external["partitioner"] >= PARTITIONER_SLEEP
    # both partitions' sleeps, unless preprocess ran them in parallel (fastlower.preprocess)
    backend_sleep = 2 * BACKEND_SLEEP if report.preprocess_runner == "serial" else BACKEND_SLEEP
    assert report.external["backend"] >= backend_sleep
    assert report.phases["partition+plan"] >= report.external["partitioner"]
    assert report.own_seconds == pytest.approx(report.seconds - sum(report.external.values()))
    assert 0 <= report.own_seconds < report.seconds - PARTITIONER_SLEEP - backend_sleep + 1e-9
    text = report.format()
    assert "FastlowerReportTestSleepyBackend: 2" in text
    assert "delegated call_function nodes: 2/3 (66.7%)" in text
    assert f"lowering machinery {report.own_seconds:.3f}s" in text and "partitioner " in text


def test_report_of_a_single_program_lowering():
    program = _edge_program()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = fastlower.to_backend(program, SleepyAddPartitioner())
    _check(fastlower.last_report(), program, [result])


def test_report_of_a_multi_method_lowering():
    programs = {"forward": _edge_program()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        result = fastlower.to_backend(MethodProgramsPartitionerSpec(
            programs, {"forward": SleepyAddPartitioner()}))
    _check(fastlower.last_report(), programs["forward"], list(result.values()))


def test_report_names_the_edge_stages_skipped_retraces_without_a_cache():
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

    import fastlower.cache

    class Relu(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.linear = torch.nn.Linear(4, 4)

        def forward(self, x):
            return torch.relu(self.linear(x))

    program = torch.export.export(Relu(), (torch.randn(2, 4),))
    with fastlower.preprocess.options(cache_dir=None):
        fastlower.cache.to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()])
    report = fastlower.last_report()
    assert report.edge_retraces["skipped"] + report.edge_retraces["run"] == 2, report.edge_retraces
    assert "edge stage: 2 retraces skipped" in report.format()
