"""Storing a large cache entry off the caller's critical path, in a forked child.

Storing a lowering of a large model (serializing it, reading the copy back to
compare it, writing it) takes seconds the caller would otherwise wait for before
its next step (``to_executorch``). A child forked right after the lowering holds
a copy-on-write snapshot of the programs as they were returned, so whatever the
caller does to them next cannot reach the stored entry; the child stores it in
the cache folder through its own connection and exits.

A child is forked only when that is safe and pays:

* ``os.fork`` exists and no other Python thread is alive (the rule of the
  preprocess fork pool; tqdm's monitor is paused around the fork);
* the entry holds at least :data:`DETACH_MIN_BYTES` of tensor data (small ones are
  stored inline: their store costs less than a fork, and their warnings reach the
  caller);
* this process is not itself a detached child.

Otherwise the store runs inline, as before. Before the caller's process looks up
a key that a child of its own is storing, it waits for that child, and at exit it
waits for every child (:func:`wait_all`, registered with ``atexit`` on the first
fork; a child still running after :data:`EXIT_TIMEOUT` seconds is killed: the
entry is then missing, never half-written, as ``diskcache`` commits a row only
after its value file is complete). No child outlives the process that made it.
"""

from __future__ import annotations

import atexit
import logging
import os
import signal
import threading
import time
from typing import Callable, Dict, Optional

log = logging.getLogger("fastlower.cache")

DETACH_MIN_BYTES = 32 << 20
EXIT_TIMEOUT = 600.0
# a child's CPU priority below its caller's: it runs on cores the caller leaves idle
# (its single-threaded steps after a lowering), not in the caller's way on the others
CHILD_NICENESS = 19

_LOCK = threading.Lock()
_PENDING: Dict[str, int] = {}  # cache key -> pid of the child storing it
_AT_EXIT = False
_IN_CHILD = False


def can_detach(size: int) -> bool:
    """Whether an entry of ``size`` bytes of tensor data would be stored in a child."""
    if _IN_CHILD or size < DETACH_MIN_BYTES or not hasattr(os, "fork"):
        return False
    from ..preprocess.executors import other_threads

    return not other_threads()


def store_detached(key: str, size: int, store: Callable[[], None],
                   before_fork: Callable[[], None] = lambda: None) -> bool:
    """Runs ``store`` in a forked child and returns True, or returns False (nothing ran)
    when :func:`can_detach` says no. ``before_fork`` runs just before the fork (close the
    caller's database connections there: a child must not share them)."""
    global _AT_EXIT, _IN_CHILD
    if not can_detach(size):
        return False
    from ..in_process.heap_freeze import frozen_heap
    from ..preprocess.executors import _monitors_paused

    with _LOCK:
        before_fork()
        with _monitors_paused(), frozen_heap(required=True):
            pid = os.fork()
            if pid == 0:
                # the child stores and exits without leaving this block: leaving it would
                # release the tqdm lock the parent holds, whose multiprocessing semaphore
                # the two share, and let a parent thread waiting for it in
                _IN_CHILD = True
                _run_child(key, store)
        _PENDING[key] = pid
        if not _AT_EXIT:
            atexit.register(wait_all)
            _AT_EXIT = True
    log.debug("storing %s in process %d (%d bytes of tensor data)", key, pid, size)
    return True


def _run_child(key: str, store: Callable[[], None]) -> None:
    code = 1
    try:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        import torch

        torch.set_num_threads(1)  # the caller goes on with the other core(s)
        os.nice(CHILD_NICENESS)  # and comes first on them: this is background work
        start = time.perf_counter()
        store()
        log.debug("stored %s in %.2fs (process %d)", key, time.perf_counter() - start, os.getpid())
        code = 0
    except BaseException as exc:  # noqa: B902 (the child must reach _exit whatever happens)
        try:
            log.warning("fastlower: the cache entry %s was not stored: %r", key, exc)
        except BaseException:  # noqa: B902
            pass
    finally:
        os._exit(code)  # no atexit handler, no buffer of the caller's flushed twice


def pending() -> Dict[str, int]:
    """The children still storing, by cache key (their pids)."""
    with _LOCK:
        _reap()
        return dict(_PENDING)


def wait_for(key: str) -> None:
    """Waits until this process's child storing ``key``, if any, has finished (a child
    has none, and holds :data:`_LOCK` as the parent forked it)."""
    if _IN_CHILD:
        return
    with _LOCK:
        pid = _PENDING.pop(key, None)
    if pid is not None:
        _wait(pid, None)


def wait_all(timeout: Optional[float] = None) -> None:
    """Waits for every child still storing (killing any still running after ``timeout``
    seconds, :data:`EXIT_TIMEOUT` by default)."""
    with _LOCK:
        children = list(_PENDING.items())
        _PENDING.clear()
    deadline = time.monotonic() + (EXIT_TIMEOUT if timeout is None else timeout)
    for key, pid in children:
        if not _wait(pid, deadline):
            log.warning("fastlower: the cache entry %s was still being stored after %.0fs; "
                        "stopped (it is not in the cache)", key, EXIT_TIMEOUT)


def _wait(pid: int, deadline: Optional[float]) -> bool:
    """Reaps ``pid``; False if it had to be killed at ``deadline``."""
    while True:
        try:
            done, _ = os.waitpid(pid, 0 if deadline is None else os.WNOHANG)
        except ChildProcessError:  # already reaped (by a caller's SIGCHLD handler)
            return True
        if done:
            return True
        if time.monotonic() > deadline:  # type: ignore[operator]
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ProcessLookupError, ChildProcessError):
                pass
            return False
        time.sleep(0.05)


def _reap() -> None:
    for key, pid in list(_PENDING.items()):
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:
            done = pid
        if done:
            del _PENDING[key]
