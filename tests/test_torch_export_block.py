"""fastlower.in_process.torch_export: while fastlower is installed, torch.export.export and
ExportedProgram.run_decompositions (export_llm calls both, twice) run torch's code inside
fastlower's export block, and give the program torch gives: graph, names, metadata, shape
environment."""

from __future__ import annotations

import pytest
import torch

import fastlower.patch as patch
from fastlower.in_process import heap_freeze, sym_arith, while_lowering
from fastlower.in_process.retrace_quant_ops import memo as memo_module
from tests.test_retrace_quant_ops import _Quantized


@pytest.fixture(autouse=True)
def _settings(monkeypatch):
    for name in ("FASTLOWER_TORCH_EXPORT", "FASTLOWER_SYM_ARITH",
                 "FASTLOWER_RETRACE_QUANT_OPS"):
        monkeypatch.delenv(name, raising=False)


def _described(program: torch.export.ExportedProgram) -> tuple:
    """The program as far as it can be compared across two exports."""
    env = next(node.meta["val"] for node in program.graph.nodes
               if node.op == "placeholder" and node.name == "x").fake_mode.shape_env
    vals = [(node.name, list(node.meta), str(node.meta.get("val")),
             str(node.meta.get("nn_module_stack")), str(node.meta.get("torch_fn")),
             [_history(source.to_dict()) for source in node.meta.get("from_node", [])])
            for node in program.graph.nodes]
    return (program.graph_module.print_readable(print_output=False), vals,
            str(program.graph_signature), str(program.range_constraints),
            sorted(str(g.expr) for g in env.guards),
            sorted(str(ra.expr) for ras in env.deferred_runtime_asserts.values() for ra in ras))


def _history(source: dict) -> dict:
    """A ``from_node`` entry without ``graph_id`` (an object's id: one per run)."""
    return {key: [_history(s) for s in value] if key == "from_node" else value
            for key, value in source.items() if key != "graph_id"}


def _exported_twice(strict: bool) -> tuple:
    """What export_llm does: export, functionalize, export the module again, functionalize."""
    import torchao.quantization.quant_primitives  # noqa: F401  (registers the ops)

    shapes = ({0: torch.export.Dim.DYNAMIC},)
    with torch.no_grad():
        first = torch.export.export(_Quantized(), (torch.randn(8, 64),),
                                    dynamic_shapes=shapes, strict=strict)
        first = first.run_decompositions({})
        second = torch.export.export(first.module(), (torch.randn(8, 64),),
                                     dynamic_shapes=shapes, strict=strict)
        second = second.run_decompositions({})
    return _described(first), _described(second)


@pytest.mark.parametrize("strict", [False, True])
def test_the_programs_are_torchs(strict):
    torch.manual_seed(0)
    torchs = _exported_twice(strict)
    answered = sym_arith.counts()["answered"]
    with patch.installed():
        torch.manual_seed(0)
        inside = _exported_twice(strict)
    assert inside == torchs
    assert sym_arith.counts()["answered"] > answered  # the block was there
    assert memo_module.LAST.reused > 0


def test_outside_calls_torchs_functions_as_they_are(monkeypatch):
    monkeypatch.setenv("FASTLOWER_TORCH_EXPORT", "outside")
    entered = []
    monkeypatch.setattr(while_lowering, "export_step",
                        lambda: entered.append(1) or pytest.fail("entered"))
    with patch.installed():
        torch.export.export(torch.nn.ReLU(), (torch.randn(2, 3),)).run_decompositions({})
    assert entered == []


def test_the_entry_points_are_torchs_again_after():
    import torch.export.exported_program as exported_program

    export, run = torch.export.export, exported_program.ExportedProgram.run_decompositions
    with patch.installed():
        assert torch.export.export is not export
        assert exported_program.ExportedProgram.__dict__["run_decompositions"] is not run
    assert torch.export.export is export
    assert exported_program.ExportedProgram.__dict__["run_decompositions"] is run
    assert patch.reference_of("export") is export


def test_inside_a_lowering_step_the_export_block_adds_nothing():
    """The edge stage's retraces keep the lowering's memo and frozen heap."""
    seen = []
    with while_lowering.lowering_step():
        outer = (heap_freeze.held(), memo_module._MEMO.get())
        with while_lowering.export_step():
            seen.append((heap_freeze.held(), memo_module._MEMO.get()))
    assert seen == [outer]
    with while_lowering.export_step():
        assert heap_freeze.held() >= 1
        assert memo_module._MEMO.get() is not None
