"""Whoever can write a cache folder cannot make fastlower run code or serve a wrong program.

Each test plays an attacker with write access to a real cache folder: a first
process (``lower_once``: ExecuTorch's ``to_edge_transform_and_lower`` under
``fastlower.patch``, the demo add/mul partitioner then XNNPACK's) fills the
folder; the test edits it as the attacker would; a new process then lowers the
same program twice. Every attack must be a miss: the payload never runs (it
would create a marker file), the ``.pte`` is ExecuTorch's own, and the entry is
replaced (the second lowering in that process hits), with at most one warning
per cache folder.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import shutil
import sqlite3
import stat
import struct
from pathlib import Path
from typing import Callable, Dict, List, NamedTuple, Optional

import blake3
import pytest

from fastlower.cache import entry
from fastlower.preprocess import cache as preprocess_cache
from fastlower.cache.trust import seal as seal_module

from . import lower_once
from .damage import read_value, write_value  # a row of either kind: rowid, filename, value

STEPS = ["base", "base"]
ATTACKER_KEY = b"the attacker's own key, not yours"


class Row(NamedTuple):
    rowid: int
    key: str
    mode: int
    filename: Optional[str]
    value: Optional[bytes]
    tag: Optional[str]

    @property
    def lowering(self) -> bool:
        return self.tag == "lowering"


class RunsCode:
    """Unpickling this creates ``marker``: the proof that code ran."""

    def __init__(self, marker: Path, salt: object = "") -> None:
        self.marker = str(marker)
        self.salt = salt  # distinct pickles for distinct rows

    def __reduce__(self):
        return (exec, (f"open({self.marker!r}, 'w').close()  # {self.salt}",))


# --- the folder, as an attacker sees it --------------------------------------------------------

def rows(folder: Path) -> List[Row]:
    with contextlib.closing(sqlite3.connect(folder / "cache.db")) as db:
        return [Row(*r) for r in db.execute(
            "SELECT rowid, key, mode, filename, value, tag FROM Cache ORDER BY rowid")]


def update_row(folder: Path, rowid: int, **columns) -> None:
    names = ", ".join(f"{name} = ?" for name in columns)
    with contextlib.closing(sqlite3.connect(folder / "cache.db")) as db:
        db.execute(f"UPDATE Cache SET {names} WHERE rowid = ?", (*columns.values(), rowid))
        db.commit()


def attacker_mac(purpose: str, key: str, body: bytes) -> bytes:
    """A MAC made exactly as fastlower makes one, with a key that is not the folder's."""
    mac = seal_module.Seal(ATTACKER_KEY, purpose, key)
    mac.update(body)
    return mac.digest()


def lowering_parts(data: bytes) -> Dict[str, bytes]:
    """A lowering entry cut at its info: ``head`` (magic, stamp), ``info``, ``rest``."""
    at = len(entry.MAGIC)
    stamp_len = struct.unpack(">I", data[at:at + 4])[0]
    at += 4 + stamp_len
    info_len = struct.unpack(">Q", data[at:at + 8])[0]
    return {"head": data[:at], "info": data[at + 8:at + 8 + info_len],
            "rest": data[at + 8 + info_len:len(data) - seal_module.SIZE]}


def preprocess_head() -> bytes:
    stamp = preprocess_cache.versions().encode()
    return preprocess_cache.MAGIC + struct.pack(">I", len(stamp)) + stamp


# --- the attacks -------------------------------------------------------------------------------

def pickle_mode_rows(folder: Path, marker: Path) -> None:
    """Every row rewritten in diskcache's own pickle mode (in the database or in its file)."""
    evil = pickle.dumps(RunsCode(marker))
    for row in rows(folder):
        if row.filename:
            (folder / row.filename).write_bytes(evil)
            update_row(folder, row.rowid, mode=4)
        else:
            update_row(folder, row.rowid, mode=4, value=evil)


def preprocess_payloads(folder: Path, marker: Path) -> None:
    """Every preprocess entry's payload a pickle that runs code, header right, MAC made with
    the attacker's key (a checksum anyone can compute would be right too); the lowering
    entries removed, so that the preprocess entries are read."""
    with contextlib.closing(sqlite3.connect(folder / "cache.db")) as db:
        db.execute("DELETE FROM Cache WHERE tag = 'lowering'")
        db.commit()
    for row in rows(folder):
        if not row.lowering:
            body = preprocess_head() + pickle.dumps(RunsCode(marker))
            write_value(folder, row, body + attacker_mac("preprocess", row.key, body))


def lowering_infos(folder: Path, marker: Path) -> None:
    """Every lowering entry's ``info`` a pickle that runs code, lengths and layout right."""
    for row in rows(folder):
        if row.lowering:
            parts = lowering_parts(read_value(folder, row))
            info = pickle.dumps(RunsCode(marker))
            body = parts["head"] + struct.pack(">Q", len(info)) + info + parts["rest"]
            write_value(folder, row, body + attacker_mac("lowering", row.key, body))


def bare_pickles(folder: Path, marker: Path) -> None:
    """Every value (file or database) overwritten with a bare pickle."""
    for row in rows(folder):
        write_value(folder, row, pickle.dumps(RunsCode(marker)))


def pickled_keys(folder: Path, marker: Path) -> None:
    """Every row's key replaced by a pickle (diskcache unpickles keys whose ``raw`` is 0)."""
    for row in rows(folder):
        update_row(folder, row.rowid, key=pickle.dumps(RunsCode(marker, row.rowid)), raw=0)


def pickled_keys_then_clear(folder: Path, marker: Path) -> None:
    """Pickled keys, then ``fastlower cache clear`` of each cache (it reads the keys)."""
    from fastlower.cache import admin

    pickled_keys(folder, marker)
    admin.clear(folder, ["preprocess"])
    admin.clear(folder, ["lowering"])


def truncated_macs(folder: Path, marker: Path) -> None:
    for row in rows(folder):
        write_value(folder, row, read_value(folder, row)[:-5])


def flipped_macs(folder: Path, marker: Path) -> None:
    """The last byte of every MAC changed: damage the old checksum would also have caught."""
    for row in rows(folder):
        data = bytearray(read_value(folder, row))
        data[-1] ^= 0x01
        write_value(folder, row, bytes(data))


def swapped_entries(folder: Path, marker: Path) -> None:
    """Each entry moved under the key of another entry of its cache (every MAC was valid)."""
    for lowering in (True, False):
        group = [r for r in rows(folder) if r.lowering == lowering]
        values = [read_value(folder, r) for r in group]
        for row, value in zip(group, values[1:] + values[:1]):
            write_value(folder, row, value)


def fifo_value_files(folder: Path, marker: Path) -> None:
    """Every value file a named pipe: reading it would wait forever."""
    for row in rows(folder):
        if row.filename:
            path = folder / row.filename
            path.unlink()
            os.mkfifo(path)


def files_outside(folder: Path, marker: Path) -> None:
    """Every value file name pointing outside the folder, at a file of the user's."""
    victim = marker.with_name("victim.txt")
    victim.write_text("the user's file")
    for row in rows(folder):
        update_row(folder, row.rowid, mode=2, value=None, filename=str(victim))


ATTACKS: Dict[str, Callable[[Path, Path], None]] = {
    "diskcache pickle mode, every row": pickle_mode_rows,
    "preprocess payloads pickled, header and MAC made": preprocess_payloads,
    "lowering info pickled, header and MAC made": lowering_infos,
    "values overwritten with a bare pickle": bare_pickles,
    "keys pickled": pickled_keys,
    "keys pickled, then each cache cleared": pickled_keys_then_clear,
    "MACs truncated": truncated_macs,
    "MACs flipped": flipped_macs,
    "entries swapped between keys": swapped_entries,
    "value files are pipes": fifo_value_files,
    "value files outside the folder": files_outside,
}


# --- running them ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def filled(tmp_path_factory) -> Path:
    """A folder filled by its own process: two lowerings, each cache two entries or more."""
    work = tmp_path_factory.mktemp("forgery")
    folder = work / "cache"
    first = lower_once.run(work / "fill.json", ["base", "param"], folder, chain=True,
                           patched=True)
    assert [s["lowering_cache"] for s in first["steps"]] == ["miss", "miss"]
    found = rows(folder)
    assert sum(r.lowering for r in found) >= 2 and sum(not r.lowering for r in found) >= 2
    return folder


def copy_of(filled: Path, tmp_path: Path) -> Path:
    folder = tmp_path / "cache"
    shutil.copytree(filled, folder)
    return folder


def lower_twice(folder: Path, tmp_path: Path, **options) -> dict:
    return lower_once.run(tmp_path / "victim.json", STEPS, folder, chain=True, patched=True,
                          **options)


# a second attack on a defence the default run already attacks: run with -m slow
SLOW_ATTACKS = {"values overwritten with a bare pickle",  # as "diskcache pickle mode"
                "keys pickled", "keys pickled, then each cache cleared",  # as "diskcache..."
                "preprocess payloads pickled, header and MAC made",  # as "lowering info..."
                "MACs truncated", "entries swapped between keys",  # as "MACs flipped"
                "value files are pipes"}  # as "value files outside the folder"


@pytest.mark.parametrize("attack", [pytest.param(a, marks=pytest.mark.slow)
                                    if a in SLOW_ATTACKS else a for a in ATTACKS])
def test_a_forged_folder_runs_no_code_and_lowers_as_executorch(attack, filled, tmp_path):
    folder = copy_of(filled, tmp_path)
    marker = tmp_path / "code-ran"
    ATTACKS[attack](folder, marker)
    result = lower_twice(folder, tmp_path)
    assert not marker.exists(), "the attacker's code ran"
    first, second = result["steps"]
    assert first["lowering_cache"] == "miss"
    assert first["pte"] == second["pte"] == lower_once.reference_pte("base", chain=True)
    assert second["lowering_cache"] == "hit", "the forged entry was not replaced"
    assert len(result["warnings"]) <= 1, result["warnings"]
    victim = marker.with_name("victim.txt")
    if victim.exists() or attack == "value files outside the folder":
        assert victim.read_text() == "the user's file", "a file outside the folder was touched"


def test_an_entry_written_with_another_key_is_a_miss(filled, tmp_path):
    """Someone without the key writes a well-formed entry under the key that would hit:
    a process with another user key lowers into the folder; the owner's next process
    does not take its entries."""
    folder = tmp_path / "cache"
    other = lower_once.run(tmp_path / "other.json", ["base"], folder, chain=True, patched=True,
                           env={"XDG_CONFIG_HOME": str(tmp_path / "other-config")})
    assert other["steps"][0]["lowering_cache"] == "miss"
    result = lower_twice(folder, tmp_path)
    first, second = result["steps"]
    assert (first["lowering_cache"], second["lowering_cache"]) == ("miss", "hit")
    assert first["pte"] == second["pte"] == lower_once.reference_pte("base", chain=True)
    assert first["cache_hits"] == {}, "a preprocess entry made with another key was used"
    assert len(result["warnings"]) == 1 and "MAC does not verify" in result["warnings"][0]


def _key_file(path: Path, mode: int, data: bytes = b"a" * 64) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    path.chmod(mode)
    return path


@pytest.mark.parametrize("mode, data, why", [
    (0o644, b"a" * 64, "open to other users"),
    pytest.param(0o620, b"a" * 64, "open to other users", marks=pytest.mark.slow),
    (0o600, b"short", "holds 5 bytes"),
])
def test_a_key_file_not_in_order_means_no_cache(mode, data, why, tmp_path):
    folder = tmp_path / "cache"
    key = _key_file(tmp_path / "team.key", mode, data)
    result = lower_twice(folder, tmp_path, env={"FASTLOWER_CACHE_KEY_FILE": str(key)})
    assert [s["lowering_cache"] for s in result["steps"]] == [None, None]
    assert result["steps"][0]["pte"] == lower_once.reference_pte("base", chain=True)
    assert len(result["warnings"]) == 1 and why in result["warnings"][0], result["warnings"]
    assert not (folder / "cache.db").exists(), "the cache was used without a usable key"


def test_a_user_key_file_open_to_others_means_no_cache(tmp_path):
    config = tmp_path / "config"
    _key_file(config / "fastlower" / "cache.key", 0o640)
    result = lower_twice(tmp_path / "cache", tmp_path, env={"XDG_CONFIG_HOME": str(config)})
    assert [s["lowering_cache"] for s in result["steps"]] == [None, None]
    assert len(result["warnings"]) == 1 and "open to other users" in result["warnings"][0]


def test_the_user_key_is_made_private_on_first_use(tmp_path):
    config = tmp_path / "config"
    result = lower_twice(tmp_path / "cache", tmp_path, env={"XDG_CONFIG_HOME": str(config)})
    assert [s["lowering_cache"] for s in result["steps"]] == ["miss", "hit"]
    key = config / "fastlower" / "cache.key"
    assert stat.S_IMODE(key.stat().st_mode) == 0o600
    assert stat.S_IMODE(key.parent.stat().st_mode) == 0o700
    assert stat.S_IMODE((tmp_path / "cache").stat().st_mode) == 0o700
    assert len(key.read_bytes().strip()) == 64


def test_a_folder_others_can_write_needs_an_explicit_key(filled, tmp_path):
    folder = copy_of(filled, tmp_path)
    folder.chmod(0o777)
    refused = lower_twice(folder, tmp_path)
    assert [s["lowering_cache"] for s in refused["steps"]] == [None, None]
    assert len(refused["warnings"]) == 1
    assert "can be written by other users" in refused["warnings"][0]
    assert refused["steps"][0]["pte"] == lower_once.reference_pte("base", chain=True)

    team_key = _key_file(tmp_path / "team.key", 0o640)
    shared = {"FASTLOWER_CACHE_KEY_FILE": str(team_key)}
    first = lower_once.run(tmp_path / "writer.json", ["base"], folder, chain=True,
                           patched=True, env=shared)
    assert first["steps"][0]["lowering_cache"] == "miss", "the user's own entries were taken"
    second = lower_once.run(tmp_path / "reader.json", ["base"], folder, chain=True,
                            patched=True, env=shared)
    assert second["steps"][0]["lowering_cache"] == "hit"
    assert second["steps"][0]["pte"] == lower_once.reference_pte("base", chain=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to give the folder to another user")
def test_a_folder_owned_by_another_user_needs_an_explicit_key(filled, tmp_path):
    folder = copy_of(filled, tmp_path)
    os.chown(folder, 65534, 65534)
    refused = lower_twice(folder, tmp_path)
    assert [s["lowering_cache"] for s in refused["steps"]] == [None, None]
    assert "owned by another user" in refused["warnings"][0]


def test_the_mac_binds_the_key_and_the_cache():
    """The MAC of the same bytes differs by key, by cache and by secret, and is keyed BLAKE3
    as documented."""
    macs = set()
    for secret in (b"s" * 32, b"t" * 32):
        for purpose in ("lowering", "preprocess"):
            for key in ("a", "b"):
                mac = seal_module.Seal(secret, purpose, key)
                mac.update(b"the same entry")
                macs.add(mac.digest())
    assert len(macs) == 8
    key = blake3.blake3(b"s" * 32, derive_key_context="fastlower cache entry MAC, version 1")
    expected = blake3.blake3(key=key.digest())
    context = b"fastlower-cache\0lowering\0a\0"
    expected.update(len(context).to_bytes(4, "big") + context + b"the same entry")
    mac = seal_module.Seal(b"s" * 32, "lowering", "a")
    mac.update(b"the same entry")
    assert mac.matches(expected.digest()) and not mac.matches(expected.digest()[:-1] + b"\0")
