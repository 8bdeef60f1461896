"""Large entries are stored by a forked child, off the caller's critical path (issue 17).

``fastlower.cache.detached``: the child stores a copy-on-write snapshot of the
lowering as it was returned; the caller's next lookup of that key and its exit wait
for the child; no child outlives its parent; a hung child is killed, never waited
for forever; with other threads alive the store runs inline. Each case runs in a
fresh process (``detached_cases.py``): pytest-xdist's worker has a thread of its own,
with which fastlower rightly refuses to fork.
"""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import pytest
from tests import python_children



ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")


@pytest.mark.parametrize("case", [
    "next_lookup_waits",  # a child stores the entry; the next lookup of its key waits for it
    "entry_is_as_returned",  # the entry is the lowering as returned, not as changed afterwards
    # small entries, and callers with other threads, store inline
    pytest.param("small_or_threaded_inline", marks=pytest.mark.slow),
    "hung_child_killed",  # a hung child is killed at the deadline, never waited for forever
    "failing_child_harmless",  # a child that fails leaves no entry and the caller unharmed
    "preprocess_results_held",  # large preprocess results: stored by a child after the batch
    # the child does not release the tqdm lock the parent holds
    pytest.param("tqdm_waiter_kept_out", marks=pytest.mark.slow),
])
def test_detached_store(case, tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT), FASTLOWER_WORKERS="1")
    env.pop("FASTLOWER_CACHE_DIR", None)
    done = python_children.run([sys.executable, "-m", "tests.cache.detached_cases", case,
                                str(tmp_path / "cache")], cwd=ROOT, env=env, capture_output=True,
                               text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]


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
    done = python_children.run([sys.executable, "-c", _SCRIPT, str(cache), str(pte)], cwd=ROOT,
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
