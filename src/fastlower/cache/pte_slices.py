"""The emitter's large byte strings found inside the ``.pte``: a ``to_executorch`` entry
holds them once.

``to_executorch``'s result holds each constant tensor's bytes twice: in the emitter's
program (``constant_buffer[i].storage``, ``mutable_data``, inline delegate data) and in
the ``.pte`` it serialized them into. An LLM's un-delegated embedding alone is ~1 GB at
Llama 3.2 1B's shape, so an entry holding both would be nearly twice the ``.pte``. Each
such byte string that is found, byte for byte, in the ``.pte`` is written as a
reference into it (:func:`fastlower.cache.serialize.dumps`'s ``slices``) and read back
as a copy of those bytes: the hit's emitter output is the miss's, without the bytes
being read from disk and authenticated twice. One not found is written as it is.

Found means compared in full (``bytes.startswith`` at the offset), never assumed from
the ``.pte``'s layout; the entry is still rebuilt and compared with what it was made
from before it is stored (:func:`fastlower.cache.access.store_checked`).
"""

from __future__ import annotations

from typing import Any, Dict, Iterable, Iterator, List, Optional, Tuple

from .serialize.writer import BLOB_MIN_BYTES

_PROBE = 64  # bytes of a string searched for before it is compared in full
_TRIES = 16  # candidate offsets compared per string before it is given up
_MISSES = 2  # strings not found before the search stops (each miss scans the .pte)


def big_bytes(emitter_output: Any) -> List[bytes]:
    """The emitter output's ``bytes`` large enough to be written out of the pickle, in
    the order the ``.pte`` lays them out (its constant segment first)."""
    program = getattr(emitter_output, "program", None)
    found: List[bytes] = []

    def add(values: Iterable[Any], field: Optional[str]) -> None:
        for value in values or ():
            data = getattr(value, field) if field else value
            if type(data) is bytes and len(data) >= BLOB_MIN_BYTES:
                found.append(data)

    if program is not None:
        add(getattr(program, "constant_buffer", None) or (), "storage")
        add(getattr(program, "backend_delegate_data", None) or (), "data")
    add(getattr(emitter_output, "mutable_data", None) or (), "storage")
    add(getattr(emitter_output, "external_constant_buffer", None) or (), None)
    return found


def locate(container: bytes, parts: Iterable[bytes]) -> Dict[int, Tuple[bytes, int]]:
    """``{id(part): (container, offset)}`` for each part found whole in ``container``."""
    found: Dict[int, Tuple[bytes, int]] = {}
    start, misses = 0, 0
    for part in parts:
        if id(part) in found:
            continue
        at = _find(container, part, start)
        if at is None and start:
            at = _find(container, part, 0)
        if at is None:
            misses += 1
            if misses >= _MISSES:
                break
            continue
        found[id(part)] = (container, at)
        start = at + len(part)
    return found


def _find(container: bytes, part: bytes, start: int) -> Optional[int]:
    for at in _candidates(container, part[:_PROBE], start):
        if container.startswith(part, at):
            return at
    return None


def _candidates(container: bytes, probe: bytes, start: int) -> Iterator[int]:
    at = container.find(probe, start)
    for _ in range(_TRIES):
        if at < 0:
            return
        yield at
        at = container.find(probe, at + 1)
