"""The native core's lazily imported Python helpers (``gil_safe_call_once_and_store``):
first use from several threads at once, in a fresh process, neither deadlocks nor
gives different answers."""

import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent("""
    import threading
    import fastlower._core as core

    barrier = threading.Barrier(8)
    results = []

    def first_use():
        barrier.wait(30)
        results.append((core.snake_case("LayerNorm"), core.Namespace(["input"]).create("input")))

    threads = [threading.Thread(target=first_use) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(results) == 8 and len(set(results)) == 1, results
    print(results[0])
""")


def test_first_use_from_threads_at_once():
    pytest.importorskip("fastlower._core")
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    from fastlower._twin.namespace import Namespace, snake_case

    twin = (snake_case("LayerNorm"), Namespace(["input"]).create("input"))
    assert done.stdout.strip() == repr(twin)
