"""A damaged cache never fails a lowering (issue 48, item 1), tried in new processes.

A real folder is filled (the base call's lowering entry, its structure record, its
``to_executorch`` entry, its preprocess entries). Copies of it are damaged, every
entry of a copy the same way (lengths made huge, bytes flipped, cut, junk, emptied,
random bytes, entries swapped between keys), and so are shared stores (a directory
holding the damaged objects, the local folder empty). Then one new process lowers
the base call in each folder in turn (``lower_in_folders``): it exits 0, each
``.pte`` is ExecuTorch's own, each lowering is a miss, and each folder (and store)
is warned about at most once per cache. The default run tries a dozen damages; the
``slow`` one every damage, in both tiers, and seeded random ones.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Callable, Dict, List, Optional

import pytest

import fastlower.cache
from fastlower.cache import entry
from fastlower.cache.shared import client as shared_client

from . import damage, lower_once
from .helpers import base_args, cache_at, lower, small_aten
from tests import python_children

DEFAULT = ["huge program length", "huge storage count", "huge storage length", "bytes flipped",
           "truncated to half", "cut before the MAC", "junk", "emptied", "random bytes"]
SHARED_DEFAULT = ["huge program length", "random bytes"]
Damage = Callable[[bytes, str], bytes]


@pytest.fixture(scope="module")
def filled(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("filled")
    with cache_at(folder):
        manager, report = lower(small_aten(), **base_args())
        fastlower.cache.to_executorch(manager)
    assert report.lowering_cache == "miss"
    kinds = sorted(r.key.split(":")[0] for r in damage.rows(folder) if ":" in r.key)
    assert kinds == ["executorch", "lowering", "structure"], kinds
    return folder


def _local(filled: Path, where: Path, change: Optional[Damage]) -> Dict[str, object]:
    shutil.copytree(filled, where)
    if change is None:
        damage.swap_entries(where)
    else:
        damage.damage_folder(where, change)
    return {"folder": str(where), "shared": None}


def _shared(filled: Path, where: Path, change: Damage) -> Dict[str, object]:
    """A directory store holding each lowering-format entry damaged; an empty local folder."""
    team = where / "team"
    for row in damage.rows(filled):
        data = damage.read_value(filled, row)
        if ":" in row.key and data.startswith(entry.MAGIC):
            target = team / shared_client.object_name(row.key)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(change(data, row.key))
    return {"folder": str(where / "local"), "shared": f"file://{team}"}


def _run(spec: List[Dict[str, object]], tmp_path: Path) -> List[Dict[str, object]]:
    for i, item in enumerate(spec):
        item["pte"] = str(tmp_path / f"out{i}.pte")
    spec_path = tmp_path / "spec.json"
    spec_path.write_text(json.dumps(spec))
    environ = {k: v for k, v in os.environ.items() if not k.startswith("FASTLOWER_")}
    environ.update(PYTHONPATH=str(lower_once.ROOT), FASTLOWER_WORKERS="1")
    done = python_children.run([sys.executable, "-m", "tests.cache.lower_in_folders",
                                str(spec_path)], cwd=lower_once.ROOT, env=environ,
                               capture_output=True, timeout=1200)
    assert done.returncode == 0, done.stdout.decode(errors="replace")[-3000:] + \
        done.stderr.decode(errors="replace")[-5000:]
    return json.loads(spec_path.with_name("spec.json.out").read_text())


def _check(names: List[str], spec: List[Dict[str, object]], results: List[Dict[str, object]]):
    reference = lower_once.reference_pte("base")
    assert len(results) == len(names)
    for name, item, result in zip(names, spec, results):
        assert Path(str(item["pte"])).read_bytes() == reference, f"{name}: not ExecuTorch's .pte"
        assert result["lowering_cache"] == "miss", (name, result)
        seen = result["warnings"]
        assert isinstance(seen, list)
        assert all("damaged" in w or "could not be used" in w for w in seen), (name, seen)
        for what in ("damaged lowering cache entry", "damaged preprocess cache entr",
                     "could not be used"):
            assert sum(what in w for w in seen) <= 1, (name, seen)


def _try(filled: Path, tmp_path: Path, local: Dict[str, Optional[Damage]],
         shared: Dict[str, Damage]) -> None:
    names, spec = [], []
    for i, (name, change) in enumerate(local.items()):
        names.append(f"local: {name}")
        spec.append(_local(filled, tmp_path / f"local{i}", change))
    for i, (name, change) in enumerate(shared.items()):
        names.append(f"shared: {name}")
        spec.append(_shared(filled, tmp_path / f"shared{i}", change))
    _check(names, spec, _run(spec, tmp_path))


def test_damaged_entries_never_fail_a_new_process(filled, tmp_path):
    local: Dict[str, Optional[Damage]] = {name: damage.DAMAGES[name] for name in DEFAULT}
    local["entries swapped between keys"] = None
    _try(filled, tmp_path, local, {name: damage.DAMAGES[name] for name in SHARED_DEFAULT})


def _sections(filled: Path) -> set:
    """The length and count fields the filled folder's entries have."""
    return {name for row in damage.rows(filled)
            for name in damage.fields(damage.read_value(filled, row))}


# the small model's entries hold no bytes object of BLOB_MIN_BYTES (64 KiB) or more, so
# they have no "bytes length" field to damage: test_a_huge_bytes_length_is_named checks it
NOT_IN_THE_SMALL_MODEL = {"bytes length"}


def _applicable(filled: Path) -> Dict[str, Damage]:
    absent = set(damage.SECTIONS) - _sections(filled)
    assert absent == NOT_IN_THE_SMALL_MODEL, absent
    return {name: change for name, change in damage.DAMAGES.items()
            if name.removeprefix("huge ") not in absent}


def test_a_huge_bytes_length_is_named(tmp_path):
    """An entry holding a large ``bytes`` object (a ``.pte``'s piece), its length or count
    made huge: a :class:`DamagedEntry` naming the field, before anything is allocated."""
    from fastlower.cache import store
    from fastlower.cache.errors import DamagedEntry
    from fastlower.cache.serialize.writer import BLOB_MIN_BYTES

    key = "executorch:0123"
    seal = store.LoweringStore(tmp_path / "folder", 2 ** 30).seal
    data = b"".join(bytes(c) for c in entry.encode({}, {"pte": b"x" * BLOB_MIN_BYTES},
                                                   seal(key)))
    assert "bytes length" in damage.fields(data)
    for section in ("bytes length", "bytes count"):
        broken = damage.DAMAGES[f"huge {section}"](data, key)
        assert broken != data
        with pytest.raises(DamagedEntry, match=section):
            list(entry.read(io.BytesIO(broken), seal(key)))
    assert list(entry.read(io.BytesIO(data), seal(key)))[1] == {"pte": b"x" * BLOB_MIN_BYTES}


@pytest.mark.slow
def test_every_damage_in_both_tiers_and_random_ones(filled, tmp_path):
    applicable = _applicable(filled)
    local: Dict[str, Optional[Damage]] = dict(applicable)
    local.update({f"random damage {seed}": damage.random_damage(seed) for seed in range(16)})
    local["entries swapped between keys"] = None
    shared = dict(applicable)
    shared.update({f"random damage {seed}": damage.random_damage(seed) for seed in range(8)})
    _try(filled, tmp_path, local, shared)


def test_random_damage_takes_a_length_past_any_size_for_unparsable():
    """A flipped length field can point past any size (struct cannot even seek there):
    the damage helper then leaves the bytes as they are rather than failing the test."""
    import struct

    from fastlower.cache import entry

    lengths = struct.pack(">I", 0) + struct.pack(">Q", 0) * 2
    data = entry.MAGIC + lengths + struct.pack(">I", 2) + struct.pack(">Q", 2**63) + b"x"
    assert not damage._parses(data)
    assert damage._parses(entry.MAGIC + lengths + struct.pack(">I", 0) * 2
                          + bytes(damage.MAC_SIZE))  # the same, sections empty, a MAC
