"""The MAC that vouches for one cache entry: HMAC-SHA256 over its bytes and its key.

The MAC covers the entry's purpose (which cache), the key the entry is stored
under and every byte of the entry before the MAC, so a valid entry moved under
another key, or into the other cache, does not verify. It is made and checked
incrementally, as the entry streams in or out.
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Union

SIZE = hashlib.sha256().digest_size


class Seal:
    """The running MAC of one entry of ``purpose`` stored under ``key``."""

    def __init__(self, secret: bytes, purpose: str, key: str) -> None:
        self._mac = hmac.new(secret, digestmod=hashlib.sha256)
        context = f"fastlower-cache\0{purpose}\0{key}\0".encode()
        self._mac.update(len(context).to_bytes(4, "big") + context)

    def update(self, chunk: Union[bytes, bytearray, memoryview]) -> None:
        self._mac.update(chunk)

    def digest(self) -> bytes:
        return self._mac.digest()

    def matches(self, tag: bytes) -> bool:
        """Whether ``tag`` is this entry's MAC (compared in constant time)."""
        return hmac.compare_digest(self._mac.digest(), tag)
