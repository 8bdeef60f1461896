"""How a backend turned a partition's constant into the bytes it stored: a small catalog.

XNNPACK (``operators/node_visitor.py``) stores each constant it serializes in the
NamedDataStore under ``sha256(bytes)`` (scales under ``"scale_" + sha256``), where the
bytes are the constant's storage after one of a few value-independent steps: as it is,
as float32, as bfloat16 (group-wise scales), in channels-last order, or packed to 4 bits
(``convert_to_qc4w``, called as XNNPACK's own function). Each step below repeats those
operations exactly; :func:`explain` finds, for each stored entry, the constant and step
that give its bytes, identified by the sha256 the backend itself put in the key.
Anything not explained (a constant a pass computed from values, a step not in the
catalog) means the partition's structure is not derived.
"""

from __future__ import annotations

import ctypes
import hashlib
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch


def _storage_bytes(tensor: torch.Tensor) -> bytes:
    """The whole untyped storage of ``tensor``, as XNNPACK reads it (one copy through
    ctypes; ``bytes(storage)`` would go element by element through Python)."""
    storage = tensor.untyped_storage()
    size = storage.nbytes()
    return ctypes.string_at(storage.data_ptr(), size) if size else b""


def _as_stored(tensor: torch.Tensor) -> bytes:
    return _storage_bytes(tensor.contiguous())


def _as_float32(tensor: torch.Tensor) -> bytes:
    return _storage_bytes(tensor.contiguous().to(dtype=torch.float32).contiguous())


def _as_bfloat16(tensor: torch.Tensor) -> bytes:
    return _storage_bytes(tensor.to(torch.bfloat16))


def _channels_last(tensor: torch.Tensor) -> bytes:
    if tensor.dim() != 4:
        raise ValueError("channels-last needs 4 dimensions")
    return _storage_bytes(tensor.contiguous().to(memory_format=torch.channels_last))


def _packed_4bit(tensor: torch.Tensor) -> bytes:
    from executorch.backends.xnnpack.operators.node_visitor import NodeVisitor

    if tensor.dtype != torch.int8:
        raise ValueError("4-bit packing takes int8 values")
    return _storage_bytes(NodeVisitor.convert_to_qc4w(tensor.contiguous()))


STEPS: Dict[str, Callable[[torch.Tensor], bytes]] = {
    "stored": _as_stored, "float32": _as_float32, "bfloat16": _as_bfloat16,
    "channels_last": _channels_last, "packed_4bit": _packed_4bit,
}
PREFIXES = ("", "scale_")
# why explain() gives up when two equal constants hash to one key: a fact of these
# values, not of the structure (another checkpoint's may differ)
AMBIGUOUS = "comes from two equal constants"


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def apply(step: str, tensor: torch.Tensor) -> bytes:
    return STEPS[step](tensor)


def split_key(key: str) -> Optional[Tuple[str, str]]:
    """``(prefix, sha256 hex)`` of a key named the XNNPACK way, else ``None``."""
    for prefix in sorted(PREFIXES, key=len, reverse=True):
        rest = key[len(prefix):]
        if key.startswith(prefix) and len(rest) == 64 and all(c in "0123456789abcdef"
                                                                for c in rest):
            return prefix, rest
    return None


def explain(keys: Sequence[str], constants: Sequence[torch.Tensor]
            ) -> Tuple[Optional[List[Tuple[int, str, Tuple[str, ...]]]], str]:
    """For each key, ``(constant position, step, other steps)``: the constant and step
    whose bytes hash to it, and the other catalog steps that give the same bytes from
    that constant (on these values: a zero or uniform tensor is its own channels-last
    layout); ``None`` and why when a key has no explanation or two different constants
    explain it."""
    digests: Dict[str, List[Tuple[int, str]]] = {}
    for position, tensor in enumerate(constants):
        for step, function in STEPS.items():
            try:
                data = function(tensor)
            except Exception:  # the step does not apply to this constant
                continue
            digests.setdefault(digest(data), []).append((position, step))
    found = []
    for key in keys:
        parts = split_key(key)
        if parts is None:
            return None, f"named key {key[:24]!r} is not a sha256 name"
        sources = digests.get(parts[1], [])
        if not sources:
            return None, f"named data {key[:18]}... is no catalog step of a constant"
        if len({position for position, _ in sources}) > 1:
            return None, f"named data {key[:18]}... {AMBIGUOUS}"
        position, step = sources[0]
        found.append((position, step, tuple(other for _, other in sources[1:])))
    return found, ""


def same_function(step: str, other: str, tensor: torch.Tensor) -> bool:
    """Whether two steps give the same bytes for every tensor of ``tensor``'s dtype and
    shape (so a member's values cannot tell them apart)."""
    pair = {step, other}
    if pair == {"stored", "float32"}:
        return tensor.dtype == torch.float32
    if pair == {"stored", "bfloat16"}:
        return tensor.dtype == torch.bfloat16
    if pair == {"stored", "channels_last"}:
        return tensor.dim() == 4 and (tensor.shape[1] == 1
                                      or tensor.shape[2] * tensor.shape[3] == 1)
    return False
