"""Where a warm-cache lowering's time goes: ``preprocess_warm_profile.py LAYERS CACHE_DIR cold``
lowers once with 2 workers filling CACHE_DIR, then re-runs itself in a new process
(``warm``) that lowers again under cProfile and prints phases and the top functions."""
import sys, time, warnings, logging, json, subprocess, os
warnings.filterwarnings("ignore"); logging.disable(logging.WARNING)
layers = int(sys.argv[1]); cache = sys.argv[2]; mode = sys.argv[3]
import fastlower, fastlower.preprocess as pp
from fastlower.examples.llama import edge_llama
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
    import cProfile, pstats
    prof = cProfile.Profile()
    t = time.perf_counter()
    with pp.options(workers=2, cache_dir=cache):
        prof.enable()
        fastlower.to_backend(program, XnnpackPartitioner())
        prof.disable()
    r = fastlower.last_report()
    print("warm", time.perf_counter() - t, r.phases, r.external, r.cache_hits, flush=True)
    pstats.Stats(prof).sort_stats("cumulative").print_stats(25)
