"""Small programs, one or two operators each, chosen for what the edge stage's retraces
and passes do to them: decompositions that leave dead nodes or multi-output nodes
(``chunk``, ``layer_norm``, ``topk``), symbolic and data-dependent sizes, a buffer
written in place, tied weights and a lifted constant, pt2e-quantized convolutions with a
zero output channel; repeated blocks (gated, attention) with one block's bias zero or
NaN, whose partitions fastlower derives from one another; and two-layer Hugging Face
models of four more families built from configs. Each is exported afresh per call (seeded)."""

from __future__ import annotations

from typing import Any, Callable, Dict

import torch
import torch.nn.functional as F
from torch import nn


def _position(p: torch.Tensor, high: int) -> Any:
    value = p.item()
    torch._check(value >= 0)
    torch._check(value <= high)
    return value


class _Chunks(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 8)

    def forward(self, x):
        parts = self.linear(x).chunk(4, -1)
        return sum(part.sum() for part in parts) + x.split([3, 5], -1)[1].mean()


class _Norms(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear, self.norm = nn.Linear(8, 8), nn.LayerNorm(8)

    def forward(self, x):
        h = self.norm(self.linear(x))
        return h.topk(3, -1)[0].sum(-1) + h.var(-1) + torch.log_softmax(h, -1)[..., 0]


class _Cache(nn.Module):
    """A buffer written at a data-dependent position (``item()``)."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 8)
        self.register_buffer("cache", torch.zeros(8, 8))

    def forward(self, x, p):
        at = _position(p, 6)
        self.cache[at:at + 2] = self.linear(x)
        return self.cache.sum(0)


class _Tied(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed, self.out = nn.Embedding(16, 8), nn.Linear(8, 16, bias=False)
        self.out.weight = self.embed.weight

    def forward(self, ids):
        return self.out(self.embed(ids) + torch.tensor([1.0, 0, 0, 0, 0, 0, 0, 2.0]))


class _Convs(nn.Module):
    """Depthwise, transposed and pointwise convolutions; ``zero``: an output channel of
    zeros, a zero bias and a uniform depthwise filter (quantization scales at their edge)."""

    def __init__(self, zero: bool = False) -> None:
        super().__init__()
        self.depthwise = nn.Conv2d(4, 4, 3, groups=4, padding=1)
        self.up = nn.ConvTranspose2d(4, 3, 2, stride=2)
        self.pointwise = nn.Conv2d(3, 6, 1)
        if zero:
            with torch.no_grad():
                self.pointwise.weight[2].zero_()
                self.pointwise.bias.zero_()
                self.depthwise.weight[1].fill_(2.0)

    def forward(self, x):
        return self.pointwise(self.up(F.relu6(self.depthwise(x))))


class _Rms(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 8)

    def forward(self, x):
        return self.linear(x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))


class _GatedBlock(nn.Module):
    """Norm, a projection ``chunk`` ed in two (a decomposed ``split``), SiLU gate."""

    def __init__(self) -> None:
        super().__init__()
        self.norm, self.up, self.down = nn.LayerNorm(8), nn.Linear(8, 16), nn.Linear(8, 8)

    def forward(self, x):
        gate, value = self.up(self.norm(x)).chunk(2, -1)
        return x + self.down(F.silu(gate) * value)


class _AttentionBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.qkv, self.out = nn.Linear(8, 24), nn.Linear(8, 8)

    def forward(self, x):
        def heads(t):
            return t.view(1, -1, 2, 4).transpose(1, 2)

        q, k, v = self.qkv(x).split(8, -1)
        y = F.scaled_dot_product_attention(heads(q), heads(k), heads(v), is_causal=True)
        return x + self.out(y.transpose(1, 2).reshape(1, -1, 8))


def _blocks(block: type, adversarial: str) -> nn.Module:
    """Four copies of ``block`` (their partitions derived from one another), one block's
    weights chosen against a premise: a zero bias, or a NaN in a bias."""
    model = nn.Sequential(*[block() for _ in range(4)]).eval()
    first = next(m for m in model[1].modules() if isinstance(m, nn.Linear))
    with torch.no_grad():
        if adversarial == "zero-bias":
            first.bias.zero_()
        else:
            first.bias[0] = float("nan")
    return model


class _Branches(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 8)

    def forward(self, x):
        return torch.cond(x.sum() > 0, lambda y: self.a(y).relu(), lambda y: self.b(y).abs(),
                          (x,))


class _Mapped(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(8, 8)

    def forward(self, xs):
        from torch._higher_order_ops.map import map as mapped

        return mapped(lambda x: self.a(x).relu(), xs)


# control flow: ExecuTorch lowers these through to_edge then to_backend (its
# to_edge_transform_and_lower leaves a linear in a branch undecomposed and refuses it)
CONTROL_FLOW: Dict[str, Callable[[], torch.export.ExportedProgram]] = {
    "cond": lambda: torch.export.export(_Branches().eval(), (torch.randn(3, 8),)),
    "map": lambda: torch.export.export(_Mapped().eval(), (torch.randn(2, 3, 8),)),
}


def methods() -> Dict[str, torch.export.ExportedProgram]:
    """Two methods: the ``chunks`` program and a convolution with a group norm."""
    torch.manual_seed(0)
    conv = nn.Sequential(nn.Conv2d(3, 4, 3), nn.GroupNorm(2, 4)).eval()
    with torch.no_grad():
        return {"forward": PROGRAMS["chunks"](),
                "encode": torch.export.export(conv, (torch.randn(1, 3, 8, 8),))}


def _pt2e(model: nn.Module, inputs: tuple) -> torch.export.ExportedProgram:
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer, get_symmetric_quantization_config,
    )
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    quantizer = XNNPACKQuantizer().set_global(
        get_symmetric_quantization_config(is_per_channel=True))
    module = prepare_pt2e(torch.export.export(model, inputs).module(), quantizer)
    module(*inputs)
    return torch.export.export(convert_pt2e(module), inputs)


class _Logits(nn.Module):
    """A Hugging Face model's first output (no cache), as users export it."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, ids):
        return self.model(input_ids=ids)[0]


def _hugging_face(family: str) -> torch.export.ExportedProgram:
    """A two-layer model of ``family`` built from a config (no download)."""
    import transformers

    small = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                 num_attention_heads=4)
    configs = {
        "bert": (transformers.BertConfig, transformers.BertModel, {}),
        "qwen2": (transformers.Qwen2Config, transformers.Qwen2ForCausalLM,
                  {"num_key_value_heads": 2, "use_cache": False}),
        "gemma": (transformers.GemmaConfig, transformers.GemmaForCausalLM,
                  {"num_key_value_heads": 2, "head_dim": 8, "use_cache": False}),
        "gpt_neox": (transformers.GPTNeoXConfig, transformers.GPTNeoXForCausalLM,
                     {"use_cache": False}),
    }
    config_class, model_class, extra = configs[family]
    model = model_class(config_class(**small, **extra)).eval()
    return torch.export.export(_Logits(model), (torch.tensor([[1, 5, 7, 9]]),), strict=False)


HUGGING_FACE = ("bert", "qwen2", "gemma", "gpt_neox")


def _seq() -> Any:
    return torch.export.Dim("seq", min=2, max=16)


PROGRAMS: Dict[str, Callable[[], torch.export.ExportedProgram]] = {
    "chunks": lambda: torch.export.export(_Chunks(), (torch.randn(3, 8),)),
    "norms": lambda: torch.export.export(_Norms(), (torch.randn(2, 4, 8),)),
    "norms-dynamic": lambda: torch.export.export(
        _Norms(), (torch.randn(2, 4, 8),), dynamic_shapes=({1: _seq()},)),
    "rms-dynamic": lambda: torch.export.export(
        _Rms(), (torch.randn(2, 4, 8),), dynamic_shapes=({1: _seq()},)),
    "cache-item": lambda: torch.export.export(_Cache(), (torch.randn(2, 8), torch.tensor(1))),
    "tied-constant": lambda: torch.export.export(_Tied(), (torch.tensor([[1, 5, 7]]),)),
    "convs": lambda: torch.export.export(_Convs().eval(), (torch.randn(1, 4, 6, 6),)),
    "convs-pt2e-zero": lambda: _pt2e(_Convs(zero=True).eval(), (torch.randn(1, 4, 6, 6),)),
    "gated-blocks-zero-bias": lambda: torch.export.export(
        _blocks(_GatedBlock, "zero-bias"), (torch.randn(1, 5, 8),)),
    "attention-blocks-nan": lambda: torch.export.export(
        _blocks(_AttentionBlock, "nan"), (torch.randn(1, 5, 8),)),
}


def program(name: str) -> torch.export.ExportedProgram:
    torch.manual_seed(0)
    with torch.no_grad():
        if name in HUGGING_FACE:
            return _hugging_face(name)
        return {**PROGRAMS, **CONTROL_FLOW}[name]()
