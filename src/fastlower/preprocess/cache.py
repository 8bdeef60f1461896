"""The on-disk store of preprocess results, keyed by ``keys.cache_key``.

Storage is ``diskcache.Cache`` (SQLite index plus files, opened by :mod:`.folder`
under :mod:`fastlower.cache.trust`'s rules): writes are atomic, several processes may
read and write one directory at once, and the size is capped (default 2 GiB) with
least-recently-used eviction.

Each entry is ``MAGIC | u32 len | versions | payload | MAC`` where the payload is
the ``PreprocessResult`` fields (processed bytes, debug-handle map, named data,
``_delegate_info_meta``) pickled as plain data (:mod:`fastlower.cache.trust.plain`) and
the MAC is keyed BLAKE3 under the folder's key over everything before it and the
entry's key (:mod:`fastlower.cache.trust.seal`). A result holding anything but plain
data is not stored. An entry written by another torch/executorch/fastlower version
or entry format, one whose MAC does not verify (damaged, or written by someone
without the key) and one that cannot be read are misses: never decoded, dropped,
and the folder's owner is told once per process (:class:`CacheWarning`). A folder
that cannot be written is used for lookups only.
"""

from __future__ import annotations

import logging
import pickle
import struct
from pathlib import Path
from typing import List, Optional

from executorch.exir.backend.backend_details import PreprocessResult

from ..cache.trust import plain
from ..cache.trust.seal import SIZE as MAC_SIZE
from ..cache.trust.seal import Seal
from .folder import CacheWarning, open_folder  # noqa: F401 (CacheWarning: defined there)
from .keys import versions

log = logging.getLogger(__name__)

MAGIC = b"FLPPCACHE"
PURPOSE = "preprocess"


class DamagedEntry(Exception):
    """An entry that cannot be trusted; the reason is the message."""


def result_fields(result: PreprocessResult) -> tuple:
    return (bytes(result.processed_bytes), result.debug_handle_map, result.data_store_output,
            result._delegate_info_meta)


# how an entry's result was made: the backend's own preprocess, or derived from a
# structural template (fastlower.preprocess.structure) by the shortcut generation in the stamp
MADE = ("backend", "derived")


def encode(result: PreprocessResult, seal: Seal, made: str = "backend") -> bytes:
    """An entry's bytes for ``result``; ``plain.UnsafePickle`` if it is not plain data."""
    return seal_payload(plain.dumps((*result_fields(result), made)), seal)


def seal_payload(payload: bytes, seal: Seal) -> bytes:
    """``MAGIC | u32 len | versions | payload | MAC``."""
    stamp = versions().encode()
    head = MAGIC + struct.pack(">I", len(stamp)) + stamp
    seal.update(head)
    seal.update(payload)
    return b"".join((head, payload, seal.digest()))  # one copy of a payload of weights


def open_payload(raw: bytes, seal: Seal) -> bytes:
    """The payload of an entry; :class:`DamagedEntry` if it cannot be trusted.

    Only the magic and the versions are compared before the MAC is checked (the
    stamp's length against the bytes there are first); nothing is decoded before it is."""
    if not isinstance(raw, (bytes, bytearray)) or not raw.startswith(MAGIC):
        raise DamagedEntry("not a fastlower preprocess entry")
    at = len(MAGIC)
    if len(raw) < at + 4:
        raise DamagedEntry("truncated header")
    (stamp_len,) = struct.unpack_from(">I", raw, at)
    at += 4
    if stamp_len > len(raw) - at - MAC_SIZE:  # checked before it is used
        raise DamagedEntry(f"garbled stamp length: {stamp_len} bytes, but "
                           f"{max(len(raw) - at - MAC_SIZE, 0)} are left before the MAC")
    stamp = bytes(raw[at:at + stamp_len])
    if stamp != versions().encode():
        raise DamagedEntry(f"written by another version ({stamp.decode(errors='replace')!r}, "
                           f"this is {versions()!r})")
    at += stamp_len
    if len(raw) < at + MAC_SIZE:
        raise DamagedEntry("truncated before the MAC")
    body = memoryview(raw)[:len(raw) - MAC_SIZE]
    seal.update(body)
    if not seal.matches(bytes(raw[len(raw) - MAC_SIZE:])):
        raise DamagedEntry("its MAC does not verify (damaged, or written without this "
                           "cache's key)")
    return bytes(body[at:])


def decode(raw: bytes, seal: Seal) -> PreprocessResult:
    """The result an entry holds; :class:`DamagedEntry` if it cannot be trusted."""
    payload = open_payload(raw, seal)
    try:
        processed, handles, data, info, made = plain.loads(payload)
    except Exception as exc:
        raise DamagedEntry(f"cannot read its plain data: {exc!r}") from exc
    if made not in MADE:
        raise DamagedEntry(f"made by an unknown step ({made!r})")
    return PreprocessResult(processed_bytes=processed, debug_handle_map=handles,
                            data_store_output=data, _delegate_info_meta=info)


def same_result(a: PreprocessResult, b: PreprocessResult) -> bool:
    """Equal as far as the lowered program can tell (every ``PreprocessResult`` field)."""
    fa, fb = result_fields(a), result_fields(b)
    try:
        if fa == fb:
            return True
    except Exception:  # fields without a usable __eq__: compare their pickles
        pass
    return pickle.dumps(fa, protocol=4) == pickle.dumps(fb, protocol=4)


class PreprocessCache:
    """A directory of preprocess results; ``get`` never raises for a bad entry.

    Raises :class:`~.folder.UntrustedFolder` when the folder cannot be trusted."""

    def __init__(self, directory: Path, size_limit: int, key_file: Optional[Path] = None):
        self.folder = open_folder(Path(directory), size_limit, key_file)
        self.directory, self.store = self.folder.directory, self.folder.store
        self.size_limit, self.key_file = size_limit, key_file  # to open it again
        self.read_only = self.folder.read_only
        self.damaged: List[str] = []
        self.write_errors: List[str] = []

    def get(self, key: str) -> Optional[PreprocessResult]:
        try:
            raw = self.store.get(key, default=None, retry=True)
        except Exception as exc:  # unreadable value file, corrupt or refused row
            self._drop(key, f"cannot be read: {exc!r}")
            return None
        if raw is None:
            return None
        try:
            return decode(raw, self.folder.seal(PURPOSE, key))
        except Exception as exc:  # DamagedEntry, or any other failure to read it: a miss
            self._drop(key, str(exc) if isinstance(exc, DamagedEntry) else repr(exc))
            return None

    def get_plain(self, purpose: str, key: str) -> Optional[object]:
        """Plain data stored by :meth:`put_plain` under ``purpose`` and ``key``, or ``None``."""
        entry = f"{purpose}:{key}"
        try:
            raw = self.store.get(entry, default=None, retry=True)
        except Exception as exc:
            self._drop(entry, f"cannot be read: {exc!r}")
            return None
        if raw is None:
            return None
        try:
            return plain.loads(open_payload(raw, self.folder.seal(purpose, entry)))
        except Exception as exc:  # DamagedEntry, or plain data that does not load
            self._drop(entry, str(exc))
            return None

    def put_plain(self, purpose: str, key: str, value: object) -> None:
        """Stores plain data (not a ``PreprocessResult``); failures are noted, not raised."""
        if self.read_only:
            return
        entry = f"{purpose}:{key}"
        try:
            raw = seal_payload(plain.dumps(value), self.folder.seal(purpose, entry))
            self.store.set(entry, raw, retry=True)
        except Exception as exc:
            self.write_errors.append(f"{entry[:24]}: {exc!r}")

    def put(self, key: str, result: PreprocessResult, made: str = "backend") -> None:
        """Stores ``result`` (``made`` by one of :data:`MADE`); a failed write (disk full,
        read-only) is noted, not raised."""
        if self.read_only:  # said once, when the folder was opened
            return
        try:
            raw = encode(result, self.folder.seal(PURPOSE, key), made)
        except Exception as exc:  # not plain data (plain.UnsafePickle), or no pickle at all
            log.debug("preprocess result %s not stored: %r", key[:12], exc)
            return
        try:
            self.store.set(key, raw, retry=True)
        except Exception as exc:
            self.write_errors.append(f"{key[:12]}: {exc!r}")

    def _drop(self, key: str, why: str) -> None:
        self.damaged.append(f"{key[:12]}: {why}")
        log.debug("damaged preprocess cache entry %s: %s", key, why)
        if self.read_only:
            return
        try:
            self.store.delete(key, retry=True)
        except Exception:  # pragma: no cover - best effort; the next put overwrites it
            pass

    def close(self) -> None:
        self.store.close()
