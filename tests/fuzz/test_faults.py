"""Faults: a partitioner that raises, a backend that raises in partition k of n,
``KeyboardInterrupt`` during ``preprocess``.

After each, for fastlower: the caller's program is unchanged (graph code,
signature, the data of every state-dict and constant tensor), the error is of
the class the reference raises for the same input, and no child process or file
is left behind (the lowering runs with its temporary directory and working
directory in an empty folder).
"""

from __future__ import annotations

import copy
import os
import tempfile
import warnings
from typing import Callable, List

import pytest
from executorch.exir.backend.backend_api import MethodProgramsPartitionerSpec
from executorch.exir.backend.partitioner import DelegationSpec, Partitioner, PartitionResult

import fastlower
from tests.differential import harness as H
from tests.fuzz.backends import FaultyBackend
from tests.fuzz.partitioners import _candidates
from tests.fuzz.programs import ProgramRecipe, build_program

N_PARTITIONS = 4


def _recipe() -> ProgramRecipe:
    """Parameters, a buffer, a mutated buffer and a lifted constant in a chain of ops."""
    return ProgramRecipe(
        steps=[("linear", 0, 0), ("relu", 2), ("add_buffer", 0, 3), ("tanh", 4),
               ("mm", 0, 5), ("mutate", "add_", 1, 6), ("mul_const", 0, 7), ("sin", 8),
               ("cat", ("const", 0), 9, 0)],
        outputs=[7, 10], n_linear=1, n_weights=1, n_cat_weights=1, n_buffers=2, n_consts=1,
        weights_seed=7)


@pytest.fixture(autouse=True)
def _in_process_preprocess(monkeypatch):
    """These faults are the in-process path's: FaultyBackend counts its calls in this
    process (a forked worker's count is its own). tests/preprocess covers workers."""
    monkeypatch.setenv("FASTLOWER_WORKERS", "1")


@pytest.fixture(scope="module")
def program():
    return build_program(_recipe(), seed=11)


class OneNodePerPartition(Partitioner):
    """The first ``n`` compute nodes, one partition each, for FaultyBackend."""

    def __init__(self, n: int = N_PARTITIONS) -> None:
        super().__init__()
        self.n = n

    def partition(self, exported_program):
        tags = {}
        for i, node in enumerate(_candidates(exported_program.graph_module)[: self.n]):
            node.meta["delegation_tag"] = f"p{i}"
            tags[f"p{i}"] = DelegationSpec(FaultyBackend.__name__, [])
        return PartitionResult(tagged_exported_program=exported_program, partition_tags=tags)


class RaisingPartitioner(Partitioner):
    """Tags a node, then fails."""

    def partition(self, exported_program):
        for node in exported_program.graph.nodes:
            if node.op == "call_function":
                node.meta["delegation_tag"] = "half_done"
                break
        raise ValueError("RaisingPartitioner: injected failure")


def _child_pids() -> List[int]:
    me = str(os.getpid())
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if f.read().rsplit(")", 1)[1].split()[1] == me:
                        found.append(int(entry))
            except OSError:
                continue
    return found


def _lower(impl: Callable, epm, partitioner, path: str):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if path == "direct":
            return impl(epm.exported_program("forward"), partitioner)
        if path == "spec":
            return impl(MethodProgramsPartitionerSpec(dict(epm._edge_programs),
                                                      {"forward": partitioner}))
        with H.manager_context(impl):
            return epm.to_backend(partitioner)


def _raised(impl, epm, make_partitioner, path, arm) -> BaseException:
    arm()
    try:
        _lower(impl, epm, make_partitioner(), path)
    except BaseException as e:  # noqa: BLE001 - KeyboardInterrupt included
        return e
    finally:
        FaultyBackend.arm(None)
    raise AssertionError(f"{H.impl_name(impl)} did not raise")


def _check_fault(program, make_partitioner, path, arm, tmp_path, monkeypatch) -> BaseException:
    ref_error = _raised(H.REFERENCE, program.fresh(), make_partitioner, path, arm)
    epm = program.fresh()
    before = H.input_state(epm.exported_program("forward"))
    data_before = {k: v.clone() for k, v in epm.exported_program("forward").state_dict.items()}
    children = _child_pids()
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    got_error = _raised(fastlower.to_backend, epm, make_partitioner, path, arm)
    ep = epm.exported_program("forward")
    assert H.input_state(ep) == before, "fastlower changed the caller's program"
    for key, value in data_before.items():
        assert ep.state_dict[key].equal(value), f"state_dict[{key!r}] changed"
    assert isinstance(got_error, type(ref_error)), (type(ref_error), type(got_error))
    assert str(ref_error) == str(got_error) and got_error.args == ref_error.args
    assert _child_pids() == children, "a child process was left behind"
    assert sorted(os.listdir(tmp_path)) == [], "a file was left behind"
    return got_error


@pytest.mark.parametrize("path", ["direct", "spec", "manager"])
def test_partitioner_that_raises(program, path, tmp_path, monkeypatch):
    err = _check_fault(program, RaisingPartitioner, path, lambda: None, tmp_path, monkeypatch)
    assert type(err) is ValueError and "injected failure" in str(err)


@pytest.mark.parametrize("path", ["direct", "spec", "manager"])
@pytest.mark.parametrize("k", [0, 1, N_PARTITIONS - 1])
def test_backend_raises_in_partition_k(program, k, path, tmp_path, monkeypatch):
    err = _check_fault(program, OneNodePerPartition, path, lambda: FaultyBackend.arm(k),
                       tmp_path, monkeypatch)
    assert isinstance(err, ValueError) and f"partition {k}" in str(err)


@pytest.mark.parametrize("path", ["direct", "spec"])
def test_keyboard_interrupt_in_preprocess(program, path, tmp_path, monkeypatch):
    err = _check_fault(program, OneNodePerPartition, path,
                       lambda: FaultyBackend.arm(1, KeyboardInterrupt), tmp_path, monkeypatch)
    assert isinstance(err, KeyboardInterrupt)


def test_backend_partitions_all_lowered_without_fault(program):
    """The fault fixture really has N_PARTITIONS partitions that reach preprocess."""
    FaultyBackend.arm(None)
    result = _lower(fastlower.to_backend, program.fresh(), OneNodePerPartition(), "direct")
    assert FaultyBackend.calls == N_PARTITIONS
    from executorch.exir.lowered_backend_module import get_lowered_submodules

    assert len(get_lowered_submodules(result.graph_module)) == N_PARTITIONS
    _ = copy.deepcopy(result)
