"""fastlower.delegate_outputs: inside fastlower's ``to_executorch``, a delegate call's
fake outputs are read off its original program instead of re-running it; the ``.pte``,
debug-handle and delegate maps are ExecuTorch's, and verify mode (both, compared) finds
no difference, across model families, both XNNPACK set-ups and dynamic shapes."""

from __future__ import annotations

import pytest
import torch

from fastlower import delegate_outputs, patch
from tests.edge.models import aten_program, partitioners

DEFAULT = [("executorch_llama-dynamic", "dq+xnnpack"), ("conv", "xnnpack"),
           ("hf_llama", "xnnpack")]
SLOW = [("executorch_llama", "dq+xnnpack"), ("hf_llama-dynamic", "dq+xnnpack"),
        ("conv", "dq+xnnpack")]


def _pte(family: str, setup: str, fastlower: bool):
    from executorch.exir import to_edge_transform_and_lower

    program = aten_program(family, 2)
    if not fastlower:
        manager = to_edge_transform_and_lower(program, partitioner=partitioners(setup))
        return manager.to_executorch()
    with patch.installed():
        manager = to_edge_transform_and_lower(program, partitioner=partitioners(setup))
        return manager.to_executorch()


def _same_as_reference(family: str, setup: str, mode: str, monkeypatch) -> None:
    monkeypatch.delenv("FASTLOWER_CACHE_DIR", raising=False)
    monkeypatch.setenv("FASTLOWER_DELEGATE_OUTPUTS", mode)
    reference = _pte(family, setup, fastlower=False)
    fast = _pte(family, setup, fastlower=True)
    assert delegate_outputs.LAST.reused > 0  # the shortcut was taken, not only the fallback
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
    _same_as_reference("executorch_llama-dynamic", "dq+xnnpack", "reuse", monkeypatch)


def test_run_mode_binds_nothing_and_reuses_nothing(monkeypatch):
    delegate_outputs.uninstall()
    monkeypatch.setenv("FASTLOWER_DELEGATE_OUTPUTS", "run")
    with delegate_outputs.known_outputs() as scope:
        assert scope is None
    assert not delegate_outputs.installed()


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
    scope = delegate_outputs._Scope("reuse")
    recorded = [arg.meta["val"] for arg in node.args[1:]]

    def args(values):
        return tuple(ProxyValue(value, None) for value in values)

    known = delegate_outputs._known(scope, lowered, args(recorded))
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
        assert delegate_outputs._known(scope, lowered, args([wrong])) is None
    with mode:
        graded = torch.empty(2, 3, requires_grad=True)
    assert delegate_outputs._known(scope, lowered, args([graded])) is None


def test_a_difference_in_verify_mode_is_a_typed_error():
    error = delegate_outputs.DelegateOutputsVerificationError("call_delegate", "shape")
    assert isinstance(error, AssertionError) and "FASTLOWER_DELEGATE_OUTPUTS=run" in str(error)
    lowered, node = _lowered_module()
    recorded = node.meta["val"]
    assert delegate_outputs._outputs_difference(tuple(recorded), tuple(recorded)) is None
    assert delegate_outputs._outputs_difference(tuple(recorded), list(recorded)) is not None
    assert "output 1" in delegate_outputs._outputs_difference(
        tuple(recorded), (recorded[0], recorded[0].unsqueeze(0)))
