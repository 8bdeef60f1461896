"""Peak RSS growth of one ``to_backend`` call on a large-weight decoder, in this process.

Run by ``test_memory_bench.py``, one fresh process per implementation, so that
neither measurement inherits the other's heap::

    python benchmarks/memory_probe.py --impl fastlower --layers 11 --dim 1024 --hidden 2816

Builds the bundled decoder (``fastlower.frontends.examples.llama``) with the given size,
exports it to Edge, learns XNNPACK's tags once (outside the measurement), then
measures ``to_backend(program, PretaggedPartitioner(tags))`` (no-op backend) or
``to_backend(program, XnnpackPartitioner())`` with :class:`benchlib.PeakRss`.
Prints one JSON line: weights bytes, baseline and peak RSS, growth.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--impl", choices=["fastlower", "reference"], required=True)
    parser.add_argument("--backend", choices=["noop", "xnnpack"], default="noop")
    parser.add_argument("--layers", type=int, default=11)
    parser.add_argument("--dim", type=int, default=1024)
    parser.add_argument("--hidden", type=int, default=2816)
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    warnings.simplefilter("ignore")

    import benchlib
    from fastlower.frontends.examples.llama import edge_llama

    program, _ = edge_llama(args.layers, dim=args.dim, hidden_dim=args.hidden)
    weights = sum(t.numel() * t.element_size() for t in program.state_dict.values())
    weights += sum(t.numel() * t.element_size() for t in program.constants.values()
                   if hasattr(t, "element_size"))
    if args.backend == "noop":
        partitioner = benchlib.PretaggedPartitioner(benchlib.xnnpack_tags(program), "xnnpack-tags")
    else:
        from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

        partitioner = XnnpackPartitioner()
    if args.impl == "fastlower":
        import fastlower
        import fastlower.core.plan

        to_backend = fastlower.to_backend
        assert fastlower.core.plan.backend_module() is not None, "native core not loaded"
    else:
        from executorch.exir.backend.backend_api import to_backend

    workers = None
    if args.impl == "fastlower":
        from fastlower.preprocess.configuration import resolve

        workers = resolve().workers
    benchlib.PeakRss.prepare()
    t = time.perf_counter()
    with benchlib.MachinePeak() as machine, benchlib.PeakRss() as rss:
        lowered = to_backend(program, partitioner)
    seconds = time.perf_counter() - t
    n_delegates = len(list(benchlib.lowered_modules(lowered)))
    print(json.dumps({
        "impl": args.impl, "backend": args.backend, "layers": args.layers, "dim": args.dim,
        "hidden": args.hidden, "weights_mib": weights / 2**20,
        "baseline_mib": rss.baseline_kib / 1024,
        "peak_mib": rss.peak_kib / 1024, "growth_mib": rss.growth_mib, "method": rss.method,
        "machine_growth_mib": machine.growth_mib, "workers": workers,
        "seconds": seconds, "delegates": n_delegates,
    }))


if __name__ == "__main__":
    main()
