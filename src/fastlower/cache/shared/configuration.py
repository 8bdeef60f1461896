"""Which shared store, if any: its URL parsed, with its endpoint and timeout.

The store is named by a URL, set in Python (:func:`options`, :func:`set_options`), on
the command line (``--shared-cache``) or by ``FASTLOWER_SHARED_CACHE``; an option
wins over its variable, as everywhere in fastlower:

=============  ===================================  ====================================
option         environment variable                 default
=============  ===================================  ====================================
``url``        ``FASTLOWER_SHARED_CACHE``           no shared store
``endpoint``   ``FASTLOWER_SHARED_CACHE_ENDPOINT``  AWS (an ``s3://`` store); or the
                                                    URL's ``?endpoint=`` query
``timeout``    ``FASTLOWER_SHARED_CACHE_TIMEOUT``   30 seconds per request
=============  ===================================  ====================================

Forms of the URL: ``file:///absolute/path`` (a directory, e.g. on NFS) and
``s3://bucket[/prefix][?endpoint=http://host:port&region=...]``. An empty URL turns
the store off, whatever the variable says. A URL of another form is a
:class:`SharedStoreSettingsError` (a ``ValueError``), raised by :func:`resolve`.
"""

from __future__ import annotations

from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterator, Optional
from urllib.parse import parse_qs, unquote, urlsplit

from ... import settings as env
from ...errors import FastlowerError

DEFAULT_TIMEOUT = 30.0
SCHEMES = ("file", "s3")


class SharedStoreSettingsError(FastlowerError, ValueError):
    """A shared store's URL or option that fastlower cannot use; the message says why."""


@dataclass(frozen=True)
class SharedOptions:
    """The shared store's options set in Python; ``None``: the variable, else the default."""

    url: Optional[str] = None
    endpoint: Optional[str] = None
    timeout: Optional[float] = None


@dataclass(frozen=True)
class SharedLocation:
    """A parsed store URL: ``scheme`` ``file`` (``root`` is the directory) or ``s3``
    (``bucket``, ``prefix``, ``endpoint``, ``region``)."""

    url: str
    scheme: str
    root: str = ""       # file: the directory
    bucket: str = ""     # s3
    prefix: str = ""     # s3: objects live under this key prefix (no slash at either end)
    endpoint: str = ""   # s3: an S3-compatible server; '' for AWS
    region: str = ""


@dataclass(frozen=True)
class SharedSettings:
    """The store in force for one lowering."""

    location: SharedLocation
    timeout: float

    @property
    def url(self) -> str:
        return self.location.url


_CURRENT = SharedOptions()
_SCOPED: ContextVar[Optional[SharedOptions]] = ContextVar("fastlower_shared_options",
                                                          default=None)


def current() -> SharedOptions:
    scoped = _SCOPED.get()
    return scoped if scoped is not None else _CURRENT


def set_options(**changes: object) -> None:
    """Changes the process-wide options (``url``, ``endpoint``, ``timeout``)."""
    global _CURRENT
    _CURRENT = replace(_CURRENT, **changes)  # type: ignore[arg-type]


@contextmanager
def options(*, url: Optional[str] = None, endpoint: Optional[str] = None,
            timeout: Optional[float] = None) -> Iterator[SharedOptions]:
    """The shared store's options inside the block (this thread / context only); only the
    keywords given change. ``url=""`` turns the store off."""
    given = {k: v for k, v in dict(url=url, endpoint=endpoint, timeout=timeout).items()
             if v is not None}
    token = _SCOPED.set(replace(current(), **given))  # type: ignore[arg-type]
    try:
        yield _SCOPED.get()  # type: ignore[misc]
    finally:
        _SCOPED.reset(token)


def parse_url(url: str, endpoint: Optional[str] = None) -> SharedLocation:
    """``url`` as a :class:`SharedLocation`; ``endpoint`` (when given) wins over the URL's
    ``?endpoint=``. Raises :class:`SharedStoreSettingsError`."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in SCHEMES:
        raise SharedStoreSettingsError(
            f"shared store {url!r}: the URL must start with one of "
            + ", ".join(f"{s}://" for s in SCHEMES))
    query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
    if scheme == "file":
        if parts.netloc not in ("", "localhost"):
            raise SharedStoreSettingsError(f"shared store {url!r}: a file:// URL names a "
                                           "local path (file:///absolute/path)")
        root = unquote(parts.path)
        if not root.startswith("/"):
            raise SharedStoreSettingsError(f"shared store {url!r}: the path must be absolute")
        return SharedLocation(url, "file", root=str(Path(root)))
    if not parts.netloc:
        raise SharedStoreSettingsError(f"shared store {url!r}: no bucket (s3://bucket/prefix)")
    server = endpoint or query.get("endpoint", "")
    if server and urlsplit(server).scheme not in ("http", "https"):
        raise SharedStoreSettingsError(f"shared store endpoint {server!r}: expected an "
                                       "http:// or https:// URL")
    return SharedLocation(url, "s3", bucket=parts.netloc, prefix=parts.path.strip("/"),
                          endpoint=server, region=query.get("region", ""))


def resolve() -> Optional[SharedSettings]:
    """The store for the lowering about to run, or ``None`` when there is none."""
    opts = current()
    url = opts.url if opts.url is not None else env.shared_cache()
    if not url:
        return None
    endpoint = opts.endpoint if opts.endpoint is not None else env.shared_cache_endpoint()
    timeout = opts.timeout if opts.timeout is not None else env.shared_cache_timeout()
    timeout = DEFAULT_TIMEOUT if timeout is None else float(timeout)
    if timeout <= 0:
        raise SharedStoreSettingsError(f"shared store timeout must be > 0 seconds, "
                                       f"got {timeout}")
    return SharedSettings(parse_url(url, endpoint), timeout)
