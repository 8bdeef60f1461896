"""A bad or shared lowering cache never gives a wrong program (issue 18, item 4: "Safe").

* A damaged entry (bytes flipped or overwritten in its value file), a truncated one,
  and a foreign one (a value under the key that is not fastlower's format: written
  with plain ``diskcache``, or by another fastlower version) are each a miss with
  exactly one ``CacheWarning``, never an exception: the result is ExecuTorch's own
  lowering to the byte (the ``.pte``), and the entry is replaced (the next call hits).
* Two processes lowering the same program into one empty folder at once both get
  the right program, and leave one whole entry that a third process hits.
* A read-only folder: lookups hit, a miss lowers as without a cache and writes
  nothing, and the process warns once for the folder (preprocess cache included).
  Root ignores file modes, so as root the folder is also mounted read-only in a
  private mount namespace (``unshare``); without that the test is skipped.

Entries live in the ``diskcache`` folder (``store.py``): a lowering entry is a row of
its ``Cache`` table keyed ``lowering:<hex>`` whose value is a file (``filename``).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import sqlite3
import stat
import struct
import subprocess
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Tuple

import diskcache
import pytest

import fastlower.preprocess
from fastlower.cache import entry, store

from . import lower_once
from .helpers import base_args, cache_at, lower, small_aten


# --- a filled folder and its lowering entry ---------------------------------------------------

@pytest.fixture(scope="module")
def filled(tmp_path_factory) -> Path:
    """A cache folder holding the base call's entry (and its preprocess entry)."""
    folder = tmp_path_factory.mktemp("filled")
    with cache_at(folder):
        _, report = lower(small_aten(), **base_args())
    assert report.lowering_cache == "miss"
    return folder


def _copy_of(filled: Path, tmp_path: Path) -> Path:
    folder = tmp_path / "cache"
    shutil.copytree(filled, folder)
    return folder


def _lowering_rows(folder: Path) -> List[Tuple[str, str]]:
    """``(key, value file)`` of every lowering entry (the ``Cache`` table of diskcache)."""
    with contextlib.closing(sqlite3.connect(folder / "cache.db")) as db:
        return list(db.execute("SELECT key, filename FROM Cache WHERE key LIKE 'lowering:%'"))


def _the_entry(folder: Path) -> Tuple[str, Path]:
    rows = _lowering_rows(folder)
    assert len(rows) == 1, rows
    key, filename = rows[0]
    assert filename, "the lowering entry is expected in a value file"
    return key, folder / filename


@contextlib.contextmanager
def _cache_warnings() -> Iterator[List[str]]:
    """The messages of the ``CacheWarning``s raised in the block (every one, no dedup)."""
    import warnings

    found: List[str] = []
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        try:
            yield found
        finally:
            found.extend(str(w.message) for w in seen
                         if issubclass(w.category, fastlower.preprocess.CacheWarning))


def _lower_and_pte(folder: Path):
    with cache_at(folder):
        manager, report = lower(small_aten(), **base_args())
    return report, bytes(manager.to_executorch().buffer)


# --- damaged, truncated, foreign entries -------------------------------------------------------

def _rewrite(change: Callable[[bytes], bytes]) -> Callable[[Path, str, Path], None]:
    def damage(folder: Path, key: str, path: Path) -> None:
        path.write_bytes(change(path.read_bytes()))
    return damage


def _flip(data: bytes) -> bytes:
    out = bytearray(data)
    for at in (len(out) // 3, len(out) // 2, 2 * len(out) // 3):
        out[at] ^= 0xFF
    return bytes(out)


def _overwrite(data: bytes) -> bytes:
    return hashlib.shake_256(b"not an entry").digest(len(data))


def _other_version(data: bytes) -> bytes:
    """The same entry stamped by another fastlower (its checksum still right)."""
    at = len(entry.MAGIC)
    size = struct.unpack(">I", data[at:at + 4])[0]
    stamp = data[at + 4:at + 4 + size]
    assert stamp == entry.stamp()
    other = b"fastlower=0.0.1;" + stamp
    return entry.MAGIC + struct.pack(">I", len(other)) + other + data[at + 4 + size:]


def _foreign(value) -> Callable[[Path, str, Path], None]:
    """``value`` stored under the key by plain diskcache (another tool sharing the folder)."""
    def damage(folder: Path, key: str, path: Path) -> None:
        with diskcache.Cache(str(folder)) as other:
            other.set(key, value)
    return damage


DAMAGES: Dict[str, Callable[[Path, str, Path], None]] = {
    "bytes flipped": _rewrite(_flip),
    "bytes overwritten": _rewrite(_overwrite),
    "truncated to half": _rewrite(lambda data: data[:len(data) // 2]),
    "cut before the checksum": _rewrite(lambda data: data[:-5]),
    "emptied": _rewrite(lambda data: b""),
    "trailing bytes": _rewrite(lambda data: data + b"\0"),
    "another version's entry": _rewrite(_other_version),
    "foreign small bytes": _foreign(b"written by another tool"),
    "foreign large bytes": _foreign(bytes(range(256)) * 400),
    "foreign text": _foreign("a text value"),
    "foreign pickled object": _foreign({"programs": {"forward": "not a program"}}),
    "foreign number": _foreign(7),
}


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_a_bad_entry_is_a_miss_with_one_warning_then_replaced(damage, filled, tmp_path):
    folder = _copy_of(filled, tmp_path)
    key, path = _the_entry(folder)
    DAMAGES[damage](folder, key, path)
    with _cache_warnings() as seen:
        report, pte = _lower_and_pte(folder)
    assert report.lowering_cache == "miss"
    assert len(seen) == 1, seen
    assert "damaged lowering cache entry" in seen[0] and key in seen[0]
    assert pte == lower_once.reference_pte("base"), "the miss is not ExecuTorch's lowering"
    assert _the_entry(folder)[0] == key
    with _cache_warnings() as seen:
        report, pte = _lower_and_pte(folder)
    assert (report.lowering_cache, seen) == ("hit", []), "the bad entry was not replaced"
    assert pte == lower_once.reference_pte("base")


@pytest.mark.parametrize("damage", ["bytes flipped", "another version's entry", "foreign text"])
def test_a_bad_structure_record_is_a_miss_with_one_warning(damage, filled, tmp_path):
    """The record a new checkpoint is refit through (``fastlower.cache.refit``) is read
    under the same rules as an entry: MAC first, a bad one is a miss, never decoded."""
    folder = _copy_of(filled, tmp_path)
    with contextlib.closing(sqlite3.connect(folder / "cache.db")) as db:
        ((key, filename),) = db.execute("SELECT key, filename FROM Cache "
                                        "WHERE key LIKE 'structure:%'")
    DAMAGES[damage](folder, key, folder / filename)
    with _cache_warnings() as seen, cache_at(folder):
        manager, report = lower(small_aten("param"), **base_args())
    assert report.lowering_cache == "miss" and not report.refit, report.refit
    assert len(seen) == 1 and "damaged lowering cache entry" in seen[0] and key in seen[0], seen
    assert bytes(manager.to_executorch().buffer) == lower_once.reference_pte("param")


# --- two writers at once -----------------------------------------------------------------------

def test_two_processes_storing_the_same_entry_at_once(tmp_path):
    """Both wait at a barrier, then look up (both miss) and store the same key."""
    folder = tmp_path / "cache"
    writers = [lower_once.start(tmp_path / f"writer{i}.json", ["base"], folder,
                                barrier=(tmp_path / "barrier", 2)) for i in range(2)]
    results = [lower_once.outcome(p, tmp_path / f"writer{i}.json") for i, p in enumerate(writers)]
    fresh = lower_once.reference_pte("base")
    for result in results:
        (step,) = result["steps"]
        assert step["lowering_cache"] == "miss", "the writers did not overlap"
        assert step["pte"] == fresh
        assert result["warnings"] == []
    assert len({r["steps"][0]["key"] for r in results}) == 1
    key, path = _the_entry(folder)
    with path.open("rb") as stream:  # one whole entry
        steps = entry.read(stream, store.LoweringStore(folder, 2 ** 30).seal(key))
        next(steps)
        assert "forward" in next(steps)["programs"]
    third = lower_once.run(tmp_path / "third.json", ["base"], folder)
    assert third["steps"][0]["lowering_cache"] == "hit" and third["steps"][0]["key"] == key
    assert third["steps"][0]["pte"] == fresh and third["warnings"] == []


# --- a read-only folder ------------------------------------------------------------------------

def _read_only(folder: Path) -> None:
    for path in [folder, *folder.rglob("*")]:
        mode = path.stat().st_mode
        path.chmod(mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))


def _writable_again(folder: Path) -> None:
    for path in [folder, *folder.rglob("*")]:
        path.chmod(path.stat().st_mode | stat.S_IWUSR)


def _snapshot(folder: Path) -> Dict[str, Tuple[int, str]]:
    return {str(p.relative_to(folder)): (p.stat().st_mtime_ns,
                                         hashlib.sha256(p.read_bytes()).hexdigest())
            for p in folder.rglob("*") if p.is_file()}


def _read_only_mount(folder: Path) -> Callable[[List[str]], List[str]]:
    """As root: the command in a private mount namespace where ``folder`` is mounted
    read-only (root ignores file modes, not a read-only mount); else as it is."""
    if os.geteuid() != 0:
        return list
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("running as root (file modes do not bind root) and no `unshare` to mount "
                    "the folder read-only")
    probe = subprocess.run([unshare, "--mount", "--propagation", "private", "sh", "-c",
                            'mount --bind -o ro "$0" "$0" && ! touch "$0/probe" 2>/dev/null',
                            str(folder)], capture_output=True)
    if probe.returncode != 0:
        pytest.skip("running as root (file modes do not bind root) and a read-only bind mount "
                    f"is not permitted here: {probe.stderr.decode(errors='replace').strip()}")
    script = 'mount --bind -o ro "$0" "$0" && exec "$@"'

    def wrap(argv: List[str]) -> List[str]:
        return [unshare, "--mount", "--propagation", "private", "sh", "-c", script,
                str(folder), *argv]
    return wrap


def test_a_read_only_folder_is_used_for_lookups_only(filled, tmp_path):
    """In a new process: the filled entry hits twice; a new weight is refit from it
    (``fastlower.cache.refit``) to what ExecuTorch lowers, and nothing is written; one
    warning in all."""
    folder = _copy_of(filled, tmp_path)
    _read_only(folder)
    try:
        wrap = _read_only_mount(folder)
        before = _snapshot(folder)
        result = lower_once.run(tmp_path / "reader.json", ["base", "base", "param"], folder,
                                wrap=wrap)
        assert _snapshot(folder) == before, "something was written to the read-only folder"
    finally:
        _writable_again(folder)
    base, again, changed = result["steps"]
    assert (base["lowering_cache"], again["lowering_cache"], changed["lowering_cache"]) == \
        ("hit", "hit", "refit")
    assert base["pte"] == again["pte"] == lower_once.reference_pte("base")
    assert changed["pte"] == lower_once.reference_pte("param")
    assert len(result["warnings"]) == 1, result["warnings"]
    assert "cannot be written" in result["warnings"][0]
    assert [key for key, _ in _lowering_rows(folder)] == [base["key"]]


# --- an entry that cannot be kept ------------------------------------------------------------

def test_an_entry_whose_copy_would_differ_is_not_stored_and_the_user_is_told(tmp_path,
                                                                             monkeypatch):
    """Before a store the entry is read back and compared with the lowering; when the copy
    would differ nothing is stored, and one ``CacheWarning`` per folder says so and why (a
    re-run lowers again: without the warning it would just miss, every time)."""
    from fastlower.cache import compare

    monkeypatch.setattr(compare, "first_difference",
                        lambda *args: "(a difference made by the test)")
    folder = tmp_path / "cache"
    for _ in range(2):
        with _cache_warnings() as seen:
            report, pte = _lower_and_pte(folder)
        assert report.lowering_cache == "miss"  # the first call stored nothing to hit
        assert pte == lower_once.reference_pte("base")
    assert seen == [], seen  # said once per process and folder
    monkeypatch.undo()
    with _cache_warnings() as seen:
        report, _ = _lower_and_pte(tmp_path / "other")
    assert report.lowering_cache == "miss" and seen == []


def test_the_not_stored_warning_names_the_folder_and_the_reason(tmp_path, monkeypatch):
    from fastlower.cache import compare

    monkeypatch.setattr(compare, "first_difference",
                        lambda *args: "(a difference made by the test)")
    with _cache_warnings() as seen:
        _lower_and_pte(tmp_path / "cache")
    assert len(seen) == 1, seen
    assert "not stored" in seen[0] and str(tmp_path / "cache") in seen[0]
    assert "a difference made by the test" in seen[0] and "re-run lowers again" in seen[0]
