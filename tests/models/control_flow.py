"""Control flow: ``torch.cond``, ``map`` and both nested, with partitions at top level and
inside the bodies; and a cond tagged without its branches (an error case).
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from executorch.exir.backend.test.op_partitioner_demo import (
    AddMulPartitionerDemo,
)
from tests.models.base import (
    Built, _single,
)
from tests.models.partitioners import (
    _FnPartitioner, _spec,
)


def _cond_true(x, y):
    return torch.mm(x - y, y) + y


def _cond_false(x, y):
    return (x * y).sin() - y


class CondModel(nn.Module):
    def forward(self, x, y):
        x = x + y
        x = torch.cond(x.sum() > 0, _cond_true, _cond_false, (x, y))
        return x.cos() - y


def _map_body(x, y):
    return (x - y).sin() + y * x


class MapModel(nn.Module):
    def forward(self, xs, y):
        y = torch.mm(y, y)
        from torch._higher_order_ops.map import map as hop_map

        return hop_map(_map_body, xs, y)


class NestedControlFlow(nn.Module):
    """map( cond( cond ) ) from test_backends_lifted.test_partition_with_nested_control_flow"""

    def forward(self, xs, pred1, pred2, y):
        from functorch.experimental import control_flow

        def true_nested(y):
            y = y + y
            y = torch.mm(y, y)
            return y

        def false_nested(y):
            return torch.mm(y, y)

        def true_fn(x, pred2):
            z = control_flow.cond(pred2, true_nested, false_nested, [x])
            return x + z

        def false_fn(x, _):
            return x.cos()

        def map_fn(x, pred1, pred2, y):
            x = x.cos()
            y = control_flow.cond(pred1, true_fn, false_fn, [y, pred2])
            x = x + y
            return x.sin()

        y = torch.mm(y, y)
        return control_flow.map(map_fn, xs, pred1, pred2, y)


def _cond_inputs():
    g = torch.Generator().manual_seed(3)
    y = torch.randn(3, 3, generator=g)
    pos = (torch.rand(3, 3, generator=g) + 1.0, y.abs())  # sum > 0 -> true branch
    neg = (-torch.rand(3, 3, generator=g) - 5.0, y.abs())  # sum < 0 -> false branch
    return [pos, neg]


def build_cond(partitioner_factory) -> Callable[[], Built]:
    def build() -> Built:
        return _single(CondModel(), _cond_inputs(), partitioner_factory())

    return build


def build_map(partitioner_factory) -> Callable[[], Built]:
    def build() -> Built:
        g = torch.Generator().manual_seed(4)
        inputs = [(torch.randn(4, 3, generator=g), torch.randn(3, 3, generator=g))]
        return _single(MapModel(), inputs, partitioner_factory())

    return build


def build_nested_cf() -> Built:
    inputs = [
        (
            torch.ones(2, 2),
            torch.tensor([False]),
            torch.Tensor([False]),
            torch.ones(2, 2),
        ),
        (
            torch.ones(2, 2),
            torch.tensor([True]),
            torch.Tensor([True]),
            torch.ones(2, 2),
        ),
    ]
    return _single(NestedControlFlow(), inputs, AddMulPartitionerDemo(), strict=True)


def _tag_cond_not_its_branches(ep):
    """Tags the cond call but not the get_attr nodes of its branch bodies."""
    for n in ep.graph.nodes:
        if n.op == "call_function" and n.target is torch.ops.higher_order.cond:
            n.meta["delegation_tag"] = "tag0"


def build_cond_without_branches() -> Built:
    return _single(CondModel(), _cond_inputs(),
                   _FnPartitioner(_tag_cond_not_its_branches, {"tag0": _spec()}))
