"""Where each tensor of a stored lowering came from, so that it can be re-made for new weights.

A lowering of checkpoint A is reused for checkpoint B (same structure key) only when every
tensor it holds has a provenance that B determines:

* **an input constant**: its bytes, shape and dtype are those of one of A's parameters,
  buffers or constants (a tensor subclass counted by its inner tensors, ``name.attr``),
  and B's value is that input's value in B. Which input, when two of A's inputs are
  equal, does not matter: A's and B's inputs must have the same *equality pattern*
  (:func:`same_pattern`), so equal inputs in A are equal in B;
* **a literal of the program**: a one-element tensor whose value is a number written in
  the input graph (``x + 1e-5`` lifted to a tensor by ExecuTorch's passes); the
  structure key holds the graph, so B's is the same.

Anything else (a constant some pass computed from values: BatchNorm folded into a
convolution, a transposed weight) has no provenance, and the lowering is not refit.

A provenance read off bytes is sound only where no other source explains the same bytes,
in either checkpoint, and where B's values are treated as A's were. So the refit refuses
(and the call lowers for real) when:

* a tensor is both a changed input constant and a literal of the program in A
  (``gate == 0.5`` beside ``y * 0.5``);
* a changed input is uniform or has one element (a zero bias, a ones norm weight, a
  scalar, which B could set equal to a literal): a tensor a pass computed, or a
  literal, could have the same bytes;
* a changed delegate constant is in another value case in B than in A (the delegate's
  template checks it, :mod:`fastlower.preprocess.structure.value_case`): the backend may read that.
  Outside delegates nothing the refit skips reads a value (the edge stage and the
  partitioners see fake tensors), so a non-delegated input may change case (an embedding
  that gains an exact zero, as random weights of 24M elements do).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Dict, Iterable, List, Optional, Set, Tuple

import torch
from torch.export import ExportedProgram

from ...preprocess.keys import content_digest
from ...preprocess.structure import value_case
from ..skim import skimmed, whole_storage


class NotRefittable(Exception):
    """The stored lowering cannot be re-made for the new weights; the message says why.
    ``structural``: the reason lies in the stored lowering alone (what a pass or backend
    did to its structure), so no checkpoint of that structure can be refit."""

    def __init__(self, message: str, structural: bool = False) -> None:
        super().__init__(message)
        self.structural = structural


class Skimmed(NotRefittable):
    """A value the refit needs was skimmed from the stored entry (:mod:`..skim`): read the
    entry whole and refit again."""


def flat_constants(program: ExportedProgram, strict: bool = True) -> Dict[str, torch.Tensor]:
    """The program's parameters, buffers and tensor constants, tensor subclasses flattened
    to their inner tensors (``name.attr``); a constant that is no tensor raises
    :class:`NotRefittable` (``strict``) or is left out."""
    found: Dict[str, torch.Tensor] = {}
    for name, value in {**program.state_dict, **program.constants}.items():
        if isinstance(value, torch.Tensor):
            _flatten(name, value, found)
        elif strict:
            raise NotRefittable(f"constant {name!r} is a {type(value).__name__}, not a tensor")
    return found


def _flatten(name: str, tensor: torch.Tensor, out: Dict[str, torch.Tensor]) -> None:
    if type(tensor) in (torch.Tensor, torch.nn.Parameter) or not hasattr(
            type(tensor), "__tensor_flatten__"):
        out[name] = tensor
        return
    attributes, _ = tensor.__tensor_flatten__()  # type: ignore[attr-defined]
    for attribute in attributes:
        _flatten(f"{name}.{attribute}", getattr(tensor, attribute), out)


def digest(tensor: torch.Tensor) -> str:
    """The content digest the lowering key writes for a strided tensor (its bytes)."""
    if tensor.layout != torch.strided or tensor.is_quantized:
        raise NotRefittable(f"a {tensor.layout} tensor is not refit")
    found = skimmed(tensor)
    if found is not None:  # a placeholder: the digest of the bytes the entry's MAC took
        if not whole_storage(tensor):
            raise Skimmed("a skimmed tensor is not its whole storage")
        return found.digest
    if tensor.device.type == "meta":
        raise Skimmed("a meta tensor has no value to trace")
    return content_digest(tensor)


def pattern(digests: Dict[str, str]) -> List[int]:
    """For each name in order, the position of the first name with the same digest."""
    first: Dict[str, int] = {}
    return [first.setdefault(value, position) for position, value in enumerate(digests.values())]


def same_pattern(a: Dict[str, str], b: Dict[str, str]) -> Optional[str]:
    """None when ``a`` and ``b`` name the same inputs and make the same ones equal, else why."""
    if list(a) != list(b):
        missing = sorted(set(a) ^ set(b))
        return f"the constants differ by name ({missing[:3]})"
    in_a, in_b = pattern(a), pattern(b)
    if in_a == in_b:
        return None
    names = list(a)
    for position, (left, right) in enumerate(zip(in_a, in_b)):
        if left != right:
            return (f"constant {names[position]!r} equals another in one checkpoint only "
                    f"({names[min(left, right)]!r})")
    return "the equality pattern differs"


def literals(programs: Iterable[ExportedProgram]) -> Set[float]:
    """Every number written as an argument in the programs' graphs."""
    found: Set[float] = set()

    def visit(value: object) -> None:
        if isinstance(value, bool):
            return
        if isinstance(value, (int, float)) and math.isfinite(value):
            found.add(float(value))
        elif isinstance(value, (list, tuple)):
            for item in value:
                visit(item)
        elif isinstance(value, dict):
            for item in value.values():
                visit(item)

    for program in programs:
        for module in program.graph_module.modules():
            if isinstance(module, torch.fx.GraphModule):
                for node in module.graph.nodes:
                    visit(node.args)
                    visit(node.kwargs)
    return found


@dataclass
class Sources:
    """A's inputs by content, B's inputs by name, and the numbers A's graphs hold."""

    a_by_digest: Dict[str, List[str]]  # digest -> A's input names with it
    b_tensors: Dict[str, torch.Tensor]  # the same shapes and dtypes as A's (one structure)
    changed: Set[str]  # input names whose value differs between A and B
    numbers: Set[float]

    def new_value(self, where: str, stored: torch.Tensor) -> Tuple[torch.Tensor, bool]:
        """B's tensor for the tensor ``stored`` at ``where`` in A's lowering, and whether
        it differs from A's; :class:`NotRefittable` when it has no provenance."""
        literal = stored.numel() == 1 and _is_literal(stored, self.numbers)
        names = self.a_by_digest.get(digest(stored), [])
        for name in names:
            source = self.b_tensors[name]
            if (source.shape, source.dtype) == (stored.shape, stored.dtype):
                if name in self.changed:  # unchanged: B's value is A's, whatever the source
                    if literal:
                        raise NotRefittable(f"{where} is both input {name!r} and a literal of "
                                            "the program in the cached checkpoint")
                    _check_changed(f"{where} (input {name!r})", stored, source)
                return _like(stored, source), name in self.changed
        if literal:
            return stored, False
        raise NotRefittable(f"{where} is no input constant and no literal of the program "
                            "(a pass computed it from values)", structural=True)


def _check_changed(where: str, a: torch.Tensor, b: torch.Tensor) -> None:
    """:class:`NotRefittable` unless A's value of a changed input is a distinct source (not
    uniform, more than one element)."""
    found = skimmed(a)
    if found is not None and found.periodic:
        raise Skimmed(f"{where}: skimmed, and its bytes may be uniform")
    if a.numel() == 1 or (found is None and "U" in value_case.case_of(a)):
        raise NotRefittable(f"{where} is {'one element' if a.numel() == 1 else 'uniform'} "
                            "and changed: another source could have its bytes")


def _is_literal(tensor: torch.Tensor, numbers: Set[float]) -> bool:
    value = tensor.detach().reshape(-1)[0]
    if value.dtype.is_complex:
        return False
    for number in numbers:
        try:
            if bool(torch.tensor(number, dtype=value.dtype) == value):
                return True
        except (RuntimeError, OverflowError):  # the number does not fit the dtype
            continue
    return False


def _like(stored: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    """``value`` in the form ``stored`` has (a parameter or not, its strides)."""
    plain = value.detach() if isinstance(value, torch.nn.Parameter) else value
    if plain.stride() != stored.stride():
        plain = torch.empty_strided(stored.shape, stored.stride(), dtype=stored.dtype).copy_(plain)
    if isinstance(stored, torch.nn.Parameter):
        return torch.nn.Parameter(plain, requires_grad=stored.requires_grad)
    return plain
