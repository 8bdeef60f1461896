"""One export of a model with an LLM's big ends, through the lowering cache (issue 50).

``python benchmarks/big_hit_run.py OUT.json [--vocab V] [--dim D] [--layers L]
[--profile PROF]``, with ``FASTLOWER_CACHE_DIR`` set: builds :class:`BigEnds` (an
embedding and an output projection of ``V x D``, as Llama 3.2 1B's ``128256 x 2048``,
around ``L`` small blocks), quantizes its linears ``8da4w`` as ExecuTorch's
``export_llm`` does (torchao ``Int8DynamicActivationIntxWeightConfig``, int4, group
32; the embedding stays float32, as there), exports it, then lowers it with
``fastlower.cache.to_edge_transform_and_lower`` (``XnnpackPartitioner``) and
``fastlower.cache.to_executorch`` (``--reference``: ExecuTorch's own functions), and
writes the ``.pte``. ``OUT.json`` gets the
lowering cache's status and step times, each call's seconds, the ``.pte``'s size and
sha256, the process's peak RSS, and each lowering-cache lookup's seconds (the entry
read, authenticated and decoded). With ``--profile`` the two calls run under cProfile
(``PROF``: pstats); with ``--evict`` the cache folder's files are first dropped from
the page cache (``posix_fadvise(DONTNEED)`` on those files only), so the hit reads them
from the disk. ``FASTLOWER_BENCH_SRC=DIR`` imports fastlower from the source tree
``DIR`` (another commit's ``src``, its native core copied in) instead of the installed
one. ``test_big_hit_bench.py`` runs it cold, then as hits.
"""

from __future__ import annotations

import argparse
import cProfile
import hashlib
import json
import os
import resource
import sys
import time
import warnings
from pathlib import Path

if os.environ.get("FASTLOWER_BENCH_SRC"):  # another tree's fastlower, not the editable one
    sys.meta_path[:] = [f for f in sys.meta_path
                        if type(f).__name__ != "ScikitBuildRedirectingFinder"]
    sys.path.insert(0, os.environ["FASTLOWER_BENCH_SRC"])

import torch  # noqa: E402


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


def evict(folder: Path) -> int:
    """Drops the folder's files from the page cache; their bytes."""
    dropped = 0
    for path in folder.rglob("*"):
        if path.is_file():
            with open(path, "rb") as file:
                os.posix_fadvise(file.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
            dropped += path.stat().st_size
    return dropped


def timed_lookups(access) -> list:
    """Wraps ``access.lookup``: each call's key and seconds, in order."""
    lookups = []
    lookup = access.lookup

    def timed(store, key):
        start = time.perf_counter()
        try:
            return lookup(store, key)
        finally:
            lookups.append([key.split(":")[0], time.perf_counter() - start])

    access.lookup = timed
    return lookups


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--vocab", type=int, default=32000)
    parser.add_argument("--dim", type=int, default=2048)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--profile", default=None)
    parser.add_argument("--evict", action="store_true")
    parser.add_argument("--reference", action="store_true",
                        help="ExecuTorch's own functions, no fastlower")
    args = parser.parse_args()

    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

    import fastlower
    import fastlower.cache
    from fastlower.cache import access

    warnings.simplefilter("ignore")
    lookups = timed_lookups(access)
    start = time.perf_counter()
    program = exported(args.vocab, args.dim, args.layers)
    export_seconds = time.perf_counter() - start
    evicted = evict(Path(os.environ["FASTLOWER_CACHE_DIR"])) if args.evict else 0
    profiler = cProfile.Profile() if args.profile else None
    if profiler is not None:
        profiler.enable()
    start = time.perf_counter()
    if args.reference:
        from executorch.exir import to_edge_transform_and_lower

        manager = to_edge_transform_and_lower(program, partitioner=[XnnpackPartitioner()])
        lowered = time.perf_counter()
        et = manager.to_executorch()
    else:
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
    out.with_suffix(".pte").unlink()  # ~the model's size each run: hashed, not kept
    report = fastlower.report_for(manager) if not args.reference else None
    out.write_text(json.dumps({
        "vocab": args.vocab, "dim": args.dim, "layers": args.layers,
        "fastlower": fastlower.__file__, "evicted_bytes": evicted, "lookups": lookups,
        "impl": "reference" if args.reference else "fastlower",
        "lowering_cache": report.lowering_cache if report else None,
        "key": report.lowering_cache_key if report else None,
        "cache_seconds": dict(report.lowering_cache_seconds) if report else {},
        "export_seconds": export_seconds,
        "lower_seconds": lowered - start, "to_executorch_seconds": executorch_done - lowered,
        "write_seconds": end - executorch_done, "window_seconds": end - start,
        "pte_bytes": len(pte), "pte_sha256": hashlib.sha256(pte).hexdigest(),
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))


if __name__ == "__main__":
    sys.exit(main())
