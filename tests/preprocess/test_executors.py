"""The ``.pte`` is byte-identical with 1, 2 or N workers and on a Dask cluster (XNNPACK)."""

import contextlib
import functools
import logging
import os
import warnings

import pytest

import fastlower
import fastlower.preprocess as pp
from tests import python_children

from .helpers import (
    LinearPartitioner, assert_unchanged, child_processes, edge_blocks, fingerprint, new_children,
    snapshot,
)


def _pte(**opts) -> bytes:
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner

    from fastlower.frontends.examples.llama import export_llama
    from fastlower.patch import installed

    manager, _ = export_llama(1)
    with pp.options(**opts), installed(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        logging.disable(logging.WARNING)
        try:
            lowered = manager.to_backend(XnnpackPartitioner())
        finally:
            logging.disable(logging.NOTSET)
    return lowered.to_executorch().buffer


@functools.lru_cache(maxsize=None)
def _serial_pte() -> bytes:
    return _pte(workers=1)


@pytest.mark.parametrize("workers", [2, pytest.param(3, marks=pytest.mark.slow)])
def test_xnnpack_pte_identical_with_workers(workers):
    children_before = child_processes()
    serial = _serial_pte()
    assert _pte(workers=workers) == serial
    assert fastlower.last_report().preprocess_runner == f"fork pool, {workers} workers"
    assert not new_children(children_before)


@contextlib.contextmanager
def _nanny_environ_undone():
    """Dask's nanny writes its ``pre-spawn-environ`` (``MALLOC_TRIM_THRESHOLD_``, a hash seed)
    into this process's ``os.environ`` before it spawns a worker and never takes it back; put
    the environment back as it was, so later tests' python children see the pytest worker's."""
    before = dict(os.environ)
    try:
        yield
    finally:
        python_children.replace_environ(before)


@pytest.fixture(scope="module")
def dask_executor():
    distributed = pytest.importorskip("distributed")
    with _nanny_environ_undone():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1,
                                               processes=True, host="127.0.0.1",
                                               dashboard_address=None)
            client = distributed.Client(cluster)
        try:
            yield client.get_executor()
        finally:
            client.close()
            cluster.close()


def test_partition_programs_roundtrip_the_serializer():
    from fastlower.preprocess.jobs import PreprocessJob
    from fastlower.preprocess.transport import from_wire, to_wire

    from .helpers import PreprocessTestEchoBackend, echo_bytes

    captured = []
    original = PreprocessTestEchoBackend.preprocess

    def spy(program, specs):
        captured.append(program)
        return original(program, specs)

    PreprocessTestEchoBackend.preprocess = staticmethod(spy)
    try:
        with pp.options(workers=1):
            fastlower.to_backend(edge_blocks(3), LinearPartitioner())
    finally:
        PreprocessTestEchoBackend.preprocess = staticmethod(original)
    assert len(captured) == 3
    for program in captured:
        job = PreprocessJob(0, "PreprocessTestEchoBackend", PreprocessTestEchoBackend, program,
                            [], "tag0", "forward", False)
        back = from_wire(to_wire(job))
        assert back.backend is PreprocessTestEchoBackend
        assert echo_bytes(back.program, []) == echo_bytes(program, [])
        def nodes(p):
            return [(n.name, n.op, str(n.target), repr(n.args), repr(n.kwargs),
                     n.meta.get("debug_handle"), n.meta.get("delegation_tag"))
                    for n in p.graph.nodes]

        assert nodes(back.program) == nodes(program)
        assert back.program.graph_module.code == program.graph_module.code


def test_dask_cluster_gives_identical_results(dask_executor):
    with pp.options(workers=1):
        serial = fastlower.to_backend(edge_blocks(4), LinearPartitioner())
    with pp.options(executor=dask_executor):
        remote = fastlower.to_backend(edge_blocks(4), LinearPartitioner())
    assert fastlower.last_report().preprocess_runner.startswith("executor ")
    assert fingerprint(remote) == fingerprint(serial)


@pytest.mark.slow  # test_dask_cluster_gives_identical_results is the default run's
def test_dask_cluster_xnnpack_pte_identical(dask_executor):
    serial = _serial_pte()
    assert _pte(executor=dask_executor) == serial
    assert fastlower.last_report().preprocess_runner == "executor ClientExecutor"


def test_dask_backend_error_keeps_its_class(dask_executor):
    from executorch.exir.backend.compile_spec_schema import CompileSpec

    specs = lambda k: [CompileSpec("fail", b"1")] if k == 1 else []  # noqa: E731
    with pp.options(executor=dask_executor), pytest.raises(ValueError) as info:
        fastlower.to_backend(edge_blocks(3), LinearPartitioner(specs_for=specs))
    assert isinstance(info.value, pp.PreprocessError) and info.value.tag == "tag1"


def test_dask_of_several_failures_the_earliest_partition_is_raised(dask_executor):
    from .test_failures import failing_late_and_early

    with pp.options(executor=dask_executor), pytest.raises(ValueError) as info:
        fastlower.to_backend(edge_blocks(5), LinearPartitioner(specs_for=failing_late_and_early))
    assert info.value.tag == "tag1"


def test_dask_killed_worker_is_a_worker_died_error():
    """A worker killed in preprocess: Dask gives up on the task (``KilledWorker``, here after
    its first death) and fastlower raises ``WorkerDiedError`` naming the partition."""
    import dask
    from executorch.exir.backend.compile_spec_schema import CompileSpec

    distributed = pytest.importorskip("distributed")
    specs = lambda k: [CompileSpec("kill", str(os.getpid()).encode())] if k == 1 else []  # noqa: E731
    program = edge_blocks(3)
    before = snapshot(program)
    environ = dict(os.environ)
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")
        logging.disable(logging.CRITICAL)  # the nanny's and scheduler's reports of the death
        try:
            with _nanny_environ_undone(), \
                    distributed.LocalCluster(n_workers=1, threads_per_worker=1,
                                             processes=True, host="127.0.0.1",
                                             dashboard_address=None) as cluster, \
                    distributed.Client(cluster) as client, \
                    pp.options(executor=client.get_executor()), \
                    pytest.raises(pp.WorkerDiedError) as info:
                fastlower.to_backend(program, LinearPartitioner(specs_for=specs))
        finally:
            logging.disable(logging.NOTSET)
    err = info.value
    assert isinstance(err, fastlower.FastlowerError) and err.partitions == ["tag1"]
    assert "'tag1'" in str(err) and "KilledWorker" in str(err)
    assert type(err.__cause__).__name__ == "KilledWorker"
    assert dict(os.environ) == environ  # the nanny's variables taken back
    assert_unchanged(program, before)
