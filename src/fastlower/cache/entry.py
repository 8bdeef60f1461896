"""The bytes of one lowering-cache entry, written and read as a stream.

Layout (integers big-endian)::

    MAGIC | u32 len | versions stamp | u64 len | info (pickle of plain data)
          | u64 len | pickled programs (see ``serialize``)
          | u32 count | (u64 len | storage bytes) * count
          | u32 count | (u64 len | large bytes object) * count
          | MAC

The MAC is keyed BLAKE3 under the cache folder's key over everything before it and
the key the entry is stored under (:mod:`fastlower.cache.trust.seal`). ``info`` holds
what the entry point needs beside the programs (the backends and their source
digests, the reader state of the symbolic sizes, the writer's base directories
(:mod:`.paths`) ...), as plain data (:mod:`fastlower.cache.trust.plain`). A reader sizes
the stream first, checks the magic and the stamp (another fastlower, torch or
executorch version: a foreign entry), then each length and count against the bytes
left before the MAC *before* anything is allocated or read for it, then the MAC
over everything it read, and only then decodes: a truncated, garbled, forged or
foreign entry is a :class:`~.errors.DamagedEntry` naming the section (never a
``MemoryError``), never a wrong program and never code run.

Each storage is read once, straight into the memory of the tensors that are returned
(no zero-filled buffer first, no copy after), and each large ``bytes`` object into the
object returned; the MAC takes each piece as it is read. The entry is read into the
process's own memory, not memory-mapped: what the MAC verified is what is used, even if
the file is changed or cut short afterwards (docs/caching.md, "Large models").
"""

from __future__ import annotations

import io
import struct
from typing import Any, BinaryIO, Dict, Iterator, List, Optional, Sequence, Union

import torch
import xxhash

from ..preprocess.keys import versions
from .trust import plain
from .trust.seal import SIZE as MAC_SIZE
from .trust.seal import Seal
from .errors import DamagedEntry, Uncacheable
from .key import ENTRY_FORMAT
from .serialize import Serialized, dumps, loads
from .skim import Skim, Skimmed

MAGIC = b"FLLOWERCACHE"
_MAX_INFO = 1 << 30
# a storage is read and MAC'd in pieces of this size (a piece is hashed while the read
# has left it in the processor's cache: ~8% faster than hashing the whole after)
_PIECE = 1 << 20


def stamp() -> bytes:
    return f"{versions()};lowering-entry={ENTRY_FORMAT}".encode()


class ChunkReader(io.RawIOBase):
    """A read-only stream over a list of buffers (diskcache copies it to its file)."""

    def __init__(self, chunks: Sequence[Union[bytes, memoryview]]) -> None:
        self.chunks = [memoryview(c).cast("B") for c in chunks if len(c)]
        self.index = 0
        self.offset = 0
        self.size = sum(len(c) for c in self.chunks)

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return sum(len(c) for c in self.chunks[:self.index]) + self.offset

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        """To an absolute position (``read`` sizes its stream this way)."""
        start = {io.SEEK_SET: 0, io.SEEK_CUR: self.tell(), io.SEEK_END: self.size}[whence]
        target = min(max(start + offset, 0), self.size)
        self.index, self.offset = 0, target
        while self.index < len(self.chunks) and self.offset >= len(self.chunks[self.index]):
            self.offset -= len(self.chunks[self.index])
            self.index += 1
        return target

    def readinto(self, buffer) -> int:
        target = memoryview(buffer).cast("B")
        written = 0
        while written < len(target) and self.index < len(self.chunks):
            chunk = self.chunks[self.index]
            take = min(len(target) - written, len(chunk) - self.offset)
            target[written:written + take] = chunk[self.offset:self.offset + take]
            written += take
            self.offset += take
            if self.offset == len(chunk):
                self.index += 1
                self.offset = 0
        return written


class Chunks(List[Union[bytes, memoryview]]):
    """An entry's bytes as chunks, and the :class:`~.serialize.Serialized` they frame (so
    the payload can be rebuilt from them without reading the chunks back: :func:`rebuild`)."""

    serialized: Serialized


def encode(info: Dict[str, Any], payload: Any, seal: Seal) -> Chunks:
    """The entry's bytes, as chunks (read them with :class:`ChunkReader`), signed with
    ``seal``; :class:`~.errors.Uncacheable` if ``payload`` has no faithful serialized
    form or ``info`` is not plain data. The tensor data is not copied: the chunks are
    views of the payload's storages."""
    serialized: Serialized = dumps(payload)
    info = dict(info, symbolic=serialized.header)
    try:
        info_bytes = plain.dumps(info)
    except Exception as exc:
        raise Uncacheable(f"the entry's info is not plain data: {exc!r}") from exc
    stamped = stamp()
    chunks: List[Union[bytes, memoryview]] = [
        MAGIC, struct.pack(">I", len(stamped)), stamped,
        struct.pack(">Q", len(info_bytes)), info_bytes,
        struct.pack(">Q", len(serialized.pickled)), serialized.pickled,
        struct.pack(">I", len(serialized.storages))]
    for storage in serialized.storages:
        chunks += [struct.pack(">Q", len(storage)), storage]
    chunks.append(struct.pack(">I", len(serialized.blobs)))
    for blob in serialized.blobs:
        chunks += [struct.pack(">Q", len(blob)), blob]
    for chunk in chunks:
        seal.update(chunk)
    result = Chunks(chunks)
    result.append(seal.digest())
    result.serialized = serialized
    return result


def rebuild(chunks: Chunks) -> Any:
    """The payload :func:`encode` framed in ``chunks``, rebuilt from its serialized form
    (the pickled programs and the storages, which stay views of the payload's own: no
    copy of the tensor data). What a reader of the entry gets back, less the framing."""
    serialized = chunks.serialized
    try:
        return loads(serialized.header, serialized.pickled, serialized.storages,
                     serialized.blobs)
    except DamagedEntry:
        raise
    except Exception as exc:
        raise DamagedEntry(f"cannot rebuild the programs: {exc!r}") from exc


class _Sealed:
    """Reads exactly, adding what it reads to the entry's MAC; every size is checked
    against the bytes left before the MAC (``left``) before anything is allocated."""

    def __init__(self, stream: BinaryIO, seal: Seal, left: int) -> None:
        self.stream = stream
        self.seal = seal
        self.left = left

    def take(self, size: int, what: str) -> None:
        """Counts ``size`` bytes of ``what`` off ``left``; :class:`DamagedEntry` if there
        are not that many."""
        if size > self.left:
            raise DamagedEntry(f"garbled {what}: {size} bytes, but {max(self.left, 0)} are "
                               "left before the MAC")
        self.left -= size

    def exact(self, size: int, what: str) -> bytearray:
        self.take(size, what)
        data = bytearray(size)
        view = memoryview(data)
        got = 0
        while got < size:
            n = self.stream.readinto(view[got:])
            if not n:
                raise DamagedEntry(f"truncated in the {what} ({got} of {size} bytes)")
            got += n
        self.seal.update(data)
        return data

    def storage(self, size: int, what: str) -> torch.Tensor:
        """``size`` bytes of ``what`` read straight into a new ``uint8`` tensor, whose
        storage the rebuilt tensors then share: one read per storage, no zero-filled
        buffer first and no copy after. The MAC takes each piece as it arrives, while it
        is still in the processor's cache."""
        self.take(size, what)
        data = torch.empty(size, dtype=torch.uint8)
        view = memoryview(data.numpy()).cast("B")
        got = 0
        while got < size:
            n = self.stream.readinto(view[got:got + _PIECE])
            if not n:
                raise DamagedEntry(f"truncated in the {what} ({got} of {size} bytes)")
            self.seal.update(view[got:got + n])
            got += n
        return data

    def skim(self, size: int, what: str) -> Skimmed:
        """``size`` bytes of ``what`` read through one piece-sized buffer and not kept:
        the MAC takes them, and so do their content digest and the check whether the
        first piece repeats every 16 bytes (what a uniform tensor's bytes do)."""
        self.take(size, what)
        piece = torch.empty(min(size, _PIECE), dtype=torch.uint8)
        view = memoryview(piece.numpy()).cast("B")
        hasher = xxhash.xxh3_128()
        got, periodic = 0, True
        while got < size:
            n = self.stream.readinto(view[:min(size - got, _PIECE)])
            if not n:
                raise DamagedEntry(f"truncated in the {what} ({got} of {size} bytes)")
            self.seal.update(view[:n])
            hasher.update(view[:n])
            if not got:
                periodic = n <= 16 or torch.equal(piece[16:n], piece[:n - 16])
            got += n
        return Skimmed(size, hasher.hexdigest(), periodic)

    def exact_bytes(self, size: int, what: str) -> bytes:
        """:meth:`exact` as ``bytes``, read into one allocation (an unpickler's
        ``io.BytesIO`` then shares it instead of copying a ``bytearray``)."""
        self.take(size, what)
        data = self.stream.read(size) if size else b""
        if data and len(data) < size:  # a raw stream may return less than asked
            parts, got = [data], len(data)
            while got < size:
                more = self.stream.read(size - got)
                if not more:
                    break
                parts.append(more)
                got += len(more)
            data = b"".join(parts)
        if len(data) != size:
            raise DamagedEntry(f"truncated in the {what} ({len(data)} of {size} bytes)")
        self.seal.update(data)
        return data

    def number(self, fmt: str, what: str) -> int:
        return struct.unpack(fmt, self.exact(struct.calcsize(fmt), what))[0]

    def count(self, what: str) -> int:
        """A ``u32`` count of sections, each at least a ``u64`` length: bounded by ``left``."""
        found = self.number(">I", what)
        if found * 8 > self.left:
            raise DamagedEntry(f"garbled {what}: {found} sections cannot fit in the "
                               f"{self.left} bytes left before the MAC")
        return found


def size_left(stream: BinaryIO) -> int:
    """The bytes from the stream's position to its end (the stream is left where it was);
    :class:`~.errors.DamagedEntry` for a stream that cannot tell."""
    try:
        here = stream.tell()
        end = stream.seek(0, io.SEEK_END)
        stream.seek(here)
    except (OSError, ValueError, AttributeError) as exc:
        raise DamagedEntry(f"cannot tell the entry's size: {exc!r}") from exc
    return end - here


def read(stream: BinaryIO, seal: Seal, skim: Optional[Skim] = None) -> Iterator[Any]:
    """Checks and reads an entry signed for ``seal``: yields its ``info``, then the
    rebuilt payload.

    Two steps, so a caller can check ``info`` (the backends' sources) before paying
    for the programs. No length or count is trusted beyond the bytes the stream
    holds, and nothing is decoded before the MAC verifies. With ``skim``, each storage
    of one of its sizes is only MAC'd and hashed (:class:`Skimmed`), never held: its
    tensors come back as meta tensors for the caller to replace. Raises
    :class:`~.errors.DamagedEntry`.
    """
    left = size_left(stream) - MAC_SIZE
    if left < len(MAGIC) + 4:
        raise DamagedEntry(f"too short for an entry ({left + MAC_SIZE} bytes)")
    head = stream.read(len(MAGIC))
    if head != MAGIC:
        raise DamagedEntry("not a fastlower lowering-cache entry")
    length_bytes = _read(stream, 4)
    body = _Sealed(stream, seal, left - len(MAGIC) - 4)
    stamp_size = struct.unpack(">I", length_bytes)[0]
    body.take(stamp_size, "stamp length")
    stamped = _read(stream, stamp_size)
    if stamped != stamp():
        raise DamagedEntry(f"written by another version ({stamped[:200].decode(errors='replace')!r}"
                           f", this is {stamp().decode()!r})")
    for chunk in (head, length_bytes, stamped):
        seal.update(chunk)
    size = body.number(">Q", "info length")
    if size > _MAX_INFO:
        raise DamagedEntry("garbled info length")
    info_bytes = body.exact(size, "info length")
    pickled = body.exact_bytes(body.number(">Q", "program length"), "program length")
    sizes = skim.sizes if skim is not None else frozenset()
    storages: List[Union[torch.Tensor, Skimmed]] = []
    for _ in range(body.count("storage count")):
        size = body.number(">Q", "storage length")
        storages.append((body.skim if size in sizes else body.storage)(size, "storage length"))
    blobs = [body.exact_bytes(body.number(">Q", "bytes length"), "bytes length")
             for _ in range(body.count("bytes count"))]
    _check_mac(stream, seal, body.left)
    try:
        info = plain.loads(bytes(info_bytes))
    except Exception as exc:
        raise DamagedEntry(f"cannot read the info: {exc!r}") from exc
    yield info
    try:
        yield loads(info.get("symbolic") or {}, pickled, storages, blobs, skim)
    except DamagedEntry:
        raise
    except Exception as exc:
        raise DamagedEntry(f"cannot rebuild the programs: {exc!r}") from exc


def _check_mac(stream: BinaryIO, seal: Seal, left: int) -> None:
    """The MAC after the last section (nothing before it, nothing after it) verifies."""
    if left:
        raise DamagedEntry(f"{left} bytes between the last section and the MAC")
    tag = stream.read(MAC_SIZE)
    if len(tag) != MAC_SIZE:
        raise DamagedEntry("truncated before the MAC")
    if stream.read(1):
        raise DamagedEntry("trailing bytes after the MAC")
    if not seal.matches(tag):
        raise DamagedEntry("its MAC does not verify (damaged, or written without this cache's "
                           "key)")


def _read(stream: BinaryIO, size: int) -> bytes:
    data = stream.read(size)
    if len(data) != size:
        raise DamagedEntry("truncated header")
    return data
