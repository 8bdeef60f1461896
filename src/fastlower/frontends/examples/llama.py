"""A tiny Llama-style decoder for exercising backend delegation.

Architecture (per layer): RMSNorm -> causal multi-head attention with rotary
position embeddings (RoPE, real-valued "rotate half" form) -> residual ->
RMSNorm -> SwiGLU MLP -> residual.  No KV cache.  Weights are initialised
deterministically from a fixed seed so that every call of :func:`export_llama`
produces a bit-identical program.

The exported Edge program (plain ``to_edge``, i.e. fully decomposed, the
input expected by ``to_backend(program, partitioner)``) gets split by
``XnnpackPartitioner`` into many partitions, because several ops in the graph
(e.g. the boolean causal-mask ``where``, slicing for RoPE) are not XNNPACK
supported and break the supported regions apart.  With the defaults
(dim 64, 4 heads, vocab 128, seq 8) this gives roughly::

    n_layers  edge nodes  XNNPACK partitions   (preserve_linear=True, default)
    1          94          7
    4         322         22
    8         626         42
    (preserve_linear=False: 118/7, 409/22, 797/42)

(see ``python -m fastlower.frontends.examples.llama`` for the exact numbers).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Tuple

import torch
from torch import nn

__all__ = [
    "LlamaConfig",
    "TinyLlama",
    "build_llama",
    "example_inputs",
    "export_llama",
    "edge_llama",
]

SEED = 0


@dataclass(frozen=True)
class LlamaConfig:
    n_layers: int = 1
    dim: int = 64
    n_heads: int = 4
    vocab_size: int = 128
    seq_len: int = 8
    hidden_dim: int = 172  # ~ 8/3 * dim, SwiGLU convention
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        normed = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return normed * self.weight


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    x1 = x[..., :half]
    x2 = x[..., half:]
    return torch.cat((-x2, x1), dim=-1)


def _apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    return x * cos + _rotate_half(x) * sin


class Attention(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.n_heads = cfg.n_heads
        self.head_dim = cfg.head_dim
        self.wq = nn.Linear(cfg.dim, cfg.dim, bias=False)
        self.wk = nn.Linear(cfg.dim, cfg.dim, bias=False)
        self.wv = nn.Linear(cfg.dim, cfg.dim, bias=False)
        self.wo = nn.Linear(cfg.dim, cfg.dim, bias=False)
        self.scale = 1.0 / math.sqrt(cfg.head_dim)

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        mask: torch.Tensor,
    ) -> torch.Tensor:
        bsz, seqlen, dim = x.shape
        q = self.wq(x).view(bsz, seqlen, self.n_heads, self.head_dim).transpose(1, 2)
        k = self.wk(x).view(bsz, seqlen, self.n_heads, self.head_dim).transpose(1, 2)
        v = self.wv(x).view(bsz, seqlen, self.n_heads, self.head_dim).transpose(1, 2)
        q = _apply_rope(q, cos, sin)
        k = _apply_rope(k, cos, sin)
        scores = torch.matmul(q, k.transpose(2, 3)) * self.scale
        # Causal mask: boolean `where` (not XNNPACK-supported -> partition break).
        scores = torch.where(mask, scores, torch.full_like(scores, float("-inf")))
        probs = torch.softmax(scores, dim=-1)
        out = torch.matmul(probs, v)
        out = out.transpose(1, 2).reshape(bsz, seqlen, dim)
        return self.wo(out)


class FeedForward(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.w1 = nn.Linear(cfg.dim, cfg.hidden_dim, bias=False)
        self.w2 = nn.Linear(cfg.hidden_dim, cfg.dim, bias=False)
        self.w3 = nn.Linear(cfg.dim, cfg.hidden_dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(torch.nn.functional.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.attention_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.attention = Attention(cfg)
        self.ffn_norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.feed_forward = FeedForward(cfg)

    def forward(self, x, cos, sin, mask):
        h = x + self.attention(self.attention_norm(x), cos, sin, mask)
        return h + self.feed_forward(self.ffn_norm(h))


class TinyLlama(nn.Module):
    def __init__(self, cfg: LlamaConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.tok_embeddings = nn.Embedding(cfg.vocab_size, cfg.dim)
        self.layers = nn.ModuleList([Block(cfg) for _ in range(cfg.n_layers)])
        self.norm = RMSNorm(cfg.dim, cfg.norm_eps)
        self.output = nn.Linear(cfg.dim, cfg.vocab_size, bias=False)

        hd = cfg.head_dim
        inv_freq = 1.0 / (
            cfg.rope_theta ** (torch.arange(0, hd, 2, dtype=torch.float32) / hd)
        )
        t = torch.arange(cfg.seq_len, dtype=torch.float32)
        freqs = torch.outer(t, inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("rope_cos", emb.cos(), persistent=False)
        self.register_buffer("rope_sin", emb.sin(), persistent=False)
        self.register_buffer(
            "causal_mask",
            torch.tril(torch.ones(cfg.seq_len, cfg.seq_len, dtype=torch.bool)),
            persistent=False,
        )

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        seqlen = tokens.shape[1]
        h = self.tok_embeddings(tokens)
        cos = self.rope_cos[:seqlen]
        sin = self.rope_sin[:seqlen]
        mask = self.causal_mask[:seqlen, :seqlen]
        for layer in self.layers:
            h = layer(h, cos, sin, mask)
        return self.output(self.norm(h))


def build_llama(n_layers: int = 1, **overrides) -> TinyLlama:
    """A fresh, deterministically initialised model in eval mode."""
    cfg = LlamaConfig(n_layers=n_layers, **overrides)
    gen_state = torch.random.get_rng_state()
    try:
        torch.manual_seed(SEED)
        model = TinyLlama(cfg)
        # Non-trivial RMSNorm weights so that a wrong constant is visible.
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name.endswith("norm.weight"):
                    p.copy_(1.0 + 0.1 * torch.randn_like(p))
    finally:
        torch.random.set_rng_state(gen_state)
    return model.eval()


def example_inputs(cfg: LlamaConfig | None = None) -> Tuple[torch.Tensor]:
    cfg = cfg or LlamaConfig()
    g = torch.Generator().manual_seed(SEED + 1)
    tokens = torch.randint(0, cfg.vocab_size, (1, cfg.seq_len), generator=g)
    return (tokens,)


def export_aten(n_layers: int = 1, **overrides):
    """(model, torch.export ExportedProgram in ATen dialect, example_inputs)."""
    model = build_llama(n_layers, **overrides)
    inputs = example_inputs(model.cfg)
    with torch.no_grad():
        aten = torch.export.export(model, inputs, strict=False)
    return model, aten, inputs


def edge_compile_config(preserve_linear: bool = True):
    from executorch.exir import EdgeCompileConfig

    preserve = [torch.ops.aten.linear.default] if preserve_linear else []
    return EdgeCompileConfig(preserve_ops=preserve)


def export_llama(n_layers: int = 1, *, preserve_linear: bool = True, **overrides):
    """Export the decoder to an Edge-dialect ``EdgeProgramManager``.

    Returns ``(edge_program_manager, example_inputs)``.  The program is
    produced with ``executorch.exir.to_edge`` (the input expected by
    ``to_backend(edge_program, XnnpackPartitioner())`` /
    ``EdgeProgramManager.to_backend``).  With ``preserve_linear`` (default)
    ``aten.linear`` is kept undecomposed, as ``to_edge_transform_and_lower``
    does for XNNPACK, so the partitioner pulls the linear weights into the
    delegates (constants move out of the owning program).  With
    ``preserve_linear=False`` linears decompose to permute_copy + mm/addmm,
    which XNNPACK only partially takes (weights stay top-level inputs).
    Every call builds a new program.
    """
    from executorch.exir import to_edge

    _, aten, inputs = export_aten(n_layers, **overrides)
    epm = to_edge(aten, compile_config=edge_compile_config(preserve_linear))
    return epm, inputs


def edge_llama(n_layers: int = 1, **kwargs):
    """Like :func:`export_llama` but returns ``(ExportedProgram, inputs)``."""
    epm, inputs = export_llama(n_layers, **kwargs)
    return epm.exported_program(), inputs


def eager_reference(n_layers: int, inputs) -> torch.Tensor:
    model = build_llama(n_layers)
    with torch.no_grad():
        return model(*inputs)


def _stats(n_layers: int, preserve_linear: bool = True):  # pragma: no cover - diagnostic helper
    import time

    from executorch.backends.xnnpack.partition.xnnpack_partitioner import (
        XnnpackPartitioner,
    )
    from executorch.exir.backend.backend_api import to_backend
    from executorch.exir.lowered_backend_module import get_lowered_submodules

    t0 = time.perf_counter()
    ep, _ = edge_llama(n_layers, preserve_linear=preserve_linear)
    t1 = time.perf_counter()
    n_nodes = len(ep.graph.nodes)
    lowered = to_backend(ep, XnnpackPartitioner())
    t2 = time.perf_counter()
    n_parts = len(get_lowered_submodules(lowered.graph_module))
    return n_nodes, n_parts, t1 - t0, t2 - t1


if __name__ == "__main__":  # pragma: no cover
    import sys

    for n in [int(a) for a in sys.argv[1:]] or [1, 4, 8]:
        nodes, parts, te, tl = _stats(n)
        sys.stdout.write(
            f"n_layers={n}: edge nodes={nodes} xnnpack partitions={parts} "
            f"export={te:.2f}s to_backend={tl:.2f}s\n"
        )
