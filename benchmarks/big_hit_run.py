"""One export of a model with an LLM's big ends, through the lowering cache (issue 50).

``python benchmarks/big_hit_run.py OUT.json [--vocab V] [--dim D] [--layers L]
[--profile PROF]``, with ``FASTLOWER_CACHE_DIR`` set: builds :class:`BigEnds` (an
embedding and an output projection of ``V x D``, as Llama 3.2 1B's ``128256 x 2048``,
around ``L`` small blocks), quantizes its linears ``8da4w`` as ExecuTorch's
``export_llm`` does (torchao ``Int8DynamicActivationIntxWeightConfig``, int4, group
32; the embedding stays float32, as there), exports it, then lowers it with
``fastlower.cache.to_edge_transform_and_lower`` (``XnnpackPartitioner``) and
``fastlower.cache.to_executorch``, and writes the ``.pte``. ``OUT.json`` gets the
lowering cache's status and step times, each call's seconds, the ``.pte``'s size and
sha256, and the process's peak RSS. With ``--profile`` the two calls run under
cProfile (``PROF``: pstats). ``test_big_hit_bench.py`` runs it cold, then as hits.
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import json
import resource
import sys
import time
import warnings
from pathlib import Path

import torch


class Block(torch.nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(dim, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.nn.functional.silu(self.linear(x))


class BigEnds(torch.nn.Module):
    """An embedding, ``layers`` blocks and an output projection: an LLM's big ends."""

    def __init__(self, vocab: int, dim: int, layers: int) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, dim)
        self.blocks = torch.nn.ModuleList(Block(dim) for _ in range(layers))
        self.output = torch.nn.Linear(dim, vocab, bias=False)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.embed(tokens)
        for block in self.blocks:
            h = block(h)
        return self.output(h)


def exported(vocab: int, dim: int, layers: int) -> torch.export.ExportedProgram:
    from torchao.quantization import Int8DynamicActivationIntxWeightConfig, quantize_
    from torchao.quantization.granularity import PerGroup

    torch.manual_seed(0)
    model = BigEnds(vocab, dim, layers).eval()
    quantize_(model, Int8DynamicActivationIntxWeightConfig(
        weight_dtype=torch.int4, weight_granularity=PerGroup(32)),
        filter_fn=lambda m, fqn: isinstance(m, torch.nn.Linear))
    tokens = torch.zeros(1, 8, dtype=torch.long)
    with torch.no_grad():
        return torch.export.export(model, (tokens,), strict=False)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--dim", type=int, default=2048)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--profile", default=None)
    args = parser.parse_args()

    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

    import fastlower
    import fastlower.cache

    warnings.simplefilter("ignore")
    start = time.perf_counter()
    program = exported(args.vocab, args.dim, args.layers)
    export_seconds = time.perf_counter() - start
    profiler = cProfile.Profile() if args.profile else None
    if profiler is not None:
        profiler.enable()
    start = time.perf_counter()
    manager = fastlower.cache.to_edge_transform_and_lower(
        program, partitioner=[XnnpackPartitioner()])
    lowered = time.perf_counter()
    et = fastlower.cache.to_executorch(manager)
    executorch_done = time.perf_counter()
    out = Path(args.out)
    with open(out.with_suffix(".pte"), "wb") as file:
        et.write_to_file(file)
    end = time.perf_counter()
    if profiler is not None:
        profiler.disable()
        profiler.dump_stats(args.profile)
    pte = out.with_suffix(".pte").read_bytes()
    report = fastlower.report_for(manager)
    out.write_text(json.dumps({
        "vocab": args.vocab, "dim": args.dim, "layers": args.layers,
        "lowering_cache": report.lowering_cache, "key": report.lowering_cache_key,
        "cache_seconds": dict(report.lowering_cache_seconds),
        "export_seconds": export_seconds,
        "lower_seconds": lowered - start, "to_executorch_seconds": executorch_done - lowered,
        "write_seconds": end - executorch_done, "window_seconds": end - start,
        "pte_bytes": len(pte), "pte_sha256": hashlib.sha256(pte).hexdigest(),
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))


if __name__ == "__main__":
    sys.exit(main())
