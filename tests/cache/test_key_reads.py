"""What the lowering reads beyond its arguments is in the lowering key: a custom
operator's code (``fastlower.preprocess.code_digests``) and the process settings
(``keys.process_settings``). A decomposition edited, or the default dtype changed,
between two processes on one cache folder is a miss that gives ExecuTorch's ``.pte``,
not a stale hit (each a stale hit without its line in the key); code without a source
file is not cached; torch's and ExecuTorch's operators add nothing."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from fastlower.preprocess.code_digests import NoSourceFile, operator_sources
from tests.child_lowering import lowered

OPS = '''import torch
lib = torch.library.Library("fltest_ops", "DEF")
lib.define("scale(Tensor x) -> Tensor")
def scale(x):
    return x * {factor}
lib.impl("scale", scale, "CompositeImplicitAutograd")
'''


def _lower(tmp_path: Path, impl: str, tag: str, dtype: str = "float32") -> dict:
    return lowered("tests.cache.operator_lowering", tmp_path / f"{impl}-{tag}.json",
                   [tmp_path / "ops", impl, tmp_path / "cache", dtype])


def test_an_edited_decomposition_is_a_miss_with_executorchs_pte(tmp_path):
    (tmp_path / "ops").mkdir()
    ops = tmp_path / "ops" / "fl_ops.py"
    ops.write_text(OPS.format(factor=2))
    first = _lower(tmp_path, "fastlower", "two")
    assert first["lowering_cache"] == "miss"
    ops.write_text(OPS.format(factor=3))
    second = _lower(tmp_path, "fastlower", "three")
    expected = _lower(tmp_path, "reference", "three")
    assert expected["pte"] != first["pte"]
    assert second["lowering_cache"] == "miss"
    assert second["pte"] == expected["pte"]
    assert _lower(tmp_path, "fastlower", "again")["lowering_cache"] == "hit"


def test_the_default_dtype_at_lowering_is_in_the_key(tmp_path):
    # ExecuTorch's ScalarToTensorPass makes the factor a tensor of the default dtype
    (tmp_path / "ops").mkdir()
    (tmp_path / "ops" / "fl_ops.py").write_text(OPS.format(factor=2.5))
    first = _lower(tmp_path, "fastlower", "f32")
    second = _lower(tmp_path, "fastlower", "f64", "float64")
    expected = _lower(tmp_path, "reference", "f64", "float64")
    assert expected["pte"] != first["pte"]
    assert second["lowering_cache"] == "miss" and second["pte"] == expected["pte"]


def test_process_settings_name_what_the_lowering_reads():
    from torch._dynamo import config as dynamo_config

    from fastlower.preprocess.keys import process_settings

    before = process_settings()
    with dynamo_config.patch(do_not_emit_runtime_asserts=True):
        assert process_settings() != before
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        assert process_settings() != before
    finally:
        torch.set_default_dtype(previous)
    assert process_settings() == before


def _program(module: torch.nn.Module, *inputs):
    return torch.export.export(module, inputs)


class _Add(torch.nn.Module):
    def forward(self, x):
        return x + 1


def test_torchs_operators_add_nothing():
    assert operator_sources([_program(_Add(), torch.randn(2))]) == ""


def test_code_without_a_source_file_is_not_cached():
    namespace: dict = {}
    exec(compile(OPS.replace("fltest_ops", "fltest_nofile").format(factor=2), "<stdin>", "exec"),
         namespace)

    class Calls(torch.nn.Module):
        def forward(self, x):
            return torch.ops.fltest_nofile.scale(x)

    with pytest.raises(NoSourceFile, match="no source file"):
        operator_sources([_program(Calls(), torch.randn(2))])


def test_a_custom_ops_functions_and_torchaos_operators_are_keyed(tmp_path):
    from torchao.quantization.quant_primitives import _choose_qparams_affine  # noqa: F401

    @torch.library.custom_op("fltest_keyed::twice", mutates_args=())
    def twice(x: torch.Tensor) -> torch.Tensor:
        return x * 2

    @twice.register_fake
    def _(x):
        return torch.empty_like(x)

    class Calls(torch.nn.Module):
        def forward(self, x):
            scale, zero = torch.ops.torchao.choose_qparams_affine(
                x, "ASYMMETRIC", [1, 4], torch.int8, -128, 127, 1e-5, torch.float32, torch.int8)
            return torch.ops.fltest_keyed.twice(x) * scale

    text = operator_sources([_program(Calls(), torch.randn(1, 4))])
    assert "fltest_keyed::twice=test_operator_sources.py:" in text or \
        "fltest_keyed::twice=tests:" in text, text
    assert "torchao::choose_qparams_affine=torchao:" in text, text


def test_code_its_version_does_not_pin_is_keyed_by_its_source(tmp_path, monkeypatch):
    from fastlower.preprocess import code_digests

    assert code_digests.unpinned_sources() == ""  # torch and executorch from wheels here
    package = tmp_path / "checkout_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    code_digests.clear_directory_digests()
    first = code_digests.unpinned_sources(("checkout_pkg",))
    assert first.startswith("checkout_pkg:")
    (package / "__init__.py").write_text("X = 2\n")
    code_digests.clear_directory_digests()
    assert code_digests.unpinned_sources(("checkout_pkg",)) not in ("", first)
