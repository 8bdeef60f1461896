"""Failures in preprocess: typed, naming the partition; the caller's program unchanged; no
worker left running."""

import os
import signal

import pytest
from executorch.exir.backend.backend_details import BackendDetails, PreprocessResult
from executorch.exir.backend.compile_spec_schema import CompileSpec
from executorch.exir.backend.partitioner import DelegationSpec

import fastlower
import fastlower.preprocess as pp

from .helpers import (
    LinearPartitioner, assert_unchanged, child_processes, edge_blocks, new_children, snapshot,
)

BACKEND = "PreprocessTestEchoBackend"


def _at(k_bad, key, value=b"1"):
    return lambda k: [CompileSpec(key, value)] if k == k_bad else []


@pytest.mark.parametrize("workers", [1, 2])
def test_backend_error_keeps_its_class_and_names_the_partition(workers):
    children_before = child_processes()
    program = edge_blocks(4)
    before = snapshot(program)
    with pp.options(workers=workers), pytest.raises(ValueError) as info:
        fastlower.to_backend(program, LinearPartitioner(specs_for=_at(2, "fail")))
    err = info.value
    assert isinstance(err, fastlower.FastlowerError) and isinstance(err, pp.PreprocessError)
    assert (err.tag, err.backend_id, err.method) == ("tag2", BACKEND, "forward")
    assert str(err) == "echo backend asked to fail" and err.args == err.__cause__.args
    assert any("'tag2'" in note and BACKEND in note for note in err.__notes__)
    assert type(err.__cause__) is ValueError
    assert_unchanged(program, before)
    assert not new_children(children_before)


def failing_late_and_early(k: int):
    """Partition 1 fails after a pause, partition 3 at once: 3's failure arrives first."""
    if k == 1:
        return [CompileSpec("sleep", b"1.5"), CompileSpec("fail", b"1")]
    return [CompileSpec("fail", b"1")] if k == 3 else []


@pytest.mark.parametrize("workers", [1, 2])
def test_of_several_failures_the_earliest_partition_is_raised(workers):
    """The reference stops at the first partition that fails, in partition order; with
    workers the caller gets that partition's error too, not the first to arrive."""
    children_before = child_processes()
    program = edge_blocks(5)
    before = snapshot(program)
    with pp.options(workers=workers), pytest.raises(ValueError) as info:
        fastlower.to_backend(program, LinearPartitioner(specs_for=failing_late_and_early))
    assert info.value.tag == "tag1"
    assert_unchanged(program, before)
    assert not new_children(children_before)


def test_worker_killed_by_a_signal_is_a_typed_error():
    children_before = child_processes()
    program = edge_blocks(4)
    before = snapshot(program)
    with pp.options(workers=2), pytest.raises(pp.WorkerDiedError) as info:
        fastlower.to_backend(program, LinearPartitioner(
            specs_for=_at(1, "kill", str(os.getpid()).encode())))
    err = info.value
    assert isinstance(err, fastlower.FastlowerError)
    assert err.partitions == ["tag1"]
    assert "'tag1'" in str(err) and "SIGKILL" in str(err)
    assert_unchanged(program, before)
    assert not new_children(children_before)


def test_ctrl_c_stops_every_worker():
    children_before = child_processes()
    program = edge_blocks(4)
    before = snapshot(program)
    # Python's own Ctrl-C handler (another suite's fixture may have replaced it)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pp.options(workers=2), pytest.raises(KeyboardInterrupt):
            fastlower.to_backend(program, LinearPartitioner(
                specs_for=_at(0, "interrupt", str(os.getpid()).encode())))
    finally:
        signal.signal(signal.SIGINT, previous)
    assert_unchanged(program, before)
    assert not new_children(children_before)


def test_lowering_works_again_after_a_failure():
    children_before = child_processes()
    with pp.options(workers=2), pytest.raises(pp.WorkerDiedError):
        fastlower.to_backend(edge_blocks(3), LinearPartitioner(
            specs_for=_at(0, "kill", str(os.getpid()).encode())))
    with pp.options(workers=2):
        fastlower.to_backend(edge_blocks(3), LinearPartitioner())
    assert fastlower.last_report().preprocess_runner == "fork pool, 2 workers"
    assert not new_children(children_before)


def test_backend_error_subclass_is_reused_and_catchable_as_original():
    err = pp.failures.backend_error(KeyError("k"), "t", "B", "forward")
    again = pp.failures.backend_error(KeyError("j"), "t", "B", "forward")
    assert type(err) is type(again)
    assert isinstance(err, KeyError) and isinstance(err, pp.PreprocessError)
    passthrough = KeyboardInterrupt()
    assert pp.failures.backend_error(passthrough, "t", "B", "m") is passthrough


class PreprocessTestFailingOverrideBackend(BackendDetails):
    """Overrides ``preprocess_multimethod`` (so its partitions run serially, after the
    parallel batch); ``preprocess`` fails when asked to."""

    @staticmethod
    def preprocess(edge_program, compile_specs):
        if any(s.key == "fail" for s in compile_specs):
            raise KeyError("override backend asked to fail")
        return PreprocessResult(processed_bytes=b"override")

    @classmethod
    def preprocess_multimethod(cls, edge_programs, compile_specs):
        return {m: [cls.preprocess(p, s) for p, s in zip(programs, compile_specs[m])]
                for m, programs in edge_programs.items()}


class MixedBackendsPartitioner(LinearPartitioner):
    """Partition ``override_at`` goes to the override backend, the others to the echo backend."""

    def __init__(self, override_at: int, specs_for):
        super().__init__(specs_for=specs_for)
        self.override_at = override_at

    def partition(self, exported_program):
        result = super().partition(exported_program)
        tag = f"tag{self.override_at}"
        spec = result.partition_tags[tag]
        result.partition_tags[tag] = DelegationSpec(PreprocessTestFailingOverrideBackend.__name__,
                                                    spec.compile_specs)
        return result


@pytest.mark.parametrize("workers", [1, 2])
@pytest.mark.parametrize("override_at, default_at, raised", [
    (1, 3, (KeyError, "tag1")),  # the serial override fails first in partition order
    (3, 1, (ValueError, "tag1")),  # the parallel batch's failure comes first
])
def test_earliest_failure_across_the_parallel_batch_and_serial_backends(workers, override_at,
                                                                         default_at, raised):
    """A backend that overrides preprocess_multimethod runs after the parallel batch; its
    failure still ranks by partition order against the batch's, as the reference meets them."""
    children_before = child_processes()
    program = edge_blocks(5)
    before = snapshot(program)
    fail_at = lambda k: [CompileSpec("fail", b"1")] if k in (override_at, default_at) else []  # noqa: E731
    with pp.options(workers=workers), pytest.raises(raised[0]) as info:
        fastlower.to_backend(program, MixedBackendsPartitioner(override_at, fail_at))
    assert info.value.tag == raised[1]
    assert_unchanged(program, before)
    assert not new_children(children_before)
