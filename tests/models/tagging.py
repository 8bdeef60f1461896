"""Hand-tagged programs (``_FnPartitioner`` over ``AddChain`` and friends): partition rules
broken one at a time, tags missing from ``partition_tags``, and partitioner edits the
reference's structure check does or does not see.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from executorch.exir.dialects._ops import ops as exir_ops
from tests.models.base import (
    Built, _single,
)
from tests.models.partitioners import (
    _FnPartitioner, _spec,
)


# --------------------------------------------------------------------------- #
# Bad-input partitioners
# --------------------------------------------------------------------------- #
class AddChain(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("k", torch.full((2, 2), 3.0))

    def forward(self, x, y):
        a = x + y
        b = a * self.k
        c = b - y
        d = c + self.k
        return d


def _add_chain_inputs():
    return [(torch.ones(2, 2), torch.full((2, 2), 2.0))]


def _tag_adds(ep, tag="tag0"):
    for n in ep.graph.nodes:
        if n.op == "call_function" and n.target == exir_ops.edge.aten.add.Tensor:
            n.meta["delegation_tag"] = tag


def _tag_first_add(ep):
    for n in ep.graph.nodes:
        if n.name == "aten_add_tensor":
            n.meta["delegation_tag"] = "tag0"


def _bad_tagged_output(ep):
    _tag_adds(ep)
    ep.graph.output_node().meta["delegation_tag"] = "tag0"


def _bad_tagged_user_input(ep):
    _tag_adds(ep)
    for n in ep.graph.nodes:
        if n.op == "placeholder" and n.name == "x":
            n.meta["delegation_tag"] = "tag0"


def _bad_no_copy(ep):
    # k is used by mul (tag0) and by the last add (tag1)
    for n in ep.graph.nodes:
        if n.op == "call_function" and n.target == exir_ops.edge.aten.mul.Tensor:
            n.meta["delegation_tag"] = "tag0"
        if n.name == "aten_add_tensor_1":
            n.meta["delegation_tag"] = "tag1"
        if n.op == "placeholder" and n.name == "b_k":
            n.meta["delegation_tag"] = "tag0"
            n.meta["no_copy"] = True


def _bad_mutates_graph(ep):
    for n in ep.graph.nodes:
        if n.op == "call_function" and n.target == exir_ops.edge.aten.add.Tensor:
            n.target = exir_ops.edge.aten.mul.Tensor


def _bad_cycle(ep):
    # first add and last add in one tag, with untagged mul/sub in between:
    # fusing {a, d} would need b, c both inside and outside -> cycle.
    for n in ep.graph.nodes:
        if n.op == "call_function" and n.target == exir_ops.edge.aten.add.Tensor:
            n.meta["delegation_tag"] = "tag0"


def _bad(fn, tags) -> Callable[[], Built]:
    def build() -> Built:
        return _single(AddChain(), _add_chain_inputs(), _FnPartitioner(fn, tags))

    return build


def build_missing_tag() -> Built:
    """Tag ``tag1`` is used on nodes but missing from ``partition_tags``:
    the reference silently ignores those nodes (not lowered, tag removed).
    NOT an error -- it is a ModelCase."""

    def fn(ep):
        for n in ep.graph.nodes:
            if n.name == "aten_add_tensor":
                n.meta["delegation_tag"] = "tag0"
            if n.op == "call_function" and n.target == exir_ops.edge.aten.mul.Tensor:
                n.meta["delegation_tag"] = "tag1"

    return _single(
        AddChain(),
        _add_chain_inputs(),
        _FnPartitioner(fn, {"tag0": _spec(), "unused_tag": _spec()}),
    )


# --------------------------------------------------------------------------- #
# Partitioners that edit what the reference's is_identical_graph does not see,
# and inputs that break two rules at once
# --------------------------------------------------------------------------- #
def _edit_add_alpha(ep):
    """Tags the first add and sets its ``alpha`` to 5: a valid edit both lower."""
    _tag_first_add(ep)
    for n in ep.graph.nodes:
        if n.name == "aten_add_tensor":
            n.kwargs = {**n.kwargs, "alpha": 5.0}


class CatModel(nn.Module):
    def forward(self, x, y):
        return torch.cat([x + 1, y], 1) * 2


def _tag_add_and_cat(ep, tag: str) -> None:
    """Tags every add and cat (``CatModel``'s ``x + 1`` and the cat reading it)."""
    for n in ep.graph.nodes:
        if n.op == "call_function" and n.target in (exir_ops.edge.aten.cat.default,
                                                     exir_ops.edge.aten.add.Tensor):
            n.meta["delegation_tag"] = tag


def _edit_cat_dim(ep):
    """Tags cat and its input add, and sets cat's ``dim`` to 2 (out of range for 2-D)."""
    _tag_add_and_cat(ep, "tag0")
    for n in ep.graph.nodes:
        if n.op == "call_function" and n.target == exir_ops.edge.aten.cat.default:
            n.args = (n.args[0], 2)


def build_edited_cat_dim() -> Built:
    return _single(CatModel(), [(torch.ones(2, 2), torch.ones(2, 3))],
                   _FnPartitioner(_edit_cat_dim, {"tag0": _spec()}))


class OwnedUpdateRead(nn.Module):
    """A buffer update read outside the partition that owns the buffer, next to a
    non-convex partition ``u`` (sin, tan around an untagged cos)."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("b", torch.zeros(2, 2))

    def forward(self, x):
        self.b.add_(x)
        r = self.b * 2
        s = x.sin()
        t = s.cos().tan() + s
        return r, t


def _tag_owned_update_read(ep, cycle: bool):
    for n in ep.graph.nodes:
        if n.op == "placeholder" and n.name == "b_b" or n.name == "aten_add_tensor":
            n.meta["delegation_tag"] = "t"
        if cycle and n.op == "call_function" and n.target in (exir_ops.edge.aten.sin.default,
                                                               exir_ops.edge.aten.tan.default):
            n.meta["delegation_tag"] = "u"


def build_owned_update_read(cycle: bool) -> Callable[[], Built]:
    def build() -> Built:
        tags = {"t": _spec(), "u": _spec()} if cycle else {"t": _spec()}
        return _single(OwnedUpdateRead(), [(torch.ones(2, 2),)],
                       _FnPartitioner(lambda ep: _tag_owned_update_read(ep, cycle), tags))

    return build


def build_method_without_program() -> Built:
    """The spec names a partitioner for a method that has no program."""
    built = _bad(_tag_first_add, {"tag0": _spec()})()
    built.partitioner = {"forward": built.partitioner, "decode": _FnPartitioner(_tag_first_add, {})}
    return built


def _bad_adds_a_node(ep):
    """Adds a node: the reference's structure check sees it."""
    _tag_adds(ep)
    out = ep.graph.output_node()
    with ep.graph.inserting_before(out):
        ep.graph.call_function(exir_ops.edge.aten.relu.default, (out.args[0][0],))


class BufferReturned(nn.Module):
    """The buffer update is also the user output."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("b", torch.zeros(2, 2))

    def forward(self, x):
        self.b.add_(x)
        return self.b


def _tag_buffer_and_add(ep):
    for n in ep.graph.nodes:
        if n.op == "placeholder" and n.name == "b_b" or n.name == "aten_add_tensor":
            n.meta["delegation_tag"] = "tag0"


def build_owned_update_returned() -> Built:
    return _single(BufferReturned(), [(torch.ones(2, 2),)],
                   _FnPartitioner(_tag_buffer_and_add, {"tag0": _spec()}))


def _tag_output_with_unknown_tag(ep):
    """The output node carries a tag partition_tags does not name (fuzz finding F4)."""
    _tag_first_add(ep)
    ep.graph.output_node().meta["delegation_tag"] = "t_out"
