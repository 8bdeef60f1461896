"""The long phases of a lowering, announced on ``logging.getLogger("fastlower.base.phases")``.

A lowering's longest waits are ExecuTorch's edge stage (decompositions and passes,
before any partitioner), ``to_backend`` and ``to_executorch``. Each phase logs one
INFO line when it starts and one with its elapsed time when it ends, so whoever
shows fastlower's INFO records (the ``fastlower`` command on a terminal or with
``-v``, or an application's own logging configuration) sees what is running.
The edge stage ends where fastlower's ``to_backend`` begins (:func:`edge_stage_done`);
the state is the calling thread's own.
"""

from __future__ import annotations

import logging
import threading
import time
from contextlib import contextmanager
from typing import Iterator, List

log = logging.getLogger("fastlower.base.phases")

_EDGE = threading.local()  # .starts: the open edge stages' start times, innermost last


@contextmanager
def phase(name: str) -> Iterator[None]:
    """Logs ``name`` when the block starts and its elapsed time when it ends."""
    start = time.perf_counter()
    log.info("%s ...", name)
    try:
        yield
    finally:
        log.info("%s: %.1f s", name, time.perf_counter() - start)


@contextmanager
def edge_stage(name: str) -> Iterator[None]:
    """The phase ``name`` (a ``to_edge_transform_and_lower``), whose edge stage runs until
    :func:`edge_stage_done` (fastlower's ``to_backend``) or the block's end."""
    starts: List[float] = _EDGE.__dict__.setdefault("starts", [])
    starts.append(time.perf_counter())
    try:
        with phase(name):
            log.info("edge stage (ExecuTorch's decompositions and passes) ...")
            yield
            edge_stage_done()
    finally:
        starts.pop()


def edge_stage_done() -> None:
    """The innermost open edge stage of this thread ends (logged once), if any."""
    starts: List[float] = _EDGE.__dict__.get("starts", [])
    if starts and starts[-1] >= 0:
        log.info("edge stage: %.1f s", time.perf_counter() - starts[-1])
        starts[-1] = -1.0
