"""An entry read with storages skimmed (``fastlower.cache.skim``, a refit's read of the old
checkpoint's entry): those storages are MAC'd and hashed, not kept; their tensors come back
as meta placeholders carrying the content digest, and damage to a skimmed storage is
still a damaged entry."""

from __future__ import annotations

import io
import weakref

import pytest
import torch

from fastlower.cache import entry
from fastlower.cache.errors import DamagedEntry
from fastlower.cache.skim import Skim, skimmed, whole_storage
from fastlower.cache.trust.seal import Seal
from fastlower.preprocess.keys import content_digest

KEY = "lowering:" + "5k" * 16


def _seal() -> Seal:
    return Seal(b"s" * 32, "lowering", KEY)


def _entry_bytes(payload) -> bytearray:
    return bytearray(b"".join(bytes(c) for c in entry.encode({}, payload, _seal())))


def _read(data: bytes, skim: Skim):
    steps = entry.read(io.BytesIO(bytes(data)), _seal(), skim)
    next(steps)
    return next(steps)


def test_a_skimmed_storage_is_a_placeholder_with_its_digest():
    big, small = torch.randn(512, 1024), torch.randn(8)  # 2 MiB and 32 bytes
    uniform = torch.full((3, 1024, 171), 0.5)  # 2,101,248 bytes
    data = _entry_bytes({"big": big, "small": small, "uniform": uniform})
    skim = Skim(frozenset({big.nbytes, uniform.nbytes}))
    payload = _read(data, skim)
    found = skimmed(payload["big"])
    assert payload["big"].device.type == "meta" and payload["big"].shape == big.shape
    assert found is not None and found.digest == content_digest(big) and not found.periodic
    assert whole_storage(payload["big"])
    assert skimmed(payload["uniform"]).periodic  # may be uniform: a refit reads it whole
    assert torch.equal(payload["small"], small) and skimmed(payload["small"]) is None
    assert len(skim.placeholders) == 2 and not skim.all_gone()
    held = payload.pop("big")
    payload.pop("uniform")
    assert not skim.all_gone()
    del held
    assert skim.all_gone() and isinstance(skim.placeholders[0], weakref.ref)


def test_damage_in_a_skimmed_storage_is_a_damaged_entry():
    big = torch.randn(512, 1024)
    data = _entry_bytes({"big": big})
    data[len(data) // 2] ^= 1  # inside the storage's bytes
    with pytest.raises(DamagedEntry, match="MAC"):
        _read(data, Skim(frozenset({big.nbytes})))
