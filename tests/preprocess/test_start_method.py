"""How fastlower's own pool starts its workers: fork only where it is safe.

The test session pins ``start_method="fork"`` (``tests/conftest.py``: Dask's threads
linger after its tests); the tests here ask for what they test.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path

import pytest

import fastlower
import fastlower.preprocess as pp
from fastlower.preprocess import executors
from fastlower.preprocess.jobs import PreprocessJob

from tests import python_children

from .helpers import (
    LinearPartitioner,
    PreprocessTestEchoBackend,
    child_processes,
    edge_blocks,
    fingerprint,
    new_children,
)

ROOT = Path(__file__).resolve().parents[2]


def _jobs(backend: type, n: int = 2):
    return [PreprocessJob(i, backend.__name__, backend, None, [], f"tag{i}", "forward", False)
            for i in range(n)]


@pytest.fixture
def other_thread():
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait, name="caller's other thread")
    thread.start()
    yield thread
    stop.set()
    thread.join()


def test_auto_forks_only_without_other_threads(other_thread):
    jobs = _jobs(PreprocessTestEchoBackend)
    assert other_thread in executors.other_threads()
    assert executors.choose_runner(2, None, jobs, "auto") == "spawn"
    assert executors.choose_runner(2, None, jobs, "fork") == "fork"
    assert executors.choose_runner(2, None, jobs[:1], "auto") == "serial"
    assert executors.choose_runner(1, None, jobs, "spawn") == "serial"


def test_auto_forks_when_alone(monkeypatch):
    monkeypatch.setattr(executors, "other_threads", lambda: [])
    assert executors.choose_runner(2, None, _jobs(PreprocessTestEchoBackend), "auto") == "fork"


def test_tqdm_monitor_is_not_a_reason_to_spawn():
    from tqdm import tqdm
    from tqdm._monitor import TMonitor

    monitor = TMonitor(tqdm, 60)
    try:
        assert monitor not in executors.other_threads()
    finally:
        monitor.exit()


def test_spawn_runs_in_process_a_backend_defined_in_a_function():
    from executorch.exir.backend.backend_details import BackendDetails

    class LocalBackend(BackendDetails):
        @staticmethod
        def preprocess(edge_program, compile_specs):
            raise NotImplementedError

    assert not executors.importable_by_name(_jobs(LocalBackend)[0])
    assert executors.importable_by_name(_jobs(PreprocessTestEchoBackend)[0])
    assert executors.choose_runner(2, None, _jobs(LocalBackend), "spawn") == "serial"


def test_start_method_option_and_environment(monkeypatch):
    # no pinned start method
    monkeypatch.setattr(pp.configuration, "_CURRENT", pp.configuration.PreprocessOptions())
    monkeypatch.delenv("FASTLOWER_START_METHOD", raising=False)
    assert pp.configuration.resolve().start_method == "auto"
    monkeypatch.setenv("FASTLOWER_START_METHOD", "Spawn")
    assert pp.configuration.resolve().start_method == "spawn"
    with pp.options(start_method="fork"):
        assert pp.configuration.resolve().start_method == "fork"
    monkeypatch.setenv("FASTLOWER_START_METHOD", "vfork")
    with pytest.raises(ValueError, match="start_method"):
        pp.configuration.resolve()


def test_spawn_pool_gives_the_serial_result():
    """The spawn pool (loky): same delegates as serial, no worker left behind."""
    with pp.options(workers=1):
        serial = fingerprint(fastlower.to_backend(edge_blocks(3), LinearPartitioner()))
    before = child_processes()
    with pp.options(workers=2, start_method="spawn"):
        spawned = fastlower.to_backend(edge_blocks(3), LinearPartitioner())
    assert fastlower.last_report().preprocess_runner == "spawn pool, 2 workers"
    assert fingerprint(spawned) == serial
    assert not new_children(before)


def test_spawn_pool_backend_error_is_the_earliest_partition():
    from .test_failures import failing_late_and_early

    before = child_processes()
    with pp.options(workers=2, start_method="spawn"), pytest.raises(ValueError) as info:
        fastlower.to_backend(edge_blocks(5), LinearPartitioner(specs_for=failing_late_and_early))
    assert isinstance(info.value, pp.PreprocessError) and info.value.tag == "tag1"
    assert not new_children(before)


def test_threads_holding_locks_while_the_pool_starts():
    """In a process of its own: (1) another thread holds a lock the backend needs and runs
    torch ops while fastlower lowers: the default spawns, and nothing hangs; (2) tqdm's
    monitor thread holds its lock nearly all the time: the default forks, holding that
    lock while it forks, and nothing hangs. A hang fails the test at the timeout."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FASTLOWER_")}
    code = "from tests.preprocess.fork_safety import main; main()"
    done = python_children.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                               text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen == {"user-thread": {"runner": "spawn pool, 2 workers", "same_as_serial": True},
                    "tqdm-monitor": {"runner": "fork pool, 2 workers", "same_as_serial": True}}
