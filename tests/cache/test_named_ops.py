"""Operators are stored by name (``cache/serialize/named.py``) and found again by it."""

from __future__ import annotations

import pytest
import torch
from executorch.exir.dialects._ops import ops as exir_ops

from fastlower.cache.serialize.named import find_op, op_name


@pytest.mark.parametrize("op, expected", [
    (torch.ops.aten.add.Tensor, ("aten", "aten.add.Tensor")),
    (torch.ops.aten.add, ("packet", "aten.add")),  # a packet in node meta (export_llm's)
    (exir_ops.edge.aten.add.Tensor, ("edge", "aten.add.Tensor")),
    (torch.ops.higher_order.cond, ("hop", "cond")),
])
def test_an_operator_is_stored_by_name_and_found_again(op, expected):
    assert op_name(op) == expected
    assert find_op(*expected) is op


def test_anything_else_is_not_an_operator():
    assert op_name(len) is None
    assert op_name("aten.add") is None
