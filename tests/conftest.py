"""Shared pytest setup.

Tests import the *installed* ``fastlower`` (``pip install .`` builds the native
core into it); only the repo root is put on ``sys.path`` so ``tests.models``
resolves.  Set ``FASTLOWER_TEST_SRC=1`` to test ``src/`` directly while
iterating on Python code (the native core is then used only if it was built
in place).  The ``slow`` marker is registered, and deselected by default, in
pyproject.toml.
"""

import os
import sys
from pathlib import Path

import pytest

_ROOT = Path(__file__).resolve().parent.parent
_paths = [str(_ROOT)]
if os.environ.get("FASTLOWER_TEST_SRC") == "1":
    _paths.insert(0, str(_ROOT / "src"))
for p in reversed(_paths):
    if p not in sys.path:
        sys.path.insert(0, p)

from tests import python_children  # noqa: E402 - after the repository root is on sys.path


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: absent without the plugin
def pytest_xdist_auto_num_workers(config):
    """``-n auto``: half as many workers again as cores (3 on 2 cores).

    A quarter of the suite's wall time on 2 cores is spent waiting (a subprocess's
    interpreter start, a hung child's deadline, servers and clusters starting), so a third
    worker runs tests in that time; ``PYTEST_XDIST_AUTO_NUM_WORKERS`` still decides when
    set (pytest-xdist's own hook reads it)."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, (cores or 1) * 3 // 2)


# The longest modules (measured, longest first) are handed to workers first: with
# --dist loadscope a module runs whole on one worker, and a long one started last would
# keep its worker busy while the others stand idle (longest-processing-time-first).
# Worker seconds of each in a default run on 2 cores (docs/testing.md, 2026-11-28).
LONG_MODULES = [
    "tests/pipeline/test_export_llm_stories15m.py",  # slow set only
    "tests/differential/test_lowering.py",  # 174 s
    "tests/pipeline/test_export_llm.py",  # 127 s
    "tests/structure/test_refit.py",  # 120 s
    "tests/differential/test_errors.py",  # 93 s
    "tests/partitioners/test_xnnpack.py",  # 83 s
    "tests/plugin/test_pytest_plugin.py",  # 82 s
    "tests/cli/test_load.py",  # 72 s
    "tests/test_determinism.py",  # 70 s
    "tests/cache/test_hits.py",  # 67 s
    "tests/test_docs.py",  # 53 s
    "tests/edge/test_edge_stage_differential.py",  # 53 s
    "tests/test_fake_outputs.py",  # 52 s
    "tests/preprocess/test_start_method.py",  # 48 s
    "tests/cache/test_forgery.py",  # 48 s
    "tests/adversarial/test_premises.py",  # 43 s
    "tests/structure/test_classes_differential.py",  # 43 s
    "tests/preprocess/test_executors.py",  # 43 s
    "tests/structure/test_new_checkpoint.py",  # 39 s
    "tests/fuzz/test_differential_fuzz.py",  # 38 s
    "tests/adversarial/test_fuzz.py",  # 37 s
    "tests/cache/test_safety.py",  # 35 s
    "tests/cli/test_cli.py",  # 33 s
    "tests/cache/test_roundtrip.py",  # 32 s
    "tests/test_suites_fail_loudly.py",  # 31 s
    "tests/cache/test_across_processes.py",  # 29 s
    "tests/test_retrace_edge_no_decomp.py",  # 23 s
    "tests/shared/test_two_processes.py",  # 22 s
    "tests/test_core_fuzz.py",  # 20 s
    "tests/pipeline/test_cache_across_processes.py",  # 20 s
]


def pytest_configure(config):
    """pytest-xdist (3.x) hands out --dist loadscope's modules largest test count first
    unless told not to; the order here is by measured time (LONG_MODULES)."""
    if hasattr(config.option, "loadscopereorder"):
        config.option.loadscopereorder = False


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session, config, items):
    rank = {module: k for k, module in enumerate(LONG_MODULES)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(rank)))


# the environment this pytest process started with (each xdist worker's own), but pytest's
# PYTEST_* variables, which it sets and removes around each test; the Python children's
# forkserver starts with it too
_SESSION_ENV = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
python_children.SESSION_ENV = _SESSION_ENV


@pytest.fixture(scope="module", autouse=True)
def _session_environment():
    """Each module starts with the session's environment: a library one imports may write
    ``os.environ`` for good (scikit-learn sets ``KMP_DUPLICATE_LIB_OK``, a start-up
    variable), and later modules' Python children would then start as real interpreters
    instead of forks (``tests/python_children.py``)."""
    yield
    if {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")} != _SESSION_ENV:
        python_children.replace_environ(_SESSION_ENV)


@pytest.fixture(scope="session", autouse=True)
def _core_handed_over():
    """Tests that drive ``fastlower._core`` directly (even under FASTLOWER_FORCE_PYTHON=1,
    when ``load_core`` does not load it) hand it its rules and result types first."""
    try:
        import fastlower._core as core
    except ImportError:
        return
    from fastlower.core.loader import hand_over_rules

    hand_over_rules(core)


@pytest.fixture(scope="session", autouse=True)
def _fork_preprocess_workers():
    """The session forks fastlower's preprocess workers, as a single-threaded program does.

    By default fastlower forks only when no other Python thread runs (else it spawns:
    ``preprocess/executors.py``). In this session Dask's threads outlive the Dask tests
    (``Dask-Offload``, its IO loop), which would make every later lowering spawn; the
    tests of that choice ask for ``start_method`` explicitly
    (``tests/preprocess/test_start_method.py``).
    """
    try:
        import fastlower.preprocess as pp
    except ImportError:  # the suites that need fastlower say so themselves
        yield
        return
    previous = pp.configuration.current().start_method
    pp.set_options(start_method="fork")
    yield
    pp.set_options(start_method=previous)


# How many python children started as real interpreters, and why (tests/python_children.py):
# a change that makes forkable children real (a start-up variable set in a test's
# environment) shows here, not only in the run's time.
_REAL_STARTS: dict = {}


def _add_real_starts(counts) -> None:
    for reason, n in (counts or {}).items():
        _REAL_STARTS[reason] = _REAL_STARTS.get(reason, 0) + n


def pytest_sessionfinish(session):
    counts = dict(python_children.REAL_STARTS)
    if hasattr(session.config, "workeroutput"):  # an xdist worker: to the controller
        session.config.workeroutput["python_children_real_starts"] = counts
    else:
        _add_real_starts(counts)


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook: absent without the plugin
def pytest_testnodedown(node, error):
    _add_real_starts(getattr(node, "workeroutput", {}).get("python_children_real_starts"))


def pytest_terminal_summary(terminalreporter):
    if _REAL_STARTS:
        reasons = ", ".join(f"{reason}: {n}" for reason, n in
                            sorted(_REAL_STARTS.items(), key=lambda item: -item[1]))
        terminalreporter.write_line(f"python children started as real interpreters: "
                                    f"{sum(_REAL_STARTS.values())} ({reasons})")
