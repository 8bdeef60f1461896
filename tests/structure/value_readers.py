"""Programs whose lowering reads a weight's value outside ``preprocess``, each lowered in a
process of its own (a subprocess of ``test_refit_value_reads``):
``python -m tests.structure.value_readers OUT.json CASE CHECKPOINT IMPL CACHE``.

CASE names the reader: ``choice`` (a partitioner's ``ops_to_not_decompose`` keeps a
linear whole only where its weight sums to zero or more), ``pass`` (a transform pass
given the whole program moves a ``cumsum`` to dimension 0 where a weight sums below
zero), ``partition`` (a partitioner delegates ``sin`` only where a lifted constant sums
above zero). CHECKPOINT ``a`` or ``b``: the same structure, weights on either side of
the reader's threshold, no weight uniform or zero (a refit's other rules stay quiet).
IMPL ``reference`` (ExecuTorch) or ``fastlower`` (its lowering cache in CACHE).
OUT.json: the report's ``lowering_cache`` and ``refit``; the ``.pte`` in OUT.json.pte.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Dict, List, Tuple

import torch
from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
from executorch.exir.backend.partitioner import DelegationSpec, Partitioner, PartitionResult
from executorch.exir.backend.test.backend_with_compiler_demo import BackendWithCompilerDemo
from executorch.exir.pass_base import ExportedProgramPassBase, ExportedProgramPassResult


class _Linears(torch.nn.Module):
    def __init__(self, sign: float) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a = torch.nn.Linear(8, 8)
        self.b = torch.nn.Linear(8, 8)
        with torch.no_grad():
            self.a.weight.copy_(self.a.weight.abs() * sign)
            self.b.weight.copy_(self.b.weight.abs() * (1.0 if sign > 0 else 1.5))

    def forward(self, x):
        return self.b(torch.cumsum(self.a(x), -1))


class _SinPlus(torch.nn.Module):
    def __init__(self, sign: float) -> None:
        super().__init__()
        self.c = (torch.arange(4) + 1.0) * 0.1 * sign  # a lifted constant
        self.w = torch.nn.Parameter(torch.arange(4.0) * (2.0 if sign > 0 else 3.0))

    def forward(self, x):
        return torch.sin(x) + self.c + self.w


class WeightSignPartitioner(XnnpackPartitioner):
    """XNNPACK's, but a linear stays whole only where its weight sums to >= 0."""

    def ops_to_not_decompose(self, ep):
        ops, base = super().ops_to_not_decompose(ep)
        weights = ep.graph_signature.inputs_to_parameters

        def keep(node):
            if node.target == torch.ops.aten.linear.default:
                weight = ep.state_dict.get(weights.get(node.args[1].name, ""))
                if weight is not None and float(weight.sum()) < 0:
                    return False
            return base(node) if base is not None else True
        return ops, keep


class CumsumBySign(ExportedProgramPassBase):
    """A cumsum along dimension 0 instead of -1 where ``a.weight`` sums below zero."""

    def call(self, ep):
        if float(ep.state_dict["a.weight"].sum()) >= 0:
            return ExportedProgramPassResult(ep, False)
        for node in ep.graph.nodes:
            if node.op == "call_function" and "cumsum" in str(node.target):
                node.args = (node.args[0], 0, *node.args[2:])
        ep.graph_module.recompile()
        return ExportedProgramPassResult(ep, True)


class ConstantSignPartitioner(Partitioner):
    """Delegates sin only where the program's lifted constant sums above zero."""

    def __init__(self) -> None:
        super().__init__()
        self.delegation = DelegationSpec(BackendWithCompilerDemo.__name__, [])

    def partition(self, ep):
        tags = {}
        constant = next(v for v in ep.constants.values() if isinstance(v, torch.Tensor))
        if float(constant.sum()) > 0:
            for node in ep.graph.nodes:
                if node.op == "call_function" and "sin" in str(node.target):
                    node.meta["delegation_tag"] = "tag0"
                    tags["tag0"] = self.delegation
        return PartitionResult(tagged_exported_program=ep, partition_tags=tags)


def case(name: str, checkpoint: str) -> Tuple[Any, Dict[str, Any]]:
    """The exported program and the lowering's keyword arguments."""
    sign = 1.0 if checkpoint == "a" else -1.0
    if name == "partition":
        program = torch.export.export(_SinPlus(sign), (torch.randn(4),))
        return program, {"partitioner": [ConstantSignPartitioner()]}
    program = torch.export.export(_Linears(sign).eval(), (torch.randn(2, 8),))
    if name == "choice":
        return program, {"partitioner": [WeightSignPartitioner()]}
    return program, {"partitioner": [XnnpackPartitioner()], "transform_passes": [CumsumBySign()]}


def main(argv: List[str]) -> None:
    out, name, checkpoint, impl, cache = Path(argv[0]), argv[1], argv[2], argv[3], argv[4]
    program, kwargs = case(name, checkpoint)
    found: Dict[str, Any] = {}
    if impl == "reference":
        from executorch.exir import to_edge_transform_and_lower

        manager = to_edge_transform_and_lower(program, **kwargs)
    else:
        import fastlower
        import fastlower.preprocess
        from fastlower.cache import to_edge_transform_and_lower as cached

        with fastlower.preprocess.options(workers=1, cache_dir=cache):
            manager = cached(program, **kwargs)
        report = fastlower.last_report()
        found = {"lowering_cache": str(report.lowering_cache), "refit": report.refit}
    out.with_name(out.name + ".pte").write_bytes(bytes(manager.to_executorch().buffer))
    out.write_text(json.dumps(found, default=str))


if __name__ == "__main__":
    main(sys.argv[1:])
