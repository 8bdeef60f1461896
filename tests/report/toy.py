"""A fast toy backend and small programs for the report, CLI and plugin tests."""

from __future__ import annotations

from typing import List, final

import torch
from executorch.exir import to_edge
from executorch.exir.backend.backend_details import BackendDetails, PreprocessResult
from executorch.exir.backend.compile_spec_schema import CompileSpec
from executorch.exir.dialects._ops import ops as exir_ops

from tests.models.control_flow import CondModel
from tests.models.partitioners import TargetsPartitioner


@final
class FastlowerToyBackend(BackendDetails):
    """Its blob is one byte per call_function node: the report's processed size is checkable."""

    @staticmethod
    def preprocess(edge_program, compile_specs: List[CompileSpec]) -> PreprocessResult:
        n = sum(1 for node in edge_program.graph.nodes if node.op == "call_function")
        return PreprocessResult(processed_bytes=b"t" * n)


@final
class FastlowerOtherToyBackend(BackendDetails):
    @staticmethod
    def preprocess(edge_program, compile_specs: List[CompileSpec]) -> PreprocessResult:
        return PreprocessResult(processed_bytes=b"other")


ADD_MUL = (exir_ops.edge.aten.add.Tensor, exir_ops.edge.aten.mul.Tensor)


def add_mul_partitioner() -> TargetsPartitioner:
    """add/mul -> FastlowerToyBackend, also inside control-flow bodies."""
    return TargetsPartitioner(ADD_MUL, FastlowerToyBackend.__name__)


class AddMulSin(torch.nn.Module):
    """Two add/mul groups split by ``sin``, with a weight the first group owns."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.arange(12.0).reshape(3, 4))

    def forward(self, x):
        a = (x + self.w) * 2.0
        b = torch.sin(a)
        return (b + 1.0) * b, torch.cos(a)


def add_mul_sin_program():
    return to_edge(torch.export.export(AddMulSin(), (torch.randn(3, 4),))).exported_program()


def cond_program():
    g = torch.Generator().manual_seed(3)
    inputs = (torch.rand(3, 3, generator=g) + 1.0, torch.randn(3, 3, generator=g).abs())
    return to_edge(torch.export.export(CondModel(), inputs)).exported_program()


class AddMulPartitioner(TargetsPartitioner):
    """``add_mul_partitioner()`` as a class that takes no arguments (for ``--partitioner``)."""

    def __init__(self) -> None:
        super().__init__(ADD_MUL, FastlowerToyBackend.__name__)


class TagsOutputPartitioner(AddMulPartitioner):
    """Breaks the partition contract: also tags the output node (a typed lowering error)."""

    def partition(self, exported_program):
        result = super().partition(exported_program)
        tag = next(iter(result.partition_tags))
        for node in exported_program.graph.nodes:
            if node.op == "output":
                node.meta["delegation_tag"] = tag
        return result
