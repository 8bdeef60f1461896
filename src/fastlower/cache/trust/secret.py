"""The secret key that signs cache entries: found, generated, and checked.

Without an explicit file, the key is the user's own: ``cache.key`` in fastlower's
folder of the user's config directory (``platformdirs``), generated on first use
with 32 random bytes, mode 0600 in a folder of mode 0700. Two processes generating
it at once agree: each writes a private temporary file and links it into place;
the one that loses reads the winner's.

An explicit file (``FASTLOWER_CACHE_KEY_FILE`` or ``preprocess.options(
cache_key_file=...)``) is how a team shares a cache: everyone who may write the
folder holds the same file. Either way the file must be a regular file owned by
the user (or root), writable by nobody else and readable by no other user outside
its group, holding at least 32 bytes; anything else is a :class:`CacheKeyError`.
"""

from __future__ import annotations

import os
import secrets
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

KEY_NAME = "cache.key"
KEY_BYTES = 32


class CacheKeyError(Exception):
    """The cache's secret key cannot be used; the message says which file and why."""


@dataclass(frozen=True)
class CacheSecret:
    """A key and where it came from; ``explicit`` when given by the caller, not generated."""

    path: Path
    explicit: bool
    key: bytes = field(repr=False)


def default_path() -> Path:
    """Where the user's own key lives: ``<user config dir>/fastlower/cache.key``."""
    import platformdirs

    return Path(platformdirs.user_config_dir("fastlower")) / KEY_NAME


def load(explicit: Optional[Path]) -> CacheSecret:
    """The key from ``explicit``, else the user's own (generated if missing)."""
    if explicit is not None:
        path = Path(explicit).expanduser()
        return CacheSecret(path, True, _read_checked(path, group_may_read=True))
    path = default_path()
    if not path.exists():
        _generate(path)
    return CacheSecret(path, False, _read_checked(path, group_may_read=False))


def _read_checked(path: Path, group_may_read: bool) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise CacheKeyError(f"the cache key file {path} cannot be opened ({exc.strerror})") \
            from exc
    with os.fdopen(fd, "rb") as handle:
        problem = _permission_problem(os.fstat(fd), group_may_read)
        if problem:
            raise CacheKeyError(f"the cache key file {path} is {problem}; fix it with "
                                f"`chmod 600 {path}` (and own it)")
        key = handle.read(4096).strip()
    if len(key) < KEY_BYTES:
        raise CacheKeyError(f"the cache key file {path} holds {len(key)} bytes; a key has at "
                            f"least {KEY_BYTES} (e.g. `python -c \"import secrets; "
                            f"print(secrets.token_hex(32))\" > {path}`)")
    return key


def _permission_problem(st: os.stat_result, group_may_read: bool) -> str:
    """Why a key file with these stat results cannot be trusted ('' when it can)."""
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file"
    if os.name != "posix":
        return ""
    if st.st_uid not in (os.geteuid(), 0):
        return f"owned by another user (uid {st.st_uid})"
    forbidden = stat.S_IWGRP | stat.S_IWOTH | stat.S_IROTH | stat.S_IXOTH
    if not group_may_read:
        forbidden |= stat.S_IRGRP | stat.S_IXGRP
    if st.st_mode & forbidden:
        return f"open to other users (mode {stat.S_IMODE(st.st_mode):o})"
    return ""


def _generate(path: Path) -> None:
    """Writes a new random key to ``path`` unless another process got there first."""
    make_private_dirs(path.parent)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_hex(KEY_BYTES) + "\n")
            handle.flush()
            os.fsync(handle.fileno())
        try:
            os.link(temporary, path)  # atomic, and never replaces a key already there
        except FileExistsError:
            pass
    finally:
        temporary.unlink(missing_ok=True)


def make_private_dirs(directory: Path) -> None:
    """Creates ``directory`` and its missing parents with mode 0700."""
    missing = []
    for folder in [directory, *directory.parents]:
        if folder.exists():
            break
        missing.append(folder)
    for folder in reversed(missing):
        try:
            folder.mkdir(mode=0o700)
        except FileExistsError:
            pass
