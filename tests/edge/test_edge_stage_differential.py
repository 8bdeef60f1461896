"""fastlower's edge stage (retraces that change nothing skipped) against ExecuTorch's:
the same Edge programs, and after ``to_backend`` and ``to_executorch`` the same ``.pte``.

Each case exports a program twice (two exports, not deep copies: a copy shares its
original's symbolic-shape state, and a second run on it names intermediate nodes in
``from_node`` differently, reference or not) and lowers them with ExecuTorch's
``to_edge_transform_and_lower``,
once as it is and once with its ``_gen_edge_manager_for_partitioners`` routed to
fastlower's, in ``skip`` mode: the edge programs must agree (``fastlower.in_process.edge.verify``),
then the lowered programs (``fastlower.cache.compare``), then the ``.pte`` bytes and the
emitter's debug-handle and delegate maps.
"""

from __future__ import annotations

import copy

import pytest
import torch

from fastlower import patch
from fastlower.cache import compare
from fastlower.in_process.edge import decompose, stage, verify
from tests.edge.models import FAMILIES, SETUPS, aten_program, partitioners


def _lower(aten, setup: str, fastlower: bool):
    """``aten``: a program (deep-copied) or a function making one."""
    from executorch.exir import to_edge_transform_and_lower
    from executorch.exir.program import _program

    captured = {}

    def capture(*args, **kwargs):  # the edge manager, before to_backend changes it
        implementation = (stage.gen_edge_manager_for_partitioners if fastlower
                          else patch.reference_of("_gen_edge_manager_for_partitioners"))
        manager = implementation(*args, **kwargs)
        captured["edge"] = copy.deepcopy(manager)
        return manager

    with patch.routed({"_gen_edge_manager_for_partitioners": capture}):
        assert _program._gen_edge_manager_for_partitioners is not \
            patch.reference_of("_gen_edge_manager_for_partitioners")
        program = (copy.deepcopy(aten) if isinstance(aten, torch.export.ExportedProgram)
                   else aten())
        lowered = to_edge_transform_and_lower(program, partitioner=partitioners(setup))
    return captured["edge"], lowered


def _same_lowering(aten, setup: str, monkeypatch) -> int:
    monkeypatch.setenv("FASTLOWER_EDGE_RETRACES", "skip")
    edge_ref, lowered_ref = _lower(aten, setup, fastlower=False)
    edge_fast, lowered_fast = _lower(aten, setup, fastlower=True)
    skipped = decompose.SKIPPED.skipped
    assert verify.first_difference(edge_ref, edge_fast) is None
    assert compare.first_difference(compare.describe(lowered_ref._edge_programs),
                                    compare.describe(lowered_fast._edge_programs)) is None
    pte_ref, pte_fast = lowered_ref.to_executorch(), lowered_fast.to_executorch()
    assert pte_ref.buffer == pte_fast.buffer
    assert pte_ref.debug_handle_map == pte_fast.debug_handle_map
    assert str(pte_ref.delegate_map) == str(pte_fast.delegate_map)
    return skipped


def test_conv_net_xnnpack(monkeypatch):
    _same_lowering(lambda: aten_program("conv"), "xnnpack", monkeypatch)


def test_export_llm_model_two_partitioners_skips(monkeypatch):
    program = lambda: aten_program("executorch_llama", 1)  # noqa: E731
    assert _same_lowering(program, "dq+xnnpack", monkeypatch) > 0


@pytest.mark.slow
@pytest.mark.parametrize("setup", SETUPS)
@pytest.mark.parametrize("family", FAMILIES)
def test_families(family, setup, monkeypatch):
    _same_lowering(lambda: aten_program(family, 2), setup, monkeypatch)


def test_verify_mode_passes_and_returns_the_reference(monkeypatch):
    monkeypatch.setenv("FASTLOWER_EDGE_RETRACES", "verify")
    edge, _ = _lower(aten_program("executorch_llama", 1), "xnnpack", fastlower=True)
    assert edge.exported_program().graph_module is not None


def test_verify_mode_passes_on_an_input_named_input(monkeypatch):
    """An ``nn.Sequential`` 's argument is named ``input``, a Python builtin: a deep copy
    of its graph names it ``input_1``, and verify mode once compared that copy with the
    retrace (which keeps ``input``) and raised on a program the skip lowers exactly."""
    monkeypatch.setenv("FASTLOWER_EDGE_RETRACES", "verify")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.LayerNorm(8),
                                torch.nn.Linear(8, 4)).eval()
    with torch.no_grad():
        program = torch.export.export(model, (torch.randn(2, 8),))
    assert [n.name for n in program.graph.nodes if n.op == "placeholder"][-1] == "input"
    decompose.SKIPPED.skipped = 0
    _lower(program, "xnnpack", fastlower=True)  # raised EdgeStageVerificationError
    assert decompose.SKIPPED.skipped > 0  # the case holds: a skip was verified


def test_verify_mode_catches_a_difference(monkeypatch):
    # a skipped retrace that forgot the meta a retrace rewrites must be caught
    monkeypatch.setenv("FASTLOWER_EDGE_RETRACES", "verify")
    monkeypatch.setattr(decompose, "rewrite_as_retraced", lambda graph_module, lifted: None)
    with pytest.raises(stage.EdgeStageVerificationError, match="original_aten"):
        _lower(aten_program("executorch_llama", 1), "xnnpack", fastlower=True)


def test_all_mode_runs_every_retrace(monkeypatch):
    monkeypatch.setenv("FASTLOWER_EDGE_RETRACES", "all")
    decompose.SKIPPED.skipped = -1
    _lower(aten_program("conv"), "xnnpack", fastlower=True)
    assert decompose.SKIPPED.skipped == -1  # the skipping path never ran


def test_fastlower_to_edge_transform_and_lower_runs_it(monkeypatch):
    # the user's path: fastlower's to_edge_transform_and_lower (no cache folder) routes
    # the edge stage to fastlower.in_process.edge, and the .pte is the reference's (the
    # conv net: what the routed stage gives a decoder is the tests above)
    from executorch.exir import to_edge_transform_and_lower

    monkeypatch.setenv("FASTLOWER_EDGE_RETRACES", "skip")
    monkeypatch.delenv("FASTLOWER_CACHE_DIR", raising=False)
    aten = aten_program("conv")
    reference = to_edge_transform_and_lower(copy.deepcopy(aten),
                                            partitioner=partitioners("xnnpack"))
    decompose.SKIPPED.skipped = 0
    with patch.installed():
        fast = to_edge_transform_and_lower(copy.deepcopy(aten),
                                           partitioner=partitioners("xnnpack"))
    assert decompose.SKIPPED.skipped > 0
    assert reference.to_executorch().buffer == fast.to_executorch().buffer
