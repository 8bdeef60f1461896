"""Where lowering-cache entries live: the preprocess cache's own ``diskcache`` folder.

The same ``diskcache.Cache`` (folder, size limit, least-recently-used eviction) as
``fastlower.preprocess``: one budget for both caches. Lowering entries have keys
``lowering:<hex>`` and the tag ``lowering`` (preprocess keys are bare hex digests),
so each cache can be counted and cleared on its own. ``diskcache`` makes each
write atomic (the value file is complete before its row is committed): two
processes storing the same key at once leave one whole entry.

A folder that cannot be written (read-only mount, another user's cache) is read
through SQLite in read-only mode and diskcache's own ``Disk`` (lookups only, one
warning per lowering). Values are streamed: an entry is never held twice in memory.
"""

from __future__ import annotations

import io
import logging
import os
import sqlite3
from pathlib import Path
from typing import BinaryIO, Optional

import diskcache

log = logging.getLogger("fastlower.cache")

TAG = "lowering"
PREFIX = "lowering:"
_DB = "cache.db"


class ReadOnlyCache:
    """Lookups in a diskcache folder that cannot be written (its ``Cache`` table, read-only)."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        db = self.directory / _DB
        if not db.exists():
            raise FileNotFoundError(f"{db} does not exist")
        uri = f"file:{db}?mode=ro"
        try:
            self.db = sqlite3.connect(uri, uri=True, check_same_thread=False)
            self.db.execute("SELECT 1 FROM Cache LIMIT 1").fetchall()
        except sqlite3.OperationalError:  # a WAL database without its -shm file
            self.db = sqlite3.connect(f"file:{db}?immutable=1", uri=True, check_same_thread=False)
        self.disk = diskcache.Disk(str(self.directory))

    def get(self, key: str, default=None, read: bool = False, retry: bool = False):
        row = self.db.execute(
            "SELECT mode, filename, value FROM Cache WHERE key = ? AND raw = 1", (key,)).fetchone()
        if row is None:
            return default
        mode, filename, value = row
        return self.disk.fetch(mode, filename, value, read)

    def close(self) -> None:
        self.db.close()


def _writable(directory: Path) -> bool:
    if not directory.exists():
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError:
            return False
    return os.access(directory, os.W_OK)


class LoweringStore:
    """A cache folder opened for lowering entries; ``read_only`` when it cannot be written."""

    def __init__(self, directory: Path, size_limit: int) -> None:
        self.directory = Path(directory)
        self.read_only = False
        self.store = None
        if _writable(self.directory):
            try:
                self.store = diskcache.Cache(str(self.directory), size_limit=size_limit,
                                             eviction_policy="least-recently-used")
            except (sqlite3.OperationalError, OSError) as exc:
                log.debug("cache %s cannot be opened for writing (%r): lookups only",
                          self.directory, exc)
        if self.store is None:
            self.read_only = True
            self.store = ReadOnlyCache(self.directory)

    def open(self, key: str) -> Optional[BinaryIO]:
        """The entry under ``key`` as a stream, or None; an unreadable entry raises."""
        found = self.store.get(key, default=None, read=True, retry=True)
        if found is None:
            return None
        if isinstance(found, (bytes, bytearray)):  # small values live in the database
            return io.BytesIO(found)
        return found

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
