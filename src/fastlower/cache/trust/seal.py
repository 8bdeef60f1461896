"""The MAC that vouches for one cache entry: keyed BLAKE3 over its bytes and its key.

The MAC covers the entry's purpose (which cache), the key the entry is stored
under and every byte of the entry before the MAC, so a valid entry moved under
another key, or into the other cache, does not verify. It is made and checked
incrementally, as the entry streams in or out.

BLAKE3's keyed mode is a MAC (a keyed PRF, as HMAC-SHA256 is) at several times
HMAC-SHA256's speed on one core, which keeps a warm hit of a large model's entries
within noise of the unsigned checksum it replaces (benchmarks/README.md). Its key
is 32 bytes derived from the key file's contents with BLAKE3's key derivation.
It runs on the calling thread only: no thread pool in the caller's process.
"""

from __future__ import annotations

import hmac
from typing import Union

import blake3

SIZE = 32
_DERIVE_CONTEXT = "fastlower cache entry MAC, version 1"


def mac_key(secret: bytes) -> bytes:
    """The 32-byte BLAKE3 key for the key file's contents ``secret``."""
    return blake3.blake3(secret, derive_key_context=_DERIVE_CONTEXT).digest()


class Seal:
    """The running MAC of one entry of ``purpose`` stored under ``key``."""

    def __init__(self, secret: bytes, purpose: str, key: str) -> None:
        self._mac = blake3.blake3(key=mac_key(secret))
        context = f"fastlower-cache\0{purpose}\0{key}\0".encode()
        self._mac.update(len(context).to_bytes(4, "big") + context)

    def update(self, chunk: Union[bytes, bytearray, memoryview]) -> None:
        self._mac.update(chunk)

    def digest(self) -> bytes:
        return self._mac.digest(SIZE)

    def matches(self, tag: bytes) -> bool:
        """Whether ``tag`` is this entry's MAC (compared in constant time)."""
        return hmac.compare_digest(self.digest(), tag)
