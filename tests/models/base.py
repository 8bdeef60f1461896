"""The data model of the differential-test models: ``Built`` (one fresh instance, ready to
lower), ``ModelCase`` / ``ErrorCase`` (registry entries), and ``_single`` (export, eager
outputs and Edge program of a one-method model).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

import torch
from torch import nn
from torch.export import ExportedProgram, export

# Importing these modules registers the backends (BackendDetails.__subclasses__); every
# module of the package imports this one, so importing any of them registers them all,
# as importing the single tests/models.py did.
from executorch.backends.xnnpack.xnnpack_preprocess import XnnpackBackend  # noqa: F401
from executorch.exir import EdgeCompileConfig, EdgeProgramManager, to_edge
from executorch.exir.backend.partitioner import (
    Partitioner,
)
from executorch.exir.backend.test.backend_with_compiler_demo import (  # noqa: F401
    BackendWithCompilerDemo,
)
from executorch.exir.backend.test.backend_with_delegate_mapping_demo import (  # noqa: F401
    BackendWithDelegateMappingDemo,
)
from executorch.exir.backend.test.backend_with_preprocess_all_demo import (  # noqa: F401
    BackendWithPreprocessAllPartitioner,
)
from executorch.exir.backend.test.demo_backend import DemoBackend  # noqa: F401


Inputs = Tuple[torch.Tensor, ...]
# a list is a chain: each partitioner lowers the result of the previous one
PartitionerArg = Union[Partitioner, Dict[str, Partitioner], List[Partitioner]]


# --------------------------------------------------------------------------- #
# Data model
# --------------------------------------------------------------------------- #
@dataclass
class Built:
    """One fresh instance of a test model, ready to be lowered."""

    epm: EdgeProgramManager
    partitioner: PartitionerArg
    # method name -> list of input tuples (several e.g. to take both cond branches)
    inputs: Dict[str, List[Inputs]]
    # method name -> list of eager outputs (parallel to ``inputs``)
    expected: Dict[str, List[Sequence[torch.Tensor]]]
    # ATen programs for the to_edge_transform_and_lower path (None = unsupported)
    aten: Optional[Dict[str, ExportedProgram]] = None
    # Partitioner list(s) for to_edge_transform_and_lower (fresh instances)
    etl_partitioner: Optional[Callable[[], object]] = None


@dataclass(frozen=True)
class ModelCase:
    name: str
    build: Callable[[], Built]
    runtime: bool  # all delegates executable by executorch.runtime
    paths: Tuple[str, ...] = ("direct", "spec", "manager")
    slow: bool = False
    eager_check: bool = True  # lowered_ep.module()(*inputs) numerics
    doc: str = ""


@dataclass(frozen=True)
class ErrorCase:
    name: str
    build: Callable[[], Built]
    expected_type: type
    # regex (fullmatch against the 0xADDR-normalized message), or a dict
    # path -> regex when the reference's message depends on the path
    expected_message: Union[str, Dict[str, str]]
    paths: Tuple[str, ...] = ("direct", "spec", "manager")
    doc: str = ""
    # the implementation under test must repeat the reference's message up to and
    # including this text (None: the whole message)
    message_until: Optional[str] = None

    def message_for(self, path: str) -> str:
        m = self.expected_message
        return m[path] if isinstance(m, dict) else m


def _eager(model: nn.Module, inputs: Sequence[Inputs]):
    with torch.no_grad():
        outs = []
        for inp in inputs:
            # fresh copy per input set: models may mutate buffers
            out = copy.deepcopy(model)(*copy.deepcopy(inp))
            outs.append(out if isinstance(out, (tuple, list)) else (out,))
    return outs


def _single(
    model: nn.Module,
    inputs: List[Inputs],
    partitioner: PartitionerArg,
    *,
    strict: bool = False,
    keep_aten: bool = False,
    etl_partitioner=None,
    check_ir_validity: bool = True,
    preserve_ops=(),
) -> Built:
    model = model.eval()
    expected = _eager(model, inputs)
    with torch.no_grad():
        aten = export(model, inputs[0], strict=strict)
    aten_copy = None
    if keep_aten:
        # a second, independent export for to_edge_transform_and_lower
        with torch.no_grad():
            aten_copy = {"forward": export(model, inputs[0], strict=strict)}
    epm = to_edge(
        aten,
        compile_config=EdgeCompileConfig(
            _check_ir_validity=check_ir_validity, preserve_ops=list(preserve_ops)
        ),
    )
    return Built(
        epm=epm,
        partitioner=partitioner,
        inputs={"forward": inputs},
        expected={"forward": expected},
        aten=aten_copy,
        etl_partitioner=etl_partitioner,
    )
