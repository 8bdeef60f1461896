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


def _storage_view(tensor: torch.Tensor) -> "ctypes.Array[ctypes.c_ubyte]":
    """The whole untyped storage of ``tensor``, as XNNPACK reads it, without a copy (valid
    while ``tensor`` lives)."""
    storage = tensor.untyped_storage()
    if storage.device.type != "cpu":
        raise ValueError(f"a constant on {storage.device}, not in this process's memory")
    return (ctypes.c_ubyte * storage.nbytes()).from_address(storage.data_ptr())


def _storage_bytes(tensor: torch.Tensor) -> bytes:
    """The whole untyped storage of ``tensor`` (one copy through ctypes; ``bytes(storage)``
    would go element by element through Python)."""
    return bytes(_storage_view(tensor))


def _as_stored(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.contiguous()


def _as_float32(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.contiguous().to(dtype=torch.float32).contiguous()


def _as_bfloat16(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.to(torch.bfloat16)


def _channels_last(tensor: torch.Tensor) -> torch.Tensor:
    if tensor.dim() != 4:
        raise ValueError("channels-last needs 4 dimensions")
    return tensor.contiguous().to(memory_format=torch.channels_last)


def _packed_4bit(tensor: torch.Tensor) -> torch.Tensor:
    from executorch.backends.xnnpack.operators.node_visitor import NodeVisitor

    if tensor.dtype != torch.int8:
        raise ValueError("4-bit packing takes int8 values")
    return NodeVisitor.convert_to_qc4w(tensor.contiguous())


# each step gives the tensor whose whole storage is the bytes stored
STEPS: Dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "stored": _as_stored, "float32": _as_float32, "bfloat16": _as_bfloat16,
    "channels_last": _channels_last, "packed_4bit": _packed_4bit,
}
_CONVERTS_TO = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def step_length(step: str, tensor: torch.Tensor) -> Optional[int]:
    """How many bytes ``step`` gives for ``tensor``, where that follows from its dtype,
    shape and layout alone; ``None`` where only running the step tells.

    ``stored`` reads the storage as it is when the tensor is contiguous (all of it, a
    view's included) and a fresh compact copy otherwise; a conversion to another dtype
    makes a fresh tensor of ``numel`` elements, dense whatever the input's strides."""
    if step == "stored":
        if tensor.is_contiguous():
            return tensor.untyped_storage().nbytes()
        return tensor.numel() * tensor.element_size()
    target = _CONVERTS_TO.get(step)
    if target is not None and tensor.dtype != target:
        return tensor.numel() * target.itemsize
    return None


PREFIXES = ("", "scale_")
# why explain() gives up when two equal constants hash to one key: a fact of these
# values, not of the structure (another checkpoint's may differ)
AMBIGUOUS = "comes from two equal constants"


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def apply(step: str, tensor: torch.Tensor) -> bytes:
    return _storage_bytes(STEPS[step](tensor))


def step_digest(step: str, tensor: torch.Tensor) -> str:
    """``digest(apply(step, tensor))``, hashed in place."""
    made = STEPS[step](tensor)
    return hashlib.sha256(_storage_view(made)).hexdigest()


def split_key(key: str) -> Optional[Tuple[str, str]]:
    """``(prefix, sha256 hex)`` of a key named the XNNPACK way, else ``None``."""
    for prefix in sorted(PREFIXES, key=len, reverse=True):
        rest = key[len(prefix):]
        if key.startswith(prefix) and len(rest) == 64 and all(c in "0123456789abcdef"
                                                                for c in rest):
            return prefix, rest
    return None


def explain(keys: Sequence[str], constants: Sequence[torch.Tensor],
            lengths: Optional[Sequence[int]] = None
            ) -> Tuple[Optional[List[Tuple[int, str, Tuple[str, ...]]]], str]:
    """For each key, ``(constant position, step, other steps)``: the constant and step
    whose bytes hash to it, and the other catalog steps that give the same bytes from
    that constant (on these values: a zero or uniform tensor is its own channels-last
    layout); ``None`` and why when a key has no explanation or two different constants
    explain it.

    ``lengths``, the byte lengths of the keys' data: a step whose :func:`step_length` is
    none of them is not run (bytes of another length cannot hash to any key, nor equal
    bytes that do), which leaves the answer as it is without them."""
    wanted = None if lengths is None else set(lengths)
    digests: Dict[str, List[Tuple[int, str]]] = {}
    for position, tensor in enumerate(constants):
        for step in STEPS:
            if wanted is not None:
                length = step_length(step, tensor)
                if length is not None and length not in wanted:
                    continue
            try:
                hashed = step_digest(step, tensor)
            except Exception:  # the step does not apply to this constant
                continue
            digests.setdefault(hashed, []).append((position, step))
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
