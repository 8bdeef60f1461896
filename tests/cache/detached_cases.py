"""Scenarios of ``fastlower.cache.detached``, each run by ``test_detached`` in a fresh
process: a fork is refused while other threads are alive, as in a pytest-xdist worker
(execnet's thread), so the tests need a process of their own.

``python -m tests.cache.detached_cases CASE FOLDER``: runs ``CASE`` (a function below)
with an empty cache folder ``FOLDER``; exit 0 when its assertions hold.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time
from pathlib import Path
from typing import Dict, List

import torch

from fastlower.cache import access, detached
from tests.cache.helpers import base_args, cache_at, lower, small_aten
from tests.cache.lower_once import _Lines


_LOG = _Lines()
logging.getLogger("fastlower.cache").addHandler(_LOG)
logging.getLogger("fastlower.cache").setLevel(logging.DEBUG)


def _forks() -> List[int]:
    """The pids of the children forked so far (their debug lines)."""
    return [int(line.split("in process ")[1].split()[0]) for line in _LOG.lines
            if line.startswith("storing ")]


def _state(manager) -> Dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in manager.exported_program().state_dict.items()}


def next_lookup_waits(folder: Path) -> None:
    detached.DETACH_MIN_BYTES = 0
    with cache_at(folder):
        first, report = lower(small_aten(), **base_args())
        (child,) = _forks()
        assert child != os.getpid() and report.lowering_cache == "miss"
        second, report = lower(small_aten(), **base_args())
    assert report.lowering_cache == "hit", report.lowering_cache
    assert bytes(second.to_executorch().buffer) == bytes(first.to_executorch().buffer)
    try:  # reaped by the lookup that waited for it
        os.waitpid(child, os.WNOHANG)
        raise AssertionError(f"child {child} was not reaped")
    except ChildProcessError:
        pass


def entry_is_as_returned(folder: Path) -> None:
    detached.DETACH_MIN_BYTES = 0
    with cache_at(folder):
        first, _ = lower(small_aten(), **base_args())
        assert _forks()
        returned = _state(first)
        assert returned
        with torch.no_grad():  # the caller changes its program at once, as passes may
            for tensor in first.exported_program().state_dict.values():
                tensor.add_(1.0)
        detached.wait_all(timeout=120)
        again, report = lower(small_aten(), **base_args())
    assert report.lowering_cache == "hit"
    stored = _state(again)
    assert stored.keys() == returned.keys()
    assert all(torch.equal(stored[k], returned[k]) for k in returned), "the entry saw the change"


def small_or_threaded_inline(folder: Path) -> None:
    with cache_at(folder / "small"):  # the default threshold: this entry is small
        lower(small_aten(), **base_args())
    assert not _forks() and not detached.pending()
    detached.DETACH_MIN_BYTES = 0
    release = threading.Event()
    other = threading.Thread(target=release.wait, daemon=True)
    other.start()
    try:
        with cache_at(folder / "threads"):
            lower(small_aten(), **base_args())
    finally:
        release.set()
        other.join()
    assert not _forks() and not detached.pending()
    with cache_at(folder / "threads"):
        _, report = lower(small_aten(), **base_args())
    assert report.lowering_cache == "hit"  # stored before the call returned


def hung_child_killed(folder: Path) -> None:
    assert detached.store_detached("test:hung", 1 << 40, lambda: time.sleep(600))
    (pid,) = detached.pending().values()
    start = time.monotonic()
    detached.wait_all(timeout=0.5)
    assert time.monotonic() - start < 30
    assert not detached.pending()
    try:
        os.waitpid(pid, os.WNOHANG)
        raise AssertionError(f"child {pid} was not reaped")
    except ChildProcessError:
        pass
    assert any("test:hung" in line for line in _LOG.lines)


def failing_child_harmless(folder: Path) -> None:
    real = access.store_checked

    def broken(*args, **kwargs):
        raise OSError("disk on fire")

    detached.DETACH_MIN_BYTES = 0
    access.store_checked = broken  # inherited by the child
    try:
        with cache_at(folder):
            _, report = lower(small_aten(), **base_args())
            assert report.lowering_cache == "miss" and _forks()
            detached.wait_all(timeout=120)
    finally:
        access.store_checked = real
    with cache_at(folder):
        _, report = lower(small_aten(), **base_args())
    assert report.lowering_cache == "miss"


def tqdm_waiter_kept_out(folder: Path) -> None:
    """A parent thread waiting for tqdm's lock (its monitor's) while the store child is
    forked gets it only once the parent lets go: the child must not release the lock's
    multiprocessing semaphore, which it shares with the parent."""
    import io

    from tqdm import tqdm

    bar = tqdm(total=1, file=io.StringIO())  # starts tqdm's monitor thread
    lock = tqdm.get_lock()
    # the waiter must get the lock only after the parent's fork returned (and it slept)
    state = {"parent_back": False, "parent_back_when_acquired": None}
    real_fork = os.fork

    def waiter() -> None:
        lock.acquire()
        state["parent_back_when_acquired"] = state["parent_back"]
        lock.release()

    def fork_with_a_waiter() -> int:
        threading.Thread(target=waiter, daemon=True).start()
        time.sleep(0.5)  # the waiter is blocked in acquire()
        pid = real_fork()
        if pid:
            time.sleep(0.5)  # the child goes first (a large parent is slow after a fork)
            state["parent_back"] = True  # still holding the lock (_monitors_paused)
        return pid

    done = folder / "stored"
    folder.mkdir(parents=True, exist_ok=True)
    detached.DETACH_MIN_BYTES = 0
    os.fork = fork_with_a_waiter
    try:
        assert detached.store_detached("test:tqdm", 1, lambda: done.write_text("ok"))
    finally:
        os.fork = real_fork
    detached.wait_for("test:tqdm")
    deadline = time.monotonic() + 30
    while state["parent_back_when_acquired"] is None and time.monotonic() < deadline:
        time.sleep(0.01)
    bar.close()
    assert done.read_text() == "ok"
    assert state["parent_back_when_acquired"] is True, state


def preprocess_results_held(folder: Path) -> None:
    """Results of at least ``HOLD_MIN_BYTES`` are stored by one child after the batch; the
    next lookup of one of their keys waits for it and hits; the entries are the results."""
    import fastlower
    import fastlower.preprocess as pp
    from fastlower.preprocess import stored_later
    from tests.preprocess.helpers import LinearPartitioner, edge_blocks, fingerprint

    detached.DETACH_MIN_BYTES = stored_later.HOLD_MIN_BYTES = 0
    parent, real_put = os.getpid(), stored_later.PreprocessCache.put

    def slow_in_a_child(self, *args, **kwargs):  # so that the next lookup must wait
        if os.getpid() != parent:
            time.sleep(1.0)
        return real_put(self, *args, **kwargs)

    stored_later.PreprocessCache.put = slow_in_a_child  # inherited by the child
    with pp.options(workers=1, cache_dir=folder):
        cold = fastlower.to_backend(edge_blocks(3), LinearPartitioner())
        (child,) = _forks()
        assert child != os.getpid()
        assert any(line.startswith("storing preprocess:") for line in _LOG.lines), _LOG.lines
        assert detached.pending()  # still storing, or done but not reaped yet
        warm = fastlower.to_backend(edge_blocks(3), LinearPartitioner())
        assert fastlower.last_report().cache_hits == {"PreprocessTestEchoBackend": 3}
        assert not detached.pending()  # the lookup waited for it
    assert fingerprint(warm) == fingerprint(cold)
    try:  # reaped by the lookup that waited for it
        os.waitpid(child, os.WNOHANG)
        raise AssertionError(f"child {child} was not reaped")
    except ChildProcessError:
        pass
    stored_later.HOLD_MIN_BYTES = 1 << 40  # none held: stored inline, no child
    with pp.options(workers=1, cache_dir=folder / "inline"):
        fastlower.to_backend(edge_blocks(3), LinearPartitioner())
    assert len(_forks()) == 1


if __name__ == "__main__":
    globals()[sys.argv[1]](Path(sys.argv[2]))
