"""fastlower's ``MethodProgramsPartitionerSpec`` (ExecuTorch's is accepted as well)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from executorch.exir.backend.partitioner import Partitioner
from torch.export import ExportedProgram


@dataclass
class MethodProgramsPartitionerSpec:
    """Programs and partitioners by method name, for lowering several methods together."""

    method_to_edge_program: Mapping[str, ExportedProgram]
    method_to_partitioner: Mapping[str, Partitioner]
