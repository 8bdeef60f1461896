"""Where an XNNPACK delegate blob holds what differs between partitions of one structure.

XNNPACK's ``processed_bytes`` are a header (``XNNHeader``), a flatbuffer ``XNNGraph``
(``backends/xnnpack/serialization/schema.fbs``) and a constant segment. Two partitions
of one structure differ in it only by the named keys of their constants (strings in
``XNNGraph.constant_data[i].named_key``) and by each node's ``XNode.debug_handle``.
This module reads the flatbuffer by its vtables and returns where those fields sit,
so a derivation can overwrite them in place (same length, same layout).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import List, Optional, Tuple

# field slots (vtable positions), from schema.fbs: a union takes two slots
_GRAPH_XNODES = 1
_GRAPH_CONSTANT_DATA = 8
_XNODE_DEBUG_HANDLE = 2
_CONSTANT_NAMED_KEY = 2
_HEADER_MAGIC = b"XH00"


class BlobLayoutError(ValueError):
    """The bytes are not an XNNPACK blob this module can read."""


@dataclass(frozen=True)
class BlobFields:
    """Positions in the blob: each named key (position, the key) and each node's debug
    handle (position, value); ``constant_segment`` is the constant segment's size."""

    keys: Tuple[Tuple[int, str], ...]
    handles: Tuple[Tuple[int, int], ...]
    constant_segment: int


def _u32(data: bytes, at: int) -> int:
    if at < 0 or at + 4 > len(data):
        raise BlobLayoutError(f"read past the end at {at}")
    return struct.unpack_from("<I", data, at)[0]


def _field(data: bytes, table: int, slot: int) -> Optional[int]:
    """Absolute position of a table's field, or ``None`` when the field is absent."""
    vtable = table - struct.unpack_from("<i", data, table)[0]
    if vtable < 0 or vtable + 4 > len(data):
        raise BlobLayoutError(f"vtable out of range at {vtable}")
    vtable_size = struct.unpack_from("<H", data, vtable)[0]
    entry = 4 + 2 * slot
    if entry + 2 > vtable_size:
        return None
    offset = struct.unpack_from("<H", data, vtable + entry)[0]
    return table + offset if offset else None


def _vector_of_tables(data: bytes, table: int, slot: int) -> List[int]:
    at = _field(data, table, slot)
    if at is None:
        return []
    vector = at + _u32(data, at)
    return [vector + 4 + 4 * i + _u32(data, vector + 4 + 4 * i)
            for i in range(_u32(data, vector))]


def read_fields(blob: bytes) -> BlobFields:
    """The named keys and debug handles of an XNNPACK blob, with their positions."""
    if len(blob) < 32 or blob[4:8] != _HEADER_MAGIC:
        raise BlobLayoutError("no XNNPACK header")
    flatbuffer_offset, flatbuffer_size = struct.unpack_from("<II", blob, 10)
    (constant_offset,) = struct.unpack_from("<I", blob, 18)
    (constant_size,) = struct.unpack_from("<Q", blob, 22)
    end = max(flatbuffer_offset + flatbuffer_size, constant_offset + constant_size)
    if end > len(blob):
        raise BlobLayoutError("header sizes past the end")
    data = blob[flatbuffer_offset:flatbuffer_offset + flatbuffer_size]
    root = _u32(data, 0)
    keys = []
    for constant in _vector_of_tables(data, root, _GRAPH_CONSTANT_DATA):
        at = _field(data, constant, _CONSTANT_NAMED_KEY)
        if at is None:
            continue
        text = at + _u32(data, at)
        length = _u32(data, text)
        raw = data[text + 4:text + 4 + length]
        if len(raw) != length:
            raise BlobLayoutError("string past the end")
        keys.append((flatbuffer_offset + text + 4, raw.decode("ascii", "replace")))
    handles = []
    for node in _vector_of_tables(data, root, _GRAPH_XNODES):
        at = _field(data, node, _XNODE_DEBUG_HANDLE)
        if at is None:  # a handle equal to the default (0) is not written
            raise BlobLayoutError("a node without a debug handle field")
        handles.append((flatbuffer_offset + at, _u32(data, at)))
    return BlobFields(tuple(keys), tuple(handles), constant_size)
