"""The native core's first use from several threads at once, in a fresh process: the
load-time hand-over of the name rules (``_core.set_name_rules``, called by
``load_core()``) and the lazily built Python helpers (``gil_safe_call_once_and_store``)
neither deadlock nor give different answers; a core used before the hand-over says so."""

import subprocess
import sys
import textwrap

import pytest

SCRIPT = textwrap.dedent("""
    import threading
    import fastlower._core as core
    from fastlower.core.loader import hand_over_rules, load_core

    barrier = threading.Barrier(8)
    results = []

    def first_use(k):
        barrier.wait(30)
        if k % 2:
            load_core()  # hands the rules over (None under FASTLOWER_FORCE_PYTHON=1)
        hand_over_rules(core)  # again, concurrently with the other threads' use
        results.append((core.snake_case("LayerNorm"), core.Namespace(["input"]).create("input")))

    threads = [threading.Thread(target=first_use, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(results) == 8 and len(set(results)) == 1, results
    print(results[0])
""")

BEFORE_HAND_OVER = textwrap.dedent("""
    import fastlower._core as core

    for use in (lambda: core.Namespace(), lambda: core.snake_case("x")):
        try:
            use()
        except RuntimeError as exc:
            assert "set_name_rules" in str(exc), exc
        else:
            raise SystemExit("a name function ran without the name rules")
    core.set_name_rules(["only_this"])
    assert core.Namespace().create("only_this") == "only_this_1"
    assert core.Namespace().create("max") == "max"  # not a rule any more
    ns = core.Namespace()
    core.set_name_rules(["max"])  # new rules serve new namespaces; ns keeps its own
    assert core.Namespace().create("max") == "max_1"
    assert ns.create("only_this") == "only_this_1"
    print("ok")
""")


def _run(script: str) -> str:
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.strip()


def test_first_use_from_threads_at_once():
    pytest.importorskip("fastlower._core")
    from fastlower.core.twin.namespace import Namespace, snake_case

    twin = (snake_case("LayerNorm"), Namespace(["input"]).create("input"))
    assert _run(SCRIPT) == repr(twin)


def test_name_rules_are_handed_over_not_imported():
    pytest.importorskip("fastlower._core")
    assert _run(BEFORE_HAND_OVER) == "ok"
