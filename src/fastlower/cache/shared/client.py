"""The shared store's client: get, put, list and head, each bounded in time.

Built on obstore (Rust's ``object_store``, the library behind several Rust and
Python data tools): one native wheel without botocore, conditional puts
(``If-None-Match: *`` on S3; a hard link on a directory) and streaming in both
directions. A directory store writes each object to a staging name and links or
renames it into place, so an object is either absent or whole.

Every call runs under two bounds: obstore's own (connect timeout, a read timeout
on every read of a response body, an overall request timeout, one retry) and a
deadline on the calling thread (:func:`_bounded`), which also covers a directory
on a network filesystem that stops answering. Whatever goes wrong is a
:class:`StoreUnavailable` (or :class:`StoreReadOnly` for a refused write); an
object that is not there is ``None`` / ``False``, not an error.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any, BinaryIO, Callable, Dict, Iterator, Optional, Tuple, TypeVar

from .configuration import SharedLocation, SharedSettings

T = TypeVar("T")

#: where lowering entries live in the store, under the URL's path or prefix
LAYOUT = "fastlower-v1"


class StoreUnavailable(Exception):
    """The store cannot be used now (down, slow, refused, full); the message says why."""


class StoreReadOnly(StoreUnavailable):
    """The store refused a write (permissions, a read-only directory or bucket)."""


def object_name(key: str) -> str:
    """The object holding the lowering entry under cache key ``key`` (``lowering:<hex>``)."""
    kind, _, digest = key.partition(":")
    if not digest or not digest.isalnum() or not kind.isalpha():
        raise ValueError(f"not a lowering-cache key: {key!r}")
    return f"{LAYOUT}/{kind}/{digest}"


def key_of(name: str) -> Optional[str]:
    """The cache key an object name stands for (:func:`object_name`'s inverse), or None."""
    parts = name.split("/")
    if len(parts) != 3 or parts[0] != LAYOUT or not parts[2].isalnum():
        return None
    return f"{parts[1]}:{parts[2]}"


class StoreClient:
    """One store, opened from :class:`SharedSettings` (nothing is contacted until a call)."""

    def __init__(self, settings: SharedSettings) -> None:
        self.settings = settings
        self.timeout = settings.timeout
        try:
            self._store = _open(settings.location, settings.timeout)
        except Exception as exc:  # a directory that does not exist, a bad configuration
            raise _classified(exc, settings.url, "opening the store") from exc

    @property
    def url(self) -> str:
        return self.settings.url

    def download(self, key: str, into: BinaryIO) -> bool:
        """Streams the entry under ``key`` into ``into``; False when there is none."""
        import obstore

        def fetch() -> bool:
            try:
                result = obstore.get(self._store, object_name(key))
                for chunk in result.stream(min_chunk_size=1 << 20):
                    into.write(memoryview(chunk))
            except (FileNotFoundError, obstore.exceptions.NotFoundError):
                return False
            return True

        return self._bounded(fetch, f"reading {key}")

    def upload(self, key: str, data: Any, replace: bool) -> bool:
        """Writes ``data`` (bytes or a binary file) as the entry under ``key``; False when one
        is there already and ``replace`` is false (the conditional put lost)."""
        import obstore

        def put() -> bool:
            try:
                obstore.put(self._store, object_name(key), data,
                            mode="overwrite" if replace else "create")
            except obstore.exceptions.AlreadyExistsError:
                return False
            return True

        return self._bounded(put, f"writing {key}")

    def entries(self) -> Iterator[Tuple[str, int]]:
        """``(cache key, size)`` of every entry in the store."""
        import obstore

        def listing() -> list:
            found = []
            try:
                for batch in obstore.list(self._store, prefix=LAYOUT, chunk_size=1000):
                    for meta in batch:
                        key = key_of(meta["path"])
                        if key is not None:
                            found.append((key, int(meta["size"])))
            except (FileNotFoundError, obstore.exceptions.NotFoundError):
                pass  # a directory store that nobody wrote yet
            return found

        return iter(self._bounded(listing, "listing entries"))

    def _bounded(self, call: Callable[[], T], what: str) -> T:
        """``call()`` within the timeout, its failures as :class:`StoreUnavailable`."""
        outcome: Dict[str, Any] = {}

        def run() -> None:
            try:
                outcome["value"] = call()
            except BaseException as exc:  # noqa: B902 (handed to the caller's thread)
                outcome["error"] = exc

        worker = threading.Thread(target=run, name="fastlower-shared-request", daemon=True)
        started = time.monotonic()
        worker.start()
        # obstore's own timeouts fire first; this deadline catches what they cannot
        # (a directory on a hung network filesystem, a credential lookup that hangs)
        worker.join(self.timeout + 1.0)
        if worker.is_alive():
            raise StoreUnavailable(f"{self.url}: no answer within {self.timeout:g}s "
                                   f"({what})")
        if "error" in outcome:
            if time.monotonic() - started >= self.timeout:  # obstore's own timeout fired
                what = f"{what}: no answer within {self.timeout:g}s"
            raise _classified(outcome["error"], self.url, what) from outcome["error"]
        return outcome["value"]  # type: ignore[no-any-return,unused-ignore]


def _classified(exc: BaseException, url: str, what: str) -> StoreUnavailable:
    import obstore

    text = str(exc).split("\n", 1)[0][:300]
    if isinstance(exc, (PermissionError, obstore.exceptions.PermissionDeniedError,
                        obstore.exceptions.UnauthenticatedError)) \
            or "Permission denied" in text or "Read-only file system" in text:
        return StoreReadOnly(f"{url}: {what} was refused ({text})")
    return StoreUnavailable(f"{url}: {what} failed ({type(exc).__name__}: {text})")


def _open(location: SharedLocation, timeout: float) -> Any:
    from obstore.store import LocalStore, S3Store

    if location.scheme == "file":
        return LocalStore(location.root)
    limit = timedelta(seconds=timeout)
    client: Any = {"timeout": limit, "read_timeout": limit,
              "connect_timeout": timedelta(seconds=min(timeout, 5.0)),
              "allow_http": location.endpoint.startswith("http://")}
    config: Any = {}
    if location.endpoint:
        config["endpoint"] = location.endpoint
    if location.region:
        config["region"] = location.region
    return S3Store(location.bucket, prefix=location.prefix or None, config=config,
                   client_options=client,
                   retry_config={"max_retries": 1, "retry_timeout": limit})
