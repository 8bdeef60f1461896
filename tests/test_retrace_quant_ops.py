"""torchao's quantization operators' fake dispatch remembered inside retraces
(``fastlower.in_process.retrace_quant_ops``): a dynamic program with the operators at
several group sizes, dtypes and a symbolic batch, retraced by ``run_decompositions``
with the memo off, on and in verify mode; the programs must be the same, the shape
environment too, and verify mode must find no difference."""

from __future__ import annotations

import pytest
import torch

from fastlower.in_process import retrace_quant_ops, shape_env_state
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


def test_a_snapshot_keeps_the_state_it_was_taken_in():
    """Flat fields are copied whole, fields holding containers item by item; either way
    a later change, in place or of an item, does not reach the snapshot."""
    import types

    env = types.SimpleNamespace(
        var_to_range={"s0": "[2, 9]"}, var_to_sources={"s0": ["L['x'].size()[0]"]},
        tracked_fakes=["a", ["b"]], size_like={"u0"}, counter={"calls": 1},
        guards=[types.SimpleNamespace(expr="Eq(s0, 4)", sloc="here")])
    before = retrace_quant_ops.shape_env_state(env)
    assert before == {"var_to_range": {"s0": "[2, 9]"},
                      "var_to_sources": {"s0": ("L['x'].size()[0]",)},
                      "tracked_fakes": ("a", ("b",)), "size_like": frozenset({"u0"}),
                      "guards": ("Eq(s0, 4)",)}  # counter: statistics, not state
    env.var_to_range["s0"] = "[3, 9]"
    env.var_to_sources["s0"].append("L['y'].size()[0]")
    env.tracked_fakes[1].append("c")
    env.size_like.add("u1")
    env.guards.append(types.SimpleNamespace(expr="Ne(s0, 5)", sloc="there"))
    after = retrace_quant_ops.shape_env_state(env)
    assert retrace_quant_ops.state_difference(before, after) == {
        "var_to_range", "var_to_sources", "tracked_fakes", "size_like", "guards"}


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


def _retrace(program: torch.export.ExportedProgram, mode: str) -> tuple:
    """``program`` retraced by ``run_decompositions`` with the memo in ``mode``: the
    retrace's readable graph and its shape environment."""
    with memo_module.remembering(mode):
        retraced = program.run_decompositions({})
    env = next(node.meta["val"] for node in retraced.graph.nodes
               if node.op == "placeholder").fake_mode.shape_env
    return retraced.graph_module.print_readable(print_output=False), env


def _grouped_retraced(mode: str) -> tuple:
    import torchao.quantization.quant_primitives  # noqa: F401

    program = torch.export.export(_GroupedOnSymbolicDim(), (torch.randn(4, 64),),
                                  dynamic_shapes=({1: torch.export.Dim.DYNAMIC},),
                                  strict=False)
    graph, env = _retrace(program, mode)
    return graph, [str(g.expr) for g in env.guards], memo_module.LAST.reused


@pytest.mark.parametrize("mode", ["on", "verify"])
def test_sizes_divided_by_the_group_are_remade(mode):
    graph_off, guards_off, _ = _grouped_retraced("off")
    graph, guards, reused = _grouped_retraced(mode)
    assert any("Mod" in guard for guard in guards_off)  # the premise: guards on the size
    assert graph == graph_off
    assert guards == guards_off
    assert reused > 0


def test_a_state_grown_by_unbacked_symbols_the_call_does_not_use_is_the_same_to_it():
    from torch.utils._sympy.symbol import SymT, make_symbol

    grown = shape_env_state.grown_by_other_unbacked
    s0 = make_symbol(SymT.SIZE, 0, integer=True)
    u0, u1, u2 = (make_symbol(SymT.UNBACKED_INT, i, integer=True) for i in range(3))
    before = {"var_to_range": {s0: "[2, 127]", u0: "[0, 127]"}, "replacements": {},
              "size_like": frozenset({u0}), "unbacked_symint_counter": 1, "guards": ()}
    after = {"var_to_range": {s0: "[2, 127]", u0: "[0, 127]", u1: "[0, 126]"},
             "replacements": {u1: u0}, "size_like": frozenset({u0, u1}),
             "unbacked_symint_counter": 2, "guards": ()}  # what a retrace's item() adds
    assert grown(before, after, {s0})
    assert grown(before, after, {s0, u0})  # u0's own entries are as they were
    assert not grown(before, after, {s0, u1})  # the call uses the new symbol
    assert not grown(after, before, {s0})  # entries gone
    for field, value in (("var_to_range", {s0: "[3, 127]", u0: "[0, 127]", u1: "[0, 1]"}),
                         ("replacements", {u0: s0}),  # an old symbol replaced
                         ("size_like", frozenset({u0, s0})),
                         ("unbacked_symint_counter", 0),
                         ("guards", ("Eq(s0, 4)",))):
        assert not grown(before, dict(after, **{field: value}), {s0}), field
    s1 = make_symbol(SymT.SIZE, 1, integer=True)
    assert not grown(before, dict(after, var_to_range={**after["var_to_range"], s1: "[2, 9]"}),
                     {s0})  # a new symbol, but not an unbacked one
    assert not grown(before, dict(after, axioms={}), {s0})  # another field, new


def test_a_real_new_unbacked_symbols_asserts_are_not_taken_as_unrelated():
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    env_state = retrace_quant_ops.shape_env_state
    env = ShapeEnv()
    used = env.create_unbacked_symint()
    before = env_state(env)
    other = env.create_unbacked_symint()
    torch._check(other >= 2)  # a runtime assert and axioms: fields outside the premise
    assert not shape_env_state.grown_by_other_unbacked(
        before, env_state(env), {used.node.expr})


class _LayersAfterItem(torch.nn.Module):
    """A decoder's shape: before each layer an ``item()`` (its KV cache's position)
    makes a new unbacked symbol, so the shape environment grows between the layers'
    alike quantization calls."""

    def forward(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        ops = torch.ops.torchao
        for _ in range(3):
            start = pos.item()
            torch._check(start >= 0)
            torch._check(start < x.shape[0])
            scale, zero = ops.choose_qparams_affine(x, "ASYMMETRIC", [1, 32], torch.int8,
                                                    -128, 127, 1e-6, torch.float32,
                                                    torch.int8)
            q = ops.quantize_affine(x, [1, 32], scale, zero, torch.int8, -128, 127)
            x = ops.dequantize_affine(q, [1, 32], scale, zero, torch.int8, -128, 127,
                                      output_dtype=x.dtype)
            x = x + x.narrow(0, start, 1)
        return x


def _after_item_retraced(mode: str) -> tuple:
    import torchao.quantization.quant_primitives  # noqa: F401

    program = torch.export.export(_LayersAfterItem(), (torch.randn(4, 64), torch.tensor(1)),
                                  dynamic_shapes=({0: torch.export.Dim.DYNAMIC}, None),
                                  strict=False)
    graph, env = _retrace(program, mode)
    return (graph, sorted(str(g.expr) for g in env.guards),
            sorted(str(ra.expr) for ras in env.deferred_runtime_asserts.values()
                   for ra in ras), memo_module.LAST.reused)


@pytest.mark.parametrize("mode", ["on", "verify"])
def test_calls_after_a_new_unbacked_symbol_are_remembered(mode, monkeypatch):
    graph_off, guards_off, asserts_off, _ = _after_item_retraced("off")
    graph, guards, asserts, reused = _after_item_retraced(mode)
    assert (graph, guards, asserts) == (graph_off, guards_off, asserts_off)
    monkeypatch.setattr(memo_module, "grown_by_other_unbacked", lambda *args: False)
    strict = _after_item_retraced(mode)
    assert strict[:3] == (graph_off, guards_off, asserts_off)
    assert reused > strict[3]  # the later layers' calls, in a grown state


def test_each_layer_is_compared_with_the_layer_before(monkeypatch):
    """An answer in a grown state replaces the remembered state: layer 3's call reads
    what grew since layer 2's, not since layer 1's (the comparison would grow with the
    depth)."""
    compared = []
    grown = memo_module.grown_by_other_unbacked

    def recording(before, after, used):
        accepted = grown(before, after, used)
        if accepted:
            compared.append(before)  # kept alive: identities stay distinct
        return accepted

    monkeypatch.setattr(memo_module, "grown_by_other_unbacked", recording)
    graph_off = _after_item_retraced("off")[:3]
    assert _after_item_retraced("on")[:3] == graph_off
    assert len(compared) >= 2
    assert len({id(before) for before in compared}) == len(compared)
