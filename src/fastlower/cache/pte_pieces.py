"""A ``.pte`` kept as the pieces ExecuTorch assembled it from: its constants once.

``to_executorch``'s result holds each constant tensor's bytes in the emitter's program
(``constant_buffer[i].storage``, inline delegate data) and in the ``.pte``. ExecuTorch
builds the ``.pte`` as a ``Cord`` of pieces, and the constants' pieces are the very
``bytes`` objects the emitter's program holds. A ``to_executorch`` entry keeps the
``.pte`` as that list of pieces, so the entry's writer (which writes each large
``bytes`` object once, by identity) writes each constant once: an LLM's un-delegated
embedding (~1 GB at Llama 3.2 1B's shape) would otherwise be in the entry twice. A hit
reads each piece once and builds the served ``Cord`` from them, sharing them with the
emitter output it serves, as the reference's result does: nothing is copied.
"""

from __future__ import annotations

from typing import Any, List, Sequence

from executorch.exir._serialize._cord import Cord


def pieces(cord: Any) -> List[bytes]:
    """The ``.pte`` of ``cord`` as its pieces (the same objects), or as one ``bytes`` when
    a piece is not ``bytes`` (a file-backed one)."""
    buffers = list(getattr(cord, "_buffers", None) or ())
    if buffers and all(type(piece) is bytes for piece in buffers):
        return buffers
    return [bytes(cord)]


def cord(parts: Sequence[bytes]) -> Cord:
    """A ``Cord`` of ``parts`` (no copy)."""
    made = Cord()
    for part in parts:
        made.append(part)
    return made


def size(parts: Sequence[bytes]) -> int:
    return sum(len(part) for part in parts)


def same(a: Sequence[bytes], b: Sequence[bytes]) -> bool:
    """Whether the pieces ``a`` and ``b`` make the same bytes (compared in place when they
    are cut alike, joined otherwise)."""
    if size(a) != size(b):
        return False
    if [len(part) for part in a] == [len(part) for part in b]:
        return all(x == y for x, y in zip(a, b))
    return b"".join(a) == b"".join(b)
