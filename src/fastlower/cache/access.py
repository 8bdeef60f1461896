"""Looking an entry up and storing one, with the cache's safety rules in one place.

* A folder that cannot be opened: no cache for the call, one warning.
* A folder that cannot be written: lookups only, one warning per process and folder.
* A damaged, truncated or foreign entry: a miss, one warning, the entry dropped.
* An entry whose backends' sources changed (:mod:`.manifest`): a miss, a debug line.
* Before a store, the entry is read back and compared with what it was made from
  (``same``): an entry whose copy would differ is not stored (a debug line).
"""

from __future__ import annotations

import logging
import warnings
from typing import Any, Callable, Dict, Optional, Tuple

from ..preprocess.cache import CacheWarning
from ..preprocess.folder import warn_read_only
from . import detached, entry, manifest
from .errors import DamagedEntry, Uncacheable
from .settings import LoweringCacheSettings
from .store import LoweringStore

log = logging.getLogger("fastlower.cache")


def open_store(settings: LoweringCacheSettings) -> Optional[LoweringStore]:
    """The folder's store, or None (with one warning) when it cannot be used at all."""
    try:
        store = LoweringStore(settings.directory, settings.size_limit)
    except Exception as exc:
        warnings.warn(f"fastlower: lowering cache {settings.directory} cannot be opened "
                      f"({exc!r}); lowering without it", CacheWarning, stacklevel=3)
        return None
    if store.read_only:
        warn_read_only(store.directory, stacklevel=3)
    return store


def lookup(store: LoweringStore, key: str) -> Optional[Tuple[Dict[str, Any], Any]]:
    """``(info, payload)`` of a usable entry under ``key``, else None (after this process's
    child storing ``key``, if any, has finished: :mod:`.detached`)."""
    detached.wait_for(key)
    try:
        stream = store.open(key)
    except Exception as exc:  # an unreadable value file, a corrupt row
        _damaged(store, key, f"cannot be read: {exc!r}")
        return None
    if stream is None:
        return None
    try:
        with stream:
            steps = entry.read(stream)
            info = next(steps)
            stale = manifest.stale_backend(info.get("backends", []))
            if stale is not None:
                log.debug("cache entry %s is stale: %s", key, stale)
                return None
            return info, next(steps)
    except DamagedEntry as exc:
        _damaged(store, key, str(exc))
        return None


def _damaged(store: LoweringStore, key: str, why: str) -> None:
    log.debug("damaged cache entry %s: %s", key, why)
    warnings.warn(f"fastlower: a damaged lowering cache entry in {store.directory} was "
                  f"treated as a miss and dropped ({key}: {why})", CacheWarning, stacklevel=4)
    store.drop(key)


def store_checked(store: LoweringStore, key: str, info: Dict[str, Any], payload: Any,
                  same: Callable[[Any], Optional[str]]) -> bool:
    """Stores ``payload`` unless its copy read back differs (``same(copy)`` names how)."""
    try:
        chunks = entry.encode(info, payload)
        steps = entry.read(entry.ChunkReader(chunks))
        next(steps)
        difference = same(next(steps))
        if difference is not None:
            raise Uncacheable(f"the stored copy would differ {difference}")
    except (Uncacheable, DamagedEntry) as why:
        log.debug("not stored (%s): %s", key, why)
        return False
    try:
        store.put(key, entry.ChunkReader(chunks))
    except Exception as exc:  # disk full, a read-only folder after all
        warnings.warn(f"fastlower: a result could not be written to the cache "
                      f"{store.directory} ({exc!r})", CacheWarning, stacklevel=4)
        return False
    return True


def store_soon(store: LoweringStore, settings: LoweringCacheSettings, key: str, size: int,
               write: Callable[[LoweringStore], Any]) -> None:
    """``write(store)`` now, or, for an entry of ``size`` bytes that :mod:`.detached` takes,
    ``write`` on the child's own connection to the same folder (``store`` is closed first)."""

    def in_child() -> None:
        own = LoweringStore(settings.directory, settings.size_limit)
        try:
            write(own)
        finally:
            own.close()

    if not detached.store_detached(key, size, in_child, before_fork=store.close):
        write(store)
