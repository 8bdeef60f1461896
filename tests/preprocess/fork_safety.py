"""Backends and a driver for the fork-safety tests (``test_start_method.py``).

Run as ``python -c "from tests.preprocess.fork_safety import main; main()"`` from the
repository root (not with ``-m``: the backends must be importable by name, and fastlower
finds a backend by class name), in a process of its own (no pytest, no Dask threads):
it prints one JSON line with what it saw. Two phases:

* ``user-thread``: another thread holds a lock in a loop and runs torch ops while
  fastlower lowers with 2 workers (default ``start_method``). The backend takes that
  same lock, so a worker forked while the thread held it would wait for ever: fastlower
  must see the thread and spawn instead.
* ``tqdm-monitor``: a tqdm monitor thread that holds its tqdm class's lock nearly all
  the time, and a backend that takes that lock: fastlower forks (the monitor is the
  only other thread) and holds the lock while it forks, so no worker inherits it held.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import List, final

import torch
from executorch.exir.backend.backend_details import BackendDetails, PreprocessResult
from executorch.exir.backend.compile_spec_schema import CompileSpec

USER_LOCK = threading.Lock()


def _monitored_bar_class():
    from tqdm import tqdm

    class SlowInstances(set):
        def copy(self):  # the monitor calls this with its class's lock held
            time.sleep(0.05)
            return set()

    class MonitoredBar(tqdm):
        monitor_interval = 0  # no monitor of its own: the test starts one by hand
        _instances = SlowInstances()

    return MonitoredBar


MONITORED_BAR = _monitored_bar_class()


@final
class ForkSafetyUserLockBackend(BackendDetails):
    """Takes :data:`USER_LOCK`, then echoes."""

    @staticmethod
    def preprocess(edge_program, compile_specs: List[CompileSpec]) -> PreprocessResult:
        with USER_LOCK:
            pass
        return PreprocessResult(processed_bytes=edge_program.graph_module.code.encode())


@final
class ForkSafetyTqdmLockBackend(BackendDetails):
    """Takes the monitored tqdm class's lock, then echoes."""

    @staticmethod
    def preprocess(edge_program, compile_specs: List[CompileSpec]) -> PreprocessResult:
        with MONITORED_BAR.get_lock():
            pass
        return PreprocessResult(processed_bytes=edge_program.graph_module.code.encode())


def _lower(backend: type, **opts):
    import fastlower
    import fastlower.preprocess as pp
    from tests.preprocess.helpers import LinearPartitioner, edge_blocks, fingerprint

    with pp.options(**opts):
        lowered = fastlower.to_backend(edge_blocks(4), LinearPartitioner(backend))
    return fingerprint(lowered), fastlower.last_report().preprocess_runner


def user_thread_phase() -> dict:
    serial, _ = _lower(ForkSafetyUserLockBackend, workers=1)
    stop, holding = threading.Event(), threading.Event()

    def busy() -> None:
        a = torch.randn(64, 64)
        while not stop.is_set():
            with USER_LOCK:
                holding.set()
                for _ in range(20):
                    a = torch.tanh(a @ a)
            time.sleep(0.0005)

    thread = threading.Thread(target=busy, name="user-thread-holding-a-lock")
    thread.start()
    try:
        holding.wait(30)
        parallel, runner = _lower(ForkSafetyUserLockBackend, workers=2)
    finally:
        stop.set()
        thread.join(30)
    return {"runner": runner, "same_as_serial": parallel == serial}


def tqdm_monitor_phase() -> dict:
    from tqdm._monitor import TMonitor

    serial, _ = _lower(ForkSafetyTqdmLockBackend, workers=1)
    monitor = TMonitor(MONITORED_BAR, 0.001)
    try:
        time.sleep(0.2)  # the monitor is now inside its locked section most of the time
        parallel, runner = _lower(ForkSafetyTqdmLockBackend, workers=2)
    finally:
        monitor.exit()
    return {"runner": runner, "same_as_serial": parallel == serial}


def main() -> None:
    import logging
    import warnings

    warnings.simplefilter("ignore")
    logging.disable(logging.WARNING)
    result = {"user-thread": user_thread_phase(), "tqdm-monitor": tqdm_monitor_phase()}
    sys.stdout.write(json.dumps(result) + "\n")
