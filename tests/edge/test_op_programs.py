"""fastlower's whole lowering (default mode: every shortcut on) against ExecuTorch's on
small programs of a few operators each (``op_programs``), both export paths: the same
Edge programs line for line (``fastlower.cache.compare``), the same program after
``to_executorch`` and the same ``.pte``. The default run takes every program through
``to_edge_transform_and_lower`` (``chunks`` once differed: a ``getitem`` of a decomposed
``split``); the other two paths run with ``-m slow``."""

from __future__ import annotations

import re

import pytest

import fastlower
from fastlower import patch
from fastlower.cache import compare
from tests.edge.op_programs import CONTROL_FLOW, HUGGING_FACE, PROGRAMS, methods, program

# to_edge_transform_and_lower with XnnpackPartitioner; to_edge then to_backend with
# XNNPACK's two partitioners; export_llm's compile config (no verifier, no dim order)
PATHS = ("transform", "to_backend", "unverified")


def _partitioners(two: bool) -> list:
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import (
        XnnpackDynamicallyQuantizedPartitioner, XnnpackPartitioner,
    )

    return ([XnnpackDynamicallyQuantizedPartitioner(), XnnpackPartitioner()] if two
            else [XnnpackPartitioner()])


def _lower(name: str, path: str) -> tuple:
    import executorch.exir as exir  # looked up here: inside patch.installed() it is fastlower's

    exported = program(name)
    if path == "to_backend":
        manager = exir.to_edge(exported)
        for partitioner in _partitioners(two=True):
            manager = manager.to_backend(partitioner)
    else:
        config = (exir.EdgeCompileConfig(_check_ir_validity=False, _skip_dim_order=True)
                  if path == "unverified" else None)
        manager = exir.to_edge_transform_and_lower(
            exported, partitioner=_partitioners(two=False), compile_config=config)
    report = fastlower.last_report()  # fastlower's (the caller reads it for its own run)
    classes = (report.preprocess_classes or {}) if report else {}
    edge = compare.describe(manager._edge_programs)
    executorch_program = manager.to_executorch()
    return edge, compare.describe({"forward": executorch_program.exported_program()}), \
        executorch_program.buffer, classes


def _same(name: str, path: str) -> dict:
    """The two lowerings compared; fastlower's structural classes (its report's)."""
    reference = _lower(name, path)
    with patch.installed():
        fast = _lower(name, path)
    assert compare.first_difference(reference[0], fast[0]) is None
    assert compare.first_difference(reference[1], fast[1]) is None
    assert reference[2] == fast[2]
    return fast[3]


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_op_programs_transform_and_lower(name):
    classes = _same(name, "transform")
    if "blocks" in name:  # the case holds: partitions derived, the adversarial one not
        assert classes.get("derived", 0) > 0


@pytest.mark.slow
@pytest.mark.parametrize("path", PATHS[1:])
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_op_programs_other_paths(name, path):
    _same(name, path)


@pytest.mark.slow
@pytest.mark.parametrize("path", PATHS[:2])
@pytest.mark.parametrize("family", HUGGING_FACE)
def test_hugging_face_families(family, path):
    _same(family, path)


def _without_code_keys(lines: list) -> list:
    """``<eval_with_key>.N`` in stack traces is torch's process-wide count of generated
    modules: two lowerings in one process differ there, ExecuTorch's own included (in two
    processes fastlower's and ExecuTorch's are the same)."""
    return [tuple(re.sub(r"<eval_with_key>\.\d+", "<eval_with_key>", part) for part in line)
            for line in lines]


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CONTROL_FLOW))
def test_control_flow(name):
    reference = _lower(name, "to_backend")
    with patch.installed():
        fast = _lower(name, "to_backend")
    for a, b in zip(reference[:2], fast[:2]):
        assert compare.first_difference(_without_code_keys(a), _without_code_keys(b)) is None
    assert reference[2] == fast[2]


def _lower_methods(path: str) -> tuple:
    import executorch.exir as exir

    programs = methods()
    if path == "to_backend":
        manager = exir.to_edge(programs, constant_methods={"size": 3})
        manager = manager.to_backend(_partitioners(two=False)[0])
    else:
        manager = exir.to_edge_transform_and_lower(
            programs, partitioner={name: _partitioners(two=False) for name in programs},
            constant_methods={"size": 3})
    edge = compare.describe(manager._edge_programs, manager._config_methods)
    return edge, manager.to_executorch().buffer


@pytest.mark.slow
@pytest.mark.parametrize("path", PATHS[:2])
def test_two_methods_and_a_constant_method(path):
    reference = _lower_methods(path)
    with patch.installed():
        fast = _lower_methods(path)
    assert compare.first_difference(reference[0], fast[0]) is None
    assert reference[1] == fast[1]
