"""Where partitions are preprocessed: in this process, a fork pool, or any ``Executor``.

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

import logging
import multiprocessing
import os
import signal
import threading
from concurrent.futures import (
    FIRST_COMPLETED, BrokenExecutor, Executor, Future, ProcessPoolExecutor, wait,
)
from concurrent.futures.process import BrokenProcessPool
from typing import Callable, Dict, List, Optional, Sequence, Tuple

from executorch.exir.backend.backend_details import PreprocessResult

from .failures import WorkerDiedError, backend_error, describe_exit
from .jobs import PreprocessJob, call_preprocess
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
          processes: Dict[int, object]) -> WorkerDiedError:
    """Which partitions were running in a worker that died, and how it died."""
    for proc in processes.values():
        proc.join(timeout=10)
    running = [(i, started[i]) for i in range(len(jobs)) if started[i] and i not in finished]
    exits = {pid: getattr(processes.get(pid), "exitcode", None) for _, pid in running}
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
        with _FORK_LOCK:
            _INHERITED, _STARTED = list(jobs), started
            try:
                # with the fork context every worker is forked on the first submit
                pending: Dict[Future, int] = {pool.submit(_run_inherited, i): i
                                              for i in range(len(jobs))}
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
        for position, job in enumerate(jobs):
            pending[executor.submit(run_wire_job, to_wire(job))] = position
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


def choose_runner(workers: int, executor: Optional[Executor], parallel_jobs: int) -> str:
    """``"executor"``, ``"fork"`` or ``"serial"`` for this many parallelisable jobs."""
    if executor is not None and parallel_jobs > 0:
        return "executor"
    if workers > 1 and parallel_jobs > 1 and hasattr(os, "fork"):
        return "fork"
    return "serial"
