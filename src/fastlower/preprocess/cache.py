"""The on-disk store of preprocess results, keyed by ``keys.cache_key``.

Storage is ``diskcache.Cache`` (SQLite index plus files): writes are atomic,
several processes may read and write one directory at once, and the size is
capped (default 2 GB) with least-recently-used eviction.

Each entry is ``MAGIC | versions | xxh3-128 of payload | payload`` where the
payload is the pickled ``PreprocessResult`` fields (processed bytes,
debug-handle map, named data, ``_delegate_info_meta``). An entry that cannot
be read, is truncated or garbled (digest mismatch, unpickling fails) or was
written by another torch/executorch/fastlower version or entry format is a
miss: it is dropped, and the lowering warns once (:class:`CacheWarning`).
A folder that cannot be written is used for lookups only (:mod:`.folder`).
"""

from __future__ import annotations

import logging
import pickle
import struct
from pathlib import Path
from typing import List, Optional

import xxhash
from executorch.exir.backend.backend_details import PreprocessResult

from .folder import CacheWarning, open_folder  # noqa: F401 (CacheWarning: defined there)
from .keys import versions

log = logging.getLogger(__name__)

MAGIC = b"FLPPCACHE"


class DamagedEntry(Exception):
    """An entry that cannot be trusted; the reason is the message."""


def result_fields(result: PreprocessResult) -> tuple:
    return (bytes(result.processed_bytes), result.debug_handle_map, result.data_store_output,
            result._delegate_info_meta)


def encode(result: PreprocessResult) -> bytes:
    """An entry's bytes for ``result``."""
    payload = pickle.dumps(result_fields(result), protocol=pickle.HIGHEST_PROTOCOL)
    stamp = versions().encode()
    return (MAGIC + struct.pack(">I", len(stamp)) + stamp + xxhash.xxh3_128_digest(payload)
            + payload)


def decode(raw: bytes) -> PreprocessResult:
    """The result an entry holds; :class:`DamagedEntry` if it cannot be trusted."""
    if not isinstance(raw, (bytes, bytearray)) or not raw.startswith(MAGIC):
        raise DamagedEntry("not a fastlower preprocess entry")
    at = len(MAGIC)
    if len(raw) < at + 4:
        raise DamagedEntry("truncated header")
    (stamp_len,) = struct.unpack_from(">I", raw, at)
    at += 4
    stamp = bytes(raw[at:at + stamp_len])
    at += stamp_len
    if stamp != versions().encode():
        raise DamagedEntry(f"written by another version ({stamp.decode(errors='replace')!r}, "
                           f"this is {versions()!r})")
    digest, payload = bytes(raw[at:at + 16]), bytes(raw[at + 16:])
    if len(digest) < 16 or xxhash.xxh3_128_digest(payload) != digest:
        raise DamagedEntry("truncated or garbled (checksum mismatch)")
    try:
        processed, handles, data, info = pickle.loads(payload)
    except Exception as exc:
        raise DamagedEntry(f"cannot unpickle: {exc!r}") from exc
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
    """A directory of preprocess results; ``get`` never raises for a bad entry."""

    def __init__(self, directory: Path, size_limit: int):
        self.directory = Path(directory)
        self.store, self.read_only = open_folder(self.directory, size_limit)
        self.damaged: List[str] = []
        self.write_errors: List[str] = []

    def get(self, key: str) -> Optional[PreprocessResult]:
        try:
            raw = self.store.get(key, default=None, retry=True)
        except Exception as exc:  # unreadable value file, corrupt row
            self._drop(key, f"cannot be read: {exc!r}")
            return None
        if raw is None:
            return None
        try:
            return decode(raw)
        except DamagedEntry as exc:
            self._drop(key, str(exc))
            return None

    def put(self, key: str, result: PreprocessResult) -> None:
        """Stores ``result``; a failed write (disk full, read-only) is noted, not raised."""
        if self.read_only:  # said once, when the folder was opened
            return
        try:
            self.store.set(key, encode(result), retry=True)
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
