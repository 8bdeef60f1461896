"""Programs for the structural-class tests: decoders (the export_llm model class, a
Hugging Face decoder) and a conv net, in fp32, torchao's 8da4w (group-wise 4-bit weights)
and 8da8w per channel (8-bit weights, one scale per row; XNNPACK takes 8-bit group-wise
weights from neither ExecuTorch nor fastlower), the modes export_llm offers, exported
with ``torch.export`` from a seeded model."""

from __future__ import annotations

import torch

FAMILIES = ("executorch_llama", "hf_llama", "conv")
QMODES = ("fp32", "8da4w", "8da8w")


def _quantize(model: torch.nn.Module, qmode: str) -> None:
    if qmode == "fp32":
        return
    from torchao.quantization import Int8DynamicActivationIntxWeightConfig, quantize_
    from torchao.quantization.granularity import PerAxis, PerGroup

    four_bit = qmode == "8da4w"
    quantize_(model, Int8DynamicActivationIntxWeightConfig(
        weight_dtype=torch.int4 if four_bit else torch.int8,
        weight_granularity=PerGroup(32) if four_bit else PerAxis(0)),
        filter_fn=lambda m, fqn: isinstance(m, torch.nn.Linear) and m.weight.shape[1] % 32 == 0)


def aten_program(family: str, qmode: str, n_layers: int = 3, seed: int = 0):
    """``torch.export`` of ``family`` quantized by ``qmode`` (same seed, same program)."""
    from tests.edge.models import ConvNet

    torch.manual_seed(seed)
    if family == "conv":
        model, inputs = ConvNet().eval(), (torch.randn(1, 3, 16, 16),)
    else:
        from fastlower.frontends.examples.user_models import MODELS

        model, inputs = MODELS[family](n_layers)
    _quantize(model, qmode)
    with torch.no_grad():
        return torch.export.export(model, inputs)


def lower(program, partitioners, fastlower: bool):
    """``to_edge_transform_and_lower`` then ``to_executorch``: ExecuTorch's, or under
    ``fastlower.patch``; the manager and the ExecuTorch program."""
    import executorch.exir  # looked up inside the block: a name bound before is the reference

    from fastlower import patch

    if fastlower:
        with patch.installed():
            manager = executorch.exir.to_edge_transform_and_lower(
                program, partitioner=partitioners)
    else:
        manager = executorch.exir.to_edge_transform_and_lower(program, partitioner=partitioners)
    return manager, manager.to_executorch()
