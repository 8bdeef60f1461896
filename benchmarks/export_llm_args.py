"""Print ``export_llm``'s command line for a seeded model of a given depth and width.

``python benchmarks/export_llm_args.py --layers 12 --dim 64 OUT_DIR`` writes
``params.json`` and a seeded checkpoint under ``OUT_DIR/model`` (as the export_llm
benchmark does, ``tests/pipeline/export_llm.py``) and prints the arguments of
``python -m executorch.extension.llm.export.export_llm`` (8da4w, KV cache, custom SDPA,
dynamic shapes, XNNPACK), so a shell can time one configuration under several settings.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.pipeline.export_llm import LlmConfig, export_args, model_files  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    config = LlmConfig(f"d{args.dim}l{args.layers}", dim=args.dim, n_layers=args.layers,
                       n_heads=args.heads, vocab_size=args.vocab, hidden_dim=args.hidden,
                       max_seq_length=32)
    files = model_files(config, args.out / "model" / config.weights_name, seed=args.seed)
    print(" ".join(export_args(config, files, args.out)))


if __name__ == "__main__":
    main()
