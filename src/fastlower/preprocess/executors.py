"""Where partitions are preprocessed: in this process, a pool of fastlower's own, or any
``Executor``.

fastlower's pool starts its workers in one of two ways:

* ``fork`` (the default when no other Python thread is alive in the process, tqdm's
  monitor thread aside, see :func:`other_threads`): the
  workers are forked after the partition programs exist and find their job by index;
  nothing is pickled and pages are shared copy-on-write. A fork copies only the
  calling thread, so a lock another thread holds at that moment stays held for ever
  in the child: with other threads alive, fork can hang a worker;
* ``spawn`` (the default when other Python threads are alive; ``start_method="spawn"``
  always): fresh interpreters (loky's pool: ``fork`` + ``exec`` in C, the caller's
  ``__main__`` is not run again), which import torch, ExecuTorch and the backend and
  get each partition serialized as an ``Executor`` gets it (``transport``). Safe
  whatever other threads do, at the cost of the start-up and the serialization. A job
  whose backend class cannot be imported by name (a class defined in a function or in
  the ``__main__`` script) runs in this process instead.

Each runner takes the jobs and a ``done(job, result, seconds)`` callback, calls
it once per job as results arrive, and returns when all are done. When jobs
fail it raises:

* the backend's own exception as :func:`failures.backend_error` makes it
  (same class, the partition's tag and backend in the message). Of several
  failing partitions the caller gets the *earliest* one's error, whatever order
  they failed in: the reference preprocesses one partition after another and
  stops at the first that fails. A runner therefore waits for the partitions
  before a failed one and stops every partition after it;
* :class:`failures.WorkerDiedError` at once when a worker process dies (a fork
  pool worker, a Dask ``KilledWorker``, a broken ``concurrent.futures`` pool);
* ``KeyboardInterrupt`` as it came.

No worker process outlives a runner: the fork pool's workers are killed on any
failure and joined in every case.
"""

from __future__ import annotations

import importlib
import logging
import multiprocessing
import os
import signal
import sys
import threading
import time
from concurrent.futures import (
    FIRST_COMPLETED,
    BrokenExecutor,
    Executor,
    Future,
    ProcessPoolExecutor,
    wait,
)
from concurrent.futures.process import BrokenProcessPool
from contextlib import ExitStack, contextmanager
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple

from executorch.exir.backend.backend_details import PreprocessResult

from ..in_process.heap_freeze import frozen_heap
from .failures import WorkerDiedError, backend_error, describe_exit
from .jobs import PreprocessJob, call_preprocess, longest_first
from .transport import run_wire_job, to_wire

log = logging.getLogger(__name__)

Done = Callable[[PreprocessJob, PreprocessResult, float], None]


class EarliestFailure:
    """The failure of the earliest partition (by ``job.index``) among those that failed.

    One instance spans every runner of a lowering, so a failure in the parallel batch
    and one in the serial jobs after it are ranked together, as the serial reference
    would meet them.
    """

    def __init__(self) -> None:
        self.index: Optional[int] = None
        self._raised: Optional[Tuple[BaseException, BaseException]] = None

    def record(self, job: PreprocessJob, exc: Exception) -> None:
        if self.index is None or job.index < self.index:
            self.index = job.index
            self._raised = (backend_error(exc, job.tag, job.backend_id, job.method), exc)

    def still_needed(self, job: PreprocessJob) -> bool:
        """Whether a job's outcome can still change which failure is raised."""
        return self.index is None or job.index < self.index

    def is_raised(self, exc: BaseException) -> bool:
        """Whether ``exc`` is the failure :meth:`raise_if_any` raised."""
        return self._raised is not None and self._raised[0] is exc

    def raise_if_any(self) -> None:
        if self._raised is not None:
            error, cause = self._raised
            raise error from cause


def _wait_in_order(pending: Dict[Future, int], jobs: Sequence[PreprocessJob],
                   failure: EarliestFailure) -> List[Future]:
    """Futures that are done, among those still needed; empty when none is left to wait for."""
    needed = [f for f, position in pending.items() if failure.still_needed(jobs[position])]
    if not needed:
        return []
    ready, _ = wait(needed, return_when=FIRST_COMPLETED)
    return sorted(ready, key=pending.__getitem__)


def run_serial(jobs: Sequence[PreprocessJob], done: Done, failure: EarliestFailure) -> None:
    """One job after another in this process, up to the first failure (raised, or an
    earlier one already in ``failure``)."""
    for job in jobs:
        if not failure.still_needed(job):
            break
        try:
            result, seconds = call_preprocess(job)
        except Exception as exc:
            failure.record(job, exc)
            break
        done(job, result, seconds)
    failure.raise_if_any()


# --- the fork pool ----------------------------------------------------------------
# Workers are forked after the partition programs exist and find their job by
# index in this list: programs are never pickled, and their pages are shared
# copy-on-write with the caller. The two globals hold one lowering's state from
# just before its workers are forked until they are (under _FORK_LOCK): a lowering
# in another thread must not hand its state to these workers.
_INHERITED: List[PreprocessJob] = []
_STARTED = None  # shared int array: pid of the worker that started job i, 0 if none
_FORK_LOCK = threading.Lock()


def _worker_start() -> None:
    # the caller decides on Ctrl-C and kills the workers; one torch thread per
    # worker so N workers do not oversubscribe the cores
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    import torch

    torch.set_num_threads(1)


def _run_inherited(position: int):
    _STARTED[position] = os.getpid()
    job = _INHERITED[position]
    result, seconds = call_preprocess(job)
    return position, result, seconds


def _kill(processes) -> None:
    for proc in processes:
        if proc.is_alive():
            proc.kill()
    for proc in processes:
        proc.join(timeout=10)


def _died(jobs: Sequence[PreprocessJob], started, finished: set,
          processes: Dict[int, Any]) -> WorkerDiedError:
    """Which partitions were running in a worker that died, and how it died."""
    for proc in processes.values():
        proc.join(timeout=10)
    running = [(i, started[i]) for i in range(len(jobs)) if started[i] and i not in finished]
    exits = {pid: _exit_code(processes.get(pid)) for _, pid in running}
    # the pool terminates the surviving workers with SIGTERM after one dies:
    # the culprit is the one that died otherwise, if any did
    culprits = [(i, pid) for i, pid in running if exits[pid] not in (None, 0, -signal.SIGTERM)]
    culprits = culprits or running
    if not culprits:
        return WorkerDiedError("a preprocess worker process died before starting a partition",
                               [])
    described = "; ".join(f"{jobs[i].describe()} in worker {pid} ({describe_exit(exits[pid])})"
                          for i, pid in culprits)
    return WorkerDiedError(f"a preprocess worker process died: {described}",
                           [jobs[i].tag for i, _ in culprits])


def _exit_code(proc, patience: float = 5.0) -> Optional[int]:
    """``proc.exitcode``, waiting a little for it: the pool's own thread may be reaping the
    same process (it joins every worker once one died), and between its ``waitpid`` and
    its recording the code, ``exitcode`` reads None here."""
    if proc is None:
        return None
    deadline = time.monotonic() + patience
    while proc.exitcode is None and time.monotonic() < deadline:
        time.sleep(0.01)
    return proc.exitcode


def run_fork_pool(jobs: Sequence[PreprocessJob], workers: int, done: Done,
                  failure: EarliestFailure) -> None:
    """The jobs on ``workers`` forked processes (``ProcessPoolExecutor``, fork context)."""
    global _INHERITED, _STARTED
    context = multiprocessing.get_context("fork")
    started = context.Array("i", len(jobs), lock=False)
    pool = ProcessPoolExecutor(max_workers=min(workers, len(jobs)), mp_context=context,
                               initializer=_worker_start)
    processes: Dict[int, object] = {}
    finished: set = set()
    try:
        with _FORK_LOCK, _monitors_paused(), frozen_heap(required=True):
            _INHERITED, _STARTED = list(jobs), started
            try:
                # with the fork context every worker is forked on the first submit
                pending: Dict[Future, int] = {pool.submit(_run_inherited, i): i
                                              for i in longest_first(jobs)}
                processes = dict(getattr(pool, "_processes", {}) or {})
            finally:
                _INHERITED, _STARTED = [], None
        while ready := _wait_in_order(pending, jobs, failure):
            for future in ready:
                position = pending.pop(future)
                job = jobs[position]
                try:
                    _, result, seconds = future.result()
                except BrokenProcessPool:
                    raise _died(jobs, started, finished, processes) from None
                except Exception as exc:
                    failure.record(job, exc)
                    continue
                finished.add(position)
                done(job, result, seconds)
        failure.raise_if_any()
    except BaseException:
        processes.update(getattr(pool, "_processes", {}) or {})
        _kill(list(processes.values()))
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def run_spawn_pool(jobs: Sequence[PreprocessJob], workers: int, done: Done,
                   failure: EarliestFailure) -> None:
    """The jobs on ``workers`` fresh interpreters; programs travel serialized, as to any
    ``Executor``.

    The pool is loky's ``ProcessPoolExecutor`` (joblib's): it starts workers with
    ``fork`` + ``exec`` done in C (``_posixsubprocess``), safe whatever other threads
    hold, and unlike ``multiprocessing``'s ``spawn`` it does not run the caller's
    ``__main__`` script again in each worker.
    """
    from loky import ProcessPoolExecutor as LokyPool
    from loky.backend.context import get_context

    pool = LokyPool(max_workers=min(workers, len(jobs)), context=get_context("loky"),
                    initializer=_worker_start)
    try:
        run_on_executor(jobs, pool, done, failure)
    except BaseException:
        pool.shutdown(wait=True, kill_workers=True)  # stops the partitions after a failure
        raise
    pool.shutdown(wait=True)


def _is_tqdm_monitor(thread: threading.Thread) -> bool:
    cls = type(thread)
    return cls.__name__ == "TMonitor" and cls.__module__ == "tqdm._monitor"


def other_threads() -> List[threading.Thread]:
    """The process's live Python threads other than the calling one that a fork is not
    known to be safe with.

    tqdm's monitor thread is not counted: every process that ran a ``torch.fx``
    ``Interpreter`` (``torch.export``, ``to_edge``) has one, and the only lock it takes
    is its tqdm class's, which the fork pool holds while it forks (``_monitors_paused``).
    """
    me = threading.current_thread()
    return [t for t in threading.enumerate()
            if t is not me and t.is_alive() and not _is_tqdm_monitor(t)]


@contextmanager
def _monitors_paused() -> Iterator[None]:
    """Hold the lock of every live tqdm monitor thread, so none holds it in a forked child.

    (In the child the forking thread owns the re-entrant lock, so a bar there works.)
    """
    locks: List[object] = []
    for thread in threading.enumerate():
        if _is_tqdm_monitor(thread) and thread.is_alive():
            lock = thread.tqdm_cls.get_lock()  # type: ignore[attr-defined]
            if all(lock is not held for held in locks):
                locks.append(lock)
    with ExitStack() as stack:
        for lock in locks:
            stack.enter_context(lock)  # type: ignore[arg-type]
        yield


def importable_by_name(job: PreprocessJob) -> bool:
    """Whether a fresh interpreter can import the job's backend class by module and name."""
    backend = job.backend
    # a spawned worker does not run the caller's __main__ again: classes there are missing
    if "<locals>" in backend.__qualname__ or backend.__module__ in ("__main__", "__mp_main__"):
        return False
    try:
        module = sys.modules.get(backend.__module__) or importlib.import_module(backend.__module__)
        found: object = module
        for part in backend.__qualname__.split("."):
            found = getattr(found, part)
    except Exception:
        return False
    return found is backend


def _lost_worker(exc: BaseException) -> bool:
    """Whether ``exc`` says the executor lost the worker running the job, not the backend failed."""
    if isinstance(exc, BrokenExecutor):
        return True
    cls = type(exc)  # Dask, without importing it: distributed.scheduler.KilledWorker
    return cls.__name__ == "KilledWorker" and cls.__module__.split(".")[0] == "distributed"


def run_on_executor(jobs: Sequence[PreprocessJob], executor: Executor, done: Done,
                    failure: EarliestFailure) -> None:
    """The jobs on a user's ``Executor``; programs travel serialized (see ``transport``)."""
    pending: Dict[Future, int] = {}
    try:
        for position in longest_first(jobs):
            pending[executor.submit(run_wire_job, to_wire(jobs[position]))] = position
        while ready := _wait_in_order(pending, jobs, failure):
            for future in ready:
                position = pending.pop(future)
                job = jobs[position]
                try:
                    _, result, seconds = future.result()
                except Exception as exc:
                    if _lost_worker(exc):
                        raise WorkerDiedError(
                            f"a preprocess worker died: {job.describe()} on "
                            f"{type(executor).__name__} ({type(exc).__name__}: {exc})",
                            [job.tag]) from exc
                    failure.record(job, exc)
                    continue
                done(job, result, seconds)
        failure.raise_if_any()
    except BaseException:
        for future in pending:
            future.cancel()
        raise


def choose_runner(workers: int, executor: Optional[Executor],
                  parallel: Sequence[PreprocessJob], start_method: str = "auto") -> str:
    """``"executor"``, ``"fork"``, ``"spawn"`` or ``"serial"`` for these parallelisable jobs.

    ``start_method`` ``"auto"`` forks only when no other Python thread is alive (see the
    module's documentation); ``"fork"`` forks whatever runs, ``"spawn"`` never forks.
    """
    if executor is not None and parallel:
        return "executor"
    if workers <= 1 or len(parallel) <= 1:
        return "serial"
    method = start_method
    if method == "auto":
        threads = other_threads() if hasattr(os, "fork") else []
        method = "spawn" if threads or not hasattr(os, "fork") else "fork"
        if threads:
            log.debug("other threads are alive (%s): preprocess workers are spawned, not forked",
                      ", ".join(t.name for t in threads[:5]))
    if method == "fork" and not hasattr(os, "fork"):
        method = "spawn"
    if method == "spawn":
        local = [job for job in parallel if not importable_by_name(job)]
        if local:
            log.info("backend %s cannot be imported by name in a spawned worker: preprocess "
                     "runs in this process", local[0].backend.__qualname__)
            return "serial"
    return method
