"""What signing costs a warm hit: the entry MAC against the checksum it replaced.

A warm stories110M hit reads two lowering entries (``to_edge_transform_and_lower``'s
and ``to_executorch``'s), each about the size of the 160 MB ``.pte``: ~320 MB pass
through the MAC. Each case digests the same 320 MiB buffer, in the 4 MiB chunks an
entry streams in:

* ``xxh3-128``: the unkeyed checksum entries carried before (what a hit paid);
* ``blake3-keyed``: :class:`fastlower.cache.trust.seal.Seal`, what a hit pays now;
* ``hmac-sha256``: the standard library's MAC, the alternative considered.

``.venv/bin/python -m pytest benchmarks/test_cache_mac_bench.py -p no:cacheprovider``
"""

from __future__ import annotations

import hashlib
import hmac
import os

import pytest
import xxhash

from fastlower.cache.trust.seal import Seal

SIZE = 320 << 20
CHUNK = 4 << 20


@pytest.fixture(scope="module")
def entry_bytes() -> memoryview:
    return memoryview(os.urandom(SIZE))


def _chunks(data: memoryview):
    for at in range(0, len(data), CHUNK):
        yield data[at:at + CHUNK]


def _xxh3(data: memoryview) -> bytes:
    digest = xxhash.xxh3_128()
    for chunk in _chunks(data):
        digest.update(chunk)
    return digest.digest()


def _seal(data: memoryview) -> bytes:
    seal = Seal(b"k" * 64, "lowering", "lowering:" + "0" * 32)
    for chunk in _chunks(data):
        seal.update(chunk)
    return seal.digest()


def _hmac(data: memoryview) -> bytes:
    mac = hmac.new(b"k" * 64, digestmod=hashlib.sha256)
    for chunk in _chunks(data):
        mac.update(chunk)
    return mac.digest()


@pytest.mark.parametrize("digest", [_xxh3, _seal, _hmac],
                         ids=["xxh3-128", "blake3-keyed", "hmac-sha256"])
def test_digest_of_a_warm_hit(benchmark, entry_bytes, digest):
    benchmark.group = "320 MiB through the entry digest"
    result = benchmark.pedantic(digest, args=(entry_bytes,), rounds=5, warmup_rounds=1)
    assert len(result) in (16, 32)
