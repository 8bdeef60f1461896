"""Pools start the costliest partition first, the parent primes a backend with its cheapest;
results stay in graph order."""

import os
from concurrent.futures import ThreadPoolExecutor

import torch
from executorch.exir import EdgeCompileConfig, to_edge

import fastlower
import fastlower.preprocess as pp
from fastlower.preprocess.jobs import BYTES_PER_NODE, estimated_cost, longest_first

from .helpers import LinearPartitioner, delegates, fingerprint, warm_up_backend

# widths of a chain of linears: partitions 1 to 3 have one node more than 0 (their
# input is made inside the graph, 0's is the program's); of those, 1 (8 -> 256) owns
# the most weight bytes, then 2 (256 -> 8)
WIDTHS = (8, 8, 256, 8, 8)
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
    assert costs[0][1] == costs[1][1] == len(programs[0].graph.nodes)
    assert costs[1][2] - costs[0][2] == (400 * 4 + 400 - 4 * 4 - 4) * 4
    assert costs[1][0] == costs[1][1] + costs[1][2] / BYTES_PER_NODE
    assert longest_first([_Job(p) for p in programs]) == [1, 0]
    assert longest_first([_Job(programs[0])] * 3) == [0, 1, 2]  # ties: graph order
    bigger_graph = torch.export.export(torch.nn.Sequential(small, torch.nn.ReLU(), small),
                                       (torch.randn(1, 4),))
    # a few more nodes outweigh a few KB ...
    assert longest_first([_Job(programs[1]), _Job(bigger_graph)]) == [1, 0]
    # ... and a weight of many node-equivalents outweighs them (the output projection of
    # an LLM's vocabulary against a block's small linears)
    huge = torch.nn.Linear(1024, 16 * BYTES_PER_NODE // (1024 * 4))  # 16 node-equivalents
    huge_program = torch.export.export(huge, (torch.randn(1, 1024),))
    assert longest_first([_Job(bigger_graph), _Job(huge_program)]) == [1, 0]


# its own per-process cache: other tests' backends may have warmed theirs
OrderTestWarmUpBackend = warm_up_backend("OrderTestWarmUpBackend", __name__)


class ReluFirstChain(torch.nn.Module):
    """relu before each linear: every partition has the same nodes (relu, permute, addmm),
    so the weight bytes rank them: 0 (8 -> 256), 1 (256 -> 8), then 2 and 3 (8 -> 8)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.lins = torch.nn.ModuleList(torch.nn.Linear(a, b)
                                        for a, b in zip((8, 256, 8, 8), (256, 8, 8, 8)))

    def forward(self, x):
        for lin in self.lins:
            x = lin(torch.relu(x))
        return x


def test_the_primer_is_the_cheapest_partition():
    """The backend's first preprocess in a process runs here before the fork, while the
    other cores wait: the cheapest partition (the first of the two smallest) does it."""
    aten = torch.export.export(ReluFirstChain(), (torch.randn(2, 8),))
    program = to_edge(aten, compile_config=EdgeCompileConfig(_check_ir_validity=False)
                      ).exported_program()
    assert not OrderTestWarmUpBackend.warm
    with pp.options(workers=2):
        lowered = fastlower.to_backend(program, LinearPartitioner(OrderTestWarmUpBackend))
    ran = [bytes(d[2]).decode().split(":") for d in delegates(lowered)]
    assert [int(pid) == os.getpid() for pid, _ in ran] == [False, False, True, False], ran
    assert [warm for _, warm in ran] == ["True", "True", "False", "True"], ran
    assert fastlower.last_report().preprocess_runner == "fork pool, 2 workers"
