"""Large entries are stored by a forked child, off the caller's critical path (issue 17).

``fastlower.cache.detached``: the child stores a copy-on-write snapshot of the
lowering as it was returned; the caller's next lookup of that key and its exit wait
for the child; no child outlives its parent; a hung child is killed, never waited
for forever; with other threads alive the store runs inline.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
import torch

from fastlower.cache import detached

from .helpers import base_args, cache_at, lower, small_aten

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


@pytest.fixture
def detach_everything(monkeypatch):
    """Every entry counts as large; no child is left when the test ends."""
    monkeypatch.setattr(detached, "DETACH_MIN_BYTES", 0)
    yield
    detached.wait_all(timeout=60)


def _forks(caplog) -> list:
    return [r.getMessage() for r in caplog.records
            if r.name == "fastlower.cache" and r.getMessage().startswith("storing ")]


def _state(manager) -> dict:
    return {k: v.clone() for k, v in manager.exported_program().state_dict.items()}


def test_a_child_stores_the_entry_and_the_next_lookup_waits_for_it(tmp_path, caplog,
                                                                   detach_everything):
    caplog.set_level(logging.DEBUG, logger="fastlower.cache")
    with cache_at(tmp_path / "cache"):
        first, report = lower(small_aten(), **base_args())
        (line,) = _forks(caplog)
        child = int(line.split("in process ")[1].split()[0])
        assert child != os.getpid() and report.lowering_cache == "miss"
        second, report = lower(small_aten(), **base_args())
    assert report.lowering_cache == "hit"
    assert bytes(second.to_executorch().buffer) == bytes(first.to_executorch().buffer)
    with pytest.raises(ChildProcessError):  # reaped by the lookup that waited for it
        os.waitpid(child, os.WNOHANG)


def test_the_entry_is_the_lowering_as_returned_not_as_changed_afterwards(tmp_path,
                                                                         detach_everything):
    with cache_at(tmp_path / "cache"):
        first, _ = lower(small_aten(), **base_args())
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
    assert all(torch.equal(stored[k], returned[k]) for k in returned)


def test_small_entries_and_threaded_callers_store_inline(tmp_path, caplog, monkeypatch):
    caplog.set_level(logging.DEBUG, logger="fastlower.cache")
    with cache_at(tmp_path / "small"):  # the default threshold: this entry is small
        lower(small_aten(), **base_args())
    assert not _forks(caplog) and not detached.pending()

    monkeypatch.setattr(detached, "DETACH_MIN_BYTES", 0)
    release = threading.Event()
    other = threading.Thread(target=release.wait, daemon=True)
    other.start()
    try:
        with cache_at(tmp_path / "threads"):
            lower(small_aten(), **base_args())
    finally:
        release.set()
        other.join()
    assert not _forks(caplog) and not detached.pending()
    with cache_at(tmp_path / "threads"):
        _, report = lower(small_aten(), **base_args())
    assert report.lowering_cache == "hit"  # stored before the call returned


def test_a_hung_child_is_killed_at_the_deadline_not_waited_for(caplog):
    caplog.set_level(logging.WARNING, logger="fastlower.cache")
    assert detached.store_detached("test:hung", 1 << 40, lambda: time.sleep(600))
    (pid,) = detached.pending().values()
    start = time.monotonic()
    detached.wait_all(timeout=0.5)
    assert time.monotonic() - start < 30
    assert not detached.pending()
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)
    assert any("test:hung" in r.getMessage() for r in caplog.records)


def test_a_failing_child_leaves_no_entry_and_the_caller_unharmed(tmp_path, monkeypatch,
                                                                 detach_everything):
    from fastlower.cache import access

    def broken(*args, **kwargs):
        raise OSError("disk on fire")

    monkeypatch.setattr(access, "store_checked", broken)  # inherited by the child
    with cache_at(tmp_path / "cache"):
        _, report = lower(small_aten(), **base_args())
        assert report.lowering_cache == "miss"
        detached.wait_all(timeout=120)
        monkeypatch.undo()
        monkeypatch.setattr(detached, "DETACH_MIN_BYTES", 0)
        _, report = lower(small_aten(), **base_args())
    assert report.lowering_cache == "miss"


_SCRIPT = textwrap.dedent("""
    import logging, sys
    from fastlower.cache import detached
    detached.DETACH_MIN_BYTES = 0
    lines = []
    class Keep(logging.Handler):
        def emit(self, record):
            lines.append(record.getMessage())
    logging.getLogger("fastlower.cache").addHandler(Keep())
    logging.getLogger("fastlower.cache").setLevel(logging.DEBUG)
    from tests.cache.helpers import base_args, cache_at, lower, small_aten
    with cache_at(sys.argv[1]):
        manager, report = lower(small_aten(), **base_args())
    pte = bytes(manager.to_executorch().buffer)
    open(sys.argv[2], "wb").write(pte)
    forks = [l for l in lines if l.startswith("storing ")]
    child = forks[0].split("in process ")[1].split()[0] if forks else -1
    print(report.lowering_cache, len(forks), child)
""")


def _process(cache: Path, pte: Path) -> list:
    env = dict(os.environ, PYTHONPATH=str(ROOT), FASTLOWER_WORKERS="1")
    env.pop("FASTLOWER_CACHE_DIR", None)
    done = subprocess.run([sys.executable, "-c", _SCRIPT, str(cache), str(pte)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    return done.stdout.split()[-3:]


def test_two_processes_the_first_stores_in_a_child_it_waits_for_at_exit(tmp_path):
    cache = tmp_path / "cache"
    status, forks, child = _process(cache, tmp_path / "first.pte")
    assert status == "miss" and int(forks) == 1
    with pytest.raises(ProcessLookupError):  # it did not outlive its parent
        os.kill(int(child), 0)
    status, forks, _ = _process(cache, tmp_path / "second.pte")
    assert status == "hit" and int(forks) == 0
    assert (tmp_path / "first.pte").read_bytes() == (tmp_path / "second.pte").read_bytes()
