"""Every length and count an entry holds is checked before anything is allocated for it,
and any failure reading an entry is a miss (issue 48, item 1).

For each kind of entry (a lowering entry, a refit record under its structure key, a
``to_executorch`` entry, the same in a shared store, a preprocess entry, a structure
template) and each of its length and count fields made huge or one past the end:
the lookup is a miss with one ``CacheWarning`` naming the field, the entry is dropped,
and the reader never allocates more than the entry's size (``tracemalloc``).
"""

from __future__ import annotations

import shutil
import struct
import tracemalloc
import warnings
from pathlib import Path
from typing import Dict, List, Tuple

import pytest

import fastlower.cache
import fastlower.preprocess
from fastlower.cache import access, entry, manifest
from fastlower.cache.store import LoweringStore
from fastlower.preprocess import cache as preprocess_cache
from fastlower.cache.shared import client as shared_client
from fastlower.cache.shared import tier

from . import damage
from .helpers import base_args, cache_at, lower, small_aten

# the fields each kind of entry in the filled folder has: the small model's entries hold
# no large bytes (a section of its own from 64 KiB on), the "blob" entry does
_COMMON = ("stamp length", "info length", "program length", "storage count", "bytes count")
PRESENT = {"lowering": _COMMON + ("storage length",), "structure": _COMMON,
           "executorch": _COMMON, "blob": _COMMON + ("bytes length",)}
FIELDS: List[Tuple[str, str]] = [(kind, section) for kind, sections in PRESENT.items()
                                 for section in sections
                                 if kind in ("lowering", "blob") or section in _COMMON[:3]]
BLOB_KEY = "lowering:" + "b1" * 16
BOUND = 32 << 20  # bytes the reader may allocate, at most (the entries are far smaller)


@pytest.fixture(scope="module")
def filled(tmp_path_factory) -> Path:
    """A folder with the base call's lowering entry, its structure record, its
    ``to_executorch`` entry and its preprocess entries."""
    folder = tmp_path_factory.mktemp("filled")
    with cache_at(folder):
        manager, report = lower(small_aten(), **base_args())
        fastlower.cache.to_executorch(manager)
    assert report.lowering_cache == "miss"
    store = LoweringStore(folder, 1 << 30)
    try:  # an entry with a large bytes object (a delegate payload's section)
        payload = {"programs": {}, "data": b"7" * (64 << 10)}
        assert access.store_checked(store, BLOB_KEY, {}, payload, lambda copy: None)
    finally:
        store.close()
    return folder


def _copy(filled: Path, tmp_path: Path) -> Path:
    shutil.copytree(filled, tmp_path / "cache")
    return tmp_path / "cache"


def _row(folder: Path, kind: str) -> damage.Row:
    if kind == "blob":
        (row,) = [r for r in damage.rows(folder) if r.key == BLOB_KEY]
    else:
        (row,) = [r for r in damage.rows(folder)
                  if r.key.startswith(f"{kind}:") and r.key != BLOB_KEY]
    return row


def _present(filled: Path, kind: str, section: str) -> bool:
    return section in damage.fields(damage.read_value(filled, _row(filled, kind)))


def _lookup(folder: Path, key: str) -> Tuple[object, List[str], int]:
    """``access.lookup`` of ``key``: what it returned, the warnings, the peak allocation."""
    store = LoweringStore(folder, 1 << 30)
    try:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            tracemalloc.start()
            try:
                found = access.lookup(store, key)
                peak = tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()
    finally:
        store.close()
    return found, [str(w.message) for w in seen
                   if issubclass(w.category, fastlower.preprocess.CacheWarning)], peak


def _rest(data: bytes, section: str) -> int:
    """The bytes after the field, the MAC left out (a length of one more than that is
    one past the end)."""
    at, fmt = damage.fields(data)[section]
    return len(data) - at - struct.calcsize(fmt) - entry.MAC_SIZE


@pytest.mark.parametrize("size", ["huge", "one past the end"])
@pytest.mark.parametrize("kind, section", FIELDS)
def test_a_local_entry_with_a_bad_field_is_a_miss(kind, section, size, filled, tmp_path):
    assert _present(filled, kind, section), f"the {kind} entry has no {section}"
    folder = _copy(filled, tmp_path)
    row = _row(folder, kind)
    data = damage.read_value(folder, row)
    value = None if size == "huge" else _rest(data, section) + 1
    if size != "huge" and section.endswith("count"):
        value = _rest(data, section) // 8 + 1
    damage.write_value(folder, row, damage.huge(section, value)(data, row.key))
    found, seen, peak = _lookup(folder, row.key)
    assert found is None
    assert len(seen) == 1 and "damaged lowering cache entry" in seen[0], seen
    assert f"garbled {section}" in seen[0], seen
    assert peak < BOUND, f"the reader allocated {peak} bytes"
    assert row.key not in [r.key for r in damage.rows(folder)], "the entry was not dropped"


@pytest.mark.parametrize("kind, section", [("lowering", "program length"),
                                           ("lowering", "storage count"), ("blob", "bytes length")])
def test_a_shared_object_with_a_bad_field_is_a_miss(kind, section, filled, tmp_path, monkeypatch):
    """The object in a directory store, the local folder empty: a miss, one warning."""
    row = _row(filled, kind)
    team = tmp_path / "team"
    target = team / shared_client.object_name(row.key)
    target.parent.mkdir(parents=True)
    target.write_bytes(damage.huge(section)(damage.read_value(filled, row), row.key))
    monkeypatch.setenv("FASTLOWER_SHARED_CACHE", f"file://{team}")
    tier.forget()
    try:
        found, seen, peak = _lookup(tmp_path / "local", row.key)
    finally:
        tier.forget()
    assert found is None
    assert len(seen) == 1 and "could not be used" in seen[0], seen
    assert f"garbled {section}" in seen[0], seen
    assert peak < BOUND, f"the reader allocated {peak} bytes"


@pytest.mark.parametrize("error", [MemoryError, OSError, struct.error, ValueError, RuntimeError])
def test_any_failure_reading_an_entry_is_a_miss(error, filled, tmp_path, monkeypatch):
    folder = _copy(filled, tmp_path)
    row = _row(folder, "lowering")

    def fails(backends):
        raise error("while reading")
    monkeypatch.setattr(manifest, "stale_backend", fails)
    found, seen, _ = _lookup(folder, row.key)
    assert found is None and len(seen) == 1 and error.__name__ in seen[0], seen
    assert row.key not in [r.key for r in damage.rows(folder)]


def test_an_interrupt_while_reading_is_not_swallowed(filled, tmp_path, monkeypatch):
    folder = _copy(filled, tmp_path)

    def interrupted(backends):
        raise KeyboardInterrupt
    monkeypatch.setattr(manifest, "stale_backend", interrupted)
    with pytest.raises(KeyboardInterrupt):
        _lookup(folder, _row(folder, "lowering").key)


# --- the preprocess folder's own entries ------------------------------------------------------

def _preprocess_rows(folder: Path) -> List[damage.Row]:
    return [r for r in damage.rows(folder) if ":" not in r.key]


@pytest.mark.parametrize("how", ["huge stamp length", "random bytes", "failing decode"])
def test_a_bad_preprocess_entry_is_a_miss(how, filled, tmp_path, monkeypatch):
    folder = _copy(filled, tmp_path)
    rows = _preprocess_rows(folder)
    assert rows, "the base call stored no preprocess entry"
    if how == "failing decode":
        def fails(raw, seal):
            raise MemoryError("while decoding")
        monkeypatch.setattr(preprocess_cache, "decode", fails)
    for row in rows:
        data = damage.read_value(folder, row)
        if how != "failing decode":
            damage.write_value(folder, row, damage.DAMAGES[how](data, row.key))
    cache = preprocess_cache.PreprocessCache(folder, 1 << 30)
    try:
        assert [cache.get(row.key) for row in rows] == [None] * len(rows)
    finally:
        cache.close()
    assert len(cache.damaged) == len(rows), cache.damaged
    if how == "huge stamp length":
        assert all("garbled stamp length" in why for why in cache.damaged), cache.damaged


@pytest.mark.parametrize("how", ["huge stamp length", "bytes flipped", "emptied"])
def test_a_bad_structure_template_is_a_miss(how, tmp_path):
    """A structure template (``fastlower.preprocess.structure``, stored as plain data)."""
    from fastlower.preprocess.structure.classes import CACHE_PURPOSE

    folder = tmp_path / "cache"
    cache = preprocess_cache.PreprocessCache(folder, 1 << 30)
    cache.put_plain(CACHE_PURPOSE, "0" * 32, ("0" * 32, b"blob" * 40, (), (), (), (), (), True))
    assert cache.get_plain(CACHE_PURPOSE, "0" * 32) is not None
    (row,) = damage.rows(folder)
    damage.write_value(folder, row, damage.DAMAGES[how](damage.read_value(folder, row), row.key))
    assert cache.get_plain(CACHE_PURPOSE, "0" * 32) is None
    cache.close()
    assert len(cache.damaged) == 1, cache.damaged


def _sizes(data: bytes) -> Dict[str, int]:
    return {name: struct.unpack_from(fmt, data, at)[0]
            for name, (at, fmt) in damage.fields(data).items()}


def test_the_field_finder_reads_real_entries(filled):
    """The tools above find the fields each kind of entry has (a test of the test)."""
    for kind, sections in PRESENT.items():
        sizes = _sizes(damage.read_value(filled, _row(filled, kind)))
        assert set(sizes) == set(sections), (kind, sizes)
    assert set().union(*PRESENT.values()) == set(damage.SECTIONS)
