"""Looking an entry up and storing one, with the cache's safety rules in one place.

* A folder that cannot be opened: no cache for the call, one warning.
* A folder that cannot be trusted (others can write it and no key was given, or the
  key file is not in order; :mod:`fastlower.cache.trust`): no cache, one warning per
  process and folder.
* A folder that cannot be written: lookups only, one warning per process and folder.
* A damaged, truncated, forged (its MAC does not verify) or foreign entry: a miss,
  never decoded, the entry dropped; one warning per process and folder. So is an
  entry whose reading fails in any other way (``MemoryError``, ``OSError``,
  ``struct.error`` ...: anything but ``KeyboardInterrupt`` / ``SystemExit``).
* An entry whose backends' sources changed (:mod:`.manifest`): a miss, a debug line.
* A hit written at other paths (:mod:`.paths`): its programs' meta rewritten to this
  process's paths; one that cannot be (its delegate payloads name the writer's
  paths): a miss, a debug line.
* Before a store, the entry's payload is rebuilt from its serialized form (the tensor
  data in place, not copied) and compared with what it was made from (``same``): an
  entry whose copy would differ, or that cannot be serialized, is not stored; one
  warning per process and folder says why (a re-run would lower again).
* With a shared store (``fastlower.cache.shared``), a local miss is looked up there (a hit
  fills the local folder; this process's uploads are finished first), and an entry
  stored locally is copied there in the background.
"""

from __future__ import annotations

import logging
import warnings
from typing import Any, BinaryIO, Callable, Dict, Optional, Sequence, Tuple

from ..preprocess.cache import CacheWarning
from ..preprocess.folder import UntrustedFolder, tell_once, warn_read_only, warn_untrusted
from .shared import tier as shared_tier
from . import detached, entry, manifest, paths
from .errors import DamagedEntry, Uncacheable
from .skim import Skim
from .configuration import LoweringCacheSettings
from .store import LoweringStore

log = logging.getLogger("fastlower.cache")


def open_store(settings: LoweringCacheSettings) -> Optional[LoweringStore]:
    """The folder's store, or None (with one warning) when it cannot be used at all."""
    try:
        store = LoweringStore(settings.directory, settings.size_limit, settings.key_file)
    except UntrustedFolder as exc:
        warn_untrusted(settings.directory, exc, stacklevel=3)
        return None
    except Exception as exc:
        warnings.warn(f"fastlower: lowering cache {settings.directory} cannot be opened "
                      f"({exc!r}); lowering without it", CacheWarning, stacklevel=3)
        return None
    if store.read_only:
        warn_read_only(store.directory, stacklevel=3)
    return store


def lookup(store: LoweringStore, key: str,
           skim: Optional[Skim] = None) -> Optional[Tuple[Dict[str, Any], Any]]:
    """``(info, payload)`` of a usable entry under ``key``, else None (after this process's
    child storing ``key``, if any, has finished: :mod:`.detached`). ``skim``: storages
    only MAC'd, not kept (:mod:`.skim`)."""
    detached.wait_for(key)
    try:
        stream = store.open(key)
    except Exception as exc:  # an unreadable value file, a corrupt row
        _damaged(store, key, f"cannot be read: {exc!r}")
        return None
    if stream is None:
        return _shared_lookup(store, key, skim)
    try:
        with stream:
            return _usable(store, key, stream, skim)
    except Exception as exc:  # DamagedEntry; MemoryError, OSError, struct.error ...: a miss
        _damaged(store, key, str(exc) if isinstance(exc, DamagedEntry) else repr(exc))
        return None


def _shared_lookup(store: LoweringStore, key: str,
                   skim: Optional[Skim] = None) -> Optional[Tuple[Dict[str, Any], Any]]:
    """The shared tier's lookup (a damaged object there is its miss, see ``shared.tier``);
    any other failure on the way (a spool that cannot be made ...) is a miss too."""
    try:
        return shared_tier.lookup(store, key, lambda shared: _usable(store, key, shared, skim))
    except Exception as exc:
        log.debug("shared-cache lookup of %s failed: %r", key, exc)
        tell_once(store.directory, "shared lookup",
                  f"fastlower: looking {key} up in the shared cache failed ({exc!r}); "
                  "treated as a miss", stacklevel=4)
        return None


def lookup_local(store: LoweringStore, key: str) -> Optional[Tuple[Dict[str, Any], Any]]:
    """:func:`lookup` in this folder alone: no shared store, no wait for a child (what a
    writer, maybe a store's child itself, reads before it writes)."""
    try:
        stream = store.open(key)
        if stream is None:
            return None
        with stream:
            return _usable(store, key, stream)
    except Exception as exc:  # unreadable, damaged: the write replaces it
        log.debug("cache entry %s not read before writing it: %r", key, exc)
        return None


def _usable(store: LoweringStore, key: str, stream: BinaryIO,
            skim: Optional[Skim] = None) -> Optional[Tuple[Dict[str, Any], Any]]:
    """The entry read from ``stream`` (MAC first), or None when its backends changed;
    raises :class:`DamagedEntry`."""
    steps = entry.read(stream, store.seal(key), skim)
    info = next(steps)
    stale = manifest.stale_backend(info.get("backends", []))
    if stale is not None:
        log.debug("cache entry %s is stale: %s", key, stale)
        return None
    payload = next(steps)
    programs = payload.get("programs") if isinstance(payload, dict) else None
    if programs is not None:  # this caller's paths in their meta (.paths)
        elsewhere = paths.localize(info, programs)
        if elsewhere is not None:
            log.debug("cache entry %s not used here: %s", key, elsewhere)
            return None
    return info, payload


def _damaged(store: LoweringStore, key: str, why: str) -> None:
    log.debug("damaged cache entry %s: %s", key, why)
    tell_once(store.directory, "damaged",
              f"fastlower: a damaged lowering cache entry in {store.directory} was treated as "
              f"a miss and dropped ({key}: {why})", stacklevel=4)
    store.drop(key)


def store_checked(store: LoweringStore, key: str, info: Dict[str, Any], payload: Any,
                  same: Callable[[Any], Optional[str]]) -> bool:
    """Stores ``payload`` unless its copy read back differs (``same(copy)`` names how)."""
    try:
        programs = payload.get("programs") if isinstance(payload, dict) else None
        info = dict(info, **(paths.info_of(programs) if programs is not None else
                             {"bases": paths.as_info(paths.current())}))
        chunks = entry.encode(info, payload, store.seal(key))
        # rebuilt from the serialized programs, the tensor data in place: reading the
        # whole entry back would copy it all once more
        difference = same(entry.rebuild(chunks))
        if difference is not None:
            raise Uncacheable(f"the stored copy would differ {difference}")
    except (Uncacheable, DamagedEntry) as why:
        log.debug("not stored (%s): %s", key, why)
        # a re-run would lower again: the user is told why, once per process and folder
        tell_once(store.directory, "not stored",
                  f"fastlower: a result was not stored in the cache {store.directory}, so "
                  f"a re-run lowers again ({why})", stacklevel=4)
        return False
    try:
        return store.put(key, entry.ChunkReader(chunks))  # False: too large to keep (.budget)
    except Exception as exc:  # disk full, a read-only folder after all
        warnings.warn(f"fastlower: a result could not be written to the cache "
                      f"{store.directory} ({exc!r})", CacheWarning, stacklevel=4)
        return False


def store_soon(store: LoweringStore, settings: LoweringCacheSettings, key: str, size: int,
               write: Callable[[LoweringStore], Any], also: Sequence[str] = ()) -> None:
    """``write(store)`` now, or, for an entry of ``size`` bytes that :mod:`.detached` takes,
    ``write`` on the child's own connection to the same folder (``store`` is closed first).
    ``also``: keys ``write`` stores after ``key`` (copied to a shared store after it)."""

    def in_child() -> None:
        own = LoweringStore(settings.directory, settings.size_limit, settings.key_file)
        try:
            write(own)
        finally:
            own.close()

    if not detached.store_detached(key, size, in_child, before_fork=store.close):
        write(store)
    for written in (key, *also):  # one upload thread: in this order
        shared_tier.upload_soon(settings, written)
