"""Small programs of repeated blocks, each exported once, whose constants the adversarial
tests and fuzzer then set to values chosen to break a shortcut's premise.

Each structure has three or more blocks of one partition structure (so fastlower's
structural classes derive members) and covers one family of value reads: float linears
with biases, XNNPACK's static int8 quantization (per tensor and per channel, biases
quantized to int32 by the backend), torchao's 8da4w, convolutions, parameters beside
literals of the graph (a gate, a floor-division divisor, an integer buffer), and user
inputs mutated in place.
"""

from __future__ import annotations

import copy
import functools
from typing import Dict, Tuple

import torch

WIDTH = 32  # torchao's 8da4w takes in_features that are multiples of its group (32)


def _apart(x):
    """An operator XNNPACK does not take: each block is a partition of its own."""
    return torch.cumsum(x, dim=-1)


class LinearBlocks(torch.nn.Module):
    def __init__(self, blocks: int = 4, bias: bool = True) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(
            torch.nn.Linear(WIDTH, WIDTH, bias=bias) for _ in range(blocks))

    def forward(self, x):
        for layer in self.layers:
            x = _apart(torch.relu(layer(x)))
        return x


class ConvBlocks(torch.nn.Module):
    def __init__(self, blocks: int = 3) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Conv2d(4, 4, 3, padding=1)
                                          for _ in range(blocks))

    def forward(self, x):
        for layer in self.layers:
            x = _apart(torch.relu(layer(x)))
        return x


class LiteralBlocks(torch.nn.Module):
    """A gate beside the literal 0.5, a floor-division divisor beside the literal 3, an
    integer buffer beside the literal 2: a weight may equal a literal of the graph."""

    def __init__(self, blocks: int = 3) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(WIDTH, WIDTH) for _ in range(blocks))
        self.gate = torch.nn.Parameter(torch.tensor(0.25))
        self.divisor = torch.nn.Parameter(torch.tensor(4.0))
        self.register_buffer("steps", torch.tensor(5))

    def forward(self, x):
        for layer in self.layers:
            x = _apart(layer(x) * self.gate + x * 0.5)
        whole = torch.floor_divide(x, self.divisor) + torch.floor_divide(x, 3.0)
        return whole * (self.steps + 2)


class MutatedInput(torch.nn.Module):
    """A static KV cache passed as an input and updated in place, beside a buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(WIDTH, WIDTH) for _ in range(3))
        self.register_buffer("count", torch.zeros(1))

    def forward(self, x, cache):
        for layer in self.layers:
            x = _apart(torch.relu(layer(x)))
        cache.add_(x)
        self.count.add_(1)
        return x + cache


def _pt2e_int8(model: torch.nn.Module, inputs: tuple, per_channel: bool) -> torch.nn.Module:
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer, get_symmetric_quantization_config,
    )
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    quantizer = XNNPACKQuantizer().set_global(
        get_symmetric_quantization_config(is_per_channel=per_channel))
    prepared = prepare_pt2e(torch.export.export(model, inputs).module(), quantizer)
    prepared(*inputs)
    return _one_activation_scale(convert_pt2e(prepared))


def _one_activation_scale(module: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """Every per-tensor scale and zero point the same literal, so that the blocks (whose
    calibrated ranges differ) are one partition structure, as trained repeated blocks
    with a shared activation range are."""
    per_tensor = {torch.ops.quantized_decomposed.quantize_per_tensor.default,
                  torch.ops.quantized_decomposed.dequantize_per_tensor.default}
    for node in module.graph.nodes:
        if node.op == "call_function" and node.target in per_tensor:
            node.args = (node.args[0], 0.05, 0, *node.args[3:])
    module.recompile()
    return module


def _torchao(model: torch.nn.Module, four_bit: bool) -> torch.nn.Module:
    """torchao's 8da4w (group-wise 4-bit weights) or 8da8w (8-bit, a scale per row)."""
    from torchao.quantization import Int8DynamicActivationIntxWeightConfig, quantize_
    from torchao.quantization.granularity import PerAxis, PerGroup

    quantize_(model, Int8DynamicActivationIntxWeightConfig(
        weight_dtype=torch.int4 if four_bit else torch.int8,
        weight_granularity=PerGroup(32) if four_bit else PerAxis(0)))
    return model


def _linear_input() -> tuple:
    return (torch.randn(2, WIDTH),)


def _build(name: str) -> Tuple[torch.nn.Module, tuple]:
    inputs = _linear_input()
    if name == "fp32_linear":
        return LinearBlocks(), inputs
    if name in ("int8_linear", "int8_linear_per_channel"):
        return _pt2e_int8(LinearBlocks().eval(), inputs, name.endswith("per_channel")), inputs
    if name in ("8da4w_linear", "8da8w_linear"):
        return _torchao(LinearBlocks(3, bias=False), name == "8da4w_linear"), inputs
    if name == "conv":
        return ConvBlocks(), (torch.randn(1, 4, 8, 8),)
    if name == "literals":
        return LiteralBlocks(), inputs
    if name == "mutated_input":
        return MutatedInput(), (torch.randn(2, WIDTH), torch.zeros(2, WIDTH))
    raise KeyError(name)


NAMES = ("fp32_linear", "int8_linear", "int8_linear_per_channel", "8da4w_linear",
         "8da8w_linear", "conv", "literals", "mutated_input")
# the literals each structure's graph holds, for the weight generator
LITERALS: Dict[str, Tuple[float, ...]] = {"literals": (0.5, 3.0, 2.0)}


@functools.lru_cache(maxsize=None)
def _exported(name: str):
    torch.manual_seed(0)
    model, inputs = _build(name)
    if not isinstance(model, torch.fx.GraphModule):  # a PT2E model stays as converted
        model.eval()
    with torch.no_grad():
        return torch.export.export(model, inputs)


def program(name: str):
    """A fresh copy of the structure's exported program (its constants free to change)."""
    return copy.deepcopy(_exported(name))


def example_inputs(name: str) -> tuple:
    return tuple(t.clone() for t in _exported(name).example_inputs[0])


def partitioners(name: str) -> list:
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import (
        XnnpackDynamicallyQuantizedPartitioner, XnnpackPartitioner,
    )

    if name in ("8da4w_linear", "8da8w_linear"):
        return [XnnpackDynamicallyQuantizedPartitioner(), XnnpackPartitioner()]
    return [XnnpackPartitioner()]

