"""The shared store as the lowering cache's second tier: looked up after a local miss,
written after a local store.

* **Lookup** (:func:`lookup`): the object under the key is streamed into an unnamed
  temporary file, then read by the local tier's own reader (``read``: the entry's
  MAC checked before anything is decoded, then the backends' sources). An object
  that does not verify (garbage, another key's, written without the team's key) or
  whose backends changed is a miss, and the new result will replace it. A usable one
  fills the local tier (unless that folder is read-only) and is served.
* **Store** (:func:`upload_soon`): after the local tier stored an entry, the entry is
  copied from the local folder to the store on the upload thread (:mod:`.upload`),
  by a conditional put (a concurrent writer's whole object wins) or, replacing an
  object found unusable, by an overwrite.
* **Failures** never fail a lowering: a store that is down, slow, refuses or returns
  errors is a miss; after the first such failure the store is left alone for the rest
  of the process, with one :class:`~fastlower.preprocess.CacheWarning` saying why. A
  store that refuses writes (read-only) stays in use for lookups, with one warning.
* Without obstore installed (``pip install 'fastlower[shared]'``) the store is not
  used: one warning.
"""

from __future__ import annotations

import io
import logging
import tempfile
import threading
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO, Callable, Dict, Optional, Set, Tuple, TypeVar

from ...preprocess.folder import CacheWarning
from . import stats, upload
from .client import StoreClient, StoreReadOnly, StoreUnavailable
from .configuration import SharedSettings, resolve

if TYPE_CHECKING:  # pragma: no cover
    from ..configuration import LoweringCacheSettings
    from ..store import LoweringStore

log = logging.getLogger("fastlower.cache.shared")
T = TypeVar("T")

_LOCK = threading.Lock()
_CLIENTS: Dict[SharedSettings, StoreClient] = {}
_OFF: Dict[str, str] = {}        # url -> why the store is not used any more
_NO_WRITES: Dict[str, str] = {}  # url -> why the store is not written any more
_REPLACE: Set[Tuple[str, str]] = set()  # (url, key): the object there was unusable
_SERVED: Set[Tuple[str, str]] = set()   # (url, key): served from the store: no upload
_TOLD: Set[Tuple[str, str]] = set()


def _tell_once(url: str, what: str, message: str) -> None:
    with _LOCK:
        first = (url, what) not in _TOLD
        _TOLD.add((url, what))
    if first:
        warnings.warn(message, CacheWarning, stacklevel=4)


def client_for(shared: SharedSettings) -> Optional[StoreClient]:
    """The process's client of the store, or None when it is not used (any more)."""
    with _LOCK:
        if shared.url in _OFF:
            return None
        found = _CLIENTS.get(shared)
    if found is not None:
        return found
    try:
        import obstore  # noqa: F401
    except ImportError:
        turn_off(shared, "its client library obstore is not installed (pip install "
                         "'fastlower[shared]')")
        return None
    try:
        made = StoreClient(shared)
    except StoreUnavailable as exc:
        turn_off(shared, str(exc))
        return None
    with _LOCK:
        return _CLIENTS.setdefault(shared, made)


def turn_off(shared: SharedSettings, why: str) -> None:
    """No more use of the store in this process; said once."""
    with _LOCK:
        _OFF.setdefault(shared.url, why)
    _tell_once(shared.url, "off", f"fastlower: the shared cache {shared.url} is not used "
               f"for the rest of this process ({why}); lowering goes on with the local "
               "folder")


def lookup(local: "LoweringStore", key: str, read: Callable[[BinaryIO], Optional[T]]
           ) -> Optional[T]:
    """The entry under ``key`` from the shared store (``read`` turns a stream into the
    result, or None for a stale entry, and raises for an unusable one); it fills the
    local tier. None on a miss, whatever the reason."""
    shared = resolve()
    if shared is None:
        return None
    client = client_for(shared)
    if client is None:
        return None
    folder = Path(local.directory)
    upload.at_exit(stats.save_all)
    # this process's own uploads first (the key may be one of them); and so no upload
    # thread is alive when a miss is lowered (see .upload)
    upload.drain(shared.timeout * 2 + 5)
    spool = tempfile.TemporaryFile(dir=None if local.read_only else folder)
    with spool:
        try:
            found = client.download(key, spool)
        except StoreUnavailable as exc:
            stats.note(folder, shared.url, "failures", str(exc))
            stats.note(folder, shared.url, "misses")
            turn_off(shared, str(exc))
            return None
        if not found:
            stats.note(folder, shared.url, "misses")
            return None
        spool.seek(0)
        try:
            result = read(spool)
        except Exception as exc:  # garbage, forged, another version's: a miss
            _unusable(shared, folder, key, repr(exc))
            return None
        if result is None:  # its backends changed since
            _unusable(shared, folder, key, "")
            return None
        with _LOCK:
            _SERVED.add((shared.url, key))
        stats.note(folder, shared.url, "hits")
        if not local.read_only:
            _fill_local(local, key, spool)
        return result


def _unusable(shared: SharedSettings, folder: Path, key: str, why: str) -> None:
    with _LOCK:
        _REPLACE.add((shared.url, key))
    stats.note(folder, shared.url, "misses")
    if why:
        log.debug("unusable shared-cache entry %s: %s", key, why)
        _tell_once(shared.url, "damaged", f"fastlower: an entry of the shared cache "
                   f"{shared.url} could not be used and was treated as a miss ({key}: {why})")


def _fill_local(local: "LoweringStore", key: str, spool: Any) -> None:
    spool.flush()
    raw = spool.raw if hasattr(spool, "raw") else spool
    raw.seek(0)
    try:
        local.put(key, raw)
    except Exception as exc:  # a full disk: served all the same
        log.debug("shared-cache entry %s not copied to %s: %r", key, local.directory, exc)


def upload_soon(settings: "LoweringCacheSettings", key: str) -> None:
    """Queues the copy of the local entry under ``key`` to the shared store, if one is set,
    usable and writable, and the entry did not come from it."""
    shared = resolve()
    if shared is None or settings.directory is None:
        return
    with _LOCK:
        if shared.url in _NO_WRITES or (shared.url, key) in _SERVED:
            return
        replace = (shared.url, key) in _REPLACE
    client = client_for(shared)
    if client is None:
        return
    upload.at_exit(stats.save_all)
    upload.submit(lambda: _upload(client, settings, key, replace))


def _upload(client: StoreClient, settings: "LoweringCacheSettings", key: str,
            replace: bool) -> None:
    from .. import detached
    from ..store import LoweringStore

    detached.wait_for(key)  # a child of this process storing the entry locally
    folder = Path(settings.directory)  # type: ignore[arg-type]
    local = LoweringStore(folder, settings.size_limit, settings.key_file)
    try:
        stream = local.open(key)
        if stream is None:  # not stored locally (not cacheable after all, or a failure)
            return
        with stream:
            data = stream.getvalue() if isinstance(stream, io.BytesIO) else stream
            written = client.upload(key, data, replace)
        stats.note(folder, client.url, "uploaded" if written else "already_there")
        log.debug("shared cache %s: %s %s", client.url, "wrote" if written else "already had",
                  key)
    except StoreReadOnly as exc:
        stats.note(folder, client.url, "failures", str(exc))
        with _LOCK:
            _NO_WRITES.setdefault(client.url, str(exc))
        _tell_once(client.url, "read-only", f"fastlower: the shared cache {client.url} cannot "
                   f"be written ({exc}): lookups only")
    except StoreUnavailable as exc:
        stats.note(folder, client.url, "failures", str(exc))
        turn_off(client.settings, str(exc))
    finally:
        local.close()


def forget() -> None:
    """Forgets what this process learnt about stores (unusable, read-only, served, told):
    the next lowering starts afresh (for tests, and for long-lived processes that fixed
    their store)."""
    upload.drain()
    with _LOCK:
        for memory in (_CLIENTS, _OFF, _NO_WRITES):
            memory.clear()
        for seen in (_REPLACE, _SERVED, _TOLD):
            seen.clear()
