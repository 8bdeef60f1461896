"""Programs as users make them, for tests and benchmarks (no download, random weights).

* ``executorch_llama``: ExecuTorch's own ``examples/models/llama`` Transformer, built from
  a small params dict the way ``export_llm`` does (``ModelArgs(**params)`` then
  ``construct_transformer``);
* ``hf_llama`` / ``hf_gpt2``: Hugging Face decoders built from a config
  (``transformers``, an optional dependency: the ``test`` and ``bench`` extras);
* ``fastlower_llama``: fastlower's own bundled decoder (:mod:`.llama`).

``edge_program(name, n_layers)`` exports one with ``torch.export`` and runs plain
``to_edge`` (``linear`` decomposed into ``permute`` + ``addmm``/``mm``, the path of
ExecuTorch's own tests and of every script that calls ``to_edge`` then ``to_backend``);
``aten_program`` stops after ``torch.export``, for ``to_edge_transform_and_lower``.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Tuple

import torch

VOCAB = 128
SEQ_LEN = 8


def executorch_llama(n_layers: int, dim: int = 64) -> Tuple[torch.nn.Module, Tuple[Any, ...]]:
    from executorch.examples.models.llama.llama_transformer import construct_transformer
    from executorch.examples.models.llama.model_args import ModelArgs

    params: Dict[str, Any] = {"dim": dim, "n_layers": n_layers, "n_heads": 4, "n_kv_heads": 2,
                              "vocab_size": VOCAB, "hidden_dim": 2 * dim, "norm_eps": 1e-5,
                              "max_seq_len": 32, "max_context_len": 32, "use_kv_cache": False}
    model = construct_transformer(ModelArgs(**params)).eval()
    return model, (torch.randint(0, VOCAB, (1, SEQ_LEN)),)


def hf_llama(n_layers: int, dim: int = 64) -> Tuple[torch.nn.Module, Tuple[Any, ...]]:
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(hidden_size=dim, intermediate_size=2 * dim, num_hidden_layers=n_layers,
                         num_attention_heads=4, num_key_value_heads=2, vocab_size=VOCAB,
                         max_position_embeddings=64, use_cache=False)
    return LlamaForCausalLM(config).eval(), (torch.randint(0, VOCAB, (1, SEQ_LEN)),)


def hf_gpt2(n_layers: int, dim: int = 64) -> Tuple[torch.nn.Module, Tuple[Any, ...]]:
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(n_embd=dim, n_layer=n_layers, n_head=4, vocab_size=VOCAB, n_positions=64,
                        use_cache=False)
    return GPT2LMHeadModel(config).eval(), (torch.randint(0, VOCAB, (1, SEQ_LEN)),)


def fastlower_llama(n_layers: int) -> Tuple[torch.nn.Module, Tuple[Any, ...]]:
    """fastlower's bundled decoder (:mod:`fastlower.frontends.examples.llama`), its own
    default size."""
    from .llama import build_llama, example_inputs

    model = build_llama(n_layers)
    return model, example_inputs(model.cfg)


MODELS: Dict[str, Callable[[int], Tuple[torch.nn.Module, Tuple[Any, ...]]]] = {
    "executorch_llama": executorch_llama, "hf_llama": hf_llama, "hf_gpt2": hf_gpt2,
    "fastlower_llama": fastlower_llama}


def aten_program(name: str, n_layers: int, seed: int = 0) -> torch.export.ExportedProgram:
    """``torch.export.export`` of model ``name`` (a key of :data:`MODELS`)."""
    torch.manual_seed(seed)
    model, inputs = MODELS[name](n_layers)
    with torch.no_grad():
        return torch.export.export(model, inputs)


def edge_program(name: str, n_layers: int, seed: int = 0):
    """The Edge program plain ``to_edge`` makes of model ``name``."""
    from executorch.exir import to_edge

    return to_edge(aten_program(name, n_layers, seed)).exported_program()


def transform_and_lower_program(name: str, n_layers: int, partitioner: Any, seed: int = 0):
    """The Edge program ``to_edge_transform_and_lower(aten, partitioner=[partitioner])``
    hands to ``partitioner`` (ops the partitioner asks to keep are not decomposed: XNNPACK
    keeps ``linear``).  Uses ExecuTorch's own helper for that step
    (``executorch.exir.program._program._gen_edge_manager_for_partitioners``, private)."""
    from executorch.exir import EdgeCompileConfig
    from executorch.exir.program._program import _gen_edge_manager_for_partitioners

    manager = _gen_edge_manager_for_partitioners({"forward": [partitioner]},
                                                 {"forward": aten_program(name, n_layers, seed)},
                                                 EdgeCompileConfig(), None, False)
    return manager.exported_program()
