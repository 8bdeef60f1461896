"""Pools start the costliest partition first; results stay in graph order."""

from concurrent.futures import ThreadPoolExecutor

import torch
from executorch.exir import EdgeCompileConfig, to_edge

import fastlower
import fastlower.preprocess as pp
from fastlower.preprocess.jobs import estimated_cost, longest_first

from .helpers import LinearPartitioner, fingerprint

# widths of a chain of linears: partition 1 (8 -> 4096) owns the most weight bytes,
# then 2 (4096 -> 8); 3 has the bytes of 0 and one node more (its input is made
# inside the graph, 0's is the program's)
WIDTHS = (8, 8, 4096, 8, 8)
COSTLIEST_FIRST = ["tag1", "tag2", "tag3", "tag0"]


class Chain(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.lins = torch.nn.ModuleList(torch.nn.Linear(a, b) for a, b in zip(WIDTHS, WIDTHS[1:]))

    def forward(self, x):
        for lin in self.lins:
            x = torch.relu(lin(x))
        return x


def _chain():
    aten = torch.export.export(Chain(), (torch.randn(2, WIDTHS[0]),))
    return to_edge(aten, compile_config=EdgeCompileConfig(_check_ir_validity=False)
                   ).exported_program()


class RecordingExecutor(ThreadPoolExecutor):
    """One thread, so jobs run in the order they were submitted; records that order."""

    def __init__(self):
        super().__init__(max_workers=1)
        self.submitted = []

    def submit(self, fn, wire, *args, **kwargs):
        self.submitted.append(wire.tag)
        return super().submit(fn, wire, *args, **kwargs)


def test_executor_gets_the_costliest_partition_first():
    serial_program = _chain()
    with pp.options(workers=1):
        serial = fastlower.to_backend(serial_program, LinearPartitioner())
    executor = RecordingExecutor()
    try:
        with pp.options(executor=executor):
            parallel = fastlower.to_backend(_chain(), LinearPartitioner())
    finally:
        executor.shutdown()
    assert executor.submitted == COSTLIEST_FIRST
    report = fastlower.last_report()
    assert report.preprocess_runner == "executor RecordingExecutor"
    # handed back in graph order: the lowered program is the serial one
    assert [r["tag"] for r in report.preprocess_records] == ["tag0", "tag1", "tag2", "tag3"]
    assert fingerprint(parallel) == fingerprint(serial)


class _Job:
    def __init__(self, program):
        self.program = program


def test_cost_counts_nodes_and_constant_bytes():
    small, large = torch.nn.Linear(4, 4), torch.nn.Linear(4, 400)
    programs = [torch.export.export(m, (torch.randn(1, 4),)) for m in (small, large)]
    costs = [estimated_cost(_Job(p)) for p in programs]
    assert costs[1] - costs[0] == (400 * 4 + 400 - 4 * 4 - 4) * 4  # same nodes, more bytes
    assert longest_first([_Job(p) for p in programs]) == [1, 0]
    assert longest_first([_Job(programs[0])] * 3) == [0, 1, 2]  # ties: graph order
