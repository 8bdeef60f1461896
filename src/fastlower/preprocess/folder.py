"""Opening the cache folder the preprocess and lowering caches share.

A folder is opened only when it can be trusted (:mod:`fastlower.cache.trust`): one that
other users can write needs an explicitly given key, and the key itself must be
in order; otherwise :class:`UntrustedFolder`, and the caller lowers without the
cache. A new folder is created with mode 0700.

A folder that can be written is a ``diskcache.Cache``. One that cannot (a
read-only mount, another user's cache) is read through SQLite in read-only mode:
lookups only. Either way values go through :class:`~fastlower.cache.trust.disk.BytesOnlyDisk`
(bytes, never pickles). Notices about a folder (read-only, untrusted, entries that
do not verify) are :class:`CacheWarning`\\ s, each said once per process and folder.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Set, Tuple, Union

import diskcache

from ..cache.trust import secret as secrets_
from ..cache.trust.disk import BytesOnlyDisk
from ..cache.trust.folder import others_can_write
from ..cache.trust.seal import Seal
from ..cache.trust.secret import CacheKeyError, CacheSecret

log = logging.getLogger(__name__)

_DB = "cache.db"
_TOLD: Set[Tuple[str, Path]] = set()
_TOLD_LOCK = threading.Lock()


class CacheWarning(UserWarning):
    """Something about a cache folder fastlower could not use (the message says what)."""
    # defined here, in the lowest module that warns it; ``preprocess.cache`` re-exports it


class UntrustedFolder(Exception):
    """A cache folder that cannot be trusted with the key at hand; the message says why."""


@dataclass
class CacheFolder:
    """An opened cache folder: its store, whether it is read-only, and its key."""

    directory: Path
    store: Union[diskcache.Cache, "ReadOnlyCache"]
    read_only: bool
    secret: CacheSecret

    def seal(self, purpose: str, key: str) -> Seal:
        """A fresh MAC of the ``purpose`` cache's entry under ``key``, with this folder's key."""
        return Seal(self.secret.key, purpose, key)


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
        self.disk = BytesOnlyDisk(str(self.directory))

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
            secrets_.make_private_dirs(directory)
        except OSError:
            return False
    return os.access(directory, os.W_OK)


def trusted_secret(directory: Path, key_file: Optional[Path]) -> CacheSecret:
    """The key for ``directory``; :class:`UntrustedFolder` when it has none it may use."""
    problem = others_can_write(directory)
    if problem and key_file is None:
        raise UntrustedFolder(f"{problem}; a folder other users can write is used only with "
                              "a key its writers share (FASTLOWER_CACHE_KEY_FILE)")
    try:
        return secrets_.load(key_file)
    except CacheKeyError as exc:
        raise UntrustedFolder(str(exc)) from exc


def open_folder(directory: Path, size_limit: int,
                key_file: Optional[Path] = None) -> CacheFolder:
    """The folder opened under the trust rules; raises :class:`UntrustedFolder`, or
    ``OSError`` / ``sqlite3.Error`` when it cannot be read at all."""
    directory = Path(directory)
    secret = trusted_secret(directory, key_file)
    if _writable(directory):
        try:
            store = diskcache.Cache(str(directory), size_limit=size_limit, disk=BytesOnlyDisk,
                                    eviction_policy="least-recently-used")
            return CacheFolder(directory, store, False, secret)
        except (sqlite3.OperationalError, OSError) as exc:
            log.debug("cache %s cannot be opened for writing (%r): lookups only", directory, exc)
    return CacheFolder(directory, ReadOnlyCache(directory), True, secret)


def tell_once(directory: Path, what: str, message: str, stacklevel: int) -> None:
    """Warns ``message`` unless this process already said ``what`` of ``directory``."""
    with _TOLD_LOCK:
        first = (what, Path(directory)) not in _TOLD
        _TOLD.add((what, Path(directory)))
    if first:
        warnings.warn(message, CacheWarning, stacklevel=stacklevel + 1)


def warn_read_only(directory: Path, stacklevel: int) -> None:
    """The read-only warning, the first time this process meets ``directory``."""
    tell_once(directory, "read-only",
              f"fastlower: the cache folder {directory} cannot be written: lookups only",
              stacklevel + 1)


def warn_untrusted(directory: Path, why: object, stacklevel: int) -> None:
    """The folder is not used: said once per process and folder."""
    tell_once(directory, "untrusted",
              f"fastlower: the cache folder {directory} is not used ({why}); lowering "
              "without it", stacklevel + 1)
