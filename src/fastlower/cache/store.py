"""Where lowering-cache entries live: the preprocess cache's own ``diskcache`` folder.

The same ``diskcache.Cache`` (folder, size limit, least-recently-used eviction) as
``fastlower.preprocess``: one budget for both caches. Lowering entries have keys
``lowering:<hex>`` and the tag ``lowering`` (preprocess keys are bare hex digests),
so each cache can be counted and cleared on its own. Unless the user set the size
limit, it follows the model (:mod:`.budget`); an entry the limit cannot keep is not
written, and a warning says so. ``diskcache`` makes each
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

import diskcache

from ..preprocess.folder import open_folder, tell_once
from .trust.seal import Seal
from . import budget
from .configuration import size_given as size_given_now
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
                 key_file: Optional[Path] = None, size_given: Optional[bool] = None) -> None:
        self.folder = open_folder(Path(directory), size_limit, key_file)
        self.directory, self.store = self.folder.directory, self.folder.store
        self.read_only = self.folder.read_only
        # size_given: the limit was set (a hard one); else it follows the model (.budget)
        self.size_limit = size_limit
        self.size_given = size_given_now() if size_given is None else size_given
        if not self.read_only and not self.size_given:
            self._follow(0)

    def _follow(self, size: int) -> int:
        """The limit that follows the model, for an entry of ``size`` bytes about to be
        stored, made the folder's (:mod:`.budget`)."""
        store = cast(diskcache.Cache, self.store)  # (a writable folder's)
        largest = max(size, budget.largest_entry(store))
        limit = budget.followed(self.size_limit, largest,
                                budget.disk_room(self.directory, store.volume()))
        budget.raise_limit(store, limit)
        return limit

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

    def put(self, key: str, stream: io.RawIOBase, tag: str = TAG) -> bool:
        """Stores the entry read from ``stream`` (atomically, see the module docstring);
        False, with one warning per process and folder, when the size limit cannot keep
        it (:mod:`.budget`)."""
        if self.read_only:
            raise PermissionError(f"the cache folder {self.directory} is read-only")
        size = _size(stream)
        limit = self.size_limit if self.size_given else self._follow(size)
        verdict = budget.judge(key, size, limit, self.size_given, self.directory)
        if verdict.message is not None:
            log.debug("%s", verdict.message)
            tell_once(self.directory, "size", verdict.message, stacklevel=3)
        if not verdict.keep:
            return False
        self.store.set(key, io.BufferedReader(stream, buffer_size=1 << 22), read=True, tag=tag,
                       retry=True)
        return True

    def drop(self, key: str) -> None:
        if self.read_only:
            return
        try:
            self.store.delete(key, retry=True)
        except Exception as exc:  # best effort: the next store overwrites it
            log.debug("cannot drop cache entry %s: %r", key, exc)

    def close(self) -> None:
        self.store.close()


def _size(stream: io.RawIOBase) -> int:
    """The bytes from the stream's position to its end (the position is kept)."""
    here = stream.tell()
    end = stream.seek(0, io.SEEK_END)
    stream.seek(here)
    return end - here
