"""A constant's value case: the facts about its values that a backend may branch on.

A template (:mod:`.template`) learns which byte step gave each stored constant from the
samples that proved it, and a refit swaps one checkpoint's tensors for another's. Both
are sound only for members whose values are treated the way the samples' were. Where
ExecuTorch's XNNPACK path reads a value, the question it asks is one of these:

* **all zero** (every byte): an all-zero bias gives the same bytes stored as float32 as
  quantized to int32, so "stored as it is" would be learnt from it; any step of a zero
  tensor is zeros;
* **uniform** (every element equal, by bytes): a uniform weight is its own channels-last
  layout and its own transpose, so the layout step is not determined by it;
* for floating tensors, **a zero element**, **a negative zero**, **a positive** and **a
  negative subnormal element** and **a non-finite element**: XNNPACK rejects quantization
  scales that are zero, positive subnormal or not finite (``ValueError: Invalid
  quantization scale``), and lets negative subnormals pass; **a tiny** (below 2**-60)
  **or huge** (above 2**60) **finite element**: a bias quantized to int32 is divided by a
  per-channel scale times the input scale (a literal of the graph), and an all-zero bias
  becomes ``INT_MIN`` where that product underflows;
* for int8 tensors, **a value outside the signed 4-bit range**: 4-bit packing reads it.

A member is derived (or a checkpoint refit) only when each of its constants is in the
same case as the samples' constant at the same position; otherwise the backend runs,
and raises where it raises. Tensors of one case are the same in every fact above, so the
backend's value reads listed in docs/structure.md take the same branch for them.
"""

from __future__ import annotations

from typing import Dict, Sequence, Tuple

import torch

_TINY, _HUGE = 2.0 ** -60, 2.0 ** 60
_INT_VIEW: Dict[int, torch.dtype] = {1: torch.uint8, 2: torch.int16, 4: torch.int32,
                                     8: torch.int64}


def _elements(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.detach().contiguous().reshape(-1)


def _as_bits(flat: torch.Tensor) -> torch.Tensor:
    """A floating or complex tensor's elements as integers of the same width (NaN equals
    itself)."""
    width = _INT_VIEW.get(flat.element_size())
    if width is None or flat.is_complex():
        return flat.view(torch.uint8)
    return flat.view(width)


def case_of(tensor: torch.Tensor) -> str:
    """The value case of ``tensor`` as a short string of flags (empty for none):
    ``Z`` all zero bytes, ``U`` uniform, ``z`` a zero element, ``-`` a negative zero,
    ``s`` / ``S`` a positive / negative subnormal element, ``t`` / ``h`` a tiny / huge
    finite element, ``n`` a non-finite element, ``4`` an int8 value outside the 4-bit
    range."""
    if tensor.layout != torch.strided or tensor.is_quantized:
        return "?" + str(tensor.layout)
    flat = _elements(tensor)
    if flat.numel() == 0:
        return "E"
    if flat.is_floating_point():
        ordinary = _ordinary_float_case(flat)
        if ordinary is not None:
            return ordinary
        return _bit_flags(flat) + "".join(_float_flags(flat))
    if flat.is_complex():
        return _bit_flags(flat)
    low, high = (int(v) for v in torch.aminmax(flat.view(torch.uint8) if flat.dtype == torch.bool
                                               else flat))
    flags = ("Z" if low == high == 0 else "") + ("U" if low == high and flat.numel() > 1 else "")
    if flat.dtype == torch.int8 and (low < -8 or high > 7):
        flags += "4"
    return flags


def _ordinary_float_case(flat: torch.Tensor) -> "str | None":
    """The case of a floating tensor with no zero, subnormal, tiny, huge or non-finite
    element ("" or "U"), found in three reductions; None when it has one of those."""
    smallest = float(torch.linalg.vector_norm(flat, ord=float("-inf")))
    largest = float(torch.linalg.vector_norm(flat, ord=float("inf")))
    if not (_TINY <= smallest and largest <= _HUGE):  # NaN compares false: not ordinary
        return None
    if flat.numel() == 1:
        return ""
    low, high = torch.aminmax(flat)
    return "U" if bool(low == high) else ""


def _bit_flags(flat: torch.Tensor) -> str:
    bits = _as_bits(flat)
    flags = "" if bool(bits.any()) else "Z"
    if flat.numel() > 1 and bool((bits == bits[0]).all()):
        flags += "U"
    return flags


def _float_flags(flat: torch.Tensor) -> Tuple[str, ...]:
    zero = flat == 0
    flags = []
    if bool(zero.any()):
        flags.append("z")
        if bool((zero & torch.signbit(flat)).any()):
            flags.append("-")
    magnitude = flat.abs()
    subnormal = (magnitude < torch.finfo(flat.dtype).tiny) & ~zero
    if bool((subnormal & ~torch.signbit(flat)).any()):
        flags.append("s")
    if bool((subnormal & torch.signbit(flat)).any()):
        flags.append("S")
    finite = torch.isfinite(flat)
    if bool(((magnitude < _TINY) & ~zero).any()):
        flags.append("t")
    if bool(((magnitude > _HUGE) & finite).any()):
        flags.append("h")
    if not bool(finite.all()):
        flags.append("n")
    return tuple(flags)


def cases(tensors: Sequence[torch.Tensor]) -> Tuple[str, ...]:
    return tuple(case_of(t) for t in tensors)


def first_difference(expected: Sequence[str], tensors: Sequence[torch.Tensor]) -> str:
    """Empty when each tensor is in the expected case, else which one is not and how."""
    if len(expected) != len(tensors):
        return f"{len(tensors)} constants where the samples had {len(expected)}"
    for position, (case, tensor) in enumerate(zip(expected, tensors)):
        found = case_of(tensor)
        if found != case:
            return (f"constant {position} is in another value case ({describe(found)}; "
                    f"the samples': {describe(case)})")
    return ""


_WORDS = {"Z": "all zero", "U": "uniform", "z": "a zero element", "-": "a negative zero",
          "s": "a positive subnormal element", "S": "a negative subnormal element",
          "t": "a tiny element", "h": "a huge element", "n": "a non-finite element",
          "4": "a value outside the 4-bit range", "E": "empty"}


def describe(case: str) -> str:
    if case.startswith("?"):
        return f"a {case[1:]} tensor"
    return ", ".join(_WORDS.get(flag, flag) for flag in case) or "ordinary values"
