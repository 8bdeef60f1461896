"""The ``to_backend(backend_id, edge_program, compile_specs)`` overload."""

import warnings

import pytest
import torch
from executorch.exir import to_edge
from executorch.exir.backend.compile_spec_schema import CompileSpec
from torch.export import export

from tests.differential import harness as H
from tests.models.basic import build_conv_relu_tan


class SinAdd(torch.nn.Module):
    def forward(self, x, y):
        return torch.sin(x) + y


def _sin_add_ep():
    x = torch.linspace(-1, 1, 6).reshape(2, 3)
    return to_edge(export(SinAdd(), (x, x * 2), strict=True)).exported_program()


CASES = {
    "delegate_mapping_demo": (
        lambda: build_conv_relu_tan().epm.exported_program(),
        "BackendWithDelegateMappingDemo",
        [],
    ),
    "compiler_demo_with_specs": (
        _sin_add_ep,
        "BackendWithCompilerDemo",
        [CompileSpec("max_value", bytes([4])), CompileSpec("k", b"v")],
    ),
}


@pytest.mark.parametrize("name", list(CASES))
def test_backend_id_overload(name, impl_under_test):
    make, backend_id, specs = CASES[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ref_in, got_in = make(), make()
        ref = H.REFERENCE(backend_id, ref_in, list(specs))
        got = impl_under_test(backend_id, got_in, list(specs))
    H.assert_same_lowering(ref, got)
    if name == "delegate_mapping_demo":
        # non-trivial mapping: conv+relu fused -> 2 handles in one entry
        assert any(len(v) == 2 for v in ref.meta["debug_handle_map"].values())


def test_backend_id_overload_unknown_backend(impl_under_test):
    with pytest.raises(NotImplementedError) as ref:
        H.REFERENCE("NoSuchBackend", _sin_add_ep(), [])
    assert str(ref.value) == "Backend NoSuchBackend was not found."
    with pytest.raises(Exception) as got:
        impl_under_test("NoSuchBackend", _sin_add_ep(), [])
    H.assert_same_error(
        H.LoweringError(type(ref.value), str(ref.value), {}, {}),
        H.LoweringError(type(got.value), H.normalize_message(str(got.value)), {}, {}),
    )
