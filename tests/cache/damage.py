"""Ways to damage the entries of a real cache folder (the corruption tests' tools).

An entry in the lowering-entry format (``lowering:``, ``structure:``, ``executorch:``
keys; :mod:`fastlower.cache.entry`) has these length and count fields, found by
:func:`fields`; a preprocess entry (:mod:`fastlower.preprocess.cache`) has one, its
stamp length. Each ``DAMAGES`` function takes an entry's bytes (and its key) and
returns them damaged.
"""

from __future__ import annotations

import contextlib
import hashlib
import random
import sqlite3
import struct
from pathlib import Path
from typing import Callable, Dict, List, NamedTuple, Optional, Tuple

from fastlower.cache import entry
from fastlower.preprocess import cache as preprocess_cache
from fastlower.cache.trust.seal import SIZE as MAC_SIZE

SECTIONS = ("stamp length", "info length", "program length", "storage count",
            "storage length", "bytes count", "bytes length")
_MAX = {">I": 0xFFFF_FFFF, ">Q": 0xFFFF_FFFF_FFFF_FFFF}


class Row(NamedTuple):
    rowid: int
    key: str
    filename: Optional[str]
    value: Optional[bytes]


def rows(folder: Path) -> List[Row]:
    with contextlib.closing(sqlite3.connect(folder / "cache.db")) as db:
        return [Row(*r) for r in db.execute(
            "SELECT rowid, key, filename, value FROM Cache ORDER BY rowid")]


def read_value(folder: Path, row: Row) -> bytes:
    return (folder / row.filename).read_bytes() if row.filename else bytes(row.value or b"")


def write_value(folder: Path, row: Row, data: bytes) -> None:
    """Replaces the row's bytes where they are (its value file, or the database)."""
    if row.filename:
        (folder / row.filename).write_bytes(data)
        return
    with contextlib.closing(sqlite3.connect(folder / "cache.db")) as db:
        db.execute("UPDATE Cache SET value = ? WHERE rowid = ?", (data, row.rowid))
        db.commit()


def fields(data: bytes) -> Dict[str, Tuple[int, str]]:
    """Where each length and count field of an entry is: name -> (offset, struct format);
    the first storage's and the first large bytes' only, when there are any. A
    preprocess entry has its stamp length alone."""
    if data.startswith(preprocess_cache.MAGIC):
        return {"stamp length": (len(preprocess_cache.MAGIC), ">I")}
    if not data.startswith(entry.MAGIC):
        return {}
    found: Dict[str, Tuple[int, str]] = {}
    at = len(entry.MAGIC)
    found["stamp length"] = (at, ">I")
    at += 4 + struct.unpack_from(">I", data, at)[0]
    for name in ("info length", "program length"):
        found[name] = (at, ">Q")
        at += 8 + struct.unpack_from(">Q", data, at)[0]
    for count, length in (("storage count", "storage length"), ("bytes count", "bytes length")):
        found[count] = (at, ">I")
        items = struct.unpack_from(">I", data, at)[0]
        at += 4
        for i in range(items):
            if i == 0:
                found[length] = (at, ">Q")
            at += 8 + struct.unpack_from(">Q", data, at)[0]
    if at + MAC_SIZE != len(data):
        raise ValueError(f"not an entry: {len(data) - at} bytes after the sections")
    return found


def huge(section: str, value: Optional[int] = None) -> Callable[[bytes, str], bytes]:
    """The ``section`` field set to ``value`` (default: its largest); an entry without that
    section is left as it is."""
    def damage(data: bytes, key: str) -> bytes:
        where = fields(data).get(section)
        if where is None:
            return data
        at, fmt = where
        out = bytearray(data)
        struct.pack_into(fmt, out, at, _MAX[fmt] if value is None else value)
        return bytes(out)
    return damage


def _flip(data: bytes, key: str) -> bytes:
    out = bytearray(data)
    for at in (len(out) // 3, len(out) // 2, 2 * len(out) // 3):
        if out:
            out[at] ^= 0xFF
    return bytes(out)


def _random_bytes(data: bytes, key: str) -> bytes:
    return random.Random(key).randbytes(len(data))


def _junk(data: bytes, key: str) -> bytes:
    return hashlib.shake_256(b"junk " + key.encode()).digest(max(len(data), 1))


def random_damage(seed: int) -> Callable[[bytes, str], bytes]:
    """Seeded: some bytes flipped, maybe cut, maybe a field made huge."""
    def damage(data: bytes, key: str) -> bytes:
        rng = random.Random(f"{seed}:{key}")
        out = bytearray(data)
        for _ in range(rng.randint(1, 8)):
            if out:
                out[rng.randrange(len(out))] ^= 1 << rng.randrange(8)
        if rng.random() < 0.3:
            out = out[:rng.randrange(len(out) + 1)]
        if rng.random() < 0.3:
            out = bytearray(huge(rng.choice(SECTIONS))(bytes(out), key)) if \
                _parses(bytes(out)) else out
        return bytes(out)
    return damage


def _parses(data: bytes) -> bool:
    try:
        fields(data)
        return True
    except (ValueError, OverflowError, struct.error):  # a flipped length: past any size
        return False


DAMAGES: Dict[str, Callable[[bytes, str], bytes]] = {
    **{f"huge {section}": huge(section) for section in SECTIONS},
    "bytes flipped": _flip,
    "truncated to half": lambda data, key: data[:len(data) // 2],
    "cut before the MAC": lambda data, key: data[:-MAC_SIZE],
    "junk": _junk,
    "emptied": lambda data, key: b"",
    "random bytes": _random_bytes,
    "trailing junk": lambda data, key: data + b"\0junk",
}


def damage_folder(folder: Path, damage: Callable[[bytes, str], bytes]) -> List[str]:
    """Every entry of the folder damaged in place; their keys."""
    keys = []
    for row in rows(folder):
        write_value(folder, row, damage(read_value(folder, row), row.key))
        keys.append(row.key)
    return keys


def swap_entries(folder: Path) -> None:
    """Each lowering-format entry's bytes moved under the next one's key (valid entries
    under the wrong keys: their MACs do not verify there)."""
    found = [r for r in rows(folder) if read_value(folder, r).startswith(entry.MAGIC)]
    values = [read_value(folder, r) for r in found]
    for row, value in zip(found, values[1:] + values[:1]):
        write_value(folder, row, value)
