"""Chained lowering: several partitioners lower the same program in turn
(``to_edge_transform_and_lower(..., partitioner=[P1, P2])``, ``to_backend`` twice).
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from executorch.exir.backend.partitioner import (
    Partitioner,
)
from executorch.exir.dialects._ops import ops as exir_ops
from tests.models.base import (
    Built, _single,
)
from tests.models.partitioners import (
    _DEMO, TargetsPartitioner, _XNN,
)


# --------------------------------------------------------------------------- #
# Chained lowering: several partitioners lower the same program in turn
# (to_edge_transform_and_lower(..., partitioner=[P1, P2]), to_backend twice)
# --------------------------------------------------------------------------- #
class TwoLinearAddMul(nn.Module):
    """The chained-lowering model: AddMulPartitionerDemo takes add/mul, XNNPACK the linears."""

    def __init__(self) -> None:
        super().__init__()
        self.l1 = nn.Linear(4, 8)
        self.l2 = nn.Linear(8, 3)

    def forward(self, x, y):
        h = self.l1(x)
        h = h + y
        h = h * y
        return self.l2(h)


def _two_linear_inputs():
    g = torch.Generator().manual_seed(13)
    return [(torch.randn(2, 4, generator=g), torch.randn(2, 8, generator=g))]


_ADD = exir_ops.edge.aten.add.Tensor


def build_chain(*partitioner_factories, model_factory=TwoLinearAddMul,
                inputs_factory=_two_linear_inputs) -> Callable[[], Built]:
    """A case lowered by each partitioner in turn (fresh instances per build)."""

    def build() -> Built:
        torch.manual_seed(0)
        return _single(
            model_factory(), inputs_factory(), [f() for f in partitioner_factories],
            keep_aten=True, etl_partitioner=lambda: [f() for f in partitioner_factories],
        )

    return build


def _xnn_adds() -> Partitioner:
    return TargetsPartitioner([_ADD], _XNN, prefix="add_tag")


def _xnn_adds_same_tags() -> Partitioner:
    """Tags named as XnnpackControlFlowPartitioner names its own (``xnn_tag<i>``)."""
    return TargetsPartitioner([_ADD], _XNN, prefix="xnn_tag")


def _nothing() -> Partitioner:
    """Tags nothing (no div in these graphs): the next partitioner gets the whole graph."""
    return TargetsPartitioner([exir_ops.edge.aten.div.Tensor], _DEMO)
