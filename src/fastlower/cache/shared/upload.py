"""Uploads to the shared store, off the caller's path, finished before the process exits.

A job is queued right after the local tier stored an entry; one thread (started when
a job arrives, ending when the queue is empty) runs the jobs in order. The lowering
returns without waiting. Two points wait for the queue, each bounded:

* :func:`drain` before each lookup in the store (``tier.lookup``): the key looked up
  may be one being uploaded, and the lowering that follows a miss should find no
  upload thread alive (the preprocess pool forks only when no other Python thread
  is, else it spawns, slower); the wait is the rest of the upload, bounded by the
  store's timeout;
* the process's exit (``atexit``): :data:`EXIT_TIMEOUT` seconds at most, then the
  thread is left (a daemon: it ends with the process). An object is written whole or
  not at all (a single put or a completed multipart upload on S3, a staging name
  linked into place in a directory), so an interrupted upload leaves no entry.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
from collections import deque
from typing import Callable, Deque, List, Optional

log = logging.getLogger("fastlower.cache.shared")

EXIT_TIMEOUT = 120.0

_LOCK = threading.Lock()
_JOBS: Deque[Callable[[], None]] = deque()
_THREAD: Optional[threading.Thread] = None
_AT_EXIT: List[Callable[[], None]] = []  # run after the last upload (the run's statistics)
_REGISTERED = False


def submit(job: Callable[[], None]) -> None:
    """Runs ``job`` on the upload thread (started if none runs)."""
    global _THREAD, _REGISTERED
    with _LOCK:
        _JOBS.append(job)
        if not _REGISTERED:
            atexit.register(_at_exit)
            _REGISTERED = True
        if _THREAD is None:
            _THREAD = threading.Thread(target=_work, name="fastlower-shared-upload",
                                       daemon=True)
            _THREAD.start()


def at_exit(action: Callable[[], None]) -> None:
    """Runs ``action`` once at exit, after the uploads (registered once per action)."""
    global _REGISTERED
    with _LOCK:
        if action not in _AT_EXIT:
            _AT_EXIT.append(action)
        if not _REGISTERED:
            atexit.register(_at_exit)
            _REGISTERED = True


def _work() -> None:
    global _THREAD
    while True:
        with _LOCK:
            if not _JOBS:
                _THREAD = None
                return
            job = _JOBS.popleft()
        try:
            job()
        except Exception as exc:  # a job reports its own failures; this is the last net
            log.debug("shared-store upload failed: %r", exc)


def pending() -> int:
    """Jobs queued or running."""
    with _LOCK:
        return len(_JOBS) + (_THREAD is not None)


def drain(timeout: Optional[float] = None) -> bool:
    """Waits until every queued upload has finished; False if ``timeout`` seconds passed."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        with _LOCK:
            thread = _THREAD
        if thread is None:
            return True
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            return False
        thread.join(left)


def _at_exit() -> None:
    if not drain(EXIT_TIMEOUT):
        log.warning("fastlower: uploads to the shared cache still running after %.0fs at "
                    "exit were abandoned (those entries are not in the shared store)",
                    EXIT_TIMEOUT)
    with _LOCK:
        actions = list(_AT_EXIT)
    for action in actions:
        try:
            action()
        except Exception as exc:  # statistics are best effort
            log.debug("at exit: %r", exc)
