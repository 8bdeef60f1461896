"""Partitions of one structure derived, not preprocessed: the ``.pte`` must be ExecuTorch's.

Each case exports the same seeded model twice and lowers it with ExecuTorch's
``to_edge_transform_and_lower`` + ``to_executorch`` and with fastlower's (under
``fastlower.patch``, preprocess cache and lowering cache off), in ``derive`` and in
``verify`` mode; the ``.pte`` bytes, the debug-handle map and the delegate map must be
identical, and the report must say how many partitions were derived.
"""

from __future__ import annotations

import pytest

from fastlower import last_report, preprocess
from fastlower.preprocess.structure import classes
from tests.edge.models import partitioners
from tests.structure.models import FAMILIES, QMODES, aten_program, lower

# the default run: verify mode on a decoder (every derived member also preprocessed and
# compared) and the conv net (no classes); derive mode across processes is
# tests/structure/test_new_checkpoint.py, 8da4w structures the refit tests and the
# adversarial ones; the rest with -m slow
QUICK = {("hf_llama", "fp32", "verify"), ("conv", "fp32", "derive")}
CASES = [pytest.param(f, q, m, marks=() if (f, q, m) in QUICK else pytest.mark.slow)
         for f in FAMILIES for q in QMODES for m in ("derive", "verify")
         if not (f == "conv" and q != "fp32")]


@pytest.fixture(autouse=True)
def _no_caches(monkeypatch):
    monkeypatch.setenv("FASTLOWER_LOWERING_CACHE", "0")
    monkeypatch.delenv("FASTLOWER_CACHE_DIR", raising=False)
    classes.forget_templates()
    yield
    classes.forget_templates()


def _classes_of_last_lowering():
    report = last_report()
    return report.preprocess_classes if report is not None else {}


@pytest.mark.parametrize("family,qmode,mode", CASES)
def test_same_pte_as_executorch(family, qmode, mode):
    setup = "xnnpack" if qmode == "fp32" else "dq+xnnpack"
    _, reference = lower(aten_program(family, qmode), partitioners(setup), fastlower=False)
    with preprocess.options(classes=mode, workers=1):
        _, ours = lower(aten_program(family, qmode), partitioners(setup), fastlower=True)
    assert ours.buffer == reference.buffer
    assert ours.debug_handle_map == reference.debug_handle_map
    assert ours.delegate_map == reference.delegate_map
    if family != "conv":  # three identical blocks: classes formed and used
        stats = _classes_of_last_lowering()
        assert stats.get("classes", 0) > 0, stats
        assert stats["derived" if mode == "derive" else "verified"] > 0, stats
