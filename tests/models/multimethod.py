"""Several methods lowered together (``MethodProgramsPartitionerSpec``, the manager):
``preprocess_multimethod`` backends and XNNPACK.
"""

from __future__ import annotations

import torch
from torch import nn
from torch.export import export

from executorch.backends.xnnpack.partition.xnnpack_partitioner import (
    XnnpackPartitioner,
)
from executorch.exir import to_edge
from executorch.exir.backend.test.backend_with_preprocess_all_demo import (
    BackendWithPreprocessAllPartitioner,
)
from tests.models.base import (
    Built, _eager,
)


class MethodA(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("c", torch.linspace(-1, 1, 6).reshape(2, 3))

    def forward(self, x, y):
        a = (x + self.c).sin()
        b = (y - x).cos()
        return a + b, torch.sin(b - a)


class MethodB(nn.Module):
    def forward(self, x):
        return (x.cos() - x).sin() + x


def build_multimethod_preprocess_all() -> Built:
    """Two methods lowered together through FirstBackendWithPreprocessAll /
    SecondBackendWithPreprocessAll, whose ``preprocess_multimethod`` sees all
    partitions of all methods (processed bytes embed the global op count)."""
    g = torch.Generator().manual_seed(5)
    a_in = [(torch.randn(2, 3, generator=g), torch.randn(2, 3, generator=g))]
    b_in = [(torch.randn(2, 3, generator=g),)]
    ma, mb = MethodA().eval(), MethodB().eval()
    epm = to_edge(
        {
            "forward": export(ma, a_in[0], strict=True),
            "other": export(mb, b_in[0], strict=True),
        }
    )
    return Built(
        epm=epm,
        partitioner={
            "forward": BackendWithPreprocessAllPartitioner(),
            "other": BackendWithPreprocessAllPartitioner(),
        },
        inputs={"forward": a_in, "other": b_in},
        expected={"forward": _eager(ma, a_in), "other": _eager(mb, b_in)},
    )


class MlpA(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.l1 = nn.Linear(8, 16)
        self.l2 = nn.Linear(16, 4)

    def forward(self, x):
        h = torch.relu(self.l1(x))
        h = torch.where(h > 0.5, h, torch.zeros_like(h))  # partition break
        return self.l2(h)


class MlpB(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.l = nn.Linear(8, 8)

    def forward(self, x, y):
        return torch.sigmoid(self.l(x)) * y + x


def build_multimethod_xnnpack() -> Built:
    torch.manual_seed(6)
    ma, mb = MlpA().eval(), MlpB().eval()
    g = torch.Generator().manual_seed(6)
    a_in = [(torch.randn(3, 8, generator=g),)]
    b_in = [(torch.randn(3, 8, generator=g), torch.randn(3, 8, generator=g))]

    def aten():
        with torch.no_grad():
            return {
                "forward": export(ma, a_in[0], strict=False),
                "decode": export(mb, b_in[0], strict=False),
            }

    epm = to_edge(aten())
    return Built(
        epm=epm,
        partitioner=XnnpackPartitioner(),
        inputs={"forward": a_in, "decode": b_in},
        expected={"forward": _eager(ma, a_in), "decode": _eager(mb, b_in)},
        aten=aten(),
        etl_partitioner=lambda: [XnnpackPartitioner()],
    )
