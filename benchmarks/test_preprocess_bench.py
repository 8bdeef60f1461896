"""Parallel preprocess and the preprocess cache, XNNPACK end to end.

For each layer count (``FASTLOWER_BENCH_PREPROCESS_LAYERS``, default ``8,32``),
in one session, on a fresh copy of the same Edge program each:

* ``reference``: ExecuTorch's ``to_backend(program, XnnpackPartitioner())``;
* ``serial``:    ``fastlower.to_backend`` with ``workers=1``, no cache;
* ``cold2``:     ``workers=2`` (``FASTLOWER_BENCH_WORKERS``) and an empty cache;
* ``warm``:      a NEW process (``preprocess_warm_run.py``) lowering with the cache
  ``cold2`` filled; only its ``to_backend`` call is timed.

Every fastlower output is checked against the reference's (graph code,
signature, every delegate's processed bytes). Peak RSS: this process alone,
and this process plus its worker processes (RSS summed, so pages the workers
share copy-on-write are counted once per process: an upper bound), sampled
every 20 ms. Run: ``.venv/bin/python -m pytest benchmarks/test_preprocess_bench.py -s``.
"""

from __future__ import annotations

import copy
import gc
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from pathlib import Path

import psutil
import pytest

HERE = Path(__file__).resolve().parent
LAYERS = [int(x) for x in os.environ.get("FASTLOWER_BENCH_PREPROCESS_LAYERS", "8,32").split(",")]
WORKERS = int(os.environ.get("FASTLOWER_BENCH_WORKERS", "2"))
CONFIGS = ("reference", "serial", "cold2", "warm")
_RESULTS: dict = {}


def output_digest(program) -> str:
    """sha256 over the lowered program's code, signature and every delegate's bytes."""
    from executorch.exir.lowered_backend_module import get_lowered_submodules

    h = hashlib.sha256()
    h.update(program.graph_module.code.encode())
    h.update(str(program.graph_signature).encode())
    for _, module, _ in get_lowered_submodules(program.graph_module):
        h.update(module.backend_id.encode())
        h.update(bytes(module.processed_bytes))
    return h.hexdigest()


class PeakMemory:
    """Peak RSS of this process, and of it plus its children, sampled in a thread."""

    def __init__(self, interval: float = 0.02):
        self.interval = interval
        self.parent_mib = 0.0
        self.total_mib = 0.0
        self._stop = threading.Event()

    def _sample(self) -> None:
        me = psutil.Process()
        while not self._stop.is_set():
            try:
                parent = me.memory_info().rss
                total = parent + sum(c.memory_info().rss for c in me.children(recursive=True))
            except psutil.Error:
                continue
            self.parent_mib = max(self.parent_mib, parent / 2**20)
            self.total_mib = max(self.total_mib, total / 2**20)
            self._stop.wait(self.interval)

    def __enter__(self) -> "PeakMemory":
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


@pytest.fixture(scope="module")
def cache_root():
    kept = os.environ.get("FASTLOWER_BENCH_CACHE_DIR")  # keep the caches for a look after
    if kept:
        root = Path(kept)
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
        yield root
        return
    with tempfile.TemporaryDirectory(prefix="fastlower-bench-cache-") as root:
        yield Path(root)


@pytest.fixture(scope="module")
def warmed():
    """XNNPACK's one-off set-up (pattern graphs) paid once, outside every timing."""
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir.backend.backend_api import to_backend as reference

    import fastlower
    import fastlower.preprocess as pp
    from fastlower.frontends.examples.llama import edge_llama

    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)
    program, _ = edge_llama(1)
    reference(copy.deepcopy(program), XnnpackPartitioner())
    with pp.options(workers=1):
        fastlower.to_backend(copy.deepcopy(program), XnnpackPartitioner())
    return True


@pytest.fixture(scope="module")
def pristine():
    from fastlower.frontends.examples.llama import edge_llama

    made = {}

    def get(n):
        if n not in made:
            made.clear()
            gc.collect()
            made[n] = edge_llama(n)[0]
        return made[n]
    return get


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("layers", LAYERS)
def test_preprocess_bench(benchmark, layers, config, warmed, pristine, cache_root):
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir.backend.backend_api import to_backend as reference

    import fastlower
    import fastlower.preprocess as pp

    benchmark.group = f"preprocess-L{layers}"
    cache_dir = cache_root / f"L{layers}"
    info = {"layers": layers, "config": config, "workers": WORKERS}
    if config == "warm":
        assert cache_dir.exists(), "run the cold2 case first"

        def run_warm():
            out = subprocess.run(
                [sys.executable, str(HERE / "preprocess_warm_run.py"), str(layers),
                 str(cache_dir), str(WORKERS)], capture_output=True, text=True, check=True,
                cwd=HERE)
            return json.loads(out.stdout.strip().splitlines()[-1])

        result = benchmark.pedantic(run_warm, rounds=1, iterations=1)
        # the time that counts is the to_backend call inside the new process
        seconds, digest = result["seconds"], result["digest"]
        info.update(hits=result["hits"], misses=result["misses"],
                    key_seconds=result["key_seconds"], phases=result["phases"],
                    external=result["external"])
        assert not result["misses"], result
    else:
        program = copy.deepcopy(pristine(layers))
        if config == "reference":
            call = lambda: reference(program, XnnpackPartitioner())  # noqa: E731
        else:
            workers = 1 if config == "serial" else WORKERS
            cache = str(cache_dir) if config == "cold2" else None

            def call():
                with pp.options(workers=workers, cache_dir=cache):
                    return fastlower.to_backend(program, XnnpackPartitioner())
        memory = PeakMemory()
        holder = {}

        def timed():
            start = time.perf_counter()
            with memory:
                holder["out"] = call()
            holder["seconds"] = time.perf_counter() - start

        benchmark.pedantic(timed, rounds=1, iterations=1)
        seconds, digest = holder["seconds"], output_digest(holder.pop("out"))
        info.update(peak_rss_parent_mib=round(memory.parent_mib),
                    peak_rss_with_workers_mib=round(memory.total_mib))
        if config != "reference":
            report = fastlower.last_report()
            info.update(runner=report.preprocess_runner, key_seconds=report.cache_key_seconds,
                        preprocess_phase_s=report.phases.get("preprocess"),
                        phases=report.phases, external=report.external)
    info["seconds"] = seconds
    ref = _RESULTS.get((layers, "reference"))
    if ref is not None and config != "reference":
        info["speedup_vs_reference"] = ref["seconds"] / seconds
        assert digest == ref["digest"], f"{config} output differs from the reference's"
    _RESULTS[(layers, config)] = {"seconds": seconds, "digest": digest}
    benchmark.extra_info.update(info)
    print(f"\n[preprocess-bench] {json.dumps(info)}")
