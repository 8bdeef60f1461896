"""The tested torch / ExecuTorch series are checked before a lowering
(``fastlower.base.compat``)."""

from __future__ import annotations

import warnings

import pytest
import torch
from executorch.exir import to_edge

import fastlower
from fastlower.base import compat
from fastlower import settings
from fastlower.errors import FastlowerError, UnsupportedVersionError
from tests.cache.helpers import demo_partitioner


class AddMul(torch.nn.Module):
    def forward(self, x):
        return (x + 1.0) * 2.0


def _edge_program():
    return to_edge(torch.export.export(AddMul(), (torch.randn(4),))).exported_program()


@pytest.fixture
def torch_2_14(monkeypatch):
    """The installed torch reads as 2.14.0, a series fastlower is not tested with."""
    real = compat.installed
    monkeypatch.setattr(compat, "installed",
                        lambda dist: "2.14.0" if dist == "torch" else real(dist))
    monkeypatch.setattr(compat, "_WARNED", compat.threading.Event())
    monkeypatch.delenv(settings.ALLOW_UNTESTED_VERSIONS, raising=False)


def test_the_installed_versions_are_the_tested_ones():
    assert compat.untested() == []
    compat.check_versions()


def test_an_untested_torch_stops_the_lowering_and_says_why(torch_2_14):
    program = _edge_program()
    before = program.graph_module.code
    with pytest.raises(UnsupportedVersionError) as raised:
        fastlower.to_backend(program, demo_partitioner())
    message = str(raised.value)
    assert "torch 2.14.0" in message and "torch 2.13.x" in message
    assert settings.ALLOW_UNTESTED_VERSIONS in message
    assert isinstance(raised.value, FastlowerError) and isinstance(raised.value, RuntimeError)
    assert program.graph_module.code == before


def test_the_override_warns_once_and_lowers(torch_2_14, monkeypatch):
    monkeypatch.setenv(settings.ALLOW_UNTESTED_VERSIONS, "1")
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        lowered = fastlower.to_backend(_edge_program(), demo_partitioner())
        fastlower.to_backend(_edge_program(), demo_partitioner())
    untested = [w for w in seen if "untested torch 2.14.0" in str(w.message)]
    assert len(untested) == 1 and untested[0].category is RuntimeWarning
    assert "executorch_call_delegate" in lowered.graph_module.code


@pytest.mark.parametrize("found, ok", [("2.13.0", True), ("2.13.0+cu128", True),
                                       ("2.13.1", True), ("2.12.1", False), ("2.14.0", False),
                                       ("3.0.0", False), (None, False)])
def test_the_torch_series(found, ok, monkeypatch):
    real = compat.installed
    monkeypatch.setattr(compat, "installed", lambda dist: found if dist == "torch" else real(dist))
    assert (compat.untested() == []) is ok
