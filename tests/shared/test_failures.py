"""A store that fails never fails a lowering: down, slow, cut mid-upload, garbage, forged.

Each test lowers in this process (``fastlower.cache.to_edge_transform_and_lower``, the
demo add/mul partitioner, serial preprocess) against a real server or directory,
then checks that the lowering's ``.pte`` is ExecuTorch's, what the store holds, and
that the process was told once why the store missed.
"""

from __future__ import annotations

import os
import secrets
import socket
import time
import warnings
from pathlib import Path
from typing import List, Optional, Tuple

import pytest

import fastlower.cache.shared
from fastlower.preprocess import CacheWarning
from fastlower.cache.shared import upload
from fastlower.cache.shared.client import object_name
from tests.cache import helpers, lower_once

from .servers import CuttingProxy, MotoServer, SilentServer


def lower(local: Path, url: str, key_file: Optional[Path] = None, change: Optional[str] = None,
          **shared: object) -> Tuple[str, str, bytes, List[str]]:
    """One lowering with the store at ``url``: (lowering_cache, key, .pte, CacheWarnings)."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with helpers.cache_at(local, cache_key_file=key_file), \
                fastlower.cache.shared.options(url=url, **shared):
            manager, report = helpers.lower(helpers.small_aten(change), **helpers.base_args())
            pte = bytes(manager.to_executorch().buffer)
            assert upload.drain(60)
    told = [str(w.message) for w in seen if issubclass(w.category, CacheWarning)]
    return report.lowering_cache, report.lowering_cache_key, pte, told


def _closed_port() -> int:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()
    return port


def test_a_store_that_is_down_is_a_miss_said_once(tmp_path, s3_env):
    endpoint = f"http://127.0.0.1:{_closed_port()}"
    url = "s3://team-cache/ci"
    status, _, pte, told = lower(tmp_path / "a", url, endpoint=endpoint, timeout=2)
    assert status == "miss" and pte == lower_once.reference_pte("base")
    assert len(told) == 1 and url in told[0] and "not used for the rest" in told[0], told
    start = time.perf_counter()
    status, _, pte, told = lower(tmp_path / "b", url, change="param", endpoint=endpoint)
    assert status == "miss" and pte == lower_once.reference_pte("param")
    assert told == []  # said once per process; the store is not tried again
    assert time.perf_counter() - start < 30


def test_a_slow_store_times_out(tmp_path, s3_env):
    silent = SilentServer()
    try:
        start = time.perf_counter()
        lower(tmp_path / "cold", "")  # no store: the cold lowering's time, for comparison
        cold = time.perf_counter() - start
        start = time.perf_counter()
        status, _, pte, told = lower(tmp_path / "slow", "s3://team-cache/ci",
                                     endpoint=silent.endpoint, timeout=1)
        slow = time.perf_counter() - start
    finally:
        silent.close()
    assert status == "miss" and pte == lower_once.reference_pte("base")
    assert len(told) == 1 and ("no answer within 1s" in told[0] or "timed out" in told[0]
                               or "timeout" in told[0].lower()), told
    assert slow < cold + 2 * (1 + 1) + 5, (slow, cold)  # the lookup's timeouts, no more


@pytest.mark.parametrize("kill", [False, True], ids=["connection-cut", "server-killed"])
def test_a_store_lost_in_the_middle_of_an_upload(tmp_path, s3_env, moto, kill):
    server = MotoServer() if kill else moto
    try:
        bucket = server.bucket()
        proxy = CuttingProxy(server.port, after=2048, victim=server.process if kill else None)
        url = f"s3://{bucket}/ci"
        status, _, pte, told = lower(tmp_path / "a", url, endpoint=proxy.endpoint, timeout=5)
        proxy.close()
        assert proxy.cut.is_set(), "the upload was never cut"
        assert status == "miss" and pte == lower_once.reference_pte("base")
        assert len(told) == 1 and url in told[0], told
        if not kill:  # no half-written object: the store holds nothing
            assert server.objects(bucket) == {}
        else:
            assert server.process.poll() is not None
    finally:
        if kill:
            server.stop()


def _writer(kind: str, tmp_path: Path, moto):
    """(url, endpoint, put(name, data)) of an empty store of ``kind``."""
    if kind == "directory":
        root = tmp_path / "store"
        root.mkdir()

        def put(name: str, data: bytes) -> None:
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / name).write_bytes(data)
        return f"file://{root}", None, put, lambda name: (root / name).read_bytes()
    import boto3

    bucket = moto.bucket()
    client = boto3.client("s3", endpoint_url=moto.endpoint, region_name="us-east-1",
                          aws_access_key_id="testing", aws_secret_access_key="testing")
    return (f"s3://{bucket}", moto.endpoint,
            lambda name, data: client.put_object(Bucket=bucket, Key=name, Body=data),
            lambda name: client.get_object(Bucket=bucket, Key=name)["Body"].read())


@pytest.mark.parametrize("kind", ["directory", "s3"])
def test_garbage_in_the_store_is_a_miss_then_replaced(tmp_path, s3_env, moto, kind):
    url, endpoint, put, get = _writer(kind, tmp_path, moto)
    _, key, _, _ = lower(tmp_path / "key-only", "")  # the key, without a store
    garbage = b"FLLOWERCACHE" + os.urandom(5000)
    put(object_name(key), garbage)
    status, _, pte, told = lower(tmp_path / "a", url, endpoint=endpoint)
    assert status == "miss" and pte == lower_once.reference_pte("base")
    assert len(told) == 1 and "could not be used" in told[0] and key in told[0], told
    assert get(object_name(key)) != garbage  # the new result replaced it
    status, _, pte, told = lower(tmp_path / "b", url, endpoint=endpoint)
    assert (status, told) == ("hit", []) and pte == lower_once.reference_pte("base")


def _key_file(path: Path) -> Path:
    path.write_text(secrets.token_hex(32) + "\n")
    path.chmod(0o600)
    return path


def test_an_entry_written_without_the_key_is_never_decoded(tmp_path):
    """The attacker holds a key of their own; their entry, under the right name, fails the
    MAC: a miss, and replaced by the team's own."""
    store = tmp_path / "store"
    store.mkdir()
    url = f"file://{store}"
    team = _key_file(tmp_path / "team.key")
    attacker = _key_file(tmp_path / "attacker.key")
    status, key, _, told = lower(tmp_path / "attacker", url, key_file=attacker)
    assert (status, told) == ("miss", [])
    forged = (store / object_name(key)).read_bytes()
    status, _, pte, told = lower(tmp_path / "a", url, key_file=team)
    assert status == "miss" and pte == lower_once.reference_pte("base")
    assert len(told) == 1 and "MAC does not verify" in told[0], told
    assert (store / object_name(key)).read_bytes() != forged
    status, _, _, told = lower(tmp_path / "b", url, key_file=team)
    assert (status, told) == ("hit", [])


def test_a_shared_hit_fills_the_local_folder(tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    url = f"file://{store}"
    assert lower(tmp_path / "a", url)[0] == "miss"
    assert lower(tmp_path / "b", url)[0] == "hit"
    status, _, _, told = lower(tmp_path / "b", "file:///nonexistent/store")
    assert status == "hit" and told == []  # served by the local folder: the store not asked
