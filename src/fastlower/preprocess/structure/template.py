"""A structural class's template: one member's preprocess result, and how to re-make it
for another member from that member's constants and debug handles alone.

:func:`learn` reads a representative's real result: which constant and catalog step
(:mod:`.constant_bytes`) gave each named data entry, and where the blob holds each
named key and node debug handle (:mod:`.xnnpack_blob`). :func:`derive` then builds a
member's result: the steps applied to its constants, the NamedDataStore filled in the
representative's order, the blob with the member's keys and handles written in place.
Either raises :class:`NotDerivable` (with the reason) for anything it does not model.
The template is plain data (positions, strings, bytes), so it can be cached.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, List, Optional, Tuple

import torch
import xxhash
from executorch.exir._serialize._named_data_store import NamedDataStore
from executorch.exir.backend.backend_details import PreprocessResult

from . import constant_bytes, value_case
from .shape_key import PartitionShape
from .xnnpack_blob import BlobLayoutError, read_fields


class NotDerivable(Exception):
    """A partition whose result cannot be derived; the message says why."""


@dataclass(frozen=True)
class Entry:
    """One named data entry: ``prefix + sha256(step(constants[constant]))``.
    ``alternatives``: other steps that gave the same bytes on the samples; a member is
    derived only where they give its bytes too (the samples did not tell them apart)."""

    prefix: str
    constant: int
    step: str
    alignment: int
    tensor_layout: Optional[object]
    alternatives: Tuple[str, ...] = ()


@dataclass(frozen=True)
class Template:
    key: str
    blob: bytes
    entries: Tuple[Entry, ...]
    buffer_indices: Tuple[int, ...]  # each entry's buffer in the representative's store
    key_slots: Tuple[Tuple[int, int], ...]  # (blob position, entry)
    handle_slots: Tuple[Tuple[int, Tuple[int, ...]], ...]  # (blob position, nodes with it)
    unread: Tuple[Tuple[int, str], ...]  # constants no entry holds: (position, xxh3 digest)
    handle_map: Optional[dict]  # the representative's (empty) debug-handle map, as it was
    cases: Tuple[str, ...] = ()  # each constant's value case (:mod:`.value_case`)


def _fingerprint(tensor: torch.Tensor) -> str:
    data = tensor.detach().contiguous().reshape(-1)
    hasher = xxhash.xxh3_128()
    hasher.update(f"{tuple(tensor.shape)}{tensor.dtype}".encode())
    if data.numel():
        hasher.update(data.view(torch.uint8).numpy().data)
    return hasher.hexdigest()


def _data_lengths(store, keys: List[str]) -> Optional[List[int]]:
    """The byte length of each key's data, or ``None`` when a buffer is not in memory."""
    lengths = []
    for key in keys:
        data = store.buffers[store.pte_data[key].buffer_index]
        if not isinstance(data, (bytes, bytearray)):
            return None
        lengths.append(len(data))
    return lengths


def learn(shape: PartitionShape, result: PreprocessResult) -> Template:
    """The template of ``result``, the real preprocess of the partition ``shape``."""
    if result.debug_handle_map or result._delegate_info_meta is not None:
        raise NotDerivable("the result has a debug-handle map or delegate info")
    store = result.data_store_output
    if store is not None and store.external_data:
        raise NotDerivable("named data stored outside the .pte")
    entries_out = store.pte_data if store is not None else {}
    keys = list(entries_out)
    explained, why = constant_bytes.explain(keys, shape.constants,
                                            _data_lengths(store, keys))
    if explained is None:
        raise NotDerivable(why)
    entries = tuple(Entry(_prefix(key), position, step, entries_out[key].alignment,
                          entries_out[key].tensor_layout, others)
                    for key, (position, step, others) in zip(keys, explained))
    blob = bytes(result.processed_bytes)
    try:
        fields = read_fields(blob)
    except BlobLayoutError as exc:
        raise NotDerivable(f"blob not read: {exc}") from exc
    if fields.constant_segment:
        raise NotDerivable("the blob holds constant bytes inline")
    where = {key: i for i, key in enumerate(keys)}
    key_slots = []
    for position, key in fields.keys:
        if not key:  # constant_data[0], the reserved entry
            continue
        if key not in where:
            raise NotDerivable(f"blob key {key[:18]}... is not in the named data")
        key_slots.append((position, where[key]))
    handle_slots = []
    for position, value in fields.handles:
        # a decomposed operator's nodes share their handle: all must share it in a member too
        nodes = tuple(k for k, handle in enumerate(shape.handles) if handle == value)
        if not nodes:
            raise NotDerivable(f"debug handle {value} is on no input node")
        handle_slots.append((position, nodes))
    read = {entry.constant for entry in entries}
    unread = tuple((i, _fingerprint(t)) for i, t in enumerate(shape.constants) if i not in read)
    return Template(shape.key, blob, entries,
                    tuple(entries_out[key].buffer_index for key in keys),
                    tuple(key_slots), tuple(handle_slots), unread, result.debug_handle_map,
                    value_case.cases(shape.constants))


def derive(template: Template, shape: PartitionShape) -> PreprocessResult:
    """The result the backend gives for ``shape``, a member of ``template``'s class."""
    if shape.key != template.key:
        raise NotDerivable("another structure")
    for position, fingerprint in template.unread:
        if _fingerprint(shape.constants[position]) != fingerprint:
            raise NotDerivable(f"constant {position}, which no named data holds, differs")
    why = value_case.first_difference(template.cases, shape.constants)
    if why:
        raise NotDerivable(why)
    store = NamedDataStore()
    keys: List[str] = []
    for entry in template.entries:
        data = _entry_bytes(entry, shape.constants[entry.constant])
        key = entry.prefix + constant_bytes.digest(data)
        keys.append(key)
        store.add_named_data(key, data, entry.alignment, None, entry.tensor_layout)
    output = store.get_named_data_store_output()
    if tuple(output.pte_data) != tuple(keys) or tuple(
            output.pte_data[k].buffer_index for k in keys) != template.buffer_indices:
        raise NotDerivable("its constants share buffers differently")
    blob = bytearray(template.blob)
    for position, index in template.key_slots:
        encoded = keys[index].encode("ascii")
        blob[position:position + len(encoded)] = encoded
    for position, nodes in template.handle_slots:
        handle = shape.handles[nodes[0]]
        if not isinstance(handle, int) or not 0 < handle < 2 ** 32:
            raise NotDerivable(f"node {nodes[0]} has debug handle {handle!r}")
        if any(shape.handles[k] != handle for k in nodes):
            raise NotDerivable(f"nodes {nodes} do not share one debug handle")
        struct.pack_into("<I", blob, position, handle)
    return PreprocessResult(processed_bytes=bytes(blob), debug_handle_map=(
        None if template.handle_map is None else {}), data_store_output=output)


def _entry_bytes(entry: Entry, tensor: torch.Tensor) -> bytes:
    """The entry's bytes for a member's constant; :class:`NotDerivable` when a step fails
    or when a step the samples could not tell from it gives other bytes."""
    try:
        data = constant_bytes.apply(entry.step, tensor)
        for other in entry.alternatives:
            if constant_bytes.same_function(entry.step, other, tensor):
                continue
            if constant_bytes.apply(other, tensor) != data:
                raise NotDerivable(
                    f"constant {entry.constant}: steps {entry.step} and {other} gave the "
                    "samples' bytes alike and differ on this member's values")
    except NotDerivable:
        raise
    except Exception as exc:  # e.g. values out of 4-bit range: the backend raises too
        raise NotDerivable(f"step {entry.step} of constant {entry.constant}: {exc!r}") from exc
    return data


def to_plain(template: Template) -> tuple:
    """The template as plain data (tuples, strings, ints, bytes), for the cache."""
    entries = tuple((e.prefix, e.constant, e.step, e.alignment, e.tensor_layout,
                     e.alternatives) for e in template.entries)
    return (template.key, template.blob, entries, template.buffer_indices, template.key_slots,
            template.handle_slots, template.unread, template.handle_map is None,
            template.cases)


def _prefix(key: str) -> str:
    parts = constant_bytes.split_key(key)
    if parts is None:  # explain() accepted only keys named the XNNPACK way
        raise NotDerivable(f"named key {key[:24]!r} is not a sha256 name")
    return parts[0]


def from_plain(value: Any) -> Template:
    """A template from :func:`to_plain`'s data; :class:`NotDerivable` if malformed (any
    ``Exception`` reading it, a blob that is not bytes, a position outside the blob or an
    index out of range)."""
    try:
        key, blob, entries, buffers, key_slots, handle_slots, unread, map_none, cases = value
        if not isinstance(blob, (bytes, bytearray)):  # bytes(n) of an int n: n zero bytes
            raise TypeError(f"the blob is a {type(blob).__name__}")
        template = Template(
            str(key), bytes(blob),
            tuple(Entry(str(p), int(c), str(s), int(a), layout, tuple(str(o) for o in others))
                  for p, c, s, a, layout, others in entries),
            tuple(int(b) for b in buffers),
            tuple((int(at), int(i)) for at, i in key_slots),
            tuple((int(at), tuple(int(k) for k in nodes)) for at, nodes in handle_slots),
            tuple((int(i), str(d)) for i, d in unread),
            None if map_none else {}, tuple(str(c) for c in cases))
    except Exception as exc:  # plain data of any shape: never KeyboardInterrupt, SystemExit
        raise NotDerivable(f"a cached template is malformed: {exc!r}") from exc
    if any(e.step not in constant_bytes.STEPS or e.prefix not in constant_bytes.PREFIXES
           or not set(e.alternatives) <= set(constant_bytes.STEPS) for e in template.entries):
        raise NotDerivable("a cached template names an unknown step")
    why = _out_of_range(template)
    if why is not None:
        raise NotDerivable(f"a cached template is malformed: {why}")
    return template


def _out_of_range(template: Template) -> Optional[str]:
    """Why a position or index of ``template`` would make :func:`derive` write outside the
    blob (a bytearray grows silently) or read a wrong constant, else None."""
    size, entries = len(template.blob), template.entries
    if any(e.constant < 0 for e in entries) or any(i < 0 for i, _ in template.unread):
        return "a negative constant position"
    for at, index in template.key_slots:
        if not 0 <= index < len(entries):
            return f"key slot of entry {index} of {len(entries)}"
        if not 0 <= at <= size - len(entries[index].prefix) - 64:  # a sha256 hex name
            return f"key slot at {at} in a blob of {size} bytes"
    for at, nodes in template.handle_slots:
        if not 0 <= at <= size - 4 or not nodes or min(nodes) < 0:
            return f"handle slot at {at} (nodes {nodes[:4]}) in a blob of {size} bytes"
    return None
