"""Opening the cache folder the preprocess and lowering caches share.

A folder that can be written is a ``diskcache.Cache``. One that cannot (a
read-only mount, another user's cache) is read through SQLite in read-only mode
and diskcache's own ``Disk``: lookups only, and one :class:`CacheWarning` per
process and folder, whichever cache meets it first.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import warnings
from pathlib import Path
from typing import Any, Tuple, Union

import diskcache

log = logging.getLogger(__name__)

_DB = "cache.db"
_WARNED_READ_ONLY: set = set()
_WARNED_LOCK = threading.Lock()


class CacheWarning(UserWarning):
    """Damaged preprocess cache entries were found (and treated as misses)."""
    # defined here, in the lowest module that warns it; ``preprocess.cache`` re-exports it


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

    def get(self, key: str, default: Any = None, read: bool = False, retry: bool = False) -> Any:
        row = self.db.execute(
            "SELECT mode, filename, value FROM Cache WHERE key = ? AND raw = 1", (key,)).fetchone()
        if row is None:
            return default
        mode, filename, value = row
        return self.disk.fetch(mode, filename, value, read)

    def set(self, key: str, value: Any, **options: Any) -> bool:
        raise PermissionError(f"the cache folder {self.directory} is read-only")

    def delete(self, key: str, retry: bool = False) -> bool:
        raise PermissionError(f"the cache folder {self.directory} is read-only")

    def close(self) -> None:
        self.db.close()


def _writable(directory: Path) -> bool:
    if not directory.exists():
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError:
            return False
    return os.access(directory, os.W_OK)


def open_folder(directory: Path, size_limit: int
                ) -> Tuple[Union[diskcache.Cache, ReadOnlyCache], bool]:
    """``(store, read_only)`` for ``directory``; raises when it cannot be read either."""
    directory = Path(directory)
    if _writable(directory):
        try:
            return diskcache.Cache(str(directory), size_limit=size_limit,
                                   eviction_policy="least-recently-used"), False
        except (sqlite3.OperationalError, OSError) as exc:
            log.debug("cache %s cannot be opened for writing (%r): lookups only", directory, exc)
    return ReadOnlyCache(directory), True


def warn_read_only(directory: Path, stacklevel: int) -> None:
    """The read-only warning, the first time this process meets ``directory``."""
    with _WARNED_LOCK:
        first = Path(directory) not in _WARNED_READ_ONLY
        _WARNED_READ_ONLY.add(Path(directory))
    if first:
        warnings.warn(f"fastlower: the cache folder {directory} cannot be written: lookups only",
                      CacheWarning, stacklevel=stacklevel + 1)
