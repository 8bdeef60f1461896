"""Parallel preprocess gives the serial result, in the reference's order."""

import os

import pytest
from executorch.exir.backend.compile_spec_schema import CompileSpec

import fastlower
import fastlower.preprocess as pp
from fastlower.lowering.spec import MethodProgramsPartitionerSpec

from .helpers import (
    LinearPartitioner, PreprocessTestMultimethodBackend, child_processes, new_children, delegates,
    edge_blocks, fingerprint,
)


def _specs(k):
    return [CompileSpec("partition", str(k).encode())]


def _lower(workers, program=None, **opts):
    program = program if program is not None else edge_blocks(4)
    with pp.options(workers=workers, **opts):
        lowered = fastlower.to_backend(program, LinearPartitioner(specs_for=_specs))
    return lowered, fastlower.last_report()


def test_workers_give_the_serial_result():
    children_before = child_processes()
    serial, report = _lower(1)
    assert report.preprocess_runner == "serial"
    assert len(delegates(serial)) == 4
    for workers in (2, 3):
        parallel, report = _lower(workers)
        assert report.preprocess_runner == f"fork pool, {workers} workers"
        assert fingerprint(parallel) == fingerprint(serial)
        assert [r["tag"] for r in report.preprocess_records] == [f"tag{k}" for k in range(4)]
        assert all(r["preprocess_seconds"] > 0 and r["cache_hit"] is None
                   for r in report.preprocess_records)
    assert not new_children(children_before)


def test_environment_sets_workers(monkeypatch):
    monkeypatch.setenv("FASTLOWER_WORKERS", "2")
    _, report = _lower(None)
    assert report.preprocess_runner == "fork pool, 2 workers"
    monkeypatch.setenv("FASTLOWER_WORKERS", "1")
    _, report = _lower(None)
    assert report.preprocess_runner == "serial"


def test_default_workers_are_the_usable_cores(monkeypatch):
    monkeypatch.delenv("FASTLOWER_WORKERS", raising=False)
    assert pp.default_workers() == len(os.sched_getaffinity(0))
    assert pp.configuration.resolve().workers == pp.default_workers()


def test_one_partition_stays_serial():
    program = edge_blocks(1)
    _, report = _lower(4, program)
    assert report.preprocess_runner == "serial"


def test_methods_spec_parallel_equals_serial():
    def run(workers):
        spec = MethodProgramsPartitionerSpec(
            {"forward": edge_blocks(3), "other": edge_blocks(2)},
            {"forward": LinearPartitioner(specs_for=_specs),
             "other": LinearPartitioner(specs_for=_specs)})
        with pp.options(workers=workers):
            out = fastlower.to_backend(spec)
        return {m: fingerprint(p) for m, p in out.items()}, fastlower.last_report()

    serial, _ = run(1)
    parallel, report = run(2)
    assert parallel == serial
    assert report.preprocess_runner == "fork pool, 2 workers"
    assert [(r["method"], r["tag"]) for r in report.preprocess_records] == [
        ("forward", "tag0"), ("forward", "tag1"), ("forward", "tag2"),
        ("other", "tag0"), ("other", "tag1")]


def test_backend_with_own_preprocess_multimethod_stays_serial():
    PreprocessTestMultimethodBackend.calls.clear()
    spec = MethodProgramsPartitionerSpec(
        {"forward": edge_blocks(3), "other": edge_blocks(2)},
        {m: LinearPartitioner(PreprocessTestMultimethodBackend) for m in ("forward", "other")})
    with pp.options(workers=2):
        out = fastlower.to_backend(spec)
    assert PreprocessTestMultimethodBackend.calls == [os.getpid()]  # called once, here
    found = [d for p in out.values() for d in delegates(p)]
    assert len(found) == 5
    assert all(d[2].endswith(str(os.getpid()).encode()) for d in found)
    # the single-program path calls preprocess per partition: also here, in order
    with pp.options(workers=2):
        single = fastlower.to_backend(edge_blocks(3),
                                      LinearPartitioner(PreprocessTestMultimethodBackend))
    assert fastlower.last_report().preprocess_runner == "serial"
    assert all(d[2].endswith(str(os.getpid()).encode()) for d in delegates(single))


def test_progress_bar_when_asked(capsys):
    import threading

    import tqdm

    interval = tqdm.tqdm.monitor_interval
    monitors = [t for t in threading.enumerate() if type(t).__name__ == "TMonitor"]
    _lower(2, progress=True)
    assert "preprocess" in capsys.readouterr().err
    # fastlower's bar has no monitor thread, and every other bar keeps tqdm's setting
    assert tqdm.tqdm.monitor_interval == interval
    assert [t for t in threading.enumerate() if type(t).__name__ == "TMonitor"] == monitors
    _lower(2, progress=False)
    assert capsys.readouterr().err == ""


def test_options_restore_previous():
    with pp.options(workers=3, cache_dir="/nonexistent"):
        with pp.options(workers=1):
            assert pp.configuration.current().workers == 1
            assert str(pp.configuration.current().cache_dir) == "/nonexistent"
        assert pp.configuration.current().workers == 3
    assert pp.configuration.current().workers is None
    with pytest.raises(ValueError):
        with pp.options(workers=0):
            pp.configuration.resolve()


def test_two_threads_lower_at_once_on_fork_pools():
    """Two lowerings in two threads, each forking its own workers at the same moment,
    with its own options() block: each gets its own partitions and settings."""
    import threading

    serial = {n: fingerprint(_lower(1, edge_blocks(n))[0]) for n in (3, 4)}
    children_before = child_processes()
    for _ in range(4):
        barrier = threading.Barrier(2)
        got, errors = {}, []

        # run and joined in this iteration; the defaults bind this iteration's objects
        def lower(n: int, workers: int, barrier=barrier, got=got, errors=errors) -> None:
            try:
                with pp.options(workers=workers):
                    barrier.wait()
                    program = edge_blocks(n)
                    lowered = fastlower.to_backend(program, LinearPartitioner(specs_for=_specs))
                got[n] = (fingerprint(lowered), fastlower.last_report().preprocess_runner)
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors.append(exc)

        threads = [threading.Thread(target=lower, args=(3, 2)),
                   threading.Thread(target=lower, args=(4, 3))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        assert got[3] == (serial[3], "fork pool, 2 workers")
        assert got[4] == (serial[4], "fork pool, 3 workers")
    assert not new_children(children_before)


def test_options_block_is_per_thread():
    import threading

    seen = {}
    inside, leave = threading.Event(), threading.Event()

    def other() -> None:
        with pp.options(workers=5):
            inside.set()
            leave.wait(10)
            seen["other"] = pp.configuration.resolve().workers

    thread = threading.Thread(target=other)
    with pp.options(workers=2):
        thread.start()
        inside.wait(10)
        seen["main"] = pp.configuration.resolve().workers
        leave.set()
        thread.join()
    assert seen == {"main": 2, "other": 5}


def test_workers_inherit_a_backends_warm_caches():
    """The first partition of a backend new to this process runs here, before the fork:
    every worker inherits what that first preprocess filled (without it each
    worker would trace XNNPACK's pattern graphs again for its first partition)."""
    from .helpers import PreprocessTestWarmUpBackend, delegates

    assert not PreprocessTestWarmUpBackend.warm
    with pp.options(workers=2):
        lowered = fastlower.to_backend(edge_blocks(5),
                                       LinearPartitioner(PreprocessTestWarmUpBackend))
    ran = [bytes(d[2]).decode().split(":") for d in delegates(lowered)]
    assert len(ran) == 5
    here = [warm for pid, warm in ran if int(pid) == os.getpid()]
    in_workers = [warm for pid, warm in ran if int(pid) != os.getpid()]
    assert here == ["False"], ran  # the primer: the only cold call
    assert in_workers == ["True"] * 4, ran
    assert fastlower.last_report().preprocess_runner == "fork pool, 2 workers"
    # a later lowering in this process forks at once: every partition in a warm worker
    with pp.options(workers=2):
        lowered = fastlower.to_backend(edge_blocks(3),
                                       LinearPartitioner(PreprocessTestWarmUpBackend))
    ran = [bytes(d[2]).decode().split(":") for d in delegates(lowered)]
    assert all(int(pid) != os.getpid() and warm == "True" for pid, warm in ran), ran
