"""A read-only store is used for lookups; ``fastlower cache info|push|pull``; the settings."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

import pytest

import fastlower.cache.shared
from fastlower import settings as env
from fastlower.frontends.cli import main
from fastlower.cache.shared.configuration import SharedStoreSettingsError, parse_url, resolve
from tests.cache import lower_once

from .test_failures import lower


def _snapshot(folder: Path) -> dict:
    return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in folder.rglob("*") if p.is_file()}


def _read_only_mount(folder: Path):
    """The command in a private mount namespace where ``folder`` is mounted read-only (root
    ignores file modes); skipped where such a mount is not permitted."""
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("no `unshare` to mount the store read-only")
    probe = subprocess.run([unshare, "--mount", "--propagation", "private", "sh", "-c",
                            'mount --bind -o ro "$0" "$0" && ! touch "$0/probe" 2>/dev/null',
                            str(folder)], capture_output=True)
    if probe.returncode != 0:
        pytest.skip("a read-only bind mount is not permitted here: "
                    + probe.stderr.decode(errors="replace").strip())
    script = 'mount --bind -o ro "$0" "$0" && exec "$@"'
    return lambda argv: [unshare, "--mount", "--propagation", "private", "sh", "-c", script,
                         str(folder), *argv]


@pytest.mark.skipif(os.name != "posix", reason="a read-only mount")
def test_a_read_only_store_serves_lookups_and_takes_no_upload(tmp_path):
    store = tmp_path / "store"
    store.mkdir()
    url = f"file://{store}"
    assert lower(tmp_path / "filler", url)[0] == "miss"  # the base entry, in the store
    if os.geteuid() == 0:
        wrap = _read_only_mount(store)
    else:
        store.chmod(0o555)
        for folder in store.rglob("*"):
            if folder.is_dir():
                folder.chmod(0o555)
        wrap = list
    before = _snapshot(store)
    # param first: its upload (refused) is finished before base's lookup in the store, so
    # the warning comes while the process still records them
    result = lower_once.run(tmp_path / "reader.json", ["param", "base"], tmp_path / "local",
                            wrap=wrap, env={"FASTLOWER_SHARED_CACHE": url})
    assert _snapshot(store) == before, "something was written to the read-only store"
    changed, base = result["steps"]
    # param: refit from base's entry, through base's structure record, both in the store
    assert (base["lowering_cache"], changed["lowering_cache"]) == ("hit", "refit")
    assert base["pte"] == lower_once.reference_pte("base")
    assert changed["pte"] == lower_once.reference_pte("param")
    assert len(result["warnings"]) == 1 and "cannot be written" in result["warnings"][0], \
        result["warnings"]


def test_cache_push_pull_and_info(tmp_path, capsys):
    store = tmp_path / "store"
    store.mkdir()
    url = f"file://{store}"
    status, key, pte, _ = lower(tmp_path / "a", "")  # filled without a store
    assert status == "miss"
    assert main(["cache", "push", "--cache-dir", str(tmp_path / "a"), "--shared-cache", url]) == 0
    # the entry and its structure record (fastlower.cache.refit)
    assert "2 copied, 0 already there, 0 rejected" in capsys.readouterr().out
    assert main(["cache", "push", "--cache-dir", str(tmp_path / "a"), "--shared-cache", url]) == 0
    assert "0 copied, 2 already there" in capsys.readouterr().out
    assert main(["cache", "pull", "--cache-dir", str(tmp_path / "b"), "--shared-cache", url]) == 0
    assert "2 copied" in capsys.readouterr().out
    status, key_b, pte_b, told = lower(tmp_path / "b", "")  # the local folder alone
    assert (status, key_b, pte_b, told) == ("hit", key, pte, [])
    lower(tmp_path / "c", url)  # a run through the store: its counts are recorded at exit
    fastlower.cache.shared.stats.save_all()
    assert main(["cache", "info", "--cache-dir", str(tmp_path / "c"), "--shared-cache", url]) == 0
    shown = capsys.readouterr().out
    assert f"shared cache: {url}: 1 lowering entries (+1 structure records)" in shown, shown
    assert "1 hits, 0 misses" in shown, shown


def test_pull_rejects_an_entry_that_does_not_verify(tmp_path, capsys):
    store = tmp_path / "store"
    (store / "fastlower-v1" / "lowering").mkdir(parents=True)
    (store / "fastlower-v1" / "lowering" / ("ab" * 16)).write_bytes(b"FLLOWERCACHE" + b"x" * 99)
    assert main(["cache", "pull", "--cache-dir", str(tmp_path / "b"),
                 "--shared-cache", f"file://{store}"]) == 0
    assert "0 copied, 0 already there, 1 rejected" in capsys.readouterr().out
    assert fastlower.cache.info(tmp_path / "b").lowering.entries == 0


def test_urls():
    s3 = parse_url("s3://bucket/ci/cache/?endpoint=http://127.0.0.1:9000&region=eu-west-1")
    assert (s3.scheme, s3.bucket, s3.prefix, s3.endpoint, s3.region) == \
        ("s3", "bucket", "ci/cache", "http://127.0.0.1:9000", "eu-west-1")
    assert parse_url("s3://bucket", endpoint="https://minio:9000").endpoint == \
        "https://minio:9000"
    assert parse_url("file:///mnt/team%20cache").root == "/mnt/team cache"
    for bad in ("gs://bucket", "file://host/path", "s3:///prefix", "/mnt/cache",
                "s3://bucket?endpoint=ftp://x"):
        with pytest.raises(SharedStoreSettingsError):
            parse_url(bad)


def test_settings_from_options_and_environment(monkeypatch, tmp_path):
    monkeypatch.delenv(env.SHARED_CACHE, raising=False)
    assert resolve() is None
    monkeypatch.setenv(env.SHARED_CACHE, f"file://{tmp_path}")
    monkeypatch.setenv(env.SHARED_CACHE_TIMEOUT, "7")
    found = resolve()
    assert found is not None and found.location.root == str(tmp_path) and found.timeout == 7
    with fastlower.cache.shared.options(url=""):
        assert resolve() is None  # the option wins: '' turns the store off
    with fastlower.cache.shared.options(url="s3://b/p", endpoint="http://127.0.0.1:1", timeout=2):
        found = resolve()
        assert (found.location.endpoint, found.timeout) == ("http://127.0.0.1:1", 2)
    monkeypatch.setenv(env.SHARED_CACHE_TIMEOUT, "0")
    with pytest.raises(env.SettingsError):
        resolve()
    monkeypatch.setenv(env.SHARED_CACHE_TIMEOUT, "3")
    monkeypatch.setenv(env.SHARED_CACHE, "ftp://host/x")
    with pytest.raises(SharedStoreSettingsError):
        resolve()
