"""fastlower.in_process.edge_transform: while fastlower is installed, the pipeline's
``EdgeProgramManager.transform`` (export_llm's ``ConvertToLinearPass`` between the lowering's
steps) runs ExecuTorch's method inside fastlower's lowering block, and gives ExecuTorch's
program: graph, names, metadata, ``from_node`` histories, and after ``to_executorch`` the
same ``.pte`` bytes and debug-handle map."""

from __future__ import annotations

import pytest

import fastlower.patch as patch
from fastlower.cache import compare
from fastlower.in_process import while_lowering
from fastlower.in_process.fake_outputs import scope as fake_scope
from tests.edge.models import aten_program, partitioners


@pytest.fixture(autouse=True)
def _settings(monkeypatch):
    for name in ("FASTLOWER_EDGE_TRANSFORM", "FASTLOWER_NODE_HISTORY", "FASTLOWER_FAKE_OUTPUTS"):
        monkeypatch.delenv(name, raising=False)


def _histories(manager) -> list:
    """Every node's ``from_node`` history as values (no ``graph_id``: an object's id)."""
    def plain(source: dict) -> dict:
        return {key: [plain(s) for s in value] if key == "from_node" else value
                for key, value in source.items() if key != "graph_id"}

    return [(name, node.name, [plain(source.to_dict())
                               for source in node.meta.get("from_node", [])])
            for name, program in manager._edge_programs.items()
            for node in program.graph.nodes]


def _lowered(family: str):
    """ExecuTorch's lowering of ``family`` (a fresh export each time)."""
    from executorch.exir import to_edge_transform_and_lower

    return to_edge_transform_and_lower(aten_program(family, n_layers=1),
                                       partitioner=partitioners("dq+xnnpack"))


def _transform(lowered, inside: bool):
    """The pipeline's ``transform``: ExecuTorch's method, or routed to fastlower's."""
    from executorch.backends.xnnpack._passes.convert_to_linear import ConvertToLinearPass

    if not inside:
        return lowered.transform([ConvertToLinearPass()])
    with patch.routed({"transform": patch.fastlower_implementation("transform")}):
        return lowered.transform([ConvertToLinearPass()])


def _transformed(family: str, inside: bool):
    return _transform(_lowered(family), inside)


@pytest.mark.parametrize("family", ["executorch_llama-dynamic", "conv"])
def test_the_program_and_pte_are_executorchs(family):
    reference = _transformed(family, inside=False)
    fake_scope.LAST.delegates_reused = 0
    inside = _transformed(family, inside=True)
    assert fake_scope.LAST.delegates_reused > 0  # the block was there and knew the delegates
    assert compare.first_difference(compare.describe(reference._edge_programs),
                                    compare.describe(inside._edge_programs)) is None
    assert _histories(inside) == _histories(reference)
    pte_ref, pte_inside = reference.to_executorch(), inside.to_executorch()
    assert pte_inside.buffer == pte_ref.buffer
    assert pte_inside.debug_handle_map == pte_ref.debug_handle_map


@pytest.mark.parametrize(("mode", "inside", "copies"), [
    ("share", True, False), ("copy", True, True), ("share", False, True)])
def test_histories_are_not_deep_copied_inside(monkeypatch, mode, inside, copies):
    """Inside the block a new ``NodeSource`` shares its node's history; with
    ``FASTLOWER_NODE_HISTORY=copy``, or outside, torch deep-copies it."""
    import copy
    from types import SimpleNamespace

    import torch.fx.traceback as fx_traceback

    lowered = _lowered("conv")
    copied = []
    monkeypatch.setenv("FASTLOWER_NODE_HISTORY", mode)
    monkeypatch.setattr(fx_traceback, "copy", SimpleNamespace(
        deepcopy=lambda value, *rest: copied.append(value) or copy.deepcopy(value, *rest)))
    _transform(lowered, inside)
    assert bool([value for value in copied if value]) is copies


def test_outside_calls_executorchs_method_as_it_is(monkeypatch):
    monkeypatch.setenv("FASTLOWER_EDGE_TRANSFORM", "outside")
    monkeypatch.setattr(while_lowering, "lowering_step", lambda: pytest.fail("entered"))
    from fastlower.in_process import edge_transform

    monkeypatch.setattr(edge_transform, "lowering_step", lambda: pytest.fail("entered"))
    _transformed("conv", inside=True)


def test_the_method_is_executorchs_again_after():
    from executorch.exir.program._program import EdgeProgramManager

    method = EdgeProgramManager.__dict__["transform"]
    with patch.installed():
        assert EdgeProgramManager.__dict__["transform"] is not method
    assert EdgeProgramManager.__dict__["transform"] is method
    assert patch.reference_of("transform") is method
