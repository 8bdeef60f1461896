"""fastlower.in_process.fake_outputs: inside fastlower's lowering steps, a delegate call's fake
outputs are read off its original program and a torchao quantization operator's are
remembered by its inputs' metadata, instead of re-running them; the ``.pte``,
debug-handle and delegate maps are ExecuTorch's, and verify mode (both, compared) finds
no difference, across model families, both XNNPACK set-ups and dynamic shapes
(``export_llm``'s 8da4w program in verify mode: ``tests/pipeline/test_export_llm.py``,
beside the reference export it shares)."""

from __future__ import annotations

import functools

import pytest
import torch

from fastlower.in_process import fake_outputs
from fastlower import patch
from fastlower.in_process.fake_outputs import compare, delegates, quant_ops
from fastlower.in_process.fake_outputs.scope import Scope
from tests.edge.models import aten_program, partitioners

# verify mode: the conv net in the default run (the dynamic decoder's default mode, reuse,
# is test_reuse_gives_the_reference_bytes); the decoders with -m slow
DEFAULT = [("conv", "xnnpack")]
SLOW = [("executorch_llama-dynamic", "dq+xnnpack"), ("executorch_llama", "dq+xnnpack"),
        ("hf_llama-dynamic", "dq+xnnpack"),
        ("conv", "dq+xnnpack"), ("hf_llama", "xnnpack")]


def _pte(family: str, setup: str, fastlower: bool, n_layers: int = 2):
    import executorch.exir  # the entry point looked up inside the block: all of it fastlower's

    program = aten_program(family, n_layers)
    if not fastlower:
        manager = executorch.exir.to_edge_transform_and_lower(
            program, partitioner=partitioners(setup))
        return manager.to_executorch()
    with patch.installed():
        manager = executorch.exir.to_edge_transform_and_lower(
            program, partitioner=partitioners(setup))
        return manager.to_executorch()


@functools.lru_cache(maxsize=None)
def _reference(family: str, setup: str, n_layers: int = 2):
    """ExecuTorch's lowering of a case, made once for the module's tests of that case."""
    return _pte(family, setup, fastlower=False, n_layers=n_layers)


def _same_as_reference(family: str, setup: str, mode: str, monkeypatch,
                       n_layers: int = 2) -> None:
    monkeypatch.delenv("FASTLOWER_CACHE_DIR", raising=False)
    monkeypatch.setenv("FASTLOWER_FAKE_OUTPUTS", mode)
    reference = _reference(family, setup, n_layers)
    fast = _pte(family, setup, fastlower=True, n_layers=n_layers)
    assert fake_outputs.LAST.delegates_reused > 0  # the shortcut was taken, not only the fallback
    assert fast.buffer == reference.buffer
    assert fast.debug_handle_map == reference.debug_handle_map
    assert str(fast.delegate_map) == str(reference.delegate_map)


@pytest.mark.parametrize("family,setup", DEFAULT)
def test_verify_mode_finds_no_difference(family, setup, monkeypatch):
    _same_as_reference(family, setup, "verify", monkeypatch)


@pytest.mark.slow
@pytest.mark.parametrize("family,setup", SLOW)
def test_verify_mode_finds_no_difference_slow(family, setup, monkeypatch):
    _same_as_reference(family, setup, "verify", monkeypatch)


def test_reuse_gives_the_reference_bytes(monkeypatch):
    # one layer: what is reused (a delegate call's outputs) does not depend on the depth,
    # and the two-layer decoders run in verify mode with -m slow
    _same_as_reference("executorch_llama-dynamic", "dq+xnnpack", "reuse", monkeypatch, n_layers=1)


def test_run_mode_binds_nothing_and_reuses_nothing(monkeypatch):
    fake_outputs.uninstall()
    monkeypatch.setenv("FASTLOWER_FAKE_OUTPUTS", "run")
    with fake_outputs.known_outputs() as scope:
        assert scope is None
    assert not fake_outputs.installed()
    monkeypatch.setenv("FASTLOWER_FAKE_OUTPUTS", "reuse")
    with fake_outputs.known_outputs() as scope:
        assert scope is not None and fake_outputs.installed()
    fake_outputs.uninstall()
    assert not fake_outputs.installed()


def _lowered_module():
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower
    from executorch.exir.lowered_backend_module import get_lowered_submodules

    class Two(torch.nn.Module):
        def forward(self, x):
            return torch.relu(x) + 1.0, x * 2.0

    program = torch.export.export(Two(), (torch.randn(2, 3),))
    manager = to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()])
    graph_module = manager.exported_program().graph_module
    [(_, lowered, node)] = get_lowered_submodules(graph_module)
    return lowered, node


def test_inputs_unlike_the_programs_run_it():
    """Another shape, dtype or fake mode than the original program's placeholders: no
    record is used (the call runs ExecuTorch's code)."""
    from executorch.exir.pass_base import ProxyValue

    lowered, node = _lowered_module()
    scope = Scope("reuse")
    recorded = [arg.meta["val"] for arg in node.args[1:]]

    def args(values):
        return tuple(ProxyValue(value, None) for value in values)

    known = delegates._known(scope, lowered, args(recorded))
    assert known is not None
    assert [tuple(t.shape) for t in known] == [tuple(v.shape) for v in node.meta["val"]]
    mode = recorded[0].fake_mode
    with mode:
        wider = torch.empty(2, 4)
        other_dtype = torch.empty(2, 3, dtype=torch.float64)
    with torch._subclasses.fake_tensor.FakeTensorMode() as other_mode:
        other = torch.empty(2, 3)
    assert other.fake_mode is other_mode
    for wrong in (wider, other_dtype, other):
        assert delegates._known(scope, lowered, args([wrong])) is None
    with mode:
        graded = torch.empty(2, 3, requires_grad=True)
    assert delegates._known(scope, lowered, args([graded])) is None


def test_a_difference_in_verify_mode_is_a_typed_error():
    error = fake_outputs.FakeOutputsVerificationError("call_delegate", "shape")
    assert isinstance(error, AssertionError) and "FASTLOWER_FAKE_OUTPUTS=run" in str(error)
    lowered, node = _lowered_module()
    recorded = node.meta["val"]
    assert compare.outputs_difference(tuple(recorded), tuple(recorded)) is None
    assert compare.outputs_difference(tuple(recorded), list(recorded)) is not None
    assert "output 1" in compare.outputs_difference(
        tuple(recorded), (recorded[0], recorded[0].unsqueeze(0)))


def test_a_quant_op_key_holds_metadata_and_plain_values_only():
    import enum

    mode = torch._subclasses.fake_tensor.FakeTensorMode()
    with mode:
        a, b = torch.empty(2, 3), torch.empty(2, 3)
        c = torch.empty(2, 4)

    class Domain(enum.Enum):
        INT = 1

    target = object()
    key = quant_ops.call_key(target, (a, [1, 3], torch.int8, Domain.INT, 1e-5), {})
    assert key == quant_ops.call_key(target, (b, [1, 3], torch.int8, Domain.INT, 1e-5), {})
    assert key != quant_ops.call_key(target, (c, [1, 3], torch.int8, Domain.INT, 1e-5), {})
    assert key != quant_ops.call_key(target, (a, [1, 3], torch.int8, Domain.INT, 1e-6), {})
    assert quant_ops.call_key(target, (torch.ones(2),), {}) is None  # a real tensor
    assert quant_ops.remembered("<EdgeOpOverload: torchao.choose_qparams_affine.default>")
    assert not quant_ops.remembered(torch.ops.aten.add.Tensor)


def test_an_output_aliasing_an_input_is_not_remembered():
    mode = torch._subclasses.fake_tensor.FakeTensorMode()
    with mode:
        x = torch.empty(2, 3)
        fresh = torch.empty(2, 3)
        view = x.view(3, 2)
        own_view = torch.empty(4, 3)[1:3]  # a view of a tensor of its own
    assert quant_ops._template(fresh, (x,)) is not None
    assert quant_ops._template(view, (x,)) is None
    assert quant_ops._template(x, (x,)) is None
    assert quant_ops._template((fresh, fresh), (x,)) is None  # two outputs, one storage
    outputs = (fresh, fresh.sum(0), own_view)
    made = quant_ops._fresh(quant_ops._template(outputs, (x,)))
    assert compare.outputs_difference(made, outputs) is None
    assert made[2]._base is not None and made[2].storage_offset() == 3
    assert compare.outputs_difference((fresh,), (own_view,)) is not None


def test_an_output_autograd_recorded_is_remade_recorded_too():
    mode = torch._subclasses.fake_tensor.FakeTensorMode()
    with mode:
        x = torch.empty(4, 6, requires_grad=True)
        product = x * 2  # recorded by autograd: not a leaf
        view = product.view(2, 12)  # what torchao's dequantize_affine returns
    for outputs in (product, view, (product.sum(0), view)):
        template = quant_ops._template(outputs, (x,))
        assert template is not None
        made = quant_ops._fresh(template)
        assert compare.outputs_difference(made, outputs) is None
        for a, b in zip(torch.utils._pytree.tree_leaves(made),
                        torch.utils._pytree.tree_leaves(outputs)):
            assert a.requires_grad and not a.is_leaf and not b.is_leaf
            assert (a._base is None) == (b._base is None)
            if a._base is not None:
                assert not a._base.is_leaf and a._base.requires_grad
    with mode:
        leaf = torch.empty(4, 6, requires_grad=True)
    assert not quant_ops._same(leaf, product)  # same metadata, but a leaf
    assert quant_ops._same(quant_ops._fresh(quant_ops._template(product, (x,))), product)


def test_a_quant_op_is_remembered_per_grad_mode():
    from executorch.exir.pass_base import ExportPass

    class Dequantize(torch.nn.Module):
        def forward(self, q: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
            return torch.ops.torchao.dequantize_affine(
                q, [1, 4], scale, None, torch.int8, -8, 7)

    import torchao  # noqa: F401  (registers torchao's operators)

    program = torch.export.export(
        Dequantize(), (torch.ones(2, 8, dtype=torch.int8), torch.ones(2, 2)))
    gm = program.graph_module
    with fake_outputs.known_outputs() as scope:
        ExportPass()(gm)
        ExportPass()(gm)
        with torch.no_grad():
            ExportPass()(gm)
    assert scope is not None
    assert (scope.ops_run, scope.ops_reused) == (2, 1)
