"""ExecuTorch's ``EDGE_DO_NOT_DECOMP`` stand-ins for torchao's quantization operators
remembered inside the retraces (``fastlower.in_process.retrace_quant_ops.targets``): the
retrace ExecuTorch runs after pointing nodes at the stand-ins gives the same program and
shape environment with the memo off, on and in verify mode; a stand-in for any other
operator, or one with a fake kernel of its own, is not taken; verify mode raises at a
difference; and an 8da4w program lowered for XNNPACK is ExecuTorch's ``.pte``."""

from __future__ import annotations

import functools

import pytest
import torch

from fastlower.in_process.retrace_quant_ops import memo as memo_module
from fastlower.in_process.retrace_quant_ops import outputs, runs_torchao_quant_op
from tests.test_retrace_quant_ops import _exported

_STAND_IN = "EDGE_DO_NOT_DECOMP.quantize_affine.default"


def _program_module():
    import executorch.exir.program._program as program

    return program


def _stand_in(op):
    """ExecuTorch's ``EDGE_DO_NOT_DECOMP`` operator for ``op`` (registered as it does)."""
    program = _program_module()
    program._register_no_decomp_op(op)
    return program.aten_op_to_transform_op[op]


def _with_stand_ins():
    """The test program with its torchao nodes pointed at their stand-ins, as
    ``_replace_aten_ops_with_transformed_ops`` does before its retrace."""
    program = _exported().run_decompositions({})
    for node in program.graph.nodes:
        if node.op == "call_function" and str(node.target).startswith("torchao."):
            node.target = _stand_in(node.target)
    return program


def _retraced(mode: str) -> tuple:
    from executorch.exir.program._program import _default_decomposition_table

    program = _with_stand_ins()
    with memo_module.remembering(mode):
        retraced = program.run_decompositions(_default_decomposition_table())
    env = next(node.meta["val"] for node in retraced.graph.nodes
               if node.op == "placeholder" and node.name == "x").fake_mode.shape_env
    return (retraced.graph_module.print_readable(print_output=False),
            sorted(str(g.expr) for g in env.guards),
            sorted(str(ra.expr) for ras in env.deferred_runtime_asserts.values()
                   for ra in ras), dict(memo_module.LAST.reused_by))


@functools.lru_cache(maxsize=None)
def _retraced_off() -> tuple:
    return _retraced("off")


@pytest.mark.parametrize("mode", ["on", "verify"])
def test_stand_ins_leave_the_same_program_and_shape_environment(mode):
    graph_off, guards_off, asserts_off, _ = _retraced_off()
    graph, guards, asserts, reused_by = _retraced(mode)
    assert "EDGE_DO_NOT_DECOMP" in graph_off  # the premise: the retrace keeps the stand-ins
    assert graph == graph_off
    assert guards == guards_off
    assert asserts == asserts_off
    assert reused_by.get(_STAND_IN, 0) > 0
    assert all(name.startswith(("torchao.", "EDGE_DO_NOT_DECOMP.")) for name in reused_by)


def test_only_stand_ins_for_torchao_operators_are_taken(monkeypatch):
    import torchao.quantization.quant_primitives  # noqa: F401

    quantize = _stand_in(torch.ops.torchao.quantize_affine.default)
    linear = _stand_in(torch.ops.aten.linear.default)
    assert runs_torchao_quant_op(quantize)
    assert not runs_torchao_quant_op(linear)  # a stand-in for an ATen operator
    assert not runs_torchao_quant_op(torch.ops.aten.linear.default)
    table = dict(_program_module().transform_op_to_aten_op)
    del table[str(quantize)]  # not ExecuTorch's record: not taken
    monkeypatch.setattr(_program_module(), "transform_op_to_aten_op", table)
    assert not runs_torchao_quant_op(quantize)


def test_a_stand_in_with_a_meta_kernel_of_its_own_is_not_taken():
    quantize = _stand_in(torch.ops.torchao.quantize_affine.default)
    assert runs_torchao_quant_op(quantize)
    library = torch.library.Library("EDGE_DO_NOT_DECOMP", "IMPL")
    try:
        library.impl("quantize_affine", lambda *args, **kwargs: args[0], "Meta")
        assert not runs_torchao_quant_op(quantize)  # its fake dispatch no longer torchao's
    finally:
        library._destroy()
    assert runs_torchao_quant_op(quantize)


def test_a_torch_without_the_registries_read_takes_no_stand_in(monkeypatch):
    quantize = _stand_in(torch.ops.torchao.quantize_affine.default)
    assert runs_torchao_quant_op(quantize)
    monkeypatch.setattr(torch._library.simple_registry, "singleton", object())
    assert not runs_torchao_quant_op(quantize)  # not taken, and no error
    assert runs_torchao_quant_op(torch.ops.torchao.quantize_affine.default)  # torchao's own


def test_verify_mode_raises_at_a_difference(monkeypatch):
    def wrong(found, mode, leaves):
        made = outputs.remake(found, mode, leaves)
        return torch.utils._pytree.tree_map(lambda t: t.to(torch.float64), made)

    monkeypatch.setattr(memo_module, "remake", wrong)
    with pytest.raises(memo_module.RetraceQuantOpsVerificationError):
        _retraced("verify")


def _lowered(fastlower: bool, monkeypatch) -> tuple:
    """The ``.pte`` of a small 8da4w program with a dynamic batch, lowered for XNNPACK's
    two partitioners (each retraces with stand-ins), and the memo's answers by operator
    in ``to_edge_transform_and_lower``."""
    from executorch.exir import to_edge_transform_and_lower

    from fastlower import patch
    from tests.edge.models import partitioners
    from tests.structure.models import _quantize

    torch.manual_seed(0)
    model = torch.nn.Sequential(*(torch.nn.Linear(64, 64) for _ in range(3))).eval()
    _quantize(model, "8da4w")
    with torch.no_grad():
        program = torch.export.export(model, (torch.randn(4, 64),),
                                      dynamic_shapes=({0: torch.export.Dim("b", max=64)},))
    if not fastlower:
        manager = to_edge_transform_and_lower(program, partitioner=partitioners("dq+xnnpack"))
        return manager.to_executorch().buffer, {}
    monkeypatch.delenv("FASTLOWER_CACHE_DIR", raising=False)
    monkeypatch.setenv("FASTLOWER_RETRACE_QUANT_OPS", "on")
    with patch.installed():
        # imported inside the block: a name bound before it is the reference itself
        from executorch.exir import to_edge_transform_and_lower as lower

        manager = lower(program, partitioner=partitioners("dq+xnnpack"))
        reused_by = dict(memo_module.LAST.reused_by)  # its own block's, closed last
        return manager.to_executorch().buffer, reused_by


def test_an_8da4w_program_is_executorchs_pte(monkeypatch):
    reference, _ = _lowered(False, monkeypatch)
    fast, reused_by = _lowered(True, monkeypatch)
    assert reused_by.get("EDGE_DO_NOT_DECOMP.dequantize_affine.default", 0) > 0
    assert fast == reference
