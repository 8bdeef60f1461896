"""Small programs, passes and partitioners for the lowering-cache tests."""

from __future__ import annotations

import contextlib
import warnings
from pathlib import Path
from typing import Any, Dict, Iterator, Optional

import torch
from executorch.exir import EdgeCompileConfig
from executorch.exir.backend.test.op_partitioner_demo import AddMulPartitionerDemo
from executorch.exir.pass_base import ExportPass
from torch.fx.passes.infra.pass_base import PassResult

import fastlower
import fastlower.cache
import fastlower.preprocess
from tests.models.chains import TwoLinearAddMul, _two_linear_inputs


def small_aten(change: Optional[str] = None) -> torch.export.ExportedProgram:
    """``TwoLinearAddMul`` exported (non-strict), with ``change`` applied to a fresh model:
    ``"param"`` moves one weight by 1e-3."""
    torch.manual_seed(0)
    model = TwoLinearAddMul().eval()
    if change == "param":
        with torch.no_grad():
            model.l1.weight[0, 0] += 1e-3
    with torch.no_grad():
        return torch.export.export(model, _two_linear_inputs()[0], strict=False)


def demo_partitioner() -> AddMulPartitionerDemo:
    """ExecuTorch's demo partitioner (add/mul to BackendWithCompilerDemo): cheap to run."""
    return AddMulPartitionerDemo()


def keep_graph(gm: torch.fx.GraphModule) -> PassResult:
    """A module-level transform pass that changes nothing."""
    return PassResult(gm, False)


def keep_graph_too(gm: torch.fx.GraphModule) -> PassResult:
    """Another one (a different pass: another key)."""
    return PassResult(gm, False)


class KeepGraphPass(ExportPass):
    """A pass object with state."""

    def __init__(self, level: int = 0) -> None:
        super().__init__()
        self.level = level


def base_args(**changes: Any) -> Dict[str, Any]:
    """The base call's keyword arguments (fresh objects) with ``changes`` applied."""
    args = dict(transform_passes=[keep_graph], constant_methods={"get_answer": 42},
                compile_config=EdgeCompileConfig(_check_ir_validity=True),
                partitioner=[demo_partitioner()])
    args.update(changes)
    return args


@contextlib.contextmanager
def cache_at(folder: Path, **options: Any) -> Iterator[None]:
    """The preprocess options with ``cache_dir=folder`` (serial preprocess), warnings shown."""
    options.setdefault("workers", 1)
    with fastlower.preprocess.options(cache_dir=folder, **options):
        yield


def lower(program: Any, **args: Any):
    """``fastlower.cache.to_edge_transform_and_lower`` and the report it left."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=UserWarning, module="executorch")
        warnings.filterwarnings("ignore", category=FutureWarning)
        manager = fastlower.cache.to_edge_transform_and_lower(program, **args)
    return manager, fastlower.report_for(manager)
