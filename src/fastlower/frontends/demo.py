"""The main job: lower a bundled 8-layer Llama-style decoder with XNNPACK and report.

``fastlower-demo [--layers N] [--no-reference]`` lowers the same Edge program
with fastlower and with ExecuTorch's reference ``to_backend`` (through
``EdgeProgramManager.to_backend``, the path ``to_edge_transform_and_lower``
uses), prints what was delegated, both times, and checks that both produce the
same program and the same ``.pte`` bytes, and that the runtime output matches eager.
fastlower lowers twice with a temporary preprocess cache: once cold (every
partition preprocessed, in parallel on the usable cores) and once warm (every
partition a cache hit); both times are printed next to the reference's.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from typing import Optional

from .console import command_logging, out, quiet_torch


def _lower(n_layers: int, use_fastlower: bool, cache_dir: Optional[str] = None):
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

    from .examples.llama import export_llama
    from ..patch import installed
    from ..preprocess import options

    manager, inputs = export_llama(n_layers)
    start = time.perf_counter()
    if use_fastlower:
        with installed(), options(cache_dir=cache_dir):
            lowered = manager.to_backend(XnnpackPartitioner())
    else:
        lowered = manager.to_backend(XnnpackPartitioner())
    return lowered, inputs, time.perf_counter() - start


def _run(buffer: bytes, inputs):
    from executorch.runtime import Runtime

    program = Runtime.get().load_program(buffer)
    return program.load_method("forward").execute(list(inputs))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="fastlower-demo", description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--no-reference", action="store_true",
                        help="skip the reference lowering (and the comparison)")
    args = parser.parse_args(argv)
    # the command's own handlers and a scoped warnings filter (console.command_logging),
    # never logging.disable or a process-wide filter
    with command_logging(debug=False):
        quiet_torch(debug=False)
        return _demo(args)


def _demo(args) -> int:
    import torch

    from .examples.llama import eager_reference
    from ..core.plan import backend_module
    from ..report import last_report

    out(f"fastlower demo: {args.layers}-layer Llama-style decoder, XNNPACK "
        f"(planner: {'C++ core' if backend_module() is not None else 'Python twin'})")
    # XNNPACK's first lowering in a process pays a few seconds of one-off set-up
    # (pattern graphs); pay it outside both timings
    _lower(1, use_fastlower=True)
    _lower(1, use_fastlower=False)
    with tempfile.TemporaryDirectory(prefix="fastlower-demo-cache-") as cache_dir:
        ours, inputs, t_ours = _lower(args.layers, use_fastlower=True, cache_dir=cache_dir)
        report = last_report()
        warm, _, t_warm = _lower(args.layers, use_fastlower=True, cache_dir=cache_dir)
        warm_report = last_report()
    if report is None or warm_report is None:
        raise RuntimeError("fastlower made no report: the lowering did not run fastlower")
    out(report.format())
    out(f"fastlower to_backend: cold cache {t_ours:.2f} s ({report.preprocess_runner}); "
          f"warm cache {t_warm:.2f} s ({sum(warm_report.cache_hits.values())} hits, "
          f"{sum(warm_report.cache_misses.values())} misses)")
    # to_executorch() rewrites the edge program in place: compare before it
    our_code = ours.exported_program().graph_module.code
    pte = ours.to_executorch().buffer
    warm_same = warm.to_executorch().buffer == pte
    out(f"warm-cache .pte identical to the cold one: {warm_same}")
    status_warm = 0 if warm_same else 1
    got = _run(pte, inputs)[0]
    expected = eager_reference(args.layers, inputs)
    err = (got - expected).abs().max().item()
    out(f"runtime vs eager: max abs error {err:.2e} "
          f"({'ok' if torch.allclose(got, expected, atol=1e-3, rtol=1e-3) else 'MISMATCH'})")
    status = (0 if torch.allclose(got, expected, atol=1e-3, rtol=1e-3) else 1) | status_warm
    if not args.no_reference:
        ref, _, t_ref = _lower(args.layers, use_fastlower=False)
        out(f"reference to_backend: {t_ref:.2f} s  ->  speed-up cold {t_ref / t_ours:.1f}x, "
              f"warm {t_ref / t_warm:.1f}x")
        same_code = ref.exported_program().graph_module.code == our_code
        same_pte = ref.to_executorch().buffer == pte
        out(f"same graph as the reference: {same_code}; same .pte bytes: {same_pte}")
        status |= 0 if (same_code and same_pte) else 1
    return status


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
