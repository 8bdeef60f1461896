"""Export one model and lower it with fastlower in this process (a subprocess of the tests).

``python -m tests.pipeline.lower_model MODEL OUT_DIR [--cache-dir DIR] [--workers N]``
writes ``OUT_DIR/model.pte`` and ``OUT_DIR/result.json`` (cache hits and misses of
each ``to_backend`` call). MODEL is one of :data:`MODELS`: the bundled decoder and
Hugging Face decoders built from configs (no download), exported with
``strict=False`` as users export them, lowered through ``to_edge_transform_and_lower``
with XNNPACK.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Callable, Dict, Tuple

import torch


def _decoder():
    from fastlower.frontends.examples.llama import build_llama, example_inputs

    model = build_llama(2)
    return model, example_inputs(model.cfg)


def _hf(kind: str):
    import transformers

    torch.manual_seed(0)
    if kind == "llama":
        config = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128,
                                          num_hidden_layers=2, num_attention_heads=4,
                                          num_key_value_heads=2, max_position_embeddings=64)
        model = transformers.LlamaForCausalLM(config)
    else:
        config = transformers.GPT2Config(vocab_size=128, n_embd=64, n_layer=2, n_head=4,
                                         n_positions=64)
        model = transformers.GPT2LMHeadModel(config)
    model.eval()
    model.config.use_cache = False
    ids = torch.randint(0, 128, (1, 8), generator=torch.Generator().manual_seed(1))
    return model, (ids,)


MODELS: Dict[str, Callable[[], Tuple[torch.nn.Module, tuple]]] = {
    "decoder": _decoder,
    "hf-llama": lambda: _hf("llama"),
    "hf-gpt2": lambda: _hf("gpt2"),
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model", choices=sorted(MODELS))
    parser.add_argument("out_dir", type=Path)
    parser.add_argument("--cache-dir", type=Path)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--lowering-cache", action="store_true",
                        help="also the whole-call lowering cache (default: preprocess cache only)")
    args = parser.parse_args()

    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

    import contextlib

    import fastlower
    import fastlower.cache
    import fastlower.patch
    import fastlower.preprocess

    model, inputs = MODELS[args.model]()
    with torch.no_grad():
        aten = torch.export.export(model, inputs, strict=False)
    lowering_cache = contextlib.nullcontext() if args.lowering_cache else fastlower.cache.disabled()
    with fastlower.patch.installed(), fastlower.preprocess.options(
            cache_dir=args.cache_dir, workers=args.workers), lowering_cache:
        # imported as a script does, where fastlower.patch has bound it (a name imported
        # before installed() would keep ExecuTorch's own function)
        from executorch.exir import to_edge_transform_and_lower

        manager = to_edge_transform_and_lower(aten, partitioner=[XnnpackPartitioner()])
        report = fastlower.report_for(manager)
        pte = manager.to_executorch().buffer
    args.out_dir.mkdir(parents=True, exist_ok=True)
    (args.out_dir / "model.pte").write_bytes(pte)
    (args.out_dir / "result.json").write_text(json.dumps({
        "hits": sum(report.cache_hits.values()), "misses": sum(report.cache_misses.values()),
        "partitions": len(report.partition_records), "lowering_cache": report.lowering_cache}))


if __name__ == "__main__":
    main()
