"""Parameters, buffers and lifted constants across partitions: shared constants the
reference duplicates, buffer mutations moving into a delegate, constants reached through
list arguments (pytorch/executorch#22798), and outputs next to owned state (fuzz F2).
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from executorch.backends.xnnpack.partition.xnnpack_partitioner import (
    XnnpackPartitioner,
)
from executorch.exir.backend.partitioner import (
    Partitioner,
)
from executorch.exir.backend.test.demo_backend import DemoBackend
from executorch.exir.backend.test.op_partitioner_demo import (
    AddAttributePartitionerDemo,
)
from executorch.exir.dialects._ops import ops as exir_ops
from tests.models.base import (
    Built, _single,
)
from tests.models.basic import (
    _LINEAR,
)
from tests.models.control_flow import (
    _cond_false, _cond_true,
)
from tests.models.partitioners import (
    TargetsPartitioner, _XNN,
)


class SharedLinear(nn.Module):
    """One nn.Linear used twice on both sides of an XNNPACK-unsupported op:
    its weight/bias placeholders feed two XNNPACK partitions, so the reference
    duplicates them (``p_lin_weight_copy_0`` ...)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        h = self.lin(x)
        h = torch.where(h > 0, h, torch.zeros_like(h))  # partition break
        return self.lin(h)


def build_shared_param_xnnpack() -> Built:
    torch.manual_seed(7)
    g = torch.Generator().manual_seed(7)
    return _single(
        SharedLinear(),
        [(torch.randn(4, 8, generator=g),)],
        XnnpackPartitioner(),
        keep_aten=True,
        etl_partitioner=lambda: [XnnpackPartitioner()],
        preserve_ops=_LINEAR,
    )


class SharedConst(nn.Module):
    """Parameter ``w`` and lifted tensor constant ``c`` each used by two
    ``add`` partitions separated by an unsupported ``sin``."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.linspace(0, 1, 4).reshape(2, 2))
        self.c = torch.tensor([[0.5, -0.5], [1.5, 2.0]])  # lifted tensor constant

    def forward(self, x):
        a = x + self.w + self.c
        b = a.sin()
        return b + self.w + self.c


def build_shared_const_demo() -> Built:
    g = torch.Generator().manual_seed(8)
    return _single(
        SharedConst(),
        [(torch.randn(2, 2, generator=g),)],
        AddAttributePartitionerDemo(),
        strict=True,
    )


class BufferMutation(nn.Module):
    """test_partitioner.test_buffer_mutation1: the buffer mutation moves into
    the delegate (owning program's BUFFER_MUTATION output spec is deleted)."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("b", torch.ones(3, 3))

    def forward(self, x):
        self.b.add_(x)
        return x + self.b


def build_buffer_mutation() -> Built:
    return _single(
        BufferMutation(),
        [(torch.ones(3, 3),)],
        AddAttributePartitionerDemo(),
        strict=True,
    )


class CatConst(nn.Module):
    """A lifted tensor constant reached ONLY through a list argument
    (``aten.cat([c, x])``), used by two partitions."""

    def __init__(self) -> None:
        super().__init__()
        self.c = torch.arange(6, dtype=torch.float32).reshape(2, 3)

    def forward(self, x, y):
        a = torch.cat([self.c, x]) + 1.0
        s = torch.cumsum(a, dim=0)  # partition break (neither XNNPACK nor cat/add)
        b = torch.cat([self.c, y]) + s
        return b


def _cat_partitioner() -> Partitioner:
    return TargetsPartitioner(
        [exir_ops.edge.aten.cat.default, exir_ops.edge.aten.add.Tensor],
        DemoBackend.__name__,
        tag_constants=True,
        through_lists=True,
    )


def build_list_arg_const() -> Built:
    """pytorch/executorch#22798 -- what the reference (1.5.1) does.

    Program: ``c_c`` (lifted tensor constant, target ``c``) is used only as
    ``cat([c_c, x])`` (partition ``tag0``) and ``cat([c_c, y])`` (``tag1``);
    the partitioner tags ``c_c`` with the LAST partition using it (``tag1``).

    1. ``_maybe_duplicate_constant_nodes(tagged_program, "tag1")`` sees that
       ``c_c`` has a user in ``tag0`` and calls ``duplicate_constant_node``,
       which inserts placeholder ``c_c_copy_0`` and stores
       ``constants["c_c_copy_0"]`` -- in the dict SHARED with the input
       program (get_fake_program shares ``constants``), so the INPUT program
       now has constants ``['c', 'c_c_copy_0']`` even though lowering fails.
       But it only rewrites *direct* args/kwargs (``arg != node`` is True for
       the list ``[c_c, x]``), so the copy has no users and stays untagged;
       ``c_c`` keeps tag ``tag1`` with a user in ``tag0``.
    2. Lowering then raises ``RuntimeError`` from
       ``_get_node_list_with_same_tag``; the text depends on the overload:

       * single program ``to_backend(ep, partitioner)``: ``tag0`` IS lowered
         first (c_c becomes a delegate input), then for ``tag1``:
         ``constant data node (c_c) is tagged with (tag1) but has user
         (executorch_call_delegate) which has tag (None)``
       * ``MethodProgramsPartitionerSpec`` / ``EdgeProgramManager.to_backend``
         (partitions are fused before lowering): ``constant data node (c_c)
         is tagged with (tag1) but has user (fused_tag0) which has tag
         (tag0)``

    No wrong numerics: it always raises.  See
    ``build_list_arg_const_untagged`` (partitioner does not tag the constant:
    lowers fine, the constant is a delegate input of both partitions) and
    ``build_list_arg_const_xnnpack`` (XNNPACK does not tag it either)."""
    g = torch.Generator().manual_seed(9)
    return _single(
        CatConst(),
        [(torch.randn(1, 3, generator=g), torch.randn(1, 3, generator=g))],
        _cat_partitioner(),
        strict=True,
    )


def build_list_arg_const_untagged() -> Built:
    g = torch.Generator().manual_seed(9)
    part = TargetsPartitioner(
        [exir_ops.edge.aten.cat.default, exir_ops.edge.aten.add.Tensor],
        DemoBackend.__name__,
        tag_constants=False,
    )
    return _single(
        CatConst(),
        [(torch.randn(1, 3, generator=g), torch.randn(1, 3, generator=g))],
        part,
        strict=True,
    )


def build_list_arg_const_xnnpack() -> Built:
    """Same model through XnnpackPartitioner (which does not tag the constant
    feeding ``cat``), for a runtime check of the list-argument path."""
    g = torch.Generator().manual_seed(9)
    return _single(
        CatConst(),
        [(torch.randn(1, 3, generator=g), torch.randn(1, 3, generator=g))],
        XnnpackPartitioner(),
        strict=True,
    )


class OutputAndOwnedLinear(nn.Module):
    """``y`` is both a program output and the input of a linear whose weight the last
    partition owns (fuzz finding F2): the reference re-assigns the output node's args
    after inserting that delegate, which puts the output node last in ``y.users``."""

    def __init__(self, through_cond: bool = False) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.register_buffer("scale", torch.full((4,), 0.5))
        self.through_cond = through_cond

    def forward(self, x, w):
        y = torch.relu(x) if not self.through_cond else torch.cond(
            x.sum() > 0, _cond_true, _cond_false, (x, w))
        return y, self.lin(y) * self.scale + w


def _linear_ops():
    return [exir_ops.edge.aten.permute_copy.default, exir_ops.edge.aten.addmm.default]


def _owned_state_partitioner(with_mul: bool) -> Partitioner:
    ops = _linear_ops() + ([exir_ops.edge.aten.mul.Tensor] if with_mul else [])
    return TargetsPartitioner(ops, _XNN, tag_constants=True)


def build_output_and_owned(through_cond: bool, with_mul: bool) -> Callable[[], Built]:
    def build() -> Built:
        torch.manual_seed(0)  # both implementations lower the same weights
        inputs = [(torch.randn(4, 4), torch.randn(4, 4)), (-torch.ones(4, 4), torch.randn(4, 4))]
        return _single(OutputAndOwnedLinear(through_cond), inputs,
                       _owned_state_partitioner(with_mul))
    return build
