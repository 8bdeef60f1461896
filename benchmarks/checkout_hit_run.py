"""One lowering of a small model, from the checkout this file is copied into (issue 48).

``python export.py OUT.json``, run with the checkout as working directory and
``FASTLOWER_CACHE_DIR`` set (``test_checkout_hit_bench.py`` copies this file into each
checkout as ``export.py``): exports :class:`Blocks` (defined here, so every node's
``stack_trace`` names this checkout's path), lowers it with
``fastlower.cache.to_edge_transform_and_lower`` and ``XnnpackPartitioner``, then
``fastlower.cache.to_executorch``, and writes ``OUT.json``: the lowering cache's status,
key and step times, the window (both calls) in seconds, and the ``.pte``'s sha256.
"""

import hashlib
import json
import sys
import time
import warnings
from pathlib import Path

import torch

BLOCKS = 16
WIDTH = 32


class Block(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.linear(x))
        return (h + x) * 0.5


class Blocks(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = torch.nn.ModuleList(Block() for _ in range(BLOCKS))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return x


def main(out: str) -> None:
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

    import fastlower
    import fastlower.cache

    warnings.simplefilter("ignore")
    torch.manual_seed(0)
    program = torch.export.export(Blocks().eval(), (torch.ones(2, WIDTH),), strict=False)
    start = time.perf_counter()
    manager = fastlower.cache.to_edge_transform_and_lower(
        program, partitioner=[XnnpackPartitioner()])
    lowered = time.perf_counter()
    pte = bytes(fastlower.cache.to_executorch(manager).buffer)
    end = time.perf_counter()
    report = fastlower.report_for(manager)
    Path(out).write_text(json.dumps({
        "lowering_cache": report.lowering_cache, "key": report.lowering_cache_key,
        "cache_seconds": dict(report.lowering_cache_seconds),
        "lower_seconds": lowered - start, "to_executorch_seconds": end - lowered,
        "window_seconds": end - start, "pte_sha256": hashlib.sha256(pte).hexdigest()}))


if __name__ == "__main__":
    main(sys.argv[1])
