"""Plain models lowered whole or in parts: the bundled Llama with XNNPACK, conv/relu/tan
through the delegate-mapping demo backend, and a partition whose single output is a list.
"""

from __future__ import annotations

import torch
from torch import nn

from executorch.backends.xnnpack.partition.xnnpack_partitioner import (
    XnnpackPartitioner,
)
from executorch.exir.backend.compile_spec_schema import CompileSpec
from executorch.exir.backend.test.demo_backend import DemoBackend
from executorch.exir.backend.test.backend_with_delegate_mapping_demo import (
    BackendWithDelegateMappingDemo,
)
from executorch.exir.dialects._ops import ops as exir_ops

from fastlower.frontends.examples.llama import build_llama, example_inputs as llama_inputs
from tests.models.base import (
    Built, _single,
)
from tests.models.partitioners import (
    TargetsPartitioner, WholeGraphPartitioner,
)

_LINEAR = (torch.ops.aten.linear.default,)


def build_llama_case(n_layers: int, preserve_linear: bool = True) -> Built:
    """Same programs as fastlower.frontends.examples.llama.export_llama."""
    model = build_llama(n_layers)
    return _single(
        model,
        [llama_inputs(model.cfg)],
        XnnpackPartitioner(),
        keep_aten=True,
        etl_partitioner=lambda: [XnnpackPartitioner()],
        preserve_ops=_LINEAR if preserve_linear else (),
    )


def build_conv_relu_tan() -> Built:
    """``BackendWithDelegateMappingDemo`` (fuses conv+relu, decomposes tan into
    sin/cos/div) over the whole program -> ``debug_handle_map`` with
    multi-handle entries, e.g. {1: (conv, relu), 2: (...), 3..5: (tan,)}."""
    torch.manual_seed(0)
    model, inputs = BackendWithDelegateMappingDemo.get_test_model_and_inputs()
    small = (inputs[0][:1, :, :16, :16].contiguous(),)
    return _single(
        model,
        [small],
        WholeGraphPartitioner(BackendWithDelegateMappingDemo.__name__),
        strict=True,
    )


def build_conv_relu_tan_split() -> Built:
    """Same model, but only conv/relu/tan are delegated (``getitem``-free
    groups) using a pattern partitioner with compile specs, so the delegate has
    user-input + param placeholders and the owning program keeps nothing."""
    torch.manual_seed(0)
    model, inputs = BackendWithDelegateMappingDemo.get_test_model_and_inputs()
    small = (inputs[0][:1, :, :16, :16].contiguous(),)
    part = TargetsPartitioner(
        [
            exir_ops.edge.aten.convolution.default,
            exir_ops.edge.aten.relu.default,
            exir_ops.edge.aten.tan.default,
        ],
        BackendWithDelegateMappingDemo.__name__,
        [CompileSpec("mapping", b"\x01\x02")],
        tag_constants=True,
    )
    return _single(model, [small], part, strict=True)


class SplitOutput(nn.Module):
    """A partition whose only output is a list-valued node (``split``): the
    reference keeps the fused call's result itself (no ``getitem`` is added for
    a single output that is not a tensor) and the consumers outside the
    partition index into the delegate's output."""

    def forward(self, x):
        a, b = torch.split(x + 1.0, 2)
        return a * 2.0, b - 1.0


def build_split_output() -> Built:
    g = torch.Generator().manual_seed(10)
    part = TargetsPartitioner(
        [exir_ops.edge.aten.add.Tensor, exir_ops.edge.aten.split_with_sizes_copy.default],
        DemoBackend.__name__,
    )
    return _single(SplitOutput(), [(torch.randn(4, 3, generator=g),)], part, strict=True)
