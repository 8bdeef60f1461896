"""torchao's quantization operators' fake dispatch remembered inside retraces
(``fastlower.in_process.retrace_quant_ops``): a dynamic program with the operators at
several group sizes, dtypes and a symbolic batch, retraced by ``run_decompositions``
with the memo off, on and in verify mode; the programs must be the same, the shape
environment too, and verify mode must find no difference."""

from __future__ import annotations

import pytest
import torch

from fastlower.in_process import retrace_quant_ops
from fastlower.in_process.retrace_quant_ops import memo as memo_module


class _Quantized(torch.nn.Module):
    """Per-token dynamic quantization of the activation, then per-group weights, at
    two group sizes, an int8 and an int4 range, fp32 and bf16 scales."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(64, 64), requires_grad=False)

    def _fake_quant(self, x: torch.Tensor, block: list, low: int, high: int,
                    scale_dtype: torch.dtype) -> torch.Tensor:
        ops = torch.ops.torchao
        scale, zero = ops.choose_qparams_affine(x, "ASYMMETRIC", block, torch.int8, low, high,
                                                1e-6, scale_dtype, torch.int8)
        q = ops.quantize_affine(x, block, scale, zero, torch.int8, low, high)
        return ops.dequantize_affine(q, block, scale, zero, torch.int8, low, high,
                                     output_dtype=x.dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(3):  # the same calls again, as a decoder's layers make them
            x = self._fake_quant(x, [1, 64], -128, 127, torch.float32)
            w = self._fake_quant(self.w, [1, 32], -8, 7, torch.float32)
            w = w + self._fake_quant(self.w, [1, 16], -8, 7, torch.bfloat16)
            x = torch.nn.functional.linear(x, w)
            x = x[: x.shape[0] // 2 * 2]  # symbolic arithmetic on the batch
            torch._check(x.shape[0] > 1)
        return x


def _exported() -> torch.export.ExportedProgram:
    import torchao.quantization.quant_primitives  # noqa: F401  (registers the ops)

    return torch.export.export(_Quantized(), (torch.randn(8, 64),),
                               dynamic_shapes=({0: torch.export.Dim.DYNAMIC},), strict=False)


def _retraced(mode: str) -> tuple:
    program = _exported()
    with memo_module.remembering(mode):
        retraced = program.run_decompositions({})
    env = next(node.meta["val"] for node in retraced.graph.nodes
               if node.op == "placeholder" and node.name == "x").fake_mode.shape_env
    return (retraced.graph_module.print_readable(print_output=False),
            sorted(str(g.expr) for g in env.guards),
            sorted(str(ra.expr) for ras in env.deferred_runtime_asserts.values()
                   for ra in ras), memo_module.LAST.reused, memo_module.LAST.run)


@pytest.mark.parametrize("mode", ["on", "verify"])
def test_remembered_calls_leave_the_same_program_and_shape_environment(mode):
    graph_off, guards_off, asserts_off, _, _ = _retraced("off")
    graph, guards, asserts, reused, run = _retraced(mode)
    assert graph == graph_off
    assert guards == guards_off
    assert asserts == asserts_off
    assert run > 0
    assert reused > 0


def test_a_changed_shape_environment_is_a_miss():
    env_state = retrace_quant_ops.shape_env_state
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    env = ShapeEnv()
    before = env_state(env)
    symbol = env.create_unbacked_symint()
    assert retrace_quant_ops.state_difference(before, env_state(env))
    torch._check(symbol > 3)
    after = env_state(env)
    torch._check(symbol > 3)  # known now: no change
    assert not retrace_quant_ops.state_difference(after, env_state(env))



class _GroupedOnSymbolicDim(torch.nn.Module):
    """Groups of 32 along a symbolic dimension: export's calls add guards
    (``Eq(Mod(s, 32), 0)`` ...); the retrace's, in the same shape environment, add none,
    and their outputs' sizes are new ``SymNode`` s of ``s // 32``."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ops = torch.ops.torchao
        for _ in range(2):
            scale, zero = ops.choose_qparams_affine(x, "ASYMMETRIC", [1, 32], torch.int8,
                                                    -8, 7, 1e-6, torch.float32, torch.int8)
            q = ops.quantize_affine(x, [1, 32], scale, zero, torch.int8, -8, 7)
            x = ops.dequantize_affine(q, [1, 32], scale, zero, torch.int8, -8, 7,
                                      output_dtype=x.dtype)
        return x


def _grouped_retraced(mode: str) -> tuple:
    import torchao.quantization.quant_primitives  # noqa: F401

    program = torch.export.export(_GroupedOnSymbolicDim(), (torch.randn(4, 64),),
                                  dynamic_shapes=({1: torch.export.Dim.DYNAMIC},),
                                  strict=False)
    with memo_module.remembering(mode):
        retraced = program.run_decompositions({})
    env = next(node.meta["val"] for node in retraced.graph.nodes
               if node.op == "placeholder").fake_mode.shape_env
    return (retraced.graph_module.print_readable(print_output=False),
            [str(g.expr) for g in env.guards], memo_module.LAST.reused)


@pytest.mark.parametrize("mode", ["on", "verify"])
def test_sizes_divided_by_the_group_are_remade(mode):
    graph_off, guards_off, _ = _grouped_retraced("off")
    graph, guards, reused = _grouped_retraced(mode)
    assert any("Mod" in guard for guard in guards_off)  # the premise: guards on the size
    assert graph == graph_off
    assert guards == guards_off
    assert reused > 0
