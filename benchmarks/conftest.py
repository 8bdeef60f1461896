"""Options and session fixtures of the lowering benchmarks (run: ``pytest benchmarks``)."""

from __future__ import annotations

import os
import sys
import time
import warnings

import pytest

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, _HERE)

DEFAULT_LAYERS = "1,4,8,16,32,64"


def pytest_addoption(parser):
    group = parser.getgroup("fastlower-bench", "fastlower lowering benchmarks")
    group.addoption("--bench-layers", default=DEFAULT_LAYERS,
                    help=f"comma-separated Llama layer counts (default {DEFAULT_LAYERS})")
    group.addoption("--many-layers", type=int, default=8,
                    help="layer count of the single-op many-partition case (default 8; 0 = skip)")
    group.addoption("--skip-large-reference", type=int, nargs="?", const=16, default=None,
                    metavar="LAYERS",
                    help="skip reference cases above LAYERS layers (default when given: 16)")
    group.addoption("--bench-rounds", type=int, default=3,
                    help="rounds of cheap cases (default 3)")
    group.addoption("--bench-slow-rounds", type=int, default=1,
                    help="rounds of slow cases: (a) and reference (b) above 4 layers, "
                         "reference many-partition case (default 1)")
    group.addoption("--bench-setups", default="xnnpack,pretagged,chain,many,floor",
                    help="subset of cases to run")
    group.addoption("--bench-impls", default="reference,fastlower",
                    help="subset of implementations to run")
    group.addoption("--partition-layers", default="4,8,32,64",
                    help="layer counts of the partitioner benchmark (default 4,8,32,64)")
    group.addoption("--partition-singleop-layers", type=int, default=8,
                    help="layers of its one-group-per-op case (default 8: 521 groups; 0 = skip)")
    group.addoption("--partition-json", default=None,
                    help="where the partitioner benchmark writes its summary")
    group.addoption("--user-layers", default="8,16,32,64",
                    help="layers of the user-model XNNPACK cases on plain to_edge "
                         "(default 8,16,32,64)")
    group.addoption("--user-tal-layers", default="8,32",
                    help="layers of the to_edge_transform_and_lower-path cases (default 8,32)")
    group.addoption("--user-vulkan-layers", default="8,32",
                    help="layers of the VulkanPartitioner and CoreMLPartitioner cases "
                         "(default 8,32)")
    group.addoption("--user-models", default="executorch_llama,hf_llama",
                    help="user models of the XNNPACK cases (executorch_llama,hf_llama,hf_gpt2)")
    group.addoption("--user-vulkan-models", default="executorch_llama",
                    help="user models of the Vulkan and CoreML cases")
    group.addoption("--user-paths", default="to_edge,tal", help="export paths (to_edge,tal)")
    group.addoption("--user-partitioners", default="xnnpack,vulkan",
                    help="xnnpack,vulkan,coreml")
    group.addoption("--user-ref-max-layers", type=int, default=32,
                    help="skip reference user-model cases above this many layers (default 32)")
    group.addoption("--user-json", default=None,
                    help="where the user-model benchmark writes its summary")
    group.addoption("--hooks-model", default="stories110M",
                    help="model shape of the torch.fx hooks benchmark (stories110M, small)")
    group.addoption("--hooks-rounds", type=int, default=3,
                    help="rounds (one installed + one uninstalled run each) of that benchmark")
    group.addoption("--memory-layers", type=int, default=11,
                    help="decoder layers of the large-weight memory benchmark "
                         "(dim 1024; default 11)")
    group.addoption("--memory-backend", default="noop", choices=["noop", "xnnpack"],
                    help="backend of the memory benchmark (default noop)")
    group.addoption("--edge-layers", default="6",
                    help="layers of the edge-stage benchmark (test_edge_stage_bench.py; default 6)")
    group.addoption("--big-vocab", type=int, default=128256,
                    help="vocabulary of the large-entry hit benchmark (test_big_hit_bench.py; "
                         "default 128256, Llama 3.2 1B's)")
    group.addoption("--allow-python-twin", action="store_true",
                    help="run even if fastlower's native core did not load (times the "
                         "pure-Python planner twin instead)")


def pytest_configure(config):
    warnings.filterwarnings("ignore", message=".*register_constant.*")
    config._fastlower_bench_start = time.perf_counter()
    # the installed package (``pip install .[bench]`` builds its native core);
    # timing the Python twin by accident would misstate every ratio
    import fastlower.core.plan

    if fastlower.core.plan.backend_module() is None and not config.getoption("--allow-python-twin"):
        pytest.exit("fastlower's native core (fastlower._core) did not load; install the "
                    "package with `pip install '.[bench]'` (or pass --allow-python-twin)",
                    returncode=2)


def pytest_benchmark_update_json(config, benchmarks, output_json):
    """Session facts for report.py: wall time, command line, planner in use."""
    info = {"wall_s": time.perf_counter() - getattr(config, "_fastlower_bench_start", 0.0),
            "argv": sys.argv[1:]}
    try:
        import fastlower
        import fastlower.core.plan

        info["native_core"] = fastlower.core.plan.backend_module() is not None
        info["fastlower_file"] = fastlower.__file__
    except Exception as exc:  # pragma: no cover
        info["fastlower_import_error"] = repr(exc)
    output_json["fastlower_bench"] = info


@pytest.fixture(scope="session")
def bench_options(request):
    cfg = request.config
    return {
        "skip_ref_above": cfg.getoption("--skip-large-reference"),
        "rounds": cfg.getoption("--bench-rounds"),
        "slow_rounds": cfg.getoption("--bench-slow-rounds"),
    }


@pytest.fixture(scope="session")
def programs():
    from benchlib import ProgramCache

    return ProgramCache()


@pytest.fixture(scope="session")
def session_results():
    """Reference fingerprints/times by case, so the fastlower run can compare and take ratios."""
    return {}


@pytest.fixture(scope="session")
def warmed_up():
    """Lower a 1-layer program once per implementation and set-up before timing anything.

    First calls pay one-off costs (imports, XNNPACK's cached pattern graphs
    built with torch.export, fake-tensor dispatch caches); whichever
    implementation ran first would be charged for them.
    """
    import copy

    import fastlower
    from executorch.exir.backend.backend_api import to_backend as ref_to_backend
    from fastlower.frontends.examples.llama import edge_llama

    import benchlib

    benchlib.patch_xnnpack_preprocess_timer()
    benchlib.patch_verifier_timer()
    program, _ = edge_llama(1)
    tags = benchlib.xnnpack_tags(program)
    for impl in (ref_to_backend, fastlower.to_backend):
        impl(copy.deepcopy(program), benchlib.timed_xnnpack_partitioner())
        impl(copy.deepcopy(program), benchlib.PretaggedPartitioner(tags))
        impl(copy.deepcopy(program),
             benchlib.PretaggedPartitioner(benchlib.single_op_tags(program)))
    return True


def pytest_report_header(config):
    try:
        import fastlower
        import fastlower.core.plan

        core = fastlower.core.plan.backend_module()
        impl = f"native _core ({core.__file__})" if core is not None else "pure-Python twin"
        return [f"fastlower {fastlower.__file__}", f"fastlower planner: {impl}"]
    except Exception as exc:  # pragma: no cover
        return [f"fastlower import failed: {exc!r}"]
