"""The ``diskcache`` disk both caches open their folder with: bytes in, bytes out.

``diskcache.Disk`` unpickles keys and values stored in its pickle mode before the
caller sees them, and joins a file name read from the database to the folder, so
a forged row could run code or point at any file on the machine (to read it, or
to delete it on eviction). This disk refuses both:

* keys are ``str`` or ``bytes``; a row whose key is pickled is refused;
* values are ``bytes`` or a stream (stored in the database or in a file); a row in
  the text or pickle mode, or whose value is not bytes, is refused;
* a value file's name must be one this disk makes (``ab/cd/<28 hex>.val``); it is
  opened without following a final link and must be a regular file (never a pipe
  that would hang the read); a file name of any other form is neither read nor
  removed.

A refused row raises :class:`UntrustedRow` (a ``ValueError``, so ``diskcache``
does not mistake it for a file deleted under it), which the caches treat as a
damaged entry: a miss, and the row is dropped.
"""

from __future__ import annotations

import os
import re
import sqlite3
import stat
from typing import Any, BinaryIO

import diskcache
from diskcache.core import MODE_BINARY, MODE_RAW, UNKNOWN

_VALUE_FILE = re.compile(r"[0-9a-f]{2}[/\\][0-9a-f]{2}[/\\][0-9a-f]{28}\.val")


class UntrustedRow(ValueError):
    """A cache row that this disk will not decode; the message says why."""


class BytesOnlyDisk(diskcache.Disk):
    """``diskcache.Disk`` restricted to byte values and raw keys (see the module)."""

    def put(self, key: Any) -> Any:
        if type(key) not in (str, bytes):
            raise TypeError(f"cache keys are str or bytes, not {type(key).__name__}")
        return super().put(key)

    def get(self, key: Any, raw: bool) -> Any:
        if not raw:
            raise UntrustedRow("a pickled key")
        return super().get(key, raw)

    def store(self, value: Any, read: bool, key: Any = UNKNOWN) -> Any:
        if type(value) is not bytes and not read:
            raise TypeError(f"cache values are bytes or streams, not {type(value).__name__}")
        if type(value) is bytes and len(value) >= self.min_file_size:
            # diskcache writes bytes by iterating an io.BytesIO, which yields lines: a
            # 150 MB entry of packed weights became ~300,000 writes. One write instead.
            filename, full_path = self.filename(key, value)
            self._write(full_path, iter((value,)), "xb")
            return len(value), MODE_BINARY, filename, None
        return super().store(value, read, key)

    def fetch(self, mode: int, filename: Any, value: Any, read: bool) -> Any:
        if mode == MODE_RAW:
            if type(value) not in (bytes, sqlite3.Binary):
                raise UntrustedRow(f"a stored {type(value).__name__}, not bytes")
            return bytes(value)
        if mode != MODE_BINARY:
            raise UntrustedRow(f"a value in diskcache's mode {mode!r} (only bytes are read)")
        stream = self._open_value_file(filename)
        if read:
            return stream
        with stream:
            return stream.read()

    def remove(self, file_path: Any) -> None:
        if _is_value_file(file_path):
            super().remove(file_path)

    def _open_value_file(self, filename: Any) -> BinaryIO:
        if not _is_value_file(filename):
            raise UntrustedRow(f"a value file name of a foreign form ({str(filename)[:80]!r})")
        path = os.path.join(self._directory, filename)
        flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0)
        fd = os.open(path, flags)  # OSError: a file removed meanwhile, a miss for diskcache
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise UntrustedRow("a value file that is not a regular file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")


def _is_value_file(filename: Any) -> bool:
    return isinstance(filename, str) and _VALUE_FILE.fullmatch(filename) is not None
