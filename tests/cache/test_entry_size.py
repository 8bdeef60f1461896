"""Large entries (issue 50): read once, the emitter's constants kept once, and a size limit
that either follows the model or, set by the user, says when it cannot keep an entry.

* A ``to_executorch`` entry holds the ``.pte`` as its pieces, the emitter's constant
  buffers among them, once (``fastlower.cache.pte_pieces``): the entry is about the
  ``.pte``'s size, not twice it, and a hit's emitter output and ``.pte`` are the miss's
  (and share those pieces, as the reference's do).
* Storages come back as tensors of their own (writable, not views of a shared buffer).
* A size limit set smaller than an entry: the entry is not written, one ``CacheWarning``
  names its size, the limit and the setting, and the lowering returns the right result.
  One more than half the limit is written, with a warning.
* No limit set: the limit follows the model (``FOLLOW`` times the largest entry), within
  the disk's room; an entry the disk cannot take is not written, with a warning.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
from executorch.exir import to_edge_transform_and_lower as reference_lower

import fastlower.cache
import fastlower.preprocess
from fastlower.cache import budget, pte_pieces, serialize
from fastlower.cache.store import LoweringStore
from fastlower.preprocess import CacheWarning
from fastlower.preprocess import configuration as preprocess_configuration

from .helpers import cache_at

WIDTH = 256  # a 256 KiB weight: every entry holds a section of its own for it


class EmbedLinear(torch.nn.Module):
    """An embedding (a constant no partitioner takes: in the emitter's constant buffer) and
    a linear."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(512, WIDTH)
        self.linear = torch.nn.Linear(WIDTH, WIDTH)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.linear(self.embed(tokens))


def _aten() -> torch.export.ExportedProgram:
    torch.manual_seed(0)
    with torch.no_grad():
        return torch.export.export(EmbedLinear().eval(), (torch.zeros(1, 4, dtype=torch.long),),
                                   strict=False)


def _lower():
    """The cached lowering and to_executorch of a fresh export: (report, executorch
    manager, warnings)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        manager = fastlower.cache.to_edge_transform_and_lower(_aten())
        report = fastlower.report_for(manager)
        et = fastlower.cache.to_executorch(manager)
    said = [str(w.message) for w in caught if issubclass(w.category, CacheWarning)]
    return report, et, said


def _reference_pte() -> bytes:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return bytes(reference_lower(_aten()).to_executorch().buffer)


def _entry_sizes(folder: Path) -> dict:
    store = LoweringStore(folder, 1 << 30, size_given=True)
    try:
        rows = store.store._sql("SELECT key, size FROM Cache").fetchall()
    finally:
        store.close()
    return {key.split(":")[0]: size for key, size in rows if ":" in str(key)}


@pytest.fixture
def unset_size(monkeypatch):
    monkeypatch.delenv("FASTLOWER_CACHE_SIZE", raising=False)


def test_emitter_constants_are_kept_once_and_a_hit_is_the_miss(tmp_path, unset_size):
    with cache_at(tmp_path):
        miss, et_miss, said = _lower()
        hit, et_hit, _ = _lower()
    assert (miss.lowering_cache, hit.lowering_cache) == ("miss", "hit") and not said
    pte = bytes(et_miss.buffer)
    assert bytes(et_hit.buffer) == pte == _reference_pte()
    constants = [b.storage for b in et_miss.executorch_program.constant_buffer]
    assert sum(len(c) for c in constants) >= 512 * WIDTH * 4
    served = [b.storage for b in et_hit.executorch_program.constant_buffer]
    assert served == constants and all(type(s) is bytes for s in served)
    assert et_hit.executorch_program == et_miss.executorch_program
    # the served .pte's pieces are the served emitter's constants, not copies of them
    shared = {id(piece) for piece in et_hit._pte_data._buffers}
    assert all(id(s) in shared for s in served if len(s) >= 64 << 10)
    # the entry is about the .pte, not the .pte and the constants again
    assert _entry_sizes(tmp_path)["executorch"] < len(pte) + 64 * 1024


def test_storages_come_back_as_tensors_of_their_own():
    weight, other = torch.randn(300, 300), torch.arange(100_000, dtype=torch.int64)
    data = serialize.dumps({"w": weight, "o": other, "view": weight[1:]})
    storages = [torch.frombuffer(bytearray(v), dtype=torch.uint8) for v in data.storages]
    back = serialize.loads(data.header, data.pickled, storages, data.blobs)
    assert torch.equal(back["w"], weight) and torch.equal(back["o"], other)
    assert back["view"].untyped_storage().data_ptr() == back["w"].untyped_storage().data_ptr()
    back["w"].add_(1)  # writable
    assert torch.equal(back["view"], weight[1:] + 1)


def test_pte_pieces():
    whole = bytes(range(256)) * 300
    parts = [whole[:100], whole[100:70_000], whole[70_000:]]
    made = pte_pieces.cord(parts)
    assert pte_pieces.pieces(made) == parts and pte_pieces.pieces(made)[1] is parts[1]
    assert bytes(made) == whole and pte_pieces.size(parts) == len(whole)
    assert pte_pieces.same(parts, [whole]) and pte_pieces.same(parts, list(parts))
    assert not pte_pieces.same(parts, [whole[:-1] + b"x"])
    assert pte_pieces.pieces(pte_pieces.cord([])) == [b""]


def test_a_limit_smaller_than_an_entry_says_so_and_the_lowering_is_right(tmp_path):
    with cache_at(tmp_path, cache_size=64 << 10):
        first, et, said = _lower()
        again, _, said_again = _lower()
    assert (first.lowering_cache, again.lowering_cache) == ("miss", "miss")
    assert bytes(et.buffer) == _reference_pte()
    assert len(said) == 1 and not said_again  # once per process and folder
    message = said[0]
    assert "was not stored" in message and "FASTLOWER_CACHE_SIZE" in message
    assert "64.0 KiB" in message and "larger than" in message
    assert "lowering" not in _entry_sizes(tmp_path) and "executorch" not in _entry_sizes(tmp_path)


def test_an_entry_over_half_the_limit_is_kept_with_a_warning(tmp_path):
    with cache_at(tmp_path):
        _lower()
    sizes = _entry_sizes(tmp_path)
    limit = int(max(sizes["lowering"], sizes["executorch"]) * 1.5)
    with cache_at(tmp_path / "tight", cache_size=limit):
        first, _, said = _lower()
        again, _, _ = _lower()
    assert first.lowering_cache == "miss"
    assert said and "more than half" in said[0] and "FASTLOWER_CACHE_SIZE" in said[0]


def test_an_unset_limit_follows_the_model(tmp_path, unset_size, monkeypatch):
    monkeypatch.setattr(preprocess_configuration, "DEFAULT_CACHE_SIZE", 64 << 10)
    with cache_at(tmp_path):
        first, et, said = _lower()
        again, et_again, _ = _lower()
    assert (first.lowering_cache, again.lowering_cache) == ("miss", "hit") and not said
    assert bytes(et_again.buffer) == bytes(et.buffer)
    sizes = _entry_sizes(tmp_path)
    store = LoweringStore(tmp_path, 64 << 10)  # unset: opened at the followed limit
    try:
        largest = max(sizes["lowering"], sizes["executorch"])
        assert store.store.size_limit >= budget.FOLLOW * largest > 64 << 10
    finally:
        store.close()


def test_an_unset_limit_stops_at_the_disk(tmp_path, unset_size, monkeypatch):
    monkeypatch.setattr(preprocess_configuration, "DEFAULT_CACHE_SIZE", 64 << 10)
    monkeypatch.setattr(budget, "disk_room", lambda directory, volume: 0)
    with cache_at(tmp_path):
        first, et, said = _lower()
    assert first.lowering_cache == "miss" and bytes(et.buffer) == _reference_pte()
    assert len(said) == 1 and "was not stored" in said[0] and "free disk space" in said[0]


def test_judge():
    folder = Path("/cache")
    assert budget.judge("lowering:ab", 10, 100, True, folder) == budget.Verdict(True)
    kept = budget.judge("executorch:ab", 60, 100, True, folder)
    assert kept.keep and "to_executorch cache entry executorch:ab" in kept.message
    refused = budget.judge("lowering:ab", 3 << 30, 2 << 30, True, folder)
    assert not refused.keep and "3.0 GiB" in refused.message and "2.0 GiB" in refused.message
    assert "at least 12.0 GiB" in refused.message
    assert budget.followed(2 << 30, 1 << 30, 1 << 50) == 4 << 30
    assert budget.followed(2 << 30, 1 << 30, 3 << 30) == 3 << 30
    assert budget.followed(2 << 30, 1 << 20, 1 << 50) == 2 << 30
