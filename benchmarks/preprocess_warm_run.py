"""One warm-cache lowering in a new process (used by test_preprocess_bench.py).

``python benchmarks/preprocess_warm_run.py LAYERS CACHE_DIR WORKERS`` exports the
bundled decoder, lowers it with XNNPACK through ``fastlower.to_backend`` with
the cache in CACHE_DIR and prints one JSON line: the ``to_backend`` seconds,
cache hits/misses and the output's digest.
"""

import json
import logging
import sys
import time
import warnings


def main() -> None:
    layers, cache_dir, workers = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

    import fastlower
    import fastlower.preprocess as pp
    from fastlower.frontends.examples.llama import edge_llama

    from test_preprocess_bench import output_digest

    program, _ = edge_llama(layers)
    start = time.perf_counter()
    with pp.options(workers=workers, cache_dir=cache_dir):
        lowered = fastlower.to_backend(program, XnnpackPartitioner())
    seconds = time.perf_counter() - start
    report = fastlower.last_report()
    print(json.dumps({"seconds": seconds, "hits": report.cache_hits,
                      "misses": report.cache_misses, "digest": output_digest(lowered),
                      "key_seconds": report.cache_key_seconds,
                      "phases": report.phases, "external": report.external}))


if __name__ == "__main__":
    main()
