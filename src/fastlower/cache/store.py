"""Where lowering-cache entries live: the preprocess cache's own ``diskcache`` folder.

The same ``diskcache.Cache`` (folder, size limit, least-recently-used eviction) as
``fastlower.preprocess``: one budget for both caches. Lowering entries have keys
``lowering:<hex>`` and the tag ``lowering`` (preprocess keys are bare hex digests),
so each cache can be counted and cleared on its own. ``diskcache`` makes each
write atomic (the value file is complete before its row is committed): two
processes storing the same key at once leave one whole entry.

The folder is opened by ``fastlower.preprocess.folder``, shared with the preprocess
cache, under :mod:`fastlower.cache.trust`'s rules: values are bytes (never pickles), the
folder's key signs every entry (:meth:`LoweringStore.seal`), and a folder that
cannot be written is read through SQLite in read-only mode (lookups only). Values
are streamed: an entry is never held twice in memory.
"""

from __future__ import annotations

import io
import logging
from pathlib import Path
from typing import BinaryIO, Optional, cast

from ..preprocess.folder import open_folder
from .trust.seal import Seal
from .errors import DamagedEntry
from .names import PREFIX, TAG

__all__ = ["LoweringStore", "PREFIX", "TAG", "PURPOSE"]

log = logging.getLogger("fastlower.cache")

PURPOSE = "lowering"


class LoweringStore:
    """A cache folder opened for lowering entries; ``read_only`` when it cannot be written.

    Raises ``fastlower.preprocess.folder.UntrustedFolder`` when the folder cannot be
    trusted."""

    def __init__(self, directory: Path, size_limit: int,
                 key_file: Optional[Path] = None) -> None:
        self.folder = open_folder(Path(directory), size_limit, key_file)
        self.directory, self.store = self.folder.directory, self.folder.store
        self.read_only = self.folder.read_only

    def seal(self, key: str) -> Seal:
        """A fresh MAC of the lowering entry under ``key`` (:meth:`CacheFolder.seal`)."""
        return self.folder.seal(PURPOSE, key)

    def open(self, key: str) -> Optional[BinaryIO]:
        """The entry under ``key`` as a stream, or None; an unreadable entry raises."""
        found = self.store.get(key, default=None, read=True, retry=True)
        if found is None:
            return None
        if isinstance(found, (bytes, bytearray)):  # small values live in the database
            return io.BytesIO(found)
        if not isinstance(found, io.IOBase):  # another tool's value: text, a number, an object
            raise DamagedEntry(f"not a fastlower lowering-cache entry (a {type(found).__name__})")
        return cast(BinaryIO, found)

    def put(self, key: str, stream: io.RawIOBase) -> None:
        """Stores the entry read from ``stream`` (atomically, see the module docstring)."""
        if self.read_only:
            raise PermissionError(f"the cache folder {self.directory} is read-only")
        self.store.set(key, io.BufferedReader(stream, buffer_size=1 << 22), read=True, tag=TAG,
                       retry=True)

    def drop(self, key: str) -> None:
        if self.read_only:
            return
        try:
            self.store.delete(key, retry=True)
        except Exception as exc:  # best effort: the next store overwrites it
            log.debug("cannot drop cache entry %s: %r", key, exc)

    def close(self) -> None:
        self.store.close()
