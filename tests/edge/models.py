"""Programs for the edge-stage tests: the export_llm model class, a Hugging Face decoder
built from a config (each also with a dynamic sequence length, as export_llm exports:
symbolic sizes, runtime asserts), a small conv net; and XNNPACK's two partitioner
set-ups."""

from __future__ import annotations

import torch

FAMILIES = ("executorch_llama", "hf_llama", "conv", "executorch_llama-dynamic",
            "hf_llama-dynamic")
SETUPS = ("xnnpack", "dq+xnnpack")


class ConvNet(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.conv2 = torch.nn.Conv2d(8, 16, 3, stride=2)
        self.pool = torch.nn.AdaptiveAvgPool2d(1)
        self.fc = torch.nn.Linear(16, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.bn(self.conv1(x)))
        x = torch.nn.functional.hardtanh(self.conv2(x))
        return self.fc(torch.flatten(self.pool(x), 1))


def aten_program(family: str, n_layers: int = 2) -> torch.export.ExportedProgram:
    """``torch.export`` of ``family`` (seeded: two calls give the same program)."""
    if family == "conv":
        torch.manual_seed(0)
        with torch.no_grad():
            return torch.export.export(ConvNet().eval(), (torch.randn(1, 3, 16, 16),))
    from fastlower.frontends.examples.user_models import MODELS

    name, _, dynamic = family.partition("-")
    torch.manual_seed(0)
    model, inputs = MODELS[name](n_layers)
    shapes = ({1: torch.export.Dim("seq", min=1, max=16)},) if dynamic else None
    with torch.no_grad():
        return torch.export.export(model, inputs, dynamic_shapes=shapes)


def partitioners(setup: str) -> list:
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import (
        XnnpackDynamicallyQuantizedPartitioner, XnnpackPartitioner,
    )

    if setup == "xnnpack":
        return [XnnpackPartitioner()]
    return [XnnpackDynamicallyQuantizedPartitioner(), XnnpackPartitioner()]
