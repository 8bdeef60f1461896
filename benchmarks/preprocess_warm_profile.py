"""Where a warm-cache lowering's time goes: ``preprocess_warm_profile.py LAYERS CACHE_DIR cold``
lowers once with 2 workers filling CACHE_DIR, then re-runs itself in a new process
(``warm``) that lowers again under cProfile and prints phases and the top functions."""
import logging
import subprocess
import sys
import time
import warnings


def main() -> None:
    # a diagnostic script: quiet before the imports below, whose warnings are noise here
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    layers, cache, mode = int(sys.argv[1]), sys.argv[2], sys.argv[3]
    import fastlower
    import fastlower.preprocess as pp
    from fastlower.frontends.examples.llama import edge_llama
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

    program, _ = edge_llama(layers)
    if mode == "cold":
        t = time.perf_counter()
        with pp.options(workers=2, cache_dir=cache):
            fastlower.to_backend(program, XnnpackPartitioner())
        r = fastlower.last_report()
        print("cold", time.perf_counter() - t, r.phases, r.external, flush=True)
        subprocess.run([sys.executable, __file__, str(layers), cache, "warm"], check=True)
    else:
        import cProfile
        import pstats

        prof = cProfile.Profile()
        t = time.perf_counter()
        with pp.options(workers=2, cache_dir=cache):
            prof.enable()
            fastlower.to_backend(program, XnnpackPartitioner())
            prof.disable()
        r = fastlower.last_report()
        print("warm", time.perf_counter() - t, r.phases, r.external, r.cache_hits, flush=True)
        pstats.Stats(prof).sort_stats("cumulative").print_stats(25)


if __name__ == "__main__":
    main()
