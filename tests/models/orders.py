"""Two broken rules in different partitions: the error raised is the one the reference
meets first in its order of work (fuzz case 118), which differs between the
single-program path (fuse, build, preprocess, insert: partition by partition) and the
multi-method path (fuse and build every partition of a method, then preprocess all, then
insert all). Also the two always-failing backends these cases use.
"""

from __future__ import annotations

import functools
from typing import Callable, List

import torch
from torch import nn
from torch.export import ExportedProgram

from executorch.exir.backend.backend_details import BackendDetails, PreprocessResult
from executorch.exir.backend.compile_spec_schema import CompileSpec
from executorch.exir.dialects._ops import ops as exir_ops
from tests.models.base import (
    Built, _single,
)
from tests.models.partitioners import (
    _FnPartitioner, _spec,
)
from tests.models.tagging import (
    _edit_cat_dim, OwnedUpdateRead, _tag_add_and_cat, _tag_owned_update_read,
)


# --------------------------------------------------------------------------- #
# Two broken rules in different partitions: the error raised is the one the
# reference meets first in its order of work (fuzz case 118), which differs
# between the single-program path (fuse, build, preprocess, insert: partition by
# partition) and the multi-method path (fuse and build every partition of a
# method, then preprocess all, then insert all).
# --------------------------------------------------------------------------- #
class ModelsFailingBackend(BackendDetails):
    """A backend whose ``preprocess`` always raises ``ValueError``."""

    @staticmethod
    def preprocess(edge_program: ExportedProgram,
                   compile_specs: List[CompileSpec]) -> PreprocessResult:
        raise ValueError("ModelsFailingBackend cannot compile this partition")


class ModelsFailingMultimethodBackend(BackendDetails):
    """A backend with its own ``preprocess_multimethod``; it and ``preprocess`` raise
    ``RuntimeError``."""

    @staticmethod
    def preprocess(edge_program: ExportedProgram,
                   compile_specs: List[CompileSpec]) -> PreprocessResult:
        raise RuntimeError("ModelsFailingMultimethodBackend cannot compile this partition")

    @classmethod
    def preprocess_multimethod(cls, edge_programs, compile_specs):
        raise RuntimeError("ModelsFailingMultimethodBackend cannot compile these partitions")


class CatThenSinCosTan(nn.Module):
    def forward(self, x, y):
        s = (torch.cat([x + 1, y], 1) * 2).sin()
        return s.cos().tan() * s


def _tag_sin_tan(ep, tag: str) -> None:
    """sin and tan around an untagged cos: a partition that is not convex."""
    for n in ep.graph.nodes:
        if n.op == "call_function" and n.target in (exir_ops.edge.aten.sin.default,
                                                     exir_ops.edge.aten.tan.default):
            n.meta["delegation_tag"] = tag


def _edited_cat_then_cycle(ep):
    """tag0 = {add, cat} with cat's dim edited to 2 (its program fails the verifier);
    tag1 = {sin, tan} around an untagged cos (not convex)."""
    _edit_cat_dim(ep)
    _tag_sin_tan(ep, "tag1")


def _cat_inputs():
    return [(torch.ones(2, 2), torch.ones(2, 3))]


def build_edited_then_cycle() -> Built:
    return _single(CatThenSinCosTan(), _cat_inputs(),
                   _FnPartitioner(_edited_cat_then_cycle, {"tag0": _spec(), "tag1": _spec()}))


class SharedBufferAfterCat(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("k", torch.full((2, 5), 0.5))

    def forward(self, x, y):
        s = (torch.cat([x + 1, y], 1) * 2).sin()
        return (s.cos().tan() * s + self.k) * self.k


def _cycle_shared_constant_edited_cat(ep):
    """tag0 = {sin, tan} (not convex); tag1 = {k, the add reading it}, while an untagged
    mul reads k too (so k is duplicated); the untagged cat's dim edited to 2."""
    _tag_sin_tan(ep, "tag0")
    for n in ep.graph.nodes:
        if n.name in ("b_k", "aten_add_tensor_1"):
            n.meta["delegation_tag"] = "tag1"
        if n.op == "call_function" and n.target == exir_ops.edge.aten.cat.default:
            n.args = (n.args[0], 2)


def build_cycle_shared_constant_edited() -> Built:
    return _single(SharedBufferAfterCat(), _cat_inputs(), _FnPartitioner(
        _cycle_shared_constant_edited_cat, {"tag0": _spec(), "tag1": _spec()}))


def _cycle_then_tagged_output(ep):
    """tag0 = {sin, tan} (not convex); tag1 = the output node (and the last mul)."""
    _tag_sin_tan(ep, "tag0")
    last = ep.graph.output_node()
    last.meta["delegation_tag"] = "tag1"
    last.args[0][0].meta["delegation_tag"] = "tag1"


def build_cycle_then_tagged_output() -> Built:
    return _single(CatThenSinCosTan(), _cat_inputs(), _FnPartitioner(
        _cycle_then_tagged_output, {"tag0": _spec(), "tag1": _spec()}))


def _failing_then_cycle(ep):
    """tag0 = {add, cat} for a backend that fails; tag1 not convex, as above."""
    _tag_add_and_cat(ep, "tag0")
    _tag_sin_tan(ep, "tag1")


def build_failing_then_cycle() -> Built:
    return _single(CatThenSinCosTan(), _cat_inputs(), _FnPartitioner(
        _failing_then_cycle, {"tag0": _spec(ModelsFailingBackend.__name__), "tag1": _spec()}))


def _owned_update_read_then_failing(ep):
    """t owns the buffer whose update is read outside it; f = {sin} for a backend that fails."""
    _tag_owned_update_read(ep, cycle=False)
    for n in ep.graph.nodes:
        if n.op == "call_function" and n.target == exir_ops.edge.aten.sin.default:
            n.meta["delegation_tag"] = "f"


def build_owned_update_read_and_failing(failing_first: bool) -> Callable[[], Built]:
    def build() -> Built:
        tags = {"t": _spec(), "f": _spec(ModelsFailingBackend.__name__)}
        if failing_first:
            tags = {"f": tags["f"], "t": tags["t"]}
        return _single(OwnedUpdateRead(), [(torch.ones(2, 2),)],
                       _FnPartitioner(_owned_update_read_then_failing, tags))
    return build


class TaggedInputsAndSharedBuffer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("k", torch.full((2, 5), 0.5))

    def forward(self, x, y):
        return torch.cat([x + 1, y], 1) * self.k + self.k


def _tag_inputs_and_shared_buffer(ep, edit_cat: bool):
    """tag0 = {x, y, k, the mul}: the user inputs x and y (read by the untagged add and
    cat) and the buffer k (read by the untagged last add) are all duplication candidates
    of tag0; with ``edit_cat`` the untagged cat's dim is 2, which the verifier rejects."""
    for n in ep.graph.nodes:
        if n.name in ("x", "y", "b_k") or n.target == exir_ops.edge.aten.mul.Tensor:
            n.meta["delegation_tag"] = "tag0"
        if edit_cat and n.target == exir_ops.edge.aten.cat.default:
            n.args = (n.args[0], 2)


def build_tagged_inputs_and_shared_buffer(edit_cat: bool) -> Callable[[], Built]:
    def build() -> Built:
        return _single(TaggedInputsAndSharedBuffer(), _cat_inputs(), _FnPartitioner(
            functools.partial(_tag_inputs_and_shared_buffer, edit_cat=edit_cat), {"tag0": _spec()}))
    return build


def _failing_default_and_override(ep):
    """tag "a" = {add, cat}, tag "b" = {cos}: each tag's backend fails in preprocess."""
    _tag_add_and_cat(ep, "a")
    for n in ep.graph.nodes:
        if n.op == "call_function" and n.target == exir_ops.edge.aten.cos.default:
            n.meta["delegation_tag"] = "b"


def build_failing_default_and_override(override_first: bool) -> Callable[[], Built]:
    """Two failing backends, one keeping the default ``preprocess_multimethod`` (run in
    fastlower's parallel batch), one overriding it: the first backend's error wins."""
    def build() -> Built:
        default, override = ModelsFailingBackend.__name__, ModelsFailingMultimethodBackend.__name__
        first, second = (override, default) if override_first else (default, override)
        return _single(CatThenSinCosTan(), _cat_inputs(), _FnPartitioner(
            _failing_default_and_override, {"a": _spec(first), "b": _spec(second)}))
    return build
